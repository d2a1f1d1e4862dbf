//! `NoopDriver` specifics and the post-create helper (03 §3.9, §3.10, C16 on the host).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iterion_driver::{
    Driver, DriverEvent, DriverKind, EgressPlacement, Error, EventSink, ExecRequest, LogLevel, NetworkLease,
    NetworkRequest, NoopDriver, OutputLimits, PrepareRequest, Prepared, ProxyListen, Run, SetupPhase,
    StartRequest, exec_collect, owner, run_post_create,
};
use iterion_test_support::conformance::sandbox_for;

async fn start(ws: &Path) -> Box<dyn Run> {
    let d = NoopDriver::new(vec![("PATH".into(), std::env::var("PATH").unwrap_or_default())]);
    let p = d
        .prepare(PrepareRequest::new(sandbox_for(None, ws)))
        .await
        .unwrap();
    assert_eq!(
        p.skipped_reason.as_deref(),
        Some("noop driver does not implement mode=inline; running on the host")
    );
    let req = StartRequest::new("r1", ws, owner::current_owner(ws));
    d.start(p, None, req).await.unwrap().run
}

type Lines = Arc<Mutex<Vec<(LogLevel, String)>>>;

fn sink() -> (EventSink, Lines) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l2 = lines.clone();
    let sink = EventSink::new(move |e| {
        if let DriverEvent::Log { level, message } = e {
            l2.lock().unwrap().push((level, message));
        }
    });
    (sink, lines)
}

#[tokio::test]
async fn post_create_runs_in_order_and_streams_lines() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let run = start(&ws).await;
    let (log, lines) = sink();
    let cmds = vec![
        "echo one; echo; echo two >&2; printf last".to_string(),
        "touch made-by-post-create".to_string(),
    ];
    run_post_create(&*run, &cmds, Duration::from_secs(60), &log)
        .await
        .unwrap();
    assert!(ws.join("made-by-post-create").exists());
    let mut got = lines.lock().unwrap().clone();
    got.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        got,
        vec![
            (LogLevel::Info, "sandbox: post_create: last".to_string()),
            (LogLevel::Info, "sandbox: post_create: one".to_string()),
            (LogLevel::Warn, "sandbox: post_create: two".to_string()),
        ]
    );
    run.cleanup().await;
}

#[tokio::test]
async fn post_create_failure_stops_and_reports_tails() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let run = start(&ws).await;
    let cmds = vec![
        "true".to_string(),
        "echo bad >&2; exit 99".to_string(),
        "touch never".to_string(),
    ];
    let e = run_post_create(&*run, &cmds, Duration::from_secs(60), &EventSink::discard())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "post_create command 2 exited 99");
    match e {
        Error::PostCreateFailed {
            index,
            code,
            stderr_tail,
            ..
        } => {
            assert_eq!((index, code, stderr_tail.as_str()), (2, 99, "bad\n"));
        }
        other => panic!("want PostCreateFailed, got {other:?}"),
    }
    assert!(!ws.join("never").exists());
    run.cleanup().await;
}

#[tokio::test]
async fn post_create_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let run = start(&ws).await;
    let e = run_post_create(
        &*run,
        &["sleep 30".to_string()],
        Duration::from_secs(1),
        &EventSink::discard(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::SetupTimeout {
                phase: SetupPhase::PostCreate,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("ITERION_SANDBOX_POST_CREATE_TIMEOUT"));
    run.cleanup().await;
}

#[tokio::test]
async fn noop_refuses_what_it_cannot_do() {
    let d = NoopDriver::new(Vec::new());
    assert_eq!(d.kind(), DriverKind::Noop);
    let caps = d.capabilities();
    assert!(caps.copy && caps.exec_kill && !caps.image && !caps.build && !caps.post_create);
    let e = d
        .network(NetworkRequest::new("r", "/tmp", false))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "the noop driver does not support network");
    let ws = Path::new("/tmp");
    let foreign = Prepared::new(DriverKind::Docker, sandbox_for(None, ws));
    let e = d
        .start(
            foreign,
            None,
            StartRequest::new("r", ws, owner::current_owner(ws)),
        )
        .await
        .unwrap_err();
    assert_eq!(
        e,
        Error::ForeignPrepared {
            expected: DriverKind::Noop,
            got: DriverKind::Docker
        }
    );
    let p = d
        .prepare(PrepareRequest::new(sandbox_for(None, ws)))
        .await
        .unwrap();
    let lease = NetworkLease::new(
        DriverKind::Docker,
        EgressPlacement::Relay,
        ProxyListen::Unix("/x".into()),
        "127.0.0.1",
        3128,
    );
    let e = d
        .start(
            p,
            Some(&lease),
            StartRequest::new("r", ws, owner::current_owner(ws)),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::ForeignPrepared { .. }), "{e:?}");
    assert!(d.list_managed().await.unwrap().is_empty());
}

