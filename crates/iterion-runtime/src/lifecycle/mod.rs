//! The run lifecycle (05 §4): run record → resolve → floors → driver → environment → prepare/pull → build →
//! network → start → post-create → probes → nodes (the executor, [`crate::exec`]) → final status → cleanup.
//!
//! Everything talks to engines through `Arc<dyn Driver>` chosen by the caller ([`Drivers`]); the library never
//! reads `std::env` (the environment arrives as a map in [`Config::env`]).
//!
//! Known differences from the event order of 05 §4.15, listed so nobody relies on them by accident:
//! `sandbox_user_remap`, `sandbox_uid_mismatch_warning` and `sandbox_host_state_mounted` are emitted from the
//! driver's start report, so they follow `sandbox_image_ready` and `sandbox_network_started` instead of
//! preceding them. The host-state planning itself (05 §4.6) is done by the container driver (03 §8.3).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use iterion_driver::{Driver, OwnerInfo};
use iterion_envdeny::SandboxEnvEntry;
use iterion_spec::devcontainer::SourceReader;
use iterion_spec::model::Workflow;
use iterion_spec::resolve::{ModeChoice, ResolveError, ResolveInputs, resolve_sandbox};
use iterion_spec::resolved::{HostState, SandboxPlan};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::events::{RunCancelled, RunFailed, RunFinished, RunResumed, RunStarted};
use crate::exec::{ExecBounds, ExecContext, ExecOutcome, VarInputs};
use crate::failure::{FailureCode, FailurePhase};
use crate::status::{RunStatus, Transition};
use crate::store::{
    Checkpoint, LaunchInputs, LogLevel, NewRun, OperatorEnvEntry, Owner, RunId, SandboxRequested, Store,
};

pub mod assembly;
mod netblock;
pub mod reaper;
mod sandbox;
pub mod settings;
mod sink;
#[cfg(test)]
mod store_failure_tests;

pub use sandbox::HostFacts;
pub use settings::Settings;
pub use sink::{NoObserver, Observer};

/// What driver selection (03 §2, done by the composition root) produced for a run.
#[derive(Debug, Clone)]
pub enum DriverChoice {
    /// A container driver answered its availability probe.
    Container(Arc<dyn Driver>),
    /// No container runtime is usable: auto scopes degrade to the host, inline scopes fail with
    /// `SANDBOX_DRIVER_UNAVAILABLE`.
    Unavailable {
        /// Why (the probe answers), for the log.
        reason: String,
    },
    /// The operator forced the `noop` driver: every active scope runs on the host (unless the inline floor
    /// is active).
    ForcedNoop,
    /// The operator forced a driver that is not usable: every active scope fails.
    ForcedUnavailable {
        /// The error text, naming the forcing source.
        message: String,
    },
}

impl DriverChoice {
    fn name(&self) -> &'static str {
        match self {
            DriverChoice::Container(d) => d.kind().as_str(),
            DriverChoice::ForcedNoop => "noop",
            _ => "none",
        }
    }
}

/// The drivers of a run: the container driver selection and the host driver (a `NoopDriver`) used for every
/// node placed on the host.
#[derive(Debug, Clone)]
pub struct Drivers {
    /// Result of driver selection.
    pub container: DriverChoice,
    /// Runs host-placed nodes (and everything when the run is unsandboxed).
    pub host: Arc<dyn Driver>,
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
    /// `--sandbox-driver` (recorded; selection itself is done by the caller).
    pub driver: Option<String>,
    /// `--sandbox-env` entries, already parsed.
    pub operator_env: Vec<SandboxEnvEntry>,
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
    /// The store dir (05 §1.1).
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
        }
    }
}

/// A resume (05 §9).
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
}

/// A failure of a lifecycle step: everything `run.json` and `run_failed` need.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Failure {
    pub(crate) event: Box<RunFailed>,
}

impl Failure {
    pub(crate) fn new(code: FailureCode, error: impl Into<String>) -> Failure {
        Failure {
            event: Box::new(RunFailed::new(code, error)),
        }
    }

