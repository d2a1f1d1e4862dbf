//! A scripted model provider on `127.0.0.1:0` speaking the Anthropic Messages API (`POST /v1/messages`) and
//! OpenAI Chat Completions (`POST /v1/chat/completions`), streaming (`"stream": true`, SSE) or not.
//!
//! Each request takes the next [`Reply`] of the script and renders it in the wire format of the request's path.
//! Every request is recorded ([`Recorded`]): path, headers (the values of auth headers replaced by
//! `<redacted>`) and the JSON body. A request beyond the script gets HTTP 500 `script exhausted`.

use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// The model ends its turn with this text.
    Text(String),
    /// The model asks for these tool calls `(name, input)`, with optional leading text.
    ToolCalls(String, Vec<(String, Value)>),
    /// An HTTP error status with an optional `retry-after` (seconds) and a body.
    Status {
        /// HTTP status.
        status: u16,
        /// `retry-after` header value in seconds.
        retry_after: Option<u64>,
        /// Body text.
        body: String,
    },
    /// A 200 answer with this raw body, whatever the wire format (for malformed answers).
    Raw(String),
}

impl Reply {
    /// A text answer.
    pub fn text(t: &str) -> Self {
        Reply::Text(t.to_string())
    }
    /// One tool call.
    pub fn tool(name: &str, input: Value) -> Self {
        Reply::ToolCalls(String::new(), vec![(name.to_string(), input)])
    }
}

/// A request the fake provider received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Request path.
    pub path: String,
    /// Header names (lowercase) and values; auth header values are `<redacted>`.
    pub headers: Vec<(String, String)>,
    /// The JSON body (`null` when not JSON).
    pub body: Value,
    /// When the request had been read (for latency benchmarks).
    pub received: std::time::Instant,
    /// Auth header names (lowercase) and the hex SHA-256 of their values: tests check which key arrived
    /// without the key appearing in their output.
    pub auth_sha256: Vec<(String, String)>,
}

impl Recorded {
    /// The value of header `name` (lowercase), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether auth header `name` (lowercase) carried exactly `value`.
    pub fn auth_is(&self, name: &str, value: &str) -> bool {
        use sha2::Digest as _;
        let want = hex::encode(sha2::Sha256::digest(value.as_bytes()));
        self.auth_sha256.iter().any(|(k, d)| k == name && *d == want)
    }
}

/// Header names whose values are never recorded.
const AUTH_HEADERS: &[&str] = &["authorization", "x-api-key", "proxy-authorization", "api-key"];

type Shared<T> = Arc<Mutex<T>>;

