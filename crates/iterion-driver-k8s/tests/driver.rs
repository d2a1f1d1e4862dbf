//! The kubernetes driver against the scripted fake API server: the lifecycle vectors of a sandbox pod (create,
//! ready, probe, exec, cleanup, conflicts, permissions) and the exec status rows, with every API call checked
//! in order.

mod support;

use std::time::Duration;

use iterion_driver::owner::current_owner;
use iterion_driver::{
    Driver, Error, ExecRequest, FailureCode, OutputLimits, PrepareRequest, ProxyEndpoint, Run, SetupPhase,
    StartRequest, Started, exec_collect,
};
use iterion_driver_k8s::cluster::{ClusterAccess, DiscoveryInputs};
use iterion_driver_k8s::{K8sDriver, K8sSettings};
use iterion_spec::resolved::{HostState, NetworkPolicySpec, Origin, ResolvedMode, ResolvedSandbox};
use serde_json::{Value, json};
use support::scripted::{ExecBackend, Expect, FakeApi, Reply, V4, status_body};

const NS: &str = "ns1";
const RUN: &str = "0190f5c2-7d1e-7abc-9def-0123456789ab";
const POD: &str = "iterion-0190f5c2-7d1e-7abc-9def-0123456789ab";
const SSAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const PUT: &[&str] = &[
    "/bin/sh",
    "-c",
    iterion_driver_k8s::script::PUT_COMMAND,
    "iterion-put",
];

fn pods() -> String {
    format!("/api/v1/namespaces/{NS}/pods")
}
fn pod_path() -> String {
    format!("/api/v1/namespaces/{NS}/pods/{POD}")
}
fn exec_path() -> String {
    format!("/api/v1/namespaces/{NS}/pods/{POD}/exec")
}
fn policies() -> String {
    format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies")
}
fn policy_path() -> String {
    format!("{}/{POD}", policies())
}

/// A test fixture: the fake, a kubeconfig pointing at it, a workspace and a store.
struct Fx {
    fake: FakeApi,
    dir: tempfile::TempDir,
}

impl Fx {
    /// A fake that answers the version and allows every permission review, except `denied` (`verb resource`).
    async fn new(denied: &'static [&'static str]) -> Fx {
        let fake = FakeApi::start().await;
        fake.anytime(Expect::new("GET", "/version").json(
            200,
            json!({"major": "1", "minor": "31", "gitVersion": "v1.31.0", "platform": "linux/amd64"}),
        ));
        fake.anytime(Expect::new("POST", SSAR).reply_with(move |r| {
            let mut o = r.json();
            let a = &o["spec"]["resourceAttributes"];
            let mut resource = a["resource"].as_str().unwrap_or_default().to_string();
            if let Some(sub) = a["subresource"].as_str().filter(|s| !s.is_empty()) {
                resource = format!("{resource}/{sub}");
            }
            let key = format!("{} {resource}", a["verb"].as_str().unwrap_or_default());
            o["status"] = json!({"allowed": !denied.contains(&key.as_str())});
            Reply::Json(201, o)
        }));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "work in progress").unwrap();
        std::fs::create_dir(dir.path().join(".iterion")).unwrap();
        std::fs::write(dir.path().join(".iterion/run.json"), "store-only").unwrap();
        Fx { fake, dir }
    }

    fn access(&self) -> ClusterAccess {
        let path = self.dir.path().join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: {NS}\n\
             users:\n- name: fake\n  user:\n    token: test-token\n",
            self.fake.url()
        );
        std::fs::write(&path, text).unwrap();
        let env = [
            ("KUBECONFIG".to_string(), path.display().to_string()),
            ("HOME".to_string(), self.dir.path().display().to_string()),
        ]
        .into_iter()
        .collect();
        ClusterAccess::discover(&DiscoveryInputs::new(env))
    }

    fn driver(&self, f: impl FnOnce(&mut K8sSettings)) -> K8sDriver {
        let mut s = K8sSettings::default();
        s.pod_ip = Some("10.42.0.7".into());
        s.request_timeout = Duration::from_secs(5);
        s.poll_interval = Duration::from_millis(50);
        s.delete_wait = Duration::from_secs(2);
        f(&mut s);
        K8sDriver::new(self.access(), s)
    }

    fn request(&self, proxy: bool) -> StartRequest {
        let store = self.dir.path().join(".iterion");
        let mut r = StartRequest::new(RUN, self.dir.path(), current_owner(store));
        if proxy {
            r.proxy = Some(ProxyEndpoint {
                host: "10.42.0.7".into(),
                port: 41237,
            });
        }
        r
    }
}

fn sandbox() -> ResolvedSandbox {
    let mut s = ResolvedSandbox {
        mode: ResolvedMode::Inline,
        source: "test".into(),
        origin: Origin::Workflow,
        devcontainer: None,
        image: Some("registry.example/sandbox:1.0".into()),
        build: None,
        user: Some("1000".into()),
        workspace_folder: "/workspace".into(),
        post_create: Vec::new(),
        env_layers: Default::default(),
        mounts: Vec::new(),
        host_state: HostState::None,
        host_state_source: "test".into(),
        network: NetworkPolicySpec::open("test"),
        runtime: Default::default(),
        degrade_allowed: false,
        key: String::new(),
    };
    s.refresh_key();
    s
}

