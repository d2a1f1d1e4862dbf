//! An engine-backed fake Kubernetes API server (07 §14.1), in-process on `127.0.0.1:0`, plain HTTP/1.1 and
//! JSON (no `kube`, no `k8s-openapi`: only the kubernetes driver crate names those).
//!
//! Pods are **realised as containers of the local engine** through the repository's own
//! [`iterion_driver_docker::DockerDriver`]: the pod's image, numeric `runAsUser[:runAsGroup]`, container
//! environment and `workingDir`; every disk `emptyDir` is a fresh, empty host directory (the pod's workspace
//! is therefore *not* the test's host workspace: a driver has to copy files in and out), memory-backed
//! `emptyDir`s are tmpfs mounts (those under `/run/iterion`, a target the docker driver reserves, are fresh
//! host directories too). Exec sessions (`v5.channel.k8s.io` only) run in that container with
//! [`iterion_driver::Run::exec`]; their status frame is what a real API server sends.
//!
//! What it serves: `GET /version` (1.31), `SelfSubjectAccessReview` creation (always allowed), pods (create —
//! `409 AlreadyExists` for a taken name — get, list and watch with label and field selectors, delete with a
//! `deletionTimestamp` first, `log` with `tailLines`, `exec`), NetworkPolicies (create, get, list, delete).
//! NetworkPolicies are **stored, not enforced**: a pod's container has the engine's default network. Anything
//! else is answered with a `404` (unknown path) or `405` (known path, other method) `Status` and recorded in
//! [`EngineFake::unknown_requests`].
//!
//! Pod status follows a kubelet's: `Pending` at creation, then `Running` with `Ready=True` once the container
//! answers, or a waiting container (`ErrImageNeverPull` for an absent image under `imagePullPolicy: Never`,
//! `ErrImagePull` for one the engine cannot find, `CreateContainerConfigError` when `runAsNonRoot` meets a root
//! or non-numeric image user or the spec uses what the fake does not serve — a volume other than `emptyDir`,
//! `valueFrom`, several containers — `CreateContainerError` otherwise). Watches send `ADDED` for the current
//! objects (then a `BOOKMARK` when the watch allows them), then `MODIFIED` and `DELETED` as they happen. As an API
//! server, it creates nothing in a namespace that does not exist (`404` for the namespace; see
//! [`EngineFake::add_namespace`]), and [`EngineFake::without_watch_progress`] makes it answer a watch that allows
//! bookmarks as a 1.36 server over etcd without progress notifications does.
//!
//! Not emulated: the container's `command` (the container runs the docker driver's own idle process, as a
//! sandbox pod's `sleep infinity` would), resources and limits, scheduling, restarts, and the pod network.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use iterion_test_support::k8s_fake::EngineFake;
//! let fake = EngineFake::start("iterion").await?;
//! let dir = tempfile::tempdir()?;
//! let kubeconfig = fake.write_kubeconfig(dir.path())?;
//! // KUBECONFIG=<kubeconfig> → the kubernetes driver talks to the fake
//! # let _ = kubeconfig;
//! fake.shutdown().await;
//! # Ok(()) }
//! ```

mod exec;
mod objects;
mod pods;
pub mod wire;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iterion_driver::{Driver, Run};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use objects::{FieldSelector, LabelSelector};
use wire::{Request, status_body, write_body, write_json};

/// The Kubernetes version the fake reports.
pub const VERSION: (&str, &str) = ("1", "31");

/// One request the fake answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path.
    pub path: String,
    /// The raw query.
    pub query: String,
    /// The status code answered (`101` for an accepted exec upgrade, `200` for a watch).
    pub status: u16,
}

/// A change of an object, as watches stream it.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    /// `pods` or `networkpolicies`.
    pub resource: &'static str,
    /// `ADDED`, `MODIFIED`, `DELETED`.
    pub kind: &'static str,
    /// The object after the change (before its removal, for `DELETED`).
    pub object: Value,
}

