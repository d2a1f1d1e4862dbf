//! Compilation (01 §3–§6, §9.3): resolves references, checks the graph rules, templates, expressions and
//! sandbox declarations, and builds the [`Workflow`] model.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::ast::{Ast, CursorDecl, Decl, WorkflowDecl};
use crate::diag::Diagnostic;
use crate::expr::parse_expr;
use crate::model::{
    Attachment, Budget, Cursor, CursorLevels, Edge, McpServer, McpTransport, Node, NodeKind, Preset, Prompt,
    SandboxDecl, SandboxKind, SandboxScope, Schema, Span, Spanned, Var, VarType, Workflow, Worktree,
};
use crate::values;

mod graph_rules;
mod project;
mod refs;

pub use project::{ProjectMcpServer, check_project, project_mcp_refs, read_mcp_json};

/// Compiles a parsed file. Returns the compiled workflow (only the first `workflow` of a file is compiled,
/// `C007`; none gives `C006`) and every compile diagnostic, sorted by position.
///
/// The tree is consumed: its declarations move into the model instead of being copied (call
/// [`crate::parse`] again, or clone the tree first, to keep it).
///
/// The model is returned even when diagnostics contain errors (best effort, for tooling); a caller that runs
/// the workflow must first check `diag::has_errors`.
pub fn compile(ast: Ast, file: &str) -> (Vec<Workflow>, Vec<Diagnostic>) {
    let mut c = Compiler {
        file,
        diags: Vec::new(),
    };
    let wf = c.run(ast);
    let mut diags = c.diags;
    if let Some(w) = &wf {
        diags.extend(crate::host_commands::check(w, file));
    }
    crate::diag::sort(&mut diags);
    (wf.into_iter().collect(), diags)
}

/// A small non-cryptographic hasher for name lookups (inputs are the user's own names; collisions only cost
/// time, and the maps are rebuilt per compile).
#[derive(Default)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let v = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }
    fn write_u8(&mut self, b: u8) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Everything [`check`] found: the compiled workflows and every diagnostic. The syntax tree is consumed by
/// [`compile`]; [`crate::parse`] returns it.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The compiled workflows (at most one; see [`compile`]). Empty when the file has no workflow.
    pub workflows: Vec<Workflow>,
    /// Lexical, syntactic and compile diagnostics, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    /// Whether any diagnostic is an error (the workflow must not run).
    pub fn has_errors(&self) -> bool {
        crate::diag::has_errors(&self.diagnostics)
    }
}

/// Lexes, parses and compiles source text. Compilation is skipped when lexing or parsing found an
/// error (the tree would be incomplete); the diagnostics then hold only `E…` codes.
pub fn check(src: &str, file: &str) -> Checked {
    check_bytes(src.as_bytes(), file)
}

/// As [`check`], on raw file bytes (size and UTF-8 checked first, `E007`).
pub fn check_bytes(bytes: &[u8], file: &str) -> Checked {
    let (ast, mut diagnostics) = crate::parser::parse_bytes(bytes, file);
    let mut workflows = Vec::new();
    if !crate::diag::has_errors(&diagnostics) {
        let (w, d) = compile(ast, file);
        workflows = w;
        diagnostics.extend(d);
        crate::diag::sort(&mut diagnostics);
    }
    Checked {
        workflows,
        diagnostics,
    }
}

struct Compiler<'a> {
    file: &'a str,
    diags: Vec<Diagnostic>,
}

/// The top-level declarations of a file, deduplicated (the first declaration of a name is kept), moved out
/// of the tree.
#[derive(Default)]
struct Decls {
    vars: Vec<Var>,
    presets: Vec<Preset>,
    attachments: Vec<Attachment>,
    mcp: Vec<McpServer>,
    prompts: Vec<Prompt>,
    schemas: Vec<Schema>,
    cursors: Vec<CursorDecl>,
    nodes: Vec<Node>,
}

/// Which declarations of a file survive the duplicate checks: one flag per top-level declaration and one
/// per preset (presets are deduplicated across `presets:` blocks).
struct Keep {
    decls: Vec<bool>,
    presets: Vec<bool>,
    /// one flag per entry of `Ast::nodes`
    nodes: Vec<bool>,
}

const EFFORTS: &[&str] = &["low", "medium", "high", "xhigh", "max"];
const LANGUAGES: &[&str] = &["sh", "bash", "js", "node", "py", "python", "python3"];

/// The `localEnv` allowlist of 01 §7.4 (every `LC_*` name is allowed too); kept here for compatibility.
pub use crate::devcontainer::LOCAL_ENV_ALLOWLIST;

/// Whether a capability belongs to the board domain (`board`, `board.…`), which lives on the host.
fn is_board_capability(c: &str) -> bool {
    c.strip_prefix("board")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// The capabilities the runtime knows (01 §4, `capabilities`); others draw `C080`.
const KNOWN_CAPABILITIES: &[&str] = &[
    "board.read",
    "board.create",
    "board.move",
    "board.assign",
    "board.label",
    "board.close",
    "board.comment",
    "watch.subscribe",
    "watch.unsubscribe",
];

/// Lowercase `domain` or `domain.action`: each part a lowercase letter then letters, digits or `_`.
fn is_capability_shape(c: &str) -> bool {
    let part = |p: &str| {
        let mut b = p.bytes();
        b.next().is_some_and(|f| f.is_ascii_lowercase())
            && b.all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || x == b'_')
    };
    match c.split_once('.') {
        None => part(c),
        Some((d, a)) => part(d) && part(a),
    }
}

/// Whether an MCP server runs the Playwright MCP package (`C060`).
fn is_playwright_mcp(m: &McpServer) -> bool {
    let Some(cmd) = m.command.as_deref() else {
        return false;
    };
    cmd.contains("playwright-mcp")
        || cmd.contains("playwright_mcp")
        || (cmd == "npx" && m.args.iter().any(|a| a.contains("@playwright/mcp")))
}

fn is_literal(s: &str) -> bool {
    !s.contains("${")
}

