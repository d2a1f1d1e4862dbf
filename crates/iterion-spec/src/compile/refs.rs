//! Template references, as the reference validator checks them: which strings are scanned (`C004`), which
//! prompt properties are checked (`C003`), who the consumer of each placeholder is, and the reference rules
//! per namespace (`C017`, `C029`, `C031`–`C036`, `C053`, `C054`).
//!
//! Checked locations and their consumer:
//! - a prompt body, once for every node that uses it (a prompt no node uses is only scanned, and checked
//!   for `C017`);
//! - an edge `with` value: the edge's source, which counts as available to itself;
//! - a tool `command:` / `script:`: the tool;
//! - a compute `expr:` value: the compute node, for every path whose first word is `vars`, `input`,
//!   `outputs`, `artifacts` or `attachments`.
//!
//! Templated loop caps are only scanned. `when "…"` expressions are checked by the graph rules.

use super::compiler::Compiler;
use super::graph::{Full, Ix, NO_NODE, router_mode};
use crate::expr::parse_expr;
use crate::model::{Node, NodeKind, Span, Spanned};
use crate::span::{inner_span, inner_span_of};

/// One placeholder of a scanned template: its path (namespace first) and its byte range.
pub(super) struct Ph {
    path: Vec<String>,
    start: usize,
    end: usize,
}

/// The sub-fields of an attachment a template may read.
const ATTACHMENT_FIELDS: &[&str] = &["path", "url", "mime", "size", "sha256"];

/// Namespaces whose paths are checked in compute expressions.
const EXPR_NAMESPACES: &[&str] = &["vars", "input", "outputs", "artifacts", "attachments"];

/// Every dotted name in an expression (outside string literals) with its byte offset, split into segments.
pub(super) fn expr_paths(text: &str) -> Vec<(usize, Vec<&str>)> {
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            loop {
                while i < b.len() && word(b[i]) {
                    i += 1;
                }
                if i + 1 < b.len() && b[i] == b'.' && word(b[i + 1]) {
                    i += 1;
                    continue;
                }
                break;
            }
            out.push((start, text[start..i].split('.').collect()));
        } else if c.is_ascii_digit() {
            while i < b.len() && (word(b[i]) || b[i] == b'.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The human interaction mode in force for a node (`human` when neither the node nor the workflow sets one).
pub(super) fn interaction<'a>(n: &'a Node, w: &'a Ix<'_>) -> &'a str {
    n.interaction
        .as_ref()
        .or(w.interaction.as_ref())
        .map_or("human", |i| i.value.as_str())
}

/// The prompt properties of a node that count as uses, each with whether an unknown prompt name there is an
/// error (`C003`): `system`/`user` of an agent or judge, and of a router in `llm` mode; `instructions` of a
/// human, and its `system` when its interaction is `llm` or `llm_or_human`; `interaction_prompt` of an
/// agent, judge or human (a use, but its name is never checked).
fn prompt_props<'n>(n: &'n Node, w: &Ix<'_>) -> Vec<(&'n Spanned<String>, bool)> {
    let props: Vec<(&Option<Spanned<String>>, bool)> = match n.kind {
        NodeKind::Agent | NodeKind::Judge => {
            vec![(&n.system, true), (&n.user, true), (&n.interaction_prompt, false)]
        }
        NodeKind::Router if router_mode(n) == "llm" => vec![(&n.system, true), (&n.user, true)],
        NodeKind::Human => {
            let mut v = vec![(&n.instructions, true), (&n.interaction_prompt, false)];
            if matches!(interaction(n, w), "llm" | "llm_or_human") {
                v.insert(0, (&n.system, true));
            }
            v
        }
        _ => Vec::new(),
    };
    props
        .into_iter()
        .filter_map(|(p, check)| p.as_ref().map(|p| (p, check)))
        .collect()
}

struct Ctx<'a, 'w> {
    w: &'a Ix<'w>,
    full: &'a Full,
    /// `(artifact name, publishing node)` for agents, judges and humans
    publishers: Vec<(&'w str, usize)>,
}

impl Compiler<'_> {
    /// `C040` when an expression does not parse; returns whether it parses.
    pub(super) fn expression(&mut self, e: &Spanned<String>) -> bool {
        match parse_expr(&e.value) {
            Ok(_) => true,
            Err(err) => {
                let span = inner_span(e, err.offset, 1);
                self.err("C040", span, format!("invalid expression: {}", err.detail));
                false
            }
        }
    }

