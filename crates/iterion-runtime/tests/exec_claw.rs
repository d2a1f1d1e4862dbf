//! `claw` agent and judge nodes on the `NoopDriver`: the real runner (the static program embedded
//! by `iterion-host`) against the scripted fake provider on loopback, and a scripted runner double for the
//! launcher's rules (AG3, AG4, the tool boundary).
mod exec_common;

use exec_common::{Harness, summary};
use iterion_test_support::fake_provider::{FakeProvider, Reply};
use serde_json::{Value, json};

const RUNNER_HELLO: &str = r#"{"type":"hello","data":{"protocol":"iterion.envelope","role":"runner","version":1,"software":"double","capabilities":["cancel","event","session_capture"]}}"#;

/// A runner double: answers `hello`, records the task, optionally sends `call` and records the reply, then
/// prints `out` and exits with `status`.
struct Double {
    dir: tempfile::TempDir,
}

impl Double {
    fn new(out: &[Value], call: Option<Value>, status: i32) -> Double {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let lines: String = out.iter().map(|v| format!("{v}\n")).collect();
        std::fs::write(d.join("out"), lines).unwrap();
        if let Some(c) = call {
            std::fs::write(d.join("call"), format!("{c}\n")).unwrap();
        }
        let script = format!(
            "#!/bin/sh\n[ \"$1\" = __claw-runner ] || exit 9\nD='{dir}'\nprintf '%s\\n' \"$@\" > \"$D/argv\"\nenv > \"$D/env\"\nread -r hello\necho '{RUNNER_HELLO}'\nread -r task\nprintf '%s\\n' \"$task\" > \"$D/task\"\nif [ -f \"$D/call\" ]; then cat \"$D/call\"; read -r reply; printf '%s\\n' \"$reply\" > \"$D/reply\"; fi\ncat \"$D/out\"\nexit {status}\n",
            dir = d.display()
        );
        let prog = d.join("runner");
        std::fs::write(&prog, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        Double { dir }
    }

    fn program(&self) -> String {
        self.dir.path().join("runner").to_string_lossy().into_owned()
    }

    fn text(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    fn read(&self, name: &str) -> Value {
        let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap();
        serde_json::from_str(text.trim()).unwrap()
    }
}

fn harness(program: String) -> Harness {
    let mut h = Harness::new();
    h.claw_runner = Some(program);
    h
}

const SIMPLE: &str = "agent a:\n  model: \"claude-x\"\n\nworkflow w:\n  entry: a\n  a -> done\n";

#[tokio::test]
async fn ag3_allowed_events_are_kept_forged_ones_dropped() {
    let double = Double::new(
        &[
            json!({"type": "event", "data": {"type": "llm_request", "payload": {"model": "m"}}}),
            json!({"type": "event", "data": {"type": "run_finished", "payload": {"duration_ms": 1}}}),
            json!({"type": "session_capture", "data": [{"role": "user", "content": []}]}),
            json!({"type": "result", "data": {"output": {"x": 1}, "tokens": 7, "backend_name": "claw"}}),
        ],
        None,
        0,
    );
    let mut h = harness(double.program());
    let o = h.run(SIMPLE).await;
    assert_eq!(summary(&o), "finished");
    let types = h.rec.types();
    assert!(types.contains(&"llm_request[a]".to_string()), "{types:?}");
    assert!(!types.iter().any(|t| t.starts_with("run_finished")), "{types:?}");
    assert_eq!(h.rec.of("llm_request"), [json!({"model": "m"})]);
    let finished = h.rec.of("node_finished");
    assert_eq!(finished[0]["output"], json!({"x": 1}), "{finished:?}");
    assert_eq!(finished[0]["_tokens"], json!(7), "{finished:?}");
    assert_eq!(
        h.rec.sessions.lock().unwrap().clone(),
        [("a".to_string(), json!([{"role": "user", "content": []}]))]
    );
    let task = double.read("task");
    assert_eq!(task["type"], json!("task"));
    assert_eq!(task["data"]["node_id"], json!("a"));
    assert_eq!(task["data"]["run_id"], json!("run-1"));
    assert_eq!(task["data"]["tool_max_steps"], json!(50));
    assert_eq!(task["data"]["user_prompt"], json!("{}"));
}

#[tokio::test]
async fn ag4_rate_limited_result_is_retried_three_times() {
    let double = Double::new(
        &[
            json!({"type": "result", "data": {"error": "429 Too Many Requests", "error_code": "RATE_LIMITED"}}),
        ],
        None,
        1,
    );
    let mut h = harness(double.program());
    let o = h.run(SIMPLE).await;
    assert_eq!(summary(&o), "RATE_LIMITED node=a checkpoint=a");
    let recoveries = h.rec.of("node_recovery");
    assert_eq!(recoveries.len(), 3, "{recoveries:?}");
    assert!(recoveries.iter().all(|r| r["code"] == json!("RATE_LIMITED")));
    let errors = h.rec.of("delegate_error");
    assert_eq!(errors.len(), 4);
    assert_eq!(
        errors[0]["error"],
        json!("node 'a': claw backend: runner: 429 Too Many Requests")
    );
}

#[tokio::test]
async fn tool_calls_reach_only_advertised_names_and_run_nothing_on_the_host() {
    let double = Double::new(
        &[json!({"type": "result", "data": {"output": {"done": true}}})],
        Some(json!({"type": "tool_call", "id": "call-1", "data": {"name": "rm_everything", "input": {}}})),
        0,
    );
    let mut h = harness(double.program());
    let o = h
        .run("agent a:\n  model: \"claude-x\"\n  tools: [bash]\n\nworkflow w:\n  entry: a\n  a -> done\n")
        .await;
    assert_eq!(summary(&o), "finished");
    assert_eq!(
        double.read("reply"),
        json!({"type": "tool_result", "id": "call-1", "data": {"error": "launcher: tool \"rm_everything\" not in task.tool_defs (runner asked for an unknown tool)"}})
    );
    let task = double.read("task");
    assert_eq!(task["data"]["tool_defs"], json!([{"name": "bash"}]));
    assert_eq!(task["data"]["allowed_tools"], json!(["bash"]));
}

#[tokio::test]
async fn a_runner_that_exits_without_result_is_a_protocol_error() {
    let double = Double::new(&[], None, 3);
    let mut h = harness(double.program());
    let o = h.run(SIMPLE).await;
    assert_eq!(summary(&o), "ENVELOPE_PROTOCOL_ERROR node=a checkpoint=a");
    let e = exec_common::failure_error(&o);
    assert!(e.contains("runner exited with status 3 without a result"), "{e}");
}

#[tokio::test]
async fn no_runner_program_is_runner_incompatible() {
    let mut h = Harness::new();
    let o = h.run(SIMPLE).await;
    assert_eq!(summary(&o), "RUNNER_INCOMPATIBLE node=a checkpoint=-");
}

/// The static runner, installed from the bytes `iterion-host` embeds.
fn static_runner(dir: &std::path::Path) -> String {
    iterion_host::claw_runner_path(dir, None)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[tokio::test]
async fn the_real_runner_writes_a_file_and_answers_the_schema() {
    let bin = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        Reply::tool(
            "write_file",
            json!({"path": "out.txt", "content": "hello from claw"}),
        ),
        Reply::text("Done.\n```json\n{\"ok\": true}\n```"),
    ])
    .await
    .unwrap();
    let mut h = harness(static_runner(bin.path()))
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.url());
    let src = "schema verdict:\n  ok: bool\n\nprompt ask:\n  Write the file.\n\nagent a:\n  model: \"claude-x\"\n  user: ask\n  tools: [write_file]\n  output: verdict\n\nworkflow w:\n  entry: a\n  a -> done when ok\n  a -> fail\n";
    let o = h.run(src).await;
    assert_eq!(summary(&o), "finished", "{:?}", h.rec.types());
    assert_eq!(
        std::fs::read_to_string(h.work_dir().join("out.txt")).unwrap(),
        "hello from claw"
    );
    assert_eq!(h.rec.of("node_finished")[0]["output"], json!({"ok": true}));
    let types = h.rec.types();
    for t in [
        "delegate_started[a]",
        "llm_request[a]",
        "tool_called[a]",
        "delegate_finished[a]",
    ] {
        assert!(types.contains(&t.to_string()), "{t} missing from {types:?}");
    }
    assert!(!h.rec.sessions.lock().unwrap().is_empty());
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let first = reqs[0].body["messages"][0].to_string();
    assert!(first.contains("Write the file."), "{first}");
}

