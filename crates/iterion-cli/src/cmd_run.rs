//! `iterion run FILE` and `iterion resume --run-id ID`: flags, human output, `--json`, exit codes.
//!
//! Exit codes: 0 finished; 1 failed, failed_resumable, cancelled, compile or executability errors,
//! a locked run, a refused resume, internal errors; 2 usage errors (bad flags or values, unknown `--var`,
//! an `--attach` the workflow does not declare or cannot use, a required attachment not supplied, missing
//! workflow file, invalid sandbox environment variables).
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) use crate::early::{Early, fail1, runtime_early, signal_exit, usage};
use iterion_runtime::api::{HostOptions, RunOptions, Runtime};
use iterion_runtime::events::{Event, NodeFinished, PlacementKind, SandboxResolved, SandboxStarted};
use iterion_runtime::exec::{ExecBounds, parse_var};
use iterion_runtime::lifecycle::{Cancel, HostFacts, Observer, Outcome, Resume, SandboxFlags, WorktreeEnd};
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

/// `auto` or `none` for `--sandbox-host-state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HostStateArg {
    /// The agent home (`~/.claude`) is shared, read-only but for its state entries.
    Auto,
    /// Nothing of the host's state is shared.
    None,
}

/// Sandbox flags shared by `run` and `resume`.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// Sandbox mode: `auto` isolates the run when a container runtime answers, `none` runs on the host.
    #[arg(long, value_enum, value_name = "MODE")]
    pub sandbox: Option<ModeArg>,
    /// Fallback image for `auto` without a devcontainer.json.
    #[arg(long, value_name = "REF")]
    pub sandbox_default_image: Option<String>,
    /// Share the agent home with the sandbox (`auto`) or not (`none`).
    #[arg(long, value_enum, value_name = "HOST_STATE")]
    pub sandbox_host_state: Option<HostStateArg>,
    /// OCI runtime of the containers: `default`, `gvisor`, `kata` or a runtime the engine knows by name
    /// (default: the workflow's `sandbox.runtime`, then `ITERION_SANDBOX_OCI_RUNTIME`).
    #[arg(long, value_name = "RUNTIME")]
    pub sandbox_runtime: Option<String>,
    /// Force a driver (default: `ITERION_SANDBOX_DRIVER`).
    #[arg(long, value_name = "DRIVER", value_parser = ["docker", "podman", "kubernetes", "noop"])]
    pub sandbox_driver: Option<String>,
    /// Operator environment entry for the containers: `NAME` (copied) or `NAME=VALUE` (pass-class names only).
    #[arg(long, value_name = "NAME[=VALUE]")]
    pub sandbox_env: Vec<String>,
    /// A secret for image builds (`RUN --mount=type=secret,id=NAME`): `id=NAME,env=VAR` or `id=NAME,src=PATH`;
    /// repeatable. The value never appears in events, logs or arguments.
    #[arg(long, value_name = "id=NAME,env=VAR|src=PATH")]
    pub sandbox_build_secret: Vec<String>,
    /// Grant a secret to the sandbox (repeatable): `NAME` for one the workflow declares, `NAME=HOST[,HOST...]`
    /// for any (`http://HOST` also allows plain HTTP). The value is read from the environment variable NAME
    /// and never enters the sandbox: it sees a placeholder that the run's proxy replaces in requests to the
    /// bound hosts only.
    #[arg(long = "secret", value_name = "NAME[=HOSTS]")]
    pub secrets: Vec<String>,
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
    /// Supply the file at PATH as the workflow's declared attachment NAME (repeatable); it is copied into
    /// the run directory and its path, MIME type, size and SHA-256 are the {{attachments.NAME…}} values.
    #[arg(long = "attach", value_name = "NAME=PATH")]
    pub attachments: Vec<String>,
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
    /// Build the sandbox image even when the build cache has it (same as ITERION_SANDBOX_REBUILD=1).
    #[arg(long)]
    pub rebuild: bool,
    /// Print the run's events as JSON lines (with --dry-run: one JSON document).
    #[arg(long)]
    pub json: bool,
    /// Never ask on the terminal: a human node leaves the run paused (exit 0) with a resume hint.
    #[arg(long)]
    pub no_interactive: bool,
    /// Decide everything up to the first side effect and print it, without creating a run record, a
    /// worktree, an image or a container: exit 0 when the run could start, 1 when it would be refused.
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `iterion resume`.
#[derive(Debug, Clone, clap::Args)]
pub struct ResumeArgs {
    /// The run to resume: its id, its name, or a unique prefix of its id.
    #[arg(
        value_name = "RUN",
        required_unless_present = "run_id",
        conflicts_with = "run_id"
    )]
    pub run: Option<String>,
    /// The run to resume (the same as the positional RUN).
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
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
    /// Answers for a run waiting for human input: a JSON object of key → answer.
    #[arg(long, value_name = "FILE")]
    pub answers_file: Option<PathBuf>,
    /// One answer for a run waiting for human input (repeatable; applied after --answers-file; read by the
    /// type of the node's output schema field, else a string).
    #[arg(long = "answer", value_name = "KEY=VALUE")]
    pub answers: Vec<String>,
    /// Never ask on the terminal: a human node leaves the run paused (exit 0) with a resume hint.
    #[arg(long)]
    pub no_interactive: bool,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Print the run's events as JSON lines.
    #[arg(long)]
    pub json: bool,
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

