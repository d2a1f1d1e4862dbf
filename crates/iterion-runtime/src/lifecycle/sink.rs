//! Where the lifecycle and the executor report: the run's event log, `run.log`, `run.json` checkpoints and
//! artifacts, plus the caller's [`Observer`].
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

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

/// Where the emitter appends events: the run's [`crate::store::EventLog`], or a wrapper around it.
pub(crate) trait Append: Send + Sync {
    /// Appends one event; `seq` advances only when the line was written.
    fn append(&self, event: &Event) -> crate::error::Result<Appended>;
    /// The `seq` the next event gets.
    fn next_seq(&self) -> u64;
}

impl Append for crate::store::EventLog {
    fn append(&self, event: &Event) -> crate::error::Result<Appended> {
        crate::store::EventLog::append(self, event)
    }
    fn next_seq(&self) -> u64 {
        crate::store::EventLog::next_seq(self)
    }
}

/// An error with its causes (`cannot append to …: No space left on device (os error 28)`).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !out.ends_with(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = c.source();
    }
    out
}

/// Writes lost so far are listed up to this many (the count goes on).
const LOST_LISTED: usize = 16;

/// The writes to the run store that failed. The first one aborts the run: a record with a hole must not end
/// as a clean `finished` (the lifecycle turns it into `STORE_WRITE_FAILED`).
#[derive(Debug, Default)]
struct StoreHealth {
    lost: Mutex<(Vec<String>, usize)>,
    run_log_failed: std::sync::atomic::AtomicBool,
    abort: CancellationToken,
    /// Also cancelled, synchronously, by the first failed write (the executor's token).
    also: Mutex<Vec<CancellationToken>>,
}

/// What could not be written to the run store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreFailure {
    /// The first [`LOST_LISTED`] writes that failed, in order.
    pub(crate) lost: Vec<String>,
    /// How many failed in all.
    pub(crate) count: usize,
}

impl StoreFailure {
    /// One sentence for `run_failed`, `run.json` and the terminal.
    pub(crate) fn message(&self) -> String {
        let mut m = format!(
            "the run store could not be written, so the record of this run is incomplete: {}",
            self.lost.join("; ")
        );
        if self.count > self.lost.len() {
            m.push_str(&format!(" (and {} more)", self.count - self.lost.len()));
        }
        m
    }
}

/// The run's reporting handle, shared by the lifecycle, the proxy callback and the executor.
#[derive(Clone)]
pub(crate) struct Emitter {
    run: Arc<Mutex<OpenRun>>,
    events: Arc<dyn Append>,
    log: Arc<crate::store::RunLog>,
    observer: Arc<dyn Observer>,
    health: Arc<StoreHealth>,
}

impl std::fmt::Debug for Emitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emitter").finish_non_exhaustive()
    }
}

impl Emitter {
    /// An emitter appending to the run's own event log.
    pub(crate) fn new(run: OpenRun, observer: Arc<dyn Observer>) -> Emitter {
        Emitter::with_events(run, observer, |log| log)
    }

