//! `cargo xtask bench lifecycle`: a whole sandboxed `iterion run` against the engine's own `docker run`.
//!
//! - one-tool-node run: `iterion run` of a workflow whose sandbox is the local test image under `allowlist`
//!   (so the container has no network but the relay, as `--network none`; one tool node,
//!   `echo`), against `docker run --rm --init --network none IMAGE echo hi` and against the floor, paired
//!   (the three rotate which goes first), median of N (`ITERS`, default 10), the ratios of the medians and the
//!   medians of the paired ratios; then the median time of each phase of the floor and of the run, the
//!   latter read from the run's own events (the process start and exit are this program's clock around the
//!   child);
//! - the floor: the minimum work the specification requires of such a run, done directly with no iterion
//!   logic: the store's durable writes — as many event appends (`write` + `fdatasync`) and atomic `run.json`
//!   replacements (temporary file `write` + `fsync`, `rename`, directory `fsync`) as one real run makes,
//!   counted once per bench with `strace -f -c` — in a directory next to the bench's store, then over the
//!   engine API (the test helpers' raw client, one request per connection) a container of the sandbox's shape
//!   (idle `sleep infinity`, init, network `none`, capabilities dropped, the workspace bound) created and
//!   started, one exec of `echo hi` (create, attached start read to its end, inspect for the exit code) and a
//!   forced remove;
//! - cold build vs cached build of a small `sandbox.build:` image: each cold run builds a Dockerfile with new
//!   content (a new cache key, and a `RUN` the engine's layer cache has never seen), each cached run reuses
//!   the last one's image (`cache: hit`); median of `BUILD_ITERS` (default 5) each, whole run and
//!   `sandbox_build_finished.duration_ms`. The images it built are removed at the end.
//!
//! `BASELINE_BIN=PATH` adds another iterion binary (an earlier build) to the paired loop as a fourth subject,
//! with its ratio to this build and its own phase medians: a before/after measured side by side.
//!
//! Shelling out to the docker CLI happens only here, as the comparison baseline.

use iterion_test_support::docker_http::{Response, encode_component, request};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    iterion_run_with(BIN, dir, home, None)
}

/// [`iterion_run`] with extra arguments after `run w.bot` (the runtime flag).
fn iterion_run_args(dir: &Path, home: &Path, extra: &[&str]) -> Run {
    iterion_run_full(BIN, dir, home, None, extra)
}

/// [`iterion_run`] of the binary `bin`, under `strace -f -c -o STRACE_OUT -e trace=fsync,fdatasync` when
/// `strace_out` is given.
fn iterion_run_with(bin: &str, dir: &Path, home: &Path, strace_out: Option<&Path>) -> Run {
    iterion_run_full(bin, dir, home, strace_out, &[])
}

