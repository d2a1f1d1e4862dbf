//! `iterion sandbox doctor --strict --probe` on the real engine (06 §6, vectors D29, D31, D32), through the
//! binary. Each test needs an engine: skipped with a notice on a laptop without one, a failure under `CI`.
//! D30 (a driver that leaves the sandbox on the default network) is a unit test of `doctor::probes`: the
//! test double cannot be selected from the command line.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

const PROBES: [&str; 9] = [
    "probe_sandbox_start",
    "probe_direct_egress",
    "probe_host_services",
    "probe_dns",
    "probe_metadata",
    "probe_denied_host",
    "probe_proxy_env",
    "probe_secret_env",
    "probe_hardening",
];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/doctor")
        .join(name)
}

fn ready(test: &str) -> bool {
    if !iterion_test_support::engine_required(test) {
        return false;
    }
    iterion_test_support::docker_image::ensure_test_image().expect("the local test image");
    true
}

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
    /// What the doctor left in its temporary directory (the workspace, the proxy socket): nothing.
    leftovers: Vec<String>,
}

/// Runs `iterion sandbox doctor --strict --probe <extra…> <workflow>` with its own data directory and work
/// dir; `env` is added to and `remove` taken from the inherited environment.
fn doctor(workflow: &Path, extra: &[&str], env: &[(&str, &str)], remove: &[&str]) -> Outcome {
    let home = tempfile::tempdir().expect("tempdir");
    let work = tempfile::tempdir().expect("tempdir");
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut c = Command::new(env!("CARGO_BIN_EXE_iterion"));
    c.args(["sandbox", "doctor", "--strict", "--probe"])
        .args(extra)
        .arg("--work-dir")
        .arg(work.path())
        .arg(workflow)
        .env("ITERION_HOME", home.path())
        .env("TMPDIR", tmp.path())
        .env("NO_COLOR", "1");
    for (k, v) in env {
        c.env(k, v);
    }
    for k in remove {
        c.env_remove(k);
    }
    let out = c.output().expect("run iterion");
    let leftovers = std::fs::read_dir(tmp.path())
        .expect("read the temporary directory")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    Outcome {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        leftovers,
    }
}

fn json(o: &Outcome) -> Value {
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", o.stdout, o.stderr))
}

fn probe<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {doc}"))
}

fn engine_get(path: &str) -> (u16, Value) {
    let socket = iterion_test_support::engine_socket().expect("a unix engine socket");
    let r =
        iterion_test_support::docker_http::request(&socket, "GET", path, None, &[], Duration::from_secs(10))
            .expect("engine request");
    (r.status, serde_json::from_slice(&r.body).unwrap_or(Value::Null))
}

/// The throwaway container named by `probe_sandbox_start` no longer exists, and no container carries the
/// doctor-probe component label with its run id.
fn assert_sandbox_gone(doc: &Value) {
    let msg = probe(doc, "probe_sandbox_start")["message"]
        .as_str()
        .unwrap_or("");
    let name = msg
        .strip_prefix("started ")
        .and_then(|m| m.split_whitespace().next())
        .unwrap_or_else(|| panic!("no container name in '{msg}'"));
    assert!(
        name.starts_with("iterion-doctor-") && name.len() == "iterion-doctor-".len() + 8,
        "{name}"
    );
    assert_eq!(
        engine_get(&format!("/containers/{name}/json")).0,
        404,
        "{name} was left behind"
    );
    // by label too (other tests may run their own probe sandboxes meanwhile: only this run's id counts)
    let run_id = name.trim_start_matches("iterion-");
    let filter = iterion_test_support::docker_http::encode_component(&format!(
        r#"{{"label":["iterion.io/component=doctor-probe","iterion.io/run-id={run_id}"]}}"#
    ));
    let (status, list) = engine_get(&format!("/containers/json?all=1&filters={filter}"));
    assert_eq!(status, 200);
    assert_eq!(list, Value::Array(Vec::new()), "doctor-probe containers remain");
}

