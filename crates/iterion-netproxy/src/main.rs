//! `iterion-netproxy`: the egress proxy on its own (`serve`, `check`), the same command line as
//! `iterion netproxy`.
use clap::Parser;
use std::collections::BTreeMap;

/// The iterion egress proxy: serve it, or decide targets exactly like it without connecting.
#[derive(Debug, Parser)]
#[command(name = "iterion-netproxy", version, about)]
struct Cli {
    #[command(subcommand)]
    command: iterion_netproxy::cli::NetproxyCommand,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The only place the process environment is read; `serve --secret NAME=…` takes the value from this map
    // (names or values that are not valid UTF-8 are left out).
    let env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let args = iterion_netproxy::cli::NetproxyArgs { command: cli.command };
    iterion_netproxy::cli::run(args, &env)
}
