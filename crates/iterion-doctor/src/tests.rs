//! The battery over a fake driver (scripted capabilities, engine info and availability) and a fake engine
//! (scripted ping, local images and registry answers): every check's pass / warn / fail / skip paths, and
//! snapshots of the human and JSON output.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use iterion_driver::{
    BuildRequest, Capabilities, DriverKind, EngineInfo, Liveness, ManagedResource, NetworkLease,
    NetworkRequest, PrepareRequest, Prepared, RemoveOutcome, StartRequest, Started,
};

use super::checks::{Loaded, build_report};
use super::engine::{EngineAnswer, EngineFailure, EngineProbe, RegistryAnswer, UnixEngine};
use super::report::{Report, Status};
use super::{Host, Inputs, Target};
use iterion_host::{ForceSource, HostKind, Selection, Tried};

/// A driver with scripted capabilities; every resource call is refused (the battery never creates anything).
#[derive(Debug)]
struct FakeDriver {
    kind: DriverKind,
    caps: Capabilities,
}

fn refuse(kind: DriverKind) -> iterion_driver::Error {
    iterion_driver::Error::Unsupported {
        driver: kind,
        feature: "fake driver".into(),
    }
}

#[async_trait]
impl iterion_driver::Driver for FakeDriver {
    fn kind(&self) -> DriverKind {
        self.kind
    }
    fn capabilities(&self) -> Capabilities {
        self.caps
    }
    async fn engine_info(&self) -> iterion_driver::Result<EngineInfo> {
        Ok(EngineInfo::new(self.kind, "28.2.2"))
    }
    async fn prepare(&self, _: PrepareRequest) -> iterion_driver::Result<Prepared> {
        Err(refuse(self.kind))
    }
    async fn build(&self, _: Prepared, _: BuildRequest) -> iterion_driver::Result<Prepared> {
        Err(refuse(self.kind))
    }
    async fn network(&self, _: NetworkRequest) -> iterion_driver::Result<NetworkLease> {
        Err(refuse(self.kind))
    }
    async fn start(
        &self,
        _: Prepared,
        _: Option<&NetworkLease>,
        _: StartRequest,
    ) -> iterion_driver::Result<Started> {
        Err(refuse(self.kind))
    }
    async fn list_managed(&self) -> iterion_driver::Result<Vec<ManagedResource>> {
        Ok(Vec::new())
    }
    async fn owner_liveness(&self, _: &ManagedResource) -> Liveness {
        Liveness::Unknown
    }
    async fn remove_managed(&self, _: &ManagedResource) -> iterion_driver::Result<RemoveOutcome> {
        Err(refuse(self.kind))
    }
    async fn remove_image(&self, _: &str) -> iterion_driver::Result<()> {
        Err(refuse(self.kind))
    }
}

/// A scripted engine.
#[derive(Debug, Clone)]
struct FakeEngine {
    ping: Result<EngineAnswer, EngineFailure>,
    local: BTreeSet<String>,
    registry: RegistryAnswer,
    runtimes: Option<super::engine::EngineRuntimes>,
}

#[async_trait]
impl EngineProbe for FakeEngine {
    async fn ping(&self) -> Result<EngineAnswer, EngineFailure> {
        self.ping.clone()
    }
    async fn image_present(&self, reference: &str) -> Result<bool, String> {
        match &self.ping {
            Ok(_) => Ok(self.local.contains(reference)),
            Err(e) => Err(super::engine::describe(e)),
        }
    }
    async fn registry(&self, _: &str) -> RegistryAnswer {
        self.registry.clone()
    }
    async fn runtimes(&self) -> Option<super::engine::EngineRuntimes> {
        self.runtimes.clone()
    }
}

fn answer() -> EngineAnswer {
    EngineAnswer {
        kind: "docker".into(),
        version: "28.2.2".into(),
        api_version: "1.47".into(),
        rootless: false,
        desktop: false,
        endpoint: "unix:///var/run/docker.sock".into(),
        arch: "x86_64".into(),
    }
}

fn engine_info(desktop: bool) -> EngineInfo {
    let mut i = EngineInfo::new(DriverKind::Docker, "28.2.2");
    i.api_version = "1.47".into();
    i.os = "linux".into();
    i.arch = std::env::consts::ARCH.into();
    i.desktop = desktop;
    i.endpoint = Some("unix:///var/run/docker.sock".into());
    i
}

/// The host situations of the vectors.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scene {
    /// Docker on Linux, busybox present, registry unreachable.
    Docker,
    /// Docker Desktop (advisory egress).
    Desktop,
    /// No engine at all (noop selected).
    NoEngine,
    /// No engine, noop forced by the operator.
    ForcedNoop,
    /// docker forced and unavailable.
    ForcedDockerDown,
}

