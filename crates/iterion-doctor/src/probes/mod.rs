//! Boundary probes (06 §6): the throwaway sandbox, the doctor's own egress proxy, one probe exec per check,
//! and the mapping of each probe's JSON answer to a check (pure functions over [`Facts`], unit-tested with
//! fake answers).
//!
//! The sandbox is built like the run container (same driver, image, user, environment layers with the
//! reserved layer, hardening, mounts, network placement) with a new empty workspace (holding an empty `.git`
//! so the `.git/hooks` protection is exercised), no `post_create`, and the static probe program mounted
//! read-only at [`crate::probe::PROBE_TARGET`]. Its start is bounded by 30 s, each probe by the doctor
//! timeout. [`Throwaway`] removes the container, the proxy, the lease and the temporary directory when
//! closed, and — as a drop guard — when the doctor is interrupted (Ctrl-C drops the future).
//!
//! Deviations from 06 §6:
//! - the probe program is the static `iterion-probe` (see `crate::probe` for why), not the iterion binary;
//! - the container is named `iterion-doctor-<8 hex>` through its run id (`doctor-<8 hex>`) and labelled
//!   `iterion.io/component=doctor-probe` (`StartRequest::component`); its `iterion.io/run-name` is
//!   `doctor-probe`;
//! - `probe_sandbox_start` execs the probe program (`start`) instead of `true`: it proves that the program
//!   the other probes need runs in the image;
//! - hardening and the pids limit follow `ITERION_SANDBOX_HARDENING` and `ITERION_SANDBOX_PIDS_LIMIT` (03
//!   §8.7) as the driver specification says;
//! - `probe_secret_env` considers the deny-class rules of the secret categories (credential, agent namespace,
//!   cloud SDK): `PATH`, `HOME` or the proxy variables are in the deny class but are set by images and by
//!   iterion itself and carry no secret.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iterion_driver::hardening::ContainerSettings;
use iterion_driver::{
    AuxMount, AuxMountKind, Driver, EgressPlacement, ExecRequest, HardeningProfile, NetworkLease,
    NetworkRequest, OutputLimits, OwnerInfo, PrepareRequest, PullPolicy, Run, StartReport, StartRequest,
    exec_collect, fmt_duration,
};
use iterion_envdeny::{Category, DenyClass};
use iterion_netpolicy::{Mode, Policy};
use iterion_netproxy::{Credential, Proxy, ProxyConfig, ProxyEvent, RunningProxy};
use iterion_spec::resolved::{HostState, NetworkMode, ResolvedSandbox};
use serde_json::Value;
use sha2::{Digest, Sha256};

use iterion_runtime::lifecycle::assembly;

use super::Inputs;
use super::report::{Check, Status};
use crate::probe::{METADATA_TARGETS, PROBE_TARGET};

/// Bound of the throwaway sandbox's start (06 §6.1).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The probe checks, in report order.
pub const PROBE_IDS: [&str; 9] = [
    "probe_sandbox_start",
    "probe_direct_egress",
    "probe_host_services",
    "probe_dns",
    "probe_metadata",
    "probe_denied_host",
    "probe_proxy_env",
    "probe_secret_env",
    "probe_hardening",
];

/// Host to CONNECT to under an allowlist (never allowed, never resolvable).
pub const ALLOWLIST_DENIED: &str = "iterion-doctor-probe.invalid:443";

/// Deny-class categories whose values are secrets (`probe_secret_env`); the others (PATH, HOME, proxy
/// routing, …) are set by images and by iterion itself and carry no secret.
const SECRET_CATEGORIES: &[Category] = &[Category::Credential, Category::AgentNamespace, Category::CloudSdk];

