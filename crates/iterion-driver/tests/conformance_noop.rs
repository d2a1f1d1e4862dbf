//! The driver conformance suite against `NoopDriver` (host execution).

use std::sync::Arc;

use iterion_driver::NoopDriver;
use iterion_test_support::conformance::{ConformanceCtx, run_all, sandbox_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noop_driver_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let base_env: Vec<(String, String)> = std::env::vars().filter(|(k, _)| k != "A" && k != "B").collect();
    let driver = Arc::new(NoopDriver::new(base_env));
    let report = run_all(driver, ConformanceCtx::new(sandbox_for(None, &ws), ws.clone())).await;
    report.assert_ok();
    let mut expected = vec![
        "C01", "C02", "C03", "C04", "C05", "C06", "C07", "C08", "C09", "C10",
    ];
    if !report.skipped_ids().contains(&"C11") {
        expected.push("C11");
    }
    expected.extend(["C12", "C13", "C14", "C15", "C30", "C32"]);
    assert_eq!(report.passed_ids(), expected);
}