/// Loads `.env`: the first `.env` found walking up from `cwd`; variables already set win; names
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
    inputs.runtime = flags.runtime.clone();
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
        .map_err(|e| usage(crate::sandbox_env::error_text(&e)))?;
    let mut f = SandboxFlags::default();
    f.mode = a.sandbox.map(|m| match m {
        ModeArg::Auto => ModeChoice::Auto,
        ModeArg::None => ModeChoice::None,
    });
    f.host_state = a.sandbox_host_state.map(|m| match m {
        HostStateArg::Auto => HostState::Auto,
        HostStateArg::None => HostState::None,
    });
    f.default_image = a.sandbox_default_image.clone().filter(|s| !s.trim().is_empty());
    f.runtime = match &a.sandbox_runtime {
        Some(r) => Some(
            iterion_spec::resolved::OciRuntime::parse(r)
                .map_err(|m| usage(format!("--sandbox-runtime: {m}")))?,
        ),
        None => None,
    };
    f.driver = a.sandbox_driver.clone();
    f.operator_env = entries;
    let mut problems = Vec::new();
    for s in &a.secrets {
        match iterion_runtime::lifecycle::secrets::parse_secret_flag(s) {
            Ok(flag) => f.secrets.push(flag),
            Err(e) => problems.push(e),
        }
    }
    if !problems.is_empty() {
        return Err(usage(problems.join("\n")));
    }
    Ok(f)
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
    resolved: Option<SandboxResolved>,
    running_node: Option<String>,
    nodes_printed: bool,
    nodes_finished: u32,
    blocked: u32,
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

/// ` → <output>` on one line, at most 100 characters (an output of only `{"result": TEXT}` shows TEXT).
fn summarize(output: &serde_json::Value) -> String {
    let shown = match output.as_object() {
        Some(o) if o.is_empty() => return String::new(),
        Some(o) if o.len() == 1 && o.get("result").is_some_and(serde_json::Value::is_string) => {
            o["result"].as_str().unwrap_or_default().to_owned()
        }
        _ => output.to_string(),
    };
    format!(" → {}", shorten(&shown, 100))
}

/// The last line of an error text (where the cause usually is), at most 160 characters.
fn tail(error: &str) -> String {
    let last = error
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    shorten(last.trim(), 160)
}

/// `text` on one line, cut at `max` characters with `…`.
fn shorten(text: &str, max: usize) -> String {
    let one: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() <= max {
        return one;
    }
    let mut cut: String = one.chars().take(max - 1).collect();
    cut.push('…');
    cut
}