/// Capabilities of the strict profile (03 §8.7) and the compat extras, as bit numbers.
const CAPS_STRICT: &[(u32, &str)] = &[
    (0, "CHOWN"),
    (1, "DAC_OVERRIDE"),
    (3, "FOWNER"),
    (4, "FSETID"),
    (5, "KILL"),
    (6, "SETGID"),
    (7, "SETUID"),
    (10, "NET_BIND_SERVICE"),
];
const CAPS_COMPAT: &[(u32, &str)] = &[(8, "SETPCAP"), (18, "SYS_CHROOT"), (29, "AUDIT_WRITE")];
const CAP_NAMES: &[(u32, &str)] = &[
    (2, "DAC_READ_SEARCH"),
    (9, "LINUX_IMMUTABLE"),
    (11, "NET_BROADCAST"),
    (12, "NET_ADMIN"),
    (13, "NET_RAW"),
    (14, "IPC_LOCK"),
    (15, "IPC_OWNER"),
    (16, "SYS_MODULE"),
    (17, "SYS_RAWIO"),
    (19, "SYS_PTRACE"),
    (20, "SYS_PACCT"),
    (21, "SYS_ADMIN"),
    (22, "SYS_BOOT"),
    (23, "SYS_NICE"),
    (24, "SYS_RESOURCE"),
    (25, "SYS_TIME"),
    (26, "SYS_TTY_CONFIG"),
    (27, "MKNOD"),
    (28, "LEASE"),
    (30, "AUDIT_CONTROL"),
    (31, "SETFCAP"),
    (32, "MAC_OVERRIDE"),
    (33, "MAC_ADMIN"),
    (34, "SYSLOG"),
    (35, "WAKE_ALARM"),
    (36, "BLOCK_SUSPEND"),
    (37, "AUDIT_READ"),
    (38, "PERFMON"),
    (39, "BPF"),
    (40, "CHECKPOINT_RESTORE"),
];
/// Programs accepted as PID 1 (the engines' `--init`).
const INITS: &[&str] = &["docker-init", "tini", "catatonit", "podman-init", "dumb-init"];

const HINT_TIMEOUT: &str =
    "re-run with a larger ITERION_SANDBOX_DOCTOR_TIMEOUT, or check that the engine is not overloaded";
const HINT_ADVISORY: &str = "egress is advisory on this engine: processes that ignore HTTPS_PROXY bypass the proxy; use a Linux engine for enforcement";
const HINT_ENFORCED: &str = "the sandbox has a network path around the proxy: the driver must start it with NetworkMode none and the egress relay";

mod verdicts;

pub use verdicts::*;

/// Everything created for the probes; removed by [`Throwaway::close`], or on drop (interruption).
pub struct Throwaway {
    run: Option<Arc<dyn Run>>,
    lease: Option<Arc<NetworkLease>>,
    proxy: Option<RunningProxy>,
    dir: PathBuf,
    name: String,
    socket: Option<PathBuf>,
    closed: bool,
}

impl std::fmt::Debug for Throwaway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throwaway")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Throwaway {
    /// Removes the container, stops the proxy, releases the lease and removes the temporary directory.
    pub async fn close(&mut self) {
        match self.run.take() {
            Some(run) => {
                run.cleanup().await;
            }
            // A start that timed out may have left a container without a handle: remove it by name.
            None => {
                if let Some(s) = self.socket.clone() {
                    let name = self.name.clone();
                    let _ = tokio::task::spawn_blocking(move || force_remove_by_name(&s, &name)).await;
                }
            }
        }
        if let Some(p) = self.proxy.take() {
            p.shutdown(Duration::from_millis(200)).await;
        }
        self.release();
        self.closed = true;
    }

    fn release(&mut self) {
        if let Some(l) = self.lease.take() {
            l.release();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        match self.run.take() {
            Some(run) => run.force_cleanup_blocking(),
            // Interrupted during the start: the container may exist without a handle; remove it by name.
            None => {
                if let Some(s) = &self.socket {
                    force_remove_by_name(s, &self.name);
                }
            }
        }
        self.proxy.take();
        self.release();
    }
}

