//! The inputs and result of a run invocation: configuration, launch and resume requests, outcome.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use iterion_driver::Driver;
use iterion_envdeny::SandboxEnvEntry;
use iterion_spec::devcontainer::SourceReader;
use iterion_spec::model::Workflow;
use iterion_spec::resolve::ModeChoice;
use iterion_spec::resolved::HostState;

use super::cancel::Cancel;
use super::host::{DriverChoice, HostFacts};
use super::settings::Settings;
use super::sink::Observer;
use crate::exec::ExecBounds;
use crate::failure::FailureCode;
use crate::status::RunStatus;
use crate::store::{Owner, RunId};

/// The drivers of a run: the container driver selection and the host driver (a `NoopDriver`) used for every
/// node placed on the host.
#[derive(Debug, Clone)]
pub struct Drivers {
    /// Result of driver selection.
    pub container: DriverChoice,
    /// Runs host-placed nodes (and everything when the run is unsandboxed).
    pub host: Arc<dyn Driver>,
}

/// The claw runner programs (10.5.3): what runs `__claw-runner` on the host and what is bound into containers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClawRunner {
    /// The program run as `<program> __claw-runner` for claw nodes placed on the host (the CLI passes its own
    /// executable). `None`: [`ClawRunner::container_binary`] is used on the host too.
    pub host_program: Option<PathBuf>,
    /// A Linux binary answering `__claw-runner` and `--version` that runs in the container images (the static
    /// runner embedded by `iterion-host`, or `ITERION_BIN`), bound read-only at `/usr/local/bin/iterion`.
    /// `None`: containers must ship their own `iterion` on PATH.
    pub container_binary: Option<PathBuf>,
}

impl ClawRunner {
    /// The program of host-placed claw nodes, when one is known.
    pub fn host(&self) -> Option<String> {
        self.host_program
            .as_ref()
            .or(self.container_binary.as_ref())
            .map(|p| p.to_string_lossy().into_owned())
    }
}

/// Sandbox flags of a launch (`--sandbox`, `--sandbox-host-state`, `--sandbox-default-image`,
/// `--sandbox-driver`, `--sandbox-env`).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SandboxFlags {
    /// `--sandbox`.
    pub mode: Option<ModeChoice>,
    /// `--sandbox-host-state`.
    pub host_state: Option<HostState>,
    /// `--sandbox-default-image`.
    pub default_image: Option<String>,
    /// `--sandbox-runtime`.
    pub runtime: Option<iterion_spec::resolved::OciRuntime>,
    /// `--sandbox-driver` (recorded; selection itself is done by the caller).
    pub driver: Option<String>,
    /// `--sandbox-env` entries, already parsed.
    pub operator_env: Vec<SandboxEnvEntry>,
    /// `--secret` grants, already parsed ([`crate::lifecycle::secrets::parse_secret_flag`]); a resume takes
    /// them again (values are never recorded).
    pub secrets: Vec<crate::lifecycle::secrets::SecretFlag>,
}

/// Configuration shared by every run of a runtime.
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
    /// Drivers.
    pub drivers: Drivers,
    /// The launching process environment.
    pub env: BTreeMap<String, String>,
    /// Bounds and switches read from `env`.
    pub settings: Settings,
    /// `auto` for `iterion run` / `resume`; `none` by default for library callers.
    pub builtin_default_mode: ModeChoice,
    /// Version used for the built-in default image; `None` disables it.
    pub default_image_version: Option<String>,
    /// Version recorded in `run.json`.
    pub iterion_version: String,
    /// This process.
    pub owner: Owner,
    /// Host facts (home, uid/gid, OS, data dir).
    pub host: HostFacts,
    /// Receives events and log lines.
    pub observer: Arc<dyn Observer>,
    /// Cancels the run (signal or caller).
    pub cancel: Cancel,
    /// Executor bounds (`--timeout`).
    pub exec_bounds: ExecBounds,
    /// Reads `devcontainer.json`.
    pub reader: Arc<dyn SourceReader + Send + Sync>,
    /// Signs `run.json` and is checked before a resume (none: unsigned records, no check).
    pub record_key: Option<crate::store::RecordKey>,
    /// The claw runner programs.
    pub claw_runner: ClawRunner,
    /// Build secrets given by the operator (`--sandbox-build-secret`).
    pub build_secrets: Vec<iterion_driver::BuildSecret>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("drivers", &self.drivers)
            .field("env_names", &self.env.len())
            .field("settings", &self.settings)
            .field("builtin_default_mode", &self.builtin_default_mode)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// A new run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Launch {
    /// The compiled workflow (parse, compile and the executability check are the caller's, 05 §4.0).
    pub workflow: Workflow,
    /// Absolute path of the workflow file.
    pub workflow_path: PathBuf,
    /// The file's bytes (hashed into `workflow_hash`).
    pub workflow_bytes: Vec<u8>,
    /// `--run-id`, or a new UUIDv7.
    pub run_id: Option<RunId>,
    /// The store dir.
    pub store_dir: PathBuf,
    /// Absolute host work dir.
    pub work_dir: PathBuf,
    /// Git top-level of the work dir, when any.
    pub repo_root: Option<PathBuf>,
    /// `--preset`.
    pub preset: Option<String>,
    /// `--var` arguments, split at the first `=`.
    pub vars: Vec<(String, String)>,
    /// Sandbox flags.
    pub sandbox: SandboxFlags,
    /// Attachments checked against the workflow ([`crate::attachments::check_supplied`]), copied into the run
    /// directory when the run is created.
    pub attachments: Vec<crate::attachments::CheckedAttachment>,
}