/// The header's sandbox row once the run container is up.
fn started_line(d: &SandboxStarted, resolved: Option<&SandboxResolved>) -> String {
    let field = |f: fn(&SandboxResolved) -> Option<&String>| {
        resolved
            .and_then(f)
            .map(String::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let origin = match field(|r| r.origin.as_ref()).as_str() {
        "devcontainer" => format!("devcontainer {}", field(|r| r.devcontainer.as_ref())),
        "default_image" => format!("default image {}", d.image),
        "build" => "build".to_owned(),
        _ => format!("image {}", d.image),
    };
    let mut text = format!(
        "{} · {} · {origin} · network {}",
        d.driver, d.mode, d.network_mode
    );
    if d.enforced_egress {
        text.push_str(" (enforced)");
    }
    if let Some(r) = resolved {
        let host = r
            .placements
            .values()
            .filter(|p| **p == PlacementKind::Host)
            .count();
        let own = r
            .placements
            .values()
            .filter(|p| **p == PlacementKind::Own)
            .count();
        if host > 0 {
            text.push_str(&format!(" · {host} node(s) on host"));
        }
        if own > 0 {
            text.push_str(&format!(" · {own} node container(s)"));
        }
    }
    text
}

impl Observer for Printer {
    fn event(&self, appended: &Appended, event: &Event) {
        if self.json {
            let _ = writeln!(std::io::stdout().lock(), "{}", appended.line);
            return;
        }
        let mut v = self.view.lock().unwrap_or_else(|p| p.into_inner());
        if v.run_id.is_empty()
            && let Some(r) = iterion_runtime::events::EventRecord::decode(&appended.line)
        {
            v.run_id = r.run_id;
        }
        let node = match event.branch_id() {
            Some(b) => format!("{} [{b}]", event.node_id().unwrap_or_default()),
            None => event.node_id().unwrap_or_default().to_owned(),
        };
        match event.inner() {
            Event::SandboxResolved(d) => {
                if !d.active {
                    v.sandbox = Some(format!("none ({})", d.source));
                } else {
                    // replaced when the container is up; what the header says if it never is
                    v.sandbox = Some(format!("{} ({}) · not started", d.mode, d.source));
                    self.spin(&mut v, "preparing the sandbox");
                }
                v.resolved = Some(d.clone());
            }
            Event::SandboxSkipped(d) if node.is_empty() => {
                v.sandbox = Some(format!("skipped — {}", d.reason));
            }
            Event::SandboxImageReady(d) => self.spin(&mut v, &format!("image {} ready", d.image)),
            Event::SandboxBuildStarted(d) => {
                let offline = if d.network == "none" { " (no network)" } else { "" };
                self.spin(&mut v, &format!("building {}{offline}", d.dockerfile))
            }
            Event::SandboxNetworkStarted(_) => self.spin(&mut v, "egress proxy started"),
            Event::SandboxPostCreateStarted(_) => self.spin(&mut v, "running post_create"),
            Event::SandboxStarted(d) => {
                v.sandbox = Some(started_line(d, v.resolved.as_ref()));
                self.stop_spin(&mut v);
            }
            Event::RunStarted(_) => {
                self.stop_spin(&mut v);
                self.header(&mut v);
            }
            Event::NodeStarted(d) if d.kind.is_some() => v.running_node = Some(node),
            Event::NodeFinished(NodeFinished {
                duration_ms: Some(ms),
                output,
                ..
            }) => {
                v.running_node = None;
                v.nodes_finished += 1;
                let summary = output.as_ref().map(summarize).unwrap_or_default();
                self.node_line(&mut v, format!("node {node}: finished ({}s){summary}", secs(*ms)));
            }
            Event::NodeRecovery(d) => {
                self.node_line(
                    &mut v,
                    format!(
                        "node {node}: failed ({}), retrying in {}s (retry {}): {}",
                        d.code,
                        secs(d.delay_ms),
                        d.attempt,
                        tail(&d.error)
                    ),
                );
            }
            Event::NetworkBlocked(d) => {
                v.blocked += 1;
                let who = d
                    .node_id
                    .as_deref()
                    .map(|n| format!("node {n}: "))
                    .unwrap_or_default();
                self.node_line(&mut v, format!("{who}blocked {}:{} ({})", d.host, d.port, d.rule));
            }
            Event::RunFailed(d) => {
                self.stop_spin(&mut v);
                if let Some(n) = v.running_node.take() {
                    self.node_line(
                        &mut v,
                        format!("node {n}: failed ({}): {}", d.code, tail(&d.error)),
                    );
                }
            }
            Event::RunCancelled(_) => {
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
        if let Some(paused) = &o.paused {
            let _ = writeln!(
                std::io::stdout().lock(),
                "{}",
                crate::human::paused_json(o, paused)
            );
        }
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
        RunStatus::PausedWaitingHuman => {
            lines.push("Status: PAUSED (waiting for human input)".to_owned());
            if let Some(paused) = &o.paused {
                lines.extend(crate::human::question_lines(paused));
            }
            lines.push(format!("Resume: {resume_line} --answers-file <file>"));
        }
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
    let mut summary = format!("{} node(s) finished", v.nodes_finished);
    if v.blocked > 0 {
        summary.push_str(&format!(
            " · {} request(s) blocked by the egress policy",
            v.blocked
        ));
    }
    lines.push(format!("Nodes:  {summary}"));
    lines.push(format!("Record: {}", o.run_dir.display()));
    match &o.worktree {
        Some(WorktreeEnd::Branch(b)) => lines.push(format!("Branch: {b} (the run's changes, committed)")),
        Some(WorktreeEnd::Unchanged) => lines.push("Branch: none (the run changed nothing)".to_owned()),
        Some(WorktreeEnd::Kept(p)) => lines.push(format!("Worktree: {} (kept)", p.display())),
        _ => {}
    }
    for l in lines {
        // a multi-line error (a node's stderr tail) stays under its label
        let l = l.replace('\n', "\n          ");
        let _ = writeln!(out, "  {}", clean(&l));
    }
}

/// 0 finished; [`signal_exit`] for a run cancelled by a signal; 1 otherwise.
fn exit_of(o: &Outcome) -> ExitCode {
    match o.status {
        // a pause is a normal outcome
        RunStatus::Finished | RunStatus::PausedWaitingHuman => ExitCode::SUCCESS,
        RunStatus::Cancelled => ExitCode::from(o.error.as_deref().and_then(signal_exit).unwrap_or(1)),
        _ => ExitCode::from(1),
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
    build_secrets: Vec<iterion_driver::BuildSecret>,
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
        bounds.timeout = Some(iterion_spec::duration::parse_positive(t).ok_or_else(|| {
            usage(format!(
                "invalid --timeout '{t}' (want a duration such as 90s or 10m)"
            ))
        })?);
    }
    iterion_doctor::preflight_mode(&env).map_err(usage)?;
    Ok(Prepared {
        env,
        cwd,
        level,
        level_name,
        bounds,
        build_secrets: Vec::new(),
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

/// The runtime from the host layer (host facts, data dir, egress relay, driver selection, record key), with
/// the command's store dir, observer, cancellation and bounds. The host layer's warnings are logged.
async fn runtime(
    p: &Prepared,
    forced: Option<String>,
    printer: Arc<Printer>,
    cancel: Cancel,
    store_dir: &Path,
) -> Result<Runtime, Early> {
    let opts = HostOptions::new()
        .cwd(&p.cwd)
        .forced_driver(forced)
        .argv0(crate::argv0());
    let builder = Runtime::from_host(&p.env, &opts).await.map_err(|e| match e {
        iterion_runtime::Error::Host(e) => usage(e.to_string()),
        other => fail1(other.to_string()),
    })?;
    for w in builder.host_warnings() {
        eprintln!("{}", format_log("WARN ", w));
    }
    // Claw nodes on the host run this very program as `iterion __claw-runner`.
    let builder = match std::env::current_exe() {
        Ok(exe) => builder.runner_program(exe),
        Err(_) => builder,
    };
    builder
        .store_dir(store_dir)
        .builtin_default_mode(ModeChoice::Auto)
        .default_image_version(Some(env!("CARGO_PKG_VERSION").to_owned()))
        .observer(printer)
        .cancel(cancel)
        .exec_bounds(p.bounds)
        .build_secrets(p.build_secrets.clone())
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

/// The `--attach` pairs, relative paths joined to the current directory: usage errors (undeclared, required
/// and missing, unreadable, refused type, reached through a link of the repository, from a place attachments
/// may not come from) before anything starts; the runtime checks them again when it prepares the launch.
fn check_attachments(
    args: &RunArgs,
    p: &Prepared,
    compiled: &iterion_runtime::api::Compiled,
    (work_dir, anchor, store_dir, host): (&Path, &Path, &Path, &HostFacts),
) -> Result<Vec<(String, PathBuf)>, Early> {
    let mut attachments = Vec::new();
    for a in &args.attachments {
        let (name, path) = iterion_runtime::attachments::parse_attach(a).map_err(|e| usage(e.to_string()))?;
        // joined, not cleaned: `..` after a link means what the kernel makes of it
        attachments.push((name, p.cwd.join(path)));
    }
    if let Some(wf) = &compiled.workflow {
        let bounds = iterion_runtime::attachments::AttachmentBounds::of_launch(
            work_dir,
            Some(anchor),
            store_dir,
            host.home.as_deref(),
            &host.data_dir,
        );
        iterion_runtime::attachments::check_supplied(wf, &attachments, &p.cwd, &bounds)
            .map_err(|e| usage(e.to_string()))?;
    }
    Ok(attachments)
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
    let mut p = prepare_common(env, args.log_level.as_deref(), args.timeout.as_deref())?;
    if args.rebuild {
        p.env.insert("ITERION_SANDBOX_REBUILD".into(), "1".into());
    }
    let work_dir = store::absolutize(args.work_dir.as_deref().unwrap_or(&p.cwd), &p.cwd);
    if !work_dir.is_dir() {
        return Err(usage(format!(
            "--work-dir {}: not a directory",
            work_dir.display()
        )));
    }
    // The project anchor: the repository root of the work dir decides the store and the devcontainer.
    let anchor = iterion_host::repo_root(&work_dir);
    let interactive = crate::human::interactive(args.json, args.no_interactive);
    // Regular files only, bounded (the same reader as `validate`); before any driver is selected.
    let compiled = iterion_runtime::api::compile(&args.file, &p.cwd, &p.env).map_err(|e| match e {
        iterion_runtime::Error::Io { path, source, .. } => {
            usage(format!("cannot read {}: {source}", path.display()))
        }
        other => fail1(other.to_string()),
    })?;
    let file = compiled.path.clone();
    for d in compiled.diagnostics.iter().filter(|d| !d.is_error()) {
        eprintln!("{}", crate::render::render(d, Some(&compiled.text)));
    }
    if compiled.has_errors() {
        let errors: Vec<Diagnostic> = compiled
            .diagnostics
            .into_iter()
            .filter(|d| d.is_error())
            .collect();
        return Err(Early {
            code: 1,
            message: format!("{} has errors", file.display()),
            diagnostics: Some((errors, compiled.text)),
        });
    }
    let mut vars = Vec::new();
    for v in &args.vars {
        vars.push(parse_var(v).map_err(|e| usage(e.to_string()))?);
    }
    // Checked here so that a bad id is a usage error before anything starts.
    if let Some(id) = &args.run_id {
        RunId::parse(id).map_err(|e| usage(e.to_string()))?;
    }
    let flags = flags_of(&args.sandbox, &p.env)?;
    p.build_secrets =
        crate::build_secret::parse_all(&args.sandbox.sandbox_build_secret, &p.env, &p.cwd).map_err(usage)?;
    let host = HostFacts::of_process(&p.env, &p.cwd);
    let store_dir = store::store_dir(StoreDirRequest {
        store_dir: args.store_dir.as_deref(),
        project_dir: &anchor,
        cwd: &p.cwd,
        data_dir: &host.data_dir,
    });
    let attachments = check_attachments(&args, &p, &compiled, (&work_dir, &anchor, &store_dir, &host))?;
    let host_only = args.sandbox.sandbox == Some(ModeArg::None);
    if !anchor.join(".git").exists() && !args.dry_run && !args.json && !host_only {
        eprintln!(
            "{}",
            format_log(
                "WARN ",
                &format!(
                    "{} is not inside a git repository: it is the project (store, devcontainer lookup) and, when a \
                     sandbox starts, the workspace mounted read-write into it",
                    work_dir.display()
                )
            )
        );
    }
    let rt = tokio_rt()?;
    let printer = printer(args.json, &p, args.timeout.clone());
    let cancel = Cancel::new();
    let mut opts = RunOptions::new(&work_dir).sandbox(flags.clone());
    opts.vars = vars.clone();
    opts.attachments = attachments;
    opts.preset = args.preset.clone();
    opts.run_id = args.run_id.clone();
    if args.dry_run {
        let forced = args.sandbox.sandbox_driver.clone();
        let decided = rt.block_on(async {
            let runtime = runtime(&p, forced, printer.clone(), cancel.clone(), &store_dir).await?;
            let launch = runtime.prepare(compiled, opts).map_err(runtime_early)?;
            runtime.dry_run(&launch).map_err(runtime_early)
        });
        shut_down(rt);
        let decided = decided?;
        crate::dry_run::print(&decided, args.json);
        return Ok(if decided.could_start() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let outcome = rt.block_on(async {
        if let Some(code) = preflight(&p.env, &work_dir, &file, &flags, args.json).await? {
            return Ok(Err(code));
        }
        watch_signals(cancel.clone());
        let forced = args.sandbox.sandbox_driver.clone();
        let runtime = runtime(&p, forced, printer.clone(), cancel.clone(), &store_dir).await?;
        let launch = runtime.prepare(compiled, opts).map_err(runtime_early)?;
        {
            let mut v = printer.view.lock().unwrap_or_else(|e| e.into_inner());
            v.store = store_dir.to_string_lossy().into_owned();
        }
        // The reaper pass runs alongside the launch instead of before it: it only removes resources whose
        // owner is gone, never this run's, and its engine calls no longer delay the first event.
        let (outcome, ()) = tokio::join!(runtime.launch(launch), reap_and_say(&runtime));
        let outcome = outcome.map_err(runtime_early)?;
        crate::human::answer_on_terminal(&runtime, outcome, &store_dir, interactive)
            .await
            .map(Ok)
    });
    shut_down(rt);
    let outcome = match outcome? {
        Ok(o) => o,
        Err(code) => return Ok(code),
    };
    print_outcome(&printer, &outcome);
    Ok(exit_of(&outcome))
}

/// One reaper pass; each removed leftover is said on stderr.
async fn reap_and_say(runtime: &Runtime) {
    for r in runtime.reap_orphans().await.iter().filter(|r| r.kept.is_none()) {
        eprintln!(
            "{}",
            format_log(
                "INFO ",
                &format!("sandbox: reaped leftover {} {}", r.resource.name, r.resource.id)
            )
        );
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
    let mut p = prepare_common(env, args.log_level.as_deref(), args.timeout.as_deref())?;
    let host = HostFacts::of_process(&p.env, &p.cwd);
    // The store of the current project, as `iterion run` and `iterion runs` find it.
    let store_dir = crate::cmd_runs::resolve_store(args.store_dir.as_deref(), &p.env, &p.cwd);
    let query = args.run.clone().or(args.run_id.clone()).unwrap_or_default();
    let run_id = crate::cmd_runs::find_run(&iterion_runtime::store::Store::at(&store_dir), &query).map_err(
        |(code, message)| Early {
            code,
            message,
            diagnostics: None,
        },
    )?;
    let flags = flags_of(&args.sandbox, &p.env)?;
    p.build_secrets =
        crate::build_secret::parse_all(&args.sandbox.sandbox_build_secret, &p.env, &p.cwd).map_err(usage)?;
    let answers = crate::human::answers_of(args.answers_file.as_deref(), &args.answers, &p.cwd)?;
    let interactive = crate::human::interactive(args.json, args.no_interactive);
    // The record decides the workflow file, the work dir and the sandbox inputs: check its integrity tag
    // before reading anything from it.
    let key = store::RecordKey::load_or_create(&host.data_dir).map_err(|e| fail1(e.to_string()))?;
    let previous_store = iterion_runtime::store::Store::at(&store_dir).with_record_key(Some(key));
    previous_store
        .check_record(&run_id, args.force)
        .map_err(|e| fail1(e.to_string()))?;
    let previous = previous_store
        .read_run(&run_id)
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
        let runtime = runtime(&p, forced, printer.clone(), cancel.clone(), &store_dir).await?;
        // Before the resume, not alongside it: the reaper's crash recovery may write the very record the
        // resume reads.
        reap_and_say(&runtime).await;
        let mut r = Resume::new(&run_id, &store_dir);
        r.file = args.file.as_ref().map(|f| store::absolutize(f, &p.cwd));
        r.force = args.force;
        r.sandbox = flags;
        r.answers = answers;
        let outcome = runtime.resume(r).await.map_err(runtime_early)?;
        crate::human::answer_on_terminal(&runtime, outcome, &store_dir, interactive)
            .await
            .map(Ok)
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
