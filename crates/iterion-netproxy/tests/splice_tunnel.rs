//! CONNECT tunnels between kernel sockets (the splice path on Linux) through the public API: bytes both ways at
//! once with half-close, early bytes, a Unix listener, backpressure from a client that reads late, and the
//! limits (idle, lifetime, shutdown) ending a tunnel, each checked in the `TunnelClosed` event.

use iterion_netpolicy::{Mode, Policy};
use iterion_netproxy::{Listen, Proxy, ProxyConfig, ProxyEvent, RunningProxy};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

type Events = Arc<Mutex<Vec<ProxyEvent>>>;

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(seed) % 251) as u8)
        .collect()
}

async fn start(listen: Listen, limits: impl FnOnce(&mut iterion_netproxy::Limits)) -> (RunningProxy, Events) {
    let events: Events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let policy = Policy::compile(Mode::Allowlist, &[], &["127.0.0.1"]).expect("policy");
    let config = ProxyConfig::builder()
        .listen(listen)
        .no_auth(Arc::new(policy))
        .with_limits(limits)
        .on_event(move |e| sink.lock().expect("events").push(e))
        .build()
        .expect("config");
    (Proxy::start(config).await.expect("start"), events)
}

fn tcp() -> Listen {
    Listen::Tcp("127.0.0.1:0".parse().expect("addr"))
}

/// The one `TunnelClosed` event: (bytes up, bytes down, close reason).
fn closed(events: &Events) -> (u64, u64, String) {
    let ev = events.lock().expect("events");
    let closed: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            ProxyEvent::TunnelClosed {
                bytes_up,
                bytes_down,
                close_reason,
                ..
            } => Some((*bytes_up, *bytes_down, close_reason.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(closed.len(), 1, "{ev:?}");
    closed[0].clone()
}

/// An upstream that accepts one connection and hands it over.
async fn one_upstream() -> (SocketAddr, oneshot::Receiver<TcpStream>) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        if let Ok((s, _)) = l.accept().await {
            let _ = tx.send(s);
        }
    });
    (addr, rx)
}

/// Send `CONNECT` (plus `early` in the same write) and read the response head byte by byte.
async fn connect<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, target: SocketAddr, early: &[u8]) {
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes();
    req.extend_from_slice(early);
    s.write_all(&req).await.expect("write");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).await.expect("read") == 1 {
        head.push(b[0]);
    }
    assert_eq!(head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
}

/// Both peers send at once and half-close; each returns what it received.
async fn exchange<A, B>(a: A, b: B, a_sends: Vec<u8>, b_sends: Vec<u8>) -> (Vec<u8>, Vec<u8>)
where
    A: AsyncRead + AsyncWrite + Send + 'static,
    B: AsyncRead + AsyncWrite + Send + 'static,
{
    async fn side<S: AsyncRead + AsyncWrite>(s: S, sends: Vec<u8>) -> Vec<u8> {
        let (mut r, mut w) = tokio::io::split(s);
        let send = async {
            w.write_all(&sends).await.expect("write");
            w.shutdown().await.expect("half-close");
        };
        let mut got = Vec::new();
        let ((), n) = tokio::join!(send, r.read_to_end(&mut got));
        n.expect("read");
        got
    }
    let a = tokio::spawn(side(a, a_sends));
    let b = tokio::spawn(side(b, b_sends));
    (a.await.expect("a"), b.await.expect("b"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_both_ways_with_half_close_over_tcp() {
    let (proxy, events) = start(tcp(), |_| {}).await;
    let (target, accepted) = one_upstream().await;
    let mut client = TcpStream::connect(proxy.local_addr().expect("tcp"))
        .await
        .expect("connect");
    connect(&mut client, target, b"").await;
    let upstream = accepted.await.expect("accepted");
    let up = pattern(6 << 20, 7);
    let down = pattern(24 << 20, 13);
    let (client_got, upstream_got) = exchange(client, upstream, up.clone(), down.clone()).await;
    assert!(
        upstream_got == up,
        "upstream got {} of {} bytes",
        upstream_got.len(),
        up.len()
    );
    assert!(
        client_got == down,
        "client got {} of {} bytes",
        client_got.len(),
        down.len()
    );
    let stats = proxy.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        (stats.bytes_up, stats.bytes_down),
        (up.len() as u64, down.len() as u64)
    );
    assert_eq!(
        closed(&events),
        (up.len() as u64, down.len() as u64, "eof".to_owned())
    );
}

#[tokio::test]
async fn early_bytes_go_first_through_a_unix_listener() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("proxy.sock");
    let (proxy, events) = start(Listen::Unix(path.clone()), |_| {}).await;
    let (target, accepted) = one_upstream().await;
    let mut client = tokio::net::UnixStream::connect(&path).await.expect("connect");
    connect(&mut client, target, b"early-bytes|").await;
    let upstream = accepted.await.expect("accepted");
    let up = pattern(1 << 20, 3);
    let down = pattern(3 << 20, 5);
    let (client_got, upstream_got) = exchange(client, upstream, up.clone(), down.clone()).await;
    let mut expect_up = b"early-bytes|".to_vec();
    expect_up.extend_from_slice(&up);
    assert!(
        upstream_got == expect_up,
        "upstream got {} bytes",
        upstream_got.len()
    );
    assert!(client_got == down, "client got {} bytes", client_got.len());
    proxy.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        closed(&events),
        (expect_up.len() as u64, down.len() as u64, "eof".to_owned())
    );
}

