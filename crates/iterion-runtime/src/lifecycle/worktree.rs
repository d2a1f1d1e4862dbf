//! `worktree: auto` in the lifecycle (05 §4.1, §9 item 8, §10.11): where the run's workspace and host git dir
//! go, creating them once the run record exists, reopening them on resume, and committing the result when the
//! run finishes (the git side is `exec/worktree.rs`).
use std::path::{Path, PathBuf};

use iterion_spec::model::{Workflow, Worktree as WorktreeMode};

use crate::exec::{
    SourceRepo, Worktree, checkout_changes, create_worktree, finish_worktree, host_git_dir, reopen_worktree,
    source_repo,
};
use crate::failure::FailureCode;
use crate::lifecycle::config::Config;
use crate::lifecycle::sink::Emitter;
use crate::lifecycle::step_failure::Failure;
use crate::store::{LogLevel, RunId};

const NOT_A_REPOSITORY_HINT: &str = "'worktree: auto' runs in a new workspace made from the git repository that \
holds the work dir: run from inside a git repository with at least one commit (or --work-dir one), or remove \
'worktree: auto' to run in the directory itself";

/// What a launch does about the worktree, decided before the sandbox is resolved (the resolution binds the
/// worktree's path as the workspace).
#[derive(Debug)]
pub(super) enum Planned {
    /// The workflow runs in place.
    InPlace,
    /// The workspace goes to `path` (its host git dir to `git_dir`), made from `repo`.
    At {
        repo: SourceRepo,
        path: PathBuf,
        git_dir: PathBuf,
        run_id: String,
    },
    /// The work dir is not in a usable git repository: the run fails `WORKTREE_FAILED` once its record exists.
    Refused(String),
}

impl Planned {
    /// `<store>/worktrees/<run id>` (and `<store>/gitdirs/<run id>`) for a `worktree: auto` workflow whose
    /// work dir is inside a repository.
    pub(super) fn of(wf: &Workflow, work_dir: &Path, store_dir: &Path, id: &RunId) -> Planned {
        if wf.worktree != WorktreeMode::Auto {
            return Planned::InPlace;
        }
        match source_repo(work_dir) {
            Ok(Some(repo)) => Planned::At {
                repo,
                // a RunId is always a valid path component
                path: crate::store::Store::at(store_dir)
                    .worktree_dir(id.as_str())
                    .unwrap_or_else(|_| store_dir.join("worktrees").join(id.to_string())),
                git_dir: host_git_dir(store_dir, id.as_str()),
                run_id: id.to_string(),
            },
            Ok(None) => Planned::Refused(format!("{} is not inside a git repository", work_dir.display())),
            Err(e) => Planned::Refused(format!("{}: {e}", work_dir.display())),
        }
    }

    /// The work dir and repository root the run uses (the worktree's, when there is one).
    pub(super) fn dirs(&self, work_dir: &Path, repo_root: Option<&Path>) -> (PathBuf, Option<PathBuf>) {
        match self {
            Planned::At { repo, path, .. } => (path.clone(), Some(repo.root.clone())),
            _ => (work_dir.to_path_buf(), repo_root.map(Path::to_path_buf)),
        }
    }

    /// Creates the worktree (the run record exists): the worktree, or the `WORKTREE_FAILED` failure.
    pub(super) fn create(self, cfg: &Config, em: &Emitter) -> Result<Option<Worktree>, Failure> {
        match self {
            Planned::InPlace => Ok(None),
            Planned::Refused(reason) => {
                em.update(|d| d.worktree = true);
                Err(refusal(reason))
            }
            Planned::At {
                repo,
                path,
                git_dir,
                run_id,
            } => {
                em.update(|d| d.worktree = true);
                let wt = create_worktree(&repo, &path, &git_dir, &run_id, &cfg.env)
                    .map_err(|e| refusal(e.to_string()))?;
                let base = wt.base_commit.clone();
                em.update(|d| d.base_commit = Some(base));
                em.log(
                    LogLevel::Info,
                    &format!(
                        "worktree: {} from {} at {} (its git dir {} stays on the host)",
                        wt.path.display(),
                        repo.root.display(),
                        short(&wt.base_commit),
                        wt.git_dir.display()
                    ),
                );
                warn_unseen_changes(cfg, em, &wt, &repo.root);
                Ok(Some(wt))
            }
        }
    }
}