#[tokio::test]
async fn exec_env_is_injected_base_then_exec_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let run = start(&ws).await;
    let c = exec_collect(
        &*run,
        ExecRequest::new(["env"]).env("X", "1"),
        OutputLimits::default(),
    )
    .await
    .unwrap();
    let mut names: Vec<String> = c
        .stdout_text()
        .lines()
        .map(|l| l.split('=').next().unwrap().to_string())
        .collect();
    names.sort();
    names.retain(|n| n != "PWD" && n != "SHLVL" && n != "_");
    assert_eq!(names, ["PATH", "X"]);
    run.cleanup().await;
}

#[tokio::test]
async fn invalid_requests_and_copies_outside_the_workspace_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let run = start(&ws).await;
    let e = run
        .exec(ExecRequest::new(Vec::<String>::new()))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidSpec { ref field, .. } if field == "argv"),
        "{e:?}"
    );
    let e = run
        .exec(ExecRequest::new(["true"]).env("1BAD", "x"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidSpec { ref field, .. } if field == "env.1BAD"),
        "{e:?}"
    );
    let e = run
        .exec(ExecRequest::new(["true"]).workdir("relative"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidSpec { ref field, .. } if field == "workdir"),
        "{e:?}"
    );
    let Err(e) = run.copy_out("/etc/passwd").await else {
        panic!("copy_out outside the workspace succeeded")
    };
    assert!(e.to_string().contains("outside the workspace"), "{e}");
    let Err(e) = run.copy_out(&format!("{}/../x", ws.display())).await else {
        panic!("copy_out with .. succeeded")
    };
    assert!(e.to_string().contains("without '..'"), "{e}");
    run.cleanup().await;
    let e = run.status().await.unwrap_err();
    assert!(e.is_sandbox_gone());
}

#[test]
fn network_lease_release_is_idempotent_and_concurrent_safe() {
    let dir = tempfile::tempdir().unwrap();
    let net = dir.path().join("net");
    std::fs::create_dir_all(net.join("sub")).unwrap();
    let count = Arc::new(Mutex::new(0));
    let c2 = count.clone();
    let lease = Arc::new(
        NetworkLease::new(
            DriverKind::Docker,
            EgressPlacement::Relay,
            ProxyListen::Unix(net.join("proxy.sock")),
            "127.0.0.1",
            3128,
        )
        .remove_dir_on_release(&net),
    );
    let counted = NetworkLease::new(
        DriverKind::Docker,
        EgressPlacement::Advisory,
        ProxyListen::Tcp("127.0.0.1:0".parse().unwrap()),
        "host.docker.internal",
        0,
    )
    .on_release(move || {
        *c2.lock().unwrap() += 1;
        Vec::new()
    });
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let l = lease.clone();
            std::thread::spawn(move || l.release())
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), Vec::<String>::new());
    }
    assert!(!net.exists());
    assert!(lease.is_released());
    counted.release();
    counted.release();
    assert_eq!(*count.lock().unwrap(), 1);
}

#[tokio::test]
async fn exec_collect_truncates_but_reads_everything() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let run = start(&ws).await;
    let limits = OutputLimits {
        max_stdout: 10,
        max_stderr: 3,
    };
    let c = exec_collect(
        &*run,
        ExecRequest::shell("head -c 100000 /dev/zero; echo abcdef >&2"),
        limits,
    )
    .await
    .unwrap();
    assert_eq!((c.stdout.len(), c.stdout_truncated), (10, true));
    assert_eq!((c.stderr.as_slice(), c.stderr_truncated), (&b"abc"[..], true));
    assert_eq!(c.status.code, 0);
    run.cleanup().await;
}

