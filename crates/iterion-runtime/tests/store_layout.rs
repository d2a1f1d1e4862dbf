//! Store vectors ST1–ST14 (05 §12.1) against the public API.
mod store_common;

use iterion_runtime::Error;
use iterion_runtime::events::{NodeFinished, RunStarted, format_timestamp};
use iterion_runtime::store::{
    self, Checkpoint, Owner, RunLock, Store, StoreDirRequest, friendly_name, read_events,
};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};
use store_common::{create, create_with_env, raw_json};

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn started() -> iterion_runtime::events::Event {
    RunStarted {
        workflow: "release_gate".into(),
        file: "/w/app/release.bot".into(),
        sandboxed: false,
        driver: None,
    }
    .into()
}

#[test]
fn st1_store_dir_flag_creates_private_runs_and_gitignore() {
    let tmp = tempfile::tempdir().unwrap();
    let s = tmp.path().join("s");
    let data = tmp.path().join("data");
    let dir = store::store_dir(StoreDirRequest {
        store_dir: Some(&s),
        project_dir: Path::new("/w/app"),
        cwd: Path::new("/x"),
        data_dir: &data,
    });
    assert_eq!(dir, s);
    let st = Store::create(&dir).unwrap();
    assert_eq!(mode(&st.runs_dir()), 0o700);
    assert_eq!(fs::read_to_string(s.join(".gitignore")).unwrap(), "**\n");
    assert_eq!(mode(&s.join(".gitignore")), 0o600);
    // An existing .gitignore is left alone.
    fs::write(s.join(".gitignore"), "custom\n").unwrap();
    Store::create(&dir).unwrap();
    assert_eq!(fs::read_to_string(s.join(".gitignore")).unwrap(), "custom\n");
}

#[test]
fn st1_relative_store_dir_is_made_absolute() {
    let got = store::store_dir(StoreDirRequest {
        store_dir: Some(Path::new("rel/s")),
        project_dir: Path::new("/w/app"),
        cwd: Path::new("/x"),
        data_dir: Path::new("/d"),
    });
    assert_eq!(got, PathBuf::from("/x/rel/s"));
}

fn store_for_project(project: &Path, data: &Path) -> PathBuf {
    store::store_dir(StoreDirRequest {
        store_dir: None,
        project_dir: project,
        cwd: Path::new("/"),
        data_dir: data,
    })
}

/// A repository that ships `.iterion/runs/`, a store marker, or a `runs` symlink does not choose the store:
/// it is the data dir's project store whatever the project directory holds.
#[test]
fn st2_a_project_local_iterion_dir_never_becomes_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let app = tmp.path().join("w/app");
    let data = tmp.path().join("data");
    let expect = data
        .join("projects")
        .join(store::project_key(&app.to_string_lossy()));
    fs::create_dir_all(app.join(".iterion/runs")).unwrap();
    assert_eq!(store_for_project(&app, &data), expect);
    fs::write(app.join(".iterion/.iterion-store"), "").unwrap();
    assert_eq!(store_for_project(&app, &data), expect);
    fs::remove_dir(app.join(".iterion/runs")).unwrap();
    std::os::unix::fs::symlink(tmp.path(), app.join(".iterion/runs")).unwrap();
    assert_eq!(store_for_project(&app, &data), expect);
}

#[test]
fn st3_empty_local_dir_falls_back_to_data_dir_project() {
    let tmp = tempfile::tempdir().unwrap();
    let app = tmp.path().join("w/app");
    fs::create_dir_all(app.join(".iterion")).unwrap();
    let key = store::project_key(&app.to_string_lossy());
    assert_eq!(
        store_for_project(&app, Path::new("/d")),
        PathBuf::from("/d/projects").join(&key)
    );
    // The literal vector: /w/app → -w-app.
    assert_eq!(
        store_for_project(Path::new("/w/app"), Path::new("/d")),
        PathBuf::from("/d/projects/-w-app")
    );
}

