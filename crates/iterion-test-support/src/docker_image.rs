//! Local test images without a registry (03 §15): a static BusyBox root file system imported through the
//! engine API as `iterion-test/busybox:latest`, and the same without `/bin/sh` as `iterion-test/nosh:latest`.
//!
//! Shared by the tests (`ensure_test_image`) and `cargo xtask images`, so the archive is built in one place.

use crate::docker_http::{self, encode_component};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// Reference of the default test image.
pub const TEST_IMAGE: &str = "iterion-test/busybox:latest";
/// Reference of the test image without `/bin/sh` (C31).
pub const NOSH_IMAGE: &str = "iterion-test/nosh:latest";
/// Label carrying the SHA-256 of the imported archive (the fast path compares it).
pub const DIGEST_LABEL: &str = "iterion.io/test-image-digest";

const INSTALL_HINT: &str =
    "install a static busybox (for example the busybox-static package) or set ITERION_TEST_BUSYBOX";

/// What `ensure_image` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The image existed with the same digest label: nothing was imported.
    Present,
    /// The image was (re)imported.
    Imported,
}

/// One image to make: its reference and its archive.
#[derive(Debug, Clone)]
pub struct ImageArchive {
    /// `repo:tag`.
    pub reference: &'static str,
    /// The deterministic root file system archive.
    pub tar: Vec<u8>,
}

impl ImageArchive {
    /// Hex SHA-256 of the archive.
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(&self.tar))
    }
}

/// Whether `bytes` is an ELF executable without a program interpreter (statically linked).
pub fn is_static_elf(bytes: &[u8]) -> bool {
    elf_static_check(bytes).unwrap_or(false)
}

fn elf_static_check(b: &[u8]) -> Option<bool> {
    if b.get(0..4)? != b"\x7fELF" {
        return Some(false);
    }
    let is64 = *b.get(4)? == 2;
    let le = *b.get(5)? == 1;
    let u16_at = |o: usize| -> Option<u64> {
        let s: [u8; 2] = b.get(o..o + 2)?.try_into().ok()?;
        Some(u64::from(if le {
            u16::from_le_bytes(s)
        } else {
            u16::from_be_bytes(s)
        }))
    };
    let u32_at = |o: usize| -> Option<u64> {
        let s: [u8; 4] = b.get(o..o + 4)?.try_into().ok()?;
        Some(u64::from(if le {
            u32::from_le_bytes(s)
        } else {
            u32::from_be_bytes(s)
        }))
    };
    let u64_at = |o: usize| -> Option<u64> {
        let s: [u8; 8] = b.get(o..o + 8)?.try_into().ok()?;
        Some(if le {
            u64::from_le_bytes(s)
        } else {
            u64::from_be_bytes(s)
        })
    };
    let (phoff, phentsize, phnum) = if is64 {
        (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?)
    } else {
        (u32_at(0x1c)?, u16_at(0x2a)?, u16_at(0x2c)?)
    };
    for i in 0..phnum {
        let off = usize::try_from(phoff + i * phentsize).ok()?;
        if u32_at(off)? == 3 {
            return Some(false); // PT_INTERP
        }
    }
    Some(true)
}

/// Finds a static BusyBox: `override_path` (from `ITERION_TEST_BUSYBOX`), else `/bin/busybox` or
/// `/usr/bin/busybox` when statically linked and accepting `sleep infinity`.
pub fn find_static_busybox(override_path: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = override_path {
        let bytes = std::fs::read(p).map_err(|e| format!("ITERION_TEST_BUSYBOX={}: {e}", p.display()))?;
        if !is_static_elf(&bytes) {
            return Err(format!(
                "ITERION_TEST_BUSYBOX={} is not a statically linked executable; {INSTALL_HINT}",
                p.display()
            ));
        }
        return Ok(p.to_path_buf());
    }
    for cand in ["/bin/busybox", "/usr/bin/busybox"] {
        let p = Path::new(cand);
        let Ok(bytes) = std::fs::read(p) else { continue };
        if is_static_elf(&bytes) && accepts_sleep_infinity(p) {
            return Ok(p.to_path_buf());
        }
    }
    Err(INSTALL_HINT.to_string())
}

