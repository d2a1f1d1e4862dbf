//! `worktree: auto` (10.11): the run works in a detached git worktree of the repository, committed and branched
//! when the run finishes.
//!
//! git runs as a host process with exactly the environment map it is given (the library never reads the
//! process environment), so identity and config come from that map's `HOME` and `GIT_*` entries.
//!
//! The worktree is written by the sandbox, so every git command that iterion runs on it afterwards treats its
//! content as hostile: no hook ever runs (`core.hooksPath=/dev/null`), no fsmonitor command, no signing
//! program, and the repository is never discovered from the worktree's `.git` file — `GIT_DIR` and
//! `GIT_WORK_TREE` are pinned to the directories recorded when the worktree was created.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// Configuration that makes git run nothing the repository or the worktree names: hooks, the fsmonitor
/// daemon command, a signing program.
const NEUTRAL_CONFIG: &[&str] = &[
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "tag.gpgSign=false",
];

/// Variables of the launching environment that would redirect git to another repository or index.
const REDIRECTING_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
];

/// A created worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// `<store>/worktrees/<run id>`: the run's work dir.
    pub path: PathBuf,
    /// HEAD of the repository when the worktree was created.
    pub base_commit: String,
    /// The worktree's own git directory (`<common git dir>/worktrees/<name>`), read when the worktree was
    /// created, before any sandbox could write to it; every later git command is pinned to it.
    pub git_dir: PathBuf,
}

/// What [`finish_worktree`] recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedWorktree {
    /// HEAD of the worktree after the final commit.
    pub final_commit: String,
    /// `iterion/run/<friendly name>` when HEAD moved past the base commit.
    pub final_branch: Option<String>,
    /// Whether uncommitted changes were committed.
    pub committed: bool,
}

