//! The graph rules over edges, as the reference validator applies them: edge ends (`C001`), conditions
//! (`C013`, `C014`), loop caps (`C004`, `C005`, `C026`), the routing rules per source (`C010`–`C012`), router
//! edges (`C020`–`C022`), cycles (`C019`) and reachability (`C016`).
//!
//! `done` and `fail` are nodes of the graph here (an edge may leave them; the entry may be one of them).

use super::compiler::Compiler;
use super::graph::{Full, Ix, NO_NODE, router_mode};
use super::hash::FxMap;
use super::refs;
use crate::model::{Condition, Edge, LoopCap, NodeKind, Span, VarType};
use crate::span::inner_span;

/// Router modes whose out-edges are not held to the routing rules of ordinary nodes.
fn exempt_router(mode: &str) -> bool {
    matches!(mode, "fan_out_all" | "round_robin" | "llm")
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
        // the expression text exactly as written: `"ok  == true"` and `"ok == true"` differ
        (Condition::Expr { text: t1 }, Condition::Expr { text: t2 }) => t1.value == t2.value,
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

/// Some field appears both as `when F` and as `when not F`.
fn exhaustive_pair(conds: &[&Condition]) -> bool {
    let fields = |neg: bool| {
        conds.iter().filter_map(move |c| match c {
            Condition::Field { field, negated } if *negated == neg => Some(field.value.as_str()),
            _ => None,
        })
    };
    fields(false).any(|f| fields(true).any(|g| g == f))
}

impl Compiler<'_> {
    /// Every rule over edges and the graph (see the module documentation).
    pub(super) fn graph_rules(&mut self, w: &Ix<'_>, full: &Full) {
        for (e, &(from, to)) in w.edges.iter().zip(&full.ends) {
            for (end, ix) in [(&e.from, from), (&e.to, to)] {
                if ix == NO_NODE {
                    let i = self.err(
                        "C001",
                        end.span,
                        format!("edge refers to unknown node '{}'", end.value),
                    );
                    let names = w
                        .nodes
                        .iter()
                        .map(|n| n.name.value.as_str())
                        .chain(["done", "fail"]);
                    if let Some(known) = crate::suggest::closest(&end.value, names) {
                        self.hint(i, &format!("did you mean '{known}'?"));
                    }
                }
            }
            self.condition(w, e, w.nodes.get(from as usize));
        }
        self.loop_caps(w);
        for (i, n) in w.nodes.iter().enumerate() {
            if n.kind == NodeKind::Router {
                self.router_edges(w, i);
                if exempt_router(router_mode(n)) {
                    continue;
                }
            }
            self.routing(w, i);
        }
        // cycles: a back edge is an error unless one of its ends is an end of some loop edge
        let entry = w.entry.as_ref().and_then(|e| full.index(w, &e.value));
        let name = |i: usize| match w.nodes.get(i) {
            Some(n) => n.name.value.clone(),
            None if i == w.nodes.len() => "done".into(),
            None => "fail".into(),
        };
        for (cycle, edge) in full.back_edges(entry, name) {
            let (a, b) = full.ends[edge];
            if full.loop_end[a as usize] || full.loop_end[b as usize] {
                continue;
            }
            self.err(
                "C019",
                w.edges[edge].span,
                format!("cycle {} has no loop edge (add 'as NAME(N)')", cycle.join(" -> ")),
            );
        }
        // reachability from the entry; `done` and `fail` need not be reached
        if let (Some(e), Some(entry)) = (entry, &w.entry) {
            let reach = full.reachable(e);
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

    /// `C013`/`C014`: a condition is checked against the source's output schema when it has a declared one
    /// (a source without a schema is not checked). `when "EXPR"`: `C040` when it does not parse, then
    /// `C014` for every `outputs.<source>.<field>` whose field is not in the schema.
    fn condition(&mut self, w: &Ix<'_>, e: &Edge, src: Option<&crate::model::Node>) {
        let schema = src
            .and_then(|s| s.output.as_ref())
            .and_then(|o| w.schema(&o.value));
        match &e.condition {
            Some(Condition::Field { field, .. }) => {
                let (Some(src), Some(s)) = (src, schema) else {
                    return;
                };
                match s.field(&field.value) {
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
                }
            }
            Some(Condition::Expr { text }) if !text.value.trim().is_empty() => {
                if !self.expression(text) {
                    return;
                }
                let (Some(src), Some(s)) = (src, schema) else {
                    return;
                };
                for (off, path) in refs::expr_paths(&text.value) {
                    if path.len() >= 3
                        && path[0] == "outputs"
                        && path[1] == src.name.value
                        && s.field(path[2]).is_none()
                    {
                        let len = path.iter().map(|p| p.len() + 1).sum::<usize>() - 1;
                        self.err(
                            "C014",
                            inner_span(text, off, len),
                            format!(
                                "condition field '{}' is not in the output schema of '{}'",
                                path[2], src.name.value
                            ),
                        );
                    }
                }
            }
            _ => {}
        }
    }

    /// `C026` (literal cap below 1), `C004` (a templated cap is scanned as a template, nothing more) and
    /// `C005` (the edges of one loop disagree on the cap).
    fn loop_caps(&mut self, w: &Ix<'_>) {
        let mut loops: FxMap<&str, &LoopCap> = FxMap::default();
        for e in &w.edges {
            let Some(l) = &e.loop_spec else {
                continue;
            };
            match &l.cap.value {
                LoopCap::Literal(n) if *n < 1 => {
                    self.err(
                        "C026",
                        l.cap.span,
                        format!("loop '{}' cap must be at least 1", l.name.value),
                    );
                }
                LoopCap::Template(t) => {
                    self.scan_template(t, l.cap.span);
                }
                LoopCap::Literal(_) => {}
            }
            match loops.get(l.name.value.as_str()) {
                Some(prev) if **prev != l.cap.value => {
                    let fmt = |c: &LoopCap| match c {
                        LoopCap::Literal(n) => n.to_string(),
                        LoopCap::Template(t) => format!("\"{t}\""),
                    };
                    self.err(
                        "C005",
                        l.cap.span,
                        format!(
                            "loop '{}' has conflicting caps ({} vs {})",
                            l.name.value,
                            fmt(prev),
                            fmt(&l.cap.value)
                        ),
                    );
                }
                Some(_) => {}
                None => {
                    loops.insert(&l.name.value, &l.cap.value);
                }
            }
        }
    }

    /// `C010`–`C012` for one source node.
    fn routing(&mut self, w: &Ix<'_>, i: usize) {
        let n = &w.nodes[i];
        let name = n.name.value.as_str();
        let out = || w.edges_from(i);
        for e in out().filter(|e| e.is_unconditional()).skip(1).take(1) {
            self.err(
                "C010",
                e.span,
                format!("node '{name}' has more than one unconditional non-loop edge"),
            );
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
        // a loop edge without `when` is a fallback too ("loop N times, then fall through")
        let has_fallback = out().any(|e| e.condition.is_none());
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

    /// `C020` (round_robin: fewer than 2 edges without `when`), `C021` (llm: fewer than 2 edges), `C022`
    /// (llm: an edge with `when FIELD`; an expression is allowed).
    fn router_edges(&mut self, w: &Ix<'_>, i: usize) {
        let n = &w.nodes[i];
        let name = n.name.value.as_str();
        let span: Span = n.name.span;
        match router_mode(n) {
            "round_robin" if w.edges_from(i).filter(|e| e.condition.is_none()).count() < 2 => {
                self.err(
                    "C020",
                    span,
                    format!("round_robin router '{name}' needs at least 2 edges without 'when'"),
                );
            }
            "llm" => {
                if w.edges_from(i).count() < 2 {
                    self.err(
                        "C021",
                        span,
                        format!("llm router '{name}' needs at least 2 edges"),
                    );
                }
                let field_edges: Vec<Span> = w
                    .edges_from(i)
                    .filter(|e| matches!(e.condition, Some(Condition::Field { .. })))
                    .map(|e| e.span)
                    .collect();
                for s in field_edges {
                    self.err(
                        "C022",
                        s,
                        format!("edges of llm router '{name}' must not use 'when FIELD'"),
                    );
                }
            }
            _ => {}
        }
    }
}
