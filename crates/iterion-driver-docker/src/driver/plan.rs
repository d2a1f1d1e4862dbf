//! Start, first step: what the container mounts and who it runs as (03 §8.2–§8.6, §10). Pure planning over
//! the request and the engine's facts, plus the checks of mount safety; the only host writes are the
//! protected paths `mounts::protect` creates.

use super::settings::DockerSettings;
use crate::engine::EngineFacts;
use crate::mounts::{self, MountKind, Origin, Planned, RemapEngine};
use iterion_driver::mount_safety::{HostFacts, HostOs, MountPolicy, RealFs};
use iterion_driver::{
    DriverKind, EgressPlacement, Error as DError, HostStatePlan, LogLevel, NetworkLease, ProxyListen,
    StartRequest,
};
use iterion_spec::resolved::ResolvedSandbox;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Container path of the relay binary.
pub const RELAY_BIN_TARGET: &str = "/run/iterion/relay/iterion-relay";
/// Container path of the relay binary for the leftover kill (`iterion-relay reap`): a bind directly under
/// `/`, so a process of the sandbox can neither rename it nor any directory above it (a path below a writable
/// directory of the image could be moved aside and replaced).
pub const REAPER_TARGET: &str = "/.iterion-reap";
/// Container path of the proxy socket.
pub const RELAY_SOCK_TARGET: &str = "/run/iterion/relay/proxy.sock";
/// Where the relay listens inside the sandbox.
pub const RELAY_LISTEN: &str = "127.0.0.1:3128";

/// A refused git pointer as the typed mount refusal the run reports.
pub(super) fn git_refused(r: &mounts::GitRefusal) -> DError {
    DError::UnsafeMount {
        mount: r.pointer.display().to_string(),
        reason: format!("the workspace git pointer {}; {}", r.reason, r.remedy),
    }
}

/// The mounts of the container, in the order the engine gets them.
#[derive(Debug)]
pub(super) struct MountPlan {
    /// The canonical host path of the workspace.
    pub(super) ws_host: PathBuf,
    /// The workspace folder inside the container.
    pub(super) workspace: String,
    /// Every mount.
    pub(super) planned: Vec<Planned>,
    /// Host state paths left out, and why.
    pub(super) skipped: Vec<mounts::Skipped>,
    /// The protected paths (and which of them iterion created).
    pub(super) protected: mounts::Protected,
}

/// Plans the mounts of 03 §8.2: the workspace (and a linked worktree's git directory), the relay, the runtime's
/// auxiliary mounts, host state and warm caches, the protected paths, then the spec's own mounts. Refuses an
/// unsafe source or target, a reserved target and a duplicate target.
pub(super) fn plan_mounts(
    settings: &DockerSettings,
    facts: &EngineFacts,
    kind: DriverKind,
    sandbox: &ResolvedSandbox,
    lease: Option<&NetworkLease>,
    req: &StartRequest,
) -> Result<MountPlan, DError> {
    let (ws_host, workspace, mut planned) = workspace_mounts(settings, facts, kind, sandbox, req)?;
    if lease.map_or(EgressPlacement::Open, |l| l.placement) == EgressPlacement::Relay {
        planned.extend(relay_mounts(settings, facts, lease)?);
    }
    for a in &req.aux_mounts {
        planned.push(Planned::bind(
            a.host_path.to_string_lossy(),
            a.container_path.clone(),
            a.read_only,
            Origin::Aux,
        ));
    }
    let skipped = host_state_mounts(&req.host_state, &ws_host, &mut planned);
    let protected = protected_mounts(&ws_host, &workspace, req.private_git, &mut planned)?;
    user_mounts(sandbox, &workspace, &mut planned)?;
    mounts::unique_targets(&planned).map_err(|reason| DError::InvalidSpec {
        field: "mounts".into(),
        reason,
    })?;
    Ok(MountPlan {
        ws_host,
        workspace,
        planned,
        skipped,
        protected,
    })
}

