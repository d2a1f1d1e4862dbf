//! The reaper and crash recovery (§8.5).
//!
//! A managed resource is removed only when its owner is provably dead **and** its run is terminal (crash
//! recovery first turns a `running` run of a dead owner into `failed_resumable` / `RUN_INTERRUPTED`). Resources
//! of another host, of a live owner, or whose store is missing are kept and reported.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use iterion_driver::labels::{
    BUILD_KEY, BUILDER_HOST, BUILDER_PID, BUILDER_START, IMAGE, OWNER_HOST, OWNER_PID, OWNER_START, RUN_ID,
    STORE,
};
use iterion_driver::{Driver, Liveness, ManagedResource, RemoveOutcome, ResourceKind};

use crate::events::RunFailed;
use crate::failure::FailureCode;
use crate::status::RunStatus;
use crate::store::{Checkpoint, Owner, RecordKey, Store, Transition};

/// Error text of a run marked by crash recovery.
pub const INTERRUPTED: &str = "the process that owned this run exited without finishing it";

/// What the reaper knows about a resource's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// `run.json` has a terminal status.
    Terminal,
    /// `running` (or another non-terminal status) and its lock is held by a live process.
    Locked,
    /// The store exists, the run directory does not (the run was deleted).
    RunMissing,
    /// The store dir is missing or unreadable.
    StoreMissing,
}

/// The reaper's decision for one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Remove it.
    Remove,
    /// Keep it, with the reason.
    Keep(String),
}

/// The predicate of 05 §8.4 over the owner's liveness and the run's state (after crash recovery).
pub fn verdict(liveness: Liveness, state: impl FnOnce() -> RunState) -> Verdict {
    match liveness {
        Liveness::Foreign => return Verdict::Keep("owned by another host".into()),
        Liveness::Alive => return Verdict::Keep("its owner is alive".into()),
        Liveness::Unknown => return Verdict::Keep("no owner labels".into()),
        Liveness::Dead => {}
    }
    match state() {
        RunState::Terminal | RunState::RunMissing => Verdict::Remove,
        RunState::Locked => Verdict::Keep("its run is locked by a live process".into()),
        RunState::StoreMissing => Verdict::Keep("its store is missing or unreadable".into()),
    }
}

/// Crash recovery of one run: when it says `running`, its recorded owner is provably dead and its
/// lock can be taken, it becomes `failed_resumable` / `RUN_INTERRUPTED` and a `run_failed` is appended.
/// Returns whether the run was recovered. Best-effort: unreadable runs are left alone.
pub fn recover_run(store: &Store, run_id: &str, me: &Owner) -> bool {
    let Ok(doc) = store.read_run(run_id) else {
        return false;
    };
    if doc.status != RunStatus::Running || doc.owner.liveness(&me.host) != Liveness::Dead {
        return false;
    }
    let Ok(mut run) = store.open_run(run_id, me) else {
        return false;
    };
    let checkpoint = run
        .document()
        .checkpoint
        .clone()
        .or_else(|| Some(Checkpoint::stub("", Default::default())));
    let t = Transition::FailResumable {
        code: FailureCode::RunInterrupted,
        error: INTERRUPTED.into(),
        phase: None,
        checkpoint,
    };
    if run.transition(t).is_err() {
        return false;
    }
    let _ = run
        .events()
        .append(&RunFailed::new(FailureCode::RunInterrupted, INTERRUPTED).into());
    true
}

