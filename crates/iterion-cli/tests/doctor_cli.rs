//! `iterion sandbox doctor` as a binary: the exit-code table and the vectors of 06 §13 that run
//! without an engine, then report and strict mode against the real engine (skipped visibly without one,
//! a failure under CI).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/doctor")
        .join(name)
}

/// Runs the doctor with a clean sandbox environment plus `env`.
fn doctor(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_iterion"));
    c.arg("sandbox").arg("doctor").args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("ITERION_") {
            c.env_remove(k);
        }
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run iterion")
}

/// No engine reachable: both candidate lists point at a missing socket.
fn no_engine(dir: &Path) -> Vec<(String, String)> {
    let sock = format!("unix://{}", dir.join("absent.sock").display());
    vec![
        ("DOCKER_HOST".into(), sock.clone()),
        ("CONTAINER_HOST".into(), sock),
        ("XDG_RUNTIME_DIR".into(), dir.display().to_string()),
        ("HOME".into(), dir.display().to_string()),
    ]
}

fn with(pairs: &[(String, String)]) -> Vec<(&str, &str)> {
    pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

fn status_of(doc: &serde_json::Value, id: &str) -> String {
    doc["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id}"))["status"]
        .as_str()
        .expect("status")
        .to_string()
}

#[test]
fn usage_errors_exit_2() {
    let good = fixture("ok-good.bot");
    let good = good.to_str().expect("utf-8");
    // D7 … D10, D13.
    assert_eq!(code(&doctor(&["--strict", "does-not-exist.bot"], &[])), 2);
    assert_eq!(code(&doctor(&["--strict", good, "--target", "nowhere"], &[])), 2);
    assert_eq!(code(&doctor(&[good], &[])), 2);
    assert_eq!(code(&doctor(&["--probe"], &[])), 2);
    assert_eq!(code(&doctor(&["--target", "local"], &[])), 2);
    assert_eq!(
        code(&doctor(&["--strict"], &[("ITERION_SANDBOX_DEFAULT", "docker")])),
        2
    );
    assert_eq!(code(&doctor(&["--strict", "--sandbox-driver", "lxc"], &[])), 2);
    assert_eq!(
        code(&doctor(&["--strict"], &[("ITERION_SANDBOX_DRIVER", "lxc")])),
        2
    );
    assert_eq!(
        code(&doctor(&["--strict", "--work-dir", "/nonexistent-dir"], &[])),
        2
    );
}

#[test]
fn d11_lexical_errors_print_positions_and_exit_2() {
    let f = fixture("err-unterminated.bot");
    let o = doctor(&["--strict", f.to_str().expect("utf-8"), "--json"], &[]);
    assert_eq!(code(&o), 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("err-unterminated.bot:3:12: error[E004]"), "{err}");
    // --json: a JSON error object on stdout too (it used to print nothing there)
    let doc = json(&o);
    assert_eq!(doc["exit"], 2);
    assert!(
        doc["error"].as_str().unwrap_or_default().contains("error[E004]"),
        "{doc}"
    );
    let o = doctor(&["--strict", f.to_str().expect("utf-8")], &[]);
    assert_eq!(code(&o), 2);
    assert!(o.stdout.is_empty(), "without --json nothing goes to stdout");
}

#[test]
fn d14_d15_without_engine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = no_engine(dir.path());
    let good = fixture("ok-good.bot");
    let good = good.to_str().expect("utf-8");
    let o = doctor(&["--strict", good, "--json"], &with(&env));
    assert_eq!(code(&o), 1);
    let doc = json(&o);
    assert_eq!(status_of(&doc, "driver_available"), "fail");
    assert_eq!(status_of(&doc, "engine_reachable"), "fail");
    assert_eq!(doc["exit_code"], 1);
    let o = doctor(&["--strict", good, "--json", "--target", "local"], &with(&env));
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stdout));
    let doc = json(&o);
    assert_eq!(status_of(&doc, "driver_available"), "warn");
    assert_eq!(status_of(&doc, "engine_reachable"), "skip");
    // Report mode without an engine still exits 0 and names noop.
    let o = doctor(&["--json"], &with(&env));
    assert_eq!(code(&o), 0);
    assert_eq!(json(&o)["selected_driver"], "noop");
}