fn pod_obj(phase: &str, conditions: Value, statuses: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": POD, "namespace": NS, "labels": {"iterion.io/managed": "true"}},
           "status": {"phase": phase, "conditions": conditions, "containerStatuses": statuses}})
}

fn ready_pod() -> Value {
    pod_obj("Running", json!([{"type": "Ready", "status": "True"}]), json!([]))
}

fn pending_pod(message: &str) -> Value {
    pod_obj(
        "Pending",
        json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]),
        json!([]),
    )
}

fn waiting_pod(reason: &str, message: &str) -> Value {
    pod_obj(
        "Pending",
        json!([]),
        json!([{"name": "workload", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}}}]),
    )
}

fn event(kind: &str, object: Value, delay_ms: u64) -> (Duration, Value) {
    (
        Duration::from_millis(delay_ms),
        json!({"type": kind, "object": object}),
    )
}

fn watch(events: Vec<(Duration, Value)>) -> Expect {
    Expect::new("GET", &pods())
        .query("watch", "true")
        .query("fieldSelector", &format!("metadata.name={POD}"))
        .watch(events, true)
}

fn create_policy() -> Expect {
    Expect::new("POST", &policies()).created().check(|r| {
        let b = r.json();
        let rule = &b["spec"]["egress"][0];
        let ok = b["metadata"]["name"] == POD
            && rule["to"][0]["ipBlock"]["cidr"] == "10.42.0.7/32"
            && rule["ports"][0]["port"] == 41237
            && b["spec"]["podSelector"]["matchLabels"]["iterion.io/pod"] == POD;
        if ok {
            Ok(())
        } else {
            Err(format!("policy body {b}"))
        }
    })
}

fn create_pod() -> Expect {
    Expect::new("POST", &pods()).created().check(|r| {
        let b = r.json();
        let ok = b["metadata"]["name"] == POD
            && b["metadata"]["labels"]["iterion.io/managed"] == "true"
            && b["spec"]["securityContext"]["runAsUser"] == 1000
            && b["spec"]["containers"][0]["image"] == "registry.example/sandbox:1.0";
        if ok { Ok(()) } else { Err(format!("pod body {b}")) }
    })
}

fn probe() -> Expect {
    Expect::new("GET", &exec_path())
        .command(&["/bin/sh", "-c", "true"])
        .exec(ExecBackend::exit(0))
}

/// The workspace copy of a start: `tar -x` into the workspace, fed the work dir's archive over stdin.
fn copy_ws(stdin_contains: &str) -> Expect {
    Expect::new("GET", &exec_path())
        .command(&["tar", "-x", "-f", "-", "-C", "/workspace"])
        .query("stdin", "true")
        .exec(ExecBackend::exit(0).stdin_contains(stdin_contains))
}

fn put(stdin_contains: &str) -> Expect {
    Expect::new("GET", &exec_path())
        .command_prefix(PUT)
        .query("stdin", "true")
        .exec(ExecBackend::exit(0).stdin_contains(stdin_contains))
}

fn run_script(backend: ExecBackend) -> Expect {
    Expect::new("GET", &exec_path())
        .command_prefix(&["/bin/sh"])
        .check(|r| {
            let c = r.q("command");
            if c.len() == 2 && c[1].starts_with("/run/iterion/exec/") && c[1].ends_with(".sh") {
                Ok(())
            } else {
                Err(format!("not the script run: {c:?}"))
            }
        })
        .exec(backend)
}

fn delete_pod() -> Expect {
    Expect::new("DELETE", &pod_path())
        .check(|r| {
            let b = r.json();
            if b["gracePeriodSeconds"] == 5 && b["propagationPolicy"] == "Background" {
                Ok(())
            } else {
                Err(format!("delete options {b}"))
            }
        })
        .json(
            200,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        )
}

fn pod_gone() -> Expect {
    Expect::new("GET", &pod_path()).json(404, status_body(404, "NotFound", "pods not found"))
}

fn delete_policy() -> Expect {
    Expect::new("DELETE", &policy_path()).json(
        200,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
    )
}

async fn prepare_and_start(fx: &Fx, driver: &K8sDriver, proxy: bool) -> iterion_driver::Result<Started> {
    let prepared = driver.prepare(PrepareRequest::new(sandbox())).await?;
    driver.start(prepared, None, fx.request(proxy)).await
}

/// Scripts an open run's start (pod, ready, probe) and starts it.
async fn started_open(fx: &Fx, driver: &K8sDriver) -> Started {
    fx.fake
        .expect(create_pod())
        .expect(watch(vec![event("ADDED", ready_pod(), 0)]))
        .expect(probe())
        .expect(copy_ws("notes.txt"));
    prepare_and_start(fx, driver, false).await.expect("start")
}

