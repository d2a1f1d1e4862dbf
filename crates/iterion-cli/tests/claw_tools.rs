//! The work-directory builtins of `claw` nodes (`list_files`, `search_codebase`, `patch`, `git_status`, …)
//! end to end: in a container on the real engine they act on the container's workspace (the bind-mounted
//! work dir), and the scripted fake provider receives their results; and `validate` accepts them, while
//! `agent` stays refused with its hint.
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use iterion_test_support::docker_http::request;
use iterion_test_support::fake_provider::{FakeProvider, Reply};
use iterion_test_support::{containers_of, engine_required, engine_socket};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_iterion");

/// A workspace using the local test image (a static busybox without git), with its own store and home.
struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn new(workflow: &str) -> Ws {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".devcontainer")).unwrap();
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(
            ws.join(".devcontainer/devcontainer.json"),
            r#"{"image": "iterion-test/busybox:latest"}"#,
        )
        .unwrap();
        std::fs::write(ws.join("flow.bot"), workflow).unwrap();
        std::fs::write(ws.join("src/app.txt"), "hello\nworld\n").unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Ws { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(BIN);
        c.args(args)
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
        c
    }

    async fn run(&self, fake: &FakeProvider) -> Output {
        let mut c = self.command(&["run", "flow.bot", "--sandbox-driver", "docker"]);
        c.arg("--store-dir")
            .arg(self.store())
            .env("ANTHROPIC_API_KEY", "sk-test-not-a-secret")
            .env("ANTHROPIC_BASE_URL", fake.url());
        tokio::task::spawn_blocking(move || c.output().unwrap())
            .await
            .unwrap()
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

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn flow(tools: &str, sandbox: &str) -> String {
    format!(
        "schema result:\n  ok: bool\n\nprompt ask:\n  Fix the app.\n\nagent a:\n  model: \"claude-test\"\n  user: ask\n  tools: [{tools}]\n  output: result\n\nworkflow flow:\n  entry: a\n{sandbox}  a -> done when ok\n  a -> fail\n"
    )
}

const PATCH: &str = "--- a/src/app.txt\n+++ b/src/app.txt\n@@ -1,2 +1,2 @@\n hello\n-world\n+claw\n";

/// The tool results of the second model request, by the name of the tool that produced them: (text, is_error).
fn tool_results(body: &Value) -> Vec<(String, String, bool)> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let mut names = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    for m in &messages {
        for block in m["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("tool_use") => {
                    names.insert(
                        block["id"].as_str().unwrap_or_default().to_string(),
                        block["name"].clone(),
                    );
                }
                Some("tool_result") => {
                    let id = block["tool_use_id"].as_str().unwrap_or_default();
                    let text = match &block["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
                        other => other.to_string(),
                    };
                    let name = names
                        .get(id)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    out.push((name, text, block["is_error"].as_bool().unwrap_or(false)));
                }
                _ => {}
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn workspace_tools_act_on_the_container_workspace() {
    if !engine_required("workspace_tools_act_on_the_container_workspace") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image().unwrap();
    let fake = FakeProvider::start(vec![
        Reply::ToolCalls(
            String::new(),
            vec![
                ("list_files".into(), json!({"path": "src"})),
                ("search_codebase".into(), json!({"query": "HELLO"})),
                ("patch".into(), json!({"patch": PATCH})),
                ("git_status".into(), json!({})),
                // confined to the work dir inside the container too
                ("list_files".into(), json!({"path": "/etc"})),
            ],
        ),
        Reply::text("{\"ok\": true}"),
    ])
    .await
    .unwrap();
    let port = fake.url().rsplit(':').next().unwrap().to_string();
    let sandbox = format!(
        "  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      preset: none\n      rules: [\"127.0.0.1:{port}\"]\n"
    );
    let ws = Ws::new(&flow("list_files, search_codebase, patch, git_status", &sandbox));
    let out = ws.run(&fake).await;
    assert!(out.status.success(), "{}", show(&out));
    // the patch went through the bind mount onto the host's workspace
    assert_eq!(
        std::fs::read_to_string(ws.path().join("src/app.txt")).unwrap(),
        "hello\nclaw\n"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(offered, ["list_files", "search_codebase", "git_status", "patch"]);
    let results = tool_results(&requests[1].body);
    let by = |n: usize| &results[n];
    assert_eq!(results.len(), 5, "{results:?}");
    assert_eq!(by(0).0, "list_files");
    assert_eq!((by(0).1.as_str(), by(0).2), ("src/app.txt", false));
    assert_eq!(by(1).0, "search_codebase");
    assert_eq!((by(1).1.as_str(), by(1).2), ("src/app.txt:1: hello", false));
    assert_eq!(by(2).0, "patch");
    assert_eq!(
        (by(2).1.as_str(), by(2).2),
        ("patched src/app.txt (1 hunk(s))", false)
    );
    // the busybox image has no git
    assert_eq!(by(3).0, "git_status");
    assert_eq!(
        (by(3).1.as_str(), by(3).2),
        (
            "git_status: git is not available in this environment (no git program on PATH)",
            true
        )
    );
    assert_eq!(
        (by(4).1.as_str(), by(4).2),
        ("list_files: path '/etc' is outside the work directory", true)
    );
}

#[test]
fn validate_accepts_the_workspace_tools_and_refuses_agent_with_a_hint() {
    let tools = "list_files, tree, search_codebase, git_status, git_diff, run_command, patch, read_image";
    let ws = Ws::new(&flow(tools, ""));
    let out = ws.command(&["validate", "flow.bot"]).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let ws = Ws::new(&flow("read_file, agent", ""));
    let out = ws.command(&["validate", "flow.bot"]).output().unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    let text = show(&out);
    assert!(
        text.contains("error[X006]: tool 'agent' is not available to claw agents in this version"),
        "{text}"
    );
    assert!(
        text.contains("sub-agents are not available to claw agents yet"),
        "{text}"
    );
    assert_eq!(text.matches("X006").count(), 1, "{text}");
}
