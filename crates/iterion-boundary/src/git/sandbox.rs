//! A sandbox's `.git`, read as data: where its `HEAD` points and the object files it wrote. Nothing here runs
//! git in that directory, reads its config, follows a symbolic link or opens anything but a regular file.
use std::path::{Path, PathBuf};

use super::dirs::read_small_file;
use crate::error::{Error, Result};

/// The largest `packed-refs` read.
const PACKED_REFS_MAX: u64 = 64 << 20;
/// How many symbolic refs are followed from `HEAD`.
const SYMREF_DEPTH: usize = 5;

/// Whether `s` is an object name of `hex_len` lowercase hex digits.
pub fn is_object_name(s: &str, hex_len: usize) -> bool {
    s.len() == hex_len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A ref name a sandbox may use: `refs/` then components of letters, digits, `.`, `_`, `-` and `/`, none empty,
/// none starting with `.`, none ending with `.lock`.
fn valid_ref(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("refs/") else {
        return false;
    };
    !rest.is_empty()
        && rest.split('/').all(|c| {
            !c.is_empty()
                && !c.starts_with('.')
                && !c.ends_with(".lock")
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        })
}

/// `rel` under `root`, refused when any directory on the way is a symbolic link or not a directory.
fn beneath(root: &Path, rel: &str) -> std::result::Result<PathBuf, String> {
    let mut p = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for (i, c) in parts.iter().enumerate() {
        p.push(c);
        if i + 1 < parts.len() {
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(format!("{} is not a directory", p.display())),
                Err(_) => return Err(format!("{} does not exist", p.display())),
            }
        }
    }
    Ok(p)
}

/// The object `HEAD` of the sandbox's git directory `dot_git` names: a detached object name, or a ref (loose
/// or in `packed-refs`, through at most five symbolic refs). `Err` says why it names nothing usable (a sandbox
/// that broke its own repository); the caller then treats the sandbox as having made no commit.
pub fn sandbox_head(dot_git: &Path, hex_len: usize) -> std::result::Result<String, String> {
    match std::fs::symlink_metadata(dot_git) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(format!("{} is not a directory", dot_git.display())),
        Err(_) => return Err(format!("{} does not exist", dot_git.display())),
    }
    let mut name = "HEAD".to_owned();
    for _ in 0..=SYMREF_DEPTH {
        let text = match read_ref(dot_git, &name, hex_len)? {
            Some(t) => t,
            None => return Err(format!("{name} names nothing")),
        };
        if is_object_name(&text, hex_len) {
            return Ok(text);
        }
        match text.strip_prefix("ref:").map(str::trim) {
            Some(r) if valid_ref(r) => name = r.to_owned(),
            _ => return Err(format!("{name} is neither an object name nor a ref")),
        }
    }
    Err(format!("more than {SYMREF_DEPTH} symbolic refs from HEAD"))
}

/// The trimmed content of ref `name` (a loose file, else its `packed-refs` line); `None` when absent.
fn read_ref(dot_git: &Path, name: &str, hex_len: usize) -> std::result::Result<Option<String>, String> {
    let p = beneath(dot_git, name)?;
    let shown = |r: String| format!("{} {r}", p.display());
    if let Some(b) = read_small_file(&p, 4096).map_err(shown)? {
        return Ok(Some(String::from_utf8_lossy(&b).trim().to_owned()));
    }
    if name == "HEAD" {
        return Ok(None);
    }
    let packed = dot_git.join("packed-refs");
    let Some(b) =
        read_small_file(&packed, PACKED_REFS_MAX).map_err(|r| format!("{} {r}", packed.display()))?
    else {
        return Ok(None);
    };
    Ok(String::from_utf8_lossy(&b).lines().find_map(|l| {
        let (sha, n) = l.split_once(' ')?;
        (n.trim() == name && is_object_name(sha, hex_len)).then(|| sha.to_owned())
    }))
}

/// Bounds of [`copy_objects`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CopyLimits {
    /// The most bytes copied in all.
    pub max_bytes: u64,
    /// The most files copied.
    pub max_files: usize,
}

impl Default for CopyLimits {
    /// 8 GiB, 1,000,000 files.
    fn default() -> Self {
        CopyLimits {
            max_bytes: 8 << 30,
            max_files: 1_000_000,
        }
    }
}