/// The workspace bind and, only once verified (never read from a pointer alone), the git common directory of a
/// linked worktree; checks mount safety for them and the spec's binds, and every user mount's target.
fn workspace_mounts(
    settings: &DockerSettings,
    facts: &EngineFacts,
    kind: DriverKind,
    sandbox: &ResolvedSandbox,
    req: &StartRequest,
) -> Result<(PathBuf, String, Vec<Planned>), DError> {
    let ws_host = std::fs::canonicalize(&req.workspace_host_path).map_err(|e| DError::InvalidSpec {
        field: "workspace".into(),
        reason: format!("{}: {e}", req.workspace_host_path.display()),
    })?;
    let ws_host_s = ws_host.to_string_lossy().into_owned();
    let workspace = if sandbox.workspace_folder.is_empty() {
        ws_host_s.clone()
    } else {
        sandbox.workspace_folder.clone()
    };
    let mut planned = vec![Planned::bind(
        ws_host_s,
        workspace.clone(),
        false,
        Origin::Workspace,
    )];
    let git = mounts::git_dirs(&ws_host).map_err(|r| git_refused(&r))?;
    let host_facts = HostFacts {
        os: if settings.host_linux {
            HostOs::Linux
        } else {
            HostOs::MacOs
        },
        home: settings.endpoints.home.clone(),
        xdg_runtime_dir: settings.endpoints.xdg_runtime_dir.clone(),
        engine_socket: Some(facts.endpoint.clone()),
    };
    let runtime_targets: Vec<String> = req.aux_mounts.iter().map(|a| a.container_path.clone()).collect();
    let policy = MountPolicy {
        host: &host_facts,
        fs: &RealFs,
        driver: kind,
        workspace_target: Some(&workspace),
        workspace_host: Some(&ws_host),
        runtime_targets: &runtime_targets,
    };
    policy.check_workspace(&ws_host)?;
    check_attachments_mounts(&policy, &req.aux_mounts)?;
    if let Some(g) = git
        .as_ref()
        .filter(|g| g.outside && !g.common_dir.starts_with(&ws_host))
    {
        let c = g.common_dir.to_string_lossy().into_owned();
        policy
            .check_bind_source(&c)
            .map_err(|reason| DError::UnsafeMount {
                mount: format!("type=bind,source={c},target={c}"),
                reason: format!("source {reason} (the git common directory of this linked worktree)"),
            })?;
        // the operator's repository: readable (git inside works), never writable from the sandbox
        planned.push(Planned::bind(c.clone(), c, true, Origin::Git));
    }
    for m in &sandbox.mounts {
        let text = mount_text(m);
        let refuse = |reason: String| DError::UnsafeMount {
            mount: text.clone(),
            reason,
        };
        if m.kind == iterion_spec::values::MountKind::Bind {
            let src = m.source.clone().unwrap_or_default();
            let canonical = policy
                .check_bind_source(&src)
                .map_err(|r| refuse(format!("source {r}")))?;
            let lexical =
                iterion_driver::mount_safety::clean(Path::new(&src)).unwrap_or_else(|| canonical.clone());
            let hs = &req.host_state;
            if let Some(r) =
                mounts::host_state_bind_refusal(&lexical, &canonical, &hs.data_dir, &hs.claude_dir)
            {
                return Err(refuse(format!("source {} {r}", lexical.display())));
            }
        }
        policy.check_target(&m.target).map_err(refuse)?;
    }
    Ok((ws_host, workspace, planned))
}

/// The run's attachments directory and the operator's git objects are binds of host paths like any other:
/// their sources go through mount safety, and they are only ever mounted read-only.
fn check_attachments_mounts(
    policy: &MountPolicy<'_>,
    aux: &[iterion_driver::AuxMount],
) -> Result<(), DError> {
    use iterion_driver::AuxMountKind::{Attachments, GitObjects};
    for a in aux.iter().filter(|a| matches!(a.kind, Attachments | GitObjects)) {
        let src = a.host_path.to_string_lossy();
        let refuse = |reason: String| DError::UnsafeMount {
            mount: format!("type=bind,source={src},target={}", a.container_path),
            reason,
        };
        if !a.read_only {
            return Err(refuse(format!(
                "{} are only mounted read-only",
                if a.kind == Attachments {
                    "attachments"
                } else {
                    "git objects"
                }
            )));
        }
        policy
            .check_bind_source(&src)
            .map_err(|r| refuse(format!("source {r}")))?;
    }
    Ok(())
}

