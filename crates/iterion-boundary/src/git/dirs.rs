//! Where a checkout's git directories are, found without asking git and without trusting what the repository
//! says on its own: a `.git` file, a `commondir` or a submodule's `core.worktree` is followed only when the
//! directory it leads to points back at the checkout.
use std::path::{Path, PathBuf};

/// The git directories of a checkout after verification: `git_dir` is `G` (the checkout's `.git` directory,
/// or the directory named by its `.git` file), `common_dir` is `C` (`G`, or the target of `G/commondir`: where
/// objects and refs live). Both are canonical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitDirs {
    /// `G`.
    pub git_dir: PathBuf,
    /// `C`.
    pub common_dir: PathBuf,
    /// `G` or `C` lies outside the checkout: they belong to a verified linked worktree or submodule.
    pub outside: bool,
}

impl GitDirs {
    /// `C/objects`: the repository's object directory.
    pub fn objects_dir(&self) -> PathBuf {
        self.common_dir.join("objects")
    }
}

/// A git pointer of a checkout that iterion does not follow: the repository's content names a host path that
/// is not verifiably its own git directory, or a protected path is a symbolic link leading out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRefusal {
    /// The file or directory of the checkout that holds the pointer.
    pub pointer: PathBuf,
    /// Why, as a clause after the pointer's path.
    pub reason: String,
    /// What the operator can do.
    pub remedy: String,
}

impl std::fmt::Display for GitRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.pointer.display(), self.reason)
    }
}

/// The largest pointer file read (`.git`, `commondir`, `gitdir`, a module's `config`); git writes one short
/// line (a config a few lines).
pub const POINTER_MAX: u64 = 64 * 1024;

/// Reads a small regular file without following a symbolic link at its own path and without blocking (a FIFO
/// is refused, not waited on); `Ok(None)` when absent. `Err` is a clause naming what is wrong.
pub fn read_small_file(p: &Path, cap: u64) -> Result<Option<Vec<u8>>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let md = match std::fs::symlink_metadata(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot be read: {e}")),
        Ok(m) => m,
    };
    if md.file_type().is_symlink() {
        return Err("is a symbolic link".into());
    }
    if !md.is_file() {
        return Err("is not a regular file".into());
    }
    if md.len() > cap {
        return Err(format!("is larger than {cap} bytes"));
    }
    let flags = (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits();
    let f = match std::fs::OpenOptions::new().read(true).custom_flags(flags).open(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot be read: {e}")),
        Ok(f) => f,
    };
    // swapped between the check and the open: judged by what was opened
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Err("is not a regular file".into());
    }
    let mut bytes = Vec::new();
    f.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() as u64 > cap {
        return Err(format!("is larger than {cap} bytes"));
    }
    Ok(Some(bytes))
}

fn read_pointer(p: &Path) -> Result<Option<String>, String> {
    match read_small_file(p, POINTER_MAX)? {
        None => Ok(None),
        Some(b) => String::from_utf8(b)
            .map(Some)
            .map_err(|_| "is not UTF-8 text".into()),
    }
}

fn resolve_against(base: &Path, text: &str) -> PathBuf {
    let p = Path::new(text);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// The directory a pointer names, canonical; it must exist and be a directory.
fn pointed_dir(base: &Path, text: &str) -> Result<PathBuf, String> {
    let raw = resolve_against(base, text);
    let c =
        std::fs::canonicalize(&raw).map_err(|_| format!("names {}, which does not exist", raw.display()))?;
    if !c.is_dir() {
        return Err(format!("names {}, which is not a directory", c.display()));
    }
    Ok(c)
}

/// `core.worktree` of a git config file (the last value of the `[core]` section), for a submodule checkout.
fn core_worktree(config: &str) -> Option<String> {
    let mut in_core = false;
    let mut found = None;
    for line in config.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_core = l
                .trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
                .eq_ignore_ascii_case("core");
            continue;
        }
        if !in_core {
            continue;
        }
        if let Some((k, v)) = l.split_once('=')
            && k.trim().eq_ignore_ascii_case("worktree")
        {
            found = Some(v.trim().trim_matches('"').to_string());
        }
    }
    found
}

