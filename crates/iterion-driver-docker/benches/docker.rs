//! `cargo xtask bench docker`: the driver against the docker CLI on the same engine, in one run.
//!
//! - exec of `true` in a running sandbox: driver (`Run::exec` + `wait`) vs `docker exec <c> true`
//!   (goal: ≤ 0.5× the CLI);
//! - create + start + remove of a run container: driver (`prepare` + `start` + `cleanup`, including the
//!   shell probe) vs `docker run -d … sleep infinity` + `docker rm -f` (goal: ≤ 1.2× the CLI).
//!
//! Median of N iterations (`ITERS`, default 20). Shelling out to the docker CLI happens only here, as the
//! comparison baseline.

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

    rt.block_on(async {
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
        for _ in 0..iters {
            let t = Instant::now();
            let ex = run
                .exec(ExecRequest::new(["true"]).outputs(Output::Discard, Output::Discard))
                .await
                .expect("exec");
            let st = ex.wait().await.expect("wait");
            assert_eq!(st.code, 0);
            drv_exec.push(t.elapsed());
            let t = Instant::now();
            docker(&["exec", &cid, "true"]);
            cli_exec.push(t.elapsed());
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

        let rows = [
            ("exec `true`", median(drv_exec), median(cli_exec), 0.5),
            ("create+start+remove", median(drv_life), median(cli_life), 1.2),
        ];
        println!("\ndocker driver vs docker CLI (median of {iters}, same engine)");
        println!(
            "{:<22} {:>12} {:>12} {:>8} {:>7}  met",
            "operation", "driver ms", "CLI ms", "ratio", "goal"
        );
        for (name, d, c, goal) in rows {
            let ratio = ms(d) / ms(c);
            println!(
                "{name:<22} {:>12.1} {:>12.1} {:>8.2} {:>6.1}x  {}",
                ms(d),
                ms(c),
                ratio,
                goal,
                if ratio <= goal { "yes" } else { "no" }
            );
        }
    });
}
