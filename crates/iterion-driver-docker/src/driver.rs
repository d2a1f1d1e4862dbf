//! `DockerDriver`: the `Driver` implementation over the engine API (03 §4–§9).

use crate::endpoint::{EndpointSettings, Family};
use crate::engine::Engine;
use crate::error::status_of;
use crate::image::{self, PullPolicy as ImgPolicy};
use crate::imagebuild::{self, BuildInput};
use crate::mounts::{self, MountKind, Origin, Planned, RemapEngine};
use crate::names;
use crate::run::{DockerRun, RunInner, engine_error};
use async_trait::async_trait;
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount as BMount, MountBindOptions, MountBindOptionsPropagationEnum,
    MountTmpfsOptions, MountType, MountVolumeOptions, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, ListImagesOptions, ListNetworksOptions, LogsOptions,
    RemoveContainerOptions, RemoveImageOptions,
};
use futures::StreamExt;
use iterion_driver::Driver as _;
use iterion_driver::labels::{self, Component, LabelInput};
use iterion_driver::mount_safety::{HostFacts, HostOs, MountPolicy, RealFs};
use iterion_driver::owner::{HostProcesses, owner_liveness};
use iterion_driver::{
    BuildNetwork, BuildRequest, Capabilities, DriverEvent, DriverKind, EgressPlacement, EngineInfo,
    Error as DError, ExecRequest, HardeningProfile, HardeningReport, HomeSource, ImageRef, ImageReport,
    Liveness, LogLevel, ManagedResource, MountOrigin, MountReport, NetworkLease, NetworkRequest,
    PrepareRequest, Prepared, ProxyListen, PullPolicy, RemoveOutcome, ResourceKind, Run, SetupPhase,
    SkippedPath, StartReport, StartRequest, Started, UidMismatch, UserRemap,
};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Container path of the relay binary.
pub const RELAY_BIN_TARGET: &str = "/run/iterion/relay/iterion-relay";
/// Container path of the proxy socket.
pub const RELAY_SOCK_TARGET: &str = "/run/iterion/relay/proxy.sock";
/// Where the relay listens inside the sandbox.
pub const RELAY_LISTEN: &str = "127.0.0.1:3128";
const CAPS_STRICT: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "NET_BIND_SERVICE",
];
const CAPS_COMPAT_EXTRA: &[&str] = &["AUDIT_WRITE", "SETPCAP", "SYS_CHROOT"];

/// Settings of the docker driver, read once by the composition root (the driver never reads `std::env`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DockerSettings {
    /// Endpoint discovery inputs.
    pub endpoints: EndpointSettings,
    /// Which candidate list to use (`docker` or `podman`).
    pub family: Family,
    /// Ping bound (5 s; the doctor passes its own).
    pub ping_timeout: Duration,
    /// The relay binary (installed embedded relay, or `ITERION_RELAY_BIN`).
    pub relay_binary: Option<PathBuf>,
    /// Version written to `iterion.io/iterion-version`.
    pub iterion_version: String,
    /// This host's name (owner liveness).
    pub this_host: String,
    /// This process's uid (`/tmp/iterion-<uid>` fallback of the socket directory).
    pub uid: u32,
    /// iterion itself runs on Linux.
    pub host_linux: bool,
    /// The Docker `config.json` holding registry credentials (`$DOCKER_CONFIG/config.json`, else
    /// `$HOME/.docker/config.json`), resolved by the caller.
    pub docker_config: Option<PathBuf>,
}

impl DockerSettings {
    /// Settings for `family` with the given endpoint inputs; relay unset, 5 s ping.
    pub fn new(endpoints: EndpointSettings, family: Family, this_host: impl Into<String>, uid: u32) -> Self {
        Self {
            endpoints,
            family,
            ping_timeout: Duration::from_secs(5),
            relay_binary: None,
            iterion_version: env!("CARGO_PKG_VERSION").to_string(),
            this_host: this_host.into(),
            uid,
            host_linux: cfg!(target_os = "linux"),
            docker_config: None,
        }
    }

    /// Sets the relay binary.
    pub fn with_relay_binary(mut self, p: impl Into<PathBuf>) -> Self {
        self.relay_binary = Some(p.into());
        self
    }
}

/// The Docker / Podman driver.
#[derive(Debug)]
pub struct DockerDriver {
    settings: DockerSettings,
    engine: tokio::sync::OnceCell<Engine>,
}

fn driver_kind_of(name: &str) -> DriverKind {
    if name == "podman" {
        DriverKind::Podman
    } else {
        DriverKind::Docker
    }
}

impl From<crate::Error> for DError {
    fn from(e: crate::Error) -> Self {
        use crate::Error as E;
        match e {
            E::Unavailable { driver, reason } => DError::Unavailable {
                driver: driver.into(),
                reason,
            },
            E::Engine { status, message } => DError::Engine {
                status: (status != 0).then_some(status),
                message,
            },
            E::ImageNotFound { image } => DError::ImageNotFound { image },
            E::ImageAuth { image, registry } => DError::ImageAuth { image, registry },
            E::ImageAbsent { image } => DError::ImageAbsent { image },
            E::ImagePull { image, reason } => DError::ImagePull { image, reason },
            E::SetupTimeout { phase, after } => DError::SetupTimeout {
                phase: match phase {
                    "pull" => SetupPhase::Pull,
                    "build" => SetupPhase::Build,
                    "post_create" => SetupPhase::PostCreate,
                    _ => SetupPhase::Start,
                },
                after,
                subject: None,
            },
            E::BuildFailed {
                dockerfile,
                message,
                tail,
            } => DError::BuildFailed {
                dockerfile,
                tail: format!("{message}\n{tail}"),
            },
            E::BuildRefused {
                dockerfile,
                line,
                reason,
            } => DError::BuildRefused {
                dockerfile,
                line,
                reason,
            },
            E::InvalidSpec { field, reason } => DError::InvalidSpec { field, reason },
            E::Unsupported { driver, feature } => DError::Unsupported {
                driver: driver_kind_of(driver),
                feature,
            },
            E::StartFailed { reason, hint } => DError::StartFailed { reason, hint },
            E::NetworkUnavailable { engine, reason, hint } => {
                DError::NetworkUnavailable { engine, reason, hint }
            }
            E::Io { what, path, source } => DError::StartFailed {
                reason: format!("{what} {path}: {source}"),
                hint: None,
            },
            E::UnsafeGit { refusal } => git_refused(&refusal),
        }
    }
}

