//! `claude_code` agent and judge nodes with a fake agent CLI on the `NoopDriver` (05 §10.5, AG1–AG2 of §12.10).
mod exec_common;

use std::path::PathBuf;

use exec_common::{Harness, fake_agent, summary};
use iterion_runtime::events::PlacementKind;
use serde_json::{Value, json};

/// A harness whose `claude` is the fixture script, recording into its own directory.
struct Agent {
    h: Harness,
    state: tempfile::TempDir,
}

impl Agent {
    fn new(reply: &str) -> Agent {
        let state = tempfile::tempdir().unwrap();
        std::fs::write(state.path().join("reply"), reply).unwrap();
        let mut h = Harness::new()
            .env("ITERION_CLAUDE_BIN", &fake_agent())
            .env("ANTHROPIC_API_KEY", "sk-test-key")
            .env("OPENAI_API_KEY", "sk-not-for-claude");
        h.run_env = vec![(
            "FAKE_AGENT_DIR".into(),
            state.path().to_string_lossy().into_owned(),
        )];
        Agent { h, state }
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.state.path().join(name)
    }

    fn argv(&self) -> Vec<String> {
        self.file("argv").lines().map(str::to_string).collect()
    }
}

fn reply(result: &str) -> String {
    json!({
        "type": "result",
        "is_error": false,
        "result": result,
        "usage": {"input_tokens": 10, "output_tokens": 5},
        "total_cost_usd": 0.01
    })
    .to_string()
}

const AG1: &str = "prompt sys:\n  S\n\nprompt ask:\n  Review {{input.topic}}.\n\nagent a:\n  backend: \"claude_code\"\n  model: \"claude-sonnet-4-5\"\n  system: sys\n  user: ask\n  tools: [Bash, Read]\n  tool_max_steps: 8\n\nworkflow w:\n  entry: a\n  vars:\n    topic: string = \"the diff\"\n  a -> done\n";

#[tokio::test]
async fn ag1_argv_stdin_and_credentials_in_the_run_container() {
    let mut a = Agent::new(&reply("{\"ok\": true}"));
    a.h = a.h.placed("a", PlacementKind::Run);
    let out = a.h.run(AG1).await;
    assert_eq!(summary(&out), "finished", "{:#?}", a.h.rec.lines());
    let argv = a.argv();
    assert_eq!(
        argv,
        [
            "-p",
            "--output-format",
            "json",
            "--model",
            "claude-sonnet-4-5",
            "--append-system-prompt",
            "S",
            "--allowedTools",
            "Bash,Read",
            "--max-turns",
            "8",
            "--permission-mode",
            "bypassPermissions"
        ]
    );
    assert_eq!(a.file("stdin"), "Review the diff.");
    let env = a.file("env");
    assert!(env.contains("ANTHROPIC_API_KEY=sk-test-key"), "{env}");
    assert!(
        env.contains("ITERION_NODE_ID=a") && env.contains("ITERION_RUN_ID=run-1"),
        "{env}"
    );
    assert!(argv.iter().all(|x| !x.contains("sk-test-key")));
    assert_eq!(
        a.h.rec.of("delegate_started"),
        [json!({"backend": "claude_code", "placement": "run", "via": "cli"})]
    );
}

#[tokio::test]
async fn ag2_fenced_json_result_with_tokens_and_cost() {
    let mut a = Agent::new(&reply("Verdict:\n```json\n{\"ok\": true}\n```\n"));
    let out = a.h.run(AG1).await;
    assert_eq!(summary(&out), "finished");
    let fin = &a.h.rec.of("node_finished")[0];
    assert_eq!(
        fin["output"],
        json!({"ok": true, "_backend": "claude_code", "_session_fingerprint": "anthropic-direct"})
    );
    assert_eq!(fin["_tokens"], 15);
    assert_eq!(fin["_cost_usd"], 0.01);
    assert_eq!(
        a.h.rec.of("delegate_finished"),
        [json!({"backend": "claude_code", "tokens": 15, "cost_usd": 0.01, "duration_ms": 0})]
    );
    insta::assert_json_snapshot!("ag2_agent_events", a.h.rec.lines());
}

