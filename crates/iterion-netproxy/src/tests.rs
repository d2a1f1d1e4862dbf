//! Protocol tests (spec §18.5–§18.7, §18.10) on in-memory I/O: a scripted resolver, an in-memory connector and
//! `tokio::io::duplex` clients. Loopback tests of the public API live in `tests/`.

use crate::config::ProxyConfigBuilder;
use crate::net::{BoxIo, Connector, ResolveError, Resolver};
use crate::request::serve_connection;
use crate::shared::Shared;
use crate::{
    Credential, DecideOptions, Error, Policy, ProxyConfig, ProxyEvent, Target, base64_encode, decide,
};
use async_trait::async_trait;
use iterion_netpolicy::Mode;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, mpsc};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};
use tokio::sync::mpsc as tmpsc;
use tokio::time::Duration;

const RUN_TOKEN: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const FETCH_TOKEN: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

#[derive(Debug, Clone)]
enum Answer {
    Addrs(Vec<IpAddr>),
    NxDomain,
    Hang,
}

/// A resolver answering from a script: each host has a queue of answers; the last one repeats.
#[derive(Debug, Default)]
struct Scripted {
    answers: Mutex<HashMap<String, VecDeque<Answer>>>,
    calls: Mutex<Vec<String>>,
}

impl Scripted {
    fn with(script: &[(&str, &str)]) -> Arc<Self> {
        let s = Scripted::default();
        for (host, answer) in script {
            let a = match *answer {
                "NXDOMAIN" => Answer::NxDomain,
                "hang" => Answer::Hang,
                list => Answer::Addrs(list.split(',').filter_map(|a| a.trim().parse().ok()).collect()),
            };
            if let Ok(mut m) = s.answers.lock() {
                m.entry((*host).to_owned()).or_default().push_back(a);
            }
        }
        Arc::new(s)
    }

    fn calls(&self, host: &str) -> usize {
        self.calls
            .lock()
            .map(|c| c.iter().filter(|h| *h == host).count())
            .unwrap_or(0)
    }
}

#[async_trait]
impl Resolver for Scripted {
    async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        if let Ok(mut c) = self.calls.lock() {
            c.push(host.to_owned());
        }
        let answer = self.answers.lock().ok().and_then(|mut m| {
            let q = m.get_mut(host)?;
            if q.len() > 1 {
                q.pop_front()
            } else {
                q.front().cloned()
            }
        });
        match answer {
            Some(Answer::Addrs(a)) => Ok(a),
            Some(Answer::Hang) => std::future::pending().await,
            Some(Answer::NxDomain) | None => Err(ResolveError::NoAddress {
                host: host.to_owned(),
            }),
        }
    }
}

/// A connector handing the upstream end of an in-memory pipe to the test.
#[derive(Debug)]
struct MemConnector {
    dialled: Mutex<Vec<SocketAddr>>,
    refuse: Vec<IpAddr>,
    hang: bool,
    tx: tmpsc::UnboundedSender<(SocketAddr, DuplexStream)>,
}

#[async_trait]
impl Connector for MemConnector {
    async fn connect(&self, addr: SocketAddr) -> io::Result<BoxIo> {
        if let Ok(mut d) = self.dialled.lock() {
            d.push(addr);
        }
        if self.hang {
            std::future::pending::<()>().await;
        }
        if self.refuse.contains(&addr.ip()) {
            return Err(io::ErrorKind::ConnectionRefused.into());
        }
        let (ours, theirs) = duplex(64 * 1024);
        let _ = self.tx.send((addr, theirs));
        Ok(Box::new(ours))
    }
}

struct Harness {
    sh: Arc<Shared>,
    resolver: Arc<Scripted>,
    connector: Arc<MemConnector>,
    upstreams: tmpsc::UnboundedReceiver<(SocketAddr, DuplexStream)>,
    events: mpsc::Receiver<ProxyEvent>,
}

struct Setup {
    mode: Mode,
    rules: Vec<&'static str>,
    script: Vec<(&'static str, &'static str)>,
    refuse: Vec<IpAddr>,
    hang: bool,
    tweak: fn(ProxyConfigBuilder) -> ProxyConfigBuilder,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            mode: Mode::Allowlist,
            rules: vec!["allowed.test", "a.example", "flip.example", "two.example"],
            script: vec![
                ("allowed.test", "93.184.216.34"),
                ("a.example", "93.184.216.34"),
                ("flip.example", "93.184.216.34"),
                ("flip.example", "127.0.0.1"),
                ("two.example", "2606:4700::1, 93.184.216.34"),
            ],
            refuse: Vec::new(),
            hang: false,
            tweak: |b| b,
        }
    }
}

fn policy(mode: Mode, rules: &[&str]) -> Arc<Policy> {
    match Policy::compile(mode, &[], rules) {
        Ok(p) => Arc::new(p),
        Err(e) => panic!("test policy does not compile: {e:?}"),
    }
}

fn harness(setup: Setup) -> Harness {
    let resolver = Scripted::with(&setup.script);
    let (tx, upstreams) = tmpsc::unbounded_channel();
    let connector = Arc::new(MemConnector {
        dialled: Mutex::new(Vec::new()),
        refuse: setup.refuse,
        hang: setup.hang,
        tx,
    });
    let (etx, events) = mpsc::channel();
    let etx = Mutex::new(etx);
    let p = policy(setup.mode, &setup.rules);
    let builder = ProxyConfig::builder()
        .credential(Credential::new("run", RUN_TOKEN, None, p.clone()))
        .credential(Credential::new("fetch", FETCH_TOKEN, Some("fetch".into()), p))
        .resolver(resolver.clone())
        .connector(connector.clone())
        .on_event(move |ev| {
            if let Ok(t) = etx.lock() {
                let _ = t.send(ev);
            }
        });
    let config = match (setup.tweak)(builder).build() {
        Ok(c) => c,
        Err(e) => panic!("test config invalid: {e}"),
    };
    let sh = match Shared::new(
        config,
        vec![
            "127.0.0.1:3128"
                .parse()
                .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
        ],
    ) {
        Ok(s) => s,
        Err(e) => panic!("shared: {e}"),
    };
    Harness {
        sh,
        resolver,
        connector,
        upstreams,
        events,
    }
}

