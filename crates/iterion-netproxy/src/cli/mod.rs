//! The command line of the proxy (feature `cli`): `serve` and `check`, shared by the `iterion-netproxy` binary
//! and `iterion netproxy`.
//!
//! [`run`] takes the parsed flags and the process environment as a map (read once by the caller's `main`; the
//! only other environment read is clap's own `--token` fallback to `ITERION_NETPROXY_TOKEN`, during parsing).
//! Exit codes: 0 success (`check`: every target allowed), 1 failure (`check`: a target denied), 2 usage error.

mod check;
mod events;
mod flags;
mod serve;

use crate::{DnsServerResolver, Resolver, SystemResolver};
use clap::{Args, Subcommand};
use iterion_netpolicy::Policy;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// `iterion netproxy`: run or query the egress proxy.
#[derive(Debug, Args)]
pub struct NetproxyArgs {
    /// The subcommand.
    #[command(subcommand)]
    pub command: NetproxyCommand,
}

/// The `netproxy` subcommands.
#[derive(Debug, Subcommand)]
pub enum NetproxyCommand {
    /// Serve the egress proxy until SIGINT or SIGTERM.
    Serve(Box<ServeArgs>),
    /// Decide targets exactly like the live proxy, without connecting anywhere.
    Check(CheckArgs),
}

/// The policy flags shared by `serve` and `check`.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Policy mode: allowlist, denylist or open.
    #[arg(long, default_value = "allowlist")]
    pub mode: String,
    /// Preset expanded before the rules (repeatable, in order).
    #[arg(long = "preset", value_name = "NAME")]
    pub presets: Vec<String>,
    /// Rule (repeatable; order matters: the last match wins).
    #[arg(long = "rule", value_name = "RULE")]
    pub rules: Vec<String>,
    /// File with one rule per line (`#` comments and blank lines ignored); after presets, before --rule.
    #[arg(long, value_name = "PATH")]
    pub rules_file: Option<PathBuf>,
    /// Resolve names with this DNS server only (IP[:PORT]).
    #[arg(long, value_name = "IP[:PORT]")]
    pub dns_server: Option<String>,
}

/// `iterion netproxy serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The policy flags.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// IP:PORT, [IPv6]:PORT or unix:/path.
    #[arg(long, default_value = "127.0.0.1:3128")]
    pub listen: String,
    /// The proxy token (visible in the process list: prefer --token-file or ITERION_NETPROXY_TOKEN).
    #[arg(long, env = "ITERION_NETPROXY_TOKEN", hide_env_values = true, conflicts_with_all = ["token_file", "no_auth"])]
    pub token: Option<String>,
    /// Read the token from this file (trimmed).
    #[arg(long, value_name = "PATH", conflicts_with = "no_auth")]
    pub token_file: Option<PathBuf>,
    /// No authentication (only on a loopback address or a Unix socket).
    #[arg(long)]
    pub no_auth: bool,
    /// Write events as JSON lines to FILE, or `-` for stdout.
    #[arg(long, value_name = "FILE|-")]
    pub events: Option<String>,
    /// Silent-deny pattern (repeatable; replaces the default list).
    #[arg(
        long = "silent-deny",
        value_name = "PATTERN",
        conflicts_with = "no_silent_deny"
    )]
    pub silent_deny: Vec<String>,
    /// Disable the silent-deny list.
    #[arg(long)]
    pub no_silent_deny: bool,
    /// Concurrent tunnels (default 1024).
    #[arg(long, value_name = "N")]
    pub max_tunnels: Option<usize>,
    /// Concurrent client connections (default 4096).
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Tunnel idle timeout (default 10m).
    #[arg(long, value_name = "DUR")]
    pub idle_timeout: Option<String>,
    /// Upstream connect timeout (default 10s).
    #[arg(long, value_name = "DUR")]
    pub connect_timeout: Option<String>,
    /// DNS timeout (default 5s).
    #[arg(long, value_name = "DUR")]
    pub dns_timeout: Option<String>,
    /// Request head timeout (default 10s).
    #[arg(long, value_name = "DUR")]
    pub header_timeout: Option<String>,
    /// Grace for in-flight work at shutdown (default 5s).
    #[arg(long, value_name = "DUR")]
    pub shutdown_grace: Option<String>,
    /// TLS inspection with secret substitution (spec 04 §14); needs at least one --secret.
    #[arg(long)]
    pub tls_inspect: bool,
    /// Secret binding NAME=HOST[,HOST...]: the value is read from the environment variable NAME, the sandbox
    /// uses the printed placeholder (repeatable; needs --tls-inspect).
    #[arg(long = "secret", value_name = "NAME=HOSTS")]
    pub secrets: Vec<String>,
    /// Hosts never intercepted (needs --tls-inspect).
    #[arg(long = "tls-bypass", value_name = "PATTERN")]
    pub tls_bypass: Vec<String>,
    /// Operator CA certificate (needs --tls-inspect).
    #[arg(long, value_name = "PATH")]
    pub ca_cert: Option<PathBuf>,
    /// Operator CA key (needs --tls-inspect).
    #[arg(long, value_name = "PATH")]
    pub ca_key: Option<PathBuf>,
    /// Write the CA certificate here (needs --tls-inspect).
    #[arg(long, value_name = "PATH")]
    pub ca_out: Option<PathBuf>,
    /// Log level on stderr: off, error, warn, info, debug or trace.
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    pub log_level: String,
    /// Print the final statistics as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `iterion netproxy check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The policy flags.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Decide names on the policy alone (no resolution, no address stage for names).
    #[arg(long)]
    pub no_resolve: bool,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// host, host:port, an IPv4 literal in any spelling, [IPv6], [IPv6]:port or a bare IPv6 literal (port 443).
    #[arg(required = true, value_name = "TARGET")]
    pub targets: Vec<String>,
}

