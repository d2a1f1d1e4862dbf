//! The safe tar extractor used for `copy_out` streams (03 §8.10).
//!
//! Refuses absolute names, `..` components, symlinks and hard links whose target leaves the destination
//! (absolute targets included), device files and FIFOs, and stops at a size cap. Entries are written with
//! `tar::Entry::unpack_in`, which also refuses to write through a symlink that points outside the destination.

use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::{CopyDirection, Error, Result};

/// Default size cap of an extraction: 8 GiB.
pub const DEFAULT_UNTAR_CAP: u64 = 8 * 1024 * 1024 * 1024;

/// What an extraction wrote.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UntarReport {
    /// Entries written.
    pub entries: usize,
    /// Bytes of regular files written.
    pub bytes: u64,
}

pub(crate) fn refuse(reason: String) -> Error {
    Error::Copy {
        direction: CopyDirection::Out,
        reason,
    }
}

/// Lexically normalises `p` (relative; `./a/b` → `a/b`) and returns `None` when it is absolute or leaves its
/// root.
pub(crate) fn confined(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Extracts a tar archive from a synchronous reader into `dest` (which must exist).
pub fn safe_untar_sync(reader: impl Read, dest: &Path, cap: u64) -> Result<UntarReport> {
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    let mut report = UntarReport::default();
    let io_err = |e: io::Error| refuse(format!("reading the archive failed: {e}"));
    for entry in archive.entries().map_err(io_err)? {
        let mut entry = entry.map_err(io_err)?;
        let path = entry.path().map_err(io_err)?.into_owned();
        let shown = path.display().to_string();
        if path.is_absolute() || path.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(refuse(format!("entry '{shown}' leaves the destination")));
        }
        let kind = entry.header().entry_type();
        use tar::EntryType as T;
        match kind {
            T::Regular | T::Continuous | T::Directory => {}
            T::Symlink | T::Link => {
                let target = entry
                    .link_name()
                    .map_err(io_err)?
                    .ok_or_else(|| refuse(format!("link '{shown}' has no target")))?
                    .into_owned();
                let base = if kind == T::Symlink {
                    path.parent().map(Path::to_path_buf).unwrap_or_default()
                } else {
                    PathBuf::new()
                };
                if target.is_absolute() || confined(&base.join(&target)).is_none() {
                    return Err(refuse(format!(
                        "link '{shown}' points to '{}' outside the destination",
                        target.display()
                    )));
                }
            }
            T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => continue,
            other => {
                return Err(refuse(format!(
                    "entry '{shown}' is a {} (only files, directories and links are extracted)",
                    match other {
                        T::Char | T::Block => "device file",
                        T::Fifo => "FIFO",
                        _ => "special file",
                    }
                )));
            }
        }
        let size = entry.header().size().map_err(io_err)?;
        report.bytes = report.bytes.saturating_add(size);
        if report.bytes > cap {
            return Err(refuse(format!("the archive exceeds the size cap of {cap} bytes")));
        }
        let written = entry
            .unpack_in(dest)
            .map_err(|e| refuse(format!("extracting '{shown}' failed: {e}")))?;
        if !written {
            return Err(refuse(format!("entry '{shown}' leaves the destination")));
        }
        report.entries += 1;
    }
    Ok(report)
}

