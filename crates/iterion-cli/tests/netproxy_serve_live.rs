//! `iterion netproxy serve` as a live process (spec 04 §9–§13, §16.1, §18.6, §18.10): the built binary listens on
//! `127.0.0.1:0` and the tests talk raw bytes to it, with upstream servers and a scripted UDP DNS responder of
//! their own on loopback. Every expectation is taken from the specification. Nothing leaves the loopback
//! interface: targets are IP literals, or names answered by the scripted responder (`--dns-server`).
//!
//! Where the specification is silent, the choice made is written next to the assertion.

use iterion_test_support::dns::ScriptedDns;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long any single step may take on a loaded machine before the test gives up (never a timing assertion).
const WAIT: Duration = Duration::from_secs(30);
/// The token given with `--token` (64 lower-case hex characters, like a generated one).
const TOKEN: &str = "5f0c6a1e9b2d4c8f7a3e1d0b9c8a7f6e5d4c3b2a1908f7e6d5c4b3a29180f7e6";

// ---------------------------------------------------------------------------------------------------------------
// The proxy process.

/// A running `iterion netproxy serve`, killed on drop.
struct Serve {
    child: Child,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// The thread collecting stderr; joined once the process has exited, so `stderr()` is then complete.
    stderr_reader: Option<std::thread::JoinHandle<()>>,
    /// `IP:PORT` from the first stdout line.
    addr: String,
    /// The generated token, when the second line announced one.
    generated: Option<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `serve <args>` (with `--listen 127.0.0.1:0` unless `args` has a `--listen`) and read the `listening on`
/// line (and the `proxy` line when the token is generated).
fn serve(args: &[&str]) -> Serve {
    serve_env(args, None)
}

/// [`serve`] with `ITERION_NETPROXY_TOKEN` set to `env_token` (removed when `None`).
fn serve_env(args: &[&str], env_token: Option<&str>) -> Serve {
    let listen: &[&str] = if args.contains(&"--listen") {
        &[]
    } else {
        &["--listen", "127.0.0.1:0"]
    };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_iterion"));
    match env_token {
        Some(t) => cmd.env("ITERION_NETPROXY_TOKEN", t),
        None => cmd.env_remove("ITERION_NETPROXY_TOKEN"),
    };
    let mut child = cmd
        .args(["netproxy", "serve"])
        .args(listen)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iterion netproxy serve");
    let out = child.stdout.take().expect("stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = Arc::new(Mutex::new(String::new()));
    let err = child.stderr.take().expect("stderr");
    let sink = stderr.clone();
    let stderr_reader = std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if let Ok(mut s) = sink.lock() {
                s.push_str(&line);
                s.push('\n');
            }
        }
    });
    let mut s = Serve {
        child,
        lines,
        stderr,
        stderr_reader: Some(stderr_reader),
        addr: String::new(),
        generated: None,
    };
    let first = s.line();
    s.addr = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the first stdout line is 'listening on IP:PORT', got {first:?}"))
        .to_owned();
    let manual = env_token.is_some()
        || args
            .iter()
            .any(|a| ["--token", "--token-file", "--no-auth"].contains(a));
    if !manual {
        let second = s.line();
        let url = second
            .strip_prefix("proxy http://iterion:")
            .unwrap_or_else(|| panic!("the second line is the proxy URL, got {second:?}"));
        let (token, host) = url.split_once('@').expect("token@host");
        assert_eq!(host, s.addr, "{second}");
        s.generated = Some(token.to_owned());
    }
    s
}

/// `serve` with the fixed [`TOKEN`].
fn serve_token(args: &[&str]) -> Serve {
    let mut full = vec!["--token", TOKEN];
    full.extend_from_slice(args);
    serve(&full)
}

impl Serve {
    fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The next stdout line.
    fn line(&self) -> String {
        match self.lines.recv_timeout(WAIT) {
            Ok(l) => l,
            Err(e) => panic!("no stdout line from the proxy ({e}); stderr:\n{}", self.stderr()),
        }
    }

    /// The next `--events -` line, parsed.
    fn event(&self) -> Value {
        let line = self.line();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("event line is not JSON ({e}): {line}"))
    }

    /// The next event line whose `type` is `ty` (others are collected in `skipped`).
    fn event_of(&self, ty: &str, skipped: &mut Vec<Value>) -> Value {
        loop {
            let ev = self.event();
            if ev["type"] == ty {
                return ev;
            }
            skipped.push(ev);
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(ok.success(), "kill -{sig}");
    }

    /// Wait for the process to exit (at most a minute); its exit code.
    fn exit_code(&mut self) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                if let Some(reader) = self.stderr_reader.take() {
                    let _ = reader.join();
                }
                return status.code();
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the proxy did not exit; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).expect("connect to the proxy");
        s.set_read_timeout(Some(WAIT)).expect("read timeout");
        s
    }

    /// Send `request` on a fresh connection and read until the proxy closes it.
    fn exchange(&self, request: &[u8]) -> Vec<u8> {
        let mut s = self.connect();
        s.write_all(request).expect("write request");
        read_to_eof(&mut s)
    }

    /// `exchange`, parsed as one response.
    fn ask(&self, request: &str) -> Resp {
        Resp::parse(&self.exchange(request.as_bytes()))
    }
}

fn read_to_eof(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return out,
            Err(e) => panic!("no end of stream ({e}); got {:?}", String::from_utf8_lossy(&out)),
        }
    }
}

fn bearer() -> String {
    format!("Proxy-Authorization: Bearer {TOKEN}\r\n")
}

fn basic(user: &str, token: &str) -> String {
    format!(
        "Proxy-Authorization: Basic {}\r\n",
        iterion_netproxy::base64_encode(format!("{user}:{token}").as_bytes())
    )
}

fn connect_req(target: &str, auth: &str) -> String {
    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n")
}

// ---------------------------------------------------------------------------------------------------------------
// Responses.

/// One HTTP response as received.
#[derive(Debug)]
struct Resp {
    raw: String,
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    /// Parse a complete response (the body is everything after the head).
    fn parse(raw: &[u8]) -> Resp {
        let text = String::from_utf8_lossy(raw).into_owned();
        let end = text
            .find("\r\n\r\n")
            .unwrap_or_else(|| panic!("no complete response head in {text:?}"))
            + 4;
        let mut r = Self::head_only(&text[..end]);
        r.raw = text.clone();
        r.body = raw[end..].to_vec();
        r
    }

    fn head_only(head: &str) -> Resp {
        let mut lines = head.trim_end_matches("\r\n").split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.to_owned(), v.trim().to_owned()))
            .collect();
        Resp {
            raw: head.to_owned(),
            status,
            headers,
            body: Vec::new(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn has(&self, name: &str) -> bool {
        self.header(name).is_some()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.raw))
    }

    fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Read one response from a kept-alive connection: the head, then a `Content-Length` or chunked body (decoded),
/// or everything up to the end of the stream.
fn read_response(r: &mut BufReader<TcpStream>) -> Resp {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        let n = r.read_line(&mut line).expect("read response line");
        assert!(n > 0, "the stream ended inside a response head: {head:?}");
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut resp = Resp::head_only(&head);
    let mut body = Vec::new();
    if let Some(n) = resp.header("content-length") {
        body.resize(n.parse::<usize>().expect("content-length"), 0);
        r.read_exact(&mut body).expect("read body");
    } else if resp
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).expect("chunk size");
            let n = usize::from_str_radix(size.trim_end(), 16).expect("hex chunk size");
            let mut chunk = vec![0u8; n + 2];
            if n == 0 {
                // Trailer section: lines up to the empty one.
                let mut t = String::new();
                while r.read_line(&mut t).expect("trailer") > 0 && t != "\r\n" {
                    t.clear();
                }
                break;
            }
            r.read_exact(&mut chunk).expect("chunk");
            body.extend_from_slice(&chunk[..n]);
        }
    } else if resp.status >= 200 && resp.status != 204 && resp.status != 304 {
        r.read_to_end(&mut body).expect("body until close");
    }
    resp.raw.push_str(&String::from_utf8_lossy(&body));
    resp.body = body;
    resp
}

/// The checks every response generated by the proxy passes (spec §13.1): JSON, no-store, `Connection: close`,
/// an `X-Iterion-Reason`, and the JSON body's `error` code.
fn generated(r: &Resp, status: u16, code: &str, reason: &str) {
    assert_eq!(r.status, status, "{}", r.raw);
    assert_eq!(r.header("content-type"), Some("application/json"), "{}", r.raw);
    assert_eq!(r.header("cache-control"), Some("no-store"), "{}", r.raw);
    assert_eq!(r.header("connection"), Some("close"), "{}", r.raw);
    assert_eq!(r.header("x-iterion-reason"), Some(reason), "{}", r.raw);
    assert_eq!(r.json()["error"], code, "{}", r.raw);
}

/// `r` is a generated error response with this status and `error` code; `context` names the case on failure.
#[track_caller]
fn assert_error(r: &Resp, status: u16, code: &str, context: impl std::fmt::Display) {
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (status, Some(code)),
        "{context}: {}",
        r.raw
    );
}

/// A UUIDv7 in its canonical text form.
fn is_uuid_v7(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.iter().map(|p| p.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && s.bytes()
            .all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && parts[2].starts_with('7')
        && parts[3].starts_with(['8', '9', 'a', 'b'])
}

/// The exact bytes of the §13.2 refusal for a decision id (no `address`).
fn expected_403(id: &str, host: &str, port: u16, reason: &str, rule: &str) -> String {
    let message = format!(
        "host '{host}' (port {port}) is blocked by the sandbox network policy ({rule}); if the workflow needs it, add it to a --rule of this proxy"
    );
    let body = serde_json::json!({
        "decision_id": id, "host": host, "port": port, "reason": reason, "rule": rule, "message": message,
    });
    format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nConnection: close\r\nX-Iterion-Reason: {reason}\r\nX-Iterion-Decision-Id: {id}\r\n\r\n{body}"
    )
}

// ---------------------------------------------------------------------------------------------------------------
// Loopback peers.

/// A TCP listener whose accepted connections the test receives and scripts itself.
struct Peer {
    addr: SocketAddr,
    accepted: Receiver<TcpStream>,
}

