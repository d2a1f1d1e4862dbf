//! Mount assembly (03 §8.2–§8.6): host-state binds, warm caches, protected read-only overlays, the UID remap
//! decision and the writable-`HOME` tmpfs layering. Pure planning over paths passed in, plus the creation of
//! missing protected paths (as the iterion user, before the container exists).

pub use crate::error::GitRefusal;
use std::path::{Path, PathBuf};

/// Kind of a planned mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountKind {
    /// Host bind.
    Bind,
    /// Engine volume (named when `source` is set).
    Volume,
    /// tmpfs (options in `tmpfs_options`).
    Tmpfs,
}

/// Where a planned mount comes from (reported as `MountReport.origin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The workspace bind.
    Workspace,
    /// The common git directory of a linked worktree.
    Git,
    /// A runtime-added mount (relay, run files, binaries).
    Aux,
    /// Host state directories.
    HostState,
    /// Warm package caches.
    Cache,
    /// Protected read-only overlays.
    Protected,
    /// Devcontainer / workflow / node mounts.
    User,
}

/// One mount of the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// Kind.
    pub kind: MountKind,
    /// Host path or volume name.
    pub source: Option<String>,
    /// Container path.
    pub target: String,
    /// Read-only.
    pub read_only: bool,
    /// Origin.
    pub origin: Origin,
    /// tmpfs size (user tmpfs mounts).
    pub tmpfs_size: Option<u64>,
    /// tmpfs mode (user tmpfs mounts).
    pub tmpfs_mode: Option<u32>,
}

impl Planned {
    /// A bind mount.
    pub fn bind(
        source: impl Into<String>,
        target: impl Into<String>,
        read_only: bool,
        origin: Origin,
    ) -> Self {
        Self {
            kind: MountKind::Bind,
            source: Some(source.into()),
            target: target.into(),
            read_only,
            origin,
            tmpfs_size: None,
            tmpfs_mode: None,
        }
    }
}

/// A path skipped with a reason (`missing`, `not a directory`, `overlaps the workspace`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Host path.
    pub path: String,
    /// Why.
    pub reason: &'static str,
}

fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Host-state candidates (`<home>/.claude`) kept or skipped against the workspace (03 §8.3). iterion's data
/// dir is never a candidate: it holds every project's run records, the run-record key and the binaries iterion
/// executes, and nothing inside a sandbox needs it (claw nodes talk envelopes, artifact files have their own
/// mount); the caller reports it as skipped with [`DATA_DIR_NOT_SHARED`].
pub fn host_state_dirs(candidates: &[PathBuf], workspace: &Path) -> (Vec<PathBuf>, Vec<Skipped>) {
    let mut kept = Vec::new();
    let mut skipped = Vec::new();
    for c in candidates {
        let reason = match std::fs::metadata(c) {
            Err(_) => Some("missing"),
            Ok(m) if !m.is_dir() => Some("not a directory"),
            Ok(_) if overlaps(c, workspace) => Some("overlaps the workspace"),
            Ok(_) => None,
        };
        match reason {
            Some(r) => skipped.push(Skipped {
                path: c.display().to_string(),
                reason: r,
            }),
            None => {
                if !kept.contains(c) {
                    kept.push(c.clone());
                }
            }
        }
    }
    (kept, skipped)
}

/// Skip reason of the data dir in `host_state_skipped`.
pub const DATA_DIR_NOT_SHARED: &str = "never shared: the run store is written by the host only";

/// Entries of the agent home that stay writable inside the sandbox: Claude Code's credentials (so a token
/// refresh works) and state it only reads back as data (sessions and per-project memory, todos, feature-flag
/// cache). Everything else under the agent home, existing or not, is read-only, because the agent CLI on the
/// host executes or obeys it: `settings.json` and `settings.local.json` (hooks, `statusLine`, `apiKeyHelper`,
/// `env`), `CLAUDE.md`, `commands/`, `agents/`, `skills/`, `plugins/`, `hooks/`, `output-styles/`,
/// `shell-snapshots/` and `session-env/` (sourced before shell commands), `file-history/` (restored into
/// workspaces), `ide/` (connection targets), and whatever a later Claude Code version adds.
pub const AGENT_HOME_WRITABLE: &[&str] = &[".credentials.json", "projects", "todos", "statsig"];

/// How the agent home `D` is mounted: `D` itself read-only, then the writable entries that exist on the host
/// bound read-write over it. Nothing is created on the host: a path that does not exist yet cannot be created
/// inside either (the read-only `D` refuses it), so nothing planted there reaches the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentHome {
    /// Host paths to bind read-write at the same path (existing regular files or directories, no symlinks).
    pub writable: Vec<PathBuf>,
    /// Writable entries left read-only, with why (`is a symbolic link`, `not a file or directory`).
    pub skipped: Vec<Skipped>,
}

