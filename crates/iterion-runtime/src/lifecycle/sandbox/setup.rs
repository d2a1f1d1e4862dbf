//! The setup steps of a run: resolution events, degradation to the host, the run container (05 §4.2–4.12).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use iterion_driver::{Driver, OwnerInfo, PrepareRequest, Prepared, StartRequest};
use iterion_envdeny::SandboxEnvEntry;
use iterion_netpolicy::Policy;
use iterion_spec::resolve::ResolveError;
use iterion_spec::resolved::{NetworkPolicySpec, NodePlacement, ResolvedSandbox, SandboxPlan};

use super::convert::{host_spec, ms, origin_label};
use super::failures::{
    INLINE_NEEDS_CONTAINER, NO_RUNTIME, OPERATOR_NOOP, compile_policy, driver_failure, resolve_failure,
};
use super::guard::Guard;
use super::nodes::{OwnSpec, Sandboxes};
use super::starter::Starter;
use crate::events::{
    FloorScope, PlacementKind, RuntimeRecord, SandboxFloorApplied, SandboxNetworkDefaulted, SandboxResolved,
    SandboxSkipped, SandboxStarted,
};
use crate::exec::{NodeSandbox, Shell};
use crate::failure::{FailureCode, FailurePhase};
use crate::lifecycle::config::Config;
use crate::lifecycle::host::DriverChoice;
use crate::lifecycle::sink::Emitter;
use crate::lifecycle::step_failure::Failure;
use crate::store::{ContainerRecord, LogLevel, NetworkRecord, NodePlacementRecord, SkippedScope};

/// One step of the setup with its inputs.
pub(crate) struct Setup<'a> {
    pub(crate) cfg: &'a Config,
    pub(crate) em: Emitter,
    pub(crate) run_id: String,
    pub(crate) run_name: String,
    pub(crate) run_dir: PathBuf,
    pub(crate) work_dir: PathBuf,
    pub(crate) repo_root: Option<PathBuf>,
    /// The run's workspace of `worktree: auto`: its private `.git` stays writable and borrows the operator's
    /// objects through a read-only bind.
    pub(crate) worktree: Option<crate::exec::Worktree>,
    pub(crate) operator_env: Vec<SandboxEnvEntry>,
    /// The run's secrets (or the problems of the operator's grants), see [`crate::lifecycle::secrets`].
    pub(crate) secrets: Result<crate::lifecycle::secrets::Secrets, Vec<String>>,
    pub(crate) owner: OwnerInfo,
    /// Agent and judge nodes whose backend is `claw` (they need the runner where they are placed).
    pub(crate) claw_nodes: std::collections::BTreeSet<String>,
    /// Nodes whose backend is `codex` (they must not be placed in a container).
    pub(crate) codex_nodes: std::collections::BTreeSet<String>,
}

/// `SANDBOX_SPEC_INVALID` for a plan that would run a codex node in a container (before anything starts).
pub(crate) fn codex_refusal(
    plan: &SandboxPlan,
    codex_nodes: &std::collections::BTreeSet<String>,
) -> Result<(), Failure> {
    match crate::exec::codex::plan_refusal(plan, codex_nodes) {
        None => Ok(()),
        Some(why) => Err(Failure::new(FailureCode::SandboxSpecInvalid, why)
            .phase(FailurePhase::Resolve)
            .hint(Some(crate::exec::codex::CODEX_SANDBOX_HINT.into()))),
    }
}

/// The refusal of a claw node whose container runs under gVisor: gVisor's `/proc` lets the node's own tools read
/// the environment of the claw runner that started them, non-dumpable as it is, and so its provider key.
pub(crate) fn claw_gvisor_refusal(
    plan: &SandboxPlan,
    claw_nodes: &std::collections::BTreeSet<String>,
) -> Option<String> {
    use iterion_spec::resolved::NodePlacement;
    plan.nodes.iter().find_map(|(id, p)| {
        let runtime = match p {
            NodePlacement::Run { .. } => &plan.run.as_ref()?.runtime,
            NodePlacement::Own { sandbox, .. } => &sandbox.runtime,
            NodePlacement::Host { .. } => return None,
        };
        (claw_nodes.contains(id) && runtime.name.is_gvisor()).then(|| {
            format!(
                "claw node '{id}' would run under gVisor ({} from {}), whose /proc lets the node's own tools reach the claw runner's process (its environment and the descriptors of its envelope channel)",
                runtime.name, runtime.source
            )
        })
    })
}