#[tokio::test]
async fn k1_allowlist_happy_path() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|_| {});
    fx.fake
        .expect(create_policy())
        .expect(create_pod())
        .expect(watch(vec![
            event("ADDED", pending_pod("waiting for a node"), 0),
            event("MODIFIED", ready_pod(), 20),
        ]))
        .expect(probe())
        .expect(copy_ws("work in progress"))
        .expect(put("exec env 'A=x y' 'echo' 'hi'"))
        .expect(run_script(ExecBackend::exit(0).stdout("hi\n")))
        .expect(delete_pod())
        .expect(pod_gone())
        .expect(delete_policy());

    let started = prepare_and_start(&fx, &driver, true).await.expect("start");
    assert_eq!(started.report.name, POD);
    assert!(started.report.enforced_egress);
    let run = started.run;
    let c = exec_collect(
        run.as_ref(),
        ExecRequest::new(["echo", "hi"]).env("A", "x y"),
        OutputLimits::default(),
    )
    .await
    .expect("exec");
    assert_eq!((c.status.code, c.stdout_text().as_str()), (0, "hi\n"));

    let report = run.cleanup().await;
    assert!(report.container_removed, "{report:?}");
    assert!(report.errors.is_empty(), "{report:?}");
    // Cleanup is shared: a second call gets the same report without new API calls.
    assert_eq!(run.cleanup().await, report);
    assert!(
        run.exec(ExecRequest::new(["true"]))
            .await
            .unwrap_err()
            .is_sandbox_gone()
    );

    // The permission check ran once, for every permission of the Role, and is not repeated.
    assert_eq!(fx.fake.hits(&format!("POST {SSAR}")), 12);
    driver
        .prepare(PrepareRequest::new(sandbox()))
        .await
        .expect("prepare again");
    assert_eq!(fx.fake.hits(&format!("POST {SSAR}")), 12);

    let log = fx.fake.finish().expect("fake");
    assert!(
        log.iter().all(|l| !l.contains("x y") && !l.contains("'echo'")),
        "a value reached a request URL: {log:#?}"
    );
}