/// The position of byte `offset` (and `len` bytes) inside a string value.
///
/// Quoted and backtick strings taken verbatim map exactly (continuation lines of a backtick string start
/// at column 1). Block scalars and prompt bodies carry the span of their first character and every line was
/// stripped by the same width, so a line `n` below the first starts at the same column. Strict-mode strings
/// whose escapes were decoded map to the right line, approximately.
pub(crate) fn inner_span(v: &Spanned<String>, offset: usize, len: usize) -> Span {
    inner_span_of(&v.value, v.span, offset, len)
}

/// [`inner_span`] over a borrowed text and its span.
fn inner_span_of(text: &str, s: Span, offset: usize, len: usize) -> Span {
    let Some(prefix) = text.get(..offset) else {
        return s;
    };
    let nl = prefix.bytes().filter(|&b| b == b'\n').count() as u32;
    let last = prefix.rsplit('\n').next().unwrap_or("");
    let chars = last.chars().count() as u32;
    // a verbatim quoted or backtick string spans exactly its text plus the two delimiters
    let verbatim_quoted = s.end.saturating_sub(s.start) == text.len() + 2
        && if s.line == s.end_line {
            s.end_col == s.col + text.chars().count() as u32 + 2
        } else {
            s.end_col == text.rsplit('\n').next().unwrap_or("").chars().count() as u32 + 2
        };
    let (line, col) = match (verbatim_quoted, nl) {
        (true, 0) => (s.line, s.col + 1 + chars),
        (true, _) => (s.line + nl, 1 + chars),
        (false, _) => (s.line + nl, s.col + chars),
    };
    let n = text
        .get(offset..offset + len)
        .map_or(1, |p| p.chars().take_while(|&c| c != '\n').count()) as u32;
    Span {
        start: s.start + offset,
        end: s.start + offset + len,
        line,
        col,
        end_line: line,
        end_col: col + n.max(1),
    }
}

impl<'a> Compiler<'a> {
    fn push(&mut self, code: &'static str, warn: bool, span: Span, msg: String) -> usize {
        let d = if warn {
            Diagnostic::warning(code, self.file, span.line, span.col, msg)
        } else {
            Diagnostic::error(code, self.file, span.line, span.col, msg)
        };
        self.diags
            .push(d.with_end(span.end_line, span.end_col.max(span.col)));
        self.diags.len() - 1
    }

    fn err(&mut self, code: &'static str, span: Span, msg: impl Into<String>) -> usize {
        self.push(code, false, span, msg.into())
    }

    fn warn(&mut self, code: &'static str, span: Span, msg: impl Into<String>) -> usize {
        self.push(code, true, span, msg.into())
    }

    fn hint(&mut self, i: usize, h: &str) {
        self.diags[i].hint = Some(h.to_string());
    }

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
            FxMap::with_capacity_and_hasher(ast.nodes.len(), BuildHasherDefault::default());
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

