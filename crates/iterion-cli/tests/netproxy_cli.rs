//! `iterion netproxy check|serve` (spec 04 §16, §18.9, §18.10 E6), run as the built binary. Only IP literals,
//! `--no-resolve` and `localhost` are decided: no test touches the outside network.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};

fn iterion(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iterion"))
        .args(args)
        .env_remove("ITERION_NETPROXY_TOKEN")
        .output()
        .expect("run iterion")
}

/// One `check` invocation: expected stdout (or stderr when the exit code is 2) and exit code.
fn check(args: &[&str], expect: &str, code: i32) {
    let mut full = vec!["netproxy", "check"];
    full.extend_from_slice(args);
    let out = iterion(&full);
    let text = if code == 2 { &out.stderr } else { &out.stdout };
    // usage errors are printed one per line, each with the `error: ` prefix of every iterion command
    let expect = if code == 2 {
        expect
            .lines()
            .map(|l| format!("error: {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        expect.to_string()
    };
    assert_eq!(String::from_utf8_lossy(text).trim_end(), expect, "args {args:?}");
    assert_eq!(out.status.code(), Some(code), "args {args:?}");
}

#[test]
fn check_vectors() {
    check(
        &["--rule", "**.github.com", "--no-resolve", "api.github.com"],
        r#"allow api.github.com:443 rule="**.github.com""#,
        0,
    );
    check(
        &["--rule", "**.github.com", "--no-resolve", "evil.example:80"],
        r#"deny evil.example:80 reason="policy denial" rule="no rule matched""#,
        1,
    );
    check(
        &["--mode", "denylist", "169.254.169.254:80"],
        r#"deny 169.254.169.254:80 reason="non-global address" rule="non-global address" address=169.254.169.254"#,
        1,
    );
    check(
        &["--mode", "denylist", "0xa9fea9fe"],
        r#"deny 169.254.169.254:443 reason="non-global address" rule="non-global address" address=169.254.169.254"#,
        1,
    );
    check(
        &["--rule", "**", "2130706433:80"],
        r#"deny 127.0.0.1:80 reason="policy denial" rule="no rule matched""#,
        1,
    );
    check(
        &["--mode", "denylist", "[::ffff:169.254.169.254]:80"],
        r#"deny 169.254.169.254:80 reason="non-global address" rule="non-global address" address=169.254.169.254"#,
        1,
    );
    check(
        &["--mode", "denylist", "64:ff9b::a9fe:a9fe"],
        r#"deny [64:ff9b::a9fe:a9fe]:443 reason="non-global address" rule="non-global address" address=64:ff9b::a9fe:a9fe"#,
        1,
    );
    check(
        &["--rule", "a*b.com", "x.com"],
        "invalid network rule 'a*b.com': a wildcard must be the whole leftmost label: *.example.com or **.example.com",
        2,
    );
    check(
        &["--preset", "nope", "x.com"],
        "unknown network preset 'nope' (want iterion-default or none)",
        2,
    );
    // The §18.9 vector reads `--rule github.com`, but a rule without a port matches every port (§5.2, N28/N29):
    // the denial it shows needs a port-scoped rule.
    check(
        &[
            "--json",
            "--no-resolve",
            "--rule",
            "github.com:443",
            "github.com:22",
        ],
        r#"{"target":"github.com:22","host":"github.com","port":22,"decision":"deny","reason":"policy denial","rule":"no rule matched"}"#,
        1,
    );
    check(
        &["--mode", "denylist", "--no-resolve", "example.org"],
        r#"allow example.org:443 rule="(mode fallback)""#,
        0,
    );
    check(
        &["--no-resolve", "bad..host"],
        r#"deny bad..host reason="invalid target" rule="-""#,
        1,
    );
    check(
        &["--mode", "nope", "x.com"],
        "invalid network mode 'nope' (want allowlist, denylist or open)",
        2,
    );
}

#[test]
fn check_lists_every_rule_error_and_keeps_input_order() {
    check(
        &["--rule", "a*b.com", "--rule", "10.0.0.0/99", "x.com"],
        "invalid network rule 'a*b.com': a wildcard must be the whole leftmost label: *.example.com or **.example.com\n\
         invalid network rule '10.0.0.0/99': the prefix length of an IPv4 range is at most 32",
        2,
    );
    check(
        &["--no-resolve", "--rule", "b.test", "b.test", "a.test"],
        "allow b.test:443 rule=\"b.test\"\ndeny a.test:443 reason=\"policy denial\" rule=\"no rule matched\"",
        1,
    );
}

#[test]
fn check_resolves_localhost_and_refuses_loopback() {
    let out = iterion(&["netproxy", "check", "--json", "--mode", "open", "localhost:8080"]);
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json line");
    assert_eq!(
        (line["decision"].as_str(), line["reason"].as_str()),
        (Some("deny"), Some("non-global address"))
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn check_reads_a_rules_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rules.txt");
    std::fs::write(&path, "# comment\n\n**.github.com\n!gist.github.com\n").expect("write rules");
    let p = path.to_str().expect("utf-8 path");
    check(
        &["--rules-file", p, "--no-resolve", "gist.github.com"],
        r#"deny gist.github.com:443 reason="policy denial" rule="!gist.github.com""#,
        1,
    );
    check(
        &[
            "--rules-file",
            p,
            "--rule",
            "gist.github.com",
            "--no-resolve",
            "gist.github.com",
        ],
        r#"allow gist.github.com:443 rule="gist.github.com""#,
        0,
    );
}

/// A running `serve` child, killed on drop.
struct Serve {
    child: Child,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &[&str]) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_iterion"))
        .args(["netproxy", "serve"])
        .args(args)
        .env_remove("ITERION_NETPROXY_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    Serve { child, stdout }
}

impl Serve {
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.stdout.read_line(&mut l).expect("read line");
        l.trim_end().to_owned()
    }

    /// SIGTERM, then the exit code and stderr.
    fn terminate(mut self) -> (Option<i32>, String) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
        assert!(killed.success());
        let status = self.child.wait().expect("wait");
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (status.code(), err)
    }
}

fn http(addr: &str, request: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect proxy");
    s.write_all(request.as_bytes()).expect("write");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn serve_prints_listen_line_then_proxy_url_then_events() {
    let mut proxy = serve(&[
        "--listen",
        "127.0.0.1:0",
        "--rule",
        "allowed.test",
        "--events",
        "-",
    ]);
    let first = proxy.line();
    let addr = first
        .strip_prefix("listening on ")
        .expect("first line is 'listening on IP:PORT'")
        .to_owned();
    assert!(addr.starts_with("127.0.0.1:"), "{first}");
    let second = proxy.line();
    let url = second
        .strip_prefix("proxy http://iterion:")
        .expect("second line is the proxy URL");
    let (token, host) = url.split_once('@').expect("token@host");
    assert_eq!((token.len(), host), (64, addr.as_str()));

    let denied = http(
        &addr,
        &format!("CONNECT evil.test:443 HTTP/1.1\r\nProxy-Authorization: Bearer {token}\r\n\r\n"),
    );
    assert!(denied.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{denied}");
    let event: serde_json::Value = serde_json::from_str(&proxy.line()).expect("event line");
    assert_eq!(
        (event["type"].as_str(), event["host"].as_str()),
        (Some("denied"), Some("evil.test"))
    );
    assert!(
        event["ts"].as_str().is_some_and(|ts| ts.ends_with('Z')),
        "{event}"
    );
    let keys: Vec<&str> = event
        .as_object()
        .map(|o| o.keys().map(String::as_str).take(2).collect())
        .unwrap_or_default();
    assert_eq!(keys, ["type", "ts"]);

    // Any username is accepted with the right token; a wrong token is a 407.
    let basic = iterion_netproxy::base64_encode(format!("someone:{token}").as_bytes());
    let r = http(
        &addr,
        &format!("CONNECT evil.test:443 HTTP/1.1\r\nProxy-Authorization: Basic {basic}\r\n\r\n"),
    );
    assert!(r.starts_with("HTTP/1.1 403 "), "{r}");
    let r = http(
        &addr,
        "CONNECT evil.test:443 HTTP/1.1\r\nProxy-Authorization: Bearer nope\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 407 "), "{r}");

    let (code, stderr) = proxy.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("netproxy stopped"), "{stderr}");
}

#[test]
fn serve_with_a_given_token_prints_no_url() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("token");
    std::fs::write(&path, "0123456789abcdef0123456789abcdef\n").expect("write token");
    let mut proxy = serve(&[
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        path.to_str().expect("utf-8"),
    ]);
    let addr = proxy
        .line()
        .strip_prefix("listening on ")
        .expect("listen line")
        .to_owned();
    let r = http(
        &addr,
        "CONNECT evil.test:443 HTTP/1.1\r\nProxy-Authorization: Bearer 0123456789abcdef0123456789abcdef\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 403 "), "{r}");
    let (code, _) = proxy.terminate();
    assert_eq!(code, Some(0));
}

