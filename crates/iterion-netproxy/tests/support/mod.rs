//! What the TLS inspection tests share: test CAs, recording loopback upstreams (HTTP and HTTPS), a proxy with
//! TLS inspection and a scripted resolver, and client helpers.
#![allow(dead_code)] // each test crate uses a part

use async_trait::async_trait;
use iterion_netpolicy::{Mode, Policy};
use iterion_netproxy::{
    Credential, DecisionEvent, Listen, Proxy, ProxyConfig, ProxyEvent, ResolveError, Resolver, RunningProxy,
    SecretBinding, TlsInspection, new_token,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const VALUE: &str = "ghp_realvalue";

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every test name resolves to 127.0.0.1.
#[derive(Debug)]
pub struct Loopback;

#[async_trait]
impl Resolver for Loopback {
    async fn lookup(&self, _host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        Ok(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)])
    }
}

/// A test CA for the upstream servers.
pub struct TestCa {
    pub issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub pem: String,
}

impl TestCa {
    pub fn new() -> Self {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let cert = params.self_signed(&key).expect("ca");
        Self {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().expect("key");
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let cert = rcgen::CertificateParams::new(names)
            .expect("params")
            .signed_by(&key, &self.issuer)
            .expect("leaf");
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .expect("server config");
        Arc::new(config)
    }
}

/// One request as an upstream received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub head: String,
    pub body: Vec<u8>,
}

/// What an upstream saw: parsed requests and every raw byte.
#[derive(Debug, Default)]
pub struct Seen {
    pub requests: Mutex<Vec<Received>>,
    pub raw: Mutex<Vec<u8>>,
    pub connections: Mutex<usize>,
}

impl Seen {
    pub fn requests(&self) -> Vec<Received> {
        self.requests.lock().expect("lock").clone()
    }
    pub fn raw(&self) -> Vec<u8> {
        self.raw.lock().expect("lock").clone()
    }
}

pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Answer one HTTP/1.1 connection: requests with `Content-Length` bodies; `/echo-secret` answers with the
/// real value in a header and the body, `/echo-secret-chunked` the same chunked, anything else `ok`.
pub async fn serve_http<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, seen: Arc<Seen>) {
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let mut tmp = [0u8; 4096];
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    seen.raw.lock().expect("lock").extend_from_slice(&tmp[..n]);
                    buf.extend_from_slice(&tmp[..n]);
                }
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let len: usize = header(&head, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < len {
            let mut tmp = [0u8; 4096];
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    seen.raw.lock().expect("lock").extend_from_slice(&tmp[..n]);
                    buf.extend_from_slice(&tmp[..n]);
                }
            }
        }
        let body: Vec<u8> = buf.drain(..len).collect();
        let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
        seen.requests.lock().expect("lock").push(Received {
            head: head.clone(),
            body,
        });
        if path == "/ws" {
            // An upgrade: after the 101 the connection echoes raw bytes (frames are not HTTP).
            let head =
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
            if s.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            if !buf.is_empty() && s.write_all(&buf).await.is_err() {
                return;
            }
            let mut tmp = [0u8; 4096];
            while let Ok(n) = s.read(&mut tmp).await {
                if n == 0 || s.write_all(&tmp[..n]).await.is_err() {
                    break;
                }
            }
            return;
        }
        let response = if path == "/echo-secret" {
            let body = format!("{{\"token\":\"{VALUE}\"}}");
            format!(
                "HTTP/1.1 200 OK\r\nX-Token: {VALUE}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        } else if path == "/echo-secret-chunked" {
            let a = "token=ghp_real";
            let b = "value;end";
            format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
                a.len(),
                b.len()
            )
        } else {
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_owned()
        };
        if s.write_all(response.as_bytes()).await.is_err() {
            return;
        }
        let _ = s.flush().await;
        if header(&head, "connection").is_some_and(|v| v.eq_ignore_ascii_case("close")) {
            let _ = s.shutdown().await;
            return;
        }
    }
}

/// An HTTPS upstream on loopback with a certificate for `names`.
pub async fn https_upstream(ca: &TestCa, names: &[&str]) -> (u16, Arc<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    let acceptor = tokio_rustls::TlsAcceptor::from(ca.server_config(names));
    let seen = Arc::new(Seen::default());
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            *s2.connections.lock().expect("lock") += 1;
            let acceptor = acceptor.clone();
            let seen = s2.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    serve_http(tls, seen).await;
                }
            });
        }
    });
    (port, seen)
}

/// A plain TCP upstream (HTTP, or raw bytes recorded).
pub async fn plain_upstream() -> (u16, Arc<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    let seen = Arc::new(Seen::default());
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            *s2.connections.lock().expect("lock") += 1;
            tokio::spawn(serve_http(tcp, s2.clone()));
        }
    });
    (port, seen)
}

pub struct Env {
    pub proxy: RunningProxy,
    pub token: String,
    pub events: Arc<Mutex<Vec<ProxyEvent>>>,
    pub placeholder: String,
}

