//! MCP servers of a `claude_code` node in a real container (09 §6.4; MC4 of §9.5): the health check and the
//! agent CLI's config file happen inside the container, not on the host. Needs a container engine (skipped
//! with a notice without one, a failure under `CI=1`); the image is the local busybox test image.

#[path = "../examples/embed_docker.rs"]
mod example;

use std::collections::BTreeMap;
use std::path::Path;

use iterion_runtime::failure::FailureCode;
use iterion_runtime::status::RunStatus;
use iterion_test_support::engine_required;

const DEVCONTAINER: &str = r#"{ "name": "mcp test", "image": "iterion-test/busybox:latest" }"#;

/// A stdio MCP server that answers only inside a container: its health check passing proves where it ran.
const SERVER: &str = r#"#!/bin/sh
[ -f /.dockerenv ] || [ -f /run/.containerenv ] || { echo "not in a container" >&2; exit 1; }
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  if [ -n "$id" ]; then printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$id"; fi
done
"#;

/// A stand-in agent CLI: reports (as its result text) where its --mcp-config file is, its mode, whether it
/// names the server, and whether the server answers a ping when started as the config says.
const AGENT: &str = r#"#!/bin/sh
cat > /dev/null
prev=
cfg=
for a in "$@"; do
  if [ "$prev" = "--mcp-config" ]; then cfg=$a; fi
  prev=$a
done
mode=$(stat -c %a "$cfg")
srv=$(grep -c '"command":"sh"' "$cfg")
answer=$(printf '%s\n' '{"jsonrpc":"2.0","id":7,"method":"ping"}' | sh ./mcp-server.sh | grep -c '"id":7')
printf '{"result":"cfg=%s mode=%s srv=%s answer=%s","session_id":"in-container"}\n' "$cfg" "$mode" "$srv" "$answer"
"#;

fn workflow(command: &str, args: &str) -> String {
    format!(
        r#"mcp_server srv:
  transport: stdio
  command: "{command}"
  args: [{args}]

agent a:
  backend: "claude_code"

tool leftover:
  command: `if ls /tmp/iterion-mcp-* >/dev/null 2>&1; then echo 'config file left behind' >&2; exit 1; fi; echo '{{"clean": true}}'`

workflow w:
  entry: a
  sandbox: auto
  mcp:
    servers: [srv]
  a -> leftover
  leftover -> done
"#
    )
}

/// Runs `workflow` in a fresh workspace with the server script and the stand-in CLI.
fn run(dir: &Path, workflow: &str) -> (iterion_runtime::lifecycle::Outcome, String) {
    let ws = dir.join("ws");
    std::fs::create_dir_all(ws.join(".devcontainer")).expect("mkdir");
    std::fs::write(ws.join(".devcontainer/devcontainer.json"), DEVCONTAINER).expect("write");
    std::fs::write(ws.join("flow.bot"), workflow).expect("write");
    std::fs::write(ws.join("mcp-server.sh"), SERVER).expect("write");
    std::fs::write(ws.join("claude"), AGENT).expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(ws.join("claude"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| !k.starts_with("ITERION_") && !k.starts_with("ANTHROPIC_"))
        .collect();
    env.insert("HOME".into(), dir.join("home").display().to_string());
    env.insert("ITERION_HOME".into(), dir.join("data").display().to_string());
    env.insert("ITERION_SANDBOX_PULL_POLICY".into(), "never".into());
    // the stand-in CLI in the workspace, relative to the node's working directory in the container
    env.insert("ITERION_CLAUDE_BIN".into(), "./claude".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let outcome = rt
        .block_on(example::embed(&env, &ws.join("flow.bot"), &ws))
        .unwrap_or_else(|e| panic!("embed: {e}"));
    let events = std::fs::read_to_string(outcome.run_dir.join("events.jsonl")).expect("events");
    let leftover = iterion_test_support::containers_of(&outcome.run_id);
    assert!(leftover.is_empty(), "containers left behind: {leftover:?}");
    (outcome, events)
}

#[test]
fn mcp_stdio_server_starts_inside_the_container() {
    if !engine_required("mcp_stdio_server_starts_inside_the_container") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image()
        .unwrap_or_else(|e| panic!("cannot prepare the local test image: {e}"));
    let dir = tempfile::tempdir().expect("tempdir");
    let (o, events) = run(dir.path(), &workflow("sh", r#""./mcp-server.sh""#));
    assert_eq!(
        o.status,
        RunStatus::Finished,
        "{:?} {:?}\n{events}",
        o.failure_code,
        o.error
    );
    let finished = events
        .lines()
        .find(|l| l.contains("\"node_finished\"") && l.contains("\"node_id\":\"a\""))
        .unwrap_or_else(|| panic!("no node_finished for a in {events}"));
    let v: serde_json::Value = serde_json::from_str(finished).expect("json");
    let text = v["data"]["output"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // the config was inside the container (a path the host does not have), private, naming the server, and
    // the server it describes answers there
    let cfg = text
        .split(' ')
        .find_map(|w| w.strip_prefix("cfg="))
        .unwrap_or_default();
    assert!(
        cfg.starts_with("/tmp/iterion-mcp-") && cfg.ends_with(".json"),
        "{text}"
    );
    assert!(
        !Path::new(cfg).exists(),
        "the config path exists on the host: {cfg}"
    );
    assert!(text.contains(" mode=600 srv=1 answer=1"), "{text}");
    assert_eq!(v["data"]["output"]["_session_id"], "in-container");
    assert_eq!(v["data"]["output"]["_backend"], "claude_code");
}

#[test]
fn mc4_health_check_fails_in_the_container_before_the_first_node() {
    if !engine_required("mc4_health_check_fails_in_the_container_before_the_first_node") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image()
        .unwrap_or_else(|e| panic!("cannot prepare the local test image: {e}"));
    // a server that exits at once, and one whose command the image does not have
    for (command, args, expect) in [
        (
            "true",
            "",
            "the server closed its output before answering initialize",
        ),
        ("no-such-mcp-server", "", ""),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (o, events) = run(dir.path(), &workflow(command, args));
        assert_eq!(o.failure_code, Some(FailureCode::ExecutionFailed), "{events}");
        let error = o.error.clone().unwrap_or_default();
        assert!(
            error.starts_with("MCP health check failed: server 'srv' (in the sandbox): ")
                && error.contains(expect),
            "{error}"
        );
        assert!(!events.contains("\"node_started\""), "{events}");
        assert!(events.contains("\"sandbox_started\""), "{events}");
        assert_eq!(o.status, RunStatus::FailedResumable);
    }
}