#[test]
fn d23_bad_timeout_warns_and_uses_the_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut env = no_engine(dir.path());
    env.push(("ITERION_SANDBOX_DOCTOR_TIMEOUT".into(), "banana".into()));
    let o = doctor(&[], &with(&env));
    assert_eq!(code(&o), 0);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("ITERION_SANDBOX_DOCTOR_TIMEOUT"), "{err}");
    // in strict mode the warning is one of the report's warnings, in the summary and the JSON document
    let f = fixture("ok-sandbox-auto.bot");
    let o = doctor(&["--strict", f.to_str().expect("utf-8")], &with(&env));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("WARN  settings"), "{out}");
    let o = doctor(&["--strict", f.to_str().expect("utf-8"), "--json"], &with(&env));
    let doc = json(&o);
    let warnings = doc["warnings"].as_array().expect("warnings");
    assert!(warnings[0].as_str().unwrap().contains("banana"), "{doc:#}");
    let counted = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "warn")
        .count();
    assert_eq!(doc["summary"]["warn"], counted + 1, "{doc:#}");
}

#[test]
fn strict_without_probe_says_what_it_did_not_try() {
    if !iterion_test_support::engine_required("strict_without_probe_says_what_it_did_not_try") {
        return;
    }
    let f = fixture("ok-sandbox-auto.bot");
    let o = doctor(&["--strict", f.to_str().expect("utf-8")], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("add --probe"), "{out}");
}

#[test]
fn d1_d2_report_mode_on_the_engine() {
    if !iterion_test_support::engine_required("d1_d2_report_mode_on_the_engine") {
        return;
    }
    let o = doctor(&[], &[]);
    assert_eq!(code(&o), 0);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("iterion sandbox — doctor report\n"), "{out}");
    assert!(out.contains("selected driver:"), "{out}");
    let o = doctor(&["--json"], &[]);
    assert_eq!(code(&o), 0);
    let doc = json(&o);
    assert_eq!(doc["schema"], "iterion.sandbox.doctor/1");
    assert_eq!(doc["strict"], false);
    assert!(doc["summary"].is_null() && doc.get("checks").is_none());
}

#[test]
fn d3_to_d6_strict_on_the_engine() {
    if !iterion_test_support::engine_required("d3_to_d6_strict_on_the_engine") {
        return;
    }
    // ok-good.bot names the local test image: `image_resolvable` passes only when it is present.
    iterion_test_support::docker_image::ensure_test_image().expect("the local test image");
    let run = |f: &str| {
        let p = fixture(f);
        let o = doctor(&["--strict", p.to_str().expect("utf-8"), "--json"], &[]);
        (code(&o), json(&o))
    };
    let (c, doc) = run("ok-good.bot");
    assert_eq!(c, 0, "{doc:#}");
    assert_eq!(status_of(&doc, "network_policy_syntax"), "warn");
    assert_eq!(status_of(&doc, "image_resolvable"), "pass");
    assert_eq!(status_of(&doc, "egress_enforcement"), "pass");
    let (c, doc) = run("err-bad-rule.bot");
    assert_eq!((c, status_of(&doc, "network_policy_syntax")), (1, "fail".into()));
    let (c, doc) = run("err-bad-preset.bot");
    assert_eq!((c, status_of(&doc, "network_policy_syntax")), (1, "fail".into()));
    let (c, doc) = run("err-docker-sock.bot");
    assert_eq!((c, status_of(&doc, "spec_safety")), (1, "fail".into()));
    let (c, doc) = run("err-unknown-edge.bot");
    assert_eq!((c, status_of(&doc, "workflow_compiles")), (1, "fail".into()));
    let (c, doc) = run("ok-sandbox-none.bot");
    assert_eq!((c, status_of(&doc, "sandbox_active")), (0, "warn".into()));
}

#[test]
fn d27_forced_noop_exits_0() {
    let f = fixture("ok-sandbox-auto.bot");
    let o = doctor(
        &[
            "--strict",
            f.to_str().expect("utf-8"),
            "--sandbox-driver",
            "noop",
            "--json",
        ],
        &[],
    );
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(status_of(&json(&o), "driver_available"), "warn");
}
