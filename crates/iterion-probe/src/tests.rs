//! Unit tests of the probes, run on the host.
use crate::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn probe(args: &[&str], env: &[(&str, &str)]) -> (i32, Value) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let (code, line) = run_probe(&args, &env);
    assert!(!line.contains('\n'), "one line: {line}");
    (
        code,
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")),
    )
}

#[test]
fn sha256_matches_the_sha2_crate() {
    let known = [
        (
            "",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ),
        (
            "abc",
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        ),
        (
            "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
        ),
    ];
    for (input, expect) in known {
        assert_eq!(to_hex(&sha256(input.as_bytes())), expect, "{input:?}");
    }
    // Every length around the block and padding boundaries, then pseudo-random inputs.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for len in (0..200).chain([511, 512, 513, 1000, 4096, 65_537]) {
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        assert_eq!(
            sha256(&data).as_slice(),
            Sha256::digest(&data).as_slice(),
            "length {len}"
        );
    }
}

#[test]
fn base64_and_json_strings() {
    for (i, o) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("run:tok", "cnVuOnRvaw=="),
    ] {
        assert_eq!(base64(i.as_bytes()), o);
    }
    let s = "a\"b\\c\nd\u{1}é";
    let back: String = serde_json::from_str(&json_str(s)).expect("valid JSON string");
    assert_eq!(back, s);
}

#[test]
fn secret_env_prints_names_and_digests_never_values() {
    let (code, v) = probe(
        &[
            "secret-env",
            "--json",
            "--rule",
            "suffix:_API_KEY",
            "--rule",
            "prefix:AWS_",
        ],
        &[
            ("OPENAI_API_KEY", "sk-very-secret"),
            ("aws_secret_access_key", "x"),
            ("PATH", "/bin"),
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(v["probe"], "secret-env");
    let visible = v["visible"].as_array().expect("visible");
    let names: Vec<&str> = visible.iter().map(|e| e["name"].as_str().unwrap_or("")).collect();
    assert_eq!(names, ["OPENAI_API_KEY", "aws_secret_access_key"]);
    assert_eq!(
        visible[0]["sha256"],
        to_hex(&Sha256::digest(b"sk-very-secret")).as_str()
    );
    let text = v.to_string();
    assert!(
        !text.contains("sk-very-secret") && !text.contains("/bin"),
        "{text}"
    );
}

#[test]
fn proxy_env_reports_booleans_only() {
    let url = "http://run:tok@127.0.0.1:3128";
    let mut env: Vec<(&str, &str)> = crate::PROXY_URL_VARS.iter().map(|k| (*k, url)).collect();
    env.extend([
        ("NO_PROXY", "localhost,127.0.0.1,::1"),
        ("no_proxy", "*"),
        ("NODE_USE_ENV_PROXY", "1"),
    ]);
    let (_, v) = probe(&["proxy-env"], &env);
    assert_eq!(v["equal"], true);
    assert_eq!(v["set"]["all_proxy"], true);
    assert_eq!(v["NO_PROXY"]["has_star"], false);
    assert_eq!(v["no_proxy"]["has_star"], true);
    assert_eq!(v["node_use_env_proxy"], true);
    assert!(!v.to_string().contains("tok"));
    let (_, v) = probe(
        &["proxy-env"],
        &[("HTTP_PROXY", url), ("HTTPS_PROXY", "http://other:1")],
    );
    assert_eq!(v["equal"], false);
    assert_eq!(v["set"]["ALL_PROXY"], false);
    assert_eq!(v["node_use_env_proxy"], false);
}

#[test]
fn connect_through_a_proxy_reads_status_and_decision_id() {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).expect("read");
        let head = String::from_utf8_lossy(&buf[..n]).into_owned();
        let body = r#"{"decision_id":"0190-abc","host":"x.invalid","port":443}"#;
        let _ = write!(
            s,
            "HTTP/1.1 403 Forbidden\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        head
    });
    let url = format!("http://run:tok@127.0.0.1:{port}");
    let (_, v) = probe(
        &["denied-host", "--target", "x.invalid:443"],
        &[("HTTPS_PROXY", url.as_str())],
    );
    let head = server.join().expect("server");
    assert!(head.starts_with("CONNECT x.invalid:443 HTTP/1.1\r\n"), "{head}");
    assert!(
        head.contains("Proxy-Authorization: Basic cnVuOnRvaw==\r\n"),
        "{head}"
    );
    assert_eq!(v["result"]["status"], 403);
    assert_eq!(v["result"]["decision_id"], "0190-abc");
    let (_, v) = probe(&["denied-host", "--target", "x.invalid:443"], &[]);
    assert_eq!(v["result"]["status"], Value::Null);
    assert!(
        v["result"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no proxy"))
    );
}

#[test]
fn host_services_reports_each_address() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port().to_string();
    let (_, v) = probe(
        &[
            "host-services",
            "--port",
            &port,
            "--addr",
            "127.0.0.1",
            "--timeout-ms",
            "500",
        ],
        &[],
    );
    let hit = v["connects"]
        .as_array()
        .expect("connects")
        .iter()
        .find(|c| c["target"] == format!("127.0.0.1:{port}"))
        .expect("the given address is tried");
    assert_eq!(hit["connected"], true);
}

#[test]
fn dns_query_wire_format() {
    let q = crate::dns_query(0x1234, "example.com");
    assert_eq!(&q[..4], &[0x12, 0x34, 0x01, 0x00]);
    assert_eq!(&q[12..], b"\x07example\x03com\x00\x00\x01\x00\x01");
}

#[test]
fn usage_errors_exit_2_with_a_json_error() {
    for args in [
        &["nope"][..],
        &["host-services"],
        &["dns", "--bogus"],
        &["secret-env", "--rule", "glob:X"],
    ] {
        let (code, v) = probe(args, &[]);
        assert_eq!(code, 2, "{args:?}");
        assert!(v["error"].as_str().is_some(), "{v}");
    }
    let (code, v) = probe(&["start", "--json"], &[]);
    assert_eq!((code, v["ok"].clone()), (0, Value::Bool(true)));
}

#[test]
fn hardening_reads_proc_and_tests_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().to_string_lossy().into_owned();
    let (_, v) = probe(&["hardening", "--workspace", &ws], &[("HOME", ws.as_str())]);
    assert_eq!(v["workspace"]["writable"], true);
    assert_eq!(
        v["git_hooks"]["writable"], false,
        "no .git/hooks in the workspace"
    );
    assert!(v["uid"].as_u64().is_some(), "{v}");
    assert!(v["cap_eff"].as_str().is_some_and(|c| c.len() == 16), "{v}");
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("read").count(),
        0,
        "the write test cleans up"
    );
}