/// The writable entries of the agent home `d` ([`AGENT_HOME_WRITABLE`]) that exist on the host. A symbolic
/// link is never bound (the engine would follow it to wherever it points).
pub fn agent_home(d: &Path) -> AgentHome {
    let mut out = AgentHome::default();
    for name in AGENT_HOME_WRITABLE {
        let p = d.join(name);
        let Ok(md) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let ft = md.file_type();
        if ft.is_symlink() {
            out.skipped.push(Skipped {
                path: p.display().to_string(),
                reason: "is a symbolic link",
            });
        } else if ft.is_dir() || ft.is_file() {
            out.writable.push(p);
        } else {
            out.skipped.push(Skipped {
                path: p.display().to_string(),
                reason: "not a file or directory",
            });
        }
    }
    out
}

/// Why a user bind of `source` (lexical `l`, canonical `c`) is refused because it overlaps iterion's data dir
/// or the agent home (in either direction): the run store must never be writable from a sandbox, and the agent
/// home is shared only through host state, with what the agent executes kept read-only. `None` when it does
/// not overlap. Relative or empty state paths are ignored.
pub fn host_state_bind_refusal(l: &Path, c: &Path, data_dir: &Path, agent_home: &Path) -> Option<String> {
    let named = [
        (
            data_dir,
            "iterion's data directory (run store, keys and binaries)",
        ),
        (agent_home, "the agent home"),
    ];
    for (dir, what) in named {
        if !dir.is_absolute() {
            continue;
        }
        let canon = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        for p in [l, c] {
            for d in [dir, canon.as_path()] {
                if p.starts_with(d) {
                    return Some(format!("is inside {what} {}", dir.display()));
                }
                if d.starts_with(p) {
                    return Some(format!("contains {what} {}", dir.display()));
                }
            }
        }
    }
    None
}

/// tmpfs options hiding a run store inside the workspace: empty, read-only, nothing executable.
pub const HIDDEN_STORE_TMPFS: &str = "ro,nosuid,nodev,noexec,size=4k,mode=0500";

/// Container targets (under the workspace folder `workspace`) of the state directories `dirs` (the data dir,
/// the run's store dir) that lie strictly inside the host workspace `ws_host` and exist: they are reachable
/// through the workspace bind, so the caller hides each behind an empty read-only tmpfs. Paths are compared
/// canonically; parents first, nested ones dropped.
pub fn hidden_store_targets(ws_host: &Path, workspace: &str, dirs: &[&Path]) -> Vec<String> {
    let mut rels: Vec<PathBuf> = Vec::new();
    for d in dirs {
        if !d.is_absolute() {
            continue;
        }
        let Ok(c) = std::fs::canonicalize(d) else { continue };
        let Ok(rel) = c.strip_prefix(ws_host) else {
            continue;
        };
        if rel.as_os_str().is_empty() || !c.is_dir() {
            continue;
        }
        rels.push(rel.to_path_buf());
    }
    rels.sort();
    let mut out: Vec<PathBuf> = Vec::new();
    for r in rels {
        if !out.iter().any(|o| r.starts_with(o)) {
            out.push(r);
        }
    }
    out.iter()
        .map(|r| Path::new(workspace).join(r).to_string_lossy().into_owned())
        .collect()
}

/// Warm caches of 03 §8.4 under `home` that exist as directories and do not overlap the workspace.
pub fn warm_caches(home: &Path, workspace: &Path) -> Vec<PathBuf> {
    [
        ".cache/go-build",
        "go/pkg/mod",
        ".npm",
        ".local/share/pnpm",
        ".cache/yarn",
    ]
    .iter()
    .map(|rel| home.join(rel))
    .filter(|p| p.is_dir() && !overlaps(p, workspace))
    .collect()
}

/// Protected read-only overlays (03 §8.6) and the paths created for them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Protected {
    /// Host paths to bind read-only at the same path.
    pub paths: Vec<PathBuf>,
    /// Paths created by iterion (reported as `protected_created`).
    pub created: Vec<PathBuf>,
    /// Host paths bound read-write at their own path so that they are mount points inside the container: a
    /// sandboxed process can write in them but cannot rename, remove or replace them (the workspace `.git`
    /// directory, a linked worktree's git directory).
    pub pinned: Vec<PathBuf>,
}

fn io_err(what: &'static str, p: &Path) -> impl FnOnce(std::io::Error) -> crate::Error {
    let path = p.display().to_string();
    move |source| crate::Error::Io { what, path, source }
}

fn ensure_dir(p: &Path, mode: u32, out: &mut Protected) -> crate::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if !p.exists() {
        std::fs::DirBuilder::new()
            .mode(mode)
            .create(p)
            .map_err(io_err("create directory", p))?;
        out.created.push(p.to_path_buf());
    }
    out.paths.push(p.to_path_buf());
    Ok(())
}

pub use iterion_boundary::git::GitDirs;