/// What the fake knows.
#[derive(Default)]
pub(crate) struct State {
    /// Last resource version handed out.
    pub rv: u64,
    /// Pods by (namespace, name).
    pub pods: BTreeMap<(String, String), pods::PodEntry>,
    /// NetworkPolicies by (namespace, name).
    pub policies: BTreeMap<(String, String), Value>,
    /// Every request, in order.
    pub seen: Vec<Seen>,
    /// Requests the fake does not serve.
    pub unknown: Vec<String>,
    /// Every engine container the fake created (removed on drop).
    pub containers: Vec<String>,
    /// The namespaces that exist: the kubeconfig's, those of every cluster, and any added.
    pub namespaces: std::collections::BTreeSet<String>,
    /// Whether the storage reports watch progress (etcd progress notifications). Without it a 1.36 API server
    /// answers a watch that allows bookmarks with an `ERROR` event only.
    pub no_watch_progress: bool,
    /// How many of the next exec sessions with stdin get end-of-file at once, their stdin bytes lost.
    pub lose_stdin: u32,
}

impl State {
    /// The next resource version, as text.
    pub fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }
}

/// What every connection and task of one fake shares.
pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub events: broadcast::Sender<Event>,
    pub driver: Arc<dyn Driver>,
    /// Holds the owner's store directory and every pod's host directories' parent.
    pub scratch: tempfile::TempDir,
    pub tasks: TaskTracker,
    pub stop: CancellationToken,
}

impl Shared {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `kind` of `object` to the watches.
    pub fn emit(&self, resource: &'static str, kind: &'static str, object: Value) {
        let _ = self.events.send(Event {
            resource,
            kind,
            object,
        });
    }
}

