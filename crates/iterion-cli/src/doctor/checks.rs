//! The checks of 06 §4 (and the probe rows of §6.2), run in order over the resolved plan and the host.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use iterion_driver::mount_safety::{HostFacts, HostOs, MountPolicy, RealFs};
use iterion_driver::{Capabilities, DriverKind, EgressSupport};
use iterion_spec::Checked;
use iterion_spec::devcontainer::FsReader;
use iterion_spec::diag::Diagnostic;
use iterion_spec::model::Workflow;
use iterion_spec::resolve::{ModeChoice, ResolveError, ResolveInputs, resolve_sandbox};
use iterion_spec::resolved::{
    HostState, NetworkMode, NodePlacement, ResolvedSandbox, RunMode, SandboxPlan, Scope,
};
use iterion_spec::values::MountKind;
use serde_json::{Value, json};

use super::engine::{EngineFailure, RegistryAnswer, describe};
use super::report::{Check, EngineDoc, Report, SCHEMA, Status};
use super::{Host, Inputs, Target};

/// A workflow file read and checked (lexical and parse errors were refused before the battery).
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The path as given.
    pub path: PathBuf,
    /// The check result.
    pub checked: Checked,
}

/// Reads and checks a workflow file. `Err` is the usage error (unreadable file, or the rendered `E…`
/// diagnostics with positions).
pub fn load(path: &Path) -> Result<Loaded, String> {
    let label = path.display().to_string();
    let (_, checked) =
        iterion_spec::source::check_file(path, &label).map_err(|e| format!("cannot read {label}: {e}"))?;
    let lexical: Vec<String> = checked
        .diagnostics
        .iter()
        .filter(|d| d.is_error() && d.code.starts_with('E'))
        .map(Diagnostic::render)
        .collect();
    if !lexical.is_empty() {
        return Err(lexical.join("\n"));
    }
    Ok(Loaded {
        path: path.to_path_buf(),
        checked,
    })
}

/// A synthetic workflow with no sandbox block: resolution of the host defaults only (06 §7).
const EMPTY_WORKFLOW: &str =
    "tool noop:\n  command: \"true\"\n\nworkflow doctor:\n  entry: noop\n  noop -> done\n";

/// Which check a diagnostic belongs to (06 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bucket {
    Workflow,
    Sandbox,
    SpecValid,
    Safety,
    Network,
}

fn bucket(code: &str) -> Bucket {
    match code {
        "C044" | "C093" | "C094" | "C100" | "C101" | "C103" | "C104" => Bucket::SpecValid,
        "C102" | "D006" => Bucket::Safety,
        "C095" | "C096" | "C097" | "C098" | "C099" => Bucket::Network,
        "C092" | "C105" | "C128" => Bucket::Sandbox,
        c if c.starts_with('D') => Bucket::Sandbox,
        _ => Bucket::Workflow,
    }
}

fn diag_line(d: &Diagnostic) -> String {
    format!("{}:{}:{}: [{}] {}", d.file, d.line, d.col, d.code, d.message)
}

/// Everything the checks read.
struct Ctx<'a> {
    inputs: &'a Inputs,
    host: &'a Host,
    loaded: Option<&'a Loaded>,
    workflow: Option<Workflow>,
    plan: Result<SandboxPlan, ResolveError>,
    cloud: bool,
    explicit_target: bool,
    /// Every active spec: the run's and each own container's (deduplicated by key).
    specs: Vec<(String, ResolvedSandbox)>,
    diags: Vec<Diagnostic>,
}

impl Ctx<'_> {
    fn active(&self) -> bool {
        self.plan.as_ref().is_ok_and(SandboxPlan::any_active)
    }
    fn kind(&self) -> DriverKind {
        self.host.selection.kind
    }
    fn real_local_engine(&self) -> bool {
        self.host.selection.driver.is_some() && matches!(self.kind(), DriverKind::Docker | DriverKind::Podman)
    }
    fn forced_noop(&self) -> bool {
        self.host.selection.forced.is_some() && self.kind() == DriverKind::Noop
    }
    /// An explicit `--target` that this host cannot serve (06 §3.2).
    fn cross_host(&self) -> bool {
        self.explicit_target && (self.cloud || !self.real_local_engine())
    }
    fn inline_floor(&self) -> bool {
        self.inputs
            .env
            .get("ITERION_SANDBOX_FLOOR")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("inline"))
    }
    fn env_truthy(&self, k: &str) -> bool {
        self.inputs.env.get(k).is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        })
    }
    fn diags_in(&self, b: Bucket) -> Vec<&Diagnostic> {
        self.diags
            .iter()
            .filter(|d| d.is_error() && bucket(d.code) == b)
            .collect()
    }
    fn policies_open(&self) -> bool {
        match &self.plan {
            Ok(p) => p
                .network_policies()
                .iter()
                .all(|n| n.mode == NetworkMode::Open && n.rules.is_empty()),
            Err(_) => true,
        }
    }
    fn capabilities(&self) -> Capabilities {
        if self.cloud {
            return kubernetes_capabilities();
        }
        match &self.host.selection.driver {
            Some(d) if self.real_local_engine() => d.capabilities(),
            // Cross-host local check: what a Linux engine offers.
            _ if self.explicit_target => Capabilities::linux_engine(true),
            Some(d) => d.capabilities(),
            None => Capabilities::none(),
        }
    }
}

/// The kubernetes column of 03 §3.7.
fn kubernetes_capabilities() -> Capabilities {
    let mut c = Capabilities::linux_engine(false);
    c.build = false;
    c.host_binds = false;
    c.named_volumes = false;
    c.cluster_volumes = true;
    c.numeric_user_only = true;
    c.egress = EgressSupport::Enforced;
    c
}

fn mk(id: &'static str, status: Status, message: impl Into<String>, hint: Option<String>) -> Check {
    let title = match id {
        "workflow_compiles" => "workflow compiles",
        "sandbox_active" => "sandbox resolution",
        "driver_available" => "driver available",
        "spec_valid" => "spec valid",
        "engine_reachable" => "container engine answers",
        "spec_safety" => "spec safety",
        "env_deny" => "repository environment",
        "image_resolvable" => "image resolvable",
        "build_context" => "build context",
        "k8s_spec_compatible" => "Kubernetes compatibility",
        "k8s_context" => "cluster reachable",
        "k8s_rbac" => "permissions",
        "k8s_pod_ip" => "runner address",
        "network_policy_syntax" => "network policy",
        "egress_enforcement" => "egress enforcement",
        "driver_capabilities" => "driver capabilities",
        "probe_sandbox_start" => "probe: sandbox starts",
        "probe_direct_egress" => "probe: direct egress blocked",
        "probe_host_services" => "probe: host services unreachable",
        "probe_dns" => "probe: DNS",
        "probe_metadata" => "probe: metadata unreachable",
        "probe_denied_host" => "probe: denied host refused",
        "probe_proxy_env" => "probe: proxy environment",
        "probe_secret_env" => "probe: no leaked secrets",
        "probe_hardening" => "probe: hardening",
        _ => "check",
    };
    let hint = match status {
        Status::Warn | Status::Fail => hint,
        Status::Pass | Status::Skip => None,
    };
    Check {
        id,
        title,
        status,
        message: message.into(),
        hint,
        duration_ms: 0,
        details: Value::Object(Default::default()),
    }
}