#[tokio::test]
async fn host_placement_readonly_schema_and_default_prompt() {
    let src = "schema verdict:\n  approved: bool\n\njudge j:\n  backend: \"claude_code\"\n  readonly: true\n  tools: [Bash]\n  output: verdict\n\nworkflow w:\n  entry: j\n  vars:\n    n: int = 3\n  j -> done when approved\n  j -> fail\n";
    let mut a = Agent::new(&reply("{\"approved\": true}"));
    let out = a.h.run(src).await;
    assert_eq!(summary(&out), "finished");
    let argv = a.argv();
    assert_eq!(
        argv,
        [
            "-p",
            "--output-format",
            "json",
            "--allowedTools",
            "Read,Glob,Grep",
            "--permission-mode",
            "acceptEdits"
        ]
    );
    let stdin = a.file("stdin");
    assert!(
        stdin.starts_with("{\"n\":3}\n\nAnswer with only a JSON object"),
        "{stdin}"
    );
    assert!(
        stdin.ends_with(
            r#"{"type":"object","properties":{"approved":{"type":"boolean"}},"required":["approved"]}"#
        ),
        "{stdin}"
    );
    assert_eq!(a.h.rec.of("node_started")[0]["kind"], "judge");
}

#[tokio::test]
async fn missing_prompt_values_render_empty_with_a_warning() {
    let src = "prompt ask:\n  [{{input.nope}}]\n\nagent a:\n  backend: \"claude_code\"\n  user: ask\n\nworkflow w:\n  entry: a\n  a -> done\n";
    let mut a = Agent::new(&reply("plain text answer"));
    assert_eq!(summary(&a.h.run(src).await), "finished");
    assert_eq!(a.file("stdin"), "[]");
    assert!(a.h.rec.warnings().iter().any(|w| w.contains("{{input.nope}}")));
    assert_eq!(
        a.h.rec.of("node_finished")[0]["output"],
        json!({"text": "plain text answer", "_backend": "claude_code", "_session_fingerprint": "anthropic-direct"})
    );
}

const SIMPLE: &str = "agent a:\n  backend: \"claude_code\"\n\nworkflow w:\n  entry: a\n  a -> done\n";

#[tokio::test]
async fn rate_limit_is_retried_three_times() {
    let mut a = Agent::new("API Error: 429 Too Many Requests");
    std::fs::write(a.path("exit"), "1").unwrap();
    let out = a.h.run(SIMPLE).await;
    assert_eq!(summary(&out), "RATE_LIMITED node=a checkpoint=a");
    let delays: Vec<Value> =
        a.h.rec
            .of("node_recovery")
            .into_iter()
            .map(|d| d["delay_ms"].clone())
            .collect();
    assert_eq!(delays, [json!(10000), json!(30000), json!(60000)]);
    assert!(
        a.h.rec
            .of("node_recovery")
            .iter()
            .all(|d| d["code"] == "RATE_LIMITED")
    );
    assert_eq!(a.file("count").trim(), "4");
    assert_eq!(a.h.rec.of("delegate_error").len(), 4);
}

#[tokio::test]
async fn is_error_then_success_on_retry() {
    let mut a = Agent::new(&reply("{\"ok\": 1}"));
    std::fs::write(
        a.path("reply.0"),
        json!({"result": "boom", "is_error": true}).to_string(),
    )
    .unwrap();
    let out = a.h.run(SIMPLE).await;
    assert_eq!(summary(&out), "finished");
    let rec = a.h.rec.of("node_recovery");
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0]["code"], "EXECUTION_FAILED");
    assert!(
        rec[0]["error"]
            .as_str()
            .unwrap()
            .contains("the agent reported an error: boom")
    );
    assert_eq!(
        a.h.rec.of("node_finished")[0]["output"],
        json!({"ok": 1, "_backend": "claude_code", "_session_fingerprint": "anthropic-direct"})
    );
}

#[tokio::test]
async fn missing_cli_is_agent_cli_unavailable() {
    let mut a = Agent::new("");
    a.h = a.h.env("ITERION_CLAUDE_BIN", "/nonexistent/claude");
    let out = a.h.run(SIMPLE).await;
    assert_eq!(summary(&out), "AGENT_CLI_UNAVAILABLE node=a checkpoint=-");
    assert!(a.h.rec.of("node_recovery").is_empty());
}

#[tokio::test]
async fn publish_writes_artifacts_readable_by_later_nodes() {
    let src = "agent a:\n  backend: \"claude_code\"\n  publish: report\n\ntool b:\n  command: `printf '%s' {{artifacts.report.n}}`\n\nworkflow w:\n  entry: a\n  a -> b\n  b -> done\n";
    let mut a = Agent::new(&reply("{\"n\": 1}"));
    assert_eq!(summary(&a.h.run(src).await), "finished");
    assert_eq!(
        a.h.rec.of("artifact_written"),
        [json!({"publish": "report", "version": 0})]
    );
    assert_eq!(a.h.rec.of("node_finished")[1]["output"], json!({"result": "1"}));
    let arts = a.h.rec.artifacts.lock().unwrap().clone();
    assert_eq!(
        arts,
        [(
            "a".to_string(),
            "report".to_string(),
            0,
            json!({"n": 1, "_backend": "claude_code", "_session_fingerprint": "anthropic-direct"})
        )]
    );
}

