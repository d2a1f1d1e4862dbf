//! `DockerDriver`: the `Driver` implementation over the engine API (03 §4–§9).
//!
//! A start is a list of named steps, one module each, every module importing only those before it:
//! `settings` → `plan` (mounts, user, tmpfs) → `create` (create options, the create with its conflict and
//! limit retries) → `start` (start, post-start checks, report); `network` holds the proxy socket directory,
//! `build` the image build with its cache.
//! This file composes them and implements the `Driver` trait.

mod build;
mod create;
mod network;
mod plan;
mod settings;
mod start;

pub use network::socket_dir;
pub use plan::{RELAY_BIN_TARGET, RELAY_LISTEN, RELAY_SOCK_TARGET};
pub use settings::DockerSettings;

use crate::container::engine_error;
use crate::endpoint::Family;
use crate::engine::Engine;
use crate::error::status_of;
use crate::image::{self, PullPolicy as ImgPolicy};
use crate::names;
use async_trait::async_trait;
use bollard::query_parameters::{
    ListContainersOptions, ListImagesOptions, ListNetworksOptions, RemoveContainerOptions, RemoveImageOptions,
};
use iterion_driver::Driver as _;
use iterion_driver::labels;
use iterion_driver::owner::{HostProcesses, owner_liveness};
use iterion_driver::{
    BuildRequest, Capabilities, DriverEvent, DriverKind, EgressPlacement, EngineInfo, Error as DError,
    ImageRef, Liveness, LogLevel, ManagedResource, NetworkLease, NetworkRequest, PrepareRequest, Prepared,
    ProxyListen, PullPolicy, RemoveOutcome, ResourceKind, SetupPhase, StartRequest, Started,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
            E::UnsafeGit { refusal } => plan::git_refused(&refusal),
        }
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

    /// Registry credentials from the configured `config.json` and its helpers; warnings (a failing helper) go
    /// to `events`.
    fn credentials(&self, events: &iterion_driver::EventSink) -> crate::auth::Credentials {
        let events = events.clone();
        crate::auth::Credentials::new(
            self.settings.docker_config.clone(),
            self.settings.helper_path.clone(),
        )
        .with_warnings(move |w| events.log(LogLevel::Warn, w))
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

    /// Starts the sandbox of `prepared` as a list of steps: plan the mounts and the user, build the create
    /// options, create (recording the id in `created` for the caller's cleanup), start and check, report.
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
        let spec_key = (req.sandbox_key != "run").then_some(req.sandbox_key.as_str());
        let name = names::container_name(&req.run_id, spec_key);
        let placement = lease.map_or(EgressPlacement::Open, |l| l.placement);

        let mounts = plan::plan_mounts(&self.settings, &facts, kind, sandbox, lease, req)?;
        let user = plan::plan_user(sandbox, &facts, req, &mounts);
        let hardening = create::Hardening::of(req, &facts);
        let oci_runtime = facts.oci_runtime(&sandbox.runtime.name)?;
        let image_for_create = image.id.clone().unwrap_or_else(|| image.reference.clone());
        let spec = create::CreateSpec {
            name: &name,
            image: &image_for_create,
            placement,
            mounts: &mounts,
            user: &user,
            labels: create::sandbox_labels(
                req,
                spec_key.is_some(),
                &image.reference,
                &self.settings.iterion_version,
            ),
            hardening: &hardening,
            oci_runtime: oci_runtime.clone(),
        };
        let (id, limits_ignored) =
            create::create_container(docker, &spec, req, &self.settings.this_host).await?;
        *created.lock().unwrap_or_else(|p| p.into_inner()) = Some(id.clone());

        let workspace = mounts.workspace.clone();
        let container = start::Created {
            id: &id,
            name: &name,
            image: &image,
            workspace: &workspace,
            user: user.remap.user.clone(),
            kind,
        };
        let (run, checked) = start::start_and_check(
            docker,
            &facts,
            &container,
            req,
            self.settings.probe_cache.as_deref(),
        )
        .await?;
        let mut report = start::start_report(start::Outcome {
            created: &container,
            node: spec_key.is_some(),
            mounts,
            user,
            placement,
            hardening,
            limits: &req.limits,
            limits_ignored,
            oci_runtime,
        });
        report.bash = Some(checked.bash);
        report.start_checks_cached = checked.cached;
        Ok(Started {
            run: Box::new(run),
            report,
        })
    }
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
        info.runtimes = f.runtimes.clone();
        info.default_runtime = f.default_runtime.clone();
        Ok(info)
    }

    async fn prepare(&self, req: PrepareRequest) -> iterion_driver::Result<Prepared> {
        let engine = self.engine().await?;
        let kind = self.kind();
        let sandbox = req.sandbox;
        iterion_driver::spec_safety::check_spec(&sandbox)?;
        // refused before anything is pulled, built or started; a build itself runs under the default runtime
        if let Some(name) = engine.facts().oci_runtime(&sandbox.runtime.name)? {
            engine
                .facts()
                .check_runtime_egress(&name, sandbox.network.needs_proxy())?;
        }
        if sandbox.build.is_some() {
            return Ok(Prepared::new(kind, sandbox));
        }
        let reference = sandbox.image.clone().ok_or_else(|| DError::InvalidSpec {
            field: "image".into(),
            reason: "the sandbox has neither an image nor a build".into(),
        })?;
        let events = req.events.clone();
        let progress = move |s: &str| events.log(LogLevel::Debug, format!("pull: {s}"));
        let credentials = self.credentials(&req.events);
        let ready = image::ensure_image(
            engine,
            &reference,
            policy(req.pull_policy),
            req.pull_timeout,
            &progress,
            &credentials,
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
        if prepared.sandbox.build.is_none() {
            return Ok(prepared);
        }
        let settings = build::BuildSettings {
            kind: self.kind(),
            version: &self.settings.iterion_version,
            builder: self.settings.builder,
            credentials: self.credentials(&req.events),
        };
        build::build(engine, &settings, prepared, &req).await
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
        network::make_private_dir(&dir, self.settings.uid)?;
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
                create::remove_container_quiet(&engine.docker, &id).await;
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
