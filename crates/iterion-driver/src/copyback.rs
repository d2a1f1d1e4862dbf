//! The copy back of a workspace that lived in a sandbox without a host file system (a Kubernetes pod): the
//! pod's archive is applied to the host work dir, and what the pod deleted is deleted on the host.
//!
//! The archive comes from a sandbox the repository under test controls, so it is hostile input. On top of the
//! rules of the safe extractor (no absolute names, no `..`, no link leaving the destination, no device files),
//! applying it never:
//! - writes anything whose path has a `.git` component, at any depth (git hooks and configuration are code the
//!   host runs later), nor anything under the paths the caller protects (the run store);
//! - writes or deletes through a symbolic link: every existing ancestor of an entry must be a real directory,
//!   and an entry replaces what is at its path (a file, a link, a directory) instead of writing into it;
//! - keeps set-user-ID, set-group-ID or sticky bits (permission bits are masked to `0o777`);
//! - creates a link whose target leaves the destination or enters a `.git` directory;
//! - mirrors a deletion unless the whole archive was read: a truncated or refused stream keeps every host file.
//!
//! A regular file whose content is the one copied in (same SHA-256) is left alone: the sandbox did not change
//! it, and another sandbox's copy back (or the host) may have since. Entries refused one by one are skipped and
//! listed in the report; the rest is applied.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use tokio::io::AsyncRead;

use crate::error::Result;
use crate::types::CopiedEntry;
use crate::untar::{confined, refuse};

/// How many skipped entries a report names (the count is always complete).
const SKIPPED_NAMED: usize = 20;

/// What a copy back did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorReport {
    /// Entries written (files, directories, links).
    pub written: u64,
    /// Bytes of regular files written.
    pub bytes: u64,
    /// Host paths deleted because the sandbox deleted them.
    pub deleted: u64,
    /// Regular files left alone: their content is the one copied in.
    pub unchanged: u64,
    /// Entries left out because they are protected (`.git`, the run store).
    pub protected: u64,
    /// Entries refused, in full.
    pub skipped: u64,
    /// The first refused entries with the reason.
    pub skipped_named: Vec<String>,
}

impl MirrorReport {
    fn skip(&mut self, why: String) {
        self.skipped += 1;
        if self.skipped_named.len() < SKIPPED_NAMED {
            self.skipped_named.push(why);
        }
    }
}

/// What the caller protects and how much it accepts.
#[derive(Debug, Clone)]
pub struct MirrorOptions {
    /// Paths relative to the destination that are never written nor deleted (with everything under them).
    pub protect: Vec<PathBuf>,
    /// Size cap of the regular files of the archive.
    pub cap: u64,
    /// The name every entry is under (a `copy_out` archive holds the directory under its own name); `None`:
    /// entries are relative to the destination. Entries outside it are refused.
    pub prefix: Option<PathBuf>,
}

impl Default for MirrorOptions {
    fn default() -> Self {
        MirrorOptions {
            protect: Vec::new(),
            cap: crate::DEFAULT_UNTAR_CAP,
            prefix: None,
        }
    }
}

fn has_git_component(p: &Path) -> bool {
    p.components().any(|c| c.as_os_str() == ".git")
}

fn protected(rel: &Path, opts: &MirrorOptions) -> bool {
    has_git_component(rel) || opts.protect.iter().any(|p| rel.starts_with(p))
}

/// What the existing ancestors of a path are.
#[derive(Debug, PartialEq, Eq)]
enum Ancestors {
    /// Real directories (missing ones created when asked).
    Dirs,
    /// One is a symbolic link.
    Link,
    /// One is something else (a file): the path cannot exist.
    File,
}

/// What the existing ancestors of `rel` under `dest` are; missing ones are created when `create` is set.
fn ancestors(dest: &Path, rel: &Path, create: bool) -> io::Result<Ancestors> {
    let mut at = dest.to_path_buf();
    let Some(parent) = rel.parent() else {
        return Ok(Ancestors::Dirs);
    };
    for c in parent.components() {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(m) if m.file_type().is_symlink() => return Ok(Ancestors::Link),
            Ok(_) => return Ok(Ancestors::File),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !create {
                    return Ok(Ancestors::Dirs);
                }
                std::fs::create_dir(&at)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Ancestors::Dirs)
}

