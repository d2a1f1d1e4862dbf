//! JSON form of the resolved model (01 §8.9).

use std::collections::BTreeMap;

use iterion_spec::resolved::{
    EnvLayers, HostState, NetworkMode, NetworkPolicySpec, NetworkPreset, NodePlacement, Origin, ResolvedMode,
    ResolvedSandbox,
};
use iterion_spec::values::parse_mount;

fn sample() -> ResolvedSandbox {
    let mut s = ResolvedSandbox {
        mode: ResolvedMode::Inline,
        source: "workflow sandbox: block".into(),
        origin: Origin::Workflow,
        devcontainer: None,
        image: Some("alpine:3.20".into()),
        build: None,
        user: Some("1000:1000".into()),
        workspace_folder: "/workspace".into(),
        post_create: vec!["make deps".into()],
        env_layers: EnvLayers {
            repo: BTreeMap::new(),
            workflow: BTreeMap::from([("CI".to_owned(), "secret-ish".to_owned())]),
        },
        mounts: vec![parse_mount("type=volume,source=cargo,target=/c").unwrap()],
        host_state: HostState::None,
        host_state_source: "workflow sandbox.host_state".into(),
        network: NetworkPolicySpec {
            mode: NetworkMode::Allowlist,
            preset: Some(NetworkPreset::IterionDefault),
            rules: vec!["api.github.com".into()],
            defaulted: false,
            source: "workflow sandbox: block".into(),
        },
        runtime: Default::default(),
        degrade_allowed: false,
        key: String::new(),
    };
    s.refresh_key();
    s
}

#[test]
fn json_form_has_env_names_only_and_round_trips_shape() {
    let s = sample();
    let json = serde_json::to_string(&s).unwrap();
    assert!(
        !json.contains("secret-ish"),
        "env values must not be serialized: {json}"
    );
    insta::assert_json_snapshot!("res_model_inline", s);
    let back: ResolvedSandbox = serde_json::from_str(&json).unwrap();
    assert_eq!(back.env_layers.workflow.keys().collect::<Vec<_>>(), ["CI"]);
    assert_eq!(back.env_layers.workflow["CI"], "");
    assert_eq!(back.mounts, s.mounts);
    assert_eq!(
        format!("{:?}", s.env_layers),
        r#"EnvLayers { repo: [], workflow: ["CI"] }"#
    );
}

#[test]
fn key_ignores_labels_but_not_values() {
    let a = sample();
    let mut b = sample();
    b.source = "node sandbox: block".into();
    b.origin = Origin::Node;
    b.host_state_source = "default".into();
    b.network.source = "node".into();
    assert_eq!(a.compute_key(), b.compute_key());
    b.env_layers.workflow.insert("CI".into(), "other".into());
    assert_ne!(a.compute_key(), b.compute_key());
    assert_eq!(a.key.len(), 64);
}

#[test]
fn placement_json() {
    let host = NodePlacement::Host {
        reason: "node sandbox: none".into(),
        skip_notice: None,
    };
    assert_eq!(
        serde_json::to_string(&host).unwrap(),
        r#"{"placement":"host","reason":"node sandbox: none"}"#
    );
    let run = NodePlacement::Run { network: None };
    assert_eq!(serde_json::to_string(&run).unwrap(), r#"{"placement":"run"}"#);
}