/// Verifies that `g` (outside the checkout, common dir `c`) is the git directory of the checkout `ws`: for a
/// linked worktree `g` is `c/worktrees/<name>` and `g/gitdir` names `ws/.git`; for a submodule (`g == c`) the
/// `core.worktree` of `g/config` names `ws`.
fn verify_outside(ws: &Path, g: &Path, c: &Path) -> Result<(), String> {
    if !c.join("HEAD").is_file() || !c.join("objects").is_dir() {
        return Err(format!("leads to {}, which is not a git repository", c.display()));
    }
    if g != c {
        let expected = g
            .file_name()
            .map(|n| c.join("worktrees").join(n))
            .unwrap_or_default();
        if g != expected {
            return Err(format!(
                "leads to {}, which is not a linked worktree's directory of the repository {} (git keeps those in {}/worktrees/<name>)",
                g.display(),
                c.display(),
                c.display()
            ));
        }
        let back = read_pointer(&g.join("gitdir"))
            .map_err(|r| format!("leads to {}, whose gitdir file {r}", g.display()))?
            .ok_or_else(|| {
                format!(
                    "leads to {}, which has no gitdir file naming this workspace",
                    g.display()
                )
            })?;
        let back = resolve_against(g, back.trim());
        let want = ws.join(".git");
        if std::fs::canonicalize(&back).ok().as_deref() != Some(want.as_path()) {
            return Err(format!(
                "leads to {}, whose gitdir file names {} instead of {} (this workspace)",
                g.display(),
                back.display(),
                want.display()
            ));
        }
        return Ok(());
    }
    let config = read_pointer(&g.join("config"))
        .map_err(|r| format!("leads to {}, whose config {r}", g.display()))?
        .unwrap_or_default();
    let wt = core_worktree(&config)
        .map(|w| std::fs::canonicalize(resolve_against(g, &w)).ok())
        .unwrap_or_default();
    if wt.as_deref() != Some(ws) {
        return Err(format!(
            "leads to {}, which is neither a linked worktree's git directory nor a submodule git directory whose checkout is this workspace",
            g.display()
        ));
    }
    Ok(())
}

/// The git directories of the checkout `checkout`, verified: `Ok(None)` when it has no `.git`.
///
/// Nothing read from the repository is trusted on its own: a `.git` directory must not hold a `commondir`
/// (git never writes one there), and a `.git` file or `commondir` that leads outside the checkout is followed
/// only when the target is a genuine repository whose own metadata points back at this checkout (see
/// [`verify_outside`]). Everything else is a [`GitRefusal`].
pub fn verify_git_dirs(checkout: &Path) -> Result<Option<GitDirs>, GitRefusal> {
    let ws = std::fs::canonicalize(checkout).unwrap_or_else(|_| checkout.to_path_buf());
    let dot = ws.join(".git");
    let md = match std::fs::symlink_metadata(&dot) {
        Err(_) => return Ok(None),
        Ok(m) => m,
    };
    let refuse = |pointer: &Path, reason: String, remedy: String| GitRefusal {
        pointer: pointer.to_path_buf(),
        reason,
        remedy,
    };
    let repair = "if this is a linked worktree, run `git worktree repair` from the main repository; otherwise restore the .git file (or remove it)".to_string();
    if md.file_type().is_symlink() {
        return Err(refuse(
            &dot,
            "is a symbolic link (a repository's .git is a directory, or a file naming a linked worktree's git directory)".into(),
            "replace the symbolic link with the directory it names".into(),
        ));
    }
    if md.is_dir() {
        let cd = dot.join("commondir");
        if std::fs::symlink_metadata(&cd).is_ok() {
            return Err(refuse(
                &cd,
                "exists in the repository's own .git directory, where git never writes one: it would redirect git (and the sandbox's mounts) to another directory".into(),
                format!("inspect and remove {}", cd.display()),
            ));
        }
        return Ok(Some(GitDirs {
            git_dir: dot.clone(),
            common_dir: dot,
            outside: false,
        }));
    }
    let text = read_pointer(&dot)
        .map_err(|r| refuse(&dot, r, repair.clone()))?
        .unwrap_or_default();
    let target = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("gitdir:"))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| refuse(&dot, "is a file without a `gitdir:` line".into(), repair.clone()))?;
    let g = pointed_dir(&ws, target).map_err(|r| refuse(&dot, r, repair.clone()))?;
    let cd = g.join("commondir");
    let c = match read_pointer(&cd).map_err(|r| refuse(&cd, r, repair.clone()))? {
        Some(t) => pointed_dir(&g, t.trim()).map_err(|r| refuse(&cd, r, repair.clone()))?,
        None => g.clone(),
    };
    let outside = !g.starts_with(&ws) || !c.starts_with(&ws);
    if outside {
        verify_outside(&ws, &g, &c).map_err(|r| refuse(&dot, r, repair.clone()))?;
    }
    Ok(Some(GitDirs {
        git_dir: g,
        common_dir: c,
        outside,
    }))
}

