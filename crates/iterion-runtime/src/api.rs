//! The embedding API: build a [`Runtime`] once, then run or resume workflows.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//! use iterion_runtime::api::{RunOptions, Runtime};
//!
//! # async fn demo(host: Arc<dyn iterion_driver::Driver>) -> iterion_runtime::Result<()> {
//! // `host` is a NoopDriver (built by the composition root); no container driver → auto scopes run on the host.
//! let rt = Runtime::builder()
//!     .host_driver(host)
//!     .no_container_driver("docker not installed")
//!     .store_dir("/tmp/iterion-store")
//!     .env(BTreeMap::new())
//!     .build()?;
//! let outcome = rt.run("flows/demo.bot", RunOptions::new("/src/app")).await?;
//! println!("{} {}", outcome.run_id, outcome.status);
//! # Ok(()) }
//! ```
//!
//! The library never reads `std::env` and never names a concrete container driver: the caller passes the
//! environment as a map and either the drivers as `Arc<dyn Driver>` or lets the host layer choose them:
//!
//! ```no_run
//! # async fn demo(env: std::collections::BTreeMap<String, String>) -> iterion_runtime::Result<()> {
//! use iterion_runtime::api::{RunOptions, Runtime};
//! // Docker/Podman when an engine answers (egress through the embedded relay), else the host.
//! let rt = Runtime::from_env(&env).await?.build()?;
//! let outcome = rt.run("/src/app/flows/demo.bot", RunOptions::new("/src/app")).await?;
//! println!("{} {}", outcome.run_id, outcome.status);
//! # Ok(()) }
//! ```
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use iterion_driver::Driver;
use iterion_host::Host;
pub use iterion_host::HostOptions;
use iterion_spec::devcontainer::{FsReader, SourceReader};
use iterion_spec::diag::Diagnostic;
use iterion_spec::model::Workflow;
use iterion_spec::resolve::ModeChoice;

use crate::error::{Error, Result};
use crate::exec::ExecBounds;
use crate::lifecycle::reaper::{Pruned, Reaped};
use crate::lifecycle::{
    Cancel, Config, DriverChoice, Drivers, HostFacts, Launch, NoObserver, Observer, Outcome, Resume,
    SandboxFlags, Settings,
};
use crate::store::{Owner, RecordKey, RunId};

/// Builds a [`Runtime`]; [`RuntimeBuilder::build`] checks that the required parts are present.
#[derive(Default)]
pub struct RuntimeBuilder {
    container: Option<DriverChoice>,
    host: Option<Arc<dyn Driver>>,
    store_dir: Option<PathBuf>,
    env: BTreeMap<String, String>,
    builtin_default_mode: Option<ModeChoice>,
    observer: Option<Arc<dyn Observer>>,
    cancel: Option<Cancel>,
    version: Option<String>,
    default_image_version: Option<String>,
    host_facts: Option<HostFacts>,
    owner: Option<Owner>,
    exec_bounds: ExecBounds,
    reader: Option<Arc<dyn SourceReader + Send + Sync>>,
    record_key: Option<RecordKey>,
    host_warnings: Vec<String>,
    claw_runner: crate::lifecycle::ClawRunner,
    build_secrets: Vec<iterion_driver::BuildSecret>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("container", &self.container)
            .field("store_dir", &self.store_dir)
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// Warnings of the host layer met by [`Runtime::from_host`] (an egress relay that could not be
    /// installed, an ignored `ITERION_MODE`), for the caller to show.
    pub fn host_warnings(&self) -> &[String] {
        &self.host_warnings
    }

    /// The container driver selected by the caller.
    pub fn driver(mut self, driver: Arc<dyn Driver>) -> Self {
        self.container = Some(DriverChoice::Container(driver));
        self
    }

    /// The result of driver selection as a whole (no runtime, forced noop, forced but unavailable).
    pub fn driver_choice(mut self, choice: DriverChoice) -> Self {
        self.container = Some(choice);
        self
    }

