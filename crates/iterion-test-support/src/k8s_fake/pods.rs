//! Pods and NetworkPolicies of the fake: the object operations, and the realisation of a pod as a container
//! of the local engine through the docker driver (prepare + start with a sandbox built from the pod spec).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use iterion_driver::{
    AuxMount, AuxMountKind, Error as DError, PrepareRequest, PullPolicy, Run, StartRequest, owner,
};
use iterion_spec::values::{Mount, MountKind};
use serde_json::{Value, json};

use super::objects::{FieldSelector, LabelSelector, already_exists, list, new_uid, not_found, now_rfc3339};
use super::wire::{Request, status_body};
use super::{Shared, State};

/// Where a pod's container stands.
pub(crate) enum Life {
    /// The container is being created.
    Realising,
    /// The container runs.
    Up(Box<Up>),
    /// No container: it could not be created, or it was removed.
    Down,
}

/// A running pod container.
pub(crate) struct Up {
    pub run: Arc<dyn Run>,
    pub container_id: String,
    pub container: String,
    pub workdir: Option<String>,
    /// The host directories behind the pod's `emptyDir`s (removed with the pod).
    _dirs: Vec<tempfile::TempDir>,
}

/// One pod.
pub(crate) struct PodEntry {
    pub object: Value,
    pub life: Life,
    /// The deletion is under way (its container is being removed).
    pub finalizing: bool,
}

impl PodEntry {
    /// The sandbox of a running pod.
    pub fn run(self) -> Option<Arc<dyn Run>> {
        match self.life {
            Life::Up(u) => Some(u.run),
            _ => None,
        }
    }