fn check_data_dir(iterion_home: &str, expect: &str) {
    let env = BTreeMap::from([
        ("ITERION_HOME".to_owned(), iterion_home.to_owned()),
        ("HOME".to_owned(), "/home/jo".to_owned()),
    ]);
    let got = store::data_dir(&env, Path::new("/x"));
    assert_eq!(got, PathBuf::from(expect), "{iterion_home}");
}

#[test]
fn st4_iterion_home_is_absolute_without_trailing_separator() {
    check_data_dir("rel/dir", "/x/rel/dir");
    check_data_dir("/d/", "/d");
}

#[test]
fn st5_first_event_has_seq_zero_and_ordered_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let run = create(&st, "r5");
    let a = run.events().append(&started()).unwrap();
    assert_eq!(a.seq, 0);
    let b = run
        .events()
        .append(&NodeFinished::new("build", serde_json::json!({"ok": true}), 7).into())
        .unwrap();
    assert_eq!(b.seq, 1);
    let text = fs::read_to_string(run.dir().join("events.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines, vec![a.line.as_str(), b.line.as_str()]);
    assert!(text.ends_with('\n'));
    let keys = |l: &str| -> Vec<String> {
        let v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(l).unwrap();
        v.keys().cloned().collect()
    };
    assert_eq!(keys(lines[0]), ["seq", "timestamp", "type", "run_id", "data"]);
    assert_eq!(
        keys(lines[1]),
        ["seq", "timestamp", "type", "run_id", "node_id", "data"]
    );
    assert!(
        lines[0].starts_with("{\"seq\":0,\"timestamp\":\""),
        "{}",
        lines[0]
    );
    assert_eq!(mode(&run.dir().join("events.jsonl")), 0o600);
    assert_eq!(mode(run.dir()), 0o700);
    assert_eq!(mode(&run.dir().join("run.json")), 0o600);
    assert_eq!(mode(&run.dir().join("run.log")), 0o600);
}

#[test]
fn st6_reopen_continues_after_torn_line() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let run = create(&st, "r6");
    for _ in 0..5 {
        run.events().append(&started()).unwrap();
    }
    let path = run.dir().join("events.jsonl");
    drop(run);
    let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"seq\":5,\"timestamp\":\"2026-01-14T09:3")
        .unwrap();
    drop(f);
    assert_eq!(read_events(&path).unwrap().len(), 5);

    let reopened = st.open_run("r6", &Owner::current()).unwrap();
    assert_eq!(reopened.events().next_seq(), 5);
    let a = reopened.events().append(&started()).unwrap();
    assert_eq!(a.seq, 5);
    let events = st.read_events("r6").unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4, 5]);
}

#[test]
fn st7_timestamp_trailing_zeros_removed() {
    let t = UNIX_EPOCH + Duration::new(1_768_383_067, 520_000_000);
    assert_eq!(format_timestamp(t), "2026-01-14T09:31:07.52Z");
    let t = UNIX_EPOCH + Duration::new(1_768_383_067, 0);
    assert_eq!(format_timestamp(t), "2026-01-14T09:31:07Z");
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let run = create(&st, "r7");
    let a = run
        .events()
        .append_at(&started(), UNIX_EPOCH + Duration::new(1_768_383_067, 520_000_000))
        .unwrap();
    assert!(
        a.line.contains("\"timestamp\":\"2026-01-14T09:31:07.52Z\""),
        "{}",
        a.line
    );
}

#[test]
fn st8_stale_temp_file_is_ignored_and_cleaned_on_open() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let run = create(&st, "r8");
    let before = run.document().clone();
    let dir = run.dir().to_path_buf();
    drop(run);
    // A process died after writing its temporary file and before the rename.
    fs::write(
        dir.join(".run.json.tmp-0123456789abcdef"),
        b"{\"format_version\": 1, \"id\"",
    )
    .unwrap();
    assert_eq!(st.read_run("r8").unwrap(), before);
    let reopened = st.open_run("r8", &Owner::current()).unwrap();
    assert_eq!(reopened.document(), &before);
    assert!(!dir.join(".run.json.tmp-0123456789abcdef").exists());
}