/// `DELETE /containers/<name>?force=true` over the engine socket, bounded to 5 s (drop path only).
fn force_remove_by_name(socket: &Path, name: &str) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(socket) else {
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    let req = format!(
        "DELETE /containers/{name}?force=true&v=true HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n"
    );
    if s.write_all(req.as_bytes()).is_ok() {
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
}

/// What [`run`] needs besides the inputs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The driver (docker or podman).
    pub driver: Arc<dyn Driver>,
    /// The spec of the run container.
    pub spec: ResolvedSandbox,
    /// The engine socket (drop-path removal).
    pub socket: Option<PathBuf>,
    /// The engine's default bridge gateway, when known.
    pub bridge_gateway: Option<String>,
    /// iterion's data directory (probe program, store label).
    pub data_dir: PathBuf,
}

fn mode_of(m: NetworkMode) -> Mode {
    match m {
        NetworkMode::Allowlist => Mode::Allowlist,
        NetworkMode::Denylist => Mode::Denylist,
        NetworkMode::Open => Mode::Open,
    }
}

/// The host to CONNECT to for `probe_denied_host` (06 §6.2), `None` when there is none.
pub fn denied_target(spec: &ResolvedSandbox) -> Option<String> {
    match spec.network.mode {
        NetworkMode::Open => None,
        NetworkMode::Allowlist => Some(ALLOWLIST_DENIED.to_string()),
        NetworkMode::Denylist => spec.network.rules.iter().find_map(|r| {
            let host = r.strip_prefix('!')?.trim();
            if host.is_empty()
                || host.contains('*')
                || host.contains('/')
                || host.parse::<std::net::IpAddr>().is_ok()
            {
                return None;
            }
            Some(match host.rsplit_once(':') {
                Some((_, p)) if p.parse::<u16>().is_ok() => host.to_string(),
                _ => format!("{host}:443"),
            })
        }),
    }
}

/// Local IPv4 addresses of this host outside 127/8 (`/proc/net/fib_trie`, Linux).
fn host_addresses() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    let mut last: Option<&str> = None;
    for line in text.lines() {
        let t = line.trim_start_matches([' ', '|', '-', '+']).trim();
        if line.contains("/32 host LOCAL") {
            if let Some(a) = last
                && !a.starts_with("127.")
                && !out.iter().any(|x| x == a)
            {
                out.push(a.to_string());
            }
        } else if t.parse::<std::net::Ipv4Addr>().is_ok() {
            last = Some(t);
        }
    }
    out
}

fn random_hex8() -> String {
    hex::encode(Sha256::digest(iterion_netproxy::new_token().as_bytes()))[..8].to_string()
}

fn skip_all(reason: &str) -> Vec<Check> {
    PROBE_IDS
        .iter()
        .map(|id| check(id, Status::Skip, reason, None))
        .collect()
}

fn numeric_user(user: Option<&str>) -> (Option<u32>, Option<u32>) {
    let Some(u) = user else { return (None, None) };
    let (a, b) = match u.split_once(':') {
        Some((a, b)) => (a, Some(b)),
        None => (u, None),
    };
    (a.parse().ok(), b.and_then(|b| b.parse().ok()))
}

/// Everything the start phase produced.
struct Started {
    run: Arc<dyn Run>,
    report: StartReport,
    egress: Egress,
    denied_events: Arc<Mutex<Vec<String>>>,
}

/// Runs the probes of 06 §6 and returns the nine probe checks.
pub async fn run(inputs: &Inputs, plan: &Plan) -> Vec<Check> {
    let t0 = Instant::now();
    let id8 = random_hex8();
    let dir = crate::temp_dir(&inputs.env).join(format!("iterion-doctor-{id8}"));
    let mut guard = Throwaway {
        run: None,
        lease: None,
        proxy: None,
        dir: dir.clone(),
        name: format!("iterion-doctor-{id8}"),
        socket: plan.socket.clone(),
        closed: false,
    };
    let started = tokio::time::timeout(START_TIMEOUT, start(inputs, plan, &id8, &mut guard)).await;
    let started = match started {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            guard.close().await;
            return failed_start(&e);
        }
        Err(_) => {
            guard.close().await;
            return failed_start(&format!(
                "the sandbox did not start within {}",
                fmt_duration(START_TIMEOUT)
            ));
        }
    };
    let start_answer = exec_probe(started.run.as_ref(), &["start"], inputs.timeout).await;
    let mut c = start_check(&started, &start_answer);
    c.duration_ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
    if c.status != Status::Pass {
        guard.close().await;
        let mut checks = vec![c];
        checks.extend(
            skip_all("the throwaway sandbox did not start (probe_sandbox_start failed)")
                .into_iter()
                .skip(1),
        );
        return checks;
    }
    let hs_claude = host_claude_dir(&inputs.env);
    let facts = facts_of(inputs, plan, &started, hs_claude.as_deref());
    let mut checks = vec![c];
    checks.extend(probe_battery(inputs, plan, &started, &facts, hs_claude.as_deref()).await);
    drop(started);
    guard.close().await;
    for c in &mut checks {
        if let Value::Object(m) = &mut c.details {
            m.insert("egress".into(), Value::from(facts.egress.as_str()));
        }
    }
    checks
}