fn peer_on(ip: &str) -> Peer {
    let l = TcpListener::bind((ip, 0)).expect("bind a loopback peer");
    let addr = l.local_addr().expect("peer addr");
    let (tx, accepted) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { break };
            let _ = s.set_read_timeout(Some(WAIT));
            if tx.send(s).is_err() {
                break;
            }
        }
    });
    Peer { addr, accepted }
}

fn peer() -> Peer {
    peer_on("127.0.0.1")
}

impl Peer {
    fn accept(&self) -> TcpStream {
        self.accepted
            .recv_timeout(WAIT)
            .expect("the proxy connected to the upstream")
    }

    /// Whether a connection arrived (checked after the proxy already answered the client).
    fn was_contacted(&self) -> bool {
        self.accepted.try_recv().is_ok()
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }
}

/// A loopback echo server (each connection echoes until the client half-closes, then closes).
fn echo() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind echo");
    let addr = l.local_addr().expect("echo addr");
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { break };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = s.shutdown(Shutdown::Both);
            });
        }
    });
    addr
}

/// One request as an HTTP upstream received it.
#[derive(Debug)]
struct Seen {
    head: String,
    /// The body bytes exactly as they arrived (chunked framing included).
    body: Vec<u8>,
    /// Which accepted connection (0, 1, …) carried it.
    conn: usize,
}

/// An HTTP/1.1 upstream on loopback: every request is reported, then answered with `respond(head)`; the
/// connection stays open unless the answer says `Connection: close`.
fn http_upstream(respond: fn(&str) -> Vec<u8>) -> (SocketAddr, Receiver<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind http upstream");
    let addr = l.local_addr().expect("upstream addr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for (conn, s) in l.incoming().enumerate() {
            let Ok(s) = s else { break };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(WAIT));
                let mut w = s.try_clone().expect("clone");
                let mut r = BufReader::new(s);
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        match r.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        head.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let h = Resp::head_only_request(&head);
                    let mut body = Vec::new();
                    if let Some(n) = h.get("content-length") {
                        body.resize(n.parse().expect("content-length"), 0);
                        if r.read_exact(&mut body).is_err() {
                            return;
                        }
                    } else if h.get("transfer-encoding").is_some() {
                        loop {
                            let mut size = String::new();
                            if r.read_line(&mut size).is_err() {
                                return;
                            }
                            body.extend_from_slice(size.as_bytes());
                            let n = usize::from_str_radix(size.trim_end(), 16).unwrap_or(0);
                            if n == 0 {
                                let mut crlf = String::new();
                                let _ = r.read_line(&mut crlf);
                                body.extend_from_slice(crlf.as_bytes());
                                break;
                            }
                            let mut chunk = vec![0u8; n + 2];
                            if r.read_exact(&mut chunk).is_err() {
                                return;
                            }
                            body.extend_from_slice(&chunk);
                        }
                    }
                    let answer = respond(&head);
                    let _ = tx.send(Seen { head, body, conn });
                    if w.write_all(&answer).is_err() {
                        return;
                    }
                    if String::from_utf8_lossy(&answer).contains("Connection: close") {
                        let _ = w.shutdown(Shutdown::Both);
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

/// Header lookup on a request head seen by an upstream.
struct ReqHead(Vec<(String, String)>);

impl ReqHead {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Resp {
    fn head_only_request(head: &str) -> ReqHead {
        ReqHead(
            head.trim_end_matches("\r\n")
                .split("\r\n")
                .skip(1)
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.to_owned(), v.trim().to_owned()))
                .collect(),
        )
    }
}

fn seen(rx: &Receiver<Seen>) -> Seen {
    rx.recv_timeout(WAIT).expect("the upstream received a request")
}

fn ok_hello(_: &str) -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Up: 1\r\n\r\nhello".to_vec()
}

// ---------------------------------------------------------------------------------------------------------------
// Scripted DNS (UDP on 127.0.0.1:0).

/// A scripted DNS server on `127.0.0.1:0`; returns `IP:PORT` for `--dns-server`.
fn dns(zone: &[(&str, &[&str])]) -> String {
    ScriptedDns::start(zone).addr().to_string()
}

// ---------------------------------------------------------------------------------------------------------------
// Startup and events.

#[test]
fn generated_token_is_announced_and_events_follow_the_listen_line() {
    let proxy = serve(&["--rule", "allowed.test", "--events", "-"]);
    assert!(proxy.addr.starts_with("127.0.0.1:"), "{}", proxy.addr);
    assert_ne!(proxy.addr, "127.0.0.1:0", "the actual port is printed");
    let token = proxy.generated.clone().expect("generated token");
    assert!(
        token.len() == 64
            && token
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "a generated token is 64 lower-case hex characters: {token}"
    );
    let auth = format!("Proxy-Authorization: Bearer {token}\r\n");
    let r = proxy.ask(&connect_req("evil.test:443", &auth));
    assert_eq!(r.status, 403, "{}", r.raw);
    let ev = proxy.event();
    let keys: Vec<&str> = ev
        .as_object()
        .map(|o| o.keys().map(String::as_str).take(2).collect())
        .unwrap_or_default();
    assert_eq!(keys, ["type", "ts"], "{ev}");
    assert_eq!(ev["type"], "denied", "{ev}");
    assert_eq!(
        ev["decision_id"].as_str(),
        r.header("x-iterion-decision-id"),
        "{ev}"
    );
    assert_eq!(
        (&ev["host"], &ev["port"], &ev["reason"], &ev["rule"]),
        (
            &Value::from("evil.test"),
            &Value::from(443),
            &Value::from("policy denial"),
            &Value::from("no rule matched")
        ),
        "{ev}"
    );
    assert_eq!(
        (&ev["method"], &ev["mode"], &ev["username"], &ev["node_id"]),
        (
            &Value::from("CONNECT"),
            &Value::from("allowlist"),
            &Value::from("iterion"),
            &Value::Null
        ),
        "{ev}"
    );
    assert!(
        ev.get("address").is_none(),
        "address only for non-global refusals: {ev}"
    );
    // `ts` is RFC 3339 UTC.
    let ts = ev["ts"].as_str().expect("ts");
    assert!(
        ts.len() >= 20 && &ts[4..5] == "-" && &ts[10..11] == "T" && ts.ends_with('Z'),
        "{ts}"
    );
}

#[test]
fn events_file_gets_one_json_line_per_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.jsonl");
    let mut proxy = serve_token(&["--events", path.to_str().expect("utf-8 path")]);
    let denied = proxy.ask(&connect_req("evil.test:443", &bearer()));
    assert_eq!(denied.status, 403, "{}", denied.raw);
    let refused = proxy.ask(&connect_req("evil.test:443", ""));
    assert_eq!(refused.status, 407, "{}", refused.raw);
    // Nothing but the listen line on stdout: the events go to the file.
    proxy.signal("TERM");
    assert_eq!(proxy.exit_code(), Some(0), "{}", proxy.stderr());
    assert!(
        proxy.lines.recv_timeout(WAIT).is_err(),
        "stdout carries only the listen line"
    );
    let text = std::fs::read_to_string(&path).expect("events file");
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types, ["denied", "auth_failed"], "{text}");
    assert_eq!(
        events[0]["decision_id"].as_str(),
        denied.header("x-iterion-decision-id"),
        "{text}"
    );
    assert!(events.iter().all(|e| e["ts"].is_string()), "{text}");
    assert!(!text.contains(TOKEN), "the token never appears in events");
}

// ---------------------------------------------------------------------------------------------------------------
// CONNECT.

#[test]
fn denied_connect_is_the_403_of_13_2_and_decision_ids_are_unique() {
    let proxy = serve_token(&["--rule", "allowed.test", "--events", "-"]);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = proxy.ask(&connect_req("evil.example:443", &bearer()));
        let id = r.header("x-iterion-decision-id").expect("decision id").to_owned();
        assert!(is_uuid_v7(&id), "decision ids are UUIDv7: {id}");
        // §13.2 byte for byte.
        let expected = expected_403(&id, "evil.example", 443, "policy denial", "no rule matched");
        assert_eq!(r.raw, expected, "§13.2");
        ids.push(id.clone());
        let ev = proxy.event();
        assert_eq!(
            (ev["type"].as_str(), ev["decision_id"].as_str()),
            (Some("denied"), Some(id.as_str()))
        );
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "a new decision id per decision");
}

#[test]
fn denied_connect_is_the_403_of_13_2_byte_for_byte() {
    let proxy = serve_token(&["--rule", "allowed.test"]);
    let r = proxy.ask(&connect_req("evil.example:443", &bearer()));
    let id = r.header("x-iterion-decision-id").expect("decision id").to_owned();
    assert_eq!(
        r.raw,
        expected_403(&id, "evil.example", 443, "policy denial", "no rule matched"),
        "§13.2 byte for byte"
    );
}

#[test]
fn allowed_connect_answers_exactly_200_and_relays_early_bytes_first() {
    let up = peer();
    let proxy = serve_token(&["--rule", "127.0.0.1"]);
    let mut c = proxy.connect();
    // P2: bytes after the head in the same write reach the upstream first.
    let req = format!("{}hello", connect_req(&up.addr.to_string(), &bearer()));
    c.write_all(req.as_bytes()).expect("write");
    let mut u = up.accept();
    let mut head = [0u8; 39];
    c.read_exact(&mut head).expect("CONNECT answer");
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    let mut early = [0u8; 5];
    u.read_exact(&mut early).expect("early bytes");
    assert_eq!(&early, b"hello");
    // Both directions, then P26: the client half-closes after `ping`, the upstream answers `pong` and closes.
    c.write_all(b"ping").expect("write ping");
    c.shutdown(Shutdown::Write).expect("half-close");
    let mut got = Vec::new();
    u.read_to_end(&mut got)
        .expect("upstream reads to the client's end of file");
    assert_eq!(got, b"ping");
    u.write_all(b"pong").expect("write pong");
    drop(u);
    assert_eq!(read_to_eof(&mut c), b"pong");
}

