//! `cargo bench -p iterion-doctor --bench doctor` (run by `cargo xtask bench doctor`): the wall time of the
//! strict battery on `fixtures/doctor/ok-good.bot` as `iterion sandbox doctor --strict <file> --json` runs it
//! (driver selection with engine pings, resolution, every check, the JSON rendering), without `--probe` and
//! with `--probe` (the throwaway sandbox, its proxy, the nine probe execs and the cleanup). Goal (06 §3.3):
//! well under a second without probes on a healthy host. Prints the median, minimum and maximum of
//! `ITERION_BENCH_RUNS` runs (default 15) of each after one warm-up. The probe figure needs the local test
//! image (`cargo xtask images`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use iterion_doctor::{Inputs, checks, doctor_timeout, gather, run};

fn main() {
    let runs: usize = std::env::var("ITERION_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(15);
    let workflow = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/doctor/ok-good.bot");
    let home = std::env::temp_dir().join(format!("iterion-bench-doctor-{}", std::process::id()));
    let mut env: BTreeMap<String, String> = std::env::vars().collect();
    env.insert("ITERION_HOME".into(), home.display().to_string());
    let cwd = std::env::current_dir().expect("the current directory");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    for (label, probe) in [
        ("doctor --strict (no --probe)", false),
        ("doctor --strict --probe", true),
    ] {
        let mut inputs = Inputs::new(env.clone(), cwd.clone());
        inputs.strict = true;
        inputs.probe = probe;
        inputs.workflow = Some(workflow.clone());
        inputs.timeout = doctor_timeout(&env).0;
        let once = || {
            let t = Instant::now();
            let loaded = checks::load(&workflow).expect("load the workflow");
            let report = rt.block_on(async {
                let host = gather(&inputs).await.expect("select the driver");
                run(&inputs, &host, Some(&loaded)).await.expect("the battery")
            });
            let json = report.to_json();
            let elapsed = t.elapsed();
            assert!(!json.is_empty());
            let code = report.exit_code;
            assert!(code == 0 || code == 1, "doctor exit code {code}");
            (elapsed, code)
        };
        let (_, warm_code) = once();
        let mut times: Vec<Duration> = (0..runs).map(|_| once().0).collect();
        times.sort();
        let median = times[times.len() / 2];
        println!(
            "{label}, {runs} runs, exit {warm_code}: median {:.1} ms, min {:.1} ms, max {:.1} ms",
            median.as_secs_f64() * 1e3,
            times[0].as_secs_f64() * 1e3,
            times[times.len() - 1].as_secs_f64() * 1e3
        );
    }
    let _ = std::fs::remove_dir_all(&home);
}
