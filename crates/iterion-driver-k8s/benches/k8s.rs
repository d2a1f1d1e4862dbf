//! `cargo xtask bench k8s`: the kubernetes driver's own overhead, through the scripted fake API server on
//! loopback (no cluster, no kubelet: what remains is the driver, the client, HTTP and WebSocket framing).
//!
//! - pod ready: `start` of an open run — `POST` pod, the watch answering `Ready` at once, the shell probe exec,
//!   the copy of a one-file work dir;
//! - first exec: the first `exec` of `true` after start (script written over stdin, then run);
//! - exec round trip: later execs of `true` (two WebSocket sessions each);
//! - cleanup: `DELETE` pod and the poll that sees it gone.
//!
//! Median and 90th percentile of N iterations (`ITERS`, default 30; `EXECS` execs per iteration, default 10).
//!
//! Then, when a container engine answers, the same four figures through the engine-backed fake API server of
//! `iterion-test-support`, where a pod is a real container of the local engine and every exec runs in it:
//! what a cluster adds is then a kubelet's own latency, not iterion's (`ENGINE_ITERS` pods, default 10).

#[path = "../tests/support/scripted.rs"]
#[allow(dead_code)]
mod scripted;

use std::time::{Duration, Instant};

use iterion_driver::{Driver, ExecRequest, OutputLimits, PrepareRequest, StartRequest, exec_collect, owner};
use iterion_driver_k8s::cluster::{ClusterAccess, DiscoveryInputs};
use iterion_driver_k8s::{K8sDriver, K8sSettings};
use iterion_spec::resolved::{HostState, NetworkPolicySpec, Origin, ResolvedMode, ResolvedSandbox};
use scripted::{ExecBackend, Expect, FakeApi, Reply, status_body};
use serde_json::json;

const NS: &str = "bench";

fn pct(mut v: Vec<Duration>, p: usize) -> f64 {
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)].as_secs_f64() * 1000.0
}

fn sandbox() -> ResolvedSandbox {
    let mut s = ResolvedSandbox {
        mode: ResolvedMode::Inline,
        source: "bench".into(),
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
        host_state_source: "bench".into(),
        network: NetworkPolicySpec::open("bench"),
        runtime: Default::default(),
        degrade_allowed: false,
        key: String::new(),
    };
    s.refresh_key();
    s
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Scripts one iteration: start, `execs` + 1 execs, cleanup.
fn script(fake: &FakeApi, pod: &str, execs: usize) {
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    let path = format!("{pods}/{pod}");
    let exec = format!("{path}/exec");
    let ready = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": NS},
                       "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    fake.expect(Expect::new("POST", &pods).created())
        .expect(Expect::new("GET", &pods).query("watch", "true").watch(
            vec![(Duration::ZERO, json!({"type": "ADDED", "object": ready}))],
            true,
        ))
        .expect(Expect::new("GET", &exec).exec(ExecBackend::exit(0)))
        .expect(Expect::new("GET", &exec).exec(ExecBackend::exit(0)));
    for _ in 0..=execs {
        fake.expect(Expect::new("GET", &exec).exec(ExecBackend::exit(0)))
            .expect(Expect::new("GET", &exec).exec(ExecBackend::exit(0)));
    }
    fake.expect(Expect::new("DELETE", &path).json(200, json!({"status": "Success"})))
        .expect(Expect::new("GET", &path).json(404, status_body(404, "NotFound", "not found")));
}

#[tokio::main]
async fn main() {
    let iters = env_usize("ITERS", 30);
    let execs = env_usize("EXECS", 10);
    let fake = FakeApi::start().await;
    fake.anytime(
        Expect::new("GET", "/version")
            .json(200, json!({"major": "1", "minor": "31", "gitVersion": "v1.31.0"})),
    );
    fake.anytime(
        Expect::new("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews").reply_with(|r| {
            let mut o = r.json();
            o["status"] = json!({"allowed": true});
            Reply::Json(201, o)
        }),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let work = tempfile::tempdir().expect("work dir");
    std::fs::write(work.path().join("README"), "bench").expect("work file");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: f\nclusters:\n- name: f\n  cluster:\n    server: {}\n\
             contexts:\n- name: f\n  context:\n    cluster: f\n    user: f\n    namespace: {NS}\n\
             users:\n- name: f\n  user:\n    token: t\n",
            fake.url()
        ),
    )
    .expect("kubeconfig");
    let env = [("KUBECONFIG".to_string(), kubeconfig.display().to_string())]
        .into_iter()
        .collect();
    let mut settings = K8sSettings::default();
    settings.poll_interval = Duration::from_millis(10);
    let driver = K8sDriver::new(ClusterAccess::discover(&DiscoveryInputs::new(env)), settings);
    let t = Instant::now();
    let prepared = driver
        .prepare(PrepareRequest::new(sandbox()))
        .await
        .expect("prepare");
    let first_prepare = t.elapsed();

    let (mut ready, mut first, mut round, mut cleanup) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..iters {
        let run_id = format!("0190f5c2-7d1e-7abc-9def-{i:012}");
        let pod = format!("iterion-{run_id}");
        script(&fake, &pod, execs);
        let req = StartRequest::new(run_id, work.path(), owner::current_owner(dir.path()));
        let t = Instant::now();
        let started = driver.start(prepared.clone(), None, req).await.expect("start");
        ready.push(t.elapsed());
        let run = started.run;
        for n in 0..=execs {
            let t = Instant::now();
            let c = exec_collect(run.as_ref(), ExecRequest::new(["true"]), OutputLimits::default())
                .await
                .expect("exec");
            assert_eq!(c.status.code, 0);
            if n == 0 {
                first.push(t.elapsed());
            } else {
                round.push(t.elapsed());
            }
        }
        let t = Instant::now();
        let report = run.cleanup().await;
        assert!(report.container_removed, "{report:?}");
        cleanup.push(t.elapsed());
    }
    fake.finish().expect("fake");
    println!("kubernetes driver through the scripted fake API server ({iters} pods, {execs} execs each)");
    println!(
        "first prepare (version + 12 reviews): {:.2} ms",
        first_prepare.as_secs_f64() * 1000.0
    );
    println!("{:<20} {:>10} {:>10}", "", "median ms", "p90 ms");
    for (name, v) in [
        ("pod ready", ready),
        ("first exec", first),
        ("exec round trip", round),
        ("cleanup", cleanup),
    ] {
        println!("{name:<20} {:>10.2} {:>10.2}", pct(v.clone(), 50), pct(v, 90));
    }
    match iterion_test_support::engine_answers() {
        Ok(()) => engine_backed(env_usize("ENGINE_ITERS", 10), execs).await,
        Err(why) => println!("\nno container engine answers ({why}): the engine-backed figures are skipped"),
    }
}

