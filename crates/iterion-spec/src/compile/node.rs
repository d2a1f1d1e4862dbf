//! The checks of one node: schema and prompt references, per-kind properties (`C004`, `C009`, `C018`,
//! `C023`, `C027`, `C030`, `C037`, `C039`, `C047`, `C048`) and compaction (`C043`).

use super::compiler::Compiler;
use super::graph::{Ix, router_mode};
use super::refs;
use crate::model::{Compaction, Node, NodeKind, Span, Spanned};

const EFFORTS: &[&str] = &["low", "medium", "high", "xhigh", "max"];
const LANGUAGES: &[&str] = &["sh", "bash", "js", "node", "py", "python", "python3"];

impl Compiler<'_> {
    fn schema_ref(&mut self, w: &Ix<'_>, r: &Option<Spanned<String>>) {
        if let Some(r) = r
            && w.schema(&r.value).is_none()
        {
            self.err("C002", r.span, format!("unknown schema '{}'", r.value));
        }
    }

    /// Every check of one node: the properties all kinds share, then those of its kind.
    pub(super) fn node(&mut self, n: &Node, w: &Ix<'_>) {
        self.schema_ref(w, &n.input);
        self.schema_ref(w, &n.output);
        self.prompt_refs(n, w);
        if let Some(c) = &n.compaction {
            self.compaction(c, n.name.span);
        }
        let llm_router = n.kind == NodeKind::Router && router_mode(n) == "llm";
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
            NodeKind::Agent | NodeKind::Judge => self.agent_node(n, w),
            NodeKind::Router => self.router_node(n, llm_router),
            NodeKind::Human => self.human_node(n, w),
            NodeKind::Tool => self.tool_node(n),
            NodeKind::Compute => self.compute_node(n),
        }
    }

    /// Agents and judges: model or backend (`C018`), memory (`C047`, `C048`), cursors, `max_tokens` against
    /// the budget (`C037`), a session carried into a convergence point (`C009`).
    fn agent_node(&mut self, n: &Node, w: &Ix<'_>) {
        let name = n.name.value.as_str();
        // with an explicit backend the model is that backend's default; with neither, the backend is
        // picked on the host at run time (a warning: the file itself is valid)
        if n.model.is_none() && n.backend.is_none() {
            let i = self.warn(
                "C018",
                n.name.span,
                format!("node '{name}' sets neither model nor backend; the host's default backend is used"),
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

    /// Routers: llm-only properties on other routers (`C023`); an llm router without model or backend
    /// (`C018`).
    fn router_node(&mut self, n: &Node, llm_router: bool) {
        let name = n.name.value.as_str();
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

    /// Humans with an llm interaction need a model and an output schema (`C018`).
    fn human_node(&mut self, n: &Node, w: &Ix<'_>) {
        let name = n.name.value.as_str();
        if matches!(refs::interaction(n, w), "llm" | "llm_or_human") {
            if n.model.is_none() && n.interaction_model.is_none() {
                self.err(
                    "C018",
                    n.name.span,
                    format!("human '{name}' with an llm interaction needs interaction_model or model"),
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

    /// Tools: exactly one of command or script, and a known language with a script (`C004`, the reference
    /// validator's numbering for every tool shape problem).
    fn tool_node(&mut self, n: &Node) {
        let name = n.name.value.as_str();
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

    /// Compute nodes: at least one `expr` entry (`C039`), each a valid expression (`C040`).
    fn compute_node(&mut self, n: &Node) {
        let name = n.name.value.as_str();
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

    /// `C043`: 0 means "inherit" for both values; otherwise `threshold` is in (0, 1] and `preserve_recent`
    /// is not negative.
    pub(super) fn compaction(&mut self, c: &Compaction, span: Span) {
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
}
