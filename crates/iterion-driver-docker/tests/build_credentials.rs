//! Registry credentials from a credential helper, end to end against a fake engine: a `config.json` naming a
//! helper (`credHelpers`), a fake `docker-credential-…` script in a temporary directory on the `PATH` given to
//! the driver, and a pull whose `X-Registry-Auth` header must carry the helper's credentials. A present image
//! runs no helper; the secret never appears in a warning.

use iterion_driver_docker::auth::Credentials;
use iterion_driver_docker::endpoint::Family;
use iterion_driver_docker::engine::Engine;
use iterion_driver_docker::image::{self, PullPolicy};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the fake engine saw: each request line with its `X-Registry-Auth` (or `X-Registry-Config`) header, and
/// which images were pulled.
#[derive(Default)]
struct Seen {
    requests: Vec<(String, Option<String>)>,
    /// `fromImage` of each pull (percent-encoded as sent).
    pulled: Vec<String>,
}

fn answer(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nApi-Version: 1.41\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// One request of the fake engine: `_ping`, `/version`, `/info`, image inspect (404 until pulled) and
/// `/images/create`.
async fn serve_one(mut s: tokio::net::UnixStream, seen: Arc<Mutex<Seen>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        // the build context: read it to its last chunk before answering
        while !buf.ends_with(b"0\r\n\r\n") {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
    let line = head.lines().next().unwrap_or_default().to_owned();
    let auth = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.eq_ignore_ascii_case("x-registry-auth") || k.eq_ignore_ascii_case("x-registry-config"))
            .then(|| v.trim().to_owned())
    });
    let path = line.split_whitespace().nth(1).unwrap_or_default().to_owned();
    let reply = {
        let mut seen = seen.lock().unwrap();
        seen.requests.push((line.clone(), auth));
        if path == "/_ping" {
            answer("200 OK", "OK")
        } else if path.ends_with("/version") {
            answer(
                "200 OK",
                r#"{"Version":"20.10.24","ApiVersion":"1.41","Os":"linux","Arch":"amd64"}"#,
            )
        } else if path.ends_with("/info") {
            answer(
                "200 OK",
                r#"{"OSType":"linux","Architecture":"x86_64","SecurityOptions":[]}"#,
            )
        } else if path.contains("/build?") {
            answer("200 OK", "{\"stream\":\"Successfully built 0123\\n\"}\n")
        } else if path.contains("/images/create") {
            let from = path
                .split(['?', '&'])
                .find_map(|p| p.strip_prefix("fromImage="))
                .unwrap_or_default()
                .to_owned();
            seen.pulled.push(from);
            answer(
                "200 OK",
                "{\"status\":\"Pulling\"}\n{\"status\":\"Downloaded\"}\n",
            )
        } else if path.contains("/images/")
            && path.ends_with("/json")
            && (path.contains("present") || seen.pulled.iter().any(|f| pulled_matches(f, &path)))
        {
            answer(
                "200 OK",
                r#"{"Id":"sha256:0123","RepoDigests":[],"Os":"linux","Architecture":"amd64","Config":{}}"#,
            )
        } else {
            answer("404 Not Found", r#"{"message":"No such image"}"#)
        }
    };
    let _ = s.write_all(reply.as_bytes()).await;
    let _ = s.shutdown().await;
}

/// Whether the inspect `path` names the image pulled as `from` (both percent-encoded differently: compare the
/// repository's last component).
fn pulled_matches(from: &str, path: &str) -> bool {
    let last = from.rsplit("%2F").next().unwrap_or(from);
    !last.is_empty() && path.contains(&format!("/{last}:"))
}

fn fake_engine(dir: &Path) -> (std::path::PathBuf, Arc<Mutex<Seen>>) {
    let sock = dir.join("engine.sock");
    let listener = tokio::net::UnixListener::bind(&sock).expect("bind");
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let s2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve_one(s, s2.clone()));
        }
    });
    (sock, seen)
}

