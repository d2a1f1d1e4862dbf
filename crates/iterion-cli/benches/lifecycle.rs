//! `cargo xtask bench lifecycle`: a whole sandboxed `iterion run` against the engine's own `docker run`.
//!
//! - one-tool-node run: `iterion run` of a workflow whose sandbox is the local test image under `allowlist`
//!   (so the container has no network but the relay, as `--network none`; one tool node,
//!   `echo`), against `docker run --rm --init --network none IMAGE echo hi`, paired (the two alternate which
//!   goes first), median of N (`ITERS`, default 10), the ratio of the medians and the median of the paired
//!   ratios; then the median time of each phase, read from the run's own events (the process start and exit
//!   are this program's clock around the child);
//! - cold build vs cached build of a small `sandbox.build:` image: each cold run builds a Dockerfile with new
//!   content (a new cache key, and a `RUN` the engine's layer cache has never seen), each cached run reuses
//!   the last one's image (`cache: hit`); median of `BUILD_ITERS` (default 5) each, whole run and
//!   `sandbox_build_finished.duration_ms`. The images it built are removed at the end.
//!
//! Shelling out to the docker CLI happens only here, as the comparison baseline.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

const BIN: &str = env!("CARGO_BIN_EXE_iterion");

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn iters(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Seconds since the epoch of an RFC 3339 UTC timestamp (`2026-12-01T21:56:58.245406074Z`).
fn epoch(ts: &str) -> f64 {
    let (date, time) = ts.trim_end_matches('Z').split_once('T').expect("timestamp");
    let d: Vec<i64> = date.split('-').map(|x| x.parse().expect("date")).collect();
    let (y, m, day) = (d[0], d[1], d[2]);
    // days from civil (Howard Hinnant)
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let t: Vec<f64> = time.split(':').map(|x| x.parse().expect("time")).collect();
    days as f64 * 86_400.0 + t[0] * 3600.0 + t[1] * 60.0 + t[2]
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// One `iterion run` in `dir`: wall seconds, the events, and the spawn / exit instants on the epoch clock.
struct Run {
    wall: f64,
    events: Vec<Value>,
    spawned: f64,
    exited: f64,
}

fn iterion_run(dir: &Path, home: &Path) -> Run {
    let store = dir.join(".iterion");
    let spawned = now();
    let t = Instant::now();
    let out = Command::new(BIN)
        .args(["run", "w.bot", "--store-dir"])
        .arg(&store)
        .current_dir(dir)
        .env("HOME", home)
        .env_remove("ITERION_SANDBOX_PULL_POLICY")
        .env_remove("ITERION_SANDBOX_REBUILD")
        .stdin(Stdio::null())
        .output()
        .expect("iterion");
    let wall = t.elapsed().as_secs_f64();
    let exited = now();
    assert!(
        out.status.success(),
        "iterion run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut runs: Vec<PathBuf> = std::fs::read_dir(store.join("runs"))
        .expect("runs")
        .flatten()
        .map(|e| e.path())
        .collect();
    runs.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    let last = runs.pop().expect("a run");
    let events = std::fs::read_to_string(last.join("events.jsonl"))
        .expect("events")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    std::fs::remove_dir_all(&last).ok();
    Run {
        wall,
        events,
        spawned,
        exited,
    }
}

fn at(r: &Run, t: &str) -> Option<f64> {
    r.events
        .iter()
        .find(|e| e["type"] == t)
        .map(|e| epoch(e["timestamp"].as_str().unwrap_or_default()))
}

fn docker_run(image: &str) -> f64 {
    let t = Instant::now();
    let out = Command::new("docker")
        .args(["run", "--rm", "--init", "--network", "none", image, "echo", "hi"])
        .stdin(Stdio::null())
        .output()
        .expect("docker CLI");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    t.elapsed().as_secs_f64()
}

fn ms(s: f64) -> f64 {
    s * 1000.0
}

const PHASES: &[(&str, &str, &str)] = &[
    (
        "process start → first event (compile, engine selection, reaper)",
        "<spawn>",
        "<first>",
    ),
    (
        "first event → sandbox_image_ready",
        "<first>",
        "sandbox_image_ready",
    ),
    (
        "→ sandbox_network_started (proxy)",
        "sandbox_image_ready",
        "sandbox_network_started",
    ),
    (
        "→ sandbox_host_state_mounted (create + start)",
        "sandbox_network_started",
        "sandbox_host_state_mounted",
    ),
    (
        "→ sandbox_started (shell probe)",
        "sandbox_host_state_mounted",
        "sandbox_started",
    ),
    ("→ run_finished (the node)", "sandbox_started", "run_finished"),
    ("→ sandbox_stopped (teardown)", "run_finished", "sandbox_stopped"),
    ("sandbox_stopped → process exit", "sandbox_stopped", "<exit>"),
];

fn point(r: &Run, p: &str) -> f64 {
    match p {
        "<spawn>" => r.spawned,
        "<exit>" => r.exited,
        "<first>" => epoch(r.events[0]["timestamp"].as_str().unwrap_or_default()),
        t => at(r, t).unwrap_or_else(|| panic!("no {t} event")),
    }
}

fn lifecycle(image: &str, n: usize) {
    let dir = tempfile::tempdir().expect("dir");
    let home = tempfile::tempdir().expect("home");
    std::fs::write(
        dir.path().join("w.bot"),
        format!(
            "tool hi:\n  command: `echo '{{\"ok\": true}}'`\n\nworkflow w:\n  entry: hi\n  sandbox:\n    image: \"{image}\"\n    network:\n      mode: allowlist\n  hi -> done\n"
        ),
    )
    .expect("write");
    // warm-up of both
    iterion_run(dir.path(), home.path());
    docker_run(image);
    let (mut it, mut dk, mut ratios, mut runs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let (r, d) = if i % 2 == 0 {
            let r = iterion_run(dir.path(), home.path());
            (r, docker_run(image))
        } else {
            let d = docker_run(image);
            (iterion_run(dir.path(), home.path()), d)
        };
        it.push(r.wall);
        dk.push(d);
        ratios.push(r.wall / d);
        runs.push(r);
    }
    let placement = runs[0]
        .events
        .iter()
        .find(|e| e["type"] == "sandbox_started")
        .map(|e| e["data"]["enforced_egress"].to_string())
        .unwrap_or_default();
    println!("\n## one-tool-node sandboxed run vs docker run --rm (median of {n}, paired)\n");
    println!("| subject | median ms |");
    println!("|---|---:|");
    println!(
        "| `iterion run` (one tool node, enforced egress: {placement}) | {:.0} |",
        ms(median(it.clone()))
    );
    println!(
        "| `docker run --rm --init --network none IMAGE echo hi` | {:.0} |",
        ms(median(dk.clone()))
    );
    println!(
        "\nratio of the medians: {:.2}×; median of the paired ratios: {:.2}×",
        median(it) / median(dk),
        median(ratios)
    );
    println!("\n| phase (from the run's events) | median ms |");
    println!("|---|---:|");
    for (name, from, to) in PHASES {
        let v: Vec<f64> = runs.iter().map(|r| ms(point(r, to) - point(r, from))).collect();
        println!("| {name} | {:.0} |", median(v));
    }
}

fn builds(image: &str, n: usize) {
    let dir = tempfile::tempdir().expect("dir");
    let home = tempfile::tempdir().expect("home");
    std::fs::write(
        dir.path().join("w.bot"),
        "tool hi:\n  command: `cat /n`\n\nworkflow w:\n  entry: hi\n  sandbox:\n    build:\n      dockerfile: \"Dockerfile\"\n      context: \".\"\n  hi -> done\n",
    )
    .expect("write");
    let mut tags = Vec::new();
    let build_ms = |r: &Run| -> (f64, String, String) {
        let e = r
            .events
            .iter()
            .find(|e| e["type"] == "sandbox_build_finished")
            .expect("sandbox_build_finished");
        (
            e["data"]["duration_ms"].as_f64().unwrap_or_default(),
            e["data"]["cache"].as_str().unwrap_or_default().to_owned(),
            e["data"]["target"].as_str().unwrap_or_default().to_owned(),
        )
    };
    let (mut cold, mut cold_b, mut hot, mut hot_b) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let nonce = format!("{:x}-{i}", now().to_bits());
        std::fs::write(
            dir.path().join("Dockerfile"),
            format!("FROM {image}\nRUN echo {nonce} > /n && sleep 0\n"),
        )
        .expect("write");
        let r = iterion_run(dir.path(), home.path());
        let (b, cache, tag) = build_ms(&r);
        assert_eq!(cache, "miss", "a new Dockerfile is a miss");
        cold.push(r.wall);
        cold_b.push(b);
        tags.push(tag);
        let r = iterion_run(dir.path(), home.path());
        let (b, cache, _) = build_ms(&r);
        assert_eq!(cache, "hit", "the same Dockerfile again is a hit");
        hot.push(r.wall);
        hot_b.push(b);
    }
    println!("\n## cold build vs cached build of a small sandbox.build image (median of {n})\n");
    println!("| | whole run ms | sandbox_build_finished.duration_ms |");
    println!("|---|---:|---:|");
    println!(
        "| cold (new inputs: the engine builds) | {:.0} | {:.0} |",
        ms(median(cold)),
        median(cold_b)
    );
    println!(
        "| cached (same inputs: `cache: hit`) | {:.0} | {:.0} |",
        ms(median(hot)),
        median(hot_b)
    );
    for t in tags {
        let _ = Command::new("docker").args(["rmi", "-f", &t]).output();
    }
}

fn main() {
    // `cargo bench` passes `--bench`; no other argument is used
    let image = iterion_test_support::docker_image::ensure_test_image().expect("the local test image");
    let n = iters("ITERS", 10);
    println!("load before: {}", load());
    let t = Instant::now();
    lifecycle(&image, n);
    builds(&image, iters("BUILD_ITERS", 5));
    println!("\nload after: {} ({:.0} s)", load(), t.elapsed().as_secs_f64());
}