    fn run(&mut self, ast: Ast) -> Option<Workflow> {
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

    // ----------------------------------------------------------------------------------------------------

    fn workflow(&mut self, d: Decls, wd: WorkflowDecl) -> Workflow {
        let Decls {
            vars: top_vars,
            presets: top_presets,
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
        // vars: top-level, replaced by workflow-level of the same name
        let mut vars = top_vars;
        if let Some(wv) = wf_vars {
            for v in wv.vars {
                if let Some(slot) = vars.iter_mut().find(|x| x.name.value == v.name.value) {
                    *slot = v;
                } else {
                    vars.push(v);
                }
            }
        }
        // attachments
        let mut attachments: Vec<Attachment> = Vec::new();
        let all_att = top_attachments
            .into_iter()
            .chain(wf_attachments.into_iter().flat_map(|a| a.attachments));
        for a in all_att {
            if attachments.iter().any(|x| x.name.value == a.name.value) {
                self.err(
                    "C050",
                    a.name.span,
                    format!("duplicate attachment '{}'", a.name.value),
                );
                continue;
            }
            if vars.iter().any(|v| v.name.value == a.name.value) {
                self.err(
                    "C051",
                    a.name.span,
                    format!("attachment '{}' has the same name as a var", a.name.value),
                );
            }
            for m in &a.accept_mime {
                if !valid_mime(m) {
                    self.err("C052", a.name.span, format!("invalid accept_mime '{m}'"));
                }
            }
            attachments.push(a);
        }
        // presets
        for p in &top_presets {
            for (var, val) in &p.values {
                match vars.iter().find(|v| v.name.value == var.value) {
                    None => {
                        self.err(
                            "C070",
                            var.span,
                            format!("preset '{}' sets undeclared var '{}'", p.name.value, var.value),
                        );
                    }
                    Some(v) if !preset_fits(v.ty, val) => {
                        self.err(
                            "C071",
                            var.span,
                            format!(
                                "preset '{}': value of '{}' does not match type '{}'",
                                p.name.value,
                                var.value,
                                v.ty.as_str()
                            ),
                        );
                    }
                    Some(_) => {}
                }
            }
        }
        // mcp servers
        for m in &mcp {
            self.mcp_server(m);
        }
        // cursors
        let cursors: Vec<Cursor> = cursors.into_iter().map(|c| self.cursor(c)).collect();

        // workflow properties written with spans the model does not keep (an unknown backend name is not
        // a language error: the run refuses it)
        let mut wt = Worktree::None;
        if let Some(w) = &worktree {
            match w.value.as_str() {
                "auto" => wt = Worktree::Auto,
                "none" => {}
                other => {
                    self.warn(
                        "C090",
                        w.span,
                        format!("unknown worktree value '{other}'; running in place"),
                    );
                }
            }
        }
        let compaction = compaction.map(|c| {
            self.compaction(&c.value, c.span);
            c.value
        });
        let budget = budget.map(|b| {
            let mut value = b.value;
            self.budget(&mut value, b.span);
            value
        });
        let name_span = name.span;

        let mut w = Workflow {
            file: self.file.to_string(),
            name,
            entry,
            vars,
            presets: top_presets,
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
        };

        let ix = Ix::new(&w);

        // entry
        match &w.entry {
            None => {
                self.err("C008", name_span, "workflow entry is missing or not a node: ''");
            }
            // `entry: done` is not C008 (the other nodes are then unreachable, C016)
            Some(e) if ix.node(&e.value).is_none() && e.value != "done" && e.value != "fail" => {
                self.err(
                    "C008",
                    e.span,
                    format!("workflow entry is missing or not a node: '{}'", e.value),
                );
            }
            Some(_) => {}
        }

        let full = graph_rules::Full::new(&ix);
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
        if let Some(s) = w.sandbox.as_mut() {
            self.sandbox(s, ("workflow", &w.name.value));
        }
        for n in w.nodes.iter_mut() {
            if let Some(s) = n.sandbox.as_mut() {
                self.sandbox(s, ("node", &n.name.value));
            }
        }
        w
    }

    /// `C082`: a board capability cannot reach the board from inside the sandbox. Applies to the capabilities
    /// of every node when the workflow block declares an active sandbox (mode auto or inline, 01 §6.4).
    fn board_capabilities(&mut self, w: &Workflow) {
        let active = |d: &SandboxDecl| matches!(d.derive_kind(), SandboxKind::Auto | SandboxKind::Inline);
        if !w.sandbox.as_ref().is_some_and(active) {
            return;
        }
        let nodes = w.nodes.iter().filter_map(|n| n.capabilities.as_ref());
        for c in nodes.flatten() {
            if is_board_capability(&c.value) {
                self.warn(
                    "C082",
                    c.span,
                    format!(
                        "capability '{}' is not reachable from inside the sandbox",
                        c.value
                    ),
                );
            }
        }
    }

    /// `C081` (error) for a capability that is not lowercase `domain` or `domain.action` (letters, digits and
    /// underscores, each part starting with a letter); `C080` (warning) for a well-formed name outside the
    /// built-in registry (the registry is open: the name is passed through to the executor).
    fn capability_names(&mut self, w: &Workflow) {
        let nodes = w.nodes.iter().filter_map(|n| n.capabilities.as_ref());
        for c in w.capabilities.iter().chain(nodes).flatten() {
            if c.value.is_empty() {
                continue;
            }
            if !is_capability_shape(&c.value) {
                let i = self.err("C081", c.span, format!("malformed capability '{}'", c.value));
                self.hint(
                    i,
                    "a capability is lowercase 'domain' or 'domain.action' (letters, digits, '_'), e.g. board.read",
                );
            } else if !KNOWN_CAPABILITIES.contains(&c.value.as_str()) {
                let i = self.warn("C080", c.span, format!("unknown capability '{}'", c.value));
                self.hint(
                    i,
                    &format!("known capabilities: {}", KNOWN_CAPABILITIES.join(", ")),
                );
            }
        }
    }

    /// `C060`: a Playwright MCP server (a command naming `playwright-mcp` / `playwright_mcp`, or exactly `npx`
    /// with an `@playwright/mcp` argument) under an active workflow sandbox (auto or inline) whose image name
    /// contains neither `sandbox-browser` nor `sandbox-full-browser` (no image at all counts as no browser):
    /// the browser would be missing inside the sandbox and the server would fail at its first call.
    fn browser_image(&mut self, w: &Workflow) {
        let Some(d) = w
            .sandbox
            .as_ref()
            .filter(|d| matches!(d.derive_kind(), SandboxKind::Auto | SandboxKind::Inline))
        else {
            return;
        };
        let image = d.image.as_ref().map_or("", |i| i.value.as_str());
        let lower = image.to_ascii_lowercase();
        if lower.contains("sandbox-browser") || lower.contains("sandbox-full-browser") {
            return;
        }
        for m in w.mcp_servers.iter().filter(|m| is_playwright_mcp(m)) {
            let i = self.err(
                "C060",
                m.name.span,
                format!("mcp_server '{}' needs a browser sandbox image", m.name.value),
            );
            let what = if image.is_empty() {
                "the sandbox has no browser image".to_string()
            } else {
                format!("the sandbox image '{image}' has no browser")
            };
            self.hint(
                i,
                &format!("{what}; use an image whose name contains sandbox-browser or sandbox-full-browser"),
            );
        }
    }

    fn mcp_server(&mut self, m: &McpServer) {
        let name = &m.name.value;
        let problem = match m.transport {
            None => Some("transport is required (stdio, http or sse)".to_string()),
            Some(McpTransport::Stdio) if m.command.is_none() => {
                Some("stdio transport needs a command".into())
            }
            Some(McpTransport::Stdio) if m.url.is_some() => {
                Some("stdio transport does not take a url".into())
            }
            Some(McpTransport::Http | McpTransport::Sse) if m.url.is_none() => {
                Some("http and sse transports need a url".into())
            }
            Some(McpTransport::Http | McpTransport::Sse) if m.command.is_some() || !m.args.is_empty() => {
                Some("http and sse transports do not take command or args".into())
            }
            _ => None,
        };
        if let Some(p) = problem {
            self.err("C025", m.name.span, format!("mcp_server '{name}': {p}"));
        }
        self.mcp_auth(m);
    }

    /// `C038`, when an `auth` block is present: `type` is required and must be `oauth2`; then `auth_url` and
    /// `token_url` are required absolute http(s) URLs with a host, `revoke_url` one when set, and `client_id`
    /// is required.
    fn mcp_auth(&mut self, m: &McpServer) {
        if m.auth.is_empty() && m.auth_scopes.is_empty() {
            return;
        }
        let name = &m.name.value;
        let get = |k: &str| m.auth.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
        match get("type") {
            None | Some("") => {
                self.err(
                    "C038",
                    m.name.span,
                    format!("mcp_server '{name}': auth block missing 'type'"),
                );
                return;
            }
            Some("oauth2") => {}
            Some(t) => {
                self.err(
                    "C038",
                    m.name.span,
                    format!("mcp_server '{name}': unsupported auth type '{t}' (only \"oauth2\")"),
                );
                return;
            }
        }
        let is_url = |u: &str| {
            ["http://", "https://"].iter().any(|p| {
                u.get(..p.len()).is_some_and(|x| x.eq_ignore_ascii_case(p))
                    && u[p.len()..]
                        .split(['/', '?', '#'])
                        .next()
                        .is_some_and(|h| !h.is_empty())
            })
        };
        for (key, required) in [("auth_url", true), ("token_url", true), ("revoke_url", false)] {
            match get(key).filter(|v| !v.is_empty()) {
                None if required => {
                    self.err(
                        "C038",
                        m.name.span,
                        format!("mcp_server '{name}': oauth2 auth needs {key}"),
                    );
                }
                Some(u) if !is_url(u) => {
                    self.err(
                        "C038",
                        m.name.span,
                        format!("mcp_server '{name}': {key} '{u}' is not an absolute http(s) URL"),
                    );
                }
                _ => {}
            }
        }
        if get("client_id").is_none_or(str::is_empty) {
            self.err(
                "C038",
                m.name.span,
                format!("mcp_server '{name}': oauth2 auth needs client_id"),
            );
        }
    }

    /// `C085`: the first problem of a cursor declaration; such a cursor is left out (its invocations then
    /// draw `C083`).
    fn cursor(&mut self, c: CursorDecl) -> Cursor {
        let CursorDecl {
            name,
            description,
            values,
            bands,
        } = c;
        let levels = match (values, bands) {
            (Some(v), None) => cursor_values(v),
            (None, Some(b)) => cursor_bands(b),
            _ => Err((
                name.span,
                "exactly one of values or bands is required".to_string(),
            )),
        };
        let levels = match levels {
            Ok(l) => Some(l),
            Err((span, msg)) => {
                self.err("C085", span, format!("cursor '{}': {msg}", name.value));
                None
            }
        };
        Cursor {
            name,
            description,
            levels,
        }
    }

    /// `C043`: 0 means "inherit" for both values; otherwise `threshold` is in (0, 1] and `preserve_recent`
    /// is not negative.
    fn compaction(&mut self, c: &crate::model::Compaction, span: Span) {
        if let Some(t) = c.threshold
            && t != 0.0
            && !(t > 0.0 && t <= 1.0)
        {
            self.err(
                "C043",
                span,
                format!("invalid compaction: threshold {t} must be 0 (inherit) or in (0, 1]"),
            );
        }
        if let Some(p) = c.preserve_recent
            && p < 0
        {
            self.err(
                "C043",
                span,
                "invalid compaction: preserve_recent must not be negative (0 inherits)",
            );
        }
    }

    fn budget(&mut self, b: &mut Budget, span: Span) {
        if let Some(d) = &b.max_duration {
            match parse_duration(&d.value) {
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

    // ----------------------------------------------------------------------------------------------------
    // nodes
    // ----------------------------------------------------------------------------------------------------

    fn schema_ref(&mut self, w: &Ix<'_>, r: &Option<Spanned<String>>) {
        if let Some(r) = r
            && w.schema(&r.value).is_none()
        {
            self.err("C002", r.span, format!("unknown schema '{}'", r.value));
        }
    }

    fn node(&mut self, n: &Node, w: &Ix<'_>) {
        let name = n.name.value.as_str();
        self.schema_ref(w, &n.input);
        self.schema_ref(w, &n.output);
        self.prompt_refs(n, w);
        if let Some(c) = &n.compaction {
            self.compaction(c, n.name.span);
        }
        let llm_router = n.kind == NodeKind::Router && graph_rules::router_mode(n) == "llm";
        // C027 is skipped for any value holding a `$` (an environment reference, expanded at run time)
        if let Some(r) = &n.reasoning_effort
            && (matches!(n.kind, NodeKind::Agent | NodeKind::Judge) || llm_router)
            && !r.value.contains('$')
            && !EFFORTS.contains(&r.value.as_str())
        {
            self.err(
                "C027",
                r.span,
                format!(
                    "invalid reasoning_effort '{}' (want low, medium, high, xhigh, max)",
                    r.value
                ),
            );
        }
        if (matches!(n.kind, NodeKind::Agent | NodeKind::Judge) || llm_router)
            && let Some(b) = n.backend.as_ref().filter(|b| b.value == "codex")
        {
            self.warn(
                "C030",
                b.span,
                "backend codex is discouraged (it cannot run inside the iterion sandbox)",
            );
        }
        match n.kind {
            NodeKind::Agent | NodeKind::Judge => {
                // with an explicit backend the model is that backend's default; with neither, the backend is
                // picked on the host at run time (a warning: the file itself is valid)
                if n.model.is_none() && n.backend.is_none() {
                    let i = self.warn(
                        "C018",
                        n.name.span,
                        format!(
                            "node '{name}' sets neither model nor backend; the host's default backend is used"
                        ),
                    );
                    self.hint(
                        i,
                        "set model: or backend: to make the file independent of the host",
                    );
                }
                if let Some(m) = &n.memory
                    && m.enabled == Some(true)
                {
                    if m.scope.as_deref().is_none_or(str::is_empty) {
                        self.err("C048", n.name.span, "memory is enabled but has no scope");
                    }
                    if let Some(b) = n.backend.as_ref().filter(|b| b.value != "claw") {
                        self.warn(
                            "C047",
                            b.span,
                            format!("memory is only used by the claw backend, not '{}'", b.value),
                        );
                    }
                }
                if let Some(c) = &n.cursors {
                    self.cursor_settings(c, w);
                }
                if let (Some(mt), Some(b)) = (n.max_tokens, w.budget.as_ref().and_then(|b| b.max_tokens))
                    && b > 0
                    && mt > b
                {
                    self.warn(
                        "C037",
                        n.name.span,
                        format!("max_tokens of '{name}' exceeds the workflow budget"),
                    );
                }
                // an explicit `await:` makes the node a convergence point: a session cannot be carried over
                if let Some(s) = &n.session
                    && matches!(s.value.as_str(), "inherit" | "inherit_if_available" | "fork")
                    && let Some(a) = n
                        .await_mode
                        .as_ref()
                        .filter(|a| matches!(a.value.as_str(), "wait_all" | "best_effort"))
                {
                    let i = self.err(
                        "C009",
                        s.span,
                        format!(
                            "node '{name}' has session '{}' but await '{}' (a convergence point)",
                            s.value, a.value
                        ),
                    );
                    self.hint(i, "use session: fresh or session: artifacts_only");
                }
            }
            NodeKind::Router => {
                if !llm_router {
                    let llm_only: [(&str, Option<Span>); 6] = [
                        ("model", n.model.as_ref().map(|x| x.span)),
                        ("backend", n.backend.as_ref().map(|x| x.span)),
                        ("system", n.system.as_ref().map(|x| x.span)),
                        ("user", n.user.as_ref().map(|x| x.span)),
                        ("multi: true", n.multi.filter(|m| *m).map(|_| n.name.span)),
                        ("reasoning_effort", n.reasoning_effort.as_ref().map(|x| x.span)),
                    ];
                    for (prop, span) in llm_only {
                        if let Some(span) = span {
                            self.err("C023", span, format!("'{prop}' is only valid on llm routers"));
                        }
                    }
                } else if n.model.is_none() && n.backend.is_none() {
                    self.warn(
                        "C018",
                        n.name.span,
                        format!("llm router '{name}' sets neither model nor backend; the built-in default is used at run time"),
                    );
                }
            }
            NodeKind::Human => {
                if matches!(refs::interaction(n, w), "llm" | "llm_or_human") {
                    if n.model.is_none() && n.interaction_model.is_none() {
                        self.err(
                            "C018",
                            n.name.span,
                            format!(
                                "human '{name}' with an llm interaction needs interaction_model or model"
                            ),
                        );
                    }
                    if n.output.is_none() {
                        self.err(
                            "C018",
                            n.name.span,
                            format!("human '{name}' with an llm interaction needs an output schema"),
                        );
                    }
                }
            }
            // the reference validator's numbering: C004 for every tool shape problem
            NodeKind::Tool => {
                if n.command.is_some() == n.script.is_some() {
                    self.err(
                        "C004",
                        n.name.span,
                        format!("tool '{name}' must set exactly one of command or script"),
                    );
                }
                if let Some(l) = &n.language {
                    if n.script.is_none() && n.command.is_some() {
                        self.err("C004", l.span, format!("tool '{name}': language requires script"));
                    }
                    if !LANGUAGES.contains(&l.value.as_str()) {
                        self.err(
                            "C004",
                            l.span,
                            format!("tool '{name}': unknown language '{}'", l.value),
                        );
                    }
                }
            }
            NodeKind::Compute => {
                if n.expr.is_empty() {
                    self.err(
                        "C039",
                        n.name.span,
                        format!("compute node '{name}' has no expr entries"),
                    );
                }
                for (_, e) in &n.expr {
                    self.expression(e);
                }
            }
        }
    }

    /// `C083` (warning) for an undeclared (or left out) cursor; `C084` for a value that does not fit it. A
    /// value holding `${…}` is expanded at run time and not checked.
    fn cursor_settings(&mut self, c: &crate::model::CursorSettings, w: &Ix<'_>) {
        for (k, v) in &c.values {
            let Some(levels) = w
                .cursors
                .iter()
                .find(|x| x.name.value == k.value)
                .and_then(|x| x.levels.as_ref())
            else {
                self.warn("C083", k.span, format!("unknown cursor '{}'", k.value));
                continue;
            };
            if v.value.contains("${") && v.value.contains('}') {
                continue;
            }
            let ok = match (v.value.trim().parse::<f64>(), levels) {
                (Ok(x), _) if !(0.0..=1.0).contains(&x) => false,
                (Ok(x), CursorLevels::Bands(bands)) => bands.iter().any(|(lo, hi, _)| *lo <= x && x <= *hi),
                (Ok(_), CursorLevels::Values(_)) => true,
                (Err(_), CursorLevels::Values(levels)) => levels.iter().any(|(n, _)| *n == v.value),
                (Err(_), CursorLevels::Bands(_)) => false,
            };
            if !ok {
                self.err(
                    "C084",
                    v.span,
                    format!("invalid value '{}' for cursor '{}'", v.value, k.value),
                );
            }
        }
    }

    /// `C040` when an expression does not parse; returns whether it parses.
    fn expression(&mut self, e: &Spanned<String>) -> bool {
        match parse_expr(&e.value) {
            Ok(_) => true,
            Err(err) => {
                let span = inner_span(e, err.offset, 1);
                self.err("C040", span, format!("invalid expression: {}", err.detail));
                false
            }
        }
    }

    // edges and graph rules (01 §4.3–§4.5): graph_rules.rs; templates (01 §5.1): refs.rs

    // ----------------------------------------------------------------------------------------------------
    // sandbox (01 §6)
    // ----------------------------------------------------------------------------------------------------

    /// Checks one declaration; `owner` is `(workflow|node, name)`, spelled in messages as `node 'x'`.
    fn sandbox(&mut self, d: &mut SandboxDecl, owner: (&str, &str)) {
        let (what, name) = owner;
        d.kind = d.derive_kind();
        let node = d.scope == SandboxScope::Node;
        let none_warning = |c: &mut Self, d: &SandboxDecl| {
            let i = c.warn(
                "C128",
                d.span,
                format!("sandbox: none disables isolation for {what} '{name}'; prefer sandbox: auto"),
            );
            c.hint(
                i,
                "write sandbox: auto, or set mode: auto with the properties you need",
            );
        };
        if d.short {
            let m = d
                .mode
                .clone()
                .unwrap_or_else(|| Spanned::new(String::new(), d.span));
            match m.value.as_str() {
                "auto" => {}
                "none" => none_warning(self, d),
                "inline" => {
                    self.err(
                        "C044",
                        m.span,
                        "sandbox: inline needs a block with image: or build:",
                    );
                }
                other => {
                    self.err(
                        "C044",
                        m.span,
                        format!("invalid sandbox mode '{other}' (want auto, none or inline)"),
                    );
                }
            }
            return;
        }
        if let Some(m) = &d.mode
            && !matches!(m.value.as_str(), "auto" | "none" | "inline")
        {
            self.err(
                "C044",
                m.span,
                format!("invalid sandbox mode '{}' (want auto, none or inline)", m.value),
            );
        }
        if let Some(h) = &d.host_state
            && !matches!(h.value.as_str(), "auto" | "none")
        {
            self.err(
                "C044",
                h.span,
                format!("invalid host_state '{}' (want auto or none)", h.value),
            );
        }
        let build_span = d.build.as_ref().map(|b| b.span);
        let image_span = d.image.as_ref().map(|i| i.span);
        match d.mode_str() {
            Some("none") => {
                let props = d.properties_set();
                if !props.is_empty() {
                    self.warn(
                        "C092",
                        d.span,
                        format!("ignored because sandbox mode is none: {}", props.join(", ")),
                    );
                }
                none_warning(self, d);
                return;
            }
            Some("auto") => {
                if let Some(s) = image_span.or(build_span) {
                    self.err(
                        "C093",
                        s,
                        "image and build are not allowed with mode auto; use mode inline",
                    );
                }
            }
            Some("inline") => match (image_span, build_span) {
                (Some(_), Some(b)) => {
                    self.err("C044", b, "image and build are mutually exclusive");
                }
                (None, None) => {
                    self.err("C044", d.span, "mode inline requires image or build");
                }
                _ => {}
            },
            Some(_) => {}
            None => match (image_span, build_span) {
                (Some(_), Some(b)) => {
                    self.err("C044", b, "image and build are mutually exclusive");
                }
                (None, None) => {
                    let others = d.user.is_some()
                        || d.workspace_folder.is_some()
                        || d.post_create.is_some()
                        || d.env.is_some()
                        || d.mounts.is_some();
                    if others || (d.network.is_none() && d.host_state.is_none()) {
                        let i = self.err(
                            "C044",
                            d.span,
                            "a sandbox block without mode must declare image: or build:, or only override network/host_state; write mode: auto to customise the automatic sandbox",
                        );
                        self.hint(i, "add mode: auto");
                    } else if node && d.host_state.is_some() {
                        let s = d.host_state.as_ref().map_or(d.span, |h| h.span);
                        self.err(
                            "C094",
                            s,
                            "a node that shares the run's sandbox can only override network",
                        );
                    }
                }
                _ => {}
            },
        }
        self.sandbox_values(d);
        if let Some(n) = &d.network {
            self.network(n, node);
        }
        if d.kind == SandboxKind::Invalid {
            // diagnostics above explain why
        }
    }

    fn sandbox_values(&mut self, d: &SandboxDecl) {
        if let Some(i) = &d.image
            && is_literal(&i.value)
            && let Err(r) = values::validate_image(&i.value)
        {
            self.err("C044", i.span, format!("invalid image '{}': {r}", i.value));
        }
        if let Some(wf) = &d.workspace_folder
            && is_literal(&wf.value)
            && values::validate_workspace_folder(&wf.value).is_err()
        {
            self.err(
                "C100",
                wf.span,
                format!("workspace_folder '{}' must be an absolute path", wf.value),
            );
        }
        if let Some(u) = &d.user
            && is_literal(&u.value)
            && values::validate_user(&u.value).is_err()
        {
            self.err("C101", u.span, format!("invalid sandbox user '{}'", u.value));
        }
        for m in d.mounts.iter().flatten() {
            if let Err(r) = values::parse_mount_with(&m.value, values::VarPolicy::Unexpanded) {
                self.err("C102", m.span, format!("invalid mount '{}': {r}", m.value));
            }
        }
        if let Some(env) = &d.env {
            for e in &env.entries {
                if let Err(r) = values::validate_env_entry(&e.key.value, &e.value.value) {
                    self.err(
                        "C103",
                        e.key.span,
                        format!("invalid sandbox env entry '{}': {r}", e.key.value),
                    );
                }
            }
        }
        if let Some(b) = &d.build {
            for (field, v) in [("dockerfile", &b.dockerfile), ("context", &b.context)] {
                if let Some(v) = v
                    && is_literal(&v.value)
                    && let Err(r) = values::validate_build_path(&v.value)
                {
                    self.err(
                        "C104",
                        v.span,
                        format!("invalid build {field} '{}': {r}", v.value),
                    );
                }
            }
            for e in b.args.iter().flat_map(|a| a.entries.iter()) {
                if let Err(r) = values::validate_build_arg_name(&e.key.value) {
                    self.err(
                        "C104",
                        e.key.span,
                        format!("invalid build args '{}': {r}", e.key.value),
                    );
                }
            }
        }
        // devcontainer-style variables (01 §6.7)
        let mut strings: Vec<&Spanned<String>> = Vec::new();
        strings.extend(d.image.iter());
        strings.extend(d.user.iter());
        strings.extend(d.workspace_folder.iter());
        strings.extend(d.post_create.iter());
        strings.extend(d.mounts.iter().flatten());
        strings.extend(d.env.iter().flat_map(|e| e.entries.iter().map(|x| &x.value)));
        if let Some(b) = &d.build {
            strings.extend(b.dockerfile.iter());
            strings.extend(b.context.iter());
            strings.extend(b.target.iter());
            strings.extend(b.args.iter().flat_map(|e| e.entries.iter().map(|x| &x.value)));
        }
        for s in strings {
            for (off, len, msg) in sandbox_variable_warnings(&s.value) {
                let span = inner_span(s, off, len);
                self.warn("C105", span, msg);
            }
        }
    }

    fn network(&mut self, n: &crate::model::NetworkDecl, node: bool) {
        if let Some(m) = &n.mode
            && !matches!(m.value.as_str(), "allowlist" | "denylist" | "open")
        {
            self.err(
                "C095",
                m.span,
                format!(
                    "invalid network mode '{}' (want allowlist, denylist or open)",
                    m.value
                ),
            );
        }
        if let Some(p) = &n.preset
            && iterion_netpolicy::preset(&p.value).is_none()
        {
            self.err(
                "C096",
                p.span,
                format!(
                    "unknown network preset '{}' (want iterion-default or none)",
                    p.value
                ),
            );
        }
        for r in n.rules.iter().flatten() {
            if let Err(e) = iterion_netpolicy::Rule::parse(&r.value) {
                self.err("C097", r.span, format!("invalid network rule '{}': {e}", r.value));
            }
        }
        if let Some(inh) = &n.inherit {
            if !node {
                self.warn(
                    "C098",
                    inh.span,
                    "network.inherit has no effect at workflow level",
                );
            } else if !matches!(inh.value.as_str(), "merge" | "append" | "replace") {
                self.err(
                    "C098",
                    inh.span,
                    format!(
                        "network.inherit '{}' is invalid (want merge, append or replace)",
                        inh.value
                    ),
                );
            } else if inh.value == "append" && n.names_base() {
                self.err("C098", inh.span, "inherit: append cannot set mode or preset");
            }
        }
        if n.mode.as_ref().is_some_and(|m| m.value == "open")
            && n.rules.as_ref().is_some_and(|r| !r.is_empty())
        {
            let span = n.mode.as_ref().map_or(n.span, |m| m.span);
            self.warn("C099", span, "network rules have no effect when mode is open");
        }
    }
}

/// `(offset, len, message)` for every devcontainer-style variable that is unsupported or names a `localEnv`
/// variable outside the allowlist (01 §6.7, §7.4).
pub fn sandbox_variable_warnings(s: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = s[i..].find("${") {
        let st = i + off;
        let Some(close) = s[st + 2..].find('}') else {
            break;
        };
        let inner = &s[st + 2..st + 2 + close];
        let len = close + 3;
        let env_name = inner
            .strip_prefix("localEnv:")
            .or_else(|| inner.strip_prefix("env:"))
            .map(|r| r.split(':').next().unwrap_or(""));
        match env_name {
            Some(name) => {
                let valid = !name.is_empty()
                    && name
                        .bytes()
                        .next()
                        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if valid && !crate::devcontainer::is_allowlisted(name) {
                    out.push((
                        st,
                        len,
                        format!("localEnv:{name} is not on the allowlist and expands as unset"),
                    ));
                }
            }
            None => {
                let supported = matches!(
                    inner,
                    "localWorkspaceFolder"
                        | "localWorkspaceFolderBasename"
                        | "containerWorkspaceFolder"
                        | "containerWorkspaceFolderBasename"
                ) || inner.starts_with("containerEnv:");
                if !supported {
                    out.push((
                        st,
                        len,
                        format!("sandbox variable '${{{inner}}}' is not supported and is kept verbatim"),
                    ));
                }
            }
        }
        i = st + len;
    }
    out
}

/// An `accept_mime` entry: some text, a `/`, some text (`image/*`; nothing else is checked).
fn valid_mime(m: &str) -> bool {
    m.split_once('/')
        .is_some_and(|(t, s)| !t.is_empty() && !s.is_empty())
}

/// Whether a JSON value fits a var type (used for presets, `C071`).
pub fn value_fits(ty: VarType, v: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    match ty {
        VarType::String => v.is_string(),
        VarType::Bool => v.is_boolean(),
        VarType::Int => v.is_i64() || v.is_u64(),
        VarType::Float => v.is_number(),
        VarType::Json => true,
        VarType::StringList => match v {
            V::Array(a) => a.iter().all(V::is_string),
            V::String(_) => true,
            _ => false,
        },
    }
}

/// Whether a preset value fits its var's type (`C071`): a `string`, `json` or `string[]` var takes a string
/// literal, a `float` an int or a float.
fn preset_fits(ty: VarType, v: &serde_json::Value) -> bool {
    match ty {
        VarType::String | VarType::Json | VarType::StringList => v.is_string(),
        VarType::Bool => v.is_boolean(),
        VarType::Int => v.is_i64() || v.is_u64(),
        VarType::Float => v.is_number(),
    }
}

type CursorEntries = Vec<(Spanned<String>, Spanned<String>)>;

/// `values:` of a cursor: names and prompts are not empty, names are unique.
fn cursor_values(v: CursorEntries) -> Result<CursorLevels, (Span, String)> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(v.len());
    for (k, d) in v {
        if k.value.is_empty() || d.value.is_empty() {
            return Err((k.span, "a value needs a name and a prompt".into()));
        }
        if out.iter().any(|(n, _)| *n == k.value) {
            return Err((k.span, format!("duplicate value '{}'", k.value)));
        }
        out.push((k.value, d.value));
    }
    Ok(CursorLevels::Values(out))
}

/// `bands:` of a cursor: keys `LO..HI` with 0 ≤ LO ≤ HI ≤ 1, no two bands overlapping (ends included).
fn cursor_bands(b: CursorEntries) -> Result<CursorLevels, (Span, String)> {
    let mut out: Vec<(f64, f64, String)> = Vec::with_capacity(b.len());
    for (k, d) in b {
        let Some((lo, hi)) = parse_band(&k.value) else {
            return Err((k.span, format!("malformed band '{}' (want \"LO..HI\")", k.value)));
        };
        if lo < 0.0 || hi > 1.0 {
            return Err((k.span, format!("band '{}' is outside 0..1", k.value)));
        }
        if lo > hi {
            return Err((k.span, format!("band '{}' has LO above HI", k.value)));
        }
        if let Some((plo, phi, _)) = out.iter().find(|(plo, phi, _)| lo <= *phi && *plo <= hi) {
            return Err((k.span, format!("band '{}' overlaps band '{plo}..{phi}'", k.value)));
        }
        out.push((lo, hi, d.value));
    }
    Ok(CursorLevels::Bands(out))
}

/// `LO..HI` with decimal numbers.
fn parse_band(k: &str) -> Option<(f64, f64)> {
    let (lo, hi) = k.split_once("..")?;
    let num = |x: &str| {
        let x = x.trim();
        let digits = x.strip_prefix('-').unwrap_or(x);
        (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
            .then(|| x.parse::<f64>().ok())
            .flatten()
    };
    Some((num(lo)?, num(hi)?))
}

/// Parses a Go-style duration (`90s`, `1h30m`, `1.5h`): one or more `<number><unit>` with units `ns`, `us`,
/// `µs`, `ms`, `s`, `m`, `h`. Returns nanoseconds.
pub fn parse_duration(s: &str) -> Option<u128> {
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let n = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        if n == 0 {
            return None;
        }
        let num: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let units: [(&str, f64); 7] = [
            ("ns", 1.0),
            ("us", 1e3),
            ("µs", 1e3),
            ("ms", 1e6),
            ("s", 1e9),
            ("m", 60e9),
            ("h", 3600e9),
        ];
        // longest unit first so that "ms" is not read as "m"
        let (u, mult) = units
            .iter()
            .filter(|(u, _)| rest.starts_with(u))
            .max_by_key(|(u, _)| u.len())?;
        rest = &rest[u.len()..];
        total += num * mult;
    }
    (total.is_finite() && total < 1e30).then_some(total as u128)
}

// ---------------------------------------------------------------------------------------------------------
// graph helpers
// ---------------------------------------------------------------------------------------------------------

/// No node: the end of an edge that is a terminal or an unknown name.
const NO_NODE: u32 = u32::MAX;

/// Adjacency lists in compressed form: the items of list `i` are `items[start[i]..start[i + 1]]`, in the
/// order they were added (edge order). One allocation per table instead of one per node.
struct Csr<T> {
    start: Vec<u32>,
    items: Vec<T>,
}

impl<T: Copy + Default> Csr<T> {
    /// Builds the lists from `(list, item)` pairs given twice by `pairs` (a count pass, then a fill pass).
    fn build<I: Iterator<Item = (u32, T)>>(lists: usize, pairs: impl Fn() -> I) -> Csr<T> {
        let mut start = vec![0u32; lists + 1];
        for (l, _) in pairs() {
            start[l as usize + 1] += 1;
        }
        for i in 0..lists {
            start[i + 1] += start[i];
        }
        let mut fill: Vec<u32> = start[..lists].to_vec();
        let mut items = vec![T::default(); start[lists] as usize];
        for (l, t) in pairs() {
            let f = &mut fill[l as usize];
            items[*f as usize] = t;
            *f += 1;
        }
        Csr { start, items }
    }

    fn of(&self, i: usize) -> &[T] {
        &self.items[self.start[i] as usize..self.start[i + 1] as usize]
    }
}

/// Name lookups over a workflow, built once (the model's own lookups are linear scans), and the node
/// indices of every edge's ends. Derefs to the workflow; its inherent methods shadow the model's linear ones.
struct Ix<'w> {
    w: &'w Workflow,
    node_ix: FxMap<&'w str, u32>,
    schema_ix: FxMap<&'w str, &'w Schema>,
    prompt_ix: FxMap<&'w str, u32>,
    var_ix: FxMap<&'w str, &'w Var>,
    /// `(from, to)` node indices per edge ([`NO_NODE`] for a terminal or unknown name)
    ends: Vec<(u32, u32)>,
    /// edge indices by source node, in edge order
    out: Csr<u32>,
}

impl std::ops::Deref for Ix<'_> {
    type Target = Workflow;
    fn deref(&self) -> &Workflow {
        self.w
    }
}

fn name_map<'w, T>(items: &'w [T], name: impl Fn(&'w T) -> &'w str) -> FxMap<&'w str, u32> {
    let mut m = FxMap::with_capacity_and_hasher(items.len(), BuildHasherDefault::default());
    for (i, x) in items.iter().enumerate() {
        m.insert(name(x), i as u32);
    }
    m
}

impl<'w> Ix<'w> {
    fn new(w: &'w Workflow) -> Ix<'w> {
        let node_ix = name_map(&w.nodes, |n| n.name.value.as_str());
        let ix = |s: &str| node_ix.get(s).copied().unwrap_or(NO_NODE);
        let ends: Vec<(u32, u32)> = w
            .edges
            .iter()
            .map(|e| (ix(&e.from.value), ix(&e.to.value)))
            .collect();
        let out = Csr::build(w.nodes.len(), || {
            ends.iter()
                .enumerate()
                .filter(|(_, (a, _))| *a != NO_NODE)
                .map(|(i, (a, _))| (*a, i as u32))
        });
        Ix {
            w,
            schema_ix: w.schemas.iter().map(|s| (s.name.value.as_str(), s)).collect(),
            prompt_ix: name_map(&w.prompts, |p| p.name.value.as_str()),
            var_ix: w.vars.iter().map(|v| (v.name.value.as_str(), v)).collect(),
            node_ix,
            ends,
            out,
        }
    }

    fn node(&self, name: &str) -> Option<&'w Node> {
        self.node_index(name).map(|i| &self.w.nodes[i])
    }