#[tokio::test]
async fn k2_open_run_creates_no_network_policy() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ip = None);
    let started = started_open(&fx, &driver).await;
    assert!(!started.report.enforced_egress);
    fx.fake.expect(delete_pod()).expect(pod_gone());
    let report = started.run.cleanup().await;
    assert!(report.container_removed && report.errors.is_empty(), "{report:?}");
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn k3_a_pod_that_never_gets_ready_times_out_and_is_removed() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ready_timeout = Duration::from_secs(2));
    fx.fake
        .expect(create_policy())
        .expect(create_pod())
        .expect(watch(vec![event(
            "ADDED",
            pending_pod("0/3 nodes are available"),
            0,
        )]))
        .expect(delete_pod())
        .expect(pod_gone())
        .expect(delete_policy());
    let err = prepare_and_start(&fx, &driver, true).await.unwrap_err();
    assert!(
        matches!(err, Error::SetupTimeout { phase: SetupPhase::PodReady, after, .. } if after == Duration::from_secs(2)),
        "{err:?}"
    );
    assert_eq!(err.failure_code(true), Some(FailureCode::SetupTimeout));
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn k4_a_missing_image_is_image_unavailable_and_cleaned_up() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|_| {});
    fx.fake
        .expect(create_policy())
        .expect(create_pod())
        .expect(watch(vec![event(
            "MODIFIED",
            waiting_pod("ErrImagePull", "rpc error: manifest unknown"),
            0,
        )]))
        .expect(delete_pod())
        .expect(pod_gone())
        .expect(delete_policy());
    let err = prepare_and_start(&fx, &driver, true).await.unwrap_err();
    assert!(matches!(err, Error::ImageNotFound { .. }), "{err:?}");
    assert_eq!(err.failure_code(true), Some(FailureCode::ImageUnavailable));
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn a_container_that_exits_at_start_reports_its_last_log_lines() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ip = None);
    let exited = pod_obj(
        "Running",
        json!([]),
        json!([{"name": "workload", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 127}}}]),
    );
    fx.fake
        .expect(create_pod())
        .expect(watch(vec![event("MODIFIED", exited, 0)]))
        .expect(
            Expect::new("GET", &format!("{}/log", pod_path()))
                .query("container", "workload")
                .query("tailLines", "20")
                .reply_with(|_| Reply::Text(200, "sh: sleep: not found\n".into())),
        )
        .expect(delete_pod())
        .expect(pod_gone());
    let err = prepare_and_start(&fx, &driver, false).await.unwrap_err();
    let Error::StartFailed { reason, .. } = &err else {
        panic!("expected StartFailed, got {err:?}");
    };
    assert_eq!(
        reason,
        "container exited immediately with code 127: sh: sleep: not found; the image must provide sleep and /bin/sh"
    );
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn k5_a_pod_that_does_not_go_keeps_its_network_policy() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.delete_wait = Duration::from_millis(500));
    fx.fake
        .expect(create_policy())
        .expect(create_pod())
        .expect(watch(vec![event("ADDED", ready_pod(), 0)]))
        .expect(probe())
        .expect(copy_ws("notes.txt"));
    let started = prepare_and_start(&fx, &driver, true).await.expect("start");
    fx.fake
        .expect(delete_pod())
        .expect(Expect::new("GET", &pod_path()).json(200, ready_pod()).repeat());
    let report = started.run.cleanup().await;
    assert!(!report.container_removed, "{report:?}");
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains("NetworkPolicy is left in place")),
        "{report:?}"
    );
    // No DELETE of the NetworkPolicy reached the fake (it would be unexpected).
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn k7_a_conflicting_pod_not_managed_by_iterion_is_left_alone() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|_| {});
    let foreign = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": POD, "namespace": NS, "labels": {"app": "other"}}});
    fx.fake
        .expect(
            Expect::new("POST", &pods()).json(409, status_body(409, "AlreadyExists", "pods already exists")),
        )
        .expect(Expect::new("GET", &pod_path()).json(200, foreign));
    let err = prepare_and_start(&fx, &driver, false).await.unwrap_err();
    match &err {
        Error::StartFailed { reason, .. } => assert!(reason.contains("not managed by iterion"), "{reason}"),
        other => panic!("expected StartFailed, got {other:?}"),
    }
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn k6_a_leftover_pod_of_a_dead_runner_is_replaced() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ip = None);
    let leftover = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": POD, "namespace": NS,
                     "labels": {"iterion.io/managed": "true", "iterion.io/owner-host": "runner-old",
                                "iterion.io/owner-pid": "7", "iterion.io/owner-start": "1"},
                     "annotations": {"iterion.io/owner-pod-uid": "uid-old"}}});
    let runner = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "runner-old", "namespace": NS, "uid": "uid-new"}});
    fx.fake
        .expect(
            Expect::new("POST", &pods()).json(409, status_body(409, "AlreadyExists", "pods already exists")),
        )
        .expect(Expect::new("GET", &pod_path()).json(200, leftover))
        .expect(Expect::new("GET", &format!("{}/runner-old", pods())).json(200, runner))
        .expect(delete_pod())
        .expect(pod_gone())
        .expect(
            Expect::new("DELETE", &policy_path())
                .json(404, status_body(404, "NotFound", "networkpolicies not found")),
        );
    let started = started_open(&fx, &driver).await;
    assert_eq!(started.report.name, POD);
    fx.fake.expect(delete_pod()).expect(pod_gone());
    started.run.cleanup().await;
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn a_leftover_pod_of_a_live_runner_is_in_use() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ip = None);
    let leftover = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": POD, "namespace": NS,
                     "labels": {"iterion.io/managed": "true", "iterion.io/owner-host": "runner-a",
                                "iterion.io/owner-pid": "7", "iterion.io/owner-start": "1"},
                     "annotations": {"iterion.io/owner-pod-uid": "uid-a"}}});
    let runner = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "runner-a", "namespace": NS, "uid": "uid-a"}});
    fx.fake
        .expect(
            Expect::new("POST", &pods()).json(409, status_body(409, "AlreadyExists", "pods already exists")),
        )
        .expect(Expect::new("GET", &pod_path()).json(200, leftover))
        .expect(Expect::new("GET", &format!("{}/runner-a", pods())).json(200, runner));
    let err = prepare_and_start(&fx, &driver, false).await.unwrap_err();
    assert!(
        matches!(&err, Error::SandboxInUse { owner_host, owner_pid: 7, .. } if owner_host == "runner-a"),
        "{err:?}"
    );
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn k8_a_stalled_workspace_copy_times_out_and_removes_the_pod() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.workspace_copy_timeout = Duration::from_secs(1));
    let mut stalled = ExecBackend::exit(0);
    stalled.delay = Duration::from_secs(30);
    fx.fake
        .expect(create_policy())
        .expect(create_pod())
        .expect(watch(vec![event("ADDED", ready_pod(), 0)]))
        .expect(probe())
        .expect(
            Expect::new("GET", &exec_path())
                .command(&["tar", "-x", "-f", "-", "-C", "/workspace"])
                .exec(stalled),
        )
        .expect(delete_pod())
        .expect(pod_gone())
        .expect(delete_policy());
    let err = prepare_and_start(&fx, &driver, true).await.unwrap_err();
    assert!(
        matches!(err, Error::SetupTimeout { phase: SetupPhase::WorkspaceCopy, after, .. } if after == Duration::from_secs(1)),
        "{err:?}"
    );
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn the_workspace_archive_leaves_the_run_store_out() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ip = None);
    fx.fake
        .expect(create_pod())
        .expect(watch(vec![event("ADDED", ready_pod(), 0)]))
        .expect(probe())
        .expect(
            Expect::new("GET", &exec_path())
                .command(&["tar", "-x", "-f", "-", "-C", "/workspace"])
                .exec(
                    ExecBackend::exit(0)
                        .stdin_contains("notes.txt")
                        .stdin_lacks("store-only"),
                ),
        );
    let started = prepare_and_start(&fx, &driver, false).await.expect("start");
    fx.fake.expect(delete_pod()).expect(pod_gone());
    started.run.cleanup().await;
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn k10_missing_exec_permissions_make_the_driver_unavailable() {
    let fx = Fx::new(&["create pods/exec", "get pods/exec"]).await;
    let driver = fx.driver(|_| {});
    let err = driver.prepare(PrepareRequest::new(sandbox())).await.unwrap_err();
    let Error::Unavailable { reason, .. } = &err else {
        panic!("expected Unavailable, got {err:?}");
    };
    assert!(
        reason.contains("create on pods/exec") && reason.contains("get on pods/exec"),
        "{reason}"
    );
    assert!(
        reason.contains("namespace ns1") && reason.contains("apply the shipped Role"),
        "{reason}"
    );
    assert_eq!(err.failure_code(true), Some(FailureCode::DriverUnavailable));
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn refusals_come_before_any_api_call() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.overrides = r#"{"securityContext": {}}"#.into());
    let err = driver.prepare(PrepareRequest::new(sandbox())).await.unwrap_err();
    assert!(
        err.to_string().contains("key 'securityContext' is not allowed"),
        "{err}"
    );
    let driver = fx.driver(|_| {});
    let mut sb = sandbox();
    sb.user = Some("node".into());
    let err = driver.prepare(PrepareRequest::new(sb)).await.unwrap_err();
    assert!(err.to_string().contains("must be numeric"), "{err}");
    assert!(fx.fake.log().is_empty(), "{:?}", fx.fake.log());
    fx.fake.finish().expect("fake");
}