#[test]
fn st9_unknown_top_level_field_survives_a_status_change() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let run = create(&st, "r9");
    let dir = run.dir().to_path_buf();
    drop(run);
    let mut v: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    v["x_custom"] = serde_json::json!({"keep": [1, 2]});
    v["sandbox"]["x_future"] = serde_json::json!(true);
    fs::write(dir.join("run.json"), serde_json::to_string_pretty(&v).unwrap()).unwrap();

    let mut run = st.open_run("r9", &Owner::current()).unwrap();
    run.transition(iterion_runtime::store::Transition::Finish)
        .unwrap();
    let after = raw_json(&run);
    assert_eq!(after["status"], "finished");
    assert_eq!(after["x_custom"], serde_json::json!({"keep": [1, 2]}));
    assert_eq!(after["sandbox"]["x_future"], serde_json::json!(true));
}

#[test]
fn st10_launch_env_recorded_redacted() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let run = create_with_env(
        &st,
        "r10",
        &[
            ("ITERION_API_TOKEN", "abc"),
            ("ITERION_LOG_LEVEL", "debug"),
            ("PATH", "/bin"),
        ],
    );
    let v = raw_json(&run);
    assert_eq!(
        v["launch_env"],
        serde_json::json!({"ITERION_API_TOKEN": "[redacted]", "ITERION_LOG_LEVEL": "debug"})
    );
    let text = fs::read_to_string(run.dir().join("run.json")).unwrap();
    assert!(!text.contains("abc"));
}

#[test]
fn st11_large_output_truncated_in_event_full_in_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let mut run = create(&st, "r11");
    let filler = "x".repeat(307_200 - "{\"text\":\"\"}".len());
    let output = serde_json::json!({ "text": filler });
    assert_eq!(serde_json::to_string(&output).unwrap().len(), 307_200);
    let a = run
        .events()
        .append(&NodeFinished::new("big", output.clone(), 10).into())
        .unwrap();
    let rec: serde_json::Value = serde_json::from_str(&a.line).unwrap();
    assert_eq!(
        rec["data"]["output"],
        serde_json::json!({"_truncated": true, "bytes": 307_200})
    );
    assert_eq!(rec["data"]["duration_ms"], 10);
    assert!(a.line.len() < 1024);

    let mut cp = Checkpoint::stub("next", serde_json::Map::new());
    cp.outputs.insert("big".into(), output.clone());
    run.save_checkpoint(cp).unwrap();
    let doc = st.read_run("r11").unwrap();
    assert_eq!(doc.checkpoint.unwrap().outputs["big"], output);
}

#[test]
fn st12_unsafe_node_id_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path().join("store")).unwrap();
    let run = create(&st, "r12");
    let before = list_tree(tmp.path());
    for bad in ["../x", "..", "a/b", "a\\b", "", "a\0b"] {
        let err = run
            .write_artifact(bad, 0, serde_json::json!({"v": 1}))
            .unwrap_err();
        assert!(matches!(err, Error::UnsafePathComponent { .. }), "{bad:?}: {err}");
        let err = run.write_session(bad, &serde_json::json!({})).unwrap_err();
        assert!(matches!(err, Error::UnsafePathComponent { .. }), "{bad:?}: {err}");
    }
    assert_eq!(list_tree(tmp.path()), before);
    assert!(st.run_dir("../x").is_err());

    let p = run
        .write_artifact("build", 0, serde_json::json!({"v": 1}))
        .unwrap();
    assert_eq!(p, run.dir().join("artifacts/build/0.json"));
    let rec = run.read_artifact("build", 0).unwrap();
    assert_eq!(
        (rec.run_id.as_str(), rec.node_id.as_str(), rec.version),
        ("r12", "build", 0)
    );
    assert_eq!(rec.data, serde_json::json!({"v": 1}));
    let text = fs::read_to_string(&p).unwrap();
    assert!(
        text.starts_with("{\n  \"run_id\": \"r12\",\n  \"node_id\": \"build\""),
        "{text}"
    );
    assert_eq!(mode(&p), 0o600);
}

