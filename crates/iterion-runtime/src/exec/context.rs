//! What the executor is handed and returns: the context, the sandbox and sink traits, the outcome.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use iterion_driver::Run;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::attachments::AttachmentValues;
use crate::events::{Event, PlacementKind, RunFailed};
use crate::failure::{FailureCode, FailurePhase};
use crate::store::Checkpoint;
use crate::store::LogLevel;

/// The shell tool nodes run with (probe of 4.12 in a container, `bash` on PATH on the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shell {
    /// `bash -c`.
    #[default]
    Bash,
    /// `sh -c` (the image has no bash).
    Sh,
}

impl Shell {
    /// The program name.
    pub fn program(self) -> &'static str {
        match self {
            Shell::Bash => "bash",
            Shell::Sh => "sh",
        }
    }
}

impl Shell {
    /// The shell of host-placed tool nodes: `bash` when an executable `bash` is on the given `PATH` (the
    /// launching environment's), else `sh` (10.4 step 3).
    pub fn for_host(host_env: &BTreeMap<String, String>) -> Shell {
        use std::os::unix::fs::PermissionsExt;
        let path = host_env.get("PATH").map(String::as_str).unwrap_or_default();
        let found = std::env::split_paths(path).any(|dir| {
            std::fs::metadata(dir.join("bash"))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
        if found { Shell::Bash } else { Shell::Sh }
    }
}

/// Where and how one node executes: the sandbox handle plus the facts the executor needs about it.
#[derive(Debug, Clone)]
pub struct NodeSandbox {
    /// The `Run` to exec in: the run container, the node's own container, or a `NoopDriver` run for host nodes.
    pub run: Arc<dyn Run>,
    /// `host`, `run` or `own` (reported in `node_started` and `delegate_started`).
    pub placement: PlacementKind,
    /// Shell for tool nodes.
    pub shell: Shell,
    /// Working directory of execs: the workspace folder in a container, the work dir on the host.
    pub workdir: String,
    /// The host work dir when it is the same directory as `workdir` seen from the host (bind-mounted or
    /// host placement): script files are written there directly. `None` (kubernetes): scripts are written
    /// through an exec inside the sandbox.
    pub host_work_dir: Option<PathBuf>,
    /// The program that answers `__claw-runner` here: the configured runner on the host,
    /// `/.iterion-claw` (the runner bound a second time, see `claw::CONTAINER_RUNNER_EXEC_PATH`) when a runner is bound into the container, `iterion` (the image's own)
    /// otherwise. `None`: claw nodes cannot run here (`RUNNER_INCOMPATIBLE`).
    pub claw_runner: Option<String>,
    /// Provider key → placeholder of the run's proxy: a model backend here gets the placeholder instead of
    /// the host's key (empty on the host, or when the operator keeps provider keys direct).
    pub key_placeholders: Arc<std::collections::BTreeMap<String, String>>,
}

/// Why a node's sandbox could not be provided (a node container that failed to start, 5.2).
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxUnavailable {
    /// Failure code of section 3.
    pub code: FailureCode,
    /// Human-readable error.
    pub error: String,
    /// Setup phase (`node_container` for node containers).
    pub phase: Option<FailurePhase>,
    /// Remediation hint.
    pub hint: Option<String>,
}

/// Gives every node its sandbox; implemented by the lifecycle from the `SandboxPlan` placements.
#[async_trait]
pub trait NodeSandboxes: Send + Sync {
    /// The sandbox of `node_id`. Node containers (`own`) are started on the node's first execution and
    /// reused for later executions of any node with the same spec key (5.2).
    async fn sandbox_for(&self, node_id: &str) -> Result<NodeSandbox, SandboxUnavailable>;

    /// The node's exec-scope entries that the lifecycle controls, for one execution of the node: while the
    /// egress proxy is active, the proxy URLs with a credential minted for this execution (the node's policy),
    /// valid until [`NodeSandboxes::node_ended`]; empty otherwise. The executor adds `ITERION_RUN_ID`,
    /// `ITERION_NODE_ID` and, for agent nodes, the backend credentials.
    fn exec_env(&self, node_id: &str) -> Vec<(String, String)>;

    /// Called after every execution of a node (success, failure, cancellation or deadline), before the next
    /// one starts: revokes the execution's credential at once; the processes it left in its sandbox are
    /// killed by the next [`NodeSandboxes::step_starting`] (or by the teardown when no step follows).
    async fn node_ended(&self, _node_id: &str, _sandbox: &NodeSandbox) {}

    /// Called before every execution of a node (each attempt), after [`NodeSandboxes::sandbox_for`] and
    /// before [`NodeSandboxes::exec_env`]: kills what earlier steps left running in their sandboxes.
    async fn step_starting(&self, _node_id: &str) {}

    /// Called after an execution that ran while other nodes (fan-out siblings) may still be running in the
    /// same sandbox: revokes the execution's credential only. The processes left behind are killed by a
    /// [`NodeSandboxes::node_ended`] once every branch has reported.
    async fn node_ended_concurrently(&self, _node_id: &str, _sandbox: &NodeSandbox) {}

    /// Whether these nodes would get credentials of different reach: the egress proxy is active and their
    /// effective network policies are not all the same. Fan-out branches over such nodes run one at a time,
    /// each execution ended by [`NodeSandboxes::node_ended`], so no process of one node shares a sandbox with
    /// another node's credential.
    fn policies_differ(&self, _node_ids: &[&str]) -> bool {
        false
    }
}

/// Where the executor reports: events, log lines, checkpoints and artifacts. Implemented by the lifecycle
/// over the run store.
pub trait RunSink: Send + Sync {
    /// Appends an event. A failed append is the sink's business: the run's sink records it, cancels the run
    /// and ends it `STORE_WRITE_FAILED`.
    fn emit(&self, event: Event);
    /// Writes one `run.log` line (never a secret value: the executor only logs names).
    fn log(&self, level: LogLevel, message: &str);
    /// Persists the checkpoint after every completed node (into `run.json`).
    fn checkpoint(&self, checkpoint: &Checkpoint);
    /// Writes version `version` of artifact `name` published by `node_id`; an error is logged and the run
    /// continues.
    fn write_artifact(&self, node_id: &str, name: &str, version: u64, data: &Value) -> Result<(), String>;
    /// Stores the latest claw session snapshot of `node_id` (`sessions/<node id>.json`); an error is the sink's
    /// business, like a failed artifact write.
    fn write_session(&self, node_id: &str, snapshot: &Value) -> Result<(), String>;
    /// Reads the snapshot stored by [`RunSink::write_session`] (replayed to a claw node retried after a context
    /// overflow).
    fn read_session(&self, _node_id: &str) -> Option<Value> {
        None
    }
    /// Writes the interaction record `interactions/<id>.json` of a human pause (or its answered form).
    fn write_interaction(&self, _id: &str, _record: &Value) -> Result<(), String> {
        Err("this sink does not store interaction records".into())
    }
    /// Reads an interaction record written by [`RunSink::write_interaction`].
    fn read_interaction(&self, _id: &str) -> Option<Value> {
        None
    }
}

/// Timing knobs of the executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExecBounds {
    /// `--timeout`: deadline of this invocation → `TIMEOUT`.
    pub timeout: Option<Duration>,
    /// Upper bound applied to every retry delay of 10.10 (the reported `delay_ms` keeps the specified value).
    /// `None` waits the specified delays; tests set a small cap.
    pub retry_delay_cap: Option<Duration>,
}

/// Everything [`execute`] needs besides the workflow.
#[derive(Clone)]
#[non_exhaustive]
pub struct ExecContext {
    /// The run id (`{{run.id}}`, `ITERION_RUN_ID`).
    pub run_id: String,
    /// Resolved, typed vars ([`resolve_vars`]); ignored when resuming (the checkpoint's vars are used).
    pub vars: serde_json::Map<String, Value>,
    /// The launching process environment (the library never reads `std::env`).
    pub host_env: BTreeMap<String, String>,
    /// Sandbox of each node.
    pub sandboxes: Arc<dyn NodeSandboxes>,
    /// Events, log, checkpoints, artifacts.
    pub sink: Arc<dyn RunSink>,
    /// Cancellation (signal or caller): the current exec is terminated, the outcome is `Cancelled`.
    pub cancel: CancellationToken,
    /// Checkpoint to resume from (`node_id` is executed again).
    pub resume: Option<Checkpoint>,
    /// Deadlines and retry timing.
    pub bounds: ExecBounds,
    /// What `{{attachments.…}}` renders to (empty values for every declared attachment by default).
    pub attachments: Arc<AttachmentValues>,
    /// The answers to the interaction a `paused_waiting_human` checkpoint waits for.
    pub answers: Option<serde_json::Map<String, Value>>,
}

impl std::fmt::Debug for ExecContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecContext")
            .field("run_id", &self.run_id)
            .field("vars", &self.vars.keys().collect::<Vec<_>>())
            .field("host_env_names", &self.host_env.len())
            .field("resume", &self.resume.as_ref().map(|c| &c.node_id))
            .field("bounds", &self.bounds)
            .finish()
    }
}