#[tokio::test]
async fn only_the_node_provider_s_keys_reach_the_runner_through_its_environment() {
    let double = Double::new(&[json!({"type": "result", "data": {"output": {}}})], None, 0);
    let mut h = harness(double.program())
        .env("ANTHROPIC_API_KEY", "sk-ant-test-value")
        .env("GROQ_API_KEY", "gsk-test-value")
        .env("OPENAI_API_KEY", "sk-openai-test-value")
        .env("AWS_SECRET_ACCESS_KEY", "aws-test-value")
        .env("AWS_ACCESS_KEY_ID", "aws-id-test-value")
        .env("UNRELATED_SECRET", "not-forwarded");
    let o = h.run(SIMPLE).await;
    assert_eq!(summary(&o), "finished");
    assert_eq!(double.text("argv"), "__claw-runner\n");
    let env = double.text("env");
    assert!(env.contains("ANTHROPIC_API_KEY=sk-ant-test-value\n"), "{env}");
    assert!(env.contains("ITERION_NODE_ID=a\n"), "{env}");
    // the node's model is an Anthropic one: no other provider's key, no cloud credential
    for other in [
        "GROQ_API_KEY",
        "OPENAI_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "UNRELATED_SECRET",
    ] {
        assert!(!env.contains(other), "{other} reached the runner: {env}");
    }
    let task = double.text("task");
    assert!(!task.contains("sk-ant-test-value"), "no key in the task: {task}");
}