/// The repository that holds `work_dir`: the nearest directory at or above it with a `.git` entry (its top
/// level, whatever the repository's `core.worktree` says), and that checkout's verified git directories.
/// `Ok(None)` when no directory above has a `.git`.
pub fn find_repository(work_dir: &Path) -> Result<Option<(PathBuf, GitDirs)>, GitRefusal> {
    let start = std::fs::canonicalize(work_dir).unwrap_or_else(|_| work_dir.to_path_buf());
    for dir in start.ancestors() {
        if std::fs::symlink_metadata(dir.join(".git")).is_ok() {
            return Ok(verify_git_dirs(dir)?.map(|g| (dir.to_path_buf(), g)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_is_found_above_the_work_dir_whatever_its_config_says() {
        let t = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(t.path()).unwrap().join("repo");
        std::fs::create_dir_all(top.join(".git/objects")).unwrap();
        std::fs::write(top.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(top.join(".git/config"), "[core]\n\tworktree = /somewhere/else\n").unwrap();
        std::fs::create_dir_all(top.join("a/b")).unwrap();
        let (found, dirs) = find_repository(&top.join("a/b")).unwrap().unwrap();
        assert_eq!(found, top);
        assert_eq!(dirs.git_dir, top.join(".git"));
        assert_eq!(dirs.objects_dir(), top.join(".git/objects"));
        assert_eq!(find_repository(t.path()).unwrap(), None);
    }

    #[test]
    fn a_planted_pointer_is_refused_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(t.path()).unwrap().join("repo");
        std::fs::create_dir_all(top.join(".git")).unwrap();
        std::fs::write(top.join(".git/commondir"), "/etc\n").unwrap();
        let r = find_repository(&top).unwrap_err();
        assert_eq!(r.pointer, top.join(".git/commondir"));
        std::fs::remove_dir_all(top.join(".git")).unwrap();
        std::os::unix::fs::symlink("/etc", top.join(".git")).unwrap();
        assert!(
            find_repository(&top)
                .unwrap_err()
                .reason
                .contains("symbolic link")
        );
        std::fs::remove_file(top.join(".git")).unwrap();
        std::fs::write(top.join(".git"), "gitdir: /etc\n").unwrap();
        assert!(
            find_repository(&top)
                .unwrap_err()
                .reason
                .contains("not a git repository")
        );
    }

    #[test]
    fn small_files_are_read_bounded_and_never_through_a_link_or_a_fifo() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        std::fs::write(&f, "12345").unwrap();
        assert_eq!(read_small_file(&f, 5).unwrap().unwrap(), b"12345");
        assert!(read_small_file(&f, 4).unwrap_err().contains("larger"));
        assert_eq!(read_small_file(&t.path().join("none"), 5).unwrap(), None);
        std::os::unix::fs::symlink(&f, t.path().join("l")).unwrap();
        assert!(
            read_small_file(&t.path().join("l"), 5)
                .unwrap_err()
                .contains("symbolic link")
        );
        nix::unistd::mkfifo(&t.path().join("p"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(
            read_small_file(&t.path().join("p"), 5)
                .unwrap_err()
                .contains("regular file")
        );
    }
}
