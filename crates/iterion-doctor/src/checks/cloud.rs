//! The Kubernetes checks of the strict battery, egress enforcement, the driver's capabilities and the plan of
//! the boundary probes.

use super::*;
pub(super) fn k8s_spec_compatible(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "k8s_spec_compatible";
    if !ctx.cloud {
        return skip(ID, "target local");
    }
    if ctx.specs.is_empty() {
        return skip(ID, "no active sandbox scope");
    }
    let mut parts = Vec::new();
    for (label, s) in &ctx.specs {
        // the driver's own rules: what it would refuse is a failure here
        for r in iterion_driver_k8s::spec_check::refusals(s) {
            parts.push(fail(ID, format!("{label}: {r}"), refusal_hint(&r.message)));
        }
        // and what it would quietly change is a warning
        if s.host_state == HostState::Auto
            && !iterion_driver_k8s::spec_check::host_state_is_explicit(&s.host_state_source)
        {
            parts.push(warn(
                ID,
                format!("{label}: host_state auto from the default: its host binds will be dropped"),
                "set host_state: none to make this explicit",
            ));
        }
        if s.user.as_deref().is_none_or(|u| u.trim().is_empty()) {
            parts.push(warn(
                ID,
                format!("{label}: no user: the image's user must be numeric and non-root"),
                "set sandbox.user to a numeric uid",
            ));
        }
    }
    combine(
        ID,
        parts,
        pass(
            ID,
            "image, numeric non-root user, host_state and mounts are compatible",
        ),
    )
}

/// The hint of a kubernetes refusal, by what it refuses.
fn refusal_hint(message: &str) -> &'static str {
    if message.contains("sandbox.build") || message.contains("sandbox.image") {
        "pin sandbox.image"
    } else if message.contains("host_state") {
        "set host_state: none"
    } else if message.contains("sandbox.user") {
        "set a numeric non-root user"
    } else {
        "use type=pvc/configmap/secret"
    }
}

pub(super) fn in_cluster(ctx: &Ctx<'_>) -> bool {
    ctx.inputs
        .env
        .get("KUBERNETES_SERVICE_HOST")
        .is_some_and(|v| !v.trim().is_empty())
}

/// A check from a cluster report's status, message and hint (the mapping lives in iterion-driver-k8s).
pub(super) fn from_cluster(
    id: &'static str,
    status: iterion_driver_k8s::cluster::Status,
    message: String,
    hint: Option<String>,
) -> Check {
    use iterion_driver_k8s::cluster::Status as S;
    let status = match status {
        S::Pass => Status::Pass,
        S::Warn => Status::Warn,
        S::Fail => Status::Fail,
        S::Skip => Status::Skip,
    };
    mk(id, status, message, hint)
}

/// 06 §4.11: in-cluster, the service account and `GET /version`; off-cluster, the current kubeconfig context.
/// `access` is present exactly when the target is cloud.
pub(super) async fn k8s_context(
    ctx: &Ctx<'_>,
    access: Option<&iterion_driver_k8s::cluster::ClusterAccess>,
) -> Check {
    const ID: &str = "k8s_context";
    let Some(access) = access.filter(|_| ctx.cloud) else {
        return skip(ID, "target local");
    };
    let r = iterion_driver_k8s::cluster::check_context(access, ctx.inputs.timeout).await;
    from_cluster(ID, r.status(), r.message(), r.hint())
}

/// 06 §4.12: one `SelfSubjectAccessReview` per permission of 07 §7.2, when `k8s_context` passed.
pub(super) async fn k8s_rbac(
    ctx: &Ctx<'_>,
    access: Option<&iterion_driver_k8s::cluster::ClusterAccess>,
    context_passed: bool,
) -> Check {
    const ID: &str = "k8s_rbac";
    let Some(access) = access.filter(|_| ctx.cloud) else {
        return skip(ID, "target local");
    };
    if !context_passed {
        return skip(ID, "k8s_context did not pass");
    }
    let r = iterion_driver_k8s::cluster::check_rbac(access, None, ctx.inputs.timeout).await;
    from_cluster(ID, r.status(), r.message(), r.hint())
}

