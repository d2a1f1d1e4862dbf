//! The workflow pass: builds the [`Workflow`] from the file's declarations and the `workflow` block, then
//! runs every check over it in order (declarations, entry, nodes, graph rules, references, capabilities,
//! sandboxes).

use super::compiler::Compiler;
use super::graph::{Full, Ix};
use super::vars::merge_vars;
use crate::ast::{CursorDecl, WorkflowDecl};
use crate::model::{
    Attachment, Budget, Cursor, McpServer, Node, Preset, Prompt, Schema, Span, Spanned, Var, Workflow,
    Worktree,
};

/// The top-level declarations of a file, deduplicated (the first declaration of a name is kept), moved out
/// of the tree.
#[derive(Default)]
pub(super) struct Decls {
    pub(super) vars: Vec<Var>,
    pub(super) presets: Vec<Preset>,
    pub(super) attachments: Vec<Attachment>,
    pub(super) mcp: Vec<McpServer>,
    pub(super) prompts: Vec<Prompt>,
    pub(super) schemas: Vec<Schema>,
    pub(super) cursors: Vec<CursorDecl>,
    pub(super) nodes: Vec<Node>,
}

impl Compiler<'_> {
    /// The workflow pass: the model, then every check over it. The diagnostics come out in this order
    /// (they are sorted by position afterwards, so the order only breaks ties).
    pub(super) fn workflow(&mut self, d: Decls, wd: WorkflowDecl) -> Workflow {
        let mut w = self.assemble(d, wd);
        let ix = Ix::new(&w);
        self.entry(&ix);
        let full = Full::new(&ix);
        for n in &w.nodes {
            self.node(n, &ix);
        }
        self.graph_rules(&ix, &full);
        self.references(&ix, &full);
        drop(full);
        drop(ix);
        self.board_capabilities(&w);
        self.capability_names(&w);
        self.browser_image(&w);
        self.sandboxes(&mut w);
        w
    }

    /// Builds the model from the declarations, checking those whose spans the model does not keep: vars,
    /// attachments, presets, MCP servers, cursors, `worktree`, `compaction` and `budget`.
    fn assemble(&mut self, d: Decls, wd: WorkflowDecl) -> Workflow {
        let Decls {
            vars: top_vars,
            presets,
            attachments: top_attachments,
            mcp,
            prompts,
            schemas,
            cursors,
            nodes,
        } = d;
        let WorkflowDecl {
            name,
            entry,
            vars: wf_vars,
            attachments: wf_attachments,
            default_backend,
            tool_policy,
            capabilities,
            interaction,
            mcp: wf_mcp,
            compaction,
            budget,
            worktree,
            sandbox,
            edges,
        } = wd;
        let vars = merge_vars(top_vars, wf_vars);
        let attachments = self.attachments(&vars, top_attachments, wf_attachments);
        self.presets(&vars, &presets);
        for m in &mcp {
            self.mcp_server(m);
        }
        let cursors: Vec<Cursor> = cursors.into_iter().map(|c| self.cursor(c)).collect();
        let wt = self.worktree(worktree.as_ref());
        let compaction = compaction.map(|c| {
            self.compaction(&c.value, c.span);
            c.value
        });
        let budget = budget.map(|b| {
            let mut value = b.value;
            self.budget(&mut value, b.span);
            value
        });
        Workflow {
            file: self.file().to_string(),
            name,
            entry,
            vars,
            presets,
            attachments,
            mcp_servers: mcp,
            prompts,
            schemas,
            cursors,
            nodes,
            edges,
            default_backend,
            tool_policy,
            capabilities,
            interaction,
            mcp: wf_mcp,
            compaction,
            budget,
            worktree: wt,
            worktree_span: worktree.as_ref().map(|w| w.span),
            sandbox,
            project_mcp_servers: Vec::new(),
        }
    }

    /// `worktree:` (`C090`, a warning, for an unknown value: the run works in place).
    fn worktree(&mut self, w: Option<&Spanned<String>>) -> Worktree {
        let Some(w) = w else {
            return Worktree::None;
        };
        match w.value.as_str() {
            "auto" => Worktree::Auto,
            "none" => Worktree::None,
            other => {
                self.warn(
                    "C090",
                    w.span,
                    format!("unknown worktree value '{other}'; running in place"),
                );
                Worktree::None
            }
        }
    }

    /// `C008`: the entry is missing or names no node. `entry: done` (or `fail`) is allowed: the other nodes
    /// are then unreachable (`C016`).
    fn entry(&mut self, ix: &Ix<'_>) {
        match &ix.entry {
            None => {
                self.err(
                    "C008",
                    ix.name.span,
                    "workflow entry is missing or not a node: ''",
                );
            }
            Some(e) if ix.node(&e.value).is_none() && e.value != "done" && e.value != "fail" => {
                self.err(
                    "C008",
                    e.span,
                    format!("workflow entry is missing or not a node: '{}'", e.value),
                );
            }
            Some(_) => {}
        }
    }

    /// The workflow's sandbox declaration, then each node's.
    fn sandboxes(&mut self, w: &mut Workflow) {
        if let Some(s) = w.sandbox.as_mut() {
            self.sandbox(s, ("workflow", &w.name.value));
        }
        for n in w.nodes.iter_mut() {
            if let Some(s) = n.sandbox.as_mut() {
                self.sandbox(s, ("node", &n.name.value));
            }
        }
    }

    /// `C091` for an invalid `max_duration` (a valid one is kept in nanoseconds), `C046` for a cost that is
    /// not finite.
    fn budget(&mut self, b: &mut Budget, span: Span) {
        if let Some(d) = &b.max_duration {
            match crate::duration::parse_nanos(&d.value) {
                Some(ns) => b.max_duration_ns = Some(ns),
                None => {
                    self.err("C091", d.span, format!("invalid duration '{}'", d.value));
                }
            }
        }
        if let Some(c) = b.max_cost_usd
            && !c.is_finite()
        {
            self.err("C046", span, "max_cost_usd must be a finite number");
        }
    }
}
