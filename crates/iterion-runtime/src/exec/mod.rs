//! Workflow execution (sections 5 and 10 of the runtime specification): the executability check, vars,
//! node input, tool nodes, `claw` agent and judge nodes (through the claw runner, [`claw`], with session replay
//! and compaction after a context overflow), `claude_code` ones (through the agent CLI, with sessions and MCP
//! servers, [`mcp`]) and `codex` ones (the host codex CLI, never inside a sandbox, [`codex`]), edge selection,
//! loops, budget, recovery and terminal nodes.
//!
//! The run lifecycle owns everything around the graph (run record, sandbox setup, `run_started`, the final
//! status transition with `run_finished` / `run_failed` / `run_cancelled`, cleanup). It calls [`execute`]
//! with an [`ExecContext`] and maps the returned [`ExecOutcome`] to the final status.
//!
//! What the executor emits through [`RunSink::emit`]: `node_started`, `node_finished`, `edge_selected`,
//! `node_recovery`, `tool_started`, `tool_called`, `tool_error`, `delegate_started`, `delegate_finished`,
//! `delegate_error`, `budget_warning`, `budget_exceeded` and `artifact_written`. It never emits run-level
//! events: the outcome carries a ready [`RunFailed`](crate::events::RunFailed) for the lifecycle to emit after writing the status.
//!
//! Not built in this version, refused or reported rather than skipped:
//!
//! - output schemas are passed to the agent (the claw runner checks its answer and makes one reformat pass)
//!   but the runtime does not enforce them (`SCHEMA_VALIDATION` is reserved, 10.4);
//! - `Retry-After` is not known from the agent CLI, so `RATE_LIMITED` uses the fixed 10 s / 30 s / 60 s;
//! - a templated loop cap is re-evaluated after a resume (the checkpoint has no field for it), and
//!   `node_started.iteration` counts executions of the current invocation.
//!
//! ```no_run
//! # async fn demo(workflow: &iterion_spec::model::Workflow, ctx: iterion_runtime::exec::ExecContext) {
//! use iterion_runtime::exec::{ExecOutcome, execute};
//! match execute(workflow, ctx).await {
//!     ExecOutcome::Finished { .. } => { /* status finished, emit run_finished */ }
//!     ExecOutcome::Failed { failure, checkpoint } => { /* failed / failed_resumable by failure.code */ }
//!     ExecOutcome::Cancelled { checkpoint } => { /* status cancelled */ }
//!     ExecOutcome::Paused { checkpoint } => { /* status paused_waiting_human, resumable with answers */ }
//! }
//! # }
//! ```

pub(crate) mod agent;
pub mod answers;
mod backends;
pub mod check;
pub(crate) mod check_flow;
pub mod claw;
pub mod codex;
mod context;
pub mod elf_arch;
mod graph;
pub mod mcp;
mod node;
pub mod output;
pub mod render;
mod tool;
pub mod topology;
pub mod vars;
pub mod worktree;

pub use agent::{CLAUDE_ENV, PROBE_TIMEOUT, agent_cli_nodes, agent_cli_program, probe_agent_cli};
pub use check::check_executable;
pub use context::{
    ExecBounds, ExecContext, ExecOutcome, NodeSandbox, NodeSandboxes, RunSink, SandboxUnavailable, Shell,
};
pub use graph::execute;
pub use vars::{VarInputs, parse_var, resolve_vars};
pub use worktree::{
    FinishedWorktree, OBJECTS_TARGET, SourceRepo, Worktree, checkout_changes, create_worktree,
    finish_worktree, host_git_dir, remove_worktree, reopen_worktree, source_repo,
};