fn pass(id: &'static str, m: impl Into<String>) -> Check {
    mk(id, Status::Pass, m, None)
}
fn skip(id: &'static str, m: impl Into<String>) -> Check {
    mk(id, Status::Skip, m, None)
}
fn warn(id: &'static str, m: impl Into<String>, h: impl Into<String>) -> Check {
    mk(id, Status::Warn, m, Some(h.into()))
}
fn fail(id: &'static str, m: impl Into<String>, h: impl Into<String>) -> Check {
    mk(id, Status::Fail, m, Some(h.into()))
}

/// The worst of several outcomes (fail > warn > pass > skip), messages joined.
fn combine(id: &'static str, parts: Vec<Check>, empty: Check) -> Check {
    if parts.is_empty() {
        return empty;
    }
    let rank = |s: Status| match s {
        Status::Fail => 3,
        Status::Warn => 2,
        Status::Pass => 1,
        Status::Skip => 0,
    };
    let worst = parts
        .iter()
        .map(|c| c.status)
        .max_by_key(|s| rank(*s))
        .unwrap_or(Status::Pass);
    let hint = parts
        .iter()
        .find(|c| c.status == worst)
        .and_then(|c| c.hint.clone());
    let msgs: Vec<String> = parts.iter().map(|c| c.message.clone()).collect();
    mk(id, worst, msgs.join("; "), hint)
}

fn usage_env(env: &BTreeMap<String, String>) -> Result<(), String> {
    let one_of = |name: &str, allowed: &[&str]| -> Result<(), String> {
        match env.get(name).map(|v| v.trim().to_ascii_lowercase()) {
            Some(v) if !v.is_empty() && !allowed.contains(&v.as_str()) => Err(format!(
                "invalid value '{v}' for {name} (want {})",
                allowed.join(", ")
            )),
            _ => Ok(()),
        }
    };
    one_of(
        "ITERION_SANDBOX_PULL_POLICY",
        &["auto", "missing", "always", "never"],
    )?;
    one_of("ITERION_SANDBOX_HARDENING", &["strict", "compat"])?;
    one_of(
        "ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS",
        &["1", "true", "yes", "on", "0", "false", "no", "off"],
    )?;
    Ok(())
}

const SETTINGS: &[&str] = &[
    "ITERION_SANDBOX_DEFAULT",
    "ITERION_SANDBOX_HOST_STATE",
    "ITERION_SANDBOX_DEFAULT_IMAGE",
    "ITERION_SANDBOX_FLOOR",
    "ITERION_SANDBOX_HOST_STATE_GUARD",
    "ITERION_SANDBOX_DRIVER",
    "ITERION_SANDBOX_PULL_POLICY",
    "ITERION_SANDBOX_HARDENING",
    "ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS",
];

