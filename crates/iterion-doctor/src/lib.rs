//! The sandbox doctor (06): report mode, the strict battery, the report and its rendering, and the run
//! pre-flight. Printing is the caller's: the CLI's `iterion sandbox doctor` prints [`Report::to_human`] or
//! [`Report::to_json`].
//!
//! The battery is pure over a [`Host`] (the selected driver and an [`engine::EngineProbe`]) and [`Inputs`], so
//! tests drive every check with a fake driver and a fake engine. [`gather`] builds the real [`Host`].
//!
//! With `--strict --probe`, [`probes`] adds the boundary probes of 06 §6: a throwaway sandbox started through
//! the selected driver, the doctor's own egress proxy, and the static probe program ([`probe`]) run
//! once per probe check inside it.
//!
//! Pre-flight for `iterion run` / `iterion resume`:
//!
//! ```ignore
//! match doctor::preflight_mode(env)? {                // Err: invalid ITERION_SANDBOX_PREFLIGHT (exit 2)
//!     None => {}
//!     Some(probe) => {
//!         let mut inputs = doctor::Inputs::new(env.clone(), work_dir);   // absolute work dir
//!         inputs.workflow = Some(workflow_path);
//!         inputs.probe = probe;
//!         inputs.sandbox = /* --sandbox */; inputs.default_image = /* … */; inputs.host_state = /* … */;
//!         inputs.driver = /* --sandbox-driver */; inputs.sandbox_env = /* --sandbox-env entries */;
//!         inputs.timeout = doctor::doctor_timeout(env).0;
//!         match doctor::preflight(inputs).await {
//!             Ok(_report) => {}                            // warnings were printed to stderr
//!             Err(doctor::PreflightError::Failed(report)) => {
//!                 print_preflight_failure(&report, json);  // the caller's: stderr lines, or the JSON wrapper
//!                 return ExitCode::from(2);
//!             }
//!             Err(doctor::PreflightError::Usage(m)) => { eprintln!("error: {m}"); return ExitCode::from(2); }
//!         }
//!     }
//! }
//! ```

pub mod checks;
pub mod engine;
pub mod probe;
pub mod probes;
pub mod report;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use iterion_spec::resolve::ModeChoice;
use iterion_spec::resolved::HostState;

pub use report::{Report, Status};

use engine::{EngineProbe, UnixEngine};
use iterion_host::Selection;

/// Default bound of each engine call and probe.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// `--target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Follow the selected driver.
    Auto,
    /// The Kubernetes battery.
    Cloud,
    /// The Docker / Podman battery.
    Local,
}

impl Target {
    /// Parses `auto`, `cloud`, `local`.
    pub fn parse(s: &str) -> Option<Target> {
        match s {
            "auto" => Some(Target::Auto),
            "cloud" => Some(Target::Cloud),
            "local" => Some(Target::Local),
            _ => None,
        }
    }

    /// The lower-case word.
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Auto => "auto",
            Target::Cloud => "cloud",
            Target::Local => "local",
        }
    }
}

/// Everything the doctor is asked (flags and the environment snapshot).
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The process environment, read once by `main`.
    pub env: BTreeMap<String, String>,
    /// `--strict`.
    pub strict: bool,
    /// `WORKFLOW`.
    pub workflow: Option<PathBuf>,
    /// `--target`.
    pub target: Target,
    /// `--probe`.
    pub probe: bool,
    /// `--sandbox`.
    pub sandbox: Option<ModeChoice>,
    /// `--sandbox-default-image`.
    pub default_image: Option<String>,
    /// `--sandbox-host-state`.
    pub host_state: Option<HostState>,
    /// `--sandbox-runtime`.
    pub runtime: Option<iterion_spec::resolved::OciRuntime>,
    /// `--sandbox-driver`.
    pub driver: Option<String>,
    /// `--sandbox-env NAME[=VALUE]`, resolved to entries (a bare name takes the host value).
    pub sandbox_env: Vec<(String, String)>,
    /// `--work-dir` (absolute).
    pub work_dir: PathBuf,
    /// `ITERION_SANDBOX_DOCTOR_TIMEOUT`.
    pub timeout: Duration,
    /// Warnings about the settings found while reading them, counted in the report's summary.
    pub notes: Vec<String>,
    /// `argv[0]` of the process, read once by the caller (driver selection looks for a sibling relay).
    pub argv0: Option<String>,
    /// The process's current directory, read once by the caller (relative data dir settings resolve
    /// against it).
    pub cwd: PathBuf,
}

