//! The sibling-pod driver (07): [`K8sDriver`] implements [`iterion_driver::Driver`] over the Kubernetes API.
//! It reads no environment: the composition root passes a [`K8sSettings`] and a [`ClusterAccess`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use iterion_driver::labels::Component as DriverComponent;
use iterion_driver::owner::{HostProcesses, current_owner, owner_liveness};
use iterion_driver::{
    AuxMountKind, BuildRequest, Capabilities, CopyDirection, DriverKind, EgressPlacement, EgressSupport,
    EngineInfo, Error, EventSink, ImageRef, ImageReport, Liveness, ManagedResource, NetworkLease,
    NetworkRequest, PrepareRequest, Prepared, ProxyListen, RemoveOutcome, ResourceKind, Result, SetupPhase,
    StartReport, StartRequest, Started, WorkspaceCopy,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Client;
use kube::api::{Api, ListParams};

use crate::abandon::{Created, Pending};
use crate::cluster::{ClusterAccess, ContextOutcome, Location, RbacOutcome, check_context, check_rbac};
use crate::kapi::{ApiFail, Kapi, Meta};
use crate::manifest::{Overrides, PodPlan, TLS_DIR, network_policy, pod, proxy_addresses};
use crate::names::{Component, Owner, identity};
use crate::run::K8sRun;
use crate::spec_check::{PodMount, PodUser, Refusal, check};
use crate::status::ExecStatus;
use crate::workspace;
use crate::wsexec::{self, SessionError, TOO_OLD};
use iterion_driver::Run as _;

const KIND: DriverKind = DriverKind::Kubernetes;

/// Everything the driver needs from the environment, read by the composition root (07 §2.3).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct K8sSettings {
    /// `ITERION_SANDBOX_K8S_NAMESPACE`; `None`: the service account's or the kubeconfig context's.
    pub namespace: Option<String>,
    /// `ITERION_POD_IP`.
    pub pod_ip: Option<String>,
    /// `ITERION_POD_IPS` (comma-separated).
    pub pod_ips: Option<String>,
    /// `ITERION_POD_NAME`.
    pub pod_name: Option<String>,
    /// `ITERION_POD_UID`.
    pub pod_uid: Option<String>,
    /// `ITERION_SANDBOX_K8S_POD_READY_TIMEOUT` (default 10 minutes).
    pub pod_ready_timeout: Duration,
    /// `ITERION_SANDBOX_WORKSPACE_COPY_TIMEOUT` (default 15 minutes).
    pub workspace_copy_timeout: Duration,
    /// `ITERION_SANDBOX_K8S_POD_OVERRIDES` (JSON text; empty: none).
    pub overrides: String,
    /// `ITERION_SANDBOX_PULL_POLICY` (`auto`, `missing`, `always`, `never`; empty: `missing`).
    pub pull_policy: String,
    /// `ITERION_SANDBOX_MEMORY_LIMIT`, as a Kubernetes quantity.
    pub memory: Option<String>,
    /// `ITERION_SANDBOX_CPUS`, as a Kubernetes quantity.
    pub cpus: Option<String>,
    /// Bound of one API request (and of the reachability and permission checks).
    pub request_timeout: Duration,
    /// How long cleanup waits for a deleted pod to go before it gives up (30 s).
    pub delete_wait: Duration,
    /// Interval of the "gone yet?" polls (1 s).
    pub poll_interval: Duration,
}

impl Default for K8sSettings {
    fn default() -> Self {
        K8sSettings {
            namespace: None,
            pod_ip: None,
            pod_ips: None,
            pod_name: None,
            pod_uid: None,
            pod_ready_timeout: Duration::from_secs(600),
            workspace_copy_timeout: Duration::from_secs(900),
            overrides: String::new(),
            pull_policy: String::new(),
            memory: None,
            cpus: None,
            request_timeout: Duration::from_secs(30),
            delete_wait: Duration::from_secs(30),
            poll_interval: Duration::from_secs(1),
        }
    }
}