/// Removes whatever is at `path` without following it; a missing path is fine.
fn clear(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Applies the archive read from `reader` to `dest` and mirrors the deletions of the paths of `before` (the
/// listing taken when the workspace was copied in, relative to `dest`) that the archive no longer holds.
pub fn mirror_back_sync(
    reader: impl Read,
    dest: &Path,
    before: &[CopiedEntry],
    opts: &MirrorOptions,
) -> Result<MirrorReport> {
    let copied_in: HashMap<&Path, [u8; 32]> = before
        .iter()
        .filter_map(|e| e.digest.map(|d| (e.path.as_path(), d)))
        .collect();
    let mut report = MirrorReport::default();
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut files: HashSet<PathBuf> = HashSet::new();
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(false);
    archive.set_preserve_mtime(true);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    let stopped = |report: &MirrorReport, what: String| {
        refuse(format!(
            "{what}; {} entries were applied and no deletion was mirrored",
            report.written
        ))
    };
    let entries = archive
        .entries()
        .map_err(|e| stopped(&report, format!("reading the archive failed: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| stopped(&report, format!("reading the archive failed: {e}")))?;
        let raw = entry
            .path()
            .map_err(|e| stopped(&report, format!("reading the archive failed: {e}")))?
            .into_owned();
        let shown = raw.display().to_string();
        let Some(mut rel) = confined(&raw) else {
            report.skip(format!("'{shown}' leaves the workspace"));
            continue;
        };
        if let Some(prefix) = &opts.prefix {
            match rel.strip_prefix(prefix) {
                Ok(inner) => rel = inner.to_path_buf(),
                Err(_) => {
                    report.skip(format!("'{shown}' is not under '{}'", prefix.display()));
                    continue;
                }
            }
        }
        if rel.as_os_str().is_empty() {
            continue; // the workspace itself (`.`)
        }
        seen.insert(rel.clone());
        if protected(&rel, opts) {
            report.protected += 1;
            continue;
        }
        let kind = entry.header().entry_type();
        let size = entry.header().size().unwrap_or(0);
        use tar::EntryType as T;
        if matches!(kind, T::Regular | T::Continuous) {
            report.bytes = report.bytes.saturating_add(size);
            if report.bytes > opts.cap {
                return Err(stopped(
                    &report,
                    format!("the archive exceeds the size cap of {} bytes", opts.cap),
                ));
            }
        }
        let above = ancestors(dest, &rel, true)
            .map_err(|e| stopped(&report, format!("creating the parents of '{shown}' failed: {e}")))?;
        if above != Ancestors::Dirs {
            report.skip(format!("'{shown}' lies under a link or a file"));
            continue;
        }
        let path = dest.join(&rel);
        let applied = match kind {
            T::Directory => match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_dir() => Ok(()),
                _ => clear(&path).and_then(|()| std::fs::create_dir(&path)),
            }
            .and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                let mode = entry.header().mode().unwrap_or(0o755) & 0o777 | 0o700;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            }),
            T::Regular | T::Continuous => match write_file(&mut entry, &path, copied_in.get(rel.as_path())) {
                Ok(Written::Unchanged) => {
                    report.unchanged += 1;
                    files.insert(rel);
                    continue;
                }
                Ok(Written::Replaced) => Ok(()),
                Err(e) => Err(e),
            },
            T::Symlink | T::Link => match link(&entry, &rel, &path, dest, &files, opts) {
                Ok(r) => r,
                Err(why) => {
                    report.skip(why);
                    continue;
                }
            },
            T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => continue,
            _ => {
                report.skip(format!("'{shown}' is not a file, a directory or a link"));
                continue;
            }
        };
        match applied {
            Ok(()) => {
                report.written += 1;
                if matches!(kind, T::Regular | T::Continuous | T::Link) {
                    files.insert(rel);
                }
            }
            Err(e) => report.skip(format!("writing '{shown}' failed: {e}")),
        }
    }
    mirror_deletions(dest, before, &seen, opts, &mut report);
    Ok(report)
}

/// Creates a link entry at `path` (`rel` in the workspace): a symbolic link whose target stays inside the
/// workspace and out of protected paths, or a hard link to a file of this archive, written as a copy of it.
/// `Err` is the reason the entry is refused.
fn link<R: Read>(
    entry: &tar::Entry<'_, R>,
    rel: &Path,
    path: &Path,
    dest: &Path,
    files: &HashSet<PathBuf>,
    opts: &MirrorOptions,
) -> std::result::Result<io::Result<()>, String> {
    let symbolic = entry.header().entry_type() == tar::EntryType::Symlink;
    let shown = rel.display();
    let target = match entry.link_name() {
        Ok(Some(t)) => t.into_owned(),
        _ => return Err(format!("link '{shown}' has no target")),
    };
    let base = if symbolic {
        rel.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        PathBuf::new()
    };
    let resolved = if target.is_absolute() {
        None
    } else {
        confined(&base.join(&target))
    };
    let Some(resolved) = resolved else {
        return Err(format!(
            "link '{shown}' points to '{}' outside the workspace",
            target.display()
        ));
    };
    if protected(&resolved, opts) {
        return Err(format!(
            "link '{shown}' points into a protected path ('{}')",
            target.display()
        ));
    }
    if symbolic {
        Ok(clear(path).and_then(|()| std::os::unix::fs::symlink(&target, path)))
    } else if files.contains(&resolved) {
        // A hard link to a file of this archive: a copy of it (never a link to a host file).
        Ok(clear(path).and_then(|()| std::fs::copy(dest.join(&resolved), path).map(|_| ())))
    } else {
        Err(format!(
            "hard link '{shown}' names '{}', which the archive did not hold before it",
            target.display()
        ))
    }
}

/// What [`write_file`] did.
enum Written {
    /// The content is the one copied in: nothing was written.
    Unchanged,
    /// The file now has the archive's content.
    Replaced,
}

/// Extracts a regular file next to `path` (a fresh name in the same, verified directory), then either drops it
/// (its SHA-256 is `copied_in`) or moves it over whatever is at `path`.
fn write_file<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    path: &Path,
    copied_in: Option<&[u8; 32]>,
) -> io::Result<Written> {
    use sha2::{Digest, Sha256};
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    // A name no archive entry can predict.
    let tmp = path.with_file_name(format!(".{name}.iterion-copyback-{:016x}", rand::random::<u64>()));
    entry.unpack(&tmp)?;
    if let Some(want) = copied_in {
        let mut h = Sha256::new();
        io::copy(&mut std::fs::File::open(&tmp)?, &mut h)?;
        if h.finalize().as_slice() == want {
            std::fs::remove_file(&tmp)?;
            return Ok(Written::Unchanged);
        }
    }
    let moved = clear(path).and_then(|()| std::fs::rename(&tmp, path));
    if moved.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    moved.map(|()| Written::Replaced)
}

