//! The `iterion` command line.
use clap::Parser;
use std::collections::BTreeMap;

mod cli;
mod cmd_doctor;
mod cmd_netproxy;
mod cmd_run;
mod cmd_runs;
mod cmd_validate;
mod doctor;
mod drivers;
mod probe;
mod relay;
mod render;
mod terminal;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    // The only place the process environment is read; everything below receives this map (names or values
    // that are not valid UTF-8 are left out).
    let env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    cli::dispatch(args, &env)
}
