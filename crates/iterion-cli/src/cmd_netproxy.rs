//! `iterion netproxy serve|check`: the egress proxy on its own (spec 04 §16).

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use iterion_netpolicy::{Policy, Target};
use iterion_netproxy::{
    Credential, DecideOptions, DnsServerResolver, Listen, Proxy, ProxyConfig, ProxyEvent, Resolver,
    SecretBinding, SystemResolver, TlsInspection,
};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// `iterion netproxy`: run or query the egress proxy.
#[derive(Debug, Args)]
pub struct NetproxyArgs {
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
        NetproxyCommand::Serve(a) => serve(*a, env),
        NetproxyCommand::Check(a) => check(a),
    }
}

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

/// `--log-level`: the maximum level of the stderr log.
fn log_level(text: &str) -> Result<tracing_subscriber::filter::LevelFilter, String> {
    use tracing_subscriber::filter::LevelFilter;
    match text.to_ascii_lowercase().as_str() {
        "off" => Ok(LevelFilter::OFF),
        "error" => Ok(LevelFilter::ERROR),
        "warn" => Ok(LevelFilter::WARN),
        "info" => Ok(LevelFilter::INFO),
        "debug" => Ok(LevelFilter::DEBUG),
        "trace" => Ok(LevelFilter::TRACE),
        _ => Err(format!(
            "invalid --log-level '{text}' (want off, error, warn, info, debug or trace)"
        )),
    }
}

/// `--secret NAME=HOST[,HOST...]` with the value of the environment variable `NAME`.
fn secret_binding(spec: &str, env: &BTreeMap<String, String>) -> Result<SecretBinding, String> {
    let Some((name, hosts)) = spec.split_once('=') else {
        return Err(format!("invalid --secret '{spec}' (want NAME=HOST[,HOST...])"));
    };
    let hosts: Vec<&str> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    if name.is_empty() || hosts.is_empty() {
        return Err(format!("invalid --secret '{spec}' (want NAME=HOST[,HOST...])"));
    }
    match env.get(name) {
        Some(value) => Ok(SecretBinding::new(name, value.clone(), &hosts)),
        None => Err(format!(
            "--secret {name}: the environment variable {name} is not set (the value is read from it)"
        )),
    }
}

/// The TLS inspection settings from the flags; every problem is added to `errors`.
fn tls_settings(
    a: &ServeArgs,
    env: &BTreeMap<String, String>,
    errors: &mut Vec<String>,
) -> Option<TlsInspection> {
    if !a.tls_inspect {
        if !a.secrets.is_empty()
            || !a.tls_bypass.is_empty()
            || a.ca_cert.is_some()
            || a.ca_key.is_some()
            || a.ca_out.is_some()
        {
            errors.push(
                "--secret, --tls-bypass, --ca-cert, --ca-key and --ca-out need --tls-inspect".to_owned(),
            );
        }
        return None;
    }
    if a.secrets.is_empty() {
        errors.push("--tls-inspect needs at least one --secret NAME=HOST[,HOST...]".to_owned());
    }
    let mut t = TlsInspection::new();
    for spec in &a.secrets {
        match secret_binding(spec, env) {
            Ok(b) => t = t.binding(b),
            Err(e) => errors.push(e),
        }
    }
    for p in &a.tls_bypass {
        t = t.bypass(p.clone());
    }
    match (&a.ca_cert, &a.ca_key) {
        (Some(cert), Some(key)) => {
            let read = |p: &PathBuf, what: &str, errors: &mut Vec<String>| match std::fs::read_to_string(p) {
                Ok(text) => Some(text),
                Err(e) => {
                    errors.push(format!("cannot read {what} {}: {e}", p.display()));
                    None
                }
            };
            let cert = read(cert, "--ca-cert", errors);
            let key = read(key, "--ca-key", errors);
            if let (Some(cert), Some(key)) = (cert, key) {
                t = t.operator_ca(cert, key);
            }
        }
        (None, None) => {}
        _ => errors.push("--ca-cert and --ca-key go together".to_owned()),
    }
    Some(t)
}

