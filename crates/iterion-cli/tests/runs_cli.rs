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
    // newest first
    let a = cols(lines[2]);
    assert_eq!(a[0], "a");
    assert_eq!(
        &a[2..],
        ["finished", "-", "release_gate", "2026-01-14T09:00:00Z", "3m07s"]
    );
    let b = cols(lines[1]);
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
    // newest first
    assert_eq!(rows[1]["id"], "a");
    assert_eq!(rows[1]["status"], "finished");
    assert_eq!(rows[1]["duration_ms"], 187_000);
    assert_eq!(rows[0]["failure_code"], "SANDBOX_SETUP_TIMEOUT");
    assert_eq!(rows[0]["duration_ms"], 3500);
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
    // with --json, stdout always carries a JSON document
    let o = iterion(&["runs", "show", "nope", "--json", "--store-dir", s], tmp.path());
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["exit"], 1);
    assert!(v["error"].as_str().unwrap().contains("run nope not found"), "{v}");
    let o = iterion(&["runs", "logs", "nope", "--json", "--store-dir", s], tmp.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(serde_json::from_str::<serde_json::Value>(stdout(&o).trim()).is_ok());

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

/// A store with three runs whose ids share prefixes: `abcd1234` (finished), `abcd5678` (failed_resumable) and
/// `ffff0000` (finished, newest).
fn prefixed(root: &Path) -> (Store, Vec<String>) {
    let store = Store::create(root).unwrap().with_log_clock(LogClock::utc());
    let mut names = Vec::new();
    for (id, created, ok) in [
        ("abcd1234", "2026-01-14T09:00:00Z", true),
        ("abcd5678", "2026-01-14T10:00:00Z", false),
        ("ffff0000", "2026-01-14T11:00:00Z", true),
    ] {
        let mut r = store
            .create_run(&RunId::parse(id).unwrap(), new_run(id, created))
            .unwrap();
        if ok {
            r.transition(Transition::Finish).unwrap();
        } else {
            r.transition(Transition::FailResumable {
                code: FailureCode::ExecutionFailed,
                error: "boom".into(),
                phase: None,
                checkpoint: Some(Checkpoint::stub("build", Default::default())),
            })
            .unwrap();
        }
        names.push(r.document().name.clone());
    }
    (store, names)
}

#[test]
fn runs_are_found_by_id_name_or_unique_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let (_, names) = prefixed(&store);
    let s = store.to_str().unwrap();
    let show = |q: &str| iterion(&["runs", "show", q, "--json", "--store-dir", s], tmp.path());
    let id_of = |o: &Output| -> String {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["id"].as_str().unwrap().to_owned()
    };
    assert_eq!(id_of(&show("abcd5678")), "abcd5678");
    assert_eq!(id_of(&show(&names[1])), "abcd5678", "by name");
    assert_eq!(id_of(&show("abcd1")), "abcd1234", "by unique prefix");
    let o = show("abcd");
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("'abcd' matches 2 runs") && err.contains("abcd1234, abcd5678"),
        "{err}"
    );
    let o = show("nothing-like-it");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("hint: `iterion runs list`"), "{}", stderr(&o));
    // too short to be taken as a prefix
    assert_eq!(show("abc").status.code(), Some(1));
    // resume resolves the same way (and refuses a finished run by its full id)
    let o = iterion(&["resume", &names[2], "--store-dir", s], tmp.path());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("ffff0000"), "{}", stderr(&o));
    let o = iterion(&["resume", "zzzz", "--store-dir", s], tmp.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("hint: `iterion runs list`"), "{}", stderr(&o));
}

#[test]
fn list_is_newest_first_with_limit_and_status() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    prefixed(&store);
    let s = store.to_str().unwrap();
    let ids = |args: &[&str]| -> Vec<String> {
        let mut a = vec!["runs", "list", "--json", "--store-dir", s];
        a.extend(args);
        let o = iterion(&a, tmp.path());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stdout(&o)
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(ids(&[]), ["ffff0000", "abcd5678", "abcd1234"]);
    assert_eq!(ids(&["--limit", "1"]), ["ffff0000"]);
    assert_eq!(ids(&["--status", "finished"]), ["ffff0000", "abcd1234"]);
    assert_eq!(
        ids(&["--status", "failed-resumable", "--limit", "5"]),
        ["abcd5678"]
    );
    let o = iterion(
        &["runs", "list", "--status", "done", "--store-dir", s],
        tmp.path(),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("invalid status 'done'"), "{}", stderr(&o));
}

