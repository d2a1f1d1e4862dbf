//! `iterion run FILE` and `iterion resume --run-id ID` (05 §11): flags, human output, `--json`, exit codes.
//!
//! Exit codes (05 §11.4): 0 finished; 1 failed, failed_resumable, cancelled, compile or executability errors,
//! a locked run, a refused resume, internal errors; 2 usage errors (bad flags or values, unknown `--var`,
//! missing workflow file, invalid sandbox environment variables).
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iterion_driver::DriverKind;
use iterion_runtime::api::Runtime;
use iterion_runtime::events::Event;
use iterion_runtime::exec::{ExecBounds, parse_var};
use iterion_runtime::lifecycle::{
    Cancel, DriverChoice, HostFacts, Launch, Observer, Outcome, Resume, SandboxFlags,
};
use iterion_runtime::status::RunStatus;
use iterion_runtime::store::{self, Appended, RunId, StoreDirRequest};
use iterion_spec::diag::Diagnostic;
use iterion_spec::resolve::ModeChoice;
use iterion_spec::resolved::HostState;

use crate::terminal::clean;

/// `auto` or `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// Isolate if you can.
    Auto,
    /// No sandbox.
    None,
}

/// Sandbox flags shared by `run` and `resume`.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// Sandbox mode (01 §8.2).
    #[arg(long, value_enum, value_name = "MODE")]
    pub sandbox: Option<ModeArg>,
    /// Fallback image for `auto` without a devcontainer.json.
    #[arg(long, value_name = "REF")]
    pub sandbox_default_image: Option<String>,
    /// Mount host state (`auto`) or not (`none`).
    #[arg(long, value_enum, value_name = "VALUE")]
    pub sandbox_host_state: Option<ModeArg>,
    /// Force a driver: docker, podman, kubernetes, noop (default: `ITERION_SANDBOX_DRIVER`).
    #[arg(long, value_name = "NAME")]
    pub sandbox_driver: Option<String>,
    /// Operator environment entry for the containers: `NAME` (copied) or `NAME=VALUE` (pass-class names only).
    #[arg(long, value_name = "NAME[=VALUE]")]
    pub sandbox_env: Vec<String>,
}

/// Arguments of `iterion run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The workflow file (.bot / .iter).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Set a workflow var (repeatable).
    #[arg(long = "var", value_name = "KEY=VALUE")]
    pub vars: Vec<String>,
    /// Apply a preset of the workflow.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Run id (default: a new UUIDv7).
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Run store directory.
    #[arg(long, value_name = "DIR")]
    pub store_dir: Option<PathBuf>,
    /// Work dir (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Invocation deadline (`90s`, `10m`, `1h30m`).
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Log level: error, warn, info, debug, trace (default: `ITERION_LOG_LEVEL`, else info).
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Print the run's events as JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `iterion resume`.
#[derive(Debug, Clone, clap::Args)]
pub struct ResumeArgs {
    /// The run to resume.
    #[arg(long, value_name = "ID", required = true)]
    pub run_id: String,
    /// Run store directory.
    #[arg(long, value_name = "DIR")]
    pub store_dir: Option<PathBuf>,
    /// Workflow file (default: the recorded one).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Accept a changed workflow or devcontainer.json.
    #[arg(long)]
    pub force: bool,
    /// Invocation deadline.
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Log level.
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Print the run's events as JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// A usage error (exit 2) or another error before the run record exists (exit 1).
struct Early {
    code: u8,
    message: String,
    diagnostics: Option<(Vec<Diagnostic>, String)>,
}

fn usage(message: impl Into<String>) -> Early {
    Early {
        code: 2,
        message: message.into(),
        diagnostics: None,
    }
}

fn fail1(message: impl Into<String>) -> Early {
    Early {
        code: 1,
        message: message.into(),
        diagnostics: None,
    }
}

fn report_early(e: Early, json: bool) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match (&e.diagnostics, json) {
        (Some((diags, _)), true) => {
            let list: Vec<serde_json::Value> = diags
                .iter()
                .map(|d| {
                    let mut v = serde_json::json!({"code": d.code, "severity": d.severity, "file": d.file,
                        "line": d.line, "col": d.col, "message": d.message});
                    if let Some(h) = &d.hint {
                        v["hint"] = serde_json::Value::from(h.clone());
                    }
                    v
                })
                .collect();
            let _ = writeln!(
                out,
                "{}",
                serde_json::json!({"error": "compile failed", "diagnostics": list})
            );
        }
        (Some((diags, src)), false) => {
            for d in diags {
                eprintln!("{}", crate::render::render(d, Some(src)));
            }
            eprintln!("error: {}", clean(&e.message));
        }
        (None, true) => {
            let _ = writeln!(out, "{}", serde_json::json!({"error": e.message}));
        }
        (None, false) => eprintln!("error: {}", clean(&e.message)),
    }
    ExitCode::from(e.code)
}

