//! `iterion completions SHELL`: the shell completion script of the whole command line, on stdout.
use std::process::ExitCode;

use clap_complete::Shell;

/// Arguments of `iterion completions`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "EXAMPLES:\n  iterion completions bash > ~/.local/share/bash-completion/completions/iterion\n  \
iterion completions zsh > \"${fpath[1]}/_iterion\"\n  iterion completions fish > ~/.config/fish/completions/iterion.fish\n\n\
EXIT CODES:\n  0 the script was printed; 2 an unknown shell"
)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Shell,
}

/// Prints the completion script of `cmd` (the whole `iterion` command line) for the shell.
pub fn run(args: CompletionsArgs, mut cmd: clap::Command) -> ExitCode {
    clap_complete::generate(args.shell, &mut cmd, "iterion", &mut std::io::stdout());
    ExitCode::SUCCESS
}
