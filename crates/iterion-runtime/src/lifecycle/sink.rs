//! Where the lifecycle and the executor report: the run's event log, `run.log`, `run.json` checkpoints and
//! artifacts, plus the caller's [`Observer`].
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::events::Event;
use crate::exec::RunSink;
use crate::store::{Appended, Checkpoint, LogLevel, OpenRun};

/// Receives what a run appends, as it happens (the CLI prints `--json` lines and node lines from it).
pub trait Observer: Send + Sync {
    /// An event was appended to `events.jsonl`; `appended.line` is the stored line.
    fn event(&self, appended: &Appended, event: &Event) {
        let _ = (appended, event);
    }
    /// A line was written to `run.log` (the CLI also writes it to stderr).
    fn log(&self, line: &str) {
        let _ = line;
    }
}

/// An observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl Observer for NoObserver {}

/// The run's reporting handle, shared by the lifecycle, the proxy callback and the executor.
#[derive(Clone)]
pub(crate) struct Emitter {
    run: Arc<Mutex<OpenRun>>,
    events: Arc<crate::store::EventLog>,
    log: Arc<crate::store::RunLog>,
    observer: Arc<dyn Observer>,
}

impl std::fmt::Debug for Emitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emitter").finish_non_exhaustive()
    }
}

impl Emitter {
    pub(crate) fn new(run: OpenRun, observer: Arc<dyn Observer>) -> Emitter {
        let events = run.events().clone();
        let log = run.log().clone();
        Emitter {
            run: Arc::new(Mutex::new(run)),
            events,
            log,
            observer,
        }
    }

    /// The open run (lock it briefly; never across an await).
    pub(crate) fn run(&self) -> std::sync::MutexGuard<'_, OpenRun> {
        self.run.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn emit(&self, event: impl Into<Event>) {
        let event = event.into();
        match self.events.append(&event) {
            Ok(appended) => {
                if let Some(e) = &appended.sync_error {
                    self.log(LogLevel::Warn, &format!("cannot fsync the event log: {e}"));
                }
                self.observer.event(&appended, &event);
            }
            Err(e) => self.log(
                LogLevel::Warn,
                &format!("cannot append event {}: {e}", event.event_type()),
            ),
        }
    }

    pub(crate) fn log(&self, level: LogLevel, message: &str) {
        match self.log.write(level, message) {
            Ok(line) => self.observer.log(&line),
            Err(_) => self.observer.log(&format!("{} {message}", level.label())),
        }
    }

    /// Applies a change to `run.json`; a failure is logged (the run goes on).
    pub(crate) fn update(&self, f: impl FnOnce(&mut crate::store::RunDocument)) {
        let r = self.run().update(f);
        if let Err(e) = r {
            self.log(LogLevel::Error, &format!("cannot write run.json: {e}"));
        }
    }
}

impl RunSink for Emitter {
    fn emit(&self, event: Event) {
        Emitter::emit(self, event)
    }

    fn log(&self, level: LogLevel, message: &str) {
        Emitter::log(self, level, message)
    }

    fn checkpoint(&self, checkpoint: &Checkpoint) {
        let r = self.run().save_checkpoint(checkpoint.clone());
        if let Err(e) = r {
            self.log(LogLevel::Error, &format!("cannot write the checkpoint: {e}"));
        }
    }

    fn write_artifact(&self, node_id: &str, _name: &str, version: u64, data: &Value) -> Result<(), String> {
        self.run()
            .write_artifact(node_id, version, data.clone())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}
