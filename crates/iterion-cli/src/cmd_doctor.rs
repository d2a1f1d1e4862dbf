//! `iterion sandbox doctor`: report mode, `--strict [WORKFLOW]`, `--probe`, `--json`. The battery is
//! the `iterion-doctor` library; this module turns flags into its [`Inputs`] and prints its report.
//!
//! Exit codes: 0 report mode or no failed check; 1 a failed check; 2 usage (bad flag or value,
//! `WORKFLOW` / `--target` / `--probe` without `--strict`, unreadable file, lexical or parse errors, invalid
//! sandbox environment values).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use iterion_spec::resolve::ModeChoice;
use iterion_spec::resolved::HostState;

use iterion_doctor::{self as doctor, Inputs, Report, Status, Target};

/// `iterion sandbox …`.
#[derive(Debug, clap::Args)]
pub struct SandboxArgs {
    /// The sandbox command.
    #[command(subcommand)]
    pub command: SandboxCommand,
}

/// Sandbox subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum SandboxCommand {
    /// Report what this host offers, or (--strict) check the spec a run would use.
    #[command(
        after_help = "EXAMPLES:\n  iterion sandbox doctor                          # what this host offers\n  \
iterion sandbox doctor --strict review.bot      # check the sandbox a run of review.bot would use\n  \
iterion sandbox doctor --strict --probe         # also try the boundaries in a throwaway sandbox\n  \
iterion sandbox doctor --strict --json | jq '.checks[] | select(.status != \"pass\")'\n\n\
EXIT CODES:\n  0 report mode, or no check failed; 1 a check failed; 2 a usage error or an unreadable workflow"
    )]
    Doctor(DoctorArgs),
    /// List (or with --yes remove) the containers, networks and cached build images whose owner is gone.
    Prune(crate::cmd_prune::PruneArgs),
}

/// Arguments of `iterion sandbox doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Run the check battery against the spec a run would use.
    #[arg(long)]
    pub strict: bool,
    /// A workflow file (.bot / .iter) whose sandbox blocks are resolved and checked (needs --strict).
    #[arg(value_name = "WORKFLOW")]
    pub workflow: Option<PathBuf>,
    /// auto (follow the selected driver), cloud (the Kubernetes battery) or local (Docker / Podman).
    #[arg(long, value_parser = ["auto", "cloud", "local"])]
    pub target: Option<String>,
    /// Also run the boundary probes in a throwaway sandbox (needs --strict).
    #[arg(long)]
    pub probe: bool,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Sandbox mode, as for `iterion run`.
    #[arg(long, value_name = "MODE", value_parser = ["auto", "none"])]
    pub sandbox: Option<String>,
    /// Fallback image for auto, as for `iterion run`.
    #[arg(long, value_name = "REF")]
    pub sandbox_default_image: Option<String>,
    /// Share the agent home with the sandbox, as for `iterion run`.
    #[arg(long, value_name = "HOST_STATE", value_parser = ["auto", "none"])]
    pub sandbox_host_state: Option<String>,
    /// OCI runtime of the containers, as for `iterion run`.
    #[arg(long, value_name = "RUNTIME")]
    pub sandbox_runtime: Option<String>,
    /// Force a driver (default: `ITERION_SANDBOX_DRIVER`).
    #[arg(long, value_name = "DRIVER", value_parser = ["docker", "podman", "kubernetes", "noop"])]
    pub sandbox_driver: Option<String>,
    /// Operator environment entry NAME[=VALUE] (a bare NAME takes the host value); repeatable.
    #[arg(long, value_name = "NAME[=VALUE]")]
    pub sandbox_env: Vec<String>,
    /// The directory a run would use as work dir (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {}", crate::terminal::clean(&msg.to_string()));
    ExitCode::from(2)
}

/// [`usage`], plus a JSON error object on stdout under `--json` (a machine reading stdout sees why).
fn usage_json(json: bool, msg: impl std::fmt::Display) -> ExitCode {
    let msg = msg.to_string();
    if json {
        println!("{}", serde_json::json!({"error": msg, "exit": 2}));
    }
    usage(msg)
}

