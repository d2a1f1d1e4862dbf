//! The file pass: duplicate declarations (`C006`, `C007`, `C024`, `C041`, `C072`, `C086`) and the
//! declarations moved out of the tree into the workflow pass.

use super::compiler::Compiler;
use super::hash::FxMap;
use super::workflow::Decls;
use crate::ast::{Ast, Decl, WorkflowDecl};
use crate::model::{Span, Spanned, Workflow};

/// Which declarations of a file survive the duplicate checks: one flag per top-level declaration and one
/// per preset (presets are deduplicated across `presets:` blocks).
struct Keep {
    decls: Vec<bool>,
    presets: Vec<bool>,
    /// one flag per entry of `Ast::nodes`
    nodes: Vec<bool>,
}

impl Compiler<'_> {
    /// Reports a duplicate name among the names `seen` so far in one declaration family (`code`, with
    /// `msg(name, first span)`); returns whether the declaration is the first of its name.
    fn first_of<'t>(
        &mut self,
        seen: &mut FxMap<&'t str, Span>,
        name: &'t Spanned<String>,
        code: &'static str,
        msg: impl Fn(&str, Span) -> String,
    ) -> bool {
        match seen.get(name.value.as_str()) {
            Some(prev) => {
                let m = msg(&name.value, *prev);
                self.err(code, name.span, m);
                false
            }
            None => {
                seen.insert(name.value.as_str(), name.span);
                true
            }
        }
    }

    /// The duplicate checks over the whole file (`C024`, `C041`, `C072`, `C086`; workflows: `C006`,
    /// `C007`). Returns the flags of the declarations to keep and the index of the compiled workflow.
    fn keep(&mut self, ast: &Ast) -> (Keep, Option<usize>) {
        let mut nodes: FxMap<&str, Span> =
            FxMap::with_capacity_and_hasher(ast.nodes.len(), Default::default());
        let [mut presets, mut mcp, mut prompts, mut schemas, mut cursors] =
            std::array::from_fn(|_| FxMap::<&str, Span>::default());
        let mut keep = Keep {
            decls: Vec::with_capacity(ast.decls.len()),
            presets: Vec::new(),
            nodes: vec![false; ast.nodes.len()],
        };
        let mut first_wf: Option<(usize, &WorkflowDecl)> = None;
        for (i, decl) in ast.decls.iter().enumerate() {
            let k = match decl {
                Decl::Vars(_) | Decl::Attachments(_) => true,
                Decl::Presets(p) => {
                    for preset in &p.presets {
                        let k = self.first_of(&mut presets, &preset.name, "C072", |n, _| {
                            format!("duplicate preset '{n}'")
                        });
                        keep.presets.push(k);
                    }
                    true
                }
                Decl::McpServer(m) => self.first_of(&mut mcp, &m.name, "C024", |n, _| {
                    format!("duplicate mcp_server '{n}'")
                }),
                Decl::Prompt(p) => self.first_of(&mut prompts, &p.name, "C041", |n, s| {
                    format!(
                        "duplicate prompt '{n}' (the declaration at {}:{} is used)",
                        s.line, s.col
                    )
                }),
                Decl::Schema(x) => self.first_of(&mut schemas, &x.name, "C041", |n, s| {
                    format!(
                        "duplicate schema '{n}' (the declaration at {}:{} is used)",
                        s.line, s.col
                    )
                }),
                Decl::Cursor(c) => self.first_of(&mut cursors, &c.name, "C086", |n, _| {
                    format!("duplicate cursor '{n}'")
                }),
                Decl::Node(i) => match ast.node(*i) {
                    Some(n) => {
                        let k = self.first_of(&mut nodes, &n.name, "C041", |name, s| {
                            format!(
                                "duplicate node '{name}' (the declaration at {}:{} is used)",
                                s.line, s.col
                            )
                        });
                        keep.nodes[*i] |= k;
                        k
                    }
                    None => false,
                },
                Decl::Workflow(w) => match first_wf {
                    None => {
                        first_wf = Some((i, w));
                        true
                    }
                    Some((_, first)) => {
                        self.err(
                            "C007",
                            w.name.span,
                            format!(
                                "more than one workflow ('{}', '{}'); only the first is used",
                                first.name.value, w.name.value
                            ),
                        );
                        false
                    }
                },
            };
            keep.decls.push(k);
        }
        if first_wf.is_none() {
            self.err(
                "C006",
                Span {
                    line: 1,
                    col: 1,
                    end_line: 1,
                    end_col: 1,
                    ..Span::default()
                },
                "no workflow declared",
            );
        }
        (keep, first_wf.map(|(i, _)| i))
    }

    pub(super) fn run(&mut self, ast: Ast) -> Option<Workflow> {
        let (keep, wf_index) = self.keep(&ast);
        let wf_index = wf_index?;
        // the node table moves as a whole; duplicates are removed in place
        let mut nodes = ast.nodes;
        let mut node_keep = keep.nodes.into_iter();
        nodes.retain(|_| node_keep.next().unwrap_or(false));
        let mut d = Decls {
            nodes,
            ..Decls::default()
        };
        let mut wd = None;
        let mut seen_vars = false;
        let mut seen_att = false;
        let mut presets_keep = keep.presets.into_iter();
        for (i, (decl, k)) in ast.decls.into_iter().zip(keep.decls).enumerate() {
            if !k {
                continue;
            }
            match decl {
                Decl::Vars(v) if !seen_vars => {
                    seen_vars = true;
                    d.vars = v.vars;
                }
                Decl::Vars(_) => {}
                Decl::Presets(p) => {
                    for preset in p.presets {
                        if presets_keep.next().unwrap_or(false) {
                            d.presets.push(preset);
                        }
                    }
                }
                Decl::Attachments(a) if !seen_att => {
                    seen_att = true;
                    d.attachments = a.attachments;
                }
                Decl::Attachments(_) => {}
                Decl::McpServer(m) => d.mcp.push(*m),
                Decl::Prompt(p) => d.prompts.push(p),
                Decl::Schema(s) => d.schemas.push(s),
                Decl::Cursor(c) => d.cursors.push(c),
                Decl::Node(_) => {}
                Decl::Workflow(w) if i == wf_index => wd = Some(*w),
                Decl::Workflow(_) => {}
            }
        }
        wd.map(|wd| self.workflow(d, wd))
    }
}
