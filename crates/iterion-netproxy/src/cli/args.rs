//! The flags of `serve` and `check` (clap derive), shared by both command lines.

use clap::{Args, Subcommand};
use std::path::PathBuf;

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
    #[command(
        after_help = "EXAMPLES:\n  iterion netproxy serve --preset iterion-default --listen 127.0.0.1:3128 # prints the generated token\n  \
iterion netproxy serve --mode denylist --rule '!*.internal' --token-file token\n  \
iterion netproxy serve --rules-file rules.txt --json                  # the final statistics as JSON on stdout\n\n\
EXIT CODES:\n  0 stopped by SIGINT or SIGTERM; 1 the proxy could not start or failed; 2 a usage error"
    )]
    Serve(Box<ServeArgs>),
    /// Decide targets exactly like the live proxy, without connecting anywhere.
    #[command(
        after_help = "EXAMPLES:\n  iterion netproxy check --preset iterion-default api.github.com example.com\n  \
iterion netproxy check --mode denylist --rule '!169.254.169.254' 169.254.169.254:80\n  \
iterion netproxy check --no-resolve --json --rules-file rules.txt registry.npmjs.org\n\n\
EXIT CODES:\n  0 every target is allowed; 1 a target is denied; 2 a usage error"
    )]
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
    /// TLS inspection with secret substitution; needs at least one --secret.
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
