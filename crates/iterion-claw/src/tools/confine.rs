//! Paths of the model confined to the work directory: `..` that climbs above it, an absolute path outside
//! it and a symbolic link that leads out of it are refused. The walks of the tools that use it never follow
//! a link. This confines what the model names, not what the tools' processes do: `bash` and `run_command`
//! reach whatever the runner can, and the sandbox is the boundary there.

use super::tool_err;
use crate::error::Result;
use std::path::{Component, Path, PathBuf};

/// The work directory, canonical, that a tool's paths must stay in.
#[derive(Debug, Clone)]
pub(crate) struct Root {
    given: PathBuf,
    canon: PathBuf,
}

impl Root {
    /// `work_dir` as given and canonical (the directory must exist).
    pub(crate) fn new(tool: &str, work_dir: &Path) -> Result<Root> {
        let canon = work_dir
            .canonicalize()
            .map_err(|e| tool_err(tool, format!("work directory {}: {e}", work_dir.display())))?;
        Ok(Root {
            given: work_dir.to_path_buf(),
            canon,
        })
    }

    /// The canonical work directory.
    pub(crate) fn path(&self) -> &Path {
        &self.canon
    }

    /// `p` (relative to the work directory, or absolute inside it) as a canonical path inside it; the part of
    /// `p` that does not exist yet is appended as given (so a file to create can be named). Refused: a path
    /// outside the work directory, lexically or through a symbolic link.
    pub(crate) fn confine(&self, tool: &str, p: &str) -> Result<PathBuf> {
        let outside = || tool_err(tool, format!("path '{p}' is outside the work directory"));
        let rel = self.lexical(p).ok_or_else(outside)?;
        let full = self.canon.join(&rel);
        for existing in full.ancestors() {
            if existing.symlink_metadata().is_err() {
                continue;
            }
            let canon = existing
                .canonicalize()
                .map_err(|e| tool_err(tool, format!("path '{p}': {}: {e}", self.shown(existing))))?;
            if !canon.starts_with(&self.canon) {
                return Err(outside());
            }
            let rest = full.strip_prefix(existing).unwrap_or(Path::new(""));
            return Ok(if rest.as_os_str().is_empty() {
                canon
            } else {
                canon.join(rest)
            });
        }
        Err(outside())
    }

    /// `p` relative to the work directory, `..` resolved lexically; `None` when it leaves the directory.
    fn lexical(&self, p: &str) -> Option<PathBuf> {
        let path = Path::new(p);
        let rel = if path.is_absolute() {
            path.strip_prefix(&self.canon)
                .or_else(|_| path.strip_prefix(&self.given))
                .ok()?
        } else {
            path
        };
        let mut out = PathBuf::new();
        for c in rel.components() {
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

    /// `p` relative to the work directory, for result texts (`.` for the directory itself).
    pub(crate) fn shown(&self, p: &Path) -> String {
        match p.strip_prefix(&self.canon) {
            Ok(r) if r.as_os_str().is_empty() => ".".into(),
            Ok(r) => r.to_string_lossy().into_owned(),
            Err(_) => p.to_string_lossy().into_owned(),
        }
    }
}