fn accepts_sleep_infinity(busybox: &Path) -> bool {
    let Ok(mut child) = Command::new(busybox)
        .args(["sleep", "infinity"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    std::thread::sleep(Duration::from_millis(100));
    let still_running = matches!(child.try_wait(), Ok(None));
    let _ = child.kill();
    let _ = child.wait();
    still_running
}

/// The applets the BusyBox binary lists (`busybox --list`), sorted, without `busybox` itself.
pub fn applets(busybox: &Path) -> Result<Vec<String>, String> {
    let out = Command::new(busybox)
        .arg("--list")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{} --list: {e}", busybox.display()))?;
    if !out.status.success() {
        return Err(format!("{} --list exited {}", busybox.display(), out.status));
    }
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "busybox" && !l.contains('/'))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

enum Entry {
    Dir { mode: u32, uid: u64 },
    File { mode: u32, data: Vec<u8> },
    Link { target: &'static str },
}

/// Builds the deterministic root file system archive: entries sorted by path, modification time 0, owner 0:0
/// except `/home/sandbox` (1000:1000); a `/bin` link for every applet (without `sh` when `with_sh` is false).
pub fn rootfs_tar(busybox_bytes: &[u8], applets: &[String], with_sh: bool) -> Result<Vec<u8>, String> {
    rootfs_tar_with(busybox_bytes, applets, with_sh, Vec::new())
}

/// [`rootfs_tar`] with extra regular files (`path` without a leading `/`, executable); their parent
/// directories are created.
fn rootfs_tar_with(
    busybox_bytes: &[u8],
    applets: &[String],
    with_sh: bool,
    extra: Vec<(String, Vec<u8>)>,
) -> Result<Vec<u8>, String> {
    let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
    for (path, data) in extra {
        let mut parent = std::path::Path::new(&path).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            entries.insert(
                p.to_string_lossy().into_owned(),
                Entry::Dir { mode: 0o755, uid: 0 },
            );
            parent = p.parent();
        }
        entries.insert(path, Entry::File { mode: 0o755, data });
    }
    let dir = |mode| Entry::Dir { mode, uid: 0 };
    for d in [
        "bin",
        "dev",
        "etc",
        "etc/ssl",
        "etc/ssl/certs",
        "home",
        "proc",
        "run",
        "sys",
        "www",
    ] {
        entries.insert(d.to_string(), dir(0o755));
    }
    entries.insert("tmp".into(), dir(0o1777));
    entries.insert("root".into(), dir(0o700));
    entries.insert(
        "home/sandbox".into(),
        Entry::Dir {
            mode: 0o755,
            uid: 1000,
        },
    );
    entries.insert(
        "bin/busybox".into(),
        Entry::File {
            mode: 0o755,
            data: busybox_bytes.to_vec(),
        },
    );
    for a in applets {
        if a == "sh" && !with_sh {
            continue;
        }
        entries.insert(format!("bin/{a}"), Entry::Link { target: "busybox" });
    }
    entries.insert(
        "etc/passwd".into(),
        Entry::File {
            mode: 0o644,
            data: b"root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n"
                .to_vec(),
        },
    );
    entries.insert(
        "etc/group".into(),
        Entry::File {
            mode: 0o644,
            data: b"root:x:0:\nsandbox:x:1000:\n".to_vec(),
        },
    );
    entries.insert(
        "www/ok".into(),
        Entry::File {
            mode: 0o644,
            data: b"ok\n".to_vec(),
        },
    );

    let mut b = tar::Builder::new(Vec::new());
    for (path, e) in &entries {
        let mut h = tar::Header::new_ustar();
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        let res = match e {
            Entry::Dir { mode, uid } => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(*mode);
                h.set_uid(*uid);
                h.set_gid(*uid);
                h.set_size(0);
                b.append_data(&mut h, format!("{path}/"), std::io::empty())
            }
            Entry::File { mode, data } => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*mode);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, path, data.as_slice())
            }
            Entry::Link { target } => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                b.append_link(&mut h, path, target)
            }
        };
        res.map_err(|e| format!("tar entry {path}: {e}"))?;
    }
    b.into_inner().map_err(|e| format!("finish tar: {e}"))
}

/// The two test image archives, built from the BusyBox found by [`find_static_busybox`].
pub fn test_archives(override_path: Option<&Path>) -> Result<Vec<ImageArchive>, String> {
    let bb = find_static_busybox(override_path)?;
    let bytes = std::fs::read(&bb).map_err(|e| format!("read {}: {e}", bb.display()))?;
    let list = applets(&bb)?;
    Ok(vec![
        ImageArchive {
            reference: TEST_IMAGE,
            tar: rootfs_tar(&bytes, &list, true)?,
        },
        ImageArchive {
            reference: NOSH_IMAGE,
            tar: rootfs_tar(&bytes, &list, false)?,
        },
    ])
}