struct ChannelReader {
    rx: Receiver<io::Result<Vec<u8>>>,
    buf: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos >= self.buf.len() {
            match self.rx.recv() {
                Ok(Ok(chunk)) => {
                    self.buf = chunk;
                    self.pos = 0;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

async fn pump(mut src: impl AsyncRead + Unpin, tx: SyncSender<io::Result<Vec<u8>>>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match src.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => {
                let chunk = buf[..n].to_vec();
                let tx2 = tx.clone();
                // the blocking side may be slow: hand the send to the blocking pool
                match tokio::task::spawn_blocking(move || tx2.send(Ok(chunk))).await {
                    Ok(Ok(())) => {}
                    _ => return,
                }
            }
            Err(e) => {
                let _ = tokio::task::spawn_blocking(move || tx.send(Err(e))).await;
                return;
            }
        }
    }
}

/// A blocking reader over an async stream, and the task pumping the stream into it (abort it when done).
pub(crate) fn blocking_reader(
    stream: impl AsyncRead + Send + Unpin + 'static,
) -> (impl Read + Send + 'static, tokio::task::JoinHandle<()>) {
    let (tx, rx) = sync_channel(4);
    let pumping = tokio::spawn(pump(stream, tx));
    (
        ChannelReader {
            rx,
            buf: Vec::new(),
            pos: 0,
        },
        pumping,
    )
}

/// Extracts an async tar stream (a `copy_out` result) into `dest`, on the blocking pool.
pub async fn safe_untar(
    stream: impl AsyncRead + Send + Unpin + 'static,
    dest: &Path,
    cap: u64,
) -> Result<UntarReport> {
    let (reader, pumping) = blocking_reader(stream);
    let dest = dest.to_path_buf();
    let extract = tokio::task::spawn_blocking(move || safe_untar_sync(reader, &dest, cap));
    let r = extract
        .await
        .map_err(|e| refuse(format!("extraction task failed: {e}")))?;
    pumping.abort();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    enum E<'a> {
        File(&'a str, &'a [u8]),
        Dir(&'a str),
        Sym(&'a str, &'a str),
        Hard(&'a str, &'a str),
        Fifo(&'a str),
    }

    fn archive(entries: &[E<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        for e in entries {
            let mut h = tar::Header::new_gnu();
            let (name, data): (&str, &[u8]) = match e {
                E::File(n, d) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    (n, d)
                }
                E::Dir(n) => {
                    h.set_entry_type(tar::EntryType::Directory);
                    (n, b"")
                }
                E::Sym(n, t) | E::Hard(n, t) => {
                    h.set_entry_type(if matches!(e, E::Sym(..)) {
                        tar::EntryType::Symlink
                    } else {
                        tar::EntryType::Link
                    });
                    h.set_link_name_literal(t).unwrap();
                    (n, b"")
                }
                E::Fifo(n) => {
                    h.set_entry_type(tar::EntryType::Fifo);
                    (n, b"")
                }
            };
            // write the raw name so tests can craft names `tar::Builder` would refuse
            let gnu = h.as_gnu_mut().unwrap();
            gnu.name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
        out.extend_from_slice(&[0u8; 1024]);
        out
    }

    fn check(entries: &[E<'_>], cap: u64, expect: &str) {
        let dir = tempfile::tempdir().unwrap();
        let got = match safe_untar_sync(&archive(entries)[..], dir.path(), cap) {
            Ok(r) => format!("ok {} entries", r.entries),
            Err(e) => e.to_string(),
        };
        assert_eq!(got, expect);
    }

    #[test]
    fn extraction_rules() {
        check(
            &[E::Dir("a/"), E::File("a/f", b"hi"), E::Sym("a/l", "f")],
            1 << 20,
            "ok 3 entries",
        );
        check(
            &[E::File("../x", b"x")],
            1 << 20,
            "copy out of the sandbox failed: entry '../x' leaves the destination",
        );
        check(
            &[E::File("/etc/x", b"x")],
            1 << 20,
            "copy out of the sandbox failed: entry '/etc/x' leaves the destination",
        );
        check(
            &[E::Sym("l", "../../etc")],
            1 << 20,
            "copy out of the sandbox failed: link 'l' points to '../../etc' outside the destination",
        );
        check(
            &[E::Sym("l", "/etc/passwd")],
            1 << 20,
            "copy out of the sandbox failed: link 'l' points to '/etc/passwd' outside the destination",
        );
        check(
            &[E::Hard("h", "../secret")],
            1 << 20,
            "copy out of the sandbox failed: link 'h' points to '../secret' outside the destination",
        );
        check(
            &[E::Fifo("p")],
            1 << 20,
            "copy out of the sandbox failed: entry 'p' is a FIFO (only files, directories and links are extracted)",
        );
        check(
            &[E::File("big", &[0u8; 2000])],
            1000,
            "copy out of the sandbox failed: the archive exceeds the size cap of 1000 bytes",
        );
        check(&[E::Dir("d/"), E::Sym("d/up", "../d")], 1 << 20, "ok 2 entries");
    }

    #[test]
    fn does_not_write_through_an_outside_symlink() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("esc")).unwrap();
        let r = safe_untar_sync(&archive(&[E::File("esc/x", b"x")])[..], dir.path(), 1 << 20);
        assert!(matches!(r, Err(Error::Copy { .. })), "{r:?}");
        assert!(!outside.path().join("x").exists());
    }

    #[tokio::test]
    async fn async_stream() {
        let dir = tempfile::tempdir().unwrap();
        let data = archive(&[E::File("f", b"hello")]);
        let r = safe_untar(std::io::Cursor::new(data), dir.path(), DEFAULT_UNTAR_CAP)
            .await
            .unwrap();
        assert_eq!(r, UntarReport { entries: 1, bytes: 5 });
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"hello");
    }
}