fn host(scene: Scene) -> Host {
    let down = || Tried {
        candidate: DriverKind::Docker,
        outcome: Err("no engine socket at /var/run/docker.sock".into()),
    };
    let podman_down = Tried {
        candidate: DriverKind::Podman,
        outcome: Err("no engine socket at /run/podman/podman.sock".into()),
    };
    let noop_tried = Tried {
        candidate: DriverKind::Noop,
        outcome: Ok(EngineInfo::new(DriverKind::Noop, "host")),
    };
    let fake = |kind, caps| Some(Arc::new(FakeDriver { kind, caps }) as Arc<dyn iterion_driver::Driver>);
    let (driver, kind, reason, forced, tried, engine) = match scene {
        Scene::Docker | Scene::Desktop => {
            let desktop = scene == Scene::Desktop;
            let caps = if desktop {
                Capabilities::desktop_engine()
            } else {
                Capabilities::linux_engine(true)
            };
            (
                fake(DriverKind::Docker, caps),
                DriverKind::Docker,
                "first available of: docker, podman",
                None,
                vec![
                    Tried {
                        candidate: DriverKind::Docker,
                        outcome: Ok(engine_info(desktop)),
                    },
                    podman_down,
                    noop_tried,
                ],
                Some(engine_info(desktop)),
            )
        }
        Scene::NoEngine | Scene::ForcedNoop => (
            fake(DriverKind::Noop, Capabilities::noop()),
            DriverKind::Noop,
            if scene == Scene::ForcedNoop {
                "forced by --sandbox-driver"
            } else {
                "no container runtime: none of docker, podman answered"
            },
            (scene == Scene::ForcedNoop).then_some(ForceSource::Flag),
            vec![down(), podman_down, noop_tried],
            None,
        ),
        Scene::ForcedDockerDown => (
            None,
            DriverKind::Docker,
            "forced by ITERION_SANDBOX_DRIVER",
            Some(ForceSource::Env),
            vec![down(), podman_down, noop_tried],
            None,
        ),
    };
    let fake_engine = FakeEngine {
        ping: match scene {
            Scene::Docker | Scene::Desktop => Ok(EngineAnswer {
                desktop: scene == Scene::Desktop,
                ..answer()
            }),
            _ => Err(EngineFailure::NotRunning(
                "no engine socket at /var/run/docker.sock".into(),
            )),
        },
        local: ["iterion-test/busybox:latest".to_string()].into(),
        registry: RegistryAnswer::Unreachable("dial tcp: lookup ghcr.io: no such host".into()),
        runtimes: matches!(scene, Scene::Docker | Scene::Desktop).then(|| super::engine::EngineRuntimes {
            names: vec!["io.containerd.runc.v2".into(), "runc".into()],
            default: Some("runc".into()),
        }),
    };
    Host {
        selection: Selection {
            driver,
            kind,
            reason: reason.into(),
            host_kind: HostKind::Local,
            forced,
            candidates_tried: tried,
            engine,
            warnings: Vec::new(),
        },
        engine: Arc::new(fake_engine),
    }
}

const GOOD: &str = r#"tool t:
  command: "true"

workflow good:
  entry: t
  sandbox:
    mode: inline
    image: "iterion-test/busybox:latest"
    host_state: none
    network:
      mode: allowlist
      preset: "iterion-default"
      rules: ["**.example.org", "!bad.example.org", "10.0.0.0/8"]
  t -> done
"#;

/// A workflow derived from GOOD by replacing `from` with `to`.
fn good_with(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "{from}");
    GOOD.replace(from, to)
}

struct Case {
    src: Option<String>,
    scene: Scene,
    target: Target,
    env: Vec<(&'static str, &'static str)>,
    engine: Option<FakeEngine>,
}

fn case(src: Option<&str>, scene: Scene) -> Case {
    Case {
        src: src.map(str::to_string),
        scene,
        target: Target::Auto,
        env: Vec::new(),
        engine: None,
    }
}

