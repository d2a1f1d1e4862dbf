//! The append-only event log `events.jsonl` (section 1.3).
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use iterion_boundary::fs::{Dir, File, Lines, is_not_found, open_file};
use std::sync::Mutex;
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::events::{Event, EventRecord, MAX_LINE_BYTES, encode_line};
use crate::time::format_timestamp;

/// An appended event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The stored line, without its LF (what `--json` prints).
    pub line: String,
    /// Its sequence number.
    pub seq: u64,
    /// An fsync failure (logged by the caller, not fatal).
    pub sync_error: Option<String>,
}

#[derive(Debug)]
struct Inner {
    file: File,
    next_seq: u64,
}

/// Appender for one run's `events.jsonl`. Appends are serialised by one mutex, so the log can be shared
/// (`Arc<EventLog>`) with the task that reports proxy denials.
#[derive(Debug)]
pub struct EventLog {
    path: PathBuf,
    run_id: String,
    inner: Mutex<Inner>,
}

impl EventLog {
    /// Opens (creating with mode 0600) the log at `path`. The next `seq` is `max(seq in file) + 1`, or 0 for a
    /// new log. A torn last line (no LF) is closed with a LF so the next event starts on its own line; readers
    /// skip the broken line.
    ///
    /// The log is never opened through a link and must be a regular file; a line over [`MAX_LINE_BYTES`] (no
    /// writer makes one) is an error naming the file, so a planted 3 GiB line is never held in memory.
    pub fn open(path: &Path, run_id: &str) -> Result<EventLog> {
        let (dir, name) = Dir::parent_of(path)?;
        EventLog::open_in(&dir, &name, run_id)
    }

