//! Integrity tags of `run.json`: an HMAC-SHA256 over the document, keyed by a host secret that lives in the
//! data dir (`run-record.key`, mode 0600) and is never mounted into a sandbox. `resume` acts on a record only
//! when its tag matches, so a record rewritten by anything that does not hold the key (a sandboxed process, a
//! repository) is refused instead of deciding where the next steps run.
//!
//! The tag is the `integrity` field of `run.json` itself (`hmac-sha256-v2:<64 hex>`), so a document and its
//! tag are written in the same atomic rename. It is computed over the run id and the run directory the record
//! belongs to ([`RecordBinding`]), then the compact JSON of the parsed document without that field, with keys
//! sorted (deterministic for a given file text whatever the key order). A signed record copied into another
//! run's directory, or into another store, therefore fails its check there: `resume Y` never acts on X's
//! record. A tag of the earlier scheme (`hmac-sha256:`, not bound to its run) counts as no tag.
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use iterion_boundary::fs::{Dir, open_file};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Name of the key file in the data dir.
pub const KEY_FILE: &str = "run-record.key";
/// Field of `run.json` holding the tag.
pub const FIELD: &str = "integrity";
const SCHEME: &str = "hmac-sha256-v2:";
/// The earlier scheme, whose tag covered the document only.
const LEGACY_SCHEME: &str = "hmac-sha256:";
/// Domain separation of the MAC input.
const CONTEXT: &[u8] = b"iterion run record v2\0";

/// The run a record is signed for: its id (the name of its directory) and its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBinding<'a> {
    /// The run id.
    pub run_id: &'a str,
    /// The run directory (`<store>/runs/<id>`), as the store names it.
    pub dir: &'a Path,
}

/// The host secret that signs run records.
#[derive(Clone, PartialEq, Eq)]
pub struct RecordKey([u8; 32]);

impl std::fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordKey([redacted])")
    }
}

/// What a `run.json` says about its own integrity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integrity {
    /// The tag matches the document.
    Valid,
    /// The document has no tag (written by a version without tags, or by a caller without a key), or a tag of
    /// the earlier scheme that does not bind it to its run.
    Unsigned,
    /// The tag is malformed or does not match the document.
    Mismatch,
}

impl RecordKey {
    /// A key from raw bytes (tests and library callers that manage their own secret).
    pub fn from_bytes(bytes: [u8; 32]) -> RecordKey {
        RecordKey(bytes)
    }

    /// `<data_dir>/run-record.key`.
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(KEY_FILE)
    }

    /// Reads the key of `data_dir`, creating it (32 random bytes as hex, mode 0600, data dir 0700) on first
    /// use. A key file that is not a private regular file of 64 hex characters is an error, never replaced.
    pub fn load_or_create(data_dir: &Path) -> Result<RecordKey> {
        let path = Self::path(data_dir);
        match Self::load(&path) {
            Err(Error::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {}
            other => return other,
        }
        let bytes: [u8; 32] = rand::random();
        match Dir::create_private(data_dir)?.create_new(KEY_FILE)? {
            Some(mut f) => {
                f.write_all(hex::encode(bytes).as_bytes())
                    .and_then(|()| f.sync_all())
                    .map_err(|e| Error::io("write", &path, e))?;
                Ok(RecordKey(bytes))
            }
            // another process created it first: use theirs
            None => Self::load(&path),
        }
    }

    fn load(path: &Path) -> Result<RecordKey> {
        let bad = |reason: &str| Error::RecordKey {
            path: path.to_path_buf(),
            reason: reason.to_owned(),
        };
        let file = match open_file(path) {
            Ok((f, _)) => f,
            Err(iterion_boundary::Error::StoreFile { .. }) => return Err(bad("not a regular file")),
            Err(e) => return Err(e.into()),
        };
        let md = file.metadata().map_err(|e| Error::io("read", path, e))?;
        if md.permissions().mode() & 0o077 != 0 {
            return Err(bad("readable by other users (expected mode 0600)"));
        }
        let mut text = String::new();
        file.take(4096)
            .read_to_string(&mut text)
            .map_err(|e| Error::io("read", path, e))?;
        let mut out = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut out).map_err(|_| bad("not 64 hexadecimal characters"))?;
        Ok(RecordKey(out))
    }

    /// HMAC-SHA256 (RFC 2104) of `msg`.
    fn mac(&self, msg: &[u8]) -> [u8; 32] {
        hmac_sha256(&self.0, msg)
    }

    /// The tag of a document value (its top-level `integrity` field ignored) for the run `binding` names:
    /// the MAC of the context, the run id, the directory (each length-prefixed) and the canonical document.
    fn tag_of(&self, doc: &Value, binding: RecordBinding<'_>) -> Result<String> {
        use std::os::unix::ffi::OsStrExt;
        let mut msg = CONTEXT.to_vec();
        for part in [binding.run_id.as_bytes(), binding.dir.as_os_str().as_bytes()] {
            msg.extend_from_slice(&(part.len() as u64).to_be_bytes());
            msg.extend_from_slice(part);
        }
        canonical(doc, true, &mut msg)?;
        Ok(format!("{SCHEME}{}", hex::encode(self.mac(&msg))))
    }

    /// The tag to store for the pretty text `unsigned` (a document without the field) of the run `binding`.
    pub(crate) fn sign_text(&self, unsigned: &str, binding: RecordBinding<'_>) -> Result<String> {
        let v: Value = serde_json::from_str(unsigned).map_err(|source| Error::Encode {
            what: "run document",
            source,
        })?;
        self.tag_of(&v, binding)
    }

    /// Checks the `integrity` field of the `run.json` bytes as the record of the run `binding` names.
    pub fn check(&self, bytes: &[u8], binding: RecordBinding<'_>) -> Integrity {
        let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
            return Integrity::Mismatch;
        };
        let Some(tag) = v.get(FIELD) else {
            return Integrity::Unsigned;
        };
        let Some(tag) = tag.as_str() else {
            return Integrity::Mismatch;
        };
        if !tag.starts_with(SCHEME) && tag.starts_with(LEGACY_SCHEME) {
            return Integrity::Unsigned;
        }
        match self.tag_of(&v, binding) {
            Ok(expect) if constant_time_eq(expect.as_bytes(), tag.as_bytes()) => Integrity::Valid,
            _ => Integrity::Mismatch,
        }
    }
}

