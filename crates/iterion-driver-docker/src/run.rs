//! The `Run` handle of a docker sandbox: exec, copy, status, and the single shared cleanup (03 §8.9–§9.1).

use crate::container::RunInner;
use crate::dexec;
use crate::error::status_of;
use async_trait::async_trait;
use bollard::query_parameters::{
    DownloadFromContainerOptions, RemoveContainerOptions, StopContainerOptions, UploadToContainerOptions,
};
use futures::FutureExt;
use futures::StreamExt;
use futures::future::{BoxFuture, Shared};
use iterion_driver::{
    CleanupReport, CopyDirection, DriverKind, Error as DError, Exec, ExecRequest, Run, SandboxStatus,
    TarSource, TarStream,
};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A started docker sandbox.
pub struct DockerRun {
    inner: Arc<RunInner>,
    cleanup: Mutex<Option<Shared<BoxFuture<'static, CleanupReport>>>>,
}

impl std::fmt::Debug for DockerRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerRun")
            .field("id", &self.inner.id)
            .field("workspace", &self.inner.workspace)
            .field("user", &self.inner.user)
            .finish()
    }
}

impl DockerRun {
    pub(crate) fn new(inner: RunInner) -> Self {
        Self {
            inner: Arc::new(inner),
            cleanup: Mutex::new(None),
        }
    }

    /// Records the processes present right after the start (see [`RunInner::record_infrastructure`]).
    pub(crate) fn record_infrastructure(&self, listing: &str) -> Result<Vec<u32>, DError> {
        self.inner.record_infrastructure(listing)
    }

    /// Leaves the recording of the sandbox's own processes to the first exec (see
    /// [`RunInner::defer_listing`]).
    pub(crate) fn defer_listing(&self) {
        self.inner.defer_listing();
    }
}

