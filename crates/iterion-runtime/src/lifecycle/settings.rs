//! Bounds and switches of the lifecycle read from the launch environment (05 §7, 06 §11.1).
//!
//! Durations use the syntax of 01 §4.2 (`90s`, `10m`, `1h30m`, `100ms`). An empty, unparseable or non-positive
//! value means the default and produces a warning naming the variable.
use std::collections::BTreeMap;
use std::time::Duration;

use iterion_driver::PullPolicy;
use iterion_driver::hardening::ContainerSettings;
use iterion_spec::duration::parse_positive;

/// A bound with the text it came from (`run_failed.data.timeout` repeats it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// The duration.
    pub duration: Duration,
    /// The text: the variable's value, or the default (`30m`).
    pub text: String,
}

impl Bound {
    fn default_of(text: &str) -> Bound {
        Bound {
            duration: parse_positive(text).unwrap_or(Duration::from_secs(60)),
            text: text.to_owned(),
        }
    }
}

/// Everything the lifecycle reads from `ITERION_*` variables.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settings {
    /// `ITERION_SANDBOX_PULL_TIMEOUT` (10m).
    pub pull_timeout: Bound,
    /// `ITERION_SANDBOX_BUILD_TIMEOUT` (30m).
    pub build_timeout: Bound,
    /// `ITERION_SANDBOX_START_TIMEOUT` (5m).
    pub start_timeout: Bound,
    /// `ITERION_SANDBOX_POST_CREATE_TIMEOUT` (30m).
    pub post_create_timeout: Bound,
    /// `ITERION_SANDBOX_K8S_POD_READY_TIMEOUT` (10m): how long a sibling pod may take to become ready.
    pub pod_ready_timeout: Bound,
    /// `ITERION_SANDBOX_WORKSPACE_COPY_TIMEOUT` (15m): the copy of the work dir into a pod, and back.
    pub workspace_copy_timeout: Bound,
    /// Probe bound (60s, not configurable).
    pub probe_timeout: Bound,
    /// `ITERION_SANDBOX_PULL_POLICY` (`missing`: a present image is used without contacting a registry).
    pub pull_policy: PullPolicy,
    /// `ITERION_SANDBOX_KEEP_BUILD_IMAGES`: no effect since built images are cached (kept across runs, removed
    /// by `iterion sandbox prune`); still read so that a setting of it is not reported as unknown.
    pub keep_build_images: bool,
    /// `ITERION_SANDBOX_REBUILD` (`iterion run --rebuild`): build even when the cache has the image.
    pub rebuild: bool,
    /// `ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS`.
    pub require_enforced_egress: bool,
    /// `ITERION_SANDBOX_SILENT_DENY`: `None` = the proxy's default list.
    pub silent_deny: Option<Vec<String>>,
    /// Hardening profile and resource limits of the containers (03 §8.7).
    pub container: ContainerSettings,
    /// Warnings to log (invalid durations fell back to their default).
    pub warnings: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings::from_env(&BTreeMap::new())
    }
}

/// Whether a boolean variable is truthy (`1`, `true`, `yes`, `on`, case-insensitive).
pub fn truthy(env: &BTreeMap<String, String>, name: &str) -> bool {
    matches!(
        env.get(name).map(|v| v.trim().to_ascii_lowercase()).as_deref(),
        Some("1" | "true" | "yes" | "on")
    )
}

/// `ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS`, and the warning for a value that is neither on nor off: such a value
/// requires enforced egress (the stricter reading, as an invalid hardening profile is strict).
pub fn require_enforced_egress(env: &BTreeMap<String, String>) -> (bool, Option<String>) {
    const NAME: &str = "ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS";
    match env.get(NAME).map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "0" | "false" | "no" | "off") => (false, None),
        Some("1" | "true" | "yes" | "on") => (true, None),
        Some(other) => (
            true,
            Some(format!(
                "invalid {NAME} '{other}' (want 1, true, yes, on or 0, false, no, off); enforced egress is required"
            )),
        ),
    }
}

