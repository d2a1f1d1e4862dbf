//! End-to-end `iterion run --sandbox-driver podman` against a Podman service (`.ci/run` starts one on
//! /run/podman/podman.sock; `CONTAINER_HOST=unix://…` names another). Without Podman the tests are skipped with
//! a notice, and fail when `CI` or `ITERION_REQUIRE_PODMAN=1` is set.
//!
//! Each workspace is a temporary directory with a devcontainer naming the local test image and its own store
//! next to it; its drop guard removes whatever its runs left on the Podman engine.
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use iterion_test_support::podman::{self, Kind};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_iterion");

const DEVCONTAINER: &str = r#"{
  "image": "iterion-test/busybox:latest",
  "containerEnv": { "DEPLOY_TOKEN": "from-the-repository", "PLAIN_VALUE": "kept" }
}
"#;

/// A workspace with its own store, on one Podman socket.
struct Ws {
    dir: tempfile::TempDir,
    socket: PathBuf,
    store: PathBuf,
}

impl Ws {
    fn new(socket: &Path, workflow: &str) -> Ws {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".devcontainer")).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::write(ws.join(".devcontainer/devcontainer.json"), DEVCONTAINER).unwrap();
        std::fs::write(ws.join("flow.bot"), workflow).unwrap();
        // The run store, a sibling of the workspace (where the default data directory puts it: outside).
        let store = dir.path().join("store");
        Ws {
            dir,
            socket: socket.to_path_buf(),
            store,
        }
    }

    /// The same with the store inside the workspace (a project-local `.iterion`).
    fn with_store_inside(socket: &Path, workflow: &str) -> Ws {
        let mut ws = Ws::new(socket, workflow);
        ws.store = ws.path().join(".iterion");
        ws
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn store(&self) -> PathBuf {
        self.store.clone()
    }

    /// `iterion run flow.bot --sandbox-driver podman` on this workspace's Podman socket. Docker is pointed at
    /// a socket that does not exist so nothing can fall back to it; a secret-looking variable is set in
    /// iterion's own environment to show it stays out of the sandbox.
    fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.args([
            "run",
            "flow.bot",
            "--json",
            "--sandbox-driver",
            "podman",
            "--store-dir",
        ])
        .arg(self.store())
        .current_dir(self.path())
        .env("HOME", self.dir.path().join("home"))
        .env("CONTAINER_HOST", format!("unix://{}", self.socket.display()))
        .env(
            "DOCKER_HOST",
            format!("unix://{}", self.dir.path().join("no-docker.sock").display()),
        )
        .env("DEPLOY_TOKEN", "from-the-host")
        // never ask a registry: the image is imported locally
        .env("ITERION_SANDBOX_PULL_POLICY", "never")
        .env_remove("ITERION_SANDBOX_DRIVER")
        .env_remove("ITERION_SANDBOX_DEFAULT")
        .env_remove("ITERION_SANDBOX_FLOOR")
        .env_remove("ITERION_HOME");
        c
    }

    fn run(&self) -> Output {
        self.cmd().output().unwrap()
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
        let p = self.store().join("runs").join(id).join("run.json");
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    }

    fn events(&self, id: &str) -> Vec<Value> {
        std::fs::read_to_string(self.store().join("runs").join(id).join("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Ids of the containers and networks Podman holds for run `id`.
    fn left_behind(&self, id: &str) -> Vec<String> {
        let label = format!("iterion.io/run-id={id}");
        let mut out = Vec::new();
        for kind in [Kind::Containers, Kind::Networks] {
            let ids = podman::labelled(&self.socket, kind, &label).expect("list on podman");
            out.extend(ids.into_iter().map(|i| format!("{kind:?} {i}")));
        }
        out
    }
}

impl Drop for Ws {
    fn drop(&mut self) {
        for id in self.run_ids() {
            let label = format!("iterion.io/run-id={id}");
            for kind in [Kind::Containers, Kind::Networks] {
                for r in podman::labelled(&self.socket, kind, &label).unwrap_or_default() {
                    podman::remove(&self.socket, kind, &r);
                }
            }
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

fn output_of<'a>(events: &'a [Value], node: &str) -> &'a Value {
    &events
        .iter()
        .find(|e| e["type"] == "node_finished" && e["node_id"] == node)
        .unwrap_or_else(|| panic!("node {node} did not finish: {:?}", types(events)))["data"]["output"]
}

/// The Podman socket with the test images in its store, or `None` when the test is skipped.
fn podman_ready(test: &str) -> Option<PathBuf> {
    let socket = podman::required(test)?;
    podman::ensure_test_images(&socket).expect("test images in podman's store");
    Some(socket)
}

/// `where` proves the node ran in a Podman container (Podman writes /run/.containerenv); `probe` reports the
/// routes, a direct connection attempt and the environment it sees (read with `env`, since iterion expands
/// `$NAME` in a command from the launching environment); `fetch` sends a CONNECT for a host the
/// allowlist does not name, with the node's own proxy credentials, and reports the proxy's status line.
const ALLOWLIST_FLOW: &str = r#"tool where:
  command: `if [ -f /run/.containerenv ]; then echo '{"inside": "container"}'; else echo '{"inside": "host"}'; fi`

tool probe:
  command: `r=$(grep -c . /proc/net/route); if echo x | nc -w 3 1.1.1.1 80 >/dev/null 2>&1; then d=reached; else d=refused; fi; t=$(env | grep -c '^DEPLOY_TOKEN='); v=$(env | sed -n 's/^PLAIN_VALUE=//p'); echo "{\"route_lines\": $r, \"direct\": \"$d\", \"tokens\": $t, \"plain\": \"$v\"}"`

tool fetch:
  command: `p=${HTTP_PROXY#http://}; auth=$(printf %s "${p%@*}" | base64 | tr -d '\n'); hp=${p#*@}; reply=$(printf 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic %s\r\n\r\n' "$auth" | nc -w 10 "${hp%:*}" "${hp#*:}" | head -n 1 | tr -d '\r'); echo "{\"status_line\": \"$reply\"}"`

workflow flow:
  entry: where
  sandbox:
    mode: auto
    network:
      mode: allowlist
      preset: none
      rules: ["allowed.test"]
  where -> probe
  probe -> fetch
  fetch -> done
"#;

#[test]
fn an_allowlisted_run_is_contained_by_podman_and_leaves_nothing_behind() {
    let Some(socket) = podman_ready("an_allowlisted_run_is_contained_by_podman") else {
        return;
    };
    let ws = Ws::new(&socket, ALLOWLIST_FLOW);
    let out = ws.run();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let id = ws.run_ids().pop().expect("a run directory");
    let ev = ws.events(&id);
    let t = types(&ev);
    assert!(t.contains(&"run_finished".to_string()), "{t:?}");
    assert_eq!(t.last().map(String::as_str), Some("sandbox_stopped"));
    assert_eq!(
        first(&ev, "sandbox_started")["data"]["enforced_egress"],
        json!(true)
    );
    assert_eq!(ws.doc(&id)["sandbox"]["driver"], json!("podman"));
    assert_eq!(output_of(&ev, "where"), &json!({"inside": "container"}));

    // No route but through the proxy: only the header line of the routing table, no direct connection.
    // The repository's secret-looking variable is dropped and reported, the host's never enters; a plain
    // repository variable is kept.
    assert_eq!(
        output_of(&ev, "probe"),
        &json!({"route_lines": 1, "direct": "refused", "tokens": 0, "plain": "kept"})
    );
    let denied = first(&ev, "sandbox_env_denied");
    assert_eq!(denied["data"]["names"], json!(["DEPLOY_TOKEN"]));

    // A CONNECT outside the allowlist: 403 from the proxy and its network_blocked event naming the node.
    let status = output_of(&ev, "fetch")["status_line"]
        .as_str()
        .unwrap_or_default();
    assert!(status.starts_with("HTTP/1.1 403"), "{status}");
    let blocked = first(&ev, "network_blocked");
    assert_eq!(blocked["node_id"], json!("fetch"));
    assert_eq!(blocked["data"]["host"], json!("example.com"));
    assert_eq!(blocked["data"]["reason"], json!("policy denial"));

    assert_eq!(ws.left_behind(&id), Vec::<String>::new());
    assert!(!ws.store().join("runs").join(&id).join("net").exists());
}

const SLEEPER: &str = "tool nap:\n  command: \"sleep 100\"\n\nworkflow flow:\n  entry: nap\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      preset: none\n      rules: [\"allowed.test\"]\n  nap -> done\n";

const QUICK: &str =
    "tool hi:\n  command: \"echo hi\"\n\nworkflow flow:\n  entry: hi\n  sandbox: auto\n  hi -> done\n";

fn wait_for_node(ws: &Ws, node: &str) -> String {
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(id) = ws.run_ids().pop()
            && ws
                .events(&id)
                .iter()
                .any(|e| e["type"] == "tool_started" && e["node_id"] == node)
        {
            return id;
        }
        assert!(Instant::now() < until, "node {node} never started");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The repository's demo, run as is on Podman: its `where` node must say the node ran inside a container
/// (Podman writes `/run/.containerenv`, not Docker's `/.dockerenv`), and its denied fetch is blocked.
#[test]
fn the_demo_knows_it_runs_inside_a_podman_container() {
    let Some(socket) = podman_ready("the_demo_knows_it_runs_inside_a_podman_container") else {
        return;
    };
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo/demo.bot");
    let ws = Ws::new(&socket, &std::fs::read_to_string(demo).unwrap());
    let out = ws.run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = ws.run_ids().pop().unwrap();
    let ev = ws.events(&id);
    assert_eq!(first(&ev, "sandbox_started")["data"]["driver"], json!("podman"));
    assert_eq!(output_of(&ev, "where"), &json!({"inside": "container"}));
    assert_eq!(output_of(&ev, "fetch"), &json!({"blocked": true}));
    assert!(ws.path().join("demo-output.txt").is_file());
    assert_eq!(ws.left_behind(&id), Vec::<String>::new());
}

#[test]
fn the_reaper_removes_the_podman_sandbox_of_a_killed_run() {
    let Some(socket) = podman_ready("the_reaper_removes_the_podman_sandbox_of_a_killed_run") else {
        return;
    };
    let ws = Ws::new(&socket, SLEEPER);
    let mut child = ws
        .cmd()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let dead = wait_for_node(&ws, "nap");
    child.kill().unwrap();
    let _ = child.wait();
    assert!(
        !ws.left_behind(&dead).is_empty(),
        "the killed run's sandbox is left behind"
    );
    std::fs::write(ws.path().join("flow.bot"), QUICK).unwrap();
    let out = ws.run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("sandbox: reaped leftover"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ws.left_behind(&dead), Vec::<String>::new());
    let doc = ws.doc(&dead);
    assert_eq!(doc["status"], json!("failed_resumable"));
    assert_eq!(doc["failure_code"], json!("RUN_INTERRUPTED"));
    let fresh: Vec<String> = ws.run_ids().into_iter().filter(|i| *i != dead).collect();
    assert_eq!(fresh.len(), 1, "{fresh:?}");
    assert_eq!(ws.doc(&fresh[0])["status"], json!("finished"));
    assert_eq!(ws.left_behind(&fresh[0]), Vec::<String>::new());
}

/// A store inside the workspace (a project-local `.iterion`) is hidden from the sandbox behind an empty tmpfs.
/// Podman copies a tmpfs mount point's contents into the tmpfs unless told `notmpcopyup`: without it the start
/// fails (the copied store overflows the small tmpfs) or, with a small store, the records are readable inside.
#[test]
fn a_store_inside_the_workspace_is_hidden_from_a_podman_sandbox() {
    let Some(socket) = podman_ready("a_store_inside_the_workspace_is_hidden_from_a_podman_sandbox") else {
        return;
    };
    let ws = Ws::with_store_inside(
        &socket,
        "tool peek:\n  command: `n=$(ls -A .iterion | wc -l); echo \"{\\\"entries\\\": $n}\"`\n\nworkflow flow:\n  entry: peek\n  sandbox: auto\n  peek -> done\n",
    );
    let out = ws.run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = ws.run_ids().pop().expect("a run directory");
    assert_eq!(output_of(&ws.events(&id), "peek"), &json!({"entries": 0}));
    assert_eq!(ws.left_behind(&id), Vec::<String>::new());
}

/// A claw node in the run container on Podman: the static runner is bound and runs in the busybox image, its
/// `bash` (through `sh`) and `write_file` act in the container, and the model is reached through the proxy.
#[test]
fn a_claw_node_runs_its_runner_in_a_podman_container() {
    use iterion_test_support::fake_provider::{FakeProvider, Reply};
    let Some(socket) = podman_ready("a_claw_node_runs_its_runner_in_a_podman_container") else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt
        .block_on(FakeProvider::start(vec![
            Reply::ToolCalls(
                String::new(),
                vec![
                    ("bash".into(), json!({"command": "hostname > where.txt"})),
                    (
                        "write_file".into(),
                        json!({"path": "claw.txt", "content": "from podman"}),
                    ),
                ],
            ),
            Reply::text("{\"ok\": true}"),
        ]))
        .unwrap();
    let port = fake.url().rsplit(':').next().unwrap().to_string();
    let flow = format!(
        "schema result:\n  ok: bool\n\nagent a:\n  model: \"claude-test\"\n  tools: [bash, write_file]\n  output: result\n\nworkflow flow:\n  entry: a\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      preset: none\n      rules: [\"127.0.0.1:{port}\"]\n  a -> done when ok\n  a -> fail\n"
    );
    let ws = Ws::new(&socket, &flow);
    let out = ws
        .cmd()
        .env("ANTHROPIC_API_KEY", "sk-test-not-a-secret")
        .env("ANTHROPIC_BASE_URL", fake.url())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let id = ws.run_ids().pop().expect("a run directory");
    let ev = ws.events(&id);
    assert_eq!(
        first(&ev, "sandbox_claw_routed_via_runner")["data"]["binary"],
        json!("mounted")
    );
    assert_eq!(output_of(&ev, "a"), &json!({"ok": true}));
    // bash ran in the run container: its hostname is that container's
    let container = first(&ev, "sandbox_started")["data"]["container"]
        .as_str()
        .unwrap()
        .to_string();
    let hostname = std::fs::read_to_string(ws.path().join("where.txt")).unwrap();
    assert!(
        container.starts_with(hostname.trim()),
        "{hostname} vs {container}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("claw.txt")).unwrap(),
        "from podman"
    );
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(ws.left_behind(&id), Vec::<String>::new());
}