impl Case {
    fn target(mut self, t: Target) -> Self {
        self.target = t;
        self
    }
    fn env(mut self, k: &'static str, v: &'static str) -> Self {
        self.env.push((k, v));
        self
    }
    fn engine(mut self, f: impl FnOnce(&mut FakeEngine)) -> Self {
        let mut e = FakeEngine {
            ping: Ok(answer()),
            local: ["iterion-test/busybox:latest".to_string()].into(),
            registry: RegistryAnswer::Unreachable("offline".into()),
            runtimes: Some(super::engine::EngineRuntimes {
                names: vec!["io.containerd.runc.v2".into(), "runc".into()],
                default: Some("runc".into()),
            }),
        };
        f(&mut e);
        self.engine = Some(e);
        self
    }
    fn run(self) -> Report {
        let dir = tempfile::tempdir().expect("tempdir");
        let work_dir = std::fs::canonicalize(dir.path()).expect("canonical");
        let mut env: BTreeMap<String, String> =
            [("HOME".to_string(), "/nonexistent-home".to_string())].into();
        for (k, v) in &self.env {
            env.insert(k.to_string(), v.to_string());
        }
        let mut inputs = Inputs::new(env, work_dir.clone());
        inputs.strict = true;
        inputs.target = self.target;
        let loaded = self.src.as_ref().map(|s| {
            let path = work_dir.join("wf.bot");
            std::fs::write(&path, s).expect("write");
            Loaded {
                path: PathBuf::from("wf.bot"),
                checked: iterion_spec::check(s, "wf.bot"),
            }
        });
        let mut h = host(self.scene);
        if let Some(e) = self.engine {
            h.engine = Arc::new(e);
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let mut r = rt
            .block_on(build_report(&inputs, &h, loaded.as_ref()))
            .expect("no usage error");
        for c in r.checks.iter_mut().flatten() {
            c.duration_ms = 0;
        }
        // Host-dependent fields, so snapshots are stable.
        r.os = "linux";
        r.arch = "x86_64";
        if let Some(spec) = r.spec.as_object_mut() {
            spec.insert("effective_user".into(), serde_json::Value::Null);
            if spec.contains_key("workspace_folder") && !spec["workspace_folder"].is_null() {
                spec.insert("workspace_folder".into(), "<work dir>".into());
            }
        }
        r
    }
}

/// `(status, message)` of a check.
fn get(r: &Report, id: &str) -> (Status, String) {
    let c = r
        .checks
        .iter()
        .flatten()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no check {id}"));
    (c.status, c.message.clone())
}

fn expect(r: &Report, id: &str, status: Status, fragment: &str) {
    let (s, m) = get(r, id);
    assert_eq!(s, status, "{id}: {m}");
    assert!(m.contains(fragment), "{id}: '{m}' lacks '{fragment}'");
}

// --- vectors of 06 §13 -------------------------------------------------------------------------------------

#[test]
fn d3_good_workflow_passes_with_a_range_warning() {
    let r = case(Some(GOOD), Scene::Docker).run();
    expect(&r, "network_policy_syntax", Status::Warn, "10.0.0.0/8 (private)");
    expect(&r, "image_resolvable", Status::Pass, "present locally");
    expect(&r, "egress_enforcement", Status::Pass, "relay placement");
    expect(
        &r,
        "workflow_compiles",
        Status::Pass,
        "workflow 'good' compiles (1 nodes)",
    );
    expect(
        &r,
        "driver_available",
        Status::Pass,
        "docker 28.2.2 (first available of: docker, podman)",
    );
    expect(
        &r,
        "engine_reachable",
        Status::Pass,
        "docker 28.2.2, API 1.47, rootful",
    );
    assert_eq!(r.exit_code, 0);
}

#[test]
fn oci_runtime_lists_what_the_engine_offers_and_what_the_workflow_gets() {
    let r = case(Some(GOOD), Scene::Docker).run();
    expect(
        &r,
        "oci_runtime",
        Status::Pass,
        "run: default (default) -> runc; the engine offers io.containerd.runc.v2, runc (default runc)",
    );
    // a runtime the engine lacks fails before any run, with how to register it
    let gvisor = good_with(
        "    host_state: none\n",
        "    host_state: none\n    runtime: gvisor\n",
    );
    let r = case(Some(&gvisor), Scene::Docker).run();
    expect(
        &r,
        "oci_runtime",
        Status::Fail,
        "run: the docker engine has no OCI runtime for 'gvisor' (it offers: io.containerd.runc.v2, runc); install gVisor",
    );
    assert_eq!(r.exit_code, 1);
    // the engine that has it: the workflow's choice and the engine's name for it
    let r = case(Some(&gvisor), Scene::Docker)
        .engine(|e| {
            e.runtimes = Some(super::engine::EngineRuntimes {
                names: vec!["runc".into(), "runsc".into()],
                default: Some("runc".into()),
            })
        })
        .run();
    expect(
        &r,
        "oci_runtime",
        Status::Pass,
        "run: gvisor (workflow sandbox.runtime) -> runsc; the engine offers runc, runsc (default runc)",
    );
    // the operator's floor is what the doctor reports
    let r = case(Some(GOOD), Scene::Docker)
        .env("ITERION_SANDBOX_RUNTIME_FLOOR", "gvisor")
        .run();
    expect(&r, "oci_runtime", Status::Fail, "no OCI runtime for 'gvisor'");
}

#[test]
fn d4_d5_bad_rule_and_preset_fail_the_policy_check() {
    let r = case(Some(&good_with("10.0.0.0/8", "a*b.example.org")), Scene::Docker).run();
    expect(&r, "network_policy_syntax", Status::Fail, "a*b.example.org");
    assert_eq!(r.exit_code, 1);
    let r = case(
        Some(&good_with("\"iterion-default\"", "\"no-such-preset\"")),
        Scene::Docker,
    )
    .run();
    expect(&r, "network_policy_syntax", Status::Fail, "C096");
    assert_eq!(r.exit_code, 1);
}

#[test]
fn d6_engine_socket_mount_is_refused() {
    let src = good_with(
        "    host_state: none\n",
        "    host_state: none\n    mounts: [\"type=bind,source=/var/run/docker.sock,target=/var/run/docker.sock\"]\n",
    );
    let r = case(Some(&src), Scene::Docker).run();
    expect(
        &r,
        "spec_safety",
        Status::Fail,
        "mount 'type=bind,source=/var/run/docker.sock,target=/var/run/docker.sock' is refused: source /var/run/docker.sock is a sensitive path",
    );
    assert_eq!(r.exit_code, 1);
}

#[test]
fn d12_compile_error_fails_workflow_compiles() {
    let src = GOOD.replace("t -> done", "t -> nowhere");
    let r = case(Some(&src), Scene::Docker).run();
    expect(&r, "workflow_compiles", Status::Fail, "[C001]");
    assert_eq!(r.exit_code, 1);
}

#[test]
fn d14_no_engine_fails_driver_and_engine() {
    let r = case(Some(GOOD), Scene::NoEngine).run();
    expect(&r, "driver_available", Status::Fail, "docker: no engine socket");
    expect(&r, "engine_reachable", Status::Fail, "no engine socket");
    assert_eq!(r.exit_code, 1);
}

#[test]
fn d15_cross_host_local_target_warns_and_skips_engine_checks() {
    let r = case(Some(GOOD), Scene::NoEngine).target(Target::Local).run();
    expect(&r, "driver_available", Status::Warn, "cross-host check");
    expect(&r, "engine_reachable", Status::Skip, "cross-host");
    expect(&r, "egress_enforcement", Status::Skip, "cross-host");
    assert_eq!(r.exit_code, 0);
}

#[test]
fn d16_cloud_target_from_a_docker_laptop() {
    let r = case(Some(GOOD), Scene::Docker).target(Target::Cloud).run();
    expect(&r, "driver_available", Status::Warn, "cross-host check");
    expect(&r, "k8s_spec_compatible", Status::Warn, "no user");
    expect(&r, "k8s_context", Status::Warn, "cluster access not verified");
    expect(&r, "k8s_rbac", Status::Skip, "k8s_context did not pass");
    expect(&r, "engine_reachable", Status::Skip, "target cloud");
    assert_eq!(r.exit_code, 0);
    let src = good_with(
        "    host_state: none\n",
        "    host_state: none\n    user: \"1000\"\n",
    );
    let r = case(Some(&src), Scene::Docker).target(Target::Cloud).run();
    expect(&r, "k8s_spec_compatible", Status::Pass, "compatible");
}

#[test]
fn d17_build_on_cloud_fails() {
    let src = "tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  sandbox:\n    mode: inline\n    host_state: none\n    build:\n      dockerfile: \"Dockerfile\"\n  t -> done\n";
    let r = case(Some(src), Scene::Docker).target(Target::Cloud).run();
    expect(&r, "build_context", Status::Fail, "local-only");
    expect(
        &r,
        "k8s_spec_compatible",
        Status::Fail,
        "sandbox.build is local-only",
    );
    assert_eq!(r.exit_code, 1);
    // Locally, the missing Dockerfile is the problem.
    let r = case(Some(src), Scene::Docker).run();
    expect(&r, "build_context", Status::Fail, "does not exist");
    expect(&r, "image_resolvable", Status::Skip, "builds its image");
}

#[test]
fn d18_d19_host_state_and_user_on_cloud() {
    let r = case(
        Some(&good_with("host_state: none", "host_state: auto")),
        Scene::Docker,
    )
    .target(Target::Cloud)
    .run();
    expect(
        &r,
        "k8s_spec_compatible",
        Status::Fail,
        "host_state auto cannot be honoured",
    );
    let src = good_with(
        "    host_state: none\n",
        "    host_state: none\n    user: \"node\"\n",
    );
    let r = case(Some(&src), Scene::Docker).target(Target::Cloud).run();
    expect(&r, "k8s_spec_compatible", Status::Fail, "must be numeric");
    let src = good_with(
        "    host_state: none\n",
        "    host_state: none\n    user: \"0:0\"\n",
    );
    let r = case(Some(&src), Scene::Docker).target(Target::Cloud).run();
    expect(&r, "k8s_spec_compatible", Status::Fail, "runs as root");
    assert_eq!(r.exit_code, 1);
}

#[test]
fn d20_d21_absent_image_offline_and_pull_policy_never() {
    let src = good_with("iterion-test/busybox:latest", "ghcr.io/acme/absent:1");
    let r = case(Some(&src), Scene::Docker).run();
    // run would fail pulling it: a failure, with the run's hint
    expect(&r, "image_resolvable", Status::Fail, "registry is unreachable");
    assert_eq!(r.exit_code, 1);
    let r = case(Some(&src), Scene::Docker)
        .env("ITERION_SANDBOX_PULL_POLICY", "never")
        .run();
    expect(
        &r,
        "image_resolvable",
        Status::Fail,
        "ITERION_SANDBOX_PULL_POLICY=never",
    );
    assert_eq!(r.exit_code, 1);
}

#[test]
fn image_registry_answers() {
    let src = good_with("iterion-test/busybox:latest", "ghcr.io/acme/absent:1");
    let r = case(Some(&src), Scene::Docker)
        .engine(|e| e.registry = RegistryAnswer::Found)
        .run();
    expect(&r, "image_resolvable", Status::Pass, "found in its registry");
    let r = case(Some(&src), Scene::Docker)
        .engine(|e| e.registry = RegistryAnswer::NotFound("manifest unknown".into()))
        .run();
    expect(&r, "image_resolvable", Status::Fail, "manifest unknown");
    let r = case(Some(&src), Scene::Docker)
        .engine(|e| e.registry = RegistryAnswer::Auth("unauthorized".into()))
        .run();
    expect(&r, "image_resolvable", Status::Warn, "unauthorized");
}

#[test]
fn engine_failures_each_have_their_hint() {
    let cases = [
        (
            EngineFailure::Permission("permission denied on /var/run/docker.sock".into()),
            "docker group",
        ),
        (
            EngineFailure::Timeout {
                endpoint: "unix:///x.sock".into(),
                after: Duration::from_secs(1),
            },
            "did not answer within 1s",
        ),
        (
            EngineFailure::TooOld("engine API 1.40 is older than 1.41".into()),
            "upgrade the engine",
        ),
        (
            EngineFailure::NotRunning("engine refused the connection".into()),
            "systemctl start docker",
        ),
    ];
    for (failure, hint) in cases {
        let r = case(Some(GOOD), Scene::Docker)
            .engine(|e| e.ping = Err(failure.clone()))
            .run();
        let c = r
            .checks
            .iter()
            .flatten()
            .find(|c| c.id == "engine_reachable")
            .expect("check");
        assert_eq!(c.status, Status::Fail, "{failure:?}");
        assert!(
            c.hint.as_deref().is_some_and(|h| h.contains(hint)),
            "{:?}",
            c.hint
        );
    }
}

/// `--strict` on `src` with `root` as the work dir (HOME pointing nowhere), on the fake Docker host.
fn strict_report_in(root: &std::path::Path, src: &str) -> Report {
    let mut inputs = Inputs::new(
        [("HOME".to_string(), "/nonexistent-home".to_string())].into(),
        root.to_path_buf(),
    );
    inputs.strict = true;
    let loaded = Loaded {
        path: PathBuf::from("wf.bot"),
        checked: iterion_spec::check(src, "wf.bot"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(build_report(&inputs, &host(Scene::Docker), Some(&loaded)))
        .expect("report")
}

#[test]
fn a_work_dir_outside_git_is_its_own_repository_root() {
    // like `iterion run` (05 §4.1): without a .git above it, the work dir's own .devcontainer is used
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    std::fs::create_dir(root.join(".devcontainer")).expect("dc");
    std::fs::write(
        root.join(".devcontainer/devcontainer.json"),
        r#"{"image": "iterion-test/busybox:latest"}"#,
    )
    .expect("write");
    let src = "tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  sandbox: auto\n  t -> done\n";
    let r = strict_report_in(&root, src);
    expect(
        &r,
        "sandbox_active",
        Status::Pass,
        "devcontainer .devcontainer/devcontainer.json",
    );
    // a repository-defined sandbox gets the default allowlist, as in a run
    expect(&r, "network_policy_syntax", Status::Pass, "allowlist");
}

#[test]
fn d24_repository_env_names_are_listed_never_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    std::fs::create_dir(root.join(".git")).expect("git");
    std::fs::create_dir(root.join(".devcontainer")).expect("dc");
    std::fs::write(
        root.join(".devcontainer/devcontainer.json"),
        r#"{"image": "iterion-test/busybox:latest", "containerEnv": {"ANTHROPIC_BASE_URL": "https://secret.example", "NODE_ENV": "dev"}}"#,
    )
    .expect("write");
    let src = "tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  sandbox: auto\n  t -> done\n";
    let r = strict_report_in(&root, src);
    expect(
        &r,
        "env_deny",
        Status::Warn,
        "ANTHROPIC_BASE_URL (prefix:ANTHROPIC_)",
    );
    let json = r.to_json();
    assert!(!json.contains("secret.example"), "a value leaked: {json}");
    assert!(!r.to_human(false).contains("secret.example"));
}

#[test]
fn d25_sandbox_none_warns_and_needs_no_driver() {
    let src = "tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  sandbox: none\n  t -> done\n";
    let r = case(Some(src), Scene::NoEngine).run();
    expect(&r, "sandbox_active", Status::Warn, "will not be sandboxed");
    expect(&r, "driver_available", Status::Pass, "nothing needs a driver");
    expect(&r, "engine_reachable", Status::Skip, "no active sandbox scope");
    assert_eq!(r.exit_code, 0);
}

#[test]
fn d26_inline_floor_raises_none_and_needs_a_driver() {
    let src = "tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  sandbox: none\n  t -> done\n";
    let r = case(Some(src), Scene::NoEngine)
        .env("ITERION_SANDBOX_FLOOR", "inline")
        .run();
    expect(
        &r,
        "sandbox_active",
        Status::Warn,
        "ITERION_SANDBOX_FLOOR=inline raised the run scope",
    );
    expect(&r, "driver_available", Status::Fail, "no usable driver");
    assert_eq!(r.exit_code, 1);
}

#[test]
fn d27_forced_noop_warns_not_sandboxed() {
    let src = "tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  sandbox: auto\n  t -> done\n";
    let r = case(Some(src), Scene::ForcedNoop).run();
    expect(&r, "driver_available", Status::Warn, "NOT sandboxed");
    expect(&r, "engine_reachable", Status::Skip, "noop");
    assert_eq!(r.exit_code, 0);
    let r = case(Some(src), Scene::ForcedNoop)
        .env("ITERION_SANDBOX_FLOOR", "inline")
        .run();
    expect(&r, "driver_available", Status::Fail, "inline floor forbids");
}

#[test]
fn forced_unavailable_driver_fails_naming_the_source() {
    let r = case(Some(GOOD), Scene::ForcedDockerDown).run();
    expect(
        &r,
        "driver_available",
        Status::Fail,
        "forced by ITERION_SANDBOX_DRIVER",
    );
    assert!(
        r.driver_error
            .as_deref()
            .is_some_and(|e| e.contains("forced by ITERION_SANDBOX_DRIVER"))
    );
}

#[test]
fn d28_desktop_egress_is_advisory_and_can_be_required() {
    let r = case(Some(GOOD), Scene::Desktop).run();
    expect(&r, "egress_enforcement", Status::Warn, "advisory");
    assert_eq!(r.exit_code, 0);
    let r = case(Some(GOOD), Scene::Desktop)
        .env("ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS", "1")
        .run();
    expect(&r, "egress_enforcement", Status::Fail, "REQUIRE_ENFORCED_EGRESS");
    expect(&r, "driver_capabilities", Status::Fail, "enforced egress");
    assert_eq!(r.exit_code, 1);
}

#[test]
fn relay_override_must_be_a_static_executable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("relay");
    std::fs::write(&p, b"#!/bin/sh\n").expect("write");
    let leaked: &'static str = Box::leak(p.display().to_string().into_boxed_str());
    let r = case(Some(GOOD), Scene::Docker)
        .env("ITERION_RELAY_BIN", leaked)
        .run();
    expect(&r, "egress_enforcement", Status::Fail, "is not a static");
}

#[test]
fn open_policies_skip_network_checks_and_no_workflow_skips_compile() {
    let src = good_with(
        "    network:\n      mode: allowlist\n      preset: \"iterion-default\"\n      rules: [\"**.example.org\", \"!bad.example.org\", \"10.0.0.0/8\"]\n",
        "    network:\n      mode: open\n",
    );
    let r = case(Some(&src), Scene::Docker).run();
    expect(&r, "network_policy_syntax", Status::Skip, "open");
    expect(&r, "egress_enforcement", Status::Skip, "open");
    let r = case(None, Scene::Docker).run();
    expect(&r, "workflow_compiles", Status::Skip, "no workflow file");
}

#[test]
fn pod_ip_checks_on_cloud() {
    let r = case(Some(GOOD), Scene::Docker)
        .target(Target::Cloud)
        .env("ITERION_POD_IP", "not-an-ip")
        .run();
    expect(&r, "k8s_pod_ip", Status::Warn, "not an IP address");
    let r = case(Some(GOOD), Scene::Docker)
        .target(Target::Cloud)
        .env("ITERION_POD_IP", "10.1.2.3")
        .env("ITERION_POD_NAME", "runner-0")
        .env("ITERION_POD_UID", "uid")
        .run();
    expect(&r, "k8s_pod_ip", Status::Pass, "valid");
    let r = case(Some(GOOD), Scene::Docker)
        .target(Target::Cloud)
        .env("KUBERNETES_SERVICE_HOST", "10.0.0.1")
        .run();
    expect(&r, "k8s_pod_ip", Status::Fail, "ITERION_POD_IP is not set");
    expect(
        &r,
        "k8s_context",
        Status::Fail,
        "KUBERNETES_SERVICE_PORT is not set",
    );
    expect(&r, "k8s_rbac", Status::Skip, "k8s_context did not pass");
}

/// A minimal Kubernetes API on `127.0.0.1:0` (one request per connection): `GET /version` answers `minor`,
/// every `SelfSubjectAccessReview` is allowed unless its body names `deny_resource`.
fn fake_kube_api(minor: &'static str, deny_resource: Option<&'static str>) -> u16 {
    use std::io::{BufRead, BufReader, Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut r = BufReader::new(conn.try_clone().expect("clone"));
            let mut line = String::new();
            if r.read_line(&mut line).is_err() {
                continue;
            }
            let mut len = 0usize;
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).is_err() || h.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = h.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; len];
            let _ = r.read_exact(&mut body);
            let body = String::from_utf8_lossy(&body);
            let answer = if line.starts_with("GET /version") {
                format!(r#"{{"major":"1","minor":"{minor}","gitVersion":"v1.{minor}.0"}}"#)
            } else if line.contains("selfsubjectaccessreviews") {
                let allowed = deny_resource.is_none_or(|d| !body.contains(&format!("\"{d}\"")));
                format!(
                    r#"{{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{{}},"status":{{"allowed":{allowed}}}}}"#
                )
            } else {
                String::from("{}")
            };
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    port
}

fn kubeconfig_for(dir: &std::path::Path, port: u16) -> &'static str {
    let path = dir.join(format!("config-{port}"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: dev\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: dev\n  context:\n    cluster: c\n    user: u\n    namespace: ci\nusers:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .expect("write kubeconfig");
    Box::leak(path.display().to_string().into_boxed_str())
}

#[test]
fn k8s_context_and_rbac_against_an_api_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    // a current context on a 1.31 server that allows every review: both pass
    let ok = kubeconfig_for(dir.path(), fake_kube_api("31", None));
    let r = case(Some(GOOD), Scene::Docker)
        .target(Target::Cloud)
        .env("KUBECONFIG", ok)
        .run();
    expect(&r, "k8s_context", Status::Pass, "1.31");
    expect(&r, "k8s_rbac", Status::Pass, "permissions");
    // one permission missing: off-cluster, a warning listing it
    let denied = kubeconfig_for(dir.path(), fake_kube_api("31", Some("networkpolicies")));
    let r = case(Some(GOOD), Scene::Docker)
        .target(Target::Cloud)
        .env("KUBECONFIG", denied)
        .run();
    expect(&r, "k8s_context", Status::Pass, "1.31");
    expect(&r, "k8s_rbac", Status::Warn, "networkpolicies");
    // a 1.29 server: exec needs the v5 stream protocol
    let old = kubeconfig_for(dir.path(), fake_kube_api("29", None));
    let r = case(Some(GOOD), Scene::Docker)
        .target(Target::Cloud)
        .env("KUBECONFIG", old)
        .run();
    expect(&r, "k8s_context", Status::Fail, "1.29");
    let c = r
        .checks
        .iter()
        .flatten()
        .find(|c| c.id == "k8s_context")
        .expect("check");
    assert!(
        c.hint
            .as_deref()
            .is_some_and(|h| h.contains("v5 stream protocol")),
        "{:?}",
        c.hint
    );
    expect(&r, "k8s_rbac", Status::Skip, "k8s_context did not pass");
}

#[test]
fn k8s_context_reads_the_kubeconfig_off_cluster() {
    // a current context whose API server refuses connections: off-cluster, so a warning naming the context
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: dev\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: dev\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .expect("write kubeconfig");
    let path: &'static str = Box::leak(kubeconfig.display().to_string().into_boxed_str());
    let r = case(Some(GOOD), Scene::Docker)
        .target(Target::Cloud)
        .env("KUBECONFIG", path)
        .run();
    expect(&r, "k8s_context", Status::Warn, "context dev");
    let (_, m) = get(&r, "k8s_context");
    assert!(m.contains("cluster access not verified"), "{m}");
    expect(&r, "k8s_rbac", Status::Skip, "k8s_context did not pass");
    // target local: both skipped without looking for a cluster
    let r = case(Some(GOOD), Scene::Docker).env("KUBECONFIG", path).run();
    expect(&r, "k8s_context", Status::Skip, "target local");
    expect(&r, "k8s_rbac", Status::Skip, "target local");
}

fn probe_checks(scene: Scene, target: Target, src: &str) -> Vec<(&'static str, Status, String)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = std::fs::canonicalize(dir.path()).expect("c");
    let env = BTreeMap::from([("ITERION_HOME".to_string(), home.display().to_string())]);
    let mut inputs = Inputs::new(env, home);
    inputs.strict = true;
    inputs.probe = true;
    inputs.target = target;
    let loaded = Loaded {
        path: PathBuf::from("wf.bot"),
        checked: iterion_spec::check(src, "wf.bot"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let r = rt
        .block_on(build_report(&inputs, &host(scene), Some(&loaded)))
        .expect("report");
    r.checks
        .iter()
        .flatten()
        .filter(|c| c.id.starts_with("probe_"))
        .map(|c| (c.id, c.status, c.message.clone()))
        .collect()
}

#[test]
fn probes_are_skipped_with_the_reason() {
    let absent = good_with("iterion-test/busybox:latest", "ghcr.io/acme/absent:1");
    for (scene, target, src, reason) in [
        (
            Scene::NoEngine,
            Target::Auto,
            GOOD,
            "need a docker or podman engine",
        ),
        (Scene::Docker, Target::Cloud, GOOD, "target cloud"),
        (Scene::Docker, Target::Auto, absent.as_str(), "present locally"),
    ] {
        let probes = probe_checks(scene, target, src);
        let ids: Vec<&str> = probes.iter().map(|p| p.0).collect();
        assert_eq!(ids, crate::probes::PROBE_IDS, "{reason}");
        for (id, status, m) in &probes {
            assert_eq!(*status, Status::Skip, "{id}: {m}");
            assert!(m.contains(reason), "{id}: '{m}' lacks '{reason}'");
        }
    }
}

#[test]
fn a_sandbox_that_cannot_start_fails_probe_sandbox_start_and_skips_the_rest() {
    // The fake driver refuses `prepare`, as an engine would refuse the real run.
    let probes = probe_checks(Scene::Docker, Target::Auto, GOOD);
    assert_eq!(probes[0].0, "probe_sandbox_start");
    assert_eq!(probes[0].1, Status::Fail, "{}", probes[0].2);
    assert!(probes[0].2.contains("fake driver"), "{}", probes[0].2);
    for (id, status, m) in &probes[1..] {
        assert_eq!(*status, Status::Skip, "{id}: {m}");
        assert!(m.contains("probe_sandbox_start failed"), "{id}: {m}");
    }
}

#[test]
fn an_invalid_resolution_setting_is_a_usage_error_as_in_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut inputs = Inputs::new(
        [("ITERION_SANDBOX_DEFAULT".to_string(), "docker".to_string())].into(),
        dir.path().to_path_buf(),
    );
    inputs.strict = true;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let err = rt
        .block_on(build_report(&inputs, &host(Scene::Docker), None))
        .expect_err("usage error");
    assert!(err.contains("ITERION_SANDBOX_DEFAULT"), "{err}");
}

#[test]
fn invalid_container_settings_are_the_warnings_run_gives_in_both_modes() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (k, v, used) in [
        ("ITERION_SANDBOX_PULL_POLICY", "sometimes", "using missing"),
        ("ITERION_SANDBOX_HARDENING", "lax", "using strict"),
        (
            "ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS",
            "maybe",
            "enforced egress is required",
        ),
    ] {
        let env: BTreeMap<String, String> = [(k.to_string(), v.to_string())].into();
        let run = iterion_runtime::lifecycle::Settings::from_env(&env).warnings;
        assert_eq!(run.len(), 1, "{k}: {run:?}");
        assert!(run[0].contains(used), "{k}: {run:?}");
        for strict in [false, true] {
            let mut inputs = Inputs::new(env.clone(), dir.path().to_path_buf());
            inputs.strict = strict;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("rt");
            let r = rt
                .block_on(build_report(&inputs, &host(Scene::Docker), None))
                .unwrap_or_else(|e| panic!("{k}={v} strict={strict}: {e}"));
            assert_eq!(r.notes, run, "{k} strict={strict}");
            if let Some(s) = &r.summary {
                assert!(s.warn >= 1, "{k}: the warning is counted");
            }
        }
    }
}

#[test]
fn d23_timeout_values() {
    let env = |v: &str| BTreeMap::from([("ITERION_SANDBOX_DOCTOR_TIMEOUT".to_string(), v.to_string())]);
    assert_eq!(super::doctor_timeout(&env("1s")), (Duration::from_secs(1), None));
    for bad in ["banana", "", "0s"] {
        let (d, w) = super::doctor_timeout(&env(bad));
        assert_eq!(d, Duration::from_secs(5));
        assert!(w.is_some_and(|w| w.contains("ITERION_SANDBOX_DOCTOR_TIMEOUT")));
    }
    assert_eq!(
        super::doctor_timeout(&BTreeMap::new()),
        (Duration::from_secs(5), None)
    );
}

#[test]
fn preflight_values() {
    let env = |v: &str| BTreeMap::from([("ITERION_SANDBOX_PREFLIGHT".to_string(), v.to_string())]);
    assert_eq!(super::preflight_mode(&BTreeMap::new()), Ok(None));
    assert_eq!(super::preflight_mode(&env(" OFF ")), Ok(None));
    assert_eq!(super::preflight_mode(&env("1")), Ok(Some(false)));
    assert_eq!(super::preflight_mode(&env("probe")), Ok(Some(true)));
    assert_eq!(
        super::preflight_mode(&env("maybe")),
        Err("invalid ITERION_SANDBOX_PREFLIGHT 'maybe' (want 1, probe or 0)".to_string())
    );
}

/// D33 / D35 at the function level: a failing check stops the run, warnings let it proceed.
#[test]
fn preflight_fails_on_a_failed_check_and_passes_with_warnings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut inputs = Inputs::new(BTreeMap::new(), std::fs::canonicalize(dir.path()).expect("c"));
    inputs.strict = false; // forced on by the pre-flight
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let bad = Loaded {
        path: PathBuf::from("bad-rule.bot"),
        checked: iterion_spec::check(&good_with("10.0.0.0/8", "a*b.example.org"), "bad-rule.bot"),
    };
    match rt.block_on(super::preflight_on(&inputs, &host(Scene::Docker), Some(&bad))) {
        Err(super::PreflightError::Failed(r)) => {
            assert_eq!(r.failed(), 1);
            expect(&r, "network_policy_syntax", Status::Fail, "a*b.example.org");
        }
        other => panic!("expected a failed pre-flight, got {other:?}"),
    }
    let good = Loaded {
        path: PathBuf::from("good.bot"),
        checked: iterion_spec::check(GOOD, "good.bot"),
    };
    let r = rt
        .block_on(super::preflight_on(&inputs, &host(Scene::Docker), Some(&good)))
        .expect("warnings do not stop the run");
    assert!(r.strict);
    assert_eq!(r.summary.map(|s| s.warn), Some(1));
}

