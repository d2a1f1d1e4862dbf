//! The policy mode: what happens when no rule matches.

use std::fmt;

/// What happens when no rule matches (§5.1). Rule polarity never depends on the mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// No match → deny.
    Allowlist,
    /// No match → allow.
    Denylist,
    /// No match → allow (a run without a proxy; rules have no effect there).
    Open,
}

impl Mode {
    /// The DSL spelling: `allowlist`, `denylist` or `open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Allowlist => "allowlist",
            Mode::Denylist => "denylist",
            Mode::Open => "open",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
