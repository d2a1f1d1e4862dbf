//! Sandbox setup (05 §4.2–4.12), node containers (5.2), the resources guard and cleanup (§8.1, §8.2).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use iterion_driver::{
    AuxMount, AuxMountKind, BuildNetwork, BuildRequest, Driver, DriverEvent, Error as DError, EventSink,
    ExecRequest, NetworkLease, NetworkRequest, OutputLimits, OwnerInfo, PrepareRequest, Prepared,
    ProxyListen, Run, SetupPhase, StartReport, StartRequest,
};
use iterion_envdeny::SandboxEnvEntry;
use iterion_netpolicy::{Mode, Policy};
use iterion_netproxy::{Credential, Proxy, ProxyConfig, ProxyEvent, RunningProxy};
use iterion_spec::resolve::ResolveError;
use iterion_spec::resolved::{
    HostState, NetworkMode, NetworkPolicySpec, Origin, Placement as SpecPlacement, ResolvedMode,
    ResolvedSandbox, SandboxPlan,
};
use tokio_util::sync::CancellationToken;

use super::netblock::Dedup;
use super::sink::Emitter;
use super::{Config, DriverChoice, Failure};
use crate::events::{
    BlockReason, EnvAction, EnvDeniedEntry, FloorScope, HomeSource, NetworkBlocked, NetworkPlacement,
    Placement, SandboxEnvDenied, SandboxFloorApplied, SandboxHostStateMounted, SandboxImageReady,
    SandboxNetworkAdvisory, SandboxNetworkDefaulted, SandboxNetworkStarted, SandboxNodeContainerStarted,
    SandboxPostCreateFinished, SandboxPostCreateStarted, SandboxResolved, SandboxSkipped, SandboxStarted,
    SandboxStopped, SandboxUidMismatchWarning, SandboxUserRemap, SkippedPath,
};
use crate::exec::{NodeSandbox, NodeSandboxes, SandboxUnavailable, Shell};
use crate::failure::{FailureCode, FailurePhase};
use crate::store::{ContainerRecord, LogLevel, NetworkRecord, NodePlacementRecord, SkippedScope};

/// Facts about the host the lifecycle needs for host state (05 §4.6), gathered by the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostFacts {
    /// The host home.
    pub home: Option<PathBuf>,
    /// Host uid (Unix).
    pub uid: Option<u32>,
    /// Host gid (Unix).
    pub gid: Option<u32>,
    /// `linux`, `macos`, `windows`.
    pub os: String,
    /// iterion's data directory (05 §1.1).
    pub data_dir: PathBuf,
}

impl HostFacts {
    /// Facts with the given home, ids, OS and data dir.
    pub fn new(
        home: Option<PathBuf>,
        uid: Option<u32>,
        gid: Option<u32>,
        os: &str,
        data_dir: PathBuf,
    ) -> Self {
        HostFacts {
            home,
            uid,
            gid,
            os: os.to_owned(),
            data_dir,
        }
    }
}

/// Reason of `sandbox_skipped` when no container runtime is usable.
pub(crate) const NO_RUNTIME: &str =
    "no container runtime available (docker or podman not found or not reachable)";
/// Reason of `sandbox_skipped` when the operator forced `noop`.
pub(crate) const OPERATOR_NOOP: &str =
    "operator opted into the noop driver; the run is NOT actually sandboxed";
/// Error of an inline scope without a driver.
pub(crate) const INLINE_NEEDS_CONTAINER: &str = "this workflow pins a container (sandbox inline); install Docker or Podman, or run with --sandbox none to execute on the host";

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------------------
// Resources and cleanup

#[derive(Default)]
struct Res {
    driver: Option<Arc<dyn Driver>>,
    containers: Vec<Arc<dyn Run>>,
    host_runs: Vec<Arc<dyn Run>>,
    proxy: Option<RunningProxy>,
    lease: Option<Arc<NetworkLease>>,
    images: Vec<String>,
    keep_images: bool,
}

/// Owns the run's sandbox resources. [`Guard::cleanup`] releases them (05 §8.1); dropping the guard without a
/// cleanup (a panic) force-removes the containers and releases the lease synchronously (§8.2).
pub(crate) struct Guard {
    driver_name: String,
    res: Arc<Mutex<Res>>,
    done: bool,
}

impl Guard {
    pub(crate) fn new(driver_name: &str) -> Guard {
        Guard {
            driver_name: driver_name.to_owned(),
            res: Arc::new(Mutex::new(Res::default())),
            done: false,
        }
    }

    fn lock(res: &Mutex<Res>) -> std::sync::MutexGuard<'_, Res> {
        res.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cleanup in the order of 05 §8.1, bounded to 30 s in total; returns the `sandbox_stopped` data.
    pub(crate) async fn cleanup(&mut self, em: &Emitter, force: CancellationToken) -> SandboxStopped {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let (driver, containers, host_runs, proxy, lease, images, keep) = {
            let mut r = Self::lock(&self.res);
            (
                r.driver.clone(),
                std::mem::take(&mut r.containers),
                std::mem::take(&mut r.host_runs),
                r.proxy.take(),
                r.lease.take(),
                std::mem::take(&mut r.images),
                r.keep_images,
            )
        };
        let mut errors = Vec::new();
        let mut removed = 0u64;
        let mut forced = false;
        for run in &containers {
            if forced {
                force_remove(run.clone()).await;
                continue;
            }
            let graceful = tokio::select! {
                r = tokio::time::timeout_at(deadline, run.cleanup()) => Some(r),
                _ = force.cancelled() => None,
            };
            let Some(graceful) = graceful else {
                // Second signal (05 §8.2): skip the graceful steps, still issue the force removal.
                forced = true;
                errors.push("cleanup interrupted by a second signal; containers force-removed".to_owned());
                force_remove(run.clone()).await;
                continue;
            };
            match graceful {
                Ok(rep) => {
                    if rep.container_removed {
                        removed += 1;
                    }
                    errors.extend(rep.errors);
                }
                Err(_) => {
                    errors.push(format!(
                        "cleanup of container {} did not finish within 30s",
                        run.id()
                    ));
                    run.force_cleanup_blocking();
                }
            }
        }
        for run in &host_runs {
            let _ = tokio::time::timeout_at(deadline, run.cleanup()).await;
        }
        let proxy_stopped = match proxy {
            Some(_) if forced => true,
            Some(p) => {
                let grace = deadline
                    .saturating_duration_since(tokio::time::Instant::now())
                    .min(Duration::from_secs(2));
                p.shutdown(grace).await;
                true
            }
            None => false,
        };
        let network_removed = match lease {
            Some(l) => {
                let errs = l.release();
                let ok = errs.is_empty();
                errors.extend(errs);
                ok
            }
            None => false,
        };
        let mut images_removed = 0u64;
        if !keep
            && !forced
            && let Some(d) = &driver
        {
            for img in images {
                match tokio::time::timeout_at(deadline, d.remove_image(&img)).await {
                    Ok(Ok(())) => images_removed += 1,
                    Ok(Err(e)) => errors.push(format!("remove image {img}: {e}")),
                    Err(_) => errors.push(format!("remove image {img}: timed out")),
                }
            }
        }
        for e in &errors {
            em.log(LogLevel::Warn, &format!("sandbox: cleanup: {e}"));
        }
        self.done = true;
        SandboxStopped {
            driver: self.driver_name.clone(),
            containers: removed,
            network_removed,
            proxy_stopped,
            images_removed,
            duration_ms: ms(started.elapsed()),
            errors,
        }
    }
}