/// The running fake. Stop it with [`EngineFake::shutdown`]; a drop removes its containers best effort.
pub struct EngineFake {
    addr: SocketAddr,
    namespace: String,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EngineFake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineFake")
            .field("addr", &self.addr)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// A docker driver on the test engine (the socket of [`crate::engine_socket`]).
async fn engine_driver() -> anyhow::Result<Arc<dyn Driver>> {
    use iterion_driver_docker::endpoint::{EndpointSettings, Family};
    use iterion_driver_docker::{DockerDriver, DockerSettings};
    let socket =
        crate::engine_socket().ok_or_else(|| anyhow::anyhow!("DOCKER_HOST is not a unix:// socket"))?;
    let endpoints = EndpointSettings::new(Some(format!("unix://{}", socket.display())), None, None, None);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let settings = DockerSettings::new(endpoints, Family::Docker, host, current_uid());
    let driver = DockerDriver::connect(settings)
        .await
        .map_err(|e| anyhow::anyhow!("the engine-backed fake needs a container engine: {e}"))?;
    Ok(Arc::new(driver))
}

fn current_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

impl EngineFake {
    /// Starts the fake on a fresh loopback port, serving `namespace` (the one its kubeconfig names; objects in
    /// other namespaces are served too). Needs a container engine: call [`crate::engine_required`] first.
    pub async fn start(namespace: impl Into<String>) -> anyhow::Result<EngineFake> {
        let driver = engine_driver().await?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (events, _) = broadcast::channel(1024);
        let namespace = namespace.into();
        let state = State {
            namespaces: [
                "default",
                "kube-system",
                "kube-public",
                "kube-node-lease",
                &namespace,
            ]
            .into_iter()
            .map(str::to_string)
            .collect(),
            ..State::default()
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            events,
            driver,
            scratch: tempfile::Builder::new().prefix("iterion-k8sfake-").tempdir()?,
            tasks: TaskTracker::new(),
            stop: CancellationToken::new(),
        });
        let s = shared.clone();
        shared.tasks.spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = s.stop.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Ok((stream, _)) = accepted else { return };
                let _ = stream.set_nodelay(true);
                let s2 = s.clone();
                s.tasks.spawn(async move {
                    tokio::select! {
                        _ = s2.stop.cancelled() => {}
                        _ = serve(stream, s2.clone()) => {}
                    }
                });
            }
        });
        Ok(EngineFake {
            addr,
            namespace,
            shared,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The namespace of the kubeconfig.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Makes `namespace` exist (the kubeconfig's and those of every cluster — `default`, `kube-system`,
    /// `kube-public`, `kube-node-lease` — exist from the start; a create anywhere else is `404 NotFound` for the
    /// namespace, as an API server answers).
    pub fn add_namespace(&self, namespace: &str) {
        self.shared.lock().namespaces.insert(namespace.to_string());
    }

    /// The next `n` exec sessions that attach stdin lose it: the process gets end-of-file at once and the bytes
    /// the client sends are dropped, as a real kubelet (1.36 over containerd) sometimes does to a short exec.
    pub fn lose_stdin_of_next_execs(&self, n: u32) {
        self.shared.lock().lose_stdin = n;
    }

    /// Serves watches as a 1.36 API server over storage without watch progress notifications (etcd 3.4) does: a
    /// watch that allows bookmarks gets one `ERROR` event (`500`, `RequestWatchProgress is disabled`) and ends.
    /// By default the fake's storage has them, and such a watch gets a `BOOKMARK` after the current objects.
    pub fn without_watch_progress(&self) {
        self.shared.lock().no_watch_progress = true;
    }

    /// Writes `<dir>/kubeconfig`: one context whose server is [`EngineFake::url`], the fake's namespace and a
    /// user without credentials. Returns its path (for `KUBECONFIG`).
    pub fn write_kubeconfig(&self, dir: &Path) -> std::io::Result<PathBuf> {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: engine-fake\nclusters:\n- name: engine-fake\n  \
             cluster:\n    server: {}\ncontexts:\n- name: engine-fake\n  context:\n    cluster: engine-fake\n    \
             user: anonymous\n    namespace: {}\nusers:\n- name: anonymous\n  user: {{}}\n",
            self.url(),
            self.namespace
        );
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// Removes pod `name` (of the fake's namespace) behind the API's back: its container is removed from the
    /// engine at once and the object disappears (`DELETED` to watches), as when a node or someone else deleted
    /// it. Exec sessions in flight end without a status. Returns whether such a pod existed.
    pub async fn remove_pod_behind_back(&self, name: &str) -> bool {
        pods::remove_behind_back(&self.shared, &self.namespace, name).await
    }

    /// [`EngineFake::remove_pod_behind_back`] as the conformance suite's hook (its argument: the pod name,
    /// which is the kubernetes driver's `Run::id`).
    pub fn remove_hook(&self) -> crate::conformance::RemoveHook {
        let (shared, ns) = (self.shared.clone(), self.namespace.clone());
        Arc::new(move |name: String| {
            let (shared, ns) = (shared.clone(), ns.clone());
            Box::pin(async move {
                pods::remove_behind_back(&shared, &ns, &name).await;
            })
        })
    }

    /// Every request answered so far, in order.
    pub fn requests(&self) -> Vec<Seen> {
        self.shared.lock().seen.clone()
    }

    /// The requests the fake does not serve (answered `404` / `405`), as `METHOD path?query`.
    pub fn unknown_requests(&self) -> Vec<String> {
        self.shared.lock().unknown.clone()
    }

    /// The names of the pods that exist now in `namespace`.
    pub fn pod_names(&self, namespace: &str) -> Vec<String> {
        self.shared
            .lock()
            .pods
            .keys()
            .filter(|(ns, _)| ns == namespace)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// Every engine container the fake created, removed or not.
    pub fn containers(&self) -> Vec<String> {
        self.shared.lock().containers.clone()
    }

    /// Stops serving and removes every container it created (each pod's sandbox cleaned up). Returns the
    /// errors of those cleanups.
    pub async fn shutdown(self) -> Vec<String> {
        self.shared.stop.cancel();
        self.shared.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(60), self.shared.tasks.wait()).await;
        let runs: Vec<Arc<dyn Run>> = {
            let mut st = self.shared.lock();
            std::mem::take(&mut st.pods)
                .into_values()
                .filter_map(|p| p.run())
                .collect()
        };
        let mut errors = Vec::new();
        for r in runs {
            errors.extend(r.cleanup().await.errors);
        }
        // Every container went with its sandbox's cleanup: nothing is left for the drop to remove.
        self.shared.lock().containers.clear();
        errors
    }
}

impl Drop for EngineFake {
    fn drop(&mut self) {
        self.shared.stop.cancel();
        let ids = self.shared.lock().containers.clone();
        let Some(socket) = crate::engine_socket() else {
            return;
        };
        for id in ids {
            let _ = crate::docker_http::request(
                &socket,
                "DELETE",
                &format!("/containers/{id}?force=1&v=1"),
                None,
                &[],
                Duration::from_secs(30),
            );
        }
    }
}

/// Serves one connection: requests in order, keep-alive, until a watch or an exec takes it over.
async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    let mut stream = BufReader::new(stream);
    while let Some(req) = wire::read_request(&mut stream).await {
        match route(&shared, &req) {
            Route::Json(code, body) => {
                record(&shared, &req, code);
                if write_json(stream.get_mut(), code, &body).await.is_err() {
                    return;
                }
            }
            Route::Pods(op) => {
                let (code, body) = pods::answer(&shared, op, &req).await;
                record(&shared, &req, code);
                if write_json(stream.get_mut(), code, &body).await.is_err() {
                    return;
                }
            }
            Route::Log { ns, name } => {
                let (code, ctype, body) = pods::log(&shared, &ns, &name, &req).await;
                record(&shared, &req, code);
                if write_body(stream.get_mut(), code, ctype, &body).await.is_err() {
                    return;
                }
            }
            Route::Watch { resource, ns } => {
                watch(&shared, &mut stream, resource, &ns, &req).await;
                return;
            }
            Route::Exec { ns, name } => {
                exec::session(&shared, stream, &ns, &name, req).await;
                return;
            }
        }
    }
}

/// Records an answered request.
pub(crate) fn record(shared: &Shared, req: &Request, status: u16) {
    shared.lock().seen.push(Seen {
        method: req.method.clone(),
        path: req.path.clone(),
        query: req.raw_query.clone(),
        status,
    });
}

/// What a request is.
enum Route {
    /// Answered at once.
    Json(u16, Value),
    /// A pod or NetworkPolicy operation.
    Pods(pods::Op),
    /// `pods/<name>/log`.
    Log { ns: String, name: String },
    /// A watch of `resource` in `ns`.
    Watch { resource: &'static str, ns: String },
    /// `pods/<name>/exec`.
    Exec { ns: String, name: String },
}

const SSAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

fn route(shared: &Shared, req: &Request) -> Route {
    let m = req.method.as_str();
    if req.path == "/version" {
        return match m {
            "GET" => Route::Json(
                200,
                json!({"major": VERSION.0, "minor": VERSION.1,
                       "gitVersion": format!("v{}.{}.0", VERSION.0, VERSION.1),
                       "gitCommit": "engine-fake", "platform": "linux/amd64"}),
            ),
            _ => refuse(shared, req, 405),
        };
    }
    if req.path == SSAR {
        return match m {
            "POST" => {
                let mut review = req.json();
                if review.is_null() {
                    return Route::Json(400, status_body(400, "BadRequest", "the body is not JSON"));
                }
                review["status"] =
                    json!({"allowed": true, "reason": "the engine-backed fake allows everything"});
                Route::Json(201, review)
            }
            _ => refuse(shared, req, 405),
        };
    }
    let parts: Vec<&str> = req.path.trim_start_matches('/').split('/').collect();
    let (kind, ns_s, rest): (&'static str, String, &[&str]) = match parts.as_slice() {
        ["api", "v1", "namespaces", ns, "pods", rest @ ..] => ("pods", ns.to_string(), rest),
        [
            "apis",
            "networking.k8s.io",
            "v1",
            "namespaces",
            ns,
            "networkpolicies",
            rest @ ..,
        ] => ("networkpolicies", ns.to_string(), rest),
        _ => return refuse(shared, req, 404),
    };
    let watching = req.q1("watch").is_some_and(|w| w == "true" || w == "1");
    match (m, rest, kind) {
        ("GET", [], _) if watching => Route::Watch {
            resource: kind,
            ns: ns_s,
        },
        ("GET", [], _) => Route::Pods(pods::Op::List {
            resource: kind,
            ns: ns_s,
        }),
        ("POST", [], _) => Route::Pods(pods::Op::Create {
            resource: kind,
            ns: ns_s,
        }),
        ("GET", [name], _) => Route::Pods(pods::Op::Get {
            resource: kind,
            ns: ns_s,
            name: name.to_string(),
        }),
        ("DELETE", [name], _) => Route::Pods(pods::Op::Delete {
            resource: kind,
            ns: ns_s,
            name: name.to_string(),
        }),
        ("GET", [name, "log"], "pods") => Route::Log {
            ns: ns_s,
            name: name.to_string(),
        },
        ("GET" | "POST", [name, "exec"], "pods") => Route::Exec {
            ns: ns_s,
            name: name.to_string(),
        },
        (_, [] | [_] | [_, "log"] | [_, "exec"], _) => refuse(shared, req, 405),
        _ => refuse(shared, req, 404),
    }
}

/// A `404` or `405` `Status`, recorded as unknown.
fn refuse(shared: &Shared, req: &Request, code: u16) -> Route {
    shared.lock().unknown.push(req.line());
    let (reason, message) = match code {
        405 => (
            "MethodNotAllowed",
            format!(
                "the engine-backed fake does not serve {} on {}",
                req.method, req.path
            ),
        ),
        _ => (
            "NotFound",
            "the server could not find the requested resource".to_string(),
        ),
    };
    Route::Json(code, status_body(code, reason, &message))
}

/// Streams the watch of `resource` in `ns`: `ADDED` for every matching object, then every change, until the
/// client goes away, `timeoutSeconds` passes or the fake stops.
async fn watch<S: AsyncRead + AsyncWrite + Unpin>(
    shared: &Shared,
    stream: &mut BufReader<S>,
    resource: &'static str,
    ns: &str,
    req: &Request,
) {
    let labels = LabelSelector::parse(req.q1("labelSelector").unwrap_or_default());
    let fields = FieldSelector::parse(req.q1("fieldSelector").unwrap_or_default());
    let (labels, fields) = match (labels, fields) {
        (Ok(l), Ok(f)) => (l, f),
        (Err(e), _) | (_, Err(e)) => {
            record(shared, req, 400);
            let _ = write_json(stream.get_mut(), 400, &status_body(400, "BadRequest", &e)).await;
            return;
        }
    };
    record(shared, req, 200);
    let bookmarks = req.q1("allowWatchBookmarks").is_some_and(|b| b == "true");
    let timeout = req
        .q1("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let wanted =
        |o: &Value| o["metadata"]["namespace"].as_str() == Some(ns) && labels.matches(o) && fields.matches(o);
    // Subscribe before the snapshot: no change falls between the two.
    let mut rx = shared.events.subscribe();
    let (current, rv, no_progress): (Vec<Value>, u64, bool) = {
        let st = shared.lock();
        let current = match resource {
            "pods" => st.pods.values().map(|p| p.object.clone()).collect(),
            _ => st.policies.values().cloned().collect(),
        };
        (current, st.rv, st.no_watch_progress)
    };
    if wire::start_chunked(stream.get_mut()).await.is_err() {
        return;
    }
    if bookmarks && no_progress {
        let status = status_body(
            500,
            "InternalError",
            "a watch stream was requested by the client but the required storage feature RequestWatchProgress \
             is disabled",
        );
        let line = format!("{}\n", json!({"type": "ERROR", "object": status}));
        let _ = wire::write_chunk(stream.get_mut(), line.as_bytes()).await;
        let _ = wire::end_chunked(stream.get_mut()).await;
        return;
    }
    for o in current.into_iter().filter(|o| wanted(o)) {
        let line = format!("{}\n", json!({"type": "ADDED", "object": o}));
        if wire::write_chunk(stream.get_mut(), line.as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
    if bookmarks {
        let kind = if resource == "pods" {
            "Pod"
        } else {
            "NetworkPolicy"
        };
        let api_version = if resource == "pods" {
            "v1"
        } else {
            "networking.k8s.io/v1"
        };
        let line = format!(
            "{}\n",
            json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                   "metadata": {"resourceVersion": rv.to_string()}}})
        );
        if wire::write_chunk(stream.get_mut(), line.as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut sink = [0u8; 256];
    loop {
        tokio::select! {
            _ = &mut deadline => break,
            n = stream.read(&mut sink) => {
                if matches!(n, Ok(0) | Err(_)) {
                    return;
                }
            }
            ev = rx.recv() => match ev {
                Ok(e) if e.resource == resource && wanted(&e.object) => {
                    let line = format!("{}\n", json!({"type": e.kind, "object": e.object}));
                    if wire::write_chunk(stream.get_mut(), line.as_bytes()).await.is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                // A watch that fell behind ends; the client re-establishes it (as with a real server).
                Err(_) => break,
            },
        }
    }
    let _ = wire::end_chunked(stream.get_mut()).await;
}
