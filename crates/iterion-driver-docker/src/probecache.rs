//! The start checks' cache: what the checks after a start found out about an image (a shell runs, and whether
//! `bash` is on its `PATH`), kept on the host per image so that a later start of the same image skips the
//! check's engine exec (40–60 ms of every start).
//!
//! What the checks find depends only on what the container's file system holds at the shell's `PATH` and
//! `/bin`, and on who asks. The key therefore covers the image id (content-addressed: the same id is the same
//! file system), the exec user and the container's configured user, the container's `PATH`, and every mount
//! and tmpfs target. A container where a mount or tmpfs sits on or above a `PATH` directory or `/bin`, or
//! at a `sh` or `bash` inside one, is never looked up or stored: what is mounted there can change from one run
//! to the next under the same key.
//!
//! The other half of the checks, recording the sandbox's own processes, is not cached: on a hit the first
//! exec records them ahead of its command (`dexec`). An entry is a file named by the key's hex digest under
//! the cache directory (the host's data directory, never mounted into a sandbox), holding `bash` or `sh`.
//! Anything else there is a miss, and the next full check replaces it.

use bollard::models::ContainerInspectResponse;
use sha2::{Digest, Sha256};
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

/// Version of the key's layout: a change of what the key covers changes every key.
const KEY_VERSION: &[u8] = b"iterion-start-checks-v1";

