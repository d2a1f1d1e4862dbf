//! A run opened for writing: lock held, document, event log, human log, artifacts.
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use iterion_boundary::fs::{Dir, temp_prefix};

use super::document::{Checkpoint, MAX_RUN_JSON, Owner, RunDocument};
use super::event_log::EventLog;
use super::ids::validate_component;
use super::integrity::{Integrity, RecordBinding, RecordKey};
use super::lock::RunLock;
use super::names;
use super::run_log::{LogClock, RunLog};
use super::transition::Transition;
use crate::error::{Error, Result};
use crate::time::now_timestamp;

/// A published output (`artifacts/<node_id>/<v>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    /// Run id.
    pub run_id: String,
    /// Node that published it.
    pub node_id: String,
    /// Version, from 0.
    pub version: u64,
    /// The output.
    pub data: Value,
    /// RFC 3339 UTC.
    pub written_at: String,
}

/// A run owned by this process: its `.lock` is held until the value is dropped. Every file of the run is
/// reached through `handle`, the run directory opened once: a node that renames the run directory or a parent
/// and plants a link in its place does not redirect a later write.
#[derive(Debug)]
pub struct OpenRun {
    handle: Dir,
    dir: PathBuf,
    id: String,
    document: RunDocument,
    events: Arc<EventLog>,
    log: Arc<RunLog>,
    lock: RunLock,
    key: Option<RecordKey>,
    /// Whether writes carry an integrity tag: a new run, or a record whose tag matched when opened (an
    /// unsigned record stays unsigned until [`OpenRun::adopt_unsigned`]).
    sign: bool,
}

impl OpenRun {
    pub(crate) fn open_new(
        handle: Dir,
        id: &str,
        owner: &Owner,
        document: RunDocument,
        clock: LogClock,
        key: Option<RecordKey>,
    ) -> Result<OpenRun> {
        let dir = handle.path().to_path_buf();
        let lock = RunLock::try_acquire_in(&handle, names::LOCK, id, owner)?;
        let log = Arc::new(RunLog::open_in(&handle, names::RUN_LOG, clock)?);
        let events = Arc::new(EventLog::open_in(&handle, names::EVENTS, id)?);
        let binding = RecordBinding {
            run_id: id,
            dir: &dir,
        };
        document.save_in(&handle, key.as_ref().map(|k| (k, binding)))?;
        Ok(OpenRun {
            handle,
            dir,
            id: id.to_owned(),
            document,
            events,
            log,
            lock,
            sign: key.is_some(),
            key,
        })
    }

    /// Opens a run for writing. With a key, a record whose tag does not match is refused
    /// ([`Error::RunRecordTampered`]) before anything is written, so no later write can launder it.
    pub(crate) fn open_existing(
        handle: Dir,
        id: &str,
        owner: &Owner,
        clock: LogClock,
        key: Option<RecordKey>,
    ) -> Result<OpenRun> {
        let dir = handle.path().to_path_buf();
        let lock = RunLock::try_acquire_in(&handle, names::LOCK, id, owner)?;
        let run_json = dir.join(names::RUN_JSON);
        let bytes = handle.read(names::RUN_JSON, MAX_RUN_JSON)?;
        let binding = RecordBinding {
            run_id: id,
            dir: &dir,
        };
        let sign = match key.as_ref().map(|k| k.check(&bytes, binding)) {
            None | Some(Integrity::Unsigned) => false,
            Some(Integrity::Valid) => true,
            Some(Integrity::Mismatch) => {
                return Err(Error::RunRecordTampered {
                    run_id: id.to_owned(),
                    path: run_json,
                    unsigned: false,
                });
            }
        };
        let document = RunDocument::decode(&bytes, &run_json)?;
        remove_stale_temp_files(&handle);
        let log = Arc::new(RunLog::open_in(&handle, names::RUN_LOG, clock)?);
        let events = Arc::new(EventLog::open_in(&handle, names::EVENTS, id)?);
        Ok(OpenRun {
            handle,
            dir,
            id: id.to_owned(),
            document,
            events,
            log,
            lock,
            key,
            sign,
        })
    }

