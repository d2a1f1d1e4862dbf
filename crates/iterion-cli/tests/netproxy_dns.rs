//! `iterion netproxy check --dns-server IP:PORT` (spec 04 §8, §16.2) against a scripted UDP DNS responder on
//! `127.0.0.1:0`, run as the built binary: names resolve through that server only, and the SSRF guard judges the
//! addresses it answered.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

/// The questions the responder saw: (lower-case name without the trailing dot, query type).
type Log = Arc<Mutex<Vec<(String, u16)>>>;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;

/// The question of a DNS query: (name, type, end offset of the question section).
fn question(q: &[u8]) -> Option<(String, u16, usize)> {
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*q.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        // No compression in a question we sent ourselves.
        if len & 0xc0 != 0 {
            return None;
        }
        labels.push(String::from_utf8_lossy(q.get(i..i + len)?).to_ascii_lowercase());
        i += len;
    }
    let qtype = u16::from_be_bytes([*q.get(i)?, *q.get(i + 1)?]);
    Some((labels.join("."), qtype, i + 4))
}

/// The answer to `q`: the question echoed, then the zone's records of the asked type (NXDOMAIN for an unknown
/// name).
fn answer(q: &[u8], zone: &HashMap<&str, Vec<IpAddr>>, log: &Log) -> Option<Vec<u8>> {
    if q.len() < 12 || u16::from_be_bytes([q[4], q[5]]) != 1 {
        return None;
    }
    let (name, qtype, end) = question(q)?;
    log.lock().ok()?.push((name.clone(), qtype));
    let records: Vec<Vec<u8>> = match zone.get(name.as_str()) {
        None => Vec::new(),
        Some(addrs) => addrs
            .iter()
            .filter_map(|ip| match (ip, qtype) {
                (IpAddr::V4(v4), TYPE_A) => Some(v4.octets().to_vec()),
                (IpAddr::V6(v6), TYPE_AAAA) => Some(v6.octets().to_vec()),
                _ => None,
            })
            .collect(),
    };
    let rcode: u8 = if zone.contains_key(name.as_str()) { 0 } else { 3 };
    let mut r = Vec::with_capacity(512);
    r.extend_from_slice(&q[0..2]); // id
    r.push(0x80 | (q[2] & 0x79) | 0x04); // QR, opcode and RD copied, AA
    r.push(0x80 | rcode); // RA
    r.extend_from_slice(&1u16.to_be_bytes());
    r.extend_from_slice(&(records.len() as u16).to_be_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]);
    r.extend_from_slice(&q[12..end]);
    for rdata in records {
        r.extend_from_slice(&[0xc0, 12]); // the name in the question
        r.extend_from_slice(&qtype.to_be_bytes());
        r.extend_from_slice(&1u16.to_be_bytes()); // IN
        r.extend_from_slice(&60u32.to_be_bytes());
        r.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        r.extend_from_slice(&rdata);
    }
    Some(r)
}

/// A UDP responder on `127.0.0.1:0` serving `zone` on a background thread for the life of the test process.
fn responder(zone: HashMap<&'static str, Vec<IpAddr>>) -> (SocketAddr, Log) {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    let addr = sock.local_addr().expect("udp addr");
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, peer)) = sock.recv_from(&mut buf) {
            if let Some(r) = answer(&buf[..n], &zone, &seen) {
                let _ = sock.send_to(&r, peer);
            }
        }
    });
    (addr, log)
}

fn zone() -> HashMap<&'static str, Vec<IpAddr>> {
    let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
    HashMap::from([
        ("public.test", vec![ip("93.184.216.34")]),
        ("private.test", vec![ip("10.1.2.3")]),
        ("rebind.test", vec![ip("93.184.216.34"), ip("fd00::7")]),
    ])
}

fn check(server: SocketAddr, args: &[&str]) -> Output {
    let server = server.to_string();
    let mut full = vec!["netproxy", "check", "--dns-server", server.as_str()];
    full.extend_from_slice(args);
    Command::new(env!("CARGO_BIN_EXE_iterion"))
        .args(&full)
        .env_remove("ITERION_NETPROXY_TOKEN")
        .output()
        .expect("run iterion")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
}

#[test]
fn check_resolves_through_the_dns_server() {
    let (server, log) = responder(zone());

    let out = check(server, &["--rule", "**", "public.test"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout(&out).starts_with("allow public.test:443 "), "{out:?}");
    let asked: Vec<u16> = log
        .lock()
        .expect("log")
        .iter()
        .filter(|(n, _)| n == "public.test")
        .map(|(_, t)| *t)
        .collect();
    assert!(asked.contains(&TYPE_A) && asked.contains(&TYPE_AAAA), "{asked:?}");

    let out = check(server, &["--rule", "**", "private.test:443"]);
    assert_eq!(
        (stdout(&out).as_str(), out.status.code()),
        (
            r#"deny private.test:443 reason="non-global address" rule="non-global address" address=10.1.2.3"#,
            Some(1)
        ),
        "{out:?}"
    );

    // One public and one private answer: refused on the private one (the rebinding shape).
    let out = check(server, &["--rule", "**", "rebind.test:443"]);
    assert_eq!(
        (stdout(&out).as_str(), out.status.code()),
        (
            r#"deny rebind.test:443 reason="non-global address" rule="non-global address" address=fd00::7"#,
            Some(1)
        ),
        "{out:?}"
    );

    // An explicit rule for the private range lets the same answer through.
    let out = check(
        server,
        &[
            "--rule",
            "private.test",
            "--rule",
            "10.0.0.0/8",
            "private.test:443",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout(&out).starts_with("allow private.test:443 "), "{out:?}");
}

#[test]
fn a_name_the_server_does_not_know_is_a_resolution_failure() {
    let (server, log) = responder(zone());
    let out = check(server, &["--rule", "**", "missing.test:443"]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("dns resolution failed"), "{text}");
    assert!(
        log.lock().expect("log").iter().any(|(n, _)| n == "missing.test"),
        "the server was asked"
    );
}
