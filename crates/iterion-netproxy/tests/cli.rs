//! The standalone `iterion-netproxy` binary: the same `check` as `iterion netproxy check`, and a `serve` that
//! starts and stops on SIGTERM. Only IP literals and `--no-resolve` are decided; the proxy listens on
//! `127.0.0.1:0`.
#![cfg(feature = "cli")]

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

fn netproxy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iterion-netproxy"))
        .args(args)
        .env_remove("ITERION_NETPROXY_TOKEN")
        .output()
        .expect("run iterion-netproxy")
}

/// One `check` invocation: expected stdout (stderr when the exit code is 2) and exit code.
fn check(args: &[&str], expect: &str, code: i32) {
    let mut full = vec!["check"];
    full.extend_from_slice(args);
    let out = netproxy(&full);
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
fn check_decides_like_the_proxy() {
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
        &["--mode", "denylist", "0xa9fea9fe"],
        r#"deny 169.254.169.254:443 reason="non-global address" rule="non-global address" address=169.254.169.254"#,
        1,
    );
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
        &["--preset", "nope", "--dns-server", "x", "x.com"],
        "unknown network preset 'nope' (want iterion-default or none)\ninvalid --dns-server 'x' (want IP or IP:PORT)",
        2,
    );
}

#[test]
fn usage_errors_exit_2() {
    let out = netproxy(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    let out = netproxy(&["serve", "--idle-timeout", "10", "--no-auth"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "error: invalid duration for --idle-timeout: '10'"
    );
}

#[test]
fn serve_listens_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_iterion-netproxy"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--no-auth",
            "--log-level",
            "off",
        ])
        .env_remove("ITERION_NETPROXY_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert!(line.starts_with("listening on 127.0.0.1:"), "{line}");
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
    assert!(killed.success());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("netproxy stopped: 0 connections"), "{stderr}");
}

/// `--json` puts the final statistics on stdout as JSON; a denial is logged on stderr at the default level,
/// without colour codes when stderr is not a terminal.
#[test]
fn serve_json_stats_on_stdout_and_plain_denial_logs() {
    use std::io::{Read, Write};
    let mut child = Command::new(env!("CARGO_BIN_EXE_iterion-netproxy"))
        .args(["serve", "--listen", "127.0.0.1:0", "--no-auth", "--json"])
        .env_remove("ITERION_NETPROXY_TOKEN")
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    // no rule: every target is denied
    let mut c = std::net::TcpStream::connect(&addr).expect("connect");
    c.write_all(b"CONNECT denied.example:443 HTTP/1.1\r\nHost: denied.example:443\r\n\r\n")
        .expect("write");
    let mut head = [0u8; 12];
    c.read_exact(&mut head).expect("answer");
    assert_eq!(&head, b"HTTP/1.1 403");
    drop(c);
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("rest of stdout");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0));
    let stats: serde_json::Value = serde_json::from_str(rest.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("stats JSON on stdout ({e}): {rest}"));
    assert_eq!(stats["connections"], 1, "{stats}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("denied") && stderr.contains("denied.example"),
        "{stderr}"
    );
    assert!(
        !stderr.contains('\x1b'),
        "colour codes on a non-terminal: {stderr:?}"
    );
}

/// Built without TLS inspection, `--tls-inspect` is a usage error naming the missing feature, never ignored.
#[cfg(not(feature = "tls-inspection"))]
#[test]
fn tls_inspection_needs_the_feature() {
    let out = Command::new(env!("CARGO_BIN_EXE_iterion-netproxy"))
        .args([
            "serve",
            "--no-auth",
            "--tls-inspect",
            "--secret",
            "GH_TOKEN=api.github.com",
        ])
        .env_remove("ITERION_NETPROXY_TOKEN")
        .env("GH_TOKEN", "ghp_x")
        .output()
        .expect("run iterion-netproxy");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "error: tls inspection is not available in this build (secret GH_TOKEN needs it): enable the tls-inspection feature"
    );
}