#[test]
fn tunnel_closed_event_reports_the_bytes() {
    let target = echo();
    let proxy = serve_token(&["--rule", "127.0.0.1", "--events", "-"]);
    let mut c = proxy.connect();
    c.write_all(connect_req(&target.to_string(), &bearer()).as_bytes())
        .expect("write");
    let mut head = [0u8; 39];
    c.read_exact(&mut head).expect("CONNECT answer");
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    c.write_all(&[7u8; 1000]).expect("write");
    let mut back = [0u8; 1000];
    c.read_exact(&mut back).expect("echo");
    c.shutdown(Shutdown::Write).expect("half-close");
    assert!(read_to_eof(&mut c).is_empty());
    let ev = proxy.event();
    assert_eq!(ev["type"], "tunnel_closed", "{ev}");
    assert_eq!(
        (ev["bytes_up"].as_u64(), ev["bytes_down"].as_u64()),
        (Some(1000), Some(1000)),
        "{ev}"
    );
    assert_eq!(ev["close_reason"], "eof", "{ev}");
    assert!(ev["decision_id"].as_str().is_some_and(is_uuid_v7), "{ev}");
    assert!(ev["duration_ms"].is_u64(), "{ev}");
}

#[test]
fn connect_target_forms() {
    let proxy = serve_token(&["--rule", "allowed.test"]);
    // P4: no port.
    let r = proxy.ask(&connect_req("allowed.test", &bearer()));
    generated(&r, 400, "invalid_target", "connect target must be host:port");
    assert_eq!(r.json()["message"], "connect target must be host:port");
    for bad in ["[::1]", "/path", "http://allowed.test:443"] {
        let r = proxy.ask(&format!("CONNECT {bad} HTTP/1.1\r\n{}\r\n", bearer()));
        generated(&r, 400, "invalid_target", "connect target must be host:port");
    }
    // §4.4: invalid ports and hosts are 400 invalid_target, never a policy decision.
    for bad in [
        "allowed.test:99999",
        "allowed.test:0443",
        "allowed.test:0",
        "allowed..test:443",
        ":443",
        "user@allowed.test:443",
        "[fe80::1%25eth0]:443",
        "256.1.1.1:443",
        "*.allowed.test:443",
    ] {
        let r = proxy.ask(&connect_req(bad, &bearer()));
        assert_error(&r, 400, "invalid_target", bad);
        assert!(!r.has("x-iterion-decision-id"), "{bad}: no decision was made");
    }
    // A CONNECT with a body.
    for framing in ["Content-Length: 5", "Transfer-Encoding: chunked"] {
        let r = proxy.ask(&format!(
            "CONNECT allowed.test:443 HTTP/1.1\r\n{}{framing}\r\n\r\nhello",
            bearer()
        ));
        let message = r.json()["message"].as_str().unwrap_or_default().to_owned();
        generated(&r, 400, "bad_request", &message);
    }
}

#[test]
fn loopback_targets_need_an_explicit_ip_rule() {
    let up = peer();
    let port = up.port();
    // Open mode and a catch-all CIDR are not explicit (§8.2, §8.3, S13).
    for args in [
        &["--mode", "open"][..],
        &["--mode", "denylist"][..],
        &["--rule", "0.0.0.0/0"][..],
        &["--rule", "**", "--rule", "0.0.0.0/0"][..],
    ] {
        let proxy = serve_token(args);
        let r = proxy.ask(&connect_req(&format!("127.0.0.1:{port}"), &bearer()));
        assert_eq!(r.status, 403, "{args:?}: {}", r.raw);
        assert_eq!(
            r.header("x-iterion-reason"),
            Some("non-global address"),
            "{args:?}"
        );
        let body = r.json();
        assert_eq!(
            (
                &body["reason"],
                &body["rule"],
                &body["address"],
                &body["host"],
                &body["port"]
            ),
            (
                &Value::from("non-global address"),
                &Value::from("non-global address"),
                &Value::from("127.0.0.1"),
                &Value::from("127.0.0.1"),
                &Value::from(port)
            ),
            "{args:?}: {body}"
        );
        assert_eq!(body["decision_id"].as_str(), r.header("x-iterion-decision-id"));
    }
    // `**` never matches an IP literal (§5.3): no rule matched.
    let proxy = serve_token(&["--rule", "**"]);
    let r = proxy.ask(&connect_req(&format!("127.0.0.1:{port}"), &bearer()));
    assert_eq!(
        (r.status, r.json()["rule"].as_str()),
        (403, Some("no rule matched")),
        "{}",
        r.raw
    );
    // A wider private range is not loopback; a loopback range is explicit.
    let proxy = serve_token(&["--rule", "10.0.0.0/8"]);
    let r = proxy.ask(&connect_req(&format!("127.0.0.1:{port}"), &bearer()));
    assert_eq!(r.status, 403, "{}", r.raw);
    assert!(!up.was_contacted(), "no refused request reached the upstream");
    let proxy = serve_token(&["--rule", "127.0.0.0/8"]);
    let mut c = proxy.connect();
    c.write_all(connect_req(&format!("127.0.0.1:{port}"), &bearer()).as_bytes())
        .expect("write");
    let _u = up.accept();
    let mut head = [0u8; 39];
    c.read_exact(&mut head).expect("answer");
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
}

#[test]
fn odd_ipv4_spellings_are_judged_as_the_address_they_name() {
    let up = peer();
    let port = up.port();
    let proxy = serve_token(&["--rule", "**", "--events", "-"]);
    // N40 and §18.9: `2130706433` is 127.0.0.1, and `**` does not match it.
    for spelling in [
        "2130706433",
        "127.1",
        "0x7f.0.0.1",
        "0177.0.0.1",
        "127.0.1",
        "0x7f000001",
        "[::ffff:127.0.0.1]",
    ] {
        let r = proxy.ask(&connect_req(&format!("{spelling}:{port}"), &bearer()));
        assert_eq!(r.status, 403, "{spelling}: {}", r.raw);
        let body = r.json();
        assert_eq!(
            (body["host"].as_str(), body["rule"].as_str()),
            (Some("127.0.0.1"), Some("no rule matched")),
            "{spelling}: {body}"
        );
        assert_eq!(proxy.event()["host"], "127.0.0.1", "{spelling}");
    }
    // S11: in denylist mode the address stage names the canonical address.
    let proxy = serve_token(&["--mode", "denylist"]);
    for spelling in ["127.1", "2130706433", "0x7f.0.0.1"] {
        let r = proxy.ask(&connect_req(&format!("{spelling}:{port}"), &bearer()));
        let body = r.json();
        assert_eq!(
            (r.status, body["reason"].as_str(), body["address"].as_str()),
            (403, Some("non-global address"), Some("127.0.0.1")),
            "{spelling}: {body}"
        );
    }
    // Metadata in any spelling is refused even under `**` plus `0.0.0.0/0` (§18.4, §8.2 step 6).
    let proxy = serve_token(&["--rule", "**", "--rule", "0.0.0.0/0"]);
    for spelling in [
        "169.254.169.254",
        "2852039166",
        "0xa9fea9fe",
        "0251.0376.0251.0376",
        "[::ffff:a9fe:a9fe]",
    ] {
        let r = proxy.ask(&connect_req(&format!("{spelling}:80"), &bearer()));
        let body = r.json();
        assert_eq!(
            (r.status, body["reason"].as_str(), body["address"].as_str()),
            (403, Some("non-global address"), Some("169.254.169.254")),
            "{spelling}: {body}"
        );
    }
    // N39: an explicit `127.0.0.1` rule allows `127.1`.
    let proxy = serve_token(&["--rule", "127.0.0.1"]);
    let mut c = proxy.connect();
    c.write_all(connect_req(&format!("127.1:{port}"), &bearer()).as_bytes())
        .expect("write");
    let _u = up.accept();
    let mut head = [0u8; 39];
    c.read_exact(&mut head).expect("answer");
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    assert!(
        !up.was_contacted(),
        "only the allowed request reached the upstream"
    );
}

#[test]
fn ipv6_literal_targets() {
    let up = peer_on("::1");
    let port = up.port();
    let target = format!("[::1]:{port}");
    let proxy = serve_token(&["--mode", "open"]);
    let r = proxy.ask(&connect_req(&target, &bearer()));
    let body = r.json();
    assert_eq!(
        (
            r.status,
            body["host"].as_str(),
            body["address"].as_str(),
            body["reason"].as_str()
        ),
        (403, Some("::1"), Some("::1"), Some("non-global address")),
        "{}",
        r.raw
    );
    // An unbracketed IPv6 authority is not host:port.
    let r = proxy.ask(&connect_req(&format!("::1:{port}"), &bearer()));
    assert_error(&r, 400, "invalid_target", "");
    for rule in ["::1", "[::1]", &format!("[::1]:{port}"), "::1/128"] {
        let proxy = serve_token(&["--rule", rule]);
        for spelling in [target.clone(), format!("[0:0:0:0:0:0:0:1]:{port}")] {
            let mut c = proxy.connect();
            c.write_all(connect_req(&spelling, &bearer()).as_bytes())
                .expect("write");
            let mut u = up.accept();
            let mut head = [0u8; 39];
            c.read_exact(&mut head).expect("answer");
            assert_eq!(
                &head, b"HTTP/1.1 200 Connection Established\r\n\r\n",
                "rule {rule}"
            );
            c.write_all(b"v6").expect("write");
            let mut got = [0u8; 2];
            u.read_exact(&mut got).expect("relayed");
            assert_eq!(&got, b"v6");
        }
    }
}