/// The object a start creates, and on whose behalf.
struct Target<'a> {
    api: &'a Kapi,
    name: &'a str,
    owner: &'a Owner,
    run_id: &'a str,
}

/// What `prepare` found, carried to `start`.
#[derive(Debug, Clone)]
struct PodSpecParts {
    user: Option<PodUser>,
    mounts: Vec<PodMount>,
    overrides: Overrides,
}

/// The Kubernetes driver: one sibling pod per sandbox.
#[derive(Clone)]
pub struct K8sDriver {
    inner: Arc<Inner>,
}

struct Inner {
    access: ClusterAccess,
    settings: K8sSettings,
    client: tokio::sync::OnceCell<Client>,
    /// The reachability and permission checks, done once per driver (one driver per process).
    checked: tokio::sync::OnceCell<EngineInfo>,
    /// Removals of what interrupted starts created; the network lease's release waits for them.
    abandoned: Arc<Pending>,
}

impl std::fmt::Debug for K8sDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("K8sDriver")
            .field("access", &self.inner.access)
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable {
        driver: KIND.as_str().into(),
        reason: reason.into(),
    }
}

impl K8sDriver {
    /// A driver over `access` with `settings`. Nothing is contacted before the first call.
    pub fn new(access: ClusterAccess, settings: K8sSettings) -> K8sDriver {
        K8sDriver {
            inner: Arc::new(Inner {
                access,
                settings,
                client: tokio::sync::OnceCell::new(),
                checked: tokio::sync::OnceCell::new(),
                abandoned: Arc::new(Pending::default()),
            }),
        }
    }

    fn namespace(&self) -> String {
        self.inner
            .settings
            .namespace
            .clone()
            .or_else(|| self.inner.access.namespace().map(str::to_string))
            .unwrap_or_else(|| "default".into())
    }

    async fn api(&self) -> Result<Kapi> {
        let s = &self.inner.settings;
        let client = self
            .inner
            .client
            .get_or_try_init(|| async {
                self.inner
                    .access
                    .driver_client(s.request_timeout)
                    .map_err(|e| unavailable(e.to_string()))
            })
            .await?
            .clone();
        Ok(Kapi {
            client,
            namespace: self.namespace(),
            request_timeout: s.request_timeout,
            poll: s.poll_interval,
            delete_wait: s.delete_wait,
        })
    }

    /// `GET /version` (1.30 or newer) and one `SelfSubjectAccessReview` per permission of the shipped Role
    /// (07 §7.3); a success is kept for the life of the driver.
    async fn checked(&self) -> Result<EngineInfo> {
        self.inner
            .checked
            .get_or_try_init(|| self.check_cluster())
            .await
            .cloned()
    }

    async fn check_cluster(&self) -> Result<EngineInfo> {
        let access = &self.inner.access;
        let timeout = self.inner.settings.request_timeout;
        let context = check_context(access, timeout).await;
        let version = match &context.outcome {
            ContextOutcome::Reachable { version } => *version,
            ContextOutcome::TooOld { version } => {
                return Err(unavailable(format!(
                    "the cluster's API server is older than 1.30 ({version}): exec cannot close stdin"
                )));
            }
            ContextOutcome::Unavailable(e) | ContextOutcome::Unreachable(e) => {
                return Err(unavailable(e.to_string()));
            }
        };
        let ns = self.namespace();
        let rbac = check_rbac(access, Some(&ns), timeout).await;
        match rbac.outcome {
            RbacOutcome::AllAllowed { .. } => {}
            RbacOutcome::Missing { denied, failed } => {
                let who = match access.location() {
                    Location::InCluster => "the runner's service account",
                    Location::OffCluster => "the kubeconfig user",
                };
                if !denied.is_empty() {
                    let list: Vec<String> = denied
                        .iter()
                        .map(|p| {
                            let resource = match p.subresource {
                                Some(sub) => format!("{}/{sub}", p.resource),
                                None => p.resource.to_string(),
                            };
                            format!("{} on {resource}", p.verb)
                        })
                        .collect();
                    return Err(unavailable(format!(
                        "{who} lacks {} in namespace {ns}; apply the shipped Role",
                        list.join(", ")
                    )));
                }
                let list: Vec<String> = failed.iter().map(|(p, e)| format!("{p} ({e})")).collect();
                return Err(unavailable(format!(
                    "the permissions of {who} could not be verified in namespace {ns}: {}",
                    list.join("; ")
                )));
            }
            RbacOutcome::Unavailable(e) => return Err(unavailable(e.to_string())),
        }
        let mut info = EngineInfo::new(KIND, version.to_string());
        info.api_version = version.to_string();
        info.endpoint = access.server().map(str::to_string);
        Ok(info)
    }

