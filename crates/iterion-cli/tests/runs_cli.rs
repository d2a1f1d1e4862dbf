//! `iterion runs list` / `iterion runs show` against a store made in a temporary directory.
use iterion_runtime::events::{NodeKind, NodeStarted, PlacementKind, RunFailed, RunStarted};
use iterion_runtime::failure::{FailureCode, FailurePhase};
use iterion_runtime::store::Transition;
use iterion_runtime::store::{Checkpoint, LaunchInputs, LogClock, NewRun, Owner, RunId, Store};
use std::path::Path;
use std::process::{Command, Output};

fn new_run(id: &str, created: &str) -> NewRun {
    NewRun {
        id: id.to_owned(),
        workflow_name: "release_gate".into(),
        file_path: "/w/app/release.bot".into(),
        workflow_bytes: b"workflow release_gate {}".to_vec(),
        inputs: LaunchInputs::default(),
        work_dir: "/w/app".into(),
        env: Default::default(),
        iterion_version: "0.1.0".into(),
        owner: Owner::current(),
        now: created.into(),
    }
}

/// A store with a finished run `a` and a resumable failed run `b` (with events).
fn fixture(root: &Path) -> Store {
    let store = Store::create(root).unwrap().with_log_clock(LogClock::utc());
    let mut a = store
        .create_run(&RunId::parse("a").unwrap(), new_run("a", "2026-01-14T09:00:00Z"))
        .unwrap();
    a.transition(Transition::Finish).unwrap();
    a.update(|d| {
        d.finished_at = Some("2026-01-14T09:03:07Z".into());
    })
    .unwrap();
    let mut b = store
        .create_run(&RunId::parse("b").unwrap(), new_run("b", "2026-01-14T10:00:00Z"))
        .unwrap();
    b.events()
        .append_at(
            &RunStarted {
                workflow: "release_gate".into(),
                file: "/w/app/release.bot".into(),
                sandboxed: false,
                driver: None,
            }
            .into(),
            at(1),
        )
        .unwrap();
    b.events()
        .append_at(
            &NodeStarted::new("build", NodeKind::Tool, 0, PlacementKind::Host).into(),
            at(2),
        )
        .unwrap();
    b.events()
        .append_at(
            &RunFailed::new(
                FailureCode::SandboxSetupTimeout,
                "post_create did not finish within 100ms",
            )
            .phase(FailurePhase::PostCreate)
            .timeout("100ms")
            .into(),
            at(3),
        )
        .unwrap();
    b.transition(Transition::FailResumable {
        code: FailureCode::SandboxSetupTimeout,
        error: "post_create did not finish within 100ms".into(),
        phase: Some(FailurePhase::PostCreate),
        checkpoint: Some(Checkpoint::stub("build", Default::default())),
    })
    .unwrap();
    b.update(|d| d.finished_at = Some("2026-01-14T10:00:03.5Z".into()))
        .unwrap();
    store
}

/// 2026-01-14T10:00:00Z plus `s` seconds.
fn at(s: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_768_384_800 + s)
}

fn iterion(args: &[&str], home: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iterion"))
        .args(args)
        .env_clear()
        .env("HOME", home)
        .current_dir(home)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[test]
fn list_prints_a_table() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    fixture(&store);
    let o = iterion(
        &["runs", "list", "--store-dir", store.to_str().unwrap()],
        tmp.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let cols = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        cols(lines[0]),
        ["ID", "NAME", "STATUS", "CODE", "WORKFLOW", "STARTED", "DURATION"]
    );
    let a = cols(lines[1]);
    assert_eq!(a[0], "a");
    assert_eq!(
        &a[2..],
        ["finished", "-", "release_gate", "2026-01-14T09:00:00Z", "3m07s"]
    );
    let b = cols(lines[2]);
    assert_eq!(b[0], "b");
    assert_eq!(b[2], "failed_resumable");
    assert_eq!(b[3], "SANDBOX_SETUP_TIMEOUT");
}