/// Deletes the paths of `before` the archive did not hold, deepest first; a directory only when it is empty.
fn mirror_deletions(
    dest: &Path,
    before: &[CopiedEntry],
    seen: &HashSet<PathBuf>,
    opts: &MirrorOptions,
    report: &mut MirrorReport,
) {
    let mut gone: Vec<&PathBuf> = before
        .iter()
        .map(|e| &e.path)
        .filter(|p| !seen.contains(*p) && !protected(p, opts) && confined(p).as_ref() == Some(*p))
        .collect();
    gone.sort_by(|a, b| b.components().count().cmp(&a.components().count()).then(b.cmp(a)));
    for rel in gone {
        let shown = rel.display();
        match ancestors(dest, rel, false) {
            Ok(Ancestors::Dirs) => {}
            Ok(Ancestors::File) => continue,
            Ok(Ancestors::Link) => {
                report.skip(format!("not deleting '{shown}': it lies under a link"));
                continue;
            }
            Err(e) => {
                report.skip(format!("not deleting '{shown}': {e}"));
                continue;
            }
        }
        let path = dest.join(rel);
        let r = match std::fs::symlink_metadata(&path) {
            Err(_) => continue,
            Ok(m) if m.file_type().is_dir() => match std::fs::remove_dir(&path) {
                // Something the sandbox did not know about is still in it: keep the directory.
                Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => continue,
                r => r,
            },
            Ok(_) => std::fs::remove_file(&path),
        };
        match r {
            Ok(()) => report.deleted += 1,
            Err(e) => report.skip(format!("deleting '{shown}' failed: {e}")),
        }
    }
}