fn caps_json(c: &Capabilities) -> Value {
    json!({
        "image": c.image, "build": c.build, "mounts": c.mounts(), "network_policy": c.network_policy(),
        "post_create": c.post_create, "remote_user": c.remote_user, "host_binds": c.host_binds,
        "named_volumes": c.named_volumes, "tmpfs": c.tmpfs, "cluster_volumes": c.cluster_volumes,
        "numeric_user_only": c.numeric_user_only, "uid_remap": c.uid_remap,
        "egress": match c.egress { EgressSupport::Enforced => "enforced", EgressSupport::Advisory => "advisory", EgressSupport::None => "none" },
        "init": c.init, "hardening": c.hardening,
    })
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn relay_summary(env: &BTreeMap<String, String>) -> String {
    match env.get("ITERION_RELAY_BIN").filter(|v| !v.is_empty()) {
        Some(p) => format!("iterion-relay {p} (ITERION_RELAY_BIN)"),
        None if iterion_driver_docker::relay::EMBEDDED.is_empty() => "no relay embedded".to_string(),
        None => format!(
            "iterion-relay {} embedded",
            iterion_driver_docker::relay::short_hash(iterion_driver_docker::relay::EMBEDDED)
        ),
    }
}

/// Builds the report of 06 §2 (report mode) or §3 (strict). `Err` is a usage error (exit 2): invalid sandbox
/// environment values.
pub async fn build_report(inputs: &Inputs, host: &Host, loaded: Option<&Loaded>) -> Result<Report, String> {
    usage_env(&inputs.env)?;
    let sel = &host.selection;
    let env = &inputs.env;
    let engine_doc = sel.engine.as_ref().map(|e| EngineDoc {
        kind: e.driver.unwrap_or(sel.kind).as_str().to_string(),
        version: e.engine.clone(),
        api_version: e.api_version.clone(),
        rootless: e.rootless,
        desktop: e.desktop,
        endpoint: e.endpoint.clone(),
    });
    let caps = sel
        .driver
        .as_ref()
        .map(|d| d.capabilities())
        .unwrap_or_else(Capabilities::none);
    let placement = match (sel.kind, caps.egress) {
        (DriverKind::Kubernetes, _) => "network_policy",
        (_, EgressSupport::Enforced) => "relay",
        (_, EgressSupport::Advisory) => "advisory",
        (_, EgressSupport::None) => "none",
    };
    let driver_error = sel.unavailable_reason().or_else(|| {
        (sel.kind == DriverKind::Noop && sel.forced.is_none()).then(|| sel.unavailable_summary())
    });
    let settings: serde_json::Map<String, Value> = SETTINGS
        .iter()
        .map(|k| {
            (
                k.to_string(),
                env.get(*k)
                    .filter(|v| !v.is_empty())
                    .map_or(Value::Null, |v| json!(v)),
            )
        })
        .collect();
    let unset = |k: &str| {
        env.get(k)
            .filter(|v| !v.is_empty())
            .cloned()
            .unwrap_or_else(|| "<unset>".into())
    };

    // Resolution (also validates the sandbox environment variables in report mode).
    let synthetic;
    let (checked, wf_label) = match loaded {
        Some(l) => (&l.checked, l.path.display().to_string()),
        None => {
            synthetic = iterion_spec::check(EMPTY_WORKFLOW, "<host defaults>");
            (&synthetic, String::new())
        }
    };
    let workflow = checked.workflows.first().cloned();
    let reader = FsReader;
    let plan = match &workflow {
        Some(wf) => {
            let mut ri = ResolveInputs::new(inputs.work_dir.clone(), &reader);
            ri.cli_mode = inputs.sandbox;
            ri.cli_host_state = inputs.host_state;
            ri.cli_default_image = inputs.default_image.clone();
            ri.env = env.clone();
            ri.builtin_default_mode = ModeChoice::Auto;
            ri.binary_version = Some(env!("CARGO_PKG_VERSION").to_string());
            // the same root `iterion run` uses (05 §4.1), so both find the same devcontainer.json
            ri.repo_root = Some(iterion_host::repo_root(&inputs.work_dir));
            resolve_sandbox(wf, &ri)
        }
        None => Err(ResolveError::InvalidDeclaration {
            scope: "the workflow file".into(),
        }),
    };
    if let Err(e @ ResolveError::InvalidEnv { .. }) = &plan {
        return Err(e.to_string());
    }

    let mut report = Report {
        schema: SCHEMA,
        strict: inputs.strict,
        target: None,
        host: sel.host_kind.as_str().to_string(),
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
        container_runtime: engine_doc.as_ref().map(|e| e.kind.clone()),
        engine: engine_doc.clone(),
        available_drivers: sel.available(),
        selected_driver: sel.kind.as_str().to_string(),
        driver_error: driver_error.clone(),
        capabilities: caps_json(&caps),
        egress_placement: placement.to_string(),
        sandbox_default: unset("ITERION_SANDBOX_DEFAULT"),
        settings: Value::Object(settings),
        workflow: Value::Null,
        spec: Value::Null,
        checks: None,
        summary: None,
        exit_code: 0,
        human: Vec::new(),
        header: String::new(),
    };

    if !inputs.strict {
        report.human = report_lines(inputs, host, &report, &caps, placement).await;
        return Ok(report);
    }

    let cloud = match inputs.target {
        Target::Cloud => true,
        Target::Local => false,
        Target::Auto => sel.kind == DriverKind::Kubernetes,
    };
    report.target = Some(if cloud { "cloud" } else { "local" }.to_string());
    if let (Some(l), Some(w)) = (loaded, &workflow) {
        report.workflow = json!({"path": l.path.display().to_string(), "name": w.name.as_str()});
        report.header = format!(" {wf_label}");
    }
    let mut specs: Vec<(String, ResolvedSandbox)> = Vec::new();
    if let Ok(p) = &plan {
        if let Some(r) = &p.run {
            specs.push(("run".into(), r.clone()));
        }
        for (id, pl) in &p.nodes {
            if let NodePlacement::Own { sandbox, .. } = pl
                && !specs.iter().any(|(_, s)| s.key == sandbox.key)
            {
                specs.push((format!("node '{id}'"), (**sandbox).clone()));
            }
        }
    }
    let ctx = Ctx {
        inputs,
        host,
        loaded,
        workflow,
        diags: checked.diagnostics.clone(),
        plan,
        cloud,
        explicit_target: inputs.target != Target::Auto,
        specs,
    };
    report.spec = spec_json(&ctx);

    let mut checks = Vec::new();
    macro_rules! run {
        ($e:expr) => {{
            let t = Instant::now();
            let mut c = $e;
            c.duration_ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
            checks.push(c);
        }};
    }
    run!(workflow_compiles(&ctx));
    run!(sandbox_active(&ctx));
    run!(driver_available(&ctx));
    run!(spec_valid(&ctx));
    run!(engine_reachable(&ctx).await);
    run!(spec_safety(&ctx));
    run!(env_deny(&ctx));
    run!(image_resolvable(&ctx).await);
    run!(build_context(&ctx));
    run!(k8s_spec_compatible(&ctx));
    let access = ctx.cloud.then(|| {
        iterion_driver_k8s::cluster::ClusterAccess::discover(
            &iterion_driver_k8s::cluster::DiscoveryInputs::new(inputs.env.clone()),
        )
    });
    let k8s_ctx = k8s_context(&ctx, access.as_ref()).await;
    let ctx_passed = k8s_ctx.status == Status::Pass;
    run!(k8s_ctx);
    run!(k8s_rbac(&ctx, access.as_ref(), ctx_passed).await);
    run!(k8s_pod_ip(&ctx));
    run!(network_policy_syntax(&ctx));
    run!(egress_enforcement(&ctx));
    run!(driver_capabilities(&ctx));
    if inputs.probe {
        match probe_plan(&ctx, &checks).await {
            Ok(plan) => checks.extend(super::probes::run(inputs, &plan).await),
            Err(reason) => {
                for id in super::probes::PROBE_IDS {
                    checks.push(skip(id, reason.clone()));
                }
            }
        }
    }
    report.checks = Some(checks);
    report.finish();
    Ok(report)
}

async fn report_lines(
    inputs: &Inputs,
    host: &Host,
    report: &Report,
    caps: &Capabilities,
    placement: &str,
) -> Vec<(String, String)> {
    let sel = &host.selection;
    let env = &inputs.env;
    let unset = |k: &str| {
        env.get(k)
            .filter(|v| !v.is_empty())
            .cloned()
            .unwrap_or_else(|| "<unset>".into())
    };
    let mut v: Vec<(String, String)> = Vec::new();
    v.push((
        "host".into(),
        format!("{} ({}/{})", report.host, report.os, report.arch),
    ));
    v.push((
        "container engine".into(),
        match &report.engine {
            Some(e) => engine_line(e),
            None => format!("none ({})", sel.unavailable_summary()),
        },
    ));
    let mut selected = format!("{} ({})", sel.kind, sel.reason);
    if let Some(err) = &report.driver_error
        && sel.driver.is_none()
    {
        selected.push_str(&format!("\nunavailable: {err}"));
    }
    if sel.kind == DriverKind::Noop && sel.forced.is_none() {
        selected.push_str("\nno container runtime: workflows with sandbox: auto run on the host with a sandbox_skipped event; sandbox: inline workflows fail with SANDBOX_DRIVER_UNAVAILABLE");
    }
    v.push(("selected driver".into(), selected));
    v.push(("available drivers".into(), report.available_drivers.join(", ")));
    v.push((
        "egress".into(),
        match placement {
            "relay" => format!("enforced (relay; {})", relay_summary(env)),
            "advisory" => "advisory (proxy variables only; Docker Desktop)".into(),
            "network_policy" => "enforced (NetworkPolicy)".into(),
            _ => "none (the noop driver does not isolate the network)".into(),
        },
    ));
    v.push((
        "capabilities".into(),
        format!(
            "image {} · build {} · mounts {} · network_policy {} · post_create {} · remote_user {}",
            yes(caps.image),
            yes(caps.build),
            yes(caps.mounts()),
            yes(caps.network_policy()),
            yes(caps.post_create),
            yes(caps.remote_user)
        ),
    ));
    // what a run applies (03 §8.7), read by the same code
    let container = iterion_driver::hardening::ContainerSettings::from_env(env);
    let (profile, caps_added) = match container.hardening {
        iterion_driver::HardeningProfile::Strict => ("strict", "8"),
        iterion_driver::HardeningProfile::Compat => ("compat", "11"),
    };
    let pids = container.limits.pids.unwrap_or_default();
    v.push((
        "hardening".into(),
        if caps.hardening {
            format!("{profile} (cap-drop ALL + {caps_added}, no-new-privileges, init, pids {pids})")
        } else {
            "none (the noop driver runs on the host)".into()
        },
    ));
    let host_state_default = if env
        .get("ITERION_SANDBOX_HOST_STATE")
        .is_some_and(|v| !v.is_empty())
    {
        String::new()
    } else {
        " (auto)".into()
    };
    let default_default = if env.get("ITERION_SANDBOX_DEFAULT").is_some_and(|v| !v.is_empty()) {
        String::new()
    } else {
        " (built-in: auto)".into()
    };
    let image = iterion_spec::resolve::default_image(
        inputs.default_image.as_deref(),
        env.get("ITERION_SANDBOX_DEFAULT_IMAGE").map(String::as_str),
        Some(env!("CARGO_PKG_VERSION")),
    );
    v.push((
        "defaults in force".into(),
        format!(
            "ITERION_SANDBOX_DEFAULT={}{default_default} · ITERION_SANDBOX_HOST_STATE={}{host_state_default}\nITERION_SANDBOX_DEFAULT_IMAGE={} ({image})\nITERION_SANDBOX_FLOOR={} · ITERION_SANDBOX_HOST_STATE_GUARD={}",
            unset("ITERION_SANDBOX_DEFAULT"),
            unset("ITERION_SANDBOX_HOST_STATE"),
            unset("ITERION_SANDBOX_DEFAULT_IMAGE"),
            unset("ITERION_SANDBOX_FLOOR"),
            unset("ITERION_SANDBOX_HOST_STATE_GUARD"),
        ),
    ));
    v.push(("orphans".into(), orphans(host, inputs.timeout).await));
    v
}

async fn orphans(host: &Host, timeout: std::time::Duration) -> String {
    let Some(d) = &host.selection.driver else {
        return "not checked (no driver)".into();
    };
    if host.selection.kind == DriverKind::Noop {
        return "not checked (the noop driver has no managed containers)".into();
    }
    let work = async {
        let list = d.list_managed().await?;
        let mut dead = 0usize;
        for r in &list {
            if d.owner_liveness(r).await == iterion_driver::Liveness::Dead {
                dead += 1;
            }
        }
        Ok::<_, iterion_driver::Error>(dead)
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(n)) => format!("{n} managed containers of dead owners"),
        Ok(Err(e)) => format!("not checked ({e})"),
        Err(_) => format!(
            "not checked (no answer within {})",
            iterion_driver::fmt_duration(timeout)
        ),
    }
}

