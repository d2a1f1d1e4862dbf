//! `{{attachments.…}}` in prompts, commands and `with` values, as the consuming node sees them (09 §7.3, AT1
//! and AT2's rendering on the `NoopDriver`; storage is in `life_attachments`).
mod exec_common;

use std::path::Path;

use exec_common::{Harness, fake_agent, summary};
use iterion_runtime::attachments::AttachmentValues;
use iterion_runtime::events::PlacementKind;
use iterion_runtime::store::AttachmentRecord;
use serde_json::json;

const WF: &str = "attachments:\n  spec: file\n  logo: image\n\nprompt ask:\n  Read {{attachments.spec}} ({{attachments.spec.size}} bytes, {{attachments.spec.mime}}){{attachments.logo}}.\n\nagent a:\n  backend: \"claude_code\"\n  user: ask\n\ntool t:\n  command: `printf '%s' {{input.doc}}`\n\nworkflow w:\n  entry: a\n  a -> t with { doc: \"{{attachments.spec.path}}\" }\n  t -> done\n";

fn values(container_nodes: &[&str]) -> AttachmentValues {
    let wf = exec_common::compile(WF);
    let rec = AttachmentRecord {
        name: "spec".into(),
        original_filename: "a.pdf".into(),
        mime: "application/pdf".into(),
        size: 1234,
        sha256: "00".into(),
        created_at: "t".into(),
        storage_ref: "runs/r/attachments/spec/a.pdf".into(),
    };
    AttachmentValues::new(&wf, &[rec], Path::new("/store/runs/r"))
        .in_containers(container_nodes.iter().map(|n| n.to_string()))
}

fn agent_harness(state: &Path) -> Harness {
    std::fs::write(
        state.join("reply"),
        json!({"type": "result", "is_error": false, "result": "{\"ok\": true}"}).to_string(),
    )
    .unwrap();
    let mut h = Harness::new()
        .env("ITERION_CLAUDE_BIN", &fake_agent())
        .env("ANTHROPIC_API_KEY", "sk-test-key");
    h.run_env = vec![("FAKE_AGENT_DIR".into(), state.to_string_lossy().into_owned())];
    h
}

fn tool_result(h: &Harness) -> serde_json::Value {
    h.rec
        .lines()
        .into_iter()
        .find(|l| l["type"] == "node_finished" && l["node_id"] == "t")
        .unwrap()["data"]["output"]["result"]
        .clone()
}

#[tokio::test]
async fn at1_host_nodes_get_the_host_path_and_the_size() {
    let state = tempfile::tempdir().unwrap();
    let mut h = agent_harness(state.path());
    h.attachments = Some(values(&[]));
    let out = h.run(WF).await;
    assert_eq!(summary(&out), "finished", "{:#?}", h.rec.lines());
    let prompt = std::fs::read_to_string(state.path().join("stdin")).unwrap();
    assert!(
        prompt.contains("Read /store/runs/r/attachments/spec/a.pdf (1234 bytes, application/pdf)."),
        "{prompt}"
    );
    assert_eq!(tool_result(&h), json!("/store/runs/r/attachments/spec/a.pdf"));
    // the unsupplied `logo` renders empty without the "no value" warning of a missing path
    assert!(
        !h.rec.warnings().iter().any(|w| w.contains("attachments.logo")),
        "{:?}",
        h.rec.warnings()
    );
}

#[tokio::test]
async fn container_nodes_get_the_mounted_path_each_as_it_sees_it() {
    let state = tempfile::tempdir().unwrap();
    // the agent runs in the run container, the tool on the host: the `with` value is rendered for its
    // consumer (the tool), the prompt for the agent
    let mut h = agent_harness(state.path()).placed("a", PlacementKind::Run);
    h.attachments = Some(values(&["a"]));
    let out = h.run(WF).await;
    assert_eq!(summary(&out), "finished", "{:#?}", h.rec.lines());
    let prompt = std::fs::read_to_string(state.path().join("stdin")).unwrap();
    assert!(
        prompt.contains("Read /run/iterion/attachments/spec/a.pdf (1234 bytes"),
        "{prompt}"
    );
    assert_eq!(tool_result(&h), json!("/store/runs/r/attachments/spec/a.pdf"));

    let state = tempfile::tempdir().unwrap();
    let mut h = agent_harness(state.path()).placed("t", PlacementKind::Run);
    h.attachments = Some(values(&["t"]));
    let out = h.run(WF).await;
    assert_eq!(summary(&out), "finished", "{:#?}", h.rec.lines());
    let prompt = std::fs::read_to_string(state.path().join("stdin")).unwrap();
    assert!(
        prompt.contains("Read /store/runs/r/attachments/spec/a.pdf"),
        "{prompt}"
    );
    assert_eq!(tool_result(&h), json!("/run/iterion/attachments/spec/a.pdf"));
}
