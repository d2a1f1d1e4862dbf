//! Driver selection: the host kind, the preference order, forcing, and the only place that constructs
//! concrete drivers (`DockerDriver`, `K8sDriver`, `NoopDriver`).
//!
//! `select` pings every candidate of the host kind concurrently, each bounded by `ping_timeout`, and keeps the
//! first available in preference order. `candidates_tried` records each candidate's outcome (the doctor
//! prints it; run errors quote it).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use iterion_driver::hardening::ContainerSettings;
use iterion_driver::{Driver, DriverKind, EngineInfo, NoopDriver};
use iterion_driver_docker::buildkit::BuilderSetting;
use iterion_driver_docker::endpoint::{EndpointSettings, Family};
use iterion_driver_docker::{DockerDriver, DockerSettings};
use iterion_driver_k8s::cluster::{ClusterAccess, DiscoveryInputs, Location};
use iterion_driver_k8s::{K8sDriver, K8sSettings};
use iterion_spec::duration::parse_positive;

use crate::error::{Error, Result};
pub use crate::force::ForceSource;

/// Default bound of each availability ping.
pub const DEFAULT_PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Host kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKind {
    /// A developer machine or CI host.
    Local,
    /// The desktop application.
    Desktop,
    /// A runner inside a cluster.
    Cloud,
}

impl HostKind {
    /// `local`, `desktop`, `cloud`.
    pub fn as_str(self) -> &'static str {
        match self {
            HostKind::Local => "local",
            HostKind::Desktop => "desktop",
            HostKind::Cloud => "cloud",
        }
    }

    /// The candidates of 03 §2.2, in preference order.
    pub fn candidates(self) -> &'static [DriverKind] {
        match self {
            HostKind::Cloud => &[DriverKind::Kubernetes, DriverKind::Noop],
            HostKind::Local | HostKind::Desktop => {
                &[DriverKind::Docker, DriverKind::Podman, DriverKind::Noop]
            }
        }
    }
}

/// Host kind of 03 §2.1 over the environment snapshot and `argv[0]`; warnings (an unknown `ITERION_MODE`) are
/// appended to `warnings`.
pub fn host_kind(
    env: &BTreeMap<String, String>,
    argv0: Option<&str>,
    warnings: &mut Vec<String>,
) -> HostKind {
    let get = |k: &str| env.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    if let Some(mode) = env.get("ITERION_MODE").map(|v| v.trim().to_ascii_lowercase()) {
        match mode.as_str() {
            "cloud" => return HostKind::Cloud,
            "local" => return HostKind::Local,
            "" => {}
            other => warnings.push(format!("ITERION_MODE '{other}' is not cloud or local; ignored")),
        }
    }
    if get("KUBERNETES_SERVICE_HOST").is_some() {
        return HostKind::Cloud;
    }
    let desktop_argv0 = argv0
        .map(|a| {
            std::path::Path::new(a)
                .file_name()
                .map(|f| f.to_string_lossy().to_ascii_lowercase())
                .unwrap_or_default()
        })
        .is_some_and(|f| f.contains("iterion-desktop"));
    if get("ITERION_DESKTOP").is_some() || desktop_argv0 {
        return HostKind::Desktop;
    }
    HostKind::Local
}

/// The outcome of probing one candidate.
#[derive(Debug, Clone)]
pub struct Tried {
    /// The candidate (as listed in the preference order; the engine identity may report another name).
    pub candidate: DriverKind,
    /// The engine's identity, or why the candidate is unavailable.
    pub outcome: Result<EngineInfo, String>,
}

/// What [`select`] decided.
#[derive(Debug, Clone)]
pub struct Selection {
    /// The driver to use. `None` only when a forced driver is unavailable ([`Selection::require`] then returns
    /// `SANDBOX_DRIVER_UNAVAILABLE`).
    pub driver: Option<Arc<dyn Driver>>,
    /// The selected (or forced) driver kind. A Podman engine found on a Docker socket is `Podman`.
    pub kind: DriverKind,
    /// Why: `first available of: docker, podman`, `forced by --sandbox-driver`, …
    pub reason: String,
    /// Host kind.
    pub host_kind: HostKind,
    /// The forcing source, when the driver was forced.
    pub forced: Option<ForceSource>,
    /// Every candidate probed, in preference order (noop last, always available).
    pub candidates_tried: Vec<Tried>,
    /// The identity of the selected engine (docker / podman).
    pub engine: Option<EngineInfo>,
    /// Warnings met while selecting (an ignored `ITERION_MODE`).
    pub warnings: Vec<String>,
}

