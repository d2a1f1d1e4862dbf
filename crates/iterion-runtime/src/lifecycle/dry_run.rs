//! `iterion run --dry-run`: everything a launch decides before its first side effect — the workflow's vars,
//! the worktree it would use, the resolved sandbox of every scope and node, the driver (or the host fallback),
//! the egress policy in force with its rules, the environment names the deny class removes, the attachments it
//! would store — without creating a run record, a worktree, a network, an image or a container.
//!
//! It calls the same steps as [`super::launch`] (resolution, the host-fallback decision, policy compilation,
//! the container environment merge), so a verdict here is the verdict of the run.
use std::collections::BTreeMap;

use iterion_spec::resolved::{NodePlacement, ResolvedSandbox, SandboxPlan};
use serde::Serialize;

use super::assembly::container_env;
use super::config::{Config, Launch};
use super::host::DriverChoice;
use super::requested_of;
use super::sandbox::{
    attachments_unsupported, claw_runtime_refusal, codex_refusal, compile_policy, effective_policies,
    host_fallback, resolve_failure,
};
use super::step_failure::Failure;
use super::worktree::Planned;
use crate::error::Result;
use crate::exec::VarInputs;
use crate::failure::FailureCode;
use crate::store::RunId;

/// The proxy URL a filtering policy puts in the container environment (the same for every run).
const PROXY_URL: &str = "http://127.0.0.1:3128";

/// What a launch would do, decided without side effects.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct DryRun {
    /// The workflow's name.
    pub workflow: String,
    /// The workflow file.
    pub file: String,
    /// The store the run record would go to.
    pub store_dir: String,
    /// The directory the nodes would work in (for `worktree: auto`, where the new worktree would go).
    pub work_dir: String,
    /// The repository root (devcontainer lookup, worktree source).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo_root: Option<String>,
    /// Whether the run would work in a new git worktree of the repository.
    pub worktree: bool,
    /// The container driver that would start the sandboxes (`docker`, `podman`, …), `noop` when forced, or
    /// `none` when nothing runs in a container.
    pub driver: String,
    /// Whether any node would run in a container.
    pub sandboxed: bool,
    /// Whether the driver has no host file system, so the work dir would be copied into each sandbox at its
    /// start and back at the end (kubernetes) instead of bind-mounted.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub workspace_copied: bool,
    /// Why active scopes would run on the host instead (no container runtime, a forced `noop`, an `auto`
    /// scope without a spec).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The resolved sandbox plan (run scope, node placements, floors, warnings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<SandboxPlan>,
    /// Per container scope (`run`, or a node's own sandbox key): the environment names the deny class would
    /// remove, sorted.
    pub env_denied: BTreeMap<String, Vec<String>>,
    /// The attachments the run would store (checked: declared, readable, of an accepted type).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<PlannedAttachment>,
    /// The secrets the run would bind (names, hosts, delivery, source; never a value).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<super::secrets::SecretInfo>,
    /// Secrets the workflow declares that the operator did not grant (`--secret NAME`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets_ungranted: Vec<String>,
    /// The refusal, when the run could not start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
}

/// One attachment a run would store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PlannedAttachment {
    /// The declared name.
    pub name: String,
    /// The file (every symlink resolved).
    pub source: String,
    /// The sniffed MIME type.
    pub mime: String,
    /// Size in bytes.
    pub size: u64,
}

impl DryRun {
    /// Whether the run could start.
    pub fn could_start(&self) -> bool {
        self.refused.is_none()
    }
}

/// Why a run would be refused: the failure code, message and hint the run would end with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Refusal {
    /// The failure code (`SANDBOX_SPEC_INVALID`, `SANDBOX_DRIVER_UNAVAILABLE`, `WORKTREE_FAILED`, …).
    pub code: FailureCode,
    /// The error text.
    pub error: String,
    /// The remediation, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl From<Failure> for Refusal {
    fn from(f: Failure) -> Refusal {
        Refusal {
            code: f.event.code,
            error: f.event.error.clone(),
            hint: f.event.hint.clone(),
        }
    }
}

