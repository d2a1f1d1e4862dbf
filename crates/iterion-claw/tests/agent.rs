//! The loop against the scripted fake provider.

use futures::future::BoxFuture;
use iterion_claw::provider::{self, Client, RetryPolicy};
use iterion_claw::tools::Builtins;
use iterion_claw::{Agent, Sink, ToolDelegate};
use iterion_envelope::{Task, TaskResult, ToolDef};
use iterion_test_support::fake_provider::{FakeProvider, Recorded, Reply};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<(String, Map<String, Value>)>>,
    captures: Mutex<Vec<Value>>,
}

impl Sink for Recorder {
    fn event(&self, kind: &str, payload: Map<String, Value>) {
        self.events.lock().unwrap().push((kind.to_string(), payload));
    }
    fn session_capture(&self, snapshot: Value) {
        self.captures.lock().unwrap().push(snapshot);
    }
}

impl Recorder {
    fn kinds(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|(k, _)| k.clone())
            .collect()
    }
}

fn task(model: &str, tools: &[&str]) -> Task {
    Task {
        node_id: "fixer".into(),
        system_prompt: "You fix things.".into(),
        user_prompt: "Create hello.txt".into(),
        model: model.into(),
        has_tools: !tools.is_empty(),
        allowed_tools: tools.iter().map(|s| s.to_string()).collect(),
        ..Task::default()
    }
}

struct Run {
    result: TaskResult,
    sink: Recorder,
    requests: Vec<Recorded>,
}