/// Loads `.env` (05 §11.1): the first `.env` found walking up from `cwd`; variables already set win; names
/// starting with `ITERION_` are ignored with a warning.
pub fn load_dotenv(env: &mut BTreeMap<String, String>, cwd: &Path, warnings: &mut Vec<String>) {
    let Some(file) = cwd.ancestors().map(|d| d.join(".env")).find(|p| p.is_file()) else {
        return;
    };
    let Ok(bytes) =
        iterion_spec::source::read_regular(&file, iterion_spec::source::MAX_FILE_BYTES).into_bytes()
    else {
        return;
    };
    let text = String::from_utf8_lossy(&bytes);
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim();
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(v);
        if k.starts_with("ITERION_") {
            warnings.push(format!(
                "{}: {k} ignored (ITERION_* variables cannot be set from a .env file)",
                file.display()
            ));
            continue;
        }
        env.entry(k.to_owned()).or_insert_with(|| v.to_owned());
    }
}

fn log_level(flag: Option<&str>, env: &BTreeMap<String, String>) -> Result<u8, Early> {
    let v = flag
        .map(str::to_owned)
        .or_else(|| env.get("ITERION_LOG_LEVEL").cloned())
        .unwrap_or_else(|| "info".into());
    match v.trim().to_ascii_lowercase().as_str() {
        "error" => Ok(0),
        "warn" => Ok(1),
        "info" | "" => Ok(2),
        "debug" => Ok(3),
        "trace" => Ok(4),
        other => Err(usage(format!(
            "invalid log level '{other}' (want error, warn, info, debug or trace)"
        ))),
    }
}

/// The pre-flight of 06 §9 (`ITERION_SANDBOX_PREFLIGHT`): the strict doctor battery against the spec this run
/// would use, before any run record exists. `Ok(Some(code))` = stop with that exit code.
async fn preflight(
    env: &BTreeMap<String, String>,
    work_dir: &Path,
    file: &Path,
    flags: &SandboxFlags,
    json: bool,
) -> Result<Option<ExitCode>, Early> {
    let Some(probe) = iterion_doctor::preflight_mode(env).map_err(usage)? else {
        return Ok(None);
    };
    let mut inputs = iterion_doctor::Inputs::new(env.clone(), work_dir.to_path_buf());
    inputs.argv0 = crate::argv0();
    inputs.cwd = crate::cmd_doctor::current_dir();
    inputs.workflow = Some(file.to_path_buf());
    inputs.probe = probe;
    inputs.sandbox = flags.mode;
    inputs.default_image = flags.default_image.clone();
    inputs.host_state = flags.host_state;
    inputs.driver = flags.driver.clone();
    inputs.sandbox_env = flags
        .operator_env
        .iter()
        .map(|e| (e.name().to_owned(), e.value().to_owned()))
        .collect();
    match iterion_doctor::preflight(inputs).await {
        Ok(_) => Ok(None),
        Err(iterion_doctor::PreflightError::Usage(m)) => Err(usage(m)),
        Err(iterion_doctor::PreflightError::Failed(report)) => {
            crate::cmd_doctor::print_preflight_failure(&report, json);
            Ok(Some(ExitCode::from(2)))
        }
    }
}

