//! The crate's error type. Engine (bollard) errors are translated here and never leave the crate.

use std::time::Duration;

/// Errors of the docker driver's own operations (engine connection, images, builds, relay checks).
///
/// Converted into `iterion_driver::Error` at the `Driver` boundary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No usable engine: the reason is a complete sentence (missing socket, permission, old API, remote).
    #[error("the {driver} driver is unavailable: {reason}")]
    Unavailable {
        /// `docker` or `podman`.
        driver: &'static str,
        /// Why.
        reason: String,
    },
    /// The engine answered a request with an error status.
    #[error("the container engine answered {status}: {message}")]
    Engine {
        /// HTTP status (0 when the connection failed before a status).
        status: u16,
        /// The engine's message field.
        message: String,
    },
    /// The image does not exist in its registry.
    #[error("image '{image}' was not found in its registry")]
    ImageNotFound {
        /// The reference.
        image: String,
    },
    /// The registry refused the credentials (or anonymous access).
    #[error("access to image '{image}' was denied by {registry} (log in to the registry)")]
    ImageAuth {
        /// The reference.
        image: String,
        /// The registry host.
        registry: String,
    },
    /// Pull policy `never` and the image is not present.
    #[error("image '{image}' is not present and the pull policy is never")]
    ImageAbsent {
        /// The reference.
        image: String,
    },
    /// The pull failed for another reason (network, registry 5xx).
    #[error("pull of '{image}' failed: {reason}")]
    ImagePull {
        /// The reference.
        image: String,
        /// The engine's message.
        reason: String,
    },
    /// A setup phase exceeded its bound.
    #[error("{phase} timed out after {after:?}{}", hint_for(phase))]
    SetupTimeout {
        /// `pull`, `build`, `start`, `post_create`.
        phase: &'static str,
        /// The bound.
        after: Duration,
    },
    /// The build failed; `tail` holds the last 4 KiB of its output.
    #[error("build of {dockerfile} failed: {message}\n{tail}")]
    BuildFailed {
        /// Dockerfile path.
        dockerfile: String,
        /// The engine's error.
        message: String,
        /// Last output bytes.
        tail: String,
    },
    /// The build was refused before it started: a Dockerfile line would make the engine fetch from the network
    /// while the build has none.
    #[error("build of {dockerfile} refused before it started: {dockerfile}:{line}: {reason}")]
    BuildRefused {
        /// Dockerfile path.
        dockerfile: String,
        /// 1-based line of the instruction.
        line: usize,
        /// Why, and what to do.
        reason: String,
    },
    /// A spec field is invalid.
    #[error("invalid sandbox spec field {field}: {reason}")]
    InvalidSpec {
        /// Field name.
        field: String,
        /// Why.
        reason: String,
    },
    /// The image is for another operating system.
    #[error("the {driver} driver does not support {feature}")]
    Unsupported {
        /// `docker` or `podman`.
        driver: &'static str,
        /// What.
        feature: String,
    },
    /// The sandbox could not be started.
    #[error("the sandbox could not be started: {reason}{}", hint.as_deref().map(|h| format!(" ({h})")).unwrap_or_default())]
    StartFailed {
        /// Why.
        reason: String,
        /// What to do.
        hint: Option<String>,
    },
    /// Enforced egress is required but the engine can only offer the advisory placement.
    #[error("enforced egress is not available on {engine}: {reason} ({hint})")]
    NetworkUnavailable {
        /// Engine description.
        engine: String,
        /// Why.
        reason: String,
        /// What to do.
        hint: String,
    },
    /// A git pointer of the workspace (`.git` file, `commondir`, a protected path's symlink) names a host path
    /// that is not verifiably the repository's own: nothing of it is mounted.
    #[error("the workspace git directory is refused: {refusal} ({})", refusal.remedy)]
    UnsafeGit {
        /// The pointer and why.
        refusal: GitRefusal,
    },
    /// A local file operation failed (run directory, socket directory, build context).
    #[error("{what} {path}")]
    Io {
        /// What was attempted.
        what: &'static str,
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl From<GitRefusal> for Error {
    fn from(refusal: GitRefusal) -> Self {
        Error::UnsafeGit { refusal }
    }
}

fn hint_for(phase: &str) -> &'static str {
    match phase {
        "pull" => " (set ITERION_SANDBOX_PULL_TIMEOUT to extend)",
        "build" => " (set ITERION_SANDBOX_BUILD_TIMEOUT to extend)",
        "start" => " (set ITERION_SANDBOX_START_TIMEOUT to extend)",
        "post_create" => " (set ITERION_SANDBOX_POST_CREATE_TIMEOUT to extend)",
        _ => "",
    }
}

pub use iterion_boundary::git::GitRefusal;

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// HTTP status of an engine error, when it has one.
pub(crate) fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// Translates a bollard error into [`Error::Engine`].
pub(crate) fn engine(e: bollard::errors::Error) -> Error {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, message } => Error::Engine {
            status: status_code,
            message,
        },
        other => Error::Engine {
            status: 0,
            message: other.to_string(),
        },
    }
}
