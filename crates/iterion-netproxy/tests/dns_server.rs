//! `DnsServerResolver` (`--dns-server`) against a scripted UDP DNS responder on `127.0.0.1:0`: the answers
//! come from that server only, both A and AAAA are asked, and the SSRF guard (spec §8.2) refuses a non-global
//! answer, in `decide` and in a live proxy that dials the address the responder gave.

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use iterion_netpolicy::{Mode, Policy, Reason, Target};
use iterion_netproxy::{
    DecideOptions, DnsServerResolver, Listen, Proxy, ProxyConfig, ResolveError, Resolver, decide,
};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// Names (lower case, no trailing dot) and their addresses; a name not listed is NXDOMAIN.
type Zone = HashMap<&'static str, Vec<IpAddr>>;
/// The questions the responder saw: (name, type).
type Log = Arc<Mutex<Vec<(String, RecordType)>>>;

/// A UDP DNS responder answering A and AAAA questions from `zone`.
async fn responder(zone: Zone) -> (SocketAddr, Log) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.expect("bind udp");
    let addr = sock.local_addr().expect("udp addr");
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, peer)) = sock.recv_from(&mut buf).await {
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut reply = Message::response(query.metadata.id, query.metadata.op_code);
            reply.metadata.recursion_desired = query.metadata.recursion_desired;
            reply.metadata.recursion_available = true;
            reply.metadata.authoritative = true;
            reply.add_queries(query.queries.iter().cloned());
            for q in &query.queries {
                let name = q.name().to_ascii().trim_end_matches('.').to_ascii_lowercase();
                seen.lock().expect("log").push((name.clone(), q.query_type()));
                let Some(addrs) = zone.get(name.as_str()) else {
                    reply.metadata.response_code = ResponseCode::NXDomain;
                    continue;
                };
                for ip in addrs {
                    let rdata = match (ip, q.query_type()) {
                        (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
                        (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
                        _ => continue,
                    };
                    reply.add_answer(Record::from_rdata(q.name().clone(), 60, rdata));
                }
            }
            if let Ok(bytes) = reply.to_vec() {
                let _ = sock.send_to(&bytes, peer).await;
            }
        }
    });
    (addr, log)
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn zone() -> Zone {
    HashMap::from([
        (
            "public.test",
            vec![ip("93.184.216.34"), ip("2606:2800:220:1:248:1893:25c8:1946")],
        ),
        ("private.test", vec![ip("10.1.2.3")]),
        ("rebind.test", vec![ip("93.184.216.34"), ip("::1")]),
        ("local.test", vec![ip("127.0.0.1")]),
    ])
}

fn policy(mode: Mode, rules: &[&str]) -> Policy {
    Policy::compile(mode, &[], rules).expect("policy")
}

#[tokio::test]
async fn answers_come_from_the_configured_server_only() {
    let (server, log) = responder(zone()).await;
    let resolver = DnsServerResolver::new(server).expect("resolver");
    let mut got = resolver.lookup("public.test").await.expect("lookup");
    got.sort();
    assert_eq!(
        got,
        vec![ip("93.184.216.34"), ip("2606:2800:220:1:248:1893:25c8:1946")]
    );
    let asked: Vec<RecordType> = log
        .lock()
        .expect("log")
        .iter()
        .filter(|(n, _)| n == "public.test")
        .map(|(_, t)| *t)
        .collect();
    assert!(
        asked.contains(&RecordType::A) && asked.contains(&RecordType::AAAA),
        "{asked:?}"
    );
    assert_eq!(
        resolver.lookup("missing.test").await,
        Err(ResolveError::NoAddress {
            host: "missing.test".into()
        })
    );
}

#[tokio::test]
async fn the_guard_checks_what_the_server_answered() {
    let (server, _log) = responder(zone()).await;
    let resolver = DnsServerResolver::new(server).expect("resolver");
    let opts = DecideOptions::default();
    let any = policy(Mode::Allowlist, &["**"]);
    let check = |host: &str| Target::parse(&format!("{host}:443"), None).expect("target");

    let d = decide(&any, &check("public.test"), Some(&resolver), &opts)
        .await
        .expect("decide");
    assert!(d.allowed, "{d:?}");
    assert_eq!(d.addresses.len(), 2, "{d:?}");

    for (host, bad) in [("private.test", "10.1.2.3"), ("rebind.test", "::1")] {
        let d = decide(&any, &check(host), Some(&resolver), &opts)
            .await
            .expect("decide");
        assert!(!d.allowed, "{host}: {d:?}");
        assert_eq!(d.reason, Some(Reason::NonGlobalAddress), "{host}: {d:?}");
        assert_eq!(d.address, Some(ip(bad)), "{host}: {d:?}");
    }

    // An explicit allow for the private range lets the same answer through.
    let explicit = policy(Mode::Allowlist, &["private.test", "10.0.0.0/8"]);
    let d = decide(&explicit, &check("private.test"), Some(&resolver), &opts)
        .await
        .expect("decide");
    assert!(d.allowed, "{d:?}");
    assert_eq!(d.addresses, vec![ip("10.1.2.3")]);

    let e = decide(&any, &check("missing.test"), Some(&resolver), &opts).await;
    assert!(e.is_err(), "NXDOMAIN is not a decision: {e:?}");
}

/// A loopback echo server.
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

async fn connect_head(proxy: SocketAddr, target: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(proxy).await.expect("connect proxy");
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).await.expect("read") == 1 {
        head.push(b[0]);
    }
    (s, String::from_utf8_lossy(&head).into_owned())
}

#[tokio::test]
async fn a_live_proxy_dials_what_the_server_answered() {
    let (server, log) = responder(zone()).await;
    let echo = echo_server().await;
    let resolver = DnsServerResolver::new(server).expect("resolver");
    // local.test answers 127.0.0.1: allowed only with the explicit loopback rule; private.test never is.
    let rules = ["local.test", "private.test", "127.0.0.1"];
    let config = ProxyConfig::builder()
        .listen(Listen::Tcp("127.0.0.1:0".parse().expect("addr")))
        .no_auth(Arc::new(policy(Mode::Allowlist, &rules)))
        .resolver(Arc::new(resolver))
        .with_limits(|l| l.dns_timeout = Duration::from_secs(5))
        .build()
        .expect("config");
    let proxy = Proxy::start(config).await.expect("start");
    let addr = proxy.local_addr().expect("tcp");

    let (mut s, head) = connect_head(addr, &format!("local.test:{}", echo.port())).await;
    assert_eq!(head, "HTTP/1.1 200 Connection Established\r\n\r\n");
    s.write_all(b"via dns").await.expect("write");
    let mut back = [0u8; 7];
    s.read_exact(&mut back).await.expect("echo");
    assert_eq!(&back, b"via dns");
    assert!(
        log.lock().expect("log").iter().any(|(n, _)| n == "local.test"),
        "the proxy asked the configured server"
    );

    let (_s, head) = connect_head(addr, "private.test:443").await;
    assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
    assert!(
        head.contains("X-Iterion-Reason: non-global address\r\n"),
        "{head}"
    );

    let (_s, head) = connect_head(addr, "local.test:1").await;
    // Allowed (explicit loopback rule) and dialled at the answered address, where nothing listens.
    assert!(head.starts_with("HTTP/1.1 502 "), "{head}");
    proxy.shutdown(Duration::ZERO).await;
}
