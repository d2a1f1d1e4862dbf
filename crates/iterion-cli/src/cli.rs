//! Command-line definition and dispatch.
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// iterion: run AI coding workflows inside a per-run sandbox.
#[derive(Debug, Parser)]
#[command(name = "iterion", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Parse and compile workflow files; print every diagnostic.
    Validate {
        /// Workflow files (.bot / .iter).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// One JSON object per file, one per line.
        #[arg(long)]
        json: bool,
    },
    /// Inspect the runs of a store.
    Runs(crate::cmd_runs::RunsArgs),
    /// Sandbox tools: `iterion sandbox doctor`.
    Sandbox(crate::cmd_doctor::SandboxArgs),
}

pub fn dispatch(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Validate { files, json } => {
            let _ = (files, json);
            eprintln!("iterion: error: validate is not built yet");
            ExitCode::from(2)
        }
        Command::Runs(args) => {
            let env: std::collections::BTreeMap<String, String> = std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect();
            crate::cmd_runs::run(args, &env)
        }
        Command::Sandbox(args) => {
            let env: std::collections::BTreeMap<String, String> = std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect();
            crate::cmd_doctor::run(args, &env)
        }
    }
}
