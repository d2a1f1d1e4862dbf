//! Where a node's model call runs. An `llm` router calls a model through its backend like an agent, so it
//! is placed like one: in a sandboxed workflow its call runs in the run container, its traffic goes through
//! the run's egress proxy with the router's own credential, and a backend that cannot run in a container
//! (codex) is refused before anything runs. The router's call used to run on the host, where the workflow's
//! network policy does not reach, and a codex router ran the host codex CLI in a sandboxed workflow.
use std::path::{Path, PathBuf};
use std::process::Output;

use iterion_test_support::fake_provider::{FakeProvider, Reply};
use serde_json::{Value, json};

use super::harness::{Hostile, engine_ready, first, show, types};

/// An `llm` router (backend `backend`, none: the default claw) choosing between `x` and `y`, in a sandboxed
/// workflow whose allowlist holds `rule` only.
fn routed(backend: Option<&str>, rule: &str) -> String {
    let backend = backend.map_or(String::new(), |b| format!("  backend: \"{b}\"\n"));
    format!(
        "router r:\n  mode: llm\n{backend}\ntool x:\n  command: `echo '{{\"via\": \"x\"}}'`\n\ntool y:\n  command: `echo '{{\"via\": \"y\"}}'`\n\nworkflow w:\n  entry: r\n  sandbox:\n    mode: auto\n    network:\n      mode: allowlist\n      preset: none\n      rules: [\"{rule}\"]\n  r -> x\n  r -> y\n  x -> done\n  y -> done\n"
    )
}

/// Runs `wf.bot` with the fake provider as the Anthropic endpoint and the embedded claw runner.
fn run_with_provider(h: &Hostile, workflow: &str, fake: &FakeProvider) -> Output {
    h.write("wf.bot", workflow);
    h.cmd(&["run", "wf.bot", "--json"])
        .env("ANTHROPIC_API_KEY", "sk-test-not-a-secret")
        .env("ANTHROPIC_BASE_URL", fake.url())
        .env("ITERION_ENVELOPE_HANDSHAKE_TIMEOUT", "30s")
        .env_remove("ITERION_BIN")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .unwrap()
}

fn provider(rt: &tokio::runtime::Runtime) -> FakeProvider {
    rt.block_on(FakeProvider::start(vec![Reply::text(
        "{\"selected_route\": \"y\", \"reasoning\": \"the second\"}",
    )]))
    .unwrap()
}

fn the_run(h: &Hostile) -> Vec<Value> {
    let ids = h.run_ids();
    assert_eq!(ids.len(), 1, "{ids:?}");
    h.events(&ids[0])
}

fn started<'a>(events: &'a [Value], node: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == "node_started" && e["node_id"] == node)
        .unwrap_or_else(|| panic!("{node} did not start: {:?}", types(events)))
}