impl Inputs {
    /// Inputs with defaults: report mode, target auto, no flags, 5 s bound, no `argv[0]`, the work dir as
    /// current directory.
    pub fn new(env: BTreeMap<String, String>, work_dir: PathBuf) -> Self {
        Inputs {
            env,
            strict: false,
            workflow: None,
            target: Target::Auto,
            probe: false,
            sandbox: None,
            default_image: None,
            host_state: None,
            runtime: None,
            driver: None,
            sandbox_env: Vec::new(),
            cwd: work_dir.clone(),
            work_dir,
            timeout: DEFAULT_TIMEOUT,
            notes: Vec::new(),
            argv0: None,
        }
    }
}

/// `ITERION_SANDBOX_DOCTOR_TIMEOUT`: the bound and, for an empty, unparseable or non-positive
/// value, a warning naming the variable (the default is then used).
pub fn doctor_timeout(env: &BTreeMap<String, String>) -> (Duration, Option<String>) {
    const NAME: &str = "ITERION_SANDBOX_DOCTOR_TIMEOUT";
    let Some(raw) = env.get(NAME) else {
        return (DEFAULT_TIMEOUT, None);
    };
    match iterion_spec::duration::parse(raw.trim()) {
        Some(d) if !d.is_zero() => (d.min(Duration::from_nanos(u64::MAX)), None),
        _ => (
            DEFAULT_TIMEOUT,
            Some(format!(
                "{NAME} '{}' is not a positive duration; using the default 5s",
                raw.escape_debug()
            )),
        ),
    }
}

/// What the battery knows about this host: the driver selection and the engine to ask.
#[derive(Debug, Clone)]
pub struct Host {
    /// Driver selection.
    pub selection: Selection,
    /// The engine endpoint the doctor queries (the selected engine, else the first Docker candidate).
    pub engine: Arc<dyn EngineProbe>,
}

/// Selects the driver and picks the engine endpoint to query, each ping bounded by the doctor timeout.
pub async fn gather(inputs: &Inputs) -> Result<Host, iterion_host::Error> {
    let mut opts = iterion_host::SelectOptions::new(inputs.driver.clone());
    opts.ping_timeout = inputs.timeout;
    opts.argv0 = inputs.argv0.clone();
    // The doctor's cloud checks may use a kubeconfig from a workstation; only `iterion run` refuses that.
    opts.off_cluster_kubernetes = true;
    if inputs.strict && inputs.probe {
        // The throwaway sandbox needs the egress relay, as a run does (03 §7.2); an error shows in
        // probe_sandbox_start.
        let relay_override = iterion_host::relay_override(&inputs.env);
        opts.relay_binary = iterion_host::relay_path(&data_dir(inputs), relay_override).ok();
    }
    let selection = iterion_host::select(&inputs.env, &opts).await?;
    let socket = selection
        .engine
        .as_ref()
        .and_then(|e| e.endpoint.as_ref())
        .and_then(|e| e.strip_prefix("unix://"))
        .map(PathBuf::from)
        .unwrap_or_else(|| first_candidate(&inputs.env));
    Ok(Host {
        selection,
        engine: Arc::new(UnixEngine {
            socket,
            timeout: inputs.timeout,
        }),
    })
}

/// iterion's data directory: where the relay and the probe program are installed.
pub fn data_dir(inputs: &Inputs) -> PathBuf {
    iterion_host::data_dir(&inputs.env, &inputs.cwd)
}