#[test]
fn names_resolve_through_the_dns_server_and_every_address_is_checked() {
    let up = peer();
    let port = up.port();
    let server = dns(&[
        ("up.test", &["127.0.0.1"]),
        ("rebind.test", &["93.184.216.34", "127.0.0.1"]),
        ("meta.test", &["169.254.169.254"]),
    ]);
    // The name stage allows `up.test`; the address stage refuses its loopback answer without an IP rule (S13).
    let proxy = serve_token(&["--dns-server", &server, "--rule", "up.test", "--events", "-"]);
    let r = proxy.ask(&connect_req(&format!("up.test:{port}"), &bearer()));
    let body = r.json();
    assert_eq!(
        (
            r.status,
            body["host"].as_str(),
            body["reason"].as_str(),
            body["address"].as_str()
        ),
        (
            403,
            Some("up.test"),
            Some("non-global address"),
            Some("127.0.0.1")
        ),
        "{}",
        r.raw
    );
    let ev = proxy.event();
    assert_eq!(
        (ev["address"].as_str(), ev["host"].as_str()),
        (Some("127.0.0.1"), Some("up.test")),
        "{ev}"
    );
    // NXDOMAIN: 502 dns resolution failed, reported as a `dns_failed` event, not a denial.
    let r = proxy.ask(&connect_req("nosuch.test:443", &bearer()));
    assert_eq!(
        r.status, 403,
        "the name stage refuses an unlisted name first: {}",
        r.raw
    );
    let _ = proxy.event();
    let proxy = serve_token(&["--dns-server", &server, "--rule", "**", "--events", "-"]);
    let r = proxy.ask(&connect_req("nosuch.test:443", &bearer()));
    assert_error(&r, 502, "dns_failed", "");
    assert_eq!(
        r.header("x-iterion-reason"),
        Some("dns resolution failed"),
        "{}",
        r.raw
    );
    // not a denial, but reported: a dns_failed event
    let ev = proxy.event();
    assert_eq!(
        (ev["type"].as_str(), ev["host"].as_str(), ev["code"].as_str()),
        (Some("dns_failed"), Some("nosuch.test"), Some("dns_failed")),
        "{ev}"
    );
    // S2: one public and one loopback answer → refused on the loopback one.
    let r = proxy.ask(&connect_req(&format!("rebind.test:{port}"), &bearer()));
    assert_eq!(
        (r.status, r.json()["address"].as_str()),
        (403, Some("127.0.0.1")),
        "{}",
        r.raw
    );
    let ev = proxy.event();
    assert_eq!(
        (ev["type"].as_str(), ev["host"].as_str()),
        (Some("denied"), Some("rebind.test")),
        "{ev}"
    );
    // S1: metadata.
    let r = proxy.ask(&connect_req("meta.test:80", &bearer()));
    assert_eq!(
        (r.status, r.json()["address"].as_str()),
        (403, Some("169.254.169.254")),
        "{}",
        r.raw
    );
    assert!(!up.was_contacted());
    // With an explicit loopback rule the name is dialled at the address that was checked.
    let proxy = serve_token(&[
        "--dns-server",
        &server,
        "--rule",
        "UP.test.",
        "--rule",
        "127.0.0.1",
    ]);
    let mut c = proxy.connect();
    c.write_all(connect_req(&format!("Up.Test:{port}"), &bearer()).as_bytes())
        .expect("write");
    let _u = up.accept();
    let mut head = [0u8; 39];
    c.read_exact(&mut head).expect("answer");
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
}

#[test]
fn upstream_refusing_is_502_with_the_decision_id_and_no_denied_event() {
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let proxy = serve_token(&["--rule", "127.0.0.1", "--events", "-"]);
    let r = proxy.ask(&connect_req(&closed.to_string(), &bearer()));
    assert_error(&r, 502, "upstream_connect_failed", "");
    let id = r.header("x-iterion-decision-id").expect("a decision was made");
    assert_eq!(r.json()["decision_id"], id);
    assert_eq!(r.json()["host"], "127.0.0.1");
    assert_eq!(r.json()["port"], closed.port());
    // The next event is the next denial's: the 502 produced none.
    let d = proxy.ask(&connect_req("evil.test:443", &bearer()));
    let ev = proxy.event();
    assert_eq!(
        (ev["type"].as_str(), ev["decision_id"].as_str()),
        (Some("denied"), d.header("x-iterion-decision-id"))
    );
}