/// A refused git pointer as the typed mount refusal the run reports.
fn git_refused(r: &mounts::GitRefusal) -> DError {
    DError::UnsafeMount {
        mount: r.pointer.display().to_string(),
        reason: format!("the workspace git pointer {}; {}", r.reason, r.remedy),
    }
}

fn policy(p: PullPolicy) -> ImgPolicy {
    match p {
        PullPolicy::Auto => ImgPolicy::Auto,
        PullPolicy::Missing => ImgPolicy::Missing,
        PullPolicy::Always => ImgPolicy::Always,
        PullPolicy::Never => ImgPolicy::Never,
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl DockerDriver {
    /// A driver that connects lazily (on `engine_info` or the first call that needs the engine).
    pub fn new(settings: DockerSettings) -> Self {
        Self {
            settings,
            engine: tokio::sync::OnceCell::new(),
        }
    }

    /// A driver connected now (the handshake of 03 §4.2).
    pub async fn connect(settings: DockerSettings) -> crate::Result<Self> {
        let d = Self::new(settings);
        let e = Engine::discover(&d.settings.endpoints, d.settings.family, d.settings.ping_timeout).await?;
        let _ = d.engine.set(e);
        Ok(d)
    }

    /// Credentials for the registry of `reference` from the configured `config.json` (03 §5.3).
    fn registry_auth(
        &self,
        reference: &str,
        events: &iterion_driver::EventSink,
    ) -> Option<crate::auth::RegistryAuth> {
        let path = self.settings.docker_config.as_ref()?;
        let text = std::fs::read_to_string(path).ok()?;
        let registry = image::ImageRef::parse(reference).domain;
        match crate::auth::lookup(&text, &registry) {
            crate::auth::Lookup::Found(a) => Some(a),
            crate::auth::Lookup::Helper(h) => {
                events.log(
                    LogLevel::Warn,
                    format!("credential helper docker-credential-{h} for {registry} is not run by this build; pulling anonymously"),
                );
                None
            }
            crate::auth::Lookup::Anonymous => None,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &DockerSettings {
        &self.settings
    }

    async fn engine(&self) -> Result<&Engine, DError> {
        self.engine
            .get_or_try_init(|| {
                Engine::discover(
                    &self.settings.endpoints,
                    self.settings.family,
                    self.settings.ping_timeout,
                )
            })
            .await
            .map_err(DError::from)
    }

    /// The connected engine's facts, when connected.
    pub fn facts(&self) -> Option<&crate::engine::EngineFacts> {
        self.engine.get().map(Engine::facts)
    }

    fn vm_engine(&self) -> bool {
        self.facts().is_some_and(|f| f.desktop) || !self.settings.host_linux
    }

    async fn remove_container_quiet(&self, docker: &bollard::Docker, id: &str) {
        let _ = docker
            .remove_container(
                id,
                Some(RemoveContainerOptions {
                    v: true,
                    force: true,
                    link: false,
                }),
            )
            .await;
    }

    fn is_self(&self, labels: &BTreeMap<String, String>, owner: &iterion_driver::OwnerInfo) -> bool {
        labels.get(labels::OWNER_HOST) == Some(&owner.host_name)
            && labels.get(labels::OWNER_PID) == Some(&owner.pid.to_string())
            && labels.get(labels::OWNER_START) == Some(&owner.start_time.to_string())
    }

    /// 03 §8.8 step 2: what to do with an existing container of the same name.
    async fn resolve_conflict(
        &self,
        docker: &bollard::Docker,
        name: &str,
        req: &StartRequest,
    ) -> Result<(), DError> {
        let existing = docker.inspect_container(name, None).await.map_err(engine_error)?;
        let labels: BTreeMap<String, String> = existing
            .config
            .and_then(|c| c.labels)
            .unwrap_or_default()
            .into_iter()
            .collect();
        let id = existing.id.unwrap_or_else(|| name.to_string());
        if labels.get(labels::MANAGED).map(String::as_str) != Some("true") {
            return Err(DError::StartFailed {
                reason: format!("a container named {name} exists and is not managed by iterion"),
                hint: Some("remove it or use another run id".into()),
            });
        }
        // The runtime runs crash recovery before start, so a dead owner's run is terminal by now (05 §8.5).
        if self.is_self(&labels, &req.owner)
            || owner_liveness(&labels, &self.settings.this_host, &HostProcesses) == Liveness::Dead
        {
            self.remove_container_quiet(docker, &id).await;
            return Ok(());
        }
        Err(DError::SandboxInUse {
            run_id: labels
                .get(labels::RUN_ID)
                .cloned()
                .unwrap_or_else(|| req.run_id.clone()),
            owner_host: labels.get(labels::OWNER_HOST).cloned().unwrap_or_default(),
            owner_pid: labels
                .get(labels::OWNER_PID)
                .and_then(|p| p.parse().ok())
                .unwrap_or(0),
        })
    }

    async fn start_inner(
        &self,
        prepared: &Prepared,
        lease: Option<&NetworkLease>,
        req: &StartRequest,
        created: &std::sync::Mutex<Option<String>>,
    ) -> Result<Started, DError> {
        let engine = self.engine().await?;
        let facts = engine.facts().clone();
        let docker = &engine.docker;
        let kind = self.kind();
        let sandbox = &prepared.sandbox;
        let image = prepared.image.clone().ok_or_else(|| DError::InvalidSpec {
            field: "image".into(),
            reason: "the prepared spec has no image (build it first)".into(),
        })?;
        let image_for_create = image.id.clone().unwrap_or_else(|| image.reference.clone());
        let spec_key = (req.sandbox_key != "run").then_some(req.sandbox_key.as_str());
        let name = names::container_name(&req.run_id, spec_key);

        // Workspace and mounts (03 §8.2).
        let ws_host = std::fs::canonicalize(&req.workspace_host_path).map_err(|e| DError::InvalidSpec {
            field: "workspace".into(),
            reason: format!("{}: {e}", req.workspace_host_path.display()),
        })?;
        let ws_host_s = ws_host.to_string_lossy().into_owned();
        let workspace = if sandbox.workspace_folder.is_empty() {
            ws_host_s.clone()
        } else {
            sandbox.workspace_folder.clone()
        };
        let mut planned = vec![Planned::bind(
            ws_host_s.clone(),
            workspace.clone(),
            false,
            Origin::Workspace,
        )];
        // The git common dir of a linked worktree, only once verified (never read from a pointer alone).
        let git = mounts::git_dirs(&ws_host).map_err(|r| git_refused(&r))?;
        // Mount safety (03 §10) for the workspace and the spec's binds; targets for every user mount.
        let host_facts = HostFacts {
            os: if self.settings.host_linux {
                HostOs::Linux
            } else {
                HostOs::MacOs
            },
            home: self.settings.endpoints.home.clone(),
            xdg_runtime_dir: self.settings.endpoints.xdg_runtime_dir.clone(),
            engine_socket: Some(facts.endpoint.clone()),
        };
        let runtime_targets: Vec<String> = req.aux_mounts.iter().map(|a| a.container_path.clone()).collect();
        let policy = MountPolicy {
            host: &host_facts,
            fs: &RealFs,
            driver: kind,
            workspace_target: Some(&workspace),
            workspace_host: Some(&ws_host),
            runtime_targets: &runtime_targets,
        };
        policy.check_workspace(&ws_host)?;
        if let Some(g) = git
            .as_ref()
            .filter(|g| g.outside && !g.common_dir.starts_with(&ws_host))
        {
            let c = g.common_dir.to_string_lossy().into_owned();
            policy
                .check_bind_source(&c)
                .map_err(|reason| DError::UnsafeMount {
                    mount: format!("type=bind,source={c},target={c}"),
                    reason: format!("source {reason} (the git common directory of this linked worktree)"),
                })?;
            planned.push(Planned::bind(c.clone(), c, false, Origin::Git));
        }
        for m in &sandbox.mounts {
            let text = mount_text(m);
            let refuse = |reason: String| DError::UnsafeMount {
                mount: text.clone(),
                reason,
            };
            if m.kind == iterion_spec::values::MountKind::Bind {
                let src = m.source.clone().unwrap_or_default();
                let canonical = policy
                    .check_bind_source(&src)
                    .map_err(|r| refuse(format!("source {r}")))?;
                let lexical =
                    iterion_driver::mount_safety::clean(Path::new(&src)).unwrap_or_else(|| canonical.clone());
                let hs = &req.host_state;
                if let Some(r) =
                    mounts::host_state_bind_refusal(&lexical, &canonical, &hs.data_dir, &hs.claude_dir)
                {
                    return Err(refuse(format!("source {} {r}", lexical.display())));
                }
            }
            policy.check_target(&m.target).map_err(refuse)?;
        }
        let placement = lease.map_or(EgressPlacement::Open, |l| l.placement);
        if placement == EgressPlacement::Relay {
            let l = lease.ok_or_else(|| DError::StartFailed {
                reason: "relay placement without a lease".into(),
                hint: None,
            })?;
            let ProxyListen::Unix(sock) = &l.proxy_listen else {
                return Err(DError::StartFailed {
                    reason: "relay placement needs a Unix proxy socket".into(),
                    hint: None,
                });
            };
            let relay = l
                .relay_binary
                .clone()
                .or_else(|| self.settings.relay_binary.clone())
                .ok_or_else(|| DError::StartFailed {
                    reason: "no egress relay binary is configured".into(),
                    hint: Some("set ITERION_RELAY_BIN".into()),
                })?;
            crate::relay::check_relay_binary(&relay, &facts.arch)?;
            planned.push(Planned::bind(
                sock.to_string_lossy(),
                RELAY_SOCK_TARGET,
                true,
                Origin::Aux,
            ));
            planned.push(Planned::bind(
                relay.to_string_lossy(),
                RELAY_BIN_TARGET,
                true,
                Origin::Aux,
            ));
        }
        for a in &req.aux_mounts {
            planned.push(Planned::bind(
                a.host_path.to_string_lossy(),
                a.container_path.clone(),
                a.read_only,
                Origin::Aux,
            ));
        }
        let hs = &req.host_state;
        let mut skipped = Vec::new();
        if hs.enabled {
            if !hs.data_dir.as_os_str().is_empty() {
                skipped.push(mounts::Skipped {
                    path: hs.data_dir.display().to_string(),
                    reason: mounts::DATA_DIR_NOT_SHARED,
                });
            }
            let mut candidates = Vec::new();
            if hs.claude_dir.is_absolute() {
                candidates.push(hs.claude_dir.clone());
            }
            let (kept, sk) = mounts::host_state_dirs(&candidates, &ws_host);
            skipped.extend(sk);
            for k in kept {
                // the agent home read-only, its writable state entries read-write over it (03 §8.6)
                let s = k.to_string_lossy().into_owned();
                planned.push(Planned::bind(s.clone(), s, true, Origin::HostState));
                let home = mounts::agent_home(&k);
                skipped.extend(home.skipped);
                for w in home.writable {
                    let s = w.to_string_lossy().into_owned();
                    planned.push(Planned::bind(s.clone(), s, false, Origin::HostState));
                }
            }
            if let Some(home) = &hs.home {
                for c in mounts::warm_caches(home, &ws_host) {
                    let s = c.to_string_lossy().into_owned();
                    planned.push(Planned::bind(s.clone(), s, false, Origin::Cache));
                }
            }
        }
        let protected = mounts::protect(&ws_host)?;
        let pinned = protected.pinned.iter().map(|p| (p, false));
        for (p, read_only) in pinned.chain(protected.paths.iter().map(|p| (p, true))) {
            let s = p.to_string_lossy().into_owned();
            // a path inside the workspace is seen at the workspace folder (which need not be the host path);
            // anything else (a worktree's common git dir, ~/.claude) is mounted at its host path
            let target = match p.strip_prefix(&ws_host) {
                Ok(rel) => Path::new(&workspace).join(rel).to_string_lossy().into_owned(),
                Err(_) => s.clone(),
            };
            if !planned.iter().any(|m| m.target == target) {
                planned.push(Planned::bind(s, target, read_only, Origin::Protected));
            }
        }
        for m in &sandbox.mounts {
            if mounts::reserved_target(&m.target) || m.target == workspace {
                return Err(DError::UnsafeMount {
                    mount: format!("target={}", m.target),
                    reason: format!("target {} is reserved", m.target),
                });
            }
            let kind = match m.kind {
                iterion_spec::values::MountKind::Bind => MountKind::Bind,
                iterion_spec::values::MountKind::Volume => MountKind::Volume,
                iterion_spec::values::MountKind::Tmpfs => MountKind::Tmpfs,
            };
            planned.push(Planned {
                kind,
                source: m.source.clone(),
                target: m.target.clone(),
                read_only: m.read_only,
                origin: Origin::User,
                tmpfs_size: m.tmpfs_size,
                tmpfs_mode: m.tmpfs_mode,
            });
        }
        mounts::unique_targets(&planned).map_err(|reason| DError::InvalidSpec {
            field: "mounts".into(),
            reason,
        })?;

        // User remap and HOME (03 §8.3, §8.5).
        let remap = if hs.enabled {
            mounts::remap(
                hs.host_os.is_empty() || hs.host_os == "linux",
                hs.host_uid,
                hs.host_gid,
                sandbox.user.as_deref(),
                RemapEngine {
                    podman: facts.podman,
                    rootless: facts.rootless,
                },
            )
        } else {
            mounts::Remap {
                user: sandbox.user.clone(),
                ..mounts::Remap::default()
            }
        };
        if let Some(l) = &remap.log {
            req.events.log(LogLevel::Warn, l.clone());
        }
        let mut env: Vec<(String, String)> = req.container_env.clone();
        let home_host = remap.home_from_host && hs.home.is_some();
        if home_host
            && let Some(h) = &hs.home
            && !env.iter().any(|(k, _)| k == "HOME")
        {
            env.push(("HOME".into(), h.to_string_lossy().into_owned()));
            env.sort();
        }
        let mut tmpfs: HashMap<String, String> = HashMap::new();
        tmpfs.insert(
            "/run/iterion/exec".into(),
            "rw,nosuid,nodev,noexec,mode=1777,size=64m".into(),
        );
        // A run store or data dir inside the workspace (a project-local `.iterion`) is hidden behind an empty
        // read-only tmpfs: the workspace bind must not make run records or the run-record key reachable.
        for t in mounts::hidden_store_targets(&ws_host, &workspace, &[&hs.data_dir, &req.owner.store_dir]) {
            tmpfs.insert(t, mounts::HIDDEN_STORE_TMPFS.into());
        }
        let mut home_tmpfs = Vec::new();
        if let (Some((uid, gid)), Some(h)) = (remap.remapped, hs.home.as_ref()) {
            let hstr = h.to_string_lossy().into_owned();
            if hstr.starts_with('/') && hstr != "/" {
                let targets: Vec<String> = planned
                    .iter()
                    .filter(|m| m.kind != MountKind::Tmpfs)
                    .map(|m| m.target.clone())
                    .collect();
                home_tmpfs = mounts::home_tmpfs_layers(&hstr, &targets);
                for t in &home_tmpfs {
                    if !targets.contains(t) {
                        tmpfs.insert(t.clone(), mounts::home_tmpfs_options(uid, gid));
                    }
                }
            }
        }

        // Labels (03 §8.1.1).
        let label_map = labels::sandbox_labels(&LabelInput {
            component: req.component.unwrap_or(if spec_key.is_some() {
                Component::Node
            } else {
                Component::Run
            }),
            run_id: &req.run_id,
            run_name: req.run_name.as_deref(),
            owner: &req.owner,
            sandbox_key: &req.sandbox_key,
            image: Some(&image.reference),
            version: &self.settings.iterion_version,
        });

        // Hardening (03 §8.7).
        let mut cap_add: Vec<String> = CAPS_STRICT.iter().map(|s| s.to_string()).collect();
        let strict = req.hardening == HardeningProfile::Strict;
        if !strict {
            cap_add.extend(CAPS_COMPAT_EXTRA.iter().map(|s| s.to_string()));
        }
        let security_opt = if strict {
            Some(vec![if facts.podman {
                "no-new-privileges".to_string()
            } else {
                "no-new-privileges:true".to_string()
            }])
        } else {
            None
        };
        let limits = &req.limits;
        let pids = limits.pids.filter(|p| *p > 0).and_then(|p| i64::try_from(p).ok());
        let memory = limits.memory_bytes.and_then(|m| i64::try_from(m).ok());
        let nano = limits.nano_cpus.and_then(|n| i64::try_from(n).ok());

        let bmounts: Vec<BMount> = planned.iter().map(to_engine_mount).collect();
        let (entrypoint, cmd) = if placement == EgressPlacement::Relay {
            (
                vec![RELAY_BIN_TARGET.to_string()],
                vec![
                    "--listen".into(),
                    RELAY_LISTEN.into(),
                    "--connect".into(),
                    RELAY_SOCK_TARGET.into(),
                ],
            )
        } else {
            (vec!["sleep".to_string()], vec!["infinity".to_string()])
        };
        let host_config = |with_limits: bool| HostConfig {
            mounts: Some(bmounts.clone()),
            tmpfs: Some(tmpfs.clone()),
            network_mode: (placement == EgressPlacement::Relay).then(|| "none".to_string()),
            init: Some(true),
            auto_remove: Some(false),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            privileged: Some(false),
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: Some(cap_add.clone()),
            security_opt: security_opt.clone(),
            pids_limit: if with_limits { pids } else { None },
            memory: if with_limits { memory } else { None },
            memory_swap: if with_limits { memory } else { None },
            nano_cpus: if with_limits { nano } else { None },
            shm_size: Some(256 * 1024 * 1024),
            ipc_mode: Some("private".into()),
            readonly_rootfs: Some(false),
            runtime: limits.oci_runtime.clone(),
            userns_mode: remap.keep_id.then(|| "keep-id".to_string()),
            ..Default::default()
        };
        let body = |with_limits: bool| ContainerCreateBody {
            image: Some(image_for_create.clone()),
            entrypoint: Some(entrypoint.clone()),
            cmd: Some(cmd.clone()),
            env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            working_dir: Some(workspace.clone()),
            user: remap.user.clone(),
            labels: Some(label_map.clone().into_iter().collect()),
            attach_stdin: Some(false),
            attach_stdout: Some(false),
            attach_stderr: Some(false),
            tty: Some(false),
            open_stdin: Some(false),
            stop_signal: Some("SIGTERM".into()),
            stop_timeout: Some(5),
            host_config: Some(host_config(with_limits)),
            ..Default::default()
        };
        let opts = || CreateContainerOptions {
            name: Some(name.clone()),
            platform: String::new(),
        };

        // Create, resolving a name conflict once, and retrying once without rejected limits.
        let mut limits_ignored = Vec::new();
        let mut conflict_resolved = false;
        let mut with_limits = true;
        let id = loop {
            match docker.create_container(Some(opts()), body(with_limits)).await {
                Ok(r) => break r.id,
                Err(e) if status_of(&e) == Some(409) && !conflict_resolved => {
                    conflict_resolved = true;
                    self.resolve_conflict(docker, &name, req).await?;
                }
                Err(e)
                    if with_limits
                        && (pids.is_some() || memory.is_some() || nano.is_some())
                        && limit_rejected(&e.to_string()) =>
                {
                    with_limits = false;
                    for (set, n) in [
                        (pids.is_some(), "pids"),
                        (memory.is_some(), "memory"),
                        (nano.is_some(), "cpus"),
                    ] {
                        if set {
                            limits_ignored.push(n.to_string());
                        }
                    }
                    req.events.log(
                        LogLevel::Warn,
                        format!(
                            "the engine rejected resource limits ({e}); retrying without {}",
                            limits_ignored.join(", ")
                        ),
                    );
                }
                Err(e) => {
                    return Err(DError::StartFailed {
                        reason: format!("create {name}: {}", engine_error(e)),
                        hint: None,
                    });
                }
            }
        };
        *created.lock().unwrap_or_else(|p| p.into_inner()) = Some(id.clone());
        if let Err(e) = docker.start_container(&id, None).await {
            return Err(DError::StartFailed {
                reason: format!("start {name}: {}", engine_error(e)),
                hint: None,
            });
        }
        let inspected = docker.inspect_container(&id, None).await.map_err(engine_error)?;
        let state = inspected.state.unwrap_or_default();
        if state.running != Some(true) {
            let tail = self.log_tail(docker, &id).await;
            return Err(DError::StartFailed {
                reason: format!(
                    "container exited immediately with code {}: {tail}; the image must provide sleep and /bin/sh",
                    state.exit_code.unwrap_or(-1)
                ),
                hint: None,
            });
        }
        let inner = RunInner::new(
            docker.clone(),
            facts.endpoint.clone(),
            id.clone(),
            workspace.clone(),
            remap.user.clone(),
            kind,
        );
        let run = DockerRun::new(inner);
        // Shell probe (03 §8.8 step 5).
        let probe = async {
            let ex = run
                .exec(
                    ExecRequest::new(["true"])
                        .outputs(iterion_driver::Output::Discard, iterion_driver::Output::Discard),
                )
                .await?;
            ex.wait().await
        };
        match tokio::time::timeout(Duration::from_secs(10), probe).await {
            Ok(Ok(_)) => {}
            Ok(Err(DError::ExecStart { .. })) => {
                return Err(DError::ShellMissing {
                    image: image.reference.clone(),
                });
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(DError::StartFailed {
                    reason: "the shell probe did not finish within 10s".into(),
                    hint: None,
                });
            }
        }
        // The processes that make up the sandbox itself, spared when a step's leftovers are killed.
        match tokio::time::timeout(Duration::from_secs(10), run.record_infrastructure()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => req.events.log(
                LogLevel::Warn,
                format!("cannot list the sandbox's processes ({e}); processes a step leaves behind will not be killed"),
            ),
            Err(_) => req.events.log(
                LogLevel::Warn,
                "listing the sandbox's processes did not finish within 10s; processes a step leaves behind will not be killed".to_string(),
            ),
        }

        let mut report = StartReport::new(id.clone(), workspace.clone());
        report.name = name;
        report.image = ImageReport {
            reference: image.reference.clone(),
            digest: image.digest.clone(),
        };
        report.user = remap.user.clone();
        report.mounts = planned
            .iter()
            .map(|m| MountReport {
                source: m.source.clone().unwrap_or_default(),
                target: m.target.clone(),
                kind: match m.kind {
                    MountKind::Bind => "bind",
                    MountKind::Volume => "volume",
                    MountKind::Tmpfs => "tmpfs",
                }
                .to_string(),
                read_only: m.read_only,
                origin: match m.origin {
                    Origin::Workspace => MountOrigin::Workspace,
                    Origin::Git => MountOrigin::Git,
                    Origin::Aux => MountOrigin::Aux,
                    Origin::HostState => MountOrigin::HostState,
                    Origin::Cache => MountOrigin::Cache,
                    Origin::Protected => MountOrigin::Protected,
                    Origin::User => {
                        if spec_key.is_some() {
                            MountOrigin::Node
                        } else {
                            MountOrigin::Workflow
                        }
                    }
                },
            })
            .collect();
        let mut tmpfs_list: Vec<String> = tmpfs.keys().cloned().collect();
        tmpfs_list.sort();
        report.tmpfs = tmpfs_list;
        report.host_state_skipped = skipped
            .into_iter()
            .map(|s| SkippedPath {
                path: s.path,
                reason: s.reason.to_string(),
            })
            .collect();
        report.protected_created = protected
            .created
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        report.home = if home_host {
            HomeSource::Host
        } else {
            HomeSource::Image
        };
        report.user_remap = remap.remapped.map(|(uid, gid)| UserRemap { uid, gid });
        report.uid_mismatch = remap
            .uid_mismatch
            .clone()
            .map(|(spec_user, host_uid)| UidMismatch { spec_user, host_uid });
        report.placement = placement;
        report.enforced_egress = placement == EgressPlacement::Relay;
        report.hardening = HardeningReport {
            profile: if strict { "strict".into() } else { "compat".into() },
            cap_add,
            no_new_privileges: strict,
            pids_limit: if limits_ignored.is_empty() {
                limits.pids
            } else {
                None
            },
            memory_bytes: if limits_ignored.is_empty() {
                limits.memory_bytes
            } else {
                None
            },
        };
        report.limits_ignored = limits_ignored;
        let _ = home_tmpfs;
        Ok(Started {
            run: Box::new(run),
            report,
        })
    }

    async fn log_tail(&self, docker: &bollard::Docker, id: &str) -> String {
        let opts = LogsOptions {
            follow: false,
            stdout: true,
            stderr: true,
            tail: "20".into(),
            ..Default::default()
        };
        let mut s = docker.logs(id, Some(opts));
        let mut out = String::new();
        while let Some(Ok(chunk)) = s.next().await {
            out.push_str(&chunk.to_string());
        }
        out.trim().to_string()
    }
}

/// The mount as text, for messages (`type=…,source=…,target=…[,readonly]`).
fn mount_text(m: &iterion_spec::values::Mount) -> String {
    let mut t = format!("type={}", m.kind.as_str());
    if let Some(s) = &m.source {
        t.push_str(&format!(",source={s}"));
    }
    t.push_str(&format!(",target={}", m.target));
    if m.read_only {
        t.push_str(",readonly");
    }
    t
}

fn limit_rejected(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    ["pids", "memory", "cpu", "cgroup"].iter().any(|w| m.contains(w))
}

fn to_engine_mount(m: &Planned) -> BMount {
    match m.kind {
        MountKind::Bind => BMount {
            typ: Some(MountType::BIND),
            source: m.source.clone(),
            target: Some(m.target.clone()),
            read_only: Some(m.read_only),
            bind_options: (m.origin == Origin::Workspace).then(|| MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                ..Default::default()
            }),
            ..Default::default()
        },
        MountKind::Volume => BMount {
            typ: Some(MountType::VOLUME),
            source: m.source.clone(),
            target: Some(m.target.clone()),
            read_only: Some(m.read_only),
            volume_options: Some(MountVolumeOptions::default()),
            ..Default::default()
        },
        MountKind::Tmpfs => BMount {
            typ: Some(MountType::TMPFS),
            target: Some(m.target.clone()),
            read_only: Some(m.read_only),
            tmpfs_options: Some(MountTmpfsOptions {
                size_bytes: m.tmpfs_size.and_then(|s| i64::try_from(s).ok()),
                mode: m.tmpfs_mode.map(i64::from),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

/// Directory of the proxy socket for a run (03 §7.2 step 2).
pub fn socket_dir(run_dir: &Path, run_id: &str, xdg_runtime_dir: Option<&Path>, uid: u32) -> PathBuf {
    let natural = run_dir.join("net");
    if natural.join("proxy.sock").as_os_str().len() <= 100 {
        return natural;
    }
    let leaf = format!("net-{}", names::sha_prefix(run_id, 12));
    match xdg_runtime_dir {
        Some(x) => x.join("iterion").join(leaf),
        None => PathBuf::from(format!("/tmp/iterion-{uid}")).join(leaf),
    }
}

fn make_private_dir(dir: &Path, uid: u32) -> Result<(), DError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let io = |e: std::io::Error| DError::StartFailed {
        reason: format!("create {}: {e}", dir.display()),
        hint: None,
    };
    // The `/tmp/iterion-<uid>` fallback must be ours and private (03 §7.2 step 2).
    if let Some(parent) = dir.parent()
        && parent.parent() == Some(Path::new("/tmp"))
        && parent.file_name().and_then(|n| n.to_str()) == Some(format!("iterion-{uid}").as_str())
    {
        match std::fs::symlink_metadata(parent) {
            Ok(md) => {
                if md.uid() != uid || md.permissions().mode() & 0o077 != 0 || !md.is_dir() {
                    return Err(DError::StartFailed {
                        reason: format!(
                            "{} exists with another owner or wider permissions",
                            parent.display()
                        ),
                        hint: Some("remove it, or set XDG_RUNTIME_DIR".into()),
                    });
                }
            }
            Err(_) => std::fs::DirBuilder::new()
                .mode(0o700)
                .create(parent)
                .map_err(io)?,
        }
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    Ok(())
}

#[async_trait]
impl iterion_driver::Driver for DockerDriver {
    fn kind(&self) -> DriverKind {
        match self.facts() {
            Some(f) if f.podman => DriverKind::Podman,
            Some(_) => DriverKind::Docker,
            None if self.settings.family == Family::Podman => DriverKind::Podman,
            None => DriverKind::Docker,
        }
    }

    fn capabilities(&self) -> Capabilities {
        let desktop = self.vm_engine();
        let rootless_docker = self.facts().is_some_and(|f| f.rootless && !f.podman);
        if desktop {
            Capabilities::desktop_engine()
        } else {
            Capabilities::linux_engine(!rootless_docker)
        }
    }

    async fn engine_info(&self) -> iterion_driver::Result<EngineInfo> {
        let e = self.engine().await?;
        let f = e.facts();
        let mut info = EngineInfo::new(self.kind(), f.version.clone());
        info.api_version = f.api_version.clone();
        info.os = f.os.clone();
        info.arch = f.arch.clone();
        info.rootless = f.rootless;
        info.desktop = f.desktop;
        info.endpoint = Some(format!("unix://{}", f.endpoint.display()));
        Ok(info)
    }

    async fn prepare(&self, req: PrepareRequest) -> iterion_driver::Result<Prepared> {
        let engine = self.engine().await?;
        let kind = self.kind();
        let sandbox = req.sandbox;
        iterion_driver::spec_safety::check_spec(&sandbox)?;
        if sandbox.build.is_some() {
            return Ok(Prepared::new(kind, sandbox));
        }
        let reference = sandbox.image.clone().ok_or_else(|| DError::InvalidSpec {
            field: "image".into(),
            reason: "the sandbox has neither an image nor a build".into(),
        })?;
        let events = req.events.clone();
        let progress = move |s: &str| events.log(LogLevel::Debug, format!("pull: {s}"));
        let auth = self.registry_auth(&reference, &req.events);
        let ready = image::ensure_image(
            engine,
            &reference,
            policy(req.pull_policy),
            req.pull_timeout,
            &progress,
            auth.as_ref(),
        )
        .await
        .map_err(|e| match e {
            crate::Error::SetupTimeout { after, .. } => DError::SetupTimeout {
                phase: SetupPhase::Pull,
                after,
                subject: Some(reference.clone()),
            },
            other => other.into(),
        })?;
        for w in &ready.warnings {
            req.events.log(LogLevel::Warn, w.clone());
        }
        req.events.emit(DriverEvent::ImageReady {
            image: reference.clone(),
            digest: ready.image.digest.clone(),
            pulled: ready.pulled,
            duration_ms: ms(ready.duration),
        });
        let mut p = Prepared::new(kind, sandbox);
        p.image = Some(ImageRef {
            reference,
            digest: ready.image.digest,
            id: Some(ready.image.id),
        });
        Ok(p)
    }

    async fn build(&self, prepared: Prepared, req: BuildRequest) -> iterion_driver::Result<Prepared> {
        prepared.check_kind(self.kind())?;
        let engine = self.engine().await?;
        let Some(b) = prepared.sandbox.build.clone() else {
            return Ok(prepared);
        };
        let dockerfile = PathBuf::from(&b.dockerfile);
        let context = PathBuf::from(&b.context);
        let root = common_ancestor(&dockerfile, &context);
        let tag = names::build_tag(&req.run_id, req.spec_key.as_deref());
        let mut input = BuildInput::new(
            dockerfile.clone(),
            context.clone(),
            root,
            tag.clone(),
            req.run_id.clone(),
        );
        input.target = b.target.clone();
        input.args = b.args.clone();
        input.network = req.network;
        input.pull = req.pull_policy == PullPolicy::Always && req.network == BuildNetwork::Open;
        if req.pull_policy == PullPolicy::Always && req.network == BuildNetwork::None {
            req.events.log(
                LogLevel::Warn,
                format!(
                    "build of {}: base images are not pulled (pull policy always) because the build has no \
                     network under this network policy; the images present on this host are used",
                    b.dockerfile
                ),
            );
        }
        input.timeout = req.build_timeout;
        let kind = self.kind();
        req.events.emit(DriverEvent::BuildStarted {
            driver: kind,
            dockerfile: b.dockerfile.clone(),
            context: b.context.clone(),
            target: b.target.clone().unwrap_or_default(),
            network: req.network,
        });
        let started = Instant::now();
        let events = req.events.clone();
        let progress = move |s: &str| events.log(LogLevel::Info, format!("build: {s}"));
        match imagebuild::build(engine, &input, &progress).await {
            Ok(tag) => {
                req.events.emit(DriverEvent::BuildFinished {
                    driver: kind,
                    target: tag.clone(),
                    duration_ms: ms(started.elapsed()),
                    network: req.network,
                });
                let local = image::inspect(engine, &tag).await?;
                let mut p = prepared;
                p.sandbox.build = None;
                p.sandbox.image = Some(tag.clone());
                p.image = Some(ImageRef {
                    reference: tag,
                    digest: None,
                    id: local.map(|l| l.id),
                });
                Ok(p)
            }
            Err(e) => {
                let e: DError = match e {
                    crate::Error::SetupTimeout { after, .. } => DError::SetupTimeout {
                        phase: SetupPhase::Build,
                        after,
                        subject: Some(b.dockerfile.clone()),
                    },
                    other => other.into(),
                };
                req.events.emit(DriverEvent::BuildFailed {
                    driver: kind,
                    error: e.to_string(),
                });
                Err(e)
            }
        }
    }

    async fn network(&self, req: NetworkRequest) -> iterion_driver::Result<NetworkLease> {
        let engine = self.engine().await?;
        let facts = engine.facts();
        let kind = self.kind();
        if self.vm_engine() {
            if req.require_enforced {
                return Err(DError::NetworkUnavailable {
                    engine: if facts.desktop {
                        "Docker Desktop".into()
                    } else {
                        facts.driver_name().into()
                    },
                    reason: "the engine runs in a virtual machine and cannot reach a host socket".into(),
                    hint: "use a Linux engine, or set network mode: open".into(),
                });
            }
            let host = if facts.podman {
                "host.containers.internal"
            } else {
                "host.docker.internal"
            };
            return Ok(NetworkLease::new(
                kind,
                EgressPlacement::Advisory,
                ProxyListen::Tcp(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
                host,
                0,
            ));
        }
        let relay = self.settings.relay_binary.clone().ok_or_else(|| DError::StartFailed {
            reason: "the egress relay is not available (this build embeds none and ITERION_RELAY_BIN is unset)".into(),
            hint: Some("set ITERION_RELAY_BIN to a statically linked iterion-relay".into()),
        })?;
        crate::relay::check_relay_binary(&relay, &facts.arch)?;
        let dir = socket_dir(
            &req.run_dir,
            &req.run_id,
            self.settings.endpoints.xdg_runtime_dir.as_deref(),
            self.settings.uid,
        );
        make_private_dir(&dir, self.settings.uid)?;
        Ok(NetworkLease::new(
            kind,
            EgressPlacement::Relay,
            ProxyListen::Unix(dir.join("proxy.sock")),
            "127.0.0.1",
            3128,
        )
        .with_relay_binary(relay)
        .remove_dir_on_release(dir))
    }

    async fn start(
        &self,
        prepared: Prepared,
        lease: Option<&NetworkLease>,
        req: StartRequest,
    ) -> iterion_driver::Result<Started> {
        prepared.check_kind(self.kind())?;
        if let Some(l) = lease {
            l.check_kind(self.kind())?;
        }
        let engine = self.engine().await?;
        let created = std::sync::Mutex::new(None);
        let res = tokio::time::timeout(
            req.start_timeout,
            self.start_inner(&prepared, lease, &req, &created),
        )
        .await;
        let res = match res {
            Ok(r) => r,
            Err(_) => Err(DError::SetupTimeout {
                phase: SetupPhase::Start,
                after: req.start_timeout,
                subject: None,
            }),
        };
        if res.is_err() {
            let id = created.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(id) = id {
                self.remove_container_quiet(&engine.docker, &id).await;
            }
        }
        res
    }

    async fn list_managed(&self) -> iterion_driver::Result<Vec<ManagedResource>> {
        let engine = self.engine().await?;
        let d = &engine.docker;
        let filter: HashMap<String, Vec<String>> =
            HashMap::from([("label".to_string(), vec![format!("{}=true", labels::MANAGED)])]);
        let mut out = Vec::new();
        let cs = d
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filter.clone()),
                ..Default::default()
            }))
            .await
            .map_err(engine_error)?;
        for c in cs {
            out.push(ManagedResource {
                kind: ResourceKind::Container,
                id: c.id.unwrap_or_default(),
                name: c
                    .names
                    .and_then(|n| n.into_iter().next())
                    .unwrap_or_default()
                    .trim_start_matches('/')
                    .to_string(),
                labels: c.labels.unwrap_or_default().into_iter().collect(),
                created: c.created,
            });
        }
        let ns = d
            .list_networks(Some(ListNetworksOptions {
                filters: Some(filter.clone()),
            }))
            .await
            .map_err(engine_error)?;
        for n in ns {
            out.push(ManagedResource {
                kind: ResourceKind::Network,
                id: n.id.unwrap_or_default(),
                name: n.name.unwrap_or_default(),
                labels: n.labels.unwrap_or_default().into_iter().collect(),
                created: None,
            });
        }
        let is = d
            .list_images(Some(ListImagesOptions {
                all: false,
                filters: Some(filter),
                ..Default::default()
            }))
            .await
            .map_err(engine_error)?;
        for i in is {
            out.push(ManagedResource {
                kind: ResourceKind::Image,
                name: i.repo_tags.first().cloned().unwrap_or_default(),
                id: i.id,
                labels: i.labels.into_iter().collect(),
                created: Some(i.created),
            });
        }
        // Defence in depth: only resources the engine says are managed.
        out.retain(|r| r.labels.get(labels::MANAGED).map(String::as_str) == Some("true"));
        Ok(out)
    }

    async fn owner_liveness(&self, r: &ManagedResource) -> Liveness {
        owner_liveness(&r.labels, &self.settings.this_host, &HostProcesses)
    }

    async fn remove_managed(&self, r: &ManagedResource) -> iterion_driver::Result<RemoveOutcome> {
        if r.labels.get(labels::MANAGED).map(String::as_str) != Some("true") {
            return Ok(RemoveOutcome::Refused {
                reason: "not managed by iterion".into(),
            });
        }
        match self.owner_liveness(r).await {
            Liveness::Alive => {
                return Ok(RemoveOutcome::Refused {
                    reason: "its owner is alive".into(),
                });
            }
            Liveness::Foreign => {
                return Ok(RemoveOutcome::Refused {
                    reason: "its owner runs on another host".into(),
                });
            }
            Liveness::Unknown if r.kind != ResourceKind::Image => {
                return Ok(RemoveOutcome::Refused {
                    reason: "its owner is unknown".into(),
                });
            }
            _ => {}
        }
        let engine = self.engine().await?;
        let d = &engine.docker;
        let res = match r.kind {
            ResourceKind::Container => {
                d.remove_container(
                    &r.id,
                    Some(RemoveContainerOptions {
                        v: true,
                        force: true,
                        link: false,
                    }),
                )
                .await
            }
            ResourceKind::Network => d.remove_network(&r.id).await,
            ResourceKind::Image => d
                .remove_image(
                    &r.id,
                    Some(RemoveImageOptions {
                        force: false,
                        noprune: false,
                        platforms: None,
                    }),
                    None,
                )
                .await
                .map(|_| ()),
        };
        match res {
            Ok(()) => Ok(RemoveOutcome::Removed),
            Err(e) if status_of(&e) == Some(404) => Ok(RemoveOutcome::AlreadyGone),
            Err(e) if r.kind != ResourceKind::Container && matches!(status_of(&e), Some(403 | 409)) => {
                Ok(RemoveOutcome::Refused {
                    reason: format!("in use: {}", engine_error(e)),
                })
            }
            Err(e) => Err(engine_error(e)),
        }
    }

    async fn remove_image(&self, reference: &str) -> iterion_driver::Result<()> {
        let engine = self.engine().await?;
        match engine
            .docker
            .remove_image(
                reference,
                Some(RemoveImageOptions {
                    force: true,
                    noprune: false,
                    platforms: None,
                }),
                None,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(engine_error(e)),
        }
    }
}

/// The longest common lexical ancestor of two absolute paths (the build containment root when the request
/// names none).
fn common_ancestor(a: &Path, b: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for (x, y) in a.components().zip(b.components()) {
        if x != y {
            break;
        }
        out.push(x);
    }
    if out.as_os_str().is_empty() {
        PathBuf::from("/")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_dir_falls_back_for_long_paths() {
        let short_dir = socket_dir(Path::new("/home/jo/.iterion/runs/r1"), "r1", None, 1000);
        assert_eq!(short_dir, Path::new("/home/jo/.iterion/runs/r1/net"));
        let long = format!("/home/jo/{}", "x".repeat(100));
        let d = socket_dir(Path::new(&long), "r1", Some(Path::new("/run/user/1000")), 1000);
        assert_eq!(
            d,
            Path::new(&format!(
                "/run/user/1000/iterion/net-{}",
                names::sha_prefix("r1", 12)
            ))
        );
        let t = socket_dir(Path::new(&long), "r1", None, 1000);
        assert!(t.starts_with("/tmp/iterion-1000"), "{}", t.display());
    }

    #[test]
    fn common_ancestor_of_dockerfile_and_context() {
        assert_eq!(
            common_ancestor(Path::new("/r/.devcontainer/Dockerfile"), Path::new("/r")),
            Path::new("/r")
        );
        assert_eq!(
            common_ancestor(Path::new("/a/b/Dockerfile"), Path::new("/a/b")),
            Path::new("/a/b")
        );
        assert_eq!(
            common_ancestor(Path::new("/x/D"), Path::new("/y")),
            Path::new("/")
        );
    }
}
