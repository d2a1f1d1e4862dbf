//! The run lifecycle: run record → resolve → floors → driver → environment → prepare/pull → build →
//! network → start → post-create → probes → nodes (the executor, [`crate::exec`]) → final status → cleanup.
//!
//! Everything talks to engines through `Arc<dyn Driver>` chosen by the caller ([`Drivers`]); the library never
//! reads `std::env` (the environment arrives as a map in [`Config::env`]).
//!
//! Known differences from the event order of 05 §4.15, listed so nobody relies on them by accident:
//! `sandbox_user_remap`, `sandbox_uid_mismatch_warning` and `sandbox_host_state_mounted` are emitted from the
//! driver's start report, so they follow `sandbox_image_ready` and `sandbox_network_started` instead of
//! preceding them. The host-state planning itself is done by the container driver.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use iterion_driver::OwnerInfo;
use iterion_envdeny::SandboxEnvEntry;
use iterion_spec::model::Workflow;
use iterion_spec::resolve::{ModeChoice, ResolveError, ResolveInputs, resolve_sandbox};
use iterion_spec::resolved::{HostState, OciRuntime, SandboxPlan};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::events::{RunCancelled, RunFinished, RunResumed, RunStarted};
use crate::exec::{ExecContext, ExecOutcome, VarInputs};
use crate::failure::FailureCode;
use crate::status::RunStatus;
use crate::store::{
    Checkpoint, LaunchInputs, LogLevel, NewRun, OperatorEnvEntry, RunDocument, RunId, SandboxRequested,
    Store, Transition,
};

pub mod assembly;
mod cancel;
mod config;
pub mod dry_run;
mod host;
pub mod housekeeping;
mod netblock;
pub mod reaper;
mod sandbox;
pub mod secrets;
pub mod settings;
mod sink;
mod step_failure;
#[cfg(test)]
mod store_failure_tests;
mod worktree;

pub use cancel::Cancel;
pub use config::{ClawRunner, Config, Drivers, Launch, Outcome, Paused, Resume, SandboxFlags, WorktreeEnd};
pub use host::{DriverChoice, HostFacts};
pub use settings::Settings;
pub use sink::{NoObserver, Observer};
use step_failure::Failure;

/// How [`drive`] ends before cleanup.
enum End {
    Finished,
    Paused(Checkpoint),
    Failed(Failure, Option<Checkpoint>),
    Cancelled(String, Option<Checkpoint>),
}

fn requested_of(
    flags: &SandboxFlags,
    env: &BTreeMap<String, String>,
    builtin: ModeChoice,
) -> SandboxRequested {
    let mut renv = BTreeMap::new();
    for name in [
        iterion_spec::resolve::ENV_DEFAULT,
        iterion_spec::resolve::ENV_HOST_STATE,
        iterion_spec::resolve::ENV_DEFAULT_IMAGE,
    ] {
        renv.insert(name.to_owned(), env.get(name).cloned().unwrap_or_default());
    }
    SandboxRequested {
        cli_mode: flags.mode.map(|m| m.as_str().to_owned()),
        cli_host_state: flags.host_state.map(|h| h.as_str().to_owned()),
        cli_default_image: flags.default_image.clone(),
        cli_runtime: flags.runtime.as_ref().map(|r| r.as_str().to_owned()),
        cli_driver: flags.driver.clone(),
        operator_env: flags
            .operator_env
            .iter()
            .map(|e| match e {
                SandboxEnvEntry::Copy { name, .. } => OperatorEnvEntry::Copy { name: name.clone() },
                SandboxEnvEntry::Value { name, value } => OperatorEnvEntry::Value {
                    name: name.clone(),
                    value: value.clone(),
                },
            })
            .collect(),
        env: renv,
        builtin_default_mode: builtin.as_str().to_owned(),
    }
}