/// The attack: a workflow whose network policy allows nothing the router's provider is on. An agent under
/// that policy is blocked; the router's call must be too, and the run fails like the agent's would. (It
/// used to run on the host, reach the provider and route.)
#[test]
fn an_llm_router_is_held_to_the_workflow_network_policy() {
    if !engine_ready("escapes::placement::an_llm_router_is_held_to_the_workflow_network_policy") {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = provider(&rt);
    let h = Hostile::new();
    let out = run_with_provider(&h, &routed(None, "allowed.test"), &fake);
    if crate::harness::refused_under_gvisor(&out, crate::harness::CLAW_UNDER_GVISOR) {
        return;
    }
    assert!(!out.status.success(), "{}", show(&out));
    let ev = the_run(&h);
    assert_eq!(started(&ev, "r")["data"]["placement"], json!("run"));
    let blocked = first(&ev, "network_blocked");
    assert_eq!(blocked["node_id"], json!("r"), "{blocked}");
    assert_eq!(blocked["data"]["host"], json!("127.0.0.1"), "{blocked}");
    assert!(fake.requests().is_empty(), "the provider was reached");
    let t = types(&ev);
    assert!(!t.contains(&"edge_selected".to_string()), "{t:?}");
    let failed = first(&ev, "run_failed");
    assert_eq!(failed["data"]["node_id"], json!("r"), "{failed}");
    assert!(
        failed["data"]["error"]
            .as_str()
            .unwrap()
            .contains("blocked by the sandbox network policy"),
        "{failed}"
    );
    for n in ["x", "y"] {
        assert!(
            !ev.iter()
                .any(|e| e["type"] == "node_started" && e["node_id"] == n),
            "{n} ran: {t:?}"
        );
    }
}

/// With the provider allowed, the router routes from inside the run container (the claw runner bound there,
/// its one model call through the proxy).
#[test]
fn an_llm_router_routes_from_inside_the_container_when_its_provider_is_allowed() {
    if !engine_ready("escapes::placement::an_llm_router_routes_from_inside_the_container") {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = provider(&rt);
    let port = fake.url().rsplit(':').next().unwrap().to_string();
    let h = Hostile::new();
    // the dry run shows where the router's call will run
    h.write("wf.bot", &routed(None, &format!("127.0.0.1:{port}")));
    let dry = h.iterion(&["run", "wf.bot", "--dry-run"]);
    if crate::harness::refused_under_gvisor(&dry, crate::harness::CLAW_UNDER_GVISOR) {
        return;
    }
    assert!(dry.status.success(), "{}", show(&dry));
    assert!(
        String::from_utf8_lossy(&dry.stdout).contains("r → run container"),
        "{}",
        show(&dry)
    );
    let out = run_with_provider(&h, &routed(None, &format!("127.0.0.1:{port}")), &fake);
    assert!(out.status.success(), "{}", show(&out));
    let ev = the_run(&h);
    assert_eq!(started(&ev, "r")["data"]["placement"], json!("run"));
    assert_eq!(first(&ev, "delegate_started")["data"]["placement"], json!("run"));
    let routed_via = first(&ev, "sandbox_claw_routed_via_runner");
    assert_eq!(routed_via["data"]["nodes"], json!(["r"]));
    let resolved = first(&ev, "sandbox_resolved");
    assert_eq!(resolved["data"]["placements"]["r"], json!("run"), "{resolved}");
    let fin = ev
        .iter()
        .find(|e| e["type"] == "node_finished" && e["node_id"] == "r")
        .unwrap();
    assert_eq!(fin["data"]["selected_route"], json!("y"), "{fin}");
    let edge = first(&ev, "edge_selected");
    assert_eq!(edge["data"], json!({"from": "r", "to": "y"}));
    assert!(!types(&ev).contains(&"network_blocked".to_string()));
    assert_eq!(fake.requests().len(), 1);
}

/// A fake codex CLI that leaves `called` in `dir` when it runs.
fn fake_codex(dir: &Path) -> PathBuf {
    let p = dir.join("codex");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\ntouch '{}'\ncat > /dev/null\necho '{{\"type\":\"item.completed\",\"item\":{{\"id\":\"i\",\"type\":\"agent_message\",\"text\":\"{{\\\"selected_route\\\": \\\"y\\\", \\\"reasoning\\\": \\\"\\\"}}\"}}}}'\n",
            dir.join("called").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// The attack: a `codex` llm router in a sandboxed workflow, which ran the host codex CLI (with the host's
/// environment and network) while the workflow asked for a sandbox. It is refused before anything starts,
/// by the run and its dry run alike, naming the router; codex never runs.
#[test]
fn a_codex_llm_router_in_a_sandboxed_workflow_is_refused_before_anything_runs() {
    if !engine_ready("escapes::placement::a_codex_llm_router_in_a_sandboxed_workflow_is_refused") {
        return;
    }
    let h = Hostile::new();
    let codex = fake_codex(&h.outside());
    h.write("wf.bot", &routed(Some("codex"), "allowed.test"));
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "wf.bot", "--json"];
        args.extend(extra);
        h.cmd(&args).env("ITERION_CODEX_BIN", &codex).output().unwrap()
    };
    let dry = run(&["--dry-run"]);
    assert_eq!(dry.status.code(), Some(1), "{}", show(&dry));
    let doc: Value = serde_json::from_slice(&dry.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&dry)));
    assert_eq!(doc["refused"]["code"], json!("SANDBOX_SPEC_INVALID"), "{doc:#}");
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let ev = the_run(&h);
    let t = types(&ev);
    for never in ["sandbox_started", "run_started", "node_started"] {
        assert!(!t.contains(&never.to_string()), "{never}: {t:?}");
    }
    let failed = first(&ev, "run_failed");
    assert_eq!(failed["data"]["code"], json!("SANDBOX_SPEC_INVALID"), "{failed}");
    assert_eq!(
        failed["data"]["error"],
        json!(
            "backend codex cannot run inside the iterion sandbox (it runs the host codex CLI with its own sandbox), and node 'r' would run in a container"
        )
    );
    assert_eq!(doc["refused"]["error"], failed["data"]["error"]);
    assert!(!h.outside().join("called").exists(), "codex ran on the host");
}
