//! Command-line definition and dispatch.
use clap::{Parser, Subcommand};
use std::collections::BTreeMap;
use std::process::ExitCode;

/// iterion: run AI coding workflows inside a per-run sandbox.
#[derive(Debug, Parser)]
#[command(
    name = "iterion",
    version,
    about,
    propagate_version = true,
    after_help = "`iterion help environment` lists every environment variable iterion reads, with its default."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Parse and compile workflow files; print every diagnostic.
    Validate(crate::cmd_validate::ValidateArgs),
    /// Run a workflow.
    Run(crate::cmd_run::RunArgs),
    /// Resume a failed_resumable or cancelled run.
    Resume(crate::cmd_run::ResumeArgs),
    /// Inspect the runs of a store.
    Runs(crate::cmd_runs::RunsArgs),
    /// Run or query the egress proxy on its own.
    Netproxy(crate::cmd_netproxy::NetproxyArgs),
    /// Sandbox tools: `iterion sandbox doctor`, `iterion sandbox prune`.
    Sandbox(crate::cmd_doctor::SandboxArgs),
    /// Print the shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(crate::cmd_completions::CompletionsArgs),
    /// The boundary probe program of `sandbox doctor --probe`, run inside sandboxes.
    #[command(name = "__sandbox-probe", hide = true)]
    SandboxProbe(crate::probe::ProbeArgs),
    /// The claw runner: envelopes on stdin/stdout, launched by the runtime for claw nodes.
    #[command(name = "__claw-runner", hide = true)]
    ClawRunner(crate::claw_runner::ClawRunnerArgs),
}

/// Runs the parsed command. `env` is the process environment, read once by `main`.
pub fn dispatch(cli: Cli, env: &BTreeMap<String, String>) -> ExitCode {
    match cli.command {
        Command::Validate(args) => crate::cmd_validate::run(args, env),
        Command::Run(args) => crate::cmd_run::run(args, env),
        Command::Resume(args) => crate::cmd_run::resume(args, env),
        Command::Runs(args) => crate::cmd_runs::run(args, env),
        Command::Netproxy(args) => crate::cmd_netproxy::run(args, env),
        Command::Sandbox(args) => crate::cmd_doctor::run(args, env),
        Command::Completions(args) => {
            crate::cmd_completions::run(args, <Cli as clap::CommandFactory>::command())
        }
        Command::SandboxProbe(args) => crate::probe::run(args, env),
        Command::ClawRunner(args) => crate::claw_runner::run(args, env),
    }
}