/// Resolution with the recorded inputs `req` (the three recorded variables replace the current ones; floors
/// and everything else come from `env`).
fn resolve_with(
    cfg: &Config,
    wf: &Workflow,
    req: &SandboxRequested,
    work_dir: &std::path::Path,
    repo_root: Option<&std::path::Path>,
) -> Result<std::result::Result<SandboxPlan, ResolveError>> {
    let mut env = cfg.env.clone();
    for (k, v) in &req.env {
        env.insert(k.clone(), v.clone());
    }
    let bad = |what: &str, v: &str| Error::InvalidLaunch {
        message: format!("invalid recorded {what} '{v}'"),
    };
    let mut inputs = ResolveInputs::new(work_dir, cfg.reader.as_ref());
    inputs.cli_mode = match &req.cli_mode {
        Some(m) => Some(ModeChoice::parse(m).ok_or_else(|| bad("--sandbox", m))?),
        None => None,
    };
    inputs.cli_host_state = match &req.cli_host_state {
        Some(h) => Some(HostState::parse(h).ok_or_else(|| bad("--sandbox-host-state", h))?),
        None => None,
    };
    inputs.cli_default_image = req.cli_default_image.clone();
    inputs.cli_runtime = match &req.cli_runtime {
        Some(r) => Some(OciRuntime::parse(r).map_err(|_| bad("--sandbox-runtime", r))?),
        None => None,
    };
    inputs.env = env;
    inputs.builtin_default_mode =
        ModeChoice::parse(&req.builtin_default_mode).unwrap_or(cfg.builtin_default_mode);
    inputs.binary_version = cfg.default_image_version.clone();
    inputs.repo_root = repo_root.map(|p| p.to_path_buf());
    match resolve_sandbox(wf, &inputs) {
        Err(ResolveError::InvalidEnv {
            name,
            value,
            expected,
        }) => Err(Error::InvalidLaunch {
            message: format!("invalid value '{value}' for {name} (want {expected})"),
        }),
        other => Ok(other),
    }
}

/// [`resolve_with`] on a blocking thread, abandoned when the run is cancelled while it runs. Resolution reads
/// repository files (`devcontainer.json` up to the size limit, Dockerfiles), which can take seconds; nothing
/// exists yet that would need cleaning up, so a signal then ends the launch at once
/// ([`Error::CancelledBeforeStart`], no run record) instead of waiting for the read.
async fn resolve_cancellable(
    cfg: &Config,
    wf: &Workflow,
    req: &SandboxRequested,
    work_dir: &std::path::Path,
    repo_root: Option<&std::path::Path>,
) -> Result<std::result::Result<SandboxPlan, ResolveError>> {
    let token = cfg.cancel.token();
    if token.is_cancelled() {
        // Cancelled before the launch: resolve as usual, so the run is recorded and ends cancelled at its first
        // check, as every launch cancelled early does.
        return resolve_with(cfg, wf, req, work_dir, repo_root);
    }
    let (c, w, r) = (cfg.clone(), wf.clone(), req.clone());
    let (wd, rr) = (
        work_dir.to_path_buf(),
        repo_root.map(std::path::Path::to_path_buf),
    );
    let task = tokio::task::spawn_blocking(move || resolve_with(&c, &w, &r, &wd, rr.as_deref()));
    tokio::select! {
        joined = task => match joined {
            Ok(plan) => plan,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        },
        () = token.cancelled() => Err(Error::CancelledBeforeStart {
            reason: cfg.cancel.reason(),
        }),
    }
}

fn project_dir(plan: &std::result::Result<SandboxPlan, ResolveError>, work_dir: &std::path::Path) -> String {
    match plan {
        Ok(SandboxPlan { run: Some(r), .. }) => r.workspace_folder.clone(),
        _ => work_dir.to_string_lossy().into_owned(),
    }
}

/// Starts a new run and drives it to a terminal status. `Err` only for problems before the run record exists
/// (usage errors, a locked or existing run, store I/O); every later failure is a status in the [`Outcome`].
pub async fn launch(cfg: &Config, launch: Launch) -> Result<Outcome> {
    launch_with(cfg, launch, |log| log).await
}

