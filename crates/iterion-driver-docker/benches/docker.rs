//! `cargo xtask bench docker`: the driver against the docker CLI on the same engine, in one run.
//!
//! - exec of `true` in a running sandbox: driver (`Run::exec` + `wait`) vs `docker exec <c> true`
//!   (goal: ≤ 0.5× the CLI);
//! - create + start + remove of a run container: driver (`prepare` + `start` + `cleanup`, including the
//!   shell probe) vs `docker run -d … sleep infinity` + `docker rm -f` (goal: ≤ 1.2× the CLI).
//!
//! Median of N iterations (`ITERS`, default 20). Shelling out to the docker CLI happens only here, as the
//! comparison baseline.
//!
//! A reference row, without a goal, measures the engine's own floor for an exec on the same container: a bare
//! engine exec of `true` (create, attached start, end-of-file, inspect; no shim, no pid file) over the same
//! API client. Every exec through the engine API costs at least this much, so the exec ratio can only be
//! met where the CLI's own overhead (process start, API negotiation) is at least as large as that floor.
//! The three exec variants run in a rotating order within each iteration so that none always follows another.
//! The load average is printed before and after.

use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures::StreamExt;
use iterion_driver::{Driver, ExecRequest, Output, PrepareRequest, PullPolicy, StartRequest, owner};
use iterion_driver_docker::endpoint::{EndpointSettings, Family};
use iterion_driver_docker::{DockerDriver, DockerSettings};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("docker CLI");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// A bare engine exec of `true`: create, attached start drained to end-of-file, inspect until it ended.
async fn engine_exec(docker: &bollard::Docker, container: &str) -> i64 {
    let cfg = ExecConfig {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        cmd: Some(vec!["true".into()]),
        ..Default::default()
    };
    let created = docker.create_exec(container, cfg).await.expect("exec create");
    let opts = StartExecOptions {
        detach: false,
        tty: false,
        output_capacity: None,
    };
    match docker
        .start_exec(&created.id, Some(opts))
        .await
        .expect("exec start")
    {
        StartExecResults::Attached { mut output, input } => {
            drop(input);
            while let Some(frame) = output.next().await {
                frame.expect("exec output");
            }
        }
        StartExecResults::Detached => panic!("the engine detached an attached exec"),
    }
    loop {
        let i = docker.inspect_exec(&created.id).await.expect("exec inspect");
        if i.running != Some(true) {
            return i.exit_code.unwrap_or(-1);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn main() {
    if iterion_test_support::engine_answers().is_err() {
        eprintln!("SKIPPED bench docker: no container engine answers");
        return;
    }
    let iters: usize = std::env::var("ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let image = iterion_test_support::docker_image::ensure_test_image().expect("test image");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let socket = iterion_test_support::engine_socket().expect("socket");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_string();
    let settings = DockerSettings::new(
        EndpointSettings::new(Some(format!("unix://{}", socket.display())), None, None, None),
        Family::Docker,
        host,
        0,
    );
    let ws = tempfile::tempdir().expect("ws");
    let wsp = std::fs::canonicalize(ws.path()).expect("canon");
    let store = tempfile::tempdir().expect("store");
    let prefix = iterion_test_support::conformance::unique_name();

    let load_before = load();
    rt.block_on(async {
        let engine = bollard::Docker::connect_with_unix(
            socket.to_str().expect("socket path"),
            60,
            &bollard::ClientVersion {
                major_version: 1,
                minor_version: 41,
            },
        )
        .expect("engine client");
        let driver = DockerDriver::connect(settings).await.expect("connect");
        let sandbox = iterion_test_support::conformance::sandbox_for(Some(&image), &wsp);
        let prepare = || {
            let mut p = PrepareRequest::new(sandbox.clone());
            p.pull_policy = PullPolicy::Never;
            p
        };

        // exec of `true`
        let prepared = driver.prepare(prepare()).await.expect("prepare");
        let run_id = format!("{prefix}-exec");
        let started = driver
            .start(
                prepared,
                None,
                StartRequest::new(&run_id, &wsp, owner::current_owner(store.path())),
            )
            .await
            .expect("start");
        let run = started.run;
        let cid = run.id().to_string();
        let mut drv_exec = Vec::new();
        let mut cli_exec = Vec::new();
        let mut raw_exec = Vec::new();
        for i in 0..iters {
            for k in 0..3 {
                let t = Instant::now();
                match (i + k) % 3 {
                    0 => {
                        let ex = run
                            .exec(ExecRequest::new(["true"]).outputs(Output::Discard, Output::Discard))
                            .await
                            .expect("exec");
                        let st = ex.wait().await.expect("wait");
                        assert_eq!(st.code, 0);
                        drv_exec.push(t.elapsed());
                    }
                    1 => {
                        docker(&["exec", &cid, "true"]);
                        cli_exec.push(t.elapsed());
                    }
                    _ => {
                        assert_eq!(engine_exec(&engine, &cid).await, 0);
                        raw_exec.push(t.elapsed());
                    }
                }
            }
        }
        run.cleanup().await;

        // create + start + remove
        let mut drv_life = Vec::new();
        let mut cli_life = Vec::new();
        for i in 0..iters {
            let t = Instant::now();
            let prepared = driver.prepare(prepare()).await.expect("prepare");
            let started = driver
                .start(
                    prepared,
                    None,
                    StartRequest::new(format!("{prefix}-{i}"), &wsp, owner::current_owner(store.path())),
                )
                .await
                .expect("start");
            let rep = started.run.cleanup().await;
            assert!(rep.container_removed);
            drv_life.push(t.elapsed());
            let t = Instant::now();
            let id = docker(&[
                "run",
                "-d",
                "--init",
                "--label",
                "iterion.io/component=test",
                "--entrypoint",
                "sleep",
                &image,
                "infinity",
            ]);
            docker(&["rm", "-f", &id]);
            cli_life.push(t.elapsed());
        }

        let cli_exec = median(cli_exec);
        let rows = [
            ("exec `true`", median(drv_exec), cli_exec, Some(0.5)),
            ("  engine floor (ref.)", median(raw_exec), cli_exec, None),
            ("create+start+remove", median(drv_life), median(cli_life), Some(1.2)),
        ];
        println!(
            "\ndocker driver vs docker CLI (median of {iters}, same engine; load before {load_before}, after {})",
            load()
        );
        println!(
            "{:<22} {:>12} {:>12} {:>8} {:>7}  met",
            "operation", "driver ms", "CLI ms", "ratio", "goal"
        );
        for (name, d, c, goal) in rows {
            let ratio = ms(d) / ms(c);
            let (goal, met) = match goal {
                Some(g) => (format!("{g:.1}x"), if ratio <= g { "yes" } else { "no" }),
                None => ("-".to_string(), "-"),
            };
            println!(
                "{name:<22} {:>12.1} {:>12.1} {:>8.2} {goal:>7}  {met}",
                ms(d),
                ms(c),
                ratio,
            );
        }
    });
}
