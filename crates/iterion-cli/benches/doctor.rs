//! `cargo bench -p iterion-cli --bench doctor` (run by `cargo xtask bench doctor`): the wall time of
//! `iterion sandbox doctor --strict <good workflow> --json` without `--probe`, end to end (process start, driver
//! selection with engine pings, resolution, every check). Goal (06 §3.3): well under a second on a healthy
//! host. Prints the median, minimum and maximum of `ITERION_BENCH_RUNS` runs (default 15) after one warm-up.

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
    let once = || {
        let t = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_iterion"))
            .args(["sandbox", "doctor", "--strict", "--json"])
            .arg(&workflow)
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
        "doctor --strict (no --probe), {runs} runs, exit {warm_code}: median {:.1} ms, min {:.1} ms, max {:.1} ms",
        median.as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3
    );
}
