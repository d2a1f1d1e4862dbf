//! `runner::serve` driven by a scripted launcher over in-memory pipes, against the fake provider.

use iterion_claw::runner::{ServeOptions, serve};
use iterion_test_support::fake_provider::{FakeProvider, Reply};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const HELLO: &str = r#"{"type":"hello","data":{"protocol":"iterion.envelope","role":"launcher","min_version":1,"max_version":1,"software":"test"}}"#;

#[tokio::test]
async fn serves_a_task_with_a_delegated_tool() {
    let d = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        Reply::ToolCalls(
            String::new(),
            vec![
                ("notify".into(), json!({"text": "hi"})),
                ("write_file".into(), json!({"path": "out.txt", "content": "x"})),
            ],
        ),
        Reply::text("{\"done\": true}"),
    ])
    .await
    .unwrap();
    let env = BTreeMap::from([
        ("ANTHROPIC_API_KEY".to_string(), "k".to_string()),
        ("ANTHROPIC_BASE_URL".to_string(), fake.url()),
    ]);
    let (launcher_out, runner_in) = tokio::io::duplex(1 << 20);
    let (runner_out, launcher_in) = tokio::io::duplex(1 << 20);
    let runner = tokio::spawn(serve(
        runner_in,
        runner_out,
        ServeOptions::new(env, "iterion test"),
    ));
    let mut w = launcher_out;
    let mut lines = BufReader::new(launcher_in).lines();
    w.write_all(format!("{HELLO}\n").as_bytes()).await.unwrap();
    let hello: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(hello["data"]["role"], json!("runner"));
    let task = json!({"type": "task", "data": {
        "node_id": "n", "user_prompt": "go", "model": "claude-x", "has_tools": true,
        "allowed_tools": ["notify", "write_file"], "work_dir": d.path(),
        "tool_defs": [{"name": "notify", "description": "tell"}],
    }});
    w.write_all(format!("{task}\n").as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let result = loop {
        let line = lines.next_line().await.unwrap().expect("a result before the end");
        let env: Value = serde_json::from_str(&line).unwrap();
        match env["type"].as_str().unwrap() {
            "tool_call" => {
                assert_eq!(env["data"], json!({"name": "notify", "input": {"text": "hi"}}));
                let reply = json!({"type": "tool_result", "id": env["id"], "data": {"output": "sent"}});
                w.write_all(format!("{reply}\n").as_bytes()).await.unwrap();
                seen.push("tool_call".to_string());
            }
            "event" => seen.push(env["data"]["type"].as_str().unwrap().to_string()),
            "session_capture" => seen.push("session_capture".into()),
            "result" => break env["data"].clone(),
            other => panic!("unexpected {other}"),
        }
    };
    assert_eq!(result["output"], json!({"done": true}), "{result}");
    assert_eq!(runner.await.unwrap(), 0);
    assert_eq!(std::fs::read_to_string(d.path().join("out.txt")).unwrap(), "x");
    assert!(seen.contains(&"tool_call".to_string()));
    assert_eq!(seen.iter().filter(|s| *s == "session_capture").count(), 2);
    assert_eq!(seen.first().map(String::as_str), Some("llm_request"));
    assert_eq!(
        fake.requests()[1].body["messages"][2]["content"][0]["content"],
        json!("sent")
    );
}

#[tokio::test]
async fn missing_key_is_a_failed_result() {
    let (launcher_out, runner_in) = tokio::io::duplex(1 << 16);
    let (runner_out, launcher_in) = tokio::io::duplex(1 << 16);
    let runner = tokio::spawn(serve(
        runner_in,
        runner_out,
        ServeOptions::new(BTreeMap::new(), "t"),
    ));
    let mut w = launcher_out;
    let mut lines = BufReader::new(launcher_in).lines();
    w.write_all(format!("{HELLO}\n").as_bytes()).await.unwrap();
    lines.next_line().await.unwrap().unwrap();
    w.write_all(b"{\"type\":\"task\",\"data\":{\"node_id\":\"n\",\"model\":\"gpt-5\"}}\n")
        .await
        .unwrap();
    let result: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(result["type"], json!("result"));
    assert_eq!(
        result["data"]["error"],
        json!("no API key for provider 'openai': set OPENAI_API_KEY")
    );
    assert_eq!(result["data"]["error_code"], json!("EXECUTION_FAILED"));
    assert_ne!(runner.await.unwrap(), 0);
}