fn serve_fails(args: &[&str], code: i32, stderr_has: &str) {
    let mut full = vec!["netproxy", "serve"];
    full.extend_from_slice(args);
    let out = iterion(&full);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(stderr_has), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}");
}

#[test]
fn serve_refusals_and_exit_codes() {
    serve_fails(
        &["--listen", "0.0.0.0:0", "--no-auth"],
        2,
        "--no-auth is refused on the non-loopback address",
    );
    serve_fails(
        &["--rule", "a*b.com", "--rule", "*"],
        2,
        "invalid network rule '*'",
    );
    serve_fails(
        &["--rule", "a*b.com", "--rule", "*"],
        2,
        "invalid network rule 'a*b.com'",
    );
    serve_fails(
        &[
            "--tls-inspect",
            "--secret",
            "ITERION_TEST_UNSET_SECRET=api.github.com",
        ],
        2,
        "the environment variable ITERION_TEST_UNSET_SECRET is not set",
    );
    serve_fails(
        &["--idle-timeout", "soon"],
        2,
        "invalid duration for --idle-timeout: 'soon'",
    );
    serve_fails(&["--listen", "nowhere"], 2, "invalid listen address 'nowhere'");
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    serve_fails(&["--listen", &addr], 1, "cannot start the proxy");
}
