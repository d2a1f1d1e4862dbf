//! Installing embedded bytes as an executable file named by their content hash.

use crate::error::{Error, Result};
use crate::{sha256, to_hex};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Writes `bytes` once to `<dir>/<stem>-<first 12 hex of their SHA-256>` and returns the path.
///
/// The file is written under a temporary name in `dir`, synced, made mode 0755, renamed into place and read
/// back; an existing file with the same bytes is reused, one with another content is rewritten. Empty `bytes`
/// (a program not built for this target) are [`Error::Empty`]; a read-back that differs is
/// [`Error::Mismatch`]. This hashes `bytes` once per call: a program that embeds large bytes passes the digest
/// its build script computed to [`install_with_digest`] instead.
pub fn install(bytes: &[u8], dir: &Path, stem: &str) -> Result<PathBuf> {
    install_with_digest(bytes, &to_hex(&sha256(bytes)), dir, stem)
}

/// [`install`] with the SHA-256 of `bytes` (64 lowercase hex characters) known ahead of time — written next
/// to the program by [`crate::build::write_digest`] and compiled in — so that starting a process does not
/// hash megabytes (the claw runner is 8–14 MB: two SHA-256 passes cost about 100–250 ms per process start).
/// An existing file is checked by comparing its bytes, which is as strict as comparing hashes. A `digest`
/// that is not 64 hex characters is [`Error::Mismatch`] of the destination directory.
pub fn install_with_digest(bytes: &[u8], digest: &str, dir: &Path, stem: &str) -> Result<PathBuf> {
    if bytes.is_empty() {
        return Err(Error::Empty { stem: stem.into() });
    }
    let digest = digest.trim();
    if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Mismatch {
            path: dir.to_path_buf(),
        });
    }
    let io = |what: &'static str, p: &Path| {
        let path = p.to_path_buf();
        move |source| Error::Io { what, path, source }
    };
    let short = &digest[..12];
    std::fs::create_dir_all(dir).map_err(io("create directory", dir))?;
    let dest = dir.join(format!("{stem}-{short}"));
    if holds_exactly(&dest, bytes) {
        return Ok(dest);
    }
    let tmp = dir.join(format!(".{stem}-{short}.{}", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
        f.write_all(bytes).map_err(io("write", &tmp))?;
        f.sync_all().map_err(io("sync", &tmp))?;
    }
    make_executable(&tmp).map_err(io("chmod", &tmp))?;
    std::fs::rename(&tmp, &dest).map_err(io("rename to", &dest))?;
    let written = std::fs::read(&dest).map_err(io("read back", &dest))?;
    if written != bytes {
        return Err(Error::Mismatch { path: dest });
    }
    Ok(dest)
}

/// Whether the file at `path` holds exactly `bytes`, compared in 64 KiB chunks: as strict as reading it whole,
/// without allocating (and faulting in) a copy of a many-megabyte program at every process start.
fn holds_exactly(path: &Path, bytes: &[u8]) -> bool {
    use std::io::Read as _;
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    if f.metadata().map(|m| m.len()).ok() != u64::try_from(bytes.len()).ok() {
        return false;
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut rest = bytes;
    while !rest.is_empty() {
        let want = rest.len().min(buf.len());
        if f.read_exact(&mut buf[..want]).is_err() || buf[..want] != rest[..want] {
            return false;
        }
        rest = &rest[want..];
    }
    // nothing after the expected end (the file may have grown since its length was read)
    matches!(f.read(&mut buf[..1]), Ok(0))
}

#[cfg(unix)]
fn make_executable(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::tests::elf64;
    use crate::short_hash;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn install_is_idempotent_and_verified() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        let bytes = elf64(62, false);
        let p = install(&bytes, &bin, "iterion-relay").expect("install");
        assert_eq!(p, bin.join(format!("iterion-relay-{}", short_hash(&bytes))));
        assert_eq!(
            std::fs::metadata(&p).expect("meta").permissions().mode() & 0o777,
            0o755
        );
        let modified = std::fs::metadata(&p).and_then(|m| m.modified()).expect("mtime");
        assert_eq!(install(&bytes, &bin, "iterion-relay").expect("again"), p);
        assert_eq!(
            std::fs::metadata(&p).and_then(|m| m.modified()).expect("mtime"),
            modified,
            "an intact file is reused"
        );
        std::fs::write(&p, b"tampered").expect("tamper");
        let again = install(&bytes, &bin, "iterion-relay").expect("reinstall");
        assert_eq!(std::fs::read(&again).expect("read"), bytes);
        // the same length with one byte changed, and the right bytes followed by more, are rewritten too
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        let mut longer = bytes.clone();
        longer.push(0);
        for wrong in [flipped, longer] {
            std::fs::write(&p, &wrong).expect("tamper");
            install(&bytes, &bin, "iterion-relay").expect("reinstall");
            assert_eq!(std::fs::read(&p).expect("read"), bytes);
        }
        assert_eq!(
            std::fs::read_dir(&bin).expect("list").count(),
            1,
            "no temporary left"
        );
        assert!(matches!(
            install(b"", &bin, "iterion-probe"),
            Err(Error::Empty { stem }) if stem == "iterion-probe"
        ));
    }

    #[test]
    fn a_file_is_compared_across_chunks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("f");
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &bytes).expect("write");
        assert!(holds_exactly(&p, &bytes));
        let mut other = bytes.clone();
        other[150_000] ^= 1;
        assert!(!holds_exactly(&p, &other));
        assert!(!holds_exactly(&p, &bytes[..199_999]));
        assert!(!holds_exactly(&dir.path().join("missing"), &bytes));
    }

    #[test]
    fn a_known_digest_names_the_file_and_a_bad_one_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes = elf64(183, true);
        let digest = to_hex(&sha256(&bytes));
        let p = install_with_digest(&bytes, &digest, dir.path(), "runner").expect("install");
        assert_eq!(p, install(&bytes, dir.path(), "runner").expect("same file"));
        std::fs::write(&p, b"tampered").expect("tamper");
        install_with_digest(&bytes, &digest, dir.path(), "runner").expect("rewritten");
        assert_eq!(std::fs::read(&p).expect("read"), bytes);
        for bad in ["", "abc", &"z".repeat(64)] {
            assert!(
                matches!(
                    install_with_digest(&bytes, bad, dir.path(), "runner"),
                    Err(Error::Mismatch { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn an_unwritable_directory_names_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").expect("write");
        let err = install(b"abc", &file.join("bin"), "x").expect_err("a file is in the way");
        assert!(
            matches!(&err, Error::Io { what: "create directory", path, .. } if path == &file.join("bin")),
            "{err:?}"
        );
    }

    #[test]
    fn sha256_known_vectors() {
        for (input, expect) in [
            (
                "",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            ),
            (
                "abc",
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            ),
        ] {
            assert_eq!(to_hex(&sha256(input.as_bytes())), expect, "{input:?}");
        }
        assert_eq!(short_hash(b"abc"), "ba7816bf8f01");
    }
}
