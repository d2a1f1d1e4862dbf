//! Start, last steps: starting the created container, the checks after the start (still running, a shell
//! answers, the sandbox's own processes recorded; 03 §8.8 steps 4–6), and the start report.

use super::create::Hardening;
use super::plan::{MountPlan, UserPlan};
use crate::container::{RunInner, engine_error};
use crate::dexec;
use crate::engine::EngineFacts;
use crate::mounts::{MountKind, Origin};
use crate::run::DockerRun;
use bollard::Docker;
use bollard::query_parameters::LogsOptions;
use futures::StreamExt;
use iterion_driver::{
    DriverKind, EgressPlacement, Error as DError, ExecRequest, HardeningReport, HomeSource, ImageRef,
    ImageReport, LogLevel, MountOrigin, MountReport, Output, ResourceLimits, Run, SkippedPath, StartReport,
    StartRequest, UidMismatch, UserRemap,
};
use std::time::Duration;
use tokio::io::AsyncReadExt as _;

/// The started container to check.
#[derive(Debug)]
pub(super) struct Created<'a> {
    /// The container id.
    pub(super) id: &'a str,
    /// The container name.
    pub(super) name: &'a str,
    /// The image it runs.
    pub(super) image: &'a ImageRef,
    /// The workspace folder inside the container.
    pub(super) workspace: &'a str,
    /// The container user.
    pub(super) user: Option<String>,
    /// Docker or Podman.
    pub(super) kind: DriverKind,
}

/// What the checks after the start found.
#[derive(Debug, Clone, Copy)]
pub(super) struct Checked {
    /// `bash` is on the shell's `PATH`.
    pub(super) bash: bool,
    /// From the start checks' cache: no check ran.
    pub(super) cached: bool,
}

/// The reaper's container path when the container has the relay bound there (the relay placement): the
/// leftover kill runs it.
fn bound_relay(inspected: &bollard::models::ContainerInspectResponse) -> Option<String> {
    let target = super::plan::REAPER_TARGET;
    inspected
        .mounts
        .iter()
        .flatten()
        .any(|m| m.destination.as_deref() == Some(target))
        .then(|| target.to_string())
}

/// Starts the created container and checks it (03 §8.8 steps 4–6): it still runs, a shell answers within
/// 10 s, and the processes that make up the sandbox itself are recorded (spared when a step's leftovers are
/// killed; a failure there is only a warning). The shell probe and the listing share one exec.
///
/// With a `probe_cache` directory, a start of an image whose checks passed before (same image id, user,
/// `PATH` and mounts; [`crate::probecache`]) runs no check: the cached answer stands, and the first exec
/// records the sandbox's processes ahead of its command.
pub(super) async fn start_and_check(
    docker: &Docker,
    facts: &EngineFacts,
    c: &Created<'_>,
    req: &StartRequest,
    probe_cache: Option<&std::path::Path>,
) -> Result<(DockerRun, Checked), DError> {
    if let Err(e) = docker.start_container(c.id, None).await {
        return Err(DError::StartFailed {
            reason: format!("start {}: {}", c.name, engine_error(e)),
            hint: None,
        });
    }
    let inspected = docker.inspect_container(c.id, None).await.map_err(engine_error)?;
    let state = inspected.state.clone().unwrap_or_default();
    if state.running != Some(true) {
        let tail = log_tail(docker, c.id).await;
        return Err(DError::StartFailed {
            reason: format!(
                "container exited immediately with code {}: {tail}; the image must provide sleep and /bin/sh",
                state.exit_code.unwrap_or(-1)
            ),
            hint: None,
        });
    }
    let inner = RunInner::new(
        docker.clone(),
        facts.endpoint.clone(),
        c.id.to_string(),
        c.workspace.to_string(),
        c.user.clone(),
        c.kind,
    )
    .with_reaper(bound_relay(&inspected))
    .with_gone_watch(
        inspected
            .host_config
            .as_ref()
            .and_then(|h| h.runtime.as_deref())
            .is_some_and(|r| !r.is_empty() && Some(r) != facts.default_runtime.as_deref()),
    );
    let run = DockerRun::new(inner);
    let cache =
        probe_cache.and_then(|dir| Some((dir, crate::probecache::key(&inspected, c.user.as_deref())?)));
    if let Some(bash) = cache
        .as_ref()
        .and_then(|(dir, key)| crate::probecache::lookup(dir, key))
    {
        run.defer_listing();
        req.events.log(
            LogLevel::Debug,
            format!(
                "start checks of {} taken from the cache ({}); the first exec records the sandbox's processes",
                c.image.reference,
                if bash { "bash" } else { "sh only" }
            ),
        );
        return Ok((run, Checked { bash, cached: true }));
    }
    let (bash, listing) = start_checks(&run, c.image).await?;
    if let Some((dir, key)) = &cache
        && let Err(e) = crate::probecache::store(dir, key, bash)
    {
        tracing::debug!("the start checks' cache is not written: {}: {e}", dir.display());
    }
    if let Err(e) = run.record_infrastructure(&listing) {
        req.events.log(
            LogLevel::Warn,
            format!(
                "cannot list the sandbox's processes ({e}); processes a step leaves behind will not be killed"
            ),
        );
    }
    Ok((run, Checked { bash, cached: false }))
}

