//! The repository root of a work directory.

use std::path::{Path, PathBuf};

/// The git top-level of `work_dir` (walking up to a `.git`), else the work dir itself (05 §4.1).
pub fn repo_root(work_dir: &Path) -> PathBuf {
    work_dir
        .ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(work_dir)
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_up_to_the_git_top_level() {
        let dir = tempfile::tempdir().expect("tempdir");
        let nested = dir.path().join("a").join("b");
        std::fs::create_dir_all(&nested).expect("mkdir");
        assert_eq!(repo_root(&nested), nested, "no .git: the work dir itself");
        std::fs::create_dir(dir.path().join("a").join(".git")).expect("mkdir .git");
        assert_eq!(repo_root(&nested), dir.path().join("a"));
    }
}