/// The state of a resource's run. With `recover`, crash recovery runs first; without it (a dry run, which
/// writes nothing), a `running` run whose recorded owner is dead counts as the terminal run recovery would
/// make it.
fn run_state(store_dir: &Path, run_id: &str, me: &Owner, key: Option<&RecordKey>, recover: bool) -> RunState {
    if !store_dir.is_dir() {
        return RunState::StoreMissing;
    }
    let store = Store::at(store_dir).with_record_key(key.cloned());
    let Ok(dir) = store.run_dir(run_id) else {
        return RunState::StoreMissing;
    };
    if !dir.exists() {
        return RunState::RunMissing;
    }
    if recover {
        recover_run(&store, run_id, me);
    }
    match store.read_run(run_id) {
        // a run waiting for human input owns no sandbox: one left behind is an orphan
        Ok(d) if d.status.is_terminal() || d.status == RunStatus::PausedWaitingHuman => RunState::Terminal,
        Ok(d)
            if !recover && d.status == RunStatus::Running && d.owner.liveness(&me.host) == Liveness::Dead =>
        {
            RunState::Terminal
        }
        // Still non-terminal after recovery: its lock is held, or its recorded owner is alive.
        Ok(_) => RunState::Locked,
        Err(_) => RunState::StoreMissing,
    }
}

/// The predicate of 05 §8.4 for one listed resource: its owner's liveness from the driver, its run's state
/// from the store its labels name.
async fn judge(
    d: &dyn Driver,
    r: &ManagedResource,
    me: &Owner,
    key: Option<&RecordKey>,
    recover: bool,
) -> Verdict {
    let live = d.owner_liveness(r).await;
    let store_dir = r.labels.get(STORE).map(PathBuf::from);
    let run_id = r.labels.get(RUN_ID).cloned().unwrap_or_default();
    verdict(live, || match &store_dir {
        Some(s) if !run_id.is_empty() => run_state(s, &run_id, me, key, recover),
        _ => RunState::StoreMissing,
    })
}

/// Whether `r` is an image of the build cache (kept by the reaper at run start: later runs reuse it).
pub fn is_cached_build(r: &ManagedResource) -> bool {
    r.kind == ResourceKind::Image && r.labels.contains_key(BUILD_KEY)
}

/// `r` with the process that built a cached image (its `builder-*` labels) as its owner, so the predicate
/// judges the cache by its builder; any other resource unchanged.
fn owned_by_builder(mut r: ManagedResource) -> ManagedResource {
    if is_cached_build(&r) {
        for (from, to) in [
            (BUILDER_HOST, OWNER_HOST),
            (BUILDER_PID, OWNER_PID),
            (BUILDER_START, OWNER_START),
        ] {
            match r.labels.get(from).cloned() {
                Some(v) => r.labels.insert(to.to_owned(), v),
                None => r.labels.remove(to),
            };
        }
    }
    r
}

/// Why the reaper at run start keeps a cached build image.
pub const CACHED_BUILD: &str =
    "a cached build image, reused by later runs (iterion sandbox prune removes it)";

/// One resource the reaper looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaped {
    /// The resource.
    pub resource: ManagedResource,
    /// `None` when removed; the reason when kept or when removal failed.
    pub kept: Option<String>,
}

/// Lists managed resources of every driver and removes those of dead owners whose run is terminal, within
/// `bound` in total. Crash recovery of their runs signs with `key` (and leaves a record whose tag does not
/// match alone). Errors are reported in the result, never raised.
pub async fn reap_orphans(
    drivers: &[Arc<dyn Driver>],
    me: &Owner,
    key: Option<&RecordKey>,
    bound: Duration,
) -> Vec<Reaped> {
    let work = async {
        let mut out = Vec::new();
        for d in drivers {
            let Ok(list) = d.list_managed().await else {
                continue;
            };
            for r in list {
                let v = if is_cached_build(&r) {
                    Verdict::Keep(CACHED_BUILD.into())
                } else {
                    judge(d.as_ref(), &r, me, key, true).await
                };
                let kept = match v {
                    Verdict::Keep(why) => Some(why),
                    Verdict::Remove => match d.remove_managed(&r).await {
                        Ok(RemoveOutcome::Removed) | Ok(RemoveOutcome::AlreadyGone) => None,
                        Ok(RemoveOutcome::Refused { reason }) => Some(format!("removal refused: {reason}")),
                        Err(e) => Some(format!("removal failed: {e}")),
                    },
                };
                out.push(Reaped { resource: r, kept });
            }
        }
        out
    };
    tokio::time::timeout(bound, work).await.unwrap_or_default()
}

