//! A scripted DNS server for tests: UDP on `127.0.0.1:0`, answering A and AAAA questions from a fixed zone on a
//! background thread, and logging every question it saw. Tests point `--dns-server` (or a resolver) at it, so no
//! test ever asks a real DNS server.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;

/// A running scripted server; it lives until the test process ends.
#[derive(Debug, Clone)]
pub struct ScriptedDns {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<(String, u16)>>>,
}

impl ScriptedDns {
    /// Serve `zone`: each name (lower case, no trailing dot) with its addresses. A name outside the zone is
    /// NXDOMAIN; a name in it without records of the asked type gets an empty answer.
    pub fn start(zone: &[(&str, &[&str])]) -> Self {
        let zone: HashMap<String, Vec<IpAddr>> = zone
            .iter()
            .map(|(name, ips)| {
                let ips = ips
                    .iter()
                    .map(|ip| ip.parse().unwrap_or_else(|_| panic!("zone address '{ip}'")))
                    .collect();
                ((*name).to_owned(), ips)
            })
            .collect();
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind the scripted DNS server");
        let addr = sock.local_addr().expect("scripted DNS address");
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while let Ok((n, peer)) = sock.recv_from(&mut buf) {
                if let Some(r) = answer(&buf[..n], &zone, &seen) {
                    let _ = sock.send_to(&r, peer);
                }
            }
        });
        Self { addr, log }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The questions seen so far: (lower-case name without the trailing dot, query type: 1 = A, 28 = AAAA).
    pub fn questions(&self) -> Vec<(String, u16)> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

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
        // A resolver does not compress the name of its own question.
        if len & 0xc0 != 0 {
            return None;
        }
        labels.push(String::from_utf8_lossy(q.get(i..i + len)?).to_ascii_lowercase());
        i += len;
    }
    let qtype = u16::from_be_bytes([*q.get(i)?, *q.get(i + 1)?]);
    Some((labels.join("."), qtype, i + 4))
}

/// The answer to `q`: the question echoed, then the zone's records of the asked type.
fn answer(q: &[u8], zone: &HashMap<String, Vec<IpAddr>>, log: &Mutex<Vec<(String, u16)>>) -> Option<Vec<u8>> {
    if q.len() < 12 || u16::from_be_bytes([q[4], q[5]]) != 1 {
        return None;
    }
    let (name, qtype, end) = question(q)?;
    if let Ok(mut l) = log.lock() {
        l.push((name.clone(), qtype));
    }
    let records: Vec<Vec<u8>> = zone
        .get(&name)
        .into_iter()
        .flatten()
        .filter_map(|ip| match (ip, qtype) {
            (IpAddr::V4(v4), TYPE_A) => Some(v4.octets().to_vec()),
            (IpAddr::V6(v6), TYPE_AAAA) => Some(v6.octets().to_vec()),
            _ => None,
        })
        .collect();
    let rcode: u8 = if zone.contains_key(&name) { 0 } else { 3 };
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