/// Decides everything [`super::launch`] would before its first side effect. `Err` only for what `run` also
/// reports before a record exists (invalid vars or sandbox environment values).
pub fn dry_run(cfg: &Config, launch: &Launch) -> Result<DryRun> {
    let requested = requested_of(&launch.sandbox, &cfg.env, cfg.builtin_default_mode);
    let id = launch.run_id.clone().unwrap_or_else(RunId::new_v7);
    let planned = Planned::of(&launch.workflow, &launch.work_dir, &launch.store_dir, &id);
    let (work_dir, repo_root) = planned.dirs(&launch.work_dir, launch.repo_root.as_deref());
    let resolved = super::resolve_with(cfg, &launch.workflow, &requested, &work_dir, repo_root.as_deref())?;
    let pdir = super::project_dir(&resolved, &work_dir);
    crate::exec::resolve_vars(
        &launch.workflow,
        VarInputs {
            preset: launch.preset.as_deref(),
            vars: &launch.vars,
            env: &cfg.env,
            project_dir: &pdir,
        },
    )?;
    let mut out = DryRun {
        workflow: launch.workflow.name.value.clone(),
        file: launch.workflow_path.to_string_lossy().into_owned(),
        store_dir: launch.store_dir.to_string_lossy().into_owned(),
        work_dir: work_dir.to_string_lossy().into_owned(),
        repo_root: repo_root.map(|p| p.to_string_lossy().into_owned()),
        worktree: !matches!(planned, Planned::InPlace),
        driver: "none".into(),
        sandboxed: false,
        workspace_copied: false,
        skipped: None,
        plan: None,
        env_denied: BTreeMap::new(),
        attachments: launch
            .attachments
            .iter()
            .map(|a| PlannedAttachment {
                name: a.name.clone(),
                source: a.source.to_string_lossy().into_owned(),
                mime: a.mime.clone(),
                size: a.size,
            })
            .collect(),
        secrets: Vec::new(),
        secrets_ungranted: Vec::new(),
        refused: None,
    };
    if let Planned::Refused(reason) = &planned {
        out.refused = Some(super::worktree::refusal(reason.clone()).into());
        return Ok(out);
    }
    let plan = match resolved {
        Ok(p) => p,
        Err(e) => {
            out.refused = Some(resolve_failure(&e).into());
            return Ok(out);
        }
    };
    out.skipped = plan.run_skippable.clone();
    match super::secrets::resolve(
        super::secrets::declared(&launch.workflow),
        &launch.sandbox.secrets,
        &super::secrets::provider_keys(&launch.workflow, &cfg.env),
        &cfg.env,
    ) {
        Ok(s) => {
            out.secrets = s.infos();
            out.secrets_ungranted = s.ungranted;
        }
        Err(problems) => {
            out.refused = Some(Refusal {
                code: FailureCode::SandboxSpecInvalid,
                error: format!("the run's secrets: {}", problems.join("; ")),
                hint: None,
            });
            out.plan = Some(plan);
            return Ok(out);
        }
    }
    let codex = crate::exec::codex::codex_nodes(&launch.workflow, &cfg.env);
    let claw = crate::exec::check::claw_nodes(&launch.workflow, &cfg.env);
    if let Err(f) = decide(
        cfg,
        &plan,
        &launch.sandbox.operator_env,
        (&codex, &claw),
        &mut out,
    ) {
        out.refused = Some(f.into());
    }
    out.plan = Some(plan);
    Ok(out)
}

/// The driver or host fallback, the policies and the container environments of an accepted plan.
fn decide(
    cfg: &Config,
    plan: &SandboxPlan,
    operator: &[iterion_envdeny::SandboxEnvEntry],
    (codex, claw): (
        &std::collections::BTreeSet<String>,
        &std::collections::BTreeSet<String>,
    ),
    out: &mut DryRun,
) -> std::result::Result<(), Failure> {
    if !plan.any_active() {
        return Ok(());
    }
    let scopes: Vec<(String, &ResolvedSandbox)> = plan
        .run
        .iter()
        .map(|r| ("run".to_owned(), r))
        .chain(plan.nodes.values().filter_map(|p| match p {
            NodePlacement::Own { key, sandbox } => Some((key.clone(), &**sandbox)),
            _ => None,
        }))
        .collect();
    let artifact_files = match &cfg.drivers.container {
        DriverChoice::Container(d) => {
            out.driver = d.kind().as_str().to_owned();
            out.sandboxed = true;
            out.workspace_copied = !d.capabilities().host_binds && d.capabilities().copy;
            if !d.capabilities().host_binds && !out.attachments.is_empty() {
                return Err(attachments_unsupported());
            }
            // an explicit host_state auto on a driver without a host file system, as the run refuses it
            let facts = super::assembly::HostStateFacts::of(&cfg.host);
            for (_, spec) in &scopes {
                super::assembly::host_binds_dropped(
                    spec,
                    d.capabilities().host_binds,
                    d.kind().as_str(),
                    &facts,
                )
                .map_err(|m| Failure::new(FailureCode::SandboxSpecInvalid, m))?;
            }
            d.capabilities().host_binds
        }
        choice => {
            let (label, reason) = host_fallback(&cfg.env, choice, scopes.iter().map(|(_, s)| *s))?;
            out.driver = label.to_owned();
            out.skipped = Some(reason);
            return Ok(());
        }
    };
    codex_refusal(plan, codex)?;
    claw_runtime_refusal(plan, claw)?;
    let (_, node_policies, _) = effective_policies(plan);
    for p in plan.run.iter().map(|r| &r.network).chain(node_policies.values()) {
        if p.needs_proxy() {
            compile_policy(p)?;
        }
    }
    let operator: BTreeMap<String, String> = operator
        .iter()
        .map(|e| (e.name().to_owned(), e.value().to_owned()))
        .collect();
    for (key, spec) in scopes {
        let proxy = spec.network.needs_proxy().then_some(PROXY_URL);
        let merged = container_env(spec, &operator, proxy, artifact_files)
            .map_err(|e| Failure::new(FailureCode::SandboxSpecInvalid, e.to_string()))?;
        let mut denied: Vec<String> = merged
            .report
            .iter()
            .filter(|r| r.action == iterion_envdeny::Action::Removed)
            .map(|r| r.name.clone())
            .collect();
        denied.dedup();
        out.env_denied.insert(key, denied);
    }
    Ok(())
}
