//! Fan-out, compute and human nodes through `iterion run` / `iterion resume`: two claude_code branches (a fake
//! agent CLI) running in parallel in one Docker sandbox, joined with `wait_all`, a compute node, and a human
//! node answered with `--answers-file` after the pause.
use std::path::PathBuf;
use std::process::{Command, Output};

use iterion_test_support::{containers_of, engine_required};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_iterion");

/// The fake agent: answers `--version`; otherwise records the node's prompt, where it runs and which host it
/// is on, waits until the node named in `wait.<node>` has started (so two branches only both finish when
/// they run at the same time), sleeps `sleep.<node>` seconds, then prints `reply.<node>`.
const FAKE: &str = r#"#!/bin/sh
if [ "$1" = "--version" ]; then echo "fake-claude 1.0"; exit 0; fi
d="$(dirname "$0")/.fake"
n="$ITERION_NODE_ID"
cat > "$d/stdin.$n"
touch "$d/started.$n"
if [ -f /.dockerenv ]; then echo container > "$d/where.$n"; else echo host > "$d/where.$n"; fi
hostname > "$d/host.$n"
if [ -f "$d/wait.$n" ]; then
  other=$(cat "$d/wait.$n"); i=0
  while [ ! -f "$d/started.$other" ]; do
    i=$((i + 1))
    if [ $i -gt 20 ]; then echo '{"type":"result","is_error":true,"result":"the sibling branch never started"}'; exit 0; fi
    sleep 1
  done
fi
if [ -f "$d/sleep.$n" ]; then sleep "$(cat "$d/sleep.$n")"; fi
cat "$d/reply.$n"
"#;

const FLOW: &str = r#"agent a:
  backend: "claude_code"
  readonly: true

agent b:
  backend: "claude_code"
  readonly: true

router fan:
  mode: fan_out_all

compute m:
  await: wait_all
  expr:
    total: "input.x + input.y"

human h:
  interaction: human

workflow review:
  entry: fan
  sandbox: auto
  fan -> a
  fan -> b
  a -> m with { x: "{{outputs.a.x}}" }
  b -> m with { y: "{{outputs.b.y}}" }
  m -> h with { total: "{{outputs.m.total}}" }
  h -> done when approved
  h -> fail when not approved
"#;

struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn new() -> Ws {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".devcontainer")).unwrap();
        std::fs::create_dir_all(ws.join(".fake")).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::write(
            ws.join(".devcontainer/devcontainer.json"),
            r#"{"image": "iterion-test/busybox:latest"}"#,
        )
        .unwrap();
        std::fs::write(ws.join("review.bot"), FLOW).unwrap();
        let fake = ws.join("fake-claude");
        std::fs::write(&fake, FAKE).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let reply = |r: &str| json!({"type": "result", "is_error": false, "result": r}).to_string();
        std::fs::write(ws.join(".fake/reply.a"), reply(r#"{"x": 1}"#)).unwrap();
        std::fs::write(ws.join(".fake/reply.b"), reply(r#"{"y": 2}"#)).unwrap();
        std::fs::write(ws.join(".fake/wait.a"), "b").unwrap();
        std::fs::write(ws.join(".fake/wait.b"), "a").unwrap();
        // b is still running when a ends: what a leaves behind must not be swept while b runs
        std::fs::write(ws.join(".fake/sleep.b"), "3").unwrap();
        Ws { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn store(&self) -> PathBuf {
        self.path().join(".iterion")
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .arg("--store-dir")
            .arg(self.store())
            .current_dir(self.path())
            .env("HOME", self.dir.path().join("home"))
            .env("ITERION_SANDBOX_PULL_POLICY", "never")
            .env("ITERION_CLAUDE_BIN", self.path().join("fake-claude"))
            .env("ANTHROPIC_API_KEY", "sk-test-key")
            .env_remove("ITERION_SANDBOX_DEFAULT")
            .env_remove("ITERION_SANDBOX_FLOOR")
            .env_remove("ITERION_HOME")
            .output()
            .unwrap()
    }

    fn run_id(&self) -> String {
        let mut ids: Vec<String> = std::fs::read_dir(self.store().join("runs"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(ids.len(), 1);
        ids.pop().unwrap()
    }

    fn run_dir(&self) -> PathBuf {
        self.store().join("runs").join(self.run_id())
    }

    fn doc(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.run_dir().join("run.json")).unwrap()).unwrap()
    }

    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(self.run_dir().join("events.jsonl"))
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn fake(&self, name: &str) -> String {
        std::fs::read_to_string(self.path().join(".fake").join(name))
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}

fn text(o: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn of<'e>(ev: &'e [Value], ty: &str) -> Vec<&'e Value> {
    ev.iter().filter(|e| e["type"] == ty).collect()
}

#[test]
fn parallel_branches_in_one_container_then_a_human_pause_and_resume() {
    if !engine_required("parallel_branches_in_one_container") {
        return;
    }
    if let Err(e) = iterion_test_support::docker_image::ensure_test_image() {
        panic!("cannot prepare the local test image: {e}");
    }
    let ws = Ws::new();
    let out = ws.run(&["run", "review.bot", "--no-interactive"]);
    assert!(out.status.success(), "a pause exits 0\n{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Status: PAUSED (waiting for human input)"),
        "{stdout}"
    );
    assert!(stdout.contains("total: 3"), "{stdout}");
    assert!(stdout.contains("--answers-file <file>"), "{stdout}");
    assert_eq!(ws.doc()["status"], "paused_waiting_human");
    assert!(ws.doc()["finished_at"].is_null());

    // both branches ran in the same run container, at the same time (each waited for the other to start)
    assert_eq!(ws.fake("where.a"), "container");
    assert_eq!(ws.fake("where.b"), "container");
    assert!(!ws.fake("host.a").is_empty());
    assert_eq!(ws.fake("host.a"), ws.fake("host.b"), "one container for the run");
    let ev = ws.events();
    let started = of(&ev, "branch_started");
    let ids: Vec<&str> = started.iter().map(|e| e["branch_id"].as_str().unwrap()).collect();
    assert_eq!(started.len(), 2);
    assert!(
        ids.contains(&"branch_fan_a") && ids.contains(&"branch_fan_b"),
        "{ids:?}"
    );
    let delegate_a = ev
        .iter()
        .find(|e| e["type"] == "delegate_started" && e["node_id"] == "a")
        .unwrap();
    assert_eq!(delegate_a["branch_id"], "branch_fan_a");
    assert_eq!(delegate_a["data"]["placement"], "run");
    assert_eq!(of(&ev, "join_ready")[0]["data"]["strategy"], "wait_all");
    let m = ev
        .iter()
        .find(|e| e["type"] == "node_finished" && e["node_id"] == "m")
        .unwrap();
    assert_eq!(m["data"]["output"], json!({"total": 3}));
    let asked = of(&ev, "human_input_requested");
    assert_eq!(asked[0]["data"]["questions"], json!({"total": 3}));
    let iid = asked[0]["data"]["interaction_id"].as_str().unwrap().to_string();
    assert!(
        ws.run_dir()
            .join("interactions")
            .join(format!("{iid}.json"))
            .is_file()
    );
    // the sandbox is gone while the run waits
    assert!(containers_of(&ws.run_id()).is_empty());

    // a paused run needs answers: a usage error that leaves the record as it was
    let before = std::fs::read(ws.run_dir().join("run.json")).unwrap();
    let out = ws.run(&["resume", &ws.run_id()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no answers provided"),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read(ws.run_dir().join("run.json")).unwrap(), before);

    std::fs::write(ws.path().join("answers.json"), r#"{"approved": true}"#).unwrap();
    let out = ws.run(&["resume", &ws.run_id(), "--answers-file", "answers.json"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(ws.doc()["status"], "finished");
    let ev = ws.events();
    let resumed = of(&ev, "run_resumed");
    assert_eq!(resumed[0]["data"]["resumed_from"], "paused_waiting_human");
    assert_eq!(resumed[0]["data"]["restart_node"], "h");
    let recorded = of(&ev, "human_answers_recorded");
    assert_eq!(recorded[0]["data"]["answers"], json!({"approved": true}));
    let record: Value = serde_json::from_slice(
        &std::fs::read(ws.run_dir().join("interactions").join(format!("{iid}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(record["answers"], json!({"approved": true}));
    assert!(record["answered_at"].is_string());
    // the agents were not called again: the resume continued from the human node
    assert_eq!(of(&ev, "branch_started").len(), 2);
    assert!(containers_of(&ws.run_id()).is_empty());
}

#[test]
fn json_mode_ends_with_the_pause_and_string_answers_do_not_satisfy_a_boolean_edge() {
    let dir = tempfile::tempdir().unwrap();
    let wf = "compute c:\n  expr:\n    n: \"1 + 1\"\n\nhuman h:\n  interaction: human\n\nworkflow w:\n  entry: c\n  c -> h with { n: \"{{outputs.c.n}}\" }\n  h -> done when approved\n  h -> fail when not approved\n";
    std::fs::write(dir.path().join("w.bot"), wf).unwrap();
    let store = dir.path().join("store");
    let run = |args: &[&str]| in_dir(&dir, &store, args);
    let out = run(&["run", "w.bot", "--sandbox", "none", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["status"], "paused_waiting_human");
    assert_eq!(last["node_id"], "h");
    assert_eq!(last["questions"], json!({"n": 2}));
    assert_eq!(last["workflow"], "w");
    let id = last["run_id"].as_str().unwrap().to_string();
    let out = run(&["resume", &id, "--answer", "approved=true", "--sandbox", "none"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("NO_OUTGOING_EDGE"),
        "{}",
        text(&out)
    );
    let out = run(&["resume", &id, "--answer", "nokey", "--sandbox", "none"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn on_a_terminal_run_asks_each_question_and_continues() {
    // HU6: `script` gives the command a terminal whose input is this test's pipe
    if Command::new("script").arg("--version").output().is_err() {
        panic!("the `script` program (util-linux) is required for the terminal test");
    }
    let dir = tempfile::tempdir().unwrap();
    let wf = "compute c:\n  expr:\n    s: \"'the diff'\"\n\nhuman h:\n  interaction: human\n\nworkflow w:\n  entry: c\n  c -> h with { summary: \"{{outputs.c.s}}\" }\n  h -> done\n";
    std::fs::write(dir.path().join("w.bot"), wf).unwrap();
    let store = dir.path().join("store");
    let cmdline = format!("{BIN} run w.bot --sandbox none --store-dir {}", store.display());
    let mut child = Command::new("script")
        .args(["-qec", &cmdline, "/dev/null"])
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        // give the run time to reach the prompt, then answer
        std::thread::sleep(std::time::Duration::from_secs(2));
        stdin.write_all(b"yes\n").unwrap();
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    let out = child.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(shown.contains("Human input required"), "{shown}");
    assert!(shown.contains("summary: the diff"), "{shown}");
    assert!(shown.contains("Status: FINISHED"), "{shown}");
    let runs: Vec<_> = std::fs::read_dir(store.join("runs")).unwrap().flatten().collect();
    assert_eq!(runs.len(), 1);
    let doc: Value =
        serde_json::from_slice(&std::fs::read(runs[0].path().join("run.json")).unwrap()).unwrap();
    assert_eq!(doc["status"], "finished");
    let ev = std::fs::read_to_string(runs[0].path().join("events.jsonl")).unwrap();
    let recorded: Vec<Value> = ev
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "human_answers_recorded")
        .collect();
    assert_eq!(recorded[0]["data"]["answers"], json!({"summary": "yes"}));
}

/// A gate whose answers are declared: `decision {approved: bool, note: string}`, with edges on `approved`.
const GATE: &str = "schema decision:\n  approved: bool\n  note: string\n\ncompute c:\n  expr:\n    n: \"1 + 1\"\n\nhuman gate:\n  interaction: human\n  output: decision\n\nworkflow w:\n  entry: c\n  c -> gate with { n: \"{{outputs.c.n}}\" }\n  gate -> done when approved\n  gate -> fail when not approved\n";

fn gate_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.bot"), GATE).unwrap();
    let store = dir.path().join("store");
    (dir, store)
}

/// `iterion ARGS --store-dir STORE` in `dir`, with `dir` as HOME.
fn in_dir(dir: &tempfile::TempDir, store: &std::path::Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .arg("--store-dir")
        .arg(store)
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .output()
        .unwrap()
}

fn run_doc(store: &std::path::Path, id: &str) -> Value {
    serde_json::from_slice(&std::fs::read(store.join("runs").join(id).join("run.json")).unwrap()).unwrap()
}

#[test]
fn a_gate_names_its_answers_and_takes_them_typed_by_its_schema() {
    let (dir, store) = gate_dir();
    let out = in_dir(&dir, &store, &["run", "w.bot", "--sandbox", "none", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        last["expects"],
        json!([{"name": "approved", "type": "bool"}, {"name": "note", "type": "string"}])
    );
    let id = last["run_id"].as_str().unwrap().to_string();
    // answers that do not fit the schema: a usage error naming each problem, the run left as it was
    std::fs::write(
        dir.path().join("bad.json"),
        r#"{"approved": "yes please", "extra": 1}"#,
    )
    .unwrap();
    let out = in_dir(
        &dir,
        &store,
        &["resume", &id, "--answers-file", "bad.json", "--sandbox", "none"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'approved' takes true or false"), "{err}");
    assert!(err.contains("'extra' is not an answer this node takes"), "{err}");
    assert!(err.contains("no answer for note"), "{err}");
    assert!(
        err.contains("the node takes approved (bool), note (string)"),
        "{err}"
    );
    assert_eq!(run_doc(&store, &id)["status"], "paused_waiting_human");
    // `--answer approved=true` is read as the boolean the edge needs
    let out = in_dir(
        &dir,
        &store,
        &[
            "resume",
            &id,
            "--answer",
            "approved=true",
            "--answer",
            "note=ship it",
            "--sandbox",
            "none",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(run_doc(&store, &id)["status"], "finished");
    let ev = std::fs::read_to_string(store.join("runs").join(&id).join("events.jsonl")).unwrap();
    let ev: Vec<Value> = ev.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let recorded = of(&ev, "human_answers_recorded");
    assert_eq!(
        recorded[0]["data"]["answers"],
        json!({"approved": true, "note": "ship it"})
    );
}

#[test]
fn the_paused_block_names_the_answers_a_gate_takes() {
    let (dir, store) = gate_dir();
    let out = in_dir(
        &dir,
        &store,
        &["run", "w.bot", "--sandbox", "none", "--no-interactive"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Answers: approved (bool), note (string)"),
        "{stdout}"
    );
}

#[test]
fn answers_for_a_run_that_is_not_waiting_are_an_error_not_dropped() {
    // without a schema, `--answer approved=true` is the string "true": no edge matches, the run fails
    // resumable at the gate and restarts there, waiting for nothing yet
    let dir = tempfile::tempdir().unwrap();
    let wf = "human h:\n  interaction: human\n\nworkflow w:\n  entry: h\n  h -> done when approved\n  h -> fail when not approved\n";
    std::fs::write(dir.path().join("w.bot"), wf).unwrap();
    let store = dir.path().join("store");
    let out = in_dir(&dir, &store, &["run", "w.bot", "--sandbox", "none", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let id = last["run_id"].as_str().unwrap().to_string();
    let out = in_dir(
        &dir,
        &store,
        &["resume", &id, "--answer", "approved=true", "--sandbox", "none"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let before = run_doc(&store, &id);
    assert_eq!(before["status"], "failed_resumable");
    std::fs::write(dir.path().join("a.json"), r#"{"approved": true}"#).unwrap();
    let out = in_dir(
        &dir,
        &store,
        &["resume", &id, "--answers-file", "a.json", "--sandbox", "none"],
    );
    // the checkpoint restarts the gate (it will ask again): these answers would be dropped
    assert!(before["checkpoint"]["interaction_id"].is_null(), "{before}");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not waiting for human input"), "{err}");
    assert_eq!(run_doc(&store, &id)["status"], "failed_resumable");
}

#[test]
fn on_a_terminal_a_gate_asks_each_declared_answer_and_asks_again_on_a_bad_value() {
    if Command::new("script").arg("--version").output().is_err() {
        panic!("the `script` program (util-linux) is required for the terminal test");
    }
    let (dir, store) = gate_dir();
    let cmdline = format!("{BIN} run w.bot --sandbox none --store-dir {}", store.display());
    let mut child = Command::new("script")
        .args(["-qec", &cmdline, "/dev/null"])
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        std::thread::sleep(std::time::Duration::from_secs(2));
        stdin.write_all(b"maybe\n").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        stdin.write_all(b"yes\n").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        stdin.write_all(b"looks good\n").unwrap();
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    let out = child.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(shown.contains("approved [true/false]>"), "{shown}");
    assert!(
        shown.contains("'approved' takes true or false (yes/no), not 'maybe'; try again"),
        "{shown}"
    );
    assert!(shown.contains("note [text]>"), "{shown}");
    assert!(shown.contains("Status: FINISHED"), "{shown}");
    let runs: Vec<_> = std::fs::read_dir(store.join("runs")).unwrap().flatten().collect();
    let ev = std::fs::read_to_string(runs[0].path().join("events.jsonl")).unwrap();
    let ev: Vec<Value> = ev.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let recorded = of(&ev, "human_answers_recorded");
    assert_eq!(
        recorded[0]["data"]["answers"],
        json!({"approved": true, "note": "looks good"})
    );
}

#[test]
fn a_worktree_run_says_which_changes_of_the_checkout_it_does_not_see() {
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", text(&o));
    };
    let wf = "compute c:\n  expr:\n    n: \"1\"\n\nworkflow w:\n  entry: c\n  worktree: auto\n  c -> done\n";
    std::fs::write(dir.path().join("w.bot"), wf).unwrap();
    std::fs::write(dir.path().join("tracked.txt"), "one\n").unwrap();
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "base"]);
    let store = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let run = || {
        Command::new(BIN)
            .args(["run", "w.bot", "--sandbox", "none", "--store-dir"])
            .arg(store.path())
            .current_dir(dir.path())
            .env("HOME", home.path())
            .output()
            .unwrap()
    };
    let out = run();
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("uncommitted"), "{}", text(&out));
    std::fs::write(dir.path().join("tracked.txt"), "two\n").unwrap();
    std::fs::write(dir.path().join("new.txt"), "new\n").unwrap();
    let out = run();
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "has 2 uncommitted or untracked change(s) (tracked.txt, new.txt) that this run does not see"
        ),
        "{err}"
    );
    // the warning comes before the first node runs
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("node c: finished"), "{stdout}");
}

#[test]
fn runs_show_node_prints_one_nodes_full_output_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let wf = "tool t:\n  command: `printf 'line one\\nline two\\n'`\n\ncompute c:\n  expr:\n    n: \"1 + 1\"\n\nworkflow w:\n  entry: t\n  t -> c\n  c -> done\n";
    std::fs::write(dir.path().join("w.bot"), wf).unwrap();
    let store = dir.path().join("store");
    let cmd = |args: &[&str]| in_dir(&dir, &store, args);
    let out = cmd(&["run", "w.bot", "--sandbox", "none", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let runs: Vec<_> = std::fs::read_dir(store.join("runs")).unwrap().flatten().collect();
    let id = runs[0].file_name().to_string_lossy().into_owned();
    let out = cmd(&["runs", "show", &id, "--node", "t"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.starts_with("── node t (#1"), "{shown}");
    // the text with its real line breaks (a block under its key), not a JSON string with \n escapes
    assert!(shown.contains("result:\n    line one\n    line two\n"), "{shown}");
    let out = cmd(&["runs", "show", &id, "--node", "c", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), r#"{"n":2}"#);
    let out = cmd(&["runs", "show", &id, "--node", "nope"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("node 'nope' has no output") && err.contains("nodes with an output: t, c"),
        "{err}"
    );
}
