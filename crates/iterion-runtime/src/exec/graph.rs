//! The graph executor (10.3, 10.6–10.10).
use super::{ExecContext, ExecOutcome};
use crate::events::RunFailed;
use crate::failure::FailureCode;
use crate::store::Checkpoint;
use iterion_spec::model::Workflow;

/// Executes the workflow graph from its entry node (or the checkpoint's node) to a terminal outcome.
pub async fn execute(workflow: &Workflow, ctx: ExecContext) -> ExecOutcome {
    let entry = workflow
        .entry
        .as_ref()
        .map(|e| e.value.clone())
        .unwrap_or_default();
    ExecOutcome::Failed {
        failure: RunFailed::new(FailureCode::InternalError, "workflow execution is not built yet"),
        checkpoint: Some(ctx.resume.unwrap_or_else(|| Checkpoint::stub(entry, ctx.vars))),
    }
}
