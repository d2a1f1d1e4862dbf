//! Private directories and atomic file writes of the store, through `iterion_boundary::fs` (the one module that
//! touches store files: `cargo xtask tidy` fails on direct file access elsewhere in the store).
use std::path::Path;

use iterion_boundary::fs::Dir;

use crate::error::Result;

/// Creates a directory (and missing parents) with mode 0700.
pub(crate) fn create_private_dir(path: &Path) -> Result<()> {
    Dir::create_private(path)?;
    Ok(())
}

/// Atomic file write: temporary file in the same directory (created exclusively, never through a link),
/// fsync, rename over `path`, fsync the directory. A crash at any point leaves either the previous or the new
/// content at `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let (dir, name) = Dir::parent_of(path)?;
    Ok(dir.write_atomic(&name, bytes)?)
}
