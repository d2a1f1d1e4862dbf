//! Human nodes: the run pauses (`paused_waiting_human`) and a resume with answers continues it.
use iterion_spec::model::Node;
use serde_json::{Map, Value, json};

use super::{Done, Engine};
use crate::events::{
    HumanAnswersRecorded, HumanInputRequested, NodeKind as EvKind, NodeStarted, RunFailed, RunPaused,
    now_timestamp,
};
use crate::exec::context::ExecOutcome;
use crate::failure::FailureCode;
use crate::store::Checkpoint;

impl Engine<'_> {
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
        let interaction_id = if n > 0 {
            format!("{}_{id}_{n}", self.ctx.run_id)
        } else {
            format!("{}_{id}", self.ctx.run_id)
        };
        let record = json!({
            "id": interaction_id,
            "run_id": self.ctx.run_id,
            "node_id": id,
            "requested_at": now_timestamp(),
            "questions": questions,
        });
        if let Err(e) = self.ctx.sink.write_interaction(&interaction_id, &record) {
            self.warn(&format!(
                "node '{id}': cannot write interaction record {interaction_id}: {e}"
            ));
        }
        self.emit(HumanInputRequested {
            node_id: id.clone(),
            interaction_id: interaction_id.clone(),
            questions: questions.clone(),
            source: None,
            backend: None,
        });
        self.emit(RunPaused {});
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
        let mut record = self
            .ctx
            .sink
            .read_interaction(&interaction_id)
            .unwrap_or_else(|| {
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
        if let Err(e) = self.ctx.sink.write_interaction(&interaction_id, &record) {
            self.warn(&format!(
                "node '{}': cannot write interaction record {interaction_id}: {e}",
                cp.node_id
            ));
        }
        self.emit(HumanAnswersRecorded {
            node_id: cp.node_id.clone(),
            interaction_id,
            answers: Value::Object(answers.clone()),
        });
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
