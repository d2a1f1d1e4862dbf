//! Compaction and session replay against the scripted fake provider with a context window of its own (in
//! request-body bytes): an overflow is compacted and the call made again, a summary call that overflows drops
//! old tool outputs, the threshold compacts before the provider refuses, and a replayed session reaches the
//! provider as the conversation's prior messages.

use iterion_claw::Agent;
use iterion_claw::Sink;
use iterion_claw::compact::{self, DROPPED_OUTPUT, LOST_RESULT, SUMMARY_HEADER, SUMMARY_SYSTEM};
use iterion_claw::provider::{self, Client, Message, RetryPolicy};
use iterion_claw::tools::Builtins;
use iterion_envelope::{Task, TaskResult};
use iterion_test_support::fake_provider::{FakeProvider, Recorded, Reply};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<(String, Map<String, Value>)>>,
}

impl Sink for Recorder {
    fn event(&self, kind: &str, payload: Map<String, Value>) {
        self.events.lock().unwrap().push((kind.to_string(), payload));
    }
    fn session_capture(&self, _snapshot: Value) {}
}

impl Recorder {
    fn compactions(&self) -> Vec<Value> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k == "llm_compacted")
            .map(|(_, p)| Value::Object(p.clone()))
            .collect()
    }
}

fn task(preserve_recent: u64) -> Task {
    Task {
        node_id: "n".into(),
        system_prompt: "You work.".into(),
        user_prompt: "Do the task.".into(),
        model: "claude-test".into(),
        has_tools: true,
        allowed_tools: vec!["bash".into()],
        compact_preserve_recent: preserve_recent,
        ..Task::default()
    }
}

/// A bash call printing `n` bytes.
fn print(n: usize) -> Reply {
    Reply::tool(
        "bash",
        json!({"command": format!("head -c {n} /dev/zero | tr '\\0' x")}),
    )
}

struct Out {
    result: TaskResult,
    sink: Recorder,
    requests: Vec<Recorded>,
}