/// The synchronous force removal (5 s bound inside the driver), off the async threads.
async fn force_remove(run: Arc<dyn Run>) {
    let _ = tokio::time::timeout(
        Duration::from_secs(6),
        tokio::task::spawn_blocking(move || run.force_cleanup_blocking()),
    )
    .await;
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut r = Self::lock(&self.res);
        for run in r.containers.drain(..) {
            run.force_cleanup_blocking();
        }
        r.proxy.take();
        if let Some(l) = r.lease.take() {
            l.release();
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Failures

fn code_of(e: &DError, during_setup: bool) -> FailureCode {
    e.failure_code(during_setup)
        .and_then(|c| FailureCode::parse(c.as_str()))
        .unwrap_or(FailureCode::SandboxStartFailed)
}

fn phase_of(p: SetupPhase) -> FailurePhase {
    match p {
        SetupPhase::Pull => FailurePhase::Pull,
        SetupPhase::Build => FailurePhase::Build,
        SetupPhase::Start => FailurePhase::Start,
        SetupPhase::PostCreate => FailurePhase::PostCreate,
        SetupPhase::PodReady => FailurePhase::PodReady,
        SetupPhase::WorkspaceCopy => FailurePhase::WorkspaceCopy,
        _ => FailurePhase::Probe,
    }
}

fn timeout_text(cfg: &Config, phase: FailurePhase) -> String {
    let s = &cfg.settings;
    match phase {
        FailurePhase::Pull => s.pull_timeout.text.clone(),
        FailurePhase::Build => s.build_timeout.text.clone(),
        FailurePhase::PostCreate => s.post_create_timeout.text.clone(),
        FailurePhase::Probe => s.probe_timeout.text.clone(),
        _ => s.start_timeout.text.clone(),
    }
}

/// A setup-phase bound expired (05 §7.1).
fn timeout_failure(cfg: &Config, phase: FailurePhase, what: &str) -> Failure {
    let text = timeout_text(cfg, phase);
    Failure::new(
        FailureCode::SandboxSetupTimeout,
        format!("{what} did not finish within {text}"),
    )
    .phase(phase)
    .with(|e| e.timeout(text))
}

fn driver_failure(cfg: &Config, e: &DError, phase: FailurePhase) -> Failure {
    if let DError::SetupTimeout { phase: p, .. } = e {
        let ph = phase_of(*p);
        let mut f = timeout_failure(cfg, ph, p.as_str());
        f.event.error = e.to_string();
        return f;
    }
    let mut f = Failure::new(code_of(e, true), e.to_string()).phase(phase);
    match e {
        DError::StartFailed { hint, .. } => f = f.hint(hint.clone()),
        DError::NetworkUnavailable { hint, .. } => f = f.hint(Some(hint.clone())),
        DError::InvalidSpec { field, .. } => f = f.with(|e| e.detail(field.clone())),
        DError::Unavailable { .. } => f = f.hint(Some(INLINE_NEEDS_CONTAINER.to_owned())),
        _ => {}
    }
    f
}

fn resolve_failure(e: &ResolveError) -> Failure {
    match e {
        ResolveError::Unsandboxable { .. } => {
            Failure::new(FailureCode::SandboxDriverUnavailable, e.to_string()).phase(FailurePhase::Resolve)
        }
        _ => Failure::new(FailureCode::SandboxSpecInvalid, e.to_string()).phase(FailurePhase::Resolve),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Setup

/// One step of the setup with its inputs.
pub(crate) struct Setup<'a> {
    pub(crate) cfg: &'a Config,
    pub(crate) em: Emitter,
    pub(crate) run_id: String,
    pub(crate) run_name: String,
    pub(crate) run_dir: PathBuf,
    pub(crate) work_dir: PathBuf,
    pub(crate) repo_root: Option<PathBuf>,
    pub(crate) operator_env: Vec<SandboxEnvEntry>,
    pub(crate) owner: OwnerInfo,
}

fn placement_of(p: &SpecPlacement) -> Placement {
    match p {
        SpecPlacement::Host { .. } => Placement::Host,
        SpecPlacement::Run { .. } => Placement::Run,
        SpecPlacement::Own { .. } => Placement::Own,
    }
}

fn origin_label(r: &ResolvedSandbox) -> &'static str {
    match r.origin {
        Origin::Devcontainer => "devcontainer",
        Origin::DefaultImage => "default_image",
        Origin::Workflow | Origin::Node => {
            if r.build.is_some() {
                "build"
            } else {
                "image"
            }
        }
    }
}

fn mode_of(m: NetworkMode) -> Mode {
    match m {
        NetworkMode::Allowlist => Mode::Allowlist,
        NetworkMode::Denylist => Mode::Denylist,
        NetworkMode::Open => Mode::Open,
    }
}

fn compile_policy(p: &NetworkPolicySpec) -> Result<Policy, Failure> {
    let presets: Vec<&str> = p.preset.iter().map(|x| x.as_str()).collect();
    let rules: Vec<&str> = p.rules.iter().map(String::as_str).collect();
    Policy::compile(mode_of(p.mode), &presets, &rules).map_err(|errs| {
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        Failure::new(
            FailureCode::SandboxPolicyInvalid,
            format!(
                "the network policy of {} does not compile: {}",
                p.source,
                text.join("; ")
            ),
        )
        .phase(FailurePhase::Network)
    })
}

/// A dummy spec for the host driver's `prepare` (the noop driver only records why it skipped).
fn host_spec(work_dir: &str) -> ResolvedSandbox {
    let mut s = ResolvedSandbox {
        mode: ResolvedMode::Auto,
        source: "host".into(),
        origin: Origin::DefaultImage,
        devcontainer: None,
        image: None,
        build: None,
        user: None,
        workspace_folder: work_dir.to_owned(),
        post_create: Vec::new(),
        env_layers: Default::default(),
        mounts: Vec::new(),
        host_state: HostState::None,
        host_state_source: "host".into(),
        network: NetworkPolicySpec::open("host"),
        degrade_allowed: true,
        key: String::new(),
    };
    s.refresh_key();
    s
}

/// What a started container gives the executor.
#[derive(Clone)]
struct Started {
    sandbox: NodeSandbox,
    report: StartReport,
    shell: Shell,
    duration: Duration,
}

/// The network of the run: lease, proxy and the policies credentials are minted with.
///
/// No credential lives in a container's environment: the container env carries the proxy URL without
/// credentials, and each step (a node execution, a post-create phase) gets a fresh credential for its policy in
/// its exec env only, revoked when the step ends.
struct Net {
    lease: Arc<NetworkLease>,
    /// `http://<host>:<port>`, no credentials (the container env).
    base_url: String,
    host: String,
    port: u16,
    run_policy: Arc<Policy>,
    node_policies: BTreeMap<String, Arc<Policy>>,
    endpoint: iterion_driver::ProxyEndpoint,
}

/// Username of the credential of a post-create phase (node ids are identifiers, so none is `setup:…`-like;
/// the credential is attributed to the node for a node container).
const SETUP_USER: &str = "setup";

/// Everything needed to start a container, shared with lazily started node containers.
struct Starter {
    cfg: Config,
    em: Emitter,
    driver: Arc<dyn Driver>,
    run_id: String,
    run_name: String,
    work_dir: PathBuf,
    repo_root: Option<PathBuf>,
    operator: BTreeMap<String, String>,
    owner: OwnerInfo,
    net: Option<Arc<Net>>,
    artifact_dir: Option<PathBuf>,
    res: Arc<Mutex<Res>>,
}

impl std::fmt::Debug for Starter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Starter")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl Starter {
    fn sink(&self, node_id: Option<String>) -> EventSink {
        let em = self.em.clone();
        EventSink::new(move |ev| match ev {
            DriverEvent::ImageReady {
                image,
                digest,
                pulled,
                duration_ms,
            } => em.emit(SandboxImageReady {
                image,
                digest,
                pulled,
                duration_ms,
                node_id: node_id.clone(),
            }),
            DriverEvent::BuildStarted {
                driver,
                dockerfile,
                context,
                target,
                network,
            } => em.emit(crate::events::SandboxBuildStarted {
                driver: driver.to_string(),
                dockerfile,
                context,
                target: Some(target),
                network: network.as_str().to_owned(),
                node_id: node_id.clone(),
            }),
            DriverEvent::BuildFinished {
                driver,
                target,
                duration_ms,
                network,
            } => em.emit(crate::events::SandboxBuildFinished {
                driver: driver.to_string(),
                target,
                duration_ms,
                network: network.as_str().to_owned(),
                node_id: node_id.clone(),
            }),
            DriverEvent::BuildFailed { driver, error } => em.emit(crate::events::SandboxBuildFailed {
                driver: driver.to_string(),
                error,
                node_id: node_id.clone(),
            }),
            DriverEvent::Log { level, message } => em.log(
                match level {
                    iterion_driver::LogLevel::Debug => LogLevel::Debug,
                    iterion_driver::LogLevel::Info => LogLevel::Info,
                    iterion_driver::LogLevel::Warn => LogLevel::Warn,
                },
                &message,
            ),
            _ => {}
        })
    }

    /// The container environment of a spec (05 §4.5) with the reserved values; `scope` is `run` or a node id.
    fn merge_env(
        &self,
        spec: &ResolvedSandbox,
        proxy_url: Option<&str>,
    ) -> Result<iterion_envdeny::MergedEnv, Failure> {
        super::assembly::container_env(spec, &self.operator, proxy_url, self.artifact_dir.is_some()).map_err(
            |e| {
                let mut f =
                    Failure::new(FailureCode::SandboxSpecInvalid, e.to_string()).phase(FailurePhase::Start);
                f = f.with(|e| e.detail("env"));
                f
            },
        )
    }

    /// 4.5: classify, emit `sandbox_env_denied`, record names (before anything is created).
    fn classify(&self, scope: &str, spec: &ResolvedSandbox, proxy: bool) -> Result<(), Failure> {
        let provisional = proxy.then_some("http://127.0.0.1:3128");
        let merged = self.merge_env(spec, provisional)?;
        let report: Vec<EnvDeniedEntry> = merged
            .report
            .iter()
            .map(|e| EnvDeniedEntry {
                name: e.name.clone(),
                source: e.source.as_str().to_owned(),
                action: match e.action {
                    iterion_envdeny::Action::Removed => EnvAction::Removed,
                    _ => EnvAction::Overridden,
                },
                reason: e.reason.clone(),
                category: e.category.as_str().to_owned(),
            })
            .collect();
        let json: Vec<serde_json::Value> = report
            .iter()
            .filter_map(|e| serde_json::to_value(e).ok())
            .collect();
        let workflow_names: Vec<String> = spec.env_layers.workflow.keys().cloned().collect();
        let repo_names: Vec<String> = spec.env_layers.repo.keys().cloned().collect();
        let op_names: Vec<String> = self.operator.keys().cloned().collect();
        if scope == "run" {
            self.em.update(|d| {
                d.sandbox.env_layers.repo = repo_names;
                d.sandbox.env_layers.workflow = workflow_names;
                d.sandbox.env_layers.operator = op_names;
                d.sandbox.env_report = json;
            });
        }
        if !report.is_empty() {
            let names: Vec<String> = report.iter().map(|e| e.name.clone()).collect();
            self.em.log(
                LogLevel::Warn,
                &format!(
                    "sandbox: environment of {scope}: removed or overridden {} (names only; values never leave the host)",
                    {
                        let mut n = names.clone();
                        n.sort();
                        n.dedup();
                        n.join(", ")
                    }
                ),
            );
            self.em.emit(SandboxEnvDenied {
                sandbox: scope.to_owned(),
                names,
                entries: report,
                deny_class_version: iterion_envdeny::DENY_CLASS_VERSION,
            });
        }
        Ok(())
    }

    /// 4.8–4.9: prepare (pull) then build.
    async fn prepare(
        &self,
        spec: &ResolvedSandbox,
        node_id: Option<&str>,
        key: Option<&str>,
    ) -> Result<Prepared, Failure> {
        let s = &self.cfg.settings;
        let mut req = PrepareRequest::new(spec.clone());
        req.pull_policy = s.pull_policy;
        req.pull_timeout = s.pull_timeout.duration;
        req.events = self.sink(node_id.map(str::to_owned));
        let prepared = match tokio::time::timeout(s.pull_timeout.duration, self.driver.prepare(req)).await {
            Err(_) => return Err(timeout_failure(&self.cfg, FailurePhase::Pull, "image pull")),
            Ok(Err(e)) => return Err(driver_failure(&self.cfg, &e, FailurePhase::Pull)),
            Ok(Ok(p)) => p,
        };
        let Some(build) = &spec.build else {
            return Ok(prepared);
        };
        if !self.driver.capabilities().build {
            let mut f = Failure::new(
                FailureCode::SandboxSpecInvalid,
                format!(
                    "the {} driver cannot build images ({})",
                    self.driver.kind(),
                    build.dockerfile
                ),
            )
            .phase(FailurePhase::Build);
            f = f.with(|e| e.detail("build"));
            return Err(f);
        }
        let mut breq = BuildRequest::new(self.run_id.clone());
        breq.spec_key = key.map(str::to_owned);
        breq.build_timeout = s.build_timeout.duration;
        breq.pull_policy = s.pull_policy;
        // Under a filtering policy a build has no proxy, so it gets no network at all: nothing it does may
        // leave except through the policy (the driver also refuses what the engine would fetch itself).
        breq.network = match spec.network.mode {
            NetworkMode::Open => BuildNetwork::Open,
            NetworkMode::Allowlist | NetworkMode::Denylist => BuildNetwork::None,
        };
        breq.events = self.sink(node_id.map(str::to_owned));
        let built =
            match tokio::time::timeout(s.build_timeout.duration, self.driver.build(prepared, breq)).await {
                Err(_) => return Err(timeout_failure(&self.cfg, FailurePhase::Build, "image build")),
                Ok(Err(e)) => return Err(driver_failure(&self.cfg, &e, FailurePhase::Build)),
                Ok(Ok(p)) => p,
            };
        if let Some(img) = &built.image {
            Guard::lock(&self.res).images.push(img.reference.clone());
        }
        Ok(built)
    }

    /// 4.10–4.12: start, post-create, probes.
    async fn start(
        &self,
        spec: &ResolvedSandbox,
        prepared: Prepared,
        key: &str,
        node_id: Option<&str>,
    ) -> Result<Started, Failure> {
        let began = Instant::now();
        let s = &self.cfg.settings;
        let merged = self.merge_env(spec, self.net.as_ref().map(|n| n.base_url.as_str()))?;
        let mut req = StartRequest::new(self.run_id.clone(), self.work_dir.clone(), self.owner.clone());
        req.run_name = Some(self.run_name.clone());
        req.sandbox_key = key.to_owned();
        req.repo_root = self.repo_root.clone();
        req.container_env = merged.container;
        if let Some(dir) = &self.artifact_dir {
            req.aux_mounts.push(AuxMount {
                kind: AuxMountKind::RunFiles,
                host_path: dir.clone(),
                container_path: "/iterion/artifact-files".into(),
                read_only: false,
            });
        }
        let h = &self.cfg.host;
        req.host_state = super::assembly::host_state_plan(
            spec,
            super::assembly::HostStateFacts {
                data_dir: &h.data_dir,
                home: h.home.as_deref(),
                uid: h.uid,
                gid: h.gid,
                os: &h.os,
            },
        );
        req.proxy = self.net.as_ref().map(|n| n.endpoint.clone());
        req.hardening = s.container.hardening;
        req.limits = s.container.limits.clone();
        req.start_timeout = s.start_timeout.duration;
        req.events = self.sink(node_id.map(str::to_owned));
        let lease = self.net.as_ref().map(|n| n.lease.clone());
        let started = match tokio::time::timeout(
            s.start_timeout.duration,
            self.driver.start(prepared, lease.as_deref(), req),
        )
        .await
        {
            Err(_) => return Err(timeout_failure(&self.cfg, FailurePhase::Start, "container start")),
            Ok(Err(e)) => return Err(driver_failure(&self.cfg, &e, FailurePhase::Start)),
            Ok(Ok(st)) => st,
        };
        let run: Arc<dyn Run> = Arc::from(started.run);
        Guard::lock(&self.res).containers.push(run.clone());
        let report = started.report;
        self.emit_host_state(spec, &report);
        // 4.11 post-create
        if !spec.post_create.is_empty() {
            let pc_start = Instant::now();
            self.em.emit(SandboxPostCreateStarted {
                commands: spec.post_create.len() as u64,
                node_id: node_id.map(str::to_owned),
            });
            let t = s.post_create_timeout.duration;
            let log = self.sink(node_id.map(str::to_owned));
            let policy = self.net.as_ref().map(|n| match node_id {
                Some(id) => n
                    .node_policies
                    .get(id)
                    .cloned()
                    .unwrap_or_else(|| n.run_policy.clone()),
                None => n.run_policy.clone(),
            });
            let env = match policy {
                Some(p) => self.mint(SETUP_USER, node_id.map(str::to_owned), p),
                None => Vec::new(),
            };
            let r = tokio::time::timeout(
                t,
                iterion_driver::run_post_create_with_env(run.as_ref(), &spec.post_create, &env, t, &log),
            )
            .await;
            self.end_step(SETUP_USER, run.as_ref(), "post_create").await;
            let finished = |code: i64| SandboxPostCreateFinished {
                exit_code: code,
                duration_ms: ms(pc_start.elapsed()),
                node_id: node_id.map(str::to_owned),
            };
            match r {
                Err(_) | Ok(Err(DError::SetupTimeout { .. })) => {
                    return Err(timeout_failure(
                        &self.cfg,
                        FailurePhase::PostCreate,
                        "post_create",
                    ));
                }
                Ok(Err(e @ DError::PostCreateFailed { .. })) => {
                    let (index, code, tail) = match &e {
                        DError::PostCreateFailed {
                            index,
                            code,
                            stdout_tail,
                            stderr_tail,
                        } => (*index, *code, format!("{stdout_tail}{stderr_tail}")),
                        _ => (0, 0, String::new()),
                    };
                    self.em.emit(finished(i64::from(code)));
                    let mut msg = format!("post_create command {index} exited {code}");
                    let tail = tail.trim();
                    if !tail.is_empty() {
                        msg.push_str(": ");
                        msg.push_str(tail);
                    }
                    return Err(Failure::new(FailureCode::SandboxPostCreateFailed, msg)
                        .phase(FailurePhase::PostCreate));
                }
                Ok(Err(e)) => return Err(driver_failure(&self.cfg, &e, FailurePhase::PostCreate)),
                Ok(Ok(())) => self.em.emit(finished(0)),
            }
        }
        // 4.12 probes
        let probe = ExecRequest::new(["sh", "-c", "command -v bash"]);
        let shell = match tokio::time::timeout(
            s.probe_timeout.duration,
            iterion_driver::exec_collect(run.as_ref(), probe, OutputLimits::default()),
        )
        .await
        {
            Err(_) => return Err(timeout_failure(&self.cfg, FailurePhase::Probe, "the shell probe")),
            Ok(Err(e)) => return Err(driver_failure(&self.cfg, &e, FailurePhase::Probe)),
            Ok(Ok(c)) if c.status.code == 0 => Shell::Bash,
            Ok(Ok(_)) => Shell::Sh,
        };
        let host_binds = self.driver.capabilities().host_binds;
        Ok(Started {
            sandbox: NodeSandbox {
                run,
                placement: if node_id.is_some() {
                    Placement::Own
                } else {
                    Placement::Run
                },
                shell,
                workdir: spec.workspace_folder.clone(),
                host_work_dir: host_binds.then(|| self.work_dir.clone()),
            },
            report,
            shell,
            duration: began.elapsed(),
        })
    }

    /// Registers a fresh credential `user` (attributed to `node_id`) with `policy` and returns the exec-scope
    /// proxy variables that carry it; empty without a proxy. A credential left under that name is replaced.
    fn mint(&self, user: &str, node_id: Option<String>, policy: Arc<Policy>) -> Vec<(String, String)> {
        let Some(net) = &self.net else { return Vec::new() };
        let res = Guard::lock(&self.res);
        let Some(proxy) = res.proxy.as_ref() else {
            return Vec::new();
        };
        proxy.remove_credential(user);
        let token = iterion_netproxy::new_token();
        match proxy.add_credential(Credential::new(user, token.clone(), node_id, policy)) {
            Ok(()) => proxy_env(&proxy_url(user, &token, &net.host, net.port)),
            Err(e) => {
                self.em.log(
                    LogLevel::Warn,
                    &format!("sandbox: cannot register the proxy credential of {user}: {e}"),
                );
                Vec::new()
            }
        }
    }

    /// Ends a step while the egress proxy is active: revokes its credential (later requests get 407, its
    /// tunnels close), then kills what the step left running in its sandbox (steps never overlap, so nothing
    /// else of the run is running there). Without a proxy there is no credential to outlive the step, and
    /// processes a step leaves behind are left alone (a background service for later nodes keeps working).
    async fn end_step(&self, user: &str, run: &dyn Run, what: &str) {
        if self.net.is_none() {
            return;
        }
        if let Some(proxy) = Guard::lock(&self.res).proxy.as_ref() {
            proxy.remove_credential(user);
        }
        match tokio::time::timeout(Duration::from_secs(10), run.kill_leftovers()).await {
            Ok(Ok(Some(n))) if n > 0 => self.em.log(
                LogLevel::Info,
                &format!("sandbox: killed {n} processes left behind by {what}"),
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => self.em.log(
                LogLevel::Warn,
                &format!("sandbox: cannot kill the processes left behind by {what}: {e}"),
            ),
            Err(_) => self.em.log(
                LogLevel::Warn,
                &format!("sandbox: killing the processes left behind by {what} did not finish within 10s"),
            ),
        }
    }

    fn emit_host_state(&self, spec: &ResolvedSandbox, report: &StartReport) {
        if let Some(r) = &report.user_remap {
            self.em.emit(SandboxUserRemap {
                uid: r.uid,
                gid: r.gid,
                reason: "host_state=auto: align container UID with host so writes to the mounted host state remain host-owned".into(),
            });
        }
        if let Some(m) = &report.uid_mismatch {
            self.em.log(
                LogLevel::Warn,
                &format!(
                    "sandbox: the spec's user {} differs from the host uid {}; files written to host state may not be host-owned",
                    m.spec_user, m.host_uid
                ),
            );
            self.em.emit(SandboxUidMismatchWarning {
                spec_user: m.spec_user.clone(),
                host_uid: m.host_uid,
            });
        }
        if spec.host_state != HostState::Auto {
            self.em.emit(SandboxHostStateMounted {
                enabled: false,
                source: spec.host_state_source.clone(),
                workspace_folder: None,
                mounts: None,
                caches: None,
                protected: None,
                created: None,
                skipped: None,
                home: None,
                home_tmpfs: None,
            });
            return;
        }
        use iterion_driver::MountOrigin as O;
        let fmt = |m: &iterion_driver::MountReport| {
            if m.read_only {
                format!("{}:{}:ro", m.source, m.target)
            } else {
                format!("{}:{}", m.source, m.target)
            }
        };
        let of = |o: O| -> Vec<String> { report.mounts.iter().filter(|m| m.origin == o).map(fmt).collect() };
        self.em.emit(SandboxHostStateMounted {
            enabled: true,
            source: spec.host_state_source.clone(),
            workspace_folder: Some(report.workspace.clone()),
            mounts: Some(of(O::HostState)),
            caches: Some(of(O::Cache)),
            protected: Some(of(O::Protected)),
            created: Some(report.protected_created.clone()),
            skipped: Some(
                report
                    .host_state_skipped
                    .iter()
                    .map(|s| SkippedPath {
                        path: s.path.clone(),
                        reason: s.reason.clone(),
                    })
                    .collect(),
            ),
            home: Some(match report.home {
                iterion_driver::HomeSource::Host => HomeSource::Host,
                _ => HomeSource::Image,
            }),
            home_tmpfs: Some(!report.tmpfs.is_empty() && report.home == iterion_driver::HomeSource::Host),
        });
    }
}

/// A node container not started yet (5.2).
struct OwnSpec {
    spec: ResolvedSandbox,
    started: tokio::sync::Mutex<Option<Result<NodeSandbox, SandboxUnavailable>>>,
}

/// The executor's view of the sandboxes: each node's `Run`, started lazily for node containers.
pub(crate) struct Sandboxes {
    host: NodeSandbox,
    run: Option<NodeSandbox>,
    placements: BTreeMap<String, Placement>,
    own_keys: BTreeMap<String, String>,
    own: BTreeMap<String, OwnSpec>,
    starter: Option<Arc<Starter>>,
    driver_name: Option<String>,
}

impl std::fmt::Debug for Sandboxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandboxes")
            .field("placements", &self.placements)
            .finish_non_exhaustive()
    }
}