/// What to do instead of a claw node under gVisor.
pub(crate) const CLAW_GVISOR_HINT: &str = "give the node a sandbox of its own under the default runtime (sandbox: mode: auto, runtime: default), run it on the host (sandbox: none), or use another runtime";

/// `SANDBOX_SPEC_INVALID` for a plan that would run a claw node under gVisor (before anything starts).
pub(crate) fn claw_runtime_refusal(
    plan: &SandboxPlan,
    claw_nodes: &std::collections::BTreeSet<String>,
) -> Result<(), Failure> {
    match claw_gvisor_refusal(plan, claw_nodes) {
        None => Ok(()),
        Some(why) => Err(Failure::new(FailureCode::SandboxSpecInvalid, why)
            .phase(FailurePhase::Resolve)
            .hint(Some(CLAW_GVISOR_HINT.into()))),
    }
}

impl Setup<'_> {
    pub(super) async fn host_run(&self) -> Result<NodeSandbox, Failure> {
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
            placement: PlacementKind::Host,
            shell: Shell::Bash,
            workdir: wd,
            host_work_dir: Some(self.work_dir.clone()),
            claw_runner: self.cfg.claw_runner.host(),
            key_placeholders: Arc::default(),
        })
    }

    /// `file_secrets_dropped` of a run-scope `sandbox_skipped` when the run has file secrets.
    fn files_dropped(&self, run_scope: bool) -> Option<bool> {
        (run_scope && self.secrets.as_ref().is_ok_and(|s| s.has_files())).then_some(true)
    }

    pub(super) fn emit_skipped(
        &self,
        driver: &str,
        spec: &ResolvedSandbox,
        reason: &str,
        node_id: Option<&str>,
    ) {
        self.em.emit(SandboxSkipped {
            driver: driver.to_owned(),
            mode: spec.mode.as_str().to_owned(),
            source: spec.source.clone(),
            reason: reason.to_owned(),
            node_id: node_id.map(str::to_owned),
            file_secrets_dropped: self.files_dropped(node_id.is_none()),
        });
    }

    /// Runs 4.2–4.12 and returns the sandboxes the executor uses.
    pub(crate) async fn run(
        &self,
        plan: &Result<SandboxPlan, ResolveError>,
        guard: &mut Guard,
    ) -> Result<Arc<Sandboxes>, Failure> {
        // 4.2
        let plan = self.accept(plan)?;
        let secrets = self.checked_secrets()?;
        self.record_plan(&plan);
        // 4.3
        self.emit_resolution(&plan);
        // Host nodes always have a sandbox.
        let host = self.host_run().await?;
        Guard::lock(&guard.res).host_runs.push(host.run.clone());
        let mut placements: BTreeMap<String, PlacementKind> = plan
            .nodes
            .iter()
            .map(|(k, p)| (k.clone(), PlacementKind::of(p)))
            .collect();
        self.emit_host_skips(&plan);
        if !plan.any_active() {
            self.secrets_undelivered(secrets, "the run has no container");
            return Ok(host_only(placements, host));
        }
        // 4.4
        let own: Vec<(String, String, ResolvedSandbox)> = plan
            .nodes
            .iter()
            .filter_map(|(id, p)| match p {
                NodePlacement::Own { key, sandbox } => Some((id.clone(), key.clone(), (**sandbox).clone())),
                _ => None,
            })
            .collect();
        let driver = match &self.cfg.drivers.container {
            DriverChoice::Container(d) => d.clone(),
            choice => {
                self.degrade(choice, plan.run.as_ref(), &own)?;
                self.secrets_undelivered(secrets, "the run found no container runtime");
                for p in placements.values_mut() {
                    *p = PlacementKind::Host;
                }
                return Ok(host_only(placements, host));
            }
        };
        codex_refusal(&plan, &self.codex_nodes)?;
        claw_runtime_refusal(&plan, &self.claw_nodes)?;
        let (run_sandbox, starter, kind) = self.start_run(&plan, driver, guard).await?;
        let own_keys: BTreeMap<String, String> =
            own.iter().map(|(id, k, _)| (id.clone(), k.clone())).collect();
        let own_specs: BTreeMap<String, OwnSpec> = own
            .into_iter()
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

    /// The run's secrets, or `SANDBOX_SPEC_INVALID` naming every problem of the operator's grants; a secret
    /// the workflow asks for without a grant is a warning (the sandbox does not get it).
    fn checked_secrets(&self) -> Result<&crate::lifecycle::secrets::Secrets, Failure> {
        match &self.secrets {
            Ok(s) => {
                if crate::lifecycle::secrets::provider_keys_direct(&self.cfg.env)
                    && !self.claw_nodes.is_empty()
                {
                    self.em.log(
                        LogLevel::Warn,
                        "sandbox: ITERION_SANDBOX_PROVIDER_KEYS=direct: a sandboxed model backend holds its provider key inside the container (not a placeholder)",
                    );
                }
                for name in &s.ungranted {
                    self.em.log(
                        LogLevel::Warn,
                        &format!(
                            "sandbox: the workflow asks for secret {name}; the operator did not grant it (iterion run --secret {name}), so the sandbox does not get it"
                        ),
                    );
                }
                Ok(s)
            }
            Err(problems) => Err(Failure::new(
                FailureCode::SandboxSpecInvalid,
                format!("the run's secrets: {}", problems.join("; ")),
            )
            .phase(FailurePhase::Resolve)),
        }
    }

    /// The private host directory of the run's file secrets (none without any); a driver without host binds
    /// cannot deliver them and the run fails before anything is created.
    fn secret_files(
        &self,
        secrets: &crate::lifecycle::secrets::Secrets,
        host_binds: bool,
    ) -> Result<Option<Arc<crate::lifecycle::secrets::SecretDir>>, Failure> {
        if !secrets.has_files() {
            return Ok(None);
        }
        if !host_binds {
            return Err(Failure::new(
                FailureCode::SandboxSpecInvalid,
                "file secrets need a driver that binds host files into the container; this driver copies the workspace instead and cannot deliver them",
            )
            .phase(FailurePhase::Start));
        }
        secrets
            .write_files(&self.cfg.env)
            .map(|d| d.map(Arc::new))
            .map_err(|e| Failure::new(FailureCode::SandboxStartFailed, e).phase(FailurePhase::Start))
    }

    /// A run without a container delivers no secret: each granted one is named in a warning, and file secrets
    /// set `file_secrets_dropped` on the run record. Provider keys stay with their host processes as before.
    fn secrets_undelivered(&self, s: &crate::lifecycle::secrets::Secrets, why: &str) {
        use crate::lifecycle::secrets::GrantSource;
        let names: Vec<&str> = s
            .grants
            .iter()
            .filter(|g| g.source != GrantSource::Provider)
            .map(|g| g.name.as_str())
            .collect();
        if !names.is_empty() {
            self.em.log(
                LogLevel::Warn,
                &format!(
                    "sandbox: {why}: the secrets {} are not delivered (a secret reaches only a container, through the run's proxy or a read-only file)",
                    names.join(", ")
                ),
            );
        }
        if s.has_files() {
            self.em.update(|d| d.sandbox.file_secrets_dropped = true);
        }
    }

    /// 4.2: a plan, or the failure of its resolution (devcontainer diagnostics logged); warnings logged.
    fn accept(&self, plan: &Result<SandboxPlan, ResolveError>) -> Result<SandboxPlan, Failure> {
        let plan = match plan {
            Ok(p) => p.clone(),
            Err(e) => {
                if let ResolveError::Devcontainer { diagnostics, .. } = e {
                    for d in diagnostics {
                        self.em.log(LogLevel::Error, &d.render_header());
                    }
                }
                return Err(resolve_failure(e));
            }
        };
        for w in &plan.warnings {
            self.em.log(LogLevel::Warn, &w.render_header());
        }
        Ok(plan)
    }

    /// Records the resolved plan in `run.json` (floors, run sandbox, node placements).
    fn record_plan(&self, plan: &SandboxPlan) {
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
                    NodePlacement::Host { reason, .. } => NodePlacementRecord {
                        placement: PlacementKind::Host,
                        reason: Some(reason.clone()),
                        key: None,
                        image: None,
                    },
                    NodePlacement::Run { .. } => NodePlacementRecord {
                        placement: PlacementKind::Run,
                        reason: None,
                        key: None,
                        image: None,
                    },
                    NodePlacement::Own { key, sandbox } => NodePlacementRecord {
                        placement: PlacementKind::Own,
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
        self.em.update(|d| {
            d.sandbox.floors = floors;
            d.sandbox.resolved = resolved;
            d.sandbox.nodes = nodes;
            d.sandbox.active = active;
            d.sandbox.skipped = None;
            d.sandbox.containers.clear();
        });
    }

    /// 4.3: `sandbox_floor_applied`, `sandbox_network_defaulted` and `sandbox_resolved`.
    fn emit_resolution(&self, plan: &SandboxPlan) {
        let em = &self.em;
        let active = plan.any_active();
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
                .map(|(k, p)| (k.clone(), PlacementKind::of(p)))
                .collect(),
            warnings: plan.warnings.len() as u64,
        });
    }

    /// `sandbox_skipped` for node overrides ignored on the host and for a skippable run scope.
    fn emit_host_skips(&self, plan: &SandboxPlan) {
        let (cfg, em) = (self.cfg, &self.em);
        // Node overrides ignored on the host (01 §8.8).
        for (id, p) in &plan.nodes {
            if let NodePlacement::Host {
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
                file_secrets_dropped: self.files_dropped(true),
            });
            let r = reason.clone();
            em.update(|d| {
                d.sandbox.skipped = Some(SkippedScope {
                    scope: "run".into(),
                    reason: r,
                })
            });
        }
    }

    /// 4.4 without a container driver: every active scope runs on the host, or the run fails when a scope
    /// must not degrade.
    fn degrade(
        &self,
        choice: &DriverChoice,
        run_spec: Option<&ResolvedSandbox>,
        own: &[(String, String, ResolvedSandbox)],
    ) -> Result<(), Failure> {
        let (cfg, em) = (self.cfg, &self.em);
        if let DriverChoice::Unavailable { reason } = choice {
            em.log(LogLevel::Info, &format!("sandbox: no container driver: {reason}"));
        }
        let scopes: Vec<(Option<String>, ResolvedSandbox)> = run_spec
            .into_iter()
            .map(|r| (None, r.clone()))
            .chain(own.iter().map(|(id, _, s)| (Some(id.clone()), s.clone())))
            .collect();
        let (driver_label, reason) = host_fallback(&cfg.env, choice, scopes.iter().map(|(_, s)| s))?;
        for (node, s) in &scopes {
            self.emit_skipped(driver_label, s, &reason, node.as_deref());
            // a fallback that lowers isolation is a warning naming what is lost
            let scope = node
                .as_deref()
                .map_or("the run".to_owned(), |n| format!("node {n}"));
            let mut lost = format!("sandbox: {scope} runs on the host, NOT sandboxed ({reason})");
            if s.network.needs_proxy() {
                lost.push_str(&format!(
                    "; its network policy ({}) is NOT enforced",
                    s.network.mode.as_str()
                ));
            }
            em.log(LogLevel::Warn, &lost);
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
        Ok(())
    }

    /// 4.5–4.12 with a container driver: policies, the network, the run container.
    async fn start_run(
        &self,
        plan: &SandboxPlan,
        driver: Arc<dyn Driver>,
        guard: &mut Guard,
    ) -> Result<(Option<NodeSandbox>, Starter, String), Failure> {
        let (cfg, em) = (self.cfg, &self.em);
        let kind = driver.kind().as_str().to_owned();
        {
            let k = kind.clone();
            em.update(|d| d.sandbox.driver = Some(k));
        }
        guard.driver_name = kind.clone();
        let caps = driver.capabilities();
        let artifact_dir = if caps.host_binds {
            em.run().artifact_files_dir().ok()
        } else {
            None
        };
        let attachments_dir = attachments_mount(em, caps.host_binds)?;
        let run_spec = plan.run.clone();
        let (run_policy, node_policies, overrides) = effective_policies(plan);
        let empty = crate::lifecycle::secrets::Secrets::default();
        let secrets = self.secrets.as_ref().unwrap_or(&empty);
        // a secret binding needs the proxy whatever the policy: it is where the placeholder becomes the value
        let needs_proxy = run_spec.as_ref().is_some_and(|r| r.network.needs_proxy())
            || node_policies.values().any(|p| p.needs_proxy())
            || secrets.has_bindings();
        let secret_dir = self.secret_files(secrets, caps.host_binds)?;
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
            worktree: self.worktree.clone(),
            operator,
            owner: self.owner.clone(),
            net: None,
            artifact_dir,
            attachments_dir,
            res: guard.res.clone(),
            claw_run_nodes: plan
                .nodes
                .iter()
                .filter(|(id, p)| matches!(p, NodePlacement::Run { .. }) && self.claw_nodes.contains(*id))
                .map(|(id, _)| id.clone())
                .collect(),
            claw_nodes: self.claw_nodes.clone(),
            leftovers: tokio::sync::Mutex::new(Vec::new()),
            secret_infos: secrets.infos(),
            secret_dir,
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
        let run_sandbox = match (run_spec, prepared) {
            (Some(r), Some(p)) => Some(self.start_run_container(&starter, &r, p, &kind).await?),
            _ => None,
        };
        Ok((run_sandbox, starter, kind))
    }

    /// 4.10–4.12 for the run container: start, record, `sandbox_started`.
    async fn start_run_container(
        &self,
        starter: &Starter,
        r: &ResolvedSandbox,
        p: Prepared,
        kind: &str,
    ) -> Result<NodeSandbox, Failure> {
        let em = &self.em;
        let st = starter.start(r, p, "run", None).await?;
        let rep = &st.report;
        let (id, name, user) = (rep.container_id.clone(), rep.name.clone(), rep.user.clone());
        let network = NetworkRecord {
            enforced: rep.enforced_egress,
            placement: match rep.placement {
                iterion_driver::EgressPlacement::Relay => "relay",
                iterion_driver::EgressPlacement::Advisory => "advisory",
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
            driver: kind.to_owned(),
            mode: r.mode.as_str().to_owned(),
            source: r.source.clone(),
            origin: origin_label(r).to_owned(),
            image: rep.image.reference.clone(),
            container: rep.container_id.clone(),
            workspace_folder: r.workspace_folder.clone(),
            user: rep.user.clone().unwrap_or_default(),
            has_post_create: !r.post_create.is_empty(),
            network_mode: r.network.mode.as_str().to_owned(),
            enforced_egress: rep.enforced_egress,
            shell: st.shell.program().to_owned(),
            runtime: RuntimeRecord::of(&r.runtime, rep.hardening.oci_runtime.as_deref()),
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
        Ok(st.sandbox)
    }
}

/// The sandboxes of a run whose nodes all run on the host.
fn host_only(placements: BTreeMap<String, PlacementKind>, host: NodeSandbox) -> Arc<Sandboxes> {
    Arc::new(Sandboxes {
        host,
        run: None,
        placements,
        own_keys: BTreeMap::new(),
        own: BTreeMap::new(),
        starter: None,
        driver_name: None,
    })
}

/// Effective policies (4.7 items 1–2): the run's, each node's, and the nodes that override the run's.
/// 4.4 without a container driver, decided without side effects: the driver label and reason of the host
/// fallback every active scope gets, or the failure when one of `scopes` must not run on the host (an inline
/// scope, a forced driver that is unusable, the inline floor under a forced `noop`).
pub(crate) fn host_fallback<'s>(
    env: &BTreeMap<String, String>,
    choice: &DriverChoice,
    mut scopes: impl Iterator<Item = &'s ResolvedSandbox>,
) -> Result<(&'static str, String), Failure> {
    let inline_floor = env
        .get("ITERION_SANDBOX_FLOOR")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("inline"));
    let (driver_label, reason, fail): (&str, String, Option<String>) = match choice {
        DriverChoice::ForcedNoop if inline_floor => (
            "noop",
            OPERATOR_NOOP.into(),
            Some("the inline floor forbids running on the host".into()),
        ),
        DriverChoice::ForcedNoop => ("noop", OPERATOR_NOOP.into(), None),
        DriverChoice::ForcedUnavailable { message } => ("none", no_runtime(env, None), Some(message.clone())),
        DriverChoice::Unavailable { reason } => ("none", no_runtime(env, Some(reason)), None),
        _ => ("none", no_runtime(env, None), None),
    };
    let forced_noop = matches!(choice, DriverChoice::ForcedNoop);
    if scopes.any(|s| fail.is_some() || (!forced_noop && !s.degrade_allowed)) {
        let selection = match choice {
            DriverChoice::Unavailable { reason } => Some(reason.as_str()),
            _ => None,
        };
        let message = fail.unwrap_or_else(|| inline_needs_container(env, inline_floor, selection));
        return Err(Failure::new(FailureCode::SandboxDriverUnavailable, message).phase(FailurePhase::Driver));
    }
    Ok((driver_label, reason))
}

