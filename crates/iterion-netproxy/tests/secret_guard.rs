//! Secret bindings beyond intercepted TLS, over loopback: plain-HTTP substitution for bindings that allow it,
//! single IP addresses as binding hosts, and the real value refused wherever its binding is not bound (inside
//! TLS, in plain forwards, in raw tunnels).

mod support;

use iterion_netproxy::{ProxyEvent, SecretBinding, TlsInspection};
use rustls::pki_types::ServerName;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A binding that allows plain HTTP, bound to the loopback upstream at `port`.
fn local_model(ca: &TestCa, port: u16) -> (TlsInspection, String) {
    let binding = SecretBinding::new("MODEL_KEY", VALUE, &[format!("127.0.0.1:{port}")]).plain_http(true);
    let placeholder = binding.placeholder().to_owned();
    let t = TlsInspection::new()
        .native_roots(false)
        .upstream_root_pem(ca.pem.clone())
        .binding(binding);
    (t, placeholder)
}

/// Send one request through the proxy as a plain forward (the proxy credential is added after the request
/// line) and read the answer until the proxy closes.
async fn plain(env: &Env, request: &str) -> String {
    let mut s = TcpStream::connect(env.proxy.local_addr().expect("tcp"))
        .await
        .expect("connect proxy");
    let (line, rest) = request.split_once("\r\n").expect("request line");
    let request = format!("{line}\r\nProxy-Authorization: Bearer {}\r\n{rest}", env.token);
    exchange(&mut s, &request).await
}

/// The `Denied` event of a secret leak with this rule.
async fn leak_event(env: &Env, rule: &str) -> Option<iterion_netproxy::DecisionEvent> {
    let ev = env
        .event(|e| {
            denied(e).is_some_and(|d| {
                d.reason.as_deref() == Some("secret leak") && d.rule.as_deref() == Some(rule)
            })
        })
        .await?;
    denied(&ev).cloned()
}