/// How one git command runs: in `dir`, or pinned to a worktree's git dir and work tree.
enum At<'a> {
    Dir(&'a Path),
    Pinned(&'a Worktree),
}

/// `git bundle create - HEAD` in `dir`, with the same neutral configuration and cleaned environment as every
/// other git command here; stdout (the bundle) piped, stderr piped, stdin closed.
pub(crate) fn bundle_head_command(dir: &Path, env: &BTreeMap<String, String>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("git");
    cmd.env_clear().envs(env);
    for v in REDIRECTING_VARS {
        cmd.env_remove(v);
    }
    cmd.arg("-C")
        .arg(dir)
        .args(NEUTRAL_CONFIG)
        .args(["bundle", "create", "-", "HEAD"])
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd
}

fn git(at: At<'_>, args: &[&str], env: &BTreeMap<String, String>, op: &'static str) -> Result<String> {
    let mut cmd = Command::new("git");
    cmd.env_clear().envs(env);
    for v in REDIRECTING_VARS {
        cmd.env_remove(v);
    }
    match at {
        At::Dir(dir) => {
            cmd.arg("-C").arg(dir);
        }
        At::Pinned(wt) => {
            cmd.arg("-C")
                .arg(&wt.path)
                .env("GIT_DIR", &wt.git_dir)
                .env("GIT_WORK_TREE", &wt.path);
        }
    }
    let out = cmd
        .args(NEUTRAL_CONFIG)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(|e| Error::Worktree {
            op,
            reason: format!("cannot run git: {e}"),
        })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut rest = args.iter();
        let mut verb = "";
        while let Some(a) = rest.next() {
            match *a {
                "-c" => {
                    rest.next();
                }
                a if a.starts_with('-') => {}
                a => {
                    verb = a;
                    break;
                }
            }
        }
        return Err(Error::Worktree {
            op,
            reason: format!(
                "git {verb} exited with {}: {}",
                out.status
                    .code()
                    .map_or("a signal".to_string(), |c| format!("status {c}")),
                stderr.trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The top level of the git repository that holds `work_dir` (`git rev-parse --show-toplevel`). A directory
/// outside any repository is an [`Error::Worktree`] (`WORKTREE_FAILED`).
pub fn source_repo(work_dir: &Path, env: &BTreeMap<String, String>) -> Result<PathBuf> {
    git(
        At::Dir(work_dir),
        &["rev-parse", "--show-toplevel"],
        env,
        "find the repository",
    )
    .map(PathBuf::from)
}

/// `git -C <repo root> worktree add --detach <path> HEAD`; `base_commit` is that HEAD. A directory that is not
/// a git repository, a repository without a commit (or any git error) is an [`Error::Worktree`]
/// (`WORKTREE_FAILED`).
pub fn create_worktree(repo_root: &Path, path: &Path, env: &BTreeMap<String, String>) -> Result<Worktree> {
    let base_commit = git(At::Dir(repo_root), &["rev-parse", "HEAD"], env, "rev-parse HEAD")?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::Worktree {
            op: "worktree add",
            reason: format!("cannot create {}: {e}", parent.display()),
        })?;
    }
    let target = path.to_string_lossy();
    git(
        At::Dir(repo_root),
        &["worktree", "add", "--detach", &target, &base_commit],
        env,
        "worktree add",
    )?;
    let git_dir = git(
        At::Dir(path),
        &["rev-parse", "--path-format=absolute", "--git-dir"],
        env,
        "rev-parse --git-dir",
    )?;
    Ok(Worktree {
        path: path.to_path_buf(),
        base_commit,
        git_dir: PathBuf::from(git_dir),
    })
}

/// The worktree of a run being resumed: `path` must still be a worktree of `repo_root`, registered under the
/// repository's common git dir as `worktrees/<name of path>` with its `gitdir` naming `path/.git` (the
/// worktree's own `.git` file is not trusted). Anything else is an [`Error::Worktree`].
pub fn reopen_worktree(
    repo_root: &Path,
    path: &Path,
    base_commit: &str,
    env: &BTreeMap<String, String>,
) -> Result<Worktree> {
    let missing = |reason: String| Error::Worktree {
        op: "reopen the worktree",
        reason,
    };
    if !path.is_dir() {
        return Err(missing(format!("{} no longer exists", path.display())));
    }
    let common = git(
        At::Dir(repo_root),
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
        env,
        "rev-parse --git-common-dir",
    )?;
    let name = path
        .file_name()
        .ok_or_else(|| missing(format!("{} has no name", path.display())))?;
    let git_dir = PathBuf::from(common).join("worktrees").join(name);
    let registered = std::fs::read_to_string(git_dir.join("gitdir")).unwrap_or_default();
    let expected = path.join(".git");
    let same = |a: &Path, b: &Path| {
        a == b
            || std::fs::canonicalize(a)
                .ok()
                .is_some_and(|x| Some(x) == std::fs::canonicalize(b).ok())
    };
    if !same(Path::new(registered.trim()), &expected) {
        return Err(missing(format!(
            "{} is not registered as a worktree of {}",
            path.display(),
            repo_root.display()
        )));
    }
    Ok(Worktree {
        path: path.to_path_buf(),
        base_commit: base_commit.to_owned(),
        git_dir,
    })
}

/// `git worktree remove --force`; when git refuses (a `.git` file that no longer points back, which git checks
/// before removing), the directory is deleted without following links and the registration pruned.
pub fn remove_worktree(repo_root: &Path, path: &Path, env: &BTreeMap<String, String>) -> Result<()> {
    let target = path.to_string_lossy();
    let removed = git(
        At::Dir(repo_root),
        &["worktree", "remove", "--force", &target],
        env,
        "worktree remove",
    );
    if removed.is_ok() {
        return Ok(());
    }
    std::fs::remove_dir_all(path).map_err(|e| Error::Worktree {
        op: "worktree remove",
        reason: format!("cannot delete {}: {e}", path.display()),
    })?;
    git(At::Dir(repo_root), &["worktree", "prune"], env, "worktree prune").map(|_| ())
}

/// On `finished` (10.11): commits uncommitted changes as `iterion: <workflow> run <friendly name>` (identity
/// from git config, else `iterion <iterion@localhost>`), creates branch `iterion/run/<friendly name>` when
/// HEAD differs from the base commit, records the final commit and removes the worktree. On any other
/// terminal status the caller keeps the worktree and does not call this.
pub fn finish_worktree(
    repo_root: &Path,
    wt: &Worktree,
    workflow: &str,
    friendly_name: &str,
    env: &BTreeMap<String, String>,
) -> Result<FinishedWorktree> {
    let pinned = || At::Pinned(wt);
    let dirty = !git(pinned(), &["status", "--porcelain"], env, "status")?.is_empty();
    if dirty {
        git(pinned(), &["add", "-A"], env, "add")?;
        let has =
            |key: &str| git(pinned(), &["config", "--get", key], env, "config").is_ok_and(|v| !v.is_empty());
        let message = format!("iterion: {workflow} run {friendly_name}");
        let mut args: Vec<&str> = Vec::new();
        if !has("user.name") {
            args.extend(["-c", "user.name=iterion"]);
        }
        if !has("user.email") {
            args.extend(["-c", "user.email=iterion@localhost"]);
        }
        args.extend(["commit", "--no-verify", "-q", "-m", &message]);
        git(pinned(), &args, env, "commit")?;
    }
    let final_commit = git(pinned(), &["rev-parse", "HEAD"], env, "rev-parse HEAD")?;
    let final_branch = if final_commit != wt.base_commit {
        let branch = format!("iterion/run/{friendly_name}");
        git(pinned(), &["branch", &branch, &final_commit], env, "branch")?;
        Some(branch)
    } else {
        None
    };
    remove_worktree(repo_root, &wt.path, env)?;
    Ok(FinishedWorktree {
        final_commit,
        final_branch,
        committed: dirty,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(home: &Path) -> BTreeMap<String, String> {
        let mut e = BTreeMap::new();
        e.insert("HOME".to_string(), home.to_string_lossy().into_owned());
        e.insert("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string());
        e
    }

    fn repo(dir: &Path, env: &BTreeMap<String, String>) {
        std::fs::create_dir_all(dir).unwrap();
        git(At::Dir(dir), &["init", "-q"], env, "init").unwrap();
        std::fs::write(dir.join("a.txt"), "a\n").unwrap();
        git(At::Dir(dir), &["add", "-A"], env, "add").unwrap();
        git(
            At::Dir(dir),
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-q",
                "-m",
                "init",
            ],
            env,
            "commit",
        )
        .unwrap();
    }

    #[test]
    fn changes_are_committed_and_branched() {
        let tmp = tempfile::tempdir().unwrap();
        let env = env(tmp.path());
        let root = tmp.path().join("repo");
        repo(&root, &env);
        let wt = create_worktree(&root, &tmp.path().join("store/worktrees/r1"), &env).unwrap();
        assert_eq!(wt.base_commit.len(), 40);
        std::fs::write(wt.path.join("b.txt"), "b\n").unwrap();
        let fin = finish_worktree(&root, &wt, "gate", "calm-blue-fox-1a2b", &env).unwrap();
        assert!(fin.committed);
        assert_eq!(
            fin.final_branch.as_deref(),
            Some("iterion/run/calm-blue-fox-1a2b")
        );
        assert_ne!(fin.final_commit, wt.base_commit);
        assert!(!wt.path.exists());
        let log = git(
            At::Dir(&root),
            &[
                "log",
                "-1",
                "--format=%an <%ae> %s",
                "iterion/run/calm-blue-fox-1a2b",
            ],
            &env,
            "log",
        )
        .unwrap();
        assert_eq!(
            log,
            "iterion <iterion@localhost> iterion: gate run calm-blue-fox-1a2b"
        );
    }

    #[test]
    fn clean_worktree_has_no_branch() {
        let tmp = tempfile::tempdir().unwrap();
        let env = env(tmp.path());
        let root = tmp.path().join("repo");
        repo(&root, &env);
        let wt = create_worktree(&root, &tmp.path().join("wt"), &env).unwrap();
        let fin = finish_worktree(&root, &wt, "gate", "n", &env).unwrap();
        assert_eq!(
            fin,
            FinishedWorktree {
                final_commit: wt.base_commit.clone(),
                final_branch: None,
                committed: false
            }
        );
    }

    #[test]
    fn not_a_repository_is_worktree_failed() {
        let tmp = tempfile::tempdir().unwrap();
        let env = env(tmp.path());
        let e = create_worktree(tmp.path(), &tmp.path().join("wt"), &env).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("worktree: rev-parse HEAD failed: git rev-parse exited with status 128"),
            "{msg}"
        );
    }

    /// A hook planted in the repository (the sandbox can write the common git dir of a linked worktree) and a
    /// `.git` file pointed elsewhere must not make the host's git run anything or act on another repository.
    #[test]
    fn finishing_runs_no_hook_and_ignores_a_replaced_git_file() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let env = env(tmp.path());
        let root = tmp.path().join("repo");
        repo(&root, &env);
        let wt = create_worktree(&root, &tmp.path().join("store/worktrees/r2"), &env).unwrap();
        let marker = tmp.path().join("hook-ran");
        for hook in [
            "post-commit",
            "reference-transaction",
            "pre-commit",
            "post-checkout",
        ] {
            let h = root.join(".git/hooks").join(hook);
            std::fs::write(&h, format!("#!/bin/sh\necho {hook} >> '{}'\n", marker.display())).unwrap();
            std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let decoy = tmp.path().join("decoy");
        repo(&decoy, &env);
        std::fs::write(
            wt.path.join(".git"),
            format!("gitdir: {}/.git\n", decoy.display()),
        )
        .unwrap();
        std::fs::write(wt.path.join("b.txt"), "b\n").unwrap();
        let fin = finish_worktree(&root, &wt, "gate", "n", &env).unwrap();
        assert!(fin.committed);
        assert!(
            !marker.exists(),
            "a hook ran: {:?}",
            std::fs::read_to_string(&marker)
        );
        let decoy_log = git(At::Dir(&decoy), &["log", "--format=%s"], &env, "log").unwrap();
        assert_eq!(decoy_log, "init", "the decoy repository was written");
        let branch = git(
            At::Dir(&root),
            &["log", "-1", "--format=%s", "iterion/run/n"],
            &env,
            "log",
        )
        .unwrap();
        assert_eq!(branch, "iterion: gate run n");
    }

    #[test]
    fn a_resumed_worktree_must_still_be_registered() {
        let tmp = tempfile::tempdir().unwrap();
        let env = env(tmp.path());
        let root = tmp.path().join("repo");
        repo(&root, &env);
        let path = tmp.path().join("store/worktrees/r3");
        let wt = create_worktree(&root, &path, &env).unwrap();
        let again = reopen_worktree(&root, &path, &wt.base_commit, &env).unwrap();
        assert_eq!(again, wt);
        let other = tmp.path().join("plain");
        std::fs::create_dir_all(&other).unwrap();
        let e = reopen_worktree(&root, &other, &wt.base_commit, &env).unwrap_err();
        assert!(e.to_string().contains("is not registered as a worktree"), "{e}");
        let e = reopen_worktree(&root, &tmp.path().join("gone"), &wt.base_commit, &env).unwrap_err();
        assert!(e.to_string().contains("no longer exists"), "{e}");
    }

    #[test]
    fn the_source_repository_is_the_top_level() {
        let tmp = tempfile::tempdir().unwrap();
        let env = env(tmp.path());
        let root = tmp.path().join("repo");
        repo(&root, &env);
        std::fs::create_dir_all(root.join("sub/dir")).unwrap();
        let top = source_repo(&root.join("sub/dir"), &env).unwrap();
        assert_eq!(
            std::fs::canonicalize(top).unwrap(),
            std::fs::canonicalize(&root).unwrap()
        );
        let e = source_repo(tmp.path(), &env).unwrap_err();
        assert!(
            e.to_string().starts_with("worktree: find the repository failed"),
            "{e}"
        );
    }
}