    fn node_index(&self, name: &str) -> Option<usize> {
        self.node_ix.get(name).map(|i| *i as usize)
    }

    fn schema(&self, name: &str) -> Option<&'w Schema> {
        self.schema_ix.get(name).copied()
    }

    fn prompt(&self, name: &str) -> Option<&'w Prompt> {
        self.prompt_index(name).map(|i| &self.w.prompts[i])
    }

    fn prompt_index(&self, name: &str) -> Option<usize> {
        self.prompt_ix.get(name).map(|i| *i as usize)
    }

    fn var(&self, name: &str) -> Option<&'w Var> {
        self.var_ix.get(name).copied()
    }

    /// The out-edges of node `i`, in edge order.
    fn edges_from(&self, i: usize) -> impl Iterator<Item = &'w Edge> + '_ {
        let edges = &self.w.edges;
        self.out.of(i).iter().map(move |&e| &edges[e as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let check = |s: &str, expect: Option<u128>| assert_eq!(parse_duration(s), expect, "{s}");
        check("90s", Some(90_000_000_000));
        check("30m", Some(1_800_000_000_000));
        check("1h30m", Some(5_400_000_000_000));
        check("1.5h", Some(5_400_000_000_000));
        check("250ms", Some(250_000_000));
        check("10µs", Some(10_000));
        check("90 minutes", None);
        check("", None);
        check("5", None);
        check("m", None);
    }

    #[test]
    fn sandbox_variables() {
        let check = |s: &str, expect: &[&str]| {
            let got: Vec<String> = sandbox_variable_warnings(s).into_iter().map(|x| x.2).collect();
            assert_eq!(got, expect, "{s}");
        };
        check("${localEnv:HOME}/x ${localEnv:LC_ALL}", &[]);
        check(
            "${localEnv:AWS_SECRET_ACCESS_KEY}",
            &["localEnv:AWS_SECRET_ACCESS_KEY is not on the allowlist and expands as unset"],
        );
        check(
            "${devcontainerId}",
            &["sandbox variable '${devcontainerId}' is not supported and is kept verbatim"],
        );
        check("${localWorkspaceFolder}/x ${containerEnv:PATH}", &[]);
    }
}