/// What `iterion sandbox prune` did (or, in a dry run, would do) with one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PruneAction {
    /// Dry run: it would be removed.
    WouldRemove,
    /// Removed (or already gone).
    Removed,
    /// Kept by the predicate.
    Kept,
    /// The removal was refused by the engine (in use) or failed.
    Failed,
}

impl PruneAction {
    /// `would_remove`, `removed`, `kept` or `failed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            PruneAction::WouldRemove => "would_remove",
            PruneAction::Removed => "removed",
            PruneAction::Kept => "kept",
            PruneAction::Failed => "failed",
        }
    }
}

/// One resource `iterion sandbox prune` looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pruned {
    /// The resource.
    pub resource: ManagedResource,
    /// What happened to it.
    pub action: PruneAction,
    /// Why: the reason it is (or would be) removed, kept, or why the removal failed.
    pub reason: String,
}

/// Why the predicate removes a resource, in words.
fn removal_reason(r: &ManagedResource, me: &Owner, key: Option<&RecordKey>) -> String {
    let owner = match (
        r.labels.get(iterion_driver::labels::OWNER_PID),
        r.labels.get(iterion_driver::labels::OWNER_HOST),
    ) {
        (Some(pid), Some(host)) => format!("its owner (pid {pid} on {host}) is gone"),
        _ => "its owner is gone".to_owned(),
    };
    let run_id = r.labels.get(RUN_ID).cloned().unwrap_or_default();
    let run = match r.labels.get(STORE).map(PathBuf::from) {
        Some(s) if run_state(&s, &run_id, me, key, false) == RunState::RunMissing => "was deleted",
        _ => "is over",
    };
    format!("{owner} and its run {run_id} {run}")
}

/// Whose resources a prune may remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneScope {
    /// Those of the stores the current user owns (the default: an engine may be shared by several users).
    Mine,
    /// Every iterion store's (`--all-users`).
    All,
}

/// The user that owns the store a resource names (its directory's owner), when it is another than this
/// process's: such a resource is kept under [`PruneScope::Mine`]. A resource that names no store, or one that is
/// gone, is left to the reaper's predicate.
fn foreign_store_owner(r: &ManagedResource) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let store = r.labels.get(STORE)?;
    let uid = std::fs::metadata(store).ok()?.uid();
    (uid != nix::unistd::geteuid().as_raw()).then_some(uid)
}