async fn run(
    t: &Task,
    script: Vec<Reply>,
    dir: &Path,
    stream: bool,
    delegate: Option<&dyn ToolDelegate>,
) -> Run {
    let fake = FakeProvider::start(script).await.unwrap();
    let env: BTreeMap<String, String> = [
        ("ANTHROPIC_API_KEY", "a".to_string()),
        ("ANTHROPIC_BASE_URL", fake.url()),
        ("OPENAI_API_KEY", "o".to_string()),
        ("OPENAI_BASE_URL", fake.openai_url()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let p = provider::resolve(&t.provider_hint, &t.model, &env).unwrap();
    let client = Client::new(None, RetryPolicy::new(2, Duration::from_millis(5))).unwrap();
    let builtins = Builtins::new(dir, &t.allowed_tools, t.readonly, None).unwrap();
    let sink = Recorder::default();
    let mut agent = Agent::new(&client, &p, &builtins, &sink).streaming(stream);
    if let Some(d) = delegate {
        agent = agent.with_delegate(d);
    }
    let result = agent.run(t).await;
    Run {
        result,
        sink,
        requests: fake.requests(),
    }
}

fn bash_then_write() -> Vec<Reply> {
    vec![
        Reply::tool(
            "bash",
            json!({"command": "echo from-bash > probe.txt && cat probe.txt"}),
        ),
        Reply::tool(
            "write_file",
            json!({"path": "hello.txt", "content": "hello world\n"}),
        ),
        Reply::text("Created hello.txt."),
    ]
}

#[tokio::test]
async fn bash_then_write_file() {
    let d = tempfile::tempdir().unwrap();
    let r = run(
        &task("claude-sonnet-4", &["bash", "write_file"]),
        bash_then_write(),
        d.path(),
        false,
        None,
    )
    .await;
    assert_eq!(r.result.error, "");
    assert_eq!(
        r.result.output,
        Some(json!({"text": "Created hello.txt."}).as_object().unwrap().clone())
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("hello.txt")).unwrap(),
        "hello world\n"
    );
    assert_eq!(r.result.tokens, 45);
    assert_eq!(r.result.backend_name, "claw");
    assert_eq!(r.requests.len(), 3);
    // the bash result went back to the model as a tool_result
    let second = &r.requests[1].body["messages"];
    assert_eq!(second[1]["content"][0]["type"], json!("tool_use"));
    let result = &second[2]["content"][0];
    assert_eq!(result["type"], json!("tool_result"));
    assert!(
        result["content"].as_str().unwrap().contains("from-bash"),
        "{result}"
    );
    assert_eq!(r.requests[0].body["tools"].as_array().unwrap().len(), 2);
    assert_eq!(
        r.sink.kinds(),
        [
            "llm_request",
            "llm_step_finished",
            "tool_started",
            "tool_called",
            "llm_request",
            "llm_step_finished",
            "tool_started",
            "tool_called",
            "llm_request",
            "llm_step_finished",
        ]
    );
    let captures = r.sink.captures.lock().unwrap();
    assert_eq!(captures.len(), 3);
    assert_eq!(captures[2]["messages"].as_array().unwrap().len(), 6);
}

#[tokio::test]
async fn streaming_equals_non_streaming() {
    for model in ["claude-x", "gpt-5"] {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let t = task(model, &["bash", "write_file"]);
        let plain = run(&t, bash_then_write(), a.path(), false, None).await;
        let streamed = run(&t, bash_then_write(), b.path(), true, None).await;
        assert_eq!(plain.result.output, streamed.result.output);
        assert_eq!(plain.result.tokens, streamed.result.tokens);
        assert_eq!(plain.sink.kinds(), streamed.sink.kinds());
        let strip = |r: &Run| -> Vec<Value> {
            r.requests
                .iter()
                .map(|q| {
                    let mut b = q.body.clone();
                    let m = b.as_object_mut().unwrap();
                    m.remove("stream");
                    m.remove("stream_options");
                    b
                })
                .collect()
        };
        // the same conversation is sent at every step
        assert_eq!(strip(&plain), strip(&streamed), "{model}");
        assert_eq!(
            std::fs::read_to_string(b.path().join("hello.txt")).unwrap(),
            "hello world\n"
        );
    }
}

#[tokio::test]
async fn rate_limited_then_success() {
    let d = tempfile::tempdir().unwrap();
    let script = vec![
        Reply::Status {
            status: 429,
            retry_after: Some(0),
            body: "busy".into(),
        },
        Reply::text("ok"),
    ];
    let r = run(&task("gpt-5", &[]), script, d.path(), false, None).await;
    assert_eq!(r.result.error_code, "");
    assert_eq!(r.sink.kinds(), ["llm_request", "llm_retry", "llm_step_finished"]);
    let retry = &r.sink.events.lock().unwrap()[1].1;
    assert_eq!(retry["error_code"], json!("RATE_LIMITED"));
    assert_eq!(retry["attempt"], json!(1));
    // no tools list: no tools offered
    assert!(r.requests[0].body.get("tools").is_none());
}

#[tokio::test]
async fn failures_carry_error_codes() {
    let d = tempfile::tempdir().unwrap();
    let r = run(
        &task("gpt-5", &[]),
        vec![Reply::Raw("<html>oops</html>".into())],
        d.path(),
        false,
        None,
    )
    .await;
    assert_eq!(r.result.error_code, "EXECUTION_FAILED");
    assert!(
        r.result
            .error
            .starts_with("malformed answer from provider 'openai'"),
        "{}",
        r.result.error
    );
    assert!(r.result.output.is_none());
    let busy = || Reply::Status {
        status: 429,
        retry_after: Some(0),
        body: "busy".into(),
    };
    let r = run(
        &task("gpt-5", &[]),
        vec![busy(), busy(), busy()],
        d.path(),
        false,
        None,
    )
    .await;
    assert_eq!(r.result.error_code, "RATE_LIMITED");
}

#[tokio::test]
async fn schema_output_with_reformat_pass_and_fallback() {
    let d = tempfile::tempdir().unwrap();
    let mut t = task("claude-x", &[]);
    t.output_schema =
        Some(json!({"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}));
    let r = run(
        &t,
        vec![
            Reply::text("It worked."),
            Reply::text("```json\n{\"ok\": true}\n```"),
        ],
        d.path(),
        false,
        None,
    )
    .await;
    assert!(r.result.formatting_pass_used && !r.result.parse_fallback);
    assert_eq!(r.result.output.unwrap()["ok"], json!(true));
    let last = r.requests[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .starts_with("Reformat your previous answer")
    );
    assert_eq!(r.result.raw_output_len, "It worked.".len() as u64);

    let r = run(
        &t,
        vec![Reply::text("It worked."), Reply::text("{\"ok\": \"yes\"}")],
        d.path(),
        false,
        None,
    )
    .await;
    assert!(r.result.formatting_pass_used && r.result.parse_fallback);
    assert_eq!(
        r.result.output.unwrap(),
        json!({"text": "It worked."}).as_object().unwrap().clone()
    );

    // an answer that conforms right away needs no extra call
    let r = run(
        &t,
        vec![Reply::text("Done: {\"ok\": false}")],
        d.path(),
        false,
        None,
    )
    .await;
    assert!(!r.result.formatting_pass_used);
    assert_eq!(r.requests.len(), 1);
}

#[tokio::test]
async fn tool_max_steps_bounds_model_calls() {
    let d = tempfile::tempdir().unwrap();
    let mut t = task("gpt-5", &["bash"]);
    t.tool_max_steps = 2;
    let again = || Reply::tool("bash", json!({"command": "true"}));
    let r = run(&t, vec![again(), again(), again()], d.path(), false, None).await;
    assert_eq!(r.requests.len(), 2);
    assert_eq!(r.result.error, "");
}

/// Both calls must be in flight at once: the barrier only opens for two.
struct Together(tokio::sync::Barrier, Mutex<Vec<Value>>);

impl ToolDelegate for Together {
    fn call<'a>(&'a self, name: &'a str, input: &'a Value) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            self.1.lock().unwrap().push(json!({"name": name, "input": input}));
            match tokio::time::timeout(Duration::from_secs(5), self.0.wait()).await {
                Ok(_) => Ok(format!("{name} done")),
                Err(_) => Err("calls were not concurrent".into()),
            }
        })
    }
}