    /// Applies a `RunFailed` builder step.
    pub(crate) fn with(mut self, f: impl FnOnce(RunFailed) -> RunFailed) -> Failure {
        self.event = Box::new(f(*self.event));
        self
    }

    pub(crate) fn phase(self, phase: FailurePhase) -> Failure {
        self.with(|e| e.phase(phase))
    }

    pub(crate) fn hint(self, hint: Option<String>) -> Failure {
        match hint.filter(|h| !h.is_empty()) {
            Some(h) => self.with(|e| e.hint(h)),
            None => self,
        }
    }
}

/// How [`drive`] ends before cleanup.
enum End {
    Finished,
    Failed(Failure, Option<Checkpoint>),
    Cancelled(String, Option<Checkpoint>),
}

fn requested_of(
    flags: &SandboxFlags,
    env: &BTreeMap<String, String>,
    builtin: ModeChoice,
) -> SandboxRequested {
    let mut renv = BTreeMap::new();
    for name in [
        iterion_spec::resolve::ENV_DEFAULT,
        iterion_spec::resolve::ENV_HOST_STATE,
        iterion_spec::resolve::ENV_DEFAULT_IMAGE,
    ] {
        renv.insert(name.to_owned(), env.get(name).cloned().unwrap_or_default());
    }
    SandboxRequested {
        cli_mode: flags.mode.map(|m| m.as_str().to_owned()),
        cli_host_state: flags.host_state.map(|h| h.as_str().to_owned()),
        cli_default_image: flags.default_image.clone(),
        cli_driver: flags.driver.clone(),
        operator_env: flags
            .operator_env
            .iter()
            .map(|e| match e {
                SandboxEnvEntry::Copy { name, .. } => OperatorEnvEntry::Copy { name: name.clone() },
                SandboxEnvEntry::Value { name, value } => OperatorEnvEntry::Value {
                    name: name.clone(),
                    value: value.clone(),
                },
            })
            .collect(),
        env: renv,
        builtin_default_mode: builtin.as_str().to_owned(),
    }
}

/// Resolution with the recorded inputs `req` (the three recorded variables replace the current ones; floors
/// and everything else come from `env`).
fn resolve_with(
    cfg: &Config,
    wf: &Workflow,
    req: &SandboxRequested,
    work_dir: &std::path::Path,
    repo_root: Option<&std::path::Path>,
) -> Result<std::result::Result<SandboxPlan, ResolveError>> {
    let mut env = cfg.env.clone();
    for (k, v) in &req.env {
        env.insert(k.clone(), v.clone());
    }
    let bad = |what: &str, v: &str| Error::InvalidLaunch {
        message: format!("invalid recorded {what} '{v}'"),
    };
    let mut inputs = ResolveInputs::new(work_dir, cfg.reader.as_ref());
    inputs.cli_mode = match &req.cli_mode {
        Some(m) => Some(ModeChoice::parse(m).ok_or_else(|| bad("--sandbox", m))?),
        None => None,
    };
    inputs.cli_host_state = match &req.cli_host_state {
        Some(h) => Some(HostState::parse(h).ok_or_else(|| bad("--sandbox-host-state", h))?),
        None => None,
    };
    inputs.cli_default_image = req.cli_default_image.clone();
    inputs.env = env;
    inputs.builtin_default_mode =
        ModeChoice::parse(&req.builtin_default_mode).unwrap_or(cfg.builtin_default_mode);
    inputs.binary_version = cfg.default_image_version.clone();
    inputs.repo_root = repo_root.map(|p| p.to_path_buf());
    match resolve_sandbox(wf, &inputs) {
        Err(ResolveError::InvalidEnv {
            name,
            value,
            expected,
        }) => Err(Error::InvalidLaunch {
            message: format!("invalid value '{value}' for {name} (want {expected})"),
        }),
        other => Ok(other),
    }
}

