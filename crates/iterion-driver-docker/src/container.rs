//! The state a run handle shares with its execs, and how engine answers about the container read: gone,
//! stopped or running (03 §8.9 failure table). Below both `dexec` and `run`.

use crate::error::status_of;
use bollard::Docker;
use iterion_driver::{DriverKind, Error as DError};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// State shared by a run handle and its execs.
#[derive(Debug)]
pub(crate) struct RunInner {
    pub(crate) docker: Docker,
    pub(crate) socket: PathBuf,
    pub(crate) id: String,
    pub(crate) workspace: String,
    pub(crate) user: Option<String>,
    pub(crate) kind: DriverKind,
    pub(crate) closed: AtomicBool,
    finished: tokio::sync::Mutex<Vec<String>>,
    pub(crate) live: std::sync::atomic::AtomicUsize,
    /// The sandbox's own processes, which [`Run::kill_leftovers`] spares, and who records them.
    pub(crate) infrastructure: Mutex<Infrastructure>,
    /// The static program [`Run::kill_leftovers`] runs by its container path (the bound relay), when the
    /// sandbox has one; else the kill is a script of the image's `/bin/sh`.
    pub(crate) reaper: Option<String>,
    /// Watch the container while an exec streams: under gVisor (`runsc`, and other runtimes than the
    /// engine's default) a removed container's exec streams are never closed, so only the container's state
    /// says the exec is over.
    pub(crate) watch_gone: bool,
}

/// The processes present right after the start (init, the relay or `sleep`), and who records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Infrastructure {
    /// Not recorded: the start checks' listing failed (a warning of the start). Nothing is killed.
    Unknown,
    /// The start checks came from the cache: the first exec records them ahead of its command, and none has
    /// started yet.
    FirstExec,
    /// The first exec was given the listing and has not recorded it (yet, or it could not).
    Taken,
    /// Recorded.
    Recorded(Vec<u32>),
}

/// More processes than this right after the start means the listing cannot be trusted.
const MAX_INFRASTRUCTURE: usize = 16;

/// Container facts: `None` when the container no longer exists.
#[derive(Debug, Clone, Copy)]
pub(crate) struct State {
    pub(crate) running: bool,
    pub(crate) exit_code: Option<i64>,
    pub(crate) oom_killed: Option<bool>,
}

pub(crate) fn engine_error(e: bollard::errors::Error) -> DError {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, message } => DError::Engine {
            status: Some(status_code),
            message,
        },
        other => DError::Engine {
            status: None,
            message: other.to_string(),
        },
    }
}

/// Reads a container inspect answer: `None` when the container no longer exists (404).
///
/// Podman reports a stopped container's state as `stopped`, which the engine API's state enum does not know, so
/// the answer fails to decode with "unknown variant `stopped`": such an answer reads as a container that is
/// not running, with no exit details.
fn state_of(
    inspected: Result<bollard::models::ContainerInspectResponse, bollard::errors::Error>,
) -> Result<Option<State>, DError> {
    match inspected {
        Ok(c) => {
            let s = c.state.unwrap_or_default();
            Ok(Some(State {
                running: s.running == Some(true),
                exit_code: s.exit_code,
                oom_killed: s.oom_killed,
            }))
        }
        Err(e) if status_of(&e) == Some(404) || reports_podman_vanished(&e) => Ok(None),
        Err(e) if reports_podman_stopped(&e) => Ok(Some(State {
            running: false,
            exit_code: None,
            oom_killed: None,
        })),
        Err(e) => Err(engine_error(e)),
    }
}

/// Podman answers an inspect of a container being removed with 500 "… does not exist in database: no such
/// container" instead of 404.
fn reports_podman_vanished(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError { status_code: 500, message }
            if message.contains("no such container")
    )
}

/// The inspect answer failed to decode because of Podman's `stopped` state.
fn reports_podman_stopped(e: &bollard::errors::Error) -> bool {
    let message = match e {
        bollard::errors::Error::JsonDataError { message, .. } => message.clone(),
        bollard::errors::Error::JsonSerdeError { err } => err.to_string(),
        _ => return false,
    };
    message.contains("unknown variant `stopped`")
}

/// `SandboxGone` when the container no longer exists or is not running, else `otherwise`.
fn gone_verdict(state: Result<Option<State>, DError>, otherwise: DError) -> DError {
    match state {
        Ok(None) => DError::gone(),
        Ok(Some(s)) if !s.running => DError::SandboxGone {
            exit_code: s.exit_code,
            oom_killed: s.oom_killed,
        },
        _ => otherwise,
    }
}