fn serve(a: ServeArgs, env: &BTreeMap<String, String>) -> ExitCode {
    let mut errors = Vec::new();
    let policy = match compile_policy(&a.policy) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            errors.extend(e);
            None
        }
    };
    let tls = tls_settings(&a, env, &mut errors);
    let level = match log_level(&a.log_level) {
        Ok(l) => Some(l),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let listen = match a.listen.parse::<Listen>() {
        Ok(l) => Some(l),
        Err(e) => {
            errors.push(e.to_string());
            None
        }
    };
    if a.no_auth && listen.as_ref().is_some_and(|l| !l.is_local()) {
        errors.push(format!(
            "--no-auth is refused on the non-loopback address {}",
            a.listen
        ));
    }
    let token = match (&a.token, &a.token_file) {
        (Some(t), _) => Some(t.trim().to_owned()),
        (None, Some(path)) => match std::fs::read_to_string(path) {
            Ok(t) => Some(t.trim().to_owned()),
            Err(e) => {
                errors.push(format!("cannot read token file {}: {e}", path.display()));
                None
            }
        },
        (None, None) => None,
    };
    if token.as_ref().is_some_and(|t| t.len() < 16) {
        errors.push("the token must be at least 16 characters".to_owned());
    }
    let mut durations = Vec::new();
    for (flag, value) in [
        ("--idle-timeout", &a.idle_timeout),
        ("--connect-timeout", &a.connect_timeout),
        ("--dns-timeout", &a.dns_timeout),
        ("--header-timeout", &a.header_timeout),
        ("--shutdown-grace", &a.shutdown_grace),
    ] {
        let parsed = value.as_deref().map(|v| (v, parse_duration(v)));
        match parsed {
            Some((v, None)) => errors.push(format!("invalid duration for {flag}: '{v}'")),
            Some((_, Some(d))) => durations.push((flag, Some(d))),
            None => durations.push((flag, None)),
        }
    }
    let resolver = match resolver(&a.policy) {
        Ok(r) => Some(r),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let (Some(policy), Some(listen), Some(resolver), Some(level), true) =
        (policy, listen, resolver, level, errors.is_empty())
    else {
        return usage_errors(&errors);
    };
    // Logs go to stderr; stdout carries only the lines below and `--events -`.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .try_init();
    let generated = token.is_none() && !a.no_auth;
    let token = token.unwrap_or_else(iterion_netproxy::new_token);

    let (ev_tx, ev_rx) = std::sync::mpsc::channel::<EventLine>();
    let ev_done = ev_tx.clone();
    let ev_tx = std::sync::Mutex::new(ev_tx);
    let mut builder = ProxyConfig::builder()
        .listen(listen)
        .resolver(resolver)
        .with_limits(|l| {
            if let Some(n) = a.max_tunnels {
                l.max_tunnels = n;
            }
            if let Some(n) = a.max_connections {
                l.max_connections = n;
            }
            for (flag, d) in &durations {
                let Some(d) = *d else { continue };
                match *flag {
                    "--idle-timeout" => l.tunnel_idle_timeout = d,
                    "--connect-timeout" => l.connect_timeout = d,
                    "--dns-timeout" => l.dns_timeout = d,
                    "--header-timeout" => l.head_timeout = d,
                    _ => l.shutdown_grace = d,
                }
            }
        });
    builder = if a.no_auth {
        builder.no_auth(policy)
    } else {
        builder.credential(Credential::new("iterion", token.clone(), None, policy).accept_any_username())
    };
    if a.no_silent_deny {
        builder = builder.silent_deny::<&str>(&[]);
    } else if !a.silent_deny.is_empty() {
        builder = builder.silent_deny(&a.silent_deny);
    }
    let placeholders: Vec<(String, String)> = tls
        .as_ref()
        .map(|t| {
            t.bindings()
                .iter()
                .map(|b| (b.name().to_owned(), b.placeholder().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    if let Some(t) = tls {
        builder = builder.tls_inspection(t);
    }
    if a.events.is_some() {
        builder = builder.on_event(move |ev| {
            if let Ok(tx) = ev_tx.lock() {
                let _ = tx.send(EventLine::Event(Box::new(ev)));
            }
        });
    }
    let config = match builder.build() {
        Ok(c) => c,
        Err(iterion_netproxy::Error::Config { problems }) => return usage_errors(&problems),
        Err(e) => return usage_errors(&[e.to_string()]),
    };
    let grace = config.limits().shutdown_grace;
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("iterion: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let events_target = a.events.clone();
    let ca_out = a.ca_out.clone();
    let json = a.json;
    let result: Result<()> = runtime.block_on(async move {
        // Watch the signals before anything is announced: a supervisor may stop the proxy as soon as it reads the
        // listen line, and that must be the graceful shutdown, not the default action of the signal.
        let stop = stop_signals()?;
        let proxy = Proxy::start(config).await.context("cannot start the proxy")?;
        // The CA file exists before the lines announcing the proxy are printed.
        if let (Some(path), Some(bundle)) = (&ca_out, proxy.trust_bundle()) {
            std::fs::write(path, &bundle.ca_pem)
                .with_context(|| format!("cannot write the CA certificate to {}", path.display()))?;
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", proxy.listening())?;
        if generated {
            writeln!(out, "proxy {}", proxy.endpoint("iterion", &token))?;
        }
        for (name, placeholder) in &placeholders {
            writeln!(out, "placeholder {name} {placeholder}")?;
        }
        out.flush()?;
        drop(out);
        let writer = match events_target {
            Some(target) => Some(start_event_writer(&target, ev_rx)?),
            None => None,
        };
        stop.await;
        let stats = proxy.shutdown(grace).await;
        // `shutdown` handed every queued event to the channel: write them all before exiting.
        if let Some(writer) = writer {
            let _ = ev_done.send(EventLine::Done);
            let deadline = std::time::Instant::now() + EVENTS_FLUSH;
            while !writer.is_finished() && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        if json {
            eprintln!("{}", serde_json::to_string(&stats)?);
        } else {
            eprintln!(
                "netproxy stopped: {} connections, {} tunnels, {} allowed, {} denied, {} auth failures, {} events dropped, {} bytes up, {} bytes down",
                stats.connections,
                stats.tunnels,
                stats.allowed,
                stats.denied.values().sum::<u64>(),
                stats.auth_failures,
                stats.events_dropped,
                stats.bytes_up,
                stats.bytes_down
            );
        }
        Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("iterion: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// What the event writer receives: an event, or the end of the stream (written everything before it).
enum EventLine {
    Event(Box<ProxyEvent>),
    Done,
}

/// How long the exit waits for the event writer (a consumer that stopped reading `--events -` cannot hold the
/// process).
const EVENTS_FLUSH: Duration = Duration::from_secs(5);

/// Write events as JSON lines (`type`, `ts`, then the fields) on a dedicated thread, until [`EventLine::Done`].
fn start_event_writer(
    target: &str,
    rx: std::sync::mpsc::Receiver<EventLine>,
) -> Result<std::thread::JoinHandle<()>> {
    let mut sink: Box<dyn Write + Send> = if target == "-" {
        Box::new(std::io::stdout())
    } else {
        Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(target)
                .with_context(|| format!("cannot open events file {target}"))?,
        )
    };
    Ok(std::thread::spawn(move || {
        while let Ok(EventLine::Event(ev)) = rx.recv() {
            let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(&*ev) else {
                continue;
            };
            let mut line = serde_json::Map::new();
            if let Some(t) = fields.get("type") {
                line.insert("type".into(), t.clone());
            }
            line.insert("ts".into(), serde_json::Value::String(rfc3339_now()));
            for (k, v) in fields {
                if k != "type" {
                    line.insert(k, v);
                }
            }
            if writeln!(sink, "{}", serde_json::Value::Object(line))
                .and_then(|()| sink.flush())
                .is_err()
            {
                break;
            }
        }
    }))
}

/// The current time as RFC 3339 UTC with milliseconds.
fn rfc3339_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_millis()
    )
}

/// Start watching SIGTERM and SIGINT now; the returned future completes at the first of them.
fn stop_signals() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

fn check(a: CheckArgs) -> ExitCode {
    // Every flag error is listed (§16.2), the resolver's with the policy's.
    let (policy, resolver) = match (compile_policy(&a.policy), resolver(&a.policy)) {
        (Ok(p), Ok(r)) => (p, r),
        (policy, resolver) => {
            let mut errors = policy.err().unwrap_or_default();
            errors.extend(resolver.err());
            return usage_errors(&errors);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("iterion: error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let mut all_allowed = true;
    let mut out = std::io::stdout().lock();
    for text in &a.targets {
        let line = runtime.block_on(check_one(&policy, text, &a, resolver.as_ref()));
        let (allowed, line) = match line {
            Ok(l) => l,
            Err(e) => {
                eprintln!("iterion: error: {e:#}");
                return ExitCode::from(2);
            }
        };
        all_allowed &= allowed;
        if writeln!(out, "{line}").is_err() {
            return ExitCode::from(2);
        }
    }
    if all_allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Decide one target; returns whether it is allowed and the output line.
async fn check_one(
    policy: &Policy,
    text: &str,
    a: &CheckArgs,
    resolver: &dyn Resolver,
) -> Result<(bool, String)> {
    let denied_line = |shown: &str, reason: &str, host: Option<(String, u16)>| -> Result<(bool, String)> {
        if a.json {
            let mut m = serde_json::Map::new();
            m.insert("target".into(), text.into());
            if let Some((h, p)) = host {
                m.insert("host".into(), h.into());
                m.insert("port".into(), p.into());
            }
            m.insert("decision".into(), "deny".into());
            m.insert("reason".into(), reason.into());
            m.insert("rule".into(), "-".into());
            return Ok((false, serde_json::Value::Object(m).to_string()));
        }
        Ok((false, format!("deny {shown} reason=\"{reason}\" rule=\"-\"")))
    };
    let target = match Target::parse_lenient(text, Some(443)) {
        Ok(t) => t,
        Err(_) => return denied_line(&escape_controls(text), "invalid target", None),
    };
    let resolver = if a.no_resolve { None } else { Some(resolver) };
    let decision = match iterion_netproxy::decide(policy, &target, resolver, &DecideOptions::default()).await
    {
        Ok(d) => d,
        Err(e) => {
            let reason = e.to_string();
            return denied_line(
                &target.to_string(),
                &reason,
                Some((target.host.to_string(), target.port)),
            );
        }
    };
    if !a.json {
        return Ok((decision.allowed, decision.to_string()));
    }
    let serde_json::Value::Object(fields) = serde_json::to_value(&decision)? else {
        bail!("decision did not serialise to an object");
    };
    let mut m = serde_json::Map::new();
    m.insert("target".into(), text.into());
    m.extend(fields);
    Ok((decision.allowed, serde_json::Value::Object(m).to_string()))
}

/// An invalid target as given, with control characters (and the Unicode line and paragraph separators) escaped:
/// a target must not be able to start a line of its own (one line per target, §16.2).
fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
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
    fn secret_flags() {
        let env = BTreeMap::from([("GH_TOKEN".to_owned(), "ghp_x".to_owned())]);
        let b = secret_binding("GH_TOKEN=api.github.com, **.githubusercontent.com", &env);
        let b = b.expect("binding");
        assert_eq!(b.name(), "GH_TOKEN");
        assert_eq!(b.hosts(), ["api.github.com", "**.githubusercontent.com"]);
        assert!(secret_binding("GH_TOKEN=", &env).is_err());
        assert!(secret_binding("=api.github.com", &env).is_err());
        assert!(secret_binding("NOPE=api.github.com", &env).is_err());
        assert!(log_level("DEBUG").is_ok());
        assert!(log_level("verbose").is_err());
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let ts = rfc3339_now();
        assert_eq!(
            (ts.len(), &ts[4..5], &ts[10..11], &ts[23..]),
            (24, "-", "T", "Z"),
            "{ts}"
        );
    }
}
