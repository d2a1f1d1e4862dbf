//! The command line of the proxy (feature `cli`): `serve` and `check`, shared by the `iterion-netproxy` binary
//! and `iterion netproxy`.
//!
//! [`run`] takes the parsed flags and the process environment as a map (read once by the caller's `main`; the
//! only other environment read is clap's own `--token` fallback to `ITERION_NETPROXY_TOKEN`, during parsing).
//! Exit codes: 0 success (`check`: every target allowed), 1 failure (`check`: a target denied), 2 usage error.
//!
//! Modules, each importing only those before it: `args` (the clap types), `common`, `flags`, `events`, then
//! `serve` and `check`; this module only dispatches.

mod args;
mod check;
mod common;
mod events;
mod flags;
mod serve;

pub use args::{CheckArgs, NetproxyArgs, NetproxyCommand, PolicyArgs, ServeArgs};
use std::collections::BTreeMap;
use std::process::ExitCode;

/// Run `iterion netproxy …`. `env` is the process environment (`--secret NAME=…` reads `NAME` from it).
pub fn run(args: NetproxyArgs, env: &BTreeMap<String, String>) -> ExitCode {
    match args.command {
        NetproxyCommand::Serve(a) => serve::serve(*a, env),
        NetproxyCommand::Check(a) => check::check(a),
    }
}