impl Sandboxes {
    pub(crate) fn sandboxed(&self) -> bool {
        self.run.is_some()
    }

    pub(crate) fn driver_name(&self) -> Option<String> {
        self.driver_name.clone()
    }
}

#[async_trait]
impl NodeSandboxes for Sandboxes {
    async fn sandbox_for(&self, node_id: &str) -> Result<NodeSandbox, SandboxUnavailable> {
        match self.placements.get(node_id).copied().unwrap_or(Placement::Host) {
            Placement::Host => Ok(self.host.clone()),
            Placement::Run => Ok(self.run.clone().unwrap_or_else(|| self.host.clone())),
            Placement::Own => {
                let (Some(key), Some(starter)) = (self.own_keys.get(node_id), self.starter.as_ref()) else {
                    return Ok(self.host.clone());
                };
                let Some(own) = self.own.get(key) else {
                    return Ok(self.host.clone());
                };
                let mut slot = own.started.lock().await;
                if let Some(r) = slot.as_ref() {
                    return r.clone();
                }
                let unavailable = |f: Failure| SandboxUnavailable {
                    code: f.event.code,
                    error: f.event.error.clone(),
                    phase: Some(FailurePhase::NodeContainer),
                    hint: f.event.hint.clone(),
                };
                let r = async {
                    starter.classify(node_id, &own.spec, starter.net.is_some())?;
                    let prepared = starter.prepare(&own.spec, Some(node_id), Some(key)).await?;
                    let st = starter.start(&own.spec, prepared, key, Some(node_id)).await?;
                    starter.em.emit(SandboxNodeContainerStarted {
                        node_id: node_id.to_owned(),
                        key: key.clone(),
                        image: st.report.image.reference.clone(),
                        container: st.report.container_id.clone(),
                        duration_ms: ms(st.duration),
                    });
                    let (id, name) = (st.report.container_id.clone(), st.report.name.clone());
                    let k = key.clone();
                    starter.em.update(move |d| {
                        d.sandbox.containers.push(ContainerRecord {
                            role: "node".into(),
                            id: id.chars().take(12).collect(),
                            name,
                            key: Some(k),
                        })
                    });
                    Ok::<_, Failure>(st.sandbox)
                }
                .await
                .map_err(unavailable);
                *slot = Some(r.clone());
                r
            }
        }
    }