    /// An emitter appending through `events`, given the run's own event log.
    pub(crate) fn with_events(
        run: OpenRun,
        observer: Arc<dyn Observer>,
        events: impl FnOnce(Arc<dyn Append>) -> Arc<dyn Append>,
    ) -> Emitter {
        let own: Arc<dyn Append> = run.events().clone();
        let log = run.log().clone();
        Emitter {
            run: Arc::new(Mutex::new(run)),
            events: events(own),
            log,
            observer,
            health: Arc::default(),
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
                    self.store_failed(format!(
                        "event {} (seq {}) may not be on disk: fsync failed: {e}",
                        event.event_type(),
                        appended.seq
                    ));
                }
                self.observer.event(&appended, &event);
            }
            // A failed write does not take a seq: the next event written gets it, so the hole is named by the
            // last event before it.
            Err(e) => {
                let place = match self.events.next_seq() {
                    0 => "as the first event".to_owned(),
                    n => format!("after seq {}", n - 1),
                };
                self.store_failed(format!(
                    "event {} ({place}) was not written: {}",
                    event.event_type(),
                    chain(&e)
                ))
            }
        }
    }

    pub(crate) fn log(&self, level: LogLevel, message: &str) {
        match self.log.write(level, message) {
            Ok(line) => self.observer.log(&line),
            Err(e) => {
                self.observer.log(&format!("{} {message}", level.label()));
                // Reported once: the report itself would fail the same way.
                if !self
                    .health
                    .run_log_failed
                    .swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    let what = format!("run.log was not written: {}", chain(&e));
                    self.record(&what);
                    self.observer.log(&format!(
                        "{} the run store could not be written: {what}",
                        LogLevel::Error.label()
                    ));
                }
            }
        }
    }

    /// Records a failed write to the store, reports it and aborts the run.
    pub(crate) fn store_failed(&self, what: String) {
        self.record(&what);
        self.log(
            LogLevel::Error,
            &format!("the run store could not be written: {what}"),
        );
    }

    fn record(&self, what: &str) {
        {
            let mut lost = self.health.lost.lock().unwrap_or_else(|p| p.into_inner());
            if lost.0.len() < LOST_LISTED {
                lost.0.push(what.to_owned());
            }
            lost.1 += 1;
        }
        self.health.abort.cancel();
        for t in self.health.also.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            t.cancel();
        }
    }

    /// Cancels `token` on the first failed write to the store (at once when one already failed).
    pub(crate) fn abort_also(&self, token: CancellationToken) {
        if self.health.abort.is_cancelled() {
            token.cancel();
        }
        self.health
            .also
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(token);
    }

    /// What could not be written so far, if anything.
    pub(crate) fn store_failure(&self) -> Option<StoreFailure> {
        let lost = self.health.lost.lock().unwrap_or_else(|p| p.into_inner());
        (lost.1 > 0).then(|| StoreFailure {
            lost: lost.0.clone(),
            count: lost.1,
        })
    }

    /// Cancelled by the first failed write to the store.
    pub(crate) fn store_abort(&self) -> CancellationToken {
        self.health.abort.clone()
    }

    /// Applies a change to `run.json`; a failure is a failed write to the store (the run is aborted).
    pub(crate) fn update(&self, f: impl FnOnce(&mut crate::store::RunDocument)) {
        let r = self.run().update(f);
        if let Err(e) = r {
            self.store_failed(format!("run.json was not written: {}", chain(&e)));
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
            self.store_failed(format!(
                "the checkpoint in run.json was not written: {}",
                chain(&e)
            ));
        }
    }

    fn write_artifact(&self, node_id: &str, name: &str, version: u64, data: &Value) -> Result<(), String> {
        let r = self.run().write_artifact(node_id, version, data.clone());
        r.map(|_| ()).map_err(|e| {
            self.store_failed(format!(
                "artifact {name} v{version} of node {node_id} was not written: {}",
                chain(&e)
            ));
            e.to_string()
        })
    }

    fn write_interaction(&self, id: &str, record: &Value) -> Result<(), String> {
        let r = self.run().write_interaction(id, record);
        r.map(|_| ()).map_err(|e| {
            self.store_failed(format!(
                "the interaction record {id} was not written: {}",
                chain(&e)
            ));
            e.to_string()
        })
    }

    fn read_interaction(&self, id: &str) -> Option<Value> {
        self.run().read_interaction(id)
    }

    fn read_session(&self, node_id: &str) -> Option<Value> {
        self.run().read_session(node_id)
    }

    fn write_session(&self, node_id: &str, snapshot: &Value) -> Result<(), String> {
        let r = self.run().write_session(node_id, snapshot);
        r.map(|_| ()).map_err(|e| {
            self.store_failed(format!(
                "the session snapshot of node {node_id} was not written: {}",
                chain(&e)
            ));
            e.to_string()
        })
    }
}