    /// The uid of the object.
    pub fn uid(&self) -> String {
        self.object["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// An object operation.
#[derive(Debug)]
pub(crate) enum Op {
    List {
        resource: &'static str,
        ns: String,
    },
    Create {
        resource: &'static str,
        ns: String,
    },
    Get {
        resource: &'static str,
        ns: String,
        name: String,
    },
    Delete {
        resource: &'static str,
        ns: String,
        name: String,
    },
}

/// Answers an object operation.
pub(crate) async fn answer(shared: &Arc<Shared>, op: Op, req: &Request) -> (u16, Value) {
    match op {
        Op::List { resource, ns } => list_objects(shared, resource, &ns, req),
        Op::Create { resource, ns } => create(shared, resource, &ns, req),
        Op::Get { resource, ns, name } => {
            let st = shared.lock();
            let key = (ns, name);
            let found = match resource {
                "pods" => st.pods.get(&key).map(|p| p.object.clone()),
                _ => st.policies.get(&key).cloned(),
            };
            match found {
                Some(o) => (200, o),
                None => (404, not_found(resource, &key.1)),
            }
        }
        Op::Delete { resource, ns, name } => match resource {
            "pods" => delete_pod(shared, &ns, &name, req),
            _ => {
                let removed = shared.lock().policies.remove(&(ns, name.clone()));
                match removed {
                    Some(o) => {
                        shared.emit(resource, "DELETED", o.clone());
                        (200, o)
                    }
                    None => (404, not_found(resource, &name)),
                }
            }
        },
    }
}

fn list_objects(shared: &Shared, resource: &'static str, ns: &str, req: &Request) -> (u16, Value) {
    let labels = LabelSelector::parse(req.q1("labelSelector").unwrap_or_default());
    let fields = FieldSelector::parse(req.q1("fieldSelector").unwrap_or_default());
    let (labels, fields) = match (labels, fields) {
        (Ok(l), Ok(f)) => (l, f),
        (Err(e), _) | (_, Err(e)) => return (400, status_body(400, "BadRequest", &e)),
    };
    let st = shared.lock();
    let all: Vec<Value> = match resource {
        "pods" => st.pods.values().map(|p| p.object.clone()).collect(),
        _ => st.policies.values().cloned().collect(),
    };
    let items = all
        .into_iter()
        .filter(|o| o["metadata"]["namespace"].as_str() == Some(ns) && labels.matches(o) && fields.matches(o))
        .collect();
    let (kind, api) = match resource {
        "pods" => ("PodList", "v1"),
        _ => ("NetworkPolicyList", "networking.k8s.io/v1"),
    };
    (200, list(kind, api, st.rv, items))
}

/// Fills what the server owns in a new object's metadata.
fn admit(st: &mut State, object: &mut Value, ns: &str) {
    let rv = st.next_rv();
    let m = &mut object["metadata"];
    m["namespace"] = json!(ns);
    m["uid"] = json!(new_uid());
    m["resourceVersion"] = json!(rv);
    m["creationTimestamp"] = json!(now_rfc3339());
    m["generation"] = json!(1);
}

fn create(shared: &Arc<Shared>, resource: &'static str, ns: &str, req: &Request) -> (u16, Value) {
    let mut object = req.json();
    let Some(name) = object["metadata"]["name"].as_str().map(str::to_string) else {
        return (
            422,
            status_body(
                422,
                "Invalid",
                "metadata.name is required (generateName is not served)",
            ),
        );
    };
    if object["metadata"]["namespace"].as_str().is_some_and(|n| n != ns) {
        return (
            400,
            status_body(
                400,
                "BadRequest",
                "the namespace of the object does not match the request",
            ),
        );
    }
    let key = (ns.to_string(), name.clone());
    let mut st = shared.lock();
    // As an API server: nothing is created in a namespace that does not exist.
    if !st.namespaces.contains(ns) {
        return (404, not_found("namespaces", ns));
    }
    let taken = match resource {
        "pods" => st.pods.contains_key(&key),
        _ => st.policies.contains_key(&key),
    };
    if taken {
        return (409, already_exists(resource, &name));
    }
    admit(&mut st, &mut object, ns);
    if resource != "pods" {
        st.policies.insert(key, object.clone());
        drop(st);
        shared.emit(resource, "ADDED", object.clone());
        return (201, object);
    }
    let now = now_rfc3339();
    object["status"] = json!({"phase": "Pending", "qosClass": "BestEffort",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}]});
    st.pods.insert(
        key,
        PodEntry {
            object: object.clone(),
            life: Life::Realising,
            finalizing: false,
        },
    );
    drop(st);
    shared.emit(resource, "ADDED", object.clone());
    let (s, ns, spec) = (shared.clone(), ns.to_string(), object.clone());
    shared
        .tasks
        .spawn(async move { realise(s, ns, name, spec).await });
    (201, object)
}

fn delete_pod(shared: &Arc<Shared>, ns: &str, name: &str, req: &Request) -> (u16, Value) {
    let grace = req
        .json()
        .get("gracePeriodSeconds")
        .and_then(Value::as_i64)
        .or_else(|| req.q1("gracePeriodSeconds").and_then(|g| g.parse().ok()))
        .unwrap_or(30);
    let mut st = shared.lock();
    let rv = st.next_rv();
    let Some(entry) = st.pods.get_mut(&(ns.to_string(), name.to_string())) else {
        return (404, not_found("pods", name));
    };
    if entry.object["metadata"]["deletionTimestamp"].is_null() {
        entry.object["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
        entry.object["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        entry.object["metadata"]["resourceVersion"] = json!(rv);
        shared.emit("pods", "MODIFIED", entry.object.clone());
    }
    let object = entry.object.clone();
    // A pod still being realised is finished by its realisation, which sees the deletion.
    if !entry.finalizing && !matches!(entry.life, Life::Realising) {
        entry.finalizing = true;
        let run = match std::mem::replace(&mut entry.life, Life::Down) {
            Life::Up(u) => Some(u),
            _ => None,
        };
        let (s, ns, name) = (shared.clone(), ns.to_string(), name.to_string());
        shared
            .tasks
            .spawn(async move { finalize(s, ns, name, run).await });
    }
    (200, object)
}

/// Removes a deleted pod's container, then the object (`DELETED`).
async fn finalize(shared: Arc<Shared>, ns: String, name: String, up: Option<Box<Up>>) {
    if let Some(up) = up {
        let _ = up.run.cleanup().await;
    }
    let removed = shared.lock().pods.remove(&(ns, name));
    if let Some(p) = removed {
        shared.emit("pods", "DELETED", p.object);
    }
}

/// Removes a pod behind the API's back: the container goes at once, then the object.
pub(crate) async fn remove_behind_back(shared: &Arc<Shared>, ns: &str, name: &str) -> bool {
    let removed = shared.lock().pods.remove(&(ns.to_string(), name.to_string()));
    let Some(entry) = removed else {
        return false;
    };
    shared.emit("pods", "DELETED", entry.object.clone());
    if let Life::Up(up) = entry.life {
        let id = up.container_id.clone();
        let _ = tokio::task::spawn_blocking(move || force_remove(&id)).await;
        // The driver's own bookkeeping of a container that is already gone.
        let _ = up.run.cleanup().await;
    }
    true
}

/// Removes a container through the engine API, whatever its state.
pub(crate) fn force_remove(id: &str) {
    if let Some(socket) = crate::engine_socket() {
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

/// A pod's container, planned from its spec: the sandbox of the docker driver and the host directories.
struct Plan {
    sandbox: iterion_spec::resolved::ResolvedSandbox,
    pull: PullPolicy,
    workspace_host: std::path::PathBuf,
    aux: Vec<AuxMount>,
    env: Vec<(String, String)>,
    container: String,
    workdir: Option<String>,
    dirs: Vec<tempfile::TempDir>,
}

/// Why a pod cannot get its container: the waiting reason and message a kubelet would report.
struct NotCreated {
    reason: &'static str,
    message: String,
}

fn config_error(message: impl Into<String>) -> NotCreated {
    NotCreated {
        reason: "CreateContainerConfigError",
        message: message.into(),
    }
}

/// A fresh empty host directory, writable by any pod user (an `emptyDir` is `0777`).
fn empty_dir(parent: &Path, mode: u32) -> Result<tempfile::TempDir, NotCreated> {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new()
        .prefix("emptydir-")
        .tempdir_in(parent)
        .map_err(|e| config_error(format!("cannot create an emptyDir: {e}")))?;
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(mode))
        .map_err(|e| config_error(format!("cannot open up an emptyDir: {e}")))?;
    Ok(d)
}

/// The numeric user of a container: its own `securityContext`, else the pod's.
fn user_of(spec: &Value, c: &Value) -> (Option<i64>, Option<i64>, bool) {
    let pick = |k: &str| {
        c["securityContext"][k]
            .as_i64()
            .or_else(|| spec["securityContext"][k].as_i64())
    };
    let non_root = c["securityContext"]["runAsNonRoot"]
        .as_bool()
        .or_else(|| spec["securityContext"]["runAsNonRoot"].as_bool())
        .unwrap_or(false);
    (pick("runAsUser"), pick("runAsGroup"), non_root)
}

/// The image's configured user (`Config.User`), through the engine API.
fn image_user(image: &str) -> Option<String> {
    let socket = crate::engine_socket()?;
    let r = crate::docker_http::request(
        &socket,
        "GET",
        &format!("/images/{}/json", crate::docker_http::encode_component(image)),
        None,
        &[],
        Duration::from_secs(10),
    )
    .ok()?;
    let v: Value = serde_json::from_slice(&r.body).ok()?;
    Some(v["Config"]["User"].as_str().unwrap_or_default().to_string())
}

/// The kubelet's `runAsNonRoot` verification against the image's user.
fn verify_non_root(image: &str) -> Result<(), NotCreated> {
    let user = image_user(image).unwrap_or_default();
    let name = user.split(':').next().unwrap_or_default();
    match name.parse::<u32>() {
        _ if name.is_empty() || name == "root" => Err(config_error(
            "container has runAsNonRoot and image will run as root (pod: securityContext.runAsUser is unset)",
        )),
        Ok(0) => Err(config_error(
            "container has runAsNonRoot and image will run as root",
        )),
        Ok(_) => Ok(()),
        Err(_) => Err(config_error(format!(
            "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root"
        ))),
    }
}

/// Plans the container of `pod`.
fn plan(pod: &Value, scratch: &Path) -> Result<Plan, NotCreated> {
    let spec = &pod["spec"];
    let containers = spec["containers"].as_array().cloned().unwrap_or_default();
    let [c] = containers.as_slice() else {
        return Err(config_error(
            "the engine-backed fake runs exactly one container per pod",
        ));
    };
    let image = c["image"].as_str().unwrap_or_default().to_string();
    let (uid, gid, non_root) = user_of(spec, c);
    match uid {
        Some(0) if non_root => {
            return Err(config_error(
                "container's runAsUser breaks non-root policy (pod: securityContext.runAsUser=0)",
            ));
        }
        None if non_root => verify_non_root(&image)?,
        _ => {}
    }
    let mut env = Vec::new();
    for e in c["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap_or_default().to_string();
        if !e["valueFrom"].is_null() {
            return Err(config_error(format!(
                "env {name}: valueFrom is not served by the fake"
            )));
        }
        env.push((name, e["value"].as_str().unwrap_or_default().to_string()));
    }
    let workdir = c["workingDir"].as_str().map(str::to_string);
    let volumes: Vec<Value> = spec["volumes"].as_array().cloned().unwrap_or_default();
    let mut dirs = Vec::new();
    let mut workspace: Option<(std::path::PathBuf, String)> = None;
    let mut aux = Vec::new();
    let mut mounts = Vec::new();
    let disk_mounts: Vec<(String, String, bool)> = c["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or_default().to_string(),
                m["mountPath"].as_str().unwrap_or_default().to_string(),
                m["readOnly"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    for (vol_name, target, read_only) in &disk_mounts {
        let Some(v) = volumes.iter().find(|v| v["name"].as_str() == Some(vol_name)) else {
            return Err(config_error(format!(
                "volume {vol_name} is mounted but not declared"
            )));
        };
        let Some(ed) = v.get("emptyDir") else {
            return Err(config_error(format!(
                "volume {vol_name}: the engine-backed fake serves emptyDir volumes only"
            )));
        };
        let memory = ed["medium"].as_str() == Some("Memory");
        let reserved = Path::new(target).starts_with("/run/iterion");
        if memory && !reserved {
            mounts.push(Mount {
                kind: MountKind::Tmpfs,
                source: None,
                read_only: *read_only,
                tmpfs_mode: Some(0o1777),
                ..Mount::bind("", target.clone(), *read_only)
            });
            continue;
        }
        let d = empty_dir(scratch, if memory { 0o1777 } else { 0o777 })?;
        let path = d.path().to_path_buf();
        dirs.push(d);
        let is_workspace =
            workspace.is_none() && !memory && (workdir.as_deref() == Some(target) || vol_name == "workspace");
        if is_workspace {
            workspace = Some((path, target.clone()));
        } else {
            aux.push(AuxMount {
                kind: AuxMountKind::RunFiles,
                host_path: path,
                container_path: target.clone(),
                read_only: *read_only,
            });
        }
    }
    // The docker driver always binds a workspace: a pod without a disk emptyDir gets a private one.
    let (workspace_host, workspace_folder) = match workspace {
        Some(w) => w,
        None => {
            let d = empty_dir(scratch, 0o777)?;
            let p = d.path().to_path_buf();
            dirs.push(d);
            (p, "/iterion-fake-workspace".to_string())
        }
    };
    let mut sandbox = crate::conformance::sandbox_for(Some(&image), Path::new(&workspace_folder));
    sandbox.source = "k8s-engine-fake".into();
    sandbox.user = uid.map(|u| match gid {
        Some(g) => format!("{u}:{g}"),
        None => u.to_string(),
    });
    sandbox.mounts = mounts;
    sandbox.refresh_key();
    // The kubelet's pull policies, as the docker driver's.
    let pull = match c["imagePullPolicy"].as_str() {
        Some("Never") => PullPolicy::Never,
        Some("Always") => PullPolicy::Always,
        _ => PullPolicy::Missing,
    };
    Ok(Plan {
        sandbox,
        pull,
        workspace_host,
        aux,
        env,
        container: c["name"].as_str().unwrap_or("workload").to_string(),
        workdir,
        dirs,
    })
}

/// The waiting state of a driver error, as a kubelet would report it.
fn not_created(e: &DError) -> NotCreated {
    let message = e.to_string();
    let reason = match e {
        DError::ImageAbsent { .. } => "ErrImageNeverPull",
        DError::ImageNotFound { .. } => "ErrImagePull",
        DError::ImagePull { .. } | DError::ImageAuth { .. } => "ImagePullBackOff",
        DError::InvalidSpec { .. } | DError::UnsafeMount { .. } => "CreateContainerConfigError",
        DError::StartFailed { .. } | DError::ShellMissing { .. } => "RunContainerError",
        _ => "CreateContainerError",
    };
    let message = match e {
        DError::ImageNotFound { image } => format!("rpc error: image {image}: not found"),
        DError::ImageAbsent { image } => {
            format!("Container image \"{image}\" is not present with pull policy of Never")
        }
        _ => message,
    };
    NotCreated { reason, message }
}

fn container_status(name: &str, image: &str, state: Value, ready: bool, id: Option<&str>) -> Value {
    let mut s = json!({"name": name, "image": image, "imageID": "", "ready": ready, "restartCount": 0,
                       "started": ready, "state": state});
    if let Some(id) = id {
        s["containerID"] = json!(format!("docker://{id}"));
    }
    s
}

/// Creates the container of pod `name`, then moves the pod to `Running`/`Ready` (or a waiting container).
async fn realise(shared: Arc<Shared>, ns: String, name: String, pod: Value) {
    let planned = plan(&pod, shared.scratch.path());
    let image = pod["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let container = pod["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap_or("workload")
        .to_string();
    let outcome = match planned {
        Ok(p) => start(&shared, &ns, &name, p).await,
        Err(n) => Err(n),
    };
    let key = (ns.clone(), name.clone());
    let now = now_rfc3339();
    let status = match &outcome {
        Ok(up) => json!({"phase": "Running", "qosClass": "BestEffort", "podIP": "127.0.0.1",
            "hostIP": "127.0.0.1", "startTime": now,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [container_status(&container, &image,
                json!({"running": {"startedAt": now}}), true, Some(&up.container_id))]}),
        Err(n) => json!({"phase": "Pending", "qosClass": "BestEffort", "startTime": now,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                 "message": format!("containers with unready status: [{container}]"), "lastTransitionTime": now}],
            "containerStatuses": [container_status(&container, &image,
                json!({"waiting": {"reason": n.reason, "message": n.message}}), false, None)]}),
    };
    // Under one lock: the status, and the container handed to the pod before any watch hears `Ready` (an exec
    // may follow at once). What is left to do afterwards: `None` when the pod is gone (removed behind the
    // back), else the object to announce and, for a pod deleted while it was created, the container to remove.
    let mut outcome = Some(outcome);
    let next = {
        let mut st = shared.lock();
        let rv = st.next_rv();
        if let Some(Ok(up)) = &outcome {
            st.containers.push(up.container_id.clone());
        }
        match st.pods.get_mut(&key) {
            None => None,
            Some(entry) => {
                entry.object["status"] = status;
                entry.object["metadata"]["resourceVersion"] = json!(rv);
                let deleting = !entry.object["metadata"]["deletionTimestamp"].is_null();
                entry.finalizing = deleting;
                if !deleting {
                    entry.life = match outcome.take() {
                        Some(Ok(up)) => Life::Up(Box::new(up)),
                        _ => Life::Down,
                    };
                }
                Some((entry.object.clone(), deleting))
            }
        }
    };
    let Some((object, deleting)) = next else {
        if let Some(Ok(up)) = outcome {
            let _ = up.run.cleanup().await;
        }
        return;
    };
    shared.emit("pods", "MODIFIED", object);
    if deleting {
        // Deleted while it was being created: finish the deletion now.
        let up = outcome.and_then(Result::ok).map(Box::new);
        finalize(shared.clone(), ns, name, up).await;
    }
}

/// Prepares and starts the container through the docker driver.
async fn start(shared: &Shared, ns: &str, name: &str, p: Plan) -> Result<Up, NotCreated> {
    let mut prep = PrepareRequest::new(p.sandbox.clone());
    prep.pull_policy = p.pull;
    let prepared = shared.driver.prepare(prep).await.map_err(|e| not_created(&e))?;
    let store = shared.scratch.path().join("store");
    let _ = std::fs::create_dir_all(&store);
    let run_id = format!("k8sfake-{ns}-{name}-{}", &new_uid()[..8]);
    let mut req = StartRequest::new(run_id, p.workspace_host.clone(), owner::current_owner(store));
    req.container_env = p.env.clone();
    req.container_env.sort();
    req.aux_mounts = p.aux.clone();
    let started = shared
        .driver
        .start(prepared, None, req)
        .await
        .map_err(|e| not_created(&e))?;
    let run: Arc<dyn Run> = Arc::from(started.run);
    Ok(Up {
        container_id: run.id().to_string(),
        run,
        container: p.container,
        workdir: p.workdir,
        _dirs: p.dirs,
    })
}

/// `GET pods/<name>/log`: the container's output (stdout and stderr), `tailLines` last lines.
pub(crate) async fn log(
    shared: &Shared,
    ns: &str,
    name: &str,
    req: &Request,
) -> (u16, &'static str, Vec<u8>) {
    let json_answer = |code: u16, v: Value| (code, "application/json", v.to_string().into_bytes());
    let (id, container) = {
        let st = shared.lock();
        match st.pods.get(&(ns.to_string(), name.to_string())) {
            None => return json_answer(404, not_found("pods", name)),
            Some(PodEntry {
                life: Life::Up(up), ..
            }) => (up.container_id.clone(), up.container.clone()),
            Some(_) => {
                return json_answer(
                    400,
                    status_body(
                        400,
                        "BadRequest",
                        &format!("container in pod \"{name}\" is waiting to start: ContainerCreating"),
                    ),
                );
            }
        }
    };
    if let Some(c) = req.q1("container").filter(|c| *c != container) {
        return json_answer(
            400,
            status_body(
                400,
                "BadRequest",
                &format!("container {c} is not valid for pod {name}"),
            ),
        );
    }
    let tail = req
        .q1("tailLines")
        .and_then(|t| t.parse::<u64>().ok())
        .map(|t| t.to_string())
        .unwrap_or_else(|| "all".into());
    let logs = tokio::task::spawn_blocking(move || {
        let socket = crate::engine_socket()?;
        crate::docker_http::request(
            &socket,
            "GET",
            &format!("/containers/{id}/logs?stdout=1&stderr=1&tail={tail}"),
            None,
            &[],
            Duration::from_secs(10),
        )
        .ok()
    })
    .await
    .ok()
    .flatten();
    match logs {
        Some(r) if r.status == 200 => (200, "text/plain", demux(&r.body)),
        _ => json_answer(
            500,
            status_body(
                500,
                "InternalError",
                "the engine did not give the container's log",
            ),
        ),
    }
}

/// The payload of the engine's multiplexed log stream (8-byte frame headers).
fn demux(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = raw;
    while rest.len() >= 8 && rest[0] <= 2 && rest[1..4] == [0, 0, 0] {
        let n = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
        let end = (8 + n).min(rest.len());
        out.extend_from_slice(&rest[8..end]);
        rest = &rest[end..];
    }
    if out.is_empty() && !raw.is_empty() {
        return raw.to_vec();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_frames_are_joined() {
        let mut raw = vec![1, 0, 0, 0, 0, 0, 0, 3];
        raw.extend_from_slice(b"ab\n");
        raw.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 2]);
        raw.extend_from_slice(b"c\n");
        assert_eq!(demux(&raw), b"ab\nc\n");
        assert_eq!(demux(b"plain text\n"), b"plain text\n");
    }

    #[test]
    fn a_pod_spec_becomes_a_sandbox() {
        let scratch = tempfile::tempdir().unwrap();
        let pod = json!({"spec": {
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1001, "runAsNonRoot": true},
            "containers": [{"name": "workload", "image": "img:1", "workingDir": "/ws",
                "env": [{"name": "A", "value": "1"}],
                "volumeMounts": [{"name": "workspace", "mountPath": "/ws"},
                                 {"name": "exec", "mountPath": "/run/iterion/exec"},
                                 {"name": "scratch", "mountPath": "/scratch"}]}],
            "volumes": [{"name": "workspace", "emptyDir": {}},
                        {"name": "exec", "emptyDir": {"medium": "Memory"}},
                        {"name": "scratch", "emptyDir": {"medium": "Memory"}}]}});
        let Ok(p) = plan(&pod, scratch.path()) else {
            panic!("plan refused");
        };
        assert_eq!(p.sandbox.user.as_deref(), Some("1000:1001"));
        assert_eq!(p.sandbox.workspace_folder, "/ws");
        assert_eq!(p.env, vec![("A".to_string(), "1".to_string())]);
        assert_eq!(p.aux.len(), 1);
        assert_eq!(p.aux[0].container_path, "/run/iterion/exec");
        assert_eq!(p.sandbox.mounts.len(), 1);
        assert_eq!(p.sandbox.mounts[0].kind, MountKind::Tmpfs);
        assert_eq!(p.sandbox.mounts[0].target, "/scratch");
        assert_eq!(
            std::fs::read_dir(&p.workspace_host).unwrap().count(),
            0,
            "the workspace starts empty"
        );
        let root = json!({"spec": {"securityContext": {"runAsUser": 0, "runAsNonRoot": true},
            "containers": [{"name": "w", "image": "img"}]}});
        match plan(&root, scratch.path()) {
            Err(n) => assert_eq!(n.reason, "CreateContainerConfigError"),
            Ok(_) => panic!("root with runAsNonRoot was accepted"),
        }
        let pvc = json!({"spec": {"containers": [{"name": "w", "image": "img",
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]}});
        assert!(plan(&pvc, scratch.path()).is_err());
    }
}
