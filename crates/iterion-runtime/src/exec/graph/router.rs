//! Routers without a model call: `condition` (the standard envelope, output = input) and `round_robin`.
use iterion_spec::model::Node;
use serde_json::Value;

use super::{Done, Engine};
use crate::events::{EdgeSelected, NodeFinished, NodeKind as EvKind, NodeStarted};
use crate::exec::context::ExecOutcome;
use crate::failure::FailureCode;

/// A router's mode as the executor dispatches on it.
pub(super) enum Mode<'n> {
    Condition,
    RoundRobin,
    FanOutAll,
    Llm,
    /// Anything the check did not let through.
    Other(&'n str),
}

/// The mode of `node` (`fan_out_all` when unset, like the parser's default).
pub(super) fn mode(node: &Node) -> Mode<'_> {
    match node.router_mode.as_ref().map(|m| m.value.as_str()) {
        Some("condition") => Mode::Condition,
        Some("round_robin") => Mode::RoundRobin,
        Some("fan_out_all") | None => Mode::FanOutAll,
        Some("llm") => Mode::Llm,
        Some(other) => Mode::Other(other),
    }
}

impl Engine<'_> {
    /// The iteration of the next `node_started` of `id`.
    pub(super) fn next_iteration(&mut self, id: &str) -> u64 {
        let it = self.st.node_iterations.entry(id.to_string()).or_insert(0);
        let n = *it;
        *it += 1;
        n
    }

    /// `mode: condition`: the output is the input unchanged; counted as one iteration with no tokens.
    pub(super) fn condition_router(&mut self, node: &Node, input: Value) -> Done {
        let id = node.name.value.as_str();
        let iteration = self.next_iteration(id);
        let mut ev = NodeStarted::in_process(id, EvKind::Router, iteration);
        ev.mode = Some("condition".into());
        self.emit(ev);
        self.st.usage.iterations += 1;
        Done {
            output: input,
            tokens: None,
            cost_usd: None,
            duration_ms: 0,
        }
    }

    /// `mode: round_robin`: the next unconditional edge in turn; the outputs of the other candidates are
    /// forgotten. No budget check, no iteration, no checkpoint here, and no loop accounting on the edge.
    #[allow(clippy::result_large_err)]
    pub(super) fn round_robin(&mut self, node: &Node) -> Result<String, ExecOutcome> {
        let id = node.name.value.clone();
        let input = self.build_input(&id);
        let wf = self.wf;
        let candidates: Vec<_> = wf
            .edges
            .iter()
            .filter(|e| e.from.value == id && e.condition.is_none())
            .collect();
        if candidates.is_empty() {
            return Err(self.fail_code(
                FailureCode::ExecutionFailed,
                format!("round_robin router '{id}' has no outgoing edges"),
                &id,
            ));
        }
        let i = self.st.round_robin.get(&id).copied().unwrap_or(0);
        let n = candidates.len() as u64;
        let selected = candidates[usize::try_from(i % n).unwrap_or(0)];
        self.st.round_robin.insert(id.clone(), i + 1);
        for c in &candidates {
            if c.to.value != selected.to.value {
                self.st.outputs.remove(&c.to.value);
            }
        }
        let iteration = self.next_iteration(&id);
        let mut ev = NodeStarted::in_process(id.clone(), EvKind::Router, iteration);
        ev.mode = Some("round_robin".into());
        ev.round_robin_index = Some(i);
        ev.selected_target = Some(selected.to.value.clone());
        self.emit(ev);
        self.st.outputs.insert(id.clone(), input);
        self.emit(NodeFinished::terminal(id.clone()));
        self.emit(EdgeSelected {
            from: id,
            to: selected.to.value.clone(),
            condition: None,
            negated: None,
            expression: None,
            loop_name: None,
            iteration: None,
            round_robin_index: Some(i),
        });
        Ok(selected.to.value.clone())
    }
}