/// `probe_sandbox_start` from the `start` probe's answer.
fn start_check(started: &Started, answer: &Answer) -> Check {
    const HINT: &str = "the image must be able to run a static executable of the engine's architecture";
    match answer {
        Ok(v) if v["ok"] == true => check(
            "probe_sandbox_start",
            Status::Pass,
            format!(
                "started {} ({}) from {} as {} with {} egress",
                started.report.name,
                &started.report.container_id.chars().take(12).collect::<String>(),
                started.report.image.reference,
                started.report.user.as_deref().unwrap_or("the image user"),
                started.egress.as_str()
            ),
            None,
        ),
        Ok(v) => check(
            "probe_sandbox_start",
            Status::Fail,
            format!("the probe program answered {v}"),
            Some(HINT),
        ),
        Err(e) => check(
            "probe_sandbox_start",
            Status::Fail,
            format!("the sandbox started but the probe program did not run: {e}"),
            Some(HINT),
        ),
    }
}

/// What the verdicts compare the answers against.
fn facts_of(inputs: &Inputs, plan: &Plan, started: &Started, hs_claude: Option<&Path>) -> Facts {
    let (uid, gid) = numeric_user(started.report.user.as_deref());
    Facts {
        egress: started.egress,
        hardening: ContainerSettings::from_env(&inputs.env).hardening,
        uid,
        gid,
        workflow_names: plan.spec.env_layers.workflow.keys().cloned().collect(),
        operator_names: inputs.sandbox_env.iter().map(|(k, _)| k.clone()).collect(),
        host_env: inputs.env.clone(),
        claude_mounted: plan.spec.host_state == HostState::Auto
            && hs_claude.is_some_and(|c| started.report.mounts.iter().any(|m| Path::new(&m.target) == c)),
    }
}