/// [`launch`] with the run's events appended through `events` (given the run's own event log).
pub(crate) async fn launch_with(
    cfg: &Config,
    launch: Launch,
    events: impl FnOnce(Arc<dyn sink::Append>) -> Arc<dyn sink::Append>,
) -> Result<Outcome> {
    let requested = requested_of(&launch.sandbox, &cfg.env, cfg.builtin_default_mode);
    let id = launch.run_id.clone().unwrap_or_else(RunId::new_v7);
    let planned_worktree = worktree::Planned::of(&launch.workflow, &launch.work_dir, &launch.store_dir, &id);
    let (work_dir, repo_root) = planned_worktree.dirs(&launch.work_dir, launch.repo_root.as_deref());
    let plan =
        resolve_cancellable(cfg, &launch.workflow, &requested, &work_dir, repo_root.as_deref()).await?;
    let pdir = project_dir(&plan, &work_dir);
    let vars = crate::exec::resolve_vars(
        &launch.workflow,
        VarInputs {
            preset: launch.preset.as_deref(),
            vars: &launch.vars,
            env: &cfg.env,
            project_dir: &pdir,
        },
    )?;
    crate::attachments::check_complete(&launch.workflow, &launch.attachments)?;
    let store = Store::create(&launch.store_dir)?.with_record_key(cfg.record_key.clone());
    // Copied before the record exists: a file that changed since it was checked refuses the launch.
    let staged = crate::attachments::stage(
        &launch.store_dir,
        id.as_str(),
        &launch.attachments,
        &crate::time::now_timestamp(),
    )?;
    let file_path = launch.workflow_path.to_string_lossy().into_owned();
    let run = store.create_run(
        &id,
        NewRun {
            id: id.to_string(),
            workflow_name: launch.workflow.name.value.clone(),
            file_path,
            workflow_bytes: launch.workflow_bytes.clone(),
            inputs: LaunchInputs {
                preset: launch.preset.clone(),
                vars: launch.vars.iter().cloned().collect(),
            },
            work_dir: work_dir.to_string_lossy().into_owned(),
            env: cfg.env.clone(),
            iterion_version: cfg.iterion_version.clone(),
            owner: cfg.owner.clone(),
            now: crate::time::now_timestamp(),
        },
    )?;
    let attached = staged.commit(run.dir());
    let em = sink::Emitter::with_events(run, cfg.observer.clone(), events);
    let (records, attach_refused) = match attached {
        Ok(records) => (Some(records), None),
        Err(e) => (
            None,
            Some(Failure::new(
                FailureCode::StoreWriteFailed,
                format!("the attachments were not stored: {}", sink::chain(&e)),
            )),
        ),
    };
    // One rewrite of run.json for the three (each rewrite is two fsyncs).
    let recorded_root = repo_root.clone();
    em.update(|d| {
        if let Some(records) = records {
            d.attachments = records;
        }
        d.repo_root = recorded_root.map(|p| p.to_string_lossy().into_owned());
        d.sandbox.requested = requested;
    });
    for w in &cfg.settings.warnings {
        em.log(LogLevel::Warn, w);
    }
    let (worktree, refused) = match planned_worktree.create(cfg, &em) {
        Ok(wt) => (wt, None),
        Err(f) => (None, Some(f)),
    };
    let refused = attach_refused.or(refused);
    let ctx = DriveInput {
        workflow: launch.workflow,
        plan,
        vars,
        resume: None,
        answers: None,
        work_dir,
        repo_root,
        operator_env: launch.sandbox.operator_env,
        secret_flags: launch.sandbox.secrets,
        store_dir: launch.store_dir,
        worktree,
        refused,
    };
    Ok(drive(cfg, em, ctx, None).await)
}