#[test]
fn typed_errors_survive_io_streams() {
    let io = std::io::Error::other(Error::gone());
    assert_eq!(Error::from_io(io), Error::gone());
    let plain = Error::from_io(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"));
    assert_eq!(
        plain,
        Error::Engine {
            status: None,
            message: "stream failed: reset".into()
        }
    );
}

#[tokio::test]
async fn force_cleanup_kills_running_groups() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let run = start(&ws).await;
    let exec = run
        .exec(
            ExecRequest::shell("sleep 1000")
                .outputs(iterion_driver::Output::Discard, iterion_driver::Output::Discard),
        )
        .await
        .unwrap();
    run.force_cleanup_blocking();
    // the process was killed: wait resolves (as SandboxGone, the run being gone) instead of hanging
    let r = tokio::time::timeout(Duration::from_secs(30), exec.wait())
        .await
        .expect("the process survived");
    assert!(matches!(r, Err(ref e) if e.is_sandbox_gone()), "{r:?}");
    assert!(
        run.exec(ExecRequest::new(["true"]))
            .await
            .unwrap_err()
            .is_sandbox_gone()
    );
}

#[tokio::test]
async fn cleanup_ends_background_children_of_finished_execs() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let run = start(&ws).await;
    let token = format!("sleep {}", 2_000_000 + std::process::id());
    let exec = run
        .exec(
            ExecRequest::shell(format!("{token} &"))
                .outputs(iterion_driver::Output::Discard, iterion_driver::Output::Discard),
        )
        .await
        .unwrap();
    assert_eq!(exec.wait().await.unwrap().code, 0);
    let alive = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim_end() == token)
                    .unwrap_or(false)
            })
    };
    let mut started = false;
    for _ in 0..200 {
        if alive() {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(started, "the background sleep should outlive its shell");
    // a second exec registers the first one's group as ended
    exec_collect(&*run, ExecRequest::new(["true"]), OutputLimits::default())
        .await
        .unwrap();
    run.cleanup().await;
    let mut gone = false;
    for _ in 0..200 {
        if !alive() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the orphaned background process survived cleanup");
}

/// A repository that plants `git` in `bin/` and an operator PATH that names `bin` (relative), an empty entry
/// and the workspace's own `bin/`: no host process finds the planted program, by its own name or through the
/// shell's lookups, and the PATH a host process gets has only the trusted entries.
#[tokio::test]
async fn host_processes_never_find_programs_the_workspace_plants() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(ws.join("bin")).unwrap();
    let marker = ws.join("planted-ran");
    let planted = ws.join("bin/git");
    std::fs::write(&planted, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("bin::{}:/usr/bin:/bin", ws.join("bin").display());
    let d = NoopDriver::new(vec![("PATH".into(), path)]);
    let p = d
        .prepare(PrepareRequest::new(sandbox_for(None, &ws)))
        .await
        .unwrap();
    let req = StartRequest::new("r1", &ws, owner::current_owner(&ws));
    let run = d.start(p, None, req).await.unwrap().run;
    let direct = exec_collect(
        &*run,
        ExecRequest::new(vec!["git".to_string(), "--version".to_string()]),
        OutputLimits::default(),
    )
    .await
    .unwrap();
    let via_shell = exec_collect(
        &*run,
        ExecRequest::new(vec![
            "/bin/sh".to_string(),
            "-c".to_string(),
            "git --version >/dev/null 2>&1; printf %s \"$PATH\"".to_string(),
        ]),
        OutputLimits::default(),
    )
    .await
    .unwrap();
    assert!(!marker.exists(), "the planted git ran on the host");
    // the operator's own git answers (the test machines have one in /usr/bin)
    assert!(
        String::from_utf8_lossy(&direct.stdout).starts_with("git version"),
        "{direct:?}"
    );
    assert_eq!(String::from_utf8_lossy(&via_shell.stdout), "/usr/bin:/bin");
    run.cleanup().await;
}