#[test]
fn d29_every_probe_passes_on_a_relay_placement_sandbox() {
    if !ready("d29_every_probe_passes_on_a_relay_placement_sandbox") {
        return;
    }
    let o = doctor(&fixture("ok-good.bot"), &["--json"], &[], &[]);
    let doc = json(&o);
    assert_eq!(doc["egress_placement"], "relay");
    for id in PROBES {
        let c = probe(&doc, id);
        assert_eq!(c["status"], "pass", "{id}: {} ({})", c["message"], o.stderr);
    }
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_sandbox_gone(&doc);
    assert_eq!(
        o.leftovers,
        Vec::<String>::new(),
        "workspace or proxy socket left behind"
    );
}

#[test]
fn d31_an_operator_secret_is_intended() {
    if !ready("d31_an_operator_secret_is_intended") {
        return;
    }
    let o = doctor(
        &fixture("ok-good.bot"),
        &["--json", "--sandbox-env", "OPENAI_API_KEY"],
        &[("OPENAI_API_KEY", "sk-doctor-d31-not-a-real-key")],
        &[],
    );
    let doc = json(&o);
    let c = probe(&doc, "probe_secret_env");
    assert_eq!(c["status"], "pass", "{}", c["message"]);
    // The probe saw the variable inside the sandbox and the doctor attributed it to the operator layer.
    assert!(
        c["message"]
            .as_str()
            .is_some_and(|m| m.contains("OPENAI_API_KEY (operator)")),
        "{}",
        c["message"]
    );
    assert!(!o.stdout.contains("sk-doctor-d31") && !o.stderr.contains("sk-doctor-d31"));
    assert_sandbox_gone(&doc);
}

#[test]
fn d32_an_image_env_secret_warns_and_a_host_value_fails() {
    if !ready("d32_an_image_env_secret_warns_and_a_host_value_fails") {
        return;
    }
    let image = "iterion-test/busybox-aws-env:latest";
    let socket = iterion_test_support::engine_socket().expect("a unix engine socket");
    iterion_test_support::docker_image::build_image(
        &socket,
        image,
        "FROM iterion-test/busybox:latest\nENV AWS_SECRET_ACCESS_KEY=x\n",
    )
    .expect("build the derived image");
    let dir = tempfile::tempdir().expect("tempdir");
    let wf = dir.path().join("aws.bot");
    let src = std::fs::read_to_string(fixture("ok-good.bot")).expect("fixture");
    std::fs::write(&wf, src.replace("iterion-test/busybox:latest", image)).expect("write workflow");

    let o = doctor(&wf, &["--json"], &[], &["AWS_SECRET_ACCESS_KEY"]);
    let doc = json(&o);
    let c = probe(&doc, "probe_secret_env");
    assert_eq!(c["status"], "warn", "{}", c["message"]);
    assert!(
        c["message"]
            .as_str()
            .is_some_and(|m| m.contains("image's own ENV: AWS_SECRET_ACCESS_KEY")),
        "{}",
        c["message"]
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_sandbox_gone(&doc);

    // The same value on the host, with no operator or workflow entry: indistinguishable from a leak.
    let o = doctor(&wf, &["--json"], &[("AWS_SECRET_ACCESS_KEY", "x")], &[]);
    let doc = json(&o);
    let c = probe(&doc, "probe_secret_env");
    assert_eq!(c["status"], "fail", "{}", c["message"]);
    assert_eq!(o.code, 1);
    assert_sandbox_gone(&doc);
}

/// Replaces the value after each `marker` up to the first character in `end` with `with`.
fn blank(s: &str, marker: &str, end: &[char], with: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(marker) {
        out.push_str(&rest[..i + marker.len()]);
        rest = &rest[i + marker.len()..];
        let j = rest.find(|c| end.contains(&c)).unwrap_or(rest.len());
        out.push_str(with);
        rest = &rest[j..];
    }
    out.push_str(rest);
    out
}

/// Removes what changes between runs and hosts: container name and id, decision ids, the host's addresses
/// and port, the number of name servers.
fn redact(s: &str) -> String {
    const DENIED: &str = "iterion-doctor-probe.invalid";
    let s = s.replace(DENIED, "\u{0}");
    let s = blank(&s, "iterion-doctor-", &[' '], "<id>").replace('\u{0}', DENIED);
    let s = blank(&s, "<id> (", &[')'], "<container>");
    let s = blank(&s, "decision ", &[' '], "<decision>");
    let s = blank(&s, "doctor's port (", &[')'], "<addresses>");
    blank(&s, "no resolver reachable (", &[' '], "<n>")
}

#[test]
fn probe_run_output_snapshots() {
    if !ready("probe_run_output_snapshots") {
        return;
    }
    let o = doctor(&fixture("ok-good.bot"), &[], &[], &[]);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let lines: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|id| id.starts_with("probe_"))
        })
        .collect();
    assert_eq!(lines.len(), PROBES.len(), "{}", o.stdout);
    insta::assert_snapshot!("probe_human", redact(&lines.join("\n")));

    let o = doctor(&fixture("ok-good.bot"), &["--json"], &[], &[]);
    let doc = json(&o);
    let probes: Vec<Value> = doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["id"].as_str().is_some_and(|i| i.starts_with("probe_")))
        .map(|c| {
            let mut c = c.clone();
            c["duration_ms"] = Value::from(0);
            c["message"] = Value::from(redact(c["message"].as_str().unwrap_or("")));
            c
        })
        .collect();
    insta::assert_json_snapshot!("probe_json", probes);
    assert_sandbox_gone(&doc);
}

