//! Resolution of workflows written in the DSL (parse → compile → resolve), including examples 11.1 and 11.3.

mod res_common;

use iterion_spec::compile::check;
use iterion_spec::devcontainer::MemReader;
use iterion_spec::model::Workflow;
use iterion_spec::resolve::{ModeChoice, resolve_sandbox};
use iterion_spec::resolved::{NodePlacement, SandboxPlan};
use res_common::{inputs, repo_with, set_env};

fn compiled(src: &str) -> Workflow {
    let c = check(src, "wf.bot");
    let errors: Vec<String> = c
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.render())
        .collect();
    assert!(errors.is_empty(), "compile errors: {errors:#?}");
    c.workflows.into_iter().next().expect("one workflow")
}

fn plan(
    src: &str,
    reader: &MemReader,
    setup: fn(&mut iterion_spec::resolve::ResolveInputs<'_>),
) -> SandboxPlan {
    let w = compiled(src);
    let mut i = inputs(reader);
    setup(&mut i);
    resolve_sandbox(&w, &i).expect("resolves")
}

fn placement(p: &SandboxPlan, node: &str) -> String {
    match &p.nodes[node] {
        NodePlacement::Host { reason, .. } => format!("host ({reason})"),
        NodePlacement::Run { network: None } => "run".to_owned(),
        NodePlacement::Run { network: Some(n) } => format!(
            "run [{} {:?} {}]",
            n.mode.as_str(),
            n.preset.map(|p| p.as_str()),
            n.rules.join(",")
        ),
        NodePlacement::Own { sandbox, .. } => format!("own {}", sandbox.mode.as_str()),
    }
}

const EX1: &str = include_str!("../../../fixtures/spec/ok-example-1-release-gate.bot");

#[test]
fn example_11_1_inline_allowlist() {
    let p = plan(EX1, &MemReader::new(), |_| {});
    let sb = p.run.as_ref().expect("sandboxed");
    assert_eq!(sb.mode.as_str(), "inline");
    assert_eq!(sb.image.as_deref(), Some("alpine/git:2.45.2"));
    assert_eq!(sb.user.as_deref(), Some("1000:1000"));
    assert_eq!(sb.workspace_folder, "/src");
    assert_eq!(sb.network.rules, ["github.com", "**.github.com"]);
    assert_eq!(sb.network.mode.as_str(), "allowlist");
    assert_eq!(placement(&p, "changelog_mentions_version"), "run");
    assert_eq!(placement(&p, "tag_exists"), "run");
    // --sandbox auto does not beat the inline block (R7).
    let p = plan(EX1, &MemReader::new(), |i| i.cli_mode = Some(ModeChoice::Auto));
    assert_eq!(p.run_source, "workflow sandbox: block (overrides --sandbox=auto)");
}

const EX3: &str = include_str!("../../../fixtures/spec/ok-example-3-ci-check.bot");

#[test]
fn example_11_3_devcontainer_override_and_host_node() {
    let repo =
        repo_with(r#"{"image": "mcr.microsoft.com/devcontainers/javascript-node:22", "remoteUser": "node"}"#);
    let p = plan(EX3, &repo, |_| {});
    let sb = p.run.as_ref().expect("sandboxed");
    assert_eq!(sb.origin, iterion_spec::resolved::Origin::Devcontainer);
    assert_eq!(sb.host_state.as_str(), "none");
    assert_eq!(sb.host_state_source, "workflow sandbox.host_state");
    assert!(!sb.network.defaulted);
    assert_eq!(placement(&p, "install"), "run");
    assert_eq!(
        placement(&p, "unit_tests"),
        r#"run [allowlist Some("iterion-default") !telemetry.example.net,registry.yarnpkg.com]"#
    );
    assert_eq!(placement(&p, "notify"), "host (node sandbox: none)");
    // The floor raises the host node into the run container.
    let p = plan(EX3, &repo, |i| set_env(i, "ITERION_SANDBOX_FLOOR", "auto"));
    assert_eq!(placement(&p, "notify"), "run");
    assert_eq!(p.floors.len(), 1);
}

#[test]
fn dsl_vectors() {
    let wf = |sandbox: &str, node: &str| {
        format!("tool t:\n  command: \"true\"\n{node}\nworkflow w:\n  entry: t\n{sandbox}\n  t -> done\n")
    };
    // R5: workflow `sandbox: none` wins over ITERION_SANDBOX_DEFAULT=auto.
    let p = plan(&wf("  sandbox: none", ""), &MemReader::new(), |i| {
        set_env(i, "ITERION_SANDBOX_DEFAULT", "auto")
    });
    assert_eq!(
        (p.run.is_none(), p.run_source.as_str()),
        (true, "workflow sandbox: block")
    );
    assert_eq!(placement(&p, "t"), "host (run is unsandboxed)");
    // Q4 with the node block written in the DSL.
    let p = plan(&wf("", "  sandbox: none"), &MemReader::new(), |_| {});
    assert_eq!(placement(&p, "t"), "host (node sandbox: none)");
    // Q2.
    let p = plan(
        &wf("", "  sandbox:\n    image: \"alpine:3.20\""),
        &MemReader::new(),
        |i| i.builtin_default_mode = ModeChoice::None,
    );
    assert_eq!(placement(&p, "t"), "own inline");
    // A8 in the DSL.
    let p = plan(
        &wf(
            "  sandbox:\n    image: \"a\"\n    mounts: [\"type=bind,source=${localEnv:HOME}/.m2,target=/m2\"]",
            "",
        ),
        &MemReader::new(),
        |_| {},
    );
    assert_eq!(
        p.run.unwrap().mounts[0].to_string(),
        "type=bind,source=/home/jo/.m2,target=/m2"
    );
}