/// [`resolve_with`] on a blocking thread, abandoned when the run is cancelled while it runs. Resolution reads
/// repository files (`devcontainer.json` up to the size limit, Dockerfiles), which can take seconds; nothing
/// exists yet that would need cleaning up, so a signal then ends the launch at once
/// ([`Error::CancelledBeforeStart`], no run record) instead of waiting for the read.
async fn resolve_cancellable(
    cfg: &Config,
    wf: &Workflow,
    req: &SandboxRequested,
    work_dir: &std::path::Path,
    repo_root: Option<&std::path::Path>,
) -> Result<std::result::Result<SandboxPlan, ResolveError>> {
    let token = cfg.cancel.token();
    if token.is_cancelled() {
        // Cancelled before the launch: resolve as usual, so the run is recorded and ends cancelled at its first
        // check, as every launch cancelled early does.
        return resolve_with(cfg, wf, req, work_dir, repo_root);
    }
    let (c, w, r) = (cfg.clone(), wf.clone(), req.clone());
    let (wd, rr) = (
        work_dir.to_path_buf(),
        repo_root.map(std::path::Path::to_path_buf),
    );
    let task = tokio::task::spawn_blocking(move || resolve_with(&c, &w, &r, &wd, rr.as_deref()));
    tokio::select! {
        joined = task => match joined {
            Ok(plan) => plan,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        },
        () = token.cancelled() => Err(Error::CancelledBeforeStart {
            reason: cfg.cancel.reason(),
        }),
    }
}

fn project_dir(plan: &std::result::Result<SandboxPlan, ResolveError>, work_dir: &std::path::Path) -> String {
    match plan {
        Ok(SandboxPlan { run: Some(r), .. }) => r.workspace_folder.clone(),
        _ => work_dir.to_string_lossy().into_owned(),
    }
}

/// Starts a new run and drives it to a terminal status. `Err` only for problems before the run record exists
/// (usage errors, a locked or existing run, store I/O); every later failure is a status in the [`Outcome`].
pub async fn launch(cfg: &Config, launch: Launch) -> Result<Outcome> {
    launch_with(cfg, launch, |log| log).await
}

/// [`launch`] with the run's events appended through `events` (given the run's own event log).
pub(crate) async fn launch_with(
    cfg: &Config,
    launch: Launch,
    events: impl FnOnce(Arc<dyn sink::Append>) -> Arc<dyn sink::Append>,
) -> Result<Outcome> {
    let requested = requested_of(&launch.sandbox, &cfg.env, cfg.builtin_default_mode);
    let plan = resolve_cancellable(
        cfg,
        &launch.workflow,
        &requested,
        &launch.work_dir,
        launch.repo_root.as_deref(),
    )
    .await?;
    let pdir = project_dir(&plan, &launch.work_dir);
    let vars = crate::exec::resolve_vars(
        &launch.workflow,
        VarInputs {
            preset: launch.preset.as_deref(),
            vars: &launch.vars,
            env: &cfg.env,
            project_dir: &pdir,
        },
    )?;
    let store = Store::create(&launch.store_dir)?.with_record_key(cfg.record_key.clone());
    let id = launch.run_id.clone().unwrap_or_else(RunId::new_v7);
    let file_path = launch.workflow_path.to_string_lossy().into_owned();
    let run = store.create_run(
        &id,
        NewRun {
            id: id.to_string(),
            workflow_name: launch.workflow.name.value.clone(),
            file_path,
            workflow_bytes: launch.workflow_bytes.clone(),
            inputs: LaunchInputs {
                preset: launch.preset.clone(),
                vars: launch.vars.iter().cloned().collect(),
            },
            work_dir: launch.work_dir.to_string_lossy().into_owned(),
            env: cfg.env.clone(),
            iterion_version: cfg.iterion_version.clone(),
            owner: cfg.owner.clone(),
            now: crate::events::now_timestamp(),
        },
    )?;
    let em = sink::Emitter::with_events(run, cfg.observer.clone(), events);
    let repo_root = launch.repo_root.clone();
    em.update(|d| {
        d.repo_root = repo_root.map(|p| p.to_string_lossy().into_owned());
        d.sandbox.requested = requested;
    });
    for w in &cfg.settings.warnings {
        em.log(LogLevel::Warn, w);
    }
    let ctx = DriveInput {
        workflow: launch.workflow,
        plan,
        vars,
        resume: None,
        work_dir: launch.work_dir,
        repo_root: launch.repo_root,
        operator_env: launch.sandbox.operator_env,
        store_dir: launch.store_dir,
    };
    Ok(drive(cfg, em, ctx, None).await)
}

