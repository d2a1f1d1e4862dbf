//! The crate's error type: which side failed, and the one HTTP status each failure maps to (spec §13.1).

use std::io;

/// Everything that can go wrong in the proxy library.
///
/// Request-level failures say which side failed: [`Error::Client`], [`Error::Upstream`], [`Error::Internal`].
/// Policy refusals are not errors; they are [`crate::Decision`]s.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid; every problem is listed.
    #[error("invalid proxy configuration: {}", problems.join("; "))]
    Config {
        /// One message per problem.
        problems: Vec<String>,
    },
    /// Binding the listener failed.
    #[error("cannot listen on {listen}")]
    Bind {
        /// The listen address as configured.
        listen: String,
        /// The operating system error.
        #[source]
        source: io::Error,
    },
    /// The TLS inspection CA or TLS configuration could not be created.
    #[error("cannot set up tls inspection: {reason}")]
    TlsSetup {
        /// What failed.
        reason: String,
    },
    /// TLS inspection with a secret binding was asked for, but the crate was built without its
    /// `tls-inspection` feature.
    #[error(
        "tls inspection is not available in this build (secret {secret} needs it): enable the tls-inspection feature"
    )]
    TlsInspectionUnavailable {
        /// The first secret binding of the refused settings.
        secret: String,
    },
    /// The client sent something the proxy refuses (400, 407, 408, 429, 431, 501).
    #[error("{message}")]
    Client {
        /// The HTTP status sent to the client.
        status: u16,
        /// The stable error code of the JSON body.
        code: &'static str,
        /// The human-readable message (also the `X-Iterion-Reason`).
        message: String,
    },
    /// DNS, connecting upstream, or the upstream protocol failed (502, 504).
    #[error("{message}")]
    Upstream {
        /// The HTTP status sent to the client.
        status: u16,
        /// The stable error code of the JSON body.
        code: &'static str,
        /// The human-readable message.
        message: String,
    },
    /// The proxy itself cannot serve the request (503).
    #[error("{message}")]
    Internal {
        /// The stable error code of the JSON body.
        code: &'static str,
        /// The human-readable message.
        message: String,
    },
}

/// A `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn client(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Error::Client {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn upstream(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Error::Upstream {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn unavailable() -> Self {
        Error::Internal {
            code: "unavailable",
            message: "proxy unavailable".into(),
        }
    }

    /// The HTTP status this error maps to (500 for errors that are not request-level).
    pub fn status(&self) -> u16 {
        match self {
            Error::Client { status, .. } | Error::Upstream { status, .. } => *status,
            Error::Internal { .. } => 503,
            _ => 500,
        }
    }

    /// The stable error code of the JSON body (`internal` for errors that are not request-level).
    pub fn code(&self) -> &'static str {
        match self {
            Error::Client { code, .. } | Error::Upstream { code, .. } | Error::Internal { code, .. } => code,
            _ => "internal",
        }
    }
}