/// Start, execs and cleanup of `iters` pods through the engine-backed fake.
async fn engine_backed(iters: usize, execs: usize) {
    use iterion_test_support::k8s_fake::EngineFake;
    let image = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let fake = EngineFake::start("bench").await.expect("engine-backed fake");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = fake.write_kubeconfig(dir.path()).expect("kubeconfig");
    let env = [("KUBECONFIG".to_string(), kubeconfig.display().to_string())]
        .into_iter()
        .collect();
    let mut settings = K8sSettings::default();
    settings.poll_interval = Duration::from_millis(10);
    let driver = K8sDriver::new(ClusterAccess::discover(&DiscoveryInputs::new(env)), settings);
    let work = tempfile::tempdir().expect("work dir");
    std::fs::write(work.path().join("README"), "bench").expect("work file");
    let mut sb = sandbox();
    sb.image = Some(image);
    sb.refresh_key();
    let prepared = driver.prepare(PrepareRequest::new(sb)).await.expect("prepare");
    let (mut ready, mut first, mut round, mut cleanup) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..iters {
        let req = StartRequest::new(
            format!("0190f5c2-7d1e-7abc-9def-e{i:011}"),
            work.path(),
            owner::current_owner(dir.path()),
        );
        let t = Instant::now();
        let started = driver.start(prepared.clone(), None, req).await.expect("start");
        ready.push(t.elapsed());
        let run = started.run;
        for n in 0..=execs {
            let t = Instant::now();
            let c = exec_collect(run.as_ref(), ExecRequest::new(["true"]), OutputLimits::default())
                .await
                .expect("exec");
            assert_eq!(c.status.code, 0);
            if n == 0 {
                first.push(t.elapsed());
            } else {
                round.push(t.elapsed());
            }
        }
        let t = Instant::now();
        let report = run.cleanup().await;
        assert!(report.container_removed, "{report:?}");
        cleanup.push(t.elapsed());
    }
    let errors = fake.shutdown().await;
    assert!(errors.is_empty(), "{errors:?}");
    println!(
        "\nkubernetes driver through the engine-backed fake API server ({iters} pods, {execs} execs each)"
    );
    println!("{:<20} {:>10} {:>10}", "", "median ms", "p90 ms");
    for (name, v) in [
        ("pod ready", ready),
        ("first exec", first),
        ("exec round trip", round),
        ("cleanup", cleanup),
    ] {
        println!("{name:<20} {:>10.2} {:>10.2}", pct(v.clone(), 50), pct(v, 90));
    }
}