fn engine_line(e: &EngineDoc) -> String {
    let mut parts = vec![
        format!("{} {}", e.kind, e.version),
        format!("API {}", e.api_version),
        if e.rootless { "rootless" } else { "rootful" }.to_string(),
    ];
    if e.desktop {
        parts.push("Docker Desktop".into());
    }
    if let Some(ep) = &e.endpoint {
        parts.push(ep.clone());
    }
    parts.join(", ")
}

fn spec_json(ctx: &Ctx<'_>) -> Value {
    let Ok(plan) = &ctx.plan else {
        return Value::Null;
    };
    let placements: serde_json::Map<String, Value> = plan
        .nodes
        .iter()
        .map(|(k, p)| {
            let v = match p {
                NodePlacement::Host { .. } => "host",
                NodePlacement::Run { .. } => "run",
                NodePlacement::Own { .. } => "own",
            };
            (k.clone(), json!(v))
        })
        .collect();
    let operator: Vec<&str> = ctx.inputs.sandbox_env.iter().map(|(k, _)| k.as_str()).collect();
    match &plan.run {
        None => json!({
            "active": plan.any_active(), "mode": match plan.run_mode { RunMode::None => "none", RunMode::Auto => "auto", RunMode::Inline => "inline" },
            "source": plan.run_source, "origin": null, "devcontainer": null, "image": null, "build": false,
            "user": null, "effective_user": null, "workspace_folder": null, "host_state": null,
            "host_state_source": null, "network": null,
            "env_names": {"repo": [], "workflow": [], "operator": operator},
            "mounts": [], "placements": placements,
        }),
        Some(r) => {
            let effective_user = r.user.clone().or_else(|| {
                ctx.capabilities().uid_remap.then(|| {
                    format!(
                        "{}:{}",
                        nix::unistd::getuid().as_raw(),
                        nix::unistd::getgid().as_raw()
                    )
                })
            });
            json!({
                "active": true, "mode": r.mode.as_str(), "source": r.source, "origin": r.origin,
                "devcontainer": r.devcontainer.as_ref().map(|d| d.path.clone()), "image": r.image,
                "build": r.build.is_some(), "user": r.user, "effective_user": effective_user,
                "workspace_folder": r.workspace_folder, "host_state": r.host_state.as_str(),
                "host_state_source": r.host_state_source,
                "network": {"mode": r.network.mode.as_str(), "preset": r.network.preset.map(|p| p.as_str()),
                            "rules": r.network.rules.len(), "defaulted": r.network.defaulted},
                "env_names": {"repo": r.env_layers.repo.keys().collect::<Vec<_>>(),
                              "workflow": r.env_layers.workflow.keys().collect::<Vec<_>>(), "operator": operator},
                "mounts": r.mounts.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
                "placements": placements,
            })
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// The checks, in the order of 06 §4.

fn workflow_compiles(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "workflow_compiles";
    let Some(_) = ctx.loaded else {
        return skip(ID, "no workflow file");
    };
    let errs = ctx.diags_in(Bucket::Workflow);
    if !errs.is_empty() {
        let lines: Vec<String> = errs.iter().map(|d| diag_line(d)).collect();
        return fail(
            ID,
            lines.join("; "),
            "fix the listed diagnostics; iterion run would refuse this workflow",
        );
    }
    match &ctx.workflow {
        Some(w) => pass(
            ID,
            format!(
                "workflow '{}' compiles ({} nodes)",
                w.name.as_str(),
                w.nodes.len()
            ),
        ),
        None => fail(
            ID,
            "the file declares no workflow",
            "fix the listed diagnostics; iterion run would refuse this workflow",
        ),
    }
}

fn sandbox_active(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "sandbox_active";
    let plan = match &ctx.plan {
        Ok(p) => p,
        Err(ResolveError::Devcontainer { diagnostics, .. })
            if diagnostics.iter().any(|d| d.is_error() && d.code == "D006") =>
        {
            return skip(ID, "the devcontainer weakens isolation (see spec_safety)");
        }
        Err(e @ ResolveError::Devcontainer { diagnostics, .. }) => {
            let hint = diagnostics
                .iter()
                .find(|d| d.is_error())
                .and_then(|d| d.hint.clone())
                .unwrap_or_else(|| "fix devcontainer.json".into());
            return fail(ID, e.to_string(), hint);
        }
        Err(e @ ResolveError::Unsandboxable { .. }) => {
            return fail(
                ID,
                e.to_string(),
                "run from a repository with a devcontainer, or set ITERION_SANDBOX_DEFAULT_IMAGE",
            );
        }
        Err(e @ ResolveError::InvalidValue { code, .. }) => {
            let owner = match bucket(code) {
                Bucket::Network => "network_policy_syntax",
                Bucket::Safety => "spec_safety",
                _ => "spec_valid",
            };
            return skip(ID, format!("resolution failed: {e} (see {owner})"));
        }
        Err(_) if ctx.workflow.is_none() => return skip(ID, "the workflow did not compile"),
        Err(e) => return skip(ID, format!("resolution failed: {e}")),
    };
    let sandbox_warnings: Vec<String> = ctx
        .diags
        .iter()
        .filter(|d| !d.is_error() && bucket(d.code) == Bucket::Sandbox)
        .chain(plan.warnings.iter())
        .map(diag_line)
        .collect();
    if let Some(f) = plan.floors.iter().find(|f| f.scope == Scope::Run) {
        return mk(
            ID,
            Status::Warn,
            format!(
                "{}={} raised the run scope from {} to {} (shadowed: {})",
                f.floor.as_str(),
                f.value,
                f.from,
                f.to,
                f.shadowed_source
            ),
            None,
        );
    }
    match (&plan.run, plan.run_mode) {
        (None, RunMode::None) => warn(
            ID,
            format!("none from {}: this run will not be sandboxed", plan.run_source),
            "this run will not be sandboxed; prefer sandbox: auto (C128)",
        ),
        (None, _) => warn(
            ID,
            format!(
                "{} from {}: {}",
                match plan.run_mode {
                    RunMode::Inline => "inline",
                    _ => "auto",
                },
                plan.run_source,
                plan.run_skippable.as_deref().unwrap_or("no container spec")
            ),
            "set ITERION_SANDBOX_DEFAULT_IMAGE or add a devcontainer.json",
        ),
        (Some(r), _) => {
            let origin = match (&r.devcontainer, &r.image, &r.build) {
                (Some(d), _, _) => format!("devcontainer {}", d.path),
                (None, _, Some(b)) => format!("build {}", b.dockerfile),
                (None, Some(i), None) => format!("image {i}"),
                (None, None, None) => "no image".into(),
            };
            let nodes: Vec<String> = plan
                .nodes
                .iter()
                .map(|(k, p)| {
                    format!(
                        "{k}={}",
                        match p {
                            NodePlacement::Host { .. } => "host",
                            NodePlacement::Run { .. } => "run",
                            NodePlacement::Own { .. } => "own",
                        }
                    )
                })
                .collect();
            let mut m = format!("{} from {} · {origin}", r.mode.as_str(), r.source);
            if !nodes.is_empty() {
                m.push_str(&format!(" · nodes: {}", nodes.join(", ")));
            }
            if !sandbox_warnings.is_empty() {
                m.push_str(&format!(" · warnings: {}", sandbox_warnings.join("; ")));
            }
            pass(ID, m)
        }
    }
}

fn driver_available(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "driver_available";
    let sel = &ctx.host.selection;
    if ctx.plan.is_err() {
        return skip(ID, "sandbox resolution failed (see sandbox_active)");
    }
    if !ctx.active() {
        return pass(ID, "no active sandbox scope: nothing needs a driver");
    }
    if let Some(reason) = sel.unavailable_reason()
        && sel.forced.is_some()
    {
        return fail(
            ID,
            format!("the forced driver {} is unavailable: {reason}", sel.kind),
            format!("the forced driver {} is unavailable: {reason}", sel.kind),
        );
    }
    if ctx.cross_host() {
        let m = if ctx.cloud {
            format!(
                "cross-host check: the spec is validated, the runtime is not (kubernetes: {})",
                iterion_host::kubernetes_unavailable()
            )
        } else {
            format!(
                "cross-host check: the spec is validated, the runtime is not ({})",
                sel.unavailable_summary()
            )
        };
        return warn(ID, m, "cross-host check: install Docker or Podman to run here");
    }
    if sel.kind == DriverKind::Noop {
        if ctx.forced_noop() {
            if ctx.inline_floor() {
                return fail(
                    ID,
                    "noop forced by the operator: the inline floor forbids running on the host",
                    "unset ITERION_SANDBOX_FLOOR=inline or choose a container driver",
                );
            }
            return warn(
                ID,
                "noop forced by the operator: the run is NOT sandboxed",
                "the run will execute on the host (noop driver): it is NOT sandboxed",
            );
        }
        return fail(
            ID,
            format!("no usable driver: {}", sel.unavailable_summary()),
            "install Docker or Podman (or start the daemon), or pass --sandbox-driver=noop to run on the host",
        );
    }
    let version = sel.engine.as_ref().map(|e| e.engine.clone()).unwrap_or_default();
    let mut c = pass(
        ID,
        format!("{} {version} ({})", sel.kind, sel.reason).replace("  ", " "),
    );
    c.details = json!({"driver": sel.kind.as_str()});
    c
}

fn spec_valid(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "spec_valid";
    let mut problems: Vec<String> = ctx
        .diags_in(Bucket::SpecValid)
        .iter()
        .map(|d| diag_line(d))
        .collect();
    let mut hint = ctx
        .diags_in(Bucket::SpecValid)
        .iter()
        .find_map(|d| d.hint.clone());
    if problems.is_empty()
        && let Err(ResolveError::InvalidValue { code, .. }) = &ctx.plan
        && bucket(code) == Bucket::SpecValid
        && let Err(e) = &ctx.plan
    {
        problems.push(format!("[{code}] {e}"));
    }
    if !problems.is_empty() {
        let h = match hint.take() {
            Some(h) => format!("fix the sandbox: block ({h})"),
            None => "fix the sandbox: block".into(),
        };
        return fail(ID, problems.join("; "), h);
    }
    if ctx.plan.is_err() {
        return skip(ID, "sandbox resolution failed (see sandbox_active)");
    }
    if ctx.specs.is_empty() {
        return skip(ID, "no active sandbox scope");
    }
    for (label, s) in &ctx.specs {
        if s.image.is_some() == s.build.is_some() {
            return fail(
                ID,
                format!("{label}: exactly one of image and build is required"),
                "fix the sandbox: block",
            );
        }
    }
    let nodes = ctx.specs.len() - usize::from(ctx.specs.iter().any(|(l, _)| l == "run"));
    pass(ID, format!("run spec and {nodes} node specs are valid"))
}

async fn engine_reachable(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "engine_reachable";
    if ctx.cloud {
        return skip(ID, "target cloud");
    }
    if !ctx.active() {
        return skip(ID, "no active sandbox scope");
    }
    if ctx.forced_noop() {
        return skip(ID, "the noop driver needs no engine");
    }
    if ctx.cross_host() {
        return skip(ID, "cross-host check: no engine on this host");
    }
    match ctx.host.engine.ping().await {
        Ok(a) => pass(
            ID,
            engine_line(&EngineDoc {
                kind: a.kind,
                version: a.version,
                api_version: a.api_version,
                rootless: a.rootless,
                desktop: a.desktop,
                endpoint: Some(a.endpoint),
            }),
        ),
        Err(e) => {
            let hint = match &e {
                EngineFailure::NotRunning(_) | EngineFailure::Other(_) => {
                    "start Docker Desktop, or: systemctl start docker (or podman.socket)".to_string()
                }
                EngineFailure::Permission(_) => {
                    "add your user to the docker group, or use rootless Podman".into()
                }
                EngineFailure::Timeout { endpoint, after } => format!(
                    "the engine at {endpoint} did not answer within {}; check the daemon (or raise ITERION_SANDBOX_DOCTOR_TIMEOUT)",
                    iterion_driver::fmt_duration(*after)
                ),
                EngineFailure::TooOld(_) => "upgrade the engine (Docker 20.10 or Podman 3 or newer)".into(),
            };
            fail(ID, describe(&e), hint)
        }
    }
}

fn host_facts(ctx: &Ctx<'_>) -> HostFacts {
    let env = &ctx.inputs.env;
    HostFacts {
        os: if cfg!(target_os = "macos") {
            HostOs::MacOs
        } else if cfg!(windows) {
            HostOs::Windows
        } else {
            HostOs::Linux
        },
        home: env.get("HOME").filter(|v| !v.is_empty()).map(PathBuf::from),
        xdg_runtime_dir: env
            .get("XDG_RUNTIME_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        engine_socket: ctx
            .host
            .selection
            .engine
            .as_ref()
            .and_then(|e| e.endpoint.as_ref())
            .and_then(|e| e.strip_prefix("unix://"))
            .map(PathBuf::from),
    }
}

fn spec_safety(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "spec_safety";
    let mut parts = Vec::new();
    for d in ctx.diags_in(Bucket::Safety) {
        parts.push(fail(ID, diag_line(d), "remove or narrow the mount"));
    }
    if let Err(ResolveError::Devcontainer { diagnostics, file }) = &ctx.plan {
        for d in diagnostics.iter().filter(|d| d.is_error() && d.code == "D006") {
            parts.push(fail(
                ID,
                format!("{file}: {}", d.message),
                format!(
                    "remove {} from devcontainer.json",
                    d.message.split_whitespace().next().unwrap_or("the setting")
                ),
            ));
        }
    }
    let facts = host_facts(ctx);
    let fs = RealFs;
    let driver = if ctx.cloud {
        DriverKind::Kubernetes
    } else if ctx.kind() == DriverKind::Podman {
        DriverKind::Podman
    } else {
        DriverKind::Docker
    };
    for (label, s) in &ctx.specs {
        if let Err(e) = iterion_driver::spec_safety::check_spec(s) {
            let field = match &e {
                iterion_driver::Error::InvalidSpec { field, .. } => field.clone(),
                _ => "the spec".into(),
            };
            parts.push(fail(ID, format!("{label}: {e}"), format!("fix {field}")));
        }
        let policy = MountPolicy {
            host: &facts,
            fs: &fs,
            driver,
            workspace_target: Some(&s.workspace_folder),
            workspace_host: Some(&ctx.inputs.work_dir),
            runtime_targets: &[],
        };
        for m in &s.mounts {
            if m.kind != MountKind::Bind || ctx.cloud {
                continue;
            }
            if let Err(e) = policy.check_mount(&m.to_string()) {
                parts.push(fail(ID, e.to_string(), "remove or narrow the mount"));
            }
        }
        if !ctx.cloud
            && let Err(e) = policy.check_workspace(&ctx.inputs.work_dir)
        {
            parts.push(fail(ID, e.to_string(), "run iterion from a project directory"));
        }
    }
    if !ctx.cloud && !ctx.specs.is_empty() {
        parts.extend(git_pointers(ctx, &facts, driver));
    }
    if parts.is_empty() && ctx.specs.is_empty() {
        return skip(
            ID,
            if ctx.plan.is_err() {
                "sandbox resolution failed (see sandbox_active)"
            } else {
                "no active sandbox scope"
            },
        );
    }
    let n: usize = ctx.specs.iter().map(|(_, s)| s.mounts.len()).sum();
    combine(
        ID,
        parts,
        pass(
            ID,
            format!(
                "{} spec(s), {n} mount(s), workspace and env entries pass",
                ctx.specs.len()
            ),
        ),
    )
}

/// The workspace's git pointers as the local driver verifies them before a start: a `.git` file, a
/// `commondir` or a protected hooks/config path that leads out of the workspace without being its genuine
/// repository, or a linked worktree's common dir that mount safety refuses. Each is a `spec_safety` failure,
/// since the run would be refused.
fn git_pointers(ctx: &Ctx<'_>, facts: &HostFacts, driver: DriverKind) -> Vec<Check> {
    const ID: &str = "spec_safety";
    use iterion_driver_docker::mounts::{git_dirs, git_overlays};
    let ws = &ctx.inputs.work_dir;
    let refused = |r: iterion_driver_docker::mounts::GitRefusal| {
        vec![fail(ID, format!("the workspace git pointer {r}"), r.remedy)]
    };
    let dirs = match git_dirs(ws) {
        Err(r) => return refused(r),
        Ok(None) => return Vec::new(),
        Ok(Some(d)) => d,
    };
    if let Err(r) = git_overlays(ws, &dirs) {
        return refused(r);
    }
    let ws_canon = std::fs::canonicalize(ws).unwrap_or_else(|_| ws.clone());
    if dirs.outside && !dirs.common_dir.starts_with(&ws_canon) {
        let fs = RealFs;
        let policy = MountPolicy {
            host: facts,
            fs: &fs,
            driver,
            workspace_target: None,
            workspace_host: Some(ws),
            runtime_targets: &[],
        };
        let c = dirs.common_dir.to_string_lossy().into_owned();
        if let Err(reason) = policy.check_bind_source(&c) {
            return vec![fail(
                ID,
                format!("the git common directory of this linked worktree is refused: source {reason}"),
                "move the repository out of the sensitive location, or run from a plain clone",
            )];
        }
    }
    Vec::new()
}

fn env_deny(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "env_deny";
    if ctx.specs.is_empty() {
        return skip(ID, "no active sandbox scope");
    }
    let mut denied: BTreeSet<String> = BTreeSet::new();
    let mut repo_names = 0usize;
    for (_, s) in &ctx.specs {
        for name in s.env_layers.repo.keys() {
            repo_names += 1;
            if let iterion_envdeny::Classification::Deny(r) = iterion_envdeny::classify(name) {
                denied.insert(format!("{name} ({})", r.code()));
            }
        }
        let total = s
            .env_layers
            .repo
            .iter()
            .chain(s.env_layers.workflow.iter())
            .chain(ctx.inputs.sandbox_env.iter().map(|(k, v)| (k, v)))
            .map(|(k, v)| (k.as_str(), v.as_str()));
        if let Err(e) = iterion_envdeny::validate_total(total) {
            return fail(ID, e.to_string(), "fix the named entry");
        }
    }
    if denied.is_empty() {
        let mut c = pass(
            ID,
            format!("the repository layer contributes no deny-class name ({repo_names} names)"),
        );
        c.details = json!({"removed": []});
        return c;
    }
    let list: Vec<String> = denied.into_iter().collect();
    let mut c = warn(
        ID,
        format!(
            "{} repository variable(s) will be removed: {}",
            list.len(),
            list.join(", ")
        ),
        "these variables will not reach the sandbox; set them in the workflow's sandbox.env if they are really needed",
    );
    c.details = json!({"removed": list});
    c
}

async fn image_resolvable(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "image_resolvable";
    if ctx.specs.is_empty() {
        return skip(ID, "no active sandbox scope");
    }
    let images: BTreeSet<&str> = ctx.specs.iter().filter_map(|(_, s)| s.image.as_deref()).collect();
    if images.is_empty() {
        return skip(ID, "the spec builds its image (see build_context)");
    }
    if ctx.forced_noop() {
        return skip(ID, "the noop driver does not use images");
    }
    let never = ctx
        .inputs
        .env
        .get("ITERION_SANDBOX_PULL_POLICY")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("never"));
    let local_engine = !ctx.cloud && ctx.real_local_engine();
    let mut parts = Vec::new();
    for image in images {
        if !ctx.cloud && !local_engine {
            parts.push(warn(
                ID,
                format!("cannot verify {image} offline: no container engine answers on this host"),
                format!("cannot verify {image} offline"),
            ));
            continue;
        }
        if local_engine {
            match ctx.host.engine.image_present(image).await {
                Ok(true) => {
                    parts.push(pass(ID, format!("{image} present locally")));
                    continue;
                }
                Ok(false) if never => {
                    parts.push(fail(
                        ID,
                        format!("{image} is absent locally and ITERION_SANDBOX_PULL_POLICY=never"),
                        "pull the image first or change ITERION_SANDBOX_PULL_POLICY",
                    ));
                    continue;
                }
                Ok(false) => {}
                Err(e) => {
                    parts.push(warn(
                        ID,
                        format!("cannot check {image}: {e}"),
                        format!("cannot verify {image} offline"),
                    ));
                    continue;
                }
            }
        }
        parts.push(match ctx.host.engine.registry(image).await {
            RegistryAnswer::Found => pass(ID, format!("{image} found in its registry")),
            RegistryAnswer::NotFound(m) => fail(
                ID,
                format!("{image}: {m}"),
                "the tag does not exist: check the reference",
            ),
            RegistryAnswer::Auth(m) => warn(
                ID,
                format!("{image}: {m}"),
                format!(
                    "cannot verify {image} without credentials; iterion run will use the engine's credentials"
                ),
            ),
            RegistryAnswer::Unreachable(m) => warn(
                ID,
                format!("{image} is not present locally and its registry is unreachable: {m}"),
                format!("cannot verify {image} offline"),
            ),
        });
    }
    combine(ID, parts, skip(ID, "no image"))
}

/// Total size of the build context after `.dockerignore`, stopping past `cap`.
fn context_size(root: &Path, ignore: &iterion_driver_docker::imagebuild::DockerIgnore, cap: u64) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p
                .strip_prefix(root)
                .map(|r| r.to_string_lossy().into_owned())
                .unwrap_or_default();
            if ignore.excluded(&rel) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(p);
            } else {
                total += meta.len();
                if total > cap {
                    return total;
                }
            }
        }
    }
    total
}

