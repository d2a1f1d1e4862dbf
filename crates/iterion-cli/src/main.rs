//! The `iterion` command line.
use clap::Parser;
use std::collections::BTreeMap;

mod build_secret;
mod claw_runner;
mod cli;
mod cmd_completions;
mod cmd_doctor;
mod cmd_netproxy;
mod cmd_prune;
mod cmd_run;
mod cmd_runs;
mod cmd_validate;
mod dry_run;
mod early;
mod environment;
mod human;
mod probe;
mod render;
mod sandbox_env;
mod terminal;

/// `argv[0]` of this process, read once by `main` (the host kind looks at it for desktop detection).
static ARGV0: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// `argv[0]`, as read by `main`.
pub(crate) fn argv0() -> Option<String> {
    ARGV0.get().cloned().flatten()
}

fn main() -> std::process::ExitCode {
    // `iterion help environment`: a help topic next to clap's help of each command.
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv == ["help", "environment"] {
        print!("{}", environment::text());
        return std::process::ExitCode::SUCCESS;
    }
    let args = cli::Cli::parse();
    let _ = ARGV0.set(
        std::env::args_os()
            .next()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    // The only place the process environment is read; everything below receives this map (names or values
    // that are not valid UTF-8 are left out).
    let env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    cli::dispatch(args, &env)
}
