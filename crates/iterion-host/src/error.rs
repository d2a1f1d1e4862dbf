//! The crate's error type.

use crate::force::ForceSource;

/// What the host layer can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `--sandbox-driver` or `ITERION_SANDBOX_DRIVER` names no driver (a usage error, exit 2).
    #[error(
        "invalid {} '{}' (want docker, podman, kubernetes or noop)",
        from.as_str(),
        value.escape_debug()
    )]
    InvalidDriver {
        /// Where the name came from.
        from: ForceSource,
        /// The name as given (trimmed).
        value: String,
    },
    /// The embedded egress relay could not be installed.
    #[error(transparent)]
    Relay(#[from] iterion_driver_docker::Error),
    /// The embedded claw runner could not be installed.
    #[error("claw runner unavailable: {reason}")]
    ClawRunner {
        /// Why.
        reason: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