/// A warning, before any node runs, when the operator's checkout has changes the run does not see (it works on
/// a fresh checkout of HEAD).
fn warn_unseen_changes(cfg: &Config, em: &Emitter, wt: &Worktree, root: &Path) {
    const SHOWN: usize = 5;
    match checkout_changes(wt, root, &cfg.env, SHOWN) {
        Ok((_, 0)) => {}
        Ok((paths, n)) => {
            let more = if n > paths.len() { ", …" } else { "" };
            em.log(
                LogLevel::Warn,
                &format!(
                    "worktree: {} has {n} uncommitted or untracked change(s) ({}{more}) that this run does not see: \
                     it works on a fresh checkout of {}; commit them first to include them",
                    root.display(),
                    paths.join(", "),
                    short(&wt.base_commit)
                ),
            );
        }
        Err(e) => em.log(
            LogLevel::Warn,
            &format!(
                "worktree: cannot tell whether {} has uncommitted changes: {e}",
                root.display()
            ),
        ),
    }
}

/// `WORKTREE_FAILED` with `reason` and the way out.
pub(super) fn refusal(reason: String) -> Failure {
    Failure::new(FailureCode::WorktreeFailed, reason).hint(Some(NOT_A_REPOSITORY_HINT.to_owned()))
}

/// The recorded workspace of run `run_id` being resumed (`Err` with the reason when it or its host git dir is
/// gone, or the host git dir is not the one iterion made for the run).
pub(super) fn reopen(
    cfg: &Config,
    repo_root: Option<&Path>,
    work_dir: &Path,
    store_dir: &Path,
    run_id: &str,
    base: Option<&str>,
) -> Result<Worktree, String> {
    let (Some(root), Some(base)) = (repo_root, base) else {
        return Err("the run record names no repository or base commit for its worktree".into());
    };
    let git_dir = host_git_dir(store_dir, run_id);
    reopen_worktree(root, work_dir, &git_dir, run_id, base, &cfg.env).map_err(|e| e.to_string())
}

/// After a `finished` run's sandbox is gone: take over its commits, commit what else it changed, branch it,
/// remove the workspace, and record `final_commit` / `final_branch`. A git failure keeps the workspace and its
/// host git dir (nothing is lost) and is logged as an error. Returns the branch, when one was created.
pub(super) fn finish(cfg: &Config, em: &Emitter, wt: &Worktree, workflow: &str) -> Option<String> {
    let name = em.run().document().name.clone();
    match finish_worktree(wt, workflow, &name, &cfg.env) {
        Ok(done) => {
            for note in &done.notes {
                em.log(LogLevel::Warn, &format!("worktree: {note}"));
            }
            let message = match &done.final_branch {
                Some(b) => format!(
                    "worktree: the run's changes are on branch {b} ({}); worktree removed",
                    short(&done.final_commit)
                ),
                None => "worktree: the run changed nothing; worktree removed".to_owned(),
            };
            em.log(LogLevel::Info, &message);
            let branch = done.final_branch.clone();
            em.update(|d| {
                d.final_commit = Some(done.final_commit);
                d.final_branch = done.final_branch;
            });
            branch
        }
        Err(e) => {
            em.log(
                LogLevel::Error,
                &format!(
                    "{e}; the worktree is kept at {} (its git dir at {})",
                    wt.path.display(),
                    wt.git_dir.display()
                ),
            );
            None
        }
    }
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}