impl Harness {
    /// A new client connection served by the proxy.
    fn client(&self) -> DuplexStream {
        let (client, server) = duplex(64 * 1024);
        tokio::spawn(serve_connection(self.sh.clone(), server));
        client
    }

    fn dialled(&self) -> Vec<SocketAddr> {
        self.connector
            .dialled
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default()
    }

    /// Events received so far (waits briefly for the event thread).
    fn events(&self) -> Vec<ProxyEvent> {
        let mut out = Vec::new();
        while let Ok(ev) = self.events.recv_timeout(Duration::from_millis(200)) {
            out.push(ev);
        }
        out
    }
}

fn bearer(token: &str) -> String {
    format!("Proxy-Authorization: Bearer {token}\r\n")
}

fn basic(user_pass: &str) -> String {
    format!(
        "Proxy-Authorization: Basic {}\r\n",
        base64_encode(user_pass.as_bytes())
    )
}

/// Send `request`, read until the proxy closes, return the response text.
async fn exchange(h: &Harness, request: &str) -> String {
    let mut c = h.client();
    let _ = c.write_all(request.as_bytes()).await;
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn status(resp: &str) -> &str {
    resp.get(9..12).unwrap_or("")
}

fn body(resp: &str) -> serde_json::Value {
    resp.split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or_default()
}

fn header<'a>(resp: &'a str, name: &str) -> Option<&'a str> {
    let head = resp.split_once("\r\n\r\n").map(|(h, _)| h).unwrap_or(resp);
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Read from `io` until `n` bytes or end of file.
async fn read_n(io: &mut DuplexStream, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match io.read(&mut out[got..]).await {
            Ok(0) | Err(_) => break,
            Ok(k) => got += k,
        }
    }
    out.truncate(got);
    out
}