/// What a failed exec inspect is while the container still runs: an exec session the engine no longer knows
/// (404, "no such exec session") is a sandbox that is going away; any other failure is an engine error.
fn exec_inspect_otherwise(e: &bollard::errors::Error) -> DError {
    if status_of(e) == Some(404) {
        DError::gone()
    } else {
        DError::Engine {
            status: None,
            message: e.to_string(),
        }
    }
}

impl RunInner {
    pub(crate) fn new(
        docker: Docker,
        socket: PathBuf,
        id: String,
        workspace: String,
        user: Option<String>,
        kind: DriverKind,
    ) -> Self {
        Self {
            docker,
            socket,
            id,
            workspace,
            user,
            kind,
            closed: AtomicBool::new(false),
            finished: tokio::sync::Mutex::new(Vec::new()),
            live: std::sync::atomic::AtomicUsize::new(0),
            infrastructure: Mutex::new(Infrastructure::Unknown),
            reaper: None,
            watch_gone: false,
        }
    }

    /// Watches the container under every exec ([`RunInner::watch_gone`]).
    pub(crate) fn with_gone_watch(mut self, watch: bool) -> Self {
        self.watch_gone = watch;
        self
    }

    /// Resolves once the container no longer runs (polled every 500 ms; an engine error counts as running,
    /// the exec's own end decides then).
    pub(crate) async fn until_gone(&self) {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            if matches!(
                self.state().await,
                Ok(None) | Ok(Some(State { running: false, .. }))
            ) {
                return;
            }
        }
    }

    /// Runs the leftover kill with `program` (a static program bound read-only at that container path).
    pub(crate) fn with_reaper(mut self, program: Option<String>) -> Self {
        self.reaper = program;
        self
    }

    fn infrastructure(&self) -> std::sync::MutexGuard<'_, Infrastructure> {
        self.infrastructure.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the processes running before any command of the workflow or the repository ran: the init and
    /// the entrypoint (relay or `sleep`), as [`crate::dexec::LIST_PIDS_SCRIPT`] prints them.
    /// [`Run::kill_leftovers`] spares them. A listing without pid 1, empty, or longer than a fresh sandbox can
    /// be is refused (nothing recorded, nothing killed later).
    pub(crate) fn record_infrastructure(&self, listing: &str) -> Result<Vec<u32>, DError> {
        let words: Vec<&str> = listing.split_whitespace().collect();
        let pids: Vec<u32> = words.iter().filter_map(|w| w.parse().ok()).collect();
        if pids.is_empty()
            || pids.len() != words.len()
            || pids.len() > MAX_INFRASTRUCTURE
            || !pids.contains(&1)
        {
            return Err(DError::Engine {
                status: None,
                message: format!("listing the processes of the sandbox gave {} pids", words.len()),
            });
        }
        *self.infrastructure() = Infrastructure::Recorded(pids.clone());
        Ok(pids)
    }

    /// Leaves the recording of the sandbox's own processes to the first exec (the start's checks came from
    /// the cache, so no exec ran at the start).
    pub(crate) fn defer_listing(&self) {
        *self.infrastructure() = Infrastructure::FirstExec;
    }

    /// Whether this exec is the first of a run whose start left the listing to it (once per run).
    pub(crate) fn take_listing(&self) -> bool {
        let mut i = self.infrastructure();
        let first = *i == Infrastructure::FirstExec;
        if first {
            *i = Infrastructure::Taken;
        }
        first
    }

    /// Gives the listing back when the exec that took it did not start: the next exec lists instead.
    pub(crate) fn untake_listing(&self) {
        let mut i = self.infrastructure();
        if *i == Infrastructure::Taken {
            *i = Infrastructure::FirstExec;
        }
    }

    /// A copy of the current state (for [`Run::kill_leftovers`]).
    pub(crate) fn infrastructure_now(&self) -> Infrastructure {
        self.infrastructure().clone()
    }

    pub(crate) fn check_open(&self) -> Result<(), DError> {
        if self.closed.load(Ordering::SeqCst) {
            Err(DError::gone())
        } else {
            Ok(())
        }
    }

    pub(crate) async fn state(&self) -> Result<Option<State>, DError> {
        state_of(self.docker.inspect_container(&self.id, None).await)
    }

    pub(crate) async fn gone_or(&self, otherwise: DError) -> DError {
        gone_verdict(self.state().await, otherwise)
    }

    /// Classifies a failed inspect of an exec whose output was read: the engine no longer knowing the exec
    /// session (404, which Podman answers while the container stops under an in-flight exec) means the sandbox
    /// is gone; anything else is `SandboxGone` only when the container is not running.
    pub(crate) async fn exec_inspect_error(&self, e: bollard::errors::Error) -> DError {
        gone_verdict(self.state().await, exec_inspect_otherwise(&e))
    }

    /// Classifies an exec create/start failure (03 §8.9 table).
    pub(crate) async fn exec_create_error(&self, e: bollard::errors::Error) -> DError {
        match status_of(&e) {
            Some(404) => DError::gone(),
            Some(409) => match self.state().await {
                Ok(Some(s)) => DError::SandboxGone {
                    exit_code: s.exit_code,
                    oom_killed: s.oom_killed,
                },
                _ => DError::gone(),
            },
            _ => {
                let msg = e.to_string();
                self.gone_or(DError::ExecStart { reason: msg }).await
            }
        }
    }

    /// Classifies a stream failure mid-exec: `SandboxGone` when the container is not running, else `Engine`.
    pub(crate) async fn stream_error(&self, message: String) -> DError {
        self.gone_or(DError::Engine {
            status: None,
            message,
        })
        .await
    }

    /// Counts an exec that started (see [`RunInner::exec_finished`]).
    pub(crate) fn exec_started(&self) {
        self.live.fetch_add(1, Ordering::SeqCst);
    }

    /// Records a finished exec's pid file; returns the pid files to remove once `batch` of them gathered.
    pub(crate) async fn exec_finished(&self, pid_file: String, batch: usize) -> Option<Vec<String>> {
        self.live.fetch_sub(1, Ordering::SeqCst);
        let mut f = self.finished.lock().await;
        f.push(pid_file);
        (f.len() >= batch).then(|| std::mem::take(&mut *f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> Result<Option<State>, DError> {
        Ok(Some(State {
            running: true,
            exit_code: None,
            oom_killed: None,
        }))
    }

    fn server_error(status_code: u16, message: &str) -> bollard::errors::Error {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message: message.into(),
        }
    }

    #[test]
    fn podman_stopped_state_reads_as_a_gone_sandbox() {
        // The answer Podman gives for a container that stopped, decoded as the engine client decodes it.
        let body = r#"{"Id":"abc","State":{"Status":"stopped","Running":false,"ExitCode":137}}"#;
        let decode = serde_json::from_str::<bollard::models::ContainerInspectResponse>(body)
            .expect_err("the engine API state enum has no `stopped`");
        let e = bollard::errors::Error::JsonDataError {
            message: decode.to_string(),
            column: decode.column(),
        };
        let state = state_of(Err(e)).expect("a stopped container, not an engine error");
        let s = state.expect("the container exists");
        assert!(!s.running);
        let verdict = gone_verdict(Ok(Some(s)), DError::ExecStart { reason: "x".into() });
        assert!(verdict.is_sandbox_gone(), "{verdict:?}");

        // Other decode failures stay engine errors.
        let other = bollard::errors::Error::JsonDataError {
            message: "unknown variant `paused2`".into(),
            column: 1,
        };
        assert!(matches!(state_of(Err(other)), Err(DError::Engine { .. })));
        assert!(matches!(
            state_of(Err(server_error(404, "no such container"))),
            Ok(None)
        ));
        // Podman, while the container is being removed under an in-flight exec.
        let vanished = server_error(
            500,
            "container 2e1a2bfee074 does not exist in database: no such container",
        );
        assert!(matches!(state_of(Err(vanished)), Ok(None)));
        assert!(matches!(
            state_of(Err(server_error(500, "internal error"))),
            Err(DError::Engine { .. })
        ));
    }

    #[test]
    fn vanished_exec_session_reads_as_a_gone_sandbox() {
        // Podman answers 404 to an exec inspect while the container stops under the exec, before its state
        // says so.
        let e = server_error(404, "no such exec session: 1f2e");
        let verdict = gone_verdict(running(), exec_inspect_otherwise(&e));
        assert!(verdict.is_sandbox_gone(), "{verdict:?}");

        let e = server_error(500, "internal error");
        let verdict = gone_verdict(running(), exec_inspect_otherwise(&e));
        assert!(
            matches!(&verdict, DError::Engine { status: None, message } if message.contains("internal error")),
            "{verdict:?}"
        );
        let stopped = Ok(Some(State {
            running: false,
            exit_code: Some(0),
            oom_killed: Some(false),
        }));
        let verdict = gone_verdict(stopped, exec_inspect_otherwise(&e));
        assert!(
            matches!(
                verdict,
                DError::SandboxGone {
                    exit_code: Some(0),
                    ..
                }
            ),
            "{verdict:?}"
        );
    }
}
