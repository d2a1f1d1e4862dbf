//! Private directories and atomic file writes of the store.
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Prefix of the temporary files of [`write_atomic`].
pub(crate) fn temp_prefix(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".{name}.tmp-")
}

/// Writes `bytes` to a temporary file `.<name>.tmp-<random>` (mode 0600) next to `path` and fsyncs it.
pub(crate) fn stage(path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let tmp = dir.join(format!("{}{:016x}", temp_prefix(path), rand::random::<u64>()));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io("write", &tmp, e));
    }
    Ok(tmp)
}

/// Renames a staged file over `path` and fsyncs the directory.
pub(crate) fn commit(tmp: &Path, path: &Path) -> Result<()> {
    if let Err(e) = fs::rename(tmp, path) {
        let _ = fs::remove_file(tmp);
        return Err(Error::io("rename", tmp, e));
    }
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("sync", dir, e))
}

/// Creates a directory (and missing parents) with mode 0700.
pub(crate) fn create_private_dir(path: &Path) -> Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| Error::io("create", path, e))
}

/// Atomic file write: temporary file in the same directory, fsync, rename over `path`, fsync the directory.
/// A crash at any point leaves either the previous or the new content at `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = stage(path, bytes)?;
    commit(&tmp, path)
}
