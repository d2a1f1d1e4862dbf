//! Run ids, friendly names and safe path components (section 1.2, 1.4).
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use super::words::WORDS;
use crate::error::{Error, Result};

/// A run id: `--run-id` matching `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`, or a UUIDv7 in canonical lower-case
/// hyphenated form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

impl RunId {
    /// Validates an operator-supplied run id (`Error::InvalidRunId`, a usage error, otherwise).
    pub fn parse(value: &str) -> Result<RunId> {
        let bytes = value.as_bytes();
        let ok = !bytes.is_empty()
            && bytes.len() <= 128
            && bytes[0].is_ascii_alphanumeric()
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        // `..` would name a parent directory in a store path.
        if ok && !value.contains("..") {
            Ok(RunId(value.to_owned()))
        } else {
            Err(Error::InvalidRunId {
                value: value.to_owned(),
            })
        }
    }

    /// A fresh UUIDv7 from the current time and random bits.
    pub fn new_v7() -> RunId {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        RunId::from_v7_parts(ms, rand::random())
    }

    /// A UUIDv7 from a Unix time in milliseconds and 10 random bytes (RFC 9562 layout: 48-bit timestamp,
    /// version 7, 12 random bits, variant `10`, 62 random bits).
    pub fn from_v7_parts(unix_ms: u64, random: [u8; 10]) -> RunId {
        let mut b = [0u8; 16];
        b[..6].copy_from_slice(&unix_ms.to_be_bytes()[2..]);
        b[6..].copy_from_slice(&random);
        b[6] = 0x70 | (b[6] & 0x0f);
        b[8] = 0x80 | (b[8] & 0x3f);
        let h = hex::encode(b);
        RunId(format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        ))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for RunId {
    type Error = Error;
    fn try_from(value: String) -> Result<RunId> {
        RunId::parse(&value)
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> String {
        id.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks that a path component derived from data (run id, node id, artifact name) is non-empty, is not `.`
/// and contains no `/`, `\`, `..`, NUL or control character.
pub fn validate_component<'a>(kind: &'static str, value: &'a str) -> Result<&'a str> {
    let bad = value.is_empty()
        || value == "."
        || value.contains("..")
        || value.chars().any(|c| c == '/' || c == '\\' || c.is_control());
    if bad {
        Err(Error::UnsafePathComponent {
            kind,
            value: value.to_owned(),
        })
    } else {
        Ok(value)
    }
}

/// The friendly name `<word>-<word>-<word>-<hex4>` of a run, derived from SHA-256 of
/// `"<absolute workflow path>:<run id>"`: bytes 0, 1, 2 index the word list, `<hex4>` is bytes 3–4 in hex.
pub fn friendly_name(workflow_path: &str, run_id: &str) -> String {
    let digest = Sha256::digest(format!("{workflow_path}:{run_id}").as_bytes());
    let word = |i: usize| WORDS[usize::from(digest[i]) % WORDS.len()];
    format!(
        "{}-{}-{}-{}",
        word(0),
        word(1),
        word(2),
        hex::encode(&digest[3..5])
    )
}

/// Lower-case hex SHA-256 of some bytes (`workflow_hash`).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_id(input: &str, ok: bool) {
        assert_eq!(RunId::parse(input).is_ok(), ok, "{input:?}");
    }

    #[test]
    fn run_id_grammar() {
        check_id("a", true);
        check_id("0194f7e2-5c1b-7d3e-9a40-2f6c1d8e9b71", true);
        check_id("Run_1.x-y", true);
        check_id(&"a".repeat(128), true);
        check_id(&"a".repeat(129), false);
        check_id("", false);
        check_id("-a", false);
        check_id(".a", false);
        check_id("a/b", false);
        check_id("a b", false);
        check_id("a..b", false);
        check_id("é", false);
    }

    #[test]
    fn uuid_v7_layout() {
        let id = RunId::from_v7_parts(0x0194_f7e2_5c1b, [0xff; 10]);
        assert_eq!(id.as_str(), "0194f7e2-5c1b-7fff-bfff-ffffffffffff");
        let id = RunId::from_v7_parts(1, [0; 10]);
        assert_eq!(id.as_str(), "00000000-0001-7000-8000-000000000000");
        let fresh = RunId::new_v7();
        assert!(RunId::parse(fresh.as_str()).is_ok());
        assert_eq!(fresh.as_str().len(), 36);
        assert_eq!(&fresh.as_str()[14..15], "7");
    }

    fn check_component(input: &str, ok: bool) {
        assert_eq!(validate_component("node id", input).is_ok(), ok, "{input:?}");
    }

    #[test]
    fn path_components() {
        check_component("build", true);
        check_component("a.b", true);
        check_component("", false);
        check_component(".", false);
        check_component("..", false);
        check_component("../x", false);
        check_component("a/b", false);
        check_component("a\\b", false);
        check_component("a\0b", false);
        check_component("a\nb", false);
        check_component("x..y", false);
    }

    #[test]
    fn friendly_names_are_stable_and_shaped() {
        // ST13
        let a = friendly_name("/w/app/flow.bot", "run-1");
        assert_eq!(a, friendly_name("/w/app/flow.bot", "run-1"));
        assert_ne!(a, friendly_name("/w/app/flow.bot", "run-2"));
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(parts.len(), 4, "{a}");
        assert!(parts[..3].iter().all(|w| WORDS.contains(w)), "{a}");
        assert_eq!(parts[3].len(), 4);
        assert!(
            parts[3]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }

    #[test]
    fn friendly_name_known_answers() {
        // Computed independently: SHA-256 bytes 0..3 index the word list, bytes 3..5 in hex.
        assert_eq!(friendly_name("/w/app/release.bot", "b"), "wren-nova-lemon-8d72");
        assert_eq!(
            friendly_name("/w/app/release.bot", "a"),
            "bloom-robin-velvet-9ddd"
        );
    }

    #[test]
    fn word_list_is_256_unique_lowercase_words() {
        let mut sorted = WORDS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 256);
        assert!(
            WORDS
                .iter()
                .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase()))
        );
    }
}
