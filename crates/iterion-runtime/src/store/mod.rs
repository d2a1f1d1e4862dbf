//! The run store (section 1): locations, layout, run documents, event log, human log, locks, artifacts.
//!
//! ```
//! use iterion_runtime::store::{Store, NewRun, Owner, LaunchInputs};
//! use iterion_runtime::events::{RunStarted, now_timestamp};
//! use std::collections::BTreeMap;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::create(dir.path()).unwrap();
//! let id = iterion_runtime::store::RunId::parse("demo-1").unwrap();
//! let run = store
//!     .create_run(&id, NewRun {
//!         id: id.to_string(),
//!         workflow_name: "demo".into(),
//!         file_path: "/src/app/demo.bot".into(),
//!         workflow_bytes: b"workflow demo {}".to_vec(),
//!         inputs: LaunchInputs::default(),
//!         work_dir: "/src/app".into(),
//!         env: BTreeMap::new(),
//!         iterion_version: "0.1.0".into(),
//!         owner: Owner::current(),
//!         now: now_timestamp(),
//!     })
//!     .unwrap();
//! let appended = run.events().append(&RunStarted {
//!     workflow: "demo".into(), file: "/src/app/demo.bot".into(), sandboxed: false, driver: None,
//! }.into()).unwrap();
//! assert_eq!(appended.seq, 0);
//! ```
mod document;
mod event_log;
mod files;
mod ids;
mod integrity;
mod location;
mod lock;
pub mod names;
mod run;
mod run_log;
mod transition;
mod words;

pub use document::{
    AttachmentRecord, Checkpoint, ContainerRecord, EnvLayers, FORMAT_VERSION, LaunchInputs, MAX_RUN_JSON,
    NetworkRecord, NewRun, NodePlacementRecord, OperatorEnvEntry, Owner, RunDocument, SandboxRecord,
    SandboxRequested, SkippedScope, launch_env, read_run_json,
};
pub use event_log::{Appended, EventLines, EventLog, EventTail, event_lines, read_events};
pub(crate) use files::create_private_dir;
pub use files::write_atomic;
pub use ids::{RunId, friendly_name, sha256_hex, validate_component};
pub use integrity::{Integrity, KEY_FILE, RecordBinding, RecordKey};
pub use location::{StoreDirRequest, absolutize, data_dir, project_key, store_dir, workflow_project_dir};
pub use lock::{RunLock, host_name, process_start_time};
pub use run::{ArtifactRecord, OpenRun};
pub use run_log::{LogClock, LogLevel, RunLog, format_log_line};
pub use transition::Transition;

use std::io::Write;
use std::path::{Path, PathBuf};

use iterion_boundary::fs::{Dir, entry_exists, is_not_found};

use crate::error::{Error, Result};
use crate::events::EventRecord;

/// A run store dir: `runs/` and `worktrees/`.
#[derive(Debug, Clone, PartialEq)]
pub struct Store {
    root: PathBuf,
    clock: LogClock,
    key: Option<RecordKey>,
}

/// One entry of [`Store::list_runs`].
#[derive(Debug)]
pub struct RunEntry {
    /// Directory name under `runs/`.
    pub id: String,
    /// The decoded `run.json`, or why it could not be read.
    pub document: Result<RunDocument>,
}

impl Store {
    /// A store at `root` without touching the file system (for reading).
    pub fn at(root: impl Into<PathBuf>) -> Store {
        Store {
            root: root.into(),
            clock: LogClock::system(),
            key: None,
        }
    }

    /// Signs the `run.json` of runs written through this value with `key`, and refuses to open for writing a
    /// record whose tag does not match ([`RecordKey`]). Without a key records are written unsigned.
    pub fn with_record_key(mut self, key: Option<RecordKey>) -> Store {
        self.key = key;
        self
    }

