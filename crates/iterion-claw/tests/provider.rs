//! The provider client against the scripted fake provider: both wire formats, streaming and not, retries,
//! error mapping.

use iterion_claw::provider::{self, Client, Message, Request, RetryPolicy, Stop, ToolSpec, Turn};
use iterion_test_support::fake_provider::{FakeProvider, Reply};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

fn env(fake: &FakeProvider) -> BTreeMap<String, String> {
    [
        ("ANTHROPIC_API_KEY", "sk-ant-secret".to_string()),
        ("ANTHROPIC_BASE_URL", fake.url()),
        ("OPENAI_API_KEY", "sk-oai-secret".to_string()),
        ("OPENAI_BASE_URL", fake.openai_url()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn request(stream: bool) -> Request {
    Request {
        system: "be brief".into(),
        messages: vec![Message::User("hi".into())],
        tools: vec![ToolSpec {
            name: "bash".into(),
            description: "run".into(),
            input_schema: json!({"type": "object"}),
        }],
        max_tokens: 100,
        stream,
        reasoning_effort: "high".into(),
    }
}

fn client() -> Client {
    Client::new(None, RetryPolicy::new(2, Duration::from_millis(5))).unwrap()
}

async fn one(model: &str, reply: Reply, stream: bool) -> (Turn, FakeProvider) {
    let fake = FakeProvider::start(vec![reply]).await.unwrap();
    let p = provider::resolve("", model, &env(&fake)).unwrap();
    let turn = client().send(&p, &request(stream), &mut |_| {}).await.unwrap();
    (turn, fake)
}

#[tokio::test]
async fn streaming_equals_non_streaming_for_both_wires() {
    let tool = Reply::ToolCalls(
        "Let me look — é".into(),
        vec![
            ("bash".into(), json!({"command": "ls -la"})),
            ("read_file".into(), json!({"path": "a.txt"})),
        ],
    );
    for model in ["claude-sonnet-4", "gpt-5"] {
        for reply in [Reply::text("all done ✓"), tool.clone()] {
            let (plain, _) = one(model, reply.clone(), false).await;
            let (streamed, fake) = one(model, reply, true).await;
            assert_eq!(plain, streamed, "{model}");
            assert_eq!(plain.usage.input_tokens, 10);
            assert_eq!(plain.usage.output_tokens, 5);
            assert_eq!(fake.requests()[0].body["stream"], json!(true));
        }
    }
    let (t, _) = one("gpt-5", tool, false).await;
    assert_eq!(t.stop, Stop::ToolUse);
    assert_eq!(t.tool_calls[1].input, json!({"path": "a.txt"}));
}

#[tokio::test]
async fn request_shapes_and_redacted_auth() {
    let (_, fake) = one("claude-x", Reply::text("ok"), false).await;
    let r = &fake.requests()[0];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some("<redacted>"));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.body["system"], json!("be brief"));
    assert_eq!(r.body["tools"][0]["input_schema"], json!({"type": "object"}));
    assert_eq!(r.body["max_tokens"], json!(100));
    assert!(r.body.get("reasoning_effort").is_none());

    let (_, fake) = one("openai/gpt-5", Reply::text("ok"), false).await;
    let r = &fake.requests()[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("<redacted>"));
    assert_eq!(r.body["model"], json!("gpt-5"));
    assert_eq!(
        r.body["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
    assert_eq!(r.body["tools"][0]["function"]["name"], json!("bash"));
    assert_eq!(r.body["reasoning_effort"], json!("high"));
    assert_eq!(r.body["max_completion_tokens"], json!(100));
}

#[tokio::test]
async fn retries_429_honouring_retry_after_then_succeeds() {
    let fake = FakeProvider::start(vec![
        Reply::Status {
            status: 429,
            retry_after: Some(0),
            body: "slow".into(),
        },
        Reply::Status {
            status: 503,
            retry_after: None,
            body: "busy".into(),
        },
        Reply::text("fine"),
    ])
    .await
    .unwrap();
    let p = provider::resolve("", "gpt-5", &env(&fake)).unwrap();
    let mut retries = Vec::new();
    let t = client()
        .send(&p, &request(false), &mut |r| {
            retries.push((r.attempt, r.code, r.delay))
        })
        .await
        .unwrap();
    assert_eq!(t.text, "fine");
    assert_eq!(
        retries,
        vec![
            (1, "RATE_LIMITED", Duration::ZERO),
            (2, "EXECUTION_FAILED", Duration::from_millis(10))
        ]
    );
    assert_eq!(fake.requests().len(), 3);
}

#[tokio::test]
async fn error_codes() {
    let cases = [
        (
            Reply::Status {
                status: 429,
                retry_after: None,
                body: "x".into(),
            },
            "RATE_LIMITED",
        ),
        (
            Reply::Status {
                status: 400,
                retry_after: None,
                body: r#"{"error":{"message":"prompt is too long: 300000 tokens"}}"#.into(),
            },
            "CONTEXT_LENGTH_EXCEEDED",
        ),
        (
            Reply::Status {
                status: 401,
                retry_after: None,
                body: "bad key".into(),
            },
            "EXECUTION_FAILED",
        ),
        (Reply::Raw("{not json".into()), "EXECUTION_FAILED"),
        (Reply::Raw(r#"{"choices": []}"#.into()), "EXECUTION_FAILED"),
    ];
    for (reply, code) in cases {
        // three copies: the retries of a 429 are spent before the error surfaces
        let fake = FakeProvider::start(vec![reply.clone(), reply.clone(), reply])
            .await
            .unwrap();
        let p = provider::resolve("", "gpt-5", &env(&fake)).unwrap();
        let e = client().send(&p, &request(false), &mut |_| {}).await.unwrap_err();
        assert_eq!(e.code(), code, "{e}");
    }
    // a stream cut short is malformed
    let fake = FakeProvider::start(vec![Reply::Raw(
        "event: message_start\ndata: {\"type\":\"message_start\"}\n\n".into(),
    )])
    .await
    .unwrap();
    let p = provider::resolve("", "claude-x", &env(&fake)).unwrap();
    let e = client().send(&p, &request(true), &mut |_| {}).await.unwrap_err();
    assert_eq!(
        (e.code(), e.to_string().contains("message_stop")),
        ("EXECUTION_FAILED", true)
    );
    // nothing listening: a network failure
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let p = provider::resolve(
        "",
        "claude-x",
        &BTreeMap::from([
            ("ANTHROPIC_API_KEY".into(), "k".into()),
            ("ANTHROPIC_BASE_URL".into(), url),
        ]),
    )
    .unwrap();
    let e = client().send(&p, &request(false), &mut |_| {}).await.unwrap_err();
    assert_eq!(e.code(), "NETWORK_TRANSIENT", "{e}");
}

#[tokio::test]
async fn proxy_url_is_used() {
    // the fake provider plays the proxy: a forward-proxied request arrives with an absolute URL and credentials
    let fake = FakeProvider::start(vec![Reply::text("via proxy")]).await.unwrap();
    let proxy = format!("http://user:pw@{}", fake.url().trim_start_matches("http://"));
    let c = Client::new(Some(&proxy), RetryPolicy::new(0, Duration::ZERO)).unwrap();
    let env = BTreeMap::from([
        ("OPENAI_API_KEY".into(), "k".into()),
        ("OPENAI_BASE_URL".into(), "http://provider.invalid/v1".into()),
    ]);
    let p = provider::resolve("", "gpt-5", &env).unwrap();
    let t = c.send(&p, &request(false), &mut |_| {}).await.unwrap();
    assert_eq!(t.text, "via proxy");
    let r = &fake.requests()[0];
    assert_eq!(r.path, "http://provider.invalid/v1/chat/completions");
    assert_eq!(r.header("proxy-authorization"), Some("<redacted>"));
}