fn list_tree(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn st13_friendly_name_is_deterministic() {
    let a = friendly_name("/w/app/release.bot", "0194f7e2-5c1b-7d3e-9a40-2f6c1d8e9b71");
    let b = friendly_name("/w/app/release.bot", "0194f7e2-5c1b-7d3e-9a40-2f6c1d8e9b71");
    assert_eq!(a, b);
    let tmp = tempfile::tempdir().unwrap();
    let run = create(&Store::create(tmp.path()).unwrap(), "r13");
    assert_eq!(run.document().name, friendly_name("/w/app/release.bot", "r13"));
}

#[test]
fn st14_lock_held_by_another_process() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let run = create(&st, "r14");
    // Same process, second open: refused with the spec's message.
    let err = st.open_run("r14", &Owner::current()).unwrap_err();
    assert_eq!(err.to_string(), "run r14 is locked by another process");
    let lock = run.dir().join(".lock");
    drop(run);
    assert!(!RunLock::is_held(&lock).unwrap());

    // A real other process holding the flock.
    let mut child = match std::process::Command::new("flock")
        .arg(&lock)
        .args(["sleep", "30"])
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("notice: `flock` not available ({e}); cross-process part skipped");
            return;
        }
    };
    let mut held = false;
    for _ in 0..500 {
        if RunLock::is_held(&lock).unwrap() {
            held = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let res = st.open_run("r14", &Owner::current());
    let _ = child.kill();
    let _ = child.wait();
    assert!(held, "the child never took the lock");
    assert!(
        matches!(res, Err(Error::Locked { ref run_id }) if run_id == "r14"),
        "{res:?}"
    );
}

#[test]
fn runs_are_listed_and_unknown_runs_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    drop(create(&st, "b"));
    drop(create(&st, "a"));
    fs::create_dir(st.runs_dir().join("broken")).unwrap();
    let ids: Vec<(String, bool)> = st
        .list_runs()
        .unwrap()
        .into_iter()
        .map(|e| (e.id, e.document.is_ok()))
        .collect();
    assert_eq!(
        ids,
        [
            ("broken".to_owned(), false),
            ("a".to_owned(), true),
            ("b".to_owned(), true)
        ]
    );
    assert!(matches!(st.read_run("nope"), Err(Error::RunNotFound { .. })));
    assert!(matches!(
        st.create_run(
            &store::RunId::parse("a").unwrap(),
            store_common::new_run("a", &[])
        ),
        Err(Error::RunExists { .. })
    ));
    assert!(
        Store::at(tmp.path().join("missing"))
            .list_runs()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn an_update_that_changes_nothing_does_not_rewrite_run_json() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let mut run = create(&st, "same");
    let path = run.dir().join("run.json");
    let before = fs::read_to_string(&path).unwrap();
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).unwrap());
    let ino = inode(&path);
    std::thread::sleep(Duration::from_millis(2));
    run.update(|d| d.name = d.name.clone()).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), before);
    assert_eq!(inode(&path), ino, "no rename over run.json");
    // a real change is written, with a new updated_at
    run.update(|d| d.name = "renamed".into()).unwrap();
    let after = raw_json(&run);
    assert_eq!(after["name"], "renamed");
    let old: serde_json::Value = serde_json::from_str(&before).unwrap();
    assert_ne!(after["updated_at"], old["updated_at"]);
}

#[test]
fn concurrent_appends_get_unique_contiguous_seqs() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let run = create(&st, "conc");
    let log = std::sync::Arc::clone(run.events());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let log = std::sync::Arc::clone(&log);
            std::thread::spawn(move || {
                for _ in 0..25 {
                    log.append(&started()).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let events = st.read_events("conc").unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (0..100).collect::<Vec<u64>>(),
        "lines in file order carry seq 0..99"
    );
}
