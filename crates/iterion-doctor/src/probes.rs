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
    AuxMount, AuxMountKind, Driver, ExecRequest, HardeningProfile, HostStatePlan, NetworkLease,
    NetworkRequest, OutputLimits, OwnerInfo, Placement, PrepareRequest, ProxyListen, PullPolicy, Run,
    StartReport, StartRequest, exec_collect, fmt_duration,
};
use iterion_envdeny::{Category, DenyClass};
use iterion_netpolicy::{Mode, Policy};
use iterion_netproxy::{Credential, Listen, Proxy, ProxyConfig, ProxyEvent, RunningProxy};
use iterion_spec::resolved::{HostState, NetworkMode, ResolvedSandbox};
use serde_json::Value;
use sha2::{Digest, Sha256};

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
const HINT_ENFORCED: &str = "the sandbox has a network path around the proxy: the driver must start it with NetworkMode none and the relay (03 §7.2)";

/// Egress placement of the throwaway sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Egress {
    /// NetworkMode none + relay: enforced.
    Relay,
    /// Proxy variables only (Docker Desktop).
    Advisory,
    /// Network mode open: no proxy.
    Open,
}

impl Egress {
    fn of(p: Option<Placement>) -> Egress {
        match p {
            Some(Placement::Relay) => Egress::Relay,
            Some(Placement::Advisory) => Egress::Advisory,
            Some(Placement::Open) | None => Egress::Open,
        }
    }
    fn as_str(self) -> &'static str {
        match self {
            Egress::Relay => "relay",
            Egress::Advisory => "advisory",
            Egress::Open => "open",
        }
    }
}

/// What the checks compare the probe answers with.
#[derive(Debug, Clone)]
pub struct Facts {
    /// Placement of the sandbox.
    pub egress: Egress,
    /// Hardening profile requested.
    pub hardening: HardeningProfile,
    /// Effective uid / gid the driver resolved (numeric users only).
    pub uid: Option<u32>,
    /// Effective gid.
    pub gid: Option<u32>,
    /// Names of the workflow layer.
    pub workflow_names: BTreeSet<String>,
    /// Names of the operator layer (`--sandbox-env`).
    pub operator_names: BTreeSet<String>,
    /// The doctor's own environment (digests are compared, values never printed).
    pub host_env: BTreeMap<String, String>,
    /// `~/.claude` is mounted (host state).
    pub claude_mounted: bool,
}

/// One probe's answer: the JSON object, or why there is none (exec error, timeout, bad output).
pub type Answer = Result<Value, String>;

fn check(id: &'static str, status: Status, message: impl Into<String>, hint: Option<&str>) -> Check {
    super::report::make_check(id, status, message, hint.map(str::to_string))
}

fn unfinished(id: &'static str, e: &str) -> Check {
    check(
        id,
        Status::Fail,
        format!("the probe did not complete: {e}"),
        Some(HINT_TIMEOUT),
    )
}

fn connected(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["connected"] == true)
        .filter_map(|c| c["target"].as_str().map(str::to_string))
        .collect()
}

fn targets(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["target"].as_str().map(str::to_string))
        .collect()
}

/// `probe_direct_egress`.
pub fn direct_egress(f: &Facts, a: &Answer) -> Check {
    let mut c = direct_egress_check(f, a);
    if let Ok(v) = a {
        let routes = v["routes"].clone();
        c.details = serde_json::json!({"routes": routes, "connected": connected(v, "connects")});
    }
    c
}

