//! `iterion netproxy serve|check`: the egress proxy on its own, the command line of
//! [`iterion_netproxy::cli`] (the same as the `iterion-netproxy` binary).

pub use iterion_netproxy::cli::NetproxyArgs;
use std::collections::BTreeMap;
use std::process::ExitCode;

/// Run `iterion netproxy …`. `env` is the process environment (`--secret NAME=…` reads `NAME` from it).
pub fn run(args: NetproxyArgs, env: &BTreeMap<String, String>) -> ExitCode {
    iterion_netproxy::cli::run(args, env)
}