fn iterion_run_full(bin: &str, dir: &Path, home: &Path, strace_out: Option<&Path>, extra: &[&str]) -> Run {
    let store = dir.join(".iterion");
    let mut cmd = match strace_out {
        Some(o) => {
            let mut c = Command::new("strace");
            c.args(["-f", "-c", "-e", "trace=fsync,fdatasync", "-o"])
                .arg(o)
                .arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let spawned = now();
    let t = Instant::now();
    let out = cmd
        .args(["run", "w.bot"])
        .args(extra)
        .arg("--store-dir")
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

/// How many durable writes one run makes: event appends (one `write` of the line, then `fdatasync`, as
/// `EventLog::append_at`) and atomic replacements (temporary file written and fsynced, renamed over the
/// target, directory fsynced, as `write_atomic` does for `run.json`).
#[derive(Debug, Clone, Copy)]
struct Syncs {
    appends: usize,
    replacements: usize,
}

/// The counts of one warm `iterion run` under `strace -f -c`: every `fdatasync` is an event append and every
/// atomic replacement is two `fsync`s (the file, then its directory). `None` when strace cannot be run.
fn count_syncs(dir: &Path, home: &Path) -> Option<(Syncs, usize)> {
    let out = dir.join("strace.out");
    Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()
        .filter(|s| s.success())?;
    let run = iterion_run_with(BIN, dir, home, Some(&out));
    let summary = std::fs::read_to_string(&out).ok()?;
    std::fs::remove_file(&out).ok();
    let calls = |name: &str| -> usize {
        summary
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|w| w.last() == Some(&name))
            .and_then(|w| w.get(3).and_then(|c| c.parse().ok()))
            .unwrap_or(0)
    };
    let (fdatasync, fsync) = (calls("fdatasync"), calls("fsync"));
    Some((
        Syncs {
            appends: fdatasync,
            replacements: fsync / 2,
        },
        run.events.len(),
    ))
}

/// Atomic replacements of `run.json` in this bench's one-node run when strace is missing (as last counted with
/// strace).
const FALLBACK_REPLACEMENTS: usize = 8;

/// The engine's Unix socket, through the test helpers' raw client (one request per connection).
struct Engine {
    socket: PathBuf,
}

impl Engine {
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Response {
        let text = body.map(Value::to_string).unwrap_or_default();
        let r = request(
            &self.socket,
            method,
            path,
            body.map(|_| "application/json"),
            text.as_bytes(),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        assert!(r.status < 300, "{method} {path}: {} {}", r.status_line, r.text());
        r
    }

    fn json(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        serde_json::from_slice(&self.call(method, path, body).body).expect("engine JSON")
    }
}

/// Force-removes the floor's container if a step panicked before its timed removal.
struct Removal<'a> {
    engine: &'a Engine,
    id: Option<String>,
}

impl Drop for Removal<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let _ = request(
                &self.engine.socket,
                "DELETE",
                &format!("/containers/{id}?force=1&v=1"),
                None,
                b"",
                Duration::from_secs(60),
            );
        }
    }
}

/// The phases of one floor run, in seconds.
const FLOOR_PHASES: &[&str] = &[
    "durable store writes (appends + run.json replacements)",
    "create (sleep infinity, init, network none, workspace bind)",
    "start",
    "exec of `echo hi` (create, attached start, inspect)",
    "forced remove",
];

