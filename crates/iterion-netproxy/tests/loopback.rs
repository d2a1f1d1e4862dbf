//! Public-API tests over loopback TCP (`127.0.0.1:0`) and a Unix socket: start, relay, self-connection,
//! credentials added while running, shutdown closing open tunnels (spec §12, §15, §18.6 P27).

use iterion_netpolicy::{Mode, Policy};
use iterion_netproxy::{Credential, Listen, Proxy, ProxyConfig, ProxyEvent, RunningProxy, new_token};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn policy(rules: &[&str]) -> Arc<Policy> {
    Arc::new(Policy::compile(Mode::Allowlist, &[], rules).expect("policy compiles"))
}

/// A loopback echo server; returns its address.
async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind echo");
    let addr = l.local_addr().expect("echo addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

async fn start(rules: &[&str], listen: Listen) -> (RunningProxy, String, Arc<Mutex<Vec<ProxyEvent>>>) {
    let token = new_token();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let config = ProxyConfig::builder()
        .listen(listen)
        .credential(Credential::new("run", token.clone(), None, policy(rules)))
        .on_event(move |e| sink.lock().expect("events lock").push(e))
        .build()
        .expect("config");
    (Proxy::start(config).await.expect("start"), token, events)
}

async fn connect_through<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, target: &str, token: &str) -> String {
    let req =
        format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Bearer {token}\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).await.expect("read") == 1 {
        head.push(b[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

#[tokio::test]
async fn tunnel_over_loopback_tcp_and_endpoint_url() {
    let echo = echo_server().await;
    let (proxy, token, _) = start(&["127.0.0.1"], Listen::Tcp("127.0.0.1:0".parse().expect("addr"))).await;
    let addr = proxy.local_addr().expect("tcp");
    assert_eq!(
        proxy.endpoint("run", &token),
        format!("http://run:{token}@{addr}")
    );
    let mut s = TcpStream::connect(addr).await.expect("connect proxy");
    assert_eq!(
        connect_through(&mut s, &echo.to_string(), &token).await,
        "HTTP/1.1 200 Connection Established\r\n\r\n"
    );
    s.write_all(&[7u8; 64]).await.expect("write");
    let mut back = [0u8; 64];
    s.read_exact(&mut back).await.expect("echo");
    assert_eq!(back, [7u8; 64]);
    drop(s);
    let stats = proxy.shutdown(Duration::from_secs(5)).await;
    assert_eq!((stats.tunnels, stats.bytes_up, stats.bytes_down), (1, 64, 64));
}

#[tokio::test]
async fn the_proxy_refuses_to_connect_to_itself() {
    let (proxy, token, events) = start(
        &["127.0.0.0/8"],
        Listen::Tcp("127.0.0.1:0".parse().expect("addr")),
    )
    .await;
    let addr = proxy.local_addr().expect("tcp");
    let mut s = TcpStream::connect(addr).await.expect("connect proxy");
    let head = connect_through(&mut s, &addr.to_string(), &token).await;
    assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
    assert!(
        head.contains("X-Iterion-Reason: non-global address\r\n"),
        "{head}"
    );
    proxy.shutdown(Duration::ZERO).await;
    let denied = events
        .lock()
        .expect("events")
        .iter()
        .any(|e| matches!(e, ProxyEvent::Denied(_)));
    assert!(denied);
}

#[tokio::test]
async fn p27_shutdown_closes_open_tunnels() {
    let echo = echo_server().await;
    let (proxy, token, _) = start(&["127.0.0.1"], Listen::Tcp("127.0.0.1:0".parse().expect("addr"))).await;
    let mut s = TcpStream::connect(proxy.local_addr().expect("tcp"))
        .await
        .expect("connect proxy");
    assert!(
        connect_through(&mut s, &echo.to_string(), &token)
            .await
            .contains(" 200 ")
    );
    let stats = proxy.shutdown(Duration::ZERO).await;
    assert_eq!(stats.tunnels, 1);
    let mut rest = Vec::new();
    assert_eq!(
        s.read_to_end(&mut rest).await.expect("eof"),
        0,
        "the client side is closed"
    );
    // Idempotent: a second call returns the same counters.
    assert_eq!(proxy.shutdown(Duration::ZERO).await, stats);
    assert!(
        TcpStream::connect(proxy.local_addr().expect("tcp"))
            .await
            .is_err(),
        "listener closed"
    );
}

#[tokio::test]
async fn unix_socket_listener_and_credentials_added_while_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("proxy.sock");
    std::fs::write(&path, b"").expect("regular file");
    let taken = Proxy::start(
        ProxyConfig::builder()
            .listen(Listen::Unix(path.clone()))
            .credential(Credential::new("run", new_token(), None, policy(&[])))
            .build()
            .expect("config"),
    )
    .await;
    assert!(taken.is_err(), "a regular file at the path is not removed");
    std::fs::remove_file(&path).expect("rm");

    let echo = echo_server().await;
    let (proxy, _token, _) = start(&[], Listen::Unix(path.clone())).await;
    let node_token = new_token();
    proxy
        .add_credential(Credential::new(
            "node",
            node_token.clone(),
            Some("node".into()),
            policy(&["127.0.0.1"]),
        ))
        .expect("add");
    let mut s = tokio::net::UnixStream::connect(&path)
        .await
        .expect("connect unix");
    assert!(
        connect_through(&mut s, &echo.to_string(), &node_token)
            .await
            .contains(" 200 ")
    );
    s.write_all(b"hi").await.expect("write");
    let mut b = [0u8; 2];
    s.read_exact(&mut b).await.expect("echo");
    assert_eq!(&b, b"hi");
    assert!(proxy.remove_credential("node"));
    let mut s2 = tokio::net::UnixStream::connect(&path)
        .await
        .expect("connect unix");
    assert!(
        connect_through(&mut s2, &echo.to_string(), &node_token)
            .await
            .contains(" 407 ")
    );
    proxy.shutdown(Duration::ZERO).await;
    assert!(!path.exists(), "socket file removed at shutdown");
}

#[tokio::test]
async fn shutdown_answers_503_to_connections_reading_a_head() {
    let (proxy, _token, _) = start(&[], Listen::Tcp("127.0.0.1:0".parse().expect("addr"))).await;
    let (mut client, server) = tokio::io::duplex(1024);
    proxy.serve_stream(server);
    client
        .write_all(b"CONNECT a.test:443 HTTP/1.1\r\n")
        .await
        .expect("write");
    tokio::task::yield_now().await;
    proxy.shutdown(Duration::from_secs(5)).await;
    let mut out = String::new();
    client.read_to_string(&mut out).await.expect("read");
    assert!(out.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{out}");
}

#[tokio::test]
async fn removing_a_credential_closes_the_tunnels_opened_with_it() {
    let echo = echo_server().await;
    let (proxy, run_token, events) =
        start(&["127.0.0.1"], Listen::Tcp("127.0.0.1:0".parse().expect("addr"))).await;
    let addr = proxy.local_addr().expect("tcp");
    let node_token = new_token();
    proxy
        .add_credential(Credential::new(
            "node",
            node_token.clone(),
            Some("node".into()),
            policy(&["127.0.0.1"]),
        ))
        .expect("add");
    let mut node = TcpStream::connect(addr).await.expect("connect proxy");
    let mut run = TcpStream::connect(addr).await.expect("connect proxy");
    for (s, t) in [(&mut node, &node_token), (&mut run, &run_token)] {
        assert!(connect_through(s, &echo.to_string(), t).await.contains(" 200 "));
        s.write_all(b"hi").await.expect("write");
        let mut b = [0u8; 2];
        s.read_exact(&mut b).await.expect("echo");
    }
    assert!(proxy.remove_credential("node"));
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), node.read_to_end(&mut rest))
        .await
        .expect("the revoked tunnel closes")
        .expect("eof");
    assert_eq!(n, 0, "nothing more arrives on the revoked tunnel");
    // The other credential's tunnel stays open.
    run.write_all(b"ok").await.expect("write");
    let mut b = [0u8; 2];
    run.read_exact(&mut b).await.expect("echo after the revocation");
    assert_eq!(&b, b"ok");
    proxy.shutdown(Duration::ZERO).await;
    let reasons: Vec<String> = events
        .lock()
        .expect("events")
        .iter()
        .filter_map(|e| match e {
            ProxyEvent::TunnelClosed { close_reason, .. } => Some(close_reason.clone()),
            _ => None,
        })
        .collect();
    assert!(reasons.contains(&"revoked".to_string()), "{reasons:?}");
}
