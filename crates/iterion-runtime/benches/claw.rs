//! `cargo xtask bench claw`: the claw runner's startup-to-first-model-request latency.
//!
//! Each iteration is a whole `Runtime::run` of a one-node claw workflow against the scripted fake provider on
//! loopback. Measured: from the node's `delegate_started` event (emitted just before the runner is started
//! through `Run::exec`) to the moment the fake provider has read the runner's first model request. That span
//! holds the exec itself, the runner process start, the envelope handshake and the task, provider resolution
//! and, in a container, the connection through the relay and the egress proxy.
//!
//! - `container`: docker driver, the local test image (static busybox), the static runner bound at
//!   `/usr/local/bin/iterion`, an allowlist naming the fake provider;
//! - `host`: `sandbox: none`, the same static runner started on the host (the reference).
//!
//! Median of `ITERS` (default 12) per placement, after one warm-up run each. Needs a Docker engine and the test
//! image (`cargo xtask images`, which `cargo xtask bench claw` runs first).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iterion_runtime::api::{HostOptions, RunOptions, Runtime};
use iterion_runtime::events::Event;
use iterion_runtime::lifecycle::Observer;
use iterion_runtime::status::RunStatus;
use iterion_runtime::store::Appended;
use iterion_test_support::fake_provider::{FakeProvider, Reply};

#[derive(Default)]
struct Started(Mutex<Option<Instant>>);

impl Observer for Started {
    fn event(&self, _appended: &Appended, event: &Event) {
        if event.event_type() == "delegate_started" {
            self.0.lock().unwrap().get_or_insert_with(Instant::now);
        }
    }
}

fn workflow(port: &str, sandboxed: bool) -> String {
    let sandbox = if sandboxed {
        format!(
            "  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      preset: none\n      rules: [\"127.0.0.1:{port}\"]\n"
        )
    } else {
        "  sandbox: none\n".to_string()
    };
    format!("agent a:\n  model: \"claude-bench\"\n\nworkflow w:\n  entry: a\n{sandbox}  a -> done\n")
}

/// One run; the latency of its first model request.
async fn once(sandboxed: bool) -> Duration {
    let fake = FakeProvider::start(vec![Reply::text("{\"ok\": true}")])
        .await
        .unwrap();
    let port = fake.url().rsplit(':').next().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".devcontainer")).unwrap();
    std::fs::write(
        ws.join(".devcontainer/devcontainer.json"),
        r#"{"image": "iterion-test/busybox:latest"}"#,
    )
    .unwrap();
    std::fs::write(ws.join("w.bot"), workflow(&port, sandboxed)).unwrap();
    let env: BTreeMap<String, String> = [
        ("HOME", dir.path().display().to_string()),
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("ITERION_SANDBOX_PULL_POLICY", "never".into()),
        ("ANTHROPIC_API_KEY", "sk-bench".into()),
        ("ANTHROPIC_BASE_URL", fake.url()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let opts = HostOptions::new().cwd(&ws).forced_driver(Some("docker".into()));
    let started = Arc::new(Started::default());
    let runtime = Runtime::from_host(&env, &opts)
        .await
        .unwrap()
        .store_dir(dir.path().join("store"))
        .observer(started.clone())
        .build()
        .unwrap();
    let outcome = runtime.run("w.bot", RunOptions::new(&ws)).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Finished, "{:?}", outcome.error);
    let t0 = started.0.lock().unwrap().expect("delegate_started");
    let first = fake.requests().first().expect("a model request").received;
    first.duration_since(t0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() {
    let iters: usize = std::env::var("ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("load before: {}", load());
    println!("| placement | runs | median ms | min ms | max ms |");
    println!("|---|---:|---:|---:|---:|");
    for (name, sandboxed) in [
        ("container (docker, static busybox, via relay + proxy)", true),
        ("host (sandbox: none)", false),
    ] {
        rt.block_on(once(sandboxed)); // warm-up
        let mut v: Vec<Duration> = (0..iters).map(|_| rt.block_on(once(sandboxed))).collect();
        v.sort();
        println!(
            "| {name} | {iters} | {:.1} | {:.1} | {:.1} |",
            ms(v[v.len() / 2]),
            ms(v[0]),
            ms(v[v.len() - 1])
        );
    }
    println!("load after: {}", load());
}