fn cloud_mode(env: &BTreeMap<String, String>) -> bool {
    env.get("ITERION_MODE")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("cloud"))
}

/// The reason of `sandbox_skipped`: the usual wording when Docker and Podman were looked for and none answered;
/// the real cause when the host looked elsewhere (a cloud host) or an explicit `DOCKER_HOST` did not answer.
fn no_runtime(env: &BTreeMap<String, String>, selection: Option<&str>) -> String {
    match selection {
        Some(r) if cloud_mode(env) || r.starts_with("DOCKER_HOST=") => {
            let r = r.strip_prefix("no container runtime: ").unwrap_or(r);
            let r = if cloud_mode(env) {
                format!("ITERION_MODE=cloud: {r}")
            } else {
                r.to_string()
            };
            format!("no container runtime available ({r})")
        }
        _ => NO_RUNTIME.to_string(),
    }
}

/// Why an inline scope cannot run, with only the ways out that exist here: no `--sandbox none` under the
/// inline floor, no "install Docker" on a cloud host.
fn inline_needs_container(
    env: &BTreeMap<String, String>,
    inline_floor: bool,
    selection: Option<&str>,
) -> String {
    let docker_host = selection
        .filter(|r| r.starts_with("DOCKER_HOST="))
        .and_then(|r| r.split(" did not answer").next());
    let cause = match docker_host {
        _ if cloud_mode(env) => match selection {
            Some(why) => format!(
                "this workflow needs a container and ITERION_MODE=cloud selects the kubernetes driver, which cannot reach a cluster here ({why}); give it one (KUBECONFIG, or run in a pod with a service account) or unset ITERION_MODE to use Docker or Podman"
            ),
            None => "this workflow needs a container and ITERION_MODE=cloud selects the kubernetes driver, which cannot reach a cluster here; give it one (KUBECONFIG, or run in a pod with a service account) or unset ITERION_MODE to use Docker or Podman".to_owned(),
        },
        Some(h) => format!(
            "this workflow pins a container (sandbox inline) and {h} does not answer; fix or unset DOCKER_HOST (or pass --sandbox-driver podman)"
        ),
        None => "this workflow pins a container (sandbox inline); install or start Docker or Podman".to_owned(),
    };
    if inline_floor {
        format!("{cause} (the inline floor, ITERION_SANDBOX_FLOOR=inline, forbids running on the host)")
    } else if cloud_mode(env) || docker_host.is_some() {
        format!("{cause}, or run with --sandbox none to execute on the host")
    } else {
        INLINE_NEEDS_CONTAINER.to_owned()
    }
}

