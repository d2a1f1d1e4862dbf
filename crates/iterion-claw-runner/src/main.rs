//! The claw runner as a program of its own: `iterion __claw-runner` without the rest of the command line.
//!
//! The host's build compiles it statically (`+crt-static`) and bind-mounts it read-only into sandboxes at
//! `/usr/local/bin/iterion`, so it runs in images without a C library. It answers the two command lines the
//! launcher uses there: `__claw-runner` (the envelope runner over stdin/stdout, see
//! `iterion_claw::runner::run_stdio`) and `--version` (the start probe). Keys, base URLs and the egress proxy
//! come from its process environment only.

use std::collections::BTreeMap;
use std::io::Write as _;

const SOFTWARE: &str = concat!("iterion-claw-runner ", env!("CARGO_PKG_VERSION"));

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["__claw-runner"] => serve(),
        ["--version" | "-V"] => {
            let _ = writeln!(std::io::stdout(), "{SOFTWARE}");
            0
        }
        _ => {
            eprintln!(
                "iterion-claw-runner: usage: iterion __claw-runner (envelopes on stdin/stdout) | iterion --version"
            );
            2
        }
    };
    std::process::exit(code);
}

fn serve() -> i32 {
    // The one read of the process environment; the library receives it as a map.
    let env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("iterion-claw-runner: cannot start the async runtime: {e}");
            return 2;
        }
    };
    runtime.block_on(iterion_claw::runner::run_stdio(env, SOFTWARE))
}
