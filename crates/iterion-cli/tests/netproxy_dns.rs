//! `iterion netproxy check --dns-server IP:PORT` (spec 04 §8, §16.2) against a scripted UDP DNS responder on
//! `127.0.0.1:0`, run as the built binary: names resolve through that server only, and the SSRF guard judges the
//! addresses it answered.

use iterion_test_support::dns::ScriptedDns;
use std::net::SocketAddr;
use std::process::{Command, Output};

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;

fn responder() -> ScriptedDns {
    ScriptedDns::start(&[
        ("public.test", &["93.184.216.34"]),
        ("private.test", &["10.1.2.3"]),
        ("rebind.test", &["93.184.216.34", "fd00::7"]),
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
    let dns = responder();
    let server = dns.addr();

    let out = check(server, &["--rule", "**", "public.test"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout(&out).starts_with("allow public.test:443 "), "{out:?}");
    let asked: Vec<u16> = dns
        .questions()
        .into_iter()
        .filter(|(n, _)| n == "public.test")
        .map(|(_, t)| t)
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
    let dns = responder();
    let server = dns.addr();
    let out = check(server, &["--rule", "**", "missing.test:443"]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("dns resolution failed"), "{text}");
    assert!(
        dns.questions().iter().any(|(n, _)| n == "missing.test"),
        "the server was asked"
    );
}
