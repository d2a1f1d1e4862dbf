//! The archive of the runner's work dir that a start copies into the pod (07 §8.1): entries in sorted order;
//! regular files, directories and symlinks (stored as links, never followed); hard links as regular files;
//! sockets, FIFOs and devices skipped; permission bits and modification times kept; no owner names, uid and
//! gid 0; the run store and the data dir (when they lie inside the work dir) skipped; a `.git` directory included as is, a
//! `.git` file (a linked worktree) left out.

use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use iterion_driver::CopiedEntry;
use sha2::{Digest, Sha256};

/// What went into an archive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Regular files.
    pub files: u64,
    /// Bytes of regular files.
    pub bytes: u64,
    /// Every entry outside `.git`, relative to the root, with the SHA-256 of each regular file as archived:
    /// what a copy back may delete, and may leave alone when unchanged.
    pub listing: Vec<CopiedEntry>,
}

/// Writes the archive of `root` to `out`, leaving out each of `skip` (the run store, the data dir) that lies
/// inside `root`.
pub(crate) fn archive(root: &Path, skip: &[PathBuf], out: impl Write) -> io::Result<Stats> {
    let mut b = tar::Builder::new(out);
    b.follow_symlinks(false);
    let skip: Vec<PathBuf> = skip.iter().filter_map(|s| s.canonicalize().ok()).collect();
    let root_real = root.canonicalize()?;
    let mut stats = Stats::default();
    walk(&mut b, &root_real, Path::new(""), &skip, &mut stats)?;
    b.into_inner()?.flush()?;
    Ok(stats)
}

fn header(meta: &std::fs::Metadata, kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(meta.mode() & 0o7777);
    h.set_mtime(u64::try_from(meta.mtime()).unwrap_or(0));
    h.set_uid(0);
    h.set_gid(0);
    h
}

fn walk<W: Write>(
    b: &mut tar::Builder<W>,
    root: &Path,
    rel: &Path,
    skip: &[PathBuf],
    stats: &mut Stats,
) -> io::Result<()> {
    let dir = root.join(rel);
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| PathBuf::from(e.file_name())))
        .collect::<io::Result<_>>()?;
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let entry = rel.join(&name);
        if skip.contains(&path) {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path)?;
        let ft = meta.file_type();
        if rel.as_os_str().is_empty() && name.as_os_str() == ".git" && !ft.is_dir() {
            // A linked worktree's `.git` file points at the host's repository: never copied.
            continue;
        }
        let listed = !entry.components().any(|c| c.as_os_str() == ".git");
        if listed && (ft.is_dir() || ft.is_symlink()) {
            stats.listing.push(CopiedEntry::other(entry.clone()));
        }
        if ft.is_dir() {
            let mut h = header(&meta, tar::EntryType::Directory, 0);
            b.append_data(&mut h, &entry, io::empty())?;
            walk(b, root, &entry, skip, stats)?;
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&path)?;
            let mut h = header(&meta, tar::EntryType::Symlink, 0);
            b.append_link(&mut h, &entry, &target)?;
        } else if ft.is_file() {
            let mut h = header(&meta, tar::EntryType::Regular, meta.len());
            let mut file = Hashing {
                inner: std::fs::File::open(&path)?,
                hash: Sha256::new(),
            };
            b.append_data(&mut h, &entry, &mut file)?;
            if listed {
                stats
                    .listing
                    .push(CopiedEntry::file(entry.clone(), file.hash.finalize().into()));
            }
            stats.files += 1;
            stats.bytes += meta.len();
        }
        // Sockets, FIFOs and devices are skipped.
    }
    Ok(())
}

/// A reader that hashes what it reads (the archive's copy of a file, so the digest is of what the pod gets).
struct Hashing<R> {
    inner: R,
    hash: Sha256,
}

impl<R: io::Read> io::Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// A blocking writer into an async pipe, for the archive task (which runs on a blocking thread).
pub(crate) struct SyncWriter {
    w: tokio::io::DuplexStream,
    rt: tokio::runtime::Handle,
}

impl SyncWriter {
    /// Writes into `w`, driving it on `rt`.
    pub(crate) fn new(w: tokio::io::DuplexStream, rt: tokio::runtime::Handle) -> Self {
        SyncWriter { w, rt }
    }
}

impl Write for SyncWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        use tokio::io::AsyncWriteExt;
        self.rt.block_on(self.w.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    #[test]
    fn sorted_entries_links_kept_store_and_worktree_git_file_skipped() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("b/sub")).unwrap();
        std::fs::write(r.join("b/sub/x.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(r.join("b/sub/x.sh"), std::fs::Permissions::from_mode(0o750)).unwrap();
        std::fs::write(r.join("a.txt"), "hello").unwrap();
        symlink("/etc/passwd", r.join("link")).unwrap();
        std::fs::create_dir(r.join(".iterion")).unwrap();
        std::fs::write(r.join(".iterion/state"), "secret").unwrap();
        std::fs::write(r.join(".git"), "gitdir: /elsewhere\n").unwrap();
        let _fifo = std::process::Command::new("mkfifo").arg(r.join("pipe")).status();

        let mut buf = Vec::new();
        let stats = archive(r, &[r.join(".iterion"), r.join("absent")], &mut buf).unwrap();
        assert_eq!((stats.files, stats.bytes), (2, 5 + 10));
        let listed: Vec<String> = stats
            .listing
            .iter()
            .map(|e| e.path.display().to_string())
            .collect();
        assert_eq!(listed, ["a.txt", "b", "b/sub", "b/sub/x.sh", "link"]);
        let hello: [u8; 32] = Sha256::digest(b"hello").into();
        assert_eq!(stats.listing[0].digest, Some(hello));
        assert_eq!(stats.listing[1].digest, None);

        let mut a = tar::Archive::new(&buf[..]);
        let mut seen = Vec::new();
        for e in a.entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            assert_eq!((h.uid().unwrap(), h.gid().unwrap()), (0, 0));
            let p = e.path().unwrap().display().to_string();
            if p == "b/sub/x.sh" {
                assert_eq!(h.mode().unwrap(), 0o750);
            }
            if p == "link" {
                assert_eq!(h.entry_type(), tar::EntryType::Symlink);
                assert_eq!(
                    e.link_name().unwrap().unwrap().display().to_string(),
                    "/etc/passwd"
                );
            }
            seen.push(p);
        }
        assert_eq!(seen, ["a.txt", "b", "b/sub", "b/sub/x.sh", "link"]);
    }

    #[test]
    fn a_git_directory_is_included() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".git")).unwrap();
        std::fs::write(d.path().join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        let mut buf = Vec::new();
        let stats = archive(d.path(), &[], &mut buf).unwrap();
        assert!(stats.listing.is_empty(), "{:?}", stats.listing);
        let mut a = tar::Archive::new(&buf[..]);
        let seen: Vec<String> = a
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(seen, [".git", ".git/HEAD"]);
    }
}
