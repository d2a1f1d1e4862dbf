//! The boundary probe program (06 §6): the hidden `iterion __sandbox-probe` command, and the embedded static
//! `iterion-probe` the doctor mounts into its throwaway sandbox.
//!
//! Both run the same code, `probe/probe.rs`, included below. The doctor does not run this (dynamically linked)
//! binary inside the sandbox as the spec describes: it cannot start in images without the host's C library.
//! `build.rs` therefore also compiles `probe/main.rs` (std only, `+crt-static`), embedded here as [`PROBE`] and
//! installed once to `<data dir>/bin/iterion-probe-<first 12 hex of its SHA-256>`; `iterion __sandbox-probe`
//! stays available for images that ship their own iterion and for debugging (`iterion __sandbox-probe dns`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sha2::{Digest, Sha256};

#[allow(dead_code)] // part of the shared program is only used by the static binary
mod program {
    include!("../probe/probe.rs");
}

pub use program::{METADATA_TARGETS, run_probe};

/// The static probe program built for this target (empty when the target cannot build it).
pub const PROBE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/iterion-probe"));

/// Container path of the probe program inside the doctor's sandbox.
pub const PROBE_TARGET: &str = "/run/iterion/bin/iterion-probe";

/// Arguments of `iterion __sandbox-probe`.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// `<probe> [--json] [options]`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Runs `iterion __sandbox-probe`: one JSON line on stdout; exit 0, or 2 on a usage error.
pub fn run(args: ProbeArgs, env: &BTreeMap<String, String>) -> ExitCode {
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let (code, line) = run_probe(&args.args, &env);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Writes [`PROBE`] once to `<data_dir>/bin/iterion-probe-<12 hex>` (mode 0755, through a temporary name and
/// a rename) and returns the path; an existing file is re-verified by hash.
pub fn install(data_dir: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt as _;
    if PROBE.is_empty() {
        return Err(
            "this build of iterion embeds no probe program (it was built for a non-Linux target)".into(),
        );
    }
    let digest = hex::encode(Sha256::digest(PROBE));
    let dir = data_dir.join("bin");
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let dest = dir.join(format!("iterion-probe-{}", &digest[..12]));
    if let Ok(existing) = std::fs::read(&dest)
        && hex::encode(Sha256::digest(&existing)) == digest
    {
        return Ok(dest);
    }
    let tmp = dir.join(format!(".iterion-probe-{}.{}", &digest[..12], std::process::id()));
    let io = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    std::fs::write(&tmp, PROBE).map_err(|e| io("write", &tmp, e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| io("chmod", &tmp, e))?;
    std::fs::rename(&tmp, &dest).map_err(|e| io("rename to", &dest, e))?;
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use program::{sha256, to_hex};
    use serde_json::Value;

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
        use program::{base64, json_str};
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
            hex::encode(Sha256::digest(b"sk-very-secret")).as_str()
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
        let mut env: Vec<(&str, &str)> = program::PROXY_URL_VARS.iter().map(|k| (*k, url)).collect();
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
        let q = program::dns_query(0x1234, "example.com");
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

    #[test]
    fn embedded_probe_is_static_and_installs() {
        let facts = iterion_driver_docker::relay::elf_facts(PROBE).expect("an ELF probe is embedded");
        assert!(facts.is_static, "the probe program must be statically linked");
        let dir = tempfile::tempdir().expect("tempdir");
        let p = install(dir.path()).expect("install");
        assert_eq!(std::fs::read(&p).expect("read"), PROBE);
        assert_eq!(install(dir.path()).expect("again"), p);
    }
}