/// The project anchor: a run started from anywhere in a repository lands in the store of its root, where
/// `runs list` (from the root or a sub-folder) finds it.
#[test]
fn a_run_and_runs_list_share_the_repository_store() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("workflows")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir(repo.join(".git")).unwrap();
    std::fs::write(
        repo.join("workflows/x.bot"),
        "tool t:\n  command: `true`\n\nworkflow x:\n  entry: t\n  sandbox: none\n  t -> done\n",
    )
    .unwrap();
    let at = |dir: &Path, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_iterion"))
            .args(args)
            .env_clear()
            .env("HOME", &home)
            .current_dir(dir)
            .output()
            .unwrap()
    };
    let o = at(&repo, &["run", "workflows/x.bot"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for dir in [repo.clone(), repo.join("workflows")] {
        let o = at(&dir, &["runs", "list", "--json"]);
        assert_eq!(
            stdout(&o).lines().count(),
            1,
            "from {}: {}",
            dir.display(),
            stdout(&o)
        );
    }
    // a work dir that does not exist is a usage error, before anything runs
    let o = at(
        &repo,
        &["run", "workflows/x.bot", "--work-dir", "/nonexistent/dir"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--work-dir /nonexistent/dir: not a directory"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn rm_removes_runs_by_name_and_refuses_one_in_progress() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let (store, names) = prefixed(&root);
    let s = root.to_str().unwrap();
    let o = iterion(&["runs", "rm", &names[0], "--store-dir", s], tmp.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("removed abcd1234"), "{}", stdout(&o));
    assert!(!root.join("runs/abcd1234").exists());
    // a process holds abcd5678
    let held = store.open_run("abcd5678", &Owner::current()).unwrap();
    let o = iterion(&["runs", "rm", "abcd5678", "--store-dir", s], tmp.path());
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("locked by another process"), "{}", stderr(&o));
    assert!(root.join("runs/abcd5678/run.json").is_file());
    drop(held);
    let o = iterion(&["runs", "rm", "abcd5678", "nope", "--store-dir", s], tmp.path());
    assert_eq!(o.status.code(), Some(1), "the unknown run fails the command");
    assert!(
        !root.join("runs/abcd5678").exists(),
        "the known run is removed anyway"
    );
    let o = iterion(&["runs", "rm", "../x", "--store-dir", s], tmp.path());
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn prune_lists_by_default_and_removes_with_yes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let (store, _) = prefixed(&root);
    // a run in progress is never selected
    store
        .create_run(
            &RunId::parse("running1").unwrap(),
            new_run("running1", "2026-01-14T08:00:00Z"),
        )
        .map(drop)
        .unwrap();
    let s = root.to_str().unwrap();
    let o = iterion(&["runs", "prune", "--store-dir", s], tmp.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("would remove 3 run(s)"), "{out}");
    assert!(!out.contains("running1"), "{out}");
    assert!(root.join("runs/abcd1234").exists(), "a dry run removed something");
    let o = iterion(
        &[
            "runs",
            "prune",
            "--status",
            "finished",
            "--older-than",
            "30d",
            "--json",
            "--store-dir",
            s,
        ],
        tmp.path(),
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["dry_run"], true);
    let ids: Vec<&str> = doc["selected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["abcd1234", "ffff0000"]);
    let o = iterion(
        &["runs", "prune", "--status", "finished", "--yes", "--store-dir", s],
        tmp.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!root.join("runs/abcd1234").exists() && !root.join("runs/ffff0000").exists());
    assert!(root.join("runs/abcd5678").exists() && root.join("runs/running1").exists());
    // nothing is that old
    let o = iterion(
        &["runs", "prune", "--older-than", "100000d", "--store-dir", s],
        tmp.path(),
    );
    assert!(stdout(&o).starts_with("no run to prune"), "{}", stdout(&o));
    for bad in [["--older-than", "soon"], ["--status", "done"]] {
        let mut a = vec!["runs", "prune", "--store-dir", s];
        a.extend(bad);
        assert_eq!(iterion(&a, tmp.path()).status.code(), Some(2), "{bad:?}");
    }
}

#[test]
fn rm_removes_the_worktree_a_run_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    let root = tmp.path().join("store");
    let store = Store::create(&root).unwrap();
    // a kept workspace (with a link out of it, never followed) and its host git dir
    let wt = root.join("worktrees/wt1");
    let gd = root.join("gitdirs/wt1");
    let precious = tmp.path().join("precious");
    for d in [&wt, &gd, &precious] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(precious.join("f"), "keep").unwrap();
    std::os::unix::fs::symlink(&precious, wt.join("link")).unwrap();
    std::fs::write(gd.join("iterion-run"), "wt1\n").unwrap();
    let mut r = store
        .create_run(
            &RunId::parse("wt1").unwrap(),
            new_run("wt1", "2026-01-14T09:00:00Z"),
        )
        .unwrap();
    r.update(|d| {
        d.worktree = true;
        d.work_dir = wt.to_string_lossy().into_owned();
        d.repo_root = Some(repo.to_string_lossy().into_owned());
    })
    .unwrap();
    r.transition(Transition::Cancel {
        reason: "test".into(),
        checkpoint: Some(Checkpoint::stub("build", Default::default())),
    })
    .unwrap();
    drop(r);
    let o = iterion(
        &["runs", "rm", "wt1", "--store-dir", root.to_str().unwrap()],
        tmp.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("(worktree "), "{}", stdout(&o));
    assert!(!wt.exists(), "the worktree is still there");
    assert!(!gd.exists(), "its host git dir is still there");
    assert_eq!(std::fs::read_to_string(precious.join("f")).unwrap(), "keep");
}

#[test]
fn show_does_not_call_a_sandbox_that_never_started_active() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let store = Store::create(&root).unwrap();
    let mut r = store
        .create_run(
            &RunId::parse("pull1").unwrap(),
            new_run("pull1", "2026-01-14T09:00:00Z"),
        )
        .unwrap();
    r.update(|d| {
        d.sandbox.active = true;
        d.sandbox.driver = Some("docker".into());
    })
    .unwrap();
    r.transition(Transition::FailResumable {
        code: FailureCode::SandboxStartFailed,
        error: "pull of 'x' failed".into(),
        phase: Some(FailurePhase::Pull),
        checkpoint: Some(Checkpoint::stub("build", Default::default())),
    })
    .unwrap();
    drop(r);
    let o = iterion(
        &["runs", "show", "pull1", "--store-dir", root.to_str().unwrap()],
        tmp.path(),
    );
    let out = stdout(&o);
    assert!(
        out.contains("\n  Sandbox:         docker · never started\n"),
        "{out}"
    );
}

#[test]
fn logs_follows_a_run_in_progress_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let wf = "tool slow:\n  command: `sleep 2; echo '{\"ok\": true}'`\n\nworkflow w:\n  entry: slow\n  slow -> done\n";
    std::fs::write(dir.path().join("w.bot"), wf).unwrap();
    let store = dir.path().join("store");
    let store_s = store.to_string_lossy().into_owned();
    let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_iterion"))
        .args(["run", "w.bot", "--sandbox", "none", "--store-dir", &store_s])
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // the run's directory appears once its record exists
    let runs = store.join("runs");
    let id = loop {
        if let Some(e) = std::fs::read_dir(&runs).ok().and_then(|mut rd| rd.next()) {
            break e.unwrap().file_name().to_string_lossy().into_owned();
        }
        assert!(
            run.try_wait().unwrap().is_none(),
            "the run ended before it was seen"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let out = iterion(&["runs", "logs", "-f", &id, "--store-dir", &store_s], dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("node_finished [slow]"), "{text}");
    assert!(text.contains("run_finished"), "{text}");
    // followed to the very end: the cleanup report is the last event of a run
    assert!(text.lines().last().unwrap().contains("sandbox_stopped"), "{text}");
    assert!(run.wait().unwrap().success());
    // without --follow: what is recorded, at once; --json: the stored lines
    let out = iterion(
        &["runs", "logs", "--json", &id, "--store-dir", &store_s],
        dir.path(),
    );
    let stored = std::fs::read_to_string(runs.join(&id).join("events.jsonl")).unwrap();
    assert_eq!(stdout(&out), stored);
    let out = iterion(&["runs", "logs", "nope", "--store-dir", &store_s], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

#[test]
fn a_running_run_whose_process_is_gone_says_so_and_how_to_clean_up() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let store = Store::create(&root).unwrap().with_log_clock(LogClock::utc());
    // `kill -9`: the record says running, nobody holds its lock any more
    store
        .create_run(
            &RunId::parse("gone0001").unwrap(),
            new_run("gone0001", "2026-01-14T08:00:00Z"),
        )
        .map(drop)
        .unwrap();
    // a live run: its process (this test) holds the lock
    let _live = store
        .create_run(
            &RunId::parse("live0001").unwrap(),
            new_run("live0001", "2026-01-14T09:00:00Z"),
        )
        .unwrap();
    let s = root.to_str().unwrap();
    let o = iterion(&["runs", "list", "--store-dir", s], tmp.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = |id: &str| out.lines().find(|l| l.starts_with(id)).unwrap().to_owned();
    assert!(line("gone0001").contains("running (owner gone)"), "{out}");
    assert!(!line("live0001").contains("owner gone"), "{out}");
    let err = stderr(&o);
    assert!(
        err.contains("run gone0001 says running but its process is gone: `iterion resume gone0001`"),
        "{err}"
    );
    assert!(!err.contains("live0001"), "{err}");
    let o = iterion(&["runs", "list", "--json", "--store-dir", s], tmp.path());
    let docs: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |id: &str| docs.iter().find(|d| d["id"] == id).unwrap()["owner_gone"].clone();
    assert_eq!(of("gone0001"), serde_json::json!(true));
    assert_eq!(of("live0001"), serde_json::json!(false));
    let o = iterion(&["runs", "show", "gone0001", "--store-dir", s], tmp.path());
    assert!(stdout(&o).contains("Note:"), "{}", stdout(&o));
    // it can be removed (what its process left on the engine: prune_cli's runs rm test)
    let o = iterion(&["runs", "rm", "gone0001", "--store-dir", s], tmp.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!root.join("runs/gone0001").exists());
}
