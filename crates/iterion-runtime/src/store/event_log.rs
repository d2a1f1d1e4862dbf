//! The append-only event log `events.jsonl` (section 1.3).
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::events::{Event, EventRecord, encode_line};
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
    pub fn open(path: &Path, run_id: &str) -> Result<EventLog> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        let mut max_seq: Option<u64> = None;
        for line in BufReader::new(&file).lines() {
            let Ok(line) = line else { continue };
            if let Some(r) = EventRecord::decode(&line) {
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

/// Reads every decodable event of a log, skipping blank and undecodable lines. A missing file has no events.
pub fn read_events(path: &Path) -> Result<Vec<EventRecord>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let mut out = Vec::new();
    for line in BufReader::new(file).split(b'\n') {
        let line = line.map_err(|e| Error::io("read", path, e))?;
        if let Some(r) = std::str::from_utf8(&line).ok().and_then(EventRecord::decode) {
            out.push(r);
        }
    }
    Ok(out)
}