    /// No container runtime is usable: auto scopes degrade to the host, inline scopes fail.
    pub fn no_container_driver(mut self, reason: impl Into<String>) -> Self {
        self.container = Some(DriverChoice::Unavailable {
            reason: reason.into(),
        });
        self
    }

    /// The driver of host-placed nodes (a `NoopDriver`). Required.
    pub fn host_driver(mut self, driver: Arc<dyn Driver>) -> Self {
        self.host = Some(driver);
        self
    }

    /// Default store dir of [`Runtime::run`] (otherwise 05 §1.1 from the workflow's location).
    pub fn store_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.store_dir = Some(dir.into());
        self
    }

    /// The launching environment (the library never reads `std::env`).
    pub fn env(mut self, env: BTreeMap<String, String>) -> Self {
        self.env = env;
        self
    }

    /// Built-in default sandbox mode (`none` unless set; `iterion run` uses `auto`).
    pub fn builtin_default_mode(mut self, mode: ModeChoice) -> Self {
        self.builtin_default_mode = Some(mode);
        self
    }

    /// Receives events and log lines as they are written.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Cancellation handle shared with the caller.
    pub fn cancel(mut self, cancel: Cancel) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Version recorded in `run.json` (default: this crate's version).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// Version selecting the built-in default image (`None`: no built-in default image).
    pub fn default_image_version(mut self, version: Option<String>) -> Self {
        self.default_image_version = version;
        self
    }

    /// Host facts (home, uid/gid, OS, data dir); default: home and data dir from the environment map, no
    /// uid (no user remap).
    pub fn host_facts(mut self, facts: HostFacts) -> Self {
        self.host_facts = Some(facts);
        self
    }

    /// The owning process (default: this process).
    pub fn owner(mut self, owner: Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Executor bounds (`--timeout`).
    pub fn exec_bounds(mut self, bounds: ExecBounds) -> Self {
        self.exec_bounds = bounds;
        self
    }

    /// Secrets the operator gives to image builds (`iterion run --sandbox-build-secret`), served to
    /// `RUN --mount=type=secret` steps; only their ids are ever recorded or logged. Default: none.
    pub fn build_secrets(mut self, secrets: Vec<iterion_driver::BuildSecret>) -> Self {
        self.build_secrets = secrets;
        self
    }

    /// The host secret that signs `run.json` and is checked before a resume (the CLI uses the data dir's
    /// [`RecordKey::load_or_create`]); default: none, records are unsigned and resumes check nothing.
    pub fn record_key(mut self, key: RecordKey) -> Self {
        self.record_key = Some(key);
        self
    }

    /// The program run as `<program> __claw-runner` for claw nodes placed on the host (the CLI passes its own
    /// executable; the library never looks at the current executable). Default: the container runner.
    pub fn runner_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.claw_runner.host_program = Some(program.into());
        self
    }

    /// The Linux binary bound read-only at `/usr/local/bin/iterion` in containers running claw nodes (it must
    /// answer `__claw-runner` and `--version` there; [`Runtime::from_host`] sets the static runner embedded by
    /// `iterion-host`, or `ITERION_BIN`). Default: none, the image's own `iterion` is used.
    pub fn container_runner(mut self, binary: impl Into<PathBuf>) -> Self {
        self.claw_runner.container_binary = Some(binary.into());
        self
    }

    /// Reader of `devcontainer.json` (default: the file system).
    pub fn reader(mut self, reader: Arc<dyn SourceReader + Send + Sync>) -> Self {
        self.reader = Some(reader);
        self
    }

    /// Checks the parts and builds the runtime.
    pub fn build(self) -> Result<Runtime> {
        let host = self.host.ok_or(Error::Incomplete {
            what: "a host driver",
        })?;
        let container = self.container.ok_or(Error::Incomplete {
            what: "a container driver choice (driver, no_container_driver or driver_choice)",
        })?;
        let home = self.env.get("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
        let facts = match self.host_facts {
            Some(f) => f,
            None => {
                let data = iterion_host::data_dir(&self.env, Path::new("/"));
                HostFacts::new(home, None, None, std::env::consts::OS, data)
            }
        };
        let settings = Settings::from_env(&self.env);
        Ok(Runtime {
            store_dir: self.store_dir,
            cfg: Config {
                drivers: Drivers { container, host },
                settings,
                builtin_default_mode: self.builtin_default_mode.unwrap_or(ModeChoice::None),
                default_image_version: self.default_image_version,
                iterion_version: self
                    .version
                    .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned()),
                owner: self.owner.unwrap_or_else(Owner::current),
                host: facts,
                observer: self.observer.unwrap_or_else(|| Arc::new(NoObserver)),
                cancel: self.cancel.unwrap_or_default(),
                exec_bounds: self.exec_bounds,
                reader: self.reader.unwrap_or_else(|| Arc::new(FsReader)),
                record_key: self.record_key,
                claw_runner: self.claw_runner,
                build_secrets: self.build_secrets,
                env: self.env,
            },
        })
    }
}