    fn owner(&self, req: &StartRequest) -> Owner {
        let s = &self.inner.settings;
        let host = s
            .pod_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| req.owner.host_name.clone());
        let mut owner = Owner::new(host, req.owner.pid, req.owner.start_time);
        owner.pod_name = s.pod_name.clone().filter(|n| !n.is_empty());
        owner.pod_uid = s.pod_uid.clone().filter(|n| !n.is_empty());
        owner.store = req.owner.store_dir.display().to_string();
        owner
    }

    /// Liveness of the runner that owns an object (07 §12.2): this host's own process table when the owner
    /// is this host (or this runner pod); otherwise the owner pod looked up by name and compared by UID.
    /// Without owner information: `Unknown` (never removed).
    async fn owner_state(&self, api: &Kapi, this_host: &str, meta: &Meta) -> Liveness {
        let (labels, annotations) = meta;
        let Some(host) = labels.get("iterion.io/owner-host") else {
            return Liveness::Unknown;
        };
        if host == this_host {
            return owner_liveness(labels, this_host, &HostProcesses);
        }
        let Some(uid) = annotations.get("iterion.io/owner-pod-uid") else {
            return Liveness::Unknown;
        };
        match api.get_pod(host).await {
            Ok(None) => Liveness::Dead,
            Ok(Some(p)) if p["metadata"]["uid"].as_str() != Some(uid.as_str()) => Liveness::Dead,
            Ok(Some(_)) => Liveness::Alive,
            Err(_) => Liveness::Unknown,
        }
    }

    /// A `409 AlreadyExists` at create (07 §11): an object not managed by iterion is never touched; a managed
    /// one whose owner is dead is removed (the pod, then its NetworkPolicy unless `policy_ours`), so that the
    /// caller may create again once; any other owner keeps it (`SandboxInUse`).
    async fn reclaim(&self, t: &Target<'_>, what: &str, meta: Option<Meta>, policy_ours: bool) -> Result<()> {
        let (api, name, run_id) = (t.api, t.name, t.run_id);
        let Some(meta) = meta else {
            return Ok(());
        };
        let labels = &meta.0;
        if labels.get("iterion.io/managed").map(String::as_str) != Some("true") {
            return Err(Error::StartFailed {
                reason: format!("a {what} named {name} exists and is not managed by iterion"),
                hint: Some(format!("delete or rename that {what}, or use another namespace")),
            });
        }
        if self.owner_state(api, &t.owner.host, &meta).await != Liveness::Dead {
            return Err(Error::SandboxInUse {
                run_id: run_id.to_string(),
                owner_host: labels
                    .get("iterion.io/owner-host")
                    .cloned()
                    .unwrap_or_else(|| "an unknown host".into()),
                owner_pid: labels
                    .get("iterion.io/owner-pid")
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0),
            });
        }
        api.delete_pod(name).await.map_err(ApiFail::into_error)?;
        if !api.wait_gone(name).await {
            return Err(Error::StartFailed {
                reason: format!("the previous pod {name} of this run is still being deleted"),
                hint: None,
            });
        }
        if !policy_ours {
            api.delete_policy(name).await.map_err(ApiFail::into_error)?;
        }
        Ok(())
    }

    async fn create_policy(&self, t: &Target<'_>, np: &NetworkPolicy) -> Result<()> {
        match t.api.create_policy(np).await {
            Err(ApiFail { code: Some(409), .. }) => {
                let meta = t.api.policy_meta(t.name).await.map_err(ApiFail::into_error)?;
                self.reclaim(t, "NetworkPolicy", meta, false).await?;
                t.api.create_policy(np).await.map_err(ApiFail::into_error)
            }
            other => other.map_err(ApiFail::into_error),
        }
    }

    async fn create_pod(&self, t: &Target<'_>, p: &Pod, policy_ours: bool) -> Result<()> {
        match t.api.create_pod(p).await {
            Err(ApiFail { code: Some(409), .. }) => {
                let meta = t.api.pod_meta(t.name).await.map_err(ApiFail::into_error)?;
                self.reclaim(t, "pod", meta, policy_ours).await?;
                t.api.create_pod(p).await.map_err(ApiFail::into_error)
            }
            other => other.map_err(ApiFail::into_error),
        }
    }

    /// Copies the runner's work dir into the pod's workspace (07 §8.1), streamed: the archive is written by a
    /// blocking task into a pipe that `tar -x` reads over exec stdin. Bounded by the workspace copy timeout.
    async fn copy_workspace(&self, run: &K8sRun, req: &StartRequest, dest: &str) -> Result<workspace::Stats> {
        let bound = self.inner.settings.workspace_copy_timeout;
        let src = req.workspace_host_path.clone();
        let hidden = hidden(req);
        let work = async move {
            let (reader, writer) = tokio::io::duplex(256 * 1024);
            let rt = tokio::runtime::Handle::current();
            let producer = tokio::task::spawn_blocking(move || {
                let mut w = workspace::SyncWriter::new(writer, rt);
                workspace::archive(&src, &hidden, &mut w)
            });
            let copied = run.copy_in(dest, Box::pin(reader)).await;
            let produced = producer.await.map_err(|e| Error::Copy {
                direction: CopyDirection::In,
                reason: format!("the archive task failed: {e}"),
            })?;
            copied?;
            produced.map_err(|e| Error::Copy {
                direction: CopyDirection::In,
                reason: format!("reading the work dir: {e}"),
            })
        };
        match tokio::time::timeout(bound, work).await {
            Ok(r) => r,
            Err(_) => Err(Error::SetupTimeout {
                phase: SetupPhase::WorkspaceCopy,
                after: bound,
                subject: None,
            }),
        }
    }

    /// The work dir, then the TLS trust files, into a started pod; what the runtime needs for the copy back.
    async fn copy_in_all(&self, run: &K8sRun, req: &StartRequest, dest: &str) -> Result<WorkspaceCopy> {
        let began = std::time::Instant::now();
        let copied = self.copy_workspace(run, req, dest).await?;
        self.copy_tls_files(run, req).await?;
        Ok(WorkspaceCopy {
            files: copied.files,
            bytes: copied.bytes,
            duration: began.elapsed(),
            listing: Arc::new(copied.listing),
            protect: hidden(req)
                .iter()
                .filter_map(|p| p.strip_prefix(&req.workspace_host_path).ok())
                .filter(|p| !p.as_os_str().is_empty())
                .map(std::path::Path::to_path_buf)
                .collect(),
        })
    }

    /// Copies the TLS trust files of the runtime's aux mounts into the pod's `tls` volume (07 §10 step 5): a
    /// pod has no host file system to bind them from.
    async fn copy_tls_files(&self, run: &K8sRun, req: &StartRequest) -> Result<()> {
        let mut b = tar::Builder::new(Vec::new());
        let mut any = false;
        for m in req
            .aux_mounts
            .iter()
            .filter(|m| m.kind == AuxMountKind::TlsBundle)
        {
            let fail = |reason: String| Error::Copy {
                direction: CopyDirection::In,
                reason,
            };
            let rel = std::path::Path::new(&m.container_path)
                .strip_prefix(TLS_DIR)
                .ok()
                .filter(|r| r.components().count() == 1)
                .ok_or_else(|| {
                    fail(format!(
                        "the TLS file {} must be a file directly under {TLS_DIR} in a pod",
                        m.container_path
                    ))
                })?;
            let data = std::fs::read(&m.host_path)
                .map_err(|e| fail(format!("reading {}: {e}", m.host_path.display())))?;
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, rel, &data[..])
                .map_err(|e| fail(e.to_string()))?;
            any = true;
        }
        if !any {
            return Ok(());
        }
        let bytes = b.into_inner().map_err(|e| Error::Copy {
            direction: CopyDirection::In,
            reason: e.to_string(),
        })?;
        run.copy_in(TLS_DIR, Box::pin(std::io::Cursor::new(bytes))).await
    }

    /// The record of what a start of `name` creates (removed in the background if the start is interrupted).
    fn created(&self, api: &Kapi, name: &str) -> Created {
        Created::new(
            self.inner.access.clone(),
            api.clone(),
            name,
            self.inner.abandoned.clone(),
        )
    }

    /// Waits for the pod, then runs the shell probe (one exec of `/bin/sh -c true`).
    async fn bring_up(&self, api: &Kapi, name: &str, image: &str, events: &EventSink) -> Result<()> {
        crate::ready::wait_ready(api, name, image, self.inner.settings.pod_ready_timeout, events).await?;
        let argv: Vec<String> = ["/bin/sh", "-c", "true"].map(String::from).to_vec();
        let probe = wsexec::run_collect(&api.client, &api.namespace, name, &argv, None);
        match tokio::time::timeout(api.request_timeout, probe).await {
            Ok(Ok((ExecStatus::Exited(0), _, _))) => Ok(()),
            Ok(Ok(_)) => Err(Error::ShellMissing {
                image: image.to_string(),
            }),
            Ok(Err(SessionError::TooOld)) => Err(unavailable(TOO_OLD)),
            Ok(Err(e)) => Err(Error::StartFailed {
                reason: format!("the shell probe could not run: {e}"),
                hint: None,
            }),
            Err(_) => Err(Error::StartFailed {
                reason: format!(
                    "the shell probe did not answer within {}",
                    iterion_driver::fmt_duration(api.request_timeout)
                ),
                hint: None,
            }),
        }
    }
}