pub(super) fn k8s_pod_ip(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "k8s_pod_ip";
    if !ctx.cloud {
        return skip(ID, "target local");
    }
    if ctx.policies_open() {
        return skip(ID, "every policy is open");
    }
    let env = &ctx.inputs.env;
    let bad = |m: String| {
        let h = "inject ITERION_POD_IP from status.podIP (deploy/kubernetes/runner-deployment.yaml)";
        if in_cluster(ctx) {
            fail(ID, m, h)
        } else {
            warn(ID, m, h)
        }
    };
    match env
        .get("ITERION_POD_IP")
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
    {
        None => return bad("ITERION_POD_IP is not set".into()),
        Some(ip) if ip.parse::<std::net::IpAddr>().is_err() => {
            return bad(format!(
                "ITERION_POD_IP '{}' is not an IP address",
                ip.escape_debug()
            ));
        }
        Some(_) => {}
    }
    if let Some(ips) = env.get("ITERION_POD_IPS").filter(|v| !v.trim().is_empty())
        && let Some(b) = ips
            .split(',')
            .map(str::trim)
            .find(|p| p.parse::<std::net::IpAddr>().is_err())
    {
        return bad(format!(
            "ITERION_POD_IPS entry '{}' is not an IP address",
            b.escape_debug()
        ));
    }
    let missing: Vec<&str> = ["ITERION_POD_NAME", "ITERION_POD_UID"]
        .into_iter()
        .filter(|k| env.get(*k).is_none_or(|v| v.trim().is_empty()))
        .collect();
    if !missing.is_empty() {
        return warn(
            ID,
            format!("{} not set", missing.join(" and ")),
            "without them sandbox pods are not garbage-collected with the runner",
        );
    }
    pass(ID, "ITERION_POD_IP is set and valid")
}

pub(super) fn network_policy_syntax(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "network_policy_syntax";
    let mut parts = Vec::new();
    for d in ctx.diags.iter().filter(|d| bucket(d.code) == Bucket::Network) {
        let hint = match d.code {
            "C096" => "use iterion-default or none".to_string(),
            "C095" | "C098" => "fix network.mode / network.inherit".to_string(),
            _ => d.message.clone(),
        };
        parts.push(if d.is_error() {
            fail(ID, diag_line(d), hint)
        } else {
            warn(ID, diag_line(d), d.message.clone())
        });
    }
    if parts.iter().all(|c| c.status != Status::Fail)
        && let Err(ResolveError::InvalidValue { code, .. }) = &ctx.plan
        && bucket(code) == Bucket::Network
        && let Err(e) = &ctx.plan
    {
        parts.push(fail(
            ID,
            format!("[{code}] {e}"),
            "fix network.mode / network.inherit",
        ));
    }
    let Ok(plan) = &ctx.plan else {
        return combine(
            ID,
            parts,
            skip(ID, "sandbox resolution failed (see sandbox_active)"),
        );
    };
    let policies = plan.network_policies();
    if parts.is_empty()
        && policies
            .iter()
            .all(|n| n.mode == NetworkMode::Open && n.rules.is_empty())
    {
        return skip(ID, "every policy is open");
    }
    for n in policies {
        let presets: Vec<&str> = n.preset.iter().map(|p| p.as_str()).collect();
        let rules: Vec<&str> = n.rules.iter().map(String::as_str).collect();
        match iterion_netpolicy::Policy::compile_str(n.mode.as_str(), &presets, &rules) {
            Err(errors) => {
                for e in errors {
                    let hint = match &e {
                        iterion_netpolicy::PolicyError::Preset { .. } => {
                            "use iterion-default or none".to_string()
                        }
                        iterion_netpolicy::PolicyError::Rule { error, .. } => error.to_string(),
                        _ => "fix network.mode / network.inherit".to_string(),
                    };
                    parts.push(fail(ID, format!("[{}] {e}", e.code()), hint));
                }
            }
            Ok(p) => {
                let mut flagged = false;
                for w in p.warnings() {
                    flagged = true;
                    parts.push(warn(ID, w.to_string(), w.to_string()));
                }
                for r in p.rules() {
                    if r.negated() {
                        continue;
                    }
                    let Some(net) = r.pattern().ip_range() else {
                        continue;
                    };
                    let kind = match iterion_netpolicy::classify(net.network()) {
                        iterion_netpolicy::AddressClass::Global => continue,
                        iterion_netpolicy::AddressClass::NonGlobal { kind, .. } => kind.as_str().to_string(),
                        iterion_netpolicy::AddressClass::Metadata { .. } => "metadata".to_string(),
                    };
                    flagged = true;
                    parts.push(warn(
                        ID,
                        format!(
                            "rule '{}' allows the non-global range {net} ({kind})",
                            r.original()
                        ),
                        format!("this rule lets the sandbox reach {net} ({kind}); make sure it is intended"),
                    ));
                }
                if !flagged {
                    let defaulted = if n.defaulted {
                        format!(" (defaulted: {})", n.source)
                    } else {
                        String::new()
                    };
                    parts.push(pass(
                        ID,
                        format!(
                            "{} · preset {} · {} rules{defaulted}",
                            n.mode.as_str(),
                            n.preset.map_or("none", |p| p.as_str()),
                            n.rules.len()
                        ),
                    ));
                }
            }
        }
    }
    combine(ID, parts, skip(ID, "every policy is open"))
}