async fn exec_true(run: &dyn Run) -> iterion_driver::Result<i32> {
    exec_collect(run, ExecRequest::new(["true"]), OutputLimits::default())
        .await
        .map(|c| c.status.code)
}

#[tokio::test]
async fn exec_status_rows_end_to_end() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ip = None);
    let run = started_open(&fx, &driver).await.run;

    // Failure NonZeroExitCode 17 → exit 17.
    fx.fake
        .expect(put("exec env 'true'"))
        .expect(run_script(ExecBackend::exit(17)));
    assert_eq!(exec_true(run.as_ref()).await, Ok(17));

    // Another failure, pod running → ExecStart.
    let mut other = ExecBackend::exit(0);
    other.status =
        Some(json!({"status": "Failure", "reason": "InternalError", "message": "container not found"}));
    fx.fake
        .expect(put("exec env 'true'"))
        .expect(run_script(other.clone()))
        .expect(Expect::new("GET", &pod_path()).json(200, ready_pod()));
    let err = exec_true(run.as_ref()).await.unwrap_err();
    assert!(
        matches!(&err, Error::ExecStart { reason } if reason.contains("container not found")),
        "{err:?}"
    );

    // The same failure with the pod deleted → SandboxGone.
    fx.fake
        .expect(put("exec env 'true'"))
        .expect(run_script(other))
        .expect(pod_gone());
    assert!(exec_true(run.as_ref()).await.unwrap_err().is_sandbox_gone());

    // The stream closed without a status, pod gone → SandboxGone.
    let mut silent = ExecBackend::exit(0);
    silent.status = None;
    fx.fake
        .expect(put("exec env 'true'"))
        .expect(run_script(silent))
        .expect(pod_gone());
    assert!(exec_true(run.as_ref()).await.unwrap_err().is_sandbox_gone());

    // 126 without a pid file: the script never ran → ExecStart.
    fx.fake
        .expect(put("exec env 'true'"))
        .expect(run_script(ExecBackend::exit(126)))
        .expect(
            Expect::new("GET", &exec_path())
                .command_prefix(&["/bin/sh", "-c", "test -e \"$1\"", "iterion-check"])
                .exec(ExecBackend::exit(1)),
        );
    let err = exec_true(run.as_ref()).await.unwrap_err();
    assert!(matches!(err, Error::ExecStart { .. }), "{err:?}");

    // 126 with the pid file: the command's own exit code.
    fx.fake
        .expect(put("exec env 'true'"))
        .expect(run_script(ExecBackend::exit(126)))
        .expect(
            Expect::new("GET", &exec_path())
                .command_prefix(&["/bin/sh", "-c", "test -e \"$1\"", "iterion-check"])
                .exec(ExecBackend::exit(0)),
        );
    assert_eq!(exec_true(run.as_ref()).await, Ok(126));

    // A server that offers only v4 cannot close stdin → Unavailable naming 1.30.
    let mut v4 = ExecBackend::exit(0);
    v4.protocol = V4;
    fx.fake
        .expect(Expect::new("GET", &exec_path()).command_prefix(PUT).exec(v4));
    let err = exec_true(run.as_ref()).await.unwrap_err();
    assert!(
        matches!(&err, Error::Unavailable { reason, .. } if reason.contains("1.30")),
        "{err:?}"
    );

    fx.fake.expect(delete_pod()).expect(pod_gone());
    run.cleanup().await;
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn stdin_reaches_the_command_and_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ip = None);
    let run = started_open(&fx, &driver).await.run;
    fx.fake.expect(put("exec env 'cat'")).expect(run_script(
        ExecBackend::exit(0)
            .stdin_contains("piped text")
            .stdout("piped text"),
    ));
    let mut exec = run
        .exec(ExecRequest::new(["cat"]).stdin(iterion_driver::Stdin::Piped))
        .await
        .expect("exec");
    let mut stdin = exec.stdin.take().unwrap();
    stdin.write_all(b"piped text").await.unwrap();
    stdin.shutdown().await.unwrap();
    let mut out = String::new();
    exec.stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    assert_eq!(out, "piped text");
    assert_eq!(exec.wait().await.map(|s| s.code), Ok(0));
    fx.fake.expect(delete_pod()).expect(pod_gone());
    run.cleanup().await;
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn copy_in_and_out_are_tar_over_exec() {
    use tokio::io::AsyncReadExt;
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ip = None);
    let run = started_open(&fx, &driver).await.run;
    let untar = || Expect::new("GET", &exec_path()).command(&["tar", "-x", "-f", "-", "-C", "/workspace"]);
    fx.fake
        .expect(
            untar()
                .query("stdin", "true")
                .exec(ExecBackend::exit(0).stdin_contains("archive bytes")),
        )
        .expect(untar().exec(ExecBackend::exit(2).stderr("tar: invalid tar magic")));
    run.copy_in("/workspace", Box::pin(&b"archive bytes"[..]))
        .await
        .expect("copy in");
    let err = run
        .copy_in("/workspace", Box::pin(&b"not a tar"[..]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Copy { reason, .. } if reason.contains("tar exited 2: tar: invalid tar magic")),
        "{err:?}"
    );

    let tar = || Expect::new("GET", &exec_path()).command(&["tar", "-c", "-f", "-", "-C", "/", "workspace"]);
    fx.fake
        .expect(tar().exec(ExecBackend::exit(0).stdout("TARDATA")))
        .expect(
            tar().exec(
                ExecBackend::exit(1)
                    .stdout("TAR")
                    .stderr("tar: ./x: Permission denied"),
            ),
        );
    let mut got = Vec::new();
    run.copy_out("/workspace")
        .await
        .expect("copy out")
        .read_to_end(&mut got)
        .await
        .expect("archive");
    assert_eq!(got, b"TARDATA");
    let mut partial = Vec::new();
    let err = run
        .copy_out("/workspace")
        .await
        .expect("copy out")
        .read_to_end(&mut partial)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("Permission denied"), "{err}");

    fx.fake.expect(delete_pod()).expect(pod_gone());
    run.cleanup().await;
    assert!(matches!(run.copy_out("/workspace").await, Err(e) if e.is_sandbox_gone()));
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn cancelling_an_exec_signals_its_recorded_pid() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ip = None);
    let run = started_open(&fx, &driver).await.run;
    let mut slow = ExecBackend::exit(143);
    slow.delay = Duration::from_millis(500);
    fx.fake
        .expect(put("exec env 'sleep' '60'"))
        .expect(run_script(slow))
        .expect(
            Expect::new("GET", &exec_path())
                .command_prefix(&["/bin/sh", "-c"])
                .check(|r| {
                    let c = r.q("command");
                    let ok = c.len() == 6
                        && c[3] == "iterion-kill"
                        && c[4].starts_with("/run/iterion/exec/")
                        && c[4].ends_with(".pid")
                        && c[5] == "TERM";
                    if ok {
                        Ok(())
                    } else {
                        Err(format!("not a kill: {c:?}"))
                    }
                })
                .exec(ExecBackend::exit(0)),
        )
        // exit 143: the pod is looked at, and runs (the command's own end)
        .expect(Expect::new("GET", &pod_path()).json(200, ready_pod()));
    let req = ExecRequest::new(["sleep", "60"]);
    let token = req.cancel.clone();
    let exec = run.exec(req).await.expect("exec");
    token.cancel();
    let status = exec.wait().await.expect("wait");
    assert_eq!(
        (status.code, status.signal, status.cancelled),
        (143, Some(15), true)
    );
    fx.fake.expect(delete_pod()).expect(pod_gone());
    run.cleanup().await;
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn large_streams_cross_in_both_directions() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ip = None);
    let run = started_open(&fx, &driver).await.run;
    let big_in: String = (0..40_000).map(|i| format!("{i:07}\n")).collect();
    let big_out = "o".repeat(3 * 1024 * 1024 + 7);
    let untar = Expect::new("GET", &exec_path()).command(&["tar", "-x", "-f", "-", "-C", "/workspace"]);
    fx.fake
        .expect(untar.exec(ExecBackend::exit(0).stdin_contains(&big_in)))
        .expect(put("exec env 'yes'"))
        .expect(run_script(ExecBackend::exit(0).stdout(&big_out)));
    run.copy_in(
        "/workspace",
        Box::pin(std::io::Cursor::new(big_in.clone().into_bytes())),
    )
    .await
    .expect("copy in");
    let c = exec_collect(run.as_ref(), ExecRequest::new(["yes"]), OutputLimits::default())
        .await
        .expect("exec");
    assert_eq!(c.stdout.len(), big_out.len());
    fx.fake.expect(delete_pod()).expect(pod_gone());
    run.cleanup().await;
    fx.fake.finish().expect("fake");
}

