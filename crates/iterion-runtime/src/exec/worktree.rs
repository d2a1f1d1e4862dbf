//! `worktree: auto` (10.11): the run works in a detached git worktree of the repository, committed and branched
//! when the run finishes.
//!
//! git runs as a host process with exactly the environment map it is given (the library never reads the
//! process environment), so identity and config come from that map's `HOME` and `GIT_*` entries.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// A created worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// `<store>/worktrees/<run id>`: the run's work dir.
    pub path: PathBuf,
    /// HEAD of the repository when the worktree was created.
    pub base_commit: String,
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

fn git(dir: &Path, args: &[&str], env: &BTreeMap<String, String>, op: &'static str) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_clear()
        .envs(env)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(|e| Error::Worktree {
            op,
            reason: format!("cannot run git: {e}"),
        })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Worktree {
            op,
            reason: format!(
                "git {} exited with {}: {}",
                args.first().copied().unwrap_or_default(),
                out.status
                    .code()
                    .map_or("a signal".to_string(), |c| format!("status {c}")),
                stderr.trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `git -C <repo root> worktree add --detach <path> HEAD`; `base_commit` is that HEAD. A directory that is not
/// a git repository (or any git error) is an [`Error::Worktree`] (`WORKTREE_FAILED`).
pub fn create_worktree(repo_root: &Path, path: &Path, env: &BTreeMap<String, String>) -> Result<Worktree> {
    let base_commit = git(repo_root, &["rev-parse", "HEAD"], env, "rev-parse HEAD")?;
    let target = path.to_string_lossy();
    git(
        repo_root,
        &["worktree", "add", "--detach", &target, &base_commit],
        env,
        "worktree add",
    )?;
    Ok(Worktree {
        path: path.to_path_buf(),
        base_commit,
    })
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
    let dir = wt.path.as_path();
    let dirty = !git(dir, &["status", "--porcelain"], env, "status")?.is_empty();
    if dirty {
        git(dir, &["add", "-A"], env, "add")?;
        let has = |key: &str| git(dir, &["config", "--get", key], env, "config").is_ok_and(|v| !v.is_empty());
        let message = format!("iterion: {workflow} run {friendly_name}");
        let mut args: Vec<&str> = Vec::new();
        if !has("user.name") {
            args.extend(["-c", "user.name=iterion"]);
        }
        if !has("user.email") {
            args.extend(["-c", "user.email=iterion@localhost"]);
        }
        args.extend(["commit", "--no-verify", "-q", "-m", &message]);
        git(dir, &args, env, "commit")?;
    }
    let final_commit = git(dir, &["rev-parse", "HEAD"], env, "rev-parse HEAD")?;
    let final_branch = if final_commit != wt.base_commit {
        let branch = format!("iterion/run/{friendly_name}");
        git(dir, &["branch", &branch, &final_commit], env, "branch")?;
        Some(branch)
    } else {
        None
    };
    let target = dir.to_string_lossy();
    git(
        repo_root,
        &["worktree", "remove", "--force", &target],
        env,
        "worktree remove",
    )?;
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
        git(dir, &["init", "-q"], env, "init").unwrap();
        std::fs::write(dir.join("a.txt"), "a\n").unwrap();
        git(dir, &["add", "-A"], env, "add").unwrap();
        git(
            dir,
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
            &root,
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
}
