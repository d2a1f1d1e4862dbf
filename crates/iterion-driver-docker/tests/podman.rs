//! The conformance suite against Podman's Docker-compatible API, when a Podman service socket answers
//! (`podman system service unix:///run/podman/podman.sock`). Skipped with a notice otherwise; required when
//! `ITERION_REQUIRE_PODMAN=1`.

mod support;

use iterion_driver::Driver;
use iterion_driver_docker::endpoint::{EndpointSettings, Family};
use iterion_driver_docker::{DockerDriver, DockerSettings};
use iterion_test_support::conformance::{self, ConformanceCtx, RemoveHook};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn podman_socket() -> Option<PathBuf> {
    let p = PathBuf::from("/run/podman/podman.sock");
    let ok =
        iterion_test_support::docker_http::request(&p, "GET", "/_ping", None, &[], Duration::from_secs(2))
            .is_ok_and(|r| r.status == 200 && r.header("libpod-api-version").is_some());
    ok.then_some(p)
}

fn podman_required(test: &str) -> Option<PathBuf> {
    match podman_socket() {
        Some(p) => Some(p),
        None if std::env::var("ITERION_REQUIRE_PODMAN").is_ok_and(|v| v == "1") => {
            panic!(
                "{test}: ITERION_REQUIRE_PODMAN=1 but no Podman service answers on /run/podman/podman.sock"
            )
        }
        None => {
            eprintln!("SKIPPED {test}: no Podman service answers on /run/podman/podman.sock");
            None
        }
    }
}

fn remove_on(socket: &Path, id: &str) {
    let _ = iterion_test_support::docker_http::request(
        socket,
        "DELETE",
        &format!("/containers/{id}?force=1&v=1"),
        None,
        &[],
        Duration::from_secs(30),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_suite_against_podman() {
    let Some(socket) = podman_required("conformance_suite_against_podman") else {
        return;
    };
    let archives = iterion_test_support::docker_image::test_archives(None).expect("archives");
    for a in &archives {
        iterion_test_support::docker_image::ensure_image(&socket, a).expect("import into podman");
    }
    let endpoints = EndpointSettings::new(None, Some(format!("unix://{}", socket.display())), None, None);
    let mut settings = DockerSettings::new(endpoints, Family::Podman, support::hostname(), support::uid());
    if let Some(r) = support::relay_binary() {
        settings = settings.with_relay_binary(r);
    }
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
