//! Engine-specific driver cases against the real engine: labels (C17), owner liveness and removal (C18),
//! name conflicts (C19), hardening (C21), host state (C22), protected paths (C23), advisory placement (C25),
//! builds through the driver (C28, C29), an image without a shell (C31), post-create (C16), secrecy of
//! environment values (02 §7), cancellation, cleanup and the reaper.

mod support;

use iterion_driver::{
    BuildRequest, Driver, EgressPlacement, Error as DError, ExecRequest, HostStatePlan, Liveness,
    NetworkRequest, OutputLimits, PrepareRequest, Prepared, PullPolicy, RemoveOutcome, ResourceKind, Run,
    StartRequest, Started, exec_collect, owner, run_post_create,
};
use iterion_driver_docker::DockerDriver;
use iterion_spec::resolved::ResolvedSandbox;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

struct Fixture {
    driver: DockerDriver,
    image: String,
    ws: PathBuf,
    _dir: tempfile::TempDir,
    store: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    fixture_with(support::driver().await)
}

fn fixture_with(driver: DockerDriver) -> Fixture {
    let image = iterion_test_support::docker_image::ensure_test_image().expect("image");
    let dir = tempfile::tempdir().expect("ws");
    let ws = std::fs::canonicalize(dir.path()).expect("canon");
    Fixture {
        driver,
        image,
        ws,
        _dir: dir,
        store: tempfile::tempdir().expect("store"),
    }
}

impl Fixture {
    fn sandbox(&self) -> ResolvedSandbox {
        iterion_test_support::conformance::sandbox_for(Some(&self.image), &self.ws)
    }

    async fn prepare(&self, sandbox: ResolvedSandbox) -> Result<Prepared, DError> {
        let mut p = PrepareRequest::new(sandbox);
        p.pull_policy = PullPolicy::Never;
        self.driver.prepare(p).await
    }

    fn request(&self, run_id: &str) -> StartRequest {
        StartRequest::new(run_id, &self.ws, owner::current_owner(self.store.path()))
    }

    async fn start(&self, run_id: &str, f: impl FnOnce(&mut StartRequest)) -> Result<Started, DError> {
        let prepared = self.prepare(self.sandbox()).await?;
        let mut req = self.request(run_id);
        f(&mut req);
        self.driver.start(prepared, None, req).await
    }
}

async fn sh(run: &dyn Run, script: &str) -> (i32, String, String) {
    let c = exec_collect(run, ExecRequest::shell(script), OutputLimits::default())
        .await
        .expect("exec");
    (c.status.code, c.stdout_text(), c.stderr_text())
}