/// Options of [`Runtime::run`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RunOptions {
    /// Work dir (absolute).
    pub work_dir: PathBuf,
    /// `--var NAME=VALUE` pairs.
    pub vars: Vec<(String, String)>,
    /// `--preset`.
    pub preset: Option<String>,
    /// `--run-id`.
    pub run_id: Option<String>,
    /// Sandbox flags.
    pub sandbox: SandboxFlags,
    /// `--attach NAME=PATH` pairs (a relative path is taken from the work dir).
    pub attachments: Vec<(String, PathBuf)>,
}

impl RunOptions {
    /// Options for a run in `work_dir`.
    pub fn new(work_dir: impl Into<PathBuf>) -> RunOptions {
        RunOptions {
            work_dir: work_dir.into(),
            ..RunOptions::default()
        }
    }

    /// Adds a var.
    pub fn var(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.vars.push((name.into(), value.into()));
        self
    }

    /// Adds an attachment: the file at `path` supplied as the declared attachment `name`.
    pub fn attach(mut self, name: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        self.attachments.push((name.into(), path.into()));
        self
    }

    /// Sets the sandbox flags.
    pub fn sandbox(mut self, flags: SandboxFlags) -> Self {
        self.sandbox = flags;
        self
    }
}

/// Reads the workflow at `path` (absolute, or relative to `work_dir`; regular files only, bounded: a file over
/// the source limit is not read and fails E007), compiles it and checks that it can run with `env`.
/// Diagnostics name the file as `path` was given. `Err` ([`Error::Io`]) only when the file cannot be read;
/// every diagnostic is in the result. Needs no runtime, so a caller can report compile errors before it
/// selects drivers.
pub fn compile(path: &Path, work_dir: &Path, env: &BTreeMap<String, String>) -> Result<Compiled> {
    let abs = crate::store::absolutize(path, work_dir);
    let label = path.to_string_lossy();
    let (bytes, checked) = iterion_spec::source::check_file(&abs, &label).map_err(|e| Error::Io {
        op: "read",
        path: abs.clone(),
        source: std::io::Error::other(e),
    })?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let mut diagnostics = checked.diagnostics;
    let mut workflow = checked.workflows.into_iter().next();
    if let Some(wf) = &mut workflow {
        diagnostics.extend(crate::exec::mcp::load_project(wf, &abs, env));
        diagnostics.extend(crate::exec::check_executable(wf, env));
    }
    Ok(Compiled {
        path: abs,
        source: bytes,
        text,
        diagnostics,
        workflow,
    })
}

/// A workflow file read, compiled and checked by [`compile`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Compiled {
    /// The absolute path of the file.
    pub path: PathBuf,
    /// The bytes read.
    pub source: Vec<u8>,
    /// The source text (invalid UTF-8 replaced), for rendering diagnostics.
    pub text: String,
    /// Every diagnostic: the compiler's, then the executability checks'.
    pub diagnostics: Vec<Diagnostic>,
    /// The compiled workflow, when the file defines one.
    pub workflow: Option<Workflow>,
}