/// A watch line that is no watch event (as a proxy in front of the API server, or a decoder that does not know
/// the server's objects, would make of one).
fn garbage(delay_ms: u64) -> (Duration, Value) {
    (
        Duration::from_millis(delay_ms),
        json!("<html>502 Bad Gateway</html>"),
    )
}

#[tokio::test]
async fn an_undecodable_watch_event_is_counted_and_the_wait_goes_on() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| {
        s.pod_ip = None;
        s.pod_ready_timeout = Duration::from_secs(5);
    });
    let bookmark = json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
        "metadata": {"resourceVersion": "41", "annotations": {"k8s.io/initial-events-end": "true"}}}});
    fx.fake
        .expect(create_pod())
        .expect(
            Expect::new("GET", &pods())
                .query("watch", "true")
                .query("resourceVersion", "0")
                .query("fieldSelector", &format!("metadata.name={POD}"))
                .watch(
                    vec![
                        (Duration::ZERO, bookmark),
                        event("ADDED", pending_pod("waiting for a node"), 0),
                        garbage(10),
                        event("MODIFIED", ready_pod(), 10),
                    ],
                    true,
                ),
        )
        .expect(probe())
        .expect(copy_ws("notes.txt"));
    let logs = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = logs.clone();
    let prepared = driver
        .prepare(PrepareRequest::new(sandbox()))
        .await
        .expect("prepare");
    let mut req = fx.request(false);
    req.events = iterion_driver::EventSink::new(move |e| {
        if let iterion_driver::DriverEvent::Log { message, .. } = e {
            sink.lock().unwrap().push(message);
        }
    });
    let started = driver.start(prepared, None, req).await.expect("start");
    let logs = logs.lock().unwrap().clone();
    assert!(
        logs.iter()
            .any(|l| l.contains("an event could not be decoded") && l.contains("1 in a row")),
        "the undecodable event was not logged: {logs:?}"
    );
    fx.fake.expect(delete_pod()).expect(pod_gone());
    started.run.cleanup().await;
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn watch_failures_in_a_row_end_the_wait_with_their_cause() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ready_timeout = Duration::from_secs(60));
    fx.fake
        .expect(create_policy())
        .expect(create_pod())
        .expect(watch((0..5).map(|_| garbage(0)).collect()))
        .expect(delete_pod())
        .expect(pod_gone())
        .expect(delete_policy());
    let err = prepare_and_start(&fx, &driver, true).await.unwrap_err();
    let Error::StartFailed { reason, .. } = &err else {
        panic!("expected StartFailed, got {err:?}");
    };
    assert!(
        reason.contains("failed 5 times in a row")
            && reason.contains("an event could not be decoded")
            && reason.contains("502 Bad Gateway"),
        "{reason}"
    );
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn an_expired_watch_starts_over_and_a_status_event_is_named() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| {
        s.pod_ip = None;
        s.pod_ready_timeout = Duration::from_secs(5);
    });
    let status = |code: u16, reason: &str, message: &str| {
        json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason, "code": code}})
    };
    let rewatch = |rv: &str, events: Vec<(Duration, Value)>, hold: bool| {
        Expect::new("GET", &pods())
            .query("watch", "true")
            .query("resourceVersion", rv)
            .watch(events, hold)
    };
    let mut pending = pending_pod("waiting for a node");
    pending["metadata"]["resourceVersion"] = json!("77");
    fx.fake
        .expect(create_pod())
        // the first watch ends (the server's timeout): watched again from the last resource version
        .expect(rewatch("0", vec![event("ADDED", pending, 0)], false))
        // that one expired: from the start (not a failure)
        .expect(rewatch(
            "77",
            vec![(
                Duration::ZERO,
                status(410, "Expired", "too old resource version: 77 (90)"),
            )],
            false,
        ))
        // an error the server names: counted, the pod read once, watched again
        .expect(rewatch(
            "0",
            vec![(Duration::ZERO, status(500, "InternalError", "etcd is sad"))],
            false,
        ))
        .expect(Expect::new("GET", &pod_path()).json(200, pending_pod("waiting for a node")))
        .expect(rewatch("0", vec![event("ADDED", ready_pod(), 0)], true))
        .expect(probe())
        .expect(copy_ws("notes.txt"));
    let started = prepare_and_start(&fx, &driver, false).await.expect("start");
    fx.fake.expect(delete_pod()).expect(pod_gone());
    started.run.cleanup().await;
    fx.fake.finish().expect("fake");
}