#[test]
fn the_proxy_never_connects_to_itself() {
    let proxy = serve_token(&["--rule", "127.0.0.1", "--rule", "127.0.0.0/8"]);
    let r = proxy.ask(&connect_req(&proxy.addr.clone(), &bearer()));
    let body = r.json();
    assert_eq!(
        (r.status, body["reason"].as_str(), body["address"].as_str()),
        (403, Some("non-global address"), Some("127.0.0.1")),
        "{}",
        r.raw
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Policy flags.

#[test]
fn mode_preset_and_rule_interplay() {
    // N49: the preset allows api.openai.com, a later `!` rule denies it.
    let proxy = serve_token(&["--preset", "iterion-default", "--rule", "!api.openai.com"]);
    let r = proxy.ask(&connect_req("api.openai.com:443", &bearer()));
    assert_eq!(
        (r.status, r.json()["rule"].as_str()),
        (403, Some("!api.openai.com")),
        "{}",
        r.raw
    );
    // N48: the preset does not allow a lookalike.
    let r = proxy.ask(&connect_req("gist.githubusercontent.com:443", &bearer()));
    assert_eq!(
        (r.status, r.json()["rule"].as_str()),
        (403, Some("no rule matched")),
        "{}",
        r.raw
    );
    // N16/N17: denylist.
    let proxy = serve_token(&["--mode", "denylist", "--rule", "!**.evil.test"]);
    for host in ["evil.test", "sub.evil.test", "EVIL.test."] {
        let r = proxy.ask(&connect_req(&format!("{host}:443"), &bearer()));
        assert_eq!(
            (r.status, r.json()["rule"].as_str()),
            (403, Some("!**.evil.test")),
            "{host}: {}",
            r.raw
        );
        assert_eq!(r.json()["host"], host.to_ascii_lowercase().trim_end_matches('.'));
    }
    // Last match wins, the original rule text is reported.
    let up = peer();
    let proxy = serve_token(&["--rule", "127.0.0.1", "--rule", "! 127.0.0.1"]);
    let r = proxy.ask(&connect_req(&up.addr.to_string(), &bearer()));
    assert_eq!(
        (r.status, r.json()["rule"].as_str()),
        (403, Some("! 127.0.0.1")),
        "{}",
        r.raw
    );
    let proxy = serve_token(&["--rule", "!127.0.0.1", "--rule", "127.0.0.0/8"]);
    let mut c = proxy.connect();
    c.write_all(connect_req(&up.addr.to_string(), &bearer()).as_bytes())
        .expect("write");
    let _u = up.accept();
    let mut head = [0u8; 39];
    c.read_exact(&mut head).expect("answer");
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    // Port-scoped rules (N28/N29/S15/S16).
    let proxy = serve_token(&["--rule", &format!("127.0.0.1:{}", up.port())]);
    let r = proxy.ask(&connect_req(&format!("127.0.0.1:{}", up.port() ^ 1), &bearer()));
    assert_eq!(
        (r.status, r.json()["rule"].as_str()),
        (403, Some("no rule matched")),
        "{}",
        r.raw
    );
    // The rules file comes after the presets and before the rules.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rules");
    std::fs::write(&file, "# allow the loopback peer\n\n!127.0.0.1\n").expect("write rules");
    let proxy = serve_token(&[
        "--rule",
        "127.0.0.1",
        "--rules-file",
        file.to_str().expect("utf-8"),
    ]);
    let mut c = proxy.connect();
    c.write_all(connect_req(&up.addr.to_string(), &bearer()).as_bytes())
        .expect("write");
    let mut head = [0u8; 39];
    c.read_exact(&mut head).expect("answer");
    assert_eq!(
        &head, b"HTTP/1.1 200 Connection Established\r\n\r\n",
        "--rule (allow) comes after --rules-file (deny)"
    );
    let _u = up.accept();
    // And the presets come before the rules file.
    std::fs::write(&file, "!api.openai.com\n").expect("write rules");
    let proxy = serve_token(&[
        "--preset",
        "iterion-default",
        "--rules-file",
        file.to_str().expect("utf-8"),
    ]);
    let r = proxy.ask(&connect_req("api.openai.com:443", &bearer()));
    assert_eq!(
        (r.status, r.json()["rule"].as_str()),
        (403, Some("!api.openai.com")),
        "{}",
        r.raw
    );
}

#[test]
fn silent_deny_refuses_without_a_denied_event() {
    let proxy = serve_token(&["--events", "-"]);
    let r = proxy.ask(&connect_req("statsig.anthropic.com:443", &bearer()));
    assert_eq!(
        (r.status, r.header("x-iterion-reason")),
        (403, Some("policy denial")),
        "{}",
        r.raw
    );
    let marker = proxy.ask(&connect_req("evil.test:443", &bearer()));
    let mut skipped = Vec::new();
    let ev = proxy.event_of("denied", &mut skipped);
    assert_eq!(
        ev["decision_id"].as_str(),
        marker.header("x-iterion-decision-id"),
        "{ev}"
    );
    assert!(
        skipped.iter().all(|e| e["type"] != "denied"),
        "a silent denial is not a denied event: {skipped:?}"
    );
    // E3: an explicit allow rule wins over the silent list; `--no-silent-deny` reports the denial.
    let proxy = serve_token(&["--no-silent-deny", "--events", "-"]);
    let r = proxy.ask(&connect_req("statsig.anthropic.com:443", &bearer()));
    assert_eq!(r.status, 403);
    let ev = proxy.event();
    assert_eq!(
        (ev["type"].as_str(), ev["host"].as_str()),
        (Some("denied"), Some("statsig.anthropic.com"))
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Authentication.

#[test]
fn missing_or_wrong_credentials_are_407_and_never_decided() {
    let proxy = serve_token(&["--events", "-"]);
    let mut wrong_token = TOKEN.to_owned();
    wrong_token.replace_range(..1, "0");
    let refused = [
        String::new(),
        format!("Proxy-Authorization: Bearer {wrong_token}\r\n"),
        "Proxy-Authorization: Bearer\r\n".to_owned(),
        "Proxy-Authorization: Bearer \r\n".to_owned(),
        format!("Proxy-Authorization: Bearer {TOKEN}x\r\n"),
        format!("Proxy-Authorization: Bearer {}\r\n", &TOKEN[..63]),
        format!("Proxy-Authorization: Digest {TOKEN}\r\n"),
        format!("Proxy-Authorization: {TOKEN}\r\n"),
        basic("iterion", &wrong_token),
        // P9: no colon.
        format!(
            "Proxy-Authorization: Basic {}\r\n",
            iterion_netproxy::base64_encode(TOKEN.as_bytes())
        ),
        "Proxy-Authorization: Basic !!!\r\n".to_owned(),
        // P10: two headers, even both valid.
        format!("{}{}", bearer(), bearer()),
        // The token belongs in Proxy-Authorization, not Authorization.
        format!("Authorization: Bearer {TOKEN}\r\n"),
    ];
    for auth in &refused {
        let r = proxy.ask(&connect_req("evil.test:443", auth));
        generated(&r, 407, "proxy_auth_required", "proxy authentication required");
        assert_eq!(
            r.header("proxy-authenticate"),
            Some("Basic realm=\"iterion-sandbox\""),
            "{auth}: {}",
            r.raw
        );
        assert_eq!(
            r.json(),
            serde_json::json!({"error": "proxy_auth_required", "message": "proxy authentication required"}),
            "{auth}"
        );
        assert!(!r.has("x-iterion-decision-id"), "{auth}: no decision");
        let ev = proxy.event();
        assert_eq!(ev["type"], "auth_failed", "{auth}: {ev}");
        assert!(!ev.to_string().contains(&TOKEN[8..]), "never the token: {ev}");
    }
    // §9: authentication comes before the target is looked at.
    for req in [
        "GET /x HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
        "GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n",
        "GET https://evil.test/ HTTP/1.1\r\n\r\n",
    ] {
        let r = proxy.ask(req);
        assert_eq!(r.status, 407, "{}", r.raw);
        assert_eq!(proxy.event()["type"], "auth_failed");
    }
    // A Basic username is reported, never the token.
    let r = proxy.ask(&connect_req("evil.test:443", &basic("fetch", &wrong_token)));
    assert_eq!(r.status, 407);
    let ev = proxy.event();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["scheme"].as_str(),
            ev["username"].as_str()
        ),
        (Some("auth_failed"), Some("basic"), Some("fetch")),
        "{ev}"
    );
}

#[test]
fn bearer_and_basic_are_accepted_and_the_basic_username_names_the_node() {
    let proxy = serve_token(&["--events", "-"]);
    // P6: scheme names are case-insensitive, surrounding whitespace is tolerated.
    for auth in [
        bearer(),
        format!("Proxy-Authorization: bearer {TOKEN}\r\n"),
        format!("Proxy-Authorization: BEARER   {TOKEN}  \r\n"),
        format!("proxy-authorization:Bearer {TOKEN}\r\n"),
        basic("iterion", TOKEN),
        basic("iterion", TOKEN).replace("Basic", "basic"),
    ] {
        let r = proxy.ask(&connect_req("evil.test:443", &auth));
        assert_eq!(r.status, 403, "{auth}: {}", r.raw);
        let ev = proxy.event();
        assert_eq!(
            (ev["type"].as_str(), ev["username"].as_str(), &ev["node_id"]),
            (Some("denied"), Some("iterion"), &Value::Null),
            "{auth}: {ev}"
        );
    }
    // P7/E1: per-node attribution. Standalone mode accepts any username with the right token (§11); the
    // username names the node, so the event carries it as both `username` and `node_id`.
    let r = proxy.ask(&connect_req("evil.test:443", &basic("fetch", TOKEN)));
    assert_eq!(r.status, 403, "{}", r.raw);
    let ev = proxy.event();
    assert_eq!(ev["decision_id"].as_str(), r.header("x-iterion-decision-id"));
    assert_eq!(
        (ev["username"].as_str(), ev["node_id"].as_str()),
        (Some("fetch"), Some("fetch")),
        "{ev}"
    );
}

#[test]
fn no_auth_needs_no_header() {
    let up = peer();
    let proxy = serve(&["--no-auth", "--rule", "127.0.0.1", "--events", "-"]);
    assert!(proxy.generated.is_none());
    let r = proxy.ask(&connect_req("evil.test:443", ""));
    assert_eq!(r.status, 403, "{}", r.raw);
    let ev = proxy.event();
    assert_eq!(ev["type"], "denied", "{ev}");
    assert_eq!(ev["node_id"], Value::Null, "{ev}");
    let mut c = proxy.connect();
    c.write_all(connect_req(&up.addr.to_string(), "").as_bytes())
        .expect("write");
    let _u = up.accept();
    let mut head = [0u8; 39];
    c.read_exact(&mut head).expect("answer");
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
}

// ---------------------------------------------------------------------------------------------------------------
// Absolute-form forwarding.

#[test]
fn forwarding_rewrites_to_origin_form_and_drops_hop_by_hop_headers() {
    let (up, seen_rx) = http_upstream(|_| {
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: X-Resp-Hop, close\r\nX-Resp-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic realm=\"up\"\r\nProxy-Connection: keep-alive\r\nTrailer: X-T\r\nUpgrade: h2c\r\nX-End: 1\r\n\r\nok"
            .to_vec()
    });
    let proxy = serve_token(&["--rule", "127.0.0.1"]);
    let port = up.port();
    // P11.
    let r = proxy.ask(&format!(
        "GET http://127.0.0.1:{port}/x?q=1#frag HTTP/1.1\r\nHost: other\r\n{}Connection: close, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 300\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nTrailer: X-T\r\nAccept: */*\r\nX-Keep: yes\r\n\r\n",
        bearer()
    ));
    let s = seen(&seen_rx);
    assert_eq!(
        s.head,
        format!("GET /x?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\nX-Keep: yes\r\n\r\n"),
        "origin-form, Host from the URI, every hop-by-hop header gone, nothing added (no Via, Forwarded, X-Forwarded-For)"
    );
    assert_eq!(r.status, 200, "{}", r.raw);
    assert_eq!(r.body_text(), "ok");
    for hop in [
        "x-resp-hop",
        "keep-alive",
        "proxy-authenticate",
        "proxy-connection",
        "trailer",
        "upgrade",
    ] {
        assert!(
            !r.has(hop),
            "{hop} is removed from the relayed response: {}",
            r.raw
        );
    }
    assert_eq!(
        (r.header("x-end"), r.header("content-length")),
        (Some("1"), Some("2")),
        "{}",
        r.raw
    );
}

#[test]
fn forwarding_keeps_the_connection_alive_and_decides_each_request() {
    let (up, seen_rx) = http_upstream(ok_hello);
    let proxy = serve_token(&["--rule", "127.0.0.1", "--events", "-"]);
    let port = up.port();
    let c = proxy.connect();
    let mut w = c.try_clone().expect("clone");
    let mut r = BufReader::new(c);
    let get = |path: &str| {
        format!(
            "GET http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: x\r\n{}\r\n",
            bearer()
        )
    };
    w.write_all(get("/1").as_bytes()).expect("write");
    let first = read_response(&mut r);
    assert_eq!(
        (first.status, first.body_text().as_str()),
        (200, "hello"),
        "{}",
        first.raw
    );
    assert_ne!(first.header("connection"), Some("close"), "{}", first.raw);
    w.write_all(get("/2").as_bytes()).expect("write");
    let second = read_response(&mut r);
    assert_eq!(
        (second.status, second.body_text().as_str()),
        (200, "hello"),
        "{}",
        second.raw
    );
    let (s1, s2) = (seen(&seen_rx), seen(&seen_rx));
    assert!(
        s1.head.starts_with("GET /1 ") && s2.head.starts_with("GET /2 "),
        "{s1:?} {s2:?}"
    );
    assert_eq!(s1.conn, s2.conn, "the upstream connection is pooled and reused");
    // P28: the third request on the same connection is denied with its own decision.
    w.write_all(b"GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n")
        .expect("write");
    w.write_all(bearer().as_bytes()).expect("write");
    w.write_all(b"\r\n").expect("write");
    let third = read_response(&mut r);
    assert_eq!(third.status, 403, "{}", third.raw);
    let ev = proxy.event();
    assert_eq!(
        (ev["method"].as_str(), ev["host"].as_str(), ev["port"].as_u64()),
        (Some("GET"), Some("evil.test"), Some(80)),
        "{ev}"
    );
    assert_eq!(ev["decision_id"].as_str(), third.header("x-iterion-decision-id"));
    let mut rest = Vec::new();
    r.read_to_end(&mut rest)
        .expect("the proxy closes after a refusal");
    assert!(rest.is_empty());
    // `Connection: close` from the client: answered with `Connection: close`, then closed.
    let raw = proxy.exchange(
        format!(
            "GET http://127.0.0.1:{port}/c HTTP/1.1\r\nConnection: close\r\n{}\r\n",
            bearer()
        )
        .as_bytes(),
    );
    let r = Resp::parse(&raw);
    assert_eq!(
        (r.status, r.header("connection"), r.body_text().as_str()),
        (200, Some("close"), "hello")
    );
    // HTTP/1.0 without keep-alive: closed after the response.
    let raw =
        proxy.exchange(format!("GET http://127.0.0.1:{port}/d HTTP/1.0\r\n{}\r\n", bearer()).as_bytes());
    let r = Resp::parse(&raw);
    assert_eq!((r.status, r.body_text().as_str()), (200, "hello"), "{}", r.raw);
}

#[test]
fn forwarding_streams_chunked_bodies_both_ways() {
    let (up, seen_rx) = http_upstream(|_| {
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n".to_vec()
    });
    let proxy = serve_token(&["--rule", "127.0.0.1"]);
    let port = up.port();
    let c = proxy.connect();
    let mut w = c.try_clone().expect("clone");
    let mut r = BufReader::new(c);
    w.write_all(
        format!(
            "POST http://127.0.0.1:{port}/up HTTP/1.1\r\n{}Transfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
            bearer()
        )
        .as_bytes(),
    )
    .expect("write");
    let resp = read_response(&mut r);
    assert_eq!(
        (resp.status, resp.body_text().as_str()),
        (200, "abcdefg"),
        "{}",
        resp.raw
    );
    let s = seen(&seen_rx);
    assert!(
        s.head.contains("\r\nTransfer-Encoding: chunked\r\n"),
        "{}",
        s.head
    );
    assert!(
        !s.head.to_ascii_lowercase().contains("content-length"),
        "{}",
        s.head
    );
    let mut decoded = Vec::new();
    let mut rest = &s.body[..];
    loop {
        let nl = rest.windows(2).position(|w| w == b"\r\n").expect("size line");
        let n = usize::from_str_radix(std::str::from_utf8(&rest[..nl]).expect("utf-8"), 16).expect("hex");
        rest = &rest[nl + 2..];
        if n == 0 {
            break;
        }
        decoded.extend_from_slice(&rest[..n]);
        rest = &rest[n + 2..];
    }
    assert_eq!(decoded, b"hello world");
    // A Content-Length body is passed as is.
    w.write_all(
        format!(
            "PUT http://127.0.0.1:{port}/cl HTTP/1.1\r\n{}Content-Length: 7\r\n\r\npayload",
            bearer()
        )
        .as_bytes(),
    )
    .expect("write");
    let resp = read_response(&mut r);
    assert_eq!(resp.status, 200, "{}", resp.raw);
    let s = seen(&seen_rx);
    assert_eq!(s.body, b"payload");
    assert!(s.head.contains("\r\nContent-Length: 7\r\n"), "{}", s.head);
}

#[test]
fn forwarding_passes_expect_100_continue() {
    let up = peer();
    let proxy = serve_token(&["--rule", "127.0.0.1"]);
    let c = proxy.connect();
    let mut w = c.try_clone().expect("clone");
    let mut r = BufReader::new(c);
    w.write_all(
        format!(
            "POST http://127.0.0.1:{}/e HTTP/1.1\r\n{}Expect: 100-continue\r\nContent-Length: 4\r\n\r\n",
            up.port(),
            bearer()
        )
        .as_bytes(),
    )
    .expect("write");
    let mut u = BufReader::new(up.accept());
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        assert!(u.read_line(&mut head).expect("upstream head") > 0, "{head}");
    }
    assert!(head.contains("\r\nExpect: 100-continue\r\n"), "{head}");
    u.get_mut()
        .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
        .expect("write 100");
    // The interim response is relayed; only then does the client send its body.
    let interim = read_response(&mut r);
    assert_eq!(interim.status, 100, "{}", interim.raw);
    w.write_all(b"body").expect("write body");
    let mut body = [0u8; 4];
    u.read_exact(&mut body).expect("upstream body");
    assert_eq!(&body, b"body");
    u.get_mut()
        .write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
        .expect("write final");
    let resp = read_response(&mut r);
    assert_eq!(
        (resp.status, resp.body_text().as_str()),
        (201, "ok"),
        "{}",
        resp.raw
    );
}

#[test]
fn forwarding_a_name_uses_the_uri_authority_as_host() {
    let (up, seen_rx) = http_upstream(ok_hello);
    let server = dns(&[("web.test", &["127.0.0.1"])]);
    let proxy = serve_token(&[
        "--dns-server",
        &server,
        "--rule",
        "web.test",
        "--rule",
        "127.0.0.1",
    ]);
    let r = proxy.ask(&format!(
        "GET http://WEB.test:{}?a=b HTTP/1.1\r\nHost: web.test\r\n{}Connection: close\r\n\r\n",
        up.port(),
        bearer()
    ));
    assert_eq!(r.status, 200, "{}", r.raw);
    let s = seen(&seen_rx);
    assert_eq!(
        s.head,
        format!("GET /?a=b HTTP/1.1\r\nHost: web.test:{}\r\n\r\n", up.port())
    );
}

#[test]
fn requests_the_proxy_refuses_before_deciding() {
    let proxy = serve_token(&["--rule", "127.0.0.1", "--rule", "allowed.test"]);
    // P12: https absolute-form.
    let r = proxy.ask(&format!(
        "GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n{}\r\n",
        bearer()
    ));
    generated(
        &r,
        400,
        "https_absolute_form",
        "https absolute-form is not supported; use CONNECT",
    );
    assert_eq!(
        r.json()["message"],
        "this proxy does not fetch https:// URLs for clients; configure the client to tunnel with CONNECT (HTTPS_PROXY)",
        "{}",
        r.raw
    );
    assert!(!r.has("x-iterion-decision-id"));
    // P13 and `OPTIONS *`: not a proxy request.
    for req in [
        "GET /x HTTP/1.1\r\nHost: allowed.test\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: allowed.test\r\n",
    ] {
        let r = proxy.ask(&format!("{req}{}\r\n", bearer()));
        assert_error(&r, 400, "not_a_proxy_request", "");
        assert!(
            r.header("x-iterion-reason")
                .is_some_and(|h| h.starts_with("not a proxy request")),
            "{}",
            r.raw
        );
    }
    // P14: other schemes.
    for scheme in ["ftp", "ws", "wss"] {
        let r = proxy.ask(&format!(
            "GET {scheme}://allowed.test/ HTTP/1.1\r\n{}\r\n",
            bearer()
        ));
        let msg = format!("unsupported scheme '{scheme}'");
        generated(&r, 400, "unsupported_scheme", &msg);
        assert_eq!(r.json()["message"], msg.as_str());
    }
    // P15: credentials in the URL.
    let r = proxy.ask(&format!(
        "GET http://u:p@allowed.test/ HTTP/1.1\r\n{}\r\n",
        bearer()
    ));
    assert_eq!(r.status, 400, "{}", r.raw);
    assert_eq!(
        r.json()["message"],
        "credentials in the URL are not accepted",
        "{}",
        r.raw
    );
    // P16 and the other smuggling guards.
    for framing in [
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        "Content-Length: 5\r\nContent-Length: 6\r\n",
        "Transfer-Encoding: chunked, gzip\r\n",
        "Transfer-Encoding: gzip\r\n",
        "Content-Length: +5\r\n",
        "X-Folded: a\r\n b\r\n",
        "Bad Name: 1\r\n",
    ] {
        let r = proxy.ask(&format!(
            "POST http://allowed.test/ HTTP/1.1\r\n{}{framing}\r\nhello",
            bearer()
        ));
        assert_error(&r, 400, "bad_request", format!("{framing:?}"));
    }
    // P21: Upgrade in forward mode.
    let r = proxy.ask(&format!(
        "GET http://allowed.test/ HTTP/1.1\r\n{}Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        bearer()
    ));
    generated(
        &r,
        501,
        "upgrade_not_supported",
        "upgrade through the forward proxy is not supported; use CONNECT",
    );
    // An invalid port in the URI.
    let r = proxy.ask(&format!(
        "GET http://allowed.test:0443/ HTTP/1.1\r\n{}\r\n",
        bearer()
    ));
    assert_error(&r, 400, "invalid_target", "");
}

#[test]
fn garbage_and_unsupported_protocols_are_400() {
    let proxy = serve_token(&["--rule", "allowed.test"]);
    for raw in [
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
        b"hello\r\n\r\n",
        b"GET http://allowed.test/ HTTP/1.2\r\n\r\n",
        b"GET http://allowed.test/ HTTP/1.1 extra\r\n\r\n",
        b"GET  http://allowed.test/ HTTP/1.1\r\n\r\n",
        b"G(T http://allowed.test/ HTTP/1.1\r\n\r\n",
        b"GET http://allowed.test/ HTTP/1.1\nHost: a\r\n\r\n",
        b"GET http://allowed.test/ HTTP/1.1\r\nNoColon\r\n\r\n",
        b"\xff\xfe\r\n\r\n",
    ] {
        let r = Resp::parse(&proxy.exchange(raw));
        assert_eq!(r.status, 400, "{:?}: {}", String::from_utf8_lossy(raw), r.raw);
        assert_eq!(r.json()["error"], "bad_request", "{}", r.raw);
        assert_eq!(r.header("connection"), Some("close"));
    }
}

#[test]
fn oversized_heads_are_431() {
    let proxy = serve_token(&["--rule", "allowed.test"]);
    // P17: a 40 KiB head.
    let big = format!(
        "GET http://allowed.test/ HTTP/1.1\r\n{}X-Big: {}\r\n\r\n",
        bearer(),
        "a".repeat(40 * 1024)
    );
    let r = proxy.ask(&big);
    generated(&r, 431, "head_too_large", "request head too large");
    // A head that never ends is cut at the limit too.
    let mut c = proxy.connect();
    let mut sent = 0;
    let filler = [b'a'; 4096];
    c.write_all(b"GET http://allowed.test/ HTTP/1.1\r\nX-Long: ")
        .expect("write");
    while sent < 64 * 1024 {
        if c.write_all(&filler).is_err() {
            break;
        }
        sent += filler.len();
    }
    let r = Resp::parse(&read_to_eof(&mut c));
    assert_eq!(r.status, 431, "{}", r.raw);
    // P18: 101 header fields.
    let mut many = format!("GET http://allowed.test/ HTTP/1.1\r\n{}", bearer());
    for i in 0..100 {
        many.push_str(&format!("X-{i}: 1\r\n"));
    }
    many.push_str("\r\n");
    let r = proxy.ask(&many);
    generated(&r, 431, "head_too_large", "request head too large");
    // 100 fields are fine (the request is then decided: 403 for an unlisted host).
    let mut ok = format!("CONNECT evil.test:443 HTTP/1.1\r\n{}", bearer());
    for i in 0..99 {
        ok.push_str(&format!("X-{i}: 1\r\n"));
    }
    ok.push_str("\r\n");
    assert_eq!(proxy.ask(&ok).status, 403);
}

#[test]
fn a_slow_head_gets_408_and_others_are_still_served() {
    let proxy = serve_token(&["--header-timeout", "1s"]);
    let mut slow = proxy.connect();
    slow.write_all(b"CONNECT evil.test:443 HTTP/1.1\r\n")
        .expect("write");
    // Meanwhile another client is served.
    let r = proxy.ask(&connect_req("evil.test:443", &bearer()));
    assert_eq!(r.status, 403, "{}", r.raw);
    let r = Resp::parse(&read_to_eof(&mut slow));
    generated(&r, 408, "request_timeout", "request head not received in time");
}

// ---------------------------------------------------------------------------------------------------------------
// Limits and shutdown.

#[test]
fn concurrent_tunnel_limit_is_429_with_retry_after() {
    let target = echo();
    let proxy = serve_token(&["--rule", "127.0.0.1", "--max-tunnels", "1"]);
    let mut first = proxy.connect();
    first
        .write_all(connect_req(&target.to_string(), &bearer()).as_bytes())
        .expect("write");
    let mut head = [0u8; 39];
    first.read_exact(&mut head).expect("answer");
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    let r = proxy.ask(&connect_req(&target.to_string(), &bearer()));
    generated(&r, 429, "too_many_tunnels", "too many concurrent tunnels");
    assert_eq!(r.header("retry-after"), Some("1"), "{}", r.raw);
    // The first tunnel still works; once it is closed, a new one is accepted.
    first.write_all(b"x").expect("write");
    let mut b = [0u8; 1];
    first.read_exact(&mut b).expect("echo");
    first.shutdown(Shutdown::Write).expect("half-close");
    assert!(read_to_eof(&mut first).is_empty());
    let start = Instant::now();
    loop {
        let mut c = proxy.connect();
        c.write_all(connect_req(&target.to_string(), &bearer()).as_bytes())
            .expect("write");
        let mut head = [0u8; 12];
        c.read_exact(&mut head).expect("answer");
        if &head == b"HTTP/1.1 200" {
            break;
        }
        assert!(start.elapsed() < WAIT, "the tunnel slot was never released");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A tunnel is open; `sig` shuts the proxy down: both sockets of the tunnel are closed and the process exits 0
/// with the final statistics on stderr.
fn shutdown_closes_open_tunnels(sig: &str) {
    let up = peer();
    let mut proxy = serve_token(&["--rule", "127.0.0.1", "--shutdown-grace", "1s", "--events", "-"]);
    let mut c = proxy.connect();
    c.write_all(connect_req(&up.addr.to_string(), &bearer()).as_bytes())
        .expect("write");
    let mut u = up.accept();
    let mut head = [0u8; 39];
    c.read_exact(&mut head).expect("answer");
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    c.write_all(b"up").expect("write");
    let mut got = [0u8; 2];
    u.read_exact(&mut got).expect("relayed");
    // A second client is still sending its head: it gets 503 (§12.3 step 2).
    let mut partial = proxy.connect();
    partial
        .write_all(b"CONNECT evil.test:443 HTTP/1.1\r\n")
        .expect("write");
    // Make sure the proxy accepted that connection before the signal: a full request on another one is answered.
    assert_eq!(proxy.ask(&connect_req("evil.test:443", &bearer())).status, 403);
    proxy.signal(sig);
    assert!(
        read_to_eof(&mut c).is_empty(),
        "the client side of the tunnel is closed"
    );
    assert!(
        read_to_eof(&mut u).is_empty(),
        "the upstream side of the tunnel is closed"
    );
    let r = Resp::parse(&read_to_eof(&mut partial));
    generated(&r, 503, "unavailable", "proxy unavailable");
    assert_eq!(proxy.exit_code(), Some(0), "{}", proxy.stderr());
    let stderr = proxy.stderr();
    assert!(
        stderr.contains("netproxy stopped"),
        "final stats on stderr: {stderr}"
    );
    let mut skipped = Vec::new();
    let closed = proxy.event_of("tunnel_closed", &mut skipped);
    assert_eq!(closed["close_reason"], "shutdown", "{closed}");
    assert_eq!(closed["bytes_up"], 2, "{closed}");
    assert!(TcpStream::connect(&proxy.addr).is_err(), "the listener is closed");
}

#[test]
fn sigterm_closes_open_tunnels_and_exits_0() {
    shutdown_closes_open_tunnels("TERM");
}

#[test]
fn sigint_closes_open_tunnels_and_exits_0() {
    shutdown_closes_open_tunnels("INT");
}

#[test]
fn connection_limit_is_503() {
    let proxy = serve_token(&["--max-connections", "1"]);
    let mut first = proxy.connect();
    first
        .write_all(b"CONNECT evil.test:443 HTTP/1.1\r\n")
        .expect("write");
    let r = proxy.ask(&connect_req("evil.test:443", &bearer()));
    generated(&r, 503, "unavailable", "proxy unavailable");
    first
        .write_all(format!("{}\r\n", bearer()).as_bytes())
        .expect("write");
    assert_eq!(Resp::parse(&read_to_eof(&mut first)).status, 403);
}

#[test]
fn a_forward_request_in_flight_finishes_within_the_grace() {
    let up = peer();
    let mut proxy = serve_token(&["--rule", "127.0.0.1", "--shutdown-grace", "30s"]);
    let mut c = proxy.connect();
    c.write_all(format!("GET http://{}/slow HTTP/1.1\r\n{}\r\n", up.addr, bearer()).as_bytes())
        .expect("write");
    let mut u = BufReader::new(up.accept());
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        assert!(u.read_line(&mut head).expect("upstream head") > 0, "{head}");
    }
    proxy.signal("TERM");
    // The proxy has stopped accepting before the upstream answers.
    let start = Instant::now();
    while TcpStream::connect(&proxy.addr).is_ok() {
        assert!(start.elapsed() < WAIT, "the listener stays open after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    u.get_mut()
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlate")
        .expect("write response");
    let r = Resp::parse(&read_to_eof(&mut c));
    assert_eq!((r.status, r.body_text().as_str()), (200, "late"), "{}", r.raw);
    assert_eq!(proxy.exit_code(), Some(0), "{}", proxy.stderr());
}

#[test]
fn an_http_1_0_client_never_gets_a_chunked_response() {
    let (up, _seen) = http_upstream(|_| {
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Up: 1\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
            .to_vec()
    });
    let proxy = serve_token(&["--rule", "127.0.0.1"]);
    // RFC 9112 §6.1: no Transfer-Encoding towards an HTTP/1.0 recipient; the body ends with the connection.
    let raw = proxy.exchange(format!("GET http://{up}/ HTTP/1.0\r\n{}\r\n", bearer()).as_bytes());
    let r = Resp::parse(&raw);
    assert_eq!(r.status, 200, "{}", r.raw);
    assert!(!r.has("transfer-encoding"), "{}", r.raw);
    assert_eq!(
        (r.header("x-up"), r.body_text().as_str()),
        (Some("1"), "abcdefg"),
        "{}",
        r.raw
    );
    // With keep-alive requested, the response says it is kept alive.
    let (up, _seen) = http_upstream(ok_hello);
    let c = proxy.connect();
    let mut w = c.try_clone().expect("clone");
    let mut rd = BufReader::new(c);
    for _ in 0..2 {
        w.write_all(
            format!(
                "GET http://{up}/ HTTP/1.0\r\nConnection: keep-alive\r\n{}\r\n",
                bearer()
            )
            .as_bytes(),
        )
        .expect("write");
        let r = read_response(&mut rd);
        assert_eq!(
            (r.status, r.header("connection")),
            (200, Some("keep-alive")),
            "{}",
            r.raw
        );
    }
}

#[test]
fn malformed_chunked_request_bodies_are_400() {
    let (up, _seen) = http_upstream(ok_hello);
    let proxy = serve_token(&["--rule", "127.0.0.1"]);
    for body in [
        "zz\r\nhello\r\n0\r\n\r\n",
        "+5\r\nhello\r\n0\r\n\r\n",
        " 5\r\nhello\r\n0\r\n\r\n",
        "5\r\nhelloXX0\r\n\r\n",
    ] {
        let r = proxy.ask(&format!(
            "POST http://{up}/ HTTP/1.1\r\n{}Transfer-Encoding: chunked\r\n\r\n{body}",
            bearer()
        ));
        assert_error(&r, 400, "bad_request", format!("{body:?}"));
    }
}

#[test]
fn listens_on_ipv6_loopback_and_unix_sockets() {
    let proxy = serve_token(&["--listen", "[::1]:0"]);
    assert!(proxy.addr.starts_with("[::1]:"), "{}", proxy.addr);
    assert_eq!(proxy.ask(&connect_req("evil.test:443", &bearer())).status, 403);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("proxy.sock");
    let listen = format!("unix:{}", path.display());
    let mut proxy = serve_token(&["--listen", &listen]);
    assert_eq!(proxy.addr, listen);
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let meta = std::fs::metadata(&path).expect("socket file");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o666, "§12.1: mode 0666");
    let mut s = std::os::unix::net::UnixStream::connect(&path).expect("connect unix socket");
    s.write_all(connect_req("evil.test:443", &bearer()).as_bytes())
        .expect("write");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    assert_eq!(Resp::parse(&raw).status, 403);
    proxy.signal("TERM");
    assert_eq!(proxy.exit_code(), Some(0), "{}", proxy.stderr());
    assert!(!path.exists(), "§12.3: the socket file is removed at shutdown");
    // A stale socket file is replaced at start.
    let stale = std::os::unix::net::UnixListener::bind(&path).expect("stale socket");
    drop(stale);
    let proxy = serve_token(&["--listen", &listen]);
    assert_eq!(proxy.addr, listen);
}

#[test]
fn every_event_is_written_before_the_process_exits() {
    const TUNNELS: usize = 40;
    let target = echo();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.jsonl");
    let mut proxy = serve_token(&[
        "--rule",
        "127.0.0.1",
        "--shutdown-grace",
        "0s",
        "--events",
        path.to_str().expect("utf-8 path"),
    ]);
    let mut open = Vec::new();
    for _ in 0..TUNNELS {
        let mut c = proxy.connect();
        c.write_all(connect_req(&target.to_string(), &bearer()).as_bytes())
            .expect("write");
        let mut head = [0u8; 39];
        c.read_exact(&mut head).expect("answer");
        assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
        open.push(c);
    }
    proxy.signal("TERM");
    assert_eq!(proxy.exit_code(), Some(0), "{}", proxy.stderr());
    let text = std::fs::read_to_string(&path).expect("events file");
    let closed = text
        .lines()
        .filter(|l| l.contains(r#""type":"tunnel_closed""#))
        .count();
    assert_eq!(
        closed, TUNNELS,
        "one tunnel_closed line per tunnel, all written before exit:\n{text}"
    );
}

#[test]
fn a_signal_right_after_the_listen_line_is_a_graceful_shutdown() {
    for sig in ["TERM", "INT", "TERM", "INT", "TERM", "INT", "TERM", "INT"] {
        let mut proxy = serve_token(&[]);
        proxy.signal(sig);
        assert_eq!(
            proxy.exit_code(),
            Some(0),
            "SIG{sig} as soon as the listen line is out: {}",
            proxy.stderr()
        );
        assert!(proxy.stderr().contains("netproxy stopped"), "{}", proxy.stderr());
    }
}

#[test]
fn a_token_from_the_environment_is_not_announced() {
    let proxy = serve_env(&["--events", "-"], Some(TOKEN));
    let r = proxy.ask(&connect_req("evil.test:443", &bearer()));
    assert_eq!(r.status, 403, "{}", r.raw);
    // The second stdout line is already the event: no `proxy` line for a token that was not generated.
    let ev = proxy.event();
    assert_eq!(ev["type"], "denied", "{ev}");
}

#[test]
fn unspecified_and_localhost_targets_are_refused_in_every_mode() {
    let up = peer();
    let port = up.port();
    let server = dns(&[("localhost", &["127.0.0.1", "::1"]), ("zero.test", &["0.0.0.0"])]);
    for args in [
        &["--mode", "open", "--dns-server", &server][..],
        // Every address passes the name stage; only explicit loopback rules are not enough for 0.0.0.0 and ::.
        &[
            "--rule",
            "**",
            "--rule",
            "0.0.0.0/0",
            "--rule",
            "::/0",
            "--rule",
            "127.0.0.1",
            "--rule",
            "::1",
            "--dns-server",
            &server,
        ][..],
    ] {
        let proxy = serve_token(args);
        for target in [
            format!("0:{port}"),
            format!("0.0.0.0:{port}"),
            format!("[::]:{port}"),
            format!("zero.test:{port}"),
        ]
        .into_iter()
        .chain(args.contains(&"open").then(|| format!("localhost:{port}")))
        {
            let r = proxy.ask(&connect_req(&target, &bearer()));
            assert_eq!(r.status, 403, "{args:?} {target}: {}", r.raw);
            assert_eq!(
                r.json()["reason"],
                "non-global address",
                "{args:?} {target}: {}",
                r.raw
            );
        }
    }
    assert!(
        !up.was_contacted(),
        "0.0.0.0 and :: reach this host; none may be dialled"
    );
}

#[test]
fn an_idle_tunnel_is_closed_on_both_sides() {
    let up = peer();
    let proxy = serve_token(&["--rule", "127.0.0.1", "--idle-timeout", "1s", "--events", "-"]);
    let mut c = proxy.connect();
    c.write_all(connect_req(&up.addr.to_string(), &bearer()).as_bytes())
        .expect("write");
    let mut u = up.accept();
    let mut head = [0u8; 39];
    c.read_exact(&mut head).expect("answer");
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    assert!(read_to_eof(&mut c).is_empty(), "the client side is closed");
    assert!(read_to_eof(&mut u).is_empty(), "the upstream side is closed");
    let ev = proxy.event();
    assert_eq!(
        (ev["type"].as_str(), ev["close_reason"].as_str()),
        (Some("tunnel_closed"), Some("idle")),
        "{ev}"
    );
}

#[test]
fn a_dns_server_that_never_answers_is_504_with_a_dns_event() {
    let silent = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    let server = silent.local_addr().expect("addr").to_string();
    let proxy = serve_token(&[
        "--rule",
        "**",
        "--dns-server",
        &server,
        "--dns-timeout",
        "1s",
        "--events",
        "-",
    ]);
    let r = proxy.ask(&connect_req("slow.test:443", &bearer()));
    generated(&r, 504, "dns_timeout", "dns timeout");
    // reported as a dns_failed event (code dns_timeout), not as a denial
    let ev = proxy.event();
    assert_eq!(
        (ev["type"].as_str(), ev["host"].as_str(), ev["code"].as_str()),
        (Some("dns_failed"), Some("slow.test"), Some("dns_timeout")),
        "{ev}"
    );
    let marker = proxy.ask(&connect_req("1.2.3.4:443", &bearer()));
    let ev = proxy.event();
    assert_eq!(
        ev["decision_id"].as_str(),
        marker.header("x-iterion-decision-id"),
        "{ev}"
    );
    drop(silent);
}

#[test]
fn connection_cannot_strip_the_framing_of_a_relayed_message() {
    // A client that names Content-Length in Connection must not make the proxy drop the header while it still
    // relays the body: the upstream would read the body as a second request (request smuggling).
    let (up, seen_rx) = http_upstream(|_| {
        b"HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 5\r\n\r\nhello".to_vec()
    });
    let proxy = serve_token(&["--rule", "127.0.0.1"]);
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let c = proxy.connect();
    let mut w = c.try_clone().expect("clone");
    let mut r = BufReader::new(c);
    w.write_all(
        format!(
            "POST http://{up}/outer HTTP/1.1\r\n{}Connection: content-length\r\nContent-Length: {}\r\n\r\n{smuggled}",
            bearer(),
            smuggled.len()
        )
        .as_bytes(),
    )
    .expect("write");
    // The response names Content-Length in Connection too: the client still gets a delimited body.
    let resp = read_response(&mut r);
    assert_eq!(
        (resp.status, resp.body_text().as_str()),
        (200, "hello"),
        "{}",
        resp.raw
    );
    let s = seen(&seen_rx);
    assert!(s.head.starts_with("POST /outer "), "{}", s.head);
    assert_eq!(
        s.body,
        smuggled.as_bytes(),
        "the body went upstream as the body: {}",
        s.head
    );
    // The next request on the same connection is the next one the upstream sees: nothing was smuggled in between.
    w.write_all(format!("GET http://{up}/next HTTP/1.1\r\n{}\r\n", bearer()).as_bytes())
        .expect("write");
    assert_eq!(read_response(&mut r).status, 200);
    let next = seen(&seen_rx);
    assert!(
        next.head.starts_with("GET /next "),
        "the upstream saw a smuggled request: {}",
        next.head
    );
}

#[test]
fn every_request_on_a_kept_alive_connection_is_authenticated_on_its_own() {
    let (up, _seen) = http_upstream(ok_hello);
    let proxy = serve_token(&["--rule", "127.0.0.1", "--events", "-"]);
    let c = proxy.connect();
    let mut w = c.try_clone().expect("clone");
    let mut r = BufReader::new(c);
    // Each request is attributed to the node its own credentials name.
    for node in ["fetch", "plan"] {
        w.write_all(
            format!(
                "GET http://evil.test/{node} HTTP/1.1\r\n{}\r\n",
                basic(node, TOKEN)
            )
            .as_bytes(),
        )
        .expect("write");
        let resp = read_response(&mut r);
        assert_eq!(resp.status, 403, "{}", resp.raw);
        let ev = proxy.event();
        assert_eq!(ev["node_id"], node, "{ev}");
        // A refusal closes the connection; continue on a new one.
        let c = proxy.connect();
        w = c.try_clone().expect("clone");
        r = BufReader::new(c);
    }
    // Authenticated once is not authenticated for the next request.
    w.write_all(format!("GET http://{up}/1 HTTP/1.1\r\n{}\r\n", bearer()).as_bytes())
        .expect("write");
    assert_eq!(read_response(&mut r).status, 200);
    w.write_all(format!("GET http://{up}/2 HTTP/1.1\r\n\r\n").as_bytes())
        .expect("write");
    let resp = read_response(&mut r);
    assert_eq!(resp.status, 407, "{}", resp.raw);
}

#[test]
fn international_names_are_judged_in_their_ascii_form() {
    let up = peer();
    let port = up.port();
    let server = dns(&[("xn--bcher-kva.example", &["127.0.0.1"])]);
    let proxy = serve_token(&["--dns-server", &server]);
    let r = proxy.ask(&connect_req("Bücher.example.:443", &bearer()));
    assert_eq!(
        (r.status, r.json()["host"].as_str()),
        (403, Some("xn--bcher-kva.example")),
        "{}",
        r.raw
    );
    // N27: a rule in the ASCII form allows the Unicode spelling (with an explicit rule for its loopback address).
    let proxy = serve_token(&[
        "--dns-server",
        &server,
        "--rule",
        "xn--bcher-kva.example",
        "--rule",
        "127.0.0.1",
    ]);
    let mut c = proxy.connect();
    c.write_all(connect_req(&format!("bücher.example:{port}"), &bearer()).as_bytes())
        .expect("write");
    let _u = up.accept();
    let mut head = [0u8; 39];
    c.read_exact(&mut head).expect("answer");
    assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
}

#[test]
fn silent_deny_patterns_replace_the_default_list() {
    let proxy = serve_token(&["--silent-deny", "**.quiet.test", "--events", "-"]);
    for host in ["a.quiet.test", "statsig.anthropic.com"] {
        let r = proxy.ask(&connect_req(&format!("{host}:443"), &bearer()));
        assert_eq!(r.status, 403, "{host}: {}", r.raw);
    }
    let mut skipped = Vec::new();
    let ev = proxy.event_of("denied", &mut skipped);
    assert_eq!(
        ev["host"], "statsig.anthropic.com",
        "the default list is replaced: {ev}"
    );
    assert!(skipped.iter().all(|e| e["type"] != "denied"), "{skipped:?}");
}

#[test]
fn an_upstream_that_never_accepts_is_504_after_the_connect_timeout() {
    // A listener with a backlog of 0 whose queue is already full: further connection attempts get no answer.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    let full = rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4().expect("socket");
        s.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        s.listen(0).expect("listen")
    });
    let addr = full.local_addr().expect("addr");
    // Fill the queue until a connection attempt goes unanswered.
    let mut queued = Vec::new();
    while let Ok(c) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
        queued.push(c);
        assert!(queued.len() < 8, "the backlog never filled");
    }
    let proxy = serve_token(&["--rule", "127.0.0.1", "--connect-timeout", "1s", "--events", "-"]);
    let r = proxy.ask(&connect_req(&addr.to_string(), &bearer()));
    generated(&r, 504, "upstream_connect_timeout", "upstream connect timeout");
    assert!(r.has("x-iterion-decision-id"), "{}", r.raw);
    // No denied event: the next one is the marker's.
    let marker = proxy.ask(&connect_req("evil.test:443", &bearer()));
    let ev = proxy.event();
    assert_eq!(
        ev["decision_id"].as_str(),
        marker.header("x-iterion-decision-id"),
        "{ev}"
    );
    drop((queued, full, rt));
}
