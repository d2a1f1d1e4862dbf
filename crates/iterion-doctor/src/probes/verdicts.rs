//! The verdicts of the boundary probes (06 §6.2): pure functions from the probe program's answers and the
//! sandbox's facts to checks.

use super::*;

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
    pub(super) fn of(p: Option<EgressPlacement>) -> Egress {
        match p {
            Some(EgressPlacement::Relay) => Egress::Relay,
            Some(EgressPlacement::Advisory) => Egress::Advisory,
            Some(EgressPlacement::Open) | None => Egress::Open,
        }
    }
    /// The lower-case word of the report.
    pub fn as_str(self) -> &'static str {
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
    /// Egress placement of the sandbox.
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

pub(super) fn check(
    id: &'static str,
    status: Status,
    message: impl Into<String>,
    hint: Option<&str>,
) -> Check {
    crate::report::make_check(id, status, message, hint.map(str::to_string))
}

pub(super) fn unfinished(id: &'static str, e: &str) -> Check {
    check(
        id,
        Status::Fail,
        format!("the probe did not complete: {e}"),
        Some(HINT_TIMEOUT),
    )
}

pub(super) fn connected(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["connected"] == true)
        .filter_map(|c| c["target"].as_str().map(str::to_string))
        .collect()
}

pub(super) fn targets(v: &Value, key: &str) -> Vec<String> {
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

pub(super) fn direct_egress_check(f: &Facts, a: &Answer) -> Check {
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

pub(super) fn host_services_check(f: &Facts, a: &Answer) -> Check {
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

pub(super) fn refusal(r: &Value) -> Result<Option<String>, String> {
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
pub(super) fn is_secret_name(name: &str) -> bool {
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

pub(super) fn secret_env_check(f: &Facts, a: &Answer) -> Check {
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

pub(super) fn cap_list(mask: u64) -> String {
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

pub(super) fn hardening_check(f: &Facts, a: &Answer) -> Check {
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
                "the sandbox is not hardened as iterion requires (capabilities dropped, no-new-privileges); check the driver and the engine's security options",
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