fn flags_of(a: &SandboxArgs, env: &BTreeMap<String, String>) -> Result<SandboxFlags, Early> {
    let class = iterion_envdeny::DenyClass::builtin();
    let entries = iterion_envdeny::parse_sandbox_env(&class, &a.sandbox_env, |n| env.get(n).cloned(), true)
        .map_err(|e| usage(format!("--sandbox-env: {e}")))?;
    let mut f = SandboxFlags::default();
    f.mode = a.sandbox.map(|m| match m {
        ModeArg::Auto => ModeChoice::Auto,
        ModeArg::None => ModeChoice::None,
    });
    f.host_state = a.sandbox_host_state.map(|m| match m {
        ModeArg::Auto => HostState::Auto,
        ModeArg::None => HostState::None,
    });
    f.default_image = a.sandbox_default_image.clone().filter(|s| !s.trim().is_empty());
    f.driver = a.sandbox_driver.clone();
    f.operator_env = entries;
    Ok(f)
}

/// Process-level facts (home, uid/gid, data dir).
fn host_facts(env: &BTreeMap<String, String>, cwd: &Path) -> HostFacts {
    let home = env.get("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let data = store::data_dir(env, home.as_deref(), cwd, &std::env::temp_dir());
    HostFacts::new(
        home,
        Some(nix::unistd::getuid().as_raw()),
        Some(nix::unistd::getgid().as_raw()),
        std::env::consts::OS,
        data,
    )
}

// ---------------------------------------------------------------------------------------------------------
// Output

#[derive(Default)]
struct View {
    header_done: bool,
    run_id: String,
    store: String,
    resumed_from: Option<String>,
    sandbox: Option<String>,
    resolved: Option<serde_json::Map<String, serde_json::Value>>,
    running_node: Option<String>,
    nodes_printed: bool,
    spinner: Option<indicatif::ProgressBar>,
}

/// Prints what a run appends: `--json` lines, or the header, node lines and log lines (stderr).
struct Printer {
    json: bool,
    level: u8,
    tty: bool,
    timeout: Option<String>,
    level_name: String,
    view: Mutex<View>,
}

fn line_level(line: &str) -> u8 {
    match line.get(9..14).map(str::trim) {
        Some("ERROR") => 0,
        Some("WARN") => 1,
        Some("INFO") => 2,
        Some("DEBUG") => 3,
        _ => 4,
    }
}

fn secs(ms: u64) -> String {
    format!("{:.1}", ms as f64 / 1000.0)
}

impl Printer {
    fn header(&self, v: &mut View) {
        if v.header_done || self.json {
            return;
        }
        v.header_done = true;
        let mut out = std::io::stdout().lock();
        let run_dir = Path::new(&v.store).join("runs").join(&v.run_id);
        let doc = iterion_runtime::store::RunDocument::load(&run_dir.join("run.json")).ok();
        let (wf, name) = doc.map(|d| (d.workflow_name, d.name)).unwrap_or_default();
        let row = |label: &str, value: &str| format!("  {:<16} {}", format!("{label}:"), clean(value));
        let _ = writeln!(out, "── Run: {} ──", clean(&wf));
        let _ = writeln!(out, "{}", row("Run name", &name));
        let _ = writeln!(out, "{}", row("Run ID", &v.run_id));
        let _ = writeln!(out, "{}", row("Store", &v.store));
        let _ = writeln!(out, "{}", row("Sandbox", v.sandbox.as_deref().unwrap_or("none")));
        let _ = writeln!(out, "{}", row("Log Level", &self.level_name));
        if let Some(t) = &self.timeout {
            let _ = writeln!(out, "{}", row("Timeout", t));
        }
        if let Some(r) = &v.resumed_from {
            let _ = writeln!(out, "{}", row("Resumed from", r));
        }
        let _ = writeln!(out);
    }

    fn node_line(&self, v: &mut View, text: String) {
        if self.json {
            return;
        }
        self.header(v);
        v.nodes_printed = true;
        let _ = writeln!(std::io::stdout().lock(), "  {}", clean(&text));
    }

    fn spin(&self, v: &mut View, msg: &str) {
        if self.json || !self.tty {
            return;
        }
        let bar = v.spinner.get_or_insert_with(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        bar.set_message(msg.to_owned());
    }

    fn stop_spin(&self, v: &mut View) {
        if let Some(b) = v.spinner.take() {
            b.finish_and_clear();
        }
    }
}

fn s(d: &serde_json::Map<String, serde_json::Value>, k: &str) -> String {
    d.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_owned()
}

impl Observer for Printer {
    fn event(&self, appended: &Appended, event: &Event) {
        if self.json {
            let _ = writeln!(std::io::stdout().lock(), "{}", appended.line);
            return;
        }
        let Ok(data) = event.data() else { return };
        let mut v = self.view.lock().unwrap_or_else(|p| p.into_inner());
        if v.run_id.is_empty()
            && let Some(r) = iterion_runtime::events::EventRecord::decode(&appended.line)
        {
            v.run_id = r.run_id;
        }
        let node = event.node_id().unwrap_or_default().to_owned();
        match event.event_type() {
            "sandbox_resolved" => {
                if data.get("active") == Some(&serde_json::Value::Bool(false)) {
                    v.sandbox = Some(format!("none ({})", s(&data, "source")));
                } else {
                    self.spin(&mut v, "preparing the sandbox");
                }
                v.resolved = Some(data);
            }
            "sandbox_skipped" if node.is_empty() => {
                v.sandbox = Some(format!("skipped — {}", s(&data, "reason")));
            }
            "sandbox_image_ready" => self.spin(&mut v, &format!("image {} ready", s(&data, "image"))),
            "sandbox_build_started" => {
                let offline = if s(&data, "network") == "none" {
                    " (no network)"
                } else {
                    ""
                };
                self.spin(&mut v, &format!("building {}{offline}", s(&data, "dockerfile")))
            }
            "sandbox_network_started" => self.spin(&mut v, "egress proxy started"),
            "sandbox_post_create_started" => self.spin(&mut v, "running post_create"),
            "sandbox_started" => {
                let r = v.resolved.clone().unwrap_or_default();
                let origin = match s(&r, "origin").as_str() {
                    "devcontainer" => format!("devcontainer {}", s(&r, "devcontainer")),
                    "default_image" => format!("default image {}", s(&data, "image")),
                    "build" => "build".to_owned(),
                    _ => format!("image {}", s(&data, "image")),
                };
                let mut text = format!(
                    "{} · {} · {origin} · network {}",
                    s(&data, "driver"),
                    s(&data, "mode"),
                    s(&data, "network_mode")
                );
                if data.get("enforced_egress") == Some(&serde_json::Value::Bool(true)) {
                    text.push_str(" (enforced)");
                }
                if let Some(p) = r.get("placements").and_then(|p| p.as_object()) {
                    let host = p.values().filter(|x| x.as_str() == Some("host")).count();
                    let own = p.values().filter(|x| x.as_str() == Some("own")).count();
                    if host > 0 {
                        text.push_str(&format!(" · {host} node(s) on host"));
                    }
                    if own > 0 {
                        text.push_str(&format!(" · {own} node container(s)"));
                    }
                }
                v.sandbox = Some(text);
                self.stop_spin(&mut v);
            }
            "run_started" => {
                self.stop_spin(&mut v);
                self.header(&mut v);
            }
            "node_started" if data.contains_key("kind") => v.running_node = Some(node),
            "node_finished" if data.contains_key("duration_ms") => {
                let ms = data.get("duration_ms").and_then(|d| d.as_u64()).unwrap_or(0);
                v.running_node = None;
                self.node_line(&mut v, format!("node {node}: finished ({}s)", secs(ms)));
            }
            "node_recovery" => {
                self.node_line(&mut v, format!("node {node}: failed ({})", s(&data, "code")));
            }
            "run_failed" => {
                self.stop_spin(&mut v);
                if let Some(n) = v.running_node.take() {
                    self.node_line(&mut v, format!("node {n}: failed ({})", s(&data, "code")));
                }
            }
            "run_cancelled" => {
                self.stop_spin(&mut v);
                if let Some(n) = v.running_node.take() {
                    self.node_line(&mut v, format!("node {n}: cancelled"));
                }
            }
            _ => {}
        }
    }

    fn log(&self, line: &str) {
        if line_level(line) <= self.level {
            // Log lines carry node output (stdout / stderr of sandboxed processes): never raw to the terminal.
            let line = clean(line);
            let v = self.view.lock().unwrap_or_else(|p| p.into_inner());
            match &v.spinner {
                Some(b) => b.suspend(|| eprintln!("{line}")),
                None => eprintln!("{line}"),
            }
        }
    }
}

fn print_outcome(p: &Printer, o: &Outcome) {
    if p.json {
        return;
    }
    let mut v = p.view.lock().unwrap_or_else(|e| e.into_inner());
    p.stop_spin(&mut v);
    p.header(&mut v);
    let mut out = std::io::stdout().lock();
    if v.nodes_printed {
        let _ = writeln!(out);
    }
    let resume_line = format!(
        "iterion resume --run-id {} --store-dir {}",
        o.run_id,
        o.store_dir.display()
    );
    let code = o.failure_code.map(|c| c.as_str().to_owned()).unwrap_or_default();
    let err = o.error.clone().unwrap_or_default();
    let events = o.run_dir.join("events.jsonl");
    let mut lines = Vec::new();
    match o.status {
        RunStatus::Finished => lines.push("Status: FINISHED".to_owned()),
        RunStatus::Cancelled => {
            lines.push("Status: CANCELLED".to_owned());
            lines.push(format!("Detail: {err}"));
            lines.push(format!("Resume: {resume_line}"));
        }
        RunStatus::FailedResumable => {
            lines.push("Status: FAILED (resumable)".to_owned());
            lines.push(format!("Code:   {code}"));
            lines.push(format!("Error:  {err}"));
            if let Some(h) = &o.hint {
                lines.push(format!("Hint:   {h}"));
            }
            lines.push(format!("Resume: {resume_line}"));
        }
        other => {
            lines.push(format!("Status: {}", other.as_str().to_ascii_uppercase()));
            lines.push(format!("Code:   {code}"));
            lines.push(format!("Error:  {err}"));
            if let Some(h) = &o.hint {
                lines.push(format!("Hint:   {h}"));
            }
            lines.push(format!("Events: {}", events.display()));
        }
    }
    for l in lines {
        let _ = writeln!(out, "  {}", clean(&l));
    }
}

fn exit_of(o: &Outcome) -> ExitCode {
    if o.status == RunStatus::Finished {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

// ---------------------------------------------------------------------------------------------------------
// Commands

struct Prepared {
    env: BTreeMap<String, String>,
    cwd: PathBuf,
    level: u8,
    level_name: String,
    bounds: ExecBounds,
}

fn prepare_common(
    env: &BTreeMap<String, String>,
    log_flag: Option<&str>,
    timeout: Option<&str>,
) -> Result<Prepared, Early> {
    let cwd =
        std::env::current_dir().map_err(|e| fail1(format!("cannot read the current directory: {e}")))?;
    let mut env = env.clone();
    let mut warnings = Vec::new();
    load_dotenv(&mut env, &cwd, &mut warnings);
    for w in warnings {
        eprintln!("warning: {}", clean(&w));
    }
    let level = log_level(log_flag, &env)?;
    let level_name = ["error", "warn", "info", "debug", "trace"][level as usize].to_owned();
    let mut bounds = ExecBounds::default();
    if let Some(t) = timeout {
        bounds.timeout = Some(
            iterion_runtime::lifecycle::settings::parse_duration(t).ok_or_else(|| {
                usage(format!(
                    "invalid --timeout '{t}' (want a duration such as 90s or 10m)"
                ))
            })?,
        );
    }
    iterion_doctor::preflight_mode(&env).map_err(usage)?;
    Ok(Prepared {
        env,
        cwd,
        level,
        level_name,
        bounds,
    })
}

/// Selects the drivers (03 §2) and maps the selection to the runtime's [`DriverChoice`].
async fn choose(
    env: &BTreeMap<String, String>,
    forced: Option<String>,
    data_dir: &Path,
) -> Result<DriverChoice, Early> {
    let mut opts = iterion_host::SelectOptions::new(forced);
    opts.argv0 = crate::argv0();
    match iterion_host::relay_path(data_dir, iterion_host::relay_override(env)) {
        Ok(p) => opts.relay_binary = Some(p),
        Err(e) => eprintln!(
            "{}",
            format_log("WARN ", &format!("egress relay unavailable: {e}"))
        ),
    }
    let sel = iterion_host::select(env, &opts)
        .await
        .map_err(|e| usage(e.to_string()))?;
    for w in &sel.warnings {
        eprintln!("{}", format_log("WARN ", w));
    }
    Ok(match (&sel.driver, sel.kind) {
        (Some(_), DriverKind::Noop) if sel.forced.is_some() => DriverChoice::ForcedNoop,
        (Some(_), DriverKind::Noop) => DriverChoice::Unavailable {
            reason: format!("{} ({})", sel.reason, sel.unavailable_summary()),
        },
        (Some(d), _) => DriverChoice::Container(d.clone()),
        (None, _) => DriverChoice::ForcedUnavailable {
            message: sel
                .require()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| "the forced driver is unavailable".into()),
        },
    })
}

fn format_log(level: &str, msg: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let t = now % 86_400;
    format!("{:02}:{:02}:{:02} {level} {msg}", t / 3600, t % 3600 / 60, t % 60)
}

fn runtime(
    p: &Prepared,
    choice: DriverChoice,
    printer: Arc<Printer>,
    cancel: Cancel,
    store_dir: &Path,
) -> Result<Runtime, Early> {
    let base: Vec<(String, String)> = p.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let facts = host_facts(&p.env, &p.cwd);
    let key = store::RecordKey::load_or_create(&facts.data_dir).map_err(|e| fail1(e.to_string()))?;
    Runtime::builder()
        .host_driver(iterion_host::host_driver(base))
        .driver_choice(choice)
        .store_dir(store_dir)
        .env(p.env.clone())
        .builtin_default_mode(ModeChoice::Auto)
        .default_image_version(Some(env!("CARGO_PKG_VERSION").to_owned()))
        .host_facts(facts)
        .record_key(key)
        .observer(printer)
        .cancel(cancel)
        .exec_bounds(p.bounds)
        .build()
        .map_err(|e| fail1(e.to_string()))
}

/// First SIGINT / SIGTERM / SIGHUP cancels the run; a second one exits at once (the containers carry labels
/// the reaper uses).
fn watch_signals(cancel: Cancel) {
    use tokio::signal::unix::{SignalKind, signal};
    for (kind, name) in [
        (SignalKind::interrupt(), "SIGINT"),
        (SignalKind::terminate(), "SIGTERM"),
        (SignalKind::hangup(), "SIGHUP"),
    ] {
        let Ok(mut s) = signal(kind) else { continue };
        let c = cancel.clone();
        tokio::spawn(async move {
            if s.recv().await.is_some() {
                c.cancel(format!("signal {name}"));
            }
            if s.recv().await.is_some() {
                eprintln!(
                    "error: second {name}: skipping the graceful cleanup, force-removing the containers"
                );
                c.force();
                // Backstop: the force removal is bounded to 5 s; never hang past it.
                tokio::time::sleep(Duration::from_secs(7)).await;
                std::process::exit(1);
            }
        });
    }
}

/// Ends the runtime without waiting on a blocking task that is still reading a repository file after a
/// cancellation (a huge `devcontainer.json`): everything the run needed was awaited inside `block_on`.
fn shut_down(rt: tokio::runtime::Runtime) {
    rt.shutdown_timeout(Duration::from_millis(500));
}

fn tokio_rt() -> Result<tokio::runtime::Runtime, Early> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| fail1(format!("cannot start the async runtime: {e}")))
}

fn printer(json: bool, p: &Prepared, timeout: Option<String>) -> Arc<Printer> {
    Arc::new(Printer {
        json,
        level: p.level,
        tty: std::io::stderr().is_terminal(),
        timeout,
        level_name: p.level_name.clone(),
        view: Mutex::new(View::default()),
    })
}

/// `iterion run`.
pub fn run(args: RunArgs, env: &BTreeMap<String, String>) -> ExitCode {
    let json = args.json;
    match run_inner(args, env) {
        Ok(code) => code,
        Err(e) => report_early(e, json),
    }
}

fn run_inner(args: RunArgs, env: &BTreeMap<String, String>) -> Result<ExitCode, Early> {
    let p = prepare_common(env, args.log_level.as_deref(), args.timeout.as_deref())?;
    let work_dir = store::absolutize(args.work_dir.as_deref().unwrap_or(&p.cwd), &p.cwd);
    let file = store::absolutize(&args.file, &p.cwd);
    let label = args.file.to_string_lossy().into_owned();
    // Regular files only, bounded (the same reader as `validate`).
    let (bytes, checked) = iterion_spec::source::check_file(&file, &label)
        .map_err(|e| usage(format!("cannot read {}: {e}", file.display())))?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let mut diags = checked.diagnostics.clone();
    let workflow = checked.workflows.into_iter().next();
    if let Some(wf) = &workflow {
        diags.extend(iterion_runtime::exec::check_executable(wf, &p.env));
    }
    for d in diags.iter().filter(|d| !d.is_error()) {
        eprintln!("{}", crate::render::render(d, Some(&text)));
    }
    let Some(workflow) = workflow.filter(|_| !diags.iter().any(|d| d.is_error())) else {
        let errors: Vec<Diagnostic> = diags.into_iter().filter(|d| d.is_error()).collect();
        return Err(Early {
            code: 1,
            message: format!("{} has errors", file.display()),
            diagnostics: Some((errors, text)),
        });
    };
    let mut vars = Vec::new();
    for v in &args.vars {
        vars.push(parse_var(v).map_err(|e| usage(e.to_string()))?);
    }
    let run_id = match &args.run_id {
        Some(id) => Some(RunId::parse(id).map_err(|e| usage(e.to_string()))?),
        None => None,
    };
    let flags = flags_of(&args.sandbox, &p.env)?;
    let host = host_facts(&p.env, &p.cwd);
    let store_dir = store::store_dir(StoreDirRequest {
        store_dir: args.store_dir.as_deref(),
        project_dir: file.parent().unwrap_or(Path::new("/")),
        cwd: &p.cwd,
        data_dir: &host.data_dir,
    });
    let rt = tokio_rt()?;
    let printer = printer(args.json, &p, args.timeout.clone());
    let cancel = Cancel::new();
    let outcome = rt.block_on(async {
        if let Some(code) = preflight(&p.env, &work_dir, &file, &flags, args.json).await? {
            return Ok(Err(code));
        }
        watch_signals(cancel.clone());
        let choice = choose(&p.env, args.sandbox.sandbox_driver.clone(), &host.data_dir).await?;
        let runtime = runtime(&p, choice, printer.clone(), cancel.clone(), &store_dir)?;
        let reaped = runtime.reap_orphans().await;
        for r in reaped.iter().filter(|r| r.kept.is_none()) {
            eprintln!(
                "{}",
                format_log(
                    "INFO ",
                    &format!("sandbox: reaped leftover {} {}", r.resource.name, r.resource.id)
                )
            );
        }
        let mut launch = Launch::new(workflow, &file, bytes, &store_dir, &work_dir);
        launch.repo_root = Some(iterion_host::repo_root(&work_dir));
        launch.vars = vars;
        launch.preset = args.preset.clone();
        launch.run_id = run_id;
        launch.sandbox = flags;
        {
            let mut v = printer.view.lock().unwrap_or_else(|e| e.into_inner());
            v.store = store_dir.to_string_lossy().into_owned();
        }
        runtime.launch(launch).await.map(Ok).map_err(runtime_early)
    });
    shut_down(rt);
    let outcome = match outcome? {
        Ok(o) => o,
        Err(code) => return Ok(code),
    };
    print_outcome(&printer, &outcome);
    Ok(exit_of(&outcome))
}

fn runtime_early(e: iterion_runtime::Error) -> Early {
    use iterion_runtime::Error as E;
    match e {
        E::InvalidVar { .. }
        | E::UnknownVar { .. }
        | E::UnknownPreset { .. }
        | E::InvalidLaunch { .. }
        | E::InvalidRunId { .. } => usage(e.to_string()),
        other => fail1(other.to_string()),
    }
}

/// `iterion resume`.
pub fn resume(args: ResumeArgs, env: &BTreeMap<String, String>) -> ExitCode {
    let json = args.json;
    match resume_inner(args, env) {
        Ok(code) => code,
        Err(e) => report_early(e, json),
    }
}

fn resume_inner(args: ResumeArgs, env: &BTreeMap<String, String>) -> Result<ExitCode, Early> {
    let p = prepare_common(env, args.log_level.as_deref(), args.timeout.as_deref())?;
    let host = host_facts(&p.env, &p.cwd);
    let project = args
        .file
        .as_ref()
        .map(|f| store::absolutize(f, &p.cwd))
        .and_then(|f| f.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| p.cwd.clone());
    let store_dir = store::store_dir(StoreDirRequest {
        store_dir: args.store_dir.as_deref(),
        project_dir: &project,
        cwd: &p.cwd,
        data_dir: &host.data_dir,
    });
    let flags = flags_of(&args.sandbox, &p.env)?;
    // The record decides the workflow file, the work dir and the sandbox inputs: check its integrity tag
    // before reading anything from it.
    let key = store::RecordKey::load_or_create(&host.data_dir).map_err(|e| fail1(e.to_string()))?;
    let previous_store = iterion_runtime::store::Store::at(&store_dir).with_record_key(Some(key));
    previous_store
        .check_record(&args.run_id, args.force)
        .map_err(|e| fail1(e.to_string()))?;
    let previous = previous_store
        .read_run(&args.run_id)
        .map_err(|e| fail1(e.to_string()))?;
    let forced = args
        .sandbox
        .sandbox_driver
        .clone()
        .or(previous.sandbox.requested.cli_driver.clone());
    let rt = tokio_rt()?;
    let printer = printer(args.json, &p, args.timeout.clone());
    {
        let mut v = printer.view.lock().unwrap_or_else(|e| e.into_inner());
        v.store = store_dir.to_string_lossy().into_owned();
        v.resumed_from = Some(previous.status.as_str().to_owned());
    }
    let cancel = Cancel::new();
    let recorded_file = args
        .file
        .as_ref()
        .map(|f| store::absolutize(f, &p.cwd))
        .unwrap_or_else(|| PathBuf::from(&previous.file_path));
    let work_dir = PathBuf::from(&previous.work_dir);
    let outcome = rt.block_on(async {
        if let Some(code) = preflight(&p.env, &work_dir, &recorded_file, &flags, args.json).await? {
            return Ok(Err(code));
        }
        watch_signals(cancel.clone());
        let choice = choose(&p.env, forced, &host.data_dir).await?;
        let runtime = runtime(&p, choice, printer.clone(), cancel.clone(), &store_dir)?;
        let _ = runtime.reap_orphans().await;
        let mut r = Resume::new(&args.run_id, &store_dir);
        r.file = args.file.as_ref().map(|f| store::absolutize(f, &p.cwd));
        r.force = args.force;
        r.sandbox = flags;
        runtime.resume(r).await.map(Ok).map_err(runtime_early)
    });
    shut_down(rt);
    let outcome = match outcome? {
        Ok(o) => o,
        Err(code) => return Ok(code),
    };
    print_outcome(&printer, &outcome);
    Ok(exit_of(&outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotenv_never_sets_iterion_variables_and_never_overrides() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(".env"),
            "ITERION_SANDBOX_DEFAULT=none\nFOO=bar\nexport QUOTED=\"x y\"\nKEEP=new\n# comment\n",
        )
        .unwrap();
        let sub = dir.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        let mut env = BTreeMap::from([("KEEP".to_string(), "old".to_string())]);
        let mut w = Vec::new();
        load_dotenv(&mut env, &sub, &mut w);
        assert_eq!(env.get("FOO").map(String::as_str), Some("bar"));
        assert_eq!(env.get("QUOTED").map(String::as_str), Some("x y"));
        assert_eq!(env.get("KEEP").map(String::as_str), Some("old"));
        assert!(!env.contains_key("ITERION_SANDBOX_DEFAULT"));
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("ITERION_SANDBOX_DEFAULT ignored"));
    }

    #[test]
    fn log_levels() {
        let env = BTreeMap::from([("ITERION_LOG_LEVEL".to_string(), "debug".to_string())]);
        assert_eq!(log_level(None, &env).ok(), Some(3));
        assert_eq!(log_level(Some("warn"), &env).ok(), Some(1));
        assert!(log_level(Some("loud"), &env).is_err());
        assert_eq!(line_level("09:31:07 WARN  x"), 1);
        assert_eq!(line_level("09:31:07 INFO  x"), 2);
    }
}