/// Run `iterion netproxy …`. `env` is the process environment (`--secret NAME=…` reads `NAME` from it).
pub fn run(args: NetproxyArgs, env: &BTreeMap<String, String>) -> ExitCode {
    match args.command {
        NetproxyCommand::Serve(a) => serve::serve(*a, env),
        NetproxyCommand::Check(a) => check::check(a),
    }
}

/// Print every usage error on stderr; exit code 2.
fn usage_errors(errors: &[String]) -> ExitCode {
    for e in errors {
        eprintln!("{e}");
    }
    ExitCode::from(2)
}

/// Compile the policy from the flags; every error is returned.
fn compile_policy(p: &PolicyArgs) -> Result<Policy, Vec<String>> {
    let mut rules: Vec<String> = Vec::new();
    // An unreadable rules file is one problem among the others: the mode, presets and --rule values are still
    // checked so that one run lists everything to fix.
    let mut problems: Vec<String> = Vec::new();
    if let Some(path) = &p.rules_file {
        match std::fs::read_to_string(path) {
            Ok(text) => rules.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_owned),
            ),
            Err(e) => problems.push(format!("cannot read rules file {}: {e}", path.display())),
        }
    }
    rules.extend(p.rules.iter().cloned());
    let presets: Vec<&str> = p.presets.iter().map(String::as_str).collect();
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    match Policy::compile_str(&p.mode, &presets, &rules) {
        Ok(policy) if problems.is_empty() => Ok(policy),
        Ok(_) => Err(problems),
        Err(errors) => {
            problems.extend(errors.iter().map(ToString::to_string));
            Err(problems)
        }
    }
}

/// The resolver of `--dns-server`, or the system resolver.
fn resolver(p: &PolicyArgs) -> Result<Arc<dyn Resolver>, String> {
    let Some(server) = &p.dns_server else {
        return Ok(Arc::new(SystemResolver));
    };
    let addr = match server.parse::<SocketAddr>() {
        Ok(a) => a,
        Err(_) => match server.trim_matches(['[', ']']).parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, 53),
            Err(_) => return Err(format!("invalid --dns-server '{server}' (want IP or IP:PORT)")),
        },
    };
    DnsServerResolver::new(addr)
        .map(|r| Arc::new(r) as Arc<dyn Resolver>)
        .map_err(|e| e.to_string())
}

/// Duration syntax of spec 01 §4.2: one or more `<number><unit>`, units `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`.
fn parse_duration(s: &str) -> Option<Duration> {
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let (unit, len) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .iter()
        .filter(|(u, _)| rest.starts_with(u))
        .map(|(u, f)| (*f, u.len()))
        .max_by_key(|(_, l)| *l)?;
        total += value * unit;
        rest = &rest[len..];
    }
    (total.is_finite() && total >= 0.0).then(|| Duration::from_secs_f64(total))
}

/// The chain of an error and its sources, joined by `: ` (the way failures are printed).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// `what: error: sources…`.
fn context(what: impl std::fmt::Display, e: &dyn std::error::Error) -> String {
    format!("{what}: {}", chain(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_dur(input: &str, expect: Option<f64>) {
        assert_eq!(parse_duration(input).map(|d| d.as_secs_f64()), expect, "{input}");
    }

    #[test]
    fn durations() {
        check_dur("90s", Some(90.0));
        check_dur("1h30m", Some(5400.0));
        check_dur("1.5h", Some(5400.0));
        check_dur("250ms", Some(0.25));
        check_dur("10", None);
        check_dur("", None);
        check_dur("5x", None);
    }

    #[test]
    fn failures_print_their_sources() {
        let e = crate::Error::Bind {
            listen: "127.0.0.1:1".into(),
            source: std::io::Error::other("in use"),
        };
        assert_eq!(
            context("cannot start the proxy", &e),
            "cannot start the proxy: cannot listen on 127.0.0.1:1: in use"
        );
    }
}