impl Launch {
    /// A launch of `workflow` read from `workflow_path` with `workflow_bytes`, storing into `store_dir`, working
    /// in `work_dir`.
    pub fn new(
        workflow: Workflow,
        workflow_path: impl Into<PathBuf>,
        workflow_bytes: Vec<u8>,
        store_dir: impl Into<PathBuf>,
        work_dir: impl Into<PathBuf>,
    ) -> Launch {
        let work_dir = work_dir.into();
        Launch {
            workflow,
            workflow_path: workflow_path.into(),
            workflow_bytes,
            run_id: None,
            store_dir: store_dir.into(),
            repo_root: Some(work_dir.clone()),
            work_dir,
            preset: None,
            vars: Vec::new(),
            sandbox: SandboxFlags::default(),
            attachments: Vec::new(),
        }
    }
}

/// A resume.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Resume {
    /// The run to resume.
    pub run_id: String,
    /// Its store dir.
    pub store_dir: PathBuf,
    /// `--file` (default: the recorded `file_path`).
    pub file: Option<PathBuf>,
    /// `--force`: accept a changed workflow or devcontainer.json.
    pub force: bool,
    /// Sandbox flags replacing the recorded inputs of the same name; `operator_env` entries are added.
    pub sandbox: SandboxFlags,
    /// Answers for a `paused_waiting_human` run (required for one; ignored otherwise).
    pub answers: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Resume {
    /// A resume of `run_id` in `store_dir` with no overrides.
    pub fn new(run_id: impl Into<String>, store_dir: impl Into<PathBuf>) -> Resume {
        Resume {
            run_id: run_id.into(),
            store_dir: store_dir.into(),
            file: None,
            force: false,
            sandbox: SandboxFlags::default(),
            answers: None,
        }
    }
}

/// How a run invocation ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Outcome {
    /// Run id.
    pub run_id: String,
    /// Friendly name.
    pub run_name: String,
    /// Store dir.
    pub store_dir: PathBuf,
    /// Run directory.
    pub run_dir: PathBuf,
    /// Final status.
    pub status: RunStatus,
    /// Failure code (`failed`, `failed_resumable`, `cancelled`).
    pub failure_code: Option<FailureCode>,
    /// Error text of a failure, or the cancellation reason.
    pub error: Option<String>,
    /// Remediation hint of a failure.
    pub hint: Option<String>,
    /// The status before a resume.
    pub resumed_from: Option<RunStatus>,
    /// What became of the run's git worktree (`worktree: auto`).
    pub worktree: Option<WorktreeEnd>,
    /// What a `paused_waiting_human` run waits for.
    pub paused: Option<Paused>,
}

/// The interaction a paused run waits for.
#[derive(Debug, Clone, PartialEq)]
pub struct Paused {
    /// `<run id>_<node id>[_<n>]`.
    pub interaction_id: String,
    /// The human node.
    pub node_id: String,
    /// The questions (key → context or question).
    pub questions: serde_json::Value,
    /// The answers the node takes (the fields of its output schema); empty when it takes any keys.
    pub expects: Vec<crate::exec::answers::AnswerField>,
}

/// What became of a `worktree: auto` run's worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorktreeEnd {
    /// The run finished and changed something: committed on this branch, the worktree removed.
    Branch(String),
    /// The run finished and changed nothing: no branch, the worktree removed.
    Unchanged,
    /// The worktree is kept here (a run that did not finish, to resume or inspect, or one whose commit
    /// failed).
    Kept(PathBuf),
}
