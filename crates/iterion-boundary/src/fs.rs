//! Store file access: reads that are bounded and never block, and writes relative to a directory handle.
//!
//! A run store holds files that a sandbox, a repository or an earlier process may have replaced: a `run.json`
//! that is a link to `/dev/zero`, an `events.jsonl` with a 3 GiB line, a run directory renamed and swapped for
//! a link. Everything here is built so that such a file is refused with an error naming it, never followed
//! and never read past a bound:
//!
//! - [`Dir`] is an open directory; every name below it is opened with `openat` and `O_NOFOLLOW` (a
//!   component that is a link is refused, not followed), files are created with `O_EXCL` or `O_NOFOLLOW`, and
//!   [`Dir::write_atomic`] stages and renames inside the directory it holds, so a parent renamed after the
//!   handle was opened does not redirect a write;
//! - [`read_file`] and [`Dir::read`] check the file type on the open descriptor (a regular file only, opened
//!   without blocking, so a FIFO does not hang), refuse a file over the size cap from its size, and read at
//!   most cap + 1 bytes;
//! - [`Lines`] reads a file line by line and refuses a line over its cap when it reaches it, without holding
//!   more than the cap in memory.
//!
//! ```
//! use iterion_boundary::fs::{Dir, read_file};
//!
//! let tmp = tempfile::tempdir().unwrap();
//! let store = Dir::create_private(tmp.path()).unwrap();
//! let run = store.create_dir("run-1").unwrap();
//! run.write_atomic("run.json", b"{}\n").unwrap();
//! assert_eq!(run.read("run.json", 1 << 20).unwrap(), b"{}\n");
//! assert_eq!(read_file(&tmp.path().join("run-1/run.json"), 1 << 20).unwrap(), b"{}\n");
//! ```
pub use std::fs::{File, TryLockError};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use crate::error::{Error, Result};

/// An open directory of the store. Names passed to its methods are single path components.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

fn io(op: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::StoreIo {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn errno(op: &'static str, path: &Path, e: Errno) -> Error {
    if e == Errno::ELOOP {
        return Error::StoreFile {
            path: path.to_path_buf(),
            reason: "is a symbolic link, which the store never follows".into(),
        };
    }
    if e == Errno::ENOTDIR {
        return Error::StoreFile {
            path: path.to_path_buf(),
            reason: "is not a directory".into(),
        };
    }
    io(op, path, std::io::Error::from_raw_os_error(e as i32))
}

/// `true` when `e` says the file or directory does not exist.
pub fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::StoreIo { source, .. } if source.kind() == ErrorKind::NotFound)
}

/// What a file that is not a regular file is, for the error (`"a character device"`, `"a FIFO"`, …).
fn kind_of(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// `file` when it is a regular file, with its size; the refusal naming `path` otherwise.
fn regular(file: File, path: &Path) -> Result<(File, u64)> {
    let md = file.metadata().map_err(|e| io("stat", path, e))?;
    if !md.file_type().is_file() {
        return Err(Error::StoreFile {
            path: path.to_path_buf(),
            reason: format!("is not a regular file ({})", kind_of(md.file_type())),
        });
    }
    Ok((file, md.len()))
}

/// Reads all of `file` (of size `len`, at `path`), at most `cap` bytes.
fn read_capped(file: File, len: u64, path: &Path, cap: u64) -> Result<Vec<u8>> {
    let too_large = || Error::StoreFile {
        path: path.to_path_buf(),
        reason: format!("is larger than the limit of {cap} bytes"),
    };
    if len > cap {
        return Err(too_large());
    }
    let mut buf = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(cap.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| io("read", path, e))?;
    if buf.len() as u64 > cap {
        return Err(too_large());
    }
    Ok(buf)
}

const READ_FLAGS: i32 = nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC;

/// Opens the regular file at `path` for reading: its last component is never followed if it is a link, the
/// open never blocks (a FIFO), and anything but a regular file is refused naming it.
pub fn open_file(path: &Path) -> Result<(File, u64)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(READ_FLAGS)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(n) => errno("open", path, Errno::from_raw(n)),
            None => io("open", path, e),
        })?;
    regular(file, path)
}

/// Reads the regular file at `path` ([`open_file`]), at most `cap` bytes: a larger file is refused from its
/// size, a file that grows while it is read is refused at `cap + 1` bytes.
pub fn read_file(path: &Path, cap: u64) -> Result<Vec<u8>> {
    let (file, len) = open_file(path)?;
    read_capped(file, len, path, cap)
}