fn direct_egress_check(f: &Facts, a: &Answer) -> Check {
    const ID: &str = "probe_direct_egress";
    let v = match a {
        Ok(v) => v,
        Err(e) => return unfinished(ID, e),
    };
    let routes: Vec<String> = v["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect();
    let ok = connected(v, "connects");
    let tried = targets(v, "connects").join(", ");
    match f.egress {
        Egress::Open => check(
            ID,
            Status::Skip,
            format!(
                "network mode open: direct egress is allowed by the policy ({} route(s); connected: {})",
                routes.len(),
                if ok.is_empty() {
                    "none".to_string()
                } else {
                    ok.join(", ")
                }
            ),
            None,
        ),
        Egress::Relay if routes.is_empty() && ok.is_empty() => check(
            ID,
            Status::Pass,
            format!("no route and every direct connect failed ({tried})"),
            None,
        ),
        Egress::Relay => {
            let mut parts = Vec::new();
            if !routes.is_empty() {
                parts.push(format!("routes: {}", routes.join(", ")));
            }
            if !ok.is_empty() {
                parts.push(format!("connected: {}", ok.join(", ")));
            }
            check(
                ID,
                Status::Fail,
                format!(
                    "enforced placement but the sandbox has direct egress ({})",
                    parts.join("; ")
                ),
                Some(HINT_ENFORCED),
            )
        }
        Egress::Advisory if ok.is_empty() => check(
            ID,
            Status::Pass,
            format!("advisory placement, but every direct connect failed ({tried})"),
            None,
        ),
        Egress::Advisory => check(
            ID,
            Status::Warn,
            format!(
                "advisory placement: direct connects succeeded to {} (known, see egress_enforcement)",
                ok.join(", ")
            ),
            Some(HINT_ADVISORY),
        ),
    }
}

/// `probe_host_services`.
pub fn host_services(f: &Facts, a: &Answer) -> Check {
    let mut c = host_services_check(f, a);
    if let Ok(v) = a {
        c.details = serde_json::json!({"reachable": connected(v, "connects")});
    }
    c
}

fn host_services_check(f: &Facts, a: &Answer) -> Check {
    const ID: &str = "probe_host_services";
    let v = match a {
        Ok(v) => v,
        Err(e) => return unfinished(ID, e),
    };
    let ok = connected(v, "connects");
    let tried = targets(v, "connects");
    if ok.is_empty() {
        return check(
            ID,
            Status::Pass,
            format!(
                "no host address reachable on the doctor's port ({} tried: {})",
                tried.len(),
                tried.join(", ")
            ),
            None,
        );
    }
    let list = ok.join(", ");
    match f.egress {
        Egress::Relay => check(
            ID,
            Status::Fail,
            format!("enforced placement but host services are reachable from the sandbox: {list}"),
            Some(HINT_ENFORCED),
        ),
        Egress::Advisory => check(
            ID,
            Status::Warn,
            format!("advisory placement: host services are reachable from the sandbox: {list}"),
            Some(HINT_ADVISORY),
        ),
        Egress::Open => check(
            ID,
            Status::Warn,
            format!("network mode open: host services are reachable from the sandbox: {list}"),
            Some("use network mode allowlist or denylist to cut the sandbox off from host services"),
        ),
    }
}

/// `probe_dns`.
pub fn dns(a: &Answer) -> Check {
    const ID: &str = "probe_dns";
    let v = match a {
        Ok(v) => v,
        Err(e) => {
            return check(
                ID,
                Status::Warn,
                format!("the DNS probe did not complete: {e}"),
                Some(HINT_TIMEOUT),
            );
        }
    };
    let name = v["name"].as_str().unwrap_or("example.com");
    let servers: Vec<&Value> = v["servers"].as_array().into_iter().flatten().collect();
    let answered: Vec<&str> = servers
        .iter()
        .filter(|s| s["answered"] == true)
        .filter_map(|s| s["server"].as_str())
        .collect();
    let resolved = servers
        .iter()
        .any(|s| s["answered"] == true && s["rcode"] == 0 && s["answers"].as_u64().is_some_and(|n| n > 0));
    if answered.is_empty() {
        check(
            ID,
            Status::Pass,
            format!(
                "{name} does not resolve: no resolver reachable ({} name server(s) tried)",
                servers.len()
            ),
            None,
        )
    } else {
        check(
            ID,
            Status::Warn,
            if resolved {
                format!(
                    "{name} resolves through {} (a DNS channel exists)",
                    answered.join(", ")
                )
            } else {
                format!(
                    "resolver {} answered a query for {name} (a DNS channel exists)",
                    answered.join(", ")
                )
            },
            Some(
                "DNS queries leave the sandbox without the proxy; use the relay placement (NetworkMode none)",
            ),
        )
    }
}

fn refusal(r: &Value) -> Result<Option<String>, String> {
    match r["status"].as_u64() {
        Some(403) => Ok(r["decision_id"].as_str().map(str::to_string)),
        Some(s) if (200..300).contains(&s) => Err(format!("succeeded ({s})")),
        Some(s) => Err(format!("answered {s}, not 403")),
        None => Err(r["error"].as_str().unwrap_or("no answer").to_string()),
    }
}

/// `probe_metadata`.
pub fn metadata(f: &Facts, a: &Answer) -> Check {
    const ID: &str = "probe_metadata";
    const HINT: &str = "the cloud metadata service must stay unreachable: keep NetworkMode none and the proxy's address guard (04)";
    let v = match a {
        Ok(v) => v,
        Err(e) => return unfinished(ID, e),
    };
    let mut bad = Vec::new();
    if v["direct"]["connected"] == true {
        bad.push("direct connect to 169.254.169.254:80 succeeded".to_string());
    }
    let mut refused = 0;
    if f.egress != Egress::Open {
        for c in v["connects"].as_array().into_iter().flatten() {
            let t = c["target"].as_str().unwrap_or("?");
            match refusal(&c["result"]) {
                Ok(_) => refused += 1,
                Err(why) => bad.push(format!("CONNECT {t} {why}")),
            }
        }
    }
    if !bad.is_empty() {
        let hint = if f.egress == Egress::Open {
            "network mode open lets the sandbox reach the cloud metadata service; use network mode allowlist or denylist"
        } else {
            HINT
        };
        return check(ID, Status::Fail, bad.join("; "), Some(hint));
    }
    let msg = if f.egress == Egress::Open {
        "direct connect to 169.254.169.254:80 failed (network mode open: no proxy to try)".to_string()
    } else {
        format!(
            "direct connect failed; {refused} CONNECTs through the proxy refused with 403 ({})",
            METADATA_TARGETS.join(", ")
        )
    };
    check(ID, Status::Pass, msg, None)
}

/// `probe_denied_host`: `target` is the host tried (None: nothing to try); `events` the decision ids of the
/// `Denied` events the doctor's proxy reported.
pub fn denied_host(f: &Facts, target: Option<&str>, a: &Answer, events: &[String]) -> Check {
    const ID: &str = "probe_denied_host";
    const HINT: &str = "the proxy did not enforce the run policy; check the proxy variables of the sandbox and report the bug";
    let Some(target) = target else {
        let why = if f.egress == Egress::Open {
            "network mode open: no proxy"
        } else {
            "the denylist has no plain ! rule to try"
        };
        return check(ID, Status::Skip, why, None);
    };
    let v = match a {
        Ok(v) => v,
        Err(e) => return unfinished(ID, e),
    };
    match refusal(&v["result"]) {
        Ok(Some(id)) if events.contains(&id) => check(
            ID,
            Status::Pass,
            format!("CONNECT {target} refused with 403, decision {id} reported by the proxy"),
            None,
        ),
        Ok(Some(id)) => check(
            ID,
            Status::Fail,
            format!(
                "CONNECT {target} refused with 403 but the proxy reported no Denied event with decision {id}"
            ),
            Some(HINT),
        ),
        Ok(None) => check(
            ID,
            Status::Fail,
            format!("CONNECT {target} refused with 403 without a decision_id"),
            Some(HINT),
        ),
        Err(why) => check(
            ID,
            Status::Fail,
            format!("CONNECT {target} was not refused: {why}"),
            Some(HINT),
        ),
    }
}

/// `probe_proxy_env`.
pub fn proxy_env(f: &Facts, a: &Answer) -> Check {
    const ID: &str = "probe_proxy_env";
    if f.egress == Egress::Open {
        return check(
            ID,
            Status::Skip,
            "network mode open: no proxy variables are set",
            None,
        );
    }
    let v = match a {
        Ok(v) => v,
        Err(e) => return unfinished(ID, e),
    };
    let mut bad = Vec::new();
    let missing: Vec<&str> = v["set"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, set)| **set != true)
        .map(|(k, _)| k.as_str())
        .collect();
    if v["set"].as_object().is_none_or(|m| m.is_empty()) {
        bad.push("no proxy variable reported".to_string());
    }
    if !missing.is_empty() {
        bad.push(format!("missing {}", missing.join(", ")));
    } else if v["equal"] != true {
        bad.push("the proxy URL variables differ".into());
    }
    for k in ["NO_PROXY", "no_proxy"] {
        if v[k]["set"] != true {
            bad.push(format!("{k} missing"));
        } else if v[k]["has_star"] == true {
            bad.push(format!("{k} contains *"));
        }
    }
    if v["node_use_env_proxy"] != true {
        bad.push("NODE_USE_ENV_PROXY is not 1".into());
    }
    if bad.is_empty() {
        check(
            ID,
            Status::Pass,
            "HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and lower-case forms set and equal; NO_PROXY / no_proxy without *; NODE_USE_ENV_PROXY=1",
            None,
        )
    } else {
        check(
            ID,
            Status::Fail,
            bad.join("; "),
            Some(
                "the reserved proxy variables did not reach the exec environment; look for overrides in the image ENV or the workflow's sandbox.env",
            ),
        )
    }
}

