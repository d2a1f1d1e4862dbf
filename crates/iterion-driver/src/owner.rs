//! Owner identity and liveness (03 §8.1.2, §16.4), shared by every driver.
//!
//! The verdict is a pure function over the labels, this host's name and a [`ProcessTable`]; [`HostProcesses`]
//! is the real table of this machine.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::labels::{OWNER_HOST, OWNER_PID, OWNER_START};
use crate::types::{Liveness, OwnerInfo};

/// What the process table says about one pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcStart {
    /// No such process.
    Missing,
    /// The process exists and started at this Unix second.
    Started(u64),
    /// The process exists but its start time cannot be read.
    Unreadable,
}

/// A view of the host's processes (injected so liveness is testable).
pub trait ProcessTable {
    /// The start time of `pid`.
    fn start_time(&self, pid: u32) -> ProcStart;
}

/// The owner labels of a resource, when all three are present and well-formed.
pub fn owner_of(labels: &BTreeMap<String, String>) -> Option<(String, u32, u64)> {
    let host = labels.get(OWNER_HOST)?.clone();
    let pid = labels.get(OWNER_PID)?.parse().ok()?;
    let start = labels.get(OWNER_START)?.parse().ok()?;
    Some((host, pid, start))
}

/// Liveness of a resource's owner: another host → `Foreign`; labels missing → `Unknown`; no process → `Dead`;
/// a different start time → `Dead` (pid reused); equal or unreadable start time → `Alive`.
pub fn owner_liveness(
    labels: &BTreeMap<String, String>,
    this_host: &str,
    table: &dyn ProcessTable,
) -> Liveness {
    let Some((host, pid, start)) = owner_of(labels) else {
        return match labels.get(OWNER_HOST) {
            Some(h) if h != this_host => Liveness::Foreign,
            _ => Liveness::Unknown,
        };
    };
    if host != this_host {
        return Liveness::Foreign;
    }
    match table.start_time(pid) {
        ProcStart::Missing => Liveness::Dead,
        ProcStart::Started(s) if s != start => Liveness::Dead,
        ProcStart::Started(_) | ProcStart::Unreadable => Liveness::Alive,
    }
}

/// The real process table of this host.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostProcesses;

impl ProcessTable for HostProcesses {
    fn start_time(&self, pid: u32) -> ProcStart {
        process_start_time(pid)
    }
}

/// Start time of `pid` in Unix seconds. Linux: `btime` of `/proc/stat` + field 22 of `/proc/<pid>/stat` divided
/// by the clock-tick rate (integer division), so writing and checking compute the same value.
pub fn process_start_time(pid: u32) -> ProcStart {
    #[cfg(target_os = "linux")]
    {
        let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ProcStart::Missing,
            Err(_) => return ProcStart::Unreadable,
        };
        match (boot_time(), start_ticks(&stat)) {
            (Some(btime), Some(ticks)) => ProcStart::Started(btime + ticks / clock_ticks()),
            _ => ProcStart::Unreadable,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        use nix::errno::Errno;
        use nix::sys::signal::kill;
        use nix::unistd::Pid;
        let Ok(raw) = i32::try_from(pid) else {
            return ProcStart::Missing;
        };
        match kill(Pid::from_raw(raw), None) {
            Err(Errno::ESRCH) => ProcStart::Missing,
            _ => ProcStart::Unreadable,
        }
    }
}

#[cfg(target_os = "linux")]
fn boot_time() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Field 22 (starttime) of a `/proc/<pid>/stat` line; the command name (field 2) may contain spaces and
/// parentheses, so fields are counted after its last `)`.
pub fn start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // rest starts with field 3 (state); field 22 is the 20th field of rest
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(target_os = "linux")]
fn clock_ticks() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(n)) if n > 0 => n as u64,
        _ => 100,
    }
}

/// The identity of this process, to be computed once at start by the CLI.
pub fn current_owner(store_dir: impl Into<PathBuf>) -> OwnerInfo {
    let pid = std::process::id();
    let host_name = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let start_time = match process_start_time(pid) {
        ProcStart::Started(s) => s,
        _ => 0,
    };
    OwnerInfo {
        host_name,
        pid,
        start_time,
        store_dir: store_dir.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Table(ProcStart);
    impl ProcessTable for Table {
        fn start_time(&self, pid: u32) -> ProcStart {
            assert_eq!(pid, 4242);
            self.0
        }
    }

    fn check(host: Option<&str>, pid: Option<&str>, start: Option<&str>, table: ProcStart, expect: Liveness) {
        let mut l = BTreeMap::new();
        for (k, v) in [(OWNER_HOST, host), (OWNER_PID, pid), (OWNER_START, start)] {
            if let Some(v) = v {
                l.insert(k.to_string(), v.to_string());
            }
        }
        assert_eq!(
            owner_liveness(&l, "ci-7", &Table(table)),
            expect,
            "{host:?} {table:?}"
        );
    }

    #[test]
    fn vectors_16_4() {
        let (h, p, s) = (Some("ci-7"), Some("4242"), Some("1764400000"));
        check(h, p, s, ProcStart::Missing, Liveness::Dead);
        check(h, p, s, ProcStart::Started(1_764_400_000), Liveness::Alive);
        check(h, p, s, ProcStart::Started(1_764_409_999), Liveness::Dead);
        check(h, p, s, ProcStart::Unreadable, Liveness::Alive);
        check(Some("ci-8"), p, s, ProcStart::Missing, Liveness::Foreign);
        check(None, None, None, ProcStart::Missing, Liveness::Unknown);
        check(h, Some("x"), s, ProcStart::Missing, Liveness::Unknown);
    }

    #[test]
    fn stat_parsing_skips_the_command_name() {
        let stat = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 0 0";
        assert_eq!(start_ticks(stat), Some(987_654));
        assert_eq!(start_ticks("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_dead() {
        let me = current_owner("/tmp/store");
        let mut l = BTreeMap::new();
        l.insert(OWNER_HOST.to_string(), me.host_name.clone());
        l.insert(OWNER_PID.to_string(), me.pid.to_string());
        l.insert(OWNER_START.to_string(), me.start_time.to_string());
        assert_eq!(owner_liveness(&l, &me.host_name, &HostProcesses), Liveness::Alive);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        l.insert(OWNER_PID.to_string(), pid.to_string());
        assert_eq!(owner_liveness(&l, &me.host_name, &HostProcesses), Liveness::Dead);
    }
}
