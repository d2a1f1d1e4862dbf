//! The per-run advisory lock `.lock` and the identity of the owning process.
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::document::Owner;
use crate::error::{Error, Result};

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
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(Error::Locked {
                    run_id: run_id.to_owned(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(Error::io("lock", path, e)),
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
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io("open", path, e)),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(false),
            Err(TryLockError::WouldBlock) => Ok(true),
            Err(TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
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
}

/// This machine's host name (empty when it cannot be read).
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

/// Start time of process `pid` in Unix seconds, from `/proc` (Linux); `None` when there is no such process
/// or the platform does not expose it. Used to tell a live owner from a reused PID.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    start_time_from_proc(&stat, &boot, u64::try_from(ticks).ok()?)
}

/// Parses `/proc/<pid>/stat` (field 22, start time in clock ticks since boot) and `/proc/stat` (`btime`).
fn start_time_from_proc(stat: &str, proc_stat: &str, ticks_per_second: u64) -> Option<u64> {
    // The command name (field 2) may contain spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let start_ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let btime: u64 = proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    if ticks_per_second == 0 {
        return None;
    }
    Some(btime + start_ticks / ticks_per_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_parses_proc_fields() {
        let stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 200";
        let proc_stat = "cpu  1 2 3\nbtime 1700000000\nprocesses 5\n";
        assert_eq!(start_time_from_proc(stat, proc_stat, 100), Some(1_700_000_123));
        assert_eq!(start_time_from_proc("garbage", proc_stat, 100), None);
        assert_eq!(start_time_from_proc(stat, "cpu 1\n", 100), None);
    }

    #[test]
    fn current_owner_is_this_process() {
        let me = Owner::current();
        assert_eq!(me.pid, std::process::id());
        if cfg!(target_os = "linux") {
            assert!(me.started_at > 1_500_000_000, "{me:?}");
            assert_eq!(process_start_time(me.pid), Some(me.started_at));
        }
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
