//! Engine-level tests against the real engine: handshake, image presence, pull bounds, builds.

use iterion_driver_docker::Error;
use iterion_driver_docker::auth::Credentials;
use iterion_driver_docker::endpoint::{EndpointSettings, Family};
use iterion_driver_docker::engine::Engine;
use iterion_driver_docker::image::{self, PullPolicy};
use iterion_driver_docker::imagebuild::{self, BuildInput};
use std::time::Duration;

async fn engine() -> Engine {
    let socket = iterion_test_support::engine_socket().expect("unix socket");
    Engine::connect(&socket, Family::Docker, Duration::from_secs(5))
        .await
        .expect("connect")
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

#[tokio::test]
async fn handshake_negotiates_and_identifies() {
    if !iterion_test_support::engine_required("handshake_negotiates_and_identifies") {
        return;
    }
    let e = engine().await;
    let f = e.facts();
    let api = iterion_driver_docker::engine::parse_api(&f.api_version).expect("api");
    assert!(api >= (1, 41), "{}", f.api_version);
    assert_eq!(f.os, "linux");
    assert!(!f.version.is_empty());
    let settings = EndpointSettings::new(Some("tcp://h:2376".into()), None, None, None);
    let err = Engine::discover(&settings, Family::Docker, Duration::from_secs(1))
        .await
        .expect_err("remote refused");
    assert!(
        err.to_string()
            .contains("remote engines are not supported (DOCKER_HOST=tcp://…)"),
        "{err}"
    );
}

#[tokio::test]
async fn present_image_absent_image_and_never_policy() {
    if !iterion_test_support::engine_required("present_image_absent_image_and_never_policy") {
        return;
    }
    let img = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let e = engine().await;
    let noop = |_: &str| {};
    let ready = image::ensure_image(
        &e,
        &img,
        PullPolicy::Never,
        Duration::from_secs(10),
        &noop,
        &Credentials::none(),
    )
    .await
    .expect("present");
    assert!(!ready.pulled);
    assert!(ready.image.id.starts_with("sha256:"));
    // C26: absent image with policy never.
    let absent = format!("iterion-test/{}:1", unique("absent"));
    let err = image::ensure_image(
        &e,
        &absent,
        PullPolicy::Never,
        Duration::from_secs(10),
        &noop,
        &Credentials::none(),
    )
    .await
    .expect_err("absent");
    assert!(matches!(err, Error::ImageAbsent { .. }), "{err}");
}

#[tokio::test]
async fn pull_from_a_stalled_registry_times_out() {
    if !iterion_test_support::engine_required("pull_from_a_stalled_registry_times_out") {
        return;
    }
    // C27: a listener that accepts and never answers.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    let e = engine().await;
    let reference = format!("127.0.0.1:{port}/stall/img:1");
    let err = image::ensure_image(
        &e,
        &reference,
        PullPolicy::Missing,
        Duration::from_secs(2),
        &|_: &str| {},
        &Credentials::none(),
    )
    .await
    .expect_err("timeout");
    assert!(matches!(err, Error::SetupTimeout { phase: "pull", .. }), "{err}");
    assert!(err.to_string().contains("ITERION_SANDBOX_PULL_TIMEOUT"), "{err}");
    hold.abort();
}

struct ImageGuard(String);

impl Drop for ImageGuard {
    fn drop(&mut self) {
        if let Some(s) = iterion_test_support::engine_socket() {
            let _ = iterion_test_support::docker_http::request(
                &s,
                "DELETE",
                &format!("/images/{}?force=1", self.0),
                None,
                &[],
                Duration::from_secs(30),
            );
        }
    }
}

#[tokio::test]
async fn build_from_the_test_image_and_a_failing_build() {
    if !iterion_test_support::engine_required("build_from_the_test_image_and_a_failing_build") {
        return;
    }
    let img = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let e = engine().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canon");
    std::fs::write(
        root.join("Dockerfile"),
        format!("FROM {img}\nRUN echo built > /built\n"),
    )
    .expect("write");
    let tag = format!("iterion-sandbox-build:{}", unique("t"));
    let _g = ImageGuard(tag.clone());
    let mut input = BuildInput::new(
        root.join("Dockerfile"),
        root.clone(),
        root.clone(),
        tag.clone(),
        "r1".into(),
    );
    input.timeout = Duration::from_secs(120);
    let built = imagebuild::build(&e, &input, &|_: &str| {}).await.expect("build");
    assert_eq!(built, tag);
    let present = image::inspect(&e, &tag).await.expect("inspect");
    assert!(present.is_some());

    std::fs::write(
        root.join("Dockerfile"),
        format!("FROM {img}\nRUN echo boom && exit 3\n"),
    )
    .expect("write");
    let tag2 = format!("iterion-sandbox-build:{}", unique("f"));
    let _g2 = ImageGuard(tag2.clone());
    let input = BuildInput::new(
        root.join("Dockerfile"),
        root.clone(),
        root.clone(),
        tag2,
        "r1".into(),
    );
    let err = imagebuild::build(&e, &input, &|_: &str| {})
        .await
        .expect_err("fails");
    match &err {
        Error::BuildFailed { message, tail, .. } => {
            assert!(tail.contains("boom"), "tail: {tail}");
            assert!(message.contains('3'), "message: {message}");
        }
        other => panic!("expected BuildFailed, got {other}"),
    }
}

/// A build without network: its `RUN` steps see only the loopback interface, and a remote `ADD` is refused
/// before the engine is asked to build, naming the line. With the open network the same step sees more.
#[tokio::test]
async fn a_build_without_network_has_only_loopback_and_refuses_a_remote_add() {
    if !iterion_test_support::engine_required(
        "a_build_without_network_has_only_loopback_and_refuses_a_remote_add",
    ) {
        return;
    }
    let img = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let e = engine().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canon");
    let build = |network: imagebuild::BuildNetwork, dockerfile: &str| {
        std::fs::write(root.join("Dockerfile"), dockerfile).expect("write");
        let tag = format!("iterion-sandbox-build:{}", unique("n"));
        let mut input = BuildInput::new(
            root.join("Dockerfile"),
            root.clone(),
            root.clone(),
            tag.clone(),
            "r1".into(),
        );
        input.network = network;
        input.timeout = Duration::from_secs(120);
        (input, ImageGuard(tag))
    };
    let only_lo = format!("FROM {img}\nRUN test \"$(ls /sys/class/net)\" = lo\n");
    let (input, _g1) = build(imagebuild::BuildNetwork::None, &only_lo);
    imagebuild::build(&e, &input, &|_: &str| {})
        .await
        .expect("an offline build has only loopback");
    // Another step text, so the engine's layer cache does not answer with the offline result.
    let only_lo_open = format!("FROM {img}\nRUN test \"$(ls /sys/class/net)\" = lo # open\n");
    let (input, _g2) = build(imagebuild::BuildNetwork::Open, &only_lo_open);
    let err = imagebuild::build(&e, &input, &|_: &str| {})
        .await
        .expect_err("the open build has the bridge too");
    assert!(matches!(err, Error::BuildFailed { .. }), "{err}");

    let (input, _g3) = build(
        imagebuild::BuildNetwork::None,
        &format!("FROM {img}\nRUN true\nADD https://example.invalid/x /x\n"),
    );
    let mut lines = Vec::new();
    let progress = std::sync::Mutex::new(&mut lines);
    let err = imagebuild::build(&e, &input, &|l: &str| progress.lock().unwrap().push(l.to_owned()))
        .await
        .expect_err("refused");
    match &err {
        Error::BuildRefused { line, reason, .. } => {
            assert_eq!(*line, 3);
            assert!(reason.contains("https://example.invalid/x"), "{reason}");
        }
        other => panic!("expected BuildRefused, got {other}"),
    }
    assert!(lines.is_empty(), "the engine was not asked to build: {lines:?}");
    assert!(
        err.to_string()
            .contains(&format!("{}:3:", root.join("Dockerfile").display())),
        "{err}"
    );
}
