//! Every `Error` variant: failure code (both phases), class and message (03 §3.6).

use std::time::Duration;

use iterion_driver::{CopyDirection, DriverKind, Error, SetupPhase};

fn s(v: &str) -> String {
    v.to_string()
}

fn all() -> Vec<Error> {
    vec![
        Error::Unavailable {
            driver: s("docker"),
            reason: s("no engine answers on /var/run/docker.sock"),
        },
        Error::InvalidSpec {
            field: s("user"),
            reason: s("'a b' is not a valid user"),
        },
        Error::UnsafeMount {
            mount: s("type=bind,source=/var/run/docker.sock,target=/s"),
            reason: s("source /var/run/docker.sock is a sensitive path (engine socket)"),
        },
        Error::Unsupported {
            driver: DriverKind::Noop,
            feature: s("network"),
        },
        Error::ShellMissing {
            image: s("scratch-img:1"),
        },
        Error::NetworkUnavailable {
            engine: s("Docker Desktop 4.30"),
            reason: s("the engine cannot reach a host socket"),
            hint: s("use network mode open or a Linux host"),
        },
        Error::ImageNotFound {
            image: s("ghcr.io/acme/ci:2024-06"),
        },
        Error::ImageAuth {
            image: s("acme/x"),
            registry: s("docker.io"),
        },
        Error::ImageAbsent { image: s("alpine:3") },
        Error::BuildFailed {
            dockerfile: s("/w/Dockerfile"),
            tail: s("RUN false: exit 1"),
        },
        Error::BuildRefused {
            dockerfile: s("/w/Dockerfile"),
            line: 3,
            reason: s("ADD fetches http://10.0.0.1/x itself, and the build has no network"),
        },
        Error::PostCreateFailed {
            index: 1,
            code: 99,
            stdout_tail: s(""),
            stderr_tail: s("boom"),
        },
        Error::SetupTimeout {
            phase: SetupPhase::Pull,
            after: Duration::from_secs(600),
            subject: Some(s("alpine:3")),
        },
        Error::SetupTimeout {
            phase: SetupPhase::PostCreate,
            after: Duration::from_secs(1),
            subject: None,
        },
        Error::SetupTimeout {
            phase: SetupPhase::Probe,
            after: Duration::from_secs(60),
            subject: None,
        },
        Error::ImagePull {
            image: s("alpine:3"),
            reason: s("received unexpected HTTP status: 503"),
        },
        Error::StartFailed {
            reason: s("relay binary is dynamically linked"),
            hint: Some(s("use a static build")),
        },
        Error::StartFailed {
            reason: s("create failed"),
            hint: None,
        },
        Error::SandboxInUse {
            run_id: s("r1"),
            owner_host: s("ci-7"),
            owner_pid: 4242,
        },
        Error::Copy {
            direction: CopyDirection::Out,
            reason: s("entry '../x' leaves the destination"),
        },
        Error::Engine {
            status: Some(500),
            message: s("driver failed"),
        },
        Error::Engine {
            status: None,
            message: s("connection reset"),
        },
        Error::SandboxGone {
            exit_code: Some(137),
            oom_killed: Some(true),
        },
        Error::SandboxGone {
            exit_code: Some(0),
            oom_killed: Some(false),
        },
        Error::gone(),
        Error::ExecStart {
            reason: s("the exec shim could not start (is /bin/sh present?)"),
        },
        Error::ExecKillFailed {
            exec_id: s("0123456789abcdef"),
        },
        Error::ForeignPrepared {
            expected: DriverKind::Docker,
            got: DriverKind::Noop,
        },
        Error::Cancelled,
    ]
}

#[test]
fn codes_classes_and_messages() {
    let lines: Vec<String> = all()
        .iter()
        .map(|e| {
            let code = |setup| e.failure_code(setup).map(|c| c.as_str()).unwrap_or("-");
            format!(
                "{} | {} | {} | {}",
                code(true),
                code(false),
                if e.is_deterministic() { "D" } else { "R" },
                e
            )
        })
        .collect();
    insta::assert_snapshot!(lines.join("\n"));
}

#[test]
fn messages_are_lowercase_without_trailing_period() {
    for e in all() {
        let m = e.to_string();
        assert!(!m.ends_with('.'), "{m}");
        assert!(!m.starts_with(|c: char| c.is_ascii_uppercase()), "{m}");
    }
}