/// The workspace git directories (03 §8.6), verified: `Ok(None)` when the workspace is not a repository.
///
/// Nothing read from the repository is trusted on its own (the one verification, shared with the runtime's
/// repository discovery, is [`iterion_boundary::git::verify_git_dirs`]): a `.git` directory must not hold a
/// `commondir`, and a `.git` file or `commondir` that leads outside the workspace is followed only when the
/// target is a genuine repository whose own metadata points back at this workspace. Everything else is a
/// [`GitRefusal`].
pub fn git_dirs(workspace: &Path) -> Result<Option<GitDirs>, GitRefusal> {
    iterion_boundary::git::verify_git_dirs(workspace)
}

/// One protected git path, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitOverlay {
    /// The canonical host path to bind read-only (the symlink's target when the path is a symbolic link).
    pub path: PathBuf,
    /// The path does not exist yet and iterion creates it (only `C/hooks/`, only inside the workspace).
    pub create: bool,
    /// Bound read-write instead of read-only, only to make it a mount point (see [`Protected::pinned`]).
    pub pin: bool,
}

/// Resolves a protected path without trusting symbolic links: a path that resolves inside `roots` is protected
/// at its resolved location; one that leads elsewhere is refused. `Ok(None)` when absent.
fn resolve_protected(p: &Path, roots: &[&Path]) -> Result<Option<PathBuf>, GitRefusal> {
    if std::fs::symlink_metadata(p).is_err() {
        return Ok(None);
    }
    let refuse = |reason: String| GitRefusal {
        pointer: p.to_path_buf(),
        reason,
        remedy: format!(
            "replace {} with a real file or directory (git runs hooks and reads config from it on the host)",
            p.display()
        ),
    };
    let Ok(r) = std::fs::canonicalize(p) else {
        return Err(refuse("is a symbolic link that does not resolve".into()));
    };
    if !roots.iter().any(|root| r.starts_with(root)) {
        return Err(refuse(format!(
            "resolves to {}, outside the workspace and its git directory",
            r.display()
        )));
    }
    Ok(Some(r))
}

/// The git paths to lay read-only (03 §8.6) for verified directories `dirs` of `workspace`: `C/hooks/`,
/// `C/config`, `G/config.worktree` and the submodules' `hooks/` and `config` under `C/modules/`. Nothing is
/// created here; `create` marks the one path [`protect`] creates.
pub fn git_overlays(workspace: &Path, dirs: &GitDirs) -> Result<Vec<GitOverlay>, GitRefusal> {
    let ws = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let (g, c) = (&dirs.git_dir, &dirs.common_dir);
    let mut roots: Vec<&Path> = vec![&ws];
    if dirs.outside {
        roots.push(c);
    }
    let mut out = Vec::new();
    let hooks = c.join("hooks");
    match resolve_protected(&hooks, &roots)? {
        Some(path) => out.push(GitOverlay {
            path,
            create: false,
            pin: false,
        }),
        None if c.starts_with(&ws) => out.push(GitOverlay {
            path: hooks,
            create: true,
            pin: false,
        }),
        None => {
            return Err(GitRefusal {
                reason: "is missing, and iterion creates nothing outside the workspace".into(),
                remedy: format!("create it (mkdir {})", hooks.display()),
                pointer: hooks,
            });
        }
    }
    let push = |p: PathBuf, out: &mut Vec<GitOverlay>| -> Result<(), GitRefusal> {
        if let Some(path) = resolve_protected(&p, &roots)?
            && !out.iter().any(|o| o.path == path)
        {
            out.push(GitOverlay {
                path,
                create: false,
                pin: false,
            });
        }
        Ok(())
    };
    push(c.join("config"), &mut out)?;
    // The pointers themselves: `.git` (a directory is pinned, a file is read-only) cannot be renamed or
    // replaced by a sandboxed process, nor can a linked worktree's git directory and its back-pointers, so
    // host-side git later finds the repository (and the hooks) that were protected.
    let dot = ws.join(".git");
    out.push(GitOverlay {
        pin: dot.is_dir(),
        path: dot,
        create: false,
    });
    if g != c {
        push(g.join("config.worktree"), &mut out)?;
        if dirs.outside {
            out.push(GitOverlay {
                path: g.clone(),
                create: false,
                pin: true,
            });
            push(g.join("commondir"), &mut out)?;
            push(g.join("gitdir"), &mut out)?;
        }
    }
    // Submodule git directories: walked without following symbolic links, at most 64.
    let mut modules = Vec::new();
    let mut stack = vec![c.join("modules")];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let p = e.path();
            if ft.is_symlink() {
                // a symlinked module directory is protected where it resolves, or refused
                if let Some(r) = resolve_protected(&p, &roots)?
                    && r.is_dir()
                    && r.join("HEAD").is_file()
                    && modules.len() < 64
                {
                    modules.push(r);
                }
                continue;
            }
            if !ft.is_dir() || modules.len() >= 64 {
                continue;
            }
            if p.join("HEAD").is_file() {
                modules.push(p.clone());
                stack.push(p.join("modules"));
            } else {
                stack.push(p);
            }
        }
    }
    modules.sort();
    modules.dedup();
    for m in modules.into_iter().take(64) {
        push(m.join("hooks"), &mut out)?;
        push(m.join("config"), &mut out)?;
    }
    Ok(out)
}