/// Resumes a `failed_resumable` or `cancelled` run. `Err(Error::ResumeInvalid)` refuses without
/// changing the record.
pub async fn resume(cfg: &Config, req: Resume) -> Result<Outcome> {
    let store = Store::at(&req.store_dir).with_record_key(cfg.record_key.clone());
    // Nothing below may act on a record that something without the key (a sandbox) could have written.
    store.check_record(&req.run_id, req.force)?;
    reaper::recover_run(&store, &req.run_id, &cfg.owner);
    let mut run = store.open_run(&req.run_id, &cfg.owner)?;
    if req.force {
        run.adopt_unsigned();
    }
    let doc = run.document().clone();
    if !doc.status.is_resumable() {
        return Err(resume_invalid(
            &req,
            format!(
                "run {} has status {} (only failed_resumable, cancelled and paused_waiting_human runs can be resumed)",
                req.run_id, doc.status
            ),
        ));
    }
    let Some(checkpoint) = doc.checkpoint.clone() else {
        return Err(resume_invalid(&req, "the run has no checkpoint".into()));
    };
    // a checkpoint at a human node (paused, or failed while it waited) continues only with its answers
    if (doc.status == RunStatus::PausedWaitingHuman || checkpoint.interaction_id.is_some())
        && req.answers.is_none()
    {
        return Err(Error::AnswersRequired {
            run_id: req.run_id.clone(),
        });
    }
    // answers for a run that waits for none would be dropped: say so, change nothing
    if doc.status != RunStatus::PausedWaitingHuman
        && checkpoint.interaction_id.is_none()
        && req.answers.is_some()
    {
        return Err(Error::AnswersNotWanted {
            run_id: req.run_id.clone(),
            status: doc.status,
            node_id: checkpoint.node_id.clone(),
        });
    }
    let (mut workflow, hash) = resumable_workflow(&req, &doc)?;
    // a human node's answers, typed and checked by its output schema (an agent's questions take any keys)
    let answers = match req.answers.clone() {
        Some(a) if checkpoint.backend_name.is_none() => {
            let fields = crate::exec::answers::answer_fields(&workflow, &checkpoint.node_id);
            Some(
                crate::exec::answers::check_answers(&fields, a).map_err(|reason| Error::AnswersInvalid {
                    run_id: req.run_id.clone(),
                    node_id: checkpoint.node_id.clone(),
                    reason,
                })?,
            )
        }
        other => other,
    };
    crate::attachments::verify_stored(run.dir(), &doc.attachments).map_err(|r| resume_invalid(&req, r))?;
    let file = req.file.clone().unwrap_or_else(|| PathBuf::from(&doc.file_path));
    if let Some(d) = crate::exec::mcp::load_project(&mut workflow, &file, &cfg.env)
        .iter()
        .find(|d| d.is_error())
    {
        return Err(resume_invalid(&req, format!("MCP servers: {}", d.message)));
    }
    // Recorded inputs, with the flags given to resume replacing them.
    let (requested, operator_env) = resume_requested(cfg, &doc, &req.sandbox)?;
    let work_dir = PathBuf::from(&doc.work_dir);
    let repo_root = doc.repo_root.as_ref().map(PathBuf::from);
    let worktree = if doc.worktree {
        let wt = worktree::reopen(
            cfg,
            repo_root.as_deref(),
            &work_dir,
            &req.store_dir,
            &req.run_id,
            doc.base_commit.as_deref(),
        )
        .map_err(|reason| resume_invalid(&req, format!("the run's worktree cannot be reused: {reason}")))?;
        Some(wt)
    } else {
        None
    };
    let plan = resolve_cancellable(cfg, &workflow, &requested, &work_dir, repo_root.as_deref()).await?;
    check_devcontainer_unchanged(&req, &doc, &plan)?;
    let previous = doc.status;
    let previous_code = doc.failure_code;
    let mut run = run;
    let owner = cfg.owner.clone();
    let version = cfg.iterion_version.clone();
    run.transition(Transition::Resume)?;
    run.update(|d| {
        d.owner = owner;
        d.iterion_version = version;
        d.sandbox.requested = requested;
        if hash != d.workflow_hash {
            d.workflow_hash = hash;
        }
    })?;
    let em = sink::Emitter::new(run, cfg.observer.clone());
    for w in &cfg.settings.warnings {
        em.log(LogLevel::Warn, w);
    }
    em.emit(RunResumed {
        resumed_from: previous,
        restart_node: checkpoint.node_id.clone(),
        failure_code: previous_code.filter(|c| *c != FailureCode::Cancelled),
    });
    let ctx = DriveInput {
        workflow,
        vars: checkpoint.vars.clone(),
        plan,
        resume: Some(checkpoint),
        answers,
        work_dir,
        repo_root,
        operator_env,
        secret_flags: req.sandbox.secrets.clone(),
        store_dir: req.store_dir.clone(),
        worktree,
        refused: None,
    };
    Ok(drive(cfg, em, ctx, Some(previous)).await)
}

/// `RESUME_INVALID` for the run being resumed.
fn resume_invalid(req: &Resume, reason: String) -> Error {
    Error::ResumeInvalid {
        run_id: req.run_id.clone(),
        reason,
    }
}