fn build_context(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "build_context";
    let builds: Vec<(&String, &iterion_spec::resolved::BuildSpec)> = ctx
        .specs
        .iter()
        .filter_map(|(l, s)| s.build.as_ref().map(|b| (l, b)))
        .collect();
    if builds.is_empty() {
        return skip(
            ID,
            if ctx.specs.is_empty() {
                "no active sandbox scope"
            } else {
                "the spec uses an image"
            },
        );
    }
    if ctx.cloud || ctx.kind() == DriverKind::Kubernetes {
        return fail(
            ID,
            "kubernetes: sandbox.build is local-only; build the image in CI and reference it with sandbox.image",
            "kubernetes: sandbox.build is local-only; build in CI and pin sandbox.image",
        );
    }
    if ctx.forced_noop() {
        return skip(ID, "the noop driver does not build images");
    }
    let root = iterion_host::repo_root(&ctx.inputs.work_dir);
    let root = std::fs::canonicalize(&root).unwrap_or(root);
    let mut parts = Vec::new();
    for (label, b) in builds {
        let df = match std::fs::canonicalize(&b.dockerfile) {
            Ok(p) if p.is_file() => p,
            _ => {
                parts.push(fail(
                    ID,
                    format!("{label}: the Dockerfile {} does not exist", b.dockerfile),
                    format!("create {} or fix build.dockerfile", b.dockerfile),
                ));
                continue;
            }
        };
        let cx = match std::fs::canonicalize(&b.context) {
            Ok(p) if p.is_dir() => p,
            _ => {
                parts.push(fail(
                    ID,
                    format!("{label}: the build context {} is not a directory", b.context),
                    "fix build.context",
                ));
                continue;
            }
        };
        if let Some(bad) = [&df, &cx].into_iter().find(|p| !p.starts_with(&root)) {
            parts.push(fail(
                ID,
                format!("{label}: {} resolves outside {}", bad.display(), root.display()),
                "keep the Dockerfile and context inside the repository",
            ));
            continue;
        }
        let ignore_bytes = iterion_spec::source::read_regular(
            &cx.join(".dockerignore"),
            iterion_spec::source::MAX_FILE_BYTES,
        )
        .into_bytes()
        .unwrap_or_default();
        let ignore_text = String::from_utf8_lossy(&ignore_bytes);
        let ignore = iterion_driver_docker::imagebuild::DockerIgnore::parse(&ignore_text);
        const GIB: u64 = 1 << 30;
        let size = context_size(&cx, &ignore, GIB);
        if size > GIB {
            parts.push(warn(
                ID,
                format!("{label}: the build context exceeds 1 GiB"),
                "the build context is over 1 GiB; add a .dockerignore",
            ));
        } else {
            parts.push(pass(
                ID,
                format!(
                    "{label}: Dockerfile {} · context {} ({size} bytes)",
                    df.display(),
                    cx.display()
                ),
            ));
        }
    }
    combine(ID, parts, skip(ID, "no build"))
}

