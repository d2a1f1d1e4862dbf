//! Starts that never returned (07 §11): a start whose future is dropped — the run was cancelled during a setup
//! phase, or the runtime's start bound passed — still removes what it created.
//!
//! [`Created`] records, as a start goes, whether the NetworkPolicy and the pod exist. Dropped while armed, it
//! removes them on a thread of its own (with a runtime and a client of its own, since the caller's runtime may
//! be shutting down): it waits until the pod's `DELETE` is answered, then leaves the rest (wait until the pod is
//! gone, then the NetworkPolicy) to that thread. [`Pending::wait`] — the release hook of the run's network
//! lease, which the runtime calls at cleanup — waits for those removals, so that the process does not exit
//! before the NetworkPolicy is gone.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::ClusterAccess;
use crate::kapi::Kapi;

/// How long a drop waits for the pod's `DELETE` to be answered.
const DELETE_ISSUED_BOUND: Duration = Duration::from_secs(5);

/// The removals of abandoned starts still running, and their errors.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    state: Mutex<PendingState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct PendingState {
    running: usize,
    errors: Vec<String>,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, PendingState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn begin(&self) {
        self.lock().running += 1;
    }

    fn end(&self, errors: Vec<String>) {
        let mut st = self.lock();
        st.running = st.running.saturating_sub(1);
        st.errors.extend(errors);
        self.changed.notify_all();
    }

    /// Waits (blocking, at most `bound`) until every removal has ended; returns their errors, and one more when
    /// some are still running at the bound.
    pub(crate) fn wait(&self, bound: Duration) -> Vec<String> {
        let deadline = Instant::now() + bound;
        let mut st = self.lock();
        while st.running > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = self
                .changed
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let mut errors = std::mem::take(&mut st.errors);
        if st.running > 0 {
            errors.push(format!(
                "{} pod(s) of an interrupted start were still being removed after {}; the reaper removes them later",
                st.running,
                iterion_driver::fmt_duration(bound)
            ));
        }
        errors
    }
}

/// What a start has created so far; removes it when dropped while armed.
pub(crate) struct Created {
    access: ClusterAccess,
    api: Kapi,
    name: String,
    pending: Arc<Pending>,
    /// The NetworkPolicy exists.
    pub policy: bool,
    /// The pod exists.
    pub pod: bool,
    armed: bool,
}

impl Created {
    /// Nothing created yet, for the object `name`.
    pub(crate) fn new(access: ClusterAccess, api: Kapi, name: &str, pending: Arc<Pending>) -> Created {
        Created {
            access,
            api,
            name: name.to_string(),
            pending,
            policy: false,
            pod: false,
            armed: true,
        }
    }

    /// The start returned (with its sandbox, or after removing what it created itself): nothing to do on drop.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        if !self.armed || !(self.pod || self.policy) {
            return;
        }
        let (issued_tx, issued_rx) = std::sync::mpsc::channel::<()>();
        let access = self.access.clone();
        let mut api = self.api.clone();
        let name = self.name.clone();
        let (pod, policy) = (self.pod, self.policy);
        let pending = self.pending.clone();
        pending.begin();
        let spawned = std::thread::Builder::new()
            .name("iterion-k8s-abandoned-start".into())
            .spawn(move || {
                let errors = remove(&access, &mut api, &name, pod, policy, issued_tx);
                pending.end(errors);
            });
        match spawned {
            Ok(_) => {
                let _ = issued_rx.recv_timeout(DELETE_ISSUED_BOUND);
            }
            Err(e) => self.pending.end(vec![format!(
                "removing pod {} of an interrupted start: no thread: {e}",
                self.name
            )]),
        }
    }
}

/// The removal itself, on its own runtime and client: the pod (then `issued`), wait until it is gone, then the
/// NetworkPolicy.
fn remove(
    access: &ClusterAccess,
    api: &mut Kapi,
    name: &str,
    pod: bool,
    policy: bool,
    issued: std::sync::mpsc::Sender<()>,
) -> Vec<String> {
    let what = format!("removing pod {name} of an interrupted start");
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return vec![format!("{what}: no runtime: {e}")],
    };
    rt.block_on(async move {
        match access.driver_client(api.request_timeout) {
            Ok(c) => api.client = c,
            Err(e) => return vec![format!("{what}: {e}")],
        }
        if !pod {
            let _ = issued.send(());
            return match api.delete_policy(name).await {
                Ok(()) => Vec::new(),
                Err(f) => vec![f.message],
            };
        }
        let (_, errors) = api
            .teardown_signalled(name, policy, || {
                let _ = issued.send(());
            })
            .await;
        errors
    })
}