/// What never travels between the work dir and a pod: the run store and iterion's data dir (run records, the
/// run-record key), when they lie inside the work dir.
fn hidden(req: &StartRequest) -> Vec<std::path::PathBuf> {
    [&req.owner.store_dir, &req.host_state.data_dir]
        .into_iter()
        .filter(|p| !p.as_os_str().is_empty())
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
        .collect()
}

fn refusal(field: &str, r: Refusal) -> Error {
    Error::InvalidSpec {
        field: field.into(),
        reason: r.message,
    }
}

/// The spec field a refusal of `spec_check::check` is about.
fn refused_field(message: &str) -> &'static str {
    if message.contains("sandbox.build") {
        "build"
    } else if message.contains("sandbox.image") {
        "image"
    } else if message.contains("host_state") {
        "host_state"
    } else if message.contains("sandbox.user") {
        "user"
    } else {
        "mounts"
    }
}

#[async_trait]
impl iterion_driver::Driver for K8sDriver {
    fn kind(&self) -> DriverKind {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::none();
        c.image = true;
        c.tmpfs = true;
        c.cluster_volumes = true;
        c.post_create = true;
        c.numeric_user_only = true;
        c.egress = EgressSupport::Enforced;
        c.copy = true;
        c.exec_kill = true;
        c.init = true;
        c.hardening = true;
        c
    }