impl Settings {
    /// Reads the settings from an environment snapshot.
    pub fn from_env(env: &BTreeMap<String, String>) -> Settings {
        let mut warnings = Vec::new();
        let mut bound = |name: &str, default: &str| match env.get(name).map(|v| v.trim()) {
            None | Some("") => Bound::default_of(default),
            Some(v) => match parse_positive(v) {
                Some(d) => Bound {
                    duration: d,
                    text: v.to_owned(),
                },
                None => {
                    warnings.push(format!(
                        "invalid {name} '{v}' (want a positive duration such as 90s or 10m); using {default}"
                    ));
                    Bound::default_of(default)
                }
            },
        };
        let pull_timeout = bound("ITERION_SANDBOX_PULL_TIMEOUT", "10m");
        let build_timeout = bound("ITERION_SANDBOX_BUILD_TIMEOUT", "30m");
        let start_timeout = bound("ITERION_SANDBOX_START_TIMEOUT", "5m");
        let post_create_timeout = bound("ITERION_SANDBOX_POST_CREATE_TIMEOUT", "30m");
        let pod_ready_timeout = bound("ITERION_SANDBOX_K8S_POD_READY_TIMEOUT", "10m");
        let workspace_copy_timeout = bound("ITERION_SANDBOX_WORKSPACE_COPY_TIMEOUT", "15m");
        let pull_policy = match env
            .get("ITERION_SANDBOX_PULL_POLICY")
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            Some("missing") | Some("") | None => PullPolicy::Missing,
            Some("always") => PullPolicy::Always,
            Some("never") => PullPolicy::Never,
            Some("auto") => PullPolicy::Auto,
            Some(other) => {
                warnings.push(format!(
                    "invalid ITERION_SANDBOX_PULL_POLICY '{other}' (want missing, always, never or auto); using missing"
                ));
                PullPolicy::Missing
            }
        };
        let silent_deny = env.get("ITERION_SANDBOX_SILENT_DENY").map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        });
        let container = ContainerSettings::from_env(env);
        warnings.extend(container.warnings.iter().cloned());
        let (require_enforced_egress, w) = require_enforced_egress(env);
        warnings.extend(w);
        Settings {
            pull_timeout,
            build_timeout,
            start_timeout,
            post_create_timeout,
            pod_ready_timeout,
            workspace_copy_timeout,
            probe_timeout: Bound::default_of("60s"),
            pull_policy,
            keep_build_images: truthy(env, "ITERION_SANDBOX_KEEP_BUILD_IMAGES"),
            rebuild: truthy(env, "ITERION_SANDBOX_REBUILD"),
            require_enforced_egress,
            silent_deny,
            container,
            warnings,
        }
    }
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
    fn defaults() {
        let s = Settings::default();
        assert_eq!(s.pull_timeout.duration, Duration::from_secs(600));
        assert_eq!(s.build_timeout.text, "30m");
        assert_eq!(s.start_timeout.duration, Duration::from_secs(300));
        assert_eq!(s.post_create_timeout.duration, Duration::from_secs(1800));
        assert_eq!(s.probe_timeout.duration, Duration::from_secs(60));
        assert_eq!(s.pull_policy, PullPolicy::Missing);
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn an_unreadable_egress_requirement_requires_enforced_egress_and_says_so() {
        let of = |v: &str| Settings::from_env(&env(&[("ITERION_SANDBOX_REQUIRE_ENFORCED_EGRESS", v)]));
        for (v, want) in [
            ("1", true),
            ("ON", true),
            ("", false),
            ("off", false),
            ("0", false),
        ] {
            let s = of(v);
            assert_eq!(s.require_enforced_egress, want, "{v}");
            assert!(s.warnings.is_empty(), "{v}: {:?}", s.warnings);
        }
        let s = of("ture");
        assert!(s.require_enforced_egress);
        assert_eq!(s.warnings.len(), 1);
        assert!(s.warnings[0].contains("'ture'"), "{:?}", s.warnings);
    }

    #[test]
    fn values_and_fallbacks() {
        let s = Settings::from_env(&env(&[
            ("ITERION_SANDBOX_POST_CREATE_TIMEOUT", "100ms"),
            ("ITERION_SANDBOX_PULL_TIMEOUT", "soon"),
            ("ITERION_SANDBOX_BUILD_TIMEOUT", "0s"),
            ("ITERION_SANDBOX_START_TIMEOUT", "1h30m"),
            ("ITERION_SANDBOX_PULL_POLICY", "never"),
            ("ITERION_SANDBOX_KEEP_BUILD_IMAGES", "Yes"),
        ]));
        assert_eq!(s.post_create_timeout.duration, Duration::from_millis(100));
        assert_eq!(s.post_create_timeout.text, "100ms");
        assert_eq!(s.pull_timeout.text, "10m");
        assert_eq!(s.build_timeout.text, "30m");
        assert_eq!(s.start_timeout.duration, Duration::from_secs(5400));
        assert_eq!(s.pull_policy, PullPolicy::Never);
        assert!(s.keep_build_images);
        for (v, p) in [
            ("auto", PullPolicy::Auto),
            ("Always", PullPolicy::Always),
            (" missing ", PullPolicy::Missing),
            ("", PullPolicy::Missing),
        ] {
            let s = Settings::from_env(&env(&[("ITERION_SANDBOX_PULL_POLICY", v)]));
            assert_eq!((s.pull_policy, s.warnings.len()), (p, 0), "{v:?}");
        }
        assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
        assert!(s.warnings[0].contains("ITERION_SANDBOX_PULL_TIMEOUT"));
    }
}
