//! The human log `run.log` (section 1.5): `HH:MM:SS LEVEL message`, local wall-clock time.
use std::io::Write;
use std::path::{Path, PathBuf};

use iterion_boundary::fs::{Dir, File};
use std::sync::Mutex;

use crate::error::{Error, Result};

/// Log level of a `run.log` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `ERROR`.
    Error,
    /// `WARN `.
    Warn,
    /// `INFO `.
    Info,
    /// `DEBUG`.
    Debug,
    /// `TRACE`.
    Trace,
}

impl LogLevel {
    /// The level padded to 5 characters.
    pub fn label(self) -> &'static str {
        match self {
            LogLevel::Error => "ERROR",
            LogLevel::Warn => "WARN ",
            LogLevel::Info => "INFO ",
            LogLevel::Debug => "DEBUG",
            LogLevel::Trace => "TRACE",
        }
    }
}

/// Formats one line without its LF. Embedded line breaks are escaped so one call stays one line.
pub fn format_log_line(hms: (u8, u8, u8), level: LogLevel, message: &str) -> String {
    let message = message.replace('\r', "\\r").replace('\n', "\\n");
    format!(
        "{:02}:{:02}:{:02} {} {message}",
        hms.0,
        hms.1,
        hms.2,
        level.label()
    )
}

/// The time zone of `run.log` timestamps (local wall-clock time by default).
#[derive(Debug, Clone, PartialEq)]
pub struct LogClock {
    tz: jiff::tz::TimeZone,
}

impl LogClock {
    /// The system's local time zone (UTC when it cannot be determined).
    pub fn system() -> LogClock {
        LogClock {
            tz: jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC),
        }
    }

    /// UTC.
    pub fn utc() -> LogClock {
        LogClock {
            tz: jiff::tz::TimeZone::UTC,
        }
    }

    /// The current `(hour, minute, second)` in this time zone.
    pub fn now_hms(&self) -> (u8, u8, u8) {
        let now = jiff::Timestamp::now().to_zoned(self.tz.clone());
        let p = |v: i8| u8::try_from(v).unwrap_or(0);
        (p(now.hour()), p(now.minute()), p(now.second()))
    }
}

impl Default for LogClock {
    fn default() -> LogClock {
        LogClock::system()
    }
}

/// Appender for `run.log` (mode 0600, append mode: a resumed run appends). The caller must never pass
/// secret values.
#[derive(Debug)]
pub struct RunLog {
    path: PathBuf,
    file: Mutex<File>,
    clock: LogClock,
}

impl RunLog {
    /// Opens the log; times are rendered with `clock`.
    pub fn open(path: &Path, clock: LogClock) -> Result<RunLog> {
        let (dir, name) = Dir::parent_of(path)?;
        RunLog::open_in(&dir, &name, clock)
    }

    /// [`RunLog::open`] of the file `name` of the run directory `dir` (a handle; never through a link).
    pub fn open_in(dir: &Dir, name: &str, clock: LogClock) -> Result<RunLog> {
        let file = dir.open_append(name)?;
        Ok(RunLog {
            path: dir.path().join(name),
            file: Mutex::new(file),
            clock,
        })
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line stamped with the current local time and returns it (the CLI also prints it to
    /// stderr).
    pub fn write(&self, level: LogLevel, message: &str) -> Result<String> {
        let line = format_log_line(self.clock.now_hms(), level, message);
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        f.write_all(format!("{line}\n").as_bytes())
            .map_err(|e| Error::io("append to", &self.path, e))?;
        Ok(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(hms: (u8, u8, u8), level: LogLevel, msg: &str, expect: &str) {
        assert_eq!(format_log_line(hms, level, msg), expect);
    }

    #[test]
    fn log_lines() {
        check(
            (9, 5, 7),
            LogLevel::Info,
            "sandbox: started",
            "09:05:07 INFO  sandbox: started",
        );
        check((23, 59, 59), LogLevel::Warn, "w", "23:59:59 WARN  w");
        check((0, 0, 0), LogLevel::Error, "e", "00:00:00 ERROR e");
        check((1, 2, 3), LogLevel::Debug, "d", "01:02:03 DEBUG d");
        check((1, 2, 3), LogLevel::Trace, "a\nb", "01:02:03 TRACE a\\nb");
    }

    #[test]
    fn appends_and_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        let log = RunLog::open(&path, LogClock::utc()).unwrap();
        log.write(LogLevel::Info, "one").unwrap();
        drop(log);
        let log = RunLog::open(&path, LogClock::utc()).unwrap();
        log.write(LogLevel::Warn, "two").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].ends_with(" INFO  one") && lines[1].ends_with(" WARN  two"),
            "{text}"
        );
        assert_eq!(lines[0].as_bytes()[2], b':');
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
