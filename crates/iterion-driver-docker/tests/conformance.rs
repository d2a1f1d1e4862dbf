//! The shared conformance suite (03 §14) against the real Docker engine.

mod support;

use iterion_spec::resolved::OciRuntime;
use iterion_test_support::conformance::{self, ConformanceCtx, RemoveHook};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_suite_against_docker() {
    if !iterion_test_support::engine_required("conformance_suite_against_docker") {
        return;
    }
    suite(support::driver().await).await;
}

/// The same suite with the start checks' cache: the first start checks and fills it, every later start of the
/// image takes its answer from it, and each run's first exec records the sandbox's processes ahead of its
/// command (so every case's first exec goes through that shim).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_suite_against_docker_with_cached_start_checks() {
    if !iterion_test_support::engine_required("conformance_suite_against_docker_with_cached_start_checks") {
        return;
    }
    let (driver, cache) = support::driver_with_start_checks_cache().await;
    suite(driver).await;
    // The suite's starts share one image and sandbox: the first filled the cache, the others read it.
    let entries = std::fs::read_dir(&cache.dir).map(|rd| rd.count()).unwrap_or(0);
    assert!(entries >= 1, "the start checks were never cached");
}

/// The same suite with every sandbox under gVisor (`runsc` registered with the engine).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_suite_against_docker_under_gvisor() {
    if !iterion_test_support::gvisor::required("conformance_suite_against_docker_under_gvisor") {
        return;
    }
    suite_under(support::driver().await, OciRuntime::Gvisor).await;
}

async fn suite(driver: iterion_driver_docker::DockerDriver) {
    suite_under(driver, OciRuntime::Default).await;
}

async fn suite_under(driver: iterion_driver_docker::DockerDriver, runtime: OciRuntime) {
    let image = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let driver = Arc::new(driver);
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let mut sandbox = conformance::sandbox_for(Some(&image), &ws);
    if !runtime.is_default() {
        // The suite needs no network: a filtered policy is what every gVisor registration carries (one with
        // --network=none refuses an open policy).
        sandbox.network = iterion_test_support::gvisor::filtered_policy();
    }
    sandbox.runtime.name = runtime;
    sandbox.refresh_key();
    let mut ctx = ConformanceCtx::new(sandbox, ws);
    let _guard_prefix = ctx.run_id_prefix.clone();
    let hook: RemoveHook = Arc::new(|id: String| {
        Box::pin(async move {
            let _ = tokio::task::spawn_blocking(move || support::force_remove(&id)).await;
        })
    });
    ctx.remove_behind_back = Some(hook);
    let report = conformance::run_all(driver, ctx.clone()).await;
    // Drop guard equivalent: nothing of these runs may remain.
    for n in 0..64 {
        let _ = support::RunGuard(format!("{}-{n}", ctx.run_id_prefix));
    }
    report.assert_ok();
}
