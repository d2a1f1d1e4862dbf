//! Run tags, container names and build tags (03 §16.3, 05 §4.10).

use sha2::{Digest, Sha256};

/// First `n` hex characters of SHA-256(`s`).
pub(crate) fn sha_prefix(s: &str, n: usize) -> String {
    let h = hex::encode(Sha256::digest(s.as_bytes()));
    h[..n.min(h.len())].to_string()
}

/// The run tag `s` of a run id: lower-cased, every character outside `[a-z0-9_.-]` replaced by `-`; when that
/// differs from the run id or `iterion-<s>` would exceed 63 characters, the first 46 characters of the
/// sanitised form + `-` + the first 8 hex characters of SHA-256(run id). A leading `.` or `-` is prefixed
/// with `r`.
pub fn run_tag(run_id: &str) -> String {
    let sanitised: String = run_id
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut s = if sanitised != run_id || "iterion-".len() + sanitised.len() > 63 {
        let head: String = sanitised.chars().take(46).collect();
        format!("{head}-{}", sha_prefix(run_id, 8))
    } else {
        sanitised
    };
    if s.starts_with('.') || s.starts_with('-') {
        s.insert(0, 'r');
    }
    s
}

fn key_suffix(spec_key: Option<&str>) -> String {
    match spec_key {
        Some(k) => format!("-{}", k.chars().take(8).collect::<String>()),
        None => String::new(),
    }
}

/// Container name: `iterion-<run tag>`, or `iterion-<run tag>-<first 8 characters of the spec key>` for a
/// node's own container.
pub fn container_name(run_id: &str, spec_key: Option<&str>) -> String {
    format!("iterion-{}{}", run_tag(run_id), key_suffix(spec_key))
}

/// Build tag: `iterion-sandbox-build:<run tag>` (`-<first 8 characters of the spec key>` for node specs).
pub fn build_tag(run_id: &str, spec_key: Option<&str>) -> String {
    format!(
        "iterion-sandbox-build:{}{}",
        run_tag(run_id),
        key_suffix(spec_key)
    )
}

/// A label value: control characters removed, truncated to at most 253 bytes on a character boundary.
pub fn label_value(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > 253 {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(run_id: &str, container: &str, build: &str) {
        assert_eq!(
            container_name(run_id, None),
            container,
            "container name of {run_id:?}"
        );
        assert_eq!(build_tag(run_id, None), build, "build tag of {run_id:?}");
    }

    #[test]
    fn names_and_tags_16_3() {
        check(
            "0190f5c2-7d1e-7abc-9def-0123456789ab",
            "iterion-0190f5c2-7d1e-7abc-9def-0123456789ab",
            "iterion-sandbox-build:0190f5c2-7d1e-7abc-9def-0123456789ab",
        );
        check("run_123", "iterion-run_123", "iterion-sandbox-build:run_123");
        check(
            "Run_ABC",
            "iterion-run_abc-ee818275",
            "iterion-sandbox-build:run_abc-ee818275",
        );
        check(
            "RUN XYZ",
            "iterion-run-xyz-c7623d58",
            "iterion-sandbox-build:run-xyz-c7623d58",
        );
        check(
            "run/../x",
            "iterion-run-..-x-bce103b5",
            "iterion-sandbox-build:run-..-x-bce103b5",
        );
        let a200 = "a".repeat(200);
        let a46 = "a".repeat(46);
        check(
            &a200,
            &format!("iterion-{a46}-c2a908d9"),
            &format!("iterion-sandbox-build:{a46}-c2a908d9"),
        );
    }

    #[test]
    fn node_containers_and_leading_punctuation() {
        assert_eq!(
            container_name("run_123", Some("0123456789abcdef")),
            "iterion-run_123-01234567"
        );
        assert_eq!(
            build_tag("run_123", Some("abc")),
            "iterion-sandbox-build:run_123-abc"
        );
        assert!(run_tag(".x").starts_with("r."));
        assert!(run_tag("-x").starts_with("r-"));
        assert!(container_name("x", None).len() <= 63);
    }

    #[test]
    fn label_values_are_sanitised() {
        assert_eq!(label_value("a\nb\tc"), "abc");
        assert_eq!(label_value(&"é".repeat(200)).len(), 252);
    }
}