pub(crate) fn effective_policies(
    plan: &SandboxPlan,
) -> (
    NetworkPolicySpec,
    BTreeMap<String, NetworkPolicySpec>,
    Vec<String>,
) {
    let run_policy = plan
        .run
        .as_ref()
        .map(|r| r.network.clone())
        .unwrap_or_else(|| NetworkPolicySpec::open("run is unsandboxed"));
    let mut node_policies: BTreeMap<String, NetworkPolicySpec> = BTreeMap::new();
    let mut overrides = Vec::new();
    for (id, p) in &plan.nodes {
        match p {
            NodePlacement::Run { network: Some(n) } => {
                node_policies.insert(id.clone(), n.clone());
                overrides.push(id.clone());
            }
            NodePlacement::Run { network: None } => {
                node_policies.insert(id.clone(), run_policy.clone());
            }
            NodePlacement::Own { sandbox, .. } => {
                node_policies.insert(id.clone(), sandbox.network.clone());
                overrides.push(id.clone());
            }
            NodePlacement::Host { .. } => {}
        }
    }
    (run_policy, node_policies, overrides)
}

/// The run's attachments directory, bind-mounted read-only into its containers, when the run has
/// attachments. A driver without host bind mounts (Kubernetes) cannot provide them: the run fails
/// `SANDBOX_SPEC_INVALID` / `attachments` before any container or node starts.
fn attachments_mount(em: &Emitter, host_binds: bool) -> Result<Option<PathBuf>, Failure> {
    let run = em.run();
    if run.document().attachments.is_empty() {
        return Ok(None);
    }
    if !host_binds {
        return Err(attachments_unsupported());
    }
    Ok(Some(run.dir().join(crate::store::names::ATTACHMENTS)))
}

