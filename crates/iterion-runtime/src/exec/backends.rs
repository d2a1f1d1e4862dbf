//! Which backend an agent node uses, and the positioned diagnostics of the executability check: what the
//! check, the fan-out rules and the executor share.
use std::collections::BTreeMap;

use iterion_spec::diag::Diagnostic;
use iterion_spec::model::{Node, Span, Workflow};
use iterion_spec::template::{EnvContext, expand_env};

/// The backends [`super::check_executable`] accepts.
pub const EXECUTABLE_BACKENDS: &[&str] = &["claw", "claude_code", "codex"];

/// The backend of an agent or judge node after `${…}` expansion (node `backend` → workflow
/// `default_backend` → `claw`), with the span to blame.
pub fn node_backend(workflow: &Workflow, node: &Node, env: &BTreeMap<String, String>) -> (String, Span) {
    let lookup = |n: &str| env.get(n).cloned();
    let (raw, span) = match (&node.backend, &workflow.default_backend) {
        (Some(b), _) => (b.value.as_str(), b.span),
        (None, Some(b)) => (b.value.as_str(), b.span),
        (None, None) => ("claw", node.name.span),
    };
    let b = expand_env(raw, EnvContext::NodeField, &lookup);
    let b = if b.is_empty() { "claw".to_string() } else { b };
    (b, span)
}

pub(crate) fn at(code: &'static str, file: &str, span: Span, msg: String) -> Diagnostic {
    Diagnostic::error(code, file, span.line, span.col, msg).with_end(span.end_line, span.end_col)
}

pub(crate) fn warn_at(code: &'static str, file: &str, span: Span, msg: String) -> Diagnostic {
    Diagnostic::warning(code, file, span.line, span.col, msg).with_end(span.end_line, span.end_col)
}