pub fn inspection(ca: &TestCa) -> (TlsInspection, String) {
    let binding = SecretBinding::new("GH_TOKEN", VALUE, &["api.github.com"]);
    let placeholder = binding.placeholder().to_owned();
    let t = TlsInspection::new()
        .native_roots(false)
        .upstream_root_pem(ca.pem.clone())
        .binding(binding)
        .bypass("pinned.example");
    (t, placeholder)
}

pub async fn start(tls: TlsInspection, placeholder: String) -> Env {
    let token = new_token();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let policy = Policy::compile(
        Mode::Allowlist,
        &[],
        &[
            "api.github.com",
            "evil.example",
            "pinned.example",
            "raw.example",
            "127.0.0.0/8",
        ],
    )
    .expect("policy");
    let config = ProxyConfig::builder()
        .listen(Listen::Tcp("127.0.0.1:0".parse().expect("addr")))
        .credential(Credential::new("run", token.clone(), None, Arc::new(policy)))
        .resolver(Arc::new(Loopback))
        .tls_inspection(tls)
        .on_event(move |e| sink.lock().expect("events").push(e))
        .build()
        .expect("config");
    Env {
        proxy: Proxy::start(config).await.expect("start"),
        token,
        events,
        placeholder,
    }
}

impl Env {
    /// Connect to the proxy and CONNECT `target`; returns the stream after `200`.
    pub async fn connect(&self, target: &str) -> TcpStream {
        let mut s = TcpStream::connect(self.proxy.local_addr().expect("tcp"))
            .await
            .expect("connect proxy");
        let req = format!(
            "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Bearer {}\r\n\r\n",
            self.token
        );
        s.write_all(req.as_bytes()).await.expect("write");
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).await.expect("read") == 1 {
            head.push(b[0]);
        }
        assert_eq!(
            String::from_utf8_lossy(&head),
            "HTTP/1.1 200 Connection Established\r\n\r\n"
        );
        s
    }

    pub fn run_ca_roots(&self) -> rustls::RootCertStore {
        let bundle = self.proxy.trust_bundle().expect("inspection is active");
        roots(&bundle.ca_pem)
    }

    /// CONNECT, then TLS with `sni` trusting `roots`.
    pub async fn tls(
        &self,
        target: &str,
        sni: &str,
        roots: rustls::RootCertStore,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = self.connect(target).await;
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from(sni.to_owned()).expect("name");
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
    }

    /// Wait (at most 5 s) until an event matches.
    pub async fn event(&self, f: impl Fn(&ProxyEvent) -> bool) -> Option<ProxyEvent> {
        for _ in 0..500 {
            if let Some(e) = self.events.lock().expect("events").iter().find(|e| f(e)).cloned() {
                return Some(e);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    pub fn substitutions(&self) -> usize {
        self.events
            .lock()
            .expect("events")
            .iter()
            .filter(|e| matches!(e, ProxyEvent::SecretSubstituted { .. }))
            .count()
    }
}

/// The common start of a test: an HTTPS upstream presenting a certificate for `names` (signed by the test
/// CA), a proxy inspecting with the `GH_TOKEN` binding, and a client TLS session through `CONNECT
/// api.github.com:<port>` with SNI `api.github.com`, trusting the run CA.
pub struct GithubSession {
    pub env: Env,
    /// What the upstream saw.
    pub seen: Arc<Seen>,
    /// The upstream's port.
    pub port: u16,
    /// The CONNECT target, `api.github.com:<port>`.
    pub target: String,
    /// The client's TLS session.
    pub s: tokio_rustls::client::TlsStream<TcpStream>,
}

pub async fn github_session(names: &[&str]) -> GithubSession {
    let ca = TestCa::new();
    let (port, seen) = https_upstream(&ca, names).await;
    let (t, p) = inspection(&ca);
    let env = start(t, p).await;
    let target = format!("api.github.com:{port}");
    let s = env
        .tls(&target, "api.github.com", env.run_ca_roots())
        .await
        .expect("handshake");
    GithubSession {
        env,
        seen,
        port,
        target,
        s,
    }
}

pub fn roots(pem: &str) -> rustls::RootCertStore {
    let mut r = rustls::RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|c| c.expect("pem"))
        .collect();
    let n = certs.len();
    let (added, _ignored) = r.add_parsable_certificates(certs);
    assert!(added > 0 && added + 5 >= n, "{added} of {n} roots usable");
    r
}

/// Send `request` and read the response until the server closes.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, request: &str) -> String {
    exchange_bytes(s, request.as_bytes()).await
}

pub async fn exchange_bytes<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, request: &[u8]) -> String {
    s.write_all(request).await.expect("write request");
    s.flush().await.expect("flush");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

pub fn denied(e: &ProxyEvent) -> Option<&DecisionEvent> {
    match e {
        ProxyEvent::Denied(d) => Some(d),
        _ => None,
    }
}