/// The refusal of a run with attachments by a driver without host bind mounts.
pub(crate) fn attachments_unsupported() -> Failure {
    Failure::new(
        FailureCode::SandboxSpecInvalid,
        "attachments need a host bind mount or pod copy, which this driver does not provide",
    )
    .phase(FailurePhase::Resolve)
    .with(|e| e.detail("attachments"))
    .hint(Some(
        "a run with attachments needs a driver with host bind mounts (Docker or Podman)".to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_skip_reason_names_the_real_cause() {
        let k8s = "no container runtime: none of kubernetes answered (kubernetes: the cluster did not answer within 5s)";
        assert_eq!(
            no_runtime(
                &env(&[]),
                Some("no container runtime: none of docker, podman answered")
            ),
            NO_RUNTIME
        );
        let cloud = no_runtime(&env(&[("ITERION_MODE", "cloud")]), Some(k8s));
        assert!(
            cloud.starts_with("no container runtime available (ITERION_MODE=cloud: "),
            "{cloud}"
        );
        assert!(!cloud.contains("docker or podman"), "{cloud}");
        let dh = no_runtime(
            &env(&[]),
            Some("DOCKER_HOST=unix:///x did not answer; Podman is not tried"),
        );
        assert!(dh.contains("DOCKER_HOST=unix:///x did not answer"), "{dh}");
    }

    #[test]
    fn the_inline_refusal_offers_only_ways_out_that_exist() {
        let local = inline_needs_container(&env(&[]), false, None);
        assert_eq!(local, INLINE_NEEDS_CONTAINER);
        let dh = inline_needs_container(&env(&[]), false, Some("DOCKER_HOST=unix:///x did not answer; …"));
        assert!(dh.contains("DOCKER_HOST=unix:///x does not answer"), "{dh}");
        let floor = inline_needs_container(&env(&[("ITERION_SANDBOX_FLOOR", "inline")]), true, None);
        assert!(!floor.contains("--sandbox none"), "{floor}");
        assert!(floor.contains("ITERION_SANDBOX_FLOOR=inline"), "{floor}");
        let cloud = inline_needs_container(&env(&[("ITERION_MODE", "cloud")]), true, None);
        assert!(!cloud.contains("install or start Docker"), "{cloud}");
        assert!(!cloud.contains("--sandbox none"), "{cloud}");
        assert!(!cloud.contains("does not build"), "{cloud}");
        let cloud = inline_needs_container(
            &env(&[("ITERION_MODE", "cloud")]),
            false,
            Some("no kubeconfig at /home/u/.kube/config"),
        );
        assert!(
            cloud.contains("(no kubeconfig at /home/u/.kube/config)"),
            "{cloud}"
        );
        assert!(cloud.contains("KUBECONFIG"), "{cloud}");
    }
}
