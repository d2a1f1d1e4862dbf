//! Validity of names and values (§2).

use std::fmt;

use crate::error::{Error, Result};

/// Maximum length of a name, in bytes.
pub const MAX_NAME_LEN: usize = 256;
/// Maximum length of one `NAME=VALUE` string (Linux `MAX_ARG_STRLEN`).
pub const MAX_ENTRY_LEN: usize = 131_072;
/// Maximum total of `NAME=VALUE\0` bytes of a container environment.
pub const MAX_ENV_BYTES: usize = 1_048_576;
/// Maximum number of entries of a container environment.
pub const MAX_ENV_ENTRIES: usize = 4096;

/// The layer an entry came from, as named in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Layer {
    /// devcontainer `remoteEnv`, `containerEnv`, `runArgs -e`.
    Repository,
    /// Values the runtime supplies when no higher layer sets the name (`HOME`).
    Defaults,
    /// The workflow (and node) `env:` blocks.
    Workflow,
    /// `--sandbox-env` and the library's operator env (container scope).
    Operator,
    /// Per-process exec scope.
    Exec,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Repository => "repository",
            Layer::Defaults => "defaults",
            Layer::Workflow => "workflow",
            Layer::Operator => "operator",
            Layer::Exec => "exec",
        })
    }
}

/// Renders bytes with non-printable ones as `\xNN`, so an error message never carries control characters.
pub fn escape_name(name: &[u8]) -> String {
    let mut s = String::with_capacity(name.len());
    for &b in name {
        if b.is_ascii_graphic() || b == b' ' {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02X}"));
        }
    }
    s
}

/// Whether `name` matches `^[A-Za-z_][A-Za-z0-9_]*$` and is 1–256 bytes.
pub fn is_valid_name(name: &[u8]) -> bool {
    match name.split_first() {
        None => false,
        Some((first, rest)) => {
            name.len() <= MAX_NAME_LEN
                && (first.is_ascii_alphabetic() || *first == b'_')
                && rest.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        }
    }
}

/// Checks a name (§2); the error carries the escaped name.
pub fn validate_name(layer: Layer, name: &str) -> Result<()> {
    if is_valid_name(name.as_bytes()) {
        Ok(())
    } else {
        Err(Error::InvalidName {
            layer,
            name_escaped: escape_name(name.as_bytes()),
        })
    }
}

/// Checks a value (no NUL, CR, LF) and the size of the whole entry; never includes the value in the error.
pub fn validate_value(layer: Layer, name: &str, value: &str) -> Result<()> {
    validate_value_bytes(layer, name, value.as_bytes()).map(|_| ())
}

/// Like [`validate_value`] for raw bytes; returns the value as `&str` when it is valid UTF-8.
pub fn validate_value_bytes<'a>(layer: Layer, name: &str, value: &'a [u8]) -> Result<&'a str> {
    if value.iter().any(|b| matches!(b, 0 | b'\r' | b'\n')) {
        return Err(Error::InvalidValue {
            layer,
            name: name.to_string(),
        });
    }
    let s = std::str::from_utf8(value).map_err(|_| Error::InvalidValue {
        layer,
        name: name.to_string(),
    })?;
    if name.len() + 1 + value.len() > MAX_ENTRY_LEN {
        return Err(Error::EntryTooLarge {
            layer,
            name: name.to_string(),
        });
    }
    Ok(s)
}

/// Checks name then value.
pub fn validate_entry(layer: Layer, name: &str, value: &str) -> Result<()> {
    validate_name(layer, name)?;
    validate_value(layer, name, value)
}

/// Checks the size limits of a whole container environment.
pub fn validate_total<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<()> {
    let mut bytes = 0usize;
    let mut count = 0usize;
    for (n, v) in entries {
        bytes += n.len() + 1 + v.len() + 1;
        count += 1;
    }
    if bytes > MAX_ENV_BYTES || count > MAX_ENV_ENTRIES {
        return Err(Error::EnvironmentTooLarge {
            bytes,
            entries: count,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, value: &str, expect: &str) {
        let got = match validate_entry(Layer::Workflow, name, value) {
            Ok(()) => "ok".to_string(),
            Err(e) => e.to_string(),
        };
        assert_eq!(got, expect, "{name:?}");
    }

    #[test]
    fn names_and_values() {
        check("A", "x", "ok");
        check("_a9", "", "ok");
        check(
            "1BAD",
            "x",
            "invalid environment variable name '1BAD' in workflow layer",
        );
        check("", "x", "invalid environment variable name '' in workflow layer");
        check(
            "A-B",
            "x",
            "invalid environment variable name 'A-B' in workflow layer",
        );
        check(
            "A\u{1b}B",
            "x",
            "invalid environment variable name 'A\\x1BB' in workflow layer",
        );
        check(
            "A",
            "x\ny",
            "value of 'A' in workflow layer contains NUL, CR or LF or is not UTF-8",
        );
        check(
            "A",
            "x\ry",
            "value of 'A' in workflow layer contains NUL, CR or LF or is not UTF-8",
        );
        check(
            "A",
            "x\0y",
            "value of 'A' in workflow layer contains NUL, CR or LF or is not UTF-8",
        );
        check(&"N".repeat(256), "", "ok");
        check(
            &"N".repeat(257),
            "",
            &format!(
                "invalid environment variable name '{}' in workflow layer",
                "N".repeat(257)
            ),
        );
        check("A", &"v".repeat(131_070), "ok");
        check(
            "A",
            &"v".repeat(131_071),
            "'A' in workflow layer exceeds 131072 bytes",
        );
    }

    #[test]
    fn non_utf8_value_is_invalid() {
        let e = validate_value_bytes(Layer::Operator, "A", b"\xff").unwrap_err();
        assert_eq!(
            e,
            Error::InvalidValue {
                layer: Layer::Operator,
                name: "A".into()
            }
        );
    }

    #[test]
    fn totals() {
        let v = "x".repeat(1000);
        let many: Vec<(String, String)> = (0..4097).map(|i| (format!("N{i}"), String::new())).collect();
        assert!(matches!(
            validate_total(many.iter().map(|(a, b)| (a.as_str(), b.as_str()))),
            Err(Error::EnvironmentTooLarge { entries: 4097, .. })
        ));
        let big: Vec<(String, String)> = (0..1100).map(|i| (format!("N{i}"), v.clone())).collect();
        assert!(matches!(
            validate_total(big.iter().map(|(a, b)| (a.as_str(), b.as_str()))),
            Err(Error::EnvironmentTooLarge { entries: 1100, .. })
        ));
        assert_eq!(validate_total([("A", "1")]), Ok(()));
    }
}