/// The proxy socket and the relay binary (twice: the entrypoint and the reaper), read-only, for the relay placement; checks the binary
/// against the engine's architecture.
fn relay_mounts(
    settings: &DockerSettings,
    facts: &EngineFacts,
    lease: Option<&NetworkLease>,
) -> Result<[Planned; 3], DError> {
    let l = lease.ok_or_else(|| DError::StartFailed {
        reason: "relay placement without a lease".into(),
        hint: None,
    })?;
    let ProxyListen::Unix(sock) = &l.proxy_listen else {
        return Err(DError::StartFailed {
            reason: "relay placement needs a Unix proxy socket".into(),
            hint: None,
        });
    };
    let relay = l
        .relay_binary
        .clone()
        .or_else(|| settings.relay_binary.clone())
        .ok_or_else(|| DError::StartFailed {
            reason: "no egress relay binary is configured".into(),
            hint: Some("set ITERION_RELAY_BIN".into()),
        })?;
    crate::relay::check_relay_binary(&relay, &facts.arch)?;
    Ok([
        Planned::bind(sock.to_string_lossy(), RELAY_SOCK_TARGET, true, Origin::Aux),
        Planned::bind(relay.to_string_lossy(), RELAY_BIN_TARGET, true, Origin::Aux),
        Planned::bind(relay.to_string_lossy(), REAPER_TARGET, true, Origin::Aux),
    ])
}

/// The agent home (read-only, its writable state entries read-write over it, 03 §8.6) and the warm caches,
/// when host state is enabled; returns what was left out.
fn host_state_mounts(hs: &HostStatePlan, ws_host: &Path, planned: &mut Vec<Planned>) -> Vec<mounts::Skipped> {
    let mut skipped = Vec::new();
    if !hs.enabled {
        return skipped;
    }
    if !hs.data_dir.as_os_str().is_empty() {
        skipped.push(mounts::Skipped {
            path: hs.data_dir.display().to_string(),
            reason: mounts::DATA_DIR_NOT_SHARED,
        });
    }
    let mut candidates = Vec::new();
    if hs.claude_dir.is_absolute() {
        candidates.push(hs.claude_dir.clone());
    }
    let (kept, sk) = mounts::host_state_dirs(&candidates, ws_host);
    skipped.extend(sk);
    for k in kept {
        let s = k.to_string_lossy().into_owned();
        planned.push(Planned::bind(s.clone(), s, true, Origin::HostState));
        let home = mounts::agent_home(&k);
        skipped.extend(home.skipped);
        for w in home.writable {
            let s = w.to_string_lossy().into_owned();
            planned.push(Planned::bind(s.clone(), s, false, Origin::HostState));
        }
    }
    if let Some(home) = &hs.home {
        for c in mounts::warm_caches(home, ws_host) {
            let s = c.to_string_lossy().into_owned();
            planned.push(Planned::bind(s.clone(), s, false, Origin::Cache));
        }
    }
    skipped
}

/// The protected paths, read-only, unless a mount already has the target. The pinned ones (the workspace
/// `.git`, a linked worktree's git dir) are read-only too when they are the operator's repository; only a
/// private repository the runtime made for the run (`private_git`) stays writable under its overlays.
fn protected_mounts(
    ws_host: &Path,
    workspace: &str,
    private_git: bool,
    planned: &mut Vec<Planned>,
) -> Result<mounts::Protected, DError> {
    let protected = mounts::protect(ws_host)?;
    let pinned = protected.pinned.iter().map(|p| (p, !private_git));
    for (p, read_only) in pinned.chain(protected.paths.iter().map(|p| (p, true))) {
        let s = p.to_string_lossy().into_owned();
        // a path inside the workspace is seen at the workspace folder (which need not be the host path);
        // anything else (a worktree's common git dir, ~/.claude) is mounted at its host path
        let target = match p.strip_prefix(ws_host) {
            Ok(rel) => Path::new(workspace).join(rel).to_string_lossy().into_owned(),
            Err(_) => s.clone(),
        };
        if !planned.iter().any(|m| m.target == target) {
            planned.push(Planned::bind(s, target, read_only, Origin::Protected));
        }
    }
    Ok(protected)
}

