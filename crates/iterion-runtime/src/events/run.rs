//! Payloads of the run, node, tool, delegate, budget and artifact events.
use serde::Serialize;
use serde_json::Value;

use super::data::EventData;
use super::kinds::*;
use crate::failure::{FailureCode, FailurePhase};
use crate::status::RunStatus;

/// `run_started` (4.13).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunStarted {
    /// Workflow name.
    pub workflow: String,
    /// Workflow file.
    pub file: String,
    /// Whether the run scope is sandboxed.
    pub sandboxed: bool,
    /// Driver name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
}
impl EventData for RunStarted {
    const TYPE: &'static str = "run_started";
}

/// `run_resumed` (section 9), before `run_started` of the resumed invocation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResumed {
    /// Previous status.
    pub resumed_from: RunStatus,
    /// Node executed again.
    pub restart_node: String,
    /// Code of the previous failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<FailureCode>,
}
impl EventData for RunResumed {
    const TYPE: &'static str = "run_resumed";
}

/// `run_finished`: `done` reached.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFinished {
    /// Duration in milliseconds.
    pub duration_ms: u64,
}
impl EventData for RunFinished {
    const TYPE: &'static str = "run_finished";
}

/// `run_failed`: any failure. Build it with [`RunFailed::new`] so `resumable` follows the code's class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFailed {
    /// Human-readable error.
    pub error: String,
    /// Failure code.
    pub code: FailureCode,
    /// Whether the code is of class resumable.
    pub resumable: bool,
    /// Setup phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<FailurePhase>,
    /// The bound that expired (`SANDBOX_SETUP_TIMEOUT`), e.g. `100ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// The offending field (`SANDBOX_SPEC_INVALID`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Node involved (for `FAIL_NODE_REACHED`: the source node of the edge to `fail`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}
impl EventData for RunFailed {
    const TYPE: &'static str = "run_failed";
}

impl RunFailed {
    /// A failure with `resumable` derived from the code's class.
    pub fn new(code: FailureCode, error: impl Into<String>) -> RunFailed {
        RunFailed {
            error: error.into(),
            code,
            resumable: code.is_resumable(),
            phase: None,
            timeout: None,
            detail: None,
            hint: None,
            node_id: None,
        }
    }

    /// Sets `phase`.
    pub fn phase(mut self, phase: FailurePhase) -> Self {
        self.phase = Some(phase);
        self
    }

    /// Sets `timeout`.
    pub fn timeout(mut self, timeout: impl Into<String>) -> Self {
        self.timeout = Some(timeout.into());
        self
    }

    /// Sets `detail`.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Sets `hint`.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Sets `node_id`.
    pub fn node(mut self, node_id: impl Into<String>) -> Self {
        self.node_id = Some(node_id.into());
        self
    }
}

/// `run_cancelled`: cancellation (`code` is always `CANCELLED`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunCancelled {
    /// Why (`signal SIGINT`).
    pub reason: String,
    /// Always [`FailureCode::Cancelled`].
    pub code: FailureCode,
}
impl EventData for RunCancelled {
    const TYPE: &'static str = "run_cancelled";
}

impl RunCancelled {
    /// A cancellation with code `CANCELLED`.
    pub fn new(reason: impl Into<String>) -> RunCancelled {
        RunCancelled {
            reason: reason.into(),
            code: FailureCode::Cancelled,
        }
    }
}

/// `node_started`: before each node (for `done`/`fail` only `iteration`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeStarted {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Kind (absent for `done`/`fail`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<NodeKind>,
    /// Execution count of this node in the run, from 0.
    pub iteration: u64,
    /// PlacementKind (absent for `done`/`fail` and for nodes that run in the iterion process).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementKind>,
    /// Router mode (routers only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Round-robin counter used for this selection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round_robin_index: Option<u64>,
    /// Target a round-robin router selected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selected_target: Option<String>,
}
impl EventData for NodeStarted {
    const TYPE: &'static str = "node_started";
    scoped_node_id!();
}

impl NodeStarted {
    /// An executing node.
    pub fn new(node_id: impl Into<String>, kind: NodeKind, iteration: u64, placement: PlacementKind) -> Self {
        NodeStarted {
            node_id: node_id.into(),
            kind: Some(kind),
            iteration,
            placement: Some(placement),
            mode: None,
            round_robin_index: None,
            selected_target: None,
        }
    }