#[tokio::test]
async fn a_client_that_reads_late_loses_nothing() {
    let (proxy, events) = start(tcp(), |_| {}).await;
    let (target, accepted) = one_upstream().await;
    let mut client = TcpStream::connect(proxy.local_addr().expect("tcp"))
        .await
        .expect("connect");
    connect(&mut client, target, b"").await;
    let mut upstream = accepted.await.expect("accepted");
    let down = pattern(32 << 20, 11);
    let expect = down.clone();
    // The client does not read at first: the proxy's writes to it would block and the rest waits in the pipe
    // and the socket buffers.
    let writer = tokio::spawn(async move {
        upstream.write_all(&down).await.expect("write");
        upstream.shutdown().await.expect("half-close");
        upstream
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    client.shutdown().await.expect("client half-close");
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.expect("read");
    assert!(
        got == expect,
        "client got {} of {} bytes",
        got.len(),
        expect.len()
    );
    drop(writer.await);
    proxy.shutdown(Duration::from_secs(5)).await;
    assert_eq!(closed(&events), (0, expect.len() as u64, "eof".to_owned()));
}

#[tokio::test]
async fn an_idle_tunnel_is_closed() {
    let (proxy, events) = start(tcp(), |l| l.tunnel_idle_timeout = Duration::from_millis(300)).await;
    let (target, accepted) = one_upstream().await;
    let mut client = TcpStream::connect(proxy.local_addr().expect("tcp"))
        .await
        .expect("connect");
    connect(&mut client, target, b"").await;
    let mut upstream = accepted.await.expect("accepted");
    client.write_all(b"hello").await.expect("write");
    let mut b = [0u8; 5];
    upstream.read_exact(&mut b).await.expect("read");
    // Nothing more: the proxy closes both sides.
    let mut rest = Vec::new();
    assert_eq!(client.read_to_end(&mut rest).await.expect("eof"), 0);
    assert_eq!(upstream.read_to_end(&mut rest).await.expect("eof"), 0);
    proxy.shutdown(Duration::from_secs(5)).await;
    assert_eq!(closed(&events), (5, 0, "idle".to_owned()));
}

#[tokio::test]
async fn the_lifetime_ends_a_busy_tunnel() {
    let (proxy, events) = start(tcp(), |l| {
        l.tunnel_idle_timeout = Duration::from_secs(60);
        l.tunnel_max_lifetime = Some(Duration::from_millis(400));
    })
    .await;
    let (target, accepted) = one_upstream().await;
    let mut client = TcpStream::connect(proxy.local_addr().expect("tcp"))
        .await
        .expect("connect");
    connect(&mut client, target, b"").await;
    let mut upstream = accepted.await.expect("accepted");
    // Keep bytes flowing until the proxy closes the tunnel.
    let feeder = tokio::spawn(async move {
        let mut sent = 0u64;
        while upstream.write_all(b"tick").await.is_ok() {
            sent += 4;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        sent
    });
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.expect("eof");
    let sent = feeder.await.expect("feeder");
    proxy.shutdown(Duration::from_secs(5)).await;
    let (up, down, reason) = closed(&events);
    assert_eq!((up, reason.as_str()), (0, "lifetime"));
    assert_eq!(down, got.len() as u64);
    assert!(down > 0 && down <= sent, "down {down}, sent {sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_a_tunnel_in_the_middle_of_a_transfer() {
    let (proxy, events) = start(tcp(), |_| {}).await;
    let (target, accepted) = one_upstream().await;
    let mut client = TcpStream::connect(proxy.local_addr().expect("tcp"))
        .await
        .expect("connect");
    connect(&mut client, target, b"").await;
    let mut upstream = accepted.await.expect("accepted");
    let writer = tokio::spawn(async move {
        let chunk = vec![9u8; 64 * 1024];
        while upstream.write_all(&chunk).await.is_ok() {}
    });
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0;
    while got < 1 << 20 {
        let n = client.read(&mut buf).await.expect("read");
        assert!(n > 0, "tunnel ended early");
        got += n;
    }
    proxy.shutdown(Duration::ZERO).await;
    // The tunnel is gone: the client reaches end of file (or a reset) after what was in flight.
    loop {
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    writer
        .await
        .expect("writer ends once the upstream side is closed");
    let (_, down, reason) = closed(&events);
    assert_eq!(reason, "shutdown");
    assert!(down >= got as u64);
}