/// A name matched by a deny-class rule of a secret category (any matching rule counts: `GH_TOKEN` is
/// reported as `prefix:GH_` but is a credential through `suffix:_TOKEN`).
fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    DenyClass::builtin()
        .rules()
        .filter(|r| SECRET_CATEGORIES.contains(&r.category))
        .any(|r| match r.kind {
            iterion_envdeny::RuleKind::Exact => upper == r.pattern,
            iterion_envdeny::RuleKind::Prefix => upper.starts_with(r.pattern),
            iterion_envdeny::RuleKind::Suffix => upper.ends_with(r.pattern),
        })
}

/// The `--rule` arguments of the secret-env probe: every deny-class rule of a secret category.
pub fn secret_rules() -> Vec<String> {
    DenyClass::builtin()
        .rules()
        .filter(|r| SECRET_CATEGORIES.contains(&r.category))
        .map(|r| format!("{}:{}", r.kind.as_str(), r.pattern))
        .collect()
}

/// `probe_secret_env`.
pub fn secret_env(f: &Facts, a: &Answer) -> Check {
    let mut c = secret_env_check(f, a);
    if let Ok(v) = a {
        let names: Vec<&str> = v["visible"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["name"].as_str())
            .filter(|n| is_secret_name(n))
            .collect();
        c.details = serde_json::json!({"visible": names});
    }
    c
}

fn secret_env_check(f: &Facts, a: &Answer) -> Check {
    const ID: &str = "probe_secret_env";
    let v = match a {
        Ok(v) => v,
        Err(e) => return unfinished(ID, e),
    };
    let mut intended = Vec::new();
    let mut image = Vec::new();
    let mut leaked = Vec::new();
    for e in v["visible"].as_array().into_iter().flatten() {
        let (Some(name), Some(digest)) = (e["name"].as_str(), e["sha256"].as_str()) else {
            continue;
        };
        if !is_secret_name(name) {
            continue;
        }
        if f.operator_names.contains(name) {
            intended.push(format!("{name} (operator)"));
        } else if f.workflow_names.contains(name) {
            intended.push(format!("{name} (workflow)"));
        } else if f
            .host_env
            .get(name)
            .is_some_and(|hv| hex::encode(Sha256::digest(hv.as_bytes())) == digest)
        {
            leaked.push(name.to_string());
        } else {
            image.push(name.to_string());
        }
    }
    if !leaked.is_empty() {
        return check(
            ID,
            Status::Fail,
            format!(
                "host secret(s) visible in the sandbox with the host's value and no operator or workflow entry: {}",
                leaked.join(", ")
            ),
            Some(
                "find how the value reaches the sandbox (image ENV, mounts) and remove it; pass it with --sandbox-env or the workflow's sandbox.env if it is intended",
            ),
        );
    }
    if !image.is_empty() {
        return check(
            ID,
            Status::Warn,
            format!(
                "deny-class names set by the image's own ENV: {}",
                image.join(", ")
            ),
            Some(
                "the image carries these variables into every sandbox; rebuild it without them or override them in the workflow's sandbox.env",
            ),
        );
    }
    if intended.is_empty() {
        check(ID, Status::Pass, "no deny-class secret name visible", None)
    } else {
        check(
            ID,
            Status::Pass,
            format!("only intended names visible: {}", intended.join(", ")),
            None,
        )
    }
}