#[tokio::test]
async fn cancelling_the_run_sends_cancel_and_ends_the_node_cancelled() {
    // the double waits for the launcher's next envelope (the cancel), records it and answers cancelled
    let double = Double::new(&[], None, 1);
    let d = double.dir.path().to_path_buf();
    std::fs::write(d.join("call"), "").unwrap();
    std::fs::write(
        d.join("out"),
        format!(
            "{}\n",
            json!({"type": "result", "data": {"error": "cancelled: the node was cancelled", "error_code": "CANCELLED"}})
        ),
    )
    .unwrap();
    let mut h = harness(double.program());
    let cancel = h.cancel.clone();
    let task_file = d.join("task");
    tokio::spawn(async move {
        while !task_file.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        cancel.cancel();
    });
    let o = h.run(SIMPLE).await;
    assert_eq!(summary(&o), "cancelled checkpoint=a");
    assert_eq!(
        double.read("reply"),
        json!({"type": "cancel", "data": {"reason": "the node was cancelled"}})
    );
}

#[tokio::test]
async fn a_runner_program_that_does_not_exist_is_runner_incompatible() {
    let mut h = harness("/nonexistent/iterion-claw-runner".into());
    let o = h.run(SIMPLE).await;
    assert_eq!(summary(&o), "RUNNER_INCOMPATIBLE node=a checkpoint=-");
    let e = exec_common::failure_error(&o);
    assert!(e.contains("/nonexistent/iterion-claw-runner"), "{e}");
}

#[tokio::test]
async fn an_llm_router_on_claw_sends_the_routing_task_and_takes_the_route() {
    let double = Double::new(
        &[
            json!({"type": "result", "data": {"output": {"selected_route": "y", "reasoning": "r"}, "tokens": 3, "backend_name": "claw"}}),
        ],
        None,
        0,
    );
    let mut h = harness(double.program());
    let src = "router r:\n  mode: llm\n\ntool x:\n  command: `echo '{}'`\n\ntool y:\n  command: `echo '{\"via\": \"y\"}'`\n\nworkflow w:\n  entry: r\n  r -> x\n  r -> y\n  x -> done\n  y -> done\n";
    let o = h.run(src).await;
    assert_eq!(summary(&o), "finished", "{:#?}", h.rec.lines());
    let task = double.read("task");
    let data = &task["data"];
    assert!(
        data["system_prompt"]
            .as_str()
            .unwrap()
            .ends_with("from the available options: [x y].\nRespond with your selection using the required output format."),
        "{data}"
    );
    assert_eq!(data["model"], "anthropic/claude-sonnet-4-6");
    assert_eq!(
        data["output_schema"]["properties"]["selected_route"]["enum"],
        json!(["x", "y"])
    );
    let edges: Vec<Value> = h.rec.of("edge_selected");
    assert_eq!(edges[0], json!({"from": "r", "to": "y"}));
}

