//! The crate's one error type and its mapping to the `error_code` of a claw `result`.

use iterion_envelope::error_code;
use std::time::Duration;

/// Everything that can fail in the claw loop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The provider answered HTTP 429 (after the retries were spent).
    #[error("provider '{provider}' rate limited the request (HTTP 429): {body}")]
    RateLimited {
        /// Provider name.
        provider: String,
        /// The provider's answer, shortened.
        body: String,
        /// The delay the provider asked for, if any.
        retry_after: Option<Duration>,
    },
    /// The conversation no longer fits the model's context window.
    #[error("provider '{provider}' reports the context length is exceeded: {body}")]
    ContextLengthExceeded {
        /// Provider name.
        provider: String,
        /// The provider's answer, shortened.
        body: String,
    },
    /// The provider could not be reached (connect, timeout, connection reset).
    #[error("connection to provider '{provider}' failed: {message}")]
    Network {
        /// Provider name.
        provider: String,
        /// What failed.
        message: String,
    },
    /// The provider answered with another non-success status.
    #[error("provider '{provider}' answered HTTP {status}: {body}")]
    Status {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's answer, shortened.
        body: String,
    },
    /// The provider's answer is not in the expected wire format.
    #[error("malformed answer from provider '{provider}': {message}")]
    Malformed {
        /// Provider name.
        provider: String,
        /// What is wrong with it.
        message: String,
    },
    /// No API key for the chosen provider in the given environment.
    #[error("no API key for provider '{provider}': set {variable}")]
    MissingKey {
        /// Provider name.
        provider: String,
        /// The variable that should hold it.
        variable: String,
    },
    /// The HTTP client could not be built (e.g. an invalid proxy URL).
    #[error("cannot build the HTTP client: {message}")]
    Client {
        /// What was rejected.
        message: String,
    },
    /// A builtin tool failed; the message goes back to the model as the tool's error.
    #[error("{tool}: {message}")]
    Tool {
        /// Tool name.
        tool: String,
        /// What failed.
        message: String,
    },
}

/// Result alias of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The `error_code` carried by the node's `result`.
    pub fn code(&self) -> &'static str {
        match self {
            Error::RateLimited { .. } => error_code::RATE_LIMITED,
            Error::ContextLengthExceeded { .. } => error_code::CONTEXT_LENGTH_EXCEEDED,
            Error::Network { .. } => error_code::NETWORK_TRANSIENT,
            _ => error_code::EXECUTION_FAILED,
        }
    }

    /// Whether the provider call may be retried (429 and 5xx).
    pub(crate) fn retryable(&self) -> bool {
        matches!(self, Error::RateLimited { .. })
            || matches!(self, Error::Status { status, .. } if *status >= 500)
    }

    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// At most this many bytes of a provider's error body are kept in messages.
pub(crate) const BODY_PREVIEW: usize = 2048;

pub(crate) fn preview(body: &str) -> String {
    if body.len() <= BODY_PREVIEW {
        return body.trim().to_string();
    }
    let mut end = BODY_PREVIEW;
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", body[..end].trim())
}