/// D22: an endpoint that accepts and never answers fails within the bound, naming it.
#[test]
fn d22_silent_engine_times_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("silent.sock");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let failure = rt.block_on(async {
        let listener = tokio::net::UnixListener::bind(&sock).expect("bind");
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                held.push(s);
            }
        });
        let e = UnixEngine {
            socket: sock.clone(),
            timeout: Duration::from_millis(200),
        };
        let r = e.ping().await;
        hold.abort();
        r
    });
    match failure {
        Err(EngineFailure::Timeout { after, .. }) => assert_eq!(after, Duration::from_millis(200)),
        other => panic!("expected a timeout, got {other:?}"),
    }
}

/// A loopback fake engine answering `_ping`, `version`, image and distribution requests.
#[test]
fn fake_engine_endpoint_answers_are_understood() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("engine.sock");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let listener = tokio::net::UnixListener::bind(&sock).expect("bind");
        let server = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = req.split_whitespace().nth(1).unwrap_or("").to_string();
                let (status, body) = match path.as_str() {
                    "/_ping" => ("200 OK", "OK".to_string()),
                    "/version" => (
                        "200 OK",
                        r#"{"Version":"19.03.0","ApiVersion":"1.40","Arch":"amd64"}"#.to_string(),
                    ),
                    p if p.starts_with("/images/iterion-test/busybox:latest/") => ("200 OK", "{}".into()),
                    p if p.starts_with("/images/") => {
                        ("404 Not Found", r#"{"message":"No such image"}"#.into())
                    }
                    _ => ("404 Not Found", r#"{"message":"manifest unknown"}"#.into()),
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        let e = UnixEngine {
            socket: sock.clone(),
            timeout: Duration::from_secs(2),
        };
        assert!(matches!(e.ping().await, Err(EngineFailure::TooOld(_))));
        assert_eq!(e.image_present("iterion-test/busybox:latest").await, Ok(true));
        assert_eq!(e.image_present("ghcr.io/acme/absent:1").await, Ok(false));
        assert!(matches!(
            e.registry("ghcr.io/acme/absent:1").await,
            RegistryAnswer::NotFound(_)
        ));
        server.abort();
    });
    let missing = UnixEngine {
        socket: dir.path().join("absent.sock"),
        timeout: Duration::from_secs(1),
    };
    let r = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt")
        .block_on(missing.ping());
    assert!(matches!(r, Err(EngineFailure::NotRunning(_))), "{r:?}");
}

