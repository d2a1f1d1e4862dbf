//! The per-run advisory lock `.lock` and the identity of the owning process.
use std::io::Write;
use std::path::{Path, PathBuf};

use iterion_boundary::fs::{Dir, File, is_not_found, open_file};

use super::document::Owner;
use crate::error::{Error, Result};
use iterion_driver::{labels, owner};

/// A held `.lock`: a non-blocking exclusive advisory lock (`flock` on Unix), released on drop.
#[derive(Debug)]
pub struct RunLock {
    file: File,
    path: PathBuf,
}

impl RunLock {
    /// Takes the lock at `path` without blocking and writes the owner into the file (for humans; the lock
    /// itself is the advisory lock). A lock held by another process (or another open of the same file) →
    /// [`Error::Locked`].
    pub fn try_acquire(path: &Path, run_id: &str, owner: &Owner) -> Result<RunLock> {
        let (dir, name) = Dir::parent_of(path)?;
        RunLock::try_acquire_in(&dir, &name, run_id, owner)
    }

    /// [`RunLock::try_acquire`] of the file `name` of the run directory `dir` (a handle; never through a link).
    pub fn try_acquire_in(dir: &Dir, name: &str, run_id: &str, owner: &Owner) -> Result<RunLock> {
        let path = &dir.path().join(name);
        let mut file = dir.open_rw(name)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(iterion_boundary::fs::TryLockError::WouldBlock) => {
                return Err(Error::Locked {
                    run_id: run_id.to_owned(),
                });
            }
            Err(iterion_boundary::fs::TryLockError::Error(e)) => return Err(Error::io("lock", path, e)),
        }
        let info = serde_json::to_vec(owner).map_err(|source| Error::Encode {
            what: "lock owner",
            source,
        })?;
        file.set_len(0)
            .and_then(|()| file.write_all(&info))
            .and_then(|()| file.write_all(b"\n"))
            .map_err(|e| Error::io("write", path, e))?;
        Ok(RunLock {
            file,
            path: path.to_path_buf(),
        })
    }

    /// `true` when the lock at `path` is currently held by someone (probes by taking and releasing it).
    pub fn is_held(path: &Path) -> Result<bool> {
        let file = match open_file(path) {
            Ok((f, _)) => f,
            Err(e) if is_not_found(&e) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(false),
            Err(iterion_boundary::fs::TryLockError::WouldBlock) => Ok(true),
            Err(iterion_boundary::fs::TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Closing the file releases the lock as well; unlock explicitly so a clone of the descriptor held
        // elsewhere does not keep it.
        let _ = self.file.unlock();
    }
}

impl Owner {
    /// The current process: host name, pid and start time (0 when the platform does not expose it).
    pub fn current() -> Owner {
        let pid = std::process::id();
        Owner {
            host: host_name(),
            pid,
            started_at: process_start_time(pid).unwrap_or(0),
        }
    }

    /// The driver's view of this owner (for the `iterion.io/owner-*` and `iterion.io/store` labels, 05 §8.3).
    pub fn to_driver_owner(&self, store_dir: &Path) -> iterion_driver::OwnerInfo {
        iterion_driver::OwnerInfo {
            host_name: self.host.clone(),
            pid: self.pid,
            start_time: self.started_at,
            store_dir: store_dir.to_path_buf(),
        }
    }

    /// Liveness of this owner seen from host `this_host` (05 §8.4 rule 1, the driver crate's verdict): dead
    /// when it ran here and its pid is gone or was reused.
    pub fn liveness(&self, this_host: &str) -> iterion_driver::Liveness {
        let labels = std::collections::BTreeMap::from([
            (labels::OWNER_HOST.to_owned(), self.host.clone()),
            (labels::OWNER_PID.to_owned(), self.pid.to_string()),
            (labels::OWNER_START.to_owned(), self.started_at.to_string()),
        ]);
        owner::owner_liveness(&labels, this_host, &owner::HostProcesses)
    }
}

/// This machine's host name (empty when it cannot be read).
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

/// Start time of process `pid` in Unix seconds (the driver crate's computation, so run records and resource
/// labels agree); `None` when there is no such process or it cannot be read.
pub fn process_start_time(pid: u32) -> Option<u64> {
    match owner::process_start_time(pid) {
        owner::ProcStart::Started(s) => Some(s),
        owner::ProcStart::Missing | owner::ProcStart::Unreadable => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_owner_is_this_process() {
        let me = Owner::current();
        assert_eq!(me.pid, std::process::id());
        if cfg!(target_os = "linux") {
            assert!(me.started_at > 1_500_000_000, "{me:?}");
            assert_eq!(process_start_time(me.pid), Some(me.started_at));
            assert_eq!(me.liveness(&me.host), iterion_driver::Liveness::Alive);
        }
        let gone = Owner {
            pid: me.pid,
            started_at: me.started_at + 1,
            ..me.clone()
        };
        if cfg!(target_os = "linux") {
            assert_eq!(
                gone.liveness(&me.host),
                iterion_driver::Liveness::Dead,
                "pid reused"
            );
        }
        assert_eq!(me.liveness("another-host"), iterion_driver::Liveness::Foreign);
        let info = me.to_driver_owner(Path::new("/s"));
        assert_eq!(
            (info.host_name, info.pid, info.start_time),
            (me.host.clone(), me.pid, me.started_at)
        );
    }

    #[test]
    fn second_acquire_is_refused_until_release() {
        // ST14 (the lock is per open file description, so a second open in this process stands in for
        // another process).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".lock");
        let owner = Owner::current();
        let held = RunLock::try_acquire(&path, "r1", &owner).unwrap();
        assert!(RunLock::is_held(&path).unwrap());
        let err = RunLock::try_acquire(&path, "r1", &owner).unwrap_err();
        assert_eq!(err.to_string(), "run r1 is locked by another process");
        let recorded: Owner = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(recorded, owner);
        drop(held);
        assert!(!RunLock::is_held(&path).unwrap());
        RunLock::try_acquire(&path, "r1", &owner).unwrap();
    }
}