    /// Signs this record from its next write on, when the store has a key: the operator accepted an unsigned
    /// record (`resume --force`).
    pub fn adopt_unsigned(&mut self) {
        self.sign = self.key.is_some();
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The run id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The current document (as last written).
    pub fn document(&self) -> &RunDocument {
        &self.document
    }

    /// The event log, shareable with other tasks.
    pub fn events(&self) -> &Arc<EventLog> {
        &self.events
    }

    /// The human log, shareable with other tasks.
    pub fn log(&self) -> &Arc<RunLog> {
        &self.log
    }

    /// The held lock.
    pub fn lock(&self) -> &RunLock {
        &self.lock
    }

    /// Changes the document with `f`, stamps `updated_at` and writes it atomically. On error the in-memory
    /// document is unchanged. A change that leaves the document as it was writes nothing (a rewrite costs two
    /// fsyncs and would only move `updated_at`).
    pub fn update(&mut self, f: impl FnOnce(&mut RunDocument)) -> Result<()> {
        let mut next = self.document.clone();
        f(&mut next);
        if next == self.document {
            return Ok(());
        }
        next.updated_at = now_timestamp();
        self.commit(next)
    }

    /// Applies a status transition (status, failure code, error and checkpoint in one atomic write).
    pub fn transition(&mut self, transition: Transition) -> Result<()> {
        let mut next = self.document.clone();
        next.apply(transition, &now_timestamp())?;
        self.commit(next)
    }

    /// Records a checkpoint (after every successful node).
    pub fn save_checkpoint(&mut self, checkpoint: Checkpoint) -> Result<()> {
        self.update(|d| d.checkpoint = Some(checkpoint))
    }

    fn commit(&mut self, next: RunDocument) -> Result<()> {
        let binding = RecordBinding {
            run_id: &self.id,
            dir: &self.dir,
        };
        let key = if self.sign { self.key.as_ref() } else { None };
        next.save_in(&self.handle, key.map(|k| (k, binding)))?;
        self.document = next;
        Ok(())
    }

    /// Writes `artifacts/<node_id>/<version>.json` atomically (pretty-printed) and returns its path. An unsafe
    /// node id writes nothing ([`Error::UnsafePathComponent`]).
    pub fn write_artifact(&self, node_id: &str, version: u64, data: Value) -> Result<PathBuf> {
        let node = validate_component("node id", node_id)?;
        let node_dir = self.handle.create_dir(names::ARTIFACTS)?.create_dir(node)?;
        let name = format!("{version}.json");
        let record = ArtifactRecord {
            run_id: self.id.clone(),
            node_id: node_id.to_owned(),
            version,
            data,
            written_at: now_timestamp(),
        };
        node_dir.write_atomic(&name, pretty(&record, "artifact")?.as_bytes())?;
        Ok(node_dir.path().join(name))
    }

    /// Reads `artifacts/<node_id>/<version>.json` (never through a link, at most the size of a `run.json`).
    pub fn read_artifact(&self, node_id: &str, version: u64) -> Result<ArtifactRecord> {
        let node = validate_component("node id", node_id)?;
        let node_dir = self.handle.open_dir(names::ARTIFACTS)?.open_dir(node)?;
        let name = format!("{version}.json");
        let bytes = node_dir.read(&name, MAX_RUN_JSON)?;
        let path = node_dir.path().join(name);
        serde_json::from_slice(&bytes).map_err(|source| Error::Decode { path, source })
    }

    /// Writes `sessions/<node_id>.json` (the latest claw session snapshot of that node) atomically.
    pub fn write_session(&self, node_id: &str, snapshot: &Value) -> Result<PathBuf> {
        let name = format!("{}.json", validate_component("node id", node_id)?);
        self.write_record(names::SESSIONS, &name, pretty(snapshot, "session snapshot")?)
    }

    /// Writes `interactions/<id>.json` (mode 0600), the record of a human pause and, once answered, its answers.
    pub fn write_interaction(&self, id: &str, record: &Value) -> Result<PathBuf> {
        let name = format!("{}.json", validate_component("interaction id", id)?);
        self.write_record(names::INTERACTIONS, &name, pretty(record, "interaction record")?)
    }

    fn write_record(&self, sub: &str, name: &str, text: String) -> Result<PathBuf> {
        let dir = self.handle.create_dir(sub)?;
        dir.write_atomic(name, text.as_bytes())?;
        Ok(dir.path().join(name))
    }

    /// Reads `interactions/<id>.json` (at most 4 MiB, never through a symlink); `None` when absent or unreadable.
    pub fn read_interaction(&self, id: &str) -> Option<Value> {
        let name = format!("{}.json", validate_component("interaction id", id).ok()?);
        self.read_json(names::INTERACTIONS, &name)
    }

    /// Reads `sessions/<node id>.json`, the latest session snapshot of a claw node (at most 4 MiB, the envelope's
    /// line cap; never through a symlink); `None` when absent or unreadable.
    pub fn read_session(&self, node_id: &str) -> Option<Value> {
        let name = format!("{}.json", validate_component("node id", node_id).ok()?);
        self.read_json(names::SESSIONS, &name)
    }

    /// A JSON file of a subdirectory of the run directory, at most 4 MiB, never through a symlink.
    fn read_json(&self, sub: &str, name: &str) -> Option<Value> {
        let bytes = self.handle.open_dir(sub).ok()?.read(name, 4 << 20).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// `artifact_files/`, created (mode 0700) on first use; mounted at `/iterion/artifact-files`.
    pub fn artifact_files_dir(&self) -> Result<PathBuf> {
        Ok(self
            .handle
            .create_dir(names::ARTIFACT_FILES)?
            .path()
            .to_path_buf())
    }

    /// `net/`, the directory of the relay placement's proxy socket (not created here).
    pub fn net_dir(&self) -> PathBuf {
        self.dir.join(names::NET)
    }
}

fn pretty<T: Serialize>(value: &T, what: &'static str) -> Result<String> {
    let mut s = serde_json::to_string_pretty(value).map_err(|source| Error::Encode { what, source })?;
    s.push('\n');
    Ok(s)
}

/// Removes `.run.json.tmp-*` files left by a process that died before its rename (best effort).
fn remove_stale_temp_files(dir: &Dir) {
    let prefix = temp_prefix(names::RUN_JSON);
    for name in dir.entries().unwrap_or_default() {
        if name.starts_with(&prefix) {
            let _ = dir.remove_file(&name);
        }
    }
}
