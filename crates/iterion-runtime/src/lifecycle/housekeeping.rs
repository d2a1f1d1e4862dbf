//! Removing runs from a store: `iterion runs rm` and `iterion runs prune`. A run is removed with its directory
//! and, when it worked in a worktree under this store that still exists, that worktree; a run a live process
//! holds (its lock is taken) is never removed.
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};
use crate::events::parse_timestamp;
use crate::status::RunStatus;
use crate::store::{Owner, RunDocument, RunLock, Store, names};

/// A run that was (or would be) removed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct RunRemoval {
    /// The run id.
    pub id: String,
    /// Its friendly name (empty when `run.json` is unreadable).
    pub name: String,
    /// Its status, when `run.json` is readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    /// When it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    /// The kept worktree removed with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<PathBuf>,
}

/// Which runs `runs prune` selects.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PruneFilter {
    /// Only runs started longer ago than this.
    pub older_than: Option<Duration>,
    /// Only runs in these statuses (empty: every status but `running`).
    pub statuses: Vec<RunStatus>,
}

impl PruneFilter {
    /// Every run that is not `running`, of any age.
    pub fn new() -> PruneFilter {
        PruneFilter::default()
    }

    fn selects(&self, doc: &RunDocument, now: SystemTime) -> bool {
        if doc.status == RunStatus::Running {
            return false;
        }
        if !self.statuses.is_empty() && !self.statuses.contains(&doc.status) {
            return false;
        }
        match self.older_than {
            None => true,
            Some(age) => parse_timestamp(&doc.created_at)
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|d| d > age),
        }
    }
}

/// The runs `filter` selects, oldest first (nothing is removed). Unreadable run directories are not selected.
pub fn prune_candidates(store: &Store, filter: &PruneFilter, now: SystemTime) -> Result<Vec<RunRemoval>> {
    Ok(store
        .list_runs()?
        .into_iter()
        .filter_map(|e| {
            let doc = e.document.ok()?;
            filter.selects(&doc, now).then(|| describe(store, &e.id, &doc))
        })
        .collect())
}

fn describe(store: &Store, id: &str, doc: &RunDocument) -> RunRemoval {
    RunRemoval {
        id: id.to_owned(),
        name: doc.name.clone(),
        status: Some(doc.status),
        started: Some(doc.created_at.clone()),
        worktree: kept_worktree(store, id, doc),
    }
}

/// The run's worktree when it is one of this store's and still exists.
fn kept_worktree(store: &Store, id: &str, doc: &RunDocument) -> Option<PathBuf> {
    let expected = store.worktree_dir(id).ok()?;
    (doc.worktree && std::path::Path::new(&doc.work_dir) == expected && expected.is_dir()).then_some(expected)
}

/// Removes run `id` (an exact id) with its kept worktree and that worktree's host git dir (no git runs: both
/// are directories of the store). [`Error::Locked`] when a process holds the run.
pub fn remove_run(store: &Store, id: &str) -> Result<RunRemoval> {
    let dir = store.run_dir(id)?;
    if !dir.join(names::RUN_JSON).is_file() {
        return Err(Error::RunNotFound {
            run_id: id.to_owned(),
            store: store.root().to_path_buf(),
        });
    }
    let _lock = RunLock::try_acquire(&dir.join(names::LOCK), id, &Owner::current())?;
    let removal = match RunDocument::load(&dir.join(names::RUN_JSON)) {
        Ok(doc) => {
            let r = describe(store, id, &doc);
            if let Some(wt) = &r.worktree {
                crate::exec::remove_worktree(wt, &crate::exec::host_git_dir(store.root(), id))?;
            }
            r
        }
        Err(_) => RunRemoval {
            id: id.to_owned(),
            name: String::new(),
            status: None,
            started: None,
            worktree: None,
        },
    };
    std::fs::remove_dir_all(&dir).map_err(|e| Error::io("remove", &dir, e))?;
    Ok(removal)
}
