//! The shared conformance suite (03 §14) against the real Docker engine.

mod support;

use iterion_test_support::conformance::{self, ConformanceCtx, RemoveHook};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_suite_against_docker() {
    if !iterion_test_support::engine_required("conformance_suite_against_docker") {
        return;
    }
    let image = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let driver = Arc::new(support::driver().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let sandbox = conformance::sandbox_for(Some(&image), &ws);
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