// --- snapshots ------------------------------------------------------------------------------------------------

/// Replaces the per-build relay digest and the binary version.
fn redact(s: String) -> String {
    s.replace(
        &iterion_driver_docker::relay::short_hash(iterion_driver_docker::relay::EMBEDDED),
        "<relay>",
    )
    .replace(env!("CARGO_PKG_VERSION"), "<version>")
}

#[test]
fn snapshot_clean_pass() {
    let r = case(Some(GOOD), Scene::Docker).run();
    insta::assert_snapshot!("clean_pass_human", redact(r.to_human(false)));
    insta::assert_snapshot!("clean_pass_json", redact(r.to_json()));
}

#[test]
fn snapshot_failures() {
    let src = good_with(
        "    host_state: none\n",
        "    host_state: none\n    mounts: [\"type=bind,source=/var/run/docker.sock,target=/var/run/docker.sock\"]\n",
    )
    .replace("t -> done", "t -> nowhere");
    let r = case(Some(&src), Scene::NoEngine).run();
    insta::assert_snapshot!("failures_human", redact(r.to_human(false)));
    insta::assert_snapshot!("failures_json", redact(r.to_json()));
}

#[test]
fn snapshot_policy_failure() {
    let r = case(Some(&good_with("10.0.0.0/8", "a*b.example.org")), Scene::Docker).run();
    insta::assert_snapshot!("policy_failure_human", redact(r.to_human(false)));
    insta::assert_snapshot!("policy_failure_json", redact(r.to_json()));
}