/// Makes sure `archive` is present on the engine at `socket` under its reference, importing it through
/// `POST /images/create?fromSrc=-` when it is missing or carries another digest label. Idempotent.
pub fn ensure_image(socket: &Path, archive: &ImageArchive) -> Result<Outcome, String> {
    let digest = archive.digest();
    let (repo, tag) = archive
        .reference
        .rsplit_once(':')
        .ok_or_else(|| format!("reference {} has no tag", archive.reference))?;
    let inspect = docker_http::request(
        socket,
        "GET",
        &format!("/images/{}/json", archive.reference),
        None,
        &[],
        Duration::from_secs(30),
    )?;
    if inspect.status == 200 {
        let v: serde_json::Value =
            serde_json::from_slice(&inspect.body).map_err(|e| format!("inspect json: {e}"))?;
        if v["Config"]["Labels"][DIGEST_LABEL].as_str() == Some(digest.as_str()) {
            return Ok(Outcome::Present);
        }
    } else if inspect.status != 404 {
        return Err(format!(
            "inspect {} answered {}: {}",
            archive.reference,
            inspect.status,
            inspect.text()
        ));
    }
    let changes = [
        "ENV PATH=/bin".to_string(),
        "CMD [\"/bin/sh\"]".to_string(),
        "LABEL iterion.io/component=test".to_string(),
        format!("LABEL {DIGEST_LABEL}={digest}"),
    ];
    let mut q = format!(
        "/images/create?fromSrc=-&repo={}&tag={}",
        encode_component(repo),
        encode_component(tag)
    );
    for c in &changes {
        q.push_str("&changes=");
        q.push_str(&encode_component(c));
    }
    let resp = docker_http::request(
        socket,
        "POST",
        &q,
        Some("application/x-tar"),
        &archive.tar,
        Duration::from_secs(120),
    )?;
    if resp.status != 200 {
        return Err(format!(
            "import of {} answered {}: {}",
            archive.reference,
            resp.status,
            resp.text()
        ));
    }
    // The body is a stream of JSON objects; an `error` member means the import failed.
    for line in resp.text().lines() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line)
            && let Some(e) = v.get("error").and_then(|e| e.as_str())
        {
            return Err(format!("import of {} failed: {e}", archive.reference));
        }
    }
    Ok(Outcome::Imported)
}

/// Builds `reference` on the engine at `socket` from `dockerfile` (a context holding only the Dockerfile),
/// through `POST /build` without pulling: the base must be present locally (for example [`TEST_IMAGE`]).
/// Used to derive test images (an image with its own `ENV`, …) without a registry.
pub fn build_image(socket: &Path, reference: &str, dockerfile: &str) -> Result<(), String> {
    let mut context = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(dockerfile.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_cksum();
    context
        .append_data(&mut header, "Dockerfile", dockerfile.as_bytes())
        .map_err(|e| format!("build context: {e}"))?;
    let context = context.into_inner().map_err(|e| format!("build context: {e}"))?;
    let q = format!(
        "/build?t={}&pull=0&rm=1&forcerm=1&labels={}",
        encode_component(reference),
        encode_component(r#"{"iterion.io/component":"test"}"#)
    );
    let resp = docker_http::request(
        socket,
        "POST",
        &q,
        Some("application/x-tar"),
        &context,
        Duration::from_secs(120),
    )?;
    if resp.status != 200 {
        return Err(format!(
            "build of {reference} answered {}: {}",
            resp.status,
            resp.text()
        ));
    }
    for line in resp.text().lines() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line)
            && let Some(e) = v.get("error").and_then(|e| e.as_str())
        {
            return Err(format!("build of {reference} failed: {e}"));
        }
    }
    Ok(())
}

static ENSURED: Mutex<Option<String>> = Mutex::new(None);

/// Makes sure both test images exist on the local engine (idempotent, once per process) and returns the
/// reference of the default one ([`TEST_IMAGE`]).
pub fn ensure_test_image() -> Result<String, String> {
    let mut done = ENSURED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(r) = done.as_ref() {
        return Ok(r.clone());
    }
    let socket = crate::engine_socket().ok_or_else(|| "DOCKER_HOST is not a unix:// socket".to_string())?;
    let override_path = std::env::var_os("ITERION_TEST_BUSYBOX").map(PathBuf::from);
    for a in test_archives(override_path.as_deref())? {
        ensure_image(&socket, &a)?;
    }
    *done = Some(TEST_IMAGE.to_string());
    Ok(TEST_IMAGE.to_string())
}

