//! Where run stores live (section 1.1).
//!
//! The store location never comes from the repository: a `.iterion` directory, a store marker or a `runs`
//! symlink a repository (or an earlier node) ships decides nothing. The store is the operator's `--store-dir`
//! or `<data dir>/projects/<key>`.
use std::path::{Path, PathBuf};

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

/// The store dir: `--store-dir` (made absolute), else `<data dir>/projects/<key>`. Pure: nothing the project
/// directory holds is read, so a repository cannot choose where its runs are recorded.
pub fn store_dir(req: StoreDirRequest<'_>) -> PathBuf {
    if let Some(s) = req.store_dir {
        return absolutize(s, req.cwd);
    }
    let project = absolutize(req.project_dir, req.cwd);
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