impl Selection {
    /// The selected driver, or `SANDBOX_DRIVER_UNAVAILABLE` naming the forcing source and the reason.
    pub fn require(&self) -> iterion_driver::Result<Arc<dyn Driver>> {
        match &self.driver {
            Some(d) => Ok(d.clone()),
            None => Err(iterion_driver::Error::Unavailable {
                driver: self.kind.as_str().to_string(),
                reason: self.unavailable_reason().unwrap_or_else(|| "unavailable".into()),
            }),
        }
    }

    /// For a forced driver that is unavailable: `forced by <source>: <reason>`.
    pub fn unavailable_reason(&self) -> Option<String> {
        if self.driver.is_some() {
            return None;
        }
        let why = self
            .candidates_tried
            .iter()
            .find(|t| t.candidate == self.kind)
            .and_then(|t| t.outcome.as_ref().err().cloned())
            .unwrap_or_else(|| "unavailable".into());
        Some(match self.forced {
            Some(src) => format!("forced by {}: {why}", src.as_str()),
            None => why,
        })
    }

    /// The driver names that answered (sorted, noop included): `docker, noop, podman`.
    pub fn available(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .candidates_tried
            .iter()
            .filter_map(|t| {
                t.outcome
                    .as_ref()
                    .ok()
                    .map(|i| i.driver.unwrap_or(t.candidate).as_str().to_string())
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Each unavailable candidate with its reason, `docker: <reason>; podman: <reason>`.
    pub fn unavailable_summary(&self) -> String {
        self.candidates_tried
            .iter()
            .filter_map(|t| t.outcome.as_ref().err().map(|e| format!("{}: {e}", t.candidate)))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Inputs of [`select`] besides the environment.
#[derive(Debug, Clone)]
pub struct SelectOptions {
    /// `--sandbox-driver` (wins over `ITERION_SANDBOX_DRIVER`).
    pub forced_flag: Option<String>,
    /// Bound of each ping (the doctor passes `ITERION_SANDBOX_DOCTOR_TIMEOUT`).
    pub ping_timeout: Duration,
    /// The relay binary for the docker driver (see [`crate::relay_path`]).
    pub relay_binary: Option<PathBuf>,
    /// `argv[0]` of the embedding program (desktop detection); `None` when unknown.
    pub argv0: Option<String>,
    /// Whether the kubernetes driver may be used from outside a cluster on a host that is not `cloud` (the
    /// doctor's checks; `iterion run` refuses it).
    pub off_cluster_kubernetes: bool,
    /// Where the docker driver keeps the start checks' results per image (see [`crate::START_CHECKS_CACHE`]);
    /// `None`: every start runs them (the doctor, which checks for real).
    pub probe_cache: Option<PathBuf>,
}

impl SelectOptions {
    /// Options with the given `--sandbox-driver`, a 5 s ping and no relay.
    pub fn new(forced_flag: Option<String>) -> Self {
        Self {
            forced_flag,
            ping_timeout: DEFAULT_PING_TIMEOUT,
            relay_binary: None,
            argv0: None,
            off_cluster_kubernetes: false,
            probe_cache: None,
        }
    }
}

/// Parses the forcing inputs: the flag wins over `ITERION_SANDBOX_DRIVER`; an empty value is unset; an
/// unknown name is a usage error naming its source.
pub fn forced_driver(
    env: &BTreeMap<String, String>,
    flag: Option<&str>,
) -> Result<Option<(DriverKind, ForceSource)>> {
    let (value, src) = match (flag, env.get("ITERION_SANDBOX_DRIVER")) {
        (Some(f), _) => (f.trim().to_string(), ForceSource::Flag),
        (None, Some(v)) => (v.trim().to_string(), ForceSource::Env),
        (None, None) => return Ok(None),
    };
    if value.is_empty() {
        return Ok(None);
    }
    match DriverKind::parse(&value) {
        Some(k) => Ok(Some((k, src))),
        None => Err(Error::InvalidDriver { from: src, value }),
    }
}

fn endpoint_settings(env: &BTreeMap<String, String>) -> EndpointSettings {
    let get = |k: &str| env.get(k).cloned();
    EndpointSettings::new(
        get("DOCKER_HOST"),
        get("CONTAINER_HOST"),
        get("XDG_RUNTIME_DIR").map(PathBuf::from),
        get("HOME").map(PathBuf::from),
    )
}

/// The Docker `config.json` holding registry credentials: `$DOCKER_CONFIG/config.json`, else
/// `$HOME/.docker/config.json`.
pub fn docker_config(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    let nonempty = |k: &str| env.get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    nonempty("DOCKER_CONFIG")
        .map(|d| d.join("config.json"))
        .or_else(|| nonempty("HOME").map(|h| h.join(".docker/config.json")))
}

fn docker_settings(env: &BTreeMap<String, String>, family: Family, opts: &SelectOptions) -> DockerSettings {
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut s = DockerSettings::new(
        endpoint_settings(env),
        family,
        host,
        nix::unistd::getuid().as_raw(),
    );
    s.ping_timeout = opts.ping_timeout;
    s.docker_config = docker_config(env);
    s.helper_path = env.get("PATH").cloned();
    s.builder = env
        .get("ITERION_SANDBOX_BUILDER")
        .and_then(|v| BuilderSetting::parse(v))
        .unwrap_or_default();
    if let Some(r) = &opts.relay_binary {
        s = s.with_relay_binary(r.clone());
    }
    s.probe_cache = opts.probe_cache.clone();
    s
}

async fn probe_engine(
    env: &BTreeMap<String, String>,
    family: Family,
    opts: &SelectOptions,
) -> (Arc<DockerDriver>, Result<EngineInfo, String>) {
    let d = Arc::new(DockerDriver::new(docker_settings(env, family, opts)));
    let r = d.engine_info().await.map_err(|e| match e {
        iterion_driver::Error::Unavailable { reason, .. } => reason,
        other => other.to_string(),
    });
    (d, r)
}

/// The driver of host-placed nodes (and of every node of an unsandboxed run): a `NoopDriver` whose processes
/// start from `base_env` (iterion's own environment).
pub fn host_driver(base_env: Vec<(String, String)>) -> Arc<dyn Driver> {
    Arc::new(NoopDriver::new(base_env))
}

/// Why `iterion run` refuses the kubernetes driver off-cluster without `ITERION_MODE=cloud`.
pub const OFF_CLUSTER_RUN: &str = "the kubernetes driver outside a cluster is only for iterion sandbox doctor; set ITERION_MODE=cloud to run sandboxes from here";

/// The kubernetes driver's settings read from the environment snapshot (07 §2.3). Invalid durations keep
/// their default (the runtime's settings warn about them); limits use the same parsing as Docker's.
pub fn k8s_settings(env: &BTreeMap<String, String>) -> K8sSettings {
    let get = |k: &str| env.get(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let mut s = K8sSettings::default();
    s.namespace = get("ITERION_SANDBOX_K8S_NAMESPACE");
    s.pod_ip = get("ITERION_POD_IP");
    s.pod_ips = get("ITERION_POD_IPS");
    s.pod_name = get("ITERION_POD_NAME");
    s.pod_uid = get("ITERION_POD_UID");
    if let Some(d) = get("ITERION_SANDBOX_K8S_POD_READY_TIMEOUT").and_then(|v| parse_positive(&v)) {
        s.pod_ready_timeout = d;
    }
    if let Some(d) = get("ITERION_SANDBOX_WORKSPACE_COPY_TIMEOUT").and_then(|v| parse_positive(&v)) {
        s.workspace_copy_timeout = d;
    }
    s.overrides = get("ITERION_SANDBOX_K8S_POD_OVERRIDES").unwrap_or_default();
    s.pull_policy = get("ITERION_SANDBOX_PULL_POLICY")
        .map(|v| v.to_ascii_lowercase())
        .unwrap_or_default();
    let limits = ContainerSettings::from_env(env).limits;
    s.memory = limits.memory_bytes.map(|b| b.to_string());
    s.cpus = limits
        .nano_cpus
        .map(|n| format!("{}m", n.div_ceil(1_000_000).max(1)));
    s
}

async fn probe_kubernetes(
    env: &BTreeMap<String, String>,
    opts: &SelectOptions,
    host: HostKind,
) -> (Arc<K8sDriver>, Result<EngineInfo, String>) {
    let access = ClusterAccess::discover(&DiscoveryInputs::new(env.clone()));
    let off_cluster = access.location() == Location::OffCluster;
    let d = Arc::new(K8sDriver::new(access, k8s_settings(env)));
    if off_cluster && host != HostKind::Cloud && !opts.off_cluster_kubernetes {
        return (d, Err(OFF_CLUSTER_RUN.to_string()));
    }
    let r = match tokio::time::timeout(opts.ping_timeout, d.engine_info()).await {
        Ok(Ok(info)) => Ok(info),
        Ok(Err(iterion_driver::Error::Unavailable { reason, .. })) => Err(reason),
        Ok(Err(other)) => Err(other.to_string()),
        Err(_) => Err(format!(
            "the cluster did not answer within {}",
            iterion_driver::fmt_duration(opts.ping_timeout)
        )),
    };
    (d, r)
}

/// Selects the driver. `Err` only for an invalid driver name (a usage error).
pub async fn select(env: &BTreeMap<String, String>, opts: &SelectOptions) -> Result<Selection> {
    let forced = forced_driver(env, opts.forced_flag.as_deref())?;
    let mut warnings = Vec::new();
    let host = host_kind(env, opts.argv0.as_deref(), &mut warnings);
    if let Some(b) = env.get("ITERION_SANDBOX_BUILDER")
        && BuilderSetting::parse(b).is_none()
    {
        warnings.push(format!(
            "ITERION_SANDBOX_BUILDER '{b}' is not auto, buildkit or classic; auto is used"
        ));
    }
    // Which candidates to probe: the host's list; with a forced driver only that one (and noop).
    // An explicit DOCKER_HOST names the engine, as for the docker CLI: when it does not answer, iterion does
    // not quietly switch to another engine (Podman).
    let docker_host = env
        .get("DOCKER_HOST")
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    let wanted: Vec<DriverKind> = match forced {
        Some((DriverKind::Noop, _)) => vec![DriverKind::Noop],
        Some((k, _)) => vec![k, DriverKind::Noop],
        None if docker_host.is_some() => host
            .candidates()
            .iter()
            .copied()
            .filter(|k| *k != DriverKind::Podman)
            .collect(),
        None => host.candidates().to_vec(),
    };
    let podman_forced = matches!(forced, Some((DriverKind::Podman, _)));
    let ((docker, podman), kubernetes) =
        tokio::join!(ping_engines(env, opts, &wanted, podman_forced), async {
            if wanted.contains(&DriverKind::Kubernetes) {
                Some(probe_kubernetes(env, opts, host).await)
            } else {
                None
            }
        });
    let noop_base: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let (tried, drivers) = outcomes(&wanted, &docker, &podman, &kubernetes, noop_base);
    let (driver, kind, mut reason, engine) = decide(forced, host, &drivers);
    if forced.is_none()
        && kind == DriverKind::Noop
        && let Some(h) = &docker_host
        && host.candidates().contains(&DriverKind::Docker)
    {
        reason = format!(
            "DOCKER_HOST={h} did not answer; Podman is not tried while DOCKER_HOST names the engine (unset it, or pass --sandbox-driver podman)"
        );
    }
    Ok(Selection {
        driver,
        kind,
        reason,
        host_kind: host,
        forced: forced.map(|(_, s)| s),
        candidates_tried: tried,
        engine,
        warnings,
    })
}

/// A pinged engine: its driver and what the ping answered.
type Pinged = (Arc<DockerDriver>, std::result::Result<EngineInfo, String>);
/// An available candidate: its kind, driver and engine identity (none for noop).
type Available = (DriverKind, Arc<dyn Driver>, Option<EngineInfo>);

/// How long Docker, the preferred engine, has to answer before Podman is asked too.
const PODMAN_GRACE: Duration = Duration::from_millis(250);

/// Pings Docker and Podman (those `wanted`). Podman is asked only once Docker has failed, or has not answered
/// within [`PODMAN_GRACE`], or when Podman was forced: docker is preferred, so podman's answer could not change
/// the choice, and asking costs the machine more than the wait. Podman's `/info` runs its OCI runtime and
/// helpers to report their versions (0.6–0.9 s of `/version` on a loaded CI machine); asked alongside every
/// run, that work competed with the run's own container start: a one-node run took 100–200 ms longer with a
/// Podman service answering beside Docker than with it stopped.
async fn ping_engines(
    env: &BTreeMap<String, String>,
    opts: &SelectOptions,
    wanted: &[DriverKind],
    podman_forced: bool,
) -> (Option<Pinged>, Option<Pinged>) {
    let want = |k| wanted.contains(&k);
    // `Some(true)`: docker answered; `Some(false)`: it failed (or is not a candidate); `None`: still asking.
    let (docker_done, docker_done_rx) = tokio::sync::watch::channel(None::<bool>);
    tokio::join!(
        async {
            if !want(DriverKind::Docker) {
                let _ = docker_done.send(Some(false));
                return None;
            }
            let r = probe_engine(env, Family::Docker, opts).await;
            let _ = docker_done.send(Some(r.1.is_ok()));
            Some(r)
        },
        async {
            if !want(DriverKind::Podman) {
                return None;
            }
            let mut rx = docker_done_rx.clone();
            let docker_answered = if podman_forced {
                false
            } else {
                match tokio::time::timeout(PODMAN_GRACE, rx.wait_for(|d| d.is_some())).await {
                    Ok(Ok(d)) => *d == Some(true),
                    // Docker is slow (or its prober is gone): ask Podman meanwhile.
                    Ok(Err(_)) | Err(_) => false,
                }
            };
            // Podman's outcome when its answer is not used: a driver that was never connected.
            let unused = |why: &str| -> Pinged {
                (
                    Arc::new(DockerDriver::new(docker_settings(env, Family::Podman, opts))),
                    Err(why.to_string()),
                )
            };
            if docker_answered {
                return Some(unused("not asked: docker, which is preferred, answered"));
            }
            // Asked: still dropped if docker answers first after all.
            let mut rx = docker_done_rx.clone();
            let cut = async move {
                if podman_forced || rx.wait_for(|d| *d == Some(true)).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                r = probe_engine(env, Family::Podman, opts) => Some(r),
                _ = cut => Some(unused("not waited for: docker, which is preferred, answered first")),
            }
        }
    )
}

/// Every wanted candidate's outcome, in preference order, and the available ones.
fn outcomes(
    wanted: &[DriverKind],
    docker: &Option<Pinged>,
    podman: &Option<Pinged>,
    kubernetes: &Option<(Arc<K8sDriver>, std::result::Result<EngineInfo, String>)>,
    noop_base: Vec<(String, String)>,
) -> (Vec<Tried>, Vec<Available>) {
    let mut tried = Vec::new();
    let mut drivers: Vec<Available> = Vec::new();
    for k in wanted {
        match k {
            DriverKind::Docker | DriverKind::Podman => {
                let probed = if *k == DriverKind::Docker { docker } else { podman };
                if let Some((d, outcome)) = probed {
                    tried.push(Tried {
                        candidate: *k,
                        outcome: outcome.clone(),
                    });
                    if let Ok(info) = outcome {
                        drivers.push((*k, d.clone() as Arc<dyn Driver>, Some(info.clone())));
                    }
                }
            }
            DriverKind::Kubernetes => {
                if let Some((d, outcome)) = kubernetes {
                    tried.push(Tried {
                        candidate: *k,
                        outcome: outcome.clone(),
                    });
                    if let Ok(info) = outcome {
                        drivers.push((*k, d.clone() as Arc<dyn Driver>, Some(info.clone())));
                    }
                }
            }
            DriverKind::Noop => {
                tried.push(Tried {
                    candidate: *k,
                    outcome: Ok(EngineInfo::new(DriverKind::Noop, "host")),
                });
                drivers.push((*k, host_driver(noop_base.clone()), None));
            }
        }
    }
    (tried, drivers)
}

/// The decision: the forced driver (possibly down), else the first available candidate of the host kind.
fn decide(
    forced: Option<(DriverKind, ForceSource)>,
    host: HostKind,
    drivers: &[Available],
) -> (Option<Arc<dyn Driver>>, DriverKind, String, Option<EngineInfo>) {
    let real_names: Vec<&str> = host
        .candidates()
        .iter()
        .filter(|k| **k != DriverKind::Noop)
        .map(|k| k.as_str())
        .collect();
    match forced {
        Some((k, src)) => match drivers.iter().find(|(c, _, _)| *c == k) {
            Some((_, d, info)) => (
                Some(d.clone()),
                info.as_ref().and_then(|i| i.driver).unwrap_or(k),
                format!("forced by {}", src.as_str()),
                info.clone(),
            ),
            None => (None, k, format!("forced by {}", src.as_str()), None),
        },
        None => {
            let (c, d, info) = drivers
                .iter()
                .find(|(c, _, _)| host.candidates().contains(c))
                .cloned()
                .expect("noop is always a candidate and always available");
            let reason = if c == DriverKind::Noop {
                format!("no container runtime: none of {} answered", real_names.join(", "))
            } else {
                format!("first available of: {}", real_names.join(", "))
            };
            (
                Some(d),
                info.as_ref().and_then(|i| i.driver).unwrap_or(c),
                reason,
                info,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn docker_settings_read_config_path_and_builder() {
        assert_eq!(
            docker_config(&env(&[("DOCKER_CONFIG", "/c"), ("HOME", "/h")])),
            Some(PathBuf::from("/c/config.json"))
        );
        assert_eq!(
            docker_config(&env(&[("DOCKER_CONFIG", ""), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.docker/config.json"))
        );
        assert_eq!(docker_config(&env(&[])), None);
        let opts = SelectOptions::new(None);
        let s = docker_settings(
            &env(&[
                ("PATH", "/opt/bin:/usr/bin"),
                ("ITERION_SANDBOX_BUILDER", "BuildKit"),
            ]),
            Family::Docker,
            &opts,
        );
        assert_eq!(s.builder, BuilderSetting::BuildKit);
        assert_eq!(s.helper_path.as_deref(), Some("/opt/bin:/usr/bin"));
        let s = docker_settings(&env(&[("ITERION_SANDBOX_BUILDER", "v9")]), Family::Docker, &opts);
        assert_eq!(s.builder, BuilderSetting::Auto);
    }

    #[tokio::test]
    async fn a_dead_docker_host_is_not_silently_replaced_by_podman() {
        let dir = tempfile::tempdir().unwrap();
        let dead = format!("unix://{}", dir.path().join("dead.sock").display());
        let e = env(&[("DOCKER_HOST", &dead), ("ITERION_MODE", "local")]);
        let mut opts = SelectOptions::new(None);
        opts.ping_timeout = Duration::from_millis(500);
        let s = select(&e, &opts).await.unwrap();
        assert_eq!(s.kind, DriverKind::Noop);
        let tried: Vec<DriverKind> = s.candidates_tried.iter().map(|t| t.candidate).collect();
        assert!(!tried.contains(&DriverKind::Podman), "{tried:?}");
        assert!(
            s.reason.contains(&format!("DOCKER_HOST={dead} did not answer")),
            "{}",
            s.reason
        );
        assert!(s.reason.contains("--sandbox-driver podman"), "{}", s.reason);
        // forcing podman still tries it
        let s = select(&e, &SelectOptions::new(Some("podman".into())))
            .await
            .unwrap();
        assert!(
            s.candidates_tried
                .iter()
                .any(|t| t.candidate == DriverKind::Podman)
        );
    }

    /// Podman is not even asked when Docker, the preferred engine, answers: its service would otherwise do the
    /// work of `/version` and `/info` (running its OCI runtime and helpers) while the run starts its container.
    #[tokio::test]
    async fn podman_is_not_asked_when_docker_answers() {
        if !iterion_test_support::engine_required("podman_is_not_asked_when_docker_answers") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("podman.sock");
        let listener = tokio::net::UnixListener::bind(&sock).unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        let server = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(conn);
            }
        });
        let home = dir.path().display().to_string();
        let podman = format!("unix://{}", sock.display());
        let e = env(&[
            ("HOME", &home),
            ("CONTAINER_HOST", &podman),
            ("ITERION_MODE", "local"),
        ]);
        let s = select(&e, &SelectOptions::new(None)).await.unwrap();
        if s.kind != DriverKind::Docker {
            // The test engine answers only where its default socket is not (DOCKER_HOST): nothing to compare.
            let _ = writeln!(
                std::io::stderr(),
                "podman_is_not_asked_when_docker_answers: docker is not on its default socket here ({})",
                s.reason
            );
            server.abort();
            return;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.abort();
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "podman was asked"
        );
        let podman_tried = s
            .candidates_tried
            .iter()
            .find(|t| t.candidate == DriverKind::Podman)
            .expect("podman is listed");
        assert!(
            matches!(&podman_tried.outcome, Err(m) if m.starts_with("not asked")),
            "{:?}",
            podman_tried.outcome
        );
    }

    fn check_host(pairs: &[(&str, &str)], argv0: Option<&str>, expect: HostKind, expect_warnings: usize) {
        let mut w = Vec::new();
        assert_eq!(
            host_kind(&env(pairs), argv0, &mut w),
            expect,
            "{pairs:?} {argv0:?}"
        );
        assert_eq!(w.len(), expect_warnings, "{w:?}");
    }

    #[test]
    fn host_kind_rules_2_1() {
        check_host(&[("ITERION_MODE", " Cloud ")], None, HostKind::Cloud, 0);
        check_host(
            &[("ITERION_MODE", "local"), ("KUBERNETES_SERVICE_HOST", "10.0.0.1")],
            None,
            HostKind::Local,
            0,
        );
        check_host(&[("ITERION_MODE", "edge")], None, HostKind::Local, 1);
        check_host(
            &[("KUBERNETES_SERVICE_HOST", "10.0.0.1")],
            None,
            HostKind::Cloud,
            0,
        );
        check_host(&[("KUBERNETES_SERVICE_HOST", "")], None, HostKind::Local, 0);
        check_host(&[("ITERION_DESKTOP", "1")], None, HostKind::Desktop, 0);
        check_host(
            &[],
            Some("/Applications/Iterion-Desktop.app/iterion-desktop"),
            HostKind::Desktop,
            0,
        );
        check_host(&[], Some("/usr/bin/iterion"), HostKind::Local, 0);
    }

    #[test]
    fn forcing_flag_wins_and_names_are_checked() {
        let e = env(&[("ITERION_SANDBOX_DRIVER", "podman")]);
        assert_eq!(
            forced_driver(&e, Some("noop")).unwrap(),
            Some((DriverKind::Noop, ForceSource::Flag))
        );
        assert_eq!(
            forced_driver(&e, None).unwrap(),
            Some((DriverKind::Podman, ForceSource::Env))
        );
        assert_eq!(
            forced_driver(&env(&[("ITERION_SANDBOX_DRIVER", "")]), None).unwrap(),
            None
        );
        let err = forced_driver(&env(&[("ITERION_SANDBOX_DRIVER", "lxc")]), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid ITERION_SANDBOX_DRIVER 'lxc' (want docker, podman, kubernetes or noop)"
        );
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn no_engine_env(dir: &std::path::Path) -> BTreeMap<String, String> {
        let sock = format!("unix://{}", dir.join("absent.sock").display());
        env(&[
            ("DOCKER_HOST", &sock),
            ("CONTAINER_HOST", &sock),
            ("HOME", dir.to_str().unwrap()),
        ])
    }

    #[test]
    fn no_engine_selects_noop_with_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let sel = rt()
            .block_on(select(&no_engine_env(dir.path()), &SelectOptions::new(None)))
            .unwrap();
        assert_eq!(sel.kind, DriverKind::Noop);
        // DOCKER_HOST names the (absent) engine: Podman is not tried in its place
        assert!(sel.reason.ends_with("did not answer; Podman is not tried while DOCKER_HOST names the engine (unset it, or pass --sandbox-driver podman)"), "{}", sel.reason);
        assert_eq!(sel.available(), vec!["noop".to_string()]);
        assert_eq!(sel.candidates_tried.len(), 2);
        assert!(
            sel.unavailable_summary().starts_with("docker: "),
            "{}",
            sel.unavailable_summary()
        );
        assert!(sel.require().is_ok());
    }

    #[test]
    fn forced_unavailable_driver_is_an_error_naming_the_source() {
        let dir = tempfile::tempdir().unwrap();
        let sel = rt()
            .block_on(select(
                &no_engine_env(dir.path()),
                &SelectOptions::new(Some("docker".into())),
            ))
            .unwrap();
        assert_eq!(sel.kind, DriverKind::Docker);
        assert!(sel.driver.is_none());
        let err = sel.require().unwrap_err();
        assert_eq!(
            err.failure_code(true),
            Some(iterion_driver::FailureCode::DriverUnavailable)
        );
        assert!(err.to_string().contains("forced by --sandbox-driver"), "{err}");
    }

    #[test]
    fn forced_kubernetes_off_cluster_is_refused_unless_cloud_or_doctor() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = no_engine_env(dir.path());
        env.insert(
            "KUBECONFIG".into(),
            dir.path().join("absent").display().to_string(),
        );
        let forced = SelectOptions::new(Some("kubernetes".into()));
        let sel = rt().block_on(select(&env, &forced)).unwrap();
        assert_eq!(sel.kind, DriverKind::Kubernetes);
        assert!(sel.driver.is_none());
        assert_eq!(
            sel.unavailable_reason().as_deref(),
            Some(format!("forced by --sandbox-driver: {OFF_CLUSTER_RUN}").as_str())
        );
        // The doctor, and a cloud host, get to the cluster checks (here: no kubeconfig).
        let mut doctor = forced.clone();
        doctor.off_cluster_kubernetes = true;
        let mut cloud = env.clone();
        cloud.insert("ITERION_MODE".into(), "cloud".into());
        for (env, opts) in [(&env, &doctor), (&cloud, &forced)] {
            let sel = rt().block_on(select(env, opts)).unwrap();
            let why = sel.unavailable_reason().unwrap();
            assert!(
                !why.contains(OFF_CLUSTER_RUN) && why.contains("kubeconfig"),
                "{why}"
            );
        }
    }

    #[test]
    fn k8s_settings_convert_limits_to_quantities() {
        let s = k8s_settings(&env(&[
            ("ITERION_SANDBOX_MEMORY_LIMIT", "512m"),
            ("ITERION_SANDBOX_CPUS", "1.5"),
            ("ITERION_SANDBOX_K8S_POD_READY_TIMEOUT", "2s"),
            ("ITERION_SANDBOX_WORKSPACE_COPY_TIMEOUT", "nonsense"),
            ("ITERION_POD_IP", " 10.0.0.7 "),
            ("ITERION_SANDBOX_PULL_POLICY", "Never"),
        ]));
        assert_eq!(s.memory.as_deref(), Some("536870912"));
        assert_eq!(s.cpus.as_deref(), Some("1500m"));
        assert_eq!(s.pod_ready_timeout, Duration::from_secs(2));
        assert_eq!(s.workspace_copy_timeout, Duration::from_secs(900));
        assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.7"));
        assert_eq!(s.pull_policy, "never");
    }

    #[test]
    fn forced_noop_is_selected() {
        let dir = tempfile::tempdir().unwrap();
        let sel = rt()
            .block_on(select(
                &no_engine_env(dir.path()),
                &SelectOptions::new(Some("noop".into())),
            ))
            .unwrap();
        assert_eq!(sel.kind, DriverKind::Noop);
        assert_eq!(sel.reason, "forced by --sandbox-driver");
        assert_eq!(sel.forced, Some(ForceSource::Flag));
    }
}
