//! `iterion netproxy serve --tls-inspect --secret …` and `--log-level` (spec 04 §16.1, §14), run as the built
//! binary. Only loopback addresses and `localhost` are used: no test touches the outside network.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};

const VALUE: &str = "ghp_realvalue";

fn iterion(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_iterion"));
    c.args(args)
        .env_remove("ITERION_NETPROXY_TOKEN")
        .env_remove("GH_TOKEN");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run iterion")
}

/// A flag error: exit 2 and exactly these stderr lines.
fn refused(args: &[&str], env: &[(&str, &str)], expect: &str) {
    let mut full = vec!["netproxy", "serve", "--listen", "127.0.0.1:0"];
    full.extend_from_slice(args);
    let out = iterion(&full, env);
    let expect = expect
        .lines()
        .map(|l| format!("error: {l}"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        expect,
        "{args:?}"
    );
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    assert!(out.stdout.is_empty(), "nothing is served: {args:?}");
}

#[test]
fn tls_flag_errors_exit_2() {
    refused(
        &["--tls-inspect", "--secret", "GH_TOKEN=api.github.com"],
        &[],
        "--secret GH_TOKEN: the environment variable GH_TOKEN is not set (the value is read from it)",
    );
    refused(
        &["--secret", "GH_TOKEN=api.github.com"],
        &[("GH_TOKEN", VALUE)],
        "--secret, --tls-bypass, --ca-cert, --ca-key and --ca-out need --tls-inspect",
    );
    refused(
        &["--tls-inspect"],
        &[],
        "--tls-inspect needs at least one --secret NAME=HOST[,HOST...]",
    );
    refused(
        &["--tls-inspect", "--secret", "GH_TOKEN"],
        &[("GH_TOKEN", VALUE)],
        "invalid --secret 'GH_TOKEN' (want NAME=HOST[,HOST...])",
    );
    refused(
        &["--tls-inspect", "--secret", "GH_TOKEN=10.0.0.0/8"],
        &[("GH_TOKEN", VALUE)],
        "host of secret GH_TOKEN '10.0.0.0/8': a CIDR range is not allowed here; bind host names or single IP addresses",
    );
    refused(
        &[
            "--tls-inspect",
            "--secret",
            "GH_TOKEN=api.github.com",
            "--ca-cert",
            "/nonexistent/ca.pem",
        ],
        &[("GH_TOKEN", VALUE)],
        "--ca-cert and --ca-key go together",
    );
    refused(
        &["--log-level", "loud"],
        &[],
        "invalid --log-level 'loud' (want off, error, warn, info, debug or trace)",
    );
}

struct Serve {
    child: Child,
    stdout: BufReader<std::process::ChildStdout>,
    stderr: Arc<Mutex<String>>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &[&str]) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_iterion"))
        .args(["netproxy", "serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("ITERION_NETPROXY_TOKEN")
        .env("GH_TOKEN", VALUE)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let stderr = Arc::new(Mutex::new(String::new()));
    let sink = stderr.clone();
    let mut err = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .expect("stderr")
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    Serve {
        child,
        stdout,
        stderr,
    }
}

impl Serve {
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.stdout.read_line(&mut l).expect("read line");
        l.trim_end().to_owned()
    }

    /// Read lines until one satisfies `f` (events arrive asynchronously).
    fn line_matching(&mut self, f: impl Fn(&str) -> bool) -> String {
        loop {
            let l = self.line();
            assert!(!l.is_empty(), "stdout ended before the expected line");
            if f(&l) {
                return l;
            }
        }
    }

    fn terminate(mut self) -> (Option<i32>, String) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
        assert!(killed.success());
        let status = self.child.wait().expect("wait");
        std::thread::sleep(std::time::Duration::from_millis(100));
        let err = self.stderr.lock().expect("stderr").clone();
        (status.code(), err)
    }
}