#[test]
fn list_json_is_one_object_per_run() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    fixture(&store);
    let o = iterion(
        &["runs", "list", "--json", "--store-dir", store.to_str().unwrap()],
        tmp.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["id"], "a");
    assert_eq!(rows[0]["status"], "finished");
    assert_eq!(rows[0]["duration_ms"], 187_000);
    assert_eq!(rows[1]["failure_code"], "SANDBOX_SETUP_TIMEOUT");
    assert_eq!(rows[1]["duration_ms"], 3500);
}

#[test]
fn list_of_an_empty_or_missing_store_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing-here");
    let o = iterion(
        &["runs", "list", "--store-dir", missing.to_str().unwrap()],
        tmp.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "");
    assert!(!missing.exists(), "listing must not create the store");
}

#[test]
fn list_defaults_to_the_data_dir_project_of_the_current_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path();
    let key = iterion_runtime::store::project_key(&home.to_string_lossy());
    fixture(&home.join(".iterion/projects").join(key));
    let o = iterion(&["runs", "list", "--json"], home);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 2, "{}", stdout(&o));
}

#[test]
fn show_prints_the_summary_and_events() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    fixture(&store);
    let o = iterion(
        &[
            "runs",
            "show",
            "b",
            "--events",
            "--store-dir",
            store.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("── Run: release_gate ──\n"), "{out}");
    assert!(out.contains("\n  Run ID:          b\n"), "{out}");
    assert!(out.contains("\n  Status:          failed_resumable\n"), "{out}");
    assert!(
        out.contains("\n  Code:            SANDBOX_SETUP_TIMEOUT\n"),
        "{out}"
    );
    assert!(out.contains("\n  Phase:           post_create\n"), "{out}");
    assert!(out.contains("\n  Checkpoint:      node build\n"), "{out}");
    assert!(out.contains("  run_started  {"), "{out}");
    assert!(
        out.contains("  node_started [build]  {\"kind\":\"tool\""),
        "{out}"
    );
    assert!(
        out.contains("run_failed  {\"error\":\"post_create did not finish within 100ms\""),
        "{out}"
    );
}

#[test]
fn human_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    fixture(&store);
    let s = store.to_str().unwrap();
    let tmp_str = tmp.path().to_str().unwrap();
    let list = iterion(&["runs", "list", "--store-dir", s], tmp.path());
    insta::assert_snapshot!("runs_list", stdout(&list));
    let show = iterion(&["runs", "show", "b", "--events", "--store-dir", s], tmp.path());
    insta::assert_snapshot!("runs_show_events", stdout(&show).replace(tmp_str, "[TMP]"));
}

#[test]
fn show_json_prints_the_document_then_the_stored_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    fixture(&store);
    let o = iterion(
        &[
            "runs",
            "show",
            "b",
            "--json",
            "--events",
            "--store-dir",
            store.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let mut lines = out.lines();
    let doc: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(doc["id"], "b");
    assert_eq!(doc["status"], "failed_resumable");
    assert_eq!(doc["checkpoint"]["node_id"], "build");
    let stored = std::fs::read_to_string(store.join("runs/b/events.jsonl")).unwrap();
    let rest: Vec<&str> = lines.collect();
    assert_eq!(
        rest,
        stored.lines().collect::<Vec<_>>(),
        "event lines identical to events.jsonl"
    );

    let o = iterion(
        &[
            "runs",
            "show",
            "a",
            "--json",
            "--store-dir",
            store.to_str().unwrap(),
        ],
        tmp.path(),
    );
    assert_eq!(stdout(&o).lines().count(), 1);
}

#[test]
fn unknown_run_exits_1_and_usage_errors_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    fixture(&store);
    let s = store.to_str().unwrap();
    let o = iterion(&["runs", "show", "nope", "--store-dir", s], tmp.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("run nope not found in"), "{}", stderr(&o));
    assert_eq!(stdout(&o), "");

    let o = iterion(&["runs", "show", "../a", "--store-dir", s], tmp.path());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = iterion(&["runs", "show", "--store-dir", s], tmp.path());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = iterion(&["runs", "list", "--bogus"], tmp.path());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = iterion(&["runs"], tmp.path());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn help_exits_0() {
    let tmp = tempfile::tempdir().unwrap();
    let o = iterion(&["runs", "list", "--help"], tmp.path());
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("--store-dir"));
}
