//! The scripted fake Kubernetes API server: plain HTTP/1.1 on `127.0.0.1:0`, driven by an ordered list of
//! expectations (method, path, query and body checks → a JSON answer, a watch stream, or an exec session over
//! WebSocket with a scripted backend), plus expectations answered at any time (the version and permission
//! checks, which a client sends concurrently). An unexpected request gets `500` and is recorded;
//! [`FakeApi::finish`] lists unexpected requests, failed exec checks and unmet expectations.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use iterion_test_support::k8s_fake::wire;
pub use iterion_test_support::k8s_fake::wire::status_body;

/// The v5 exec subprotocol.
pub const V5: &str = "v5.channel.k8s.io";
/// The v4 exec subprotocol (no stdin close).
pub const V4: &str = "v4.channel.k8s.io";

/// One request as received.
#[derive(Debug, Clone)]
pub struct Req {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The decoded query pairs, in order.
    pub query: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
}

impl Req {
    /// Every value of query parameter `k`.
    pub fn q(&self, k: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn line(&self) -> String {
        let q: Vec<String> = self.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if q.is_empty() {
            format!("{} {}", self.method, self.path)
        } else {
            format!("{} {}?{}", self.method, self.path, q.join("&"))
        }
    }
}

/// The scripted side of an exec session.
#[derive(Debug, Clone)]
pub struct ExecBackend {
    /// The subprotocol the server picks.
    pub protocol: &'static str,
    /// When set, stdin (read until the client closes it) must contain this text.
    pub stdin_contains: Option<String>,
    /// When set, stdin must not contain this text.
    pub stdin_lacks: Option<String>,
    /// Sent on channel 1.
    pub stdout: Vec<u8>,
    /// Sent on channel 2.
    pub stderr: Vec<u8>,
    /// Sent on channel 3; `None` closes without a status.
    pub status: Option<Value>,
    /// Wait this long before answering (after stdin).
    pub delay: Duration,
}

impl ExecBackend {
    /// A v5 session that exits with `code` (0 → `Success`).
    pub fn exit(code: i32) -> ExecBackend {
        ExecBackend {
            protocol: V5,
            stdin_contains: None,
            stdin_lacks: None,
            stdout: Vec::new(),
            stderr: Vec::new(),
            status: Some(exit_status(code)),
            delay: Duration::ZERO,
        }
    }

    /// Requires stdin to contain `text`.
    pub fn stdin_contains(mut self, text: &str) -> ExecBackend {
        self.stdin_contains = Some(text.to_string());
        self
    }

    /// Requires stdin not to contain `text`.
    pub fn stdin_lacks(mut self, text: &str) -> ExecBackend {
        self.stdin_lacks = Some(text.to_string());
        self
    }

    /// Sends `text` on stdout.
    pub fn stdout(mut self, text: &str) -> ExecBackend {
        self.stdout = text.as_bytes().to_vec();
        self
    }

