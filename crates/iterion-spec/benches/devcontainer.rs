//! Reading a hostile `devcontainer.json`: one object with hundreds of thousands of `containerEnv` keys
//! (every tenth repeated), the shape that made the former repeated-key scan quadratic. Times the JSONC reader
//! alone and the whole `load` (read, map, expand, validate) on the same file; `cargo xtask bench
//! devcontainer` runs it.
//!
//! Arguments: `[KEYS] [ITERATIONS]` (defaults 700000 and 3). Prints the file size and, per stage, the median
//! and fastest wall-clock run (each includes dropping its result).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use iterion_spec::devcontainer::{LoadContext, MemReader, load, parse_jsonc};

fn file(keys: usize) -> String {
    let mut s = String::from("{\"image\": \"busybox\", \"containerEnv\": {");
    for i in 0..keys {
        s.push_str(&format!("\"K{i}\":\"v\",\n"));
    }
    for i in (0..keys).step_by(10) {
        s.push_str(&format!("\"K{i}\":\"w\",\n"));
    }
    s.push_str("\"END\":\"v\"}}\n");
    s
}

fn time(iters: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    f();
    let mut runs: Vec<Duration> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    runs.sort();
    (runs[runs.len() / 2], runs[0])
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    // `cargo bench` passes `--bench`; under `cargo test --all-targets` the target only runs once, small, as a
    // smoke test of the measuring code.
    let measuring = std::env::args().any(|a| a == "--bench");
    let keys: usize =
        args.first()
            .and_then(|a| a.parse().ok())
            .unwrap_or(if measuring { 700_000 } else { 5_000 });
    let iters: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(if measuring { 3 } else { 1 })
        .max(1);
    let text = file(keys);
    println!(
        "devcontainer.json: {keys} containerEnv keys (+{} repeated), {:.1} MB, {iters} timed runs",
        keys.div_ceil(10),
        text.len() as f64 / 1e6
    );
    let (med, min) = time(iters, || {
        let p = parse_jsonc(&text).expect("valid JSONC");
        assert_eq!(p.duplicates.len(), keys.div_ceil(10));
    });
    println!(
        "  jsonc parse   median {:>8.1} ms   min {:>8.1} ms",
        ms(med),
        ms(min)
    );
    let reader = MemReader::new().with_file("/repo/.devcontainer.json", text.clone());
    let env = BTreeMap::new();
    let (med, min) = time(iters, || {
        let ctx = LoadContext {
            repo_root: Path::new("/repo"),
            env: &env,
            host_workspace: "/repo",
            reader: &reader,
        };
        let out = load(&ctx);
        assert!(out.spec.is_some() || !out.diagnostics.is_empty());
    });
    println!(
        "  load (all)    median {:>8.1} ms   min {:>8.1} ms",
        ms(med),
        ms(min)
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