async fn do_cleanup(inner: Arc<RunInner>) -> CleanupReport {
    inner.closed.store(true, Ordering::SeqCst);
    let mut report = CleanupReport::new(inner.id.clone(), false);
    // 1. Terminate execs still running (SIGTERM, up to 2 s); the stop below ends whatever remains.
    let live = inner.live.load(Ordering::SeqCst);
    if live > 0 {
        report.execs_terminated = live;
        let sweep = vec![
            "/bin/sh".to_string(),
            "-c".to_string(),
            "for f in /run/iterion/exec/*.pid; do p=$(cat \"$f\" 2>/dev/null) || continue; kill -TERM -$p 2>/dev/null || kill -TERM $p 2>/dev/null; done; exit 0".to_string(),
        ];
        let _ = tokio::time::timeout(Duration::from_secs(2), dexec::run_quiet(&inner, "0", sweep)).await;
        for _ in 0..20 {
            if inner.live.load(Ordering::SeqCst) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // 2. A graceful stop only when a step was still running; otherwise nothing in the container needs a
    // SIGTERM (the entrypoint is `sleep` or the relay), and the forced removal below kills and removes in
    // one engine call instead of two.
    if live > 0 {
        stop(&inner, &mut report).await;
    }
    let rm = inner.docker.remove_container(
        &inner.id,
        Some(RemoveContainerOptions {
            v: true,
            force: true,
            link: false,
        }),
    );
    match tokio::time::timeout(Duration::from_secs(10), rm).await {
        Ok(Ok(())) => report.container_removed = true,
        Ok(Err(e)) if status_of(&e) == Some(404) => report.container_removed = true,
        Ok(Err(e)) if status_of(&e) == Some(409) && e.to_string().contains("already in progress") => {
            // Another remover (for example a force cleanup) is at work: wait for it.
            for _ in 0..100 {
                if matches!(inner.state().await, Ok(None)) {
                    report.container_removed = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if !report.container_removed {
                report.errors.push(format!("remove {}: {e}", short(&inner.id)));
            }
        }
        Ok(Err(e)) => report.errors.push(format!("remove {}: {e}", short(&inner.id))),
        Err(_) => report
            .errors
            .push(format!("remove {} did not finish within 10s", short(&inner.id))),
    }
    for e in &report.errors {
        tracing::warn!(container = %short(&inner.id), "sandbox cleanup: {e}");
    }
    report
}

/// `POST /containers/{id}/stop?t=5` within 10 s; `304` and `404` are success.
async fn stop(inner: &RunInner, report: &mut CleanupReport) {
    let stop = inner.docker.stop_container(
        &inner.id,
        Some(StopContainerOptions {
            signal: None,
            t: Some(5),
        }),
    );
    match tokio::time::timeout(Duration::from_secs(10), stop).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) if matches!(status_of(&e), Some(304 | 404)) => {}
        Ok(Err(e)) => report.errors.push(format!("stop {}: {e}", short(&inner.id))),
        Err(_) => report
            .errors
            .push(format!("stop {} did not finish within 10s", short(&inner.id))),
    }
}

pub(crate) fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Force-removes a container with a blocking request over the engine socket (panic path), bounded by 5 s;
/// returns the engine's status code.
pub(crate) fn force_remove_blocking(
    socket: &std::path::Path,
    id: &str,
) -> Result<u16, crate::engine_http::EngineHttpError> {
    use crate::engine_http::{Request, blocking};
    let path = format!("/containers/{id}?force=1&v=1");
    blocking::send(socket, &Request::new("DELETE", &path), Duration::from_secs(5)).map(|r| r.status)
}

#[async_trait]
impl Run for DockerRun {
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn kind(&self) -> DriverKind {
        self.inner.kind
    }

    fn workspace(&self) -> &str {
        &self.inner.workspace
    }

    fn user(&self) -> Option<&str> {
        self.inner.user.as_deref()
    }

    async fn kill_leftovers(&self) -> Result<Option<u64>, DError> {
        self.inner.check_open()?;
        use crate::container::Infrastructure;
        let keep = match self.inner.infrastructure_now() {
            Infrastructure::Recorded(pids) => pids,
            // No exec has run: nothing of a step can be left.
            Infrastructure::FirstExec => return Ok(Some(0)),
            Infrastructure::Taken => {
                return Err(DError::Engine {
                    status: None,
                    message:
                        "the sandbox's own processes were not recorded by its first exec; nothing is killed"
                            .into(),
                });
            }
            Infrastructure::Unknown => return Ok(None),
        };
        // the bound relay needs no program of the image, which a node may have replaced
        let mut cmd = match &self.inner.reaper {
            Some(reaper) => vec![reaper.clone(), "reap".to_string()],
            None => vec![
                "/bin/sh".to_string(),
                "-c".to_string(),
                iterion_driver::KILL_LEFTOVERS_SCRIPT.to_string(),
                "iterion-reap".to_string(),
            ],
        };
        cmd.extend(keep.iter().map(u32::to_string));
        let (code, out) = dexec::run_capture(&self.inner, "0", cmd, 64).await?;
        if code != 0 {
            return Err(DError::Engine {
                status: None,
                message: format!("killing the processes left in the sandbox exited {code}"),
            });
        }
        Ok(Some(String::from_utf8_lossy(&out).trim().parse().unwrap_or(0)))
    }

    async fn exec(&self, req: ExecRequest) -> iterion_driver::Result<Exec> {
        dexec::exec(Arc::clone(&self.inner), req).await
    }

    async fn copy_in(&self, dest_dir: &str, tar: TarSource) -> iterion_driver::Result<()> {
        self.inner.check_open()?;
        let body = tokio_util::io::ReaderStream::new(tar);
        let opts = UploadToContainerOptions {
            path: dest_dir.to_string(),
            no_overwrite_dir_non_dir: Some("true".into()),
            copy_uidgid: None,
        };
        match self
            .inner
            .docker
            .upload_to_container(&self.inner.id, Some(opts), bollard::body_try_stream(body))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) => {
                let reason = e.to_string();
                Err(self
                    .inner
                    .gone_or(DError::Copy {
                        direction: CopyDirection::In,
                        reason,
                    })
                    .await)
            }
        }
    }

    async fn copy_out(&self, src: &str) -> iterion_driver::Result<TarStream> {
        self.inner.check_open()?;
        let mut stream = self
            .inner
            .docker
            .download_from_container(
                &self.inner.id,
                Some(DownloadFromContainerOptions {
                    path: src.to_string(),
                }),
            )
            .boxed();
        // The first chunk (or error) tells whether the path exists.
        let first = match stream.next().await {
            Some(Ok(b)) => Some(b),
            Some(Err(e)) => {
                let reason = e.to_string();
                return Err(self
                    .inner
                    .gone_or(DError::Copy {
                        direction: CopyDirection::Out,
                        reason,
                    })
                    .await);
            }
            None => None,
        };
        let rest = stream.map(|r| r.map_err(std::io::Error::other));
        let all = futures::stream::iter(first.map(Ok)).chain(rest);
        Ok(Box::pin(tokio_util::io::StreamReader::new(all)))
    }

    async fn status(&self) -> iterion_driver::Result<SandboxStatus> {
        self.inner.check_open()?;
        Ok(match self.inner.state().await? {
            None => SandboxStatus::Gone,
            Some(s) if s.running => SandboxStatus::Running,
            Some(s) => SandboxStatus::Exited {
                code: s.exit_code.unwrap_or(-1),
                oom_killed: s.oom_killed == Some(true),
            },
        })
    }

    async fn cleanup(&self) -> CleanupReport {
        let fut = {
            let mut slot = self.cleanup.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| {
                // The work runs in its own task: a cancelled caller does not cancel it.
                let handle = tokio::spawn(do_cleanup(Arc::clone(&self.inner)));
                let id = self.inner.id.clone();
                async move {
                    handle.await.unwrap_or_else(|e| {
                        let mut r = CleanupReport::new(id, false);
                        r.errors.push(format!("cleanup task failed: {e}"));
                        r
                    })
                }
                .boxed()
                .shared()
            })
            .clone()
        };
        fut.await
    }

    fn force_cleanup_blocking(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        let socket = self.inner.socket.clone();
        let id = self.inner.id.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("iterion-force-cleanup".into())
            .spawn(move || {
                let _ = tx.send(force_remove_blocking(&socket, &id));
            });
        if spawned.is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(5));
        }
    }
}