    /// Checks a run's `run.json` against the key before anything acts on it: `Ok` when its tag matches, or
    /// when it has none and `accept_unsigned` is set, or when this store has no key;
    /// [`Error::RunRecordTampered`] otherwise.
    pub fn check_record(&self, run_id: &str, accept_unsigned: bool) -> Result<()> {
        let Some(key) = &self.key else { return Ok(()) };
        let dir = self.existing_run_dir(run_id)?;
        let path = dir.join(names::RUN_JSON);
        let bytes = read_run_json(&path)?;
        let binding = RecordBinding { run_id, dir: &dir };
        let unsigned = match key.check(&bytes, binding) {
            Integrity::Valid => return Ok(()),
            Integrity::Unsigned if accept_unsigned => return Ok(()),
            Integrity::Unsigned => true,
            Integrity::Mismatch => false,
        };
        Err(Error::RunRecordTampered {
            run_id: run_id.to_owned(),
            path,
            unsigned,
        })
    }

    /// Uses `clock` for the `run.log` timestamps of runs opened from this value (default: local time).
    pub fn with_log_clock(mut self, clock: LogClock) -> Store {
        self.clock = clock;
        self
    }

    /// Opens the store at `root` for writing: creates `runs/` (mode 0700) and, when absent, `.gitignore`
    /// containing `**` (mode 0600).
    pub fn create(root: impl Into<PathBuf>) -> Result<Store> {
        let store = Store::at(root);
        let root = Dir::create_private(&store.root)?;
        root.create_dir("runs")?;
        if let Some(mut f) = root.create_new(".gitignore")? {
            let gi = store.root.join(".gitignore");
            f.write_all(b"**\n").map_err(|e| Error::io("write", &gi, e))?;
        }
        Ok(store)
    }

    /// The store dir.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<store>/runs`.
    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// `<store>/worktrees/<run_id>`.
    pub fn worktree_dir(&self, run_id: &str) -> Result<PathBuf> {
        Ok(self
            .root
            .join("worktrees")
            .join(validate_component("run id", run_id)?))
    }

    /// `<store>/runs/<run_id>` (the id is checked as a path component).
    pub fn run_dir(&self, run_id: &str) -> Result<PathBuf> {
        Ok(self.runs_dir().join(validate_component("run id", run_id)?))
    }

    /// Creates `runs/<id>/`, takes its lock, opens `run.log` and `events.jsonl` and writes `run.json` (status
    /// `running`). An existing run dir → [`Error::RunExists`].
    pub fn create_run(&self, id: &RunId, new: NewRun) -> Result<OpenRun> {
        let name = validate_component("run id", id.as_str())?;
        let runs = Dir::create_private(&self.root)?.create_dir("runs")?;
        let Some(dir) = runs.create_new_dir(name)? else {
            return Err(Error::RunExists {
                run_id: id.to_string(),
                store: self.root.clone(),
            });
        };
        let owner = new.owner.clone();
        let document = RunDocument::new(NewRun {
            id: id.to_string(),
            ..new
        });
        OpenRun::open_new(
            dir,
            id.as_str(),
            &owner,
            document,
            self.clock.clone(),
            self.key.clone(),
        )
    }

    /// Opens an existing run for writing (resume, crash recovery): takes its lock, reads `run.json` and opens
    /// the logs for appending. Unknown run → [`Error::RunNotFound`]; held lock → [`Error::Locked`].
    pub fn open_run(&self, run_id: &str, owner: &Owner) -> Result<OpenRun> {
        self.existing_run_dir(run_id)?;
        let dir = Dir::open_root(&self.root)?.open_dir("runs")?.open_dir(run_id)?;
        OpenRun::open_existing(dir, run_id, owner, self.clock.clone(), self.key.clone())
    }

    fn existing_run_dir(&self, run_id: &str) -> Result<PathBuf> {
        let dir = self.run_dir(run_id)?;
        // Present as any kind of entry: a `run.json` that is not a regular file is refused by its reader,
        // naming it, rather than reported as an unknown run.
        if entry_exists(&dir.join(names::RUN_JSON)) {
            Ok(dir)
        } else {
            Err(Error::RunNotFound {
                run_id: run_id.to_owned(),
                store: self.root.clone(),
            })
        }
    }

