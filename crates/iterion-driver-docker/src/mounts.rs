//! Mount assembly (03 §8.2–§8.6): host-state binds, warm caches, protected read-only overlays, the UID remap
//! decision and the writable-`HOME` tmpfs layering. Pure planning over paths passed in, plus the creation of
//! missing protected paths (as the iterion user, before the container exists).

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

fn if_exists(p: PathBuf, out: &mut Protected) {
    if p.exists() {
        out.paths.push(p);
    }
}

/// The workspace git directory `G` and common directory `C` (03 §8.6), when the workspace is a repository.
pub fn git_dirs(workspace: &Path) -> Option<(PathBuf, PathBuf)> {
    let dot = workspace.join(".git");
    let md = std::fs::symlink_metadata(&dot).ok()?;
    let g = if md.is_dir() {
        dot
    } else {
        let text = std::fs::read_to_string(&dot).ok()?;
        let rel = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
        let p = Path::new(rel);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            workspace.join(p)
        }
    };
    let c = match std::fs::read_to_string(g.join("commondir")) {
        Ok(t) => {
            let p = Path::new(t.trim());
            let c = if p.is_absolute() {
                p.to_path_buf()
            } else {
                g.join(p)
            };
            std::fs::canonicalize(&c).unwrap_or(c)
        }
        Err(_) => g.clone(),
    };
    Some((g, c))
}

/// Protected paths of the workspace repository; missing required paths are created first (hooks
/// directories). The agent home is protected by its own layout ([`agent_home`]), which creates nothing.
pub fn protect(workspace: &Path) -> crate::Result<Protected> {
    let mut out = Protected::default();
    if let Some((g, c)) = git_dirs(workspace) {
        ensure_dir(&c.join("hooks"), 0o755, &mut out)?;
        if_exists(c.join("config"), &mut out);
        if g != c {
            if_exists(g.join("config.worktree"), &mut out);
        }
        let mut modules = Vec::new();
        let mut stack = vec![c.join("modules")];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                let p = e.path();
                if !p.is_dir() || modules.len() >= 64 {
                    continue;
                }
                if p.join("HEAD").is_file() {
                    modules.push(p.clone());
                }
                stack.push(p.join("modules"));
                if !p.join("HEAD").is_file() {
                    stack.push(p);
                }
            }
        }
        modules.sort();
        for m in modules.into_iter().take(64) {
            if_exists(m.join("hooks"), &mut out);
            if_exists(m.join("config"), &mut out);
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

/// Reserved targets (03 §8.2): equal to or inside `/run/iterion` or `/iterion/artifact-files`.
pub fn reserved_target(t: &str) -> bool {
    let p = Path::new(t);
    ["/run/iterion", "/iterion/artifact-files"]
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
