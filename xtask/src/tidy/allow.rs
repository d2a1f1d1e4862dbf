//! The allowlist of violations that exist today (`xtask/tidy-allow.txt`). Each line allows one
//! violation by its key; a line that matches no violation any more is itself a problem, so the list
//! can only shrink.

use anyhow::{Result, bail};
use std::collections::BTreeMap;

/// The file, relative to the workspace root.
pub const FILE: &str = "xtask/tidy-allow.txt";

/// One finding of a check.
#[derive(Debug)]
pub struct Violation {
    /// What an allowlist line names it by: `long-fn crates/x/src/y.rs::name`, `cycle crate: a, b`.
    pub key: String,
    /// What tidy prints when it is not allowed.
    pub message: String,
}

/// The outcome of holding violations against the allowlist.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Violations without an allowlist line, then allowlist lines without a violation.
    pub problems: Vec<String>,
    /// How many violations an allowlist line covered.
    pub allowed: usize,
}

/// Reads the allowlist: one key a line; blank lines and lines starting with `#` are skipped.
pub fn parse(text: &str) -> Result<BTreeMap<String, usize>> {
    let mut entries = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !["long-fn ", "cycle ", "spawn ", "store-fs "]
            .iter()
            .any(|k| line.starts_with(k))
        {
            bail!(
                "{FILE}:{}: expected `long-fn PATH::NAME`, `cycle CRATE: MODULES`, `spawn PATH` or `store-fs PATH`, \
                 got `{line}`",
                i + 1
            );
        }
        if let Some(first) = entries.insert(line.to_string(), i + 1) {
            bail!("{FILE}:{}: `{line}` repeats line {first}", i + 1);
        }
    }
    Ok(entries)
}

/// Holds `violations` against the allowlist `entries` (key → line).
pub fn apply(entries: &BTreeMap<String, usize>, violations: &[Violation]) -> Verdict {
    let mut verdict = Verdict::default();
    for v in violations {
        if entries.contains_key(&v.key) {
            verdict.allowed += 1;
        } else {
            verdict.problems.push(v.message.clone());
        }
    }
    let mut stale: Vec<(usize, &String)> = entries
        .iter()
        .filter(|(key, _)| !violations.iter().any(|v| &v.key == *key))
        .map(|(key, &line)| (line, key))
        .collect();
    stale.sort();
    for (line, key) in stale {
        verdict.problems.push(format!(
            "{FILE}:{line}: `{key}` matches nothing any more; remove it from tidy-allow.txt"
        ));
    }
    verdict
}