/// Resumes a `failed_resumable` or `cancelled` run (05 §9). `Err(Error::ResumeInvalid)` refuses without
/// changing the record.
pub async fn resume(cfg: &Config, req: Resume) -> Result<Outcome> {
    let store = Store::at(&req.store_dir).with_record_key(cfg.record_key.clone());
    // Nothing below may act on a record that something without the key (a sandbox) could have written.
    store.check_record(&req.run_id, req.force)?;
    reaper::recover_run(&store, &req.run_id, &cfg.owner);
    let mut run = store.open_run(&req.run_id, &cfg.owner)?;
    if req.force {
        run.adopt_unsigned();
    }
    let doc = run.document().clone();
    let invalid = |reason: String| Error::ResumeInvalid {
        run_id: req.run_id.clone(),
        reason,
    };
    if !doc.status.is_resumable() {
        return Err(invalid(format!(
            "run {} has status {} (only failed_resumable and cancelled runs can be resumed)",
            req.run_id, doc.status
        )));
    }
    let Some(checkpoint) = doc.checkpoint.clone() else {
        return Err(invalid("the run has no checkpoint".into()));
    };
    let file = req.file.clone().unwrap_or_else(|| PathBuf::from(&doc.file_path));
    // Regular files only, bounded (a file over the source limit is read no further and fails E007 below).
    let bytes =
        match iterion_spec::source::read_regular(&file, iterion_spec::lexer::MAX_SOURCE_BYTES as u64 + 1) {
            iterion_spec::source::FileRead::Found(b) => b,
            other => return Err(invalid(format!("cannot read {}: {other}", file.display()))),
        };
    let hash = crate::store::sha256_hex(&bytes);
    if hash != doc.workflow_hash && !req.force {
        return Err(invalid(format!(
            "the workflow file {} changed since the run started (use --force to resume anyway)",
            file.display()
        )));
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let checked = iterion_spec::check(&text, &file.to_string_lossy());
    if checked.has_errors() {
        return Err(invalid(format!(
            "the workflow file {} no longer compiles",
            file.display()
        )));
    }
    let Some(workflow) = checked
        .workflows
        .into_iter()
        .find(|w| w.name.value == doc.workflow_name)
    else {
        return Err(invalid(format!(
            "workflow '{}' is no longer declared in {}",
            doc.workflow_name,
            file.display()
        )));
    };
    // Recorded inputs, with the flags given to resume replacing them.
    let mut requested = doc.sandbox.requested.clone();
    let f = &req.sandbox;
    if let Some(m) = f.mode {
        requested.cli_mode = Some(m.as_str().to_owned());
    }
    if let Some(h) = f.host_state {
        requested.cli_host_state = Some(h.as_str().to_owned());
    }
    if let Some(i) = &f.default_image {
        requested.cli_default_image = Some(i.clone());
    }
    if let Some(d) = &f.driver {
        requested.cli_driver = Some(d.clone());
    }
    let mut operator_env = Vec::new();
    for e in &requested.operator_env {
        match e {
            OperatorEnvEntry::Copy { name } => match cfg.env.get(name) {
                Some(v) => operator_env.push(SandboxEnvEntry::Copy {
                    name: name.clone(),
                    value: v.clone(),
                }),
                None => {
                    return Err(Error::InvalidLaunch {
                        message: format!("--sandbox-env {name} was recorded at launch but {name} is not set"),
                    });
                }
            },
            OperatorEnvEntry::Value { name, value } => operator_env.push(SandboxEnvEntry::Value {
                name: name.clone(),
                value: value.clone(),
            }),
        }
    }
    for e in &f.operator_env {
        operator_env.retain(|x: &SandboxEnvEntry| x.name() != e.name());
        operator_env.push(e.clone());
    }
    requested.operator_env = requested_of(
        &SandboxFlags {
            operator_env: operator_env.clone(),
            ..SandboxFlags::default()
        },
        &cfg.env,
        cfg.builtin_default_mode,
    )
    .operator_env;
    let work_dir = PathBuf::from(&doc.work_dir);
    let repo_root = doc.repo_root.as_ref().map(PathBuf::from);
    let plan = resolve_cancellable(cfg, &workflow, &requested, &work_dir, repo_root.as_deref()).await?;
    if let (Some(old), Ok(SandboxPlan { run: Some(new), .. })) = (
        doc.sandbox
            .resolved
            .as_ref()
            .and_then(|r| r.devcontainer.as_ref()),
        &plan,
    ) && let Some(new_dc) = &new.devcontainer
        && new_dc.sha256 != old.sha256
        && !req.force
    {
        return Err(invalid(format!(
            "{} changed since the run started (use --force to resume anyway)",
            new_dc.path
        )));
    }
    let previous = doc.status;
    let previous_code = doc.failure_code;
    let mut run = run;
    let owner = cfg.owner.clone();
    let version = cfg.iterion_version.clone();
    run.transition(Transition::Resume)?;
    run.update(|d| {
        d.owner = owner;
        d.iterion_version = version;
        d.sandbox.requested = requested;
        if hash != d.workflow_hash {
            d.workflow_hash = hash;
        }
    })?;
    let em = sink::Emitter::new(run, cfg.observer.clone());
    for w in &cfg.settings.warnings {
        em.log(LogLevel::Warn, w);
    }
    em.emit(RunResumed {
        resumed_from: previous,
        restart_node: checkpoint.node_id.clone(),
        failure_code: previous_code.filter(|c| *c != FailureCode::Cancelled),
    });
    let ctx = DriveInput {
        workflow,
        vars: checkpoint.vars.clone(),
        plan,
        resume: Some(checkpoint),
        work_dir,
        repo_root,
        operator_env,
        store_dir: req.store_dir.clone(),
    };
    Ok(drive(cfg, em, ctx, Some(previous)).await)
}

struct DriveInput {
    workflow: Workflow,
    plan: std::result::Result<SandboxPlan, ResolveError>,
    vars: Map<String, Value>,
    resume: Option<Checkpoint>,
    work_dir: PathBuf,
    repo_root: Option<PathBuf>,
    operator_env: Vec<SandboxEnvEntry>,
    store_dir: PathBuf,
}

async fn drive(
    cfg: &Config,
    em: sink::Emitter,
    input: DriveInput,
    resumed_from: Option<RunStatus>,
) -> Outcome {
    let started = Instant::now();
    let entry = input
        .workflow
        .entry
        .as_ref()
        .map(|e| e.value.clone())
        .unwrap_or_default();
    let stub = input
        .resume
        .clone()
        .unwrap_or_else(|| Checkpoint::stub(entry.clone(), input.vars.clone()));
    let (run_id, run_dir) = {
        let r = em.run();
        (r.id().to_owned(), r.dir().to_path_buf())
    };
    let owner = OwnerInfo {
        host_name: cfg.owner.host.clone(),
        pid: cfg.owner.pid,
        start_time: cfg.owner.started_at,
        store_dir: input.store_dir.clone(),
    };
    let mut resources = sandbox::Guard::new(cfg.drivers.container.name());
    let setup = sandbox::Setup {
        cfg,
        em: em.clone(),
        run_id: run_id.clone(),
        run_name: em.run().document().name.clone(),
        run_dir: run_dir.clone(),
        work_dir: input.work_dir.clone(),
        repo_root: input.repo_root.clone(),
        operator_env: input.operator_env.clone(),
        owner,
    };
    let cancel_token = cfg.cancel.token();
    let store_abort = em.store_abort();
    if input.resume.is_none() {
        // A stub checkpoint from the start, so a crash before the first node leaves a resumable record.
        let _ = em.run().save_checkpoint(stub.clone());
    }
    let end = tokio::select! {
        biased;
        _ = cancel_token.cancelled() => End::Cancelled(cancel_reason(cfg), Some(stub.clone())),
        // Replaced by the store failure below.
        _ = store_abort.cancelled() => End::Cancelled(String::new(), Some(stub.clone())),
        r = setup.run(&input.plan, &mut resources) => match r {
            Err(f) => End::Failed(f, Some(stub.clone())),
            Ok(sandboxes) => {
                em.emit(RunStarted {
                    workflow: input.workflow.name.value.clone(),
                    file: em.run().document().file_path.clone(),
                    sandboxed: sandboxes.sandboxed(),
                    driver: sandboxes.driver_name(),
                });
                execute(cfg, &em, &input, sandboxes, &run_id, stub.clone()).await
            }
        },
    };
    let end = store_failure_end(&em, end);
    let outcome = finish(&em, end, started, stub);
    let report = resources.cleanup(&em, cfg.cancel.force_token()).await;
    em.emit(report);
    let doc = em.run().document().clone();
    let mut out = Outcome {
        run_id,
        run_name: doc.name.clone(),
        store_dir: input.store_dir,
        run_dir,
        status: doc.status,
        failure_code: doc.failure_code,
        error: outcome.0,
        hint: outcome.1,
        resumed_from,
    };
    // Whatever `run.json` could still record, an incomplete record never reports a clean end.
    if let Some(f) = em.store_failure() {
        out.status = RunStatus::Failed;
        out.failure_code = Some(FailureCode::StoreWriteFailed);
        let message = f.message();
        if out.error.as_deref().is_none_or(|e| !e.starts_with(&message)) {
            out.error = Some(message);
            out.hint = Some(STORE_HINT.to_owned());
        }
    }
    out
}

const STORE_HINT: &str = "free space in the run store (or repair its file system) and start the run again";

/// A run during which a write to the store failed ends `failed` / `STORE_WRITE_FAILED`, whatever it would have
/// ended with: its record has a hole. The first such write aborted setup or the executor.
fn store_failure_end(em: &sink::Emitter, end: End) -> End {
    let Some(f) = em.store_failure() else {
        return end;
    };
    let mut message = f.message();
    let checkpoint = match &end {
        End::Finished => None,
        End::Failed(prior, c) => {
            message.push_str(&format!(
                "; the run had also failed ({}): {}",
                prior.event.code, prior.event.error
            ));
            c.clone()
        }
        End::Cancelled(_, c) => c.clone(),
    };
    End::Failed(
        Failure::new(FailureCode::StoreWriteFailed, message).hint(Some(STORE_HINT.to_owned())),
        checkpoint,
    )
}

fn cancel_reason(cfg: &Config) -> String {
    cfg.cancel.reason()
}

/// Cancellation of a run with its reason (`signal SIGINT`, `cancelled by the caller`).
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    token: CancellationToken,
    force: CancellationToken,
    reason: Arc<std::sync::Mutex<Option<String>>>,
}

