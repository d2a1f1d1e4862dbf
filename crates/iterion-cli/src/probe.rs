//! The boundary probe program (06 §6) as the hidden `iterion __sandbox-probe` command.
//!
//! It runs the same code as the static program the doctor embeds (the `iterion-probe` library, see
//! `iterion_doctor::probe`): it stays available for images that ship their own iterion and for debugging
//! (`iterion __sandbox-probe dns`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::ExitCode;

use iterion_probe::run_probe;

/// Arguments of `iterion __sandbox-probe`.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// `<probe> [--json] [options]`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Runs `iterion __sandbox-probe`: one JSON line on stdout; exit 0, or 2 on a usage error.
pub fn run(args: ProbeArgs, env: &BTreeMap<String, String>) -> ExitCode {
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let (code, line) = run_probe(&args.args, &env);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
