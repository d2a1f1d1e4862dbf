//! Where run stores live (section 1.1).
use std::path::{Path, PathBuf};

/// Name of the sentinel file that marks a `.iterion` directory as a managed store.
pub const STORE_SENTINEL: &str = ".iterion-store";

/// Name of the per-project store directory next to a workflow file.
pub const LOCAL_STORE_DIR: &str = ".iterion";

pub use iterion_host::{absolutize, data_dir};

/// The project key of a directory: every `/`, `\` and `:` replaced by `-`, prefixed with one more `-` when
/// it does not start with one (`/home/jo/app` → `-home-jo-app`, `C:\Users\jo\app` → `-C--Users-jo-app`).
pub fn project_key(dir: &str) -> String {
    let replaced: String = dir
        .chars()
        .map(|c| if matches!(c, '/' | '\\' | ':') { '-' } else { c })
        .collect();
    if replaced.starts_with('-') {
        replaced
    } else {
        format!("-{replaced}")
    }
}

/// `true` when `dir` is a managed store: it contains `runs/` or the sentinel file `.iterion-store`.
pub fn is_managed_store(dir: &Path) -> bool {
    dir.join("runs").is_dir() || dir.join(STORE_SENTINEL).is_file()
}

/// Inputs of the store dir decision of section 1.1.
#[derive(Debug, Clone, Copy)]
pub struct StoreDirRequest<'a> {
    /// `--store-dir`, when given.
    pub store_dir: Option<&'a Path>,
    /// The directory the run belongs to: the directory of the workflow file (commands without a workflow
    /// file use the current directory).
    pub project_dir: &'a Path,
    /// The current directory, to make relative paths absolute.
    pub cwd: &'a Path,
    /// The data dir (`iterion_host::data_dir`).
    pub data_dir: &'a Path,
}

/// The store dir, first match wins: `--store-dir` (made absolute); `<project dir>/.iterion` when it is a
/// managed store; `<data dir>/projects/<key>`. Reads the file system only to test for a managed store.
pub fn store_dir(req: StoreDirRequest<'_>) -> PathBuf {
    if let Some(s) = req.store_dir {
        return absolutize(s, req.cwd);
    }
    let project = absolutize(req.project_dir, req.cwd);
    let local = project.join(LOCAL_STORE_DIR);
    if is_managed_store(&local) {
        return local;
    }
    req.data_dir
        .join("projects")
        .join(project_key(&project.to_string_lossy()))
}

/// The project dir of a workflow file: its parent directory, made absolute against `cwd`.
pub fn workflow_project_dir(workflow_file: &Path, cwd: &Path) -> PathBuf {
    let abs = absolutize(workflow_file, cwd);
    abs.parent().map(Path::to_path_buf).unwrap_or(abs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_key(input: &str, expect: &str) {
        assert_eq!(project_key(input), expect, "{input}");
    }

    #[test]
    fn project_keys() {
        check_key("/home/jo/app", "-home-jo-app");
        check_key("C:\\Users\\jo\\app", "-C--Users-jo-app");
        check_key("/w/app", "-w-app");
        check_key("-already", "-already");
    }

    #[test]
    fn workflow_project_dir_is_the_absolute_parent() {
        assert_eq!(
            workflow_project_dir(Path::new("flows/a.bot"), Path::new("/x")),
            PathBuf::from("/x/flows")
        );
    }
}
