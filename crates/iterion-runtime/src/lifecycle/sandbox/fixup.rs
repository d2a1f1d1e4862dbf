//! After a driver copied the work dir into a sandbox without a host file system (kubernetes): the git fixup of
//! a linked worktree or a run workspace, `sandbox_workspace_copied`, and the copy back registered for cleanup (05 §4.10).
use std::sync::Arc;
use std::time::Instant;

use iterion_driver::{ExecRequest, Output, Run, Stdin, WorkspaceCopy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::convert::ms;
use super::copy::CopyBack;
use super::failures::timeout_failure;
use super::guard::Guard;
use super::starter::Starter;
use crate::events::SandboxWorkspaceCopied;
use crate::failure::FailurePhase;
use crate::lifecycle::step_failure::Failure;
use crate::store::LogLevel;

/// Where the bundle of the git fixup lands, relative to the workspace (the workspace volume, not the small
/// memory-backed exec volume: a bundle holds the whole history of HEAD). Deleted by the same exec.
const BUNDLE: &str = ".iterion-git-fixup.bundle";

/// Exit code of the fixup script when the image has no git.
const NO_GIT: i32 = 3;

impl Starter {
    /// After a start that copied the work dir in: the git fixup, `sandbox_workspace_copied`, and the copy back
    /// registered for cleanup.
    pub(super) async fn workspace_copied(
        &self,
        run: &Arc<dyn Run>,
        copy: &WorkspaceCopy,
    ) -> Result<(), Failure> {
        let bound = self.cfg.settings.workspace_copy_timeout.duration;
        let began = Instant::now();
        // a linked worktree's `.git` file names a host directory; a run workspace's private `.git` borrows its
        // objects from a bind the pod does not have: either way the pod needs a repository of its own
        let linked = std::fs::symlink_metadata(self.work_dir.join(".git")).is_ok_and(|m| m.is_file());
        if linked || self.worktree.is_some() {
            let left = bound.saturating_sub(copy.duration);
            match tokio::time::timeout(left, self.git_fixup(run.as_ref())).await {
                Err(_) => {
                    return Err(timeout_failure(
                        &self.cfg,
                        FailurePhase::WorkspaceCopy,
                        "the workspace copy and its git fixup",
                    ));
                }
                Ok(Ok(())) => {}
                Ok(Err(warning)) => self.em.log(LogLevel::Warn, &format!("sandbox: {warning}")),
            }
        }
        self.em.emit(SandboxWorkspaceCopied {
            files: copy.files,
            bytes: copy.bytes,
            duration_ms: ms(copy.duration + began.elapsed()),
        });
        Guard::lock(&self.res).copies.push(CopyBack {
            run: run.clone(),
            work_dir: self.work_dir.clone(),
            listing: copy.listing.clone(),
            protect: copy.protect.clone(),
            bound,
        });
        Ok(())
    }

    /// The pod cannot see the host's git directories: it gets a standalone repository holding HEAD instead (a
    /// bundle streamed from host git — the run's host git dir, or the verified git dir of a linked worktree —
    /// fetched inside the pod), with the index at HEAD and the copied working tree as it was. `Err` is a
    /// warning.
    async fn git_fixup(&self, run: &dyn Run) -> Result<(), String> {
        let mut bundle =
            crate::exec::worktree::bundle_head_command(&self.work_dir, self.worktree.as_ref(), &self.cfg.env)
                .and_then(|c| c.into_tokio().map_err(|e| e.to_string()))
                .map_err(|e| format!("git fixup skipped: {e}"))?;
        bundle.kill_on_drop(true);
        let mut git = bundle
            .spawn()
            .map_err(|e| format!("git fixup skipped: cannot run git on the host: {e}"))?;
        // One line: no exec argument may carry a newline (the kubernetes exec script refuses them). A private
        // `.git` copied in names a bind the pod does not have in its alternates: dropped first.
        let script = format!(
            "command -v git >/dev/null 2>&1 || {{ cat >/dev/null; exit {NO_GIT}; }}; \
             rm -f .git/objects/info/alternates; \
             cat > {BUNDLE} && git init -q && git fetch -q ./{BUNDLE} HEAD && git reset -q FETCH_HEAD; \
             r=$?; rm -f {BUNDLE}; exit $r"
        );
        let req = ExecRequest::shell(script)
            .workdir(run.workspace().to_owned())
            .stdin(Stdin::Piped)
            .outputs(Output::Discard, Output::Piped);
        let mut exec = run
            .exec(req)
            .await
            .map_err(|e| format!("git fixup failed: {e}"))?;
        let mut stdin = exec.stdin.take();
        let mut stderr = exec.stderr.take();
        let mut bundle = git.stdout.take();
        let mut git_err = git.stderr.take();
        let feed = async {
            if let (Some(from), Some(to)) = (bundle.as_mut(), stdin.as_mut()) {
                let _ = tokio::io::copy(from, to).await;
            }
            if let Some(mut to) = stdin.take() {
                let _ = to.shutdown().await;
            }
        };
        let read_err = async {
            let mut buf = Vec::new();
            if let Some(e) = stderr.as_mut() {
                let _ = e.take(4096).read_to_end(&mut buf).await;
            }
            buf
        };
        let read_git_err = async {
            let mut buf = Vec::new();
            if let Some(e) = git_err.as_mut() {
                let _ = e.take(4096).read_to_end(&mut buf).await;
            }
            buf
        };
        let ((), pod_err, host_err) = tokio::join!(feed, read_err, read_git_err);
        let host = git.wait().await.map_err(|e| format!("git fixup failed: {e}"))?;
        let status = exec.wait().await.map_err(|e| format!("git fixup failed: {e}"))?;
        if !host.success() {
            return Err(format!(
                "git fixup skipped: the host's `git bundle create` failed ({host}): {}; the workspace is not a git repository inside the pod",
                String::from_utf8_lossy(&host_err).trim()
            ));
        }
        match status.code {
            0 => Ok(()),
            NO_GIT => Err(
                "git is not available in the image; the workspace is not a git repository inside the pod"
                    .to_owned(),
            ),
            code => Err(format!(
                "git fixup failed inside the pod (exit {code}): {}",
                String::from_utf8_lossy(&pod_err).trim()
            )),
        }
    }
}