    /// [`EventLog::open`] of the file `name` of the run directory `dir` (a handle).
    pub fn open_in(dir: &Dir, name: &str, run_id: &str) -> Result<EventLog> {
        let path = &dir.path().join(name);
        let mut file = dir.open_append(name)?;
        let mut max_seq: Option<u64> = None;
        for line in Lines::new(&file, path, MAX_LINE_BYTES) {
            if let Some(r) = std::str::from_utf8(&line?).ok().and_then(EventRecord::decode) {
                max_seq = Some(max_seq.map_or(r.seq, |m| m.max(r.seq)));
            }
        }
        let len = file.metadata().map_err(|e| Error::io("stat", path, e))?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1))
                .and_then(|_| file.read_exact(&mut last))
                .map_err(|e| Error::io("read", path, e))?;
            if last[0] != b'\n' {
                file.write_all(b"\n").map_err(|e| Error::io("write", path, e))?;
            }
        }
        Ok(EventLog {
            path: path.to_path_buf(),
            run_id: run_id.to_owned(),
            inner: Mutex::new(Inner {
                file,
                next_seq: max_seq.map_or(0, |m| m + 1),
            }),
        })
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `seq` the next appended event gets.
    pub fn next_seq(&self) -> u64 {
        self.lock().next_seq
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the file consistent (a line is written whole or truncated
        // back), so a poisoned mutex is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends an event stamped with the current time.
    pub fn append(&self, event: &Event) -> Result<Appended> {
        self.append_at(event, SystemTime::now())
    }

    /// Appends an event stamped with `at`: one `write` of the whole line, then an fsync. A short write is
    /// truncated back and reported; `seq` advances only after a successful write.
    pub fn append_at(&self, event: &Event, at: SystemTime) -> Result<Appended> {
        let mut inner = self.lock();
        let seq = inner.next_seq;
        let line = encode_line(seq, &format_timestamp(at), &self.run_id, event)?;
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        let before = inner
            .file
            .metadata()
            .map_err(|e| Error::io("stat", &self.path, e))?
            .len();
        let written = match inner.file.write(&bytes) {
            Ok(n) => n,
            Err(e) => {
                let _ = inner.file.set_len(before);
                return Err(Error::io("append to", &self.path, e));
            }
        };
        if written != bytes.len() {
            let _ = inner.file.set_len(before);
            return Err(Error::ShortWrite {
                path: self.path.clone(),
                written,
                expected: bytes.len(),
            });
        }
        let sync_error = inner.file.sync_data().err().map(|e| e.to_string());
        inner.next_seq = seq + 1;
        Ok(Appended {
            line,
            seq,
            sync_error,
        })
    }
}

/// Reads every decodable event of a log, skipping blank and undecodable lines ([`event_lines`]). A missing
/// file has no events.
pub fn read_events(path: &Path) -> Result<Vec<EventRecord>> {
    let mut out = Vec::new();
    for line in event_lines(path)? {
        if let Some(r) = EventRecord::decode(&line?) {
            out.push(r);
        }
    }
    Ok(out)
}

/// The decodable lines of an event log, read one at a time: blank and undecodable lines are skipped, and a
/// line longer than [`MAX_LINE_BYTES`] ends the iteration with [`Error::StoreFile`] naming the file.
#[derive(Debug)]
pub struct EventLines {
    lines: Option<Lines<File>>,
}

/// The lines of the log at `path`: a regular file, never opened through a link; a missing file has none.
pub fn event_lines(path: &Path) -> Result<EventLines> {
    let lines = match open_file(path) {
        Ok((f, _)) => Some(Lines::new(f, path, MAX_LINE_BYTES)),
        Err(e) if is_not_found(&e) => None,
        Err(e) => return Err(e.into()),
    };
    Ok(EventLines { lines })
}

impl Iterator for EventLines {
    type Item = Result<String>;

    fn next(&mut self) -> Option<Result<String>> {
        let lines = self.lines.as_mut()?;
        loop {
            match lines.next_line() {
                Ok(None) => return None,
                Err(e) => return Some(Err(e.into())),
                Ok(Some(l)) => {
                    if let Ok(s) = String::from_utf8(l)
                        && EventRecord::decode(&s).is_some()
                    {
                        return Some(Ok(s));
                    }
                }
            }
        }
    }
}

/// Follows an event log that is being written: each [`EventTail::read`] returns the complete lines added
/// since the last (a line still being written waits for its LF). The file is opened afresh each time, never
/// through a link, and a line that grows past [`MAX_LINE_BYTES`] is an error naming the file.
#[derive(Debug)]
pub struct EventTail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl EventTail {
    /// A tail of the log at `path`, from its start.
    pub fn new(path: &Path) -> EventTail {
        EventTail {
            path: path.to_path_buf(),
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// The complete lines appended since the last call (without their LF, lossily decoded).
    pub fn read(&mut self) -> Result<Vec<String>> {
        let mut f = match open_file(&self.path) {
            Ok((f, _)) => f,
            Err(e) if is_not_found(&e) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let path = &self.path;
        f.seek(SeekFrom::Start(self.offset))
            .map_err(|e| Error::io("read", path, e))?;
        let mut buf = Vec::new();
        let n = f
            .take(4 * MAX_LINE_BYTES as u64)
            .read_to_end(&mut buf)
            .map_err(|e| Error::io("read", path, e))?;
        self.offset += n as u64;
        self.partial.extend_from_slice(&buf);
        let mut lines = Vec::new();
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            lines.push(String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
        }
        if self.partial.len() > MAX_LINE_BYTES {
            return Err(Error::StoreFile {
                path: path.clone(),
                reason: format!("has a line longer than the limit of {MAX_LINE_BYTES} bytes"),
            });
        }
        Ok(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    #[test]
    fn a_line_over_the_limit_is_refused_by_every_reader_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut text = b"{\"seq\":0}\n".to_vec();
        text.resize(text.len() + MAX_LINE_BYTES + 1, b'x');
        std::fs::write(&path, &text).unwrap();
        let expect = format!(
            "cannot read {}: it has a line longer than the limit of {MAX_LINE_BYTES} bytes",
            path.display()
        );
        let e = EventLog::open(&path, "r").unwrap_err().to_string();
        assert!(e.starts_with(&expect), "{e}");
        let e = read_events(&path).unwrap_err().to_string();
        assert!(e.starts_with(&expect), "{e}");
        let mut tail = EventTail::new(&path);
        let e = tail.read().unwrap_err().to_string();
        assert!(e.starts_with(&expect), "{e}");
        // a link is never followed, a missing log has no events
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(event_lines(&link).is_err());
        assert!(EventTail::new(&link).read().is_err());
        assert!(EventLog::open(&link, "r").is_err());
        assert!(read_events(&dir.path().join("absent")).unwrap().is_empty());
    }

    #[test]
    fn a_tail_returns_complete_lines_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, "a\nb").unwrap();
        let mut tail = EventTail::new(&path);
        assert_eq!(tail.read().unwrap(), ["a"]);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"c\nd\n").unwrap();
        assert_eq!(tail.read().unwrap(), ["bc", "d"]);
        assert!(tail.read().unwrap().is_empty());
    }
}
