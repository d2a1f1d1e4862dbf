//! The machine-wide container settings of 03 §8.7 read from an injected environment map: the hardening profile
//! (`ITERION_SANDBOX_HARDENING`) and the resource limits (`ITERION_SANDBOX_PIDS_LIMIT`,
//! `ITERION_SANDBOX_MEMORY_LIMIT`, `ITERION_SANDBOX_CPUS`). The runtime and the
//! doctor's throwaway sandbox both read them here, so a probe runs with exactly the limits a run would get.
//! An invalid value falls back to the default and yields a warning naming the variable.

use crate::{HardeningProfile, ResourceLimits};
use std::collections::BTreeMap;

/// The default `PidsLimit` (03 §8.7).
pub const DEFAULT_PIDS_LIMIT: u64 = 4096;

/// Hardening profile and limits, with the warnings of invalid values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSettings {
    /// `ITERION_SANDBOX_HARDENING` (`strict` default, `compat`).
    pub hardening: HardeningProfile,
    /// The limits; `pids` is `Some(0)` when the variable asks for the engine default.
    pub limits: ResourceLimits,
    /// One line per invalid variable.
    pub warnings: Vec<String>,
}

impl ContainerSettings {
    /// Reads the settings from an environment snapshot.
    pub fn from_env(env: &BTreeMap<String, String>) -> ContainerSettings {
        let mut warnings = Vec::new();
        let get = |k: &str| env.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let hardening = match get("ITERION_SANDBOX_HARDENING")
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("strict") => HardeningProfile::Strict,
            Some("compat") => HardeningProfile::Compat,
            Some(other) => {
                warnings.push(format!(
                    "invalid ITERION_SANDBOX_HARDENING '{other}' (want strict or compat); using strict"
                ));
                HardeningProfile::Strict
            }
        };
        let pids = match get("ITERION_SANDBOX_PIDS_LIMIT") {
            None => DEFAULT_PIDS_LIMIT,
            Some(v) => v.parse::<u64>().unwrap_or_else(|_| {
                warnings.push(format!(
                    "invalid ITERION_SANDBOX_PIDS_LIMIT '{v}' (want an integer >= 0); using {DEFAULT_PIDS_LIMIT}"
                ));
                DEFAULT_PIDS_LIMIT
            }),
        };
        let memory_bytes = get("ITERION_SANDBOX_MEMORY_LIMIT").and_then(|v| {
            let parsed = parse_bytes(v);
            if parsed.is_none() {
                warnings.push(format!(
                    "invalid ITERION_SANDBOX_MEMORY_LIMIT '{v}' (want bytes with an optional k, m or g suffix); no memory limit"
                ));
            }
            parsed
        });
        let nano_cpus = get("ITERION_SANDBOX_CPUS").and_then(|v| {
            let parsed = parse_cpus(v);
            if parsed.is_none() {
                warnings.push(format!(
                    "invalid ITERION_SANDBOX_CPUS '{v}' (want a positive decimal number of CPUs); no CPU limit"
                ));
            }
            parsed
        });
        ContainerSettings {
            hardening,
            limits: ResourceLimits {
                pids: Some(pids),
                memory_bytes,
                nano_cpus,
            },
            warnings,
        }
    }
}

/// `512m`, `2g`, `1048576`, `64k` (binary multiples); `None` when invalid or zero.
fn parse_bytes(v: &str) -> Option<u64> {
    let lower = v.to_ascii_lowercase();
    let (digits, mult) = match lower.as_bytes().last()? {
        b'k' => (&lower[..lower.len() - 1], 1u64 << 10),
        b'm' => (&lower[..lower.len() - 1], 1 << 20),
        b'g' => (&lower[..lower.len() - 1], 1 << 30),
        _ => (lower.as_str(), 1),
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(mult).filter(|b| *b > 0)
}

/// `1.5` CPUs → 1,500,000,000 nano-CPUs; `None` when invalid, not positive or absurdly large.
fn parse_cpus(v: &str) -> Option<u64> {
    let cpus: f64 = v.parse().ok()?;
    if !cpus.is_finite() || cpus <= 0.0 || cpus > 1.0e6 {
        return None;
    }
    // bounded above, so the product fits in a u64
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let nano = (cpus * 1e9).round() as u64;
    (nano > 0).then_some(nano)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_are_strict_with_4096_pids() {
        let s = ContainerSettings::from_env(&env(&[]));
        assert_eq!(s.hardening, HardeningProfile::Strict);
        assert_eq!(s.limits.pids, Some(4096));
        assert_eq!((s.limits.memory_bytes, s.limits.nano_cpus), (None, None));
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn every_variable_is_read() {
        let s = ContainerSettings::from_env(&env(&[
            ("ITERION_SANDBOX_HARDENING", " Compat "),
            ("ITERION_SANDBOX_PIDS_LIMIT", "0"),
            ("ITERION_SANDBOX_MEMORY_LIMIT", "512m"),
            ("ITERION_SANDBOX_CPUS", "1.5"),
        ]));
        assert_eq!(s.hardening, HardeningProfile::Compat);
        assert_eq!(s.limits.pids, Some(0));
        assert_eq!(s.limits.memory_bytes, Some(512 << 20));
        assert_eq!(s.limits.nano_cpus, Some(1_500_000_000));
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    }

    #[test]
    fn invalid_values_fall_back_and_warn() {
        let s = ContainerSettings::from_env(&env(&[
            ("ITERION_SANDBOX_HARDENING", "off"),
            ("ITERION_SANDBOX_PIDS_LIMIT", "-1"),
            ("ITERION_SANDBOX_MEMORY_LIMIT", "lots"),
            ("ITERION_SANDBOX_CPUS", "0"),
        ]));
        assert_eq!(s.hardening, HardeningProfile::Strict);
        assert_eq!(s.limits.pids, Some(4096));
        assert_eq!((s.limits.memory_bytes, s.limits.nano_cpus), (None, None));
        assert_eq!(s.warnings.len(), 4, "{:?}", s.warnings);
        assert!(s.warnings[0].contains("ITERION_SANDBOX_HARDENING 'off'"));
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("1048576"), Some(1 << 20));
        assert_eq!(parse_bytes("64k"), Some(64 << 10));
        assert_eq!(parse_bytes("2G"), Some(2 << 30));
        assert_eq!(parse_bytes("0"), None);
        assert_eq!(parse_bytes("m"), None);
        assert_eq!(parse_bytes("99999999999999999g"), None);
    }
}
