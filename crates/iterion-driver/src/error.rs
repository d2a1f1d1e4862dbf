//! The driver error type, its failure codes and classes (03 §3.6, 05 §3).

use std::fmt;
use std::time::Duration;

use crate::kind::DriverKind;

/// A setup phase bounded by its own timeout (05 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetupPhase {
    /// Image pull.
    Pull,
    /// Image build.
    Build,
    /// Network, container create and start.
    Start,
    /// Post-create commands, all together.
    PostCreate,
    /// Kubernetes pod readiness.
    PodReady,
    /// Workspace copy and git fixup (kubernetes).
    WorkspaceCopy,
    /// One probe.
    Probe,
}

impl SetupPhase {
    /// `pull`, `build`, `start`, `post_create`, `pod_ready`, `workspace_copy`, `probe`.
    pub fn as_str(self) -> &'static str {
        match self {
            SetupPhase::Pull => "pull",
            SetupPhase::Build => "build",
            SetupPhase::Start => "start",
            SetupPhase::PostCreate => "post_create",
            SetupPhase::PodReady => "pod_ready",
            SetupPhase::WorkspaceCopy => "workspace_copy",
            SetupPhase::Probe => "probe",
        }
    }

    /// The setting that extends this bound, when there is one.
    pub fn setting(self) -> Option<&'static str> {
        match self {
            SetupPhase::Pull => Some("ITERION_SANDBOX_PULL_TIMEOUT"),
            SetupPhase::Build => Some("ITERION_SANDBOX_BUILD_TIMEOUT"),
            SetupPhase::Start => Some("ITERION_SANDBOX_START_TIMEOUT"),
            SetupPhase::PostCreate => Some("ITERION_SANDBOX_POST_CREATE_TIMEOUT"),
            SetupPhase::PodReady => Some("ITERION_SANDBOX_K8S_POD_READY_TIMEOUT"),
            SetupPhase::WorkspaceCopy => Some("ITERION_SANDBOX_WORKSPACE_COPY_TIMEOUT"),
            SetupPhase::Probe => None,
        }
    }
}

impl fmt::Display for SetupPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Direction of a copy between host and sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyDirection {
    /// Host to sandbox.
    In,
    /// Sandbox to host.
    Out,
}

impl fmt::Display for CopyDirection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CopyDirection::In => "copy into the sandbox",
            CopyDirection::Out => "copy out of the sandbox",
        })
    }
}

/// Renders a duration like Go does (`10m0s`, `2s`, `1h30m0s`, `500ms`), the syntax users see in settings.
pub fn fmt_duration(d: Duration) -> String {
    let total = d.as_secs();
    if total == 0 {
        return format!("{}ms", d.subsec_millis());
    }
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

struct Hint<'a>(&'a Option<String>);

impl fmt::Display for Hint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(h) if !h.is_empty() => write!(f, " ({h})"),
            _ => Ok(()),
        }
    }
}

struct Timeout<'a>(&'a SetupPhase, &'a Duration, &'a Option<String>);

impl fmt::Display for Timeout<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Timeout(phase, after, subject) = *self;
        match (phase, subject) {
            (SetupPhase::Pull, Some(s)) => write!(f, "pull of '{s}' timed out")?,
            (SetupPhase::Build, Some(s)) => write!(f, "build of '{s}' timed out")?,
            (p, _) => write!(f, "sandbox setup phase {p} timed out")?,
        }
        write!(f, " after {}", fmt_duration(*after))?;
        if let Some(var) = phase.setting() {
            write!(f, " (set {var} to extend)")?;
        }
        Ok(())
    }
}

struct Gone<'a>(&'a Option<i64>, &'a Option<bool>);

impl fmt::Display for Gone<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the sandbox is gone")?;
        match (self.0, self.1) {
            (_, Some(true)) => f.write_str(" (killed by the out-of-memory killer)"),
            (Some(c), _) => write!(f, " (its main process exited {c})"),
            _ => Ok(()),
        }
    }
}