/// Turns the arguments into [`Inputs`]; `Err` is the usage message.
pub fn inputs(args: &DoctorArgs, env: &BTreeMap<String, String>) -> Result<Inputs, String> {
    let strict = args.strict;
    if !strict {
        if let Some(w) = &args.workflow {
            return Err(format!(
                "WORKFLOW needs --strict (`iterion sandbox doctor --strict {}` checks it)",
                w.display()
            ));
        }
        if args.target.is_some() {
            return Err("--target needs --strict".into());
        }
        if args.probe {
            return Err("--probe needs --strict".into());
        }
    }
    let cwd = std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let work_dir = match &args.work_dir {
        Some(d) if !d.is_dir() => return Err(format!("--work-dir {} is not a directory", d.display())),
        Some(d) => std::fs::canonicalize(d).map_err(|e| format!("--work-dir {}: {e}", d.display()))?,
        None => cwd,
    };
    let mut sandbox_env = Vec::new();
    for entry in &args.sandbox_env {
        let (name, value) = match entry.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => match env.get(entry) {
                Some(v) => (entry.clone(), v.clone()),
                None => continue,
            },
        };
        iterion_envdeny::validate_entry(iterion_envdeny::Layer::Operator, &name, &value)
            .map_err(|e| crate::sandbox_env::error_text(&e))?;
        sandbox_env.push((name, value));
    }
    let (timeout, warning) = doctor::doctor_timeout(env);
    if let Some(w) = &warning {
        eprintln!("warning: {}", crate::terminal::clean(w));
    }
    let mut i = Inputs::new(env.clone(), work_dir);
    i.notes.extend(warning);
    i.argv0 = crate::argv0();
    i.cwd = current_dir();
    i.strict = strict;
    i.workflow = args.workflow.clone();
    i.target = args
        .target
        .as_deref()
        .and_then(Target::parse)
        .unwrap_or(Target::Auto);
    i.probe = args.probe;
    i.sandbox = args.sandbox.as_deref().and_then(ModeChoice::parse);
    i.default_image = args.sandbox_default_image.clone();
    i.host_state = args.sandbox_host_state.as_deref().and_then(HostState::parse);
    i.runtime = match &args.sandbox_runtime {
        Some(r) => Some(
            iterion_spec::resolved::OciRuntime::parse(r).map_err(|m| format!("--sandbox-runtime: {m}"))?,
        ),
        None => None,
    };
    i.driver = args.sandbox_driver.clone();
    i.sandbox_env = sandbox_env;
    i.timeout = timeout;
    Ok(i)
}

/// Runs `iterion sandbox …`.
pub fn run(args: SandboxArgs, env: &BTreeMap<String, String>) -> ExitCode {
    match args.command {
        SandboxCommand::Doctor(a) => run_doctor(a, env),
        SandboxCommand::Prune(a) => crate::cmd_prune::run(a, env),
    }
}

fn run_doctor(args: DoctorArgs, env: &BTreeMap<String, String>) -> ExitCode {
    let inputs = match inputs(&args, env) {
        Ok(i) => i,
        Err(m) => return usage_json(args.json, m),
    };
    let loaded = match &inputs.workflow {
        Some(p) => match doctor::checks::load(p) {
            // a file `iterion run` would refuse fails the strict battery too (workflow_compiles)
            Ok(mut l) => {
                crate::cmd_validate::add_refusals(&mut l.checked, env);
                Some(l)
            }
            Err(m) => {
                if args.json {
                    println!("{}", serde_json::json!({"error": m, "exit": 2}));
                }
                eprintln!("error: {}", crate::terminal::clean(&m));
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return usage(format!("cannot start the async runtime: {e}")),
    };
    let result = rt.block_on(async {
        let work = async {
            let host = doctor::gather(&inputs).await.map_err(|e| e.to_string())?;
            for w in &host.selection.warnings {
                eprintln!("warning: {}", crate::terminal::clean(w));
            }
            let mut report = doctor::run(&inputs, &host, loaded.as_ref()).await?;
            // the warnings about the settings count with the checks' own
            report.add_notes(inputs.notes.iter().chain(&host.selection.warnings).cloned());
            Ok::<_, String>(report)
        };
        // Ctrl-C drops the battery: the probes' drop guard removes the throwaway sandbox and its proxy.
        tokio::select! {
            r = work => Some(r),
            _ = tokio::signal::ctrl_c() => None,
        }
    });
    let report = match result {
        Some(Ok(r)) => r,
        Some(Err(m)) => return usage_json(args.json, m),
        None => {
            eprintln!("interrupted");
            return ExitCode::from(130);
        }
    };
    if args.json {
        println!("{}", report.to_json());
    } else {
        let color = std::io::stdout().is_terminal() && env.get("NO_COLOR").is_none_or(|v| v.is_empty());
        print!("{}", report.to_human(color));
    }
    ExitCode::from(report.exit_code)
}

/// The current directory the doctor resolves relative data dir settings against (the temporary directory
/// when it cannot be read).
pub fn current_dir() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| std::env::temp_dir())
}

/// Prints a failed pre-flight: every failed check and hint on stderr, then the error line; with
/// `json`, stdout carries `{"error": "sandbox preflight failed", "preflight": <report>}`.
pub fn print_preflight_failure(report: &Report, json: bool) {
    for c in report.checks.iter().flatten() {
        if c.status == Status::Fail {
            eprintln!("sandbox preflight: FAIL {}: {}", c.id, c.message);
            if let Some(h) = &c.hint {
                eprintln!("  hint: {h}");
            }
        }
    }
    eprintln!("error: sandbox preflight failed ({} check(s))", report.failed());
    if json {
        let doc = serde_json::json!({"error": "sandbox preflight failed", "preflight": report});
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    }
}