impl Cancel {
    /// A handle that is not cancelled.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Cancels with `reason` (the first reason wins).
    pub fn cancel(&self, reason: impl Into<String>) {
        let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        if r.is_none() {
            *r = Some(reason.into());
        }
        drop(r);
        self.token.cancel();
    }

    /// A second cancellation (05 §8.2): cleanup skips its graceful steps and force-removes the containers.
    pub fn force(&self) {
        self.cancel("cancelled by the caller");
        self.force.cancel();
    }

    /// The token cleanup watches for [`Cancel::force`].
    pub fn force_token(&self) -> CancellationToken {
        self.force.clone()
    }

    /// Whether [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The token the executor watches.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// The reason given, or `cancelled by the caller`.
    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| "cancelled by the caller".into())
    }
}

async fn execute(
    cfg: &Config,
    em: &sink::Emitter,
    input: &DriveInput,
    sandboxes: Arc<sandbox::Sandboxes>,
    run_id: &str,
    stub: Checkpoint,
) -> End {
    // The executor stops on cancellation and on the first failed write to the store.
    let exec_cancel = cfg.cancel.token().child_token();
    em.abort_also(exec_cancel.clone());
    let mut ctx = ExecContext::new(
        run_id,
        input.vars.clone(),
        cfg.env.clone(),
        sandboxes,
        Arc::new(em.clone()),
    )
    .with_cancel(exec_cancel)
    .with_bounds(cfg.exec_bounds);
    if let Some(c) = &input.resume {
        ctx = ctx.with_resume(c.clone());
    }
    let wf = input.workflow.clone();
    // A panic in the executor must not skip the final status or cleanup (05 §8.2): it runs in its own task.
    let task = tokio::spawn(async move { crate::exec::execute(&wf, ctx).await });
    match task.await {
        Ok(ExecOutcome::Finished { .. }) => End::Finished,
        Ok(ExecOutcome::Failed { failure, checkpoint }) => End::Failed(
            Failure {
                event: Box::new(failure),
            },
            checkpoint,
        ),
        Ok(ExecOutcome::Cancelled { checkpoint }) => End::Cancelled(cancel_reason(cfg), Some(checkpoint)),
        Err(e) => {
            let latest = em.run().document().checkpoint.clone().unwrap_or(stub);
            let what = if e.is_panic() { "panicked" } else { "was aborted" };
            End::Failed(
                Failure::new(
                    FailureCode::InternalError,
                    format!("the workflow executor {what}"),
                ),
                Some(latest),
            )
        }
    }
}