    /// Reads a run's `run.json` without taking its lock.
    pub fn read_run(&self, run_id: &str) -> Result<RunDocument> {
        RunDocument::load(&self.existing_run_dir(run_id)?.join(names::RUN_JSON))
    }

    /// Reads a run's events (blank and undecodable lines skipped; a line over the limit is an error).
    pub fn read_events(&self, run_id: &str) -> Result<Vec<EventRecord>> {
        read_events(&self.existing_run_dir(run_id)?.join(names::EVENTS))
    }

    /// A run's stored `run.json` bytes ([`read_run_json`]).
    pub fn read_run_bytes(&self, run_id: &str) -> Result<Vec<u8>> {
        read_run_json(&self.existing_run_dir(run_id)?.join(names::RUN_JSON))
    }

    /// The stored event lines of a run, one at a time ([`event_lines`]).
    pub fn event_lines(&self, run_id: &str) -> Result<EventLines> {
        event_lines(&self.existing_run_dir(run_id)?.join(names::EVENTS))
    }

    /// The id of the run `query` names: a run id, a run's friendly name, or a prefix of exactly one run's id
    /// (at least 4 characters). [`Error::RunNotFound`] when nothing matches, [`Error::AmbiguousRun`] when a
    /// name or prefix matches several runs.
    pub fn find_run(&self, query: &str) -> Result<String> {
        let q = query.trim();
        if !q.is_empty()
            && !q.starts_with('.')
            && !q.contains(['/', '\\'])
            && entry_exists(&self.runs_dir().join(q).join(names::RUN_JSON))
        {
            return Ok(q.to_owned());
        }
        let entries = self.list_runs()?;
        let by_name: Vec<String> = entries
            .iter()
            .filter(|e| e.document.as_ref().is_ok_and(|d| d.name == q))
            .map(|e| e.id.clone())
            .collect();
        let candidates = if by_name.is_empty() && q.len() >= 4 {
            entries
                .iter()
                .filter(|e| e.id.starts_with(q))
                .map(|e| e.id.clone())
                .collect()
        } else {
            by_name
        };
        match candidates.len() {
            1 => Ok(candidates.into_iter().next().unwrap_or_default()),
            0 => Err(Error::RunNotFound {
                run_id: q.to_owned(),
                store: self.root.clone(),
            }),
            _ => Err(Error::AmbiguousRun {
                query: q.to_owned(),
                candidates,
                store: self.root.clone(),
            }),
        }
    }

    /// Every run directory of the store with its decoded document, sorted by creation time then id. A store
    /// without `runs/` has no runs.
    /// A run directory that is a link, or not a directory, is not a run; a `run.json` is read through its
    /// directory's handle, bounded ([`read_run_json`]).
    pub fn list_runs(&self) -> Result<Vec<RunEntry>> {
        let runs = match Dir::open_root(&self.runs_dir()) {
            Ok(d) => d,
            Err(e) if is_not_found(&e) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut names = runs.entries()?;
        names.sort();
        let mut out = Vec::new();
        for id in names {
            let Ok(dir) = runs.open_dir(&id) else { continue };
            let path = dir.path().join(names::RUN_JSON);
            let document = dir
                .read(names::RUN_JSON, MAX_RUN_JSON)
                .map_err(Error::from)
                .and_then(|b| RunDocument::decode(&b, &path));
            out.push(RunEntry { id, document });
        }
        out.sort_by(|a, b| {
            let key = |e: &RunEntry| {
                e.document
                    .as_ref()
                    .map(|d| d.created_at.clone())
                    .unwrap_or_default()
            };
            key(a).cmp(&key(b)).then_with(|| a.id.cmp(&b.id))
        });
        Ok(out)
    }
}