/// The spec's own mounts; a reserved target or the workspace folder is refused.
fn user_mounts(sandbox: &ResolvedSandbox, workspace: &str, planned: &mut Vec<Planned>) -> Result<(), DError> {
    for m in &sandbox.mounts {
        if mounts::reserved_target(&m.target) || m.target == workspace {
            return Err(DError::UnsafeMount {
                mount: format!("target={}", m.target),
                reason: format!("target {} is reserved", m.target),
            });
        }
        let kind = match m.kind {
            iterion_spec::values::MountKind::Bind => MountKind::Bind,
            iterion_spec::values::MountKind::Volume => MountKind::Volume,
            iterion_spec::values::MountKind::Tmpfs => MountKind::Tmpfs,
        };
        planned.push(Planned {
            kind,
            source: m.source.clone(),
            target: m.target.clone(),
            read_only: m.read_only,
            origin: Origin::User,
            tmpfs_size: m.tmpfs_size,
            tmpfs_mode: m.tmpfs_mode,
        });
    }
    Ok(())
}

/// The mount as text, for messages (`type=…,source=…,target=…[,readonly]`).
fn mount_text(m: &iterion_spec::values::Mount) -> String {
    let mut t = format!("type={}", m.kind.as_str());
    if let Some(s) = &m.source {
        t.push_str(&format!(",source={s}"));
    }
    t.push_str(&format!(",target={}", m.target));
    if m.read_only {
        t.push_str(",readonly");
    }
    t
}

/// Who the container runs as, its environment and its tmpfs mounts.
#[derive(Debug)]
pub(super) struct UserPlan {
    /// The user remap of 03 §8.3.
    pub(super) remap: mounts::Remap,
    /// `HOME` is the host's.
    pub(super) home_host: bool,
    /// The container environment, `HOME` added when it comes from the host.
    pub(super) env: Vec<(String, String)>,
    /// tmpfs target → options: the exec directory, hidden stores, HOME layers.
    pub(super) tmpfs: HashMap<String, String>,
}

/// Plans the user remap and HOME (03 §8.3, §8.5), logging what the remap reports, and the tmpfs mounts: the
/// exec directory, an empty read-only tmpfs over a run store or data dir inside the workspace (run records and
/// the run-record key stay unreachable), and the HOME layers of a remapped user.
pub(super) fn plan_user(
    sandbox: &ResolvedSandbox,
    facts: &EngineFacts,
    req: &StartRequest,
    mounts_plan: &MountPlan,
) -> UserPlan {
    let hs = &req.host_state;
    let remap = if hs.enabled {
        mounts::remap(
            hs.host_os.is_empty() || hs.host_os == "linux",
            hs.host_uid,
            hs.host_gid,
            sandbox.user.as_deref(),
            RemapEngine {
                podman: facts.podman,
                rootless: facts.rootless,
            },
        )
    } else {
        mounts::Remap {
            user: sandbox.user.clone(),
            ..mounts::Remap::default()
        }
    };
    if let Some(l) = &remap.log {
        req.events.log(LogLevel::Warn, l.clone());
    }
    let mut env: Vec<(String, String)> = req.container_env.clone();
    let home_host = remap.home_from_host && hs.home.is_some();
    if home_host
        && let Some(h) = &hs.home
        && !env.iter().any(|(k, _)| k == "HOME")
    {
        env.push(("HOME".into(), h.to_string_lossy().into_owned()));
        env.sort();
    }
    let mut tmpfs: HashMap<String, String> = HashMap::new();
    tmpfs.insert(
        "/run/iterion/exec".into(),
        "rw,nosuid,nodev,noexec,mode=1777,size=64m".into(),
    );
    let (ws_host, workspace) = (&mounts_plan.ws_host, &mounts_plan.workspace);
    for t in mounts::hidden_store_targets(ws_host, workspace, &[&hs.data_dir, &req.owner.store_dir]) {
        tmpfs.insert(t, mounts::HIDDEN_STORE_TMPFS.into());
    }
    if let (Some((uid, gid)), Some(h)) = (remap.remapped, hs.home.as_ref()) {
        let hstr = h.to_string_lossy().into_owned();
        if hstr.starts_with('/') && hstr != "/" {
            let targets: Vec<String> = mounts_plan
                .planned
                .iter()
                .filter(|m| m.kind != MountKind::Tmpfs)
                .map(|m| m.target.clone())
                .collect();
            for t in &mounts::home_tmpfs_layers(&hstr, &targets) {
                if !targets.contains(t) {
                    tmpfs.insert(t.clone(), mounts::home_tmpfs_options(uid, gid));
                }
            }
        }
    }
    if facts.podman {
        podman_no_copy_up(&mut tmpfs);
    }
    UserPlan {
        remap,
        home_host,
        env,
        tmpfs,
    }
}