/// Writes the final status and the terminal event; returns `(error, hint)` for the outcome.
fn finish(
    em: &sink::Emitter,
    end: End,
    started: Instant,
    stub: Checkpoint,
) -> (Option<String>, Option<String>) {
    match end {
        End::Finished => {
            if let Err(e) = em.run().transition(Transition::Finish) {
                em.store_failed(format!(
                    "the final status in run.json was not written: {}",
                    sink::chain(&e)
                ));
            }
            em.emit(RunFinished {
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
            (None, None)
        }
        End::Failed(f, checkpoint) => {
            let ev = *f.event;
            let transition = if ev.code.is_resumable() {
                let current = em.run().document().checkpoint.clone();
                Transition::FailResumable {
                    code: ev.code,
                    error: ev.error.clone(),
                    phase: ev.phase,
                    checkpoint: checkpoint.or(current).or(Some(stub)),
                }
            } else {
                Transition::Fail {
                    code: ev.code,
                    error: ev.error.clone(),
                    phase: ev.phase,
                }
            };
            if let Err(e) = em.run().transition(transition) {
                em.store_failed(format!(
                    "the final status in run.json was not written: {}",
                    sink::chain(&e)
                ));
            }
            em.log(
                LogLevel::Error,
                &format!("run failed ({}): {}", ev.code, ev.error),
            );
            let out = (Some(ev.error.clone()), ev.hint.clone());
            em.emit(ev);
            out
        }
        End::Cancelled(reason, checkpoint) => {
            let current = em.run().document().checkpoint.clone();
            let t = Transition::Cancel {
                reason: reason.clone(),
                checkpoint: checkpoint.or(current).or(Some(stub)),
            };
            if let Err(e) = em.run().transition(t) {
                em.store_failed(format!(
                    "the final status in run.json was not written: {}",
                    sink::chain(&e)
                ));
            }
            em.emit(RunCancelled::new(reason.clone()));
            (Some(reason), None)
        }
    }
}