impl Compiled {
    /// Whether the workflow cannot run: a diagnostic is an error, or the file defines no workflow.
    pub fn has_errors(&self) -> bool {
        self.workflow.is_none() || self.diagnostics.iter().any(|d| d.is_error())
    }
}

/// A configured runtime: runs and resumes workflows.
#[derive(Debug, Clone)]
pub struct Runtime {
    cfg: Config,
    store_dir: Option<PathBuf>,
}

impl Runtime {
    /// A builder.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// A builder pre-filled from the host ([`Runtime::from_host`] with default options: the current directory
    /// from `PWD`, no forced driver).
    pub async fn from_env(env: &BTreeMap<String, String>) -> Result<RuntimeBuilder> {
        Runtime::from_host(env, &HostOptions::new()).await
    }

    /// A builder pre-filled by the host layer ([`iterion_host::Host::from_env`]): the selected container
    /// driver (the docker driver with the embedded egress relay installed under the data dir, when an engine
    /// answers), the host driver, the host facts, the data dir's record key and `env`. The host layer's
    /// warnings are in [`RuntimeBuilder::host_warnings`]. `Err` for an invalid forced driver name
    /// ([`Error::Host`]) or an unusable record key.
    pub async fn from_host(env: &BTreeMap<String, String>, opts: &HostOptions) -> Result<RuntimeBuilder> {
        let host = Host::from_env(env, opts).await?;
        let key = RecordKey::load_or_create(&host.facts.data_dir)?;
        let mut b = Runtime::builder()
            .host_driver(host.host_driver)
            .driver_choice(host.choice)
            .env(env.clone())
            .host_facts(host.facts)
            .record_key(key);
        b.host_warnings = host.warnings;
        b.claw_runner.container_binary = host.claw_runner;
        Ok(b)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The cancellation handle.
    pub fn cancel_handle(&self) -> Cancel {
        self.cfg.cancel.clone()
    }

    /// Reads, compiles and checks the workflow at `path` (an absolute path, or relative to the work dir), then
    /// runs it: [`Runtime::compile`], [`Runtime::prepare`], [`Runtime::launch`]. Compile and executability
    /// errors are [`Error::Compile`]; nothing is created then.
    pub async fn run(&self, path: impl AsRef<Path>, opts: RunOptions) -> Result<Outcome> {
        let compiled = self.compile(path, &opts.work_dir)?;
        let launch = self.prepare(compiled, opts)?;
        self.launch(launch).await
    }

    /// Reads, compiles and checks the workflow at `path` against this runtime's environment (see
    /// [`compile`]).
    pub fn compile(&self, path: impl AsRef<Path>, work_dir: &Path) -> Result<Compiled> {
        compile(path.as_ref(), work_dir, &self.cfg.env)
    }

    /// Turns a compiled workflow into a [`Launch`]: the attachments checked ([`Error::InvalidAttachment`]), the
    /// repository root of the work dir (the project anchor),
    /// the store dir (the builder's, else the project's: a managed `<repo root>/.iterion`, else
    /// `<data dir>/projects/<key of the repo root>`), vars, preset, run id and sandbox flags. A workflow with errors is [`Error::Compile`].
    pub fn prepare(&self, compiled: Compiled, opts: RunOptions) -> Result<Launch> {
        let file = compiled.path.to_string_lossy().into_owned();
        let workflow = match compiled.workflow {
            Some(wf) if !compiled.diagnostics.iter().any(|d| d.is_error()) => wf,
            _ => {
                return Err(Error::Compile {
                    file,
                    diagnostics: compiled.diagnostics,
                });
            }
        };
        let path = compiled.path;
        // The project anchor: the repository root of the work dir decides the store and the devcontainer.
        let repo_root = iterion_host::repo_root(&opts.work_dir);
        let store_dir = match &self.store_dir {
            Some(s) => s.clone(),
            None => crate::store::store_dir(crate::store::StoreDirRequest {
                store_dir: None,
                project_dir: &repo_root,
                cwd: &opts.work_dir,
                data_dir: &self.cfg.host.data_dir,
            }),
        };
        // Attachments are usage errors before anything exists: undeclared, missing, unreadable, refused type,
        // reached through a link of the repository, or from a place attachments may not come from.
        let bounds = crate::attachments::AttachmentBounds::of_launch(
            &opts.work_dir,
            Some(&repo_root),
            &store_dir,
            self.cfg.host.home.as_deref(),
            &self.cfg.host.data_dir,
        );
        let attachments =
            crate::attachments::check_supplied(&workflow, &opts.attachments, &opts.work_dir, &bounds)?;
        let mut launch = Launch::new(workflow, path, compiled.source, store_dir, opts.work_dir);
        launch.repo_root = Some(repo_root);
        launch.vars = opts.vars;
        launch.preset = opts.preset;
        launch.sandbox = opts.sandbox;
        launch.attachments = attachments;
        launch.run_id = match opts.run_id {
            Some(id) => Some(RunId::parse(&id)?),
            None => None,
        };
        Ok(launch)
    }

    /// Everything [`Runtime::launch`] would decide before its first side effect (resolution, worktree, driver
    /// or host fallback, egress policy, denied environment names), without creating anything: no run record,
    /// worktree, network, image or container. [`DryRun::could_start`] is the verdict.
    ///
    /// [`DryRun::could_start`]: crate::lifecycle::dry_run::DryRun::could_start
    pub fn dry_run(&self, launch: &Launch) -> Result<crate::lifecycle::dry_run::DryRun> {
        crate::lifecycle::dry_run::dry_run(&self.cfg, launch)
    }

    /// Runs a prepared launch (the caller compiled and checked the workflow).
    pub async fn launch(&self, launch: Launch) -> Result<Outcome> {
        crate::lifecycle::launch(&self.cfg, launch).await
    }

    /// Resumes a run.
    pub async fn resume(&self, resume: Resume) -> Result<Outcome> {
        crate::lifecycle::resume(&self.cfg, resume).await
    }

    /// `iterion sandbox prune`: the reaper's predicate over the container driver's managed resources, build
    /// cache included, for the stores `scope` names (the current user's by default); `apply` false is a dry
    /// run that writes and removes nothing. Bounded to 60 s. An error when there is no container driver or it
    /// cannot list.
    pub async fn prune(
        &self,
        apply: bool,
        scope: crate::lifecycle::reaper::PruneScope,
    ) -> std::result::Result<Vec<Pruned>, String> {
        self.prune_runs(apply, scope, None).await
    }

    /// [`Runtime::prune`] limited to the resources of `runs` when given (`iterion runs rm` of a run whose
    /// process is gone removes what that process left on the engine).
    pub async fn prune_runs(
        &self,
        apply: bool,
        scope: crate::lifecycle::reaper::PruneScope,
        runs: Option<&[String]>,
    ) -> std::result::Result<Vec<Pruned>, String> {
        let drivers: Vec<Arc<dyn Driver>> = match &self.cfg.drivers.container {
            DriverChoice::Container(d) => vec![d.clone()],
            DriverChoice::Unavailable { reason } => {
                return Err(format!("no container engine answers: {reason}"));
            }
            DriverChoice::ForcedUnavailable { message } => return Err(message.clone()),
            DriverChoice::ForcedNoop => return Err("the noop driver creates nothing to prune".into()),
        };
        crate::lifecycle::reaper::prune(
            &drivers,
            &self.cfg.owner,
            self.cfg.record_key.as_ref(),
            apply,
            scope,
            runs,
            std::time::Duration::from_secs(60),
        )
        .await
    }

    /// One reaper pass over the container driver, bounded to 10 s.
    pub async fn reap_orphans(&self) -> Vec<Reaped> {
        let drivers: Vec<Arc<dyn Driver>> = match &self.cfg.drivers.container {
            DriverChoice::Container(d) => vec![d.clone()],
            _ => Vec::new(),
        };
        crate::lifecycle::reaper::reap_orphans(
            &drivers,
            &self.cfg.owner,
            self.cfg.record_key.as_ref(),
            std::time::Duration::from_secs(10),
        )
        .await
    }
}
