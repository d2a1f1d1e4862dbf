//! Starting a container: env merge and classification, prepare, start, post-create, host state (05 §4.5–4.12).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iterion_driver::{
    AuxMount, AuxMountKind, BuildNetwork, BuildRequest, Driver, DriverEvent, Error as DError, EventSink,
    ExecRequest, NetworkLease, OutputLimits, OwnerInfo, PrepareRequest, Prepared, Run, StartReport,
    StartRequest,
};
use iterion_netpolicy::Policy;
use iterion_netproxy::Credential;
use iterion_spec::resolved::{NetworkMode, ResolvedSandbox};

use super::convert::ms;
use super::failures::{driver_failure, timeout_failure};
use super::guard::{Guard, Res};
use crate::events::{
    EnvAction, EnvDeniedEntry, HomeSource, PlacementKind, SandboxEnvDenied, SandboxHostBindsDropped,
    SandboxHostStateMounted, SandboxImageReady, SandboxPostCreateFinished, SandboxPostCreateStarted,
    SandboxUidMismatchWarning, SandboxUserRemap, SkippedPath,
};
use crate::exec::{NodeSandbox, Shell};
use crate::failure::{FailureCode, FailurePhase};
use crate::lifecycle::config::Config;
use crate::lifecycle::sink::Emitter;
use crate::lifecycle::step_failure::Failure;
use crate::store::LogLevel;

/// What a started container gives the executor.
#[derive(Clone)]
pub(super) struct Started {
    pub(super) sandbox: NodeSandbox,
    pub(super) report: StartReport,
    pub(super) shell: Shell,
    pub(super) duration: Duration,
}

/// The network of the run: lease, proxy and the policies credentials are minted with.
///
/// No credential lives in a container's environment: the container env carries the proxy URL without
/// credentials, and each step (a node execution, a post-create phase) gets a fresh credential for its policy in
/// its exec env only, revoked when the step ends.
pub(super) struct Net {
    pub(super) lease: Arc<NetworkLease>,
    /// `http://<host>:<port>`, no credentials (the container env).
    pub(super) base_url: String,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) run_policy: Arc<Policy>,
    pub(super) node_policies: BTreeMap<String, Arc<Policy>>,
    pub(super) endpoint: iterion_driver::ProxyEndpoint,
    /// Secret name → placeholder of every proxy binding.
    pub(super) placeholders: BTreeMap<String, String>,
    /// The run's CA files (`ca.pem`, `ca-bundle.pem`) when the proxy inspects TLS.
    pub(super) tls_dir: Option<std::path::PathBuf>,
}

/// Environment entries, name and value.
type EnvPairs = Vec<(String, String)>;

/// Username of the credential of a post-create phase (node ids are identifiers, so none is `setup:…`-like;
/// the credential is attributed to the node for a node container).
pub(super) const SETUP_USER: &str = "setup";

/// Everything needed to start a container, shared with lazily started node containers.
pub(super) struct Starter {
    pub(super) cfg: Config,
    pub(super) em: Emitter,
    pub(super) driver: Arc<dyn Driver>,
    pub(super) run_id: String,
    pub(super) run_name: String,
    pub(super) work_dir: PathBuf,
    pub(super) repo_root: Option<PathBuf>,
    /// The run's `worktree: auto` workspace (see [`crate::lifecycle::sandbox::Setup`]).
    pub(super) worktree: Option<crate::exec::Worktree>,
    pub(super) operator: BTreeMap<String, String>,
    pub(super) owner: OwnerInfo,
    pub(super) net: Option<Arc<Net>>,
    pub(super) artifact_dir: Option<PathBuf>,
    /// The run's attachments directory, mounted read-only at `/run/iterion/attachments`.
    pub(super) attachments_dir: Option<PathBuf>,
    pub(super) res: Arc<Mutex<Res>>,
    /// Claw nodes placed in the run container.
    pub(super) claw_run_nodes: Vec<String>,
    /// Every claw node (a node container runs the runner when its node is one).
    pub(super) claw_nodes: std::collections::BTreeSet<String>,
    /// Sandboxes whose last step ended and whose leftover processes are still to be killed (with what ran
    /// there last), killed when the next step starts: when no step follows, the teardown removes the
    /// container, and the kill — one engine exec — is not needed.
    pub(super) leftovers: tokio::sync::Mutex<Vec<(Arc<dyn Run>, String)>>,
    /// The run's granted secrets (names, hosts, delivery, source).
    pub(super) secret_infos: Vec<crate::lifecycle::secrets::SecretInfo>,
    /// The host directory of the file secrets, removed with the run.
    pub(super) secret_dir: Option<Arc<crate::lifecycle::secrets::SecretDir>>,
}