/// The image with the host's `curl` (and the libraries `ldd` lists for it) on top of the BusyBox test image:
/// a client that honours `HTTPS_PROXY` through `CONNECT` and the trust variables, for egress tests.
pub const CURL_IMAGE: &str = "iterion-test/curl:latest";

/// Makes sure [`CURL_IMAGE`] is on the engine (imported like the test images; idempotent).
///
/// # Errors
///
/// No static BusyBox, no `curl` on the host, `ldd` failing, or the engine refusing the import.
pub fn ensure_curl_image() -> Result<String, String> {
    let socket = crate::engine_socket().ok_or_else(|| "no engine socket".to_owned())?;
    let bb = find_static_busybox(None)?;
    let bytes = std::fs::read(&bb).map_err(|e| format!("read {}: {e}", bb.display()))?;
    let list = applets(&bb)?;
    let curl = ["/usr/bin/curl", "/bin/curl"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .ok_or_else(|| "no curl on the host (apt-get install curl)".to_owned())?;
    let env = iterion_boundary::Env::new().with("PATH", "/usr/bin:/bin");
    let out = iterion_boundary::HostCommand::new("/usr/bin/ldd", env)
        .arg(curl)
        .run_bounded(None, iterion_boundary::Bounds::new(Duration::from_secs(30)))
        .map_err(|e| format!("ldd {curl}: {e}"))?;
    let mut files = vec![curl.to_owned()];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // `libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x…)` or `/lib64/ld-linux-x86-64.so.2 (0x…)`
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            files.push(p.to_owned());
        }
    }
    let mut extra = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let data = std::fs::read(f).map_err(|e| format!("read {f}: {e}"))?;
        // the image's PATH is `/bin`
        let at = if i == 0 {
            "bin/curl".to_owned()
        } else {
            f.trim_start_matches('/').to_owned()
        };
        extra.push((at, data));
    }
    let archive = ImageArchive {
        reference: CURL_IMAGE,
        tar: rootfs_tar_with(&bytes, &list, true, extra)?,
    };
    ensure_image(&socket, &archive)?;
    Ok(CURL_IMAGE.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_elf(bytes: &[u8], expect: bool) {
        assert_eq!(is_static_elf(bytes), expect);
    }

    fn elf64(interp: bool) -> Vec<u8> {
        let mut b = vec![0u8; 0x40 + 2 * 56];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&2u16.to_le_bytes());
        b[0x40..0x44].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
        let second = if interp { 3u32 } else { 1u32 };
        b[0x40 + 56..0x40 + 60].copy_from_slice(&second.to_le_bytes());
        b
    }

    #[test]
    fn static_elf_detection() {
        check_elf(&elf64(false), true);
        check_elf(&elf64(true), false);
        check_elf(b"#!/bin/sh\n", false);
        check_elf(b"\x7fELF", false);
    }

    #[test]
    fn rootfs_is_deterministic_sorted_and_owned_as_specified() {
        let applets = vec!["sh".to_string(), "cat".to_string(), "[".to_string()];
        let a = rootfs_tar(b"BB", &applets, true).expect("tar");
        let b = rootfs_tar(b"BB", &applets, true).expect("tar");
        assert_eq!(a, b);
        let mut ar = tar::Archive::new(a.as_slice());
        let mut seen = Vec::new();
        for e in ar.entries().expect("entries") {
            let e = e.expect("entry");
            let h = e.header();
            let p = e.path().expect("path").to_string_lossy().into_owned();
            assert_eq!(h.mtime().expect("mtime"), 0, "{p}");
            let uid = h.uid().expect("uid");
            assert_eq!(uid, if p == "home/sandbox/" { 1000 } else { 0 }, "{p}");
            seen.push(p);
        }
        let mut sorted = seen.clone();
        sorted.sort();
        assert_eq!(seen, sorted);
        for want in [
            "bin/sh",
            "bin/cat",
            "bin/[",
            "bin/busybox",
            "etc/passwd",
            "tmp/",
            "www/ok",
        ] {
            assert!(seen.iter().any(|s| s == want), "missing {want}: {seen:?}");
        }
        let nosh = rootfs_tar(b"BB", &applets, false).expect("tar");
        let mut ar = tar::Archive::new(nosh.as_slice());
        let names: Vec<String> = ar
            .entries()
            .expect("entries")
            .map(|e| {
                e.expect("entry")
                    .path()
                    .expect("path")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert!(!names.iter().any(|n| n == "bin/sh"));
        assert!(names.iter().any(|n| n == "bin/cat"));
    }
}