    /// Sends `text` on stderr.
    pub fn stderr(mut self, text: &str) -> ExecBackend {
        self.stderr = text.as_bytes().to_vec();
        self
    }
}

/// The status channel's JSON for exit `code`.
pub fn exit_status(code: i32) -> Value {
    if code == 0 {
        json!({"metadata": {}, "status": "Success"})
    } else {
        json!({"metadata": {}, "status": "Failure", "message": format!("command terminated with non-zero exit code: {code}"),
               "reason": "NonZeroExitCode",
               "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
    }
}

/// What an expectation answers.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A status and a JSON body.
    Json(u16, Value),
    /// A status and a plain-text body (pod logs).
    Text(u16, String),
    /// A watch stream: events after their delays, then either the end of the stream or (`hold`) silence
    /// until the client goes away.
    Watch {
        /// `(delay before, event)`.
        events: Vec<(Duration, Value)>,
        /// Keep the stream open after the last event.
        hold: bool,
    },
    /// An exec session.
    Exec(ExecBackend),
}

type Check = Box<dyn Fn(&Req) -> Result<(), String> + Send + Sync>;
type Responder = Box<dyn Fn(&Req) -> Reply + Send + Sync>;

/// One expected request and its answer.
pub struct Expect {
    label: String,
    method: String,
    path: String,
    checks: Vec<Check>,
    reply: Responder,
    repeat: bool,
    hits: usize,
}

impl Expect {
    /// Expects `method path`, answering `200 {}` until told otherwise.
    pub fn new(method: &str, path: &str) -> Expect {
        Expect {
            label: format!("{method} {path}"),
            method: method.to_string(),
            path: path.to_string(),
            checks: Vec::new(),
            reply: Box::new(|_| Reply::Json(200, json!({}))),
            repeat: false,
            hits: 0,
        }
    }

    /// The query must contain `k=v`.
    pub fn query(mut self, k: &str, v: &str) -> Expect {
        let (k, v) = (k.to_string(), v.to_string());
        self.label = format!("{} [{k}={v}]", self.label);
        self.checks.push(Box::new(move |r| {
            if r.q(&k).contains(&v.as_str()) {
                Ok(())
            } else {
                Err(format!("query {k}={v} missing"))
            }
        }));
        self
    }

    /// The exec command must be exactly `argv`.
    pub fn command(mut self, argv: &[&str]) -> Expect {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        self.label = format!("{} command={argv:?}", self.label);
        self.checks.push(Box::new(move |r| {
            let got = r.q("command");
            if got == argv {
                Ok(())
            } else {
                Err(format!("command {got:?}, expected {argv:?}"))
            }
        }));
        self
    }

    /// The exec command must start with `prefix` (the rest names a random exec id).
    pub fn command_prefix(mut self, prefix: &[&str]) -> Expect {
        let prefix: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
        self.label = format!("{} command={prefix:?}…", self.label);
        self.checks.push(Box::new(move |r| {
            let got = r.q("command");
            if got.len() >= prefix.len() && got[..prefix.len()] == prefix {
                Ok(())
            } else {
                Err(format!("command {got:?}, expected a prefix {prefix:?}"))
            }
        }));
        self
    }

    /// Any other check of the request (the body, for instance).
    pub fn check(mut self, f: impl Fn(&Req) -> Result<(), String> + Send + Sync + 'static) -> Expect {
        self.checks.push(Box::new(f));
        self
    }

    /// Answers `status` with `body`.
    pub fn json(mut self, status: u16, body: Value) -> Expect {
        self.reply = Box::new(move |_| Reply::Json(status, body.clone()));
        self
    }

    /// Answers with the request's own body (a create) and `201`.
    pub fn created(mut self) -> Expect {
        self.reply = Box::new(|r| Reply::Json(201, r.json()));
        self
    }

    /// Answers a watch stream.
    pub fn watch(mut self, events: Vec<(Duration, Value)>, hold: bool) -> Expect {
        self.reply = Box::new(move |_| Reply::Watch {
            events: events.clone(),
            hold,
        });
        self
    }

    /// Answers an exec session.
    pub fn exec(mut self, backend: ExecBackend) -> Expect {
        self.reply = Box::new(move |_| Reply::Exec(backend.clone()));
        self
    }

    /// Answers with whatever `f` says.
    pub fn reply_with(mut self, f: impl Fn(&Req) -> Reply + Send + Sync + 'static) -> Expect {
        self.reply = Box::new(f);
        self
    }

    /// Matches any number (at least one) of consecutive requests.
    pub fn repeat(mut self) -> Expect {
        self.repeat = true;
        self
    }

    fn matches(&self, r: &Req) -> Result<(), String> {
        if r.method != self.method || r.path != self.path {
            return Err(format!("expected {}", self.label));
        }
        for c in &self.checks {
            c(r).map_err(|e| format!("{}: {e}", self.label))?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct State {
    ordered: VecDeque<Expect>,
    anytime: Vec<Expect>,
    unexpected: Vec<String>,
    failures: Vec<String>,
    log: Vec<String>,
}

impl State {
    fn answer(&mut self, r: &Req) -> Option<Reply> {
        self.log.push(r.line());
        if let Some(e) = self.anytime.iter_mut().find(|e| e.matches(r).is_ok()) {
            e.hits += 1;
            return Some((e.reply)(r));
        }
        loop {
            let Some(head) = self.ordered.front_mut() else {
                self.unexpected
                    .push(format!("{} (nothing more was expected)", r.line()));
                return None;
            };
            match head.matches(r) {
                Ok(()) => {
                    head.hits += 1;
                    let reply = (head.reply)(r);
                    if !head.repeat {
                        self.ordered.pop_front();
                    }
                    return Some(reply);
                }
                Err(_) if head.repeat && head.hits > 0 => {
                    self.ordered.pop_front();
                }
                Err(why) => {
                    self.unexpected.push(format!("{} ({why})", r.line()));
                    return None;
                }
            }
        }
    }
}

/// The running fake.
pub struct FakeApi {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl FakeApi {
    /// Starts an empty fake on a fresh loopback port.
    pub async fn start() -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                // Small answers go out at once (no Nagle delay waiting for the client's delayed ACK).
                let _ = stream.set_nodelay(true);
                let st = st.clone();
                tokio::spawn(async move { serve(stream, st).await });
            }
        });
        FakeApi { addr, state, task }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Appends an ordered expectation.
    pub fn expect(&self, e: Expect) -> &Self {
        self.state.lock().unwrap().ordered.push_back(e);
        self
    }

    /// Adds an expectation answered whenever it matches, in any order, any number of times.
    pub fn anytime(&self, e: Expect) -> &Self {
        self.state.lock().unwrap().anytime.push(e);
        self
    }

    /// How many times the `anytime` expectation with `label` prefix was hit.
    pub fn hits(&self, label_prefix: &str) -> usize {
        let s = self.state.lock().unwrap();
        s.anytime
            .iter()
            .filter(|e| e.label.starts_with(label_prefix))
            .map(|e| e.hits)
            .sum()
    }

    /// Every request so far, as `METHOD path?query`.
    pub fn log(&self) -> Vec<String> {
        self.state.lock().unwrap().log.clone()
    }

    /// Stops the fake: `Err` listing unexpected requests, failed exec checks and unmet expectations.
    pub fn finish(self) -> Result<Vec<String>, String> {
        self.task.abort();
        let s = self.state.lock().unwrap();
        let unmet: Vec<&str> = s
            .ordered
            .iter()
            .filter(|e| !(e.repeat && e.hits > 0))
            .map(|e| e.label.as_str())
            .collect();
        if s.unexpected.is_empty() && s.failures.is_empty() && unmet.is_empty() {
            Ok(s.log.clone())
        } else {
            Err(format!(
                "unexpected: {:#?}\nfailed checks: {:#?}\nunmet: {unmet:#?}\nlog: {:#?}",
                s.unexpected, s.failures, s.log
            ))
        }
    }
}

async fn serve(stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut stream = BufReader::new(stream);
    loop {
        let Some((req, headers)) = read_request(&mut stream).await else {
            return;
        };
        let reply = state.lock().unwrap().answer(&req);
        let Some(reply) = reply else {
            let body = status_body(500, "InternalError", &format!("unexpected {}", req.line()));
            if write_json(&mut stream, 500, &body).await.is_err() {
                return;
            }
            continue;
        };
        match reply {
            Reply::Json(code, body) => {
                if write_json(&mut stream, code, &body).await.is_err() {
                    return;
                }
            }
            Reply::Text(code, text) => {
                if wire::write_body(stream.get_mut(), code, "text/plain", text.as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Reply::Watch { events, hold } => {
                let _ = watch(&mut stream, events, hold).await;
                return;
            }
            Reply::Exec(backend) => {
                if wire::accept_upgrade(stream.get_mut(), &headers, backend.protocol)
                    .await
                    .is_err()
                {
                    return;
                }
                let ws = WebSocketStream::from_raw_socket(stream, Role::Server, None).await;
                let stdin = req.q("stdin").contains(&"true");
                if let Err(why) = exec_session(ws, &backend, stdin).await {
                    state
                        .lock()
                        .unwrap()
                        .failures
                        .push(format!("{}: {why}", req.line()));
                }
                return;
            }
        }
    }
}

async fn exec_session<S: AsyncRead + AsyncWrite + Unpin>(
    mut ws: WebSocketStream<S>,
    b: &ExecBackend,
    stdin: bool,
) -> Result<(), String> {
    let mut input = Vec::new();
    if stdin && b.protocol == V5 {
        loop {
            match ws.next().await {
                Some(Ok(Message::Binary(d))) if d.first() == Some(&0) => input.extend_from_slice(&d[1..]),
                Some(Ok(Message::Binary(d))) if d[..] == [255, 0] => break,
                Some(Ok(Message::Binary(d))) => {
                    return Err(format!("unexpected frame {:?}", &d[..d.len().min(8)]));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(format!("stdin: {e}")),
                None => return Err("the client closed before closing stdin".into()),
            }
        }
    }
    if let Some(want) = &b.stdin_contains {
        let got = String::from_utf8_lossy(&input);
        if !got.contains(want.as_str()) {
            return Err(format!("stdin {got:?} does not contain {want:?}"));
        }
    }
    if let Some(banned) = &b.stdin_lacks
        && String::from_utf8_lossy(&input).contains(banned.as_str())
    {
        return Err(format!("stdin contains {banned:?}"));
    }
    tokio::time::sleep(b.delay).await;
    let send = |ch: u8, data: &[u8]| {
        let mut f = vec![ch];
        f.extend_from_slice(data);
        Message::binary(f)
    };
    let mut frames = Vec::new();
    if !b.stdout.is_empty() {
        frames.push(send(1, &b.stdout));
    }
    if !b.stderr.is_empty() {
        frames.push(send(2, &b.stderr));
    }
    if let Some(s) = &b.status {
        frames.push(send(3, s.to_string().as_bytes()));
    }
    // A client that already went away (it refused the subprotocol) is not a failure of the script.
    for f in frames {
        if ws.send(f).await.is_err() {
            return Ok(());
        }
    }
    let _ = ws.close(None).await;
    Ok(())
}

async fn watch<S: AsyncWrite + AsyncRead + Unpin>(
    stream: &mut BufReader<S>,
    events: Vec<(Duration, Value)>,
    hold: bool,
) -> std::io::Result<()> {
    let out = stream.get_mut();
    out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
        .await?;
    out.flush().await?;
    for (delay, event) in events {
        tokio::time::sleep(delay).await;
        let line = format!("{event}\n");
        out.write_all(format!("{:x}\r\n{line}\r\n", line.len()).as_bytes())
            .await?;
        out.flush().await?;
    }
    if hold {
        // Silence until the client goes away.
        let mut sink = [0u8; 64];
        while stream.read(&mut sink).await? > 0 {}
        return Ok(());
    }
    out.write_all(b"0\r\n\r\n").await?;
    out.flush().await
}

/// Reads one request with the shared wire plumbing of the engine-backed fake.
async fn read_request<S: AsyncRead + Unpin>(stream: &mut BufReader<S>) -> Option<(Req, wire::Request)> {
    let w = wire::read_request(stream).await?;
    let req = Req {
        method: w.method.clone(),
        path: w.path.clone(),
        query: w.query.clone(),
        body: String::from_utf8(w.body.clone()).ok()?,
    };
    Some((req, w))
}

async fn write_json<S: AsyncWrite + AsyncRead + Unpin>(
    stream: &mut BufReader<S>,
    code: u16,
    body: &Value,
) -> std::io::Result<()> {
    wire::write_json(stream.get_mut(), code, body).await
}
