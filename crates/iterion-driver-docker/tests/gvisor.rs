//! The OCI runtime of a sandbox on the real engine: a runtime the engine lacks is refused before anything is
//! created; under gVisor (`runsc` registered with the engine) a sandbox sees gVisor's kernel, the engine
//! reports the runtime it ran, and nothing is left once it is cleaned up.

mod support;

use iterion_driver::{
    Driver, Error as DError, ExecRequest, OutputLimits, PrepareRequest, PullPolicy, StartRequest,
    exec_collect, owner,
};
use iterion_spec::resolved::OciRuntime;

fn sandbox(ws: &std::path::Path, runtime: OciRuntime) -> iterion_spec::resolved::ResolvedSandbox {
    let image = iterion_test_support::docker_image::ensure_test_image().expect("image");
    let mut s = iterion_test_support::conformance::sandbox_for(Some(&image), ws);
    s.network = iterion_test_support::gvisor::filtered_policy();
    s.runtime.name = runtime;
    s.refresh_key();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_the_engine_lacks_is_refused_before_anything_is_created() {
    if !iterion_test_support::engine_required(
        "a_runtime_the_engine_lacks_is_refused_before_anything_is_created",
    ) {
        return;
    }
    let driver = support::driver().await;
    let dir = tempfile::tempdir().expect("ws");
    let ws = std::fs::canonicalize(dir.path()).expect("canon");
    let mut req = PrepareRequest::new(sandbox(
        &ws,
        OciRuntime::Named("iterion-test-no-such-runtime".into()),
    ));
    req.pull_policy = PullPolicy::Never;
    let e = driver.prepare(req).await.expect_err("refused");
    let DError::RuntimeUnavailable { runtime, offered, .. } = &e else {
        panic!("unexpected error: {e}")
    };
    assert_eq!(runtime, "iterion-test-no-such-runtime");
    assert!(offered.contains("runc"), "{e}");
    assert!(
        e.to_string()
            .contains("register a runtime named 'iterion-test-no-such-runtime' with the engine"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_under_gvisor_sees_gvisors_kernel_and_leaves_nothing() {
    if !iterion_test_support::gvisor::required(
        "a_sandbox_under_gvisor_sees_gvisors_kernel_and_leaves_nothing",
    ) {
        return;
    }
    let driver = support::driver().await;
    let dir = tempfile::tempdir().expect("ws");
    let store = tempfile::tempdir().expect("store");
    let ws = std::fs::canonicalize(dir.path()).expect("canon");
    let run_id = iterion_test_support::conformance::unique_name();
    let _guard = support::RunGuard(run_id.clone());
    let mut req = PrepareRequest::new(sandbox(&ws, OciRuntime::Gvisor));
    req.pull_policy = PullPolicy::Never;
    let prepared = driver.prepare(req).await.expect("prepare");
    let started = driver
        .start(
            prepared,
            None,
            StartRequest::new(&run_id, &ws, owner::current_owner(store.path())),
        )
        .await
        .expect("start under gVisor");
    assert_eq!(started.report.hardening.oci_runtime.as_deref(), Some("runsc"));
    let info = support::engine_get(&format!("/containers/{}/json", started.run.id()));
    assert_eq!(info["HostConfig"]["Runtime"], "runsc", "{info:#}");
    let run = started.run;
    let c = exec_collect(
        &*run,
        ExecRequest::shell("cat /proc/version; echo written > gvisor.txt"),
        OutputLimits::default(),
    )
    .await
    .expect("exec");
    assert_eq!(c.status.code, 0, "{}", c.stderr_text());
    assert!(
        c.stdout_text().starts_with(iterion_test_support::gvisor::KERNEL),
        "not gVisor's kernel: {}",
        c.stdout_text()
    );
    let host = std::fs::read_to_string("/proc/version").expect("host /proc/version");
    assert_ne!(c.stdout_text().trim(), host.trim());
    // the workspace bind writes through to the host
    assert_eq!(
        std::fs::read_to_string(ws.join("gvisor.txt")).expect("written through the bind"),
        "written\n"
    );
    let report = run.cleanup().await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(
        iterion_test_support::containers_of(&run_id).is_empty(),
        "a container of the run is left"
    );
}

/// What the registration of `runsc` passes it (`/info` `Runtimes.runsc.runtimeArgs`).
fn runsc_args() -> Vec<String> {
    let info = support::engine_get("/info");
    info["Runtimes"]["runsc"]["runtimeArgs"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_policy_under_a_gvisor_without_network_is_refused_before_anything_is_created() {
    if !iterion_test_support::gvisor::required("an_open_policy_under_a_gvisor_without_network_is_refused") {
        return;
    }
    let driver = support::driver().await;
    let dir = tempfile::tempdir().expect("ws");
    let ws = std::fs::canonicalize(dir.path()).expect("canon");
    let mut sb = sandbox(&ws, OciRuntime::Gvisor);
    sb.network = iterion_spec::resolved::NetworkPolicySpec::open("test");
    sb.refresh_key();
    let mut req = PrepareRequest::new(sb);
    req.pull_policy = PullPolicy::Never;
    let got = driver.prepare(req).await;
    if runsc_args().iter().any(|a| a == "--network=none") {
        let e = got.expect_err("refused");
        assert!(
            e.to_string()
                .contains("registered with --network=none, so a sandbox under it has no network"),
            "{e}"
        );
    } else {
        got.expect("an open policy under a networked gVisor");
    }
}
