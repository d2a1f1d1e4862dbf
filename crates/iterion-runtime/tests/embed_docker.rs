//! The `embed_docker` example against the real engine: the workflow runs in a container of the local test
//! image, and a direct connection from the node fails (the egress is enforced), so the run finishes.

#[path = "../examples/embed_docker.rs"]
mod example;

use std::collections::BTreeMap;

use iterion_runtime::status::RunStatus;
use iterion_test_support::engine_required;

/// Fails the run unless the node runs in a container whose direct egress is closed.
const WORKFLOW: &str = r#"tool inside:
  command: `if [ -f /.dockerenv ] || [ -f /run/.containerenv ]; then echo '{"inside": "container"}'; else echo 'not in a container' >&2; exit 1; fi`

tool direct:
  command: `command -v nc >/dev/null || exit 1; if nc -w 3 1.1.1.1 443 </dev/null; then echo 'a direct connection was opened' >&2; exit 1; fi; echo '{"direct": "refused"}'`

workflow embedded:
  entry: inside
  sandbox: auto
  inside -> direct
  direct -> done
"#;

const DEVCONTAINER: &str = r#"{ "name": "embed test", "image": "iterion-test/busybox:latest" }"#;

#[test]
fn embed_docker_runs_in_a_container_with_enforced_egress() {
    if !engine_required("embed_docker_runs_in_a_container") {
        return;
    }
    iterion_test_support::docker_image::ensure_test_image()
        .unwrap_or_else(|e| panic!("cannot prepare the local test image: {e}"));
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".devcontainer")).expect("mkdir");
    std::fs::write(ws.join(".devcontainer/devcontainer.json"), DEVCONTAINER).expect("write");
    std::fs::write(ws.join("flow.bot"), WORKFLOW).expect("write");
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| !k.starts_with("ITERION_"))
        .collect();
    env.insert("HOME".into(), dir.path().join("home").display().to_string());
    env.insert(
        "ITERION_HOME".into(),
        dir.path().join("data").display().to_string(),
    );
    // never ask a registry: the test image is local
    env.insert("ITERION_SANDBOX_PULL_POLICY".into(), "never".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let outcome = rt
        .block_on(example::embed(&env, &ws.join("flow.bot"), &ws))
        .unwrap_or_else(|e| panic!("embed: {e}"));
    let leftover = iterion_test_support::containers_of(&outcome.run_id);
    assert_eq!(
        outcome.status,
        RunStatus::Finished,
        "{:?} {:?}",
        outcome.failure_code,
        outcome.error
    );
    let events = std::fs::read_to_string(outcome.run_dir.join("events.jsonl")).expect("events");
    let started = events
        .lines()
        .find(|l| l.contains("\"sandbox_started\""))
        .unwrap_or_else(|| panic!("no sandbox_started in {events}"));
    assert!(started.contains("\"enforced_egress\":true"), "{started}");
    assert!(leftover.is_empty(), "containers left behind: {leftover:?}");
}
