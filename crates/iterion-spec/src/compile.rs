//! Compilation (01 §3–§6, §9.3): resolves references, checks the graph rules, templates, expressions and
//! sandbox declarations, and builds the [`Workflow`] model.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use crate::ast::{Ast, CursorDecl, Decl, WorkflowDecl};
use crate::diag::Diagnostic;
use crate::expr::parse_expr;
use crate::model::{
    Attachment, Budget, Condition, Cursor, CursorLevels, Edge, LoopCap, McpServer, McpTransport, Node,
    NodeKind, Preset, Prompt, SandboxDecl, SandboxKind, SandboxScope, Schema, Span, Spanned, Var, VarType,
    Workflow, Worktree,
};
use crate::template::{PlaceholderRef, Segment, parse_template};
use crate::values;

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

const BACKENDS: &[&str] = &["claw", "claude_code", "codex"];
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
    let cmd = cmd.to_ascii_lowercase();
    if cmd.contains("playwright-mcp") || cmd.contains("playwright_mcp") || cmd.contains("@playwright/mcp") {
        return true;
    }
    let program = cmd.split_whitespace().next().unwrap_or("");
    (program == "npx" || program.ends_with("/npx"))
        && m.args
            .iter()
            .any(|a| a.to_ascii_lowercase().contains("@playwright/mcp"))
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
                    self.err("C053", a.name.span, format!("invalid accept_mime '{m}'"));
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
                    Some(v) if !value_fits(v.ty, val) => {
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

        // workflow properties written with spans the model does not keep
        if let Some(b) = &default_backend
            && is_literal(&b.value)
            && !BACKENDS.contains(&b.value.as_str())
        {
            self.err(
                "C087",
                b.span,
                format!("unknown backend '{}' (want claw, claude_code or codex)", b.value),
            );
        }
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
            sandbox,
        };

        let ix = Ix::new(&w);
        if let Some(m) = &w.mcp {
            self.mcp_refs(m, &ix);
        }

        // entry
        match &w.entry {
            None => {
                self.err("C008", name_span, "workflow entry is missing or not a node: ''");
            }
            Some(e) if e.value == "done" || e.value == "fail" => {
                self.err(
                    "C042",
                    e.span,
                    format!("'{}' is a terminal node and cannot be the entry", e.value),
                );
            }
            Some(e) if ix.node(&e.value).is_none() => {
                self.err(
                    "C008",
                    e.span,
                    format!("workflow entry is missing or not a node: '{}'", e.value),
                );
            }
            Some(_) => {}
        }

        let g = Graph::new(&ix);
        for (i, n) in w.nodes.iter().enumerate() {
            self.node(i, n, &ix, &g);
        }
        self.edges(&ix, &g);
        self.templates(&ix, &g);
        drop(g);
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

    /// `C082`: a board capability cannot reach the board from inside the sandbox. Applies when the workflow
    /// block declares an active sandbox (mode auto or inline, 01 §6.4) to the workflow's `capabilities` and to
    /// those of every node that does not opt out with its own `sandbox: none` (such a node runs on the host).
    fn board_capabilities(&mut self, w: &Workflow) {
        let active = |d: &SandboxDecl| matches!(d.derive_kind(), SandboxKind::Auto | SandboxKind::Inline);
        if !w.sandbox.as_ref().is_some_and(active) {
            return;
        }
        let nodes = w
            .nodes
            .iter()
            .filter(|n| {
                n.sandbox
                    .as_ref()
                    .is_none_or(|d| d.derive_kind() != SandboxKind::Off)
            })
            .filter_map(|n| n.capabilities.as_ref());
        for c in w.capabilities.iter().chain(nodes).flatten() {
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
            if !is_literal(&c.value) {
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

    /// `C060`: a Playwright MCP server (a command naming `playwright-mcp` / `playwright_mcp`, or `npx` with an
    /// `@playwright/mcp` argument) under a workflow sandbox whose inline image literal is not a browser image
    /// (its name contains neither `sandbox-browser` nor `sandbox-full-browser`): the browser would be missing
    /// inside the sandbox and the server would fail at its first call.
    fn browser_image(&mut self, w: &Workflow) {
        let Some(image) = w
            .sandbox
            .as_ref()
            .filter(|d| d.derive_kind() == SandboxKind::Inline)
            .and_then(|d| d.image.as_ref())
            .filter(|i| is_literal(&i.value))
        else {
            return;
        };
        let lower = image.value.to_ascii_lowercase();
        if lower.contains("sandbox-browser") || lower.contains("sandbox-full-browser") {
            return;
        }
        for m in w.mcp_servers.iter().filter(|m| is_playwright_mcp(m)) {
            let i = self.err(
                "C060",
                m.name.span,
                format!("mcp_server '{}' needs a browser sandbox image", m.name.value),
            );
            self.hint(
                i,
                &format!(
                    "the sandbox image '{}' has no browser; use an image whose name contains sandbox-browser or sandbox-full-browser",
                    image.value
                ),
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
        if let Some((_, t)) = m.auth.iter().find(|(k, _)| k == "type")
            && t != "oauth2"
        {
            self.err(
                "C038",
                m.name.span,
                format!("unsupported MCP auth type '{t}' (only \"oauth2\")"),
            );
        }
    }

    fn cursor(&mut self, c: CursorDecl) -> Cursor {
        let CursorDecl {
            name,
            description,
            values,
            bands,
        } = c;
        let levels = match (values, bands) {
            (Some(v), None) => Some(CursorLevels::Values(
                v.into_iter().map(|(k, d)| (k.value, d.value)).collect(),
            )),
            (None, Some(b)) => {
                let mut out = Vec::new();
                let mut ok = true;
                for (k, d) in b {
                    match parse_band(&k.value) {
                        Some((lo, hi)) => out.push((lo, hi, d.value)),
                        None => {
                            ok = false;
                            self.err(
                                "C085",
                                k.span,
                                format!(
                                    "cursor '{}': malformed band '{}' (want \"LO..HI\")",
                                    name.value, k.value
                                ),
                            );
                        }
                    }
                }
                ok.then_some(CursorLevels::Bands(out))
            }
            _ => {
                self.err(
                    "C085",
                    name.span,
                    format!(
                        "cursor '{}': exactly one of values or bands is required",
                        name.value
                    ),
                );
                None
            }
        };
        Cursor {
            name,
            description,
            levels,
        }
    }

    fn compaction(&mut self, c: &crate::model::Compaction, span: Span) {
        if let Some(t) = c.threshold
            && !(t > 0.0 && t <= 1.0)
        {
            self.err(
                "C043",
                span,
                format!("invalid compaction: threshold {t} must be in (0, 1]"),
            );
        }
        if let Some(p) = c.preserve_recent
            && p < 1
        {
            self.err(
                "C043",
                span,
                "invalid compaction: preserve_recent must be at least 1",
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

    fn mcp_refs(&mut self, m: &crate::model::McpBlock, w: &Ix<'_>) {
        for s in m.servers.iter().flatten() {
            if !w.mcp_servers.iter().any(|x| x.name.value == s.value) {
                self.err("C025", s.span, format!("mcp_server '{}': not declared", s.value));
            }
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

    fn prompt_ref(&mut self, w: &Ix<'_>, r: &Option<Spanned<String>>) {
        if let Some(r) = r
            && w.prompt(&r.value).is_none()
        {
            self.err("C003", r.span, format!("unknown prompt '{}'", r.value));
        }
    }

    fn node(&mut self, i: usize, n: &Node, w: &Ix<'_>, g: &Graph<'_>) {
        let name = n.name.value.as_str();
        self.schema_ref(w, &n.input);
        self.schema_ref(w, &n.output);
        self.prompt_ref(w, &n.system);
        self.prompt_ref(w, &n.user);
        self.prompt_ref(w, &n.instructions);
        self.prompt_ref(w, &n.interaction_prompt);
        if let Some(c) = &n.compaction {
            self.compaction(c, n.name.span);
        }
        if let Some(m) = &n.mcp {
            self.mcp_refs(m, w);
        }
        if let Some(r) = &n.reasoning_effort
            && is_literal(&r.value)
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
        if let Some(b) = &n.backend
            && is_literal(&b.value)
            && !BACKENDS.contains(&b.value.as_str())
        {
            self.err(
                "C087",
                b.span,
                format!("unknown backend '{}' (want claw, claude_code or codex)", b.value),
            );
        }
        let backend = n
            .backend
            .as_ref()
            .or(w.default_backend.as_ref())
            .map_or("claw", |b| b.value.as_str());
        match n.kind {
            NodeKind::Agent | NodeKind::Judge => {
                if backend == "claw" && n.model.is_none() {
                    self.err(
                        "C018",
                        n.name.span,
                        format!("node '{name}' needs a model for backend 'claw'"),
                    );
                }
                if backend == "codex" {
                    let span = n.backend.as_ref().map_or(n.name.span, |b| b.span);
                    self.warn(
                        "C030",
                        span,
                        "backend codex is discouraged (it cannot run inside the iterion sandbox)",
                    );
                }
                if let Some(m) = &n.memory {
                    if m.enabled == Some(true) && m.scope.is_none() {
                        self.err("C048", n.name.span, "memory is enabled but has no scope");
                    }
                    if is_literal(backend) && backend != "claw" {
                        self.warn("C047", n.name.span, "memory is only used by the claw backend");
                    }
                }
                if let Some(c) = &n.cursors {
                    self.cursor_settings(c, w);
                }
                if let (Some(mt), Some(b)) = (n.max_tokens, w.budget.as_ref().and_then(|b| b.max_tokens))
                    && mt > b
                {
                    self.warn(
                        "C037",
                        n.name.span,
                        format!("max_tokens of '{name}' exceeds the workflow budget"),
                    );
                }
                if let Some(s) = &n.session
                    && matches!(s.value.as_str(), "inherit" | "fork")
                    && g.converging(i)
                {
                    self.err(
                        "C009",
                        s.span,
                        format!(
                            "session '{}' on node '{name}', which several branches converge on",
                            s.value
                        ),
                    );
                }
            }
            NodeKind::Router => {
                let mode = n.router_mode.as_ref().map_or("fan_out_all", |m| m.value.as_str());
                if mode != "llm" {
                    let llm_only: [(&str, Option<Span>); 7] = [
                        ("model", n.model.as_ref().map(|x| x.span)),
                        ("backend", n.backend.as_ref().map(|x| x.span)),
                        ("provider", n.provider.as_ref().map(|x| x.span)),
                        ("system", n.system.as_ref().map(|x| x.span)),
                        ("user", n.user.as_ref().map(|x| x.span)),
                        ("multi", n.multi.map(|_| n.name.span)),
                        ("reasoning_effort", n.reasoning_effort.as_ref().map(|x| x.span)),
                    ];
                    for (prop, span) in llm_only {
                        if let Some(span) = span {
                            self.err("C023", span, format!("'{prop}' is only valid on llm routers"));
                        }
                    }
                }
                let out: Vec<&Edge> = w.edges_from(i).collect();
                match mode {
                    "round_robin" if out.len() < 2 => {
                        self.err(
                            "C020",
                            n.name.span,
                            format!("round_robin router '{name}' needs at least 2 edges"),
                        );
                    }
                    "llm" => {
                        if out.len() < 2 {
                            self.err(
                                "C021",
                                n.name.span,
                                format!("llm router '{name}' needs at least 2 edges"),
                            );
                        }
                        for e in out.iter().filter(|e| e.condition.is_some()) {
                            self.err(
                                "C022",
                                e.span,
                                format!("edges of llm router '{name}' must not use 'when'"),
                            );
                        }
                    }
                    _ => {}
                }
            }
            NodeKind::Human => {
                let interaction = n
                    .interaction
                    .as_ref()
                    .or(w.interaction.as_ref())
                    .map_or("human", |i| i.value.as_str());
                if matches!(interaction, "llm" | "llm_or_human")
                    && (n.model.is_none() && n.interaction_model.is_none() || n.output.is_none())
                {
                    self.err(
                        "C018",
                        n.name.span,
                        format!("node '{name}' needs a model for backend '{backend}'"),
                    );
                }
            }
            NodeKind::Tool => {
                if n.command.is_some() == n.script.is_some() {
                    self.err(
                        "C088",
                        n.name.span,
                        format!("tool '{name}' must set exactly one of command or script"),
                    );
                }
                if let Some(l) = &n.language {
                    if n.script.is_none() {
                        self.err("C089", l.span, format!("tool '{name}': language requires script"));
                    } else if !LANGUAGES.contains(&l.value.as_str()) {
                        self.err(
                            "C089",
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

    fn cursor_settings(&mut self, c: &crate::model::CursorSettings, w: &Ix<'_>) {
        for (k, v) in &c.values {
            let Some(cur) = w.cursors.iter().find(|x| x.name.value == k.value) else {
                self.warn("C083", k.span, format!("unknown cursor '{}'", k.value));
                continue;
            };
            let ok = match &cur.levels {
                Some(CursorLevels::Values(levels)) => levels.iter().any(|(n, _)| *n == v.value),
                Some(CursorLevels::Bands(bands)) => v
                    .value
                    .parse::<f64>()
                    .is_ok_and(|x| bands.iter().any(|(lo, hi, _)| *lo <= x && x <= *hi)),
                None => true,
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

    fn expression(&mut self, e: &Spanned<String>) {
        if let Err(err) = parse_expr(&e.value) {
            let span = inner_span(e, err.offset, 1);
            self.err("C040", span, format!("invalid expression: {}", err.detail));
        }
    }

    // ----------------------------------------------------------------------------------------------------
    // edges and graph rules (01 §4.3–§4.5)
    // ----------------------------------------------------------------------------------------------------

    fn edges(&mut self, w: &Ix<'_>, g: &Graph<'_>) {
        for (e, &(from, to)) in w.edges.iter().zip(&w.ends) {
            for (end, role, ix) in [(&e.from, "source", from), (&e.to, "target", to)] {
                let terminal = end.value == "done" || end.value == "fail";
                if terminal && role == "source" {
                    self.err(
                        "C042",
                        end.span,
                        format!("'{}' is a terminal node and cannot be an edge source", end.value),
                    );
                } else if !terminal && ix == NO_NODE {
                    self.err(
                        "C001",
                        end.span,
                        format!("edge refers to unknown node '{}'", end.value),
                    );
                }
            }
            match &e.condition {
                Some(Condition::Field { field, .. }) => {
                    if let Some(src) = w.node_at(from) {
                        match src.output.as_ref().and_then(|o| w.schema(&o.value)) {
                            None => {
                                if src.output.is_none() {
                                    self.warn(
                                        "C032",
                                        field.span,
                                        format!(
                                            "'{}' has no output schema; '{}' is not checked",
                                            src.name.value, field.value
                                        ),
                                    );
                                }
                            }
                            Some(s) => match s.field(&field.value) {
                                None => {
                                    self.err(
                                        "C014",
                                        field.span,
                                        format!(
                                            "condition field '{}' is not in the output schema of '{}'",
                                            field.value, src.name.value
                                        ),
                                    );
                                }
                                Some(f) if f.ty != VarType::Bool => {
                                    self.err(
                                        "C013",
                                        field.span,
                                        format!(
                                            "condition field '{}' of node '{}' is not bool",
                                            field.value, src.name.value
                                        ),
                                    );
                                }
                                Some(_) => {}
                            },
                        }
                    }
                }
                Some(Condition::Expr { text }) if !text.value.trim().is_empty() => self.expression(text),
                _ => {}
            }
        }
        // per-source rules
        let mut loops: FxMap<&str, &Edge> = FxMap::default();
        for e in &w.edges {
            if let Some(l) = &e.loop_spec {
                match &l.cap.value {
                    LoopCap::Literal(n) if *n < 1 => {
                        self.err(
                            "C026",
                            l.cap.span,
                            format!("loop '{}' cap must be at least 1", l.name.value),
                        );
                    }
                    LoopCap::Template(t) => {
                        let single = matches!(parse_template(t).as_deref(), Ok([Segment::Placeholder(_)]));
                        if !single {
                            self.err(
                                "C004",
                                l.cap.span,
                                format!("invalid template '{t}': a loop cap must be exactly one placeholder"),
                            );
                        }
                    }
                    _ => {}
                }
                match loops.get(l.name.value.as_str()) {
                    Some(prev) => {
                        let pc = &prev.loop_spec.as_ref().map(|p| p.cap.value.clone());
                        if pc.as_ref() != Some(&l.cap.value) {
                            let fmt = |c: &LoopCap| match c {
                                LoopCap::Literal(n) => n.to_string(),
                                LoopCap::Template(t) => format!("\"{t}\""),
                            };
                            let a = pc.as_ref().map(fmt).unwrap_or_default();
                            self.err(
                                "C005",
                                l.cap.span,
                                format!(
                                    "loop '{}' has conflicting caps ({a} vs {})",
                                    l.name.value,
                                    fmt(&l.cap.value)
                                ),
                            );
                        }
                    }
                    None => {
                        loops.insert(&l.name.value, e);
                    }
                }
            }
        }
        for (i, n) in w.nodes.iter().enumerate() {
            if n.kind == NodeKind::Router {
                continue;
            }
            let name = n.name.value.as_str();
            let out = || w.edges_from(i);
            let mut uncond = 0;
            for e in out() {
                if e.is_unconditional() {
                    uncond += 1;
                    if uncond == 2 {
                        self.err(
                            "C010",
                            e.span,
                            format!("node '{name}' has more than one unconditional non-loop edge"),
                        );
                    }
                }
            }
            let mut seen: Vec<&Condition> = Vec::new();
            for e in out() {
                if let Some(c) = &e.condition {
                    if seen.iter().any(|s| same_condition(s, c)) {
                        self.err(
                            "C011",
                            e.span,
                            format!(
                                "node '{name}' has overlapping conditions: {}",
                                describe_condition(c)
                            ),
                        );
                    } else {
                        seen.push(c);
                    }
                }
            }
            let has_cond = out().any(|e| e.condition.is_some());
            let has_fallback = out().any(|e| e.is_unconditional());
            if has_cond && !has_fallback && !exhaustive_pair(&seen) {
                let span = out()
                    .find(|e| e.condition.is_some())
                    .map_or(n.name.span, |e| e.span);
                self.err(
                    "C012",
                    span,
                    format!("node '{name}' has conditional edges but no fallback edge"),
                );
            }
        }
        // with-key collisions
        let mut into: FxMap<(&str, &str), &str> = FxMap::default();
        for e in &w.edges {
            for entry in &e.with.entries {
                let k = (e.to.value.as_str(), entry.key.value.as_str());
                match into.get(&k) {
                    Some(prev_from) if *prev_from != e.from.value => {
                        self.err(
                            "C028",
                            entry.key.span,
                            format!(
                                "input key '{}' of '{}' is mapped by several edges",
                                entry.key.value, e.to.value
                            ),
                        );
                    }
                    Some(_) => {}
                    None => {
                        into.insert(k, &e.from.value);
                    }
                }
            }
        }
        // cycles without loop edge
        for (cycle, edge) in g.cycles_without_loop() {
            self.err(
                "C019",
                edge,
                format!("cycle {} has no loop edge (add 'as NAME(N)')", cycle.join(" -> ")),
            );
        }
        // reachability
        if let Some(entry) = &w.entry
            && let Some(e) = w.node_index(&entry.value)
        {
            let reach = g.reachable(e);
            for (i, n) in w.nodes.iter().enumerate() {
                if !reach[i] {
                    self.err(
                        "C016",
                        n.name.span,
                        format!(
                            "node '{}' is not reachable from entry '{}'",
                            n.name.value, entry.value
                        ),
                    );
                }
            }
        }
    }

    // ----------------------------------------------------------------------------------------------------
    // templates (01 §5.1)
    // ----------------------------------------------------------------------------------------------------

    fn templates(&mut self, w: &Ix<'_>, g: &Graph<'_>) {
        let publishes: HashSet<&str> = w
            .nodes
            .iter()
            .filter_map(|n| n.publish.as_ref().map(|p| p.value.as_str()))
            .collect();
        let ctx = TplCtx { w, g, publishes };
        // prompt bodies: consumers are the nodes that use them, each once, in node order
        let uses = || {
            w.nodes.iter().enumerate().flat_map(|(i, n)| {
                let mut refs = [NO_NODE; 4];
                let props = [&n.system, &n.user, &n.instructions, &n.interaction_prompt];
                for (k, r) in props.into_iter().enumerate() {
                    if let Some(p) = r.as_ref().and_then(|r| w.prompt_index(&r.value)) {
                        let p = p as u32;
                        if !refs[..k].contains(&p) {
                            refs[k] = p;
                        }
                    }
                }
                refs.into_iter()
                    .filter(|&p| p != NO_NODE)
                    .map(move |p| (p, i as u32))
            })
        };
        let users = Csr::build(w.prompts.len(), uses);
        for (pi, p) in w.prompts.iter().enumerate() {
            let v = (p.body.as_str(), p.body_span);
            let us = users.of(pi);
            if us.is_empty() {
                self.template(&ctx, v, None, false);
            }
            for &u in us {
                self.template(&ctx, v, Some(u as usize), false);
            }
        }
        for (i, n) in w.nodes.iter().enumerate() {
            for v in [&n.command, &n.script].into_iter().flatten() {
                self.template(&ctx, (&v.value, v.span), Some(i), false);
            }
        }
        for (e, &(from, _)) in w.edges.iter().zip(&w.ends) {
            let src = (from != NO_NODE).then_some(from as usize);
            for entry in &e.with.entries {
                let v = &entry.value;
                self.template(&ctx, (&v.value, v.span), src, true);
            }
        }
    }

    /// Checks one template-bearing string (its text and span). `consumer` is the index of the node on whose
    /// behalf it is rendered; `inclusive` lets the consumer read its own output (edge mappings run after the
    /// source finished). Diagnostics keep the order of the template errors first, then the placeholders.
    fn template(&mut self, ctx: &TplCtx<'_>, v: (&str, Span), consumer: Option<usize>, inclusive: bool) {
        let mark = self.diags.len();
        let mut errs = Vec::new();
        crate::template::walk(
            v.0,
            |p| self.placeholder(ctx, v, p, consumer, inclusive),
            |e| errs.push(e),
        );
        if errs.is_empty() {
            return;
        }
        let placeholders = self.diags.split_off(mark);
        for e in errs {
            let span = inner_span_of(v.0, v.1, e.offset, 2);
            self.err(
                "C004",
                span,
                format!("invalid template '{}': {}", e.text, e.detail),
            );
        }
        self.diags.extend(placeholders);
    }

    fn placeholder(
        &mut self,
        ctx: &TplCtx<'_>,
        v: (&str, Span),
        p: &PlaceholderRef<'_>,
        consumer: Option<usize>,
        inclusive: bool,
    ) {
        // spans and texts are only computed for a diagnostic
        let span = || inner_span_of(v.0, v.1, p.start, p.end - p.start);
        let w = ctx.w;
        match p.path[0] {
            "outputs" => {
                let target = p.path[1];
                let Some(ti) = w.node_index(target) else {
                    self.err(
                        "C029",
                        span(),
                        format!("template refers to unknown node '{target}'"),
                    );
                    return;
                };
                let tn = &w.nodes[ti];
                let is_history = p.path.get(2).is_some_and(|s| *s == "history");
                if let Some(ci) = consumer {
                    let cname = w.nodes[ci].name.value.as_str();
                    let ok = (inclusive && ci == ti) || ctx.g.reaches(ti, ci);
                    if !ok {
                        self.err(
                            "C036",
                            span(),
                            format!("'{cname}' may run before '{target}' has produced output"),
                        );
                    }
                    if is_history && !ctx.g.reaches(ci, ci) {
                        self.err("C017", span(), "'.history' used outside a loop body");
                    }
                }
                if let Some(f) = p.path.get(2).filter(|_| !is_history) {
                    match tn.output.as_ref().and_then(|o| w.schema(&o.value)) {
                        Some(s) if s.field(f).is_none() => {
                            self.err(
                                "C031",
                                span(),
                                format!("field '{f}' is not in the output schema of '{target}'"),
                            );
                        }
                        Some(_) => {}
                        None if tn.output.is_none() => {
                            self.warn(
                                "C032",
                                span(),
                                format!(
                                    "'{target}' has no output schema; '{}' is not checked",
                                    p.path.join(".")
                                ),
                            );
                        }
                        None => {}
                    }
                }
            }
            "vars" if w.var(p.path[1]).is_none() => {
                self.err("C033", span(), format!("undeclared var '{}'", p.path[1]));
            }
            "input" => {
                if let (Some(c), Some(f)) = (consumer.map(|i| &w.nodes[i]), p.path.get(1))
                    && !inclusive
                    && let Some(s) = c.input.as_ref().and_then(|i| w.schema(&i.value))
                    && s.field(f).is_none()
                {
                    self.err(
                        "C034",
                        span(),
                        format!("field '{f}' is not in the input schema of '{}'", c.name.value),
                    );
                }
            }
            "artifacts" if !ctx.publishes.contains(p.path[1]) => {
                self.err(
                    "C035",
                    span(),
                    format!("no node publishes artifact '{}'", p.path[1]),
                );
            }
            "attachments" if !w.attachments.iter().any(|a| a.name.value == *p.path[1]) => {
                self.err("C052", span(), format!("unknown attachment '{}'", p.path[1]));
            }
            _ => {}
        }
    }

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

struct TplCtx<'w> {
    w: &'w Ix<'w>,
    g: &'w Graph<'w>,
    publishes: HashSet<&'w str>,
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

fn same_condition(a: &Condition, b: &Condition) -> bool {
    match (a, b) {
        (
            Condition::Field {
                field: f1,
                negated: n1,
            },
            Condition::Field {
                field: f2,
                negated: n2,
            },
        ) => f1.value == f2.value && n1 == n2,
        (Condition::Expr { text: t1 }, Condition::Expr { text: t2 }) => {
            t1.value.split_whitespace().eq(t2.value.split_whitespace())
        }
        _ => false,
    }
}

fn describe_condition(c: &Condition) -> String {
    match c {
        Condition::Field { field, negated } => {
            format!("when {}{}", if *negated { "not " } else { "" }, field.value)
        }
        Condition::Expr { text } => format!("when \"{}\"", text.value),
    }
}

fn exhaustive_pair(conds: &[&Condition]) -> bool {
    conds.iter().any(|a| {
        conds.iter().any(|b| match (a, b) {
            (
                Condition::Field {
                    field: f1,
                    negated: false,
                },
                Condition::Field {
                    field: f2,
                    negated: true,
                },
            ) => f1.value == f2.value,
            _ => false,
        })
    })
}

fn valid_mime(m: &str) -> bool {
    let Some((t, s)) = m.split_once('/') else {
        return false;
    };
    let part = |p: &str| {
        p == "*"
            || (!p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b)))
    };
    part(t) && part(s)
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

fn parse_band(k: &str) -> Option<(f64, f64)> {
    let (lo, hi) = k.split_once("..")?;
    let lo: f64 = lo.trim().parse().ok()?;
    let hi: f64 = hi.trim().parse().ok()?;
    (lo.is_finite() && hi.is_finite() && lo <= hi).then_some((lo, hi))
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

    /// The node at `i`, unless `i` is [`NO_NODE`].
    fn node_at(&self, i: u32) -> Option<&'w Node> {
        (i != NO_NODE).then(|| &self.w.nodes[i as usize])
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

/// The node graph by index (terminals excluded), with reachability queries that stop early and reuse one
/// visit-stamp array and one stack, so checking many template references stays near-linear on typical
/// graphs.
struct Graph<'w> {
    /// successors through any edge
    succ: Csr<u32>,
    /// successors through non-loop edges, with the edge index
    succ_no_loop: Csr<(u32, u32)>,
    /// whether non-loop edges from more than one distinct source enter the node
    converging: Vec<bool>,
    nodes: &'w [Node],
    edges: &'w [Edge],
    stamp: std::cell::RefCell<(u32, Vec<u32>, Vec<u32>)>,
}

impl<'w> Graph<'w> {
    fn new(w: &Ix<'w>) -> Graph<'w> {
        let n = w.nodes.len();
        let both = || {
            w.ends
                .iter()
                .enumerate()
                .filter(|(_, (a, b))| *a != NO_NODE && *b != NO_NODE)
        };
        let succ = Csr::build(n, || both().map(|(_, &(a, b))| (a, b)));
        let non_loop = || both().filter(|(i, _)| w.edges[*i].loop_spec.is_none());
        let succ_no_loop = Csr::build(n, || non_loop().map(|(i, &(a, b))| (a, (b, i as u32))));
        let mut first_pred = vec![NO_NODE; n];
        let mut converging = vec![false; n];
        for (_, &(a, b)) in non_loop() {
            let f = &mut first_pred[b as usize];
            if *f == NO_NODE {
                *f = a;
            } else if *f != a {
                converging[b as usize] = true;
            }
        }
        Graph {
            succ,
            succ_no_loop,
            converging,
            nodes: &w.w.nodes,
            edges: &w.w.edges,
            stamp: std::cell::RefCell::new((0, vec![0; n], Vec::new())),
        }
    }

    /// Whether `to` is reachable from `from` through at least one edge (`stop` = `None` marks everything
    /// reachable and returns false).
    fn search(&self, from: usize, stop: Option<usize>, mark: &mut dyn FnMut(usize)) -> bool {
        let mut guard = self.stamp.borrow_mut();
        let (stamp, seen, stack) = &mut *guard;
        *stamp = stamp.wrapping_add(1);
        if *stamp == 0 {
            seen.iter_mut().for_each(|x| *x = 0);
            *stamp = 1;
        }
        let cur = *stamp;
        stack.clear();
        stack.extend_from_slice(self.succ.of(from));
        while let Some(n) = stack.pop() {
            let n = n as usize;
            if seen[n] == cur {
                continue;
            }
            seen[n] = cur;
            mark(n);
            if Some(n) == stop {
                return true;
            }
            stack.extend(
                self.succ
                    .of(n)
                    .iter()
                    .copied()
                    .filter(|&m| seen[m as usize] != cur),
            );
        }
        false
    }

    fn reaches(&self, a: usize, b: usize) -> bool {
        self.search(a, Some(b), &mut |_| {})
    }

    fn reachable(&self, entry: usize) -> Vec<bool> {
        let mut seen = vec![false; self.nodes.len()];
        seen[entry] = true;
        self.search(entry, None, &mut |n| seen[n] = true);
        seen
    }

    fn converging(&self, i: usize) -> bool {
        self.converging[i]
    }

    /// Cycles made only of non-loop edges: `(node names with the first repeated at the end, closing edge)`.
    fn cycles_without_loop(&self) -> Vec<(Vec<String>, Span)> {
        #[derive(Clone, Copy, PartialEq)]
        enum C {
            White,
            Grey,
            Black,
        }
        let n = self.nodes.len();
        let mut color = vec![C::White; n];
        let mut out = Vec::new();
        let mut stack: Vec<(usize, usize)> = Vec::new();
        for start in 0..n {
            if color[start] != C::White {
                continue;
            }
            stack.clear();
            stack.push((start, 0));
            color[start] = C::Grey;
            while let Some(top) = stack.last_mut() {
                let (node, idx) = (top.0, top.1);
                top.1 += 1;
                match self.succ_no_loop.of(node).get(idx) {
                    None => {
                        color[node] = C::Black;
                        stack.pop();
                    }
                    Some(&(to, edge)) => match color[to as usize] {
                        C::White => {
                            color[to as usize] = C::Grey;
                            stack.push((to as usize, 0));
                        }
                        C::Grey => {
                            let to = to as usize;
                            let pos = stack.iter().position(|(m, _)| *m == to).unwrap_or(0);
                            let mut cyc: Vec<String> = stack[pos..]
                                .iter()
                                .map(|(m, _)| self.nodes[*m].name.value.clone())
                                .collect();
                            cyc.push(self.nodes[to].name.value.clone());
                            out.push((cyc, self.edges[edge as usize].span));
                        }
                        C::Black => {}
                    },
                }
            }
        }
        out
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
