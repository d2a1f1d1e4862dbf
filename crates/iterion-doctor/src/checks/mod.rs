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
use super::report::{Check, EngineDoc, Report, SCHEMA, Status, make_check as mk};
use super::{Host, Inputs, Target};

mod cloud;
mod local;

use cloud::*;
use local::*;

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

/// A synthetic workflow with no sandbox block: resolution of the host defaults only.
const EMPTY_WORKFLOW: &str =
    "tool noop:\n  command: \"true\"\n\nworkflow doctor:\n  entry: noop\n  noop -> done\n";

/// Which check a diagnostic belongs to.
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
    /// An explicit `--target` that this host cannot serve.
    fn cross_host(&self) -> bool {
        self.explicit_target && (self.cloud || !self.real_local_engine())
    }
    fn inline_floor(&self) -> bool {
        self.inputs
            .env
            .get("ITERION_SANDBOX_FLOOR")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("inline"))
    }
    /// `ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS` as `iterion run` reads it.
    fn requires_enforced_egress(&self) -> bool {
        iterion_runtime::lifecycle::settings::require_enforced_egress(&self.inputs.env).0
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

/// What `iterion run` warns about the sandbox settings of `env` (an invalid pull policy, hardening profile,
/// timeout, pids limit or egress requirement, each with the value run uses instead): the doctor reports the
/// same lines, counted as warnings, so that it never refuses what run accepts nor accepts it silently.
fn settings_warnings(env: &BTreeMap<String, String>) -> Vec<String> {
    iterion_runtime::lifecycle::Settings::from_env(env).warnings
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

/// Builds the report of 06 §2 (report mode) or §3 (strict). `Err` is a usage error (exit 2): a resolution
/// setting run refuses too (`ITERION_SANDBOX_DEFAULT` and the like); the container settings run only warns about
/// are warnings here too.
pub async fn build_report(inputs: &Inputs, host: &Host, loaded: Option<&Loaded>) -> Result<Report, String> {
    let sel = &host.selection;
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
    // Resolution (also validates the sandbox environment variables in report mode).
    let resolved = resolve(inputs, loaded);
    if let Err(e @ ResolveError::InvalidEnv { .. }) = &resolved.plan {
        return Err(e.to_string());
    }
    let mut report = base_report(inputs, host, &caps, placement);
    if !inputs.strict {
        report.human = report_lines(inputs, host, &report, &caps, placement).await;
        report.add_notes(settings_warnings(&inputs.env));
        return Ok(report);
    }

    let cloud = match inputs.target {
        Target::Cloud => true,
        Target::Local => false,
        Target::Auto => sel.kind == DriverKind::Kubernetes,
    };
    report.target = Some(if cloud { "cloud" } else { "local" }.to_string());
    if let (Some(l), Some(w)) = (loaded, &resolved.workflow) {
        report.workflow = json!({"path": l.path.display().to_string(), "name": w.name.as_str()});
        report.header = format!(" {}", resolved.label);
    }
    let specs = active_specs(&resolved.plan);
    let ctx = Ctx {
        inputs,
        host,
        loaded,
        workflow: resolved.workflow,
        diags: resolved.checked.diagnostics.clone(),
        plan: resolved.plan,
        cloud,
        explicit_target: inputs.target != Target::Auto,
        specs,
    };
    report.spec = spec_json(&ctx);
    report.checks = Some(battery(&ctx).await);
    report.finish();
    report.add_notes(settings_warnings(&inputs.env));
    Ok(report)
}

/// The workflow the battery checks (the loaded file, else an empty one under the host defaults) and its
/// resolved sandbox plan.
struct Resolved<'a> {
    checked: std::borrow::Cow<'a, Checked>,
    /// The file's path as given (empty without a file).
    label: String,
    workflow: Option<Workflow>,
    plan: Result<SandboxPlan, ResolveError>,
}

/// Resolves the sandbox plan the way `iterion run` would.
fn resolve<'a>(inputs: &Inputs, loaded: Option<&'a Loaded>) -> Resolved<'a> {
    let (checked, label) = match loaded {
        Some(l) => (
            std::borrow::Cow::Borrowed(&l.checked),
            l.path.display().to_string(),
        ),
        None => (
            std::borrow::Cow::Owned(iterion_spec::check(EMPTY_WORKFLOW, "<host defaults>")),
            String::new(),
        ),
    };
    let workflow = checked.workflows.first().cloned();
    let reader = FsReader;
    let plan = match &workflow {
        Some(wf) => {
            let mut ri = ResolveInputs::new(inputs.work_dir.clone(), &reader);
            ri.cli_mode = inputs.sandbox;
            ri.cli_host_state = inputs.host_state;
            ri.cli_runtime = inputs.runtime.clone();
            ri.cli_default_image = inputs.default_image.clone();
            ri.env = inputs.env.clone();
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
    Resolved {
        checked,
        label,
        workflow,
        plan,
    }
}

/// The report's host part: selection, engine, capabilities, settings; no checks yet.
fn base_report(inputs: &Inputs, host: &Host, caps: &Capabilities, placement: &str) -> Report {
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
    Report {
        schema: SCHEMA,
        strict: inputs.strict,
        target: None,
        host: sel.host_kind.as_str().to_string(),
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
        container_runtime: engine_doc.as_ref().map(|e| e.kind.clone()),
        engine: engine_doc,
        available_drivers: sel.available(),
        selected_driver: sel.kind.as_str().to_string(),
        driver_error,
        capabilities: caps_json(caps),
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
        notes: Vec::new(),
    }
}

/// Every active spec of the plan: the run's and each own container's (deduplicated by key).
fn active_specs(plan: &Result<SandboxPlan, ResolveError>) -> Vec<(String, ResolvedSandbox)> {
    let mut specs: Vec<(String, ResolvedSandbox)> = Vec::new();
    if let Ok(p) = plan {
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
    specs
}

/// The strict battery in order, each check timed, then the boundary probes with `--probe`.
async fn battery(ctx: &Ctx<'_>) -> Vec<Check> {
    let inputs = ctx.inputs;
    let mut checks = Vec::new();
    macro_rules! run {
        ($e:expr) => {{
            let t = Instant::now();
            let mut c = $e;
            c.duration_ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
            checks.push(c);
        }};
    }
    run!(workflow_compiles(ctx));
    run!(sandbox_active(ctx));
    run!(driver_available(ctx));
    run!(spec_valid(ctx));
    run!(engine_reachable(ctx).await);
    run!(oci_runtime(ctx).await);
    run!(spec_safety(ctx));
    run!(env_deny(ctx));
    run!(secrets(ctx));
    run!(image_resolvable(ctx).await);
    run!(build_context(ctx));
    run!(k8s_spec_compatible(ctx));
    let access = ctx.cloud.then(|| {
        iterion_driver_k8s::cluster::ClusterAccess::discover(
            &iterion_driver_k8s::cluster::DiscoveryInputs::new(inputs.env.clone()),
        )
    });
    let k8s_ctx = k8s_context(ctx, access.as_ref()).await;
    let ctx_passed = k8s_ctx.status == Status::Pass;
    run!(k8s_ctx);
    run!(k8s_rbac(ctx, access.as_ref(), ctx_passed).await);
    run!(k8s_pod_ip(ctx));
    run!(network_policy_syntax(ctx));
    run!(egress_enforcement(ctx));
    run!(driver_capabilities(ctx));
    if inputs.probe {
        match probe_plan(ctx, &checks).await {
            Ok(plan) => checks.extend(crate::probes::run(inputs, &plan).await),
            Err(reason) => {
                for id in crate::probes::PROBE_IDS {
                    checks.push(skip(id, reason.clone()));
                }
            }
        }
    }
    checks
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
                "runtime": {"name": r.runtime.name.as_str(), "source": r.runtime.source},
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