/// Whether something (of any type, a link included) is at `path`; a link is not followed.
pub fn entry_exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

impl Dir {
    /// Opens the directory at `path` (its last component must not be a link).
    pub fn open(path: &Path) -> Result<Dir> {
        Dir::open_with(path, OFlag::O_NOFOLLOW)
    }

    /// Opens a root the operator named (a data dir, a store dir), following links the operator made on the
    /// way; nothing below it is reached except through the handle.
    pub fn open_root(path: &Path) -> Result<Dir> {
        Dir::open_with(path, OFlag::empty())
    }

    fn open_with(path: &Path, extra: OFlag) -> Result<Dir> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | extra,
            Mode::empty(),
        )
        .map_err(|e| errno("open", path, e))?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Creates the directory at `path` and its missing parents (mode 0700), then opens it as a root
    /// ([`Dir::open_root`]). For the roots the operator names; everything below is reached through the handle.
    pub fn create_private(path: &Path) -> Result<Dir> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(|e| io("create", path, e))?;
        Dir::open_root(path)
    }

    /// The directory holding `path` (opened as a root) and the last component of `path`.
    pub fn parent_of(path: &Path) -> Result<(Dir, String)> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Ok((Dir::open_root(parent)?, name))
    }

    /// The path this directory was opened at (for messages; never used to reach files).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn child(&self, name: &str) -> Result<PathBuf> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
            return Err(Error::StoreFile {
                path: self.path.join(name),
                reason: "is not a single path component".into(),
            });
        }
        Ok(self.path.join(name))
    }

    fn openat(&self, name: &str, flags: OFlag, mode: Mode) -> Result<OwnedFd> {
        let path = self.child(name)?;
        openat(
            self.fd.as_fd(),
            name,
            flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            mode,
        )
        .map_err(|e| {
            // `O_DIRECTORY | O_NOFOLLOW` on a link is ENOTDIR: say it is a link
            let at = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
            let link = e == Errno::ENOTDIR
                && nix::sys::stat::fstatat(self.fd.as_fd(), name, at)
                    .is_ok_and(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFLNK);
            errno("open", &path, if link { Errno::ELOOP } else { e })
        })
    }

    /// The subdirectory `name` (never through a link).
    pub fn open_dir(&self, name: &str) -> Result<Dir> {
        let fd = self.openat(name, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty())?;
        Ok(Dir {
            fd,
            path: self.path.join(name),
        })
    }

    /// Creates the subdirectory `name` (mode 0700) when absent and opens it (never through a link).
    pub fn create_dir(&self, name: &str) -> Result<Dir> {
        let path = self.child(name)?;
        match mkdirat(self.fd.as_fd(), name, Mode::S_IRWXU) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(errno("create", &path, e)),
        }
        self.open_dir(name)
    }

    /// Creates the subdirectory `name` (mode 0700), which must not exist yet; `Ok(None)` when it does.
    pub fn create_new_dir(&self, name: &str) -> Result<Option<Dir>> {
        let path = self.child(name)?;
        match mkdirat(self.fd.as_fd(), name, Mode::S_IRWXU) {
            Ok(()) => self.open_dir(name).map(Some),
            Err(Errno::EEXIST) => Ok(None),
            Err(e) => Err(errno("create", &path, e)),
        }
    }

    /// Opens the regular file `name` for reading (never through a link, never blocking).
    pub fn open_read(&self, name: &str) -> Result<(File, u64)> {
        let fd = self.openat(name, OFlag::O_RDONLY | OFlag::O_NONBLOCK, Mode::empty())?;
        regular(File::from(fd), &self.path.join(name))
    }

    /// Reads the regular file `name`, at most `cap` bytes ([`read_file`]).
    pub fn read(&self, name: &str, cap: u64) -> Result<Vec<u8>> {
        let (file, len) = self.open_read(name)?;
        read_capped(file, len, &self.path.join(name), cap)
    }

    /// Opens (creating with mode 0600) the regular file `name` for appending, readable too.
    pub fn open_append(&self, name: &str) -> Result<File> {
        let fd = self.openat(
            name,
            OFlag::O_RDWR | OFlag::O_APPEND | OFlag::O_CREAT | OFlag::O_NONBLOCK,
            Mode::S_IRUSR | Mode::S_IWUSR,
        )?;
        Ok(regular(File::from(fd), &self.path.join(name))?.0)
    }

    /// Opens (creating with mode 0600) the regular file `name` for reading and writing, not truncated.
    pub fn open_rw(&self, name: &str) -> Result<File> {
        let fd = self.openat(
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NONBLOCK,
            Mode::S_IRUSR | Mode::S_IWUSR,
        )?;
        Ok(regular(File::from(fd), &self.path.join(name))?.0)
    }

    /// Creates the file `name` (mode 0600), which must not exist; `Ok(None)` when something is there.
    pub fn create_new(&self, name: &str) -> Result<Option<File>> {
        match self.openat(
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
            Mode::S_IRUSR | Mode::S_IWUSR,
        ) {
            Ok(fd) => Ok(Some(File::from(fd))),
            Err(Error::StoreIo { source, .. }) if source.kind() == ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes the file `name` of this directory (never through a link: the link itself is removed).
    pub fn remove_file(&self, name: &str) -> Result<()> {
        let path = self.child(name)?;
        unlinkat(self.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir).map_err(|e| errno("remove", &path, e))
    }

    /// The names of the entries of this directory.
    pub fn entries(&self) -> Result<Vec<String>> {
        // a new open of `.`, not a dup: its own read position, so every listing starts at the beginning
        let dup = openat(
            self.fd.as_fd(),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| errno("list", &self.path, e))?;
        let mut d = nix::dir::Dir::from_fd(dup).map_err(|e| errno("list", &self.path, e))?;
        let mut out = Vec::new();
        for entry in d.iter() {
            let entry = entry.map_err(|e| errno("list", &self.path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                out.push(name);
            }
        }
        Ok(out)
    }

    /// Atomic write of `name`: a temporary file `.<name>.tmp-<random>` (mode 0600, created exclusively) in
    /// this directory, fsync, `renameat` over `name`, fsync of the directory. A crash at any point leaves the
    /// previous or the new content; a parent renamed meanwhile does not redirect it.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let path = self.child(name)?;
        let tmp = loop {
            let tmp = format!("{}{:016x}", temp_prefix(name), random_u64());
            if let Some(f) = self.create_new(&tmp)? {
                break (tmp, f);
            }
        };
        let (tmp, mut f) = tmp;
        let written = f.write_all(bytes).and_then(|()| f.sync_all());
        if let Err(e) = written {
            let _ = self.remove_file(&tmp);
            return Err(io("write", &self.path.join(&tmp), e));
        }
        if let Err(e) = renameat(self.fd.as_fd(), tmp.as_str(), self.fd.as_fd(), name) {
            let _ = self.remove_file(&tmp);
            return Err(errno("rename", &path, e));
        }
        self.sync()
    }

    /// fsyncs the directory.
    pub fn sync(&self) -> Result<()> {
        nix::unistd::fsync(self.fd.as_fd()).map_err(|e| errno("sync", &self.path, e))
    }
}

/// Prefix of the temporary files of [`Dir::write_atomic`] for `name`.
pub fn temp_prefix(name: &str) -> String {
    format!(".{name}.tmp-")
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    h.finish()
}

/// The lines of a file, each at most `cap` bytes (without its LF): a longer line is an error naming the file
/// and the line when it is reached, and never more than `cap` bytes of one line are held.
#[derive(Debug)]
pub struct Lines<R> {
    reader: BufReader<R>,
    path: PathBuf,
    cap: usize,
    line: u64,
    done: bool,
}

impl<R: Read> Lines<R> {
    /// Lines of `reader`, which reads the file at `path` (named in errors).
    pub fn new(reader: R, path: &Path, cap: usize) -> Lines<R> {
        Lines {
            reader: BufReader::with_capacity(64 * 1024, reader),
            path: path.to_path_buf(),
            cap,
            line: 0,
            done: false,
        }
    }

    /// The next line without its LF (a last line without LF too); `None` at the end.
    pub fn next_line(&mut self) -> Result<Option<Vec<u8>>> {
        if self.done {
            return Ok(None);
        }
        self.line += 1;
        let mut out = Vec::new();
        loop {
            let buf = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(io("read", &self.path, e)),
            };
            if buf.is_empty() {
                self.done = true;
                return Ok(if out.is_empty() { None } else { Some(out) });
            }
            let (take, end) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (i, true),
                None => (buf.len(), false),
            };
            if out.len() + take > self.cap {
                self.done = true;
                return Err(Error::StoreFile {
                    path: self.path.clone(),
                    reason: format!(
                        "has a line longer than the limit of {} bytes (line {})",
                        self.cap, self.line
                    ),
                });
            }
            out.extend_from_slice(&buf[..take]);
            self.reader.consume(take + usize::from(end));
            if end {
                return Ok(Some(out));
            }
        }
    }
}

