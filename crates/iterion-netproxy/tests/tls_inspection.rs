//! TLS inspection and secret substitution over loopback (spec §14, vectors §18.8 T1–T14, the §14.9 regression).
//!
//! Hermetic: the upstreams are loopback servers (`127.0.0.1:0`) with certificates from a per-test rcgen CA that
//! is added to the proxy's upstream roots; a scripted resolver maps the test names to 127.0.0.1; the client is
//! tokio-rustls trusting the run CA (or, for opaque tunnels, the upstream's test CA).

mod support;

use iterion_netproxy::{ProxyEvent, TlsInspection};
use rustls::pki_types::ServerName;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test]
async fn t1_placeholder_substituted_for_the_bound_host() {
    let GithubSession {
        env,
        seen,
        port,
        target,
        mut s,
        ..
    } = github_session(&["api.github.com"]).await;
    let resp = exchange(
        &mut s,
        &format!(
            "GET /user?page=1 HTTP/1.1\r\nHost: {target}\r\nAuthorization: Bearer {}\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
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
    assert_eq!(header(&got[0].head, "accept-encoding"), Some("identity"));
    assert!(!contains(&seen.raw(), env.placeholder.as_bytes()));
    let ev = env
        .event(|e| matches!(e, ProxyEvent::SecretSubstituted { .. }))
        .await
        .expect("SecretSubstituted");
    match ev {
        ProxyEvent::SecretSubstituted {
            secret,
            host,
            port: p,
            method,
            path,
            node_id,
            count,
            ..
        } => {
            assert_eq!(
                (secret.as_str(), host.as_str(), method.as_str(), path.as_str()),
                ("GH_TOKEN", "api.github.com", "GET", "/user")
            );
            assert_eq!((p, node_id, count), (port, None, 1));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn t2_placeholder_to_an_unbound_host_is_refused() {
    let ca = TestCa::new();
    let (port, seen) = https_upstream(&ca, &["evil.example"]).await;
    let (t, p) = inspection(&ca);
    let env = start(t, p).await;
    let target = format!("evil.example:{port}");
    let mut s = env
        .tls(&target, "evil.example", env.run_ca_roots())
        .await
        .expect("handshake");
    let resp = exchange(
        &mut s,
        &format!(
            "GET / HTTP/1.1\r\nHost: {target}\r\nAuthorization: Bearer {}\r\n\r\n",
            env.placeholder
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{resp}");
    assert!(resp.contains("X-Iterion-Reason: secret leak\r\n"), "{resp}");
    assert!(
        resp.contains(r#""rule":"secret GH_TOKEN is not bound to evil.example""#),
        "{resp}"
    );
    assert!(seen.requests().is_empty(), "upstream receives nothing");
    assert!(seen.raw().is_empty());
    let ev = env
        .event(|e| denied(e).is_some_and(|d| d.reason.as_deref() == Some("secret leak")))
        .await
        .expect("Denied");
    let d = denied(&ev).expect("denied");
    assert_eq!(d.secret.as_deref(), Some("GH_TOKEN"));
    assert_eq!(d.host, "evil.example");
    assert!(resp.contains(&format!("X-Iterion-Decision-Id: {}\r\n", d.decision_id)));
    assert_eq!(env.substitutions(), 0);
}

#[tokio::test]
async fn t3_sni_mismatch_closes_the_tunnel() {
    let ca = TestCa::new();
    let (port, seen) = https_upstream(&ca, &["api.github.com", "evil.example"]).await;
    let (t, p) = inspection(&ca);
    let env = start(t, p).await;
    let target = format!("api.github.com:{port}");
    let r = env.tls(&target, "evil.example", env.run_ca_roots()).await;
    assert!(r.is_err(), "the handshake is refused");
    let ev = env
        .event(|e| denied(e).is_some_and(|d| d.rule.as_deref() == Some("sni mismatch")))
        .await
        .expect("Denied sni mismatch");
    let d = denied(&ev).expect("denied");
    assert_eq!(d.reason.as_deref(), Some("policy denial"));
    assert_eq!(d.host, "api.github.com");
    // §14.9: nothing reached the upstream, neither the placeholder nor the value.
    assert!(seen.requests().is_empty());
    assert_eq!(env.substitutions(), 0);
}

#[tokio::test]
async fn t4_host_header_mismatch_is_a_leak() {
    let GithubSession { env, seen, mut s, .. } = github_session(&["api.github.com"]).await;
    let resp = exchange(
        &mut s,
        &format!(
            "GET /user HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer {}\r\n\r\n",
            env.placeholder
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{resp}");
    assert!(resp.contains("X-Iterion-Reason: secret leak\r\n"), "{resp}");
    assert!(
        resp.contains(r#""rule":"secret GH_TOKEN is not bound to evil.example""#),
        "{resp}"
    );
    assert!(seen.requests().is_empty());
    assert_eq!(env.substitutions(), 0);
}

#[tokio::test]
async fn t5_plain_http_with_a_placeholder_is_refused() {
    let ca = TestCa::new();
    let (port, seen) = plain_upstream().await;
    let (t, p) = inspection(&ca);
    let env = start(t, p).await;
    let mut s = TcpStream::connect(env.proxy.local_addr().expect("tcp"))
        .await
        .expect("connect");
    let resp = exchange(
        &mut s,
        &format!(
            "GET http://api.github.com:{port}/ HTTP/1.1\r\nHost: api.github.com\r\nProxy-Authorization: Bearer {}\r\nAuthorization: Bearer {}\r\n\r\n",
            env.token, env.placeholder
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{resp}");
    assert!(resp.contains(r#""reason":"secret leak""#), "{resp}");
    assert!(
        resp.contains(r#""rule":"secret GH_TOKEN requires TLS""#),
        "{resp}"
    );
    // §14.9: neither the placeholder nor the value was sent; the upstream was not even dialled.
    assert_eq!(*seen.connections.lock().expect("lock"), 0);
    // The same in a body, and to an unbound host.
    let mut s = TcpStream::connect(env.proxy.local_addr().expect("tcp"))
        .await
        .expect("connect");
    let body = format!("{{\"t\":\"{}\"}}", env.placeholder);
    let resp = exchange(
        &mut s,
        &format!(
            "POST http://evil.example:{port}/ HTTP/1.1\r\nProxy-Authorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            env.token,
            body.len()
        ),
    )
    .await;
    assert!(
        resp.contains(r#""rule":"secret GH_TOKEN is not bound to evil.example""#),
        "{resp}"
    );
    assert_eq!(*seen.connections.lock().expect("lock"), 0);
    // Without a placeholder, plain forwarding works as before.
    let mut s = TcpStream::connect(env.proxy.local_addr().expect("tcp"))
        .await
        .expect("connect");
    let resp = exchange(
        &mut s,
        &format!(
            "GET http://api.github.com:{port}/ HTTP/1.1\r\nProxy-Authorization: Bearer {}\r\nConnection: close\r\n\r\n",
            env.token
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
}

#[tokio::test]
async fn t6_json_body_substituted_and_length_recomputed() {
    let GithubSession {
        env,
        seen,
        port,
        mut s,
        ..
    } = github_session(&["api.github.com"]).await;
    let filler = "x".repeat(2000);
    let body = format!("{{\"token\":\"{}\",\"pad\":\"{filler}\"}}", env.placeholder);
    assert!(body.len() > 2048 - 100);
    let resp = exchange(
        &mut s,
        &format!(
            "POST /graphql HTTP/1.1\r\nHost: api.github.com:{port}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    let got = seen.requests();
    assert_eq!(got.len(), 1);
    let expected = body.replace(&env.placeholder, VALUE);
    assert_eq!(String::from_utf8_lossy(&got[0].body), expected);
    assert_eq!(
        header(&got[0].head, "content-length"),
        Some(expected.len().to_string().as_str())
    );
    assert!(env
        .event(|e| matches!(e, ProxyEvent::SecretSubstituted { method, path, .. } if method == "POST" && path == "/graphql"))
        .await
        .is_some());
}

/// A gzip member with one stored (uncompressed) deflate block: the placeholder is visible in the bytes.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut crc = 0xffff_ffffu32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    crc ^= 0xffff_ffff;
    let len = data.len() as u16;
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    out.push(1);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

#[tokio::test]
async fn t7_compressed_body_with_a_placeholder_is_refused() {
    let GithubSession {
        env,
        seen,
        target,
        mut s,
        ..
    } = github_session(&["api.github.com"]).await;
    let body = gzip_stored(format!("{{\"token\":\"{}\"}}", env.placeholder).as_bytes());
    let mut req = format!(
        "POST /x HTTP/1.1\r\nHost: {target}\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let resp = exchange_bytes(&mut s, &req).await;
    assert!(resp.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{resp}");
    assert!(
        resp.contains(r#""rule":"secret GH_TOKEN could not be substituted safely""#),
        "{resp}"
    );
    assert!(seen.requests().is_empty());
    assert!(!contains(&seen.raw(), env.placeholder.as_bytes()));
    assert_eq!(env.substitutions(), 0);
}

#[tokio::test]
async fn large_body_with_a_placeholder_is_cut_and_refused() {
    let GithubSession {
        env,
        seen,
        target,
        mut s,
        ..
    } = github_session(&["api.github.com"]).await;
    let mut body = vec![b'a'; 1024 * 1024 + 100];
    body.extend_from_slice(env.placeholder.as_bytes());
    body.extend_from_slice(b"tail");
    let mut req = format!(
        "POST /upload HTTP/1.1\r\nHost: {target}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let resp = exchange_bytes(&mut s, &req).await;
    assert!(
        resp.contains(r#""rule":"secret GH_TOKEN could not be substituted safely""#),
        "{resp}"
    );
    let raw = seen.raw();
    assert!(!contains(&raw, env.placeholder.as_bytes()));
    assert!(!contains(&raw, VALUE.as_bytes()));
    assert!(
        !contains(&raw, b"iterion-ph-"),
        "not even a part of the placeholder"
    );
    assert!(seen.requests().is_empty(), "the request never completed upstream");
}

#[tokio::test]
async fn t8_response_values_are_scrubbed() {
    let ca = TestCa::new();
    let (port, _seen) = https_upstream(&ca, &["api.github.com"]).await;
    let (t, p) = inspection(&ca);
    let env = start(t, p).await;
    let target = format!("api.github.com:{port}");
    let mut s = env
        .tls(&target, "api.github.com", env.run_ca_roots())
        .await
        .expect("handshake");
    let resp = exchange(
        &mut s,
        &format!("GET /echo-secret HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(!resp.contains(VALUE), "{resp}");
    let body = format!("{{\"token\":\"{}\"}}", env.placeholder);
    assert!(resp.ends_with(&body), "{resp}");
    assert!(
        resp.contains(&format!("X-Token: {}\r\n", env.placeholder)),
        "{resp}"
    );
    assert!(
        resp.contains(&format!("Content-Length: {}\r\n", body.len())),
        "{resp}"
    );
    // A chunked body with the value split across chunks: streamed, re-framed as chunked.
    let mut s = env
        .tls(&target, "api.github.com", env.run_ca_roots())
        .await
        .expect("handshake");
    let resp = exchange(
        &mut s,
        &format!("GET /echo-secret-chunked HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(resp.contains("Transfer-Encoding: chunked\r\n"), "{resp}");
    let decoded = dechunk(resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or_default());
    assert_eq!(decoded, format!("token={};end", env.placeholder));
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

#[tokio::test]
async fn t9_bypassed_host_stays_opaque() {
    let ca = TestCa::new();
    let (port, seen) = https_upstream(&ca, &["pinned.example"]).await;
    let (t, p) = inspection(&ca);
    let env = start(t, p).await;
    let target = format!("pinned.example:{port}");
    // The client trusts only the upstream's own CA: the handshake succeeding proves the tunnel is opaque.
    let mut s = env
        .tls(&target, "pinned.example", roots(&ca.pem))
        .await
        .expect("opaque handshake");
    let resp = exchange(
        &mut s,
        &format!("GET / HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    assert_eq!(seen.requests().len(), 1);
    // The run CA is not accepted there.
    assert!(
        env.tls(&target, "pinned.example", env.run_ca_roots())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn t10_placeholder_in_a_raw_tunnel_closes_it() {
    let ca = TestCa::new();
    let (port, seen) = plain_upstream().await;
    let (t, p) = inspection(&ca);
    let env = start(t, p).await;
    let mut s = env.connect(&format!("raw.example:{port}")).await;
    s.write_all(b"hello ").await.expect("write");
    s.write_all(format!("token {} end\r\n\r\n", env.placeholder).as_bytes())
        .await
        .expect("write");
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    assert!(rest.is_empty(), "tunnel closed without an answer");
    let ev = env
        .event(|e| denied(e).is_some_and(|d| d.reason.as_deref() == Some("secret leak")))
        .await
        .expect("Denied secret leak");
    let d = denied(&ev).expect("denied");
    assert_eq!(
        d.rule.as_deref(),
        Some("secret GH_TOKEN is not bound to raw.example")
    );
    assert_eq!(d.secret.as_deref(), Some("GH_TOKEN"));
    let raw = seen.raw();
    assert!(
        !contains(&raw, b"iterion-ph-"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    // A raw (non-TLS) tunnel to the bound host: the placeholder needs TLS (§14.9: never sent silently).
    let mut s = env.connect(&format!("api.github.com:{port}")).await;
    let resp = exchange(
        &mut s,
        &format!(
            "GET / HTTP/1.1\r\nHost: api.github.com\r\nAuthorization: Bearer {}\r\n\r\n",
            env.placeholder
        ),
    )
    .await;
    assert!(resp.is_empty(), "{resp}");
    assert!(
        env.event(|e| denied(e).is_some_and(|d| d.rule.as_deref() == Some("secret GH_TOKEN requires TLS")))
            .await
            .is_some()
    );
    assert!(!contains(&seen.raw(), b"iterion-ph-"));
    assert!(!contains(&seen.raw(), VALUE.as_bytes()));
    // Raw traffic without a placeholder flows both ways.
    let mut s = env.connect(&format!("raw.example:{port}")).await;
    let resp = exchange(
        &mut s,
        "GET / HTTP/1.1\r\nHost: raw.example\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
}

#[tokio::test]
async fn t11_unknown_placeholders_pass_unchanged() {
    let ca = TestCa::new();
    let (port, seen) = https_upstream(&ca, &["api.github.com", "evil.example"]).await;
    let (t, p) = inspection(&ca);
    let env = start(t, p).await;
    let foreign = "iterion-ph-0123456789abcdef0123456789abcdef";
    assert_ne!(foreign, env.placeholder);
    for host in ["api.github.com", "evil.example"] {
        let target = format!("{host}:{port}");
        let mut s = env
            .tls(&target, host, env.run_ca_roots())
            .await
            .expect("handshake");
        let resp = exchange(
            &mut s,
            &format!(
                "GET /{foreign} HTTP/1.1\r\nHost: {target}\r\nAuthorization: Bearer {foreign}\r\nConnection: close\r\n\r\n"
            ),
        )
        .await;
        assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    }
    let got = seen.requests();
    assert_eq!(got.len(), 2);
    for r in got {
        assert_eq!(
            header(&r.head, "authorization"),
            Some(format!("Bearer {foreign}").as_str())
        );
        assert!(r.head.starts_with(&format!("GET /{foreign} HTTP/1.1\r\n")));
    }
    assert_eq!(env.substitutions(), 0);
}

#[tokio::test]
async fn t12_invalid_upstream_certificate_is_a_502() {
    let GithubSession {
        env,
        seen,
        target,
        mut s,
        ..
    } = github_session(&["wrong.example"]).await;
    let resp = exchange(
        &mut s,
        &format!(
            "GET /user HTTP/1.1\r\nHost: {target}\r\nAuthorization: Bearer {}\r\n\r\n",
            env.placeholder
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{resp}");
    assert!(
        resp.contains("X-Iterion-Reason: upstream certificate invalid\r\n"),
        "{resp}"
    );
    assert!(seen.requests().is_empty());
    assert!(!contains(&seen.raw(), VALUE.as_bytes()));
    assert_eq!(env.substitutions(), 0);
}

/// A minimal DER reader: (tag, content, rest).
fn tlv(b: &[u8]) -> (u8, &[u8], &[u8]) {
    let first = b[1];
    let (len, hdr) = if first < 0x80 {
        (first as usize, 2)
    } else {
        let n = (first & 0x7f) as usize;
        (
            b[2..2 + n].iter().fold(0usize, |a, x| (a << 8) | *x as usize),
            2 + n,
        )
    };
    (b[0], &b[hdr..hdr + len], &b[hdr + len..])
}

/// A UTCTime (`YYMMDDHHMMSSZ`) as Unix seconds.
fn utc_time(t: &[u8]) -> i64 {
    let n = |i: usize| i64::from(t[i] - b'0') * 10 + i64::from(t[i + 1] - b'0');
    let (y, m, d) = (2000 + n(0), n(2), n(4));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe - 719_468) * 86400 + n(6) * 3600 + n(8) * 60 + n(10)
}

#[tokio::test]
async fn t13_client_trusting_the_bundle_file_handshakes() {
    let ca = TestCa::new();
    let (port, _seen) = https_upstream(&ca, &["api.github.com"]).await;
    let (t, p) = inspection(&ca);
    let env = start(t, p).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let bundle = env.proxy.trust_bundle().expect("bundle");
    let (ca_path, bundle_path) = bundle.write_to(dir.path()).expect("write trust files");
    assert_eq!(ca_path.file_name().and_then(|n| n.to_str()), Some("ca.pem"));
    let bundle_text = std::fs::read_to_string(&bundle_path).expect("read bundle");
    let ca_text = std::fs::read_to_string(&ca_path).expect("read ca");
    assert!(bundle_text.ends_with(&ca_text), "the bundle ends with the run CA");
    assert!(
        bundle_text.matches("-----BEGIN CERTIFICATE-----").count() > 100,
        "the Mozilla root set precedes it"
    );
    // What a client pointed at SSL_CERT_FILE does: trust every certificate of the file.
    let mut s = env
        .tls(
            &format!("api.github.com:{port}"),
            "api.github.com",
            roots(&bundle_text),
        )
        .await
        .expect("handshake with the bundle");
    let leaf = s
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec())
        .expect("leaf");
    // SAN dNSName api.github.com; not-before at least 59 minutes ago.
    let mut san = vec![0x82, 14];
    san.extend_from_slice(b"api.github.com");
    assert!(contains(&leaf, &san));
    let (_, cert, _) = tlv(&leaf);
    let (_, tbs, _) = tlv(cert);
    let mut rest = tbs;
    let mut fields = Vec::new();
    while !rest.is_empty() {
        let (tag, content, next) = tlv(rest);
        fields.push((tag, content));
        rest = next;
    }
    let (_, not_before, _) = tlv(fields[4].1);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    assert!(utc_time(not_before) <= now - 59 * 60);
    let resp = exchange(
        &mut s,
        &format!("GET / HTTP/1.1\r\nHost: api.github.com:{port}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
}

#[tokio::test]
async fn t14_no_binding_no_ca_and_opaque_tunnels() {
    let ca = TestCa::new();
    let (port, seen) = https_upstream(&ca, &["api.github.com"]).await;
    let t = TlsInspection::new()
        .native_roots(false)
        .upstream_root_pem(ca.pem.clone());
    let env = start(t, String::new()).await;
    assert!(!env.proxy.tls_inspection_active());
    assert!(env.proxy.trust_bundle().is_none(), "no CA minted, no ca.pem");
    let target = format!("api.github.com:{port}");
    let mut s = env
        .tls(&target, "api.github.com", roots(&ca.pem))
        .await
        .expect("opaque handshake");
    let resp = exchange(
        &mut s,
        &format!(
            "GET / HTTP/1.1\r\nHost: {target}\r\nAuthorization: Bearer iterion-ph-0123456789abcdef0123456789abcdef\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    assert_eq!(seen.requests().len(), 1);
}

#[tokio::test]
async fn keep_alive_requests_are_each_inspected() {
    let GithubSession {
        env,
        seen,
        target,
        mut s,
        ..
    } = github_session(&["api.github.com"]).await;
    let two = format!(
        "GET /a HTTP/1.1\r\nHost: {target}\r\nAuthorization: token {p}\r\n\r\nGET /b?x={p} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n",
        p = env.placeholder
    );
    let resp = exchange(&mut s, &two).await;
    assert_eq!(resp.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{resp}");
    let got = seen.requests();
    assert_eq!(got.len(), 2);
    assert_eq!(header(&got[0].head, "authorization"), Some("token ghp_realvalue"));
    assert!(
        got[1].head.starts_with("GET /b?x=ghp_realvalue HTTP/1.1\r\n"),
        "{}",
        got[1].head
    );
    for _ in 0..100 {
        if env.substitutions() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(env.substitutions(), 2);
}

#[tokio::test]
async fn expect_continue_is_answered_by_the_proxy() {
    let GithubSession {
        env,
        seen,
        target,
        mut s,
        ..
    } = github_session(&["api.github.com"]).await;
    let body = format!("token={}", env.placeholder);
    s.write_all(
        format!(
            "POST /form HTTP/1.1\r\nHost: {target}\r\nExpect: 100-continue\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .expect("head");
    let mut interim = [0u8; 25];
    s.read_exact(&mut interim).await.expect("100 Continue");
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    let resp = exchange(&mut s, &body).await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    let got = seen.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body, format!("token={VALUE}").as_bytes());
    assert_eq!(header(&got[0].head, "expect"), None);
}

#[tokio::test]
async fn raw_tunnels_never_stall_on_a_possible_placeholder_start() {
    let ca = TestCa::new();
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let (t, p) = inspection(&ca);
    let env = start(t, p).await;
    let mut s = env.connect(&format!("raw.example:{port}")).await;
    // Each message ends with a prefix of a placeholder: held back briefly, then released.
    for msg in [&b"ping-i"[..], b"iterion-ph-", b"iterion-ph-0a"] {
        s.write_all(msg).await.expect("write");
        let mut back = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut back))
            .await
            .expect("echoed without waiting for more bytes")
            .expect("read");
        assert_eq!(back, msg);
    }
    assert!(
        env.events
            .lock()
            .expect("events")
            .iter()
            .all(|e| denied(e).is_none()),
        "no denial: no known placeholder was sent"
    );
}

#[tokio::test]
async fn ip_literal_targets_are_intercepted_without_sni() {
    let ca = TestCa::new();
    let (port, seen) = https_upstream(&ca, &["127.0.0.1"]).await;
    let (t, p) = inspection(&ca);
    let env = start(t, p).await;
    let target = format!("127.0.0.1:{port}");
    let tcp = env.connect(&target).await;
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(env.run_ca_roots())
        .with_no_client_auth();
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("a leaf with an IP SAN from the run CA");
    let resp = exchange(
        &mut s,
        &format!(
            "GET / HTTP/1.1\r\nHost: {target}\r\nAuthorization: Bearer {}\r\n\r\n",
            env.placeholder
        ),
    )
    .await;
    assert!(
        resp.contains(r#""rule":"secret GH_TOKEN is not bound to 127.0.0.1""#),
        "{resp}"
    );
    assert!(seen.requests().is_empty());
}

#[tokio::test]
async fn an_operator_ca_signs_the_leaves() {
    let ca = TestCa::new();
    let (port, seen) = https_upstream(&ca, &["api.github.com"]).await;
    let op_key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let op_cert = params.self_signed(&op_key).expect("operator CA");
    let (t, p) = inspection(&ca);
    let env = start(t.operator_ca(op_cert.pem(), op_key.serialize_pem()), p).await;
    assert_eq!(
        env.proxy.trust_bundle().map(|b| b.ca_pem),
        Some(op_cert.pem()),
        "the bundle carries the operator's CA"
    );
    let target = format!("api.github.com:{port}");
    let mut s = env
        .tls(&target, "api.github.com", roots(&op_cert.pem()))
        .await
        .expect("handshake with the operator CA");
    let resp = exchange(
        &mut s,
        &format!(
            "GET /user HTTP/1.1\r\nHost: {target}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            env.placeholder
        ),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    assert_eq!(
        header(&seen.requests()[0].head, "authorization"),
        Some("Bearer ghp_realvalue")
    );
}

#[tokio::test]
async fn websocket_upgrades_are_relayed_after_the_handshake() {
    let GithubSession {
        env,
        seen,
        target,
        mut s,
        ..
    } = github_session(&["api.github.com"]).await;
    s.write_all(
        format!(
            "GET /ws HTTP/1.1\r\nHost: {target}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nAuthorization: Bearer {}\r\n\r\n",
            env.placeholder
        )
        .as_bytes(),
    )
    .await
    .expect("upgrade request");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).await.expect("read") == 1 {
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101 "),
        "{}",
        String::from_utf8_lossy(&head)
    );
    // The handshake headers were processed: the placeholder was substituted there.
    assert_eq!(
        header(&seen.requests()[0].head, "authorization"),
        Some("Bearer ghp_realvalue")
    );
    s.write_all(b"\x81\x05hello").await.expect("frame");
    let mut back = [0u8; 7];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut back))
        .await
        .expect("echo in time")
        .expect("echo");
    assert_eq!(&back, b"\x81\x05hello");
}