async fn read_head(io: &mut DuplexStream) -> String {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while !out.ends_with(b"\r\n\r\n") {
        match io.read(&mut b).await {
            Ok(1) => out.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

// §18.5: two-stage decisions with a scripted resolver.

async fn check_decide(mode: Mode, rules: &[&str], target: &str, answer: &str, expect: &str) {
    let p = policy(mode, rules);
    let host = target
        .rsplit_once(':')
        .map(|(h, _)| h.trim_matches(['[', ']']))
        .unwrap_or(target);
    let resolver = Scripted::with(&[(host, answer)]);
    let Ok(t) = Target::parse(target, None) else {
        panic!("target {target}")
    };
    let options = DecideOptions {
        own_listen: vec![SocketAddr::from(([127, 0, 0, 1], 3128))],
        ..DecideOptions::default()
    };
    let got = match decide(&p, &t, Some(resolver.as_ref()), &options).await {
        Ok(d) => d.to_string(),
        Err(e) => format!("error {} {e}", e.status()),
    };
    assert_eq!(got, expect, "{mode:?} {rules:?} {target} -> {answer}");
}

#[tokio::test(start_paused = true)]
async fn two_stage_decisions() {
    use Mode::{Allowlist as A, Denylist as D, Open as O};
    let nga = r#"reason="non-global address" rule="non-global address""#;
    check_decide(
        A,
        &["**"],
        "metadata.google.internal:80",
        "169.254.169.254",
        &format!("deny metadata.google.internal:80 {nga} address=169.254.169.254"),
    )
    .await;
    check_decide(
        A,
        &["**"],
        "rebind.example:443",
        "93.184.216.34,127.0.0.1",
        &format!("deny rebind.example:443 {nga} address=127.0.0.1"),
    )
    .await;
    check_decide(
        A,
        &["**"],
        "public.example:443",
        "93.184.216.34",
        r#"allow public.example:443 rule="**""#,
    )
    .await;
    check_decide(
        A,
        &["**"],
        "v6.example:443",
        "::ffff:10.0.0.5",
        &format!("deny v6.example:443 {nga} address=10.0.0.5"),
    )
    .await;
    check_decide(
        A,
        &["**"],
        "nat64.example:443",
        "64:ff9b::a9fe:a9fe",
        &format!("deny nat64.example:443 {nga} address=64:ff9b::a9fe:a9fe"),
    )
    .await;
    check_decide(
        A,
        &["internal.acme.dev", "10.0.0.0/8"],
        "internal.acme.dev:443",
        "10.1.2.3",
        r#"allow internal.acme.dev:443 rule="internal.acme.dev""#,
    )
    .await;
    check_decide(
        A,
        &["internal.acme.dev", "0.0.0.0/0"],
        "internal.acme.dev:443",
        "10.1.2.3",
        &format!("deny internal.acme.dev:443 {nga} address=10.1.2.3"),
    )
    .await;
    check_decide(
        A,
        &["internal.acme.dev", "169.254.0.0/16"],
        "internal.acme.dev:80",
        "169.254.169.254",
        &format!("deny internal.acme.dev:80 {nga} address=169.254.169.254"),
    )
    .await;
    check_decide(
        A,
        &["internal.acme.dev", "169.254.169.254"],
        "internal.acme.dev:80",
        "169.254.169.254",
        r#"allow internal.acme.dev:80 rule="internal.acme.dev""#,
    )
    .await;
    check_decide(
        D,
        &[],
        "169.254.169.254:80",
        "",
        &format!("deny 169.254.169.254:80 {nga} address=169.254.169.254"),
    )
    .await;
    check_decide(
        D,
        &[],
        "127.1:8080",
        "",
        &format!("deny 127.0.0.1:8080 {nga} address=127.0.0.1"),
    )
    .await;
    check_decide(
        D,
        &["!140.82.0.0/16"],
        "github.com:443",
        "140.82.112.3",
        r#"deny github.com:443 reason="policy denial" rule="!140.82.0.0/16" address=140.82.112.3"#,
    )
    .await;
    check_decide(
        O,
        &[],
        "localhost:8080",
        "127.0.0.1",
        &format!("deny localhost:8080 {nga} address=127.0.0.1"),
    )
    .await;
    check_decide(
        A,
        &["127.0.0.1"],
        "127.0.0.1:8080",
        "",
        r#"allow 127.0.0.1:8080 rule="127.0.0.1""#,
    )
    .await;
    check_decide(
        A,
        &["10.0.0.0/8:5432"],
        "10.0.0.5:5432",
        "",
        r#"allow 10.0.0.5:5432 rule="10.0.0.0/8:5432""#,
    )
    .await;
    check_decide(
        A,
        &["10.0.0.0/8:5432"],
        "10.0.0.5:22",
        "",
        r#"deny 10.0.0.5:22 reason="policy denial" rule="no rule matched""#,
    )
    .await;
    check_decide(
        A,
        &["outside.test", "172.17.0.0/16"],
        "outside.test:8080",
        "172.17.0.2",
        r#"allow outside.test:8080 rule="outside.test""#,
    )
    .await;
    check_decide(
        A,
        &["**"],
        "nxdomain.example:443",
        "NXDOMAIN",
        "error 502 dns resolution failed",
    )
    .await;
    check_decide(A, &["**"], "slow.example:443", "hang", "error 504 dns timeout").await;
    check_decide(
        A,
        &["**", "0.0.0.0/0"],
        "127.0.0.1:3128",
        "",
        &format!("deny 127.0.0.1:3128 {nga} address=127.0.0.1"),
    )
    .await;
    // Self-connection even where loopback is explicitly allowed.
    check_decide(
        A,
        &["127.0.0.0/8"],
        "127.0.0.1:3128",
        "",
        &format!("deny 127.0.0.1:3128 {nga} address=127.0.0.1"),
    )
    .await;
    check_decide(
        A,
        &["127.0.0.0/8"],
        "127.0.0.1:3129",
        "",
        r#"allow 127.0.0.1:3129 rule="127.0.0.0/8""#,
    )
    .await;
}

#[tokio::test]
async fn s18_nxdomain_through_the_proxy_is_502_with_a_dns_event() {
    let h = harness(Setup {
        rules: vec!["**"],
        script: vec![("nxdomain.example", "NXDOMAIN")],
        ..Setup::default()
    });
    let r = exchange(
        &h,
        &format!(
            "CONNECT nxdomain.example:443 HTTP/1.1\r\n{}\r\n",
            bearer(RUN_TOKEN)
        ),
    )
    .await;
    assert_eq!(
        (status(&r), body(&r)["error"].as_str()),
        ("502", Some("dns_failed"))
    );
    assert_eq!(header(&r, "X-Iterion-Reason"), Some("dns resolution failed"));
    // not a policy decision, but reported and counted: an operator sees why the request was not served
    let events = h.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        matches!(&events[0], ProxyEvent::DnsFailed { host, port: 443, code, .. } if host == "nxdomain.example" && code == "dns_failed"),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn s19_dns_timeout_is_504() {
    let h = harness(Setup {
        rules: vec!["**"],
        script: vec![("slow.example", "hang")],
        ..Setup::default()
    });
    let r = exchange(
        &h,
        &format!("CONNECT slow.example:443 HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN)),
    )
    .await;
    assert_eq!(
        (status(&r), header(&r, "X-Iterion-Reason")),
        ("504", Some("dns timeout"))
    );
}

// §18.6: protocol, byte-exact where the spec says so.

#[tokio::test]
async fn p1_p2_connect_established_and_early_bytes_first() {
    let mut h = harness(Setup::default());
    let mut c = h.client();
    let req = format!(
        "CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n{}\r\nhello",
        bearer(RUN_TOKEN)
    );
    let _ = c.write_all(req.as_bytes()).await;
    let established = read_n(&mut c, crate::CONNECT_ESTABLISHED.len()).await;
    assert_eq!(established, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    let Some((addr, mut up)) = h.upstreams.recv().await else {
        panic!("no upstream")
    };
    assert_eq!(addr, "93.184.216.34:443".parse().unwrap_or(addr));
    assert_eq!(read_n(&mut up, 5).await, b"hello");
    let _ = c.write_all(b" world").await;
    assert_eq!(read_n(&mut up, 6).await, b" world");
    let _ = up.write_all(b"back").await;
    assert_eq!(read_n(&mut c, 4).await, b"back");
}

#[tokio::test]
async fn p3_denied_connect_is_403_and_never_dials() {
    let h = harness(Setup::default());
    let r = exchange(
        &h,
        &format!(
            "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n{}\r\n",
            bearer(RUN_TOKEN)
        ),
    )
    .await;
    let b = body(&r);
    assert_eq!(status(&r), "403");
    assert_eq!(
        (b["reason"].as_str(), b["rule"].as_str()),
        (Some("policy denial"), Some("no rule matched"))
    );
    assert_eq!(
        (b["host"].as_str(), b["port"].as_u64()),
        (Some("evil.test"), Some(443))
    );
    let id = header(&r, "X-Iterion-Decision-Id").unwrap_or_default();
    assert_eq!(b["decision_id"].as_str(), Some(id));
    let head = r
        .split_once("\r\n\r\n")
        .map(|(h, _)| h.to_owned())
        .unwrap_or_default();
    let expected = format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nConnection: close\r\nX-Iterion-Reason: policy denial\r\nX-Iterion-Decision-Id: {id}"
    );
    assert_eq!(head, expected);
    assert!(h.dialled().is_empty());
    assert_eq!(
        h.resolver.calls("evil.test"),
        0,
        "a name-stage denial does not resolve"
    );
}

async fn check_status(request: &str, expect: &str) {
    let h = harness(Setup::default());
    let r = exchange(&h, request).await;
    let got = format!("{} {}", status(&r), body(&r)["error"].as_str().unwrap_or("-"));
    assert_eq!(got, expect, "{request:?} -> {r}");
    assert!(h.dialled().is_empty(), "{request:?} must not dial");
}

#[tokio::test]
async fn refusals_before_any_decision() {
    let t = bearer(RUN_TOKEN);
    let f = basic(&format!("fetch:{FETCH_TOKEN}"));
    check_status(
        &format!("CONNECT allowed.test HTTP/1.1\r\n{t}\r\n"),
        "400 invalid_target",
    )
    .await; // P4
    check_status(
        "CONNECT allowed.test:443 HTTP/1.1\r\n\r\n",
        "407 proxy_auth_required",
    )
    .await; // P5
    check_status(
        &format!(
            "CONNECT allowed.test:443 HTTP/1.1\r\n{}\r\n",
            basic(&format!("fetch:{RUN_TOKEN}"))
        ),
        "407 proxy_auth_required",
    )
    .await; // P8
    check_status(
        &format!("CONNECT allowed.test:443 HTTP/1.1\r\n{}\r\n", basic(RUN_TOKEN)),
        "407 proxy_auth_required",
    )
    .await; // P9
    check_status(
        &format!("CONNECT allowed.test:443 HTTP/1.1\r\n{t}{f}\r\n"),
        "407 proxy_auth_required",
    )
    .await; // P10
    check_status(
        "CONNECT allowed.test:443 HTTP/1.1\r\nProxy-Authorization: Digest x\r\n\r\n",
        "407 proxy_auth_required",
    )
    .await;
    check_status(
        &format!("GET https://allowed.test/ HTTP/1.1\r\n{t}\r\n"),
        "400 https_absolute_form",
    )
    .await; // P12
    check_status(
        &format!("GET /x HTTP/1.1\r\nHost: allowed.test\r\n{t}\r\n"),
        "400 not_a_proxy_request",
    )
    .await; // P13
    check_status(
        &format!("GET ftp://allowed.test/ HTTP/1.1\r\n{t}\r\n"),
        "400 unsupported_scheme",
    )
    .await; // P14
    check_status(
        &format!("GET http://u:p@allowed.test/ HTTP/1.1\r\n{t}\r\n"),
        "400 bad_request",
    )
    .await; // P15
    check_status(
        &format!(
            "POST http://allowed.test/ HTTP/1.1\r\n{t}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        ),
        "400 bad_request",
    )
    .await; // P16
    check_status(
        &format!("GET http://allowed.test/ HTTP/1.1\r\n{t}Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
        "501 upgrade_not_supported",
    )
    .await; // P21
    check_status("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "400 bad_request").await; // P22
    check_status(
        &format!("OPTIONS * HTTP/1.1\r\n{t}\r\n"),
        "400 not_a_proxy_request",
    )
    .await;
    check_status(
        &format!("CONNECT allowed.test:443 HTTP/1.1\r\n{t}Content-Length: 3\r\n\r\nabc"),
        "400 bad_request",
    )
    .await;
    check_status(
        &format!("CONNECT bad..host:443 HTTP/1.1\r\n{t}\r\n"),
        "400 invalid_target",
    )
    .await;
    check_status(
        &format!("CONNECT allowed.test:0443 HTTP/1.1\r\n{t}\r\n"),
        "400 invalid_target",
    )
    .await;
    check_status(
        &format!("GET http://allowed.test/ HTTP/1.1\r\n{t}X: a\r\n b\r\n\r\n"),
        "400 bad_request",
    )
    .await;
    check_status(
        &format!("GET http://allowed.test/ HTTP/1.1\r\n{t}Content-Length: 1, 2\r\n\r\n"),
        "400 bad_request",
    )
    .await;
    check_status(
        &format!("GET http://allowed.test/ HTTP/1.1\r\n{t}Transfer-Encoding: gzip\r\n\r\n"),
        "400 bad_request",
    )
    .await;
    // P17, P18: size limits.
    check_status(
        &format!(
            "CONNECT allowed.test:443 HTTP/1.1\r\n{t}X: {}\r\n\r\n",
            "a".repeat(40 * 1024)
        ),
        "431 head_too_large",
    )
    .await;
    let many: String = (0..101).map(|i| format!("X-{i}: v\r\n")).collect();
    check_status(
        &format!("CONNECT allowed.test:443 HTTP/1.1\r\n{many}\r\n"),
        "431 head_too_large",
    )
    .await;
}

#[tokio::test]
async fn p5_auth_required_is_byte_exact_and_reported() {
    let h = harness(Setup::default());
    let r = exchange(&h, "CONNECT allowed.test:443 HTTP/1.1\r\n\r\n").await;
    insta::assert_snapshot!(r);
    let events = h.events();
    assert_eq!(
        events,
        vec![ProxyEvent::AuthFailed {
            scheme: String::new(),
            username: None
        }]
    ); // E5
    assert_eq!(h.sh.counters.snapshot().auth_failures, 1);
}

async fn check_auth_accepted(auth: &str, node: Option<&str>) {
    let h = harness(Setup::default());
    // A denied target: the 403's event carries the credential, no upstream is needed.
    let r = exchange(&h, &format!("CONNECT evil.test:443 HTTP/1.1\r\n{auth}\r\n")).await;
    assert_eq!(status(&r), "403", "{auth}");
    let node_seen = h.events().into_iter().find_map(|e| match e {
        ProxyEvent::Denied(d) => Some(d.node_id),
        _ => None,
    });
    assert_eq!(node_seen, Some(node.map(str::to_owned)), "{auth}");
}

#[tokio::test]
async fn accepted_authorizations() {
    check_auth_accepted(&bearer(RUN_TOKEN), None).await;
    check_auth_accepted(&format!("Proxy-Authorization: bearer {RUN_TOKEN}\r\n"), None).await; // P6
    check_auth_accepted(
        &format!("Proxy-Authorization:   BEARER   {RUN_TOKEN}  \r\n"),
        None,
    )
    .await;
    check_auth_accepted(&basic(&format!("fetch:{FETCH_TOKEN}")), Some("fetch")).await; // P7
    check_auth_accepted(&basic(&format!("run:{RUN_TOKEN}")), None).await;
}

#[tokio::test]
async fn p11_forward_rewrites_the_request_and_relays_the_response() {
    let mut h = harness(Setup::default());
    let mut c = h.client();
    let req = format!(
        "GET http://allowed.test/x HTTP/1.1\r\nHost: other\r\n{}Connection: close, X-Hop\r\nX-Hop: 1\r\n\r\n",
        bearer(RUN_TOKEN)
    );
    let _ = c.write_all(req.as_bytes()).await;
    let Some((addr, mut up)) = h.upstreams.recv().await else {
        panic!("no upstream")
    };
    assert_eq!(addr.port(), 80);
    assert_eq!(
        read_head(&mut up).await,
        "GET /x HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
    );
    let _ = up
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=5\r\nX-Up: 1\r\n\r\nok")
        .await;
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out).await;
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Up: 1\r\nConnection: close\r\n\r\nok"
    );
}

#[tokio::test]
async fn forward_streams_chunked_bodies_both_ways() {
    let mut h = harness(Setup::default());
    let mut c = h.client();
    let req = format!(
        "POST http://allowed.test:8080/up HTTP/1.1\r\n{}Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        bearer(RUN_TOKEN)
    );
    let _ = c.write_all(req.as_bytes()).await;
    let Some((_, mut up)) = h.upstreams.recv().await else {
        panic!("no upstream")
    };
    let head = read_head(&mut up).await;
    assert_eq!(
        head,
        "POST /up HTTP/1.1\r\nHost: allowed.test:8080\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    assert_eq!(read_n(&mut up, 13).await, b"3\r\nabc\r\n0\r\n\r\n");
    let _ = up
        .write_all(b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
        .await;
    let expect = "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
    assert_eq!(
        String::from_utf8_lossy(&read_n(&mut c, expect.len()).await),
        expect
    );
}

#[tokio::test]
async fn forward_relays_100_continue() {
    let mut h = harness(Setup::default());
    let mut c = h.client();
    let req = format!(
        "PUT http://allowed.test/f HTTP/1.1\r\n{}Expect: 100-continue\r\nContent-Length: 4\r\n\r\n",
        bearer(RUN_TOKEN)
    );
    let _ = c.write_all(req.as_bytes()).await;
    let Some((_, mut up)) = h.upstreams.recv().await else {
        panic!("no upstream")
    };
    let head = read_head(&mut up).await;
    assert!(head.contains("Expect: 100-continue\r\n"), "{head}");
    let _ = up.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
    assert_eq!(read_head(&mut c).await, "HTTP/1.1 100 Continue\r\n\r\n");
    let _ = c.write_all(b"data").await;
    assert_eq!(read_n(&mut up, 4).await, b"data");
    let _ = up.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await;
    assert_eq!(read_head(&mut c).await, "HTTP/1.1 204 No Content\r\n\r\n");
}

#[tokio::test(start_paused = true)]
async fn p19_slow_head_gets_408_and_others_are_served() {
    let h = harness(Setup::default());
    let mut slow = h.client();
    let _ = slow.write_all(b"CONNECT allowed.test:443 HTTP/1.1\r\n").await;
    let r = exchange(
        &h,
        &format!("CONNECT evil.test:443 HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN)),
    )
    .await;
    assert_eq!(status(&r), "403", "another client is served while one trickles");
    let mut out = Vec::new();
    let _ = slow.read_to_end(&mut out).await;
    let out = String::from_utf8_lossy(&out);
    assert_eq!(
        (status(&out), body(&out)["error"].as_str()),
        ("408", Some("request_timeout"))
    );
}

#[tokio::test]
async fn p20_too_many_tunnels_is_429() {
    let mut h = harness(Setup::default());
    let req = format!("CONNECT allowed.test:443 HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN));
    let mut open = Vec::new();
    for _ in 0..1024 {
        let mut c = h.client();
        let _ = c.write_all(req.as_bytes()).await;
        assert_eq!(
            read_n(&mut c, crate::CONNECT_ESTABLISHED.len()).await,
            crate::CONNECT_ESTABLISHED
        );
        open.push((c, h.upstreams.recv().await));
    }
    let r = exchange(&h, &req).await;
    assert_eq!((status(&r), header(&r, "Retry-After")), ("429", Some("1")));
    assert_eq!(body(&r)["error"].as_str(), Some("too_many_tunnels"));
    // Closing one tunnel frees a slot.
    drop(open.pop());
    let mut c = h.client();
    let _ = c.write_all(req.as_bytes()).await;
    let mut got = read_n(&mut c, crate::CONNECT_ESTABLISHED.len()).await;
    for _ in 0..100 {
        if got == crate::CONNECT_ESTABLISHED {
            break;
        }
        tokio::task::yield_now().await;
        c = h.client();
        let _ = c.write_all(req.as_bytes()).await;
        got = read_n(&mut c, crate::CONNECT_ESTABLISHED.len()).await;
    }
    assert_eq!(got, crate::CONNECT_ESTABLISHED);
}

#[tokio::test]
async fn p23_upstream_refuses_is_502_without_denial() {
    let h = harness(Setup {
        refuse: vec!["93.184.216.34".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))],
        ..Setup::default()
    });
    let r = exchange(
        &h,
        &format!("CONNECT allowed.test:443 HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN)),
    )
    .await;
    assert_eq!(
        (status(&r), body(&r)["error"].as_str()),
        ("502", Some("upstream_connect_failed"))
    );
    assert!(header(&r, "X-Iterion-Decision-Id").is_some());
    assert!(!h.events().iter().any(|e| matches!(e, ProxyEvent::Denied(_))));
}

#[tokio::test(start_paused = true)]
async fn p24_upstream_never_accepts_is_504() {
    let h = harness(Setup {
        hang: true,
        ..Setup::default()
    });
    let r = exchange(
        &h,
        &format!("CONNECT allowed.test:443 HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN)),
    )
    .await;
    assert_eq!(
        (status(&r), body(&r)["error"].as_str()),
        ("504", Some("upstream_connect_timeout"))
    );
}

#[tokio::test(start_paused = true)]
async fn p25_idle_tunnel_is_closed_with_event() {
    let mut h = harness(Setup::default());
    let mut c = h.client();
    let _ = c
        .write_all(format!("CONNECT allowed.test:443 HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN)).as_bytes())
        .await;
    assert_eq!(
        read_n(&mut c, crate::CONNECT_ESTABLISHED.len()).await,
        crate::CONNECT_ESTABLISHED
    );
    let Some((_, mut up)) = h.upstreams.recv().await else {
        panic!("no upstream")
    };
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest).await; // returns once the proxy closes after 10 min idle
    let mut up_rest = Vec::new();
    let _ = up.read_to_end(&mut up_rest).await;
    assert_eq!((rest.len(), up_rest.len()), (0, 0));
    let closed = h.events().into_iter().find_map(|e| match e {
        ProxyEvent::TunnelClosed { close_reason, .. } => Some(close_reason),
        _ => None,
    });
    assert_eq!(closed.as_deref(), Some("idle"));
}

#[tokio::test]
async fn p26_half_close_through_the_proxy() {
    let mut h = harness(Setup::default());
    let mut c = h.client();
    let _ = c
        .write_all(format!("CONNECT allowed.test:443 HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN)).as_bytes())
        .await;
    assert_eq!(
        read_n(&mut c, crate::CONNECT_ESTABLISHED.len()).await,
        crate::CONNECT_ESTABLISHED
    );
    let Some((_, mut up)) = h.upstreams.recv().await else {
        panic!("no upstream")
    };
    let _ = c.write_all(b"ping").await;
    let _ = c.shutdown().await;
    let mut got = Vec::new();
    let _ = up.read_to_end(&mut got).await;
    assert_eq!(got, b"ping");
    let _ = up.write_all(b"pong").await;
    let _ = up.shutdown().await;
    let mut back = Vec::new();
    let _ = c.read_to_end(&mut back).await;
    assert_eq!(back, b"pong");
}

#[tokio::test]
async fn p28_keep_alive_each_request_decided_on_its_own() {
    let mut h = harness(Setup::default());
    let mut c = h.client();
    let t = bearer(RUN_TOKEN);
    let _ = c
        .write_all(format!("GET http://allowed.test/1 HTTP/1.1\r\n{t}\r\n").as_bytes())
        .await;
    let Some((_, mut up)) = h.upstreams.recv().await else {
        panic!("no upstream")
    };
    assert_eq!(
        read_head(&mut up).await,
        "GET /1 HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
    );
    let _ = up
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        .await;
    assert_eq!(
        read_head(&mut c).await,
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
    );
    assert_eq!(read_n(&mut c, 2).await, b"ok");
    let _ = c
        .write_all(format!("GET http://evil.test/2 HTTP/1.1\r\n{t}\r\n").as_bytes())
        .await;
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out).await;
    let out = String::from_utf8_lossy(&out);
    assert_eq!(status(&out), "403");
    let denied_id = body(&out)["decision_id"].as_str().map(str::to_owned);
    let ids: Vec<String> = h
        .events()
        .into_iter()
        .filter_map(|e| match e {
            ProxyEvent::Denied(d) => Some(d.decision_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 1);
    assert_eq!(Some(ids[0].clone()), denied_id);
    assert_eq!(h.sh.counters.snapshot().allowed, 1);
}

// §18.7: pinned dial.

#[tokio::test]
async fn pd1_resolver_flip_does_not_change_the_dialled_address() {
    let mut h = harness(Setup::default());
    let mut c = h.client();
    let _ = c
        .write_all(format!("CONNECT flip.example:443 HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN)).as_bytes())
        .await;
    assert_eq!(
        read_n(&mut c, crate::CONNECT_ESTABLISHED.len()).await,
        crate::CONNECT_ESTABLISHED
    );
    let Some((addr, _up)) = h.upstreams.recv().await else {
        panic!("no upstream")
    };
    assert_eq!(addr.to_string(), "93.184.216.34:443");
    assert_eq!(
        h.dialled().iter().map(ToString::to_string).collect::<Vec<_>>(),
        vec!["93.184.216.34:443"]
    );
    assert_eq!(h.resolver.calls("flip.example"), 1);
}

#[tokio::test]
async fn pd2_first_address_refuses_second_is_dialled() {
    let mut h = harness(Setup {
        refuse: vec!["2606:4700::1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))],
        ..Setup::default()
    });
    let mut c = h.client();
    let _ = c
        .write_all(format!("CONNECT two.example:443 HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN)).as_bytes())
        .await;
    assert_eq!(
        read_n(&mut c, crate::CONNECT_ESTABLISHED.len()).await,
        crate::CONNECT_ESTABLISHED
    );
    let Some((addr, _up)) = h.upstreams.recv().await else {
        panic!("no upstream")
    };
    assert_eq!(addr.to_string(), "93.184.216.34:443");
    assert_eq!(
        h.dialled().iter().map(ToString::to_string).collect::<Vec<_>>(),
        vec!["[2606:4700::1]:443", "93.184.216.34:443"]
    );
}

#[tokio::test]
async fn pd2_one_refused_address_refuses_before_any_dial() {
    let h = harness(Setup {
        script: vec![("two.example", "93.184.216.34, 10.0.0.1")],
        ..Setup::default()
    });
    let r = exchange(
        &h,
        &format!("CONNECT two.example:443 HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN)),
    )
    .await;
    assert_eq!(
        (status(&r), body(&r)["address"].as_str()),
        ("403", Some("10.0.0.1"))
    );
    assert!(h.dialled().is_empty());
}

#[tokio::test]
async fn pd3_pooled_connection_not_reused_for_a_refused_answer() {
    let mut h = harness(Setup {
        script: vec![("a.example", "93.184.216.34"), ("a.example", "10.0.0.1")],
        ..Setup::default()
    });
    let t = bearer(RUN_TOKEN);
    let mut c = h.client();
    let _ = c
        .write_all(format!("GET http://a.example/1 HTTP/1.1\r\n{t}\r\n").as_bytes())
        .await;
    let Some((_, mut up)) = h.upstreams.recv().await else {
        panic!("no upstream")
    };
    let _ = read_head(&mut up).await;
    let _ = up
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        .await;
    assert_eq!(
        read_head(&mut c).await,
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    );
    for _ in 0..100 {
        if h.sh.pool.len() == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(h.sh.pool.len(), 1, "the first upstream connection is pooled");
    let _ = c
        .write_all(format!("GET http://a.example/2 HTTP/1.1\r\n{t}\r\n").as_bytes())
        .await;
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out).await;
    let out = String::from_utf8_lossy(&out);
    assert_eq!(
        (status(&out), body(&out)["reason"].as_str()),
        ("403", Some("non-global address"))
    );
    let mut leftover = Vec::new();
    h.sh.pool.clear();
    let _ = up.read_to_end(&mut leftover).await;
    assert!(
        leftover.is_empty(),
        "nothing of the second request reached the pooled connection"
    );
    assert_eq!(h.dialled().len(), 1);
}

// §18.10: events.

#[tokio::test]
async fn e1_denial_by_node_carries_credential_and_decision_id() {
    let h = harness(Setup::default());
    let r = exchange(
        &h,
        &format!(
            "CONNECT evil.test:443 HTTP/1.1\r\n{}\r\n",
            basic(&format!("fetch:{FETCH_TOKEN}"))
        ),
    )
    .await;
    let id = body(&r)["decision_id"].as_str().map(str::to_owned);
    let events = h.events();
    let [ProxyEvent::Denied(d)] = events.as_slice() else {
        panic!("want one Denied, got {events:?}")
    };
    assert_eq!(
        (
            d.node_id.as_deref(),
            d.username.as_str(),
            Some(d.decision_id.to_string()),
            d.method.as_str(),
            d.mode.as_str()
        ),
        (Some("fetch"), "fetch", id, "CONNECT", "allowlist")
    );
}

#[tokio::test]
async fn e2_silent_denial_is_counted_not_reported() {
    let h = harness(Setup::default());
    let r = exchange(
        &h,
        &format!(
            "CONNECT statsig.anthropic.com:443 HTTP/1.1\r\n{}\r\n",
            bearer(RUN_TOKEN)
        ),
    )
    .await;
    assert_eq!(status(&r), "403");
    let events = h.events();
    assert!(
        !events.iter().any(|e| matches!(e, ProxyEvent::Denied(_))),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ProxyEvent::SilentDenied { .. }))
    );
    assert_eq!(
        h.sh.counters
            .snapshot()
            .silent_denied
            .get("statsig.anthropic.com"),
        Some(&1)
    );
}

#[tokio::test]
async fn e3_silent_deny_never_changes_a_decision() {
    let mut h = harness(Setup {
        rules: vec!["statsig.anthropic.com"],
        script: vec![("statsig.anthropic.com", "93.184.216.34")],
        ..Setup::default()
    });
    let mut c = h.client();
    let _ = c
        .write_all(
            format!(
                "CONNECT statsig.anthropic.com:443 HTTP/1.1\r\n{}\r\n",
                bearer(RUN_TOKEN)
            )
            .as_bytes(),
        )
        .await;
    assert_eq!(
        read_n(&mut c, crate::CONNECT_ESTABLISHED.len()).await,
        crate::CONNECT_ESTABLISHED
    );
    assert!(h.upstreams.recv().await.is_some());
}

#[tokio::test]
async fn e4_blocked_consumer_never_blocks_traffic() {
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let gate = Mutex::new(gate_rx);
    let p = policy(Mode::Allowlist, &[]);
    let config = ProxyConfig::builder()
        .credential(Credential::new("run", RUN_TOKEN, None, p))
        .resolver(Scripted::with(&[]))
        .on_event(move |_| {
            let _ = gate.lock().map(|g| g.recv());
        })
        .build();
    let Ok(config) = config else { panic!("config") };
    let Ok(sh) = Shared::new(config, Vec::new()) else {
        panic!("shared")
    };
    let req = format!("CONNECT evil.test:443 HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN));
    for _ in 0..10_000 {
        let (mut client, server) = duplex(4096);
        tokio::spawn(serve_connection(sh.clone(), server));
        let _ = client.write_all(req.as_bytes()).await;
        let mut out = Vec::new();
        let _ = client.read_to_end(&mut out).await;
        assert_eq!(out.get(9..12), Some(&b"403"[..]));
    }
    let stats = sh.counters.snapshot();
    assert!(stats.events_dropped > 0);
    assert_eq!(stats.denied.get("policy denial"), Some(&10_000));
    drop(gate_tx);
}

#[tokio::test]
async fn report_allowed_emits_allowed_events() {
    let mut h = harness(Setup {
        tweak: |b| b.report_allowed(true),
        ..Setup::default()
    });
    let mut c = h.client();
    let _ = c
        .write_all(format!("CONNECT allowed.test:443 HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN)).as_bytes())
        .await;
    assert_eq!(
        read_n(&mut c, crate::CONNECT_ESTABLISHED.len()).await,
        crate::CONNECT_ESTABLISHED
    );
    let _up = h.upstreams.recv().await;
    let allowed = h.events().into_iter().find_map(|e| match e {
        ProxyEvent::Allowed(d) => Some((d.host, d.rule, d.reason)),
        _ => None,
    });
    assert_eq!(
        allowed,
        Some(("allowed.test".into(), Some("allowed.test".into()), None))
    );
}

#[cfg(feature = "tls-inspection")]
#[test]
fn tls_inspection_problems_are_config_errors() {
    let p = policy(Mode::Allowlist, &[]);
    let r = ProxyConfig::builder()
        .credential(Credential::new("run", RUN_TOKEN, None, p))
        .tls_inspection(
            crate::TlsInspection::new()
                .native_roots(false)
                .binding(crate::SecretBinding::new("GH_TOKEN", "", &["api.github.com"])),
        )
        .build();
    match r {
        Err(Error::Config { problems }) => assert_eq!(problems, vec!["secret GH_TOKEN has an empty value"]),
        other => panic!("{other:?}"),
    }
}

/// Without the feature, settings with a binding are refused (never ignored); settings without one change nothing,
/// as with the feature.
#[cfg(not(feature = "tls-inspection"))]
#[test]
fn tls_inspection_needs_the_feature() {
    let build = |t: crate::TlsInspection| {
        ProxyConfig::builder()
            .credential(Credential::new(
                "run",
                RUN_TOKEN,
                None,
                policy(Mode::Allowlist, &[]),
            ))
            .tls_inspection(t)
            .build()
    };
    let bound = crate::TlsInspection::new().binding(crate::SecretBinding::new(
        "GH_TOKEN",
        "ghp_x",
        &["api.github.com"],
    ));
    match build(bound) {
        Err(Error::TlsInspectionUnavailable { secret }) => assert_eq!(secret, "GH_TOKEN"),
        other => panic!("{other:?}"),
    }
    assert!(build(crate::TlsInspection::new().bypass("**.pinned.example")).is_ok());
}

#[test]
fn build_lists_every_problem() {
    let p = policy(Mode::Allowlist, &[]);
    let r = ProxyConfig::builder()
        .credential(Credential::new("a", RUN_TOKEN, None, p.clone()))
        .credential(Credential::new("a", FETCH_TOKEN, None, p.clone()))
        .credential(Credential::new("b", RUN_TOKEN, None, p))
        .silent_deny(&["a*b.com"])
        .with_limits(|l| l.max_tunnels = 0)
        .build();
    let Err(Error::Config { problems }) = r else {
        panic!("want Config error, got {r:?}")
    };
    insta::assert_debug_snapshot!(problems);
}

#[tokio::test(start_paused = true)]
async fn forward_upstream_without_response_head_is_504() {
    let mut h = harness(Setup::default());
    let mut c = h.client();
    let _ = c
        .write_all(format!("GET http://allowed.test/ HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN)).as_bytes())
        .await;
    let Some((_, mut up)) = h.upstreams.recv().await else {
        panic!("no upstream")
    };
    let _ = read_head(&mut up).await;
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out).await; // the upstream stays silent for 300 s
    let out = String::from_utf8_lossy(&out);
    assert_eq!(
        (status(&out), body(&out)["error"].as_str()),
        ("504", Some("upstream_timeout"))
    );
    drop(up);
}

#[tokio::test]
async fn forward_close_delimited_response_closes_the_client() {
    let mut h = harness(Setup::default());
    let mut c = h.client();
    let _ = c
        .write_all(format!("GET http://allowed.test/ HTTP/1.1\r\n{}\r\n", bearer(RUN_TOKEN)).as_bytes())
        .await;
    let Some((_, mut up)) = h.upstreams.recv().await else {
        panic!("no upstream")
    };
    let _ = read_head(&mut up).await;
    let _ = up
        .write_all(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close")
        .await;
    drop(up);
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out).await;
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nuntil close"
    );
}

#[tokio::test]
async fn connection_limit_answers_503() {
    let h = harness(Setup {
        tweak: |b| b.with_limits(|l| l.max_connections = 1),
        ..Setup::default()
    });
    let tracker = tokio_util::task::TaskTracker::new();
    let (mut first, server) = duplex(1024);
    crate::server::spawn_connection(&h.sh, &tracker, server);
    let _ = first.write_all(b"CONNECT allowed.test:443 HTTP/1.1\r\n").await; // still reading its head
    let (mut second, server) = duplex(1024);
    crate::server::spawn_connection(&h.sh, &tracker, server);
    let mut out = Vec::new();
    let _ = second.read_to_end(&mut out).await;
    let out = String::from_utf8_lossy(&out);
    assert_eq!(
        (status(&out), header(&out, "X-Iterion-Reason")),
        ("503", Some("proxy unavailable"))
    );
}