#[tokio::test]
async fn token_and_cost_budgets() {
    let src = "agent a:\n  backend: \"claude_code\"\n\nworkflow w:\n  entry: a\n  budget:\n    max_tokens: 18\n  a -> a as l(10)\n";
    let mut a = Agent::new(&reply("{}"));
    let out = a.h.run(src).await;
    assert_eq!(summary(&out), "BUDGET_EXCEEDED node=a checkpoint=a");
    assert_eq!(
        a.h.rec.of("budget_warning"),
        [json!({"dimension": "max_tokens", "used": 15, "limit": 18})]
    );
    assert_eq!(
        a.h.rec.of("budget_exceeded"),
        [json!({"dimension": "max_tokens", "used": 30, "limit": 18})]
    );

    let src = "agent a:\n  backend: \"claude_code\"\n\nworkflow w:\n  entry: a\n  budget:\n    max_cost_usd: 0.025\n  a -> a as l(10)\n";
    let mut a = Agent::new(&reply("{}"));
    let out = a.h.run(src).await;
    assert_eq!(summary(&out), "BUDGET_EXCEEDED node=a checkpoint=a");
    assert_eq!(
        a.h.rec.of("budget_warning"),
        [json!({"dimension": "max_cost_usd", "used": 0.02, "limit": 0.025})]
    );
    assert_eq!(
        a.h.rec.of("budget_exceeded"),
        [json!({"dimension": "max_cost_usd", "used": 0.03, "limit": 0.025})]
    );
}

#[tokio::test]
async fn agent_cli_probe_and_nodes() {
    let h = Harness::new();
    let run = exec_common::noop_run(&h.work_dir(), &[]).await;
    let mut env = std::collections::BTreeMap::new();
    env.insert(
        "ITERION_CLAUDE_BIN".to_string(),
        "/nonexistent/claude".to_string(),
    );
    let err = iterion_runtime::exec::probe_agent_cli(&*run, &env)
        .await
        .unwrap_err();
    assert_eq!(
        err.code,
        iterion_runtime::failure::FailureCode::AgentCliUnavailable
    );
    assert!(
        err.error
            .contains("'/nonexistent/claude --version' exited with status 127"),
        "{}",
        err.error
    );
    env.insert("ITERION_CLAUDE_BIN".to_string(), "true".to_string());
    iterion_runtime::exec::probe_agent_cli(&*run, &env).await.unwrap();

    let wf = exec_common::compile(
        "agent a:\n  backend: \"claude_code\"\n\nagent b:\n  backend: \"${B:-claw}\"\n\nworkflow w:\n  entry: a\n  a -> b\n  b -> done\n",
    );
    env.insert("B".into(), "claude_code".into());
    assert_eq!(iterion_runtime::exec::agent_cli_nodes(&wf, &env), ["a", "b"]);
    env.remove("B");
    assert_eq!(iterion_runtime::exec::agent_cli_nodes(&wf, &env), ["a"]);
}

#[tokio::test]
async fn resume_restores_artifacts_and_versions() {
    let src = "agent a:\n  backend: \"claude_code\"\n  publish: report\n\ntool b:\n  command: `printf '%s' {{artifacts.report.n}}`\n\nworkflow w:\n  entry: a\n  a -> b\n  b -> a as again(1)\n  b -> done\n";
    let mut a = Agent::new(&reply("{\"n\": 2}"));
    let mut cp = iterion_runtime::store::Checkpoint::stub("b", Default::default());
    cp.outputs.insert("a".into(), json!({"n": 1}));
    cp.artifact_versions.insert("report".into(), 1);
    a.h.resume = Some(cp);
    assert_eq!(summary(&a.h.run(src).await), "finished");
    let outputs: Vec<Value> =
        a.h.rec
            .of("node_finished")
            .into_iter()
            .map(|d| d["output"].clone())
            .collect();
    // b reads the restored artifact, a publishes version 1, b reads the new one
    assert_eq!(
        outputs[..3],
        [
            json!({"result": "1"}),
            json!({"n": 2, "_backend": "claude_code", "_session_fingerprint": "anthropic-direct"}),
            json!({"result": "2"})
        ]
    );
    assert_eq!(
        a.h.rec.of("artifact_written"),
        [json!({"publish": "report", "version": 1})]
    );
}
