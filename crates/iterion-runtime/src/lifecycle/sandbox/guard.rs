//! The resources guard of a run and its cleanup (05 §8.1, §8.2).
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iterion_driver::{NetworkLease, Run};
use iterion_netproxy::RunningProxy;
use tokio_util::sync::CancellationToken;

use super::convert::ms;
use crate::events::SandboxStopped;
use crate::lifecycle::sink::Emitter;
use crate::store::LogLevel;

#[derive(Default)]
pub(super) struct Res {
    pub(super) containers: Vec<Arc<dyn Run>>,
    pub(super) host_runs: Vec<Arc<dyn Run>>,
    pub(super) proxy: Option<RunningProxy>,
    pub(super) lease: Option<Arc<NetworkLease>>,
    /// Sandboxes holding a copy of the work dir, copied back at cleanup (kubernetes).
    pub(super) copies: Vec<super::copy::CopyBack>,
    /// At least one node step started (a copy back only follows a run that executed a node).
    pub(super) nodes_ran: bool,
}

/// Owns the run's sandbox resources. [`Guard::cleanup`] releases them (05 §8.1); dropping the guard without a
/// cleanup (a panic) force-removes the containers and releases the lease synchronously (§8.2).
pub(crate) struct Guard {
    pub(super) driver_name: String,
    pub(super) res: Arc<Mutex<Res>>,
    pub(super) done: bool,
}

impl Guard {
    pub(crate) fn new(driver_name: &str) -> Guard {
        Guard {
            driver_name: driver_name.to_owned(),
            res: Arc::new(Mutex::new(Res::default())),
            done: false,
        }
    }

    pub(super) fn lock(res: &Mutex<Res>) -> std::sync::MutexGuard<'_, Res> {
        res.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cleanup in the order of 05 §8.1, bounded to 30 s in total; returns the `sandbox_stopped` data.
    pub(crate) async fn cleanup(&mut self, em: &Emitter, force: CancellationToken) -> SandboxStopped {
        let started = Instant::now();
        let (containers, host_runs, proxy, lease, copies) = {
            let mut r = Self::lock(&self.res);
            let copies = if r.nodes_ran {
                std::mem::take(&mut r.copies)
            } else {
                r.copies.clear();
                Vec::new()
            };
            (
                std::mem::take(&mut r.containers),
                std::mem::take(&mut r.host_runs),
                r.proxy.take(),
                r.lease.take(),
                copies,
            )
        };
        let mut errors = Vec::new();
        // 05 §8.1 step 1: the copy back, before the sandboxes go; bounded on its own, outside the 30 s, and
        // skipped on a second signal.
        for cb in &copies {
            let r = tokio::select! {
                r = super::copy::copy_back(cb) => r,
                _ = force.cancelled() => Err("interrupted by a second signal".to_owned()),
            };
            match r {
                Ok(rep) => {
                    em.log(LogLevel::Info, &super::copy::describe(cb.run.id(), &rep));
                    if rep.skipped > 0 {
                        errors.push(format!(
                            "workspace copy back from {}: {} entries refused: {}",
                            cb.run.id(),
                            rep.skipped,
                            rep.skipped_named.join("; ")
                        ));
                    }
                }
                Err(e) => errors.push(format!("workspace copy back from {} failed: {e}", cb.run.id())),
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut removed = 0u64;
        let mut forced = false;
        for run in &containers {
            if forced {
                force_remove(run.clone()).await;
                continue;
            }
            let graceful = tokio::select! {
                r = tokio::time::timeout_at(deadline, run.cleanup()) => Some(r),
                _ = force.cancelled() => None,
            };
            let Some(graceful) = graceful else {
                // Second signal (05 §8.2): skip the graceful steps, still issue the force removal.
                forced = true;
                errors.push("cleanup interrupted by a second signal; containers force-removed".to_owned());
                force_remove(run.clone()).await;
                continue;
            };
            match graceful {
                Ok(rep) => {
                    if rep.container_removed {
                        removed += 1;
                    }
                    errors.extend(rep.errors);
                }
                Err(_) => {
                    errors.push(format!(
                        "cleanup of container {} did not finish within 30s",
                        run.id()
                    ));
                    run.force_cleanup_blocking();
                }
            }
        }
        for run in &host_runs {
            let _ = tokio::time::timeout_at(deadline, run.cleanup()).await;
        }
        let proxy_stopped = match proxy {
            Some(_) if forced => true,
            Some(p) => {
                let grace = deadline
                    .saturating_duration_since(tokio::time::Instant::now())
                    .min(Duration::from_secs(2));
                p.shutdown(grace).await;
                true
            }
            None => false,
        };
        let network_removed = match lease {
            Some(l) => {
                let errs = l.release();
                let ok = errs.is_empty();
                errors.extend(errs);
                ok
            }
            None => false,
        };
        for e in &errors {
            em.log(LogLevel::Warn, &format!("sandbox: cleanup: {e}"));
        }
        self.done = true;
        SandboxStopped {
            driver: self.driver_name.clone(),
            containers: removed,
            network_removed,
            proxy_stopped,
            // built images are the build cache, kept across runs (`iterion sandbox prune` removes them)
            images_removed: 0,
            duration_ms: ms(started.elapsed()),
            errors,
        }
    }
}

/// The synchronous force removal (5 s bound inside the driver), off the async threads.
pub(super) async fn force_remove(run: Arc<dyn Run>) {
    let _ = tokio::time::timeout(
        Duration::from_secs(6),
        tokio::task::spawn_blocking(move || run.force_cleanup_blocking()),
    )
    .await;
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut r = Self::lock(&self.res);
        for run in r.containers.drain(..) {
            run.force_cleanup_blocking();
        }
        r.proxy.take();
        if let Some(l) = r.lease.take() {
            l.release();
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Failures