/// Starts with a lease (as the runtime does), drops the start after `after` (a cancelled run, the runtime's
/// start bound), then releases the lease as the run's cleanup does.
async fn start_dropped(fx: &Fx, driver: &K8sDriver, after: Duration) -> Vec<String> {
    let lease = driver
        .network(iterion_driver::NetworkRequest::new(RUN, fx.dir.path(), false))
        .await
        .expect("lease");
    let prepared = driver
        .prepare(PrepareRequest::new(sandbox()))
        .await
        .expect("prepare");
    let start = driver.start(prepared, Some(&lease), fx.request(true));
    assert!(
        tokio::time::timeout(after, start).await.is_err(),
        "the start ended before it was dropped"
    );
    tokio::task::spawn_blocking(move || lease.release())
        .await
        .expect("release")
}

// Multi-threaded: the drop waits for the pod's DELETE, which the fake (on this runtime) answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_cancelled_while_waiting_for_ready_removes_the_pod_then_its_network_policy() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|_| {});
    fx.fake
        .expect(create_policy())
        .expect(create_pod())
        .expect(watch(vec![event("ADDED", pending_pod("waiting for a node"), 0)]))
        .expect(delete_pod())
        .expect(pod_gone())
        .expect(delete_policy());
    let errors = start_dropped(&fx, &driver, Duration::from_millis(500)).await;
    assert!(errors.is_empty(), "{errors:?}");
    fx.fake.finish().expect("fake");
}