/// The running fake provider; stops when dropped.
#[derive(Debug)]
pub struct FakeProvider {
    addr: std::net::SocketAddr,
    requests: Shared<Vec<Recorded>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeProvider {
    /// Starts serving `script` (inside a tokio runtime).
    pub async fn start(script: Vec<Reply>) -> std::io::Result<Self> {
        Self::serve_script(script, None).await
    }

    /// Like [`FakeProvider::start`], with a context window of `limit` request-body bytes: a request whose body is
    /// larger gets an HTTP 400 `context_length_exceeded` error (in the format of its wire) and consumes no
    /// reply of the script. It is recorded like any other request.
    pub async fn with_context_limit(script: Vec<Reply>, limit: usize) -> std::io::Result<Self> {
        Self::serve_script(script, Some(limit)).await
    }

    async fn serve_script(script: Vec<Reply>, limit: Option<usize>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let script: Shared<VecDeque<Reply>> = Arc::new(Mutex::new(script.into()));
        let requests: Shared<Vec<Recorded>> = Arc::default();
        let rec = requests.clone();
        let task = tokio::spawn(async move {
            let mut n = 0u64;
            while let Ok((sock, _)) = listener.accept().await {
                n += 1;
                let (script, rec) = (script.clone(), rec.clone());
                tokio::spawn(async move {
                    let _ = serve(sock, n, script, rec, limit).await;
                });
            }
        });
        Ok(FakeProvider { addr, requests, task })
    }

    /// `http://127.0.0.1:<port>`: the Anthropic base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:<port>/v1`: the OpenAI base URL.
    pub fn openai_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

async fn serve(
    mut sock: TcpStream,
    conn: u64,
    script: Shared<VecDeque<Reply>>,
    rec: Shared<Vec<Recorded>>,
    limit: Option<usize>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut chunk = [0u8; 4096];
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines
        .next()
        .unwrap_or("")
        .split(' ')
        .nth(1)
        .unwrap_or("")
        .to_string();
    let mut headers = Vec::new();
    let mut auth_sha256 = Vec::new();
    for l in lines.filter(|l| !l.is_empty()) {
        if let Some((k, v)) = l.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            let v = if AUTH_HEADERS.contains(&k.as_str()) {
                use sha2::Digest as _;
                auth_sha256.push((k.clone(), hex::encode(sha2::Sha256::digest(v.trim().as_bytes()))));
                "<redacted>".into()
            } else {
                v.trim().to_string()
            };
            headers.push((k, v));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let mut chunk = [0u8; 4096];
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body_len = buf.len() - head_end;
    let body: Value = serde_json::from_slice(&buf[head_end..]).unwrap_or(Value::Null);
    let stream = body["stream"].as_bool().unwrap_or(false);
    let openai = path.ends_with("/chat/completions");
    rec.lock().unwrap().push(Recorded {
        path,
        headers,
        body,
        received: std::time::Instant::now(),
        auth_sha256,
    });
    if limit.is_some_and(|l| body_len > l) {
        let message = format!("the request ({body_len} bytes) exceeds the model's context window");
        let body = if openai {
            serde_json::json!({"error": {"message": message, "type": "invalid_request_error", "code": "context_length_exceeded"}})
        } else {
            serde_json::json!({"type": "error", "error": {"type": "invalid_request_error", "message": format!("prompt is too long: {message}")}})
        };
        sock.write_all(&http(400, "application/json", "", &body.to_string()))
            .await?;
        return sock.shutdown().await;
    }
    let reply = script.lock().unwrap().pop_front();
    let out = render(reply, openai, stream, conn);
    sock.write_all(&out).await?;
    sock.shutdown().await
}

fn http(status: u16, ctype: &str, extra: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn render(reply: Option<Reply>, openai: bool, stream: bool, conn: u64) -> Vec<u8> {
    let (text, calls) = match reply {
        None => return http(500, "text/plain", "", "script exhausted"),
        Some(Reply::Status {
            status,
            retry_after,
            body,
        }) => {
            let extra = retry_after
                .map(|s| format!("retry-after: {s}\r\n"))
                .unwrap_or_default();
            return http(status, "application/json", &extra, &body);
        }
        Some(Reply::Raw(body)) => {
            return http(
                200,
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
                "",
                &body,
            );
        }
        Some(Reply::Text(t)) => (t, Vec::new()),
        Some(Reply::ToolCalls(t, c)) => (t, c),
    };
    let calls: Vec<(String, String, Value)> = calls
        .into_iter()
        .enumerate()
        .map(|(i, (n, v))| (format!("call_{conn}_{i}"), n, v))
        .collect();
    let body = match (openai, stream) {
        (false, false) => anthropic_body(&text, &calls).to_string(),
        (false, true) => anthropic_sse(&text, &calls),
        (true, false) => openai_body(&text, &calls).to_string(),
        (true, true) => openai_sse(&text, &calls),
    };
    http(
        200,
        if stream {
            "text/event-stream"
        } else {
            "application/json"
        },
        "",
        &body,
    )
}

/// Splits `s` in two at a char boundary near the middle.
fn halves(s: &str) -> (&str, &str) {
    let mut mid = s.len() / 2;
    while !s.is_char_boundary(mid) {
        mid += 1;
    }
    s.split_at(mid)
}

fn anthropic_body(text: &str, calls: &[(String, String, Value)]) -> Value {
    let mut content = Vec::new();
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for (id, name, input) in calls {
        content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
    }
    let stop = if calls.is_empty() { "end_turn" } else { "tool_use" };
    json!({"id": "msg_1", "type": "message", "role": "assistant", "content": content, "stop_reason": stop,
           "usage": {"input_tokens": 10, "output_tokens": 5}})
}

fn sse(out: &mut String, event: &str, data: Value) {
    out.push_str(&format!("event: {event}\ndata: {data}\n\n"));
}

fn anthropic_sse(text: &str, calls: &[(String, String, Value)]) -> String {
    let mut o = String::new();
    sse(
        &mut o,
        "message_start",
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 10, "output_tokens": 1}}}),
    );
    let mut index = 0;
    if !text.is_empty() {
        sse(
            &mut o,
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        );
        let (a, b) = halves(text);
        for part in [a, b] {
            sse(
                &mut o,
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": part}}),
            );
        }
        sse(
            &mut o,
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        );
        index += 1;
    }
    for (id, name, input) in calls {
        sse(
            &mut o,
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        );
        let args = input.to_string();
        let (a, b) = halves(&args);
        for part in [a, b] {
            sse(
                &mut o,
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": part}}),
            );
        }
        sse(
            &mut o,
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
        index += 1;
    }
    let stop = if calls.is_empty() { "end_turn" } else { "tool_use" };
    sse(
        &mut o,
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}}),
    );
    sse(&mut o, "message_stop", json!({"type": "message_stop"}));
    o
}

fn openai_body(text: &str, calls: &[(String, String, Value)]) -> Value {
    let mut msg =
        json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
    if !calls.is_empty() {
        msg["tool_calls"] = calls
            .iter()
            .map(|(id, name, input)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()}}))
            .collect();
    }
    let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
    json!({"id": "cmpl_1", "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
           "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
}

fn chunk(o: &mut String, delta: Value, finish: Value) {
    let c = json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    o.push_str(&format!("data: {c}\n\n"));
}

fn openai_sse(text: &str, calls: &[(String, String, Value)]) -> String {
    let mut o = String::new();
    chunk(&mut o, json!({"role": "assistant"}), Value::Null);
    if !text.is_empty() {
        let (a, b) = halves(text);
        for part in [a, b] {
            chunk(&mut o, json!({"content": part}), Value::Null);
        }
    }
    for (i, (id, name, input)) in calls.iter().enumerate() {
        chunk(
            &mut o,
            json!({"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        );
        let args = input.to_string();
        let (a, b) = halves(&args);
        for part in [a, b] {
            chunk(
                &mut o,
                json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                Value::Null,
            );
        }
    }
    let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
    chunk(&mut o, json!({}), json!(finish));
    o.push_str(&format!(
        "data: {}\n\n",
        json!({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
    ));
    o.push_str("data: [DONE]\n\n");
    o
}