fn run_id() -> (String, support::RunGuard) {
    let id = iterion_test_support::conformance::unique_name();
    (id.clone(), support::RunGuard(id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c17_labels_and_c21_hardening() {
    if !iterion_test_support::engine_required("c17_labels_and_c21_hardening") {
        return;
    }
    let f = fixture().await;
    let (id, _g) = run_id();
    let started = f
        .start(&id, |r| {
            r.run_name = Some("nightly\nbuild".into());
        })
        .await
        .expect("start");
    let run = started.run;
    let info = support::engine_get(&format!("/containers/{}/json", run.id()));
    let labels = &info["Config"]["Labels"];
    let me = owner::current_owner(f.store.path());
    for (k, v) in [
        ("iterion.io/managed", "true".to_string()),
        ("iterion.io/component", "run".into()),
        ("iterion.io/run-id", id.clone()),
        ("iterion.io/run-name", "nightlybuild".into()),
        ("iterion.io/owner-host", me.host_name.clone()),
        ("iterion.io/owner-pid", me.pid.to_string()),
        ("iterion.io/owner-start", me.start_time.to_string()),
        ("iterion.io/store", f.store.path().display().to_string()),
        ("iterion.io/sandbox-key", "run".into()),
        ("iterion.io/image", f.image.clone()),
        ("iterion.io/iterion-version", env!("CARGO_PKG_VERSION").into()),
    ] {
        assert_eq!(labels[k].as_str(), Some(v.as_str()), "label {k}");
    }
    assert_eq!(info["Name"].as_str(), Some(format!("/iterion-{id}").as_str()));
    assert_eq!(info["HostConfig"]["Init"], true);
    assert_eq!(info["HostConfig"]["CapDrop"][0], "ALL");
    assert_eq!(info["Config"]["Entrypoint"][0], "sleep");
    // C21: NoNewPrivs, no capabilities for a non-root user, PID 1 is the engine's init.
    let (_, status, _) = sh(&*run, "grep -E '^(NoNewPrivs|CapEff)' /proc/self/status").await;
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    let c = exec_collect(
        &*run,
        ExecRequest::shell("grep CapEff /proc/self/status").user("1000:1000"),
        OutputLimits::default(),
    )
    .await
    .expect("exec");
    assert!(
        c.stdout_text().contains("0000000000000000"),
        "{}",
        c.stdout_text()
    );
    let (_, pid1, _) = sh(&*run, "cat /proc/1/cmdline | tr '\\0' ' '").await;
    assert!(pid1.contains("init") && pid1.contains("sleep infinity"), "{pid1}");
    let report = run.cleanup().await;
    assert!(report.container_removed);
    // After cleanup nothing of the run remains, and the handle reports SandboxGone.
    assert!(support::containers_with_label("iterion.io/run-id", &id).is_empty());
    assert!(matches!(
        run.exec(ExecRequest::new(["true"])).await,
        Err(DError::SandboxGone { .. })
    ));
    assert_eq!(
        run.cleanup().await,
        report,
        "a second cleanup returns the same report"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c18_owner_liveness_and_refused_removal() {
    if !iterion_test_support::engine_required("c18_owner_liveness_and_refused_removal") {
        return;
    }
    let f = fixture().await;
    // A dead owner: the pid of a child that has exited.
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let dead_pid = child.id();
    child.wait().expect("wait");
    let me = owner::current_owner(f.store.path());
    let cases = [
        (
            "dead",
            iterion_driver::OwnerInfo {
                pid: dead_pid,
                ..me.clone()
            },
            Liveness::Dead,
        ),
        ("alive", me.clone(), Liveness::Alive),
        (
            "foreign",
            iterion_driver::OwnerInfo {
                host_name: format!("{}-other", me.host_name),
                ..me.clone()
            },
            Liveness::Foreign,
        ),
    ];
    let mut guards = Vec::new();
    let mut started = Vec::new();
    for (what, o, _) in &cases {
        let (id, g) = run_id();
        guards.push(g);
        let s = f
            .start(&id, |r| r.owner = o.clone())
            .await
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        started.push((id, s));
    }
    let managed = f.driver.list_managed().await.expect("list");
    for ((what, _, want), (id, _)) in cases.iter().zip(&started) {
        let r = managed
            .iter()
            .find(|r| r.kind == ResourceKind::Container && r.labels.get("iterion.io/run-id") == Some(id))
            .unwrap_or_else(|| panic!("{what} listed"));
        assert_eq!(f.driver.owner_liveness(r).await, *want, "{what}");
        let outcome = f.driver.remove_managed(r).await.expect("remove");
        match want {
            Liveness::Dead => assert_eq!(outcome, RemoveOutcome::Removed, "{what}"),
            _ => assert!(
                matches!(outcome, RemoveOutcome::Refused { .. }),
                "{what}: {outcome:?}"
            ),
        }
    }
    // The reaper's removal left only the live and foreign owners' containers.
    assert!(support::containers_with_label("iterion.io/run-id", &started[0].0).is_empty());
    assert_eq!(
        support::containers_with_label("iterion.io/run-id", &started[1].0).len(),
        1
    );
    assert!(
        managed
            .iter()
            .all(|r| r.labels.get("iterion.io/managed").map(String::as_str) == Some("true"))
    );
    for (_, s) in started {
        s.run.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c19_name_conflicts() {
    if !iterion_test_support::engine_required("c19_name_conflicts") {
        return;
    }
    let f = fixture().await;
    let (id, _g) = run_id();
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let dead_pid = child.id();
    child.wait().expect("wait");
    let me = owner::current_owner(f.store.path());
    // A leftover of a dead owner is removed and the start succeeds.
    let leftover = f
        .start(&id, |r| {
            r.owner = iterion_driver::OwnerInfo {
                pid: dead_pid,
                ..me.clone()
            }
        })
        .await
        .expect("leftover");
    let second = f
        .start(&id, |_| {})
        .await
        .expect("start after removing the dead owner's leftover");
    assert_ne!(leftover.run.id(), second.run.id());
    // A live other owner (the parent process of this test): SandboxInUse.
    let parent = std::os::unix::process::parent_id();
    let parent_start = match owner::process_start_time(parent) {
        owner::ProcStart::Started(s) => s,
        _ => 0,
    };
    let (id2, _g2) = run_id();
    let first = f
        .start(&id2, |r| {
            r.owner = iterion_driver::OwnerInfo {
                pid: parent,
                start_time: parent_start,
                ..me.clone()
            }
        })
        .await
        .expect("first");
    let err = f.start(&id2, |_| {}).await.expect_err("in use");
    assert!(
        matches!(&err, DError::SandboxInUse { owner_pid, .. } if *owner_pid == parent),
        "{err}"
    );
    // An unmanaged container with the name: StartFailed.
    let (id3, _g3) = run_id();
    let name = format!("iterion-{id3}");
    let (st, _) = support::engine_post(
        &format!("/containers/create?name={name}"),
        &serde_json::json!({"Image": f.image, "Cmd": ["true"], "Labels": {"iterion.io/component": "test", "iterion.io/run-id": id3}}),
    );
    assert_eq!(st, 201);
    let err = f.start(&id3, |_| {}).await.expect_err("unmanaged");
    assert!(err.to_string().contains("is not managed by iterion"), "{err}");
    support::force_remove(&name);
    for r in [leftover.run, second.run, first.run] {
        r.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c22_host_state_and_c23_protected_paths() {
    if !iterion_test_support::engine_required("c22_host_state_and_c23_protected_paths") {
        return;
    }
    let f = fixture().await;
    let home_dir = tempfile::tempdir().expect("home");
    let home = std::fs::canonicalize(home_dir.path()).expect("canon");
    std::fs::create_dir_all(home.join(".cache/go-build")).expect("mkdir");
    std::fs::write(home.join(".cache/go-build/marker"), "bind-content").expect("write");
    std::fs::create_dir_all(home.join(".claude/projects")).expect("mkdir");
    std::fs::write(home.join(".claude/.credentials.json"), "cred").expect("write");
    {
        // the test runs as root; the container user (1000) must be able to write sessions
        use std::os::unix::fs::PermissionsExt;
        let open = std::fs::Permissions::from_mode(0o777);
        std::fs::set_permissions(home.join(".claude/projects"), open).expect("chmod");
    }
    std::fs::create_dir_all(home.join(".iterion")).expect("mkdir");
    std::fs::create_dir_all(f.ws.join(".git")).expect("git dir");
    std::fs::write(f.ws.join(".git/config"), "[core]\n").expect("git config");
    let (id, _g) = run_id();
    let uid = 1000;
    let started = f
        .start(&id, |r| {
            let mut plan = HostStatePlan::disabled();
            plan.enabled = true;
            plan.source = "test".into();
            plan.home = Some(home.clone());
            plan.data_dir = home.join(".iterion");
            plan.claude_dir = home.join(".claude");
            plan.host_uid = Some(uid);
            plan.host_gid = Some(uid);
            plan.host_os = "linux".into();
            r.host_state = plan;
        })
        .await
        .expect("start");
    let rep = &started.report;
    assert_eq!(rep.user.as_deref(), Some("1000:1000"));
    assert!(rep.user_remap.is_some());
    assert!(rep.tmpfs.contains(&home.display().to_string()), "{:?}", rep.tmpfs);
    assert!(
        rep.tmpfs.contains(&home.join(".cache").display().to_string()),
        "{:?}",
        rep.tmpfs
    );
    // Nothing is created in the agent home; the data dir is never mounted.
    let created: Vec<&str> = rep.protected_created.iter().map(String::as_str).collect();
    assert!(!created.iter().any(|c| c.contains(".claude")), "{created:?}");
    assert!(
        !rep.mounts.iter().any(|m| m.target.contains(".iterion")),
        "{:?}",
        rep.mounts
    );
    assert!(
        rep.host_state_skipped
            .iter()
            .any(|s| s.path == home.join(".iterion").display().to_string()),
        "{:?}",
        rep.host_state_skipped
    );
    let run = started.run;
    // C22: HOME writable, a new directory under it works, the bind content is visible.
    let (code, out, err) = sh(
        &*run,
        "echo $HOME; mkdir -p $HOME/.cache/devbox && cat $HOME/.cache/go-build/marker && id -u",
    )
    .await;
    assert_eq!(code, 0, "{out} {err}");
    assert!(
        out.contains(&home.display().to_string())
            && out.contains("bind-content")
            && out.trim_end().ends_with("1000"),
        "{out}"
    );
    // C23: protected paths are read-only inside; the settings file was created as {} (0600) on the host.
    let (code, _, err) = sh(&*run, "touch .git/hooks/x").await;
    assert_ne!(code, 0);
    assert!(err.to_lowercase().contains("read-only"), "{err}");
    let (code, _, err) = sh(&*run, "echo x >> .git/config").await;
    assert_ne!(code, 0, "{err}");
    // The agent home is read-only, existing or not (settings.json does not exist), except its state entries.
    let (code, _, _) = sh(&*run, "echo x > $HOME/.claude/settings.json").await;
    assert_ne!(code, 0);
    assert!(!home.join(".claude/settings.json").exists());
    let (code, out, err) = sh(
        &*run,
        "cat $HOME/.claude/.credentials.json && echo s > $HOME/.claude/projects/s.jsonl && echo ok",
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "credok\n"), "{err}");
    assert!(home.join(".claude/projects/s.jsonl").is_file());
    run.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c25_advisory_placement_on_a_vm_engine() {
    if !iterion_test_support::engine_required("c25_advisory_placement_on_a_vm_engine") {
        return;
    }
    // A test double of the engine facts: iterion "not on Linux" makes the engine VM-based (03 §7.3).
    let socket = iterion_test_support::engine_socket().expect("socket");
    let endpoints = iterion_driver_docker::endpoint::EndpointSettings::new(
        Some(format!("unix://{}", socket.display())),
        None,
        None,
        None,
    );
    let mut s = iterion_driver_docker::DockerSettings::new(
        endpoints,
        iterion_driver_docker::endpoint::Family::Docker,
        support::hostname(),
        support::uid(),
    );
    s.host_linux = false;
    let d = DockerDriver::connect(s).await.expect("connect");
    let dir = tempfile::tempdir().expect("dir");
    let err = d
        .network(NetworkRequest::new("r", dir.path(), true))
        .await
        .expect_err("enforced required");
    assert!(matches!(err, DError::NetworkUnavailable { .. }), "{err}");
    assert_eq!(
        err.failure_code(true).map(|c| c.as_str()),
        Some("SANDBOX_NETWORK_UNAVAILABLE")
    );
    let lease = d
        .network(NetworkRequest::new("r", dir.path(), false))
        .await
        .expect("advisory");
    assert_eq!(lease.placement, EgressPlacement::Advisory);
    assert_eq!(lease.container_proxy_host, "host.docker.internal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c28_c29_builds_through_the_driver_and_c31_no_shell() {
    if !iterion_test_support::engine_required("c28_c29_builds_through_the_driver_and_c31_no_shell") {
        return;
    }
    let f = fixture().await;
    let (id, _g) = run_id();
    std::fs::write(
        f.ws.join("Dockerfile"),
        format!("FROM {}\nRUN echo built > /built\n", f.image),
    )
    .expect("write");
    let mut sb = f.sandbox();
    sb.image = None;
    sb.build = Some(iterion_spec::resolved::BuildSpec {
        dockerfile: f.ws.join("Dockerfile").display().to_string(),
        context: f.ws.display().to_string(),
        target: None,
        args: Default::default(),
    });
    let prepared = f.prepare(sb.clone()).await.expect("prepare");
    let built = f
        .driver
        .build(prepared, BuildRequest::new(&id))
        .await
        .expect("build");
    let tag = built.image.clone().expect("image").reference;
    assert!(
        tag.starts_with("iterion-sandbox-build:cache-"),
        "tagged by its inputs: {tag}"
    );
    let started = f.driver.start(built, None, f.request(&id)).await.expect("start");
    let (_, out, _) = sh(&*started.run, "cat /built").await;
    assert_eq!(out, "built\n");
    started.run.cleanup().await;
    f.driver.remove_image(&tag).await.expect("remove image");
    let gone = support::engine_get(&format!("/images/{tag}/json"));
    assert!(gone["Id"].is_null(), "the built tag is removed");

    // C29: a context that is a symlink to /etc.
    std::os::unix::fs::symlink("/etc", f.ws.join("ctx")).expect("symlink");
    sb.build = Some(iterion_spec::resolved::BuildSpec {
        dockerfile: f.ws.join("Dockerfile").display().to_string(),
        context: f.ws.join("ctx").display().to_string(),
        target: None,
        args: Default::default(),
    });
    let prepared = f.prepare(sb).await.expect("prepare");
    let err = f
        .driver
        .build(prepared, BuildRequest::new(&id))
        .await
        .expect_err("outside");
    assert!(
        matches!(&err, DError::InvalidSpec { field, .. } if field == "build.context"),
        "{err}"
    );

    // C31: an image without /bin/sh.
    let (id2, _g2) = run_id();
    let mut nosh = f.sandbox();
    nosh.image = Some(iterion_test_support::docker_image::NOSH_IMAGE.into());
    let prepared = f.prepare(nosh).await.expect("prepare nosh");
    let err = f
        .driver
        .start(prepared, None, f.request(&id2))
        .await
        .expect_err("no shell");
    assert!(matches!(err, DError::ShellMissing { .. }), "{err}");
    assert!(
        support::containers_with_label("iterion.io/run-id", &id2).is_empty(),
        "start removes what it created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c16_post_create() {
    if !iterion_test_support::engine_required("c16_post_create") {
        return;
    }
    let f = fixture().await;
    let (id, _g) = run_id();
    let run = f.start(&id, |_| {}).await.expect("start").run;
    let sink = iterion_driver::EventSink::discard();
    run_post_create(
        &*run,
        &["echo made > post-create-marker".into()],
        Duration::from_secs(30),
        &sink,
    )
    .await
    .expect("post create");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("post-create-marker")).expect("marker"),
        "made\n"
    );
    let err = run_post_create(&*run, &["exit 99".into()], Duration::from_secs(30), &sink)
        .await
        .expect_err("99");
    assert!(matches!(&err, DError::PostCreateFailed { code: 99, .. }), "{err}");
    let err = run_post_create(&*run, &["sleep 30".into()], Duration::from_secs(1), &sink)
        .await
        .expect_err("timeout");
    assert!(matches!(&err, DError::SetupTimeout { .. }), "{err}");
    run.cleanup().await;
}

fn cmdlines_containing(needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let p: &Path = &e.path();
        if let Ok(raw) = std::fs::read(p.join("cmdline")) {
            let text = String::from_utf8_lossy(&raw).replace('\0', " ");
            if text.contains(needle) {
                hits.push(format!("{}: {text}", p.display()));
            }
        }
    }
    hits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_stay_off_host_argv_and_only_given_env_reaches_the_container() {
    if !iterion_test_support::engine_required(
        "secrets_stay_off_host_argv_and_only_given_env_reaches_the_container",
    ) {
        return;
    }
    let f = fixture().await;
    let (id, _g) = run_id();
    let container_secret = format!("sk-ctr-{:016x}", rand::random::<u64>());
    let exec_secret = format!("sk-exec-{:016x}", rand::random::<u64>());
    let cs = container_secret.clone();
    let run = f
        .start(&id, move |r| {
            r.container_env = vec![("ITERION_TEST_TOKEN".into(), cs)]
        })
        .await
        .expect("start")
        .run;
    let ex = run
        .exec(ExecRequest::shell("sleep 5").env("ANTHROPIC_API_KEY", exec_secret.clone()))
        .await
        .expect("exec");
    // While both values live in the sandbox, no host process carries them in its argv.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        cmdlines_containing(&container_secret).is_empty(),
        "{:?}",
        cmdlines_containing(&container_secret)
    );
    assert!(
        cmdlines_containing(&exec_secret).is_empty(),
        "{:?}",
        cmdlines_containing(&exec_secret)
    );
    ex.killer()
        .terminate(Duration::from_secs(1))
        .await
        .expect("terminate");
    // Only the given container env (plus the image's PATH and the engine's HOSTNAME/HOME) is in the sandbox:
    // nothing of this test process's environment leaks in.
    let (_, env, _) = sh(&*run, "env | cut -d= -f1 | sort").await;
    let names: Vec<&str> = env.lines().collect();
    for n in &names {
        assert!(
            ["HOME", "HOSTNAME", "PATH", "PWD", "SHLVL", "ITERION_TEST_TOKEN"].contains(n),
            "unexpected variable {n} in the sandbox: {names:?}"
        );
    }
    assert!(names.contains(&"ITERION_TEST_TOKEN"));
    run.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_exec_leaves_no_process() {
    if !iterion_test_support::engine_required("a_cancelled_exec_leaves_no_process") {
        return;
    }
    let f = fixture().await;
    let (id, _g) = run_id();
    let run = f.start(&id, |_| {}).await.expect("start").run;
    let cancel = CancellationToken::new();
    let ex = run
        .exec(
            ExecRequest::shell("sleep 1234 & sleep 1235 & wait")
                .cancel(cancel.clone())
                .kill_grace(Duration::from_secs(2)),
        )
        .await
        .expect("exec");
    tokio::time::sleep(Duration::from_millis(300)).await;
    cancel.cancel();
    let st = ex.wait().await.expect("wait");
    assert!(st.cancelled);
    let mut left = String::from("unchecked");
    for _ in 0..50 {
        let (_, ps, _) = sh(&*run, "ps -o args | grep -c '^sleep 123[45]' || true").await;
        left = ps.trim().to_string();
        if left == "0" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, "0", "sleep processes survived the cancellation");
    // Cleanup terminates execs still running before it stops the container.
    let running = run.exec(ExecRequest::shell("sleep 1000")).await.expect("exec");
    let report = run.cleanup().await;
    assert_eq!(
        (report.execs_terminated, report.container_removed),
        (1, true),
        "{report:?}"
    );
    let ended = tokio::time::timeout(Duration::from_secs(30), running.wait())
        .await
        .expect("the exec ends");
    assert!(
        matches!(ended, Ok(_) | Err(DError::SandboxGone { .. })),
        "{ended:?}"
    );
}

/// An exec whose outputs are discarded and whose stdin is closed ends when its process ends, however long
/// it runs: the end is not taken from a connection the engine may close as soon as the process started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_with_discarded_outputs_reports_its_exit_after_seconds() {
    if !iterion_test_support::engine_required("an_exec_with_discarded_outputs_reports_its_exit_after_seconds")
    {
        return;
    }
    let f = fixture().await;
    let (id, _g) = run_id();
    let run = f.start(&id, |_| {}).await.expect("start").run;
    let ex = run
        .exec(
            ExecRequest::shell("sleep 3; exit 7")
                .outputs(iterion_driver::Output::Discard, iterion_driver::Output::Discard),
        )
        .await
        .expect("exec");
    let st = ex.wait().await.expect("wait");
    assert_eq!((st.code, st.cancelled), (7, false), "{st:?}");
    run.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c20_mount_safety_through_start() {
    if !iterion_test_support::engine_required("c20_mount_safety_through_start") {
        return;
    }
    let f = fixture().await;
    let extra = tempfile::tempdir().expect("extra");
    let extra_path = std::fs::canonicalize(extra.path())
        .expect("canon")
        .display()
        .to_string();
    let check = |source: &str, target: &str, allowed: bool, why: &str| {
        let (source, target, why) = (source.to_string(), target.to_string(), why.to_string());
        let f = &f;
        async move {
            let (id, _g) = run_id();
            let mut sb = f.sandbox();
            sb.mounts.push(iterion_spec::values::Mount::bind(
                source.clone(),
                target.clone(),
                false,
            ));
            let prepared = f.prepare(sb).await.expect("prepare");
            let res = f.driver.start(prepared, None, f.request(&id)).await;
            match (res, allowed) {
                (Ok(s), true) => {
                    s.run.cleanup().await;
                }
                (Err(e), false) => {
                    assert!(
                        matches!(e, DError::UnsafeMount { .. }),
                        "{source} -> {target}: {e}"
                    );
                    assert!(
                        e.to_string().contains(&why),
                        "{source} -> {target}: {e} should mention {why}"
                    );
                }
                (Ok(s), false) => {
                    s.run.cleanup().await;
                    panic!("{source} -> {target} should be refused ({why})");
                }
                (Err(e), true) => panic!("{source} -> {target} should be allowed: {e}"),
            }
        }
    };
    check(&extra_path, "/x", true, "").await;
    check("/var/run/docker.sock", "/s", false, "sensitive").await;
    check("/", "/host", false, "contains home directory").await;
    check(&extra_path, "/run/iterion/exec", false, "reserved").await;
    check(&extra_path, "/proc/x", false, "/proc").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c23_protected_paths_follow_an_explicit_workspace_folder() {
    if !iterion_test_support::engine_required("c23_protected_paths_follow_an_explicit_workspace_folder") {
        return;
    }
    let f = fixture().await;
    std::fs::create_dir_all(f.ws.join(".git")).expect("git dir");
    std::fs::write(f.ws.join(".git/config"), "[core]\n").expect("git config");
    let (id, _g) = run_id();
    let mut sandbox = f.sandbox();
    sandbox.workspace_folder = "/workspace".into();
    let prepared = f.prepare(sandbox).await.expect("prepare");
    let started = f
        .driver
        .start(prepared, None, f.request(&id))
        .await
        .expect("start");
    let run = started.run;
    // the repository is seen at /workspace: its hooks and config are read-only there, the rest is writable
    let (code, _, err) = sh(&*run, "touch /workspace/.git/hooks/x").await;
    assert_ne!(code, 0, "hooks writable under the workspace folder");
    assert!(err.to_lowercase().contains("read-only"), "{err}");
    let (code, _, err) = sh(&*run, "echo x >> /workspace/.git/config").await;
    assert_ne!(code, 0, "git config writable: {err}");
    let (code, out, err) = sh(&*run, "touch /workspace/file && echo ok").await;
    assert_eq!((code, out.trim()), (0, "ok"), "{err}");
    assert!(!f.ws.join(".git/hooks/x").exists());
    assert_eq!(
        std::fs::read_to_string(f.ws.join(".git/config")).expect("read"),
        "[core]\n"
    );
    run.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c17_component_label_can_be_set_by_the_caller() {
    if !iterion_test_support::engine_required("c17_component_label_can_be_set_by_the_caller") {
        return;
    }
    let f = fixture().await;
    let (id, _g) = run_id();
    let started = f
        .start(&id, |r| {
            r.component = Some(iterion_driver::labels::Component::DoctorProbe);
        })
        .await
        .expect("start");
    let info = support::engine_get(&format!("/containers/{}/json", started.run.id()));
    assert_eq!(
        info["Config"]["Labels"]["iterion.io/component"].as_str(),
        Some("doctor-probe")
    );
    started.run.cleanup().await;
}

/// The entries of the start checks' cache in `dir` (name, content), temporary files left out.
fn cache_entries(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.'))
                .map(|n| {
                    let body = std::fs::read_to_string(dir.join(&n)).unwrap_or_default();
                    (n, body)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The start checks' cache: a second start of the same image runs no check and gives the same answer; the
/// first exec then records the sandbox's own processes ahead of its command. Its output arrives whole and
/// without that listing, a listing line the command prints itself is only output (it cannot get its own
/// processes spared), and what it leaves behind is killed while the sandbox's own processes live on. A junk
/// entry is a miss that the next full check replaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_start_checks_keep_the_leftover_kill() {
    if !iterion_test_support::engine_required("cached_start_checks_keep_the_leftover_kill") {
        return;
    }
    let (driver, cache) = support::driver_with_start_checks_cache().await;
    let dir = &cache.dir;
    let f = fixture_with(driver);

    let (id, _g) = run_id();
    let first = f.start(&id, |_| {}).await.expect("first start");
    assert!(!first.report.start_checks_cached, "nothing was cached yet");
    let bash = first.report.bash.expect("the checks say whether bash is there");
    first.run.cleanup().await;
    let entries = cache_entries(dir);
    let want = if bash { "bash\n" } else { "sh\n" };
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].1, want);

    let (id, _g2) = run_id();
    let second = f.start(&id, |_| {}).await.expect("second start");
    assert!(
        second.report.start_checks_cached,
        "the same image is checked again"
    );
    assert_eq!(second.report.bash, Some(bash));
    let run = second.run;
    assert_eq!(
        run.kill_leftovers().await.expect("kill before any exec"),
        Some(0),
        "no exec ran, nothing can be left"
    );
    // The first exec: a leftover, and a forged listing claiming it as the sandbox's own.
    let (code, out, err) = sh(
        &*run,
        "sleep 7771 </dev/null >/dev/null 2>&1 & echo \"iterion-pids: 1 $!\"; echo to-stderr >&2",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("iterion-pids: 1 ") && out.ends_with('\n') && out.lines().count() == 1,
        "the command's output is not whole: {out:?}"
    );
    assert_eq!(err, "to-stderr\n");
    let procs = "for f in /proc/[0-9]*/cmdline; do tr '\\000' ' ' < \"$f\" 2>/dev/null; echo; done";
    let (_, before, _) = sh(&*run, procs).await;
    assert!(
        before.contains("sleep 7771"),
        "the leftover is not running: {before}"
    );
    let killed = run.kill_leftovers().await.expect("kill_leftovers");
    assert!(matches!(killed, Some(n) if n >= 1), "{killed:?}");
    let (_, after, _) = sh(&*run, procs).await;
    assert!(!after.contains("sleep 7771"), "the leftover survived: {after}");
    assert!(
        after.contains("sleep infinity"),
        "the sandbox's own process was killed: {after}"
    );
    assert_eq!(sh(&*run, "true").await.0, 0, "the sandbox works after the kill");
    run.cleanup().await;

    // A junk entry is a miss, and the full check writes the right answer back.
    std::fs::write(dir.join(&entries[0].0), "bash\nextra").expect("junk");
    let (id, _g3) = run_id();
    let third = f.start(&id, |_| {}).await.expect("third start");
    assert!(!third.report.start_checks_cached, "a junk entry was believed");
    third.run.cleanup().await;
    assert_eq!(cache_entries(dir), vec![(entries[0].0.clone(), want.to_string())]);
}