/// The temporary directory as the standard library finds it on Unix (`TMPDIR`, else `/tmp`), taken from the
/// environment snapshot.
pub fn temp_dir(env: &BTreeMap<String, String>) -> PathBuf {
    env.get("TMPDIR")
        .filter(|t| !t.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// The first local socket of the Docker candidate list that exists, else the first one.
fn first_candidate(env: &BTreeMap<String, String>) -> PathBuf {
    use iterion_driver_docker::endpoint::{Candidate, EndpointSettings, candidates};
    let get = |k: &str| env.get(k).cloned();
    let settings = EndpointSettings::new(
        get("DOCKER_HOST"),
        get("CONTAINER_HOST"),
        get("XDG_RUNTIME_DIR").map(PathBuf::from),
        get("HOME").map(PathBuf::from),
    );
    let paths: Vec<PathBuf> = candidates(&settings)
        .into_iter()
        .filter_map(|c| match c {
            Candidate::Unix { path, .. } => Some(path),
            Candidate::Refused { .. } => None,
        })
        .collect();
    paths
        .iter()
        .find(|p| p.exists())
        .or(paths.first())
        .cloned()
        .unwrap_or_else(|| PathBuf::from("/var/run/docker.sock"))
}

/// Runs report mode or the strict battery and builds the report (06 §2, §3). `loaded` is the workflow file
/// read with [`checks::load`]. `Err` is a usage error (invalid sandbox environment values; exit 2).
pub async fn run(inputs: &Inputs, host: &Host, loaded: Option<&checks::Loaded>) -> Result<Report, String> {
    checks::build_report(inputs, host, loaded).await
}

/// `ITERION_SANDBOX_PREFLIGHT`: `None` = no pre-flight, `Some(false)` = battery, `Some(true)` = battery
/// with probes; `Err` = the usage-error message (exit 2).
pub fn preflight_mode(env: &BTreeMap<String, String>) -> Result<Option<bool>, String> {
    let raw = env
        .get("ITERION_SANDBOX_PREFLIGHT")
        .map(|v| v.trim())
        .unwrap_or("");
    match raw.to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "no" | "off" => Ok(None),
        "1" | "true" | "yes" | "on" => Ok(Some(false)),
        "probe" => Ok(Some(true)),
        _ => Err(format!(
            "invalid ITERION_SANDBOX_PREFLIGHT '{}' (want 1, probe or 0)",
            raw.escape_debug()
        )),
    }
}

/// The pre-flight of `iterion run` / `iterion resume`: runs the strict battery (`inputs.strict` is
/// forced on) and returns `Err(report)` when any check fails. Warnings are printed to stderr as
/// `sandbox preflight: WARN <id>: <message>`; the caller logs them to `run.log` once the run exists.
pub async fn preflight(mut inputs: Inputs) -> Result<Report, PreflightError> {
    inputs.strict = true;
    let loaded = match &inputs.workflow {
        Some(p) => Some(checks::load(p).map_err(PreflightError::Usage)?),
        None => None,
    };
    let host = gather(&inputs)
        .await
        .map_err(|e| PreflightError::Usage(e.to_string()))?;
    preflight_on(&inputs, &host, loaded.as_ref()).await
}

/// [`preflight`] on an already gathered host and loaded workflow (tests inject a fake host).
pub async fn preflight_on(
    inputs: &Inputs,
    host: &Host,
    loaded: Option<&checks::Loaded>,
) -> Result<Report, PreflightError> {
    let mut inputs = inputs.clone();
    inputs.strict = true;
    let report = run(&inputs, host, loaded).await.map_err(PreflightError::Usage)?;
    for c in report.checks.iter().flatten() {
        if c.status == Status::Warn {
            eprintln!("sandbox preflight: WARN {}: {}", c.id, c.message);
        }
    }
    if report.failed() > 0 {
        Err(PreflightError::Failed(Box::new(report)))
    } else {
        Ok(report)
    }
}

/// Why the pre-flight stops the run (exit 2 either way).
#[derive(Debug)]
pub enum PreflightError {
    /// A usage error (an invalid `--sandbox-driver` / `ITERION_SANDBOX_DRIVER`): print `error: <message>`.
    Usage(String),
    /// At least one check failed: the caller prints every failed check and hint.
    Failed(Box<Report>),
}