fn b64url_decode(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut buf, mut bits) = (0u32, 0);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => break,
        };
        buf = (buf << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_carries_the_credential_helpers_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (sock, seen) = fake_engine(dir.path());
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    let secret = format!("pw-{:016x}", rand::random::<u64>());
    let log = dir.path().join("helper.log");
    let helper = bin.join("docker-credential-fake");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\nread server\necho \"$1 $server\" >> {}\n\
             case \"$server\" in registry.example:5000) printf '{{\"ServerURL\":\"%s\",\"Username\":\"jo\",\"Secret\":\"{secret}\"}}' \"$server\";; \
             *) echo 'credentials not found in native keychain'; exit 1;; esac\n",
            log.display()
        ),
    )
    .expect("write");
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        r#"{"credHelpers":{"registry.example:5000":"fake"},"credsStore":"fake"}"#,
    )
    .expect("write");
    // the PATH of the environment given to the driver, not the test process's
    let env: BTreeMap<String, String> =
        [("PATH".to_owned(), format!("{}:/usr/bin:/bin", bin.display()))].into();
    let warnings: Arc<Mutex<Vec<String>>> = Arc::default();
    let w = warnings.clone();
    let creds = Credentials::new(Some(config), env.get("PATH").cloned())
        .with_warnings(move |m| w.lock().unwrap().push(m));

    let engine = Engine::connect(&sock, Family::Docker, Duration::from_secs(5))
        .await
        .expect("connect to the fake engine");
    let progress_lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let p2 = progress_lines.clone();
    let progress = move |s: &str| p2.lock().unwrap().push(s.to_owned());

    // present: no registry contact, no helper run
    image::ensure_image(
        &engine,
        "registry.example:5000/team/present:1",
        PullPolicy::Missing,
        Duration::from_secs(10),
        &progress,
        &creds,
    )
    .await
    .expect("present");
    assert!(!log.exists(), "a present image ran the helper");

    let ready = image::ensure_image(
        &engine,
        "registry.example:5000/team/app:1",
        PullPolicy::Missing,
        Duration::from_secs(10),
        &progress,
        &creds,
    )
    .await
    .expect("pulled");
    assert!(ready.pulled);
    let auth = {
        let seen = seen.lock().unwrap();
        let (line, auth) = seen
            .requests
            .iter()
            .find(|(l, _)| l.contains("/images/create"))
            .expect("a pull request")
            .clone();
        assert!(
            line.contains("fromImage=registry.example%3A5000%2Fteam%2Fapp"),
            "{line}"
        );
        auth.expect("X-Registry-Auth")
    };
    let decoded: serde_json::Value = serde_json::from_slice(&b64url_decode(&auth)).expect("json");
    assert_eq!(decoded["username"], "jo");
    assert_eq!(decoded["password"], secret.as_str());
    assert_eq!(decoded["serveraddress"], "registry.example:5000");
    let helper_log = std::fs::read_to_string(&log).expect("helper ran");
    assert_eq!(helper_log, "get registry.example:5000\n");

    // credsStore for Docker Hub: "credentials not found" is anonymous, without a warning
    image::ensure_image(
        &engine,
        "acme/tool:2",
        PullPolicy::Missing,
        Duration::from_secs(10),
        &progress,
        &creds,
    )
    .await
    .expect("anonymous pull");
    let hub_auth = seen
        .lock()
        .unwrap()
        .requests
        .iter()
        .rev()
        .find(|(l, _)| l.contains("/images/create"))
        .and_then(|(_, a)| a.clone());
    assert!(hub_auth.is_none(), "{hub_auth:?}");
    assert!(
        std::fs::read_to_string(&log)
            .expect("log")
            .contains("get https://index.docker.io/v1/")
    );
    let warnings = warnings.lock().unwrap().clone();
    assert!(warnings.is_empty(), "{warnings:?}");
    let everything = format!("{warnings:?}{:?}", progress_lines.lock().unwrap());
    assert!(!everything.contains(&secret), "{everything}");
}

/// The helper of [`a_pull_carries_the_credential_helpers_answer`] for `registry.example:5000`, a `config.json`
/// naming it, and the credentials reading them with the driver's `PATH`.
fn helper_credentials(dir: &Path, secret: &str) -> Credentials {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let helper = bin.join("docker-credential-fake");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\nread server\n\
             case \"$server\" in registry.example:5000) printf '{{\"Username\":\"jo\",\"Secret\":\"{secret}\"}}';; \
             *) echo 'credentials not found'; exit 1;; esac\n"
        ),
    )
    .expect("write");
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let config = dir.join("config.json");
    std::fs::write(&config, r#"{"credsStore":"fake"}"#).expect("write");
    Credentials::new(Some(config), Some(format!("{}:/usr/bin:/bin", bin.display())))
}

/// A classic build sends the credentials of the registries its `FROM` lines name in `X-Registry-Config`, only
/// when it would pull (network open and a base image absent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_build_that_pulls_carries_the_registry_config() {
    use iterion_driver_docker::imagebuild::{self, BuildInput, BuildNetwork};
    let dir = tempfile::tempdir().expect("tempdir");
    let (sock, seen) = fake_engine(dir.path());
    let secret = format!("pw-{:016x}", rand::random::<u64>());
    let creds = helper_credentials(dir.path(), &secret);
    let engine = Engine::connect(&sock, Family::Docker, Duration::from_secs(5))
        .await
        .expect("connect to the fake engine");
    let ctx = dir.path().join("ctx");
    std::fs::create_dir(&ctx).expect("mkdir");
    let last_build_header = |seen: &Arc<Mutex<Seen>>| {
        seen.lock()
            .unwrap()
            .requests
            .iter()
            .rev()
            .find(|(l, _)| l.contains("/build?"))
            .map(|(_, a)| a.clone())
            .expect("a build request")
    };
    for (from, network, expect) in [
        ("registry.example:5000/team/base:1", BuildNetwork::Open, true),
        ("registry.example:5000/team/present:1", BuildNetwork::Open, false),
        ("registry.example:5000/team/base:1", BuildNetwork::None, false),
    ] {
        std::fs::write(ctx.join("Dockerfile"), format!("FROM {from}\nRUN true\n")).expect("write");
        let mut input = BuildInput::new(
            ctx.join("Dockerfile"),
            ctx.clone(),
            ctx.clone(),
            "t:1".into(),
            "r".into(),
        );
        input.network = network;
        input.credentials = creds.clone();
        let r = imagebuild::build(&engine, &input, &|_: &str| {}).await;
        if network == BuildNetwork::None {
            // the offline check refuses an absent base image before any request
            assert!(r.is_err());
            continue;
        }
        r.expect("build");
        let header = last_build_header(&seen);
        match (expect, header) {
            (true, Some(h)) => {
                let v: serde_json::Value = serde_json::from_slice(&b64url_decode(&h)).expect("json");
                assert_eq!(v["registry.example:5000"]["username"], "jo", "{v}");
                assert_eq!(v["registry.example:5000"]["password"], secret.as_str(), "{v}");
            }
            (false, None) => {}
            (want, got) => panic!("{from} {network:?}: header expected {want}, got {got:?}"),
        }
    }
}