    /// A node that runs in the iterion process (router, compute, human): no placement.
    pub fn in_process(node_id: impl Into<String>, kind: NodeKind, iteration: u64) -> Self {
        NodeStarted {
            node_id: node_id.into(),
            kind: Some(kind),
            iteration,
            placement: None,
            mode: None,
            round_robin_index: None,
            selected_target: None,
        }
    }

    /// The `done` or `fail` node.
    pub fn terminal(node_id: impl Into<String>, iteration: u64) -> Self {
        NodeStarted {
            node_id: node_id.into(),
            kind: None,
            iteration,
            placement: None,
            mode: None,
            round_robin_index: None,
            selected_target: None,
        }
    }
}

/// `node_finished`: after each successful node (terminal nodes: empty `data`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeFinished {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Output (absent for `done`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Duration in milliseconds (absent for `done`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Tokens reported by an agent.
    #[serde(rename = "_tokens", skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Cost reported by an agent.
    #[serde(rename = "_cost_usd", skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The error of a node that failed inside a fan-out branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The route an `llm` router selected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selected_route: Option<String>,
    /// The routes a multi-pick `llm` router selected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selected_routes: Option<Vec<String>>,
    /// Why an `llm` router selected them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}
impl EventData for NodeFinished {
    const TYPE: &'static str = "node_finished";
    scoped_node_id!();
}

impl NodeFinished {
    /// An executing node's success.
    pub fn new(node_id: impl Into<String>, output: Value, duration_ms: u64) -> Self {
        NodeFinished {
            node_id: node_id.into(),
            output: Some(output),
            duration_ms: Some(duration_ms),
            tokens: None,
            cost_usd: None,
            error: None,
            selected_route: None,
            selected_routes: None,
            reasoning: None,
        }
    }

    /// The `done` node (empty `data`).
    pub fn terminal(node_id: impl Into<String>) -> Self {
        NodeFinished {
            node_id: node_id.into(),
            output: None,
            duration_ms: None,
            tokens: None,
            cost_usd: None,
            error: None,
            selected_route: None,
            selected_routes: None,
            reasoning: None,
        }
    }
}

/// `edge_selected`: after edge selection (run-scoped).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EdgeSelected {
    /// Source node.
    pub from: String,
    /// Target node.
    pub to: String,
    /// `when` field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// `when not`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub negated: Option<bool>,
    /// `when "EXPR"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
    /// Loop name.
    #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
    pub loop_name: Option<String>,
    /// Loop counter after taking the edge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u64>,
    /// Round-robin counter of the selection (edges leaving a round-robin router).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round_robin_index: Option<u64>,
}
impl EventData for EdgeSelected {
    const TYPE: &'static str = "edge_selected";
}

/// `node_recovery`: before each retry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeRecovery {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Error code being retried.
    pub code: FailureCode,
    /// Why the retry happens.
    pub reason: String,
    /// Retry number, from 1.
    pub attempt: u32,
    /// Delay before the retry.
    pub delay_ms: u64,
    /// The error.
    pub error: String,
}
impl EventData for NodeRecovery {
    const TYPE: &'static str = "node_recovery";
    scoped_node_id!();
}

/// `tool_started`: tool node (and builtin tools reported by the runner).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolStarted {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// `shell:<id>` or `script:<language>:<id>`.
    pub tool: String,
    /// Byte length of the rendered command or script.
    pub input_size: u64,
}
impl EventData for ToolStarted {
    const TYPE: &'static str = "tool_started";
    scoped_node_id!();
}

/// `tool_called`: success (exactly one per tool-node execution).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCalled {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Tool name.
    pub tool: String,
    /// Input size in bytes.
    pub input_size: u64,
    /// Duration in milliseconds.
    pub duration_ms: u64,
    /// Exit code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}
impl EventData for ToolCalled {
    const TYPE: &'static str = "tool_called";
    scoped_node_id!();
}

/// `tool_error`: failure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolError {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Tool name.
    pub tool: String,
    /// The error.
    pub error: String,
    /// Exit code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Duration in milliseconds.
    pub duration_ms: u64,
}
impl EventData for ToolError {
    const TYPE: &'static str = "tool_error";
    scoped_node_id!();
}

/// `delegate_started`: agent/judge start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DelegateStarted {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Backend (`claw`, `claude_code`).
    pub backend: String,
    /// PlacementKind.
    pub placement: PlacementKind,
    /// How the backend is driven.
    pub via: DelegateVia,
}
impl EventData for DelegateStarted {
    const TYPE: &'static str = "delegate_started";
    scoped_node_id!();
}