impl<R: Read> Iterator for Lines<R> {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_line().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_refuse_links_devices_fifos_and_files_over_the_cap() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Dir::open(tmp.path()).unwrap();
        std::os::unix::fs::symlink("/dev/zero", tmp.path().join("zero")).unwrap();
        let e = d.read("zero", 10).unwrap_err().to_string();
        assert!(
            e.ends_with("zero is a symbolic link, which the store never follows"),
            "{e}"
        );
        let e = read_file(&tmp.path().join("zero"), 10).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let e = read_file(Path::new("/dev/zero"), 10).unwrap_err().to_string();
        assert_eq!(e, "/dev/zero is not a regular file (a character device)");
        let fifo = tmp.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::S_IRWXU).unwrap();
        let e = d.read("fifo", 10).unwrap_err().to_string();
        assert!(e.ends_with("fifo is not a regular file (a FIFO)"), "{e}");
        d.write_atomic("big", &[b'x'; 11]).unwrap();
        let e = d.read("big", 10).unwrap_err().to_string();
        assert!(e.ends_with("big is larger than the limit of 10 bytes"), "{e}");
        assert_eq!(d.read("big", 11).unwrap().len(), 11);
        assert!(is_not_found(&d.read("absent", 10).unwrap_err()));
        for bad in ["", ".", "..", "a/b"] {
            assert!(d.read(bad, 10).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_directory_handle_is_not_redirected_by_a_renamed_parent() {
        let tmp = tempfile::tempdir().unwrap();
        let root = Dir::create_private(&tmp.path().join("store")).unwrap();
        let run = root.create_dir("runs").unwrap().create_dir("r1").unwrap();
        // the parent is renamed and replaced with a link elsewhere
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("r1")).unwrap();
        std::fs::rename(tmp.path().join("store/runs"), tmp.path().join("store/moved")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, tmp.path().join("store/runs")).unwrap();
        run.write_atomic("run.json", b"{}").unwrap();
        assert!(!elsewhere.join("r1/run.json").exists());
        assert_eq!(
            std::fs::read(tmp.path().join("store/moved/r1/run.json")).unwrap(),
            b"{}"
        );
        // and a link is never entered from a handle
        let e = root.open_dir("runs").unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let e = root.create_dir("runs").unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(root.create_new_dir("moved").unwrap().is_none());
        for _ in 0..2 {
            let mut names = root.entries().unwrap();
            names.sort();
            assert_eq!(names, ["moved", "runs"]);
        }
        // no temporary file is left behind
        let left: Vec<_> = std::fs::read_dir(tmp.path().join("store/moved/r1"))
            .unwrap()
            .collect();
        assert_eq!(left.len(), 1);
    }

    #[test]
    fn a_file_that_is_a_link_is_never_created_through() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Dir::open(tmp.path()).unwrap();
        let target = tmp.path().join("target");
        std::os::unix::fs::symlink(&target, tmp.path().join("events.jsonl")).unwrap();
        assert!(d.open_append("events.jsonl").is_err());
        assert!(d.open_rw("events.jsonl").is_err());
        assert!(d.create_new("events.jsonl").unwrap().is_none());
        assert!(!target.exists());
        // renaming over a link replaces the link, never writes its target
        d.write_atomic("events.jsonl", b"x").unwrap();
        assert!(!target.exists());
        assert_eq!(std::fs::read(tmp.path().join("events.jsonl")).unwrap(), b"x");
    }

    fn lines(text: &[u8], cap: usize) -> Vec<std::result::Result<Vec<u8>, String>> {
        Lines::new(text, Path::new("/s/events.jsonl"), cap)
            .map(|r| r.map_err(|e| e.to_string()))
            .collect()
    }

    #[test]
    fn lines_are_capped() {
        assert_eq!(
            lines(b"a\nbb\n\nc", 2),
            [
                Ok(b"a".to_vec()),
                Ok(b"bb".to_vec()),
                Ok(vec![]),
                Ok(b"c".to_vec())
            ]
        );
        assert_eq!(
            lines(b"a\nbbb\nc\n", 2),
            [
                Ok(b"a".to_vec()),
                Err("/s/events.jsonl has a line longer than the limit of 2 bytes (line 2)".into())
            ]
        );
        assert!(lines(b"", 2).is_empty());
        // a line far longer than the reader's buffer is refused without being held
        let long = vec![b'x'; 200_000];
        assert_eq!(lines(&long, 100_000).len(), 1);
        assert!(lines(&long, 100_000)[0].is_err());
        assert_eq!(lines(&long, 200_000), [Ok(long.clone())]);
    }
}