    async fn engine_info(&self) -> Result<EngineInfo> {
        self.checked().await
    }

    async fn prepare(&self, req: PrepareRequest) -> Result<Prepared> {
        let (user, mounts) = check(&req.sandbox).map_err(|r| {
            let field = refused_field(&r.message);
            refusal(field, r)
        })?;
        let overrides = Overrides::parse(&self.inner.settings.overrides)
            .and_then(|o| o.with_runtime(&req.sandbox.runtime.name))
            .map_err(|r| refusal("ITERION_SANDBOX_K8S_POD_OVERRIDES", r))?;
        self.checked().await?;
        let image = req.sandbox.image.clone().unwrap_or_default();
        let mut prepared = Prepared::new(KIND, req.sandbox).with_payload(PodSpecParts {
            user,
            mounts,
            overrides,
        });
        prepared.image = Some(ImageRef {
            reference: image,
            digest: None,
            id: None,
        });
        Ok(prepared)
    }

    async fn build(&self, _prepared: Prepared, _req: BuildRequest) -> Result<Prepared> {
        Err(Error::Unsupported {
            driver: KIND,
            feature: "build (build the image in CI and reference it with sandbox.image)".into(),
        })
    }

    async fn network(&self, _req: NetworkRequest) -> Result<NetworkLease> {
        let s = &self.inner.settings;
        let addresses = proxy_addresses(s.pod_ip.as_deref(), s.pod_ips.as_deref()).map_err(|r| {
            Error::NetworkUnavailable {
                engine: "kubernetes".into(),
                reason: r.message,
                hint: "set ITERION_POD_IP from the downward API (status.podIP)".into(),
            }
        })?;
        let Some(first) = addresses.first() else {
            return Err(Error::NetworkUnavailable {
                engine: "kubernetes".into(),
                reason: "ITERION_POD_IP is not set, so no NetworkPolicy can admit the proxy".into(),
                hint: "set ITERION_POD_IP from the downward API (status.podIP), or set network mode: open"
                    .into(),
            });
        };
        // The pod's NetworkPolicy admits only the proxy: enforced as far as the cluster's network plugin
        // enforces NetworkPolicies (the doctor says when that cannot be verified). The release (at the run's
        // cleanup) waits until what an interrupted start created is gone, its NetworkPolicy last.
        let abandoned = self.inner.abandoned.clone();
        let bound = s.delete_wait + s.request_timeout * 2;
        Ok(NetworkLease::new(
            KIND,
            EgressPlacement::Advisory,
            ProxyListen::Tcp(std::net::SocketAddr::new(*first, 0)),
            first.to_string(),
            0,
        )
        .enforced_by_policy()
        .on_release(move || abandoned.wait(bound)))
    }

