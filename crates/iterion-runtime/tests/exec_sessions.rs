//! `claude_code` sessions (09 §5; SE1–SE6 of §9.4) with the fake agent CLI on the `NoopDriver`.
mod exec_common;

use exec_common::{FakeAgent, cli_reply, summary};
use iterion_runtime::store::LogLevel;
use serde_json::json;

/// `w` then `c` (with `mode`), `c` reading `w`'s session through the given `with` entries.
fn two_nodes(mode: &str, with: &str) -> String {
    format!(
        "agent w:\n  backend: \"claude_code\"\n\nagent c:\n  backend: \"claude_code\"\n  session: {mode}\n\nworkflow w1:\n  entry: w\n  w -> c{with}\n  c -> done\n"
    )
}

const ID_ONLY: &str = " with { _session_id: \"{{outputs.w._session_id}}\" }";
const ID_AND_FP: &str = " with { _session_id: \"{{outputs.w._session_id}}\", _session_fingerprint: \"{{outputs.w._session_fingerprint}}\" }";

/// The agent: call 0 (w) returns session `abc`, call 1 (c) session `def`.
fn agent() -> FakeAgent {
    let a = FakeAgent::new(&cli_reply("{}", None));
    a.reply_at(0, &cli_reply("{\"ok\": true}", Some("abc")));
    a.reply_at(1, &cli_reply("{}", Some("def")));
    a
}

/// The flags after `--permission-mode <mode>` of call `n`.
fn session_args(a: &FakeAgent, n: usize) -> Vec<String> {
    let argv = a.argv_of(n);
    let i = argv.iter().position(|x| x == "--permission-mode").unwrap();
    argv[i + 2..].to_vec()
}

fn logs(a: &FakeAgent, level: LogLevel) -> Vec<String> {
    a.h.rec
        .logs
        .lock()
        .unwrap()
        .iter()
        .filter(|(l, _)| *l == level)
        .map(|(_, m)| m.clone())
        .collect()
}

#[tokio::test]
async fn se1_session_keys_are_stamped_on_the_output() {
    let mut a = FakeAgent::new(&cli_reply("{\"ok\": true}", Some("abc")));
    let out =
        a.h.run("agent w:\n  backend: \"claude_code\"\n\nworkflow w1:\n  entry: w\n  w -> done\n")
            .await;
    assert_eq!(summary(&out), "finished");
    assert_eq!(
        a.h.rec.of("node_finished")[0]["output"],
        json!({"ok": true, "_session_id": "abc", "_backend": "claude_code", "_session_fingerprint": "anthropic-direct"})
    );
    // no session id from the CLI: no _session_id, the other keys still there
    let mut a = FakeAgent::new(&cli_reply("{\"ok\": true}", Some("")));
    a.h =
        a.h.env("ANTHROPIC_BASE_URL", "https://user@Gateway.Example.com:8443/v1");
    a.h.run("agent w:\n  backend: \"claude_code\"\n\nworkflow w1:\n  entry: w\n  w -> done\n")
        .await;
    assert_eq!(
        a.h.rec.of("node_finished")[0]["output"],
        json!({"ok": true, "_backend": "claude_code", "_session_fingerprint": "facade:gateway.example.com"})
    );
}

#[tokio::test]
async fn se2_inherit_resumes_the_mapped_session() {
    let mut a = agent();
    let out = a.h.run(&two_nodes("inherit", ID_ONLY)).await;
    assert_eq!(summary(&out), "finished", "{:#?}", a.h.rec.lines());
    assert!(session_args(&a, 0).is_empty());
    assert_eq!(session_args(&a, 1), ["--resume", "abc"]);
    assert!(!a.argv_of(1).contains(&"--fork-session".to_string()));
    // c holds the id its own call returned
    assert_eq!(a.h.rec.of("node_finished")[1]["output"]["_session_id"], "def");
}

