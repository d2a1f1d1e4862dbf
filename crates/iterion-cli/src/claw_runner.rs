//! The hidden `iterion __claw-runner` command: the claw runner over stdin/stdout (envelopes), as the runtime
//! launches it for a `claw` node on the host or inside a container whose image ships iterion. The logic is
//! `iterion_claw::runner::run_stdio`; keys, base URLs and the egress proxy come from the environment map.

use std::collections::BTreeMap;
use std::process::ExitCode;

/// Arguments of `iterion __claw-runner` (none: everything arrives as envelopes on stdin).
#[derive(Debug, clap::Args)]
pub struct ClawRunnerArgs {}

/// Runs the runner and exits the process with its status (0 success, 1 task error, 2 protocol error).
pub fn run(_args: ClawRunnerArgs, env: &BTreeMap<String, String>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("iterion-claw-runner: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let software = concat!("iterion ", env!("CARGO_PKG_VERSION"));
    let code = runtime.block_on(iterion_claw::runner::run_stdio(env.clone(), software));
    // a blocking read of stdin may still be pending: leave without waiting for it
    std::process::exit(code)
}