impl ExecContext {
    /// A context for a fresh run with default bounds.
    pub fn new(
        run_id: impl Into<String>,
        vars: serde_json::Map<String, Value>,
        host_env: BTreeMap<String, String>,
        sandboxes: Arc<dyn NodeSandboxes>,
        sink: Arc<dyn RunSink>,
    ) -> Self {
        ExecContext {
            run_id: run_id.into(),
            vars,
            host_env,
            sandboxes,
            sink,
            cancel: CancellationToken::new(),
            resume: None,
            bounds: ExecBounds::default(),
            attachments: Arc::default(),
            answers: None,
        }
    }

    /// Sets the attachment values.
    pub fn with_attachments(mut self, attachments: AttachmentValues) -> Self {
        self.attachments = Arc::new(attachments);
        self
    }

    /// Sets the cancellation token.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Resumes from a checkpoint.
    pub fn with_resume(mut self, checkpoint: Checkpoint) -> Self {
        self.resume = Some(checkpoint);
        self
    }

    /// Answers the interaction the resumed checkpoint waits for.
    pub fn with_answers(mut self, answers: serde_json::Map<String, Value>) -> Self {
        self.answers = Some(answers);
        self
    }

    /// Sets the bounds.
    pub fn with_bounds(mut self, bounds: ExecBounds) -> Self {
        self.bounds = bounds;
        self
    }
}