/// The recorded workflow, read again (bounded, regular file), unchanged unless `--force`, still compiling and
/// still declaring the recorded workflow; with the hash of the bytes read.
fn resumable_workflow(req: &Resume, doc: &RunDocument) -> Result<(Workflow, String)> {
    let file = req.file.clone().unwrap_or_else(|| PathBuf::from(&doc.file_path));
    // Regular files only, bounded (a file over the source limit is read no further and fails E007 below).
    let bytes =
        match iterion_spec::source::read_regular(&file, iterion_spec::lexer::MAX_SOURCE_BYTES as u64 + 1) {
            iterion_spec::source::FileRead::Found(b) => b,
            other => {
                return Err(resume_invalid(
                    req,
                    format!("cannot read {}: {other}", file.display()),
                ));
            }
        };
    let hash = crate::store::sha256_hex(&bytes);
    if hash != doc.workflow_hash && !req.force {
        return Err(resume_invalid(
            req,
            format!(
                "the workflow file {} changed since the run started (use --force to resume anyway)",
                file.display()
            ),
        ));
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let checked = iterion_spec::check(&text, &file.to_string_lossy());
    if checked.has_errors() {
        return Err(resume_invalid(
            req,
            format!("the workflow file {} no longer compiles", file.display()),
        ));
    }
    let Some(workflow) = checked
        .workflows
        .into_iter()
        .find(|w| w.name.value == doc.workflow_name)
    else {
        return Err(resume_invalid(
            req,
            format!(
                "workflow '{}' is no longer declared in {}",
                doc.workflow_name,
                file.display()
            ),
        ));
    };
    Ok((workflow, hash))
}

/// The recorded sandbox inputs with the flags given to resume replacing them, and the operator environment
/// they stand for (a recorded `--sandbox-env NAME` copies the current value again).
fn resume_requested(
    cfg: &Config,
    doc: &RunDocument,
    f: &SandboxFlags,
) -> Result<(SandboxRequested, Vec<SandboxEnvEntry>)> {
    let mut requested = doc.sandbox.requested.clone();
    if let Some(m) = f.mode {
        requested.cli_mode = Some(m.as_str().to_owned());
    }
    if let Some(h) = f.host_state {
        requested.cli_host_state = Some(h.as_str().to_owned());
    }
    if let Some(i) = &f.default_image {
        requested.cli_default_image = Some(i.clone());
    }
    if let Some(r) = &f.runtime {
        requested.cli_runtime = Some(r.as_str().to_owned());
    }
    if let Some(d) = &f.driver {
        requested.cli_driver = Some(d.clone());
    }
    let mut operator_env = Vec::new();
    for e in &requested.operator_env {
        match e {
            OperatorEnvEntry::Copy { name } => match cfg.env.get(name) {
                Some(v) => operator_env.push(SandboxEnvEntry::Copy {
                    name: name.clone(),
                    value: v.clone(),
                }),
                None => {
                    return Err(Error::InvalidLaunch {
                        message: format!("--sandbox-env {name} was recorded at launch but {name} is not set"),
                    });
                }
            },
            OperatorEnvEntry::Value { name, value } => operator_env.push(SandboxEnvEntry::Value {
                name: name.clone(),
                value: value.clone(),
            }),
        }
    }
    for e in &f.operator_env {
        operator_env.retain(|x: &SandboxEnvEntry| x.name() != e.name());
        operator_env.push(e.clone());
    }
    requested.operator_env = requested_of(
        &SandboxFlags {
            operator_env: operator_env.clone(),
            ..SandboxFlags::default()
        },
        &cfg.env,
        cfg.builtin_default_mode,
    )
    .operator_env;
    Ok((requested, operator_env))
}

/// A devcontainer that changed since the launch refuses the resume unless `--force`.
fn check_devcontainer_unchanged(
    req: &Resume,
    doc: &RunDocument,
    plan: &std::result::Result<SandboxPlan, ResolveError>,
) -> Result<()> {
    if let (Some(old), Ok(SandboxPlan { run: Some(new), .. })) = (
        doc.sandbox
            .resolved
            .as_ref()
            .and_then(|r| r.devcontainer.as_ref()),
        plan,
    ) && let Some(new_dc) = &new.devcontainer
        && new_dc.sha256 != old.sha256
        && !req.force
    {
        return Err(resume_invalid(
            req,
            format!(
                "{} changed since the run started (use --force to resume anyway)",
                new_dc.path
            ),
        ));
    }
    Ok(())
}

struct DriveInput {
    workflow: Workflow,
    plan: std::result::Result<SandboxPlan, ResolveError>,
    vars: Map<String, Value>,
    resume: Option<Checkpoint>,
    /// Answers for a paused checkpoint.
    answers: Option<serde_json::Map<String, serde_json::Value>>,
    work_dir: PathBuf,
    repo_root: Option<PathBuf>,
    operator_env: Vec<SandboxEnvEntry>,
    secret_flags: Vec<secrets::SecretFlag>,
    store_dir: PathBuf,
    /// The run's git worktree (`worktree: auto`), committed when the run finishes.
    worktree: Option<crate::exec::Worktree>,
    /// A failure met before the sandbox is set up (the worktree could not be created).
    refused: Option<Failure>,
}

async fn drive(
    cfg: &Config,
    em: sink::Emitter,
    input: DriveInput,
    resumed_from: Option<RunStatus>,
) -> Outcome {
    let started = Instant::now();
    let entry = input
        .workflow
        .entry
        .as_ref()
        .map(|e| e.value.clone())
        .unwrap_or_default();
    let stub = input
        .resume
        .clone()
        .unwrap_or_else(|| Checkpoint::stub(entry.clone(), input.vars.clone()));
    let (run_id, run_dir) = {
        let r = em.run();
        (r.id().to_owned(), r.dir().to_path_buf())
    };
    let owner = OwnerInfo {
        host_name: cfg.owner.host.clone(),
        pid: cfg.owner.pid,
        start_time: cfg.owner.started_at,
        store_dir: input.store_dir.clone(),
    };
    let mut resources = sandbox::Guard::new(cfg.drivers.container.name());
    let setup = sandbox::Setup {
        cfg,
        em: em.clone(),
        run_id: run_id.clone(),
        run_name: em.run().document().name.clone(),
        run_dir: run_dir.clone(),
        work_dir: input.work_dir.clone(),
        repo_root: input.repo_root.clone(),
        worktree: input.worktree.clone(),
        operator_env: input.operator_env.clone(),
        secrets: secrets::resolve(
            secrets::declared(&input.workflow),
            &input.secret_flags,
            &secrets::provider_keys(&input.workflow, &cfg.env),
            &cfg.env,
        ),
        owner,
        claw_nodes: crate::exec::check::claw_nodes(&input.workflow, &cfg.env),
        codex_nodes: crate::exec::codex::codex_nodes(&input.workflow, &cfg.env),
    };
    let cancel_token = cfg.cancel.token();
    let store_abort = em.store_abort();
    if input.resume.is_none() {
        // A stub checkpoint from the start, so a crash before the first node leaves a resumable record.
        let _ = em.run().save_checkpoint(stub.clone());
    }
    let end = if let Some(f) = input.refused.clone() {
        End::Failed(f, Some(stub.clone()))
    } else {
        tokio::select! {
        biased;
        _ = cancel_token.cancelled() => End::Cancelled(cancel_reason(cfg), Some(stub.clone())),
        // Replaced by the store failure below.
        _ = store_abort.cancelled() => End::Cancelled(String::new(), Some(stub.clone())),
        r = setup.run(&input.plan, &mut resources) => match r {
            Err(f) => End::Failed(f, Some(stub.clone())),
            Ok(sandboxes) => {
                em.emit(RunStarted {
                    workflow: input.workflow.name.value.clone(),
                    file: em.run().document().file_path.clone(),
                    sandboxed: sandboxes.sandboxed(),
                    driver: sandboxes.driver_name(),
                });
                execute(cfg, &em, &input, sandboxes, &run_id, stub.clone()).await
            }
        },
        }
    };
    let end = store_failure_end(&em, end);
    let outcome = finish(&em, end, started, stub);
    let report = resources.cleanup(&em, cfg.cancel.force_token()).await;
    em.emit(report);
    // The worktree is committed once the sandbox that wrote it is gone.
    if let Some(wt) = &input.worktree
        && em.run().document().status == RunStatus::Finished
    {
        worktree::finish(cfg, &em, wt, &input.workflow.name.value);
    }
    let doc = em.run().document().clone();
    let mut out = Outcome {
        run_id,
        run_name: doc.name.clone(),
        store_dir: input.store_dir,
        run_dir,
        status: doc.status,
        failure_code: doc.failure_code,
        error: outcome.0,
        hint: outcome.1,
        resumed_from,
        worktree: worktree_end(&doc),
        paused: doc
            .checkpoint
            .as_ref()
            .filter(|_| doc.status == RunStatus::PausedWaitingHuman)
            .map(|c| Paused {
                interaction_id: c.interaction_id.clone().unwrap_or_default(),
                node_id: c.node_id.clone(),
                questions: c.interaction_questions.clone().unwrap_or(serde_json::Value::Null),
                expects: if c.backend_name.is_some() {
                    Vec::new()
                } else {
                    crate::exec::answers::answer_fields(&input.workflow, &c.node_id)
                },
            }),
    };
    // Whatever `run.json` could still record, an incomplete record never reports a clean end.
    if let Some(f) = em.store_failure() {
        out.status = RunStatus::Failed;
        out.failure_code = Some(FailureCode::StoreWriteFailed);
        let message = f.message();
        if out.error.as_deref().is_none_or(|e| !e.starts_with(&message)) {
            out.error = Some(message);
            out.hint = Some(STORE_HINT.to_owned());
        }
    }
    out
}

/// The worktree's fate from the record: committed (with or without a branch), or kept where it is.
fn worktree_end(doc: &RunDocument) -> Option<WorktreeEnd> {
    if !doc.worktree {
        return None;
    }
    if doc.final_commit.is_some() {
        return Some(match &doc.final_branch {
            Some(b) => WorktreeEnd::Branch(b.clone()),
            None => WorktreeEnd::Unchanged,
        });
    }
    let path = PathBuf::from(&doc.work_dir);
    path.is_dir().then_some(WorktreeEnd::Kept(path))
}

const STORE_HINT: &str = "free space in the run store (or repair its file system) and start the run again";

/// A run during which a write to the store failed ends `failed` / `STORE_WRITE_FAILED`, whatever it would have
/// ended with: its record has a hole. The first such write aborted setup or the executor.
fn store_failure_end(em: &sink::Emitter, end: End) -> End {
    let Some(f) = em.store_failure() else {
        return end;
    };
    let mut message = f.message();
    let checkpoint = match &end {
        End::Finished => None,
        End::Paused(c) => Some(c.clone()),
        End::Failed(prior, c) => {
            message.push_str(&format!(
                "; the run had also failed ({}): {}",
                prior.event.code, prior.event.error
            ));
            c.clone()
        }
        End::Cancelled(_, c) => c.clone(),
    };
    End::Failed(
        Failure::new(FailureCode::StoreWriteFailed, message).hint(Some(STORE_HINT.to_owned())),
        checkpoint,
    )
}

fn cancel_reason(cfg: &Config) -> String {
    cfg.cancel.reason()
}

async fn execute(
    cfg: &Config,
    em: &sink::Emitter,
    input: &DriveInput,
    sandboxes: Arc<sandbox::Sandboxes>,
    run_id: &str,
    stub: Checkpoint,
) -> End {
    // The executor stops on cancellation and on the first failed write to the store.
    let exec_cancel = cfg.cancel.token().child_token();
    em.abort_also(exec_cancel.clone());
    let attachments = attachment_values(em, &input.workflow, &sandboxes);
    let mut ctx = ExecContext::new(
        run_id,
        input.vars.clone(),
        cfg.env.clone(),
        sandboxes,
        Arc::new(em.clone()),
    )
    .with_cancel(exec_cancel)
    .with_bounds(cfg.exec_bounds);
    if let Some(c) = &input.resume {
        ctx = ctx.with_resume(c.clone());
    }
    ctx = ctx.with_attachments(attachments);
    if let Some(a) = &input.answers {
        ctx = ctx.with_answers(a.clone());
    }
    // MCP servers answer before the first node (09 §6.3), where the nodes using them run.
    let claude_nodes = crate::exec::agent_cli_nodes(&input.workflow, &cfg.env);
    let health =
        crate::exec::mcp::health_check(&input.workflow, &claude_nodes, ctx.sandboxes.as_ref(), &cfg.env);
    if let Err(e) = health.await {
        return End::Failed(Failure::new(FailureCode::ExecutionFailed, e), Some(stub));
    }
    let wf = input.workflow.clone();
    // A panic in the executor must not skip the final status or cleanup (05 §8.2): it runs in its own task.
    let task = tokio::spawn(async move { crate::exec::execute(&wf, ctx).await });
    match task.await {
        Ok(ExecOutcome::Finished { .. }) => End::Finished,
        Ok(ExecOutcome::Paused { checkpoint }) => End::Paused(checkpoint),
        Ok(ExecOutcome::Failed { failure, checkpoint }) => End::Failed(
            Failure {
                event: Box::new(failure),
            },
            checkpoint,
        ),
        Ok(ExecOutcome::Cancelled { checkpoint }) => End::Cancelled(cancel_reason(cfg), Some(checkpoint)),
        Err(e) => {
            let latest = em.run().document().checkpoint.clone().unwrap_or(stub);
            let what = if e.is_panic() { "panicked" } else { "was aborted" };
            End::Failed(
                Failure::new(
                    FailureCode::InternalError,
                    format!("the workflow executor {what}"),
                ),
                Some(latest),
            )
        }
    }
}

/// The attachment values of the run from its record (the same on a resume), container paths for the nodes
/// placed in a container; the warnings about unsupplied attachments and `.url` are logged once.
fn attachment_values(
    em: &sink::Emitter,
    workflow: &Workflow,
    sandboxes: &sandbox::Sandboxes,
) -> crate::attachments::AttachmentValues {
    let (records, run_dir) = {
        let r = em.run();
        (r.document().attachments.clone(), r.dir().to_path_buf())
    };
    for w in crate::attachments::template_warnings(workflow, &records) {
        em.log(LogLevel::Warn, &w);
    }
    let in_containers = workflow
        .nodes
        .iter()
        .map(|n| n.name.value.clone())
        .filter(|n| sandboxes.in_container(n));
    crate::attachments::AttachmentValues::new(workflow, &records, &run_dir).in_containers(in_containers)
}

/// Writes the final status and the terminal event; returns `(error, hint)` for the outcome.
fn finish(
    em: &sink::Emitter,
    end: End,
    started: Instant,
    stub: Checkpoint,
) -> (Option<String>, Option<String>) {
    match end {
        End::Finished => {
            if let Err(e) = em.run().transition(Transition::Finish) {
                em.store_failed(format!(
                    "the final status in run.json was not written: {}",
                    sink::chain(&e)
                ));
            }
            em.emit(RunFinished {
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
            (None, None)
        }
        End::Paused(checkpoint) => {
            if let Err(e) = em.run().transition(Transition::Pause { checkpoint }) {
                em.store_failed(format!(
                    "the paused status in run.json was not written: {}",
                    sink::chain(&e)
                ));
            }
            (None, None)
        }
        End::Failed(f, checkpoint) => {
            let ev = *f.event;
            let transition = if ev.code.is_resumable() {
                let current = em.run().document().checkpoint.clone();
                Transition::FailResumable {
                    code: ev.code,
                    error: ev.error.clone(),
                    phase: ev.phase,
                    checkpoint: checkpoint.or(current).or(Some(stub)),
                }
            } else {
                Transition::Fail {
                    code: ev.code,
                    error: ev.error.clone(),
                    phase: ev.phase,
                }
            };
            if let Err(e) = em.run().transition(transition) {
                em.store_failed(format!(
                    "the final status in run.json was not written: {}",
                    sink::chain(&e)
                ));
            }
            em.log(
                LogLevel::Error,
                // one log line: the error's lines joined, never an escaped newline
                &format!(
                    "run failed ({}): {}",
                    ev.code,
                    ev.error
                        .lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            );
            let out = (Some(ev.error.clone()), ev.hint.clone());
            em.emit(ev);
            out
        }
        End::Cancelled(reason, checkpoint) => {
            let current = em.run().document().checkpoint.clone();
            let t = Transition::Cancel {
                reason: reason.clone(),
                checkpoint: checkpoint.or(current).or(Some(stub)),
            };
            if let Err(e) = em.run().transition(t) {
                em.store_failed(format!(
                    "the final status in run.json was not written: {}",
                    sink::chain(&e)
                ));
            }
            em.emit(RunCancelled::new(reason.clone()));
            (Some(reason), None)
        }
    }
}