#[tokio::test]
async fn cancel_ends_the_loop_with_a_cancelled_result() {
    let fake = FakeProvider::start(vec![Reply::tool("notify", json!({}))])
        .await
        .unwrap();
    let env = BTreeMap::from([
        ("OPENAI_API_KEY".to_string(), "k".to_string()),
        ("OPENAI_BASE_URL".to_string(), fake.openai_url()),
    ]);
    let (launcher_out, runner_in) = tokio::io::duplex(1 << 16);
    let (runner_out, launcher_in) = tokio::io::duplex(1 << 16);
    let runner = tokio::spawn(serve(runner_in, runner_out, ServeOptions::new(env, "t")));
    let mut w = launcher_out;
    let mut lines = BufReader::new(launcher_in).lines();
    w.write_all(format!("{HELLO}\n").as_bytes()).await.unwrap();
    lines.next_line().await.unwrap().unwrap();
    let task = json!({"type": "task", "data": {"node_id": "n", "model": "gpt-5", "has_tools": true,
        "allowed_tools": ["notify"], "tool_defs": [{"name": "notify"}]}});
    w.write_all(format!("{task}\n").as_bytes()).await.unwrap();
    let result = loop {
        let env: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        match env["type"].as_str().unwrap() {
            // the tool call is never answered: the launcher cancels instead
            "tool_call" => w
                .write_all(b"{\"type\":\"cancel\",\"data\":{\"reason\":\"user\"}}\n")
                .await
                .unwrap(),
            "result" => break env["data"].clone(),
            _ => {}
        }
    };
    assert_eq!(result["error_code"], json!("CANCELLED"), "{result}");
    assert_eq!(runner.await.unwrap(), 1);
}

/// One task preceded by a `session_replay` of `snapshot`; returns the provider's first request body.
async fn replayed(snapshot: Value) -> Value {
    let fake = FakeProvider::start(vec![Reply::text("{\"done\": true}")])
        .await
        .unwrap();
    let env = BTreeMap::from([
        ("ANTHROPIC_API_KEY".to_string(), "k".to_string()),
        ("ANTHROPIC_BASE_URL".to_string(), fake.url()),
    ]);
    let (launcher_out, runner_in) = tokio::io::duplex(1 << 20);
    let (runner_out, launcher_in) = tokio::io::duplex(1 << 20);
    let runner = tokio::spawn(serve(
        runner_in,
        runner_out,
        ServeOptions::new(env, "iterion test"),
    ));
    let mut w = launcher_out;
    let mut lines = BufReader::new(launcher_in).lines();
    w.write_all(format!("{HELLO}\n").as_bytes()).await.unwrap();
    lines.next_line().await.unwrap().unwrap();
    let replay = json!({"type": "session_replay", "data": snapshot});
    w.write_all(format!("{replay}\n").as_bytes()).await.unwrap();
    let task = json!({"type": "task", "data": {"node_id": "n", "user_prompt": "go on", "model": "claude-x", "compact_preserve_recent": 10}});
    w.write_all(format!("{task}\n").as_bytes()).await.unwrap();
    let result = loop {
        let line = lines.next_line().await.unwrap().expect("a result before the end");
        let env: Value = serde_json::from_str(&line).unwrap();
        if env["type"] == "result" {
            break env["data"].clone();
        }
    };
    assert_eq!(result["output"], json!({"done": true}), "{result}");
    assert_eq!(runner.await.unwrap(), 0);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    reqs[0].body.clone()
}

#[tokio::test]
async fn a_replayed_session_seeds_the_conversation_and_an_undecodable_one_starts_fresh() {
    let snapshot = json!({"system": "s", "messages": [
        {"role": "user", "content": "first prompt"},
        {"role": "assistant", "content": [{"type": "text", "text": "earlier answer"}]}
    ]});
    let body = replayed(snapshot).await;
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3, "{body}");
    assert_eq!(msgs[0]["content"], json!("first prompt"));
    assert_eq!(msgs[1]["content"][0]["text"], json!("earlier answer"));
    assert_eq!(msgs[2]["content"], json!(iterion_claw::compact::CONTINUE_PROMPT));
    // not a conversation: the task starts fresh
    let body = replayed(json!({"messages": [{"role": "tool", "content": "?"}]})).await;
    assert_eq!(body["messages"], json!([{"role": "user", "content": "go on"}]));
}