/// `delegate_finished`: agent/judge success.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DelegateFinished {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Backend.
    pub backend: String,
    /// Tokens used.
    pub tokens: u64,
    /// Cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Duration in milliseconds.
    pub duration_ms: u64,
}
impl EventData for DelegateFinished {
    const TYPE: &'static str = "delegate_finished";
    scoped_node_id!();
}

/// `delegate_error`: agent/judge failure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DelegateError {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Backend.
    pub backend: String,
    /// The error.
    pub error: String,
}
impl EventData for DelegateError {
    const TYPE: &'static str = "delegate_error";
    scoped_node_id!();
}

/// `budget_warning` (10.8): a dimension reached 80 % of its limit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetWarning {
    /// `max_duration`, `max_tokens`, `max_cost_usd` or `max_iterations`.
    pub dimension: String,
    /// Amount used.
    pub used: BudgetValue,
    /// The limit.
    pub limit: BudgetValue,
}
impl EventData for BudgetWarning {
    const TYPE: &'static str = "budget_warning";
}

/// `budget_exceeded` (10.8): a dimension reached its limit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetExceeded {
    /// Dimension.
    pub dimension: String,
    /// Amount used.
    pub used: BudgetValue,
    /// The limit.
    pub limit: BudgetValue,
}
impl EventData for BudgetExceeded {
    const TYPE: &'static str = "budget_exceeded";
}

/// `artifact_written`: a node with `publish:`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArtifactWritten {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// Artifact name.
    pub publish: String,
    /// Version written.
    pub version: u64,
}
impl EventData for ArtifactWritten {
    const TYPE: &'static str = "artifact_written";
    scoped_node_id!();
}

/// `branch_started`: a fan-out branch begins at its start node (the line's `node_id`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BranchStarted {
    /// The branch's start node.
    #[serde(skip)]
    pub node_id: String,
}
impl EventData for BranchStarted {
    const TYPE: &'static str = "branch_started";
    scoped_node_id!();
}

/// `branch_finished`: always the last event of a branch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BranchFinished {
    /// The branch's start node.
    #[serde(skip)]
    pub node_id: String,
    /// Why the branch failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The convergence node the branch stopped at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_node: Option<String>,
}
impl EventData for BranchFinished {
    const TYPE: &'static str = "branch_finished";
    scoped_node_id!();
}

/// One failed branch in `join_ready`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct FailedBranch {
    /// Branch id.
    pub branch_id: String,
    /// Its error.
    pub error: String,
}

/// `join_ready`: every branch of a fan-out reported; execution continues at the convergence node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JoinReady {
    /// The convergence node.
    #[serde(skip)]
    pub node_id: String,
    /// `wait_all` or `best_effort`.
    pub strategy: String,
    /// Failed branches (best_effort).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_branches: Option<Vec<FailedBranch>>,
    /// Every branch ended at `done` (best_effort).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminal_join: Option<bool>,
    /// Number of branches (terminal join).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branches_total: Option<u64>,
}
impl EventData for JoinReady {
    const TYPE: &'static str = "join_ready";
    scoped_node_id!();
}

/// `human_input_requested`: a human node (or an agent asking through the interaction protocol) needs answers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HumanInputRequested {
    /// The node.
    #[serde(skip)]
    pub node_id: String,
    /// `<run id>_<node id>[_<n>]`.
    pub interaction_id: String,
    /// The questions (key → context or question).
    pub questions: Value,
    /// `delegate` when an agent asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The agent's backend when an agent asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
}
impl EventData for HumanInputRequested {
    const TYPE: &'static str = "human_input_requested";
    scoped_node_id!();
}

/// `run_paused`: the run waits for human answers (status `paused_waiting_human`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunPaused {}
impl EventData for RunPaused {
    const TYPE: &'static str = "run_paused";
}

/// `human_answers_recorded`: the answers a resume supplied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HumanAnswersRecorded {
    /// The human node.
    #[serde(skip)]
    pub node_id: String,
    /// The interaction answered.
    pub interaction_id: String,
    /// The answers, verbatim.
    pub answers: Value,
}
impl EventData for HumanAnswersRecorded {
    const TYPE: &'static str = "human_answers_recorded";
    scoped_node_id!();
}