    /// `C003`: an unknown prompt name in a property that the reference checks.
    pub(super) fn prompt_refs(&mut self, n: &Node, w: &Ix<'_>) {
        for (p, check) in prompt_props(n, w) {
            if check && w.prompt(&p.value).is_none() {
                self.err("C003", p.span, format!("unknown prompt '{}'", p.value));
            }
        }
    }

    /// Scans one template-bearing string: its placeholders, or `None` after reporting the first `C004`
    /// (the string's placeholders are then not checked further).
    pub(super) fn scan_template(&mut self, text: &str, span: Span) -> Option<Vec<Ph>> {
        let mut phs = Vec::new();
        let mut first = None;
        crate::template::walk(
            text,
            |p| {
                phs.push(Ph {
                    path: p.path.iter().map(|s| (*s).to_string()).collect(),
                    start: p.start,
                    end: p.end,
                })
            },
            |e| {
                first.get_or_insert(e);
            },
        );
        match first {
            None => Some(phs),
            Some(e) => {
                let s = inner_span_of(text, span, e.offset, 2);
                self.err("C004", s, format!("invalid template '{}': {}", e.text, e.detail));
                None
            }
        }
    }

    /// Every template reference of the workflow (see the module documentation).
    pub(super) fn references(&mut self, w: &Ix<'_>, full: &Full) {
        let publishers = w
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| matches!(n.kind, NodeKind::Agent | NodeKind::Judge | NodeKind::Human))
            .filter_map(|(i, n)| n.publish.as_ref().map(|p| (p.value.as_str(), i)))
            .collect();
        let ctx = Ctx { w, full, publishers };
        // prompt bodies: the users of each prompt, in node order, each once
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); w.prompts.len()];
        for (i, n) in w.nodes.iter().enumerate() {
            for (p, _) in prompt_props(n, w) {
                // nodes come in order, so a repeated use by the same node is the last one
                if let Some(pi) = w.prompt_index(&p.value)
                    && users[pi].last() != Some(&i)
                {
                    users[pi].push(i);
                }
            }
        }
        for (pi, p) in w.prompts.iter().enumerate() {
            let v = (p.body.as_str(), p.body_span);
            let Some(phs) = self.scan_template(v.0, v.1) else {
                continue;
            };
            self.history(&ctx, v, &phs);
            for &u in &users[pi] {
                for ph in &phs {
                    self.reference(&ctx, v, &ph.path, (ph.start, ph.end), Some(u), false);
                }
            }
        }
        for (i, n) in w.nodes.iter().enumerate() {
            for t in [&n.command, &n.script].into_iter().flatten() {
                let v = (t.value.as_str(), t.span);
                if let Some(phs) = self.scan_template(v.0, v.1) {
                    for ph in &phs {
                        self.reference(&ctx, v, &ph.path, (ph.start, ph.end), Some(i), false);
                    }
                }
            }
            if n.kind == NodeKind::Compute {
                for (_, e) in &n.expr {
                    if crate::expr::parse_expr(&e.value).is_err() {
                        continue;
                    }
                    for (off, path) in expr_paths(&e.value) {
                        if path.len() < 2 || !EXPR_NAMESPACES.contains(&path[0]) {
                            continue;
                        }
                        let len = path.iter().map(|p| p.len() + 1).sum::<usize>() - 1;
                        let owned: Vec<String> = path.iter().map(|s| (*s).to_string()).collect();
                        let s = inner_span(e, off, len);
                        self.reference(
                            &ctx,
                            (&e.value[off..off + len], s),
                            &owned,
                            (0, len),
                            Some(i),
                            false,
                        );
                    }
                }
            }
        }
        for (e, &(from, _)) in w.edges.iter().zip(&full.ends) {
            let src = (from != NO_NODE).then_some(from as usize);
            for entry in &e.with.entries {
                let v = (entry.value.value.as_str(), entry.value.span);
                if let Some(phs) = self.scan_template(v.0, v.1) {
                    self.history(&ctx, v, &phs);
                    for ph in &phs {
                        self.reference(&ctx, v, &ph.path, (ph.start, ph.end), src, true);
                    }
                }
            }
        }
    }

    /// `C017`: `{{outputs.X.history}}` where X is not an end of any loop edge (whoever the consumer is).
    fn history(&mut self, ctx: &Ctx<'_, '_>, v: (&str, Span), phs: &[Ph]) {
        for ph in phs {
            if ph.path.len() >= 3
                && ph.path[0] == "outputs"
                && ph.path.last().is_some_and(|s| s == "history")
                && let Some(x) = ctx.w.node_index(&ph.path[1])
                && !ctx.full.loop_end[x]
            {
                let span = inner_span_of(v.0, v.1, ph.start, ph.end - ph.start);
                self.err(
                    "C017",
                    span,
                    format!(
                        "'.history' of '{}', which is not an end of any loop edge",
                        ph.path[1]
                    ),
                );
            }
        }
    }

    /// Checks one reference `path` (namespace first) at bytes `range` of `v`, on behalf of `consumer`
    /// (`itself`: the consumer counts as available to itself).
    fn reference(
        &mut self,
        ctx: &Ctx<'_, '_>,
        v: (&str, Span),
        path: &[String],
        range: (usize, usize),
        consumer: Option<usize>,
        itself: bool,
    ) {
        let span = || inner_span_of(v.0, v.1, range.0, range.1 - range.0);
        let w = ctx.w;
        let Some(name) = path.get(1) else {
            return;
        };
        let cname = |c: usize| match w.nodes.get(c) {
            Some(n) => n.name.value.as_str(),
            None if c == w.nodes.len() => "done",
            None => "fail",
        };
        match path[0].as_str() {
            "outputs" => {
                let Some(ti) = ctx.full.index(w, name) else {
                    self.err(
                        "C029",
                        span(),
                        format!("template refers to unknown node '{name}'"),
                    );
                    return;
                };
                if let Some(c) = consumer
                    && !ctx.full.available(ti, c, itself)
                {
                    self.err(
                        "C036",
                        span(),
                        format!("'{}' may run before '{name}' has produced output", cname(c)),
                    );
                    return;
                }
                // `.history` is C017's; fields starting with `_` are runtime metadata (`_session_id`, …)
                let Some(f) = path.get(2).filter(|f| *f != "history" && !f.starts_with('_')) else {
                    return;
                };
                let schema = w
                    .nodes
                    .get(ti)
                    .filter(|n| n.kind != NodeKind::Router)
                    .and_then(|n| n.output.as_ref());
                match schema {
                    None => {
                        self.warn(
                            "C032",
                            span(),
                            format!(
                                "'{name}' has no output schema; '{}' is not checked",
                                path.join(".")
                            ),
                        );
                    }
                    Some(s) => {
                        if let Some(s) = w.schema(&s.value)
                            && s.field(f).is_none()
                        {
                            self.err(
                                "C031",
                                span(),
                                format!("field '{f}' is not in the output schema of '{name}'"),
                            );
                        }
                    }
                }
            }
            "vars" if w.var(name).is_none() => {
                self.err("C033", span(), format!("undeclared var '{name}'"));
            }
            "input" => {
                if let Some(c) = consumer.and_then(|c| w.nodes.get(c))
                    && let Some(s) = c.input.as_ref().and_then(|i| w.schema(&i.value))
                    && s.field(name).is_none()
                {
                    self.err(
                        "C034",
                        span(),
                        format!("field '{name}' is not in the input schema of '{}'", c.name.value),
                    );
                }
            }
            "artifacts" => {
                let mut by = ctx.publishers.iter().filter(|(a, _)| a == name).peekable();
                if by.peek().is_none() {
                    self.err("C035", span(), format!("no node publishes artifact '{name}'"));
                    return;
                }
                if let Some(c) = consumer
                    && !by.any(|&(_, p)| ctx.full.available(p, c, itself))
                {
                    self.err(
                        "C036",
                        span(),
                        format!(
                            "'{}' may run before artifact '{name}' has been published",
                            cname(c)
                        ),
                    );
                }
            }
            "attachments" => {
                if !w.attachments.iter().any(|a| a.name.value == *name) {
                    self.err("C053", span(), format!("unknown attachment '{name}'"));
                } else if let Some(sub) = path.get(2)
                    && !ATTACHMENT_FIELDS.contains(&sub.as_str())
                {
                    self.err(
                        "C054",
                        span(),
                        format!(
                            "unknown attachment field '{sub}' (want {})",
                            ATTACHMENT_FIELDS.join(", ")
                        ),
                    );
                }
            }
            _ => {}
        }
    }
}