/// Protected paths of the workspace repository; missing required paths are created first (hooks
/// directories). The agent home is protected by its own layout ([`agent_home`]), which creates nothing.
pub fn protect(workspace: &Path) -> crate::Result<Protected> {
    let mut out = Protected::default();
    if let Some(dirs) = git_dirs(workspace).map_err(crate::Error::from)? {
        for o in git_overlays(workspace, &dirs).map_err(crate::Error::from)? {
            if o.create {
                ensure_dir(&o.path, 0o755, &mut out)?;
            } else if o.pin {
                out.pinned.push(o.path);
            } else {
                out.paths.push(o.path);
            }
        }
    }
    Ok(out)
}

/// The UID remap decision (03 §8.3 step 4–5).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Remap {
    /// The container `User`.
    pub user: Option<String>,
    /// `UsernsMode: keep-id` (rootless Podman).
    pub keep_id: bool,
    /// `report.user_remap`.
    pub remapped: Option<(u32, u32)>,
    /// `report.uid_mismatch`: (spec user, host uid).
    pub uid_mismatch: Option<(String, u32)>,
    /// `HOME` comes from the host.
    pub home_from_host: bool,
    /// A line to log (rootless Docker, non-numeric spec user).
    pub log: Option<String>,
}

/// Engine facts the remap depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemapEngine {
    /// Podman.
    pub podman: bool,
    /// Rootless.
    pub rootless: bool,
}

/// Decides the remap of 03 §8.3 for a host (`linux` or not), its uid/gid, the spec user and the engine.
pub fn remap(
    host_linux: bool,
    uid: Option<u32>,
    gid: Option<u32>,
    spec_user: Option<&str>,
    engine: RemapEngine,
) -> Remap {
    let mut r = Remap {
        user: spec_user.map(str::to_string),
        ..Remap::default()
    };
    if !host_linux {
        r.home_from_host = true;
        return r;
    }
    let (Some(uid), Some(gid)) = (uid, gid) else {
        return r;
    };
    if uid == 0 {
        return r;
    }
    match spec_user {
        None => {
            if engine.rootless && !engine.podman {
                r.log = Some(
                    "rootless Docker maps the container's root to your user; the container user is not remapped".into(),
                );
            } else {
                r.user = Some(format!("{uid}:{gid}"));
                r.keep_id = engine.rootless && engine.podman;
                r.remapped = Some((uid, gid));
                r.home_from_host = true;
            }
        }
        Some(u) => {
            let first = u.split(':').next().unwrap_or(u);
            match first.parse::<u32>() {
                Ok(n) if n == uid => r.home_from_host = true,
                Ok(_) => r.uid_mismatch = Some((u.to_string(), uid)),
                Err(_) => {
                    r.log = Some(format!(
                        "the spec pins user '{u}'; files it writes to host state are owned according to the image"
                    ))
                }
            }
        }
    }
    r
}

/// The tmpfs layering of 03 §8.5: a tmpfs at `home`, then one at every ancestor strictly between `home` and
/// each mount target strictly inside it, unless that ancestor is itself a mount target. Parents first.
pub fn home_tmpfs_layers(home: &str, targets: &[String]) -> Vec<String> {
    let h = home.trim_end_matches('/');
    if h.is_empty() || !h.starts_with('/') {
        return Vec::new();
    }
    let mut out = vec![h.to_string()];
    for t in targets {
        let Some(rest) = t.strip_prefix(h).and_then(|r| r.strip_prefix('/')) else {
            continue;
        };
        let comps: Vec<&str> = rest.split('/').filter(|c| !c.is_empty()).collect();
        let mut a = h.to_string();
        for c in comps.iter().take(comps.len().saturating_sub(1)) {
            a.push('/');
            a.push_str(c);
            if !targets.iter().any(|x| x == &a) && !out.contains(&a) {
                out.push(a.clone());
            }
        }
    }
    out.sort();
    out
}

/// tmpfs options of a HOME layer.
pub fn home_tmpfs_options(uid: u32, gid: u32) -> String {
    format!("rw,nosuid,nodev,mode=0755,uid={uid},gid={gid}")
}

/// Reserved targets (03 §8.2): equal to or inside `/run/iterion`, `/iterion/artifact-files` or the reaper's
/// `/.iterion-reap`.
pub fn reserved_target(t: &str) -> bool {
    let p = Path::new(t);
    ["/run/iterion", "/iterion/artifact-files", "/.iterion-reap"]
        .iter()
        .any(|r| p.starts_with(r))
}