pub(super) fn egress_enforcement(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "egress_enforcement";
    if ctx.plan.is_err() {
        return skip(ID, "sandbox resolution failed (see sandbox_active)");
    }
    if ctx.policies_open() || ctx.specs.is_empty() {
        return skip(ID, "every policy is open");
    }
    if ctx.cloud {
        return warn(
            ID,
            "kubernetes: NetworkPolicy enforcement depends on the cluster's network plugin and cannot be verified",
            "make sure the cluster's CNI enforces NetworkPolicies",
        );
    }
    if ctx.forced_noop() {
        return warn(
            ID,
            "the noop driver enforces no egress policy",
            "the run will execute on the host (noop driver): it is NOT sandboxed",
        );
    }
    if ctx.cross_host() {
        return skip(
            ID,
            "cross-host check: the engine's placement cannot be verified from here",
        );
    }
    if !ctx.real_local_engine() {
        return skip(ID, "no container engine (see driver_available)");
    }
    let info = ctx.host.selection.engine.clone().unwrap_or_default();
    let caps = ctx.capabilities();
    if info.desktop || caps.egress == EgressSupport::Advisory {
        if ctx.requires_enforced_egress() {
            return fail(
                ID,
                "advisory placement only (Docker Desktop) and ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS is set",
                "enforced egress is required but impossible on this engine",
            );
        }
        return warn(
            ID,
            "advisory placement (Docker Desktop): the proxy is offered through environment variables only",
            "egress is advisory on this engine: processes that ignore HTTPS_PROXY bypass the proxy; use a Linux engine for enforcement",
        );
    }
    let arch = if info.arch.is_empty() {
        std::env::consts::ARCH.to_string()
    } else {
        info.arch.clone()
    };
    match ctx.inputs.env.get("ITERION_RELAY_BIN").filter(|v| !v.is_empty()) {
        Some(p) => match iterion_driver_docker::relay::check_relay_binary(Path::new(p), &arch) {
            Ok(()) => pass(
                ID,
                format!("relay placement (NetworkMode none + iterion-relay {p} from ITERION_RELAY_BIN)"),
            ),
            Err(e) => fail(ID, e.to_string(), "rebuild iterion or fix ITERION_RELAY_BIN"),
        },
        None => {
            let facts = iterion_driver_docker::relay::elf_facts(iterion_driver_docker::relay::EMBEDDED);
            let machine = iterion_driver_docker::relay::machine_of(&arch);
            match facts {
                Some(f) if f.is_static && machine.is_none_or(|m| m == f.machine) => pass(
                    ID,
                    format!(
                        "relay placement (NetworkMode none + {})",
                        relay_summary(&ctx.inputs.env)
                    ),
                ),
                Some(_) => fail(
                    ID,
                    format!("the embedded relay is not a static {arch} executable"),
                    "rebuild iterion or fix ITERION_RELAY_BIN",
                ),
                None => fail(
                    ID,
                    "no relay is embedded in this build",
                    "rebuild iterion or fix ITERION_RELAY_BIN",
                ),
            }
        }
    }
}