#[tokio::test]
async fn se2_inherit_without_a_session_warns_and_runs_fresh() {
    let mut a = agent();
    let out = a.h.run(&two_nodes("inherit", "")).await;
    assert_eq!(summary(&out), "finished");
    assert!(session_args(&a, 1).is_empty());
    let w = logs(&a, LogLevel::Warn);
    assert!(
        w.iter()
            .any(|m| m.contains("node 'c'") && m.contains("no _session_id") && m.contains("running fresh")),
        "{w:?}"
    );
}

#[tokio::test]
async fn se3_fork_with_the_same_fingerprint() {
    let mut a = agent();
    let out = a.h.run(&two_nodes("fork", ID_AND_FP)).await;
    assert_eq!(summary(&out), "finished");
    assert_eq!(session_args(&a, 1), ["--resume", "abc", "--fork-session"]);
    // the forking node holds the new session id
    assert_eq!(a.h.rec.of("node_finished")[1]["output"]["_session_id"], "def");
}

#[tokio::test]
async fn se4_fork_without_the_fingerprint_is_dropped() {
    let mut a = agent();
    let out = a.h.run(&two_nodes("fork", ID_ONLY)).await;
    assert_eq!(summary(&out), "finished");
    assert!(session_args(&a, 1).is_empty(), "{:?}", a.argv_of(1));
    let w = logs(&a, LogLevel::Warn);
    assert!(
        w.iter()
            .any(|m| m.starts_with("node 'c': dropping session fork: its input has no _session_fingerprint")),
        "{w:?}"
    );
    // a different fingerprint is dropped too
    let mut a = agent();
    let with = " with { _session_id: \"{{outputs.w._session_id}}\", _session_fingerprint: \"facade:other.example\" }";
    a.h.run(&two_nodes("fork", with)).await;
    assert!(session_args(&a, 1).is_empty());
    assert!(
        logs(&a, LogLevel::Warn)
            .iter()
            .any(|m| m.contains("dropping session fork") && m.contains("facade:other.example"))
    );
}

#[tokio::test]
async fn se5_inherit_if_available_without_a_mapping_logs_info() {
    let mut a = agent();
    let out = a.h.run(&two_nodes("inherit_if_available", "")).await;
    assert_eq!(summary(&out), "finished");
    assert!(session_args(&a, 1).is_empty());
    assert_eq!(
        logs(&a, LogLevel::Info)
            .iter()
            .filter(|m| m.contains("no upstream _session_id; running fresh"))
            .count(),
        1
    );
    assert!(logs(&a, LogLevel::Warn).is_empty());
    // with a mapping it resumes
    let mut a = agent();
    a.h.run(&two_nodes("inherit_if_available", ID_ONLY)).await;
    assert_eq!(session_args(&a, 1), ["--resume", "abc"]);
}

#[tokio::test]
async fn se6_artifacts_only_and_fresh_ignore_the_mapping() {
    for mode in ["artifacts_only", "fresh"] {
        let mut a = agent();
        let out = a.h.run(&two_nodes(mode, ID_AND_FP)).await;
        assert_eq!(summary(&out), "finished");
        assert!(session_args(&a, 1).is_empty(), "{mode}: {:?}", a.argv_of(1));
    }
}

#[tokio::test]
async fn a_session_never_crosses_between_the_host_and_a_container() {
    // w runs on the host, c in the run container: c must not resume w's session (the CLI keeps it on the host)
    let mut a = agent();
    a.h = a.h.placed("c", iterion_runtime::events::PlacementKind::Run);
    let out = a.h.run(&two_nodes("inherit", ID_ONLY)).await;
    assert_eq!(summary(&out), "finished", "{:#?}", a.h.rec.lines());
    assert!(session_args(&a, 1).is_empty(), "{:?}", a.argv_of(1));
    let w = logs(&a, LogLevel::Warn);
    assert!(
        w.iter()
            .any(|m| m.contains("session abc was made on the host and this node runs in the run container")),
        "{w:?}"
    );
    // both in the run container: resumed
    let mut a = agent();
    a.h =
        a.h.placed("w", iterion_runtime::events::PlacementKind::Run)
            .placed("c", iterion_runtime::events::PlacementKind::Run);
    a.h.run(&two_nodes("inherit", ID_ONLY)).await;
    assert_eq!(session_args(&a, 1), ["--resume", "abc"]);
}
