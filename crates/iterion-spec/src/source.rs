//! Reading the files iterion parses: the one bounded reader.
//!
//! Every file that comes from the repository (a workflow, `devcontainer.json`, a Dockerfile, `.dockerignore`,
//! `.env`) is untrusted. [`read_regular`] reads one safely: it refuses anything but a regular file before
//! opening it (a FIFO would block forever, `/dev/zero` never ends), opens without blocking and checks the type
//! again on the open descriptor (the path may have been swapped in between), refuses a file whose size is
//! over the limit, and reads at most `limit + 1` bytes, so a file that grows while it is read cannot exceed
//! the limit either.
//!
//! ```
//! use iterion_spec::source::{FileRead, read_regular};
//! let dir = tempfile::tempdir().unwrap();
//! let p = dir.path().join("wf.bot");
//! std::fs::write(&p, "workflow w:\n").unwrap();
//! assert_eq!(read_regular(&p, 1024), FileRead::Found(b"workflow w:\n".to_vec()));
//! assert_eq!(read_regular(&p, 4), FileRead::TooLarge(4));
//! assert_eq!(read_regular(dir.path(), 1024), FileRead::NotRegular("a directory"));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest file iterion reads from a repository (10 MiB, the workflow source limit).
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// The outcome of reading one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileRead {
    /// A regular file and its bytes.
    Found(Vec<u8>),
    /// Nothing at that path.
    NotFound,
    /// Something that is not a regular file (`"a directory"`, `"a FIFO"`, `"a character device"`, …); it was
    /// not read.
    NotRegular(&'static str),
    /// A regular file larger than the limit (in bytes); it was not read past the limit.
    TooLarge(u64),
    /// The file exists but could not be read (the I/O error's text).
    Failed(String),
}

impl FileRead {
    /// The bytes, or why there are none (lower case, for `cannot read <file>: <why>`).
    pub fn into_bytes(self) -> Result<Vec<u8>, String> {
        match self {
            FileRead::Found(b) => Ok(b),
            other => Err(other.to_string()),
        }
    }
}

impl fmt::Display for FileRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileRead::Found(b) => write!(f, "{} bytes", b.len()),
            FileRead::NotFound => f.write_str("no such file"),
            FileRead::NotRegular(kind) => write!(f, "not a regular file ({kind})"),
            FileRead::TooLarge(max) => write!(f, "file exceeds the maximum size ({})", human_size(*max)),
            FileRead::Failed(e) => f.write_str(e),
        }
    }
}

fn human_size(n: u64) -> String {
    if n >= 1024 * 1024 && n.is_multiple_of(1024 * 1024) {
        format!("{} MiB", n / (1024 * 1024))
    } else {
        format!("{n} bytes")
    }
}

/// What kind of file system object `ft` is, for [`FileRead::NotRegular`].
fn kind_of(ft: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    if ft.is_dir() { "a directory" } else { "not a file" }
}

/// Opens the regular file at `path` (symlinks followed) for reading, without blocking: `Err` is
/// [`FileRead::NotFound`], [`FileRead::NotRegular`] or [`FileRead::Failed`]. The type is checked before
/// opening and again on the open descriptor. Returns the file and its size at opening.
pub fn open_regular(path: &Path) -> Result<(std::fs::File, u64), FileRead> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(FileRead::NotFound),
        Err(e) => return Err(FileRead::Failed(e.to_string())),
    };
    if !meta.is_file() {
        return Err(FileRead::NotRegular(kind_of(meta.file_type())));
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Never block in open(2) (a FIFO swapped in after the check) and never acquire a terminal.
        opts.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = match opts.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(FileRead::NotFound),
        Err(e) => return Err(FileRead::Failed(e.to_string())),
    };
    // The type again, of what was actually opened.
    let meta = file.metadata().map_err(|e| FileRead::Failed(e.to_string()))?;
    if !meta.is_file() {
        return Err(FileRead::NotRegular(kind_of(meta.file_type())));
    }
    Ok((file, meta.len()))
}

/// Reads the regular file at `path` (symlinks followed, see [`open_regular`]), at most `limit` bytes: a file
/// whose size is over the limit is not read, and a file that grows while it is read is cut at `limit + 1`
/// bytes and refused.
pub fn read_regular(path: &Path, limit: u64) -> FileRead {
    let (file, len) = match open_regular(path) {
        Ok(f) => f,
        Err(e) => return e,
    };
    if len > limit {
        return FileRead::TooLarge(limit);
    }
    let mut buf = Vec::with_capacity(len.min(limit) as usize);
    match file.take(limit.saturating_add(1)).read_to_end(&mut buf) {
        Ok(_) if buf.len() as u64 > limit => FileRead::TooLarge(limit),
        Ok(_) => FileRead::Found(buf),
        Err(e) => FileRead::Failed(e.to_string()),
    }
}