/// A bash call printing `n` bytes.
fn print(n: usize) -> Reply {
    Reply::tool(
        "bash",
        json!({"command": format!("head -c {n} /dev/zero | tr '\\0' x")}),
    )
}

/// A model whose context overflows after a big tool output: the runner compacts the older messages but the
/// conversation still does not fit, the node fails `CONTEXT_LENGTH_EXCEEDED`, and its one retry replays the
/// stored session (captured before the big output), compacted first, and finishes.
#[tokio::test]
async fn a_context_overflow_is_retried_once_with_the_session_replayed_and_compacted() {
    let bin = tempfile::tempdir().unwrap();
    let fake = FakeProvider::with_context_limit(
        vec![
            print(100),
            print(6000),
            Reply::text("SUMMARY-ONE"),
            Reply::text("SUMMARY-TWO"),
            Reply::text("{\"ok\": true}"),
        ],
        5000,
    )
    .await
    .unwrap();
    let mut h = harness(static_runner(bin.path()))
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", &fake.url());
    let src = "schema verdict:\n  ok: bool\n\nprompt ask:\n  Look around.\n\nagent a:\n  model: \"claude-x\"\n  user: ask\n  tools: [bash]\n  output: verdict\n  compaction:\n    preserve_recent: 1\n\nworkflow w:\n  entry: a\n  a -> done when ok\n  a -> fail\n";
    let o = h.run(src).await;
    assert_eq!(summary(&o), "finished", "{:#?}", h.rec.lines());
    let recovery = h.rec.of("node_recovery");
    assert_eq!(recovery.len(), 1, "{recovery:?}");
    assert_eq!(recovery[0]["code"], "CONTEXT_LENGTH_EXCEEDED");
    assert_eq!(recovery[0]["delay_ms"], 0);
    let compacted: Vec<Value> = h
        .rec
        .lines()
        .into_iter()
        .filter(|l| l["type"] == "llm_compacted")
        .collect();
    assert_eq!(compacted.len(), 2, "{compacted:?}");
    assert!(compacted.iter().all(|c| c["node_id"] == "a"));
    assert_eq!(
        compacted[0]["data"],
        json!({"before_messages": 5, "after_messages": 3, "reason": "context_length_exceeded", "method": "summary"})
    );
    assert_eq!(
        compacted[1]["data"],
        json!({"before_messages": 5, "after_messages": 3, "reason": "session_replay", "method": "summary"})
    );
    assert_eq!(h.rec.of("node_finished")[0]["output"], json!({"ok": true}));
    // call 1, call 2, call 3 refused, summary, call 3 refused again; the retry: summary of the replay, call
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 7);
    let text =
        |r: &iterion_test_support::fake_provider::Recorded| r.body["messages"][0]["content"].to_string();
    // the replayed messages reached the provider: the retry's summary call saw the first tool output
    let replayed = text(&reqs[5]);
    assert!(replayed.contains("[tool result "), "{replayed}");
    assert!(replayed.contains(&"x".repeat(100)), "{replayed}");
    assert!(text(&reqs[6]).contains("SUMMARY-TWO"), "{}", text(&reqs[6]));
    assert!(
        h.rec
            .logs
            .lock()
            .unwrap()
            .iter()
            .any(|(_, m)| m.contains("retrying with its stored session replayed"))
    );
}

#[tokio::test]
async fn compaction_settings_fall_back_to_the_workflow_per_field() {
    let double = Double::new(&[json!({"type": "result", "data": {"output": {}}})], None, 0);
    let mut h = harness(double.program());
    let src = "agent a:\n  model: \"claude-x\"\n  compaction:\n    preserve_recent: 2\n\nworkflow w:\n  entry: a\n  compaction:\n    threshold: 0.5\n    preserve_recent: 9\n  a -> done\n";
    assert_eq!(summary(&h.run(src).await), "finished");
    let task = double.read("task");
    assert_eq!(task["data"]["compact_threshold_ratio"], json!(0.5));
    assert_eq!(task["data"]["compact_preserve_recent"], json!(2));
}