/// Checks that every target is unique; `Err` names both origins.
pub fn unique_targets(mounts: &[Planned]) -> Result<(), String> {
    for (i, a) in mounts.iter().enumerate() {
        if let Some(b) = mounts[..i].iter().find(|b| b.target == a.target) {
            return Err(format!(
                "target {} is used by two mounts ({:?} and {:?})",
                a.target, b.origin, a.origin
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(targets: &[&str], expect: &[&str]) {
        let t: Vec<String> = targets.iter().map(|s| s.to_string()).collect();
        assert_eq!(home_tmpfs_layers("/home/jo", &t), expect, "{targets:?}");
    }

    #[test]
    fn home_layering_16_6() {
        let base = ["/home/jo/.claude", "/home/jo/.iterion"];
        check(&base, &["/home/jo"]);
        let mut t = base.to_vec();
        t.push("/home/jo/.cache/go-build");
        check(&t, &["/home/jo", "/home/jo/.cache"]);
        t.push("/home/jo/go/pkg/mod");
        check(
            &t,
            &["/home/jo", "/home/jo/.cache", "/home/jo/go", "/home/jo/go/pkg"],
        );
        t.push("/home/jo/.local/share/pnpm");
        check(
            &t,
            &[
                "/home/jo",
                "/home/jo/.cache",
                "/home/jo/.local",
                "/home/jo/.local/share",
                "/home/jo/go",
                "/home/jo/go/pkg",
            ],
        );
        let mut w = base.to_vec();
        w.push("/home/jo/src/app");
        check(&w, &["/home/jo", "/home/jo/src"]);
        w.push("/home/jo/src");
        check(&w, &["/home/jo"]);
    }

    fn check_remap(
        uid: u32,
        spec: Option<&str>,
        engine: RemapEngine,
        user: Option<&str>,
        remapped: bool,
        home: bool,
    ) {
        let r = remap(true, Some(uid), Some(uid), spec, engine);
        assert_eq!(
            (r.user.as_deref(), r.remapped.is_some(), r.home_from_host),
            (user, remapped, home),
            "{uid} {spec:?} {engine:?}"
        );
    }

    #[test]
    fn remap_8_3() {
        let rootful = RemapEngine::default();
        check_remap(1000, None, rootful, Some("1000:1000"), true, true);
        check_remap(0, None, rootful, None, false, false);
        check_remap(1000, Some("node"), rootful, Some("node"), false, false);
        check_remap(1000, Some("1000:1000"), rootful, Some("1000:1000"), false, true);
        check_remap(1000, Some("2000"), rootful, Some("2000"), false, false);
        check_remap(
            1000,
            None,
            RemapEngine {
                podman: false,
                rootless: true,
            },
            None,
            false,
            false,
        );
        let podman = remap(
            true,
            Some(1000),
            Some(1000),
            None,
            RemapEngine {
                podman: true,
                rootless: true,
            },
        );
        assert!(podman.keep_id && podman.remapped == Some((1000, 1000)));
        assert_eq!(
            remap(true, Some(1000), Some(1000), Some("2000"), rootful).uid_mismatch,
            Some(("2000".into(), 1000))
        );
        let mac = remap(false, Some(501), Some(20), None, rootful);
        assert!(mac.user.is_none() && mac.home_from_host);
    }

    #[test]
    fn host_state_candidates_are_skipped_with_reasons() {
        let d = tempfile::tempdir().expect("tempdir");
        let root = d.path();
        let ws = root.join("ws");
        std::fs::create_dir_all(ws.join("inner")).expect("mkdir");
        std::fs::create_dir_all(root.join("data")).expect("mkdir");
        std::fs::write(root.join("file"), "x").expect("write");
        let (kept, skipped) = host_state_dirs(
            &[
                root.join("data"),
                root.join("missing"),
                root.join("file"),
                ws.join("inner"),
                root.to_path_buf(),
            ],
            &ws,
        );
        assert_eq!(kept, [root.join("data")]);
        let reasons: Vec<&str> = skipped.iter().map(|s| s.reason).collect();
        assert_eq!(
            reasons,
            [
                "missing",
                "not a directory",
                "overlaps the workspace",
                "overlaps the workspace"
            ]
        );
    }

    #[test]
    fn protected_paths_are_created_before_start() {
        let d = tempfile::tempdir().expect("tempdir");
        let ws = d.path().join("ws");
        std::fs::create_dir_all(ws.join(".git")).expect("mkdir");
        std::fs::write(ws.join(".git/config"), "[core]\n").expect("write");
        let p = protect(&ws).expect("protect");
        assert!(p.paths.contains(&ws.join(".git/hooks")));
        assert!(p.paths.contains(&ws.join(".git/config")));
        assert_eq!(p.created, [ws.join(".git/hooks")]);
        let again = protect(&ws).expect("protect again");
        assert!(again.created.is_empty());
    }

    /// A main repository `root/main/.git` with a linked worktree `root/wt` (the layout `git worktree add` writes).
    fn linked(root: &Path) -> (PathBuf, PathBuf) {
        let c = root.join("main/.git");
        let g = c.join("worktrees/wt");
        std::fs::create_dir_all(c.join("objects")).expect("mkdir");
        std::fs::create_dir_all(c.join("hooks")).expect("mkdir");
        std::fs::create_dir_all(&g).expect("mkdir");
        std::fs::write(c.join("HEAD"), "ref: refs/heads/main\n").expect("write");
        std::fs::write(c.join("config"), "[core]\n").expect("write");
        let ws = root.join("wt");
        std::fs::create_dir_all(&ws).expect("mkdir");
        std::fs::write(ws.join(".git"), format!("gitdir: {}\n", g.display())).expect("write");
        std::fs::write(g.join("commondir"), "../..\n").expect("write");
        std::fs::write(g.join("gitdir"), format!("{}\n", ws.join(".git").display())).expect("write");
        std::fs::write(g.join("HEAD"), "0123\n").expect("write");
        (ws, c)
    }

    fn canon(p: &Path) -> PathBuf {
        std::fs::canonicalize(p).expect("canonicalize")
    }

    #[test]
    fn a_plain_repository_is_its_own_common_dir() {
        let d = tempfile::tempdir().expect("tempdir");
        let ws = canon(d.path());
        std::fs::create_dir_all(ws.join(".git")).expect("mkdir");
        let g = git_dirs(&ws).expect("verified").expect("a repository");
        assert_eq!(
            (g.git_dir.clone(), g.common_dir, g.outside),
            (ws.join(".git"), ws.join(".git"), false)
        );
        assert_eq!(git_dirs(&ws.join("missing")), Ok(None));
    }

    #[test]
    fn a_commondir_in_a_git_directory_is_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        let ws = canon(d.path()).join("ws");
        std::fs::create_dir_all(ws.join(".git")).expect("mkdir");
        std::fs::create_dir_all(d.path().join("elsewhere")).expect("mkdir");
        std::fs::write(
            ws.join(".git/commondir"),
            d.path().join("elsewhere").display().to_string(),
        )
        .expect("write");
        let r = git_dirs(&ws).expect_err("refused");
        assert_eq!(r.pointer, ws.join(".git/commondir"));
        assert!(r.remedy.contains("remove"), "{r:?}");
    }

    #[test]
    fn a_git_file_naming_a_host_directory_is_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        let root = canon(d.path());
        let ws = root.join("ws");
        std::fs::create_dir_all(&ws).expect("mkdir");
        std::fs::create_dir_all(root.join("outside/fakegit")).expect("mkdir");
        for target in [
            root.join("outside/fakegit").display().to_string(),
            "../outside/fakegit".to_string(),
            "/proc".to_string(),
            root.join("absent").display().to_string(),
        ] {
            std::fs::write(ws.join(".git"), format!("gitdir: {target}\n")).expect("write");
            let r = git_dirs(&ws).expect_err(&target);
            assert_eq!(r.pointer, ws.join(".git"), "{target}");
        }
        std::fs::write(ws.join(".git"), "not a pointer\n").expect("write");
        assert!(
            git_dirs(&ws)
                .expect_err("no gitdir line")
                .reason
                .contains("gitdir")
        );
        // a `.git` FIFO is refused by its type, never opened (opening would block)
        std::fs::remove_file(ws.join(".git")).expect("rm");
        let fifo = std::process::Command::new("mkfifo")
            .arg(ws.join(".git"))
            .status()
            .expect("mkfifo");
        assert!(fifo.success());
        assert!(git_dirs(&ws).expect_err("fifo").reason.contains("regular file"));
        std::fs::remove_file(ws.join(".git")).expect("rm");
        std::os::unix::fs::symlink(root.join("outside/fakegit"), ws.join(".git")).expect("symlink");
        assert!(
            git_dirs(&ws)
                .expect_err("symlink")
                .reason
                .contains("symbolic link")
        );
    }

    #[test]
    fn a_genuine_linked_worktree_is_verified() {
        let d = tempfile::tempdir().expect("tempdir");
        let (ws, c) = linked(&canon(d.path()));
        let g = git_dirs(&ws).expect("verified").expect("a repository");
        assert_eq!((g.common_dir.clone(), g.outside), (c.clone(), true));
        assert_eq!(g.git_dir, c.join("worktrees/wt"));
        let o = git_overlays(&ws, &g).expect("overlays");
        let paths: Vec<(&Path, bool)> = o.iter().map(|o| (o.path.as_path(), o.pin)).collect();
        let wt = c.join("worktrees/wt");
        assert_eq!(
            paths,
            [
                (c.join("hooks").as_path(), false),
                (c.join("config").as_path(), false),
                (ws.join(".git").as_path(), false),
                (wt.as_path(), true),
                (wt.join("commondir").as_path(), false),
                (wt.join("gitdir").as_path(), false),
            ]
        );
    }

    #[test]
    fn a_worktree_pointer_that_does_not_point_back_is_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        let root = canon(d.path());
        let (ws, c) = linked(&root);
        // another checkout pretends to be the worktree: its .git names the genuine worktree dir
        let other = root.join("other");
        std::fs::create_dir_all(&other).expect("mkdir");
        std::fs::write(
            other.join(".git"),
            format!("gitdir: {}\n", c.join("worktrees/wt").display()),
        )
        .expect("write");
        assert!(
            git_dirs(&other)
                .expect_err("no backlink")
                .reason
                .contains("gitdir file names")
        );
        // a forged worktree dir outside the repository's worktrees/ whose commondir names the repository
        let fake = root.join("outside/fake");
        std::fs::create_dir_all(&fake).expect("mkdir");
        std::fs::write(fake.join("commondir"), c.display().to_string()).expect("write");
        std::fs::write(fake.join("gitdir"), ws.join(".git").display().to_string()).expect("write");
        std::fs::write(ws.join(".git"), format!("gitdir: {}\n", fake.display())).expect("write");
        assert!(
            git_dirs(&ws)
                .expect_err("forged")
                .reason
                .contains("worktrees/<name>")
        );
        // the genuine worktree dir whose commondir was rewritten to a host directory
        std::fs::write(
            ws.join(".git"),
            format!("gitdir: {}\n", c.join("worktrees/wt").display()),
        )
        .expect("write");
        std::fs::write(
            c.join("worktrees/wt/commondir"),
            root.join("outside").display().to_string(),
        )
        .expect("write");
        assert!(git_dirs(&ws).is_err());
    }

    #[test]
    fn a_submodule_checkout_is_verified_by_its_core_worktree() {
        let d = tempfile::tempdir().expect("tempdir");
        let root = canon(d.path());
        let g = root.join("super/.git/modules/sub");
        std::fs::create_dir_all(g.join("objects")).expect("mkdir");
        std::fs::create_dir_all(g.join("hooks")).expect("mkdir");
        std::fs::write(g.join("HEAD"), "0123\n").expect("write");
        let ws = root.join("super/sub");
        std::fs::create_dir_all(&ws).expect("mkdir");
        std::fs::write(ws.join(".git"), "gitdir: ../.git/modules/sub\n").expect("write");
        std::fs::write(
            g.join("config"),
            "[core]\n\tbare = false\n\tworktree = ../../../other\n",
        )
        .expect("write");
        assert!(git_dirs(&ws).is_err());
        std::fs::write(g.join("config"), "[core]\n\tworktree = ../../../sub\n").expect("write");
        let dirs = git_dirs(&ws).expect("verified").expect("a repository");
        assert_eq!((dirs.common_dir, dirs.outside), (g, true));
    }

    #[test]
    fn protected_git_paths_never_follow_a_symlink_out() {
        let d = tempfile::tempdir().expect("tempdir");
        let root = canon(d.path());
        let ws = root.join("ws");
        let outside = root.join("outside");
        std::fs::create_dir_all(ws.join(".git")).expect("mkdir");
        std::fs::create_dir_all(ws.join("inner-hooks")).expect("mkdir");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::fs::write(outside.join("config"), "secret").expect("write");
        let dirs = git_dirs(&ws).expect("verified").expect("a repository");
        std::os::unix::fs::symlink(&outside, ws.join(".git/hooks")).expect("symlink");
        let r = git_overlays(&ws, &dirs).expect_err("hooks out");
        assert_eq!(r.pointer, ws.join(".git/hooks"));
        assert!(protect(&ws).is_err());
        std::fs::remove_file(ws.join(".git/hooks")).expect("rm");
        // a symlink inside the workspace is protected where it leads
        std::os::unix::fs::symlink("../inner-hooks", ws.join(".git/hooks")).expect("symlink");
        std::os::unix::fs::symlink(outside.join("config"), ws.join(".git/config")).expect("symlink");
        assert_eq!(
            git_overlays(&ws, &dirs).expect_err("config out").pointer,
            ws.join(".git/config")
        );
        std::fs::remove_file(ws.join(".git/config")).expect("rm");
        let o = git_overlays(&ws, &dirs).expect("overlays");
        assert_eq!(
            o,
            [
                GitOverlay {
                    path: ws.join("inner-hooks"),
                    create: false,
                    pin: false
                },
                GitOverlay {
                    path: ws.join(".git"),
                    create: false,
                    pin: true
                }
            ]
        );
        // a symlinked submodule directory leading out is refused too
        std::fs::create_dir_all(ws.join(".git/modules")).expect("mkdir");
        std::fs::write(outside.join("HEAD"), "0123\n").expect("write");
        std::os::unix::fs::symlink(&outside, ws.join(".git/modules/m")).expect("symlink");
        assert_eq!(
            git_overlays(&ws, &dirs).expect_err("module out").pointer,
            ws.join(".git/modules/m")
        );
    }

    #[test]
    fn nothing_is_created_outside_the_workspace() {
        let d = tempfile::tempdir().expect("tempdir");
        let (ws, c) = linked(&canon(d.path()));
        std::fs::remove_dir(c.join("hooks")).expect("rmdir");
        let r = protect(&ws).expect_err("missing hooks outside");
        assert!(r.to_string().contains("mkdir"), "{r}");
        assert!(!c.join("hooks").exists());
    }

    #[test]
    fn the_agent_home_shares_only_existing_state_entries_and_creates_nothing() {
        let d = tempfile::tempdir().expect("tempdir");
        let claude = d.path().join(".claude");
        std::fs::create_dir_all(claude.join("projects")).expect("mkdir");
        std::fs::create_dir_all(claude.join("commands")).expect("mkdir");
        std::fs::write(claude.join(".credentials.json"), "{}").expect("write");
        std::fs::write(claude.join("settings.json"), "{}").expect("write");
        std::os::unix::fs::symlink("/etc", claude.join("todos")).expect("symlink");
        let before: Vec<_> = std::fs::read_dir(&claude)
            .expect("ls")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        let home = agent_home(&claude);
        assert_eq!(
            home.writable,
            [claude.join(".credentials.json"), claude.join("projects")]
        );
        assert_eq!(
            home.skipped,
            [Skipped {
                path: claude.join("todos").display().to_string(),
                reason: "is a symbolic link"
            }]
        );
        let after: Vec<_> = std::fs::read_dir(&claude)
            .expect("ls")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(before.len(), after.len(), "nothing created in the agent home");
        for obeyed in [
            "settings.json",
            "settings.local.json",
            "CLAUDE.md",
            "commands",
            "hooks",
            "skills",
        ] {
            assert!(!AGENT_HOME_WRITABLE.contains(&obeyed), "{obeyed}");
        }
    }

    #[test]
    fn user_binds_of_the_data_dir_or_the_agent_home_are_refused_in_both_directions() {
        let d = tempfile::tempdir().expect("tempdir");
        let home = d.path().join("home");
        let data = home.join(".iterion");
        let claude = home.join(".claude");
        for p in [&data, &claude] {
            std::fs::create_dir_all(p).expect("mkdir");
        }
        let check = |p: &Path| host_state_bind_refusal(p, p, &data, &claude);
        let r = check(&data.join("projects")).expect("inside the data dir");
        assert!(r.starts_with("is inside iterion's data directory"), "{r}");
        assert!(check(&data).is_some());
        let r = check(&claude).expect("the agent home");
        assert!(r.starts_with("is inside the agent home"), "{r}");
        let r = check(&home).expect("contains both");
        assert!(r.starts_with("contains iterion's data directory"), "{r}");
        // through a symbolic link: the canonical path is what the engine mounts
        let link = d.path().join("innocent");
        std::os::unix::fs::symlink(&data, &link).expect("symlink");
        let canon = std::fs::canonicalize(&link).expect("canon");
        assert!(host_state_bind_refusal(&link, &canon, &data, &claude).is_some());
        assert!(check(&d.path().join("elsewhere")).is_none());
        assert!(host_state_bind_refusal(&data, &data, Path::new(""), Path::new(".claude")).is_none());
    }

    #[test]
    fn a_store_inside_the_workspace_is_hidden_at_the_workspace_folder() {
        let d = tempfile::tempdir().expect("tempdir");
        let ws = std::fs::canonicalize(d.path()).expect("canon").join("ws");
        std::fs::create_dir_all(ws.join(".iterion/runs")).expect("mkdir");
        std::fs::create_dir_all(d.path().join("data")).expect("mkdir");
        let store = ws.join(".iterion");
        let data = d.path().join("data");
        assert_eq!(
            hidden_store_targets(&ws, "/workspace", &[&data, &store, &store.join("runs"), &ws]),
            ["/workspace/.iterion"]
        );
        assert!(hidden_store_targets(&ws, "/workspace", &[&data, Path::new("rel")]).is_empty());
    }

    #[test]
    fn reserved_and_duplicate_targets() {
        assert!(reserved_target("/run/iterion/exec"));
        assert!(reserved_target("/iterion/artifact-files/x"));
        assert!(!reserved_target("/run/iterionx"));
        assert!(reserved_target("/.iterion-reap"));
        let a = Planned::bind("/a", "/x", false, Origin::Workspace);
        let b = Planned::bind("/b", "/x", true, Origin::User);
        assert!(
            unique_targets(&[a.clone(), b])
                .expect_err("dup")
                .contains("Workspace")
        );
        assert!(unique_targets(&[a]).is_ok());
    }
}
