//! BuildKit through the engine API on the real engines: the builder choice in the events, multi-stage with a
//! target, build secrets reaching a `RUN --mount=type=secret` step (and never an event or a log line), an
//! unknown secret id failing with BuildKit's message, and Podman's builder chosen visibly.

mod support;

use iterion_driver::{
    BuildNetwork, BuildRequest, BuildSecret, BuildSecretSource, BuilderChoice, BuilderKind, Driver,
    DriverEvent, Error as DError, EventSink, ExecRequest, OutputLimits, PrepareRequest, Prepared, PullPolicy,
    SecretBytes, StartRequest, exec_collect, owner,
};
use iterion_driver_docker::buildkit::BuilderSetting;
use iterion_driver_docker::endpoint::{EndpointSettings, Family};
use iterion_driver_docker::{DockerDriver, DockerSettings};
use iterion_spec::resolved::BuildSpec;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

async fn docker_driver(builder: BuilderSetting) -> DockerDriver {
    let socket = iterion_test_support::engine_socket().expect("unix socket");
    let endpoints = EndpointSettings::new(Some(format!("unix://{}", socket.display())), None, None, None);
    let mut s = DockerSettings::new(endpoints, Family::Docker, support::hostname(), support::uid());
    if let Some(r) = support::relay_binary() {
        s = s.with_relay_binary(r);
    }
    s.builder = builder;
    DockerDriver::connect(s).await.expect("connect")
}

struct Ws {
    _dir: tempfile::TempDir,
    root: PathBuf,
    store: tempfile::TempDir,
}

fn ws(dockerfile: &str) -> Ws {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canon");
    std::fs::write(root.join("Dockerfile"), dockerfile).expect("write");
    Ws {
        _dir: dir,
        root,
        store: tempfile::tempdir().expect("store"),
    }
}

/// What a build reported: its result, every event, and every log line.
struct Built {
    prepared: Result<Prepared, DError>,
    events: Vec<DriverEvent>,
}

impl Built {
    fn builder(&self) -> BuilderChoice {
        self.events
            .iter()
            .find_map(|e| match e {
                DriverEvent::BuildStarted { builder, .. } => Some(builder.clone()),
                _ => None,
            })
            .expect("a build_started event")
    }

    fn all_text(&self) -> String {
        format!("{:?}", self.events)
    }
}

async fn build(
    driver: &DockerDriver,
    w: &Ws,
    image: &str,
    target: Option<&str>,
    f: impl FnOnce(&mut BuildRequest),
) -> Built {
    let mut sb = iterion_test_support::conformance::sandbox_for(Some(image), &w.root);
    sb.image = None;
    sb.build = Some(BuildSpec {
        dockerfile: w.root.join("Dockerfile").display().to_string(),
        context: w.root.display().to_string(),
        target: target.map(str::to_owned),
        args: Default::default(),
    });
    let mut p = PrepareRequest::new(sb);
    p.pull_policy = PullPolicy::Never;
    let prepared = driver.prepare(p).await.expect("prepare");
    let seen: Arc<Mutex<Vec<DriverEvent>>> = Arc::default();
    let sink = seen.clone();
    let mut req = BuildRequest::new(format!("bk-{:08x}", rand::random::<u32>()));
    req.owner = Some(owner::current_owner(w.store.path()));
    req.network = BuildNetwork::None;
    req.events = EventSink::new(move |e| sink.lock().unwrap().push(e));
    f(&mut req);
    let prepared = driver.build(prepared, req).await;
    let events = seen.lock().unwrap().clone();
    Built { prepared, events }
}

