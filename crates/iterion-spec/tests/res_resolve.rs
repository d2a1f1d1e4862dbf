//! 01 §12.8–12.11: resolution of mode, host_state, default image, auto spec, network, floors and placement.

mod res_common;

use iterion_spec::devcontainer::MemReader;
use iterion_spec::model::{NodeKind, Workflow};
use iterion_spec::resolve::{ModeChoice, ResolveError, ResolveInputs, default_image, resolve_sandbox};
use iterion_spec::resolved::{HostState, NetworkPolicySpec, NodePlacement, OciRuntime, SandboxPlan};
use res_common::{B, inputs, repo_with, s, set_env, wf, workflow};

type Setup = fn(&mut ResolveInputs<'_>);

fn nothing(_: &mut ResolveInputs<'_>) {}

fn run(w: &Workflow, reader: &MemReader, setup: Setup) -> Result<SandboxPlan, ResolveError> {
    let mut i = inputs(reader);
    setup(&mut i);
    resolve_sandbox(w, &i)
}

// ----- 12.8 mode -------------------------------------------------------------------------------------------

/// `expect`: `<mode> / <source>` or `error: <message>`.
fn check_mode(w: Workflow, setup: Setup, expect: &str) {
    let got = match run(&w, &MemReader::new(), setup) {
        Ok(p) => format!(
            "{} / {}",
            serde_json::to_value(p.run_mode).unwrap().as_str().unwrap(),
            p.run_source
        ),
        Err(e) => format!("error: {e}"),
    };
    assert_eq!(got, expect);
}

#[test]
fn mode_chain() {
    check_mode(wf(None), nothing, "auto / default"); // R1
    check_mode(
        wf(None),
        |i| i.builtin_default_mode = ModeChoice::None,
        "none / default",
    ); // R2
    check_mode(
        wf(None),
        |i| {
            i.builtin_default_mode = ModeChoice::None;
            set_env(i, "ITERION_SANDBOX_DEFAULT", "AUTO");
        },
        "auto / ITERION_SANDBOX_DEFAULT",
    ); // R3
    check_mode(
        wf(None),
        |i| set_env(i, "ITERION_SANDBOX_DEFAULT", "docker"),
        "error: invalid value 'docker' for ITERION_SANDBOX_DEFAULT (want auto, none or empty)",
    ); // R4
    check_mode(
        wf(Some(B::wf().short("none").done())),
        |i| set_env(i, "ITERION_SANDBOX_DEFAULT", "auto"),
        "none / workflow sandbox: block",
    ); // R5
    check_mode(
        wf(Some(B::wf().image("alpine:3.20").done())),
        |i| i.cli_mode = Some(ModeChoice::None),
        "none / cli flag --sandbox",
    ); // R6
    check_mode(
        wf(Some(B::wf().image("alpine:3.20").done())),
        |i| i.cli_mode = Some(ModeChoice::Auto),
        "inline / workflow sandbox: block (overrides --sandbox=auto)",
    ); // R7
    check_mode(
        wf(Some(B::wf().build(Some("ci/Dockerfile"), None).done())),
        |i| i.cli_mode = Some(ModeChoice::Auto),
        "inline / workflow sandbox: block (overrides --sandbox=auto)",
    ); // R8
    check_mode(
        wf(Some(B::wf().short("auto").done())),
        |i| i.cli_mode = Some(ModeChoice::Auto),
        "auto / cli flag --sandbox",
    ); // R9
    check_mode(
        wf(Some(B::wf().host_state("none").done())),
        |i| set_env(i, "ITERION_SANDBOX_DEFAULT", "none"),
        "none / ITERION_SANDBOX_DEFAULT",
    ); // R10
    check_mode(wf(Some(B::wf().rule("a.com").done())), nothing, "auto / default"); // R11
    check_mode(
        wf(None),
        |i| set_env(i, "ITERION_SANDBOX_DEFAULT", "  "),
        "auto / default",
    );
}

#[test]
fn override_block_network_applies_to_the_chain_mode() {
    // R11: the network comes from the block.
    let p = run(
        &wf(Some(B::wf().rule("a.com").done())),
        &MemReader::new(),
        nothing,
    )
    .unwrap();
    assert_eq!(net(&p.run.unwrap().network), "allowlist / - / [a.com] / false");
}

// ----- 12.8 host_state -------------------------------------------------------------------------------------

/// `expect`: `<host_state> / <source> / <floor applications>`.
fn check_hs(w: Workflow, setup: Setup, expect: &str) {
    let p = run(&w, &MemReader::new(), setup).unwrap();
    let sb = p.run.expect("active run");
    let hs = match sb.host_state {
        HostState::Auto => "auto",
        HostState::None => "none",
    };
    assert_eq!(
        format!("{hs} / {} / {}", sb.host_state_source, p.floors.len()),
        expect
    );
}

#[test]
fn host_state_chain() {
    check_hs(wf(None), nothing, "auto / default / 0"); // H1
    check_hs(
        wf(None),
        |i| set_env(i, "ITERION_SANDBOX_HOST_STATE", "none"),
        "none / ITERION_SANDBOX_HOST_STATE / 0",
    ); // H2
    check_hs(
        wf(Some(B::wf().short("auto").done()).map(|mut d| {
            d.short = false;
            d.host_state = Some(res_common::s("auto"));
            d
        })),
        |i| set_env(i, "ITERION_SANDBOX_HOST_STATE", "none"),
        "auto / workflow sandbox.host_state / 0",
    ); // H3
    check_hs(
        wf(Some(B::wf().mode("auto").host_state("auto").done())),
        |i| i.cli_host_state = Some(HostState::None),
        "none / cli flag --sandbox-host-state / 0",
    ); // H4
    check_hs(
        wf(None),
        |i| {
            set_env(i, "ITERION_SANDBOX_HOST_STATE_GUARD", "1");
            i.cli_host_state = Some(HostState::Auto);
        },
        "none / ITERION_SANDBOX_HOST_STATE_GUARD / 1",
    ); // H5
    check_hs(
        wf(Some(B::wf().host_state("none").done())),
        nothing,
        "none / workflow sandbox.host_state / 0",
    );
    check_hs(
        wf(None),
        |i| {
            set_env(i, "ITERION_SANDBOX_HOST_STATE_GUARD", "off");
            set_env(i, "ITERION_SANDBOX_HOST_STATE", "NONE");
        },
        "none / ITERION_SANDBOX_HOST_STATE / 0",
    );
}

#[test]
fn host_state_guard_floor_record() {
    let p = run(&wf(None), &MemReader::new(), |i| {
        set_env(i, "ITERION_SANDBOX_HOST_STATE_GUARD", "1");
        i.cli_host_state = Some(HostState::Auto);
    })
    .unwrap();
    insta::assert_json_snapshot!("res_h5_floor", p.floors);
    let e = run(&wf(None), &MemReader::new(), |i| {
        set_env(i, "ITERION_SANDBOX_HOST_STATE_GUARD", "maybe")
    })
    .unwrap_err();
    assert!(matches!(
        e,
        ResolveError::InvalidEnv {
            name: "ITERION_SANDBOX_HOST_STATE_GUARD",
            ..
        }
    ));
    let e = run(&wf(None), &MemReader::new(), |i| {
        set_env(i, "ITERION_SANDBOX_HOST_STATE", "yes")
    })
    .unwrap_err();
    assert!(matches!(
        e,
        ResolveError::InvalidEnv {
            name: "ITERION_SANDBOX_HOST_STATE",
            ..
        }
    ));
}

// ----- the OCI runtime ------------------------------------------------------------------------------------

/// `expect`: `<run runtime> / <source> / <floor applications>`, or `error: <message>`.
fn check_rt(w: Workflow, setup: Setup, expect: &str) {
    let got = match run(&w, &MemReader::new(), setup) {
        Ok(p) => {
            let sb = p.run.expect("active run");
            let floors: Vec<String> = p
                .floors
                .iter()
                .map(|f| {
                    format!(
                        "{} {}->{} over {}",
                        f.floor.as_str(),
                        f.from,
                        f.to,
                        f.shadowed_source
                    )
                })
                .collect();
            format!(
                "{} / {} / [{}]",
                sb.runtime.name,
                sb.runtime.source,
                floors.join(", ")
            )
        }
        Err(e) => format!("error: {e}"),
    };
    assert_eq!(got, expect);
}

#[test]
fn runtime_chain() {
    let auto = || wf(Some(B::wf().mode("auto").done()));
    let gvisor = || wf(Some(B::wf().mode("auto").runtime("gvisor").done()));
    check_rt(auto(), nothing, "default / default / []");
    check_rt(gvisor(), nothing, "gvisor / workflow sandbox.runtime / []");
    // a workflow block that only overrides the runtime keeps the mode of the chain
    check_rt(
        wf(Some(B::wf().runtime("Kata").done())),
        nothing,
        "kata / workflow sandbox.runtime / []",
    );
    check_rt(
        auto(),
        |i| set_env(i, "ITERION_SANDBOX_OCI_RUNTIME", "runsc"),
        "runsc / ITERION_SANDBOX_OCI_RUNTIME / []",
    );
    check_rt(
        gvisor(),
        |i| set_env(i, "ITERION_SANDBOX_OCI_RUNTIME", "kata"),
        "gvisor / workflow sandbox.runtime / []",
    );
    check_rt(
        gvisor(),
        |i| i.cli_runtime = Some(OciRuntime::Default),
        "default / cli flag --sandbox-runtime / []",
    );
    // the floor wins over every other source, and says what it shadowed
    check_rt(
        auto(),
        |i| {
            i.cli_runtime = Some(OciRuntime::Default);
            set_env(i, "ITERION_SANDBOX_RUNTIME_FLOOR", "gvisor");
        },
        "gvisor / ITERION_SANDBOX_RUNTIME_FLOOR / [ITERION_SANDBOX_RUNTIME_FLOOR default->gvisor over cli flag --sandbox-runtime]",
    );
    check_rt(
        gvisor(),
        |i| set_env(i, "ITERION_SANDBOX_RUNTIME_FLOOR", "gvisor"),
        "gvisor / workflow sandbox.runtime / []",
    );
    check_rt(
        gvisor(),
        |i| set_env(i, "ITERION_SANDBOX_RUNTIME_FLOOR", "default"),
        "gvisor / workflow sandbox.runtime / []",
    );
    check_rt(
        auto(),
        |i| set_env(i, "ITERION_SANDBOX_OCI_RUNTIME", "-x"),
        "error: invalid value '-x' for ITERION_SANDBOX_OCI_RUNTIME (want default, gvisor, kata, a runtime name or empty)",
    );
    check_rt(
        auto(),
        |i| set_env(i, "ITERION_SANDBOX_RUNTIME_FLOOR", "a b"),
        "error: invalid value 'a b' for ITERION_SANDBOX_RUNTIME_FLOOR (want default, gvisor, kata, a runtime name or empty)",
    );
}

#[test]
fn runtime_shapes_the_key_and_node_containers() {
    let p = run(&wf(Some(B::wf().mode("auto").done())), &MemReader::new(), nothing).unwrap();
    let q = run(
        &wf(Some(B::wf().mode("auto").runtime("gvisor").done())),
        &MemReader::new(),
        nothing,
    )
    .unwrap();
    assert_ne!(p.run.unwrap().key, q.run.unwrap().key);
    // a node that asks for another runtime gets its own container; one that asks for none shares the run's
    let w = workflow(
        Some(B::wf().mode("auto").done()),
        vec![
            (
                "a",
                NodeKind::Tool,
                Some(B::node().mode("auto").runtime("gvisor").done()),
            ),
            ("b", NodeKind::Tool, Some(B::node().mode("auto").done())),
        ],
    );
    let p = run(&w, &MemReader::new(), nothing).unwrap();
    match &p.nodes["a"] {
        NodePlacement::Own { sandbox, .. } => {
            assert_eq!(sandbox.runtime.name, OciRuntime::Gvisor);
            assert_eq!(sandbox.runtime.source, "node sandbox.runtime");
        }
        other => panic!("node a: {other:?}"),
    }
    assert!(
        matches!(p.nodes["b"], NodePlacement::Run { .. }),
        "{:?}",
        p.nodes["b"]
    );
    // under a floor both nodes end up with the run's container, and only the run's change is recorded
    let p = run(&w, &MemReader::new(), |i| {
        set_env(i, "ITERION_SANDBOX_RUNTIME_FLOOR", "kata")
    })
    .unwrap();
    let nodes: Vec<_> = p.floors.iter().map(|f| f.node_id.clone()).collect();
    assert_eq!(nodes, vec![None]);
    assert!(
        matches!(p.nodes["a"], NodePlacement::Run { .. }),
        "{:?}",
        p.nodes["a"]
    );
    assert!(matches!(p.nodes["b"], NodePlacement::Run { .. }));
}

#[test]
fn runtime_names() {
    let ok = |s: &str, want: OciRuntime| assert_eq!(OciRuntime::parse(s), Ok(want), "{s}");
    ok(" default ", OciRuntime::Default);
    ok("GVISOR", OciRuntime::Gvisor);
    ok("kata", OciRuntime::Kata);
    ok("runsc", OciRuntime::Named("runsc".into()));
    ok(
        "io.containerd.kata.v2",
        OciRuntime::Named("io.containerd.kata.v2".into()),
    );
    for bad in ["", "-x", "a b", "/usr/bin/runsc", "x;y"] {
        assert!(OciRuntime::parse(bad).is_err(), "{bad}");
    }
    let json = serde_json::to_string(&OciRuntime::Named("crun".into())).unwrap();
    assert_eq!(json, r#""crun""#);
    assert_eq!(
        serde_json::from_str::<OciRuntime>(r#""gvisor""#).unwrap(),
        OciRuntime::Gvisor
    );
}

// ----- 12.8 default image ----------------------------------------------------------------------------------

fn check_image(cli: Option<&str>, env: Option<&str>, version: Option<&str>, expect: &str) {
    assert_eq!(default_image(cli, env, version), expect);
}

#[test]
fn default_image_chain() {
    check_image(Some("  img:1 "), Some("img:2"), Some("1.2.3"), "img:1"); // I1
    check_image(None, Some("img:2"), Some("1.2.3"), "img:2"); // I2
    check_image(
        None,
        None,
        Some("1.2.3"),
        "ghcr.io/socialgouv/iterion-sandbox-slim:v1.2.3",
    ); // I3
    check_image(
        None,
        None,
        Some("1.3.0-rc.1"),
        "ghcr.io/socialgouv/iterion-sandbox-slim:edge",
    ); // I4
    check_image(
        None,
        None,
        Some("0.1.0-dev+g1a2b3c"),
        "ghcr.io/socialgouv/iterion-sandbox-slim:edge",
    ); // I4
    check_image(Some(""), Some("img:2"), Some("1.2.3"), "img:2"); // I5
    check_image(None, None, None, "");
    check_image(
        None,
        None,
        Some("1.2"),
        "ghcr.io/socialgouv/iterion-sandbox-slim:edge",
    );
}

#[test]
fn default_image_reaches_the_plan() {
    let p = run(&wf(None), &MemReader::new(), |i| {
        i.cli_default_image = Some("  img:1 ".into());
        set_env(i, "ITERION_SANDBOX_DEFAULT_IMAGE", "img:2");
    })
    .unwrap();
    assert_eq!(p.run.unwrap().image.as_deref(), Some("img:1"));
    let p = run(&wf(None), &MemReader::new(), |i| {
        set_env(i, "ITERION_SANDBOX_DEFAULT_IMAGE", " img:2 ")
    })
    .unwrap();
    assert_eq!(p.run.unwrap().image.as_deref(), Some("img:2"));
    assert_eq!(p.requested.env["ITERION_SANDBOX_DEFAULT_IMAGE"], " img:2 ");
}

// ----- 12.9 auto spec construction -------------------------------------------------------------------------

#[test]
fn auto_spec_construction() {
    // A1.
    let r = repo_with(r#"{"image": "node:22"}"#);
    let p = run(&wf(None), &r, |i| i.cli_default_image = Some("x".into())).unwrap();
    let sb = p.run.unwrap();
    assert_eq!(
        (sb.origin, sb.image.as_deref()),
        (iterion_spec::resolved::Origin::Devcontainer, Some("node:22"))
    );
    assert_eq!(sb.devcontainer.unwrap().path, ".devcontainer/devcontainer.json");
    // A2.
    let p = run(&wf(None), &MemReader::new(), |i| {
        i.cli_default_image = Some("x".into())
    })
    .unwrap();
    let sb = p.run.unwrap();
    assert_eq!(sb.origin, iterion_spec::resolved::Origin::DefaultImage);
    assert_eq!(sb.image.as_deref(), Some("x"));
    assert_eq!(sb.source, "default (default image: x)");
    assert!(sb.degrade_allowed);
    // A3.
    let p = run(&wf(None), &MemReader::new(), |i| {
        i.repo_root = None;
        i.binary_version = None;
    })
    .unwrap();
    assert!(p.run.is_none());
    assert_eq!(
        p.run_skippable.as_deref(),
        Some("no repository root and no default image")
    );
    // A4.
    let r = repo_with(r#"{"dockerComposeFile": "c.yml"}"#);
    let e = run(&wf(None), &r, nothing).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid devcontainer configuration: .devcontainer/devcontainer.json:1:2: error[D003]: compose-based devcontainer configurations are not supported"
    );
    // every error of the file in one message, not the first and a count
    let r = repo_with(r#"{"image": "x", "privileged": true, "capAdd": ["SYS_ADMIN"]}"#);
    let e = run(&wf(None), &r, nothing).unwrap_err().to_string();
    assert!(
        e.starts_with("invalid devcontainer configuration (2 errors): "),
        "{e}"
    );
    assert!(e.contains("'privileged'") && e.contains("'capAdd'"), "{e}");
    assert!(!e.contains("more)"), "{e}");
    // A5.
    let r = repo_with(r#"{"image": "x", "containerEnv": {"A": "repo"}}"#);
    let w = wf(Some(B::wf().mode("auto").env("A", "wf").env("B", "wf").done()));
    let sb = run(&w, &r, nothing).unwrap().run.unwrap();
    assert_eq!(format!("{:?}", sb.env_layers.repo), r#"{"A": "repo"}"#);
    assert_eq!(
        format!("{:?}", sb.env_layers.workflow),
        r#"{"A": "wf", "B": "wf"}"#
    );
    // A6.
    let w = wf(Some(B::wf().mode("auto").user("1000").done()));
    let r = repo_with(r#"{"image": "x", "remoteUser": "node"}"#);
    assert_eq!(
        run(&w, &r, nothing).unwrap().run.unwrap().user.as_deref(),
        Some("node")
    );
    let r = repo_with(r#"{"image": "x"}"#);
    assert_eq!(
        run(&w, &r, nothing).unwrap().run.unwrap().user.as_deref(),
        Some("1000")
    );
    // A7.
    let w = wf(Some(B::wf().mode("auto").post_create("make").done()));
    let r = repo_with(r#"{"image": "x", "postCreateCommand": "npm ci"}"#);
    assert_eq!(
        run(&w, &r, nothing).unwrap().run.unwrap().post_create,
        ["npm ci", "make"]
    );
    // A8.
    let w = wf(Some(
        B::wf()
            .image("alpine")
            .mount("type=bind,source=${localEnv:HOME}/.m2,target=/m2")
            .done(),
    ));
    let sb = run(&w, &MemReader::new(), nothing).unwrap().run.unwrap();
    assert_eq!(sb.mounts[0].source.as_deref(), Some("/home/jo/.m2"));
    assert!(!sb.degrade_allowed);
    // A9.
    let w = wf(Some(B::wf().image("alpine").done()));
    assert_eq!(
        run(&w, &MemReader::new(), nothing)
            .unwrap()
            .run
            .unwrap()
            .workspace_folder,
        "/home/jo/src/app"
    );
}

#[test]
fn inline_values_are_checked_after_expansion() {
    let bad = |w: Workflow| run(&w, &MemReader::new(), nothing).unwrap_err();
    let code = |e: ResolveError| match e {
        ResolveError::InvalidValue { code, .. } => code,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(
        code(bad(wf(Some(B::wf().image("a").user("${localEnv:USER}").done())))),
        "C101"
    );
    assert_eq!(
        code(bad(wf(Some(
            B::wf().image("a").ws("${localWorkspaceFolderBasename}").done()
        )))),
        "C100"
    );
    assert_eq!(
        code(bad(wf(Some(B::wf().image("a").env("X", "a\nb").done())))),
        "C103"
    );
    assert_eq!(
        code(bad(wf(Some(
            B::wf()
                .image("a")
                .mount("type=bind,source=/a,target=rel${localEnv:HOME}")
                .done()
        )))),
        "C102"
    );
    assert_eq!(
        code(bad(wf(Some(B::wf().build(Some("../Dockerfile"), None).done())))),
        "C104"
    );
    assert_eq!(
        code(bad(wf(Some(B::wf().image("${localEnv:HOME} x").done())))),
        "C044"
    );
    let e = bad(wf(Some(B::wf().image("a").user("-u root").done())));
    assert_eq!(e.to_string(), "workflow 'w': invalid sandbox user '-u root'");
    // Build paths resolve against the workspace; the context defaults to the dockerfile's folder.
    let sb = run(
        &wf(Some(B::wf().build(Some("ci/Dockerfile"), None).done())),
        &MemReader::new(),
        nothing,
    )
    .unwrap()
    .run
    .unwrap();
    let b = sb.build.unwrap();
    assert_eq!(
        (b.dockerfile.as_str(), b.context.as_str()),
        ("/home/jo/src/app/ci/Dockerfile", "/home/jo/src/app/ci")
    );
    let sb = run(
        &wf(Some(B::wf().build(None, Some(".")).done())),
        &MemReader::new(),
        nothing,
    )
    .unwrap()
    .run
    .unwrap();
    let b = sb.build.unwrap();
    assert_eq!(
        (b.dockerfile.as_str(), b.context.as_str()),
        ("/home/jo/src/app/Dockerfile", "/home/jo/src/app")
    );
    // Variables: a C105 warning names the variable, never its value.
    let w = wf(Some(
        B::wf()
            .image("a")
            .env("K", "${localEnv:AWS_SECRET_ACCESS_KEY}")
            .done(),
    ));
    let p = run(&w, &MemReader::new(), |i| {
        set_env(i, "AWS_SECRET_ACCESS_KEY", "hunter2")
    })
    .unwrap();
    assert_eq!(p.warnings.len(), 1);
    assert_eq!(p.warnings[0].code, "C105");
    assert!(!p.warnings[0].message.contains("hunter2"));
    assert_eq!(p.run.unwrap().env_layers.workflow["K"], "");
}

// ----- 12.10 network ---------------------------------------------------------------------------------------

fn net(n: &NetworkPolicySpec) -> String {
    let v = serde_json::to_value(n).unwrap();
    let preset = v["preset"].as_str().unwrap_or("-");
    format!(
        "{} / {preset} / [{}] / {}",
        v["mode"].as_str().unwrap(),
        n.rules.join(", "),
        n.defaulted
    )
}

/// Run-scope policy of `w` (devcontainer `{"image":"x"}` when `dc`).
fn check_net(w: Workflow, dc: bool, expect: &str) {
    let reader = if dc {
        repo_with(r#"{"image": "x"}"#)
    } else {
        MemReader::new()
    };
    let p = run(&w, &reader, nothing).unwrap();
    assert_eq!(net(&p.run.expect("active run").network), expect);
}

#[test]
fn run_network() {
    check_net(
        wf(Some(B::wf().image("a").done())),
        false,
        "open / - / [] / false",
    ); // N1
    check_net(
        wf(Some(B::wf().image("a").rule("a.com").done())),
        false,
        "allowlist / - / [a.com] / false",
    ); // N2
    check_net(
        wf(Some(B::wf().image("a").preset("iterion-default").done())),
        false,
        "allowlist / iterion-default / [] / false",
    ); // N3
    check_net(
        wf(Some(
            B::wf()
                .image("a")
                .net_mode("denylist")
                .rule("!**.evil.example")
                .done(),
        )),
        false,
        "denylist / - / [!**.evil.example] / false",
    ); // N4
    check_net(wf(None), true, "allowlist / iterion-default / [] / true"); // N5
    check_net(
        wf(Some(B::wf().net_empty().done())),
        true,
        "allowlist / iterion-default / [] / true",
    ); // N6
    check_net(
        wf(Some(B::wf().rule("x.com").done())),
        true,
        "allowlist / iterion-default / [x.com] / true",
    ); // N7
    check_net(
        wf(Some(B::wf().net_mode("open").done())),
        true,
        "open / - / [] / false",
    ); // N8
    check_net(wf(None), false, "open / - / [] / false"); // N9
    check_net(
        wf(Some(
            B::wf()
                .image("a")
                .net_mode("allowlist")
                .preset("none")
                .rule("a.com")
                .done(),
        )),
        false,
        "allowlist / - / [a.com] / false",
    ); // N14
    // Rules are canonicalised by iterion-netpolicy.
    check_net(
        wf(Some(
            B::wf()
                .image("a")
                .rule("GITHUB.com.")
                .rule("bücher.example")
                .rule("!  0x7f.0.0.1")
                .done(),
        )),
        false,
        "allowlist / - / [github.com, xn--bcher-kva.example, !127.0.0.1] / false",
    );
}

/// Node-scope policy: parent allowlist / iterion-default / [a.com], node override block `node`.
fn check_node_net(node: B, expect: &str) {
    let w = workflow(
        Some(B::wf().image("a").preset("iterion-default").rule("a.com").done()),
        vec![("n", NodeKind::Agent, Some(node.done()))],
    );
    let p = run(&w, &MemReader::new(), nothing).unwrap();
    match &p.nodes["n"] {
        NodePlacement::Run { network: Some(n) } => assert_eq!(net(n), expect),
        other => panic!("unexpected placement {other:?}"),
    }
}

#[test]
fn node_network() {
    check_node_net(
        B::node().rule("b.com"),
        "allowlist / iterion-default / [a.com, b.com] / false",
    ); // N10
    check_node_net(
        B::node().net_mode("denylist").rule("b.com"),
        "denylist / iterion-default / [a.com, b.com] / false",
    ); // N11
    check_node_net(
        B::node().inherit("replace").rule("b.com"),
        "allowlist / - / [b.com] / false",
    ); // N12
    check_node_net(B::node().inherit("replace"), "open / - / [] / false"); // N13
    check_node_net(
        B::node().inherit("append").rule("b.com"),
        "allowlist / iterion-default / [a.com, b.com] / false",
    );
    check_node_net(B::node().preset("none"), "allowlist / - / [a.com] / false");
    // `append` is `merge`, also beside a mode or preset of the node's own (the reference's behaviour)
    check_node_net(
        B::node().inherit("append").net_mode("denylist").rule("b.com"),
        "denylist / iterion-default / [a.com, b.com] / false",
    );
}

// ----- 12.11 floors and placement --------------------------------------------------------------------------

fn placement(p: &NodePlacement) -> String {
    match p {
        NodePlacement::Host {
            reason,
            skip_notice: None,
        } => format!("host ({reason})"),
        NodePlacement::Host {
            reason,
            skip_notice: Some(n),
        } => format!("host ({reason}; notice: {n})"),
        NodePlacement::Run { network: None } => "run".to_owned(),
        NodePlacement::Run { network: Some(n) } => format!("run [{}]", net(n)),
        NodePlacement::Own { sandbox, .. } => format!("own {}", sandbox.mode.as_str()),
    }
}

#[test]
fn floors() {
    // F1.
    let p = run(&wf(Some(B::wf().short("none").done())), &MemReader::new(), |i| {
        set_env(i, "ITERION_SANDBOX_FLOOR", "auto")
    })
    .unwrap();
    assert_eq!(
        p.run.as_ref().unwrap().source,
        "ITERION_SANDBOX_FLOOR (default image: ghcr.io/socialgouv/iterion-sandbox-slim:v1.2.3)"
    );
    assert_eq!(p.run_source, "ITERION_SANDBOX_FLOOR");
    insta::assert_json_snapshot!("res_f1_floor", p.floors);
    // F2.
    let w = workflow(
        None,
        vec![("n", NodeKind::Tool, Some(B::node().short("none").done()))],
    );
    let p = run(&w, &MemReader::new(), |i| {
        set_env(i, "ITERION_SANDBOX_FLOOR", "auto");
        i.cli_mode = Some(ModeChoice::None);
    })
    .unwrap();
    assert!(p.run.is_some());
    assert_eq!(placement(&p.nodes["n"]), "run");
    assert_eq!(p.floors.len(), 2);
    // F3.
    let p = run(&wf(Some(B::wf().short("auto").done())), &MemReader::new(), |i| {
        set_env(i, "ITERION_SANDBOX_FLOOR", "inline")
    })
    .unwrap();
    assert!(!p.run.unwrap().degrade_allowed);
    // F4.
    let p = run(&wf(Some(B::wf().image("a").done())), &MemReader::new(), |i| {
        set_env(i, "ITERION_SANDBOX_FLOOR", "auto")
    })
    .unwrap();
    assert_eq!(p.run.unwrap().mode.as_str(), "inline");
    assert!(p.floors.is_empty());
    // F5.
    let e = run(&wf(None), &MemReader::new(), |i| {
        set_env(i, "ITERION_SANDBOX_FLOOR", "strict")
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid value 'strict' for ITERION_SANDBOX_FLOOR (want auto, inline, none or empty)"
    );
    // F6.
    let w = workflow(
        None,
        vec![(
            "n",
            NodeKind::Agent,
            Some(B::node().image("b").host_state("auto").done()),
        )],
    );
    let p = run(&w, &MemReader::new(), |i| {
        i.builtin_default_mode = ModeChoice::None;
        set_env(i, "ITERION_SANDBOX_HOST_STATE_GUARD", "yes");
    })
    .unwrap();
    let NodePlacement::Own { sandbox, .. } = &p.nodes["n"] else {
        panic!("own expected")
    };
    assert_eq!(sandbox.host_state, HostState::None);
    assert_eq!(sandbox.host_state_source, "ITERION_SANDBOX_HOST_STATE_GUARD");
    // Inline floor with nothing to sandbox with.
    let e = run(&wf(None), &MemReader::new(), |i| {
        set_env(i, "ITERION_SANDBOX_FLOOR", "inline");
        i.repo_root = None;
        i.binary_version = None;
    })
    .unwrap_err();
    assert!(matches!(e, ResolveError::Unsandboxable { .. }));
}

fn check_place(w: Workflow, setup: Setup, expect: &[(&str, &str)]) {
    let p = run(&w, &MemReader::new(), setup).unwrap();
    let got: Vec<(String, String)> = p.nodes.iter().map(|(k, v)| (k.clone(), placement(v))).collect();
    let want: Vec<(String, String)> = expect
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn placements() {
    let node = |d: Option<B>| workflow(None, vec![("n", NodeKind::Agent, d.map(B::done))]);
    check_place(node(None), nothing, &[("n", "run")]); // Q1
    check_place(
        node(Some(B::node().image("b"))),
        |i| i.builtin_default_mode = ModeChoice::None,
        &[("n", "own inline")],
    ); // Q2
    check_place(
        node(Some(B::node().image("b"))),
        |i| i.cli_mode = Some(ModeChoice::None),
        &[("n", "host (cli flag --sandbox none)")],
    ); // Q3
    check_place(
        node(Some(B::node().short("none"))),
        nothing,
        &[("n", "host (node sandbox: none)")],
    ); // Q4
    check_place(
        workflow(
            Some(B::wf().image("a").done()),
            vec![("n", NodeKind::Agent, Some(B::node().short("auto").done()))],
        ),
        nothing,
        &[("n", "own auto")],
    ); // Q5
    check_place(
        workflow(
            None,
            vec![
                (
                    "n1",
                    NodeKind::Agent,
                    Some(B::node().image("b").env("X", "1").done()),
                ),
                (
                    "n2",
                    NodeKind::Tool,
                    Some(B::node().image("b").env("X", "1").done()),
                ),
                (
                    "n3",
                    NodeKind::Tool,
                    Some(B::node().image("b").env("X", "2").done()),
                ),
            ],
        ),
        nothing,
        &[("n1", "own inline"), ("n2", "own inline"), ("n3", "own inline")],
    ); // Q6
    let p = run(
        &workflow(
            None,
            vec![
                (
                    "n1",
                    NodeKind::Agent,
                    Some(B::node().image("b").env("X", "1").done()),
                ),
                (
                    "n2",
                    NodeKind::Tool,
                    Some(B::node().image("b").env("X", "1").done()),
                ),
                (
                    "n3",
                    NodeKind::Tool,
                    Some(B::node().image("b").env("X", "2").done()),
                ),
            ],
        ),
        &MemReader::new(),
        nothing,
    )
    .unwrap();
    let key = |n: &str| match &p.nodes[n] {
        NodePlacement::Own { key, sandbox } => {
            assert_eq!(key, &sandbox.key);
            key.clone()
        }
        other => panic!("own expected, got {other:?}"),
    };
    assert_eq!(key("n1"), key("n2"));
    assert_ne!(key("n1"), key("n3"));
    check_place(
        node(Some(B::node().rule("b.com"))),
        |i| i.builtin_default_mode = ModeChoice::None,
        &[(
            "n",
            "host (run is unsandboxed; notice: node network override ignored: the node runs on the host)",
        )],
    ); // Q7
    check_place(
        node(Some(B::node().rule("b.com"))),
        nothing,
        &[("n", "run [allowlist / - / [b.com] / false]")],
    ); // Q8
    // Node auto without customisation shares the run container; with customisation it gets its own.
    check_place(node(Some(B::node().short("auto"))), nothing, &[("n", "run")]);
    check_place(
        node(Some(B::node().mode("auto").user("1000"))),
        nothing,
        &[("n", "own auto")],
    );
    // Nodes of other kinds get no placement.
    check_place(
        workflow(
            None,
            vec![("r", NodeKind::Router, None), ("h", NodeKind::Human, None)],
        ),
        nothing,
        &[],
    );
}

/// An `llm` router and a human node a model answers call a model through a backend: they are placed like an
/// agent without a declaration (the run container, or the host when the run is unsandboxed), whatever
/// the workflow's network policy; other routers and human pauses are not.
#[test]
fn nodes_that_call_a_model_are_placed_like_an_agent() {
    let w = |mode: Option<&str>, interaction: Option<&str>, wf_interaction: Option<&str>| {
        let mut w = workflow(
            Some(B::wf().image("a").done()),
            vec![
                ("a", NodeKind::Agent, None),
                ("r", NodeKind::Router, None),
                ("h", NodeKind::Human, None),
            ],
        );
        w.nodes[1].router_mode = mode.map(s);
        w.nodes[2].interaction = interaction.map(s);
        w.interaction = wf_interaction.map(s);
        w
    };
    let all = [("a", "run"), ("h", "run"), ("r", "run")];
    check_place(w(Some("llm"), Some("llm"), None), nothing, &all);
    check_place(w(Some("llm"), None, Some("llm_or_human")), nothing, &all);
    check_place(
        w(Some("llm"), Some("llm"), None),
        |i| i.cli_mode = Some(ModeChoice::None),
        &[
            ("a", "host (run is unsandboxed)"),
            ("h", "host (run is unsandboxed)"),
            ("r", "host (run is unsandboxed)"),
        ],
    );
    for mode in [None, Some("fan_out_all"), Some("condition"), Some("round_robin")] {
        check_place(w(mode, Some("human"), None), nothing, &[("a", "run")]);
    }
    check_place(w(None, None, Some("none")), nothing, &[("a", "run")]);
}

#[test]
fn plan_snapshots() {
    let r = repo_with(
        r#"{"image": "node:22", "remoteUser": "node", "containerEnv": {"CI": "1"}, "postCreateCommand": ["npm", "ci"]}"#,
    );
    let w = workflow(
        Some(
            B::wf()
                .mode("auto")
                .env("TOKEN_NAME", "x")
                .rule("api.example.com")
                .done(),
        ),
        vec![
            ("tests", NodeKind::Tool, None),
            ("notify", NodeKind::Tool, Some(B::node().short("none").done())),
            (
                "lint",
                NodeKind::Agent,
                Some(B::node().image("alpine:3.20").inherit("replace").done()),
            ),
        ],
    );
    let p = run(&w, &r, |i| i.cli_mode = Some(ModeChoice::Auto)).unwrap();
    insta::assert_json_snapshot!("res_plan_devcontainer", p);
    let p = run(&wf(None), &MemReader::new(), nothing).unwrap();
    insta::assert_json_snapshot!("res_plan_default_image", p);
}

#[test]
fn forced_off_nodes_and_floors() {
    // `--sandbox none` with the auto floor: an override node keeps its network in the raised run container.
    let w = workflow(
        None,
        vec![("n", NodeKind::Agent, Some(B::node().rule("b.com").done()))],
    );
    let p = run(&w, &MemReader::new(), |i| {
        i.cli_mode = Some(ModeChoice::None);
        set_env(i, "ITERION_SANDBOX_FLOOR", "auto");
    })
    .unwrap();
    assert_eq!(placement(&p.nodes["n"]), "run [allowlist / - / [b.com] / false]");
    // Without the floor the override is ignored on the host, with a notice.
    let p = run(&w, &MemReader::new(), |i| i.cli_mode = Some(ModeChoice::None)).unwrap();
    assert_eq!(
        placement(&p.nodes["n"]),
        "host (run is unsandboxed; notice: node network override ignored: the node runs on the host)"
    );
    // A node auto inherits the workflow's env layer whatever the workflow block kind.
    let w = workflow(
        Some(B::wf().image("a").env("A", "wf").done()),
        vec![(
            "n",
            NodeKind::Agent,
            Some(B::node().mode("auto").env("B", "node").done()),
        )],
    );
    let p = run(&w, &MemReader::new(), nothing).unwrap();
    let NodePlacement::Own { sandbox, .. } = &p.nodes["n"] else {
        panic!("own expected")
    };
    assert_eq!(
        format!("{:?}", sandbox.env_layers.workflow),
        r#"{"A": "wf", "B": "node"}"#
    );
    // A node that cannot be sandboxed (no root, no image) runs on the host with a notice; the inline floor
    // refuses instead.
    let w = workflow(
        None,
        vec![("n", NodeKind::Agent, Some(B::node().short("auto").done()))],
    );
    let p = run(&w, &MemReader::new(), |i| {
        i.builtin_default_mode = ModeChoice::None;
        i.repo_root = None;
        i.binary_version = None;
    })
    .unwrap();
    assert_eq!(
        placement(&p.nodes["n"]),
        "host (no repository root and no default image; notice: no repository root and no default image)"
    );
    let e = run(&w, &MemReader::new(), |i| {
        i.repo_root = None;
        i.binary_version = None;
        set_env(i, "ITERION_SANDBOX_FLOOR", "inline");
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "workflow 'w' cannot be sandboxed (no repository root and no default image) and ITERION_SANDBOX_FLOOR=inline forbids running it unsandboxed"
    );
    // The host workspace must be absolute (it is the default container workspace folder).
    let e = run(&wf(None), &MemReader::new(), |i| {
        i.workspace_path = "rel/app".into()
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "workflow 'w': the host workspace path 'rel/app' must be absolute"
    );
    // An invalid declaration is refused.
    let bad = B::wf().image("a").build(Some("D"), None).done();
    let e = run(&wf(Some(bad)), &MemReader::new(), nothing).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the sandbox declaration of workflow 'w' is invalid (see the compile diagnostics)"
    );
}