/// Errors of every driver. Each variant maps to one failure code (05 §3) and class.
///
/// `Display` is a complete, actionable sentence; it never contains environment values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The driver cannot be used on this host.
    #[error("the {driver} sandbox driver is unavailable: {reason}")]
    Unavailable {
        /// Driver name (`docker`, `podman`, `kubernetes`, `noop`).
        driver: String,
        /// Why.
        reason: String,
    },
    /// A field of the resolved spec is invalid.
    #[error("invalid sandbox spec: {field}: {reason}")]
    InvalidSpec {
        /// The field, e.g. `user`, `env.NAME`, `build.context`.
        field: String,
        /// Why.
        reason: String,
    },
    /// A mount is refused by the mount-safety rules (03 §10).
    #[error("mount '{mount}' is refused: {reason}")]
    UnsafeMount {
        /// The original mount text.
        mount: String,
        /// Why (`source /x is a sensitive path (engine socket)`).
        reason: String,
    },
    /// The driver does not implement a feature the spec needs.
    #[error("the {driver} driver does not support {feature}")]
    Unsupported {
        /// The driver.
        driver: DriverKind,
        /// The feature (`build`, `network`, `host binds`, …).
        feature: String,
    },
    /// The engine offers no OCI runtime under the name the sandbox asks for (`sandbox.runtime`).
    #[error("the {driver} engine has no OCI runtime for '{runtime}' (it offers: {offered}); {hint}")]
    RuntimeUnavailable {
        /// The driver.
        driver: DriverKind,
        /// The runtime asked for (`gvisor`, `kata` or a name).
        runtime: String,
        /// The runtimes the engine lists, comma-separated (`none listed` when it lists none).
        offered: String,
        /// How to make it available.
        hint: String,
    },
    /// The image has no `/bin/sh`.
    #[error("image '{image}' has no /bin/sh; iterion sandboxes need a POSIX shell in the image")]
    ShellMissing {
        /// The image reference.
        image: String,
    },
    /// Enforced egress was required but the engine can only offer advisory egress.
    #[error("enforced egress is not available on {engine}: {reason} ({hint})")]
    NetworkUnavailable {
        /// Engine description (`Docker Desktop 4.30`).
        engine: String,
        /// Why.
        reason: String,
        /// What the user can do.
        hint: String,
    },
    /// The image reference does not exist.
    #[error("image '{image}' was not found in its registry")]
    ImageNotFound {
        /// The image reference.
        image: String,
    },
    /// The registry refused access to the image.
    #[error("access to image '{image}' was denied by {registry}; log in to the registry or check the name")]
    ImageAuth {
        /// The image reference.
        image: String,
        /// The registry host.
        registry: String,
    },
    /// Pull policy `never` and the image is not present locally.
    #[error("image '{image}' is not present locally and the pull policy is never")]
    ImageAbsent {
        /// The image reference.
        image: String,
    },
    /// The image build failed.
    #[error("build of {dockerfile} failed: {tail}")]
    BuildFailed {
        /// The Dockerfile path.
        dockerfile: String,
        /// The last 4 KiB of the build output.
        tail: String,
    },
    /// The build was refused before it started: a Dockerfile line would make the engine fetch from the network
    /// (a remote `ADD`, a base image to pull) while the build has none.
    #[error("build of {dockerfile} refused before it started: {dockerfile}:{line}: {reason}")]
    BuildRefused {
        /// The Dockerfile path.
        dockerfile: String,
        /// 1-based line of the instruction.
        line: usize,
        /// Why, and what to do.
        reason: String,
    },
    /// A post-create command exited non-zero.
    #[error("post_create command {index} exited {code}")]
    PostCreateFailed {
        /// 1-based index of the command.
        index: usize,
        /// Its exit code.
        code: i32,
        /// Last 4 KiB of its stdout.
        stdout_tail: String,
        /// Last 4 KiB of its stderr.
        stderr_tail: String,
    },
    /// A setup phase exceeded its bound.
    #[error("{}", Timeout(phase, after, subject))]
    SetupTimeout {
        /// The phase.
        phase: SetupPhase,
        /// The bound that expired.
        after: Duration,
        /// What was being set up, when known (the image reference of a pull).
        subject: Option<String>,
    },
    /// An image pull failed for a transient reason (network, registry 5xx).
    #[error("pull of '{image}' failed: {reason}")]
    ImagePull {
        /// The image reference.
        image: String,
        /// The engine's message.
        reason: String,
    },
    /// Creating or starting the sandbox failed.
    #[error("the sandbox could not be started: {reason}{}", Hint(hint))]
    StartFailed {
        /// Why.
        reason: String,
        /// What the user can do, when known.
        hint: Option<String>,
    },
    /// A sandbox of the same run is owned by another live iterion process.
    #[error("the sandbox of run {run_id} is in use by process {owner_pid} on {owner_host}")]
    SandboxInUse {
        /// The run id.
        run_id: String,
        /// Host name of the owner.
        owner_host: String,
        /// Pid of the owner.
        owner_pid: u32,
    },
    /// Copying into or out of the sandbox failed.
    #[error("{direction} failed: {reason}")]
    Copy {
        /// Which way.
        direction: CopyDirection,
        /// Why.
        reason: String,
    },
    /// The engine answered with an error.
    #[error("the container engine failed{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Engine {
        /// HTTP status, when any.
        status: Option<u16>,
        /// The engine's message field.
        message: String,
    },
    /// The sandbox no longer exists (removed, stopped, killed, or cleaned up).
    #[error("{}", Gone(exit_code, oom_killed))]
    SandboxGone {
        /// Exit code of the sandbox's main process, when known.
        exit_code: Option<i64>,
        /// Whether the out-of-memory killer ended it, when known.
        oom_killed: Option<bool>,
    },
    /// The exec could not be started.
    #[error("the command could not be started in the sandbox: {reason}")]
    ExecStart {
        /// Why.
        reason: String,
    },
    /// The kill sequence did not end the process.
    #[error("exec {exec_id} survived SIGTERM and SIGKILL")]
    ExecKillFailed {
        /// The exec id.
        exec_id: String,
    },
    /// A `Prepared` or `NetworkLease` of another driver was passed in (a bug in the caller).
    #[error("internal error: a {got} value was passed to the {expected} driver")]
    ForeignPrepared {
        /// This driver.
        expected: DriverKind,
        /// The driver that produced the value.
        got: DriverKind,
    },
    /// The operation was cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// The result type of driver operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The run-level failure codes driver errors map to (a subset of 05 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureCode {
    /// `SANDBOX_DRIVER_UNAVAILABLE`.
    DriverUnavailable,
    /// `SANDBOX_SPEC_INVALID`.
    SpecInvalid,
    /// `SANDBOX_NETWORK_UNAVAILABLE`.
    NetworkUnavailable,
    /// `SANDBOX_IMAGE_UNAVAILABLE`.
    ImageUnavailable,
    /// `SANDBOX_BUILD_FAILED`.
    BuildFailed,
    /// `SANDBOX_POST_CREATE_FAILED`.
    PostCreateFailed,
    /// `SANDBOX_SETUP_TIMEOUT`.
    SetupTimeout,
    /// `SANDBOX_START_FAILED`.
    StartFailed,
    /// `SANDBOX_LOST`.
    Lost,
    /// `INTERNAL_ERROR`.
    Internal,
}