// Multi-threaded: the drop waits for the pod's DELETE, which the fake (on this runtime) answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_cancelled_during_the_workspace_copy_removes_the_pod_then_its_network_policy() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|_| {});
    let mut stalled = ExecBackend::exit(0);
    stalled.delay = Duration::from_secs(30);
    fx.fake
        .expect(create_policy())
        .expect(create_pod())
        .expect(watch(vec![event("ADDED", ready_pod(), 0)]))
        .expect(probe())
        .expect(
            Expect::new("GET", &exec_path())
                .command(&["tar", "-x", "-f", "-", "-C", "/workspace"])
                .exec(stalled),
        )
        .expect(delete_pod())
        .expect(pod_gone())
        .expect(delete_policy());
    let errors = start_dropped(&fx, &driver, Duration::from_millis(1500)).await;
    assert!(errors.is_empty(), "{errors:?}");
    fx.fake.finish().expect("fake");
}

// Multi-threaded: the drop waits for the pod's DELETE, which the fake (on this runtime) answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_start_cancelled_while_waiting_has_its_pod_deleted_before_the_drop_returns() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ip = None);
    fx.fake
        .expect(create_pod())
        .expect(watch(vec![event("ADDED", pending_pod("waiting for a node"), 0)]))
        .expect(delete_pod())
        .expect(pod_gone());
    let prepared = driver
        .prepare(PrepareRequest::new(sandbox()))
        .await
        .expect("prepare");
    let start = driver.start(prepared, None, fx.request(false));
    assert!(
        tokio::time::timeout(Duration::from_millis(500), start)
            .await
            .is_err()
    );
    // No lease waits for this one: the DELETE was answered when the drop returned.
    let deleted = format!("DELETE {}", pod_path());
    assert!(
        fx.fake.log().iter().any(|l| l.starts_with(&deleted)),
        "{:#?}",
        fx.fake.log()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    fx.fake.finish().expect("fake");
}

// Multi-threaded: the drop waits for the pod's DELETE, which the fake (on this runtime) answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_cancelled_while_creating_its_pod_removes_its_network_policy() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|_| {});
    // The NetworkPolicy is created, the pod's POST hangs: the policy goes, no pod was created.
    fx.fake
        .expect(create_policy())
        .expect(Expect::new("POST", &pods()).reply_with(|_| {
            std::thread::sleep(Duration::from_secs(2));
            Reply::Json(500, status_body(500, "InternalError", "too late"))
        }))
        .expect(delete_policy());
    let errors = start_dropped(&fx, &driver, Duration::from_millis(500)).await;
    assert!(errors.is_empty(), "{errors:?}");
    fx.fake.finish().expect("fake");
}

#[tokio::test]
async fn a_command_killed_with_its_deleted_pod_is_sandbox_gone() {
    let fx = Fx::new(&[]).await;
    let driver = fx.driver(|s| s.pod_ip = None);
    let started = started_open(&fx, &driver).await;
    // As a kubelet reports the exec of a pod deleted with grace 0: exit 137; the pod is gone.
    fx.fake
        .expect(put("exec env 'sleep' '600'"))
        .expect(run_script(ExecBackend::exit(137)))
        .expect(pod_gone());
    let err = exec_collect(
        started.run.as_ref(),
        ExecRequest::new(["sleep", "600"]),
        OutputLimits::default(),
    )
    .await
    .unwrap_err();
    assert!(err.is_sandbox_gone(), "{err:?}");
    // The same exit code in a pod that runs is the command's own.
    fx.fake
        .expect(put("exec env 'kill' '-9' '$$'"))
        .expect(run_script(ExecBackend::exit(137)))
        .expect(Expect::new("GET", &pod_path()).json(200, ready_pod()));
    let c = exec_collect(
        started.run.as_ref(),
        ExecRequest::new(["kill", "-9", "$$"]),
        OutputLimits::default(),
    )
    .await
    .expect("exec");
    assert_eq!(c.status.code, 137);
    fx.fake.expect(delete_pod()).expect(pod_gone());
    started.run.cleanup().await;
    fx.fake.finish().expect("fake");
}
