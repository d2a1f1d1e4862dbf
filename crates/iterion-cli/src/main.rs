//! The `iterion` command line.
use clap::Parser;

mod cli;
mod cmd_doctor;
mod cmd_runs;
mod doctor;
mod drivers;
mod relay;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    cli::dispatch(args)
}