/// The eight probes after `start`, in order, each timed.
async fn probe_battery(
    inputs: &Inputs,
    plan: &Plan,
    started: &Started,
    facts: &Facts,
    hs_claude: Option<&Path>,
) -> Vec<Check> {
    let timeout = inputs.timeout;
    // Each connect is bounded well below the probe bound: the metadata probe makes five in a row.
    let per_connect = (timeout / 6).clamp(Duration::from_millis(150), Duration::from_secs(2));
    let ms = per_connect.as_millis().to_string();
    let mut checks = Vec::new();
    macro_rules! timed {
        ($e:expr) => {{
            let t = Instant::now();
            let mut c = $e;
            c.duration_ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
            checks.push(c);
        }};
    }
    let r = started.run.as_ref();
    timed!(direct_egress(
        facts,
        &exec_probe(r, &["direct-egress", "--timeout-ms", &ms], timeout).await
    ));
    timed!(host_services_probe(r, plan, facts, &ms, timeout).await);
    timed!(dns(&exec_probe(
        r,
        &["dns", "--name", "example.com", "--timeout-ms", &ms],
        timeout
    )
    .await));
    timed!(metadata(
        facts,
        &exec_probe(r, &["metadata", "--timeout-ms", &ms], timeout).await
    ));
    timed!(denied_host_probe(r, plan, started, facts, &ms, timeout).await);
    timed!(proxy_env(facts, &exec_probe(r, &["proxy-env"], timeout).await));
    timed!({
        let mut args = vec!["secret-env".to_string()];
        for rule in secret_rules() {
            args.push("--rule".into());
            args.push(rule);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        secret_env(facts, &exec_probe(r, &refs, timeout).await)
    });
    timed!({
        let ws = started.report.workspace.clone();
        let mut args = vec!["hardening".to_string(), "--workspace".into(), ws];
        if facts.claude_mounted
            && let Some(c) = hs_claude
        {
            args.push("--claude".into());
            args.push(c.to_string_lossy().into_owned());
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        hardening(facts, &exec_probe(r, &refs, timeout).await)
    });
    checks
}

/// `probe_host_services`: a TCP listener on the host, probed from the sandbox at the bridge gateway and at
/// every host address.
async fn host_services_probe(r: &dyn Run, plan: &Plan, facts: &Facts, ms: &str, timeout: Duration) -> Check {
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", 0)).await;
    let port = listener
        .as_ref()
        .ok()
        .and_then(|l| l.local_addr().ok())
        .map(|a| a.port());
    match port {
        Some(port) => {
            let mut args: Vec<String> = ["host-services", "--port", &port.to_string(), "--timeout-ms", ms]
                .iter()
                .map(|s| s.to_string())
                .collect();
            for a in plan.bridge_gateway.iter().cloned().chain(host_addresses()) {
                args.push("--addr".into());
                args.push(a);
            }
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            host_services(facts, &exec_probe(r, &refs, timeout).await)
        }
        None => check(
            "probe_host_services",
            Status::Fail,
            format!(
                "cannot listen on 0.0.0.0 on the host: {}",
                listener.as_ref().err().map(|e| e.to_string()).unwrap_or_default()
            ),
            Some("allow the doctor to bind a TCP port on this host"),
        ),
    }
}

/// `probe_denied_host`: a connect to a host the policy denies, and the proxy's denial event for it.
async fn denied_host_probe(
    r: &dyn Run,
    plan: &Plan,
    started: &Started,
    facts: &Facts,
    ms: &str,
    timeout: Duration,
) -> Check {
    let target = if facts.egress == Egress::Open {
        None
    } else {
        denied_target(&plan.spec)
    };
    let answer = match &target {
        Some(t) => exec_probe(r, &["denied-host", "--target", t, "--timeout-ms", ms], timeout).await,
        None => Err("not run".into()),
    };
    let wanted = answer
        .as_ref()
        .ok()
        .and_then(|v| v["result"]["decision_id"].as_str().map(str::to_string));
    // Events are delivered asynchronously: wait briefly for the one the answer names.
    let deadline = Instant::now() + Duration::from_secs(1);
    let events = loop {
        let ev = started
            .denied_events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if wanted.as_ref().is_none_or(|w| ev.contains(w)) || Instant::now() >= deadline {
            break ev;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    denied_host(facts, target.as_deref(), &answer, &events)
}

fn failed_start(e: &str) -> Vec<Check> {
    let mut out = vec![check(
        "probe_sandbox_start",
        Status::Fail,
        e.to_string(),
        Some("the real run would fail the same way; fix the error above (image, mounts, user, engine)"),
    )];
    out.extend(
        skip_all("the throwaway sandbox did not start (probe_sandbox_start failed)")
            .into_iter()
            .skip(1),
    );
    out
}

fn host_claude_dir(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    env.get("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| Path::new(h).join(".claude"))
}

/// Runs one probe in the sandbox (an exec started like a tool node's), bounded by `timeout`.
async fn exec_probe(run: &dyn Run, args: &[&str], timeout: Duration) -> Answer {
    let mut argv = vec![PROBE_TARGET.to_string()];
    argv.extend(args.iter().take(1).map(|s| s.to_string()));
    argv.push("--json".into());
    argv.extend(args.iter().skip(1).map(|s| s.to_string()));
    let req = ExecRequest::new(argv);
    let cancel = req.cancel.clone();
    let collected = match tokio::time::timeout(timeout, exec_collect(run, req, OutputLimits::default())).await
    {
        Err(_) => {
            cancel.cancel();
            return Err(format!("timed out after {}", fmt_duration(timeout)));
        }
        Ok(Err(e)) => return Err(e.to_string()),
        Ok(Ok(c)) => c,
    };
    let stdout = String::from_utf8_lossy(&collected.stdout);
    let line = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    match serde_json::from_str::<Value>(line) {
        Ok(v) if collected.status.success() => Ok(v),
        Ok(v) => Err(format!(
            "the probe program failed ({:?}): {}",
            collected.status,
            v["error"].as_str().unwrap_or("")
        )),
        Err(_) => {
            let err = String::from_utf8_lossy(&collected.stderr);
            Err(format!(
                "no JSON answer ({:?}): {}",
                collected.status,
                err.lines().last().unwrap_or("").trim()
            ))
        }
    }
}

async fn start(inputs: &Inputs, plan: &Plan, id8: &str, guard: &mut Throwaway) -> Result<Started, String> {
    let driver = &plan.driver;
    let run_id = format!("doctor-{id8}");
    let (ws, run_dir) = throwaway_workspace(&guard.dir)?;
    let probe_bin = crate::probe::install(&plan.data_dir)?;

    // The run mounts its work dir at the spec's workspace folder, which defaults to the work dir's own path;
    // the throwaway workspace takes that place (an explicit folder is kept).
    let mut spec = plan.spec.clone();
    let wd = std::fs::canonicalize(&inputs.work_dir).unwrap_or_else(|_| inputs.work_dir.clone());
    if spec.workspace_folder.is_empty() || Path::new(&spec.workspace_folder) == wd {
        spec.workspace_folder = ws.to_string_lossy().into_owned();
        spec.refresh_key();
    }
    let mut preq = PrepareRequest::new(spec.clone());
    preq.pull_policy = PullPolicy::Never;
    let prepared = driver.prepare(preq).await.map_err(|e| e.to_string())?;

    let denied_events: Arc<Mutex<Vec<String>>> = Arc::default();
    let egress = if spec.network.mode != NetworkMode::Open {
        Some(
            start_egress(
                inputs,
                plan,
                &spec,
                &run_id,
                run_dir,
                guard,
                denied_events.clone(),
            )
            .await?,
        )
    } else {
        None
    };
    let req = start_request(inputs, plan, &spec, run_id, ws, probe_bin, egress)?;
    let lease = guard.lease.clone();
    let started = driver
        .start(prepared, lease.as_deref(), req)
        .await
        .map_err(|e| e.to_string())?;
    let run: Arc<dyn Run> = Arc::from(started.run);
    guard.run = Some(run.clone());
    Ok(Started {
        run,
        egress: Egress::of(guard.lease.as_ref().map(|l| l.placement)),
        report: started.report,
        denied_events,
    })
}

/// Creates the throwaway workspace (a minimal git repository) and run directory under `dir`.
fn throwaway_workspace(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let ws = dir.join("workspace");
    let run_dir = dir.join("run");
    for d in [
        &ws,
        &run_dir,
        &ws.join(".git").join("objects"),
        &ws.join(".git").join("refs"),
    ] {
        std::fs::create_dir_all(d).map_err(|e| format!("create {}: {e}", d.display()))?;
    }
    std::fs::write(ws.join(".git").join("HEAD"), "ref: refs/heads/main\n")
        .map_err(|e| format!("write the workspace's .git/HEAD: {e}"))?;
    for d in [dir, &ws] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("chmod {}: {e}", d.display()))?;
    }
    Ok((ws, run_dir))
}

/// The sandbox's egress, as a run has it: the proxy URL its environment carries and the endpoint the driver
/// wires.
struct EgressWiring {
    proxy_url: String,
    endpoint: iterion_driver::ProxyEndpoint,
}

/// Takes the network lease and starts the doctor's egress proxy with the spec's policy (one credential),
/// recording every denial's decision id in `denied_events`. The lease and the proxy are kept in `guard`.
async fn start_egress(
    inputs: &Inputs,
    plan: &Plan,
    spec: &ResolvedSandbox,
    run_id: &str,
    run_dir: PathBuf,
    guard: &mut Throwaway,
    denied_events: Arc<Mutex<Vec<String>>>,
) -> Result<EgressWiring, String> {
    let require = iterion_runtime::lifecycle::settings::require_enforced_egress(&inputs.env).0;
    let lease = plan
        .driver
        .network(NetworkRequest::new(run_id.to_string(), run_dir, require))
        .await
        .map_err(|e| e.to_string())?;
    let lease = Arc::new(lease);
    guard.lease = Some(lease.clone());
    let presets: Vec<&str> = spec.network.preset.iter().map(|p| p.as_str()).collect();
    let rules: Vec<&str> = spec.network.rules.iter().map(String::as_str).collect();
    let policy = Policy::compile(mode_of(spec.network.mode), &presets, &rules).map_err(|errs| {
        let t: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        format!("the network policy does not compile: {}", t.join("; "))
    })?;
    let token = iterion_netproxy::new_token();
    let config = ProxyConfig::builder()
        .listen(assembly::proxy_listen(&lease.proxy_listen))
        .credential(Credential::new("run", token.clone(), None, Arc::new(policy)))
        .on_event(move |ev| {
            if let ProxyEvent::Denied(d) = ev {
                denied_events
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(d.decision_id.to_string());
            }
        })
        .build()
        .map_err(|e| format!("cannot configure the egress proxy: {e}"))?;
    let proxy = Proxy::start(config)
        .await
        .map_err(|e| format!("cannot start the egress proxy: {e}"))?;
    let port = match lease.placement {
        EgressPlacement::Advisory => proxy
            .local_addr()
            .map_or(lease.container_proxy_port, |a| a.port()),
        _ => lease.container_proxy_port,
    };
    guard.proxy = Some(proxy);
    let host = lease.container_proxy_host.clone();
    Ok(EgressWiring {
        proxy_url: format!("http://run:{token}@{host}:{port}"),
        endpoint: iterion_driver::ProxyEndpoint { host, port },
    })
}

/// The start request of the throwaway sandbox: the merged environment layers, the probe program mounted
/// read-only, host state, the proxy endpoint, limits and hardening from the environment.
fn start_request(
    inputs: &Inputs,
    plan: &Plan,
    spec: &ResolvedSandbox,
    run_id: String,
    ws: PathBuf,
    probe_bin: PathBuf,
    egress: Option<EgressWiring>,
) -> Result<StartRequest, String> {
    let operator: BTreeMap<String, String> = inputs.sandbox_env.iter().cloned().collect();
    let proxy_url = egress.as_ref().map(|e| e.proxy_url.as_str());
    let merged = assembly::container_env(spec, &operator, proxy_url, false).map_err(|e| e.to_string())?;

    let pid = std::process::id();
    let owner = OwnerInfo {
        host_name: nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
        pid,
        start_time: match iterion_driver::owner::process_start_time(pid) {
            iterion_driver::owner::ProcStart::Started(t) => t,
            _ => 0,
        },
        store_dir: plan.data_dir.clone(),
    };
    let mut req = StartRequest::new(run_id, ws, owner);
    req.run_name = Some("doctor-probe".into());
    req.container_env = merged.container;
    req.aux_mounts.push(AuxMount {
        kind: AuxMountKind::ProbeBinary,
        host_path: probe_bin,
        container_path: PROBE_TARGET.into(),
        read_only: true,
    });
    let home = inputs
        .env
        .get("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    req.host_state = assembly::host_state_plan(
        spec,
        assembly::HostStateFacts {
            data_dir: &plan.data_dir,
            home: home.as_deref(),
            uid: Some(nix::unistd::getuid().as_raw()),
            gid: Some(nix::unistd::getgid().as_raw()),
            os: std::env::consts::OS,
        },
    );
    req.proxy = egress.map(|e| e.endpoint);
    let container = ContainerSettings::from_env(&inputs.env);
    req.limits = container.limits;
    req.hardening = container.hardening;
    req.component = Some(iterion_driver::labels::Component::DoctorProbe);
    req.start_timeout = START_TIMEOUT;
    Ok(req)
}

#[cfg(test)]
mod tests;