/// Podman copies what a tmpfs covers into it (`tmpcopyup`, its default): the tmpfs hiding a store inside the
/// workspace would then hold the run records it is there to hide (or fail the start when they exceed its size).
/// Docker knows no such option and rejects it, so it is added for Podman only.
fn podman_no_copy_up(tmpfs: &mut HashMap<String, String>) {
    for options in tmpfs.values_mut() {
        options.push_str(",notmpcopyup");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachments_mounts_pass_mount_safety_and_are_read_only() {
        let host = HostFacts {
            os: HostOs::Linux,
            home: None,
            xdg_runtime_dir: None,
            engine_socket: None,
        };
        let policy = MountPolicy {
            host: &host,
            fs: &RealFs,
            driver: DriverKind::Docker,
            workspace_target: None,
            workspace_host: None,
            runtime_targets: &[],
        };
        let dir = tempfile::tempdir().unwrap();
        let aux = |p: &Path, read_only: bool| iterion_driver::AuxMount {
            kind: iterion_driver::AuxMountKind::Attachments,
            host_path: p.to_path_buf(),
            container_path: "/run/iterion/attachments".into(),
            read_only,
        };
        assert!(check_attachments_mounts(&policy, &[aux(dir.path(), true)]).is_ok());
        let reason = |r: Result<(), DError>| match r {
            Err(DError::UnsafeMount { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            reason(check_attachments_mounts(&policy, &[aux(dir.path(), false)])),
            "attachments are only mounted read-only"
        );
        assert!(
            reason(check_attachments_mounts(
                &policy,
                &[aux(Path::new("/etc/ssh"), true)]
            ))
            .starts_with("source /etc/ssh is a sensitive path"),
        );
        assert!(
            reason(check_attachments_mounts(
                &policy,
                &[aux(&dir.path().join("gone"), true)]
            ))
            .ends_with("does not exist"),
        );
        // other runtime mounts are not this check's business
        let mut other = aux(Path::new("/etc/ssh"), false);
        other.kind = iterion_driver::AuxMountKind::RunFiles;
        assert!(check_attachments_mounts(&policy, &[other]).is_ok());
    }

    #[test]
    fn podman_tmpfs_never_copies_up_what_it_hides() {
        let mut tmpfs = HashMap::from([
            ("/w/.iterion".to_string(), mounts::HIDDEN_STORE_TMPFS.to_string()),
            ("/run/iterion/exec".to_string(), "rw,mode=1777".to_string()),
        ]);
        podman_no_copy_up(&mut tmpfs);
        assert!(tmpfs.values().all(|o| o.ends_with(",notmpcopyup")), "{tmpfs:?}");
        assert_eq!(
            tmpfs["/w/.iterion"],
            format!("{},notmpcopyup", mounts::HIDDEN_STORE_TMPFS)
        );
    }
}