/// Compact JSON with object keys sorted at every level, so the bytes depend only on the parsed values, never
/// on the order a serializer keeps; `top` drops the top-level `integrity` field.
fn canonical(v: &Value, top: bool, out: &mut Vec<u8>) -> Result<()> {
    let enc = |source| Error::Encode {
        what: "run document",
        source,
    };
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().filter(|k| !(top && k.as_str() == FIELD)).collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, k).map_err(enc)?;
                out.push(b':');
                canonical(&m[k], false, out)?;
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(x, false, out)?;
            }
            out.push(b']');
        }
        scalar => serde_json::to_writer(&mut *out, scalar).map_err(enc)?,
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// HMAC-SHA256 with a key of at most one block (64 bytes).
fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |b: u8| block.map(|k| k ^ b);
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(msg).finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    fn r() -> RecordBinding<'static> {
        RecordBinding {
            run_id: "r",
            dir: Path::new("/s/runs/r"),
        }
    }

    #[test]
    fn a_changed_document_or_tag_is_a_mismatch_and_a_missing_tag_is_unsigned() {
        let key = RecordKey::from_bytes([7; 32]);
        let unsigned = "{\n  \"id\": \"r\",\n  \"sandbox\": {\"cli_mode\": null}\n}\n";
        let tag = key.sign_text(unsigned, r()).expect("sign");
        assert!(tag.starts_with("hmac-sha256-v2:"), "{tag}");
        let signed = unsigned.replacen("{\n", &format!("{{\n  \"integrity\": \"{tag}\",\n"), 1);
        assert_eq!(key.check(signed.as_bytes(), r()), Integrity::Valid);
        // Re-indenting keeps the tag valid: it covers the parsed document, not its layout.
        let compact =
            serde_json::to_string(&serde_json::from_str::<Value>(&signed).expect("json")).expect("enc");
        assert_eq!(key.check(compact.as_bytes(), r()), Integrity::Valid);
        // Reordering keys keeps it valid too.
        let reordered =
            format!("{{\"sandbox\": {{\"cli_mode\": null}}, \"integrity\": \"{tag}\", \"id\": \"r\"}}");
        assert_eq!(key.check(reordered.as_bytes(), r()), Integrity::Valid);
        let tampered = signed.replace("null", "\"none\"");
        assert_eq!(key.check(tampered.as_bytes(), r()), Integrity::Mismatch);
        assert_eq!(
            RecordKey::from_bytes([8; 32]).check(signed.as_bytes(), r()),
            Integrity::Mismatch
        );
        assert_eq!(key.check(unsigned.as_bytes(), r()), Integrity::Unsigned);
        assert_eq!(key.check(b"not json", r()), Integrity::Mismatch);
        let wrong_type = signed.replace(&format!("\"{tag}\""), "42");
        assert_eq!(key.check(wrong_type.as_bytes(), r()), Integrity::Mismatch);
    }

    #[test]
    fn a_tag_is_valid_only_for_the_run_id_and_directory_it_was_signed_for() {
        let key = RecordKey::from_bytes([7; 32]);
        let unsigned = "{\"id\": \"x\"}";
        let x = RecordBinding {
            run_id: "x",
            dir: Path::new("/s/runs/x"),
        };
        let tag = key.sign_text(unsigned, x).expect("sign");
        let signed = format!("{{\"id\": \"x\", \"integrity\": \"{tag}\"}}");
        assert_eq!(key.check(signed.as_bytes(), x), Integrity::Valid);
        let check = |run_id, dir| {
            key.check(
                signed.as_bytes(),
                RecordBinding {
                    run_id,
                    dir: Path::new(dir),
                },
            )
        };
        // copied into run y of the same store, into another store, or with the id moved into the path
        assert_eq!(check("y", "/s/runs/y"), Integrity::Mismatch);
        assert_eq!(check("y", "/s/runs/x"), Integrity::Mismatch);
        assert_eq!(check("x", "/t/runs/x"), Integrity::Mismatch);
        assert_eq!(check("", "x/s/runs/x"), Integrity::Mismatch);
        // a tag of the earlier, unbound scheme is no tag: refused unless the operator forces the resume
        let legacy = signed.replace("hmac-sha256-v2:", "hmac-sha256:");
        assert_eq!(key.check(legacy.as_bytes(), x), Integrity::Unsigned);
    }

    #[test]
    fn the_key_file_is_created_private_once_and_refused_when_shared() {
        let d = tempfile::tempdir().expect("tempdir");
        let data = d.path().join("data");
        let a = RecordKey::load_or_create(&data).expect("create");
        let b = RecordKey::load_or_create(&data).expect("load");
        assert_eq!(a, b);
        let path = RecordKey::path(&data);
        let mode = fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = RecordKey::load_or_create(&data).expect_err("shared key");
        assert!(e.to_string().contains("readable by other users"), "{e}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        fs::write(&path, "short").expect("write");
        let e = RecordKey::load_or_create(&data).expect_err("bad key");
        assert!(e.to_string().contains("64 hexadecimal"), "{e}");
    }
}