fn k8s_spec_compatible(ctx: &Ctx<'_>) -> Check {
    const ID: &str = "k8s_spec_compatible";
    if !ctx.cloud {
        return skip(ID, "target local");
    }
    if ctx.specs.is_empty() {
        return skip(ID, "no active sandbox scope");
    }
    let mut parts = Vec::new();
    for (label, s) in &ctx.specs {
        if s.build.is_some() {
            parts.push(fail(ID, format!("{label}: kubernetes: sandbox.build is local-only; build the image in CI and reference it with sandbox.image (pin a digest)"), "pin sandbox.image"));
        } else if s.image.is_none() {
            parts.push(fail(
                ID,
                format!("{label}: kubernetes: sandbox.image is required"),
                "pin sandbox.image",
            ));
        }
        if s.host_state == HostState::Auto {
            if s.host_state_source == "default" {
                parts.push(warn(
                    ID,
                    format!("{label}: host_state auto from the default: its host binds will be dropped"),
                    "set host_state: none to make this explicit",
                ));
            } else {
                parts.push(fail(
                    ID,
                    format!("{label}: host_state auto cannot be honoured by the kubernetes driver"),
                    "set host_state: none",
                ));
            }
        }
        match &s.user {
            None => parts.push(warn(
                ID,
                format!("{label}: no user: the image's user must be numeric and non-root"),
                "set sandbox.user to a numeric uid",
            )),
            Some(u) => {
                let numeric = u
                    .split(':')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                    && u.split(':').count() <= 2;
                if !numeric {
                    parts.push(fail(ID, format!("{label}: kubernetes: sandbox.user \"{u}\" must be numeric (\"uid\" or \"uid:gid\")"), "set a numeric non-root user"));
                } else if u.split(':').next().and_then(|p| p.parse::<u64>().ok()) == Some(0) {
                    parts.push(fail(ID, format!("{label}: kubernetes: sandbox.user \"{u}\" runs as root; pods run with runAsNonRoot, use a non-zero uid"), "set a numeric non-root user"));
                }
            }
        }
        for m in &s.mounts {
            match m.kind {
                MountKind::Bind => parts.push(fail(ID, format!("{label}: kubernetes: mount '{m}': type=bind is not supported (pods have no host file system); use type=pvc, configmap or secret"), "use type=pvc/configmap/secret")),
                MountKind::Volume => parts.push(fail(ID, format!("{label}: kubernetes: mount '{m}': engine volumes do not exist on kubernetes; use type=pvc"), "use type=pvc/configmap/secret")),
                _ => {}
            }
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

fn in_cluster(ctx: &Ctx<'_>) -> bool {
    ctx.inputs
        .env
        .get("KUBERNETES_SERVICE_HOST")
        .is_some_and(|v| !v.trim().is_empty())
}

/// A check from a cluster report's status, message and hint (the mapping lives in iterion-driver-k8s).
fn from_cluster(
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
async fn k8s_context(ctx: &Ctx<'_>, access: Option<&iterion_driver_k8s::cluster::ClusterAccess>) -> Check {
    const ID: &str = "k8s_context";
    let Some(access) = access.filter(|_| ctx.cloud) else {
        return skip(ID, "target local");
    };
    let r = iterion_driver_k8s::cluster::check_context(access, ctx.inputs.timeout).await;
    from_cluster(ID, r.status(), r.message(), r.hint())
}

/// 06 §4.12: one `SelfSubjectAccessReview` per permission of 07 §7.2, when `k8s_context` passed.
async fn k8s_rbac(
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

fn k8s_pod_ip(ctx: &Ctx<'_>) -> Check {
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

fn network_policy_syntax(ctx: &Ctx<'_>) -> Check {
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

fn egress_enforcement(ctx: &Ctx<'_>) -> Check {
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
        if ctx.env_truthy("ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS") {
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

fn driver_capabilities(ctx: &Ctx<'_>) -> Check {
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
        if s.build.is_some() && !c.build {
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
        if s.network.needs_proxy()
            && c.egress != EgressSupport::Enforced
            && ctx.env_truthy("ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS")
        {
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

/// What the boundary probes need (06 §6), or why they are skipped: only with docker/podman on this host, a
/// real driver, an active scope, an image present locally (never pulled, never built) and a probe program
/// that can run on the engine.
async fn probe_plan(ctx: &Ctx<'_>, checks: &[Check]) -> Result<super::probes::Plan, String> {
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
    let env = &ctx.inputs.env;
    let socket = ctx
        .host
        .selection
        .engine
        .as_ref()
        .and_then(|e| e.endpoint.as_ref())
        .and_then(|e| e.strip_prefix("unix://"))
        .map(PathBuf::from);
    Ok(super::probes::Plan {
        driver,
        spec: spec.clone(),
        socket,
        bridge_gateway: ctx.host.engine.bridge_gateway().await,
        data_dir: super::data_dir(env),
    })
}

/// A check with the given fields (the title comes from the id).
pub(super) fn make_check(id: &'static str, status: Status, message: String, hint: Option<String>) -> Check {
    mk(id, status, message, hint)
}

/// Whether a boolean variable is truthy (`1`, `true`, `yes`, `on`).
pub(super) fn truthy(env: &BTreeMap<String, String>, k: &str) -> bool {
    env.get(k).is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}