/// What [`copy_objects`] copied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopiedObjects {
    /// Loose object files.
    pub loose: usize,
    /// Pack files (their indexes are not copied: the caller indexes each pack itself).
    pub packs: Vec<PathBuf>,
    /// Bytes copied.
    pub bytes: u64,
}

/// Copies the object files of the sandbox's git directory `dot_git` into the host-owned object directory
/// `dest`: loose objects (`xx/<rest of the name>`) and pack files (`pack/pack-<hex>.pack`). Everything else is
/// left behind: `info/` (alternates, which would make the host read other directories), pack indexes and
/// bitmaps (git trusts them, so the host builds its own), anything that is not a regular file. Symbolic links
/// are never followed, a FIFO is never opened for long, and the copy stops at `limits`.
pub fn copy_objects(
    dot_git: &Path,
    dest: &Path,
    hex_len: usize,
    limits: CopyLimits,
) -> Result<CopiedObjects> {
    let src = dot_git.join("objects");
    let fail = |path: &Path, reason: String| Error::SandboxGit {
        path: path.to_path_buf(),
        reason,
    };
    let mut out = CopiedObjects::default();
    match std::fs::symlink_metadata(&src) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(fail(&src, "is not a directory".into())),
        Err(_) => return Ok(out),
    }
    let entries = std::fs::read_dir(&src).map_err(|e| fail(&src, format!("cannot be listed: {e}")))?;
    for e in entries.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        let name = e.file_name().to_string_lossy().into_owned();
        if !ft.is_dir() {
            continue;
        }
        if name.len() == 2 && is_hex(&name) {
            let files = std::fs::read_dir(e.path())
                .map_err(|err| fail(&e.path(), format!("cannot be listed: {err}")))?;
            for f in files.flatten() {
                let fname = f.file_name().to_string_lossy().into_owned();
                if fname.len() + 2 == hex_len && is_hex(&fname) && f.file_type().is_ok_and(|t| t.is_file()) {
                    copy_one(&f.path(), &dest.join(&name).join(&fname), limits, &mut out)?;
                    out.loose += 1;
                }
            }
        } else if name == "pack" {
            let files = std::fs::read_dir(e.path())
                .map_err(|err| fail(&e.path(), format!("cannot be listed: {err}")))?;
            for f in files.flatten() {
                let fname = f.file_name().to_string_lossy().into_owned();
                let is_pack = fname
                    .strip_prefix("pack-")
                    .and_then(|r| r.strip_suffix(".pack"))
                    .is_some_and(|h| !h.is_empty() && is_hex(h));
                if is_pack && f.file_type().is_ok_and(|t| t.is_file()) {
                    let to = dest.join("pack").join(&fname);
                    copy_one(&f.path(), &to, limits, &mut out)?;
                    out.packs.push(to);
                }
            }
        }
    }
    out.packs.sort();
    Ok(out)
}