fn assert_refused(resp: &str, rule: &str) {
    assert!(resp.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{resp}");
    assert!(resp.contains("X-Iterion-Reason: secret leak\r\n"), "{resp}");
    assert!(resp.contains(&format!(r#""rule":"{rule}""#)), "{resp}");
    assert!(!resp.contains(VALUE), "{resp}");
}

#[tokio::test]
async fn plain_http_binding_substitutes_in_forward_requests() {
    let ca = TestCa::new();
    let (port, seen) = plain_upstream().await;
    let (t, p) = local_model(&ca, port);
    let env = start(t, p).await;
    let authority = format!("127.0.0.1:{port}");
    let resp = plain(
        &env,
        &format!(
            "GET http://{authority}/v1/models?key={ph} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {ph}\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
            ph = env.placeholder
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    let got = seen.requests();
    assert_eq!(got.len(), 1);
    let head = &got[0].head;
    assert!(
        head.starts_with(&format!(
            "GET /v1/models?key={VALUE} HTTP/1.1\r\nHost: {authority}\r\n"
        )),
        "origin form, the value substituted: {head}"
    );
    assert_eq!(header(head, "authorization"), Some("Bearer ghp_realvalue"));
    assert_eq!(header(head, "accept-encoding"), Some("identity"));
    assert_eq!(header(head, "proxy-authorization"), None, "{head}");
    assert_eq!(header(head, "connection"), None, "hop-by-hop: {head}");
    assert!(!contains(&seen.raw(), env.placeholder.as_bytes()));
    let ev = env
        .event(|e| matches!(e, ProxyEvent::SecretSubstituted { .. }))
        .await
        .expect("SecretSubstituted");
    let ProxyEvent::SecretSubstituted {
        secret,
        host,
        port: p,
        method,
        path,
        count,
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (
            secret.as_str(),
            host.as_str(),
            p,
            method.as_str(),
            path.as_str(),
            count
        ),
        ("MODEL_KEY", "127.0.0.1", port, "GET", "/v1/models", 2)
    );

    // A JSON body: substituted, its length recomputed.
    let body = format!("{{\"api_key\":\"{}\",\"n\":1}}", env.placeholder);
    let resp = plain(
        &env,
        &format!(
            "POST http://{authority}/v1/chat HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    let got = seen.requests();
    let sent = format!("{{\"api_key\":\"{VALUE}\",\"n\":1}}");
    assert_eq!(String::from_utf8_lossy(&got[1].body), sent);
    assert_eq!(
        header(&got[1].head, "content-length"),
        Some(sent.len().to_string().as_str())
    );

    // The response is scrubbed: the value becomes the placeholder again.
    let resp = plain(
        &env,
        &format!(
            "GET http://{authority}/echo-secret HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    assert!(!resp.contains(VALUE), "{resp}");
    assert!(
        resp.contains(&format!("X-Token: {}\r\n", env.placeholder)),
        "{resp}"
    );
    assert!(
        resp.ends_with(&format!("{{\"token\":\"{}\"}}", env.placeholder)),
        "{resp}"
    );

    // Keep-alive: two requests on one client connection, each substituted.
    let mut s = TcpStream::connect(env.proxy.local_addr().expect("tcp"))
        .await
        .expect("connect proxy");
    let one = format!(
        "GET http://{authority}/a HTTP/1.1\r\nHost: {authority}\r\nProxy-Authorization: Bearer {}\r\nAuthorization: Bearer {}\r\n\r\n",
        env.token, env.placeholder
    );
    s.write_all(one.as_bytes()).await.expect("write");
    let mut first = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut first))
        .await
        .expect("first answer")
        .expect("read");
    assert!(first[..n].starts_with(b"HTTP/1.1 200 OK\r\n"));
    let resp = exchange(
        &mut s,
        &format!(
            "GET http://{authority}/b HTTP/1.1\r\nHost: {authority}\r\nProxy-Authorization: Bearer {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            env.token, env.placeholder
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    let got = seen.requests();
    assert_eq!(got.len(), 5);
    for r in &got[3..] {
        assert_eq!(header(&r.head, "authorization"), Some("Bearer ghp_realvalue"));
    }
}

#[tokio::test]
async fn plain_http_binding_refuses_what_it_cannot_substitute_safely() {
    let ca = TestCa::new();
    let (port, seen) = plain_upstream().await;
    let (t, p) = local_model(&ca, port);
    let other = SecretBinding::new(
        "TLS_ONLY",
        "tls-only-secret-value",
        &[format!("127.0.0.1:{port}")],
    );
    let other_ph = other.placeholder().to_owned();
    let env = start(t.binding(other), p).await;
    let authority = format!("127.0.0.1:{port}");
    let ph = env.placeholder.clone();
    // A Host header naming another host.
    let resp = plain(
        &env,
        &format!(
            "GET http://{authority}/ HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer {ph}\r\n\r\n"
        ),
    )
    .await;
    assert_refused(&resp, "secret MODEL_KEY is not bound to evil.example");
    // A compressed body cannot be rewritten.
    let body = gzip_stored(format!("{{\"k\":\"{ph}\"}}").as_bytes());
    let mut req = format!(
        "POST http://{authority}/ HTTP/1.1\r\nProxy-Authorization: Bearer {}\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
        env.token,
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let mut s = TcpStream::connect(env.proxy.local_addr().expect("tcp"))
        .await
        .expect("connect proxy");
    let resp = exchange_bytes(&mut s, &req).await;
    assert_refused(&resp, "secret MODEL_KEY could not be substituted safely");
    // A binding without plain HTTP bound to the same host still requires TLS.
    let resp = plain(
        &env,
        &format!("GET http://{authority}/ HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {other_ph}\r\n\r\n"),
    )
    .await;
    assert_refused(&resp, "secret TLS_ONLY requires TLS");
    // The placeholder towards a host the binding is not bound to.
    let resp = plain(
        &env,
        &format!("GET http://evil.example:{port}/ HTTP/1.1\r\nHost: evil.example:{port}\r\nAuthorization: Bearer {ph}\r\n\r\n"),
    )
    .await;
    assert_refused(&resp, "secret MODEL_KEY is not bound to evil.example");
    // None of these reached the upstream; each was reported with the secret's name and its decision id.
    assert_eq!(*seen.connections.lock().expect("lock"), 0);
    let d = leak_event(&env, "secret TLS_ONLY requires TLS")
        .await
        .expect("Denied");
    assert_eq!(d.secret.as_deref(), Some("TLS_ONLY"));
    assert_eq!(d.host, "127.0.0.1");
    let d = leak_event(&env, "secret MODEL_KEY could not be substituted safely")
        .await
        .expect("Denied");
    assert_eq!(d.secret.as_deref(), Some("MODEL_KEY"));
    assert_eq!(env.substitutions(), 0);
}

#[tokio::test]
async fn plain_http_bodies_chunked_and_large() {
    let ca = TestCa::new();
    let (port, seen) = plain_upstream().await;
    let (t, p) = local_model(&ca, port);
    let env = start(t, p).await;
    let authority = format!("127.0.0.1:{port}");
    let ph = env.placeholder.clone();
    // A small chunked body: decoded, substituted, sent with a `Content-Length`.
    let (a, b) = ph.split_at(20);
    let resp = plain(
        &env,
        &format!(
            "POST http://{authority}/v1 HTTP/1.1\r\nHost: {authority}\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\nkey={a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len() + 4,
            b.len()
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    let got = seen.requests();
    assert_eq!(String::from_utf8_lossy(&got[0].body), format!("key={VALUE}"));
    assert_eq!(header(&got[0].head, "transfer-encoding"), None);
    assert_eq!(
        header(&got[0].head, "content-length"),
        Some((4 + VALUE.len()).to_string().as_str())
    );
    // A body over 1 MiB is streamed; a placeholder in it cannot be substituted and cuts it short.
    let mut big = vec![b'x'; 1536 * 1024];
    big.extend_from_slice(ph.as_bytes());
    let mut req = format!(
        "POST http://{authority}/v1 HTTP/1.1\r\nProxy-Authorization: Bearer {}\r\nHost: {authority}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        env.token,
        big.len()
    )
    .into_bytes();
    req.extend_from_slice(&big);
    let mut s = TcpStream::connect(env.proxy.local_addr().expect("tcp"))
        .await
        .expect("connect proxy");
    let resp = exchange_bytes(&mut s, &req).await;
    assert_refused(&resp, "secret MODEL_KEY could not be substituted safely");
    assert!(!contains(&seen.raw(), ph.as_bytes()));
    assert!(!contains(&seen.raw(), b"iterion-ph-"));
    // Without a placeholder the large body goes through whole.
    let big = vec![b'y'; 1536 * 1024];
    let mut req = format!(
        "POST http://{authority}/v1 HTTP/1.1\r\nProxy-Authorization: Bearer {}\r\nHost: {authority}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        env.token,
        big.len()
    )
    .into_bytes();
    req.extend_from_slice(&big);
    let mut s = TcpStream::connect(env.proxy.local_addr().expect("tcp"))
        .await
        .expect("connect proxy");
    let resp = exchange_bytes(&mut s, &req).await;
    assert!(
        resp.starts_with("HTTP/1.1 200 OK\r\n"),
        "{}",
        &resp[..resp.len().min(300)]
    );
    let got = seen.requests();
    assert_eq!(got.last().map(|r| r.body.len()), Some(big.len()));
}

/// A gzip member with one stored (uncompressed) deflate block; the CRC is not checked by anyone here.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 1];
    let len = data.len() as u16;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

#[tokio::test]
async fn a_raw_tunnel_to_a_plain_http_host_gets_no_substitution() {
    let ca = TestCa::new();
    let (port, seen) = plain_upstream().await;
    let (t, p) = local_model(&ca, port);
    let env = start(t, p).await;
    let authority = format!("127.0.0.1:{port}");
    let mut s = env.connect(&authority).await;
    let resp = exchange(
        &mut s,
        &format!(
            "GET / HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {}\r\n\r\n",
            env.placeholder
        ),
    )
    .await;
    assert!(resp.is_empty(), "the tunnel is closed: {resp}");
    let d = leak_event(&env, "secret MODEL_KEY could not be substituted safely")
        .await
        .expect("Denied");
    assert_eq!(d.secret.as_deref(), Some("MODEL_KEY"));
    assert!(!contains(&seen.raw(), b"iterion-ph-"));
    assert!(!contains(&seen.raw(), VALUE.as_bytes()));
    // The real value may travel to the host it is bound to in clear text: the binding allows plain HTTP.
    let mut s = env.connect(&authority).await;
    let resp = exchange(
        &mut s,
        &format!("GET / HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {VALUE}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
}

/// The `GH_TOKEN` binding (bound to `api.github.com`) and `SHORT`, whose 7-byte value is not looked for.
async fn guarded(ca: &TestCa) -> Env {
    let (t, p) = inspection(ca);
    let short = SecretBinding::new("SHORT", "abc1234", &["api.github.com"]);
    start(t.binding(short), p).await
}

const UNBOUND: &str = "secret GH_TOKEN is not bound to evil.example";

#[tokio::test]
async fn the_real_value_is_refused_towards_unbound_hosts_inside_tls() {
    let ca = TestCa::new();
    let (tls_port, tls_seen) = https_upstream(&ca, &["evil.example", "api.github.com"]).await;
    let env = guarded(&ca).await;
    let rule = UNBOUND;
    let target = format!("evil.example:{tls_port}");
    let mut s = env
        .tls(&target, "evil.example", env.run_ca_roots())
        .await
        .expect("handshake");
    let resp = exchange(
        &mut s,
        &format!("GET / HTTP/1.1\r\nHost: {target}\r\nAuthorization: Bearer {VALUE}\r\n\r\n"),
    )
    .await;
    assert_refused(&resp, rule);
    assert!(tls_seen.requests().is_empty());
    assert!(tls_seen.raw().is_empty());
    let d = leak_event(&env, rule).await.expect("Denied");
    assert_eq!(d.secret.as_deref(), Some("GH_TOKEN"));
    assert!(resp.contains(&format!("X-Iterion-Decision-Id: {}\r\n", d.decision_id)));
    // In a JSON body too.
    let mut s = env
        .tls(&target, "evil.example", env.run_ca_roots())
        .await
        .expect("handshake");
    let body = format!("{{\"t\":\"{VALUE}\"}}");
    let resp = exchange(
        &mut s,
        &format!(
            "POST / HTTP/1.1\r\nHost: {target}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert_refused(&resp, rule);
    assert!(tls_seen.raw().is_empty());
    // The bound host receives it unchanged.
    let bound = format!("api.github.com:{tls_port}");
    let mut s = env
        .tls(&bound, "api.github.com", env.run_ca_roots())
        .await
        .expect("handshake");
    let resp = exchange(
        &mut s,
        &format!(
            "GET / HTTP/1.1\r\nHost: {bound}\r\nAuthorization: Bearer {VALUE}\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    assert_eq!(tls_seen.requests().len(), 1);
}

#[tokio::test]
async fn the_real_value_is_refused_towards_unbound_hosts_in_plain_forwards() {
    let ca = TestCa::new();
    let (port, seen) = plain_upstream().await;
    let env = guarded(&ca).await;
    let rule = UNBOUND;
    let resp = plain(
        &env,
        &format!(
            "GET http://evil.example:{port}/ HTTP/1.1\r\nHost: evil.example:{port}\r\nX-Key: {VALUE}\r\n\r\n"
        ),
    )
    .await;
    assert_refused(&resp, rule);
    let resp = plain(
        &env,
        &format!(
            "POST http://evil.example:{port}/ HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{VALUE}",
            VALUE.len()
        ),
    )
    .await;
    assert_refused(&resp, rule);
    // In plain HTTP to its own host, without plain HTTP allowed: it requires TLS.
    let resp = plain(
        &env,
        &format!("GET http://api.github.com:{port}/ HTTP/1.1\r\nX-Key: {VALUE}\r\n\r\n"),
    )
    .await;
    assert_refused(&resp, "secret GH_TOKEN requires TLS");
    assert_eq!(*seen.connections.lock().expect("lock"), 0, "nothing was dialled");
    // Values shorter than 8 bytes are not looked for (they would match ordinary traffic).
    let resp = plain(
        &env,
        &format!("GET http://evil.example:{port}/?q=abc1234 HTTP/1.1\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    // No event names the value.
    for e in env.events.lock().expect("events").iter() {
        assert!(!format!("{e:?}").contains(VALUE), "{e:?}");
    }
}

#[tokio::test]
async fn the_real_value_is_refused_towards_unbound_hosts_in_raw_tunnels() {
    let ca = TestCa::new();
    let (port, seen) = plain_upstream().await;
    let env = guarded(&ca).await;
    // Split across writes, the first part flushed upstream after the hold-back pause.
    let mut s = env.connect(&format!("raw.example:{port}")).await;
    s.write_all(b"hello ghp_real").await.expect("write");
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.write_all(b"value and more\r\n").await.expect("write");
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    assert!(rest.is_empty(), "tunnel closed without an answer");
    let d = leak_event(&env, "secret GH_TOKEN is not bound to raw.example")
        .await
        .expect("Denied");
    assert_eq!(d.secret.as_deref(), Some("GH_TOKEN"));
    assert!(
        !contains(&seen.raw(), VALUE.as_bytes()),
        "the value never completes upstream"
    );
    // Without the value the tunnel flows.
    let mut s = env.connect(&format!("raw.example:{port}")).await;
    let resp = exchange(
        &mut s,
        "GET / HTTP/1.1\r\nHost: raw.example\r\nX-Short: abc1234\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
}

#[tokio::test]
async fn an_ip_binding_is_substituted_over_tls() {
    let ca = TestCa::new();
    let (port, seen) = https_upstream(&ca, &["127.0.0.1"]).await;
    let binding = SecretBinding::new("LOCAL_KEY", VALUE, &[format!("127.0.0.1:{port}")]);
    let placeholder = binding.placeholder().to_owned();
    let t = TlsInspection::new()
        .native_roots(false)
        .upstream_root_pem(ca.pem.clone())
        .binding(binding);
    let env = start(t, placeholder).await;
    let bundle = env
        .proxy
        .trust_bundle()
        .expect("the bundle while inspection is active");
    assert!(bundle.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(bundle.bundle_pem.ends_with(&bundle.ca_pem));
    let target = format!("127.0.0.1:{port}");
    let tcp = env.connect(&target).await;
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots(&bundle.ca_pem))
        .with_no_client_auth();
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("a leaf with an IP SAN");
    let resp = exchange(
        &mut s,
        &format!(
            "GET /v1 HTTP/1.1\r\nHost: {target}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            env.placeholder
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    let got = seen.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(
        header(&got[0].head, "authorization"),
        Some("Bearer ghp_realvalue")
    );
    assert_eq!(env.substitutions(), 1);
}