impl FailureCode {
    /// The persisted spelling, e.g. `SANDBOX_SETUP_TIMEOUT`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::DriverUnavailable => "SANDBOX_DRIVER_UNAVAILABLE",
            FailureCode::SpecInvalid => "SANDBOX_SPEC_INVALID",
            FailureCode::NetworkUnavailable => "SANDBOX_NETWORK_UNAVAILABLE",
            FailureCode::ImageUnavailable => "SANDBOX_IMAGE_UNAVAILABLE",
            FailureCode::BuildFailed => "SANDBOX_BUILD_FAILED",
            FailureCode::PostCreateFailed => "SANDBOX_POST_CREATE_FAILED",
            FailureCode::SetupTimeout => "SANDBOX_SETUP_TIMEOUT",
            FailureCode::StartFailed => "SANDBOX_START_FAILED",
            FailureCode::Lost => "SANDBOX_LOST",
            FailureCode::Internal => "INTERNAL_ERROR",
        }
    }

    /// Deterministic codes make the run `failed`; the others `failed_resumable`.
    pub fn is_deterministic(self) -> bool {
        matches!(
            self,
            FailureCode::DriverUnavailable
                | FailureCode::SpecInvalid
                | FailureCode::NetworkUnavailable
                | FailureCode::ImageUnavailable
                | FailureCode::BuildFailed
                | FailureCode::PostCreateFailed
        )
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Error {
    /// The run-level failure code; `during_setup` resolves the phase-dependent rows (`Copy`, `Engine`).
    /// `None` for [`Error::Cancelled`]: the run follows its cancellation path.
    pub fn failure_code(&self, during_setup: bool) -> Option<FailureCode> {
        use FailureCode as F;
        Some(match self {
            Error::Unavailable { .. } => F::DriverUnavailable,
            Error::InvalidSpec { .. }
            | Error::UnsafeMount { .. }
            | Error::Unsupported { .. }
            | Error::ShellMissing { .. } => F::SpecInvalid,
            Error::RuntimeUnavailable { .. } => F::DriverUnavailable,
            Error::NetworkUnavailable { .. } => F::NetworkUnavailable,
            Error::ImageNotFound { .. } | Error::ImageAuth { .. } | Error::ImageAbsent { .. } => {
                F::ImageUnavailable
            }
            Error::BuildFailed { .. } | Error::BuildRefused { .. } => F::BuildFailed,
            Error::PostCreateFailed { .. } => F::PostCreateFailed,
            Error::SetupTimeout { .. } => F::SetupTimeout,
            Error::ImagePull { .. } | Error::StartFailed { .. } | Error::SandboxInUse { .. } => {
                F::StartFailed
            }
            Error::Copy { .. } | Error::Engine { .. } => {
                if during_setup {
                    F::StartFailed
                } else {
                    F::Lost
                }
            }
            Error::SandboxGone { .. } | Error::ExecStart { .. } | Error::ExecKillFailed { .. } => F::Lost,
            Error::ForeignPrepared { .. } => F::Internal,
            Error::Cancelled => return None,
        })
    }

    /// Whether retrying the same input fails again (class D). `false` for resumable errors and `Cancelled`.
    pub fn is_deterministic(&self) -> bool {
        self.failure_code(true).is_some_and(FailureCode::is_deterministic)
    }

    /// Whether this error says the sandbox is gone.
    pub fn is_sandbox_gone(&self) -> bool {
        matches!(self, Error::SandboxGone { .. })
    }

    /// A `SandboxGone` without details.
    pub fn gone() -> Self {
        Error::SandboxGone {
            exit_code: None,
            oom_killed: None,
        }
    }
}

/// The way out of an image that is absent on the engine and cannot be pulled (its registry unreachable, or the
/// pull failed), the same for `iterion run` and the doctor.
pub fn image_pull_hint(image: &str) -> String {
    format!(
        "make {image} present on this engine first (pull it where its registry answers and `docker save | docker \
         load` it here, or build it), or name an image the engine has (`docker images`)"
    )
}