/// A plain loopback upstream that records every byte it receives and answers `ok` to each read.
fn recording_upstream() -> (u16, Arc<Mutex<Vec<u8>>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { break };
            let sink = sink.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    sink.lock().expect("seen").extend_from_slice(&buf[..n]);
                    let _ =
                        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
                }
            });
        }
    });
    (port, seen)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn serve_prints_placeholders_writes_the_ca_and_guards_the_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_out = dir.path().join("ca.pem");
    let (port, seen) = recording_upstream();
    let mut proxy = serve(&[
        "--rule",
        "localhost",
        "--rule",
        "127.0.0.0/8",
        "--rule",
        "::1",
        "--tls-inspect",
        "--secret",
        "GH_TOKEN=localhost,api.github.com",
        "--tls-bypass",
        "pinned.example",
        "--ca-out",
        ca_out.to_str().expect("utf-8"),
        "--events",
        "-",
    ]);
    let first = proxy.line();
    let addr = first
        .strip_prefix("listening on ")
        .expect("listening line")
        .to_owned();
    let second = proxy.line();
    let token = second
        .strip_prefix("proxy http://iterion:")
        .and_then(|u| u.split_once('@'))
        .map(|(t, _)| t.to_owned())
        .expect("proxy line");
    let third = proxy.line();
    let placeholder = third
        .strip_prefix("placeholder GH_TOKEN ")
        .expect("placeholder line")
        .to_owned();
    assert_eq!(placeholder.len(), 43);
    assert!(placeholder.starts_with("iterion-ph-"));
    assert!(
        placeholder[11..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    let pem = std::fs::read_to_string(&ca_out).expect("--ca-out written");
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----\n"), "{pem}");
    assert_eq!(pem.matches("BEGIN CERTIFICATE").count(), 1);

    // Plain HTTP with the placeholder: refused, nothing sent (spec §14.5 condition 1).
    let mut s = TcpStream::connect(&addr).expect("connect proxy");
    s.write_all(
        format!(
            "GET http://localhost:{port}/ HTTP/1.1\r\nProxy-Authorization: Bearer {token}\r\nAuthorization: Bearer {placeholder}\r\n\r\n"
        )
        .as_bytes(),
    )
    .expect("write");
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    assert!(resp.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{resp}");
    assert!(
        resp.contains(r#""rule":"secret GH_TOKEN requires TLS""#),
        "{resp}"
    );
    let event = proxy.line_matching(|l| l.contains(r#""type":"denied""#));
    let ev: serde_json::Value = serde_json::from_str(&event).expect("json event");
    assert_eq!(ev["reason"], "secret leak");
    assert_eq!(ev["secret"], "GH_TOKEN");
    assert_eq!(ev["rule"], "secret GH_TOKEN requires TLS");
    assert!(!event.contains(VALUE));

    // A raw tunnel carrying the placeholder is closed before it reaches the upstream.
    let mut s = TcpStream::connect(&addr).expect("connect proxy");
    s.write_all(
        format!(
            "CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\nProxy-Authorization: Bearer {token}\r\n\r\n"
        )
        .as_bytes(),
    )
    .expect("write");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).expect("read") == 1 {
        head.push(b[0]);
    }
    assert_eq!(head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    s.write_all(format!("hello {placeholder}\r\n").as_bytes())
        .expect("write");
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let event = proxy.line_matching(|l| l.contains(r#""type":"denied""#));
    assert!(
        event.contains(r#""rule":"secret GH_TOKEN requires TLS""#),
        "{event}"
    );
    let raw = seen.lock().expect("seen").clone();
    assert!(
        !contains(&raw, b"iterion-ph-"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    assert!(!contains(&raw, VALUE.as_bytes()));

    let (code, stderr) = proxy.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    // The default log level (info) reports the refusals on stderr, never the value.
    assert!(
        stderr.contains("secret leak refused") || stderr.contains("placeholder in a raw tunnel"),
        "{stderr}"
    );
    assert!(!stderr.contains(VALUE));
}

#[test]
fn log_level_off_silences_the_log() {
    let (port, _seen) = recording_upstream();
    let mut proxy = serve(&[
        "--no-auth",
        "--rule",
        "localhost",
        "--rule",
        "127.0.0.0/8",
        "--rule",
        "::1",
        "--tls-inspect",
        "--secret",
        "GH_TOKEN=localhost",
        "--log-level",
        "off",
    ]);
    let addr = proxy
        .line()
        .strip_prefix("listening on ")
        .expect("listening")
        .to_owned();
    let placeholder = proxy
        .line()
        .strip_prefix("placeholder GH_TOKEN ")
        .expect("placeholder")
        .to_owned();
    let mut s = TcpStream::connect(&addr).expect("connect proxy");
    s.write_all(
        format!("GET http://localhost:{port}/ HTTP/1.1\r\nAuthorization: Bearer {placeholder}\r\n\r\n")
            .as_bytes(),
    )
    .expect("write");
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    assert!(resp.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{resp}");
    let (code, stderr) = proxy.terminate();
    assert_eq!(code, Some(0));
    assert!(!stderr.contains("INFO"), "{stderr}");
    assert!(
        stderr.contains("netproxy stopped"),
        "the final statistics are not a log line: {stderr}"
    );
}
