//! End-to-end tests of `iterion run` / `iterion resume` on the real engine with the local test image
//! (`iterion-test/busybox:latest`, `cargo xtask images`), plus engine-free CLI vectors (05 §12.11).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use iterion_test_support::docker_http::request;
use iterion_test_support::{containers_of, engine_required, engine_socket};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_iterion");

/// A temporary copy of the demo (or another workflow next to the demo's devcontainer.json), with its own
/// store. The drop guard force-removes every container labelled with a run id of this workspace.
struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn demo() -> Ws {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo");
        copy_dir(&root, &dir.path().join("ws"));
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Ws { dir }
    }

    fn with_workflow(text: &str) -> Ws {
        let ws = Ws::demo();
        std::fs::write(ws.path().join("demo.bot"), text).unwrap();
        ws
    }

    /// The workspace (a copy of the demo); the home directory is its sibling, outside the workspace.
    fn path(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn store(&self) -> PathBuf {
        self.path().join(".iterion")
    }

    fn cmd(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .arg("--store-dir")
            .arg(self.store())
            .current_dir(self.path())
            .env("HOME", self.dir.path().join("home"))
            // never ask a registry: the tests use the locally built image (03 §15), and a refresh of a
            // `latest` tag would make the engine reach out
            .env("ITERION_SANDBOX_PULL_POLICY", "never")
            .env_remove("ITERION_SANDBOX_DEFAULT")
            .env_remove("ITERION_SANDBOX_FLOOR")
            .env_remove("ITERION_HOME");
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.cmd(args, env).output().unwrap()
    }

    fn run_ids(&self) -> Vec<String> {
        std::fs::read_dir(self.store().join("runs"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn doc(&self, id: &str) -> Value {
        serde_json::from_slice(&std::fs::read(self.store().join("runs").join(id).join("run.json")).unwrap())
            .unwrap()
    }

    fn events(&self, id: &str) -> Vec<Value> {
        std::fs::read_to_string(self.store().join("runs").join(id).join("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Ws {
    fn drop(&mut self) {
        for id in self.run_ids() {
            remove_images_of(&id);
            for c in containers_of(&id) {
                if let Some(sock) = engine_socket() {
                    let _ = request(
                        &sock,
                        "DELETE",
                        &format!("/containers/{c}?force=1&v=1"),
                        None,
                        b"",
                        Duration::from_secs(10),
                    );
                }
            }
        }
    }
}

/// Force-removes the images labelled with `run_id` (what its builds put in the build cache).
fn remove_images_of(run_id: &str) {
    let Some(sock) = engine_socket() else { return };
    let filter = iterion_test_support::docker_http::encode_component(&format!(
        "{{\"label\":[\"iterion.io/run-id={run_id}\"]}}"
    ));
    let Ok(list) = request(
        &sock,
        "GET",
        &format!("/images/json?filters={filter}"),
        None,
        b"",
        Duration::from_secs(10),
    ) else {
        return;
    };
    let images: Value = serde_json::from_slice(&list.body).unwrap_or_default();
    for id in images
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["Id"].as_str())
    {
        let _ = request(
            &sock,
            "DELETE",
            &format!("/images/{id}?force=1"),
            None,
            b"",
            Duration::from_secs(10),
        );
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn first<'a>(events: &'a [Value], t: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == t)
        .unwrap_or_else(|| panic!("no {t} in {:?}", types(events)))
}

fn image_ready() -> bool {
    if let Err(e) = iterion_test_support::docker_image::ensure_test_image() {
        panic!("cannot prepare the local test image: {e}");
    }
    true
}

#[test]
fn demo_runs_in_the_container_writes_the_workspace_and_reports_the_denial() {
    if !engine_required("demo_runs_in_the_container") || !image_ready() {
        return;
    }
    let ws = Ws::demo();
    let out = ws.run(&["run", "demo.bot", "--json"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let id = ws.run_ids().pop().unwrap();
    // --json prints the stored lines, byte for byte.
    let stored = std::fs::read_to_string(ws.store().join("runs").join(&id).join("events.jsonl")).unwrap();
    assert_eq!(stdout, stored);
    let ev = ws.events(&id);
    let t = types(&ev);
    assert_eq!(t.last().map(String::as_str), Some("sandbox_stopped"));
    assert!(t.contains(&"run_finished".to_string()));
    assert_eq!(
        first(&ev, "sandbox_started")["data"]["enforced_egress"],
        json!(true)
    );
    let blocked = first(&ev, "network_blocked");
    assert_eq!(blocked["node_id"], json!("fetch"));
    assert_eq!(blocked["data"]["host"], json!("example.com"));
    assert_eq!(blocked["data"]["reason"], json!("policy denial"));
    let where_ = ev
        .iter()
        .find(|e| e["type"] == "node_finished" && e["node_id"] == "where")
        .unwrap();
    assert_eq!(where_["data"]["output"], json!({"inside": "container"}));
    assert!(ws.path().join("demo-output.txt").is_file());
    let doc = ws.doc(&id);
    assert_eq!(doc["status"], json!("finished"));
    assert_eq!(doc["sandbox"]["driver"], json!("docker"));
    assert!(containers_of(&id).is_empty());
    assert!(!ws.store().join("runs").join(&id).join("net").exists());
}

/// The default pull policy is `missing`: a present local image (tagged `latest`, which the old default
/// refreshed from its registry on every run) starts without a pull attempt and without a warning.
#[test]
fn a_present_local_image_starts_without_a_pull_or_a_warning_by_default() {
    if !engine_required("present_local_image_default_policy") || !image_ready() {
        return;
    }
    let ws = Ws::demo();
    // a repository, so the only warning there could be is about the image (a work dir outside any
    // repository is warned about on its own)
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws.path())
        .status()
        .unwrap();
    assert!(init.success());
    let out = ws
        .cmd(&["run", "demo.bot"], &[])
        .env_remove("ITERION_SANDBOX_PULL_POLICY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let id = ws.run_ids().pop().unwrap();
    let ev = ws.events(&id);
    let ready = first(&ev, "sandbox_image_ready");
    assert_eq!(ready["data"]["image"], json!("iterion-test/busybox:latest"));
    assert_eq!(ready["data"]["pulled"], json!(false));
    let log = std::fs::read_to_string(ws.store().join("runs").join(&id).join("run.log")).unwrap();
    for text in [log.as_str(), &*stderr] {
        assert!(!text.contains("WARN"), "a warning:\n{text}");
        assert!(!text.contains("pull"), "a pull attempt:\n{text}");
    }
}

/// A `sandbox.build:` whose context is the workspace, with the run store inside it: the store is never sent to
/// the engine (the image has no `.iterion`), so a second run reuses the image (`cache: hit`); a changed context
/// file builds again, and so does `--rebuild`.
#[test]
fn a_build_is_reused_by_the_next_run_and_rebuilt_when_its_context_changes() {
    if !engine_required("build_cache_across_runs") || !image_ready() {
        return;
    }
    let ws = Ws::with_workflow(
        "tool look:\n  command: `test ! -e /ctx/.iterion && cat /ctx/input`\n\nworkflow demo:\n  entry: look\n  sandbox:\n    build:\n      dockerfile: \"Dockerfile\"\n      context: \".\"\n  look -> done\n",
    );
    std::fs::write(
        ws.path().join("Dockerfile"),
        "FROM iterion-test/busybox:latest\nCOPY . /ctx\n",
    )
    .unwrap();
    let nonce = iterion_test_support::conformance::unique_name();
    std::fs::write(ws.path().join("input"), format!("{{\"n\": \"{nonce}\"}}")).unwrap();
    let build = |args: &[&str]| {
        let before = ws.run_ids();
        let mut argv = vec!["run", "demo.bot"];
        argv.extend_from_slice(args);
        let out = ws.run(&argv, &[]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let id = ws.run_ids().into_iter().find(|i| !before.contains(i)).unwrap();
        let ev = ws.events(&id);
        let started = first(&ev, "sandbox_build_started")["data"]["cache"].clone();
        let finished = first(&ev, "sandbox_build_finished")["data"].clone();
        let output = ev
            .iter()
            .find(|e| e["type"] == "node_finished" && e["node_id"] == "look")
            .map(|e| e["data"]["output"]["n"].clone())
            .unwrap();
        (
            started,
            finished["cache"].clone(),
            finished["target"].clone(),
            output,
        )
    };
    let (s1, f1, tag1, out1) = build(&[]);
    assert_eq!((s1, f1, out1), (json!("miss"), json!("miss"), json!(nonce)));
    let (s2, f2, tag2, _) = build(&[]);
    assert_eq!(
        (s2, f2),
        (json!("hit"), json!("hit")),
        "the second run reuses the image"
    );
    assert_eq!(tag2, tag1);
    std::fs::write(ws.path().join("input"), "{\"n\": \"changed\"}").unwrap();
    let (s3, f3, tag3, out3) = build(&[]);
    assert_eq!((s3, f3, out3), (json!("miss"), json!("miss"), json!("changed")));
    assert_ne!(tag3, tag1);
    let (s4, f4, tag4, _) = build(&["--rebuild"]);
    assert_eq!((s4, f4), (json!("miss"), json!("miss")), "--rebuild builds");
    assert_eq!(tag4, tag3);
}

/// `--sandbox-build-secret id=tok,env=TOK`: the secret reaches a `RUN --mount=type=secret` step (the node reads
/// its length from the image), the build uses BuildKit and says why, and the value is in no event, record, or
/// line the command printed; an unset variable is a usage error before any run starts.
#[test]
fn a_build_secret_reaches_the_build_and_nothing_else() {
    if !engine_required("build_secret_end_to_end") || !image_ready() {
        return;
    }
    let ws = Ws::with_workflow(
        "tool look:\n  command: `cat /tok.len`\n\nworkflow demo:\n  entry: look\n  sandbox:\n    build:\n      dockerfile: \"Dockerfile\"\n      context: \".\"\n  look -> done\n",
    );
    let value = format!("v{}", iterion_test_support::conformance::unique_name());
    std::fs::write(
        ws.path().join("Dockerfile"),
        "FROM iterion-test/busybox:latest\nRUN --mount=type=secret,id=tok,required=true \
         n=$(wc -c < /run/secrets/tok) && echo \"{\\\"n\\\": $n}\" > /tok.len\n",
    )
    .unwrap();
    let out = ws.run(
        &[
            "run",
            "demo.bot",
            "--json",
            "--sandbox-build-secret",
            "id=tok,env=TOK",
        ],
        &[("TOK", value.as_str())],
    );
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{printed}");
    let id = ws.run_ids().pop().unwrap();
    let ev = ws.events(&id);
    let started = &first(&ev, "sandbox_build_started")["data"];
    assert_eq!(started["builder"], "buildkit", "{started}");
    let output = ev
        .iter()
        .find(|e| e["type"] == "node_finished" && e["node_id"] == "look")
        .map(|e| e["data"]["output"]["n"].clone())
        .unwrap();
    assert_eq!(output, json!(value.len()));
    let mut stored = String::new();
    for f in walk(&ws.store()) {
        stored.push_str(&String::from_utf8_lossy(&std::fs::read(f).unwrap_or_default()));
    }
    assert!(!stored.contains(&value), "the secret value is in the store");
    assert!(!printed.contains(&value), "the secret value was printed");

    let before = ws.run_ids().len();
    let out = ws.run(
        &[
            "run",
            "demo.bot",
            "--sandbox-build-secret",
            "id=tok,env=ITERION_TEST_UNSET_VAR",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ITERION_TEST_UNSET_VAR is not set"), "{err}");
    assert_eq!(ws.run_ids().len(), before, "no run directory");
}

/// Every regular file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() => out.push(p),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn a_failing_node_fails_the_run_with_its_code() {
    if !engine_required("a_failing_node_fails_the_run") || !image_ready() {
        return;
    }
    let ws = Ws::with_workflow(
        "tool boom:\n  command: \"echo boom >&2; exit 3\"\n\nworkflow demo:\n  entry: boom\n  sandbox: auto\n  boom -> done\n",
    );
    let out = ws.run(&["run", "demo.bot"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Status: FAILED (resumable)"), "{stdout}");
    assert!(stdout.contains("Code:   EXECUTION_FAILED"), "{stdout}");
    let id = ws.run_ids().pop().unwrap();
    let doc = ws.doc(&id);
    assert_eq!(doc["status"], json!("failed_resumable"));
    assert_eq!(doc["failure_code"], json!("EXECUTION_FAILED"));
    assert!(containers_of(&id).is_empty());
}

/// A step's leftovers do not outlive it: under an egress policy, a process a node leaves running in the
/// run container (here a loop started in the background, which could keep using the workspace or retry the
/// network) is killed before the next node starts, and the run says so.
#[test]
fn a_background_process_a_node_leaves_is_killed_before_the_next_node() {
    if !engine_required("a_background_process_a_node_leaves_is_killed") || !image_ready() {
        return;
    }
    let ws = Ws::with_workflow(concat!(
        "tool spawn:\n",
        "  command: `(while true; do sleep 0.2; done) >/dev/null 2>&1 & echo $! > /tmp/leftover.pid; echo '{\"spawned\": true}'`\n\n",
        "tool check:\n",
        "  command: `p=$(cat /tmp/leftover.pid); s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null); ",
        "if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo '{\"alive\": true}'; else echo '{\"alive\": false}'; fi`\n\n",
        "workflow demo:\n  entry: spawn\n  sandbox: auto\n  spawn -> check\n  check -> done\n",
    ));
    // Twice: the first start runs the start checks (and records the sandbox's own processes in their exec);
    // the second start of the same image takes them from the cache, and the node's own first exec records
    // the processes ahead of its command. The leftover must be killed either way.
    let mut seen = Vec::new();
    for attempt in ["checked", "cached"] {
        let out = ws.run(&["run", "demo.bot"], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{attempt}: {stderr}");
        let id = ws
            .run_ids()
            .into_iter()
            .find(|i| !seen.contains(i))
            .expect("a new run");
        seen.push(id.clone());
        let ev = ws.events(&id);
        let check = ev
            .iter()
            .find(|e| e["type"] == "node_finished" && e["node_id"] == "check")
            .unwrap();
        assert_eq!(
            check["data"]["output"],
            json!({"alive": false}),
            "{attempt}: {stderr}"
        );
        assert!(
            stderr.contains("processes left behind by node spawn"),
            "{attempt}: the kill is said: {stderr}"
        );
        let log = std::fs::read_to_string(ws.store().join("runs").join(&id).join("run.log")).unwrap();
        assert_eq!(
            log.contains("taken from the cache"),
            attempt == "cached",
            "{attempt}: {log}"
        );
        assert!(containers_of(&id).is_empty());
    }
}

#[test]
fn post_create_over_its_bound_then_resume_finishes() {
    if !engine_required("post_create_over_its_bound") || !image_ready() {
        return;
    }
    let ws = Ws::with_workflow(
        "tool hello:\n  command: \"echo hi\"\n\nworkflow demo:\n  entry: hello\n  sandbox:\n    mode: auto\n    post_create: \"sleep 3\"\n  hello -> done\n",
    );
    let out = ws.run(
        &["run", "demo.bot", "--json"],
        &[("ITERION_SANDBOX_POST_CREATE_TIMEOUT", "1s")],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = ws.run_ids().pop().unwrap();
    let ev = ws.events(&id);
    let f = first(&ev, "run_failed");
    assert_eq!(f["data"]["code"], json!("SANDBOX_SETUP_TIMEOUT"));
    assert_eq!(f["data"]["resumable"], json!(true));
    assert_eq!(f["data"]["phase"], json!("post_create"));
    assert_eq!(ws.doc(&id)["status"], json!("failed_resumable"));
    assert!(containers_of(&id).is_empty());
    let out = ws.run(&["resume", "--run-id", &id], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Resumed from:    failed_resumable"), "{stdout}");
    let doc = ws.doc(&id);
    assert_eq!(doc["status"], json!("finished"));
    assert!(doc.get("failure_code").is_none_or(Value::is_null));
    assert!(types(&ws.events(&id)).contains(&"run_resumed".to_string()));
    assert!(containers_of(&id).is_empty());
}

fn wait_for_node(ws: &Ws, node: &str) -> String {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(id) = ws.run_ids().pop() {
            let ev = ws.events(&id);
            if ev
                .iter()
                .any(|e| e["type"] == "tool_started" && e["node_id"] == node)
            {
                return id;
            }
        }
        assert!(Instant::now() < until, "node {node} never started");
        std::thread::sleep(Duration::from_millis(100));
    }
}

const SLEEPER: &str =
    "tool nap:\n  command: \"sleep 100\"\n\nworkflow demo:\n  entry: nap\n  sandbox: auto\n  nap -> done\n";

#[test]
fn sigint_cancels_cleans_up_and_records_cancelled() {
    if !engine_required("sigint_cancels") || !image_ready() {
        return;
    }
    let ws = Ws::with_workflow(SLEEPER);
    let mut child = ws
        .cmd(&["run", "demo.bot"], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = wait_for_node(&ws, "nap");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    // 128 + SIGINT, as shells report a process ended by Ctrl-C
    assert_eq!(status.code(), Some(130));
    let doc = ws.doc(&id);
    assert_eq!(doc["status"], json!("cancelled"));
    assert_eq!(doc["failure_code"], json!("CANCELLED"));
    assert_eq!(doc["checkpoint"]["node_id"], json!("nap"));
    let ev = ws.events(&id);
    assert_eq!(
        first(&ev, "run_cancelled")["data"],
        json!({"reason": "signal SIGINT", "code": "CANCELLED"})
    );
    assert_eq!(types(&ev).last().map(String::as_str), Some("sandbox_stopped"));
    assert!(containers_of(&id).is_empty());
}

#[test]
fn sigkill_then_a_new_run_reaps_the_dead_run() {
    if !engine_required("sigkill_then_reap") || !image_ready() {
        return;
    }
    let ws = Ws::with_workflow(SLEEPER);
    let mut child = ws
        .cmd(&["run", "demo.bot"], &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let dead = wait_for_node(&ws, "nap");
    child.kill().unwrap();
    let _ = child.wait();
    assert!(
        !containers_of(&dead).is_empty(),
        "the killed run's container is left behind"
    );
    std::fs::write(
        ws.path().join("demo.bot"),
        "tool hi:\n  command: \"echo hi\"\n\nworkflow demo:\n  entry: hi\n  sandbox: auto\n  hi -> done\n",
    )
    .unwrap();
    let out = ws.run(&["run", "demo.bot"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        containers_of(&dead).is_empty(),
        "the reaper removed the dead run's container"
    );
    let doc = ws.doc(&dead);
    assert_eq!(doc["status"], json!("failed_resumable"));
    assert_eq!(doc["failure_code"], json!("RUN_INTERRUPTED"));
}

#[test]
fn cli2_usage_errors_exit_2_without_a_run_directory() {
    let ws = Ws::demo();
    let cases: Vec<(Vec<&str>, BTreeMap<&str, &str>)> = vec![
        (vec!["run", "demo.bot", "--sandbox", "inline"], BTreeMap::new()),
        (
            vec!["run", "demo.bot"],
            BTreeMap::from([("ITERION_SANDBOX_DEFAULT", "docker")]),
        ),
        (vec!["run", "missing.bot"], BTreeMap::new()),
        (vec!["run", "demo.bot", "--var", "nope"], BTreeMap::new()),
    ];
    for (args, env) in cases {
        let env: Vec<(&str, &str)> = env.into_iter().collect();
        let out = ws.run(&args, &env);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(ws.run_ids().is_empty(), "{args:?} created a run");
    }
}

#[test]
fn xc1_compile_errors_exit_1_with_json_diagnostics() {
    let ws = Ws::with_workflow("workflow demo:\n  entry: nowhere\n");
    let out = ws.run(&["run", "demo.bot", "--json"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"], json!("compile failed"));
    assert!(!v["diagnostics"].as_array().unwrap().is_empty());
    assert!(ws.run_ids().is_empty());
}

#[test]
fn lc2_forced_noop_runs_on_the_host_and_exits_0() {
    let ws = Ws::with_workflow(
        "tool hi:\n  command: \"echo '{\\\"ok\\\": true}'\"\n\nworkflow demo:\n  entry: hi\n  hi -> done\n",
    );
    let out = ws.run(&["run", "demo.bot", "--sandbox-driver", "noop"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("── Run: demo ──\n"), "{stdout}");
    assert!(
        stdout.contains("\n  Sandbox:         skipped — operator opted into the noop driver"),
        "{stdout}"
    );
    assert!(stdout.contains("\n  node hi: finished ("), "{stdout}");
    // the node's output on its line, then the status and the end-of-run summary
    assert!(stdout.contains("s) → {\\\"ok\\\": true}\n"), "{stdout}");
    assert!(
        stdout.contains("\n\n  Status: FINISHED\n  Nodes:  1 node(s) finished\n  Record: "),
        "{stdout}"
    );
}

#[test]
fn cli5_preflight_failure_exits_2_before_any_run_directory() {
    let ws = Ws::with_workflow(
        "tool hi:\n  command: \"echo hi\"\n\nworkflow demo:\n  entry: hi\n  sandbox:\n    image: \"alpine:3\"\n  hi -> done\n",
    );
    let nowhere = format!("unix://{}", ws.path().join("absent.sock").display());
    let out = ws.run(
        &["run", "demo.bot"],
        &[
            ("ITERION_SANDBOX_PREFLIGHT", "1"),
            ("DOCKER_HOST", &nowhere),
            ("CONTAINER_HOST", &nowhere),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("sandbox preflight"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(ws.run_ids().is_empty());
}

/// What a person reads: each node's result on its line, the denied request as it happens, and the end-of-run
/// summary (the demo needs no events.jsonl reading of its own).
#[test]
fn the_human_output_shows_results_blocked_requests_and_a_summary() {
    if !engine_required("human_output_of_the_demo") || !image_ready() {
        return;
    }
    let ws = Ws::demo();
    let out = ws.run(&["run", "demo.bot"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("node where: finished ("), "{stdout}");
    assert!(stdout.contains(r#"→ {"inside":"container"}"#), "{stdout}");
    assert!(
        stdout.contains("  node fetch: blocked example.com:443 ("),
        "{stdout}"
    );
    assert!(
        stdout.contains("  Nodes:  3 node(s) finished · 1 request(s) blocked by the egress policy\n"),
        "{stdout}"
    );
}

/// A failing node's retry is announced with its delay and the error's last line, and the final failure is
/// printed once.
#[test]
fn a_retried_failure_says_so_and_is_printed_once() {
    let ws = Ws::with_workflow(
        "tool boom:\n  command: \"echo first line >&2; echo 'disk quota exceeded' >&2; exit 3\"\n\nworkflow demo:\n  entry: boom\n  sandbox: none\n  boom -> done\n",
    );
    let out = ws.run(&["run", "demo.bot"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let retry: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("node boom: failed"))
        .collect();
    assert_eq!(retry.len(), 2, "{stdout}");
    assert!(
        retry[0].contains("failed (EXECUTION_FAILED), retrying in 2.0s (retry 1): ")
            && retry[0].contains("disk quota exceeded"),
        "{stdout}"
    );
    assert!(
        retry[1].starts_with("  node boom: failed (EXECUTION_FAILED): "),
        "{stdout}"
    );
    assert!(!retry[1].contains("retrying"), "{stdout}");
}

/// An offline machine without the default image: the failure names every way out.
#[test]
fn a_default_image_that_cannot_be_had_fails_with_the_ways_out() {
    if !engine_required("default_image_ways_out") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("w.bot"),
        "tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  sandbox: auto\n  t -> done\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_iterion"))
        .args([
            "run",
            "w.bot",
            "--sandbox-default-image",
            "iterion-test/absent:never",
            "--json",
        ])
        .current_dir(tmp.path())
        .env("HOME", tmp.path())
        .env("ITERION_SANDBOX_PULL_POLICY", "never")
        .env_remove("ITERION_SANDBOX_DEFAULT")
        .env_remove("ITERION_SANDBOX_DEFAULT_IMAGE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failed = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "run_failed")
        .unwrap_or_else(|| panic!("no run_failed in {stdout}"));
    let hint = failed["data"]["hint"].as_str().unwrap_or_default();
    for way in [
        "--sandbox-default-image",
        "ITERION_SANDBOX_DEFAULT=none",
        "--sandbox none",
        "docker pull iterion-test/absent:never",
    ] {
        assert!(hint.contains(way), "no '{way}' in the hint: {failed}");
    }
}

/// The header says what was selected even when the sandbox never started, and flag errors name the flag once.
#[test]
fn honest_header_on_a_setup_failure_and_one_flag_prefix() {
    if !engine_required("honest_header") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("w.bot"),
        "tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  sandbox: auto\n  t -> done\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_iterion"))
            .args(args)
            .current_dir(tmp.path())
            .env("HOME", tmp.path())
            .env("ITERION_SANDBOX_PULL_POLICY", "never")
            .env_remove("ITERION_SANDBOX_DEFAULT")
            .env_remove("ITERION_SANDBOX_DEFAULT_IMAGE")
            .output()
            .unwrap()
    };
    let out = run(&[
        "run",
        "w.bot",
        "--sandbox-default-image",
        "iterion-test/absent:never",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("\n  Sandbox:         auto (workflow sandbox: block) · not started\n"),
        "{stdout}"
    );
    let out = run(&["run", "w.bot", "--sandbox-env", "GITHUB_TOKEN=x"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("--sandbox-env:").count(), 1, "{stderr}");
}
