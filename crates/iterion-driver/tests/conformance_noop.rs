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
    //! A wrapper around `NoopDriver`: optionally drops exec-scope env (the suite must notice; a suite that
    //! cannot fail is a defect) or claims the `post_create` capability (so C16 runs on the host).
    use async_trait::async_trait;
    use iterion_driver::*;

    #[derive(Debug)]
    pub struct Broken {
        pub inner: NoopDriver,
        pub drop_env: bool,
        pub post_create: bool,
    }

    #[derive(Debug)]
    struct BrokenRun(Box<dyn Run>, bool);

    #[async_trait]
    impl Driver for Broken {
        fn kind(&self) -> DriverKind {
            self.inner.kind()
        }
        fn capabilities(&self) -> Capabilities {
            let mut c = self.inner.capabilities();
            c.post_create = self.post_create;
            c
        }
        async fn engine_info(&self) -> Result<EngineInfo> {
            self.inner.engine_info().await
        }
        async fn prepare(&self, req: PrepareRequest) -> Result<Prepared> {
            self.inner.prepare(req).await
        }
        async fn build(&self, p: Prepared, req: BuildRequest) -> Result<Prepared> {
            self.inner.build(p, req).await
        }
        async fn network(&self, req: NetworkRequest) -> Result<NetworkLease> {
            self.inner.network(req).await
        }
        async fn start(&self, p: Prepared, l: Option<&NetworkLease>, req: StartRequest) -> Result<Started> {
            let s = self.inner.start(p, l, req).await?;
            Ok(Started {
                run: Box::new(BrokenRun(s.run, self.drop_env)),
                report: s.report,
            })
        }
        async fn list_managed(&self) -> Result<Vec<ManagedResource>> {
            self.inner.list_managed().await
        }
        async fn owner_liveness(&self, r: &ManagedResource) -> Liveness {
            self.inner.owner_liveness(r).await
        }
        async fn remove_managed(&self, r: &ManagedResource) -> Result<RemoveOutcome> {
            self.inner.remove_managed(r).await
        }
        async fn remove_image(&self, r: &str) -> Result<()> {
            self.inner.remove_image(r).await
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
            if self.1 {
                req.env.clear();
            }
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
    let driver = Arc::new(broken::Broken {
        inner: NoopDriver::new(base_env),
        drop_env: true,
        post_create: false,
    });
    let report = run_all(driver, ConformanceCtx::new(sandbox_for(None, &ws), ws.clone())).await;
    let failed: Vec<&str> = report.failed().iter().map(|c| c.id).collect();
    assert_eq!(failed, ["C08"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_create_case_runs_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let base_env: Vec<(String, String)> = std::env::vars().filter(|(k, _)| k != "A" && k != "B").collect();
    let driver = Arc::new(broken::Broken {
        inner: NoopDriver::new(base_env),
        drop_env: false,
        post_create: true,
    });
    let report = run_all(driver, ConformanceCtx::new(sandbox_for(None, &ws), ws.clone())).await;
    report.assert_ok();
    assert!(report.passed_ids().contains(&"C16"), "{report:?}");
}
