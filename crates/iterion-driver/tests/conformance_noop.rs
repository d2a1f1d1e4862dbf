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

mod broken {
    //! A driver that drops exec-scope env: the suite must notice (a suite that cannot fail is a defect).
    use async_trait::async_trait;
    use iterion_driver::*;

    #[derive(Debug)]
    pub struct Broken(pub NoopDriver);

    #[derive(Debug)]
    struct BrokenRun(Box<dyn Run>);

    #[async_trait]
    impl Driver for Broken {
        fn kind(&self) -> DriverKind {
            self.0.kind()
        }
        fn capabilities(&self) -> Capabilities {
            self.0.capabilities()
        }
        async fn engine_info(&self) -> Result<EngineInfo> {
            self.0.engine_info().await
        }
        async fn prepare(&self, req: PrepareRequest) -> Result<Prepared> {
            self.0.prepare(req).await
        }
        async fn build(&self, p: Prepared, req: BuildRequest) -> Result<Prepared> {
            self.0.build(p, req).await
        }
        async fn network(&self, req: NetworkRequest) -> Result<NetworkLease> {
            self.0.network(req).await
        }
        async fn start(&self, p: Prepared, l: Option<&NetworkLease>, req: StartRequest) -> Result<Started> {
            let s = self.0.start(p, l, req).await?;
            Ok(Started {
                run: Box::new(BrokenRun(s.run)),
                report: s.report,
            })
        }
        async fn list_managed(&self) -> Result<Vec<ManagedResource>> {
            self.0.list_managed().await
        }
        async fn owner_liveness(&self, r: &ManagedResource) -> Liveness {
            self.0.owner_liveness(r).await
        }
        async fn remove_managed(&self, r: &ManagedResource) -> Result<RemoveOutcome> {
            self.0.remove_managed(r).await
        }
        async fn remove_image(&self, r: &str) -> Result<()> {
            self.0.remove_image(r).await
        }
    }

    #[async_trait]
    impl Run for BrokenRun {
        fn id(&self) -> &str {
            self.0.id()
        }
        fn kind(&self) -> DriverKind {
            self.0.kind()
        }
        fn workspace(&self) -> &str {
            self.0.workspace()
        }
        fn user(&self) -> Option<&str> {
            self.0.user()
        }
        async fn exec(&self, mut req: ExecRequest) -> Result<Exec> {
            req.env.clear();
            self.0.exec(req).await
        }
        async fn copy_in(&self, d: &str, t: TarSource) -> Result<()> {
            self.0.copy_in(d, t).await
        }
        async fn copy_out(&self, s: &str) -> Result<TarStream> {
            self.0.copy_out(s).await
        }
        async fn status(&self) -> Result<SandboxStatus> {
            self.0.status().await
        }
        async fn cleanup(&self) -> CleanupReport {
            self.0.cleanup().await
        }
        fn force_cleanup_blocking(&self) {
            self.0.force_cleanup_blocking()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_notices_a_broken_driver() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let base_env: Vec<(String, String)> = std::env::vars().filter(|(k, _)| k != "A" && k != "B").collect();
    let driver = Arc::new(broken::Broken(NoopDriver::new(base_env)));
    let report = run_all(driver, ConformanceCtx::new(sandbox_for(None, &ws), ws.clone())).await;
    let failed: Vec<&str> = report.failed().iter().map(|c| c.id).collect();
    assert_eq!(failed, ["C08"]);
}