/// `iterion sandbox prune`: lists the managed resources of every driver — containers, networks and cached
/// build images — and judges each by the reaper's predicate (05 §8.4: owner provably dead **and** run
/// terminal, after crash recovery). Unlike the reaper at run start it includes the build cache: a cached image
/// whose builder is gone is removed, unless a kept container of a live run uses it. With `apply` false (the
/// default of the command) nothing is written or removed: the result says what would be. Bounded by `bound`;
/// a driver that cannot list is an error naming it. Under [`PruneScope::Mine`] a resource of a store another
/// user owns is kept. `only_runs` limits it to the resources of those runs.
pub async fn prune(
    drivers: &[Arc<dyn Driver>],
    me: &Owner,
    key: Option<&RecordKey>,
    apply: bool,
    scope: PruneScope,
    only_runs: Option<&[String]>,
    bound: Duration,
) -> Result<Vec<Pruned>, String> {
    let work = async {
        let mut out = Vec::new();
        for d in drivers {
            let list = d
                .list_managed()
                .await
                .map_err(|e| format!("cannot list the resources of the {} engine: {e}", d.kind()))?;
            let mut judged = Vec::new();
            let wanted = |r: &ManagedResource| {
                only_runs.is_none_or(|ids| r.labels.get(RUN_ID).is_some_and(|id| ids.contains(id)))
            };
            for r in list.into_iter().filter(wanted).map(owned_by_builder) {
                let v = match foreign_store_owner(&r).filter(|_| scope == PruneScope::Mine) {
                    Some(uid) => Verdict::Keep(format!(
                        "its store belongs to another user (uid {uid}); --all-users acts on it"
                    )),
                    None => judge(d.as_ref(), &r, me, key, apply).await,
                };
                judged.push((r, v));
            }
            // Images a kept container runs (its `iterion.io/image` label names the tag it was created from).
            let in_use: Vec<String> = judged
                .iter()
                .filter(|(r, v)| r.kind == ResourceKind::Container && matches!(v, Verdict::Keep(_)))
                .filter_map(|(r, _)| r.labels.get(IMAGE).cloned())
                .collect();
            for (r, v) in judged {
                let v = match v {
                    Verdict::Remove if r.kind == ResourceKind::Image && in_use.contains(&r.name) => {
                        Verdict::Keep("a sandbox of a live run uses it".into())
                    }
                    other => other,
                };
                let (action, reason) = match v {
                    Verdict::Keep(why) => (PruneAction::Kept, why),
                    Verdict::Remove if !apply => (PruneAction::WouldRemove, removal_reason(&r, me, key)),
                    Verdict::Remove => match d.remove_managed(&r).await {
                        Ok(RemoveOutcome::Removed) | Ok(RemoveOutcome::AlreadyGone) => {
                            (PruneAction::Removed, removal_reason(&r, me, key))
                        }
                        Ok(RemoveOutcome::Refused { reason }) => {
                            (PruneAction::Failed, format!("removal refused: {reason}"))
                        }
                        Err(e) => (PruneAction::Failed, format!("removal failed: {e}")),
                    },
                };
                out.push(Pruned {
                    resource: r,
                    action,
                    reason,
                });
            }
        }
        Ok(out)
    };
    tokio::time::timeout(bound, work)
        .await
        .unwrap_or_else(|_| Err(format!("the engine did not answer within {}s", bound.as_secs())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(l: Liveness, state: RunState, expect: &str) {
        let got = match verdict(l, || state) {
            Verdict::Remove => "remove".to_owned(),
            Verdict::Keep(w) => format!("keep: {w}"),
        };
        assert_eq!(got, expect);
    }

    #[test]
    fn predicate_rp1_to_rp8() {
        check(
            Liveness::Foreign,
            RunState::Terminal,
            "keep: owned by another host",
        ); // RP1
        check(Liveness::Alive, RunState::Locked, "keep: its owner is alive"); // RP2
        check(Liveness::Dead, RunState::Terminal, "remove"); // RP3 (pid reused), RP4, RP5 after recovery
        check(
            Liveness::Dead,
            RunState::Locked,
            "keep: its run is locked by a live process",
        ); // RP6
        check(Liveness::Dead, RunState::RunMissing, "remove"); // RP7
        check(
            Liveness::Dead,
            RunState::StoreMissing,
            "keep: its store is missing or unreadable",
        ); // RP8
        check(Liveness::Unknown, RunState::Terminal, "keep: no owner labels");
    }

    #[test]
    fn only_images_with_a_build_key_are_the_build_cache() {
        let r = |kind: ResourceKind, key: bool| ManagedResource {
            kind,
            id: "x".into(),
            name: "n".into(),
            labels: key
                .then(|| (BUILD_KEY.to_owned(), "k".to_owned()))
                .into_iter()
                .collect(),
            created: None,
        };
        assert!(is_cached_build(&r(ResourceKind::Image, true)));
        assert!(!is_cached_build(&r(ResourceKind::Image, false)));
        assert!(!is_cached_build(&r(ResourceKind::Container, true)));
    }
}
