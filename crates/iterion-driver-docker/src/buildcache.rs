//! The build cache: an image built from a Dockerfile is tagged by a content hash of everything the build reads
//! (`iterion-sandbox-build:cache-<32 hex>`) and reused by a later build with the same inputs.
//!
//! The key covers the builder (`buildkit` or `classic`), the ids of the build secrets (never their values), the
//! network of the build (`none` or `open`), the target, the build arguments, the
//! Dockerfile's name in the archive, what each image the Dockerfile names is on this host (its image id, or
//! `absent`), and the context exactly as the engine receives it: every entry the archive holds after
//! `.dockerignore` (its kind, name, permission bits, symlink target, and a regular file's bytes), plus the
//! Dockerfile added when it lies outside the context. Modification times and ownership are left out (the
//! archive sets ownership to 0; a fresh checkout changes every mtime without changing a byte).
//!
//! A hit is an image at the key's tag whose `iterion.io/managed` and `iterion.io/build-key` labels match; any
//! other image at that tag is a miss and is replaced. Every check of a build (containment, and without network
//! the Dockerfile check) runs before the lookup ([`crate::imagebuild::plan`]), so a hit is never a way around
//! them; and since the network is part of the key, an image built with network is never reused by a build
//! without it.

use crate::dockerfile;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::image::{self, LocalImage};
use crate::imagebuild::{BuildInput, ContextEntry, Planned};
use iterion_driver::labels::{BUILD_KEY, MANAGED};
use sha2::{Digest, Sha256};
use std::io::Read;

/// The repository of built images.
pub const REPOSITORY: &str = "iterion-sandbox-build";

/// Version of the key's layout: a change of what the key covers changes it.
const KEY_VERSION: &[u8] = b"iterion-build-key-v2";

/// The tag of the image built from inputs with `key` (64 hex characters).
pub fn tag_of(key: &str) -> String {
    format!("{REPOSITORY}:cache-{}", &key[..key.len().min(32)])
}

fn frame(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// Hashes `size` bytes of `path` as the archive would carry them: a file that shrank is padded with zeros,
/// bytes past the recorded size are not read (a FIFO swapped in is refused, never waited on).
fn hash_file(h: &mut Sha256, path: &std::path::Path, size: u64) -> std::io::Result<()> {
    let (f, _) = iterion_spec::source::open_regular(path)
        .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?;
    let mut r = f.take(size);
    let mut buf = vec![0u8; 64 * 1024];
    let mut read = 0u64;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        read += n as u64;
    }
    let mut missing = size - read;
    buf.fill(0);
    while missing > 0 {
        let n = usize::try_from(missing.min(buf.len() as u64)).unwrap_or(buf.len());
        h.update(&buf[..n]);
        missing -= n as u64;
    }
    Ok(())
}

/// The key of a planned build: SHA-256 over the inputs listed in the module documentation, in hex.
/// `images` pairs each image the Dockerfile names with its local id (`None`: absent). Reads every context
/// file: call it off the async threads.
pub fn key(
    input: &BuildInput,
    planned: &Planned,
    images: &[(String, Option<String>)],
) -> std::io::Result<String> {
    let mut h = Sha256::new();
    frame(&mut h, KEY_VERSION);
    frame(&mut h, input.builder.as_str().as_bytes());
    h.update((input.secrets.len() as u64).to_le_bytes());
    for id in input.secrets.keys() {
        frame(&mut h, id.as_bytes());
    }
    frame(&mut h, input.network.as_str().as_bytes());
    frame(&mut h, input.target.as_deref().unwrap_or("").as_bytes());
    h.update((input.args.len() as u64).to_le_bytes());
    for (k, v) in &input.args {
        frame(&mut h, k.as_bytes());
        frame(&mut h, v.as_bytes());
    }
    frame(&mut h, planned.dockerfile_name.as_bytes());
    h.update((images.len() as u64).to_le_bytes());
    for (reference, id) in images {
        frame(&mut h, reference.as_bytes());
        frame(&mut h, id.as_deref().unwrap_or("absent").as_bytes());
    }
    h.update((planned.entries.len() as u64).to_le_bytes());
    for e in &planned.entries {
        match e {
            ContextEntry::Dir { name, mode, .. } => {
                frame(&mut h, b"dir");
                frame(&mut h, name.as_bytes());
                h.update(mode.to_le_bytes());
            }
            ContextEntry::File {
                name,
                source,
                mode,
                size,
                ..
            } => {
                frame(&mut h, b"file");
                frame(&mut h, name.as_bytes());
                h.update(mode.to_le_bytes());
                h.update(size.to_le_bytes());
                hash_file(&mut h, source, *size)?;
            }
            ContextEntry::Symlink { name, target, .. } => {
                frame(&mut h, b"symlink");
                frame(&mut h, name.as_bytes());
                frame(&mut h, target);
            }
        }
    }
    match &planned.extra {
        Some((name, data)) => {
            frame(&mut h, name.as_bytes());
            frame(&mut h, data);
        }
        None => frame(&mut h, b""),
    }
    Ok(hex::encode(h.finalize()))
}