/// Reads the files this crate is asked to parse. Implementations decide what "reading" means (the real file
/// system, an in-memory map, a git tree).
pub trait SourceReader {
    /// Reads the regular file at `path`.
    fn read(&self, path: &Path) -> FileRead;

    /// The canonical form of `path` (every symlink resolved), when the reader can tell; `None` means "use the
    /// lexical path only".
    fn canonicalize(&self, _path: &Path) -> Option<PathBuf> {
        None
    }
}

/// A [`SourceReader`] over an in-memory map of files (no symlinks).
#[derive(Debug, Clone, Default)]
pub struct MemReader {
    files: BTreeMap<PathBuf, Vec<u8>>,
    unreadable: BTreeMap<PathBuf, String>,
}

impl MemReader {
    /// An empty file set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a file.
    pub fn with_file(mut self, path: impl Into<PathBuf>, content: impl Into<Vec<u8>>) -> Self {
        self.files.insert(path.into(), content.into());
        self
    }

    /// Adds a file that exists but fails to read with `error`.
    pub fn with_unreadable(mut self, path: impl Into<PathBuf>, error: impl Into<String>) -> Self {
        self.unreadable.insert(path.into(), error.into());
        self
    }
}

impl SourceReader for MemReader {
    fn read(&self, path: &Path) -> FileRead {
        if let Some(e) = self.unreadable.get(path) {
            return FileRead::Failed(e.clone());
        }
        match self.files.get(path) {
            Some(b) if b.len() as u64 > MAX_FILE_BYTES => FileRead::TooLarge(MAX_FILE_BYTES),
            Some(b) => FileRead::Found(b.clone()),
            None => FileRead::NotFound,
        }
    }
}

/// A [`SourceReader`] over the real file system through [`read_regular`] with [`MAX_FILE_BYTES`], for the CLI
/// and library callers.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsReader;

impl SourceReader for FsReader {
    fn read(&self, path: &Path) -> FileRead {
        read_regular(path, MAX_FILE_BYTES)
    }

    fn canonicalize(&self, path: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(path).ok()
    }
}

/// Reads and checks a workflow file (lex, parse, compile) through [`read_regular`]. A file over the size
/// limit gives only `E007` (01 §1.1); a file that cannot be read (missing, not a regular file, an I/O error)
/// is `Err` with the reason. On success the bytes read are returned with the result.
pub fn check_file(path: &Path, label: &str) -> Result<(Vec<u8>, crate::compile::Checked), String> {
    match read_regular(path, crate::lexer::MAX_SOURCE_BYTES as u64) {
        FileRead::Found(bytes) => {
            let checked = crate::compile::check_bytes(&bytes, label);
            Ok((bytes, checked))
        }
        FileRead::TooLarge(_) => Ok((
            Vec::new(),
            crate::compile::Checked {
                workflows: Vec::new(),
                diagnostics: vec![crate::lexer::too_large(label)],
            },
        )),
        other => Err(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_over_the_limit_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![b'x'; 101]).unwrap();
        assert_eq!(read_regular(&p, 100), FileRead::TooLarge(100));
        assert_eq!(read_regular(&p, 101), FileRead::Found(vec![b'x'; 101]));
        assert_eq!(read_regular(&dir.path().join("none"), 100), FileRead::NotFound);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn devices_and_fifos_are_refused_without_blocking() {
        assert_eq!(
            read_regular(Path::new("/dev/zero"), 100),
            FileRead::NotRegular("a character device")
        );
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        assert_eq!(read_regular(&fifo, 100), FileRead::NotRegular("a FIFO"));
        // Through a symlink too.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        assert_eq!(read_regular(&link, 100), FileRead::NotRegular("a FIFO"));
        assert_eq!(
            FileRead::NotRegular("a FIFO").to_string(),
            "not a regular file (a FIFO)"
        );
        assert_eq!(
            FileRead::TooLarge(MAX_FILE_BYTES).to_string(),
            "file exceeds the maximum size (10 MiB)"
        );
    }

    #[test]
    fn a_workflow_over_the_limit_gives_only_e007() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.bot");
        std::fs::write(&p, vec![b' '; crate::lexer::MAX_SOURCE_BYTES + 1]).unwrap();
        let (_, checked) = check_file(&p, "big.bot").unwrap();
        let codes: Vec<_> = checked
            .diagnostics
            .iter()
            .map(|d| (d.code, d.line, d.col))
            .collect();
        assert_eq!(codes, [("E007", 1, 1)]);
        assert_eq!(
            check_file(Path::new("/dev/zero"), "z").unwrap_err(),
            "not a regular file (a character device)"
        );
    }
}