#[test]
fn snapshot_cross_host_cloud_without_runtime() {
    let r = case(Some(GOOD), Scene::NoEngine).target(Target::Cloud).run();
    insta::assert_snapshot!("cloud_no_runtime_human", redact(r.to_human(false)));
    insta::assert_snapshot!("cloud_no_runtime_json", redact(r.to_json()));
}

#[test]
fn snapshot_report_mode_with_and_without_engine() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    for (name, scene) in [
        ("report_engine", Scene::Docker),
        ("report_no_engine", Scene::NoEngine),
    ] {
        let inputs = Inputs::new(BTreeMap::new(), PathBuf::from("/"));
        let mut r = rt
            .block_on(build_report(&inputs, &host(scene), None))
            .expect("report");
        r.os = "linux";
        r.arch = "x86_64";
        // The relay digest and version differ per build.
        insta::assert_snapshot!(format!("{name}_human"), redact(r.to_human(false)));
        insta::assert_snapshot!(format!("{name}_json"), redact(r.to_json()));
        assert_eq!(r.exit_code, 0);
        assert!(r.checks.is_none() && r.summary.is_none() && !r.strict);
    }
}

#[test]
fn declared_secrets_and_provider_keys_are_listed_with_their_inspection() {
    let src = good_with(
        "  t -> done\n",
        "    secrets:\n      GH_TOKEN: [\"api.github.com\"]\n      LOCAL:\n        hosts: [\"127.0.0.1:8080\"]\n        plain_http: true\n      DEPLOY_KEY:\n        as: file\n  t -> done\n",
    );
    // GH_TOKEN set, the others not: a warning naming each missing variable, never a value
    let r = case(Some(&src), Scene::Docker)
        .env("GH_TOKEN", "ghp_not_shown")
        .run();
    let (status, message) = get(&r, "secrets");
    assert_eq!(status, Status::Warn, "{message}");
    assert!(
        message.contains("GH_TOKEN → api.github.com (TLS inspected)"),
        "{message}"
    );
    assert!(
        message.contains("127.0.0.1:8080 (TLS inspected, plain HTTP allowed)"),
        "{message}"
    );
    assert!(message.contains("DEPLOY_KEY → a read-only file"), "{message}");
    assert!(message.contains("LOCAL is not set"), "{message}");
    assert!(!message.contains("ghp_not_shown"), "{message}");
    // a workflow without secrets and without model nodes: nothing to report
    let r = case(Some(GOOD), Scene::Docker).run();
    expect(&r, "secrets", Status::Skip, "declares no secret");
}
