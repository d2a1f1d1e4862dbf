//! Human nodes: the run pauses (`paused_waiting_human`) and a resume with answers continues it.
use iterion_spec::model::{Node, NodeKind};
use serde_json::{Map, Value, json};

use super::{Done, Engine};
use crate::events::{
    HumanAnswersRecorded, HumanInputRequested, NodeKind as EvKind, NodeStarted, RunFailed, RunPaused,
    now_timestamp,
};
use crate::exec::check_flow::agent_interaction;
use crate::exec::context::ExecOutcome;
use crate::exec::node::CallShape;
use crate::failure::FailureCode;
use crate::store::Checkpoint;

/// Appended to the system prompt of an agent whose interaction mode asks a person.
pub(crate) const INTERACTION_PROTOCOL: &str = "\n\n[INTERACTION PROTOCOL]\nWhen you need input, clarification or approval from a person to continue, include \"_needs_interaction\": true and \"_interaction_questions\": {\"<key>\": \"<question>\"} in your JSON output, one key per question. Do not include these fields otherwise.";

/// At most this many re-invocations in a row of an agent that keeps asking.
const MAX_INTERACTION_DEPTH: u32 = 5;

const DEFAULT_QUESTION: &str = "The backend needs your input to continue.";

fn is_agent(node: &Node) -> bool {
    matches!(node.kind, NodeKind::Agent | NodeKind::Judge)
}