    fn exec_env(&self, node_id: &str) -> Vec<(String, String)> {
        let Some(starter) = &self.starter else {
            return Vec::new();
        };
        let Some(policy) = starter
            .net
            .as_ref()
            .and_then(|n| n.node_policies.get(node_id).cloned())
        else {
            return Vec::new();
        };
        starter.mint(node_id, Some(node_id.to_owned()), policy)
    }

    async fn node_ended(&self, node_id: &str, sandbox: &NodeSandbox) {
        let Some(starter) = &self.starter else { return };
        if sandbox.placement == Placement::Host {
            return;
        }
        starter
            .end_step(node_id, sandbox.run.as_ref(), &format!("node {node_id}"))
            .await;
    }
}

fn proxy_env(url: &str) -> Vec<(String, String)> {
    [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .iter()
    .map(|k| ((*k).to_owned(), url.to_owned()))
    .collect()
}

fn proxy_url(user: &str, token: &str, host: &str, port: u16) -> String {
    format!("http://{user}:{token}@{}:{port}", url_host(host))
}

/// A host as written in a URL: an IPv6 address in brackets.
fn url_host(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

impl Setup<'_> {
    async fn host_run(&self) -> Result<NodeSandbox, Failure> {
        let host = &self.cfg.drivers.host;
        let wd = self.work_dir.to_string_lossy().into_owned();
        let prepared = host
            .prepare(PrepareRequest::new(host_spec(&wd)))
            .await
            .map_err(|e| driver_failure(self.cfg, &e, FailurePhase::Start))?;
        let req = StartRequest::new(self.run_id.clone(), self.work_dir.clone(), self.owner.clone());
        let started = host
            .start(prepared, None, req)
            .await
            .map_err(|e| driver_failure(self.cfg, &e, FailurePhase::Start))?;
        Ok(NodeSandbox {
            run: Arc::from(started.run),
            placement: Placement::Host,
            shell: Shell::Bash,
            workdir: wd,
            host_work_dir: Some(self.work_dir.clone()),
        })
    }

    fn emit_skipped(&self, driver: &str, spec: &ResolvedSandbox, reason: &str, node_id: Option<&str>) {
        self.em.emit(SandboxSkipped {
            driver: driver.to_owned(),
            mode: spec.mode.as_str().to_owned(),
            source: spec.source.clone(),
            reason: reason.to_owned(),
            node_id: node_id.map(str::to_owned),
            file_secrets_dropped: None,
        });
    }

    /// Runs 4.2–4.12 and returns the sandboxes the executor uses.
    pub(crate) async fn run(
        &self,
        plan: &Result<SandboxPlan, ResolveError>,
        guard: &mut Guard,
    ) -> Result<Arc<Sandboxes>, Failure> {
        let cfg = self.cfg;
        let em = &self.em;
        // 4.2
        let plan = match plan {
            Ok(p) => p.clone(),
            Err(e) => {
                if let ResolveError::Devcontainer { diagnostics, .. } = e {
                    for d in diagnostics {
                        em.log(LogLevel::Error, &d.render_header());
                    }
                }
                return Err(resolve_failure(e));
            }
        };
        for w in &plan.warnings {
            em.log(LogLevel::Warn, &w.render_header());
        }
        let floors: Vec<serde_json::Value> = plan
            .floors
            .iter()
            .filter_map(|f| serde_json::to_value(f).ok())
            .collect();
        let nodes: BTreeMap<String, NodePlacementRecord> = plan
            .nodes
            .iter()
            .map(|(id, p)| {
                let rec = match p {
                    SpecPlacement::Host { reason, .. } => NodePlacementRecord {
                        placement: Placement::Host,
                        reason: Some(reason.clone()),
                        key: None,
                        image: None,
                    },
                    SpecPlacement::Run { .. } => NodePlacementRecord {
                        placement: Placement::Run,
                        reason: None,
                        key: None,
                        image: None,
                    },
                    SpecPlacement::Own { key, sandbox } => NodePlacementRecord {
                        placement: Placement::Own,
                        reason: None,
                        key: Some(key.clone()),
                        image: sandbox.image.clone(),
                    },
                };
                (id.clone(), rec)
            })
            .collect();
        let active = plan.any_active();
        let resolved = plan.run.clone();
        em.update(|d| {
            d.sandbox.floors = floors;
            d.sandbox.resolved = resolved;
            d.sandbox.nodes = nodes;
            d.sandbox.active = active;
            d.sandbox.skipped = None;
            d.sandbox.containers.clear();
        });
        // 4.3
        for f in &plan.floors {
            em.emit(SandboxFloorApplied {
                floor: f.floor.as_str().to_owned(),
                value: f.value.clone(),
                scope: match f.scope {
                    iterion_spec::resolved::Scope::Run => FloorScope::Run,
                    iterion_spec::resolved::Scope::Node => FloorScope::Node,
                },
                node_id: f.node_id.clone(),
                from: f.from.clone(),
                to: f.to.clone(),
                shadowed_source: f.shadowed_source.clone(),
            });
        }
        if let Some(r) = &plan.run
            && r.network.defaulted
        {
            em.emit(SandboxNetworkDefaulted {
                mode: r.network.mode.as_str().to_owned(),
                preset: r.network.preset.map(|p| p.as_str()).unwrap_or("iterion-default").to_owned(),
                rules: r.network.rules.len() as u64,
                devcontainer: r.devcontainer.as_ref().map(|d| d.path.clone()).unwrap_or_default(),
                reason: "the repository defines the sandbox (devcontainer.json) and the workflow declares no network base; egress defaults to the iterion-default allowlist".into(),
            });
        }
        let run_mode = plan.run_mode;
        em.emit(SandboxResolved {
            active,
            mode: match run_mode {
                iterion_spec::resolved::RunMode::None => "none",
                iterion_spec::resolved::RunMode::Auto => "auto",
                iterion_spec::resolved::RunMode::Inline => "inline",
            }
            .to_owned(),
            source: plan.run_source.clone(),
            origin: plan.run.as_ref().map(|r| origin_label(r).to_owned()),
            image: plan.run.as_ref().and_then(|r| r.image.clone()),
            build: plan.run.as_ref().is_some_and(|r| r.build.is_some()),
            devcontainer: plan
                .run
                .as_ref()
                .and_then(|r| r.devcontainer.as_ref().map(|d| d.path.clone())),
            host_state: plan
                .run
                .as_ref()
                .map(|r| r.host_state.as_str())
                .unwrap_or("none")
                .to_owned(),
            host_state_source: plan
                .run
                .as_ref()
                .map(|r| r.host_state_source.clone())
                .unwrap_or_else(|| "default".into()),
            network_mode: plan
                .run
                .as_ref()
                .map(|r| r.network.mode.as_str())
                .unwrap_or("open")
                .to_owned(),
            network_preset: plan
                .run
                .as_ref()
                .and_then(|r| r.network.preset.map(|p| p.as_str().to_owned())),
            placements: plan
                .nodes
                .iter()
                .map(|(k, p)| (k.clone(), placement_of(p)))
                .collect(),
            warnings: plan.warnings.len() as u64,
        });
        // Host nodes always have a sandbox.
        let host = self.host_run().await?;
        Guard::lock(&guard.res).host_runs.push(host.run.clone());
        let mut placements: BTreeMap<String, Placement> = plan
            .nodes
            .iter()
            .map(|(k, p)| (k.clone(), placement_of(p)))
            .collect();
        let host_only = |placements: BTreeMap<String, Placement>, host: NodeSandbox| {
            Arc::new(Sandboxes {
                host,
                run: None,
                placements,
                own_keys: BTreeMap::new(),
                own: BTreeMap::new(),
                starter: None,
                driver_name: None,
            })
        };
        // Node overrides ignored on the host (01 §8.8).
        for (id, p) in &plan.nodes {
            if let SpecPlacement::Host {
                skip_notice: Some(n), ..
            } = p
            {
                em.emit(SandboxSkipped {
                    driver: cfg.drivers.container.name().to_owned(),
                    mode: "none".into(),
                    source: plan.run_source.clone(),
                    reason: n.clone(),
                    node_id: Some(id.clone()),
                    file_secrets_dropped: None,
                });
            }
        }
        if let Some(reason) = &plan.run_skippable {
            em.emit(SandboxSkipped {
                driver: "none".into(),
                mode: "auto".into(),
                source: plan.run_source.clone(),
                reason: reason.clone(),
                node_id: None,
                file_secrets_dropped: None,
            });
            let r = reason.clone();
            em.update(|d| {
                d.sandbox.skipped = Some(SkippedScope {
                    scope: "run".into(),
                    reason: r,
                })
            });
        }
        if !active {
            return Ok(host_only(placements, host));
        }
        // 4.4
        let mut run_spec = plan.run.clone();
        let mut own: Vec<(String, String, ResolvedSandbox)> = plan
            .nodes
            .iter()
            .filter_map(|(id, p)| match p {
                SpecPlacement::Own { key, sandbox } => Some((id.clone(), key.clone(), (**sandbox).clone())),
                _ => None,
            })
            .collect();
        let inline_floor = cfg
            .env
            .get("ITERION_SANDBOX_FLOOR")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("inline"));
        let driver = match &cfg.drivers.container {
            DriverChoice::Container(d) => d.clone(),
            choice => {
                let (driver_label, reason, fail): (&str, &str, Option<String>) = match choice {
                    DriverChoice::ForcedNoop if inline_floor => (
                        "noop",
                        OPERATOR_NOOP,
                        Some("the inline floor forbids running on the host".into()),
                    ),
                    DriverChoice::ForcedNoop => ("noop", OPERATOR_NOOP, None),
                    DriverChoice::ForcedUnavailable { message } => {
                        ("none", NO_RUNTIME, Some(message.clone()))
                    }
                    _ => ("none", NO_RUNTIME, None),
                };
                if let DriverChoice::Unavailable { reason } = choice {
                    em.log(LogLevel::Info, &format!("sandbox: no container driver: {reason}"));
                }
                let forced_noop = matches!(choice, DriverChoice::ForcedNoop);
                let scopes: Vec<(Option<String>, ResolvedSandbox)> = run_spec
                    .iter()
                    .map(|r| (None, r.clone()))
                    .chain(own.iter().map(|(id, _, s)| (Some(id.clone()), s.clone())))
                    .collect();
                for (_, s) in &scopes {
                    if let Some(msg) = &fail {
                        return Err(Failure::new(FailureCode::SandboxDriverUnavailable, msg.clone())
                            .phase(FailurePhase::Driver));
                    }
                    if !forced_noop && !s.degrade_allowed {
                        return Err(Failure::new(
                            FailureCode::SandboxDriverUnavailable,
                            INLINE_NEEDS_CONTAINER,
                        )
                        .phase(FailurePhase::Driver));
                    }
                }
                for (node, s) in &scopes {
                    self.emit_skipped(driver_label, s, reason, node.as_deref());
                }
                let dl = driver_label.to_owned();
                let r = reason.to_owned();
                em.update(|d| {
                    d.sandbox.driver = Some(dl);
                    d.sandbox.skipped = Some(SkippedScope {
                        scope: "run".into(),
                        reason: r,
                    });
                });
                for p in placements.values_mut() {
                    *p = Placement::Host;
                }
                return Ok(host_only(placements, host));
            }
        };
        let kind = driver.kind().as_str().to_owned();
        {
            let k = kind.clone();
            em.update(|d| d.sandbox.driver = Some(k));
            Guard::lock(&guard.res).driver = Some(driver.clone());
            Guard::lock(&guard.res).keep_images = cfg.settings.keep_build_images;
        }
        guard.driver_name = kind.clone();
        let caps = driver.capabilities();
        let artifact_dir = if caps.host_binds {
            em.run().artifact_files_dir().ok()
        } else {
            None
        };
        // Effective policies (4.7 items 1–2).
        let run_policy = run_spec
            .as_ref()
            .map(|r| r.network.clone())
            .unwrap_or_else(|| NetworkPolicySpec::open("run is unsandboxed"));
        let mut node_policies: BTreeMap<String, NetworkPolicySpec> = BTreeMap::new();
        let mut overrides = Vec::new();
        for (id, p) in &plan.nodes {
            match p {
                SpecPlacement::Run { network: Some(n) } => {
                    node_policies.insert(id.clone(), n.clone());
                    overrides.push(id.clone());
                }
                SpecPlacement::Run { network: None } => {
                    node_policies.insert(id.clone(), run_policy.clone());
                }
                SpecPlacement::Own { sandbox, .. } => {
                    node_policies.insert(id.clone(), sandbox.network.clone());
                    overrides.push(id.clone());
                }
                SpecPlacement::Host { .. } => {}
            }
        }
        let needs_proxy = run_spec.as_ref().is_some_and(|r| r.network.needs_proxy())
            || node_policies.values().any(|p| p.needs_proxy());
        let mut compiled: BTreeMap<String, Arc<Policy>> = BTreeMap::new();
        let mut run_compiled = None;
        if needs_proxy {
            for (id, p) in &node_policies {
                compiled.insert(id.clone(), Arc::new(compile_policy(p)?));
            }
            run_compiled = Some(Arc::new(compile_policy(&run_policy)?));
        }
        let operator = iterion_envdeny::operator_layer(&self.operator_env);
        let mut starter = Starter {
            cfg: cfg.clone(),
            em: em.clone(),
            driver: driver.clone(),
            run_id: self.run_id.clone(),
            run_name: self.run_name.clone(),
            work_dir: self.work_dir.clone(),
            repo_root: self.repo_root.clone(),
            operator,
            owner: self.owner.clone(),
            net: None,
            artifact_dir,
            res: guard.res.clone(),
        };
        // 4.5
        if let Some(r) = &run_spec {
            starter.classify("run", r, needs_proxy)?;
        }
        // 4.8–4.9 for the run container
        let prepared = match &run_spec {
            Some(r) => Some(starter.prepare(r, None, None).await?),
            None => None,
        };
        // 4.7 item 3
        if let Some(run_compiled) = run_compiled {
            let net = self
                .start_network(&driver, &run_policy, run_compiled, &compiled, &overrides, guard)
                .await?;
            starter.net = Some(Arc::new(net));
        }
        // 4.10–4.12
        let run_sandbox = match (run_spec.take(), prepared) {
            (Some(r), Some(p)) => {
                let st = starter.start(&r, p, "run", None).await?;
                let rep = &st.report;
                let (id, name, user) = (rep.container_id.clone(), rep.name.clone(), rep.user.clone());
                let network = NetworkRecord {
                    enforced: rep.enforced_egress,
                    placement: match rep.placement {
                        iterion_driver::Placement::Relay => "relay",
                        iterion_driver::Placement::Advisory => "advisory",
                        _ => "open",
                    }
                    .into(),
                };
                em.update(|d| {
                    d.sandbox.effective_user = user;
                    d.sandbox.network = Some(network);
                    d.sandbox.containers.push(ContainerRecord {
                        role: "run".into(),
                        id: id.chars().take(12).collect(),
                        name,
                        key: None,
                    });
                });
                em.emit(SandboxStarted {
                    driver: kind.clone(),
                    mode: r.mode.as_str().to_owned(),
                    source: r.source.clone(),
                    origin: origin_label(&r).to_owned(),
                    image: rep.image.reference.clone(),
                    container: rep.container_id.clone(),
                    workspace_folder: r.workspace_folder.clone(),
                    user: rep.user.clone().unwrap_or_default(),
                    has_post_create: !r.post_create.is_empty(),
                    network_mode: r.network.mode.as_str().to_owned(),
                    enforced_egress: rep.enforced_egress,
                    shell: st.shell.program().to_owned(),
                    duration_ms: ms(st.duration),
                });
                em.log(
                    LogLevel::Info,
                    &format!(
                        "sandbox: container {} started (image={}, workspace={})",
                        rep.container_id.chars().take(12).collect::<String>(),
                        rep.image.reference,
                        r.workspace_folder
                    ),
                );
                Some(st.sandbox)
            }
            _ => None,
        };
        let own_keys: BTreeMap<String, String> =
            own.iter().map(|(id, k, _)| (id.clone(), k.clone())).collect();
        let own_specs: BTreeMap<String, OwnSpec> = own
            .drain(..)
            .map(|(_, k, s)| {
                (
                    k,
                    OwnSpec {
                        spec: s,
                        started: tokio::sync::Mutex::new(None),
                    },
                )
            })
            .collect();
        Ok(Arc::new(Sandboxes {
            host,
            run: run_sandbox,
            placements,
            own_keys,
            own: own_specs,
            starter: Some(Arc::new(starter)),
            driver_name: Some(kind),
        }))
    }

    /// 4.7 item 3: the lease, the proxy on it, per-node credentials and `sandbox_network_started`.
    async fn start_network(
        &self,
        driver: &Arc<dyn Driver>,
        run_policy: &NetworkPolicySpec,
        run_compiled: Arc<Policy>,
        compiled: &BTreeMap<String, Arc<Policy>>,
        overrides: &[String],
        guard: &mut Guard,
    ) -> Result<Net, Failure> {
        let cfg = self.cfg;
        let req = NetworkRequest::new(
            self.run_id.clone(),
            self.run_dir.clone(),
            cfg.settings.require_enforced_egress,
        );
        let lease = match tokio::time::timeout(cfg.settings.start_timeout.duration, driver.network(req)).await
        {
            Err(_) => return Err(timeout_failure(cfg, FailurePhase::Start, "the network lease")),
            Ok(Err(e)) => return Err(driver_failure(cfg, &e, FailurePhase::Network)),
            Ok(Ok(l)) => Arc::new(l),
        };
        Guard::lock(&guard.res).lease = Some(lease.clone());
        // The proxy starts with one credential nobody is given (the configuration requires one); it is removed
        // once the proxy runs. Steps get credentials of their own while they run (`Starter::mint`).
        const BOOTSTRAP: &str = "bootstrap";
        let mut builder = ProxyConfig::builder()
            .listen(super::assembly::proxy_listen(&lease.proxy_listen))
            .credential(Credential::new(
                BOOTSTRAP,
                iterion_netproxy::new_token(),
                None,
                run_compiled.clone(),
            ));
        if let Some(sd) = &cfg.settings.silent_deny {
            builder = builder.silent_deny(sd);
        }
        let em = self.em.clone();
        let run_id = self.run_id.clone();
        let dedup = Mutex::new(Dedup::new());
        builder = builder.on_event(move |ev| {
            if let ProxyEvent::Denied(d) = ev {
                let reason_text = d.reason.clone().unwrap_or_else(|| "policy denial".into());
                let admitted = dedup.lock().unwrap_or_else(|p| p.into_inner()).admit(
                    &d.host,
                    d.port,
                    d.node_id.as_deref(),
                    &reason_text,
                    Instant::now(),
                );
                let Some(suppressed) = admitted else { return };
                let reason = match reason_text.as_str() {
                    "non-global address" => BlockReason::NonGlobalAddress,
                    "secret leak" => BlockReason::SecretLeak,
                    _ => BlockReason::PolicyDenial,
                };
                em.emit(NetworkBlocked {
                    host: d.host.clone(),
                    port: d.port,
                    reason,
                    rule: d.rule.clone().unwrap_or_else(|| "no rule matched".into()),
                    decision_id: d.decision_id.to_string(),
                    run_id: run_id.clone(),
                    node_id: d.node_id.clone(),
                    suppressed,
                    address: d.address.clone(),
                    secret: None,
                });
            }
        });
        let start_failed = |e: String| {
            Failure::new(
                FailureCode::SandboxStartFailed,
                format!("cannot start the egress proxy: {e}"),
            )
            .phase(FailurePhase::Network)
        };
        let config = builder.build().map_err(|e| start_failed(e.to_string()))?;
        let proxy = Proxy::start(config)
            .await
            .map_err(|e| start_failed(e.to_string()))?;
        proxy.remove_credential(BOOTSTRAP);
        let placement = lease.placement;
        let port = match placement {
            iterion_driver::Placement::Advisory => proxy
                .local_addr()
                .map(|a| a.port())
                .unwrap_or(lease.container_proxy_port),
            _ => lease.container_proxy_port,
        };
        let proxy_text = match &lease.proxy_listen {
            ProxyListen::Unix(p) => p.to_string_lossy().into_owned(),
            ProxyListen::Tcp(_) => proxy.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        };
        Guard::lock(&guard.res).proxy = Some(proxy);
        let host = lease.container_proxy_host.clone();
        let net_placement = match placement {
            iterion_driver::Placement::Advisory => NetworkPlacement::Advisory,
            _ => NetworkPlacement::Relay,
        };
        if placement == iterion_driver::Placement::Advisory {
            let reason = "the engine cannot reach a host socket (Docker Desktop); the proxy is advisory: processes that ignore HTTP(S)_PROXY bypass it";
            self.em.log(LogLevel::Warn, &format!("sandbox: {reason}"));
            let engine = driver.engine_info().await.map(|i| i.engine).unwrap_or_default();
            self.em.emit(SandboxNetworkAdvisory {
                driver: driver.kind().as_str().to_owned(),
                engine,
                reason: reason.into(),
            });
        }
        self.em.emit(SandboxNetworkStarted {
            driver: driver.kind().as_str().to_owned(),
            mode: run_policy.mode.as_str().to_owned(),
            preset: run_policy.preset.map(|p| p.as_str().to_owned()),
            rules: run_policy.rules.len() as u64,
            placement: net_placement,
            proxy: proxy_text,
            enforced: placement == iterion_driver::Placement::Relay,
            node_overrides: overrides.to_vec(),
        });
        Ok(Net {
            lease,
            base_url: format!("http://{}:{port}", url_host(&host)),
            host: host.clone(),
            port,
            run_policy: run_compiled,
            node_policies: compiled.clone(),
            endpoint: iterion_driver::ProxyEndpoint { host, port },
        })
    }
}
