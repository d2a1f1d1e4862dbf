//! `serve`: validate every flag, build the configuration, serve until SIGINT or SIGTERM, print the statistics.

use super::args::ServeArgs;
use super::common::{chain, compile_policy, context, parse_duration, resolver, usage_errors};
use super::events::{EVENTS_FLUSH, EventLine, start_event_writer};
use super::flags::{log_level, tls_settings};
use crate::{Credential, Limits, Listen, Policy, Proxy, ProxyConfig, Resolver, Stats, TlsInspection};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;
use tracing_subscriber::filter::LevelFilter;

/// `serve`: exit 0 after a graceful stop, 1 when the proxy cannot run, 2 on a usage error.
pub(super) fn serve(a: ServeArgs, env: &BTreeMap<String, String>) -> ExitCode {
    let settings = match Settings::from_flags(&a, env) {
        Ok(s) => s,
        Err(errors) => return usage_errors(&errors),
    };
    // Logs go to stderr; stdout carries only the announcement lines and `--events -`.
    // Colour only on a terminal, and never under NO_COLOR.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && env.get("NO_COLOR").is_none_or(|v| v.is_empty());
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_max_level(settings.level)
        .with_target(false)
        .try_init();
    let generated = settings.token.is_none() && !a.no_auth;
    let token = settings.token.clone().unwrap_or_else(crate::new_token);
    let (ev_tx, ev_rx) = std::sync::mpsc::channel::<EventLine>();
    let ev_done = ev_tx.clone();
    let (config, placeholders) = match build_config(&a, settings, &token, ev_tx) {
        Ok(c) => c,
        Err(problems) => return usage_errors(&problems),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let announce = Announce {
        token: generated.then_some(token),
        placeholders,
        ca_out: a.ca_out.clone(),
    };
    let events = a.events.clone().map(|target| Events {
        target,
        rx: ev_rx,
        done: ev_done,
    });
    match runtime.block_on(run(config, announce, events, a.json)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The flags that needed checking, checked: every problem is listed at once.
struct Settings {
    policy: Arc<Policy>,
    tls: Option<TlsInspection>,
    level: LevelFilter,
    listen: Listen,
    token: Option<String>,
    durations: Vec<(&'static str, Duration)>,
    resolver: Arc<dyn Resolver>,
}

impl Settings {
    fn from_flags(a: &ServeArgs, env: &BTreeMap<String, String>) -> Result<Self, Vec<String>> {
        let mut errors = Vec::new();
        let policy = match compile_policy(&a.policy) {
            Ok(p) => Some(Arc::new(p)),
            Err(e) => {
                errors.extend(e);
                None
            }
        };
        let tls = tls_settings(a, env, &mut errors);
        let level = keep(log_level(&a.log_level), &mut errors);
        let listen = keep(a.listen.parse::<Listen>().map_err(|e| e.to_string()), &mut errors);
        if a.no_auth && listen.as_ref().is_some_and(|l| !l.is_local()) {
            errors.push(format!(
                "--no-auth is refused on the non-loopback address {}",
                a.listen
            ));
        }
        let token = token(a, &mut errors);
        let durations = durations(a, &mut errors);
        let resolver = keep(resolver(&a.policy), &mut errors);
        match (policy, listen, resolver, level) {
            (Some(policy), Some(listen), Some(resolver), Some(level)) if errors.is_empty() => Ok(Self {
                policy,
                tls,
                level,
                listen,
                token,
                durations,
                resolver,
            }),
            _ => Err(errors),
        }
    }
}

/// The value of `r`, or `None` with its error added to `errors`.
fn keep<T>(r: Result<T, String>, errors: &mut Vec<String>) -> Option<T> {
    r.map_err(|e| errors.push(e)).ok()
}

/// `--token` or `--token-file` (trimmed; at least 16 characters).
fn token(a: &ServeArgs, errors: &mut Vec<String>) -> Option<String> {
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
    token
}

/// The duration flags that were given, parsed.
fn durations(a: &ServeArgs, errors: &mut Vec<String>) -> Vec<(&'static str, Duration)> {
    let mut durations = Vec::new();
    for (flag, value) in [
        ("--idle-timeout", &a.idle_timeout),
        ("--connect-timeout", &a.connect_timeout),
        ("--dns-timeout", &a.dns_timeout),
        ("--header-timeout", &a.header_timeout),
        ("--shutdown-grace", &a.shutdown_grace),
    ] {
        if let Some(v) = value.as_deref() {
            match parse_duration(v) {
                Some(d) => durations.push((flag, d)),
                None => errors.push(format!("invalid duration for {flag}: '{v}'")),
            }
        }
    }
    durations
}

/// The limit flags applied over the defaults.
fn apply_limits(l: &mut Limits, a: &ServeArgs, durations: &[(&'static str, Duration)]) {
    if let Some(n) = a.max_tunnels {
        l.max_tunnels = n;
    }
    if let Some(n) = a.max_connections {
        l.max_connections = n;
    }
    for (flag, d) in durations {
        match *flag {
            "--idle-timeout" => l.tunnel_idle_timeout = *d,
            "--connect-timeout" => l.connect_timeout = *d,
            "--dns-timeout" => l.dns_timeout = *d,
            "--header-timeout" => l.head_timeout = *d,
            _ => l.shutdown_grace = *d,
        }
    }
}

/// `(name, placeholder)` of each secret binding, printed once the proxy listens.
type Placeholders = Vec<(String, String)>;

/// The proxy configuration and the `(name, placeholder)` pairs of the secret bindings; `Err`: the problems of
/// the configuration, printed as usage errors.
fn build_config(
    a: &ServeArgs,
    s: Settings,
    token: &str,
    events: Sender<EventLine>,
) -> Result<(ProxyConfig, Placeholders), Vec<String>> {
    let mut builder = ProxyConfig::builder()
        .listen(s.listen)
        .resolver(s.resolver)
        .with_limits(|l| apply_limits(l, a, &s.durations));
    builder = if a.no_auth {
        builder.no_auth(s.policy)
    } else {
        builder.credential(Credential::new("iterion", token.to_owned(), None, s.policy).accept_any_username())
    };
    // a refused client of the standalone proxy is told about the flag, not the workflow field
    builder = builder.rules_hint("a --rule of this proxy");
    if a.no_silent_deny {
        builder = builder.silent_deny::<&str>(&[]);
    } else if !a.silent_deny.is_empty() {
        builder = builder.silent_deny(&a.silent_deny);
    }
    let placeholders: Placeholders = s
        .tls
        .as_ref()
        .map(|t| {
            t.bindings()
                .iter()
                .map(|b| (b.name().to_owned(), b.placeholder().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    if let Some(t) = s.tls {
        builder = builder.tls_inspection(t);
    }
    if a.events.is_some() {
        let events = std::sync::Mutex::new(events);
        builder = builder.on_event(move |ev| {
            if let Ok(tx) = events.lock() {
                let _ = tx.send(EventLine::Event(Box::new(ev)));
            }
        });
    }
    match builder.build() {
        Ok(c) => Ok((c, placeholders)),
        Err(crate::Error::Config { problems }) => Err(problems),
        Err(e) => Err(vec![e.to_string()]),
    }
}

/// What is printed on stdout once the proxy listens.
struct Announce {
    /// The generated token (`proxy <url>` line); `None` when the operator gave one or disabled authentication.
    token: Option<String>,
    placeholders: Placeholders,
    ca_out: Option<PathBuf>,
}

/// `--events`: where the event lines go, their channel, and the sender that marks the end.
struct Events {
    target: String,
    rx: Receiver<EventLine>,
    done: Sender<EventLine>,
}

/// Serve until SIGINT or SIGTERM, then shut down within the grace and print the statistics on stderr.
async fn run(
    config: ProxyConfig,
    announce: Announce,
    events: Option<Events>,
    json: bool,
) -> Result<(), String> {
    let grace = config.limits().shutdown_grace;
    // Watch the signals before anything is announced: a supervisor may stop the proxy as soon as it reads the
    // listen line, and that must be the graceful shutdown, not the default action of the signal.
    let stop = stop_signals()?;
    let proxy = Proxy::start(config)
        .await
        .map_err(|e| context("cannot start the proxy", &e))?;
    // The CA file exists before the lines announcing the proxy are printed.
    if let (Some(path), Some(bundle)) = (&announce.ca_out, proxy.trust_bundle()) {
        std::fs::write(path, &bundle.ca_pem).map_err(|e| {
            context(
                format_args!("cannot write the CA certificate to {}", path.display()),
                &e,
            )
        })?;
    }
    print_announcement(&proxy, &announce).map_err(|e| chain(&e))?;
    let writer = match events {
        Some(ev) => Some((start_event_writer(&ev.target, ev.rx)?, ev.done)),
        None => None,
    };
    stop.await;
    let stats = proxy.shutdown(grace).await;
    // `shutdown` handed every queued event to the channel: write them all before exiting.
    if let Some((writer, done)) = writer {
        let _ = done.send(EventLine::Done);
        let deadline = std::time::Instant::now() + EVENTS_FLUSH;
        while !writer.is_finished() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    print_stats(&stats, json)
}

/// `listening on …`, then `proxy <url>` for a generated token and one `placeholder NAME VALUE` per binding.
fn print_announcement(proxy: &crate::RunningProxy, announce: &Announce) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {}", proxy.listening())?;
    if let Some(token) = &announce.token {
        writeln!(out, "proxy {}", proxy.endpoint("iterion", token))?;
    }
    for (name, placeholder) in &announce.placeholders {
        writeln!(out, "placeholder {name} {placeholder}")?;
    }
    out.flush()
}

/// The final statistics: one summary line on stderr, or JSON on stdout with `--json`.
fn print_stats(stats: &Stats, json: bool) -> Result<(), String> {
    if json {
        println!("{}", serde_json::to_string(stats).map_err(|e| chain(&e))?);
    } else {
        eprintln!(
            "netproxy stopped: {} connections, {} tunnels, {} allowed, {} denied, {} dns failures, {} auth failures, {} events dropped, {} bytes up, {} bytes down",
            stats.connections,
            stats.tunnels,
            stats.allowed,
            stats.denied.values().sum::<u64>(),
            stats.dns_failures,
            stats.auth_failures,
            stats.events_dropped,
            stats.bytes_up,
            stats.bytes_down
        );
    }
    Ok(())
}

/// Start watching SIGTERM and SIGINT now; the returned future completes at the first of them.
fn stop_signals() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| context("cannot watch SIGTERM", &e))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| context("cannot watch SIGINT", &e))?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