fn is_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn copy_one(from: &Path, to: &Path, limits: CopyLimits, out: &mut CopiedObjects) -> Result<()> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |path: &Path, reason: String| Error::SandboxGit {
        path: path.to_path_buf(),
        reason,
    };
    if out.loose + out.packs.len() >= limits.max_files {
        return Err(fail(
            from,
            format!("is past the {} files copied at most", limits.max_files),
        ));
    }
    let flags = (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(from)
        .map_err(|e| fail(from, format!("cannot be read: {e}")))?;
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Err(fail(from, "is not a regular file".into()));
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| fail(parent, format!("cannot be created: {e}")))?;
    }
    let mut dest = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(|e| fail(to, format!("cannot be created: {e}")))?;
    let room = limits.max_bytes.saturating_sub(out.bytes);
    let n = std::io::copy(&mut f.take(room + 1), &mut dest)
        .map_err(|e| fail(from, format!("cannot be copied: {e}")))?;
    if n > room {
        return Err(fail(
            from,
            format!("is past the {} bytes copied at most", limits.max_bytes),
        ));
    }
    out.bytes += n;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef01234567";
    const B: &str = "89abcdef0123456789abcdef0123456789abcdef";

    fn dot(t: &tempfile::TempDir) -> PathBuf {
        let d = t.path().join(".git");
        std::fs::create_dir_all(d.join("refs/heads")).unwrap();
        d
    }

    #[test]
    fn head_is_followed_through_loose_and_packed_refs() {
        let t = tempfile::tempdir().unwrap();
        let d = dot(&t);
        std::fs::write(d.join("HEAD"), format!("{A}\n")).unwrap();
        assert_eq!(sandbox_head(&d, 40).unwrap(), A);
        std::fs::write(d.join("HEAD"), "ref: refs/heads/work\n").unwrap();
        assert!(sandbox_head(&d, 40).unwrap_err().contains("names nothing"));
        std::fs::write(
            d.join("packed-refs"),
            format!("# pack-refs\n{B} refs/heads/work\n"),
        )
        .unwrap();
        assert_eq!(sandbox_head(&d, 40).unwrap(), B);
        std::fs::write(d.join("refs/heads/work"), format!("{A}\n")).unwrap();
        assert_eq!(sandbox_head(&d, 40).unwrap(), A);
    }

    #[test]
    fn a_head_that_leaves_the_git_dir_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let d = dot(&t);
        let outside = t.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("x"), format!("{A}\n")).unwrap();
        for head in [
            "ref: refs/../../outside/x",
            "ref: /etc/passwd",
            "ref: refs/heads/.hidden",
            "garbage",
        ] {
            std::fs::write(d.join("HEAD"), head).unwrap();
            assert!(sandbox_head(&d, 40).is_err(), "{head}");
        }
        // a symbolic link on the way to the ref
        std::os::unix::fs::symlink(&outside, d.join("refs/heads/link")).unwrap();
        std::fs::write(d.join("HEAD"), "ref: refs/heads/link/x").unwrap();
        assert!(sandbox_head(&d, 40).unwrap_err().contains("not a directory"));
        std::os::unix::fs::symlink(outside.join("x"), d.join("refs/heads/file")).unwrap();
        std::fs::write(d.join("HEAD"), "ref: refs/heads/file").unwrap();
        assert!(sandbox_head(&d, 40).unwrap_err().contains("symbolic link"));
        // symbolic refs that loop
        std::fs::write(d.join("refs/heads/a"), "ref: refs/heads/b").unwrap();
        std::fs::write(d.join("refs/heads/b"), "ref: refs/heads/a").unwrap();
        std::fs::write(d.join("HEAD"), "ref: refs/heads/a").unwrap();
        assert!(sandbox_head(&d, 40).unwrap_err().contains("symbolic refs"));
        std::fs::remove_dir_all(&d).unwrap();
        std::os::unix::fs::symlink(&outside, &d).unwrap();
        assert!(sandbox_head(&d, 40).is_err());
    }

    #[test]
    fn only_object_files_are_copied_and_links_are_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let d = dot(&t);
        let objects = d.join("objects");
        std::fs::create_dir_all(objects.join("01")).unwrap();
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        std::fs::create_dir_all(objects.join("info")).unwrap();
        std::fs::write(objects.join("01").join(&A[2..]), "loose").unwrap();
        std::fs::write(objects.join("pack/pack-abcd.pack"), "pack").unwrap();
        std::fs::write(objects.join("pack/pack-abcd.idx"), "idx").unwrap();
        std::fs::write(objects.join("info/alternates"), "/etc\n").unwrap();
        let secret = t.path().join("secret");
        std::fs::write(&secret, "host secret").unwrap();
        std::os::unix::fs::symlink(&secret, objects.join("01").join(&B[2..])).unwrap();
        std::os::unix::fs::symlink(t.path(), objects.join("02")).unwrap();
        let dest = t.path().join("dest");
        let c = copy_objects(&d, &dest, 40, CopyLimits::default()).unwrap();
        assert_eq!(c.loose, 1);
        assert_eq!(c.packs, [dest.join("pack/pack-abcd.pack")]);
        assert_eq!(c.bytes, 9);
        assert!(!dest.join("pack/pack-abcd.idx").exists());
        assert!(!dest.join("info").exists());
        assert!(!dest.join("01").join(&B[2..]).exists());
        assert!(!dest.join("02").exists());
        let e = copy_objects(
            &d,
            &t.path().join("dest2"),
            40,
            CopyLimits {
                max_bytes: 6,
                max_files: 10,
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("past the 6 bytes"), "{e}");
        std::fs::remove_dir_all(&objects).unwrap();
        std::os::unix::fs::symlink(t.path(), &objects).unwrap();
        assert!(copy_objects(&d, &t.path().join("dest3"), 40, CopyLimits::default()).is_err());
    }
}