/// The key of a started container's checks, or `None` when they cannot be cached (a mount over a `PATH`
/// directory or a shell, or an inspect answer without an image id). `exec_user` is the user the checks run as.
pub(crate) fn key(inspected: &ContainerInspectResponse, exec_user: Option<&str>) -> Option<String> {
    let image = inspected.image.as_deref().filter(|i| !i.is_empty())?;
    let config = inspected.config.as_ref();
    let path = config
        .and_then(|c| c.env.as_ref())
        .and_then(|env| env.iter().rev().find_map(|e| e.strip_prefix("PATH=")))
        .unwrap_or("");
    let mut targets: Vec<&str> = inspected
        .mounts
        .iter()
        .flatten()
        .filter_map(|m| m.destination.as_deref())
        .collect();
    if let Some(tmpfs) = inspected.host_config.as_ref().and_then(|h| h.tmpfs.as_ref()) {
        targets.extend(tmpfs.keys().map(String::as_str));
    }
    targets.sort_unstable();
    targets.dedup();
    let dirs: Vec<&str> = path
        .split(':')
        .filter(|d| !d.is_empty())
        .chain(["/bin"])
        .collect();
    if targets.iter().any(|t| shadows(t, &dirs)) {
        return None;
    }
    let mut h = Sha256::new();
    for part in [
        KEY_VERSION,
        image.as_bytes(),
        exec_user.unwrap_or("").as_bytes(),
        config.and_then(|c| c.user.as_deref()).unwrap_or("").as_bytes(),
        path.as_bytes(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    for t in &targets {
        h.update((t.len() as u64).to_le_bytes());
        h.update(t.as_bytes());
    }
    Some(hex::encode(h.finalize()))
}

/// Whether a mount at `target` can change what `command -v bash` or `/bin/sh` finds: it is one of `dirs`, lies
/// above one, or is a `sh` or `bash` inside one.
fn shadows(target: &str, dirs: &[&str]) -> bool {
    let target = target.trim_end_matches('/');
    if target.is_empty() {
        return true;
    }
    dirs.iter().any(|d| {
        let d = d.trim_end_matches('/');
        d == target
            || d.strip_prefix(target).is_some_and(|rest| rest.starts_with('/'))
            || [format!("{d}/sh"), format!("{d}/bash")]
                .iter()
                .any(|s| s == target)
    })
}

fn entry(dir: &Path, key: &str) -> PathBuf {
    dir.join(key)
}

/// The cached result for `key`: `Some(true)` when `bash` is there, `Some(false)` for `sh` only, `None` for no
/// entry (or one that does not read as either, or is not a small regular file: a symlink is not followed).
pub(crate) fn lookup(dir: &Path, key: &str) -> Option<bool> {
    let path = entry(dir, key);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.is_file() || meta.len() > 8 {
        return None;
    }
    match std::fs::read(&path).ok()?.as_slice() {
        b"bash\n" => Some(true),
        b"sh\n" => Some(false),
        _ => None,
    }
}

/// Stores the result of a full check under `key` (written to a temporary file, then renamed into place: a
/// reader sees the old entry, none, or the new one). Best effort: a cache that cannot be written only means
/// the next start checks again.
pub(crate) fn store(dir: &Path, key: &str, bash: bool) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let tmp = dir.join(format!(".tmp-{}", hex::encode(rand::random::<[u8; 8]>())));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, if bash { b"bash\n" } else { b"sh\n" }))
        .and_then(|()| std::fs::rename(&tmp, entry(dir, key)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{ContainerConfig, HostConfig, MountPoint};

    fn inspected(path: Option<&str>, mounts: &[&str], tmpfs: &[&str]) -> ContainerInspectResponse {
        ContainerInspectResponse {
            image: Some("sha256:abc".into()),
            config: Some(ContainerConfig {
                env: path.map(|p| vec!["A=1".to_string(), format!("PATH={p}")]),
                user: Some("1000:1000".into()),
                ..Default::default()
            }),
            mounts: Some(
                mounts
                    .iter()
                    .map(|d| MountPoint {
                        destination: Some(d.to_string()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            host_config: Some(HostConfig {
                tmpfs: Some(tmpfs.iter().map(|t| (t.to_string(), String::new())).collect()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

    #[test]
    fn the_key_covers_image_user_path_and_mounts() {
        let base = key(
            &inspected(Some(PATH), &["/workspaces/w"], &["/tmp"]),
            Some("1000"),
        )
        .unwrap();
        assert_eq!(base.len(), 64);
        // The same inputs give the same key, whatever the order of the mounts.
        let two = inspected(Some(PATH), &["/workspaces/w", "/run/iterion/relay"], &["/tmp"]);
        let swapped = inspected(Some(PATH), &["/run/iterion/relay", "/workspaces/w"], &["/tmp"]);
        assert_eq!(key(&two, Some("1000")), key(&swapped, Some("1000")));
        // Each input changes it.
        let mut other_image = inspected(Some(PATH), &["/workspaces/w"], &["/tmp"]);
        other_image.image = Some("sha256:def".into());
        for other in [
            key(&other_image, Some("1000")),
            key(&inspected(Some(PATH), &["/workspaces/w"], &["/tmp"]), Some("0")),
            key(&inspected(Some(PATH), &["/workspaces/w"], &["/tmp"]), None),
            key(
                &inspected(Some("/usr/bin:/bin"), &["/workspaces/w"], &["/tmp"]),
                Some("1000"),
            ),
            key(
                &inspected(Some(PATH), &["/workspaces/x"], &["/tmp"]),
                Some("1000"),
            ),
            key(&inspected(Some(PATH), &["/workspaces/w"], &[]), Some("1000")),
        ] {
            assert_ne!(other.unwrap(), base);
        }
        let mut no_id = inspected(Some(PATH), &[], &[]);
        no_id.image = None;
        assert_eq!(key(&no_id, None), None);
    }

    #[test]
    fn a_mount_that_can_change_the_shell_is_never_cached() {
        for target in [
            "/usr/local/bin",
            "/usr/local/bin/",
            "/usr",
            "/",
            "/bin",
            "/usr/bin/bash",
            "/bin/sh",
        ] {
            assert_eq!(
                key(&inspected(Some(PATH), &[target], &[]), None),
                None,
                "{target}"
            );
            assert_eq!(
                key(&inspected(Some(PATH), &[], &[target]), None),
                None,
                "{target}"
            );
        }
        // `/bin` counts without a PATH.
        assert_eq!(key(&inspected(None, &["/bin"], &[]), None), None);
        // Beside a PATH directory, or a program other than a shell in one: cached.
        for target in [
            "/usr/local/binx",
            "/usr/local/bin/iterion",
            "/run/iterion/relay",
            "/home/u",
        ] {
            assert!(
                key(&inspected(Some(PATH), &[target], &[]), None).is_some(),
                "{target}"
            );
        }
    }

    #[test]
    fn entries_round_trip_and_junk_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        assert_eq!(lookup(&cache, "k"), None);
        store(&cache, "k", true).unwrap();
        assert_eq!(lookup(&cache, "k"), Some(true));
        store(&cache, "k", false).unwrap();
        assert_eq!(lookup(&cache, "k"), Some(false));
        std::fs::write(cache.join("j"), "bash\nmore").unwrap();
        assert_eq!(lookup(&cache, "j"), None);
        // A symlink planted as an entry is not followed.
        #[cfg(unix)]
        {
            std::fs::write(dir.path().join("target"), "bash\n").unwrap();
            std::os::unix::fs::symlink(dir.path().join("target"), cache.join("l")).unwrap();
            assert_eq!(lookup(&cache, "l"), None);
        }
    }
}