/// Computes the key of a planned build: looks up the images the Dockerfile names, then hashes the context on a
/// blocking thread. Returns the plan back with the key.
pub async fn key_of(engine: &Engine, input: &BuildInput, planned: Planned) -> Result<(Planned, String)> {
    let text =
        match iterion_spec::source::read_regular(&input.dockerfile, iterion_spec::source::MAX_FILE_BYTES) {
            iterion_spec::source::FileRead::Found(b) => String::from_utf8_lossy(&b).into_owned(),
            other => {
                return Err(Error::Io {
                    what: "read",
                    path: input.dockerfile.display().to_string(),
                    source: std::io::Error::other(other.to_string()),
                });
            }
        };
    let mut images = Vec::new();
    for reference in dockerfile::referenced_images(&text, &input.args) {
        let id = image::inspect(engine, &reference).await?.map(|l| l.id);
        images.push((reference, id));
    }
    let input = input.clone();
    let context = planned.context.display().to_string();
    tokio::task::spawn_blocking(move || {
        let k = key(&input, &planned, &images);
        k.map(|k| (planned, k))
    })
    .await
    .map_err(|e| Error::Io {
        what: "hash build context",
        path: context.clone(),
        source: std::io::Error::other(e.to_string()),
    })?
    .map_err(|source| Error::Io {
        what: "hash build context",
        path: context,
        source,
    })
}

/// The cached image of `key`, when the engine has one labelled with it.
pub async fn lookup(engine: &Engine, key: &str) -> Result<Option<LocalImage>> {
    Ok(image::inspect(engine, &tag_of(key)).await?.filter(|l| {
        l.labels.get(MANAGED).map(String::as_str) == Some("true")
            && l.labels.get(BUILD_KEY).map(String::as_str) == Some(key)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::imagebuild::context_entries;
    use std::path::{Path, PathBuf};

    fn planned(dir: &Path) -> Planned {
        Planned {
            context: dir.to_path_buf(),
            display: "Dockerfile".into(),
            dockerfile_name: "Dockerfile".into(),
            extra: None,
            entries: context_entries(dir, Some("Dockerfile")).expect("entries"),
        }
    }

    fn input(dir: &Path) -> BuildInput {
        BuildInput::new(
            dir.join("Dockerfile"),
            dir.to_path_buf(),
            dir.to_path_buf(),
            "t".into(),
            "r".into(),
        )
    }

    fn key_of_tree(dir: &Path, change: impl FnOnce(&mut BuildInput)) -> String {
        let mut i = input(dir);
        change(&mut i);
        key(&i, &planned(dir), &[("base:1".into(), Some("sha256:aa".into()))]).expect("key")
    }

    #[test]
    fn every_input_is_in_the_key_and_mtimes_are_not() {
        let d = tempfile::tempdir().expect("tempdir");
        let p: PathBuf = d.path().to_path_buf();
        std::fs::write(p.join("Dockerfile"), "FROM base:1\nCOPY a /a\n").expect("write");
        std::fs::write(p.join("a"), "one").expect("write");
        std::fs::write(p.join(".dockerignore"), "ignored\n").expect("write");
        let k0 = key_of_tree(&p, |_| {});
        assert_eq!(k0.len(), 64);
        assert_eq!(key_of_tree(&p, |_| {}), k0, "deterministic");
        // an ignored file is not sent, so it is not in the key
        std::fs::write(p.join("ignored"), "x").expect("write");
        assert_eq!(key_of_tree(&p, |_| {}), k0);
        // a new modification time alone keeps the key
        let f = std::fs::File::options()
            .append(true)
            .open(p.join("a"))
            .expect("open");
        f.set_modified(std::time::SystemTime::UNIX_EPOCH).expect("mtime");
        assert_eq!(key_of_tree(&p, |_| {}), k0);
        let mut seen = vec![k0.clone()];
        let mut differs = |k: String, what: &str| {
            assert!(!seen.contains(&k), "{what} did not change the key");
            seen.push(k);
        };
        differs(key_of_tree(&p, |i| i.network = BuildNetwork::Open), "network");
        differs(
            key_of_tree(&p, |i| i.builder = iterion_driver::BuilderKind::BuildKit),
            "the builder",
        );
        let with_secret = |value: &[u8]| {
            key_of_tree(&p, |i| {
                i.secrets
                    .insert("tok".into(), iterion_driver::SecretBytes::new(value.to_vec()));
            })
        };
        assert_eq!(
            with_secret(b"one"),
            with_secret(b"two"),
            "a secret's value is not in the key"
        );
        differs(with_secret(b"one"), "a secret id");
        differs(key_of_tree(&p, |i| i.target = Some("t".into())), "target");
        differs(
            key_of_tree(&p, |i| {
                i.args.insert("A".into(), "1".into());
            }),
            "a build argument",
        );
        let with_base =
            |id: &str| key(&input(&p), &planned(&p), &[("base:1".into(), Some(id.into()))]).expect("key");
        differs(with_base("sha256:bb"), "the base image id");
        std::fs::write(p.join("a"), "two").expect("write");
        differs(key_of_tree(&p, |_| {}), "a context file's bytes");
        std::fs::set_permissions(p.join("a"), std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        differs(key_of_tree(&p, |_| {}), "a file mode");
        std::fs::write(p.join("Dockerfile"), "FROM base:1\nCOPY a /b\n").expect("write");
        differs(key_of_tree(&p, |_| {}), "the Dockerfile");
        std::os::unix::fs::symlink("a", p.join("l")).expect("symlink");
        differs(key_of_tree(&p, |_| {}), "a symlink");
        std::fs::write(p.join(".dockerignore"), "").expect("write");
        differs(key_of_tree(&p, |_| {}), "a file no longer ignored");
    }

    #[test]
    fn tags_are_derived_from_the_key() {
        let k = "0123456789abcdef".repeat(4);
        assert_eq!(
            tag_of(&k),
            "iterion-sandbox-build:cache-0123456789abcdef0123456789abcdef"
        );
    }

    use iterion_driver::BuildNetwork;
}