/// The checks after the start (03 §8.8 steps 5–6) in ONE exec, as the container's user: the shell probe (a
/// command runs within 10 s, else the image has no usable shell) and the listing of the sandbox's own
/// processes ([`dexec::LIST_PIDS_SCRIPT`], printed on stdout), ending with `command -v bash` so the exit
/// code also says whether `bash` is there (the start report carries it; the runtime needs no probe of its
/// own). One exec instead of two saves an engine exec (40–60 ms) on every start.
async fn start_checks(run: &DockerRun, image: &ImageRef) -> Result<(bool, String), DError> {
    // Exit 0 or 1, never `command -v`'s own 127 (busybox): 126/127 make the exec layer spend one more exec
    // on asking whether its shim started.
    let script = format!(
        "{}; if command -v bash >/dev/null 2>&1; then exit 0; else exit 1; fi",
        dexec::LIST_PIDS_SCRIPT
    );
    let probe = async {
        let mut ex = run
            .exec(ExecRequest::new(["sh", "-c", script.as_str()]).outputs(Output::Piped, Output::Discard))
            .await?;
        let mut listing = Vec::new();
        if let Some(out) = ex.stdout.as_mut() {
            // At most 16 pids are expected; a runaway listing is cut (and then refused by the record).
            let _ = out.take(64 * 1024).read_to_end(&mut listing).await;
        }
        let status = ex.wait().await?;
        Ok::<_, DError>((status.code == 0, String::from_utf8_lossy(&listing).into_owned()))
    };
    match tokio::time::timeout(Duration::from_secs(10), probe).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(DError::ExecStart { .. })) => Err(DError::ShellMissing {
            image: image.reference.clone(),
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(DError::StartFailed {
            reason: "the shell probe did not finish within 10s".into(),
            hint: None,
        }),
    }
}

async fn log_tail(docker: &Docker, id: &str) -> String {
    let opts = LogsOptions {
        follow: false,
        stdout: true,
        stderr: true,
        tail: "20".into(),
        ..Default::default()
    };
    let mut s = docker.logs(id, Some(opts));
    let mut out = String::new();
    while let Some(Ok(chunk)) = s.next().await {
        out.push_str(&chunk.to_string());
    }
    out.trim().to_string()
}

/// What the start did, for the report.
#[derive(Debug)]
pub(super) struct Outcome<'a> {
    /// The checked container.
    pub(super) created: &'a Created<'a>,
    /// A node's sandbox (user mounts are the node's, not the workflow's).
    pub(super) node: bool,
    /// The mounts.
    pub(super) mounts: MountPlan,
    /// User, environment, tmpfs.
    pub(super) user: UserPlan,
    /// The egress placement.
    pub(super) placement: EgressPlacement,
    /// Hardening and limits.
    pub(super) hardening: Hardening,
    /// The limits asked for.
    pub(super) limits: &'a ResourceLimits,
    /// The limits the engine rejected.
    pub(super) limits_ignored: Vec<String>,
    /// The engine's name of the OCI runtime, `None` for its default.
    pub(super) oci_runtime: Option<String>,
}

/// The start report of 03 §8.10.
pub(super) fn start_report(o: Outcome<'_>) -> StartReport {
    let c = o.created;
    let mut report = StartReport::new(c.id.to_string(), c.workspace.to_string());
    report.name = c.name.to_string();
    report.image = ImageReport {
        reference: c.image.reference.clone(),
        digest: c.image.digest.clone(),
    };
    report.user = o.user.remap.user.clone();
    report.mounts = o
        .mounts
        .planned
        .iter()
        .map(|m| MountReport {
            source: m.source.clone().unwrap_or_default(),
            target: m.target.clone(),
            kind: match m.kind {
                MountKind::Bind => "bind",
                MountKind::Volume => "volume",
                MountKind::Tmpfs => "tmpfs",
            }
            .to_string(),
            read_only: m.read_only,
            origin: mount_origin(m.origin, o.node),
        })
        .collect();
    let mut tmpfs_list: Vec<String> = o.user.tmpfs.keys().cloned().collect();
    tmpfs_list.sort();
    report.tmpfs = tmpfs_list;
    report.host_state_skipped = o
        .mounts
        .skipped
        .into_iter()
        .map(|s| SkippedPath {
            path: s.path,
            reason: s.reason.to_string(),
        })
        .collect();
    report.protected_created = o
        .mounts
        .protected
        .created
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    report.home = if o.user.home_host {
        HomeSource::Host
    } else {
        HomeSource::Image
    };
    let remap = o.user.remap;
    report.user_remap = remap.remapped.map(|(uid, gid)| UserRemap { uid, gid });
    report.uid_mismatch = remap
        .uid_mismatch
        .map(|(spec_user, host_uid)| UidMismatch { spec_user, host_uid });
    report.placement = o.placement;
    report.enforced_egress = o.placement == EgressPlacement::Relay;
    let all_limits = o.limits_ignored.is_empty();
    let strict = o.hardening.strict;
    report.hardening = HardeningReport {
        profile: if strict { "strict".into() } else { "compat".into() },
        cap_add: o.hardening.cap_add,
        no_new_privileges: strict,
        pids_limit: if all_limits { o.limits.pids } else { None },
        memory_bytes: if all_limits { o.limits.memory_bytes } else { None },
        oci_runtime: o.oci_runtime,
    };
    report.limits_ignored = o.limits_ignored;
    report
}

fn mount_origin(origin: Origin, node: bool) -> MountOrigin {
    match origin {
        Origin::Workspace => MountOrigin::Workspace,
        Origin::Git => MountOrigin::Git,
        Origin::Aux => MountOrigin::Aux,
        Origin::HostState => MountOrigin::HostState,
        Origin::Cache => MountOrigin::Cache,
        Origin::Protected => MountOrigin::Protected,
        Origin::User if node => MountOrigin::Node,
        Origin::User => MountOrigin::Workflow,
    }
}