/// [`mirror_back_sync`] over an async stream (a `copy_out` result), on the blocking pool.
pub async fn mirror_back(
    stream: impl AsyncRead + Send + Unpin + 'static,
    dest: &Path,
    before: std::sync::Arc<Vec<CopiedEntry>>,
    opts: MirrorOptions,
) -> Result<MirrorReport> {
    let (reader, pumping) = crate::untar::blocking_reader(stream);
    let dest = dest.to_path_buf();
    let r = tokio::task::spawn_blocking(move || mirror_back_sync(reader, &dest, &before, &opts))
        .await
        .map_err(|e| refuse(format!("the copy back task failed: {e}")))?;
    pumping.abort();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    enum E<'a> {
        File(&'a str, &'a [u8], u32),
        Dir(&'a str),
        Sym(&'a str, &'a str),
        Hard(&'a str, &'a str),
        Fifo(&'a str),
    }

    fn archive(entries: &[E<'_>], end: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for e in entries {
            let mut h = tar::Header::new_gnu();
            let (name, data, mode): (&str, &[u8], u32) = match e {
                E::File(n, d, m) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    (n, d, *m)
                }
                E::Dir(n) => {
                    h.set_entry_type(tar::EntryType::Directory);
                    (n, b"", 0o755)
                }
                E::Sym(n, t) | E::Hard(n, t) => {
                    h.set_entry_type(if matches!(e, E::Sym(..)) {
                        tar::EntryType::Symlink
                    } else {
                        tar::EntryType::Link
                    });
                    h.set_link_name_literal(t).unwrap();
                    (n, b"", 0o777)
                }
                E::Fifo(n) => {
                    h.set_entry_type(tar::EntryType::Fifo);
                    (n, b"", 0o644)
                }
            };
            let gnu = h.as_gnu_mut().unwrap();
            gnu.name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_size(data.len() as u64);
            h.set_mode(mode);
            h.set_mtime(1_700_000_000);
            h.set_cksum();
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
        if end {
            out.extend_from_slice(&[0u8; 1024]);
        }
        out
    }

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn l(s: &str) -> CopiedEntry {
        CopiedEntry::other(s)
    }

    fn opts() -> MirrorOptions {
        MirrorOptions {
            protect: vec![p(".iterion")],
            cap: 1 << 20,
            prefix: None,
        }
    }

    #[test]
    fn changes_are_applied_and_deletions_mirrored_but_git_is_never_written() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path();
        std::fs::write(w.join("a"), "a").unwrap();
        std::fs::write(w.join("b"), "old").unwrap();
        std::fs::create_dir_all(w.join("gone/deep")).unwrap();
        std::fs::write(w.join("gone/deep/f"), "x").unwrap();
        std::fs::create_dir(w.join(".git")).unwrap();
        std::fs::write(w.join(".git/config"), "[core]\n").unwrap();
        std::fs::create_dir(w.join(".iterion")).unwrap();
        std::fs::write(w.join(".iterion/run.json"), "{}").unwrap();
        let before = [l("a"), l("b"), l("gone"), l("gone/deep"), l("gone/deep/f")];
        let tar = archive(
            &[
                E::Dir("./"),
                E::File("./b", b"new", 0o644),
                E::Dir("./.git"),
                E::File("./.git/config", b"[core]\nhooksPath=/tmp\n", 0o644),
                E::File("./.iterion/run.json", b"{\"status\":\"forged\"}", 0o644),
                E::Dir("./sub"),
                E::File("./sub/.git/hooks/post-checkout", b"#!/bin/sh\n", 0o755),
                E::File("./sub/new", b"n", 0o640),
            ],
            true,
        );
        let r = mirror_back_sync(&tar[..], w, &before, &opts()).unwrap();
        assert_eq!(std::fs::read_to_string(w.join("b")).unwrap(), "new");
        assert!(!w.join("a").exists());
        assert!(!w.join("gone").exists());
        assert_eq!(
            std::fs::read_to_string(w.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert_eq!(
            std::fs::read_to_string(w.join(".iterion/run.json")).unwrap(),
            "{}"
        );
        assert!(!w.join("sub/.git").exists());
        assert_eq!(std::fs::read_to_string(w.join("sub/new")).unwrap(), "n");
        assert_eq!(
            std::fs::metadata(w.join("sub/new")).unwrap().permissions().mode() & 0o7777,
            0o640
        );
        assert_eq!((r.deleted, r.protected, r.skipped), (4, 4, 0), "{r:?}");
    }

    #[test]
    fn nothing_is_written_or_deleted_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("victim"), "keep").unwrap();
        let w = d.path().join("ws");
        std::fs::create_dir(&w).unwrap();
        std::fs::create_dir(w.join("real")).unwrap();
        std::fs::write(w.join("real/f"), "f").unwrap();
        // A link the host already had (planted earlier) pointing outside.
        symlink(outside.path(), w.join("planted")).unwrap();
        let before = [l("real"), l("real/f"), l("planted"), l("planted/victim")];
        let tar = archive(
            &[
                E::Sym("esc", "../../etc"),
                E::Sym("abs", "/etc"),
                E::Sym("togit", ".git/hooks"),
                E::File("planted/victim", b"owned", 0o644),
                E::Sym("real", "."),
                E::File("real/g", b"through the link", 0o644),
                E::Hard("hard", "/etc/passwd"),
                E::Fifo("pipe"),
                E::File("../up", b"x", 0o644),
                E::File("planted", b"the link itself is replaced", 0o644),
            ],
            true,
        );
        let r = mirror_back_sync(&tar[..], &w, &before, &opts()).unwrap();
        assert_eq!(
            std::fs::read_to_string(outside.path().join("victim")).unwrap(),
            "keep"
        );
        assert!(!w.join("esc").exists() && std::fs::symlink_metadata(w.join("abs")).is_err());
        assert!(std::fs::symlink_metadata(w.join("togit")).is_err());
        // `real` became a link to `.`, so `real/g` was refused rather than written into the workspace root.
        assert!(!w.join("g").exists());
        assert!(!d.path().join("up").exists());
        assert_eq!(
            std::fs::read_to_string(w.join("planted")).unwrap(),
            "the link itself is replaced"
        );
        assert!(std::fs::symlink_metadata(w.join("hard")).is_err());
        assert!(std::fs::symlink_metadata(w.join("pipe")).is_err());
        // eight refused entries, and `real/f` is not deleted through the new link
        assert_eq!(r.skipped, 9, "{r:#?}");
    }

    #[test]
    fn set_id_bits_are_dropped() {
        let d = tempfile::tempdir().unwrap();
        let tar = archive(
            &[E::File("suid", b"\x7fELF", 0o4755), E::File("sgid", b"x", 0o2775)],
            true,
        );
        mirror_back_sync(&tar[..], d.path(), &[], &opts()).unwrap();
        let mode = |n: &str| std::fs::metadata(d.path().join(n)).unwrap().permissions().mode() & 0o7777;
        assert_eq!((mode("suid"), mode("sgid")), (0o755, 0o775));
    }

    #[test]
    fn a_truncated_archive_mirrors_no_deletion() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("keep"), "k").unwrap();
        let mut tar = archive(&[E::File("a", &[b'x'; 2000], 0o644)], false);
        tar.truncate(1024);
        let e = mirror_back_sync(&tar[..], d.path(), &[l("keep")], &opts()).unwrap_err();
        assert!(e.to_string().contains("no deletion was mirrored"), "{e}");
        assert!(d.path().join("keep").exists());
    }

    #[test]
    fn the_size_cap_stops_before_deleting() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("keep"), "k").unwrap();
        let tar = archive(&[E::File("big", &[0u8; 4096], 0o644)], true);
        let o = MirrorOptions {
            protect: Vec::new(),
            cap: 1000,
            prefix: None,
        };
        let e = mirror_back_sync(&tar[..], d.path(), &[l("keep")], &o).unwrap_err();
        assert!(e.to_string().contains("size cap"), "{e}");
        assert!(d.path().join("keep").exists());
    }

    #[test]
    fn a_hard_link_to_a_file_of_the_archive_is_a_copy_and_a_file_replaces_a_directory() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("x/y")).unwrap();
        let tar = archive(
            &[
                E::File("f", b"data", 0o644),
                E::Hard("g", "f"),
                E::File("x", b"now a file", 0o644),
            ],
            true,
        );
        let r = mirror_back_sync(&tar[..], d.path(), &[l("x"), l("x/y")], &opts()).unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join("g")).unwrap(), "data");
        assert_eq!(std::fs::read_to_string(d.path().join("x")).unwrap(), "now a file");
        assert_eq!((r.written, r.skipped), (3, 0), "{r:?}");
    }

    #[test]
    fn a_directory_holding_something_unknown_is_kept() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("dir")).unwrap();
        std::fs::write(d.path().join("dir/known"), "k").unwrap();
        std::fs::write(d.path().join("dir/unknown"), "u").unwrap();
        let tar = archive(&[], true);
        let r = mirror_back_sync(&tar[..], d.path(), &[l("dir"), l("dir/known")], &opts()).unwrap();
        assert!(d.path().join("dir/unknown").exists());
        assert!(!d.path().join("dir/known").exists());
        assert_eq!(r.deleted, 1);
    }

    #[test]
    fn a_copy_out_archive_is_read_under_its_directory_name() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("gone"), "g").unwrap();
        let tar = archive(
            &[
                E::Dir("workspace/"),
                E::File("workspace/a", b"a", 0o644),
                E::File("elsewhere", b"e", 0o644),
            ],
            true,
        );
        let o = MirrorOptions {
            prefix: Some(p("workspace")),
            ..opts()
        };
        let r = mirror_back_sync(&tar[..], d.path(), &[l("gone")], &o).unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join("a")).unwrap(), "a");
        assert!(!d.path().join("elsewhere").exists() && !d.path().join("workspace").exists());
        assert!(!d.path().join("gone").exists());
        assert_eq!((r.written, r.deleted, r.skipped), (1, 1, 1), "{r:?}");
    }

    #[test]
    fn a_file_the_sandbox_did_not_change_is_left_as_the_host_has_it_now() {
        use sha2::{Digest, Sha256};
        let d = tempfile::tempdir().unwrap();
        // Copied in as "orig"; since then another sandbox's copy back (or the host) changed both files.
        let orig: [u8; 32] = Sha256::digest(b"orig").into();
        std::fs::write(d.path().join("same"), "newer on the host").unwrap();
        std::fs::write(d.path().join("changed"), "newer on the host").unwrap();
        let before = [
            CopiedEntry::file("same", orig),
            CopiedEntry::file("changed", orig),
        ];
        let tar = archive(
            &[E::File("same", b"orig", 0o644), E::File("changed", b"pod", 0o644)],
            true,
        );
        let r = mirror_back_sync(&tar[..], d.path(), &before, &opts()).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join("same")).unwrap(),
            "newer on the host"
        );
        assert_eq!(std::fs::read_to_string(d.path().join("changed")).unwrap(), "pod");
        assert_eq!((r.unchanged, r.written, r.deleted), (1, 1, 0), "{r:?}");
        let left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left.len(), 2, "no temporary file is left: {left:?}");
    }
}