impl std::fmt::Debug for Starter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Starter")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl Starter {
    pub(super) fn sink(&self, node_id: Option<String>) -> EventSink {
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
                cache,
                builder,
            } => em.emit(crate::events::SandboxBuildStarted {
                driver: driver.to_string(),
                dockerfile,
                context,
                target: Some(target),
                network: network.as_str().to_owned(),
                cache: cache.as_str().to_owned(),
                builder: builder.kind.as_str().to_owned(),
                builder_reason: builder.reason,
                node_id: node_id.clone(),
            }),
            DriverEvent::BuildFinished {
                driver,
                target,
                duration_ms,
                network,
                cache,
                builder,
            } => em.emit(crate::events::SandboxBuildFinished {
                driver: driver.to_string(),
                target,
                duration_ms,
                network: network.as_str().to_owned(),
                cache: cache.as_str().to_owned(),
                builder: builder.kind.as_str().to_owned(),
                node_id: node_id.clone(),
            }),
            DriverEvent::BuildFailed {
                driver,
                error,
                builder,
            } => em.emit(crate::events::SandboxBuildFailed {
                driver: driver.to_string(),
                error,
                builder: builder.map(|b| b.kind.as_str().to_owned()),
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

    /// The container environment of a spec with the reserved values; `scope` is `run` or a node id.
    pub(super) fn merge_env(
        &self,
        spec: &ResolvedSandbox,
        proxy_url: Option<&str>,
    ) -> Result<iterion_envdeny::MergedEnv, Failure> {
        let (tls, secret_env) = self.secret_env();
        let mut operator = self.operator.clone();
        operator.extend(secret_env);
        crate::lifecycle::assembly::container_env_with(
            spec,
            &operator,
            proxy_url,
            self.artifact_dir.is_some(),
            tls,
        )
        .map_err(|e| {
            let mut f =
                Failure::new(FailureCode::SandboxSpecInvalid, e.to_string()).phase(FailurePhase::Start);
            f = f.with(|e| e.detail("env"));
            f
        })
    }

    /// The trust variables of TLS inspection, and what the workflow's and the operator's secrets are in the
    /// container: a placeholder (`env`) or the path of a read-only file (`file`). Provider keys are not here:
    /// only the backend's own process gets their placeholders ([`Starter::key_placeholders`]).
    fn secret_env(&self) -> (EnvPairs, EnvPairs) {
        use crate::lifecycle::secrets::{Delivery, GrantSource, SECRET_FILES_DIR};
        let net = self.net.as_deref();
        let tls = match net.and_then(|n| n.tls_dir.as_ref()) {
            Some(_) => crate::lifecycle::assembly::tls_trust_env(),
            None => Vec::new(),
        };
        let mut env = Vec::new();
        for s in &self.secret_infos {
            match s.delivery {
                Delivery::File => env.push((s.name.clone(), format!("{SECRET_FILES_DIR}/{}", s.name))),
                Delivery::Env if s.source != GrantSource::Provider => {
                    if let Some(p) = net.and_then(|n| n.placeholders.get(&s.name)) {
                        env.push((s.name.clone(), p.clone()));
                    }
                }
                Delivery::Env => {}
            }
        }
        (tls, env)
    }

    /// Provider key → placeholder, for the model backends' own processes.
    pub(super) fn key_placeholders(&self) -> BTreeMap<String, String> {
        use crate::lifecycle::secrets::GrantSource;
        let Some(net) = self.net.as_deref() else {
            return BTreeMap::new();
        };
        self.secret_infos
            .iter()
            .filter(|s| s.source == GrantSource::Provider)
            .filter_map(|s| net.placeholders.get(&s.name).map(|p| (s.name.clone(), p.clone())))
            .collect()
    }

    /// The read-only binds of the run's CA files (and, where the driver binds host files, the system trust
    /// store's usual path) and of its file secrets.
    fn secret_mounts(&self) -> Vec<AuxMount> {
        let mut out = Vec::new();
        if let Some(dir) = self.net.as_deref().and_then(|n| n.tls_dir.as_ref()) {
            for f in ["ca.pem", "ca-bundle.pem"] {
                out.push(AuxMount {
                    kind: AuxMountKind::TlsBundle,
                    host_path: dir.join(f),
                    container_path: format!("{}/{f}", crate::lifecycle::assembly::TLS_DIR),
                    read_only: true,
                });
            }
            if self.driver.capabilities().host_binds {
                out.push(AuxMount {
                    kind: AuxMountKind::TlsBundle,
                    host_path: dir.join("ca-bundle.pem"),
                    container_path: crate::lifecycle::assembly::SYSTEM_TRUST_STORE.into(),
                    read_only: true,
                });
            }
        }
        if let Some(d) = &self.secret_dir {
            for s in self
                .secret_infos
                .iter()
                .filter(|s| s.delivery == crate::lifecycle::secrets::Delivery::File)
            {
                out.push(AuxMount {
                    kind: AuxMountKind::SecretFile,
                    host_path: d.file(&s.name),
                    container_path: format!("{}/{}", crate::lifecycle::secrets::SECRET_FILES_DIR, s.name),
                    read_only: true,
                });
            }
        }
        out
    }

    /// 4.5: classify, emit `sandbox_env_denied`, record names (before anything is created).
    pub(super) fn classify(&self, scope: &str, spec: &ResolvedSandbox, proxy: bool) -> Result<(), Failure> {
        // an explicit host_state auto the driver cannot honour is refused before anything is created
        self.host_binds_dropped(spec)?;
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
    pub(super) async fn prepare(
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
            Ok(Err(e)) => {
                let f = driver_failure(&self.cfg, &e, FailurePhase::Pull);
                return Err(match (spec.origin, &spec.image) {
                    (iterion_spec::resolved::Origin::DefaultImage, Some(image)) => {
                        f.hint(Some(default_image_ways_out(image, &self.cfg.env)))
                    }
                    _ => f,
                });
            }
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
        breq.owner = Some(self.owner.clone());
        breq.rebuild = s.rebuild;
        breq.secrets = self.cfg.build_secrets.clone();
        breq.events = self.sink(node_id.map(str::to_owned));
        let built =
            match tokio::time::timeout(s.build_timeout.duration, self.driver.build(prepared, breq)).await {
                Err(_) => return Err(timeout_failure(&self.cfg, FailurePhase::Build, "image build")),
                Ok(Err(e)) => return Err(driver_failure(&self.cfg, &e, FailurePhase::Build)),
                Ok(Ok(p)) => p,
            };
        // The built image is the build cache (tagged by its inputs, reused by later runs): cleanup keeps it,
        // `iterion sandbox prune` removes it.
        Ok(built)
    }

    /// The run's attachments directory, read-only at `/run/iterion/attachments`, when it has any.
    fn attachments_mount(&self) -> Option<AuxMount> {
        self.attachments_dir.as_ref().map(|dir| AuxMount {
            kind: AuxMountKind::Attachments,
            host_path: dir.clone(),
            container_path: crate::attachments::CONTAINER_DIR.into(),
            read_only: true,
        })
    }

    /// 4.10–4.12: start, post-create, probes.
    pub(super) async fn start(
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
        req.aux_mounts.extend(self.attachments_mount());
        req.aux_mounts.extend(self.secret_mounts());
        if let Some(wt) = &self.worktree {
            // the workspace's private repository borrows the operator's objects, which it can only read
            req.private_git = true;
            req.aux_mounts.push(AuxMount {
                kind: AuxMountKind::GitObjects,
                host_path: wt.objects_dir(),
                container_path: crate::exec::OBJECTS_TARGET.into(),
                read_only: true,
            });
        }
        let facts = crate::lifecycle::assembly::HostStateFacts::of(&self.cfg.host);
        let dropped = self.host_binds_dropped(spec)?;
        req.host_state = crate::lifecycle::assembly::host_state_plan(spec, facts);
        if dropped.is_some() {
            req.host_state.enabled = false;
        }
        let host_state_enabled = req.host_state.enabled;
        let claw_here = self.claw_nodes_in(node_id);
        let claw_runner = if claw_here.is_empty() {
            None
        } else {
            Some(self.bind_runner(&mut req, claw_here).await?)
        };
        req.proxy = self.net.as_ref().map(|n| n.endpoint.clone());
        req.hardening = s.container.hardening;
        req.limits = s.container.limits.clone();
        req.start_timeout = s.start_timeout.duration;
        req.events = self.sink(node_id.map(str::to_owned));
        let lease = self.net.as_ref().map(|n| n.lease.clone());
        // A driver that copies the work dir (kubernetes) bounds its pod-ready wait and the copy itself, each
        // with its own setting; the outer bound leaves room for both.
        let caps = self.driver.capabilities();
        let start_bound = if caps.copy && !caps.host_binds {
            s.start_timeout.duration + s.pod_ready_timeout.duration + s.workspace_copy_timeout.duration
        } else {
            s.start_timeout.duration
        };
        let started =
            match tokio::time::timeout(start_bound, self.driver.start(prepared, lease.as_deref(), req)).await
            {
                Err(_) => return Err(timeout_failure(&self.cfg, FailurePhase::Start, "container start")),
                Ok(Err(e)) => return Err(driver_failure(&self.cfg, &e, FailurePhase::Start)),
                Ok(Ok(st)) => st,
            };
        let run: Arc<dyn Run> = Arc::from(started.run);
        Guard::lock(&self.res).containers.push(run.clone());
        let report = started.report;
        if let Some(mut binds) = dropped {
            binds.extend(report.host_binds_dropped.iter().cloned());
            binds.sort();
            binds.dedup();
            self.em.emit(SandboxHostBindsDropped {
                driver: self.driver.kind().as_str().to_owned(),
                binds,
                reason: crate::lifecycle::assembly::NO_HOST_FS.into(),
            });
        }
        self.emit_host_state(spec, &report, host_state_enabled);
        if let Some(copy) = &report.workspace_copy {
            self.workspace_copied(&run, copy).await?;
        }
        // 4.11 post-create
        self.post_create(spec, &run, node_id).await?;
        // 4.12 probes
        let shell = self.shell_of(spec, &report, run.as_ref()).await?;
        if let Some(program) = &claw_runner {
            self.probe_runner(run.as_ref(), program).await?;
        }
        let host_binds = self.driver.capabilities().host_binds;
        Ok(Started {
            sandbox: NodeSandbox {
                run,
                placement: if node_id.is_some() {
                    PlacementKind::Own
                } else {
                    PlacementKind::Run
                },
                shell,
                workdir: spec.workspace_folder.clone(),
                host_work_dir: host_binds.then(|| self.work_dir.clone()),
                claw_runner,
                key_placeholders: Arc::new(self.key_placeholders()),
            },
            report,
            shell,
            duration: began.elapsed(),
        })
    }

    /// 4.11: the spec's post-create commands, one step of their own (own credential, leftovers killed before
    /// the next step), bounded by `ITERION_SANDBOX_POST_CREATE_TIMEOUT`.
    async fn post_create(
        &self,
        spec: &ResolvedSandbox,
        run: &Arc<dyn Run>,
        node_id: Option<&str>,
    ) -> Result<(), Failure> {
        if spec.post_create.is_empty() {
            return Ok(());
        }
        let pc_start = Instant::now();
        self.em.emit(SandboxPostCreateStarted {
            commands: spec.post_create.len() as u64,
            node_id: node_id.map(str::to_owned),
        });
        let t = self.cfg.settings.post_create_timeout.duration;
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
        self.end_step(SETUP_USER, run, "post_create").await;
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
                return Err(
                    Failure::new(FailureCode::SandboxPostCreateFailed, msg).phase(FailurePhase::PostCreate)
                );
            }
            Ok(Err(e)) => return Err(driver_failure(&self.cfg, &e, FailurePhase::PostCreate)),
            Ok(Ok(())) => self.em.emit(finished(0)),
        }
        Ok(())
    }

    /// 4.12 the shell probe: the driver's own probe already says whether bash is there, unless a post_create
    /// ran since (it may have installed it).
    async fn shell_of(
        &self,
        spec: &ResolvedSandbox,
        report: &StartReport,
        run: &dyn Run,
    ) -> Result<Shell, Failure> {
        match report.bash.filter(|_| spec.post_create.is_empty()) {
            Some(true) => return Ok(Shell::Bash),
            Some(false) => return Ok(Shell::Sh),
            None => {}
        }
        let probe = ExecRequest::new(["sh", "-c", "command -v bash"]);
        match tokio::time::timeout(
            self.cfg.settings.probe_timeout.duration,
            iterion_driver::exec_collect(run, probe, OutputLimits::default()),
        )
        .await
        {
            Err(_) => Err(timeout_failure(&self.cfg, FailurePhase::Probe, "the shell probe")),
            Ok(Err(e)) => Err(driver_failure(&self.cfg, &e, FailurePhase::Probe)),
            Ok(Ok(c)) if c.status.code == 0 => Ok(Shell::Bash),
            Ok(Ok(_)) => Ok(Shell::Sh),
        }
    }

    /// Registers a fresh credential `user` (attributed to `node_id`) with `policy` and returns the exec-scope
    /// proxy variables that carry it; empty without a proxy. A credential left under that name is replaced.
    pub(super) fn mint(
        &self,
        user: &str,
        node_id: Option<String>,
        policy: Arc<Policy>,
    ) -> Vec<(String, String)> {
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
    /// Revokes the proxy credential minted for `user` (one execution of a node).
    pub(super) fn revoke(&self, user: &str) {
        if self.net.is_none() {
            return;
        }
        if let Some(proxy) = Guard::lock(&self.res).proxy.as_ref() {
            proxy.remove_credential(user);
        }
    }

    pub(super) async fn end_step(&self, user: &str, run: &Arc<dyn Run>, what: &str) {
        if self.net.is_none() {
            return;
        }
        self.revoke(user);
        let mut pending = self.leftovers.lock().await;
        match pending.iter_mut().find(|(r, _)| Arc::ptr_eq(r, run)) {
            Some(entry) => entry.1 = what.to_owned(),
            None => pending.push((run.clone(), what.to_owned())),
        }
    }

    /// Kills what ended steps left running in their sandboxes (steps never overlap there, so nothing else
    /// of the run is running), before the next step starts. Concurrent callers (fan-out branches) wait for
    /// the one kill in progress.
    pub(super) async fn kill_leftovers(&self) {
        let mut pending = self.leftovers.lock().await;
        for (run, what) in pending.drain(..) {
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
                    &format!(
                        "sandbox: killing the processes left behind by {what} did not finish within 10s"
                    ),
                ),
            }
        }
    }

    /// 05 §4.6 step 1 for `spec` on this driver: the host binds dropped (default `auto` on a driver without a
    /// host file system), or the refusal of an explicit `auto`.
    pub(super) fn host_binds_dropped(&self, spec: &ResolvedSandbox) -> Result<Option<Vec<String>>, Failure> {
        let facts = crate::lifecycle::assembly::HostStateFacts::of(&self.cfg.host);
        crate::lifecycle::assembly::host_binds_dropped(
            spec,
            self.driver.capabilities().host_binds,
            self.driver.kind().as_str(),
            &facts,
        )
        .map_err(|m| Failure::new(FailureCode::SandboxSpecInvalid, m).phase(FailurePhase::Resolve))
    }

    /// The driver's host facts as events; `enabled` is whether host state was asked of the driver (false when
    /// the spec says `none` or a driver without a host file system dropped the binds).
    pub(super) fn emit_host_state(&self, spec: &ResolvedSandbox, report: &StartReport, enabled: bool) {
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
        if !enabled {
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

pub(super) fn proxy_env(url: &str) -> Vec<(String, String)> {
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

pub(super) fn proxy_url(user: &str, token: &str, host: &str, port: u16) -> String {
    format!("http://{user}:{token}@{}:{port}", url_host(host))
}

/// A host as written in a URL: an IPv6 address in brackets.
pub(super) fn url_host(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// The ways out when the default image (`auto` without a devcontainer.json) cannot be had; running on the host
/// is offered only when no floor (`ITERION_SANDBOX_FLOOR`) forbids it.
fn default_image_ways_out(image: &str, env: &std::collections::BTreeMap<String, String>) -> String {
    let floor = env
        .get("ITERION_SANDBOX_FLOOR")
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| v == "auto" || v == "inline");
    let host = match floor {
        Some(f) => format!(" (running on the host is not an option: ITERION_SANDBOX_FLOOR={f})"),
        None => {
            ", or run on the host with --sandbox none (ITERION_SANDBOX_DEFAULT=none for every run)".to_owned()
        }
    };
    format!(
        "the default sandbox image {image} is not on this machine and could not be pulled: pull it where its registry \
         is reachable (`docker pull {image}`), name an image you have with --sandbox-default-image REF (or \
         ITERION_SANDBOX_DEFAULT_IMAGE), add a .devcontainer/devcontainer.json{host}"
    )
}

#[cfg(test)]
mod hint_tests {
    use super::default_image_ways_out;

    #[test]
    fn under_a_floor_the_host_is_not_offered() {
        let none = std::collections::BTreeMap::new();
        assert!(default_image_ways_out("img", &none).contains("--sandbox none"));
        let floor =
            std::collections::BTreeMap::from([("ITERION_SANDBOX_FLOOR".to_string(), "auto".to_string())]);
        let h = default_image_ways_out("img", &floor);
        assert!(!h.contains("--sandbox none"), "{h}");
        assert!(h.contains("ITERION_SANDBOX_FLOOR=auto"), "{h}");
    }
}