    async fn start(
        &self,
        prepared: Prepared,
        lease: Option<&NetworkLease>,
        req: StartRequest,
    ) -> Result<Started> {
        prepared.check_kind(KIND)?;
        if let Some(l) = lease {
            l.check_kind(KIND)?;
        }
        let parts = prepared
            .payload::<PodSpecParts>()
            .cloned()
            .ok_or(Error::ForeignPrepared {
                expected: KIND,
                got: prepared.kind,
            })?;
        let s = &self.inner.settings;
        let sb = &prepared.sandbox;
        let image = sb.image.clone().unwrap_or_default();
        let owner = self.owner(&req);
        // A node's own sandbox: asked for, or derived from its spec key (the runtime leaves `component` unset).
        let is_node = match req.component {
            Some(c) => c == DriverComponent::Node,
            None => req.sandbox_key != "run",
        };
        let node_key = is_node.then_some(req.sandbox_key.as_str());
        let component = if node_key.is_some() {
            Component::Node
        } else {
            Component::Run
        };
        let run_name = req.run_name.as_deref();
        let id = identity(&req.run_id, run_name, node_key, component, &owner);
        let name = id.name.clone();
        let namespace = self.namespace();
        let mut plan = PodPlan::new(id, namespace.clone(), image.clone(), sb.workspace_folder.clone());
        plan.pull_policy = s.pull_policy.clone();
        plan.env = req.container_env.clone();
        plan.user = parts.user;
        plan.mounts = parts.mounts.clone();
        plan.tls = req.aux_mounts.iter().any(|m| m.kind == AuxMountKind::TlsBundle);
        plan.memory = s.memory.clone();
        plan.cpus = s.cpus.clone();
        plan.overrides = parts.overrides.clone();
        plan.owner = owner.clone();
        let api = self.api().await?;

        // The NetworkPolicy exists before the pod, so the pod never runs unconfined.
        let proxy = req.proxy.clone().or_else(|| lease.map(NetworkLease::endpoint));
        let policy = match &proxy {
            None => None,
            Some(endpoint) => {
                let addresses = proxy_addresses(s.pod_ip.as_deref(), s.pod_ips.as_deref())
                    .ok()
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| Error::NetworkUnavailable {
                        engine: "kubernetes".into(),
                        reason: "ITERION_POD_IP is not set, so no NetworkPolicy can admit the proxy".into(),
                        hint: "set ITERION_POD_IP from the downward API (status.podIP)".into(),
                    })?;
                let net_id = identity(&req.run_id, run_name, node_key, Component::Network, &owner);
                Some(network_policy(
                    &net_id,
                    &namespace,
                    &owner,
                    &addresses,
                    endpoint.port,
                ))
            }
        };
        let target = Target {
            api: &api,
            name: &name,
            owner: &owner,
            run_id: &req.run_id,
        };
        // Dropped before the start returns (a cancelled run, the runtime's start bound), it removes what exists.
        let mut created = self.created(&api, &name);
        if let Some(np) = &policy {
            self.create_policy(&target, np).await?;
            created.policy = true;
        }
        // A drop during a create (answer unknown) leaves the object to the reaper: a conflicting object may
        // belong to a live runner.
        if let Err(e) = self.create_pod(&target, &pod(&plan), policy.is_some()).await {
            // A pod of someone else keeps its name; only our own NetworkPolicy goes.
            if policy.is_some() {
                let _ = api.delete_policy(&name).await;
            }
            created.disarm();
            return Err(e);
        }
        created.pod = true;
        if let Err(e) = self.bring_up(&api, &name, &image, &req.events).await {
            let _ = api.teardown(&name, policy.is_some()).await;
            created.disarm();
            return Err(e);
        }

