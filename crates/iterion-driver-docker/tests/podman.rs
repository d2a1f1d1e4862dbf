//! The conformance suite against Podman's Docker-compatible API (`podman system service
//! unix:///run/podman/podman.sock`, or the `unix://` socket of `CONTAINER_HOST`). Without a Podman service it is
//! skipped with a notice, and fails when `CI` or `ITERION_REQUIRE_PODMAN=1` is set (`.ci/run` starts one).

mod support;

use iterion_driver::Driver;
use iterion_driver_docker::endpoint::{EndpointSettings, Family};
use iterion_driver_docker::{DockerDriver, DockerSettings};
use iterion_test_support::conformance::{self, ConformanceCtx, RemoveHook};
use iterion_test_support::podman;
use std::path::Path;
use std::sync::Arc;

fn remove_on(socket: &Path, id: &str) {
    podman::remove(socket, podman::Kind::Containers, id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_suite_against_podman() {
    let Some(socket) = podman::required("conformance_suite_against_podman") else {
        return;
    };
    podman::ensure_test_images(&socket).expect("test images in podman's store");
    let endpoints = EndpointSettings::new(None, Some(format!("unix://{}", socket.display())), None, None);
    let mut settings = DockerSettings::new(endpoints, Family::Podman, support::hostname(), support::uid());
    if let Some(r) = support::relay_binary() {
        settings = settings.with_relay_binary(r);
    }
    // With the start checks' cache, as `iterion run` has it: the first start checks (the spec's exec) and
    // fills it; the later ones take its answer, and each run's first exec records the sandbox's processes
    // ahead of its command. The docker suite runs both ways.
    let cache = tempfile::tempdir().expect("cache dir");
    settings.probe_cache = Some(cache.path().join("start-checks"));
    let driver = Arc::new(DockerDriver::connect(settings).await.expect("connect to podman"));
    assert_eq!(driver.kind(), iterion_driver::DriverKind::Podman);
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let sandbox = conformance::sandbox_for(Some(iterion_test_support::docker_image::TEST_IMAGE), &ws);
    let mut ctx = ConformanceCtx::new(sandbox, ws);
    let s2 = socket.clone();
    let hook: RemoveHook = Arc::new(move |id: String| {
        let s = s2.clone();
        Box::pin(async move {
            let _ = tokio::task::spawn_blocking(move || remove_on(&s, &id)).await;
        })
    });
    ctx.remove_behind_back = Some(hook);
    let report = conformance::run_all(driver, ctx).await;
    report.assert_ok();
}
