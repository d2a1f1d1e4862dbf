//! Command-line definition and dispatch.
use clap::{Parser, Subcommand};
use std::collections::BTreeMap;
use std::process::ExitCode;

/// iterion: run AI coding workflows inside a per-run sandbox.
#[derive(Debug, Parser)]
#[command(
    name = "iterion",
    version,
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
    #[command(
        after_help = "EXAMPLES:\n  iterion validate review.bot\n  iterion validate --json workflows/*.bot\n  \
iterion validate --syntax-only review.bot     # the language only, not what this version executes\n\n\
EXIT CODES:\n  0 no file has an error; 1 a file has an error; 2 a file cannot be read, or a usage error"
    )]
    Validate(crate::cmd_validate::ValidateArgs),
    /// Run a workflow.
    #[command(
        after_help = "EXAMPLES:\n  iterion run review.bot\n  iterion run review.bot --var pr=42 --timeout 30m\n  \
iterion run review.bot --attach doc=a.pdf      # a file the workflow declares under attachments:\n  \
iterion run review.bot --dry-run               # what the run would do, without doing it\n  \
iterion run review.bot --sandbox none          # on the host, visibly unsandboxed\n  \
iterion run review.bot --json | jq .type       # the events as they are recorded\n\n\
EXIT CODES:\n  0 finished, or paused waiting for human input; 1 failed, cancelled, refused (compile or executability errors, \
setup failures); 2 a usage error; 130/143/129 cancelled by SIGINT/SIGTERM/SIGHUP"
    )]
    Run(crate::cmd_run::RunArgs),
    /// Resume a failed_resumable or cancelled run, or answer a run waiting for human input.
    #[command(
        after_help = "EXAMPLES:\n  iterion resume brisk-otter-d894\n  iterion resume 01a2320f --timeout 1h\n  \
iterion resume RUN --answers-file answers.json # answers for a paused run: {\"approved\": true}\n  \
iterion resume RUN --answer approved=true      # one answer, typed by the node's schema\n  \
iterion resume RUN --force                     # accept a changed workflow or devcontainer.json\n\n\
EXIT CODES:\n  0 finished, or paused again; 1 failed, cancelled, or the resume was refused; 2 a usage error \
(a paused run without answers among them); 130/143/129 cancelled by a signal"
    )]
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
