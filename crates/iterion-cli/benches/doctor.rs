//! `cargo bench -p iterion-cli --bench doctor` (run by `cargo xtask bench doctor`): the wall time of
//! `iterion sandbox doctor --strict <good workflow> --json`, end to end (process start, driver selection with
//! engine pings, resolution, every check), without `--probe` and with `--probe` (the throwaway sandbox, its
//! proxy, the nine probe execs and the cleanup). Goal (06 §3.3): well under a second without probes on a
//! healthy host. Prints the median, minimum and maximum of `ITERION_BENCH_RUNS` runs (default 15) of each
//! after one warm-up. The probe figure needs the local test image (`cargo xtask images`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn main() {
    let runs: usize = std::env::var("ITERION_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(15);
    let workflow = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/doctor/ok-good.bot");
    let home = std::env::temp_dir().join(format!("iterion-bench-doctor-{}", std::process::id()));
    for (label, probe) in [
        ("doctor --strict (no --probe)", false),
        ("doctor --strict --probe", true),
    ] {
        let once = || {
            let t = Instant::now();
            let mut c = Command::new(env!("CARGO_BIN_EXE_iterion"));
            c.args(["sandbox", "doctor", "--strict", "--json"]);
            if probe {
                c.arg("--probe");
            }
            let out = c
                .arg(&workflow)
                .env("ITERION_HOME", &home)
                .output()
                .expect("run iterion");
            let elapsed = t.elapsed();
            let code = out.status.code().unwrap_or(-1);
            assert!(
                code == 0 || code == 1,
                "doctor exited {code}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
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
