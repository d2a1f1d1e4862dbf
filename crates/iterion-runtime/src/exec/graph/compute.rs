//! Compute nodes: each `expr` key evaluated in order against the run state, in the iterion process.
use iterion_spec::expr::{eval, parse_expr};
use iterion_spec::model::Node;
use serde_json::{Map, Value};

use super::{Done, Engine, expr_root};
use crate::events::{NodeKind as EvKind, NodeStarted, RunFailed};
use crate::exec::context::ExecOutcome;
use crate::failure::FailureCode;

/// Evaluates the `expr` entries of `node` against `st`-like roots; the error names the failing key.
pub(super) fn evaluate(node: &Node, root: &dyn Fn(&str) -> Option<Value>) -> Result<Value, String> {
    let id = node.name.value.as_str();
    let mut out = Map::new();
    for (key, text) in &node.expr {
        let v = parse_expr(&text.value)
            .map_err(|e| e.detail)
            .and_then(|x| eval(&x, root).map_err(|e| e.0))
            .map_err(|err| {
                format!(
                    "compute '{id}': field '{}' expression '{}': {err}",
                    key.value, text.value
                )
            })?;
        out.insert(key.value.clone(), v);
    }
    Ok(Value::Object(out))
}

impl Engine<'_> {
    /// A compute node: not budgeted, not counted as an iteration, never retried (an expression is deterministic).
    #[allow(clippy::result_large_err)]
    pub(super) fn compute(&mut self, node: &Node, input: Value) -> Result<Done, ExecOutcome> {
        let id = node.name.value.clone();
        let iteration = self.next_iteration(&id);
        self.emit(NodeStarted::in_process(id.clone(), EvKind::Compute, iteration));
        let result = {
            let root = expr_root(&self.st, &input, &self.ctx.run_id);
            evaluate(node, &root)
        };
        match result {
            Ok(output) => Ok(Done {
                output,
                tokens: None,
                cost_usd: None,
                duration_ms: 0,
            }),
            Err(msg) => Err(self.failed(
                RunFailed::new(FailureCode::ExecutionFailed, msg)
                    .node(id.clone())
                    .hint("check the compute node's expressions for type mismatches or unknown references"),
                &id,
                Some(input),
            )),
        }
    }
}