fn cap_list(mask: u64) -> String {
    (0..64)
        .filter(|b| mask & (1u64 << b) != 0)
        .map(|b| {
            CAPS_STRICT
                .iter()
                .chain(CAPS_COMPAT)
                .chain(CAP_NAMES)
                .find(|(n, _)| *n == b)
                .map_or(format!("cap {b}"), |(_, name)| format!("CAP_{name}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `probe_hardening`.
pub fn hardening(f: &Facts, a: &Answer) -> Check {
    let mut c = hardening_check(f, a);
    if let Ok(v) = a {
        c.details = serde_json::json!({
            "no_new_privs": v["no_new_privs"], "cap_eff": v["cap_eff"], "uid": v["uid"], "gid": v["gid"],
            "pid1": v["pid1"], "engine_sockets": v["engine_sockets"],
        });
    }
    c
}

fn hardening_check(f: &Facts, a: &Answer) -> Check {
    const ID: &str = "probe_hardening";
    let v = match a {
        Ok(v) => v,
        Err(e) => return unfinished(ID, e),
    };
    let strict = f.hardening == HardeningProfile::Strict;
    let mut bad = Vec::new();
    let mut good = Vec::new();
    let nnp = v["no_new_privs"].as_str().unwrap_or("?");
    if strict && nnp != "1" {
        bad.push(format!("NoNewPrivs is {nnp}, not 1"));
    } else {
        good.push(format!("NoNewPrivs {nnp}"));
    }
    let uid = v["uid"].as_u64().and_then(|u| u32::try_from(u).ok());
    let gid = v["gid"].as_u64().and_then(|g| u32::try_from(g).ok());
    match v["cap_eff"]
        .as_str()
        .and_then(|c| u64::from_str_radix(c, 16).ok())
    {
        None => bad.push("CapEff unreadable".into()),
        Some(cap) => {
            let mut allowed = 0u64;
            if uid == Some(0) {
                for (b, _) in CAPS_STRICT
                    .iter()
                    .chain(if strict { &[][..] } else { CAPS_COMPAT })
                {
                    allowed |= 1u64 << b;
                }
            }
            let extra = cap & !allowed;
            if extra != 0 {
                bad.push(format!("unexpected effective capabilities: {}", cap_list(extra)));
            } else {
                good.push(format!("CapEff {cap:016x}"));
            }
        }
    }
    let pid1 = v["pid1"].as_str().unwrap_or("");
    let base = pid1.rsplit('/').next().unwrap_or(pid1);
    if INITS.contains(&base) {
        good.push(format!("PID 1 {base}"));
    } else {
        bad.push(format!("PID 1 is '{pid1}', not an init"));
    }
    match (f.uid, uid) {
        (Some(want), Some(got)) if want != got => bad.push(format!("uid {got}, expected {want}")),
        (_, None) => bad.push("uid unreadable".into()),
        _ => {}
    }
    match (f.gid, gid) {
        (Some(want), Some(got)) if want != got => bad.push(format!("gid {got}, expected {want}")),
        _ => {}
    }
    if let (Some(u), Some(g)) = (uid, gid) {
        good.push(format!("uid {u} gid {g}"));
    }
    for (key, what) in [("home", "HOME"), ("workspace", "the workspace")] {
        match &v[key] {
            Value::Null => bad.push(format!("{what} is not set")),
            w if w["writable"] != true => bad.push(format!(
                "{what} ({}) is not writable: {}",
                w["path"].as_str().unwrap_or("?"),
                w["error"].as_str().unwrap_or("?")
            )),
            _ => {}
        }
    }
    good.push("HOME and workspace writable".into());
    let sockets: Vec<&str> = v["engine_sockets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if sockets.is_empty() {
        good.push("no engine socket".into());
    } else {
        bad.push(format!("engine socket(s) inside: {}", sockets.join(", ")));
    }
    if v["git_hooks"]["writable"] == true {
        bad.push(".git/hooks is writable".into());
    } else {
        good.push(".git/hooks read-only".into());
    }
    if f.claude_mounted {
        if v["claude_settings"]["writable"] == true {
            bad.push("~/.claude/settings.json is writable".into());
        } else {
            good.push("~/.claude/settings.json read-only".into());
        }
    }
    if !bad.is_empty() {
        return check(
            ID,
            Status::Fail,
            bad.join("; "),
            Some(
                "the sandbox is not hardened as 03 §8.7 requires; check the driver and the engine's security options",
            ),
        );
    }
    if !strict {
        return check(
            ID,
            Status::Warn,
            format!("compat hardening profile in force ({})", good.join(", ")),
            Some(
                "ITERION_SANDBOX_HARDENING=compat relaxes the sandbox; use strict unless the image needs compat",
            ),
        );
    }
    check(ID, Status::Pass, good.join(", "), None)
}

// ------------------------------------------------------------------------------------------------------------
// The throwaway sandbox.

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
    let require =
        iterion_runtime::lifecycle::settings::truthy(&inputs.env, "ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS");
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
        .listen(match &lease.proxy_listen {
            ProxyListen::Unix(p) => Listen::Unix(p.clone()),
            ProxyListen::Tcp(a) => Listen::Tcp(*a),
        })
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
        Placement::Advisory => proxy
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
    let mut repo = iterion_envdeny::RepoEnv::new();
    repo.container_env = spec.env_layers.repo.clone();
    let mut layers = iterion_envdeny::EnvLayers::new();
    layers.repo = repo;
    layers.workflow = spec.env_layers.workflow.clone();
    layers.operator = inputs.sandbox_env.iter().cloned().collect();
    let mut reserved = iterion_envdeny::Reserved::none();
    if let Some(e) = &egress {
        reserved = reserved.with_proxy(e.proxy_url.clone());
    }
    let merged = iterion_envdeny::merge(&layers, &reserved).map_err(|e| e.to_string())?;

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
    let mut hs = HostStatePlan::disabled();
    hs.source = spec.host_state_source.clone();
    hs.data_dir = plan.data_dir.clone();
    hs.claude_dir = home.clone().unwrap_or_default().join(".claude");
    hs.home = home;
    hs.host_uid = Some(nix::unistd::getuid().as_raw());
    hs.host_gid = Some(nix::unistd::getgid().as_raw());
    hs.host_os = std::env::consts::OS.into();
    hs.enabled = spec.host_state == HostState::Auto;
    req.host_state = hs;
    req.proxy = egress.map(|e| e.endpoint);
    let container = ContainerSettings::from_env(&inputs.env);
    req.limits = container.limits;
    req.hardening = container.hardening;
    req.component = Some(iterion_driver::labels::Component::DoctorProbe);
    req.start_timeout = START_TIMEOUT;
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn facts(egress: Egress) -> Facts {
        Facts {
            egress,
            hardening: HardeningProfile::Strict,
            uid: Some(0),
            gid: Some(0),
            workflow_names: BTreeSet::from(["GH_TOKEN".to_string()]),
            operator_names: BTreeSet::from(["OPENAI_API_KEY".to_string()]),
            host_env: BTreeMap::from([
                ("OPENAI_API_KEY".to_string(), "sk-host".to_string()),
                ("ANTHROPIC_API_KEY".to_string(), "sk-ant-host".to_string()),
                ("AWS_SECRET_ACCESS_KEY".to_string(), "host-aws".to_string()),
            ]),
            claude_mounted: false,
        }
    }

    fn digest(v: &str) -> String {
        hex::encode(Sha256::digest(v.as_bytes()))
    }

    fn check(c: Check, status: Status, needle: &str) {
        assert_eq!(c.status, status, "{}: {}", c.id, c.message);
        assert!(
            c.message.contains(needle),
            "{}: '{}' lacks '{needle}'",
            c.id,
            c.message
        );
        assert_eq!(
            c.hint.is_some(),
            matches!(status, Status::Warn | Status::Fail),
            "{}",
            c.id
        );
    }

    fn conn(target: &str, ok: bool) -> Value {
        json!({"target": target, "connected": ok, "error": if ok { Value::Null } else { json!("Network is unreachable") }})
    }

    #[test]
    fn direct_egress_mapping() {
        let none = Ok(
            json!({"routes": [], "connects": [conn("1.1.1.1:443", false), conn("[2606:4700:4700::1111]:443", false)]}),
        );
        let route =
            Ok(json!({"routes": ["ipv4 eth0 via 010011AC"], "connects": [conn("1.1.1.1:443", false)]}));
        let open = Ok(json!({"routes": [], "connects": [conn("1.1.1.1:443", true)]}));
        check(
            direct_egress(&facts(Egress::Relay), &none),
            Status::Pass,
            "no route",
        );
        check(
            direct_egress(&facts(Egress::Relay), &route),
            Status::Fail,
            "routes: ipv4 eth0",
        );
        check(
            direct_egress(&facts(Egress::Relay), &open),
            Status::Fail,
            "connected: 1.1.1.1:443",
        );
        assert_eq!(
            direct_egress(&facts(Egress::Relay), &open).details["connected"],
            json!(["1.1.1.1:443"])
        );
        check(
            direct_egress(&facts(Egress::Advisory), &open),
            Status::Warn,
            "advisory placement",
        );
        check(
            direct_egress(&facts(Egress::Advisory), &none),
            Status::Pass,
            "every direct connect failed",
        );
        check(
            direct_egress(&facts(Egress::Open), &open),
            Status::Skip,
            "network mode open",
        );
        check(
            direct_egress(&facts(Egress::Relay), &Err("timed out after 5s".into())),
            Status::Fail,
            "timed out after 5s",
        );
    }

    #[test]
    fn host_services_mapping() {
        let none = Ok(json!({"connects": [conn("172.17.0.1:4000", false)]}));
        let some = Ok(json!({"connects": [conn("172.17.0.1:4000", true), conn("192.0.2.2:4000", false)]}));
        check(
            host_services(&facts(Egress::Relay), &none),
            Status::Pass,
            "1 tried: 172.17.0.1:4000",
        );
        check(
            host_services(&facts(Egress::Relay), &some),
            Status::Fail,
            "172.17.0.1:4000",
        );
        check(
            host_services(&facts(Egress::Advisory), &some),
            Status::Warn,
            "172.17.0.1:4000",
        );
        check(
            host_services(&facts(Egress::Open), &some),
            Status::Warn,
            "network mode open",
        );
    }

    #[test]
    fn dns_mapping() {
        let no = Ok(json!({"name": "example.com", "servers": [{"server": "10.0.0.2", "answered": false}]}));
        let yes = Ok(
            json!({"name": "example.com", "servers": [{"server": "10.0.0.2", "answered": true, "rcode": 0, "answers": 1}]}),
        );
        let nx = Ok(
            json!({"name": "example.com", "servers": [{"server": "10.0.0.2", "answered": true, "rcode": 3, "answers": 0}]}),
        );
        check(dns(&nx), Status::Warn, "resolver 10.0.0.2 answered");
        check(dns(&no), Status::Pass, "does not resolve");
        check(dns(&yes), Status::Warn, "resolves through 10.0.0.2");
        check(dns(&Err("timed out".into())), Status::Warn, "did not complete");
    }

    fn refused(t: &str) -> Value {
        json!({"target": t, "result": {"status": 403, "decision_id": "d1", "error": null}})
    }

    #[test]
    fn metadata_mapping() {
        let all: Vec<Value> = METADATA_TARGETS.iter().map(|t| refused(t)).collect();
        let fine = Ok(json!({"direct": conn("169.254.169.254:80", false), "connects": all}));
        check(metadata(&facts(Egress::Relay), &fine), Status::Pass, "4 CONNECTs");
        let direct = Ok(json!({"direct": conn("169.254.169.254:80", true), "connects": all}));
        check(
            metadata(&facts(Egress::Relay), &direct),
            Status::Fail,
            "direct connect",
        );
        let mut one = all.clone();
        one[2] =
            json!({"target": "0xa9fea9fe:80", "result": {"status": 200, "decision_id": null, "error": null}});
        let tunnel = Ok(json!({"direct": conn("169.254.169.254:80", false), "connects": one}));
        check(
            metadata(&facts(Egress::Relay), &tunnel),
            Status::Fail,
            "CONNECT 0xa9fea9fe:80 succeeded",
        );
        let mut bad = all.clone();
        bad[1] = json!({"target": "[::ffff:169.254.169.254]:80", "result": {"status": 400, "decision_id": null, "error": null}});
        let other = Ok(json!({"direct": conn("169.254.169.254:80", false), "connects": bad}));
        check(
            metadata(&facts(Egress::Relay), &other),
            Status::Fail,
            "answered 400, not 403",
        );
        check(
            metadata(&facts(Egress::Open), &fine),
            Status::Pass,
            "no proxy to try",
        );
        let c = metadata(&facts(Egress::Open), &direct);
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.hint.as_deref().is_some_and(|h| h.contains("network mode open")),
            "{c:?}"
        );
    }

    #[test]
    fn denied_host_mapping() {
        let f = facts(Egress::Relay);
        let t = Some(ALLOWLIST_DENIED);
        let answer = |status: u64, id: Value| {
            Ok(
                json!({"target": ALLOWLIST_DENIED, "result": {"status": status, "decision_id": id, "error": null}}),
            )
        };
        let events = vec!["d-1".to_string()];
        check(
            denied_host(&f, t, &answer(403, json!("d-1")), &events),
            Status::Pass,
            "decision d-1",
        );
        check(
            denied_host(&f, t, &answer(403, json!("d-2")), &events),
            Status::Fail,
            "no Denied event",
        );
        check(
            denied_host(&f, t, &answer(403, Value::Null), &events),
            Status::Fail,
            "without a decision_id",
        );
        check(
            denied_host(&f, t, &answer(502, Value::Null), &events),
            Status::Fail,
            "was not refused",
        );
        check(
            denied_host(&f, None, &Err("not run".into()), &events),
            Status::Skip,
            "no plain ! rule",
        );
        check(
            denied_host(&facts(Egress::Open), None, &Err("not run".into()), &events),
            Status::Skip,
            "open",
        );
    }

    #[test]
    fn denied_targets_follow_the_policy() {
        let mut spec = iterion_test_support::conformance::sandbox_for(Some("x:1"), Path::new("/w"));
        spec.network.mode = NetworkMode::Allowlist;
        assert_eq!(denied_target(&spec).as_deref(), Some(ALLOWLIST_DENIED));
        spec.network.mode = NetworkMode::Denylist;
        spec.network.rules = vec!["!*.x.org".into(), "good.org".into(), "!bad.example.org".into()];
        assert_eq!(denied_target(&spec).as_deref(), Some("bad.example.org:443"));
        spec.network.rules = vec!["!bad.example.org:8443".into()];
        assert_eq!(denied_target(&spec).as_deref(), Some("bad.example.org:8443"));
        spec.network.rules = vec!["!10.0.0.0/8".into()];
        assert_eq!(denied_target(&spec), None);
        spec.network.mode = NetworkMode::Open;
        assert_eq!(denied_target(&spec), None);
    }

    fn all_proxy_env() -> Value {
        json!({"set": {"HTTP_PROXY": true, "HTTPS_PROXY": true, "ALL_PROXY": true, "http_proxy": true, "https_proxy": true, "all_proxy": true},
               "equal": true, "NO_PROXY": {"set": true, "has_star": false}, "no_proxy": {"set": true, "has_star": false},
               "node_use_env_proxy": true})
    }

    #[test]
    fn proxy_env_mapping() {
        let f = facts(Egress::Relay);
        check(proxy_env(&f, &Ok(all_proxy_env())), Status::Pass, "set and equal");
        let mut v = all_proxy_env();
        v["set"]["all_proxy"] = json!(false);
        check(proxy_env(&f, &Ok(v)), Status::Fail, "missing all_proxy");
        let mut v = all_proxy_env();
        v["equal"] = json!(false);
        check(proxy_env(&f, &Ok(v)), Status::Fail, "differ");
        let mut v = all_proxy_env();
        v["no_proxy"]["has_star"] = json!(true);
        check(proxy_env(&f, &Ok(v)), Status::Fail, "no_proxy contains *");
        let mut v = all_proxy_env();
        v["node_use_env_proxy"] = json!(false);
        check(proxy_env(&f, &Ok(v)), Status::Fail, "NODE_USE_ENV_PROXY");
        check(
            proxy_env(&facts(Egress::Open), &Ok(json!({}))),
            Status::Skip,
            "open",
        );
    }

    fn visible(items: &[(&str, &str)]) -> Answer {
        let v: Vec<Value> = items
            .iter()
            .map(|(n, val)| json!({"name": n, "sha256": digest(val)}))
            .collect();
        Ok(json!({"visible": v}))
    }

    #[test]
    fn secret_env_mapping() {
        let f = facts(Egress::Relay);
        check(
            secret_env(&f, &visible(&[])),
            Status::Pass,
            "no deny-class secret",
        );
        // Operator and workflow layers are intended, even with the host's value.
        check(
            secret_env(&f, &visible(&[("OPENAI_API_KEY", "sk-host"), ("GH_TOKEN", "gh")])),
            Status::Pass,
            "OPENAI_API_KEY (operator), GH_TOKEN (workflow)",
        );
        // Not in a secret category: ignored (PATH, proxy variables).
        check(
            secret_env(&f, &visible(&[("PATH", "/bin"), ("HTTP_PROXY", "x")])),
            Status::Pass,
            "no deny-class",
        );
        // From the image: another value than the host's.
        check(
            secret_env(&f, &visible(&[("AWS_SECRET_ACCESS_KEY", "x")])),
            Status::Warn,
            "image's own ENV: AWS_SECRET_ACCESS_KEY",
        );
        // The host's value without an operator or workflow entry: leaked.
        let c = secret_env(
            &f,
            &visible(&[
                ("ANTHROPIC_API_KEY", "sk-ant-host"),
                ("AWS_SECRET_ACCESS_KEY", "x"),
            ]),
        );
        check(c.clone(), Status::Fail, "ANTHROPIC_API_KEY");
        assert!(!c.message.contains("sk-ant-host"));
        assert_eq!(
            c.details["visible"],
            json!(["ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY"])
        );
    }

    fn hardened() -> Value {
        json!({"no_new_privs": "1", "cap_eff": "00000000000004fb", "uid": 0, "gid": 0, "pid1": "/sbin/docker-init",
               "engine_sockets": [], "home": {"path": "/root", "writable": true},
               "workspace": {"path": "/w", "writable": true}, "git_hooks": {"path": "/w/.git/hooks", "writable": false},
               "claude_settings": null})
    }

    #[test]
    fn hardening_mapping() {
        let f = facts(Egress::Relay);
        check(hardening(&f, &Ok(hardened())), Status::Pass, "PID 1 docker-init");
        let bad = |k: &str, v: Value, needle: &str| {
            let mut h = hardened();
            h[k] = v;
            check(hardening(&f, &Ok(h)), Status::Fail, needle);
        };
        bad("no_new_privs", json!("0"), "NoNewPrivs is 0");
        bad("cap_eff", json!("00000000a80425fb"), "CAP_NET_RAW");
        bad("pid1", json!("sleep"), "not an init");
        bad("uid", json!(1000), "uid 1000, expected 0");
        bad(
            "engine_sockets",
            json!(["/var/run/docker.sock"]),
            "/var/run/docker.sock",
        );
        bad("git_hooks", json!({"writable": true}), ".git/hooks is writable");
        bad(
            "workspace",
            json!({"path": "/w", "writable": false, "error": "Read-only file system"}),
            "not writable",
        );
        bad("home", Value::Null, "HOME is not set");
        // A non-root user must have no effective capability.
        let mut h = hardened();
        h["uid"] = json!(1000);
        let mut fu = facts(Egress::Relay);
        fu.uid = Some(1000);
        check(hardening(&fu, &Ok(h.clone())), Status::Fail, "CAP_CHOWN");
        h["cap_eff"] = json!("0000000000000000");
        check(hardening(&fu, &Ok(h)), Status::Pass, "uid 1000");
        // ~/.claude/settings.json is checked when mounted.
        let mut fc = facts(Egress::Relay);
        fc.claude_mounted = true;
        let mut h = hardened();
        h["claude_settings"] = json!({"writable": true});
        check(hardening(&fc, &Ok(h)), Status::Fail, "settings.json is writable");
        // compat: NoNewPrivs is not required and the compat capabilities are allowed; warn.
        let mut fcompat = facts(Egress::Relay);
        fcompat.hardening = HardeningProfile::Compat;
        let mut h = hardened();
        h["no_new_privs"] = json!("0");
        h["cap_eff"] = json!("00000000200405fb");
        check(
            hardening(&fcompat, &Ok(h)),
            Status::Warn,
            "compat hardening profile",
        );
    }

    #[test]
    fn secret_rules_cover_the_secret_categories_only() {
        let rules = secret_rules();
        assert!(rules.contains(&"suffix:_API_KEY".to_string()));
        assert!(rules.contains(&"prefix:AWS_".to_string()));
        assert!(!rules.iter().any(|r| r == "exact:PATH" || r == "suffix:_PROXY"));
    }

    #[test]
    fn numeric_users() {
        assert_eq!(numeric_user(Some("1000:1001")), (Some(1000), Some(1001)));
        assert_eq!(numeric_user(Some("0")), (Some(0), None));
        assert_eq!(numeric_user(Some("node")), (None, None));
        assert_eq!(numeric_user(None), (None, None));
    }

    /// A test-only wrapper around the real driver, impossible to select from the CLI.
    /// `without_lease` simulates a regression (D30): the container is started without the lease, so it stays
    /// on the engine's default network while the doctor believes the placement is the relay. `announce`
    /// receives the name of the first container started (a test interrupts the battery then).
    #[derive(Debug)]
    struct Wrapped {
        inner: Arc<dyn Driver>,
        without_lease: bool,
        announce: Mutex<Option<tokio::sync::oneshot::Sender<String>>>,
    }

    impl Wrapped {
        fn new(inner: Arc<dyn Driver>) -> Self {
            Wrapped {
                inner,
                without_lease: false,
                announce: Mutex::new(None),
            }
        }
    }

    #[async_trait::async_trait]
    impl Driver for Wrapped {
        fn kind(&self) -> iterion_driver::DriverKind {
            self.inner.kind()
        }
        fn capabilities(&self) -> iterion_driver::Capabilities {
            self.inner.capabilities()
        }
        async fn engine_info(&self) -> iterion_driver::Result<iterion_driver::EngineInfo> {
            self.inner.engine_info().await
        }
        async fn prepare(&self, req: PrepareRequest) -> iterion_driver::Result<iterion_driver::Prepared> {
            self.inner.prepare(req).await
        }
        async fn build(
            &self,
            p: iterion_driver::Prepared,
            r: iterion_driver::BuildRequest,
        ) -> iterion_driver::Result<iterion_driver::Prepared> {
            self.inner.build(p, r).await
        }
        async fn network(&self, req: NetworkRequest) -> iterion_driver::Result<NetworkLease> {
            self.inner.network(req).await
        }
        async fn start(
            &self,
            prepared: iterion_driver::Prepared,
            lease: Option<&NetworkLease>,
            req: StartRequest,
        ) -> iterion_driver::Result<iterion_driver::Started> {
            let lease = if self.without_lease { None } else { lease };
            let started = self.inner.start(prepared, lease, req).await?;
            if let Some(tx) = self.announce.lock().unwrap_or_else(|p| p.into_inner()).take() {
                let _ = tx.send(started.report.name.clone());
            }
            Ok(started)
        }
        async fn list_managed(&self) -> iterion_driver::Result<Vec<iterion_driver::ManagedResource>> {
            self.inner.list_managed().await
        }
        async fn owner_liveness(&self, r: &iterion_driver::ManagedResource) -> iterion_driver::Liveness {
            self.inner.owner_liveness(r).await
        }
        async fn remove_managed(
            &self,
            r: &iterion_driver::ManagedResource,
        ) -> iterion_driver::Result<iterion_driver::RemoveOutcome> {
            self.inner.remove_managed(r).await
        }
        async fn remove_image(&self, reference: &str) -> iterion_driver::Result<()> {
            self.inner.remove_image(reference).await
        }
    }

    fn container_exists(name: &str) -> bool {
        let socket = iterion_test_support::engine_socket().expect("a unix engine socket");
        let r = iterion_test_support::docker_http::request(
            &socket,
            "GET",
            &format!("/containers/{name}/json"),
            None,
            &[],
            Duration::from_secs(10),
        )
        .expect("inspect");
        r.status != 404
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn d30_default_network_regression_fails_the_egress_probes() {
        if !iterion_test_support::engine_required("d30_default_network_regression_fails_the_egress_probes") {
            return;
        }
        iterion_test_support::docker_image::ensure_test_image().expect("the local test image");
        let data = tempfile::tempdir().expect("tempdir");
        let mut env: BTreeMap<String, String> = std::env::vars().collect();
        env.insert("ITERION_HOME".into(), data.path().display().to_string());
        let wf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/doctor/ok-good.bot");
        let mut inputs = crate::Inputs::new(env, std::env::temp_dir());
        inputs.strict = true;
        inputs.probe = true;
        inputs.workflow = Some(wf.clone());
        let loaded = crate::checks::load(&wf).expect("load the workflow");
        let mut host = crate::gather(&inputs).await.expect("select the driver");
        let inner = host.selection.driver.clone().expect("a real driver");
        assert_eq!(inner.kind(), iterion_driver::DriverKind::Docker);
        host.selection.driver = Some(Arc::new(Wrapped {
            without_lease: true,
            ..Wrapped::new(inner)
        }));
        let report = crate::run(&inputs, &host, Some(&loaded)).await.expect("a report");
        let checks = report.checks.clone().expect("strict checks");
        let get = |id: &str| checks.iter().find(|c| c.id == id).expect(id).clone();
        let start = get("probe_sandbox_start");
        assert_eq!(start.status, Status::Pass, "{}", start.message);
        for id in ["probe_direct_egress", "probe_host_services"] {
            let c = get(id);
            assert_eq!(c.status, Status::Fail, "{id}: {}", c.message);
            assert!(c.message.contains("enforced placement"), "{id}: {}", c.message);
        }
        assert_eq!(report.exit_code, 1);
        let name = start.message["started ".len()..]
            .split_whitespace()
            .next()
            .expect("the container name")
            .to_string();
        assert!(name.starts_with("iterion-doctor-"), "{name}");
        assert!(!container_exists(&name), "{name} was left behind");
    }

    /// Ctrl-C drops the battery (`cmd_doctor` selects on the signal): the drop guard removes the container.
    #[tokio::test(flavor = "multi_thread")]
    async fn an_interrupted_probe_run_removes_its_sandbox() {
        if !iterion_test_support::engine_required("an_interrupted_probe_run_removes_its_sandbox") {
            return;
        }
        iterion_test_support::docker_image::ensure_test_image().expect("the local test image");
        let data = tempfile::tempdir().expect("tempdir");
        let mut env: BTreeMap<String, String> = std::env::vars().collect();
        env.insert("ITERION_HOME".into(), data.path().display().to_string());
        let wf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/doctor/ok-good.bot");
        let mut inputs = crate::Inputs::new(env, std::env::temp_dir());
        inputs.strict = true;
        inputs.probe = true;
        inputs.workflow = Some(wf.clone());
        let loaded = crate::checks::load(&wf).expect("load the workflow");
        let mut host = crate::gather(&inputs).await.expect("select the driver");
        let inner = host.selection.driver.clone().expect("a real driver");
        let (tx, rx) = tokio::sync::oneshot::channel();
        host.selection.driver = Some(Arc::new(Wrapped {
            announce: Mutex::new(Some(tx)),
            ..Wrapped::new(inner)
        }));
        let battery = crate::run(&inputs, &host, Some(&loaded));
        let name = tokio::select! {
            _ = battery => panic!("the battery finished before it was interrupted"),
            name = rx => name.expect("a container was started"),
        };
        assert!(name.starts_with("iterion-doctor-"), "{name}");
        assert!(!container_exists(&name), "{name} survived the interruption");
    }
}