/// The floor: the minimum a one-node sandboxed run must do per the specification, with no iterion logic —
/// the store's mandated durability in a directory next to the bench's store, then one container of the same
/// shape as iterion's sandbox created, started, one exec of `echo hi` in it, removed. Returns the wall time
/// and the time of each of [`FLOOR_PHASES`].
fn floor_run(
    engine: &Engine,
    image: &str,
    ws: &Path,
    store: &Path,
    syncs: Syncs,
    i: usize,
) -> (f64, Vec<f64>) {
    let mut phases = Vec::new();
    let t0 = Instant::now();
    let mut lap = {
        let mut last = Instant::now();
        move |phases: &mut Vec<f64>| {
            phases.push(last.elapsed().as_secs_f64());
            last = Instant::now();
        }
    };
    let run_dir = store.join(format!("run-{i}"));
    durable_writes(&run_dir, syncs);
    lap(&mut phases);

    let name = format!("iterion-bench-floor-{}-{i}", std::process::id());
    let body = json!({
        "Image": image,
        "Entrypoint": ["sleep"],
        "Cmd": ["infinity"],
        "WorkingDir": "/workspace",
        "Labels": {"iterion.io/test": "bench-lifecycle-floor"},
        "AttachStdin": false, "AttachStdout": false, "AttachStderr": false, "Tty": false, "OpenStdin": false,
        "HostConfig": {
            "Init": true,
            "NetworkMode": "none",
            "AutoRemove": false,
            "CapDrop": ["ALL"],
            "CapAdd": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE"],
            "SecurityOpt": ["no-new-privileges:true"],
            "Mounts": [{
                "Type": "bind", "Source": ws.to_string_lossy(), "Target": "/workspace",
                "BindOptions": {"Propagation": "rprivate"}
            }]
        }
    });
    let created = engine.json(
        "POST",
        &format!("/containers/create?name={}", encode_component(&name)),
        Some(&body),
    );
    let id = created["Id"].as_str().expect("container id").to_owned();
    let mut guard = Removal {
        engine,
        id: Some(id.clone()),
    };
    lap(&mut phases);

    engine.call("POST", &format!("/containers/{id}/start"), None);
    lap(&mut phases);

    let exec = engine.json(
        "POST",
        &format!("/containers/{id}/exec"),
        Some(&json!({"AttachStdout": true, "AttachStderr": true, "Tty": false, "Cmd": ["echo", "hi"]})),
    );
    let eid = exec["Id"].as_str().expect("exec id").to_owned();
    // attached: the engine streams the output (multiplexed frames) and closes the connection at the end
    let out = engine.call(
        "POST",
        &format!("/exec/{eid}/start"),
        Some(&json!({"Detach": false, "Tty": false})),
    );
    assert!(
        out.body.windows(3).any(|w| w == b"hi\n"),
        "exec output: {:?}",
        out.text()
    );
    let code = loop {
        let i = engine.json("GET", &format!("/exec/{eid}/json"), None);
        if i["Running"] != true {
            break i["ExitCode"].as_i64().unwrap_or(-1);
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(code, 0, "exit code of echo hi");
    lap(&mut phases);

    engine.call("DELETE", &format!("/containers/{id}?force=1&v=1"), None);
    guard.id = None;
    lap(&mut phases);
    let wall = t0.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&run_dir).ok();
    (wall, phases)
}

/// `syncs.appends` event lines appended (one `write`, then `fdatasync`) and `syncs.replacements` atomic
/// replacements of `run.json` (temporary file written and fsynced, renamed, directory fsynced) in a new
/// directory `dir`.
fn durable_writes(dir: &Path, syncs: Syncs) {
    std::fs::create_dir(dir).expect("run dir");
    let mut events = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("events.jsonl"))
        .expect("events");
    // the sizes of a one-node run's records: event lines of about 250 bytes, a `run.json` of about 2.5 KB
    let line = format!("{}\n", "x".repeat(250));
    let document = "y".repeat(2500);
    let target = dir.join("run.json");
    let dir_handle = || std::fs::File::open(dir).expect("open dir");
    for k in 0..syncs.appends.max(syncs.replacements) {
        if k < syncs.appends {
            let n = events.write(line.as_bytes()).expect("append");
            assert_eq!(n, line.len());
            events.sync_data().expect("fdatasync");
        }
        if k < syncs.replacements {
            let tmp = dir.join(format!(".run.json.tmp-{k:016x}"));
            let mut f = std::fs::File::create_new(&tmp).expect("tmp");
            f.write_all(document.as_bytes()).expect("write");
            f.sync_all().expect("fsync");
            std::fs::rename(&tmp, &target).expect("rename");
            dir_handle().sync_all().expect("dir fsync");
        }
    }
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

/// Ratio of the medians and median of the paired ratios of `a` over `b`.
fn ratios(a: &[f64], b: &[f64]) -> String {
    let paired = a.iter().zip(b).map(|(x, y)| x / y).collect();
    format!(
        "{:.2}× | {:.2}×",
        median(a.to_vec()) / median(b.to_vec()),
        median(paired)
    )
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
    // the floor's store sits next to the bench's store (`<dir>/.iterion`), on the same file system
    let floor_store = dir.path().join("floor-store");
    let floor_ws = dir.path().join("floor-ws");
    std::fs::create_dir_all(&floor_store).expect("floor store");
    std::fs::create_dir_all(&floor_ws).expect("floor workspace");
    let engine = Engine {
        socket: iterion_test_support::engine_socket().expect("engine socket"),
    };
    // warm-up of all three; the syncs are counted on a run after the first
    let first = iterion_run(dir.path(), home.path());
    let (syncs, how) = match count_syncs(dir.path(), home.path()) {
        Some((s, events)) => (
            s,
            format!(
                "counted by `strace -f -c -e trace=fsync,fdatasync` of one `iterion run`: {} fdatasync (the run \
                 has {events} events), {} fsync",
                s.appends,
                s.replacements * 2
            ),
        ),
        None => {
            let s = Syncs {
                appends: first.events.len(),
                replacements: FALLBACK_REPLACEMENTS,
            };
            (
                s,
                format!(
                    "strace missing: one append per event of a run ({}), {FALLBACK_REPLACEMENTS} replacements as \
                     last counted",
                    s.appends
                ),
            )
        }
    };
    docker_run(image);
    floor_run(&engine, image, &floor_ws, &floor_store, syncs, usize::MAX);
    // `BASELINE_BIN`: another iterion binary (an earlier build) as a fourth subject, for before/after
    let baseline = std::env::var("BASELINE_BIN").ok().filter(|b| !b.is_empty());
    if let Some(b) = &baseline {
        iterion_run_with(b, dir.path(), home.path(), None);
    }
    let subjects = if baseline.is_some() { 4 } else { 3 };
    let (mut it, mut dk, mut fl, mut runs, mut floor_phases) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut base, mut base_runs) = (Vec::new(), Vec::new());
    for i in 0..n {
        // the subjects rotate, so that none always comes first
        for k in 0..subjects {
            match (i + k) % subjects {
                3 => {
                    let b = baseline.as_deref().unwrap_or(BIN);
                    let r = iterion_run_with(b, dir.path(), home.path(), None);
                    base.push(r.wall);
                    base_runs.push(r);
                }
                0 => {
                    let r = iterion_run(dir.path(), home.path());
                    it.push(r.wall);
                    runs.push(r);
                }
                1 => dk.push(docker_run(image)),
                _ => {
                    let (wall, phases) = floor_run(&engine, image, &floor_ws, &floor_store, syncs, i);
                    fl.push(wall);
                    floor_phases.push(phases);
                }
            }
        }
    }
    let placement = runs[0]
        .events
        .iter()
        .find(|e| e["type"] == "sandbox_started")
        .map(|e| e["data"]["enforced_egress"].to_string())
        .unwrap_or_default();
    println!("\n## one-tool-node sandboxed run vs docker run --rm vs the floor (median of {n}, paired)\n");
    println!(
        "floor syncs: {} event appends (write + fdatasync) and {} atomic run.json replacements \
         (write + fsync + rename + dir fsync) = {} syncs; {how}\n",
        syncs.appends,
        syncs.replacements,
        syncs.appends + 2 * syncs.replacements
    );
    println!("| subject | median ms |");
    println!("|---|---:|");
    println!(
        "| floor (engine API: create, start, one exec, forced remove; plus the store's syncs) | {:.0} |",
        ms(median(fl.clone()))
    );
    println!(
        "| `docker run --rm --init --network none IMAGE echo hi` | {:.0} |",
        ms(median(dk.clone()))
    );
    println!(
        "| `iterion run` (one tool node, enforced egress: {placement}) | {:.0} |",
        ms(median(it.clone()))
    );
    println!("\n| ratio | of the medians | median of the paired ratios |");
    println!("|---|---:|---:|");
    println!("| iterion / docker | {} |", ratios(&it, &dk));
    println!("| floor / docker | {} |", ratios(&fl, &dk));
    println!("| iterion / floor | {} |", ratios(&it, &fl));
    println!("\n| floor phase | median ms |");
    println!("|---|---:|");
    for (k, name) in FLOOR_PHASES.iter().enumerate() {
        let v: Vec<f64> = floor_phases.iter().map(|p| ms(p[k])).collect();
        println!("| {name} | {:.1} |", median(v));
    }
    if let Some(b) = &baseline {
        println!(
            "\nbaseline `{b}`: {:.0} ms; (of the medians | median of the paired ratios) iterion / baseline \
             {}, baseline / floor {}",
            ms(median(base.clone())),
            ratios(&it, &base),
            ratios(&base, &fl)
        );
    }
    let phase_header = if baseline.is_some() {
        "| phase (from the run's events) | median ms | baseline median ms |\n|---|---:|---:|"
    } else {
        "| phase (from the run's events) | median ms |\n|---|---:|"
    };
    println!("\n{phase_header}");
    let phase = |runs: &[Run], from: &str, to: &str| {
        median(runs.iter().map(|r| ms(point(r, to) - point(r, from))).collect())
    };
    for (name, from, to) in PHASES {
        if baseline.is_some() {
            println!(
                "| {name} | {:.0} | {:.0} |",
                phase(&runs, from, to),
                phase(&base_runs, from, to)
            );
        } else {
            println!("| {name} | {:.0} |", phase(&runs, from, to));
        }
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

/// The cost of gVisor: the same one-node run under the engine's default runtime and under gVisor
/// (`--sandbox-runtime gvisor`), paired (rotating which goes first), median of `n`. Skipped with a notice when
/// the engine lists no `runsc`.
fn gvisor(image: &str, n: usize) {
    match iterion_test_support::gvisor::engine_runtimes() {
        Ok(r) if r.iter().any(|n| n == "runsc") => {}
        other => {
            println!("\n## gVisor\n\nskipped: the engine lists no runsc runtime ({other:?})");
            return;
        }
    }
    let dir = tempfile::tempdir().expect("dir");
    let home = tempfile::tempdir().expect("home");
    std::fs::write(
        dir.path().join("w.bot"),
        format!(
            "tool hi:\n  command: `cat /proc/version`\n\nworkflow w:\n  entry: hi\n  sandbox:\n    image: \"{image}\"\n    network:\n      mode: allowlist\n  hi -> done\n"
        ),
    )
    .expect("write");
    let subjects: [&[&str]; 2] = [
        &["--sandbox-runtime", "default"],
        &["--sandbox-runtime", "gvisor"],
    ];
    for s in subjects {
        iterion_run_args(dir.path(), home.path(), s);
    }
    let (mut walls, mut starts, mut nodes) = ([vec![], vec![]], [vec![], vec![]], [vec![], vec![]]);
    for i in 0..n {
        for k in 0..2 {
            let j = (i + k) % 2;
            let r = iterion_run_args(dir.path(), home.path(), subjects[j]);
            walls[j].push(r.wall);
            if let (Some(net), Some(started), Some(done)) = (
                at(&r, "sandbox_network_started"),
                at(&r, "sandbox_started"),
                at(&r, "run_finished"),
            ) {
                starts[j].push(started - net);
                nodes[j].push(done - started);
            }
        }
    }
    println!("\n## gVisor against the default runtime (one tool node, allowlist, median of {n}, paired)\n");
    println!("| | default ms | gVisor ms | ratio of medians | median of paired ratios |");
    println!("|---|---:|---:|---:|---:|");
    for (label, v) in [
        ("whole run", &walls),
        ("create + start + checks", &starts),
        ("the node (one exec)", &nodes),
    ] {
        let (a, b) = (median(v[0].clone()), median(v[1].clone()));
        println!(
            "| {label} | {:.0} | {:.0} | {} |",
            ms(a),
            ms(b),
            ratios(&v[1], &v[0])
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; no other argument is used
    let image = iterion_test_support::docker_image::ensure_test_image().expect("the local test image");
    let n = iters("ITERS", 10);
    println!("load before: {}", load());
    let t = Instant::now();
    if std::env::var("GVISOR_ONLY").is_ok_and(|v| v == "1") {
        gvisor(&image, n);
        return;
    }
    lifecycle(&image, n);
    builds(&image, iters("BUILD_ITERS", 5));
    gvisor(&image, n);
    println!("\nload after: {} ({:.0} s)", load(), t.elapsed().as_secs_f64());
}
