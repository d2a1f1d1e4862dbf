//! `claw` nodes end to end through `iterion run`: on the host (`--sandbox none`: the CLI's own
//! `iterion __claw-runner`), and in a container on the real engine (the static runner bound read-only at
//! `/usr/local/bin/iterion`, model traffic through the run's egress proxy), against the scripted fake provider
//! on loopback. Also LC15: a runner that cannot start in the container fails the run before `run_started`.
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use iterion_test_support::docker_http::request;
use iterion_test_support::fake_provider::{FakeProvider, Reply};
use iterion_test_support::{containers_of, engine_required, engine_socket};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_iterion");

/// A workspace using the local test image (a static busybox: no C library), with its own store and home.
struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn new(workflow: &str) -> Ws {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".devcontainer")).unwrap();
        std::fs::write(
            ws.join(".devcontainer/devcontainer.json"),
            r#"{"image": "iterion-test/busybox:latest"}"#,
        )
        .unwrap();
        std::fs::write(ws.join("flow.bot"), workflow).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Ws { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    async fn run(&self, args: &[&str], env: &[(&str, String)]) -> Output {
        let mut c = std::process::Command::new(BIN);
        c.arg("run")
            .arg("flow.bot")
            .args(args)
            .arg("--store-dir")
            .arg(self.store())
            .current_dir(self.path())
            .env("HOME", self.dir.path().join("home"))
            .env("ITERION_SANDBOX_PULL_POLICY", "never")
            .env("ITERION_ENVELOPE_HANDSHAKE_TIMEOUT", "30s")
            .env_remove("ITERION_SANDBOX_DEFAULT")
            .env_remove("ITERION_SANDBOX_FLOOR")
            .env_remove("ITERION_HOME")
            .env_remove("ITERION_BIN")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_BASE_URL");
        for (k, v) in env {
            c.env(k, v);
        }
        tokio::task::spawn_blocking(move || c.output().unwrap())
            .await
            .unwrap()
    }

    fn run_id(&self) -> String {
        let mut ids: Vec<String> = std::fs::read_dir(self.store().join("runs"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(ids.len(), 1, "{ids:?}");
        ids.pop().unwrap()
    }

    fn events(&self) -> Vec<Value> {
        let path = self.store().join("runs").join(self.run_id()).join("events.jsonl");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn session(&self, node: &str) -> Option<Value> {
        let p = self
            .store()
            .join("runs")
            .join(self.run_id())
            .join("sessions")
            .join(format!("{node}.json"));
        serde_json::from_slice(&std::fs::read(p).ok()?).ok()
    }
}

impl Drop for Ws {
    fn drop(&mut self) {
        let Ok(rd) = std::fs::read_dir(self.store().join("runs")) else {
            return;
        };
        for id in rd.flatten() {
            for c in containers_of(&id.file_name().to_string_lossy()) {
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

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A claw node whose model asks for `bash` (writing the hostname, and the first line of a file only the
/// image has) and `write_file`, then answers the schema. `{sandbox}` is the workflow's sandbox block.
fn flow(sandbox: &str) -> String {
    format!(
        "schema result:\n  ok: bool\n\nprompt ask:\n  Leave a trace.\n\nagent a:\n  model: \"claude-test\"\n  user: ask\n  tools: [bash, write_file]\n  output: result\n\nworkflow flow:\n  entry: a\n{sandbox}  a -> done when ok\n  a -> fail\n"
    )
}

/// The scripted model. In a container (`in_container`), `bash` also tries to overwrite the bound runner
/// (never on the host, where that path may be a real installation).
fn script(in_container: bool) -> Vec<Reply> {
    let mut command = "hostname > where.txt; if [ -e /.dockerenv ]; then echo container >> where.txt; else echo host >> where.txt; fi".to_string();
    if in_container {
        command.push_str("; if echo x 2>/dev/null > /usr/local/bin/iterion; then echo runner-writable >> where.txt; else echo runner-readonly >> where.txt; fi");
    }
    vec![
        Reply::ToolCalls(
            String::new(),
            vec![
                ("bash".into(), json!({ "command": command })),
                (
                    "write_file".into(),
                    json!({"path": "claw.txt", "content": "written by claw"}),
                ),
            ],
        ),
        Reply::text("{\"ok\": true}"),
    ]
}

fn keys(fake: &FakeProvider) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_API_KEY", "sk-test-not-a-secret".to_string()),
        ("ANTHROPIC_BASE_URL", fake.url()),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claw_node_on_the_host_runs_the_cli_runner() {
    let fake = FakeProvider::start(script(false)).await.unwrap();
    let ws = Ws::new(&flow(""));
    let out = ws.run(&["--sandbox", "none"], &keys(&fake)).await;
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("claw.txt")).unwrap(),
        "written by claw"
    );
    let where_ = std::fs::read_to_string(ws.path().join("where.txt")).unwrap();
    // bash ran on this machine: the hostname is ours (this machine may itself be a container)
    let ours = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(where_.lines().next(), Some(ours.trim()), "{where_}");
    let ev = ws.events();
    let started = first(&ev, "delegate_started");
    assert_eq!(started["data"]["placement"], json!("host"));
    assert_eq!(started["data"]["via"], json!("runner"));
    let t = types(&ev);
    assert!(t.contains(&"llm_request".to_string()), "{t:?}");
    assert!(!t.contains(&"sandbox_claw_routed_via_runner".to_string()));
    assert!(
        ws.session("a").is_some(),
        "the session snapshot is stored under the run"
    );
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claw_node_in_a_container_runs_its_tools_inside_and_talks_through_the_proxy() {
    if !engine_required("a_claw_node_in_a_container_runs_its_tools_inside") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image().unwrap();
    let fake = FakeProvider::start(script(true)).await.unwrap();
    let port = fake.url().rsplit(':').next().unwrap().to_string();
    // The container has no route but the proxy; the fake provider on the host's loopback is reachable only
    // through it, and only because a rule names it (the SSRF guard refuses loopback otherwise).
    let sandbox = format!(
        "  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      preset: none\n      rules: [\"127.0.0.1:{port}\"]\n"
    );
    let ws = Ws::new(&flow(&sandbox));
    let out = ws.run(&["--sandbox-driver", "docker"], &keys(&fake)).await;
    assert!(out.status.success(), "{}", show(&out));
    let ev = ws.events();
    let routed = first(&ev, "sandbox_claw_routed_via_runner");
    assert_eq!(routed["data"]["nodes"], json!(["a"]));
    assert_eq!(routed["data"]["binary"], json!("mounted"));
    let container = first(&ev, "sandbox_started")["data"]["container"]
        .as_str()
        .unwrap()
        .to_string();
    // bash ran in the container: its hostname is the container's, and /.dockerenv exists there
    let where_ = std::fs::read_to_string(ws.path().join("where.txt")).unwrap();
    let mut lines = where_.lines();
    let hostname = lines.next().unwrap();
    assert!(container.starts_with(hostname), "{hostname} vs {container}");
    assert_eq!(lines.next(), Some("container"));
    // the bound runner cannot be replaced from inside for later nodes
    assert_eq!(lines.next(), Some("runner-readonly"));
    // write_file wrote into the bind-mounted workspace
    assert_eq!(
        std::fs::read_to_string(ws.path().join("claw.txt")).unwrap(),
        "written by claw"
    );
    assert_eq!(first(&ev, "delegate_started")["data"]["placement"], json!("run"));
    let finished: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == "node_finished" && e["node_id"] == "a")
        .collect();
    assert_eq!(finished[0]["data"]["output"], json!({"ok": true}));
    let t = types(&ev);
    assert!(t.contains(&"tool_called".to_string()), "{t:?}");
    assert!(!t.contains(&"network_blocked".to_string()), "{t:?}");
    assert_eq!(
        fake.requests().len(),
        2,
        "both model calls reached the provider through the proxy"
    );
    assert!(ws.session("a").is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_the_allowlist_does_not_name_is_blocked() {
    if !engine_required("a_provider_the_allowlist_does_not_name_is_blocked") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image().unwrap();
    let fake = FakeProvider::start(script(true)).await.unwrap();
    let sandbox = "  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      preset: none\n      rules: [\"allowed.test\"]\n";
    let ws = Ws::new(&flow(sandbox));
    let out = ws.run(&["--sandbox-driver", "docker"], &keys(&fake)).await;
    assert!(!out.status.success(), "{}", show(&out));
    let ev = ws.events();
    let blocked = first(&ev, "network_blocked");
    assert_eq!(blocked["node_id"], json!("a"));
    assert_eq!(blocked["data"]["host"], json!("127.0.0.1"));
    assert_eq!(fake.requests().len(), 0, "nothing reached the provider");
    assert!(!Path::new(&ws.path().join("claw.txt")).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn lc15_a_runner_that_cannot_start_in_the_container_fails_before_run_started() {
    if !engine_required("lc15_a_runner_that_cannot_start_in_the_container") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image().unwrap();
    let fake = FakeProvider::start(script(true)).await.unwrap();
    let ws = Ws::new(&flow("  sandbox: auto\n"));
    // an ELF program of the right architecture that the container cannot start: a dynamically linked host
    // program (the image has no C library, so no program interpreter)
    let bogus = ws.dir.path().join("iterion-bogus");
    std::fs::copy("/bin/true", &bogus).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bogus, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut env = keys(&fake);
    env.push(("ITERION_BIN", bogus.to_string_lossy().into_owned()));
    let out = ws.run(&["--sandbox-driver", "docker"], &env).await;
    assert!(!out.status.success(), "{}", show(&out));
    let ev = ws.events();
    let t = types(&ev);
    assert!(!t.contains(&"run_started".to_string()), "{t:?}");
    let routed = first(&ev, "sandbox_claw_routed_via_runner");
    assert_eq!(routed["data"]["binary"], json!("mounted"));
    assert_eq!(routed["data"]["host_path"], json!(bogus.to_string_lossy()));
    let failed = first(&ev, "run_failed");
    assert_eq!(
        failed["data"]["code"],
        json!("SANDBOX_RUNNER_UNAVAILABLE"),
        "{failed}"
    );
    assert!(failed["data"]["hint"].as_str().unwrap().contains("ITERION_BIN"));
    // it passed the architecture check: the probe inside the container refused it
    let error = failed["data"]["error"].as_str().unwrap();
    assert!(
        error.starts_with("the claw runner cannot start in the container"),
        "{error}"
    );
    assert_eq!(fake.requests().len(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claw_node_in_its_own_container_gets_the_runner_too() {
    if !engine_required("a_claw_node_in_its_own_container_gets_the_runner_too") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image().unwrap();
    let fake = FakeProvider::start(script(true)).await.unwrap();
    let port = fake.url().rsplit(':').next().unwrap().to_string();
    let workflow = format!(
        "schema result:\n  ok: bool\n\nagent a:\n  model: \"claude-test\"\n  tools: [bash, write_file]\n  output: result\n  sandbox:\n    image: \"iterion-test/busybox:latest\"\n    network:\n      mode: allowlist\n      preset: none\n      rules: [\"127.0.0.1:{port}\"]\n\nworkflow flow:\n  entry: a\n  sandbox: none\n  a -> done when ok\n  a -> fail\n"
    );
    let ws = Ws::new(&workflow);
    let out = ws.run(&["--sandbox-driver", "docker"], &keys(&fake)).await;
    assert!(out.status.success(), "{}", show(&out));
    let ev = ws.events();
    let routed = first(&ev, "sandbox_claw_routed_via_runner");
    assert_eq!(routed["data"]["nodes"], json!(["a"]));
    assert_eq!(routed["data"]["binary"], json!("mounted"));
    assert_eq!(first(&ev, "delegate_started")["data"]["placement"], json!("own"));
    // bash ran in the node's container: its hostname is that container's
    let container = first(&ev, "sandbox_node_container_started")["data"]["container"]
        .as_str()
        .unwrap()
        .to_string();
    let where_ = std::fs::read_to_string(ws.path().join("where.txt")).unwrap();
    let hostname = where_.lines().next().unwrap();
    assert!(container.starts_with(hostname), "{hostname} vs {container}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("claw.txt")).unwrap(),
        "written by claw"
    );
}

/// A 64-bit little-endian ELF header for `machine` (the rest of a program is not needed: the file is refused
/// from its header before anything runs it).
fn elf_header(machine: u16) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2;
    b[5] = 1;
    b[6] = 1;
    b[16] = 2;
    b[18..20].copy_from_slice(&machine.to_le_bytes());
    b
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_built_for_another_architecture_is_refused_before_run_started() {
    if !engine_required("a_runner_built_for_another_architecture_is_refused") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image().unwrap();
    let fake = FakeProvider::start(script(true)).await.unwrap();
    let ws = Ws::new(&flow("  sandbox: auto\n"));
    // an aarch64 program on an x86_64 engine, an x86_64 one elsewhere
    let (machine, name) = if std::env::consts::ARCH == "aarch64" {
        (62, "x86_64")
    } else {
        (183, "aarch64")
    };
    let foreign = ws.dir.path().join("iterion-foreign");
    std::fs::write(&foreign, elf_header(machine)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut env = keys(&fake);
    env.push(("ITERION_BIN", foreign.to_string_lossy().into_owned()));
    let out = ws.run(&["--sandbox-driver", "docker"], &env).await;
    assert!(!out.status.success(), "{}", show(&out));
    let ev = ws.events();
    let t = types(&ev);
    assert!(!t.contains(&"run_started".to_string()), "{t:?}");
    assert!(
        !t.contains(&"sandbox_started".to_string()),
        "refused before the container starts: {t:?}"
    );
    let failed = first(&ev, "run_failed");
    assert_eq!(
        failed["data"]["code"],
        json!("SANDBOX_RUNNER_UNAVAILABLE"),
        "{failed}"
    );
    let error = failed["data"]["error"].as_str().unwrap();
    assert!(error.contains(&*foreign.to_string_lossy()), "{error}");
    assert!(
        error.contains(&format!("is built for {name}, the engine runs ")),
        "{error}"
    );
    assert!(failed["data"]["hint"].as_str().unwrap().contains("ITERION_BIN"));
    assert_eq!(fake.requests().len(), 0);
}

/// A fake codex CLI that leaves `called` in `dir` and answers one successful turn.
fn fake_codex(dir: &Path) -> PathBuf {
    let p = dir.join("codex");
    let called = dir.join("called");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\necho \"$@\" > '{}'\ncat > /dev/null\necho '{{\"type\":\"thread.started\",\"thread_id\":\"th-cli\"}}'\necho '{{\"type\":\"item.completed\",\"item\":{{\"id\":\"i\",\"type\":\"agent_message\",\"text\":\"{{\\\"ok\\\": true}}\"}}}}'\necho '{{\"type\":\"turn.completed\",\"usage\":{{\"input_tokens\":3,\"output_tokens\":2}}}}'\n",
            called.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

const CODEX_FLOW: &str = "schema result:\n  ok: bool\n\nagent a:\n  backend: \"codex\"\n  output: result\n\nworkflow flow:\n  entry: a\n  sandbox: auto\n  a -> done when ok\n  a -> fail\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_codex_node_runs_on_the_host_with_a_warning_when_the_run_is_not_sandboxed() {
    let ws = Ws::new(CODEX_FLOW);
    let codex = fake_codex(ws.dir.path());
    let out = ws
        .run(
            &["--sandbox", "none"],
            &[("ITERION_CODEX_BIN", codex.to_string_lossy().into_owned())],
        )
        .await;
    assert!(out.status.success(), "{}", show(&out));
    let called = std::fs::read_to_string(ws.dir.path().join("called")).unwrap();
    assert!(
        called.starts_with("exec --json --skip-git-repo-check"),
        "{called}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("partially sandboxed by codex itself"),
        "{}",
        show(&out)
    );
    let ev = ws.events();
    assert_eq!(first(&ev, "delegate_started")["data"]["backend"], json!("codex"));
    let finished: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == "node_finished" && e["node_id"] == "a")
        .collect();
    assert_eq!(finished[0]["data"]["output"]["ok"], json!(true));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_codex_node_in_a_sandboxed_run_is_refused_before_run_started() {
    if !engine_required("a_codex_node_in_a_sandboxed_run_is_refused") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image().unwrap();
    let ws = Ws::new(CODEX_FLOW);
    let codex = fake_codex(ws.dir.path());
    let env = [("ITERION_CODEX_BIN", codex.to_string_lossy().into_owned())];
    // the dry run says so, and agrees with the run
    let dry = ws
        .run(&["--sandbox-driver", "docker", "--dry-run", "--json"], &env)
        .await;
    let doc: Value = serde_json::from_slice(&dry.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&dry)));
    assert_eq!(doc["refused"]["code"], json!("SANDBOX_SPEC_INVALID"), "{doc:#}");
    let out = ws.run(&["--sandbox-driver", "docker"], &env).await;
    assert!(!out.status.success(), "{}", show(&out));
    let ev = ws.events();
    let t = types(&ev);
    assert!(!t.contains(&"run_started".to_string()), "{t:?}");
    assert!(!t.contains(&"sandbox_started".to_string()), "{t:?}");
    let failed = first(&ev, "run_failed");
    assert_eq!(failed["data"]["code"], json!("SANDBOX_SPEC_INVALID"), "{failed}");
    assert_eq!(
        failed["data"]["error"],
        json!(
            "backend codex cannot run inside the iterion sandbox (it runs the host codex CLI with its own sandbox), and node 'a' would run in a container"
        )
    );
    assert!(
        failed["data"]["hint"]
            .as_str()
            .unwrap()
            .contains("--sandbox none")
    );
    assert_eq!(doc["refused"]["error"], failed["data"]["error"]);
    assert!(!ws.dir.path().join("called").exists(), "codex never ran");
}