impl Engine<'_> {
    /// The call shape of an agent or judge node: the interaction protocol when it may ask a person, and the
    /// session to continue when it runs again after answers.
    pub(super) fn agent_shape(&mut self, node: &Node) -> CallShape {
        let mut shape = CallShape::default();
        if is_agent(node) && agent_interaction(self.wf, node) == "human" {
            shape.system_suffix = Some(INTERACTION_PROTOCOL.to_string());
        }
        if let Some((n, session)) = self.st.resume_session.take() {
            if n == node.name.value {
                shape.resume_session = Some(session);
            } else {
                self.st.resume_session = Some((n, session));
            }
        }
        shape
    }

    /// The questions of an agent that asked through the interaction protocol (the protocol keys are removed
    /// from its output).
    pub(super) fn asks(&self, node: &Node, output: &mut Value) -> Option<Value> {
        if !is_agent(node) || agent_interaction(self.wf, node) != "human" {
            return None;
        }
        let Value::Object(o) = output else { return None };
        if o.get("_needs_interaction") != Some(&Value::Bool(true)) {
            return None;
        }
        o.remove("_needs_interaction");
        let questions = match o.remove("_interaction_questions") {
            Some(Value::Object(q)) if !q.is_empty() => Value::Object(q),
            _ => json!({"input": DEFAULT_QUESTION}),
        };
        Some(questions)
    }

    /// Pauses for an agent's questions: the checkpoint keeps the agent's input, its backend and session, so a
    /// resume with answers runs it again.
    pub(super) fn pause_delegate(
        &mut self,
        node: &Node,
        input: Value,
        questions: Value,
        done: &Done,
    ) -> ExecOutcome {
        let id = node.name.value.clone();
        if let Some(t) = done.tokens {
            self.st.usage.tokens = self.st.usage.tokens.saturating_add(t);
        }
        if let Some(c) = done.cost_usd {
            self.st.usage.cost_usd += c;
        }
        let depth = self.st.interaction_depth.get(&id).copied().unwrap_or(0) + 1;
        if depth > MAX_INTERACTION_DEPTH {
            return self.failed(
                RunFailed::new(
                    FailureCode::ExecutionFailed,
                    format!(
                        "node '{id}': exceeded interaction recursion depth ({MAX_INTERACTION_DEPTH} re-invocations in a row)"
                    ),
                )
                .node(id.clone()),
                &id,
                Some(input),
            );
        }
        let (backend, _) = crate::exec::check::node_backend(self.wf, node, &self.ctx.host_env);
        // one id per question round: the loop iteration, or the round of a chain of questions
        let n = self.loop_iteration(&id).max(u64::from(depth) - 1);
        let interaction_id = self.request_input(&id, n, &questions, Some(&backend));
        let mut checkpoint = self.st.checkpoint(&id, Some(input));
        checkpoint.interaction_id = Some(interaction_id);
        checkpoint.interaction_questions = Some(questions);
        checkpoint.backend_name = Some(backend);
        checkpoint.backend_session_id = done
            .output
            .get("_session_id")
            .and_then(Value::as_str)
            .map(str::to_string);
        checkpoint.interaction_depth = depth;
        ExecOutcome::Paused { checkpoint }
    }

    /// Records the answers to an agent's questions; returns the agent's input with the answers merged in as
    /// top-level keys (it runs again with them, continuing its session).
    pub(super) fn answer_delegate(&mut self, cp: &Checkpoint, answers: Map<String, Value>) -> Value {
        let interaction_id = cp.interaction_id.clone().unwrap_or_default();
        self.record_answers(cp, &interaction_id, &answers);
        if let Some(s) = &cp.backend_session_id {
            self.st.resume_session = Some((cp.node_id.clone(), s.clone()));
        }
        let mut input = match cp.pending_input.clone() {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        input.extend(answers);
        Value::Object(input)
    }

    /// The answered interaction record and `human_answers_recorded`.
    fn record_answers(&mut self, cp: &Checkpoint, interaction_id: &str, answers: &Map<String, Value>) {
        let mut record = self.ctx.sink.read_interaction(interaction_id).unwrap_or_else(|| {
            json!({
                "id": interaction_id,
                "run_id": self.ctx.run_id,
                "node_id": cp.node_id,
                "questions": cp.interaction_questions.clone().unwrap_or(Value::Null),
            })
        });
        if let Value::Object(m) = &mut record {
            m.insert("answered_at".into(), Value::from(now_timestamp()));
            m.insert("answers".into(), Value::Object(answers.clone()));
        }
        if let Err(e) = self.ctx.sink.write_interaction(interaction_id, &record) {
            self.warn(&format!(
                "node '{}': cannot write interaction record {interaction_id}: {e}",
                cp.node_id
            ));
        }
        self.emit(HumanAnswersRecorded {
            node_id: cp.node_id.clone(),
            interaction_id: interaction_id.to_string(),
            answers: Value::Object(answers.clone()),
        });
    }

    /// Asks for input: the interaction record (`<run>_<node>[_<n>]`), `human_input_requested` (from an agent
    /// when `backend` is given) and `run_paused`. Returns the interaction id.
    fn request_input(&mut self, id: &str, n: u64, questions: &Value, backend: Option<&str>) -> String {
        let interaction_id = if n > 0 {
            format!("{}_{id}_{n}", self.ctx.run_id)
        } else {
            format!("{}_{id}", self.ctx.run_id)
        };
        let mut record = json!({
            "id": interaction_id,
            "run_id": self.ctx.run_id,
            "node_id": id,
            "requested_at": now_timestamp(),
            "questions": questions,
        });
        if let (Some(b), Value::Object(m)) = (backend, &mut record) {
            m.insert("source".into(), json!("delegate"));
            m.insert("backend".into(), json!(b));
        }
        if let Err(e) = self.ctx.sink.write_interaction(&interaction_id, &record) {
            self.warn(&format!(
                "node '{id}': cannot write interaction record {interaction_id}: {e}"
            ));
        }
        self.emit(HumanInputRequested {
            node_id: id.to_string(),
            interaction_id: interaction_id.clone(),
            questions: questions.clone(),
            source: backend.map(|_| "delegate".to_string()),
            backend: backend.map(str::to_string),
        });
        self.emit(RunPaused {});
        interaction_id
    }

    /// The loop iteration of `node` for its interaction id: the highest counter of the loops whose body holds it.
    fn loop_iteration(&self, node: &str) -> u64 {
        self.bodies
            .iter()
            .filter(|(_, body)| body.contains(node))
            .filter_map(|(name, _)| self.st.loop_counters.get(name).copied())
            .max()
            .unwrap_or(0)
    }

    /// Pauses at human node `node`: the interaction record, `human_input_requested`, `run_paused`, and the
    /// checkpoint at the node with the questions.
    pub(super) fn pause(&mut self, node: &Node, pending: Option<Value>) -> ExecOutcome {
        let id = node.name.value.clone();
        let iteration = self.next_iteration(&id);
        self.emit(NodeStarted::in_process(id.clone(), EvKind::Human, iteration));
        let questions = pending.unwrap_or_else(|| self.build_input(&id));
        let n = self.loop_iteration(&id);
        let interaction_id = self.request_input(&id, n, &questions, None);
        let mut checkpoint = self.st.checkpoint(&id, None);
        checkpoint.interaction_id = Some(interaction_id);
        checkpoint.interaction_questions = Some(questions);
        ExecOutcome::Paused { checkpoint }
    }

    /// Resumes a paused run: the answers become the human node's output (verbatim), then edge selection.
    /// Returns the next node.
    #[allow(clippy::result_large_err)]
    pub(super) fn answer(
        &mut self,
        cp: &Checkpoint,
        answers: Map<String, Value>,
    ) -> Result<String, ExecOutcome> {
        let wf = self.wf;
        let Some(node) = wf.node(&cp.node_id) else {
            return Err(ExecOutcome::Failed {
                failure: RunFailed::new(
                    FailureCode::NodeNotFound,
                    format!(
                        "node '{}' is not part of workflow '{}'",
                        cp.node_id, wf.name.value
                    ),
                )
                .node(cp.node_id.clone()),
                checkpoint: None,
            });
        };
        let interaction_id = cp.interaction_id.clone().unwrap_or_default();
        self.record_answers(cp, &interaction_id, &answers);
        self.finish(
            node,
            Done {
                output: Value::Object(answers),
                tokens: None,
                cost_usd: None,
                duration_ms: 0,
            },
        )
    }
}
