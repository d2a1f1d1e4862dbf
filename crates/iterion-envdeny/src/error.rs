//! The crate's error type.

use crate::Layer;

/// Errors of environment validation, merging and `--sandbox-env` parsing.
///
/// Messages name variables, never values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name does not match `^[A-Za-z_][A-Za-z0-9_]*$` or is longer than 256 bytes.
    #[error("invalid environment variable name '{name_escaped}' in {layer} layer")]
    InvalidName {
        /// The layer the entry came from.
        layer: Layer,
        /// The name with non-printable bytes rendered as `\xNN`.
        name_escaped: String,
    },
    /// A value contains NUL, CR or LF, or is not UTF-8.
    #[error("value of '{name}' in {layer} layer contains NUL, CR or LF or is not UTF-8")]
    InvalidValue {
        /// The layer the entry came from.
        layer: Layer,
        /// The variable name (never the value).
        name: String,
    },
    /// `NAME=VALUE` is longer than one environment string may be (131072 bytes).
    #[error("'{name}' in {layer} layer exceeds 131072 bytes")]
    EntryTooLarge {
        /// The layer the entry came from.
        layer: Layer,
        /// The variable name.
        name: String,
    },
    /// The merged container environment exceeds 1 MiB or 4096 entries.
    #[error(
        "sandbox environment is too large ({bytes} bytes, {entries} entries; limits 1048576 bytes, 4096 entries)"
    )]
    EnvironmentTooLarge {
        /// Total `NAME=VALUE\0` bytes.
        bytes: usize,
        /// Number of entries.
        entries: usize,
    },
    /// `--sandbox-env` names a variable iterion controls while the egress proxy is active.
    #[error("'{name}' is controlled by iterion while the egress proxy is active")]
    ReservedInOperatorLayer {
        /// The variable name.
        name: String,
    },
    /// `--sandbox-env NAME` names a variable that is not set in iterion's environment.
    #[error("--sandbox-env: {name} is not set in the environment")]
    NotSetInEnvironment {
        /// The variable name.
        name: String,
    },
    /// `--sandbox-env NAME=VALUE` with a deny-class name: the value would appear on a command line.
    #[error(
        "--sandbox-env: '{name}' looks like a secret ({reason}); export it and pass '--sandbox-env {name}' so its value never appears on a command line"
    )]
    LooksLikeSecret {
        /// The variable name.
        name: String,
        /// The rule code, e.g. `prefix:OPENAI_`.
        reason: String,
    },
    /// A rule given to [`crate::DenyClass::with_extra`] is not a valid upper-case name fragment.
    #[error("deny rule pattern '{pattern}' must be non-empty upper case [A-Z0-9_]")]
    InvalidRule {
        /// The offending pattern.
        pattern: String,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