async fn run(
    t: &Task,
    script: Vec<Reply>,
    limit: usize,
    window: Option<u64>,
    replay: Option<Vec<Message>>,
) -> Out {
    let fake = FakeProvider::with_context_limit(script, limit).await.unwrap();
    let env: BTreeMap<String, String> = [
        ("ANTHROPIC_API_KEY", "a".to_string()),
        ("ANTHROPIC_BASE_URL", fake.url()),
        ("OPENAI_API_KEY", "o".to_string()),
        ("OPENAI_BASE_URL", fake.openai_url()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let dir = tempfile::tempdir().unwrap();
    let p = provider::resolve("", &t.model, &env).unwrap();
    let client = Client::new(None, RetryPolicy::new(1, Duration::from_millis(5))).unwrap();
    let builtins = Builtins::new(dir.path(), &t.allowed_tools, false, None).unwrap();
    let sink = Recorder::default();
    let mut agent = Agent::new(&client, &p, &builtins, &sink);
    if let Some(w) = window {
        agent = agent.with_context_window(w);
    }
    let result = agent.run_from(t, replay).await;
    Out {
        result,
        sink,
        requests: fake.requests(),
    }
}

fn first_user_text(r: &Recorded) -> String {
    let c = &r.body["messages"][0]["content"];
    c.as_str().map_or_else(|| c.to_string(), str::to_string)
}

#[tokio::test]
async fn an_overflow_is_compacted_and_the_call_made_again() {
    let out = run(
        &task(1),
        vec![
            print(3000),
            print(3000),
            Reply::text("SUMMARY-1"),
            Reply::text("finished"),
        ],
        5000,
        None,
        None,
    )
    .await;
    assert_eq!(out.result.error, "", "{:?}", out.result);
    assert_eq!(
        out.result.output,
        Some(json!({"text": "finished"}).as_object().unwrap().clone())
    );
    assert_eq!(
        out.sink.compactions(),
        [
            json!({"before_messages": 5, "after_messages": 3, "reason": "context_length_exceeded", "method": "summary"})
        ]
    );
    // call 1, call 2, call 3 refused, the summary, call 3 again
    let reqs = &out.requests;
    assert_eq!(reqs.len(), 5);
    assert!(reqs[2].body.to_string().len() > 5000);
    assert_eq!(reqs[3].body["system"], json!(SUMMARY_SYSTEM));
    assert!(reqs[3].body["tools"].as_array().is_none_or(|t| t.is_empty()));
    let first = first_user_text(&reqs[4]);
    assert_eq!(first, format!("Do the task.\n\n{SUMMARY_HEADER}\nSUMMARY-1"));
    assert_eq!(reqs[4].body["messages"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn an_overflow_that_cannot_be_compacted_is_context_length_exceeded() {
    // the only thing too big is the last tool output: nothing older to summarise
    let out = run(
        &task(1),
        vec![print(6000), Reply::text("never")],
        5000,
        None,
        None,
    )
    .await;
    assert_eq!(
        out.result.error_code, "CONTEXT_LENGTH_EXCEEDED",
        "{:?}",
        out.result
    );
    assert!(out.sink.compactions().is_empty());
    assert_eq!(out.requests.len(), 2);
}

#[tokio::test]
async fn a_summary_call_that_overflows_drops_the_old_tool_outputs() {
    let overflow = Reply::Status {
        status: 400,
        retry_after: None,
        body: r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}"#
            .into(),
    };
    let out = run(
        &task(1),
        vec![print(3000), print(3000), overflow, Reply::text("finished")],
        5000,
        None,
        None,
    )
    .await;
    assert_eq!(out.result.error, "", "{:?}", out.result);
    assert_eq!(
        out.sink.compactions(),
        [
            json!({"before_messages": 5, "after_messages": 5, "reason": "context_length_exceeded", "method": "dropped_tool_outputs"})
        ]
    );
    let last = &out.requests[4].body["messages"];
    assert_eq!(last[2]["content"][0]["content"], json!(DROPPED_OUTPUT));
    let kept = last[4]["content"][0]["content"].as_str().unwrap();
    assert!(
        kept.contains(&"x".repeat(3000)),
        "the recent output is kept: {kept}"
    );
}

#[tokio::test]
async fn the_threshold_compacts_before_the_provider_refuses() {
    // a window of 1 500 tokens (about 6 000 bytes) at the default ratio: the third call is compacted first
    let out = run(
        &task(1),
        vec![
            print(2500),
            print(2500),
            Reply::text("SUMMARY-T"),
            Reply::text("finished"),
        ],
        100_000,
        Some(1500),
        None,
    )
    .await;
    assert_eq!(out.result.error, "", "{:?}", out.result);
    assert_eq!(out.sink.compactions()[0]["reason"], json!("threshold"));
    assert_eq!(out.requests.len(), 4, "no call was refused");
    assert_eq!(out.requests[2].body["system"], json!(SUMMARY_SYSTEM));
}

/// The snapshot a first attempt captured after its second model turn (two bash calls, the second unanswered).
fn captured() -> Vec<Message> {
    let snapshot = json!({"system": "You work.", "messages": [
        {"role": "user", "content": "Do the task."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "README.md", "is_error": false}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Now the big one."}, {"type": "tool_use", "id": "c2", "name": "bash", "input": {"command": "cat big"}}]}
    ]});
    compact::decode_snapshot(&snapshot).unwrap()
}

#[tokio::test]
async fn a_replayed_session_reaches_the_provider_compacted_first() {
    let out = run(
        &task(1),
        vec![Reply::text("SUMMARY-R"), Reply::text("finished")],
        100_000,
        None,
        Some(captured()),
    )
    .await;
    assert_eq!(out.result.error, "", "{:?}", out.result);
    assert_eq!(
        out.sink.compactions(),
        [json!({"before_messages": 5, "after_messages": 3, "reason": "session_replay", "method": "summary"})]
    );
    // the summary call saw the replayed messages
    let summary_input = first_user_text(&out.requests[0]);
    assert!(
        summary_input.contains("[tool result c1]:\nREADME.md"),
        "{summary_input}"
    );
    let msgs = &out.requests[1].body["messages"];
    assert_eq!(
        first_user_text(&out.requests[1]),
        format!("Do the task.\n\n{SUMMARY_HEADER}\nSUMMARY-R")
    );
    assert_eq!(msgs[1]["content"][1]["id"], json!("c2"));
    assert_eq!(msgs[2]["content"][0]["tool_use_id"], json!("c2"));
    assert_eq!(msgs[2]["content"][0]["content"], json!(LOST_RESULT));
}

#[tokio::test]
async fn a_short_replayed_session_reaches_the_provider_verbatim() {
    let out = run(
        &task(10),
        vec![Reply::text("finished")],
        100_000,
        None,
        Some(captured()),
    )
    .await;
    assert_eq!(out.result.error, "", "{:?}", out.result);
    assert!(out.sink.compactions().is_empty());
    assert_eq!(out.requests.len(), 1);
    let msgs = out.requests[0].body["messages"].as_array().unwrap().clone();
    assert_eq!(msgs.len(), 5);
    assert_eq!(msgs[0]["content"], json!("Do the task."));
    assert_eq!(msgs[2]["content"][0]["content"], json!("README.md"));
    assert_eq!(msgs[3]["content"][0]["text"], json!("Now the big one."));
    assert_eq!(msgs[4]["content"][0]["content"], json!(LOST_RESULT));
}

#[tokio::test]
async fn chat_completions_overflows_are_compacted_the_same_way() {
    let mut t = task(1);
    t.model = "gpt-5".into();
    let out = run(
        &t,
        vec![
            print(3000),
            print(3000),
            Reply::text("SUMMARY-O"),
            Reply::text("finished"),
        ],
        5000,
        None,
        None,
    )
    .await;
    assert_eq!(out.result.error, "", "{:?}", out.result);
    assert_eq!(
        out.sink.compactions()[0]["reason"],
        json!("context_length_exceeded")
    );
    let reqs = &out.requests;
    assert_eq!(reqs.len(), 5);
    assert!(reqs[0].path.ends_with("/chat/completions"));
    // Chat Completions carries the system prompt as the first message
    let msgs = reqs[4].body["messages"].as_array().unwrap();
    let user = msgs.iter().find(|m| m["role"] == "user").unwrap();
    assert_eq!(
        user["content"],
        json!(format!("Do the task.\n\n{SUMMARY_HEADER}\nSUMMARY-O"))
    );
}