async fn run_in(driver: &DockerDriver, w: &Ws, prepared: Prepared, cmd: &str) -> String {
    let run_id = format!("bk-read-{:08x}", rand::random::<u32>());
    let req = StartRequest::new(run_id, &w.root, owner::current_owner(w.store.path()));
    let started = driver.start(prepared, None, req).await.expect("start");
    let c = exec_collect(&*started.run, ExecRequest::shell(cmd), OutputLimits::default())
        .await
        .expect("exec");
    started.run.cleanup().await;
    c.stdout_text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buildkit_builds_the_target_stage_of_a_multi_stage_dockerfile() {
    if !iterion_test_support::engine_required("buildkit_builds_the_target_stage_of_a_multi_stage_dockerfile")
    {
        return;
    }
    let img = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let driver = docker_driver(BuilderSetting::BuildKit).await;
    let w = ws(&format!(
        "FROM {img} AS base\nRUN echo base > /base\n\
         FROM base AS one\nRUN echo one > /stage\n\
         FROM base AS two\nRUN echo two-was-built > /stage\n"
    ));
    let b = build(&driver, &w, &img, Some("one"), |r| r.rebuild = true).await;
    assert_eq!(b.builder().kind, BuilderKind::BuildKit);
    let logs = b.all_text();
    assert!(
        !logs.contains("two-was-built"),
        "BuildKit builds only what the target needs: {logs}"
    );
    let finished = b.events.iter().any(
        |e| matches!(e, DriverEvent::BuildFinished { builder, .. } if builder.kind == BuilderKind::BuildKit),
    );
    assert!(finished, "{logs}");
    let prepared = b.prepared.expect("built");
    assert!(prepared.image.as_ref().and_then(|i| i.id.clone()).is_some());
    let out = run_in(&driver, &w, prepared, "cat /base /stage").await;
    assert_eq!(out, "base\none\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_secret_reaches_its_run_step_and_nothing_else() {
    if !iterion_test_support::engine_required("a_build_secret_reaches_its_run_step_and_nothing_else") {
        return;
    }
    let img = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    // auto: the engine here does not advertise BuildKit, the secrets make it the choice
    let driver = docker_driver(BuilderSetting::Auto).await;
    let value = format!("s3cr3t-{:016x}", rand::random::<u64>());
    let w = ws(&format!(
        "FROM {img}\nRUN --mount=type=secret,id=tok,required=true wc -c < /run/secrets/tok > /tok.len\n"
    ));
    let file = w.root.join("unused-file-secret");
    std::fs::write(&file, "file-value").expect("write");
    let b = build(&driver, &w, &img, None, |r| {
        r.secrets = vec![
            BuildSecret {
                id: "tok".into(),
                source: BuildSecretSource::Env {
                    var: "TOK".into(),
                    value: SecretBytes::new(value.clone().into_bytes()),
                },
            },
            BuildSecret {
                id: "other".into(),
                source: BuildSecretSource::File(file.clone()),
            },
        ];
    })
    .await;
    let choice = b.builder();
    assert_eq!(choice.kind, BuilderKind::BuildKit);
    if !driver.facts().expect("facts").buildkit {
        let reason = choice.reason.unwrap_or_default();
        assert!(reason.contains("build secrets"), "{reason}");
    }
    let text = b.all_text();
    assert!(
        !text.contains(&value),
        "the secret value is in an event or a log line: {text}"
    );
    let prepared = b.prepared.expect("built");
    let out = run_in(
        &driver,
        &w,
        prepared,
        "cat /tok.len; ls /run/secrets 2>&1 || true",
    )
    .await;
    let mut lines = out.lines();
    assert_eq!(
        lines.next().map(str::trim),
        Some(value.len().to_string().as_str()),
        "{out}"
    );
    assert!(!out.contains(&value), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_secret_id_fails_with_buildkits_message() {
    if !iterion_test_support::engine_required("an_unknown_secret_id_fails_with_buildkits_message") {
        return;
    }
    let img = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let driver = docker_driver(BuilderSetting::Auto).await;
    let w = ws(&format!(
        "FROM {img}\nRUN --mount=type=secret,id=nope,required=true cat /run/secrets/nope\n"
    ));
    let b = build(&driver, &w, &img, None, |r| {
        r.secrets = vec![BuildSecret {
            id: "given".into(),
            source: BuildSecretSource::Env {
                var: "X".into(),
                value: SecretBytes::new(b"v".to_vec()),
            },
        }];
    })
    .await;
    assert_eq!(b.builder().kind, BuilderKind::BuildKit);
    let err = b.prepared.expect_err("fails");
    let msg = err.to_string();
    assert!(matches!(err, DError::BuildFailed { .. }), "{msg}");
    assert!(
        msg.contains("secret nope not found"),
        "BuildKit names the secret: {msg}"
    );
    let failed = b.events.iter().any(
        |e| matches!(e, DriverEvent::BuildFailed { builder: Some(c), .. } if c.kind == BuilderKind::BuildKit),
    );
    assert!(failed, "{:?}", b.events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_secret_file_fails_before_the_build() {
    if !iterion_test_support::engine_required("an_unreadable_secret_file_fails_before_the_build") {
        return;
    }
    let img = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let driver = docker_driver(BuilderSetting::Auto).await;
    let w = ws(&format!("FROM {img}\n"));
    let b = build(&driver, &w, &img, None, |r| {
        r.secrets = vec![BuildSecret {
            id: "key".into(),
            source: BuildSecretSource::File(Path::new("/nonexistent/key").to_path_buf()),
        }];
    })
    .await;
    let msg = b.prepared.expect_err("fails").to_string();
    assert!(msg.contains("secret key: cannot read /nonexistent/key"), "{msg}");
    assert!(
        !b.events
            .iter()
            .any(|e| matches!(e, DriverEvent::BuildStarted { .. })),
        "{:?}",
        b.events
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_is_chosen_without_buildkit_syntax_and_podman_says_why() {
    if !iterion_test_support::engine_required("classic_is_chosen_without_buildkit_syntax_and_podman_says_why")
    {
        return;
    }
    let img = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let driver = docker_driver(BuilderSetting::Auto).await;
    let w = ws(&format!("FROM {img}\nRUN echo classic > /c\n"));
    let b = build(&driver, &w, &img, None, |_| {}).await;
    let expected = if driver.facts().expect("facts").buildkit {
        BuilderKind::BuildKit
    } else {
        BuilderKind::Classic
    };
    assert_eq!(b.builder().kind, expected);
    b.prepared.expect("built");

    let Some(socket) = iterion_test_support::podman::required("classic_is_chosen_on_podman") else {
        return;
    };
    iterion_test_support::podman::ensure_test_images(&socket).expect("test images in podman's store");
    let endpoints = EndpointSettings::new(None, Some(format!("unix://{}", socket.display())), None, None);
    let mut s = DockerSettings::new(endpoints, Family::Podman, support::hostname(), support::uid());
    s.builder = BuilderSetting::BuildKit;
    let podman = DockerDriver::connect(s).await.expect("connect to podman");
    let img = iterion_test_support::docker_image::TEST_IMAGE;
    let w = ws(&format!(
        "FROM {img} AS a\nRUN echo a > /a\nFROM {img} AS b\nCOPY --from=a /a /a\nRUN echo b >> /a\n"
    ));
    let b = build(&podman, &w, img, Some("b"), |_| {}).await;
    let c = b.builder();
    assert_eq!(c.kind, BuilderKind::Classic);
    assert!(c.reason.unwrap_or_default().contains("podman"), "{:?}", b.events);
    b.prepared.expect("podman builds multi-stage with a target");
}

/// Under a filtering policy a build has no network; BuildKit would still fetch a `# syntax=` frontend image and a
/// `RUN --mount=from=<image>` image itself, on the host's network. Both are refused before the engine is asked,
/// naming the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_buildkit_build_refuses_what_buildkit_would_fetch() {
    if !iterion_test_support::engine_required("an_offline_buildkit_build_refuses_what_buildkit_would_fetch") {
        return;
    }
    let img = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let driver = docker_driver(BuilderSetting::BuildKit).await;
    let absent = format!("iterion-test/absent-{:016x}:1", rand::random::<u64>());
    for (dockerfile, line, what) in [
        (
            format!(
                "# syntax=iterion-test/frontend-{:08x}:1\nFROM {img}\n",
                rand::random::<u32>()
            ),
            1,
            "syntax=",
        ),
        (
            format!("FROM {img}\nRUN echo a\nRUN --mount=type=bind,from={absent},target=/x ls /x\n"),
            3,
            "from=iterion-test/absent",
        ),
    ] {
        let w = ws(&dockerfile);
        let b = build(&driver, &w, &img, None, |_| {}).await;
        assert_eq!(b.builder().kind, BuilderKind::BuildKit);
        match b.prepared {
            Err(DError::BuildRefused { line: l, reason, .. }) => {
                assert_eq!(l, line, "{reason}");
                assert!(reason.contains(what) && reason.contains("no network"), "{reason}");
            }
            other => panic!("expected a refusal before the build, got {other:?}"),
        }
    }
}

/// The classic builder makes one step (an intermediate container) per label it is given: iterion's labels reach
/// the image through one LABEL line, in one step, and all of them arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_build_sets_every_label_in_one_step() {
    if !iterion_test_support::engine_required("a_classic_build_sets_every_label_in_one_step") {
        return;
    }
    let img = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let driver = docker_driver(BuilderSetting::Classic).await;
    let nonce = format!("{:08x}", rand::random::<u32>());
    // no trailing newline: the LABEL line still starts a line of its own; the whole context is copied, and the
    // Dockerfile copy carrying the labels (and the .dockerignore naming it) must not be part of it
    let w = ws(&format!("FROM {img}\nRUN echo {nonce} > /n\nCOPY . /ctx"));
    let b = build(&driver, &w, &img, None, |_| {}).await;
    assert_eq!(b.builder().kind, BuilderKind::Classic);
    let steps: Vec<String> = b
        .events
        .iter()
        .filter_map(|e| match e {
            DriverEvent::Log { message, .. } if message.contains(" : LABEL") => Some(message.clone()),
            _ => None,
        })
        .collect();
    let prepared = b.prepared.expect("built");
    assert_eq!(steps.len(), 1, "{steps:#?}");
    let tag = prepared.image.clone().expect("image").reference;
    let labels = support::engine_get(&format!("/images/{tag}/json"))["Config"]["Labels"].clone();
    assert_eq!(labels["iterion.io/managed"], "true", "{labels}");
    assert_eq!(labels["iterion.io/component"], "build", "{labels}");
    assert_eq!(
        labels["iterion.io/builder-pid"],
        std::process::id().to_string(),
        "{labels}"
    );
    assert_eq!(
        labels["iterion.io/store"],
        w.store.path().display().to_string(),
        "{labels}"
    );
    assert_eq!(
        run_in(&driver, &w, prepared, "cat /n; ls -A /ctx").await.trim(),
        format!("{nonce}\nDockerfile")
    );
}