        let run = K8sRun::new(
            api.clone(),
            self.inner.access.clone(),
            name.clone(),
            policy.is_some(),
            sb.workspace_folder.clone(),
            sb.user.clone(),
        );
        let copied = match self.copy_in_all(&run, &req, &sb.workspace_folder).await {
            Ok(copied) => copied,
            Err(e) => {
                let _ = api.teardown(&name, policy.is_some()).await;
                created.disarm();
                return Err(e);
            }
        };
        created.disarm();
        let mut report = StartReport::new(name.clone(), sb.workspace_folder.clone());
        report.name = name;
        report.image = ImageReport {
            reference: image,
            digest: None,
        };
        report.user = sb.user.clone();
        report.hardening.oci_runtime = parts.overrides.runtime_class_name().map(str::to_owned);
        report.placement = if policy.is_some() {
            EgressPlacement::Advisory
        } else {
            EgressPlacement::Open
        };
        report.enforced_egress = policy.is_some();
        report.tmpfs = parts
            .mounts
            .iter()
            .filter(|m| matches!(m.kind, crate::spec_check::VolumeKind::Tmpfs { .. }))
            .map(|m| m.target.clone())
            .collect();
        report.host_binds_dropped = req
            .aux_mounts
            .iter()
            .filter(|m| m.kind != AuxMountKind::TlsBundle)
            .map(|m| m.container_path.clone())
            .collect();
        report.workspace_copy = Some(copied);
        Ok(Started {
            run: Box::new(run),
            report,
        })
    }

    async fn list_managed(&self) -> Result<Vec<ManagedResource>> {
        let api = self.api().await?;
        let lp = ListParams::default().labels("iterion.io/managed=true");
        let pods: Api<Pod> = Api::namespaced(api.client.clone(), &api.namespace);
        let policies: Api<NetworkPolicy> = Api::namespaced(api.client.clone(), &api.namespace);
        let fail = |what: &str, e: kube::Error| Error::Engine {
            status: match &e {
                kube::Error::Api(s) => Some(s.code),
                _ => None,
            },
            message: format!("{what}: {}", crate::cluster::error_chain(&e)),
        };
        let mut out = Vec::new();
        for p in pods.list(&lp).await.map_err(|e| fail("list pods", e))?.items {
            out.push(managed(ResourceKind::Container, p.metadata));
        }
        for n in policies
            .list(&lp)
            .await
            .map_err(|e| fail("list networkpolicies", e))?
            .items
        {
            out.push(managed(ResourceKind::Network, n.metadata));
        }
        Ok(out)
    }

    async fn owner_liveness(&self, r: &ManagedResource) -> Liveness {
        let Ok(api) = self.api().await else {
            return Liveness::Unknown;
        };
        let meta = match r.kind {
            ResourceKind::Container => api.pod_meta(&r.name).await,
            ResourceKind::Network => api.policy_meta(&r.name).await,
            ResourceKind::Image => return Liveness::Unknown,
        };
        let Ok(Some(meta)) = meta else {
            return Liveness::Unknown;
        };
        let this_host = self
            .inner
            .settings
            .pod_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| current_owner("").host_name);
        self.owner_state(&api, &this_host, &meta).await
    }

    async fn remove_managed(&self, r: &ManagedResource) -> Result<RemoveOutcome> {
        match self.owner_liveness(r).await {
            Liveness::Dead => {}
            other => {
                return Ok(RemoveOutcome::Refused {
                    reason: format!("owner of {} is {other:?}", r.name).to_lowercase(),
                });
            }
        }
        let api = self.api().await?;
        // A NetworkPolicy outlives its pod (07 §11): while the pod is still going, it stays for a later pass.
        if r.kind == ResourceKind::Network && !api.wait_gone(&r.name).await {
            return Ok(RemoveOutcome::Refused {
                reason: format!(
                    "pod {} is still there; its NetworkPolicy stays until it is gone",
                    r.name
                ),
            });
        }
        let done = match r.kind {
            ResourceKind::Container => api.delete_pod(&r.name).await,
            ResourceKind::Network => api.delete_policy(&r.name).await,
            ResourceKind::Image => return Ok(RemoveOutcome::AlreadyGone),
        };
        done.map(|()| RemoveOutcome::Removed).map_err(ApiFail::into_error)
    }

    async fn remove_image(&self, _reference: &str) -> Result<()> {
        Err(Error::Unsupported {
            driver: KIND,
            feature: "removing images (pods pull from registries)".into(),
        })
    }
}

fn managed(
    kind: ResourceKind,
    meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> ManagedResource {
    let name = meta.name.unwrap_or_default();
    // What a label value cannot hold (the store's path) is an annotation; the reaper reads both as one map.
    let mut labels = meta.labels.unwrap_or_default();
    for (k, v) in meta.annotations.unwrap_or_default() {
        if k.starts_with("iterion.io/") {
            labels.entry(k).or_insert(v);
        }
    }
    ManagedResource {
        kind,
        id: meta.uid.unwrap_or_else(|| name.clone()),
        name,
        labels,
        created: meta.creation_timestamp.map(|t| t.0.as_second()),
    }
}
