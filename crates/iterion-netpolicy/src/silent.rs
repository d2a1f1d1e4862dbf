//! The silent-deny list (spec 04 §7): denials of these hosts produce no `network_blocked` event.
//!
//! The list never changes a decision; it only tells the proxy whether a denial it already made is reported.

use crate::host::Target;
use crate::policy::PolicyError;
use crate::rule::Rule;

/// The default silent-deny patterns (telemetry and error reporting contacted by agents constantly).
pub const DEFAULT_SILENT_DENY: &[&str] = &[
    "statsig.anthropic.com",
    "**.statsig.com",
    "**.sentry.io",
    "**.datadoghq.com",
    "**.segment.io",
];

/// A compiled silent-deny list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SilentDeny {
    rules: Vec<Rule>,
}

impl Default for SilentDeny {
    /// The default list, [`DEFAULT_SILENT_DENY`].
    fn default() -> Self {
        let rules = DEFAULT_SILENT_DENY
            .iter()
            .filter_map(|p| Rule::parse(p).ok())
            .collect();
        SilentDeny { rules }
    }
}

impl SilentDeny {
    /// Compile a list of patterns (§3 grammar; a leading `!` is accepted and ignored, a port scopes the entry).
    /// Every bad pattern is reported.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<SilentDeny, Vec<PolicyError>> {
        let mut rules = Vec::with_capacity(patterns.len());
        let mut errors = Vec::new();
        for (index, p) in patterns.iter().enumerate() {
            match Rule::parse(p.as_ref()) {
                Ok(rule) => rules.push(rule),
                Err(error) => errors.push(PolicyError::Rule {
                    index,
                    rule: p.as_ref().to_owned(),
                    error,
                }),
            }
        }
        if errors.is_empty() {
            Ok(SilentDeny { rules })
        } else {
            Err(errors)
        }
    }

    /// An empty list: every denial is reported.
    pub fn disabled() -> SilentDeny {
        SilentDeny { rules: Vec::new() }
    }

    /// The list configured by a `ITERION_SANDBOX_SILENT_DENY`-style value, passed in by the caller: `None` (unset)
    /// → the default list; an empty (or all-blank) value → disabled; otherwise comma-separated patterns replacing
    /// the default list.
    pub fn from_config_value(value: Option<&str>) -> Result<SilentDeny, Vec<PolicyError>> {
        match value {
            None => Ok(SilentDeny::default()),
            Some(v) => {
                let patterns: Vec<&str> = v.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
                SilentDeny::new(&patterns)
            }
        }
    }

    /// Whether a denial of this target is silent.
    pub fn is_silent(&self, target: &Target) -> bool {
        self.rules.iter().any(|r| r.matches(target))
    }

    /// The compiled entries.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}