pub(super) fn driver_capabilities(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "driver_capabilities";
    if ctx.specs.is_empty() {
        return skip(
            ID,
            if ctx.plan.is_err() {
                "sandbox resolution failed (see sandbox_active)"
            } else {
                "no active sandbox scope"
            },
        );
    }
    if ctx.kind() == DriverKind::Noop && !ctx.explicit_target {
        return skip(
            ID,
            "the noop driver runs on the host; the sandbox block is not applied (see driver_available)",
        );
    }
    if ctx.host.selection.driver.is_none() && !ctx.explicit_target {
        return skip(ID, "no driver (see driver_available)");
    }
    let c = ctx.capabilities();
    let mut missing: BTreeSet<&str> = BTreeSet::new();
    for (_, s) in &ctx.specs {
        // under the cloud target build_context and k8s_spec_compatible already fail a build
        if s.build.is_some() && !c.build && !ctx.cloud {
            missing.insert("build");
        }
        if !s.post_create.is_empty() && !c.post_create {
            missing.insert("post-create");
        }
        if s.user.is_some() && !c.remote_user {
            missing.insert("remote user");
        }
        if let Some(u) = &s.user
            && c.numeric_user_only
            && !u.split(':').all(|p| p.bytes().all(|b| b.is_ascii_digit()))
        {
            missing.insert("non-numeric user");
        }
        for m in &s.mounts {
            match m.kind {
                MountKind::Bind if !c.host_binds => missing.insert("host binds"),
                MountKind::Volume if !c.named_volumes => missing.insert("named volumes"),
                MountKind::Tmpfs if !c.tmpfs => missing.insert("tmpfs"),
                MountKind::Bind | MountKind::Volume | MountKind::Tmpfs => false,
            };
        }
        if s.network.needs_proxy() && c.egress != EgressSupport::Enforced && ctx.requires_enforced_egress() {
            missing.insert("enforced egress");
        }
    }
    if missing.is_empty() {
        return pass(ID, "all required features supported");
    }
    let list: Vec<&str> = missing.into_iter().collect();
    fail(
        ID,
        format!(
            "the {} driver lacks: {}",
            if ctx.cloud {
                "kubernetes"
            } else {
                ctx.kind().as_str()
            },
            list.join(", ")
        ),
        format!(
            "choose a driver that supports {}, or drop it from the sandbox block",
            list.join(", ")
        ),
    )
}

/// What the boundary probes need, or why they are skipped: only with docker/podman on this host, a
/// real driver, an active scope, an image present locally (never pulled, never built) and a probe program
/// that can run on the engine.
pub(super) async fn probe_plan(ctx: &Ctx<'_>, checks: &[Check]) -> Result<crate::probes::Plan, String> {
    if ctx.cloud {
        return Err("probes need docker or podman on this host (target cloud)".into());
    }
    if !ctx.active() {
        return Err("no active sandbox scope".into());
    }
    let driver = match &ctx.host.selection.driver {
        Some(d) if ctx.real_local_engine() => d.clone(),
        _ => return Err("probes need a docker or podman engine on this host".into()),
    };
    let Some((_, spec)) = ctx.specs.first() else {
        return Err("no active sandbox scope".into());
    };
    if spec.build.is_some() {
        return Err(
            "the spec builds its image; the doctor never builds (run once, then probe the built image)"
                .into(),
        );
    }
    if checks
        .iter()
        .any(|c| c.id == "image_resolvable" && c.status != Status::Pass)
    {
        return Err("every image must be present locally (the doctor never pulls)".into());
    }
    let usable = |why: String| format!("no iterion probe program usable inside the image: {why}");
    if crate::probe::PROBE.is_empty() {
        return Err(usable("this build embeds none (non-Linux target)".into()));
    }
    let ours = iterion_driver_docker::relay::machine_of(std::env::consts::ARCH);
    if let Some(engine) = &ctx.host.selection.engine {
        let theirs = iterion_driver_docker::relay::machine_of(&engine.arch);
        if theirs.is_some() && theirs != ours {
            return Err(usable(format!(
                "the engine runs {} and this iterion was built for {}",
                engine.arch,
                std::env::consts::ARCH
            )));
        }
    }
    let socket = ctx
        .host
        .selection
        .engine
        .as_ref()
        .and_then(|e| e.endpoint.as_ref())
        .and_then(|e| e.strip_prefix("unix://"))
        .map(PathBuf::from);
    Ok(crate::probes::Plan {
        driver,
        spec: spec.clone(),
        socket,
        bridge_gateway: ctx.host.engine.bridge_gateway().await,
        data_dir: crate::data_dir(ctx.inputs),
    })
}