/// How execution ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecOutcome {
    /// `done` was reached (the executor emitted `node_started` / `node_finished` for `done`); status
    /// `finished`, the lifecycle emits `run_finished`.
    Finished {
        /// Time since execution started.
        duration: Duration,
    },
    /// The run failed: the `fail` node (`FAIL_NODE_REACHED`, deterministic), a node error after its retries,
    /// no outgoing edge, loop exhausted, budget exceeded, timeout, a node sandbox that could not start, ….
    /// The status follows `failure.code` (`failed` or `failed_resumable`).
    Failed {
        /// The `run_failed` data to emit after writing the status.
        failure: RunFailed,
        /// Checkpoint to keep (`Some` for resumable codes; at the node to re-execute).
        checkpoint: Option<Checkpoint>,
    },
    /// A human node (or an agent through the interaction protocol) waits for answers; status
    /// `paused_waiting_human`, resumable only with answers.
    Paused {
        /// Checkpoint at the human node, with `interaction_id` and `interaction_questions`.
        checkpoint: Checkpoint,
    },
    /// Cancelled: the current exec was terminated; status `cancelled`.
    Cancelled {
        /// Checkpoint at the node that was running (or next).
        checkpoint: Checkpoint,
    },
}

impl ExecOutcome {
    /// The failure code, if the run did not finish.
    pub fn failure_code(&self) -> Option<FailureCode> {
        match self {
            ExecOutcome::Finished { .. } | ExecOutcome::Paused { .. } => None,
            ExecOutcome::Failed { failure, .. } => Some(failure.code),
            ExecOutcome::Cancelled { .. } => Some(FailureCode::Cancelled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_shell_follows_path() {
        let dir = tempfile::tempdir().unwrap();
        let env = |p: &str| BTreeMap::from([("PATH".to_string(), p.to_string())]);
        let empty = dir.path().to_string_lossy().into_owned();
        assert_eq!(Shell::for_host(&env(&empty)), Shell::Sh);
        assert_eq!(Shell::for_host(&BTreeMap::new()), Shell::Sh);
        let bash = dir.path().join("bash");
        std::fs::write(&bash, "#!/bin/sh\n").unwrap();
        assert_eq!(Shell::for_host(&env(&empty)), Shell::Sh, "not executable");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bash, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            Shell::for_host(&env(&format!("/nonexistent:{empty}"))),
            Shell::Bash
        );
    }
}