#[tokio::test]
async fn delegated_tools_run_concurrently_and_errors_go_back() {
    let d = tempfile::tempdir().unwrap();
    let mut t = task("claude-x", &["notify", "read_file"]);
    t.tool_defs = vec![ToolDef {
        name: "notify".into(),
        description: "tell".into(),
        input_schema: None,
    }];
    let script = vec![
        Reply::ToolCalls(
            String::new(),
            vec![
                ("notify".into(), json!({"n": 1})),
                ("notify".into(), json!({"n": 2})),
                ("read_file".into(), json!({"path": "missing.txt"})),
                ("bash".into(), json!({"command": "true"})),
            ],
        ),
        Reply::text("told"),
    ];
    let delegate = Together(tokio::sync::Barrier::new(2), Mutex::default());
    let r = run(&t, script, d.path(), false, Some(&delegate)).await;
    assert_eq!(r.result.error, "");
    assert_eq!(delegate.1.lock().unwrap().len(), 2);
    let names: Vec<&str> = r.requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read_file", "notify"]);
    let results = r.requests[1].body["messages"][2]["content"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(results[0]["content"], json!("notify done"));
    assert_eq!(results[1]["content"], json!("notify done"));
    assert_eq!(results[2]["is_error"], json!(true));
    assert_eq!(results[3]["content"], json!("bash: tool is not available"));
    let errors = r.sink.kinds().iter().filter(|k| *k == "tool_error").count();
    assert_eq!(errors, 2);
}

#[tokio::test]
async fn readonly_offers_no_delegated_tools_and_refuses_them() {
    let d = tempfile::tempdir().unwrap();
    let mut t = task("claude-x", &["notify", "read_file", "write_file"]);
    t.readonly = true;
    t.tool_defs = vec![ToolDef {
        name: "notify".into(),
        description: "tell".into(),
        input_schema: None,
    }];
    let script = vec![Reply::tool("notify", json!({})), Reply::text("ok")];
    let delegate = Together(tokio::sync::Barrier::new(1), Mutex::default());
    let r = run(&t, script, d.path(), false, Some(&delegate)).await;
    let names: Vec<&str> = r.requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read_file"]);
    assert!(delegate.1.lock().unwrap().is_empty());
    assert_eq!(
        r.requests[1].body["messages"][2]["content"][0]["content"],
        json!("notify: tool is not available")
    );
}
