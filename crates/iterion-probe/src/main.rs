//! `iterion-probe`: the boundary probe program of `iterion sandbox doctor --strict --probe`.
//!
//! The doctor bind-mounts it read-only at `/run/iterion/bin/iterion-probe` into its throwaway sandbox and runs
//! one probe per exec: `iterion-probe <probe> --json [options]`, one JSON object on stdout. The same probes
//! are available as `iterion __sandbox-probe` (the CLI calls the library too).
//!
//! Standard library only, no `unsafe`, compiled by its embedder's build script with `+crt-static` so it runs
//! in any image of the engine's architecture, including images without a C library (see the library's docs
//! for why the doctor does not run the dynamically linked iterion binary inside the sandbox).

use std::io::Write as _;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Names or values that are not valid UTF-8 are left out.
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let (code, line) = iterion_probe::run_probe(&args, &env);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
    std::process::exit(code);
}