#[test]
fn sandbox_probe_is_a_hidden_command_of_the_cli() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_iterion"))
            .args(args)
            .output()
            .expect("run iterion");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = run(&["__sandbox-probe", "start", "--json"]);
    assert_eq!(code, Some(0));
    assert_eq!(out.trim(), r#"{"probe":"start","ok":true}"#);
    let (code, out) = run(&["__sandbox-probe", "secret-env", "--rule", "glob:X"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains(r#""error":"#), "{out}");
    let (_, help) = run(&["--help"]);
    assert!(!help.contains("__sandbox-probe"), "{help}");
}

/// `ITERION_SANDBOX_PREFLIGHT=probe` runs the battery with the probes before the run: a probe warning is
/// logged and the run proceeds; a probe failure stops it with exit 2 before any run record exists.
#[test]
fn preflight_probe_runs_the_boundary_probes() {
    if !ready("preflight_probe_runs_the_boundary_probes") {
        return;
    }
    let image = "iterion-test/busybox-aws-env:latest";
    let socket = iterion_test_support::engine_socket().expect("a unix engine socket");
    iterion_test_support::docker_image::build_image(
        &socket,
        image,
        "FROM iterion-test/busybox:latest\nENV AWS_SECRET_ACCESS_KEY=x\n",
    )
    .expect("build the derived image");
    let dir = tempfile::tempdir().expect("tempdir");
    let wf = dir.path().join("aws.bot");
    let src = std::fs::read_to_string(fixture("ok-good.bot")).expect("fixture");
    std::fs::write(&wf, src.replace("iterion-test/busybox:latest", image)).expect("write workflow");
    let run = |host_value: Option<&str>| {
        let home = tempfile::tempdir().expect("tempdir");
        let store = home.path().join("store");
        let mut c = Command::new(env!("CARGO_BIN_EXE_iterion"));
        c.arg("run")
            .arg(&wf)
            .arg("--store-dir")
            .arg(&store)
            .current_dir(dir.path())
            .env("ITERION_HOME", home.path())
            .env("ITERION_SANDBOX_PREFLIGHT", "probe")
            .env("ITERION_SANDBOX_PULL_POLICY", "never");
        match host_value {
            Some(v) => c.env("AWS_SECRET_ACCESS_KEY", v),
            None => c.env_remove("AWS_SECRET_ACCESS_KEY"),
        };
        let out = c.output().expect("run iterion");
        let runs = std::fs::read_dir(&store).map(|d| d.count()).unwrap_or(0);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            runs,
        )
    };
    let (code, err, _) = run(None);
    assert!(
        err.contains(
            "sandbox preflight: WARN probe_secret_env: deny-class names set by the image's own ENV: AWS_SECRET_ACCESS_KEY"
        ),
        "{err}"
    );
    assert_eq!(code, Some(0), "{err}");
    let (code, err, runs) = run(Some("x"));
    assert!(err.contains("sandbox preflight: FAIL probe_secret_env:"), "{err}");
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(runs, 0, "no run record after a failed pre-flight");
}
