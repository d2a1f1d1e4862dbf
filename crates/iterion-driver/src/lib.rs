//! `iterion-driver`: the object-safe `Driver` and `Run` traits, exec types, typed errors and `NoopDriver`.
//!
//! Layer L1: depends on no container library. Every driver (docker, podman, kubernetes, noop) implements
//! [`Driver`] and [`Run`]; the runtime holds them as `Arc<dyn Driver>`.
//!
//! - [`Driver`], [`Run`], [`Started`]: the traits (03 §3.1, §3.3).
//! - [`ExecRequest`], [`Exec`], [`ExecKiller`], [`ExitStatus`], [`exec_collect`]: the exec API (§3.4, §3.5).
//!   A driver implements [`KillExec`] and builds an [`Exec`] from [`ExecParts`]; cancellation, the kill
//!   sequence and kill-on-drop are shared.
//! - [`Error`] with [`Error::failure_code`] and [`Error::is_deterministic`] (§3.6).
//! - [`labels`] and [`owner`]: labels of managed resources and owner liveness (§8.1).
//! - [`NoopDriver`]: host execution in its own process group, no isolation (§3.10).
//! - [`run_post_create`] (§3.9) and [`safe_untar`] (§8.10), shared by every driver; [`copyback`], the copy back
//!   of a workspace that lived in a pod.
//! - [`mount_safety`] (§10), [`spec_safety`] (§11), [`selection`] (§2), [`home`] (§8.5) and [`timeouts`]
//!   (§13): pure rules over injected facts.
//!
//! Module order (each imports only modules before it): `kind` → `error` → `labels` → `types` → `timeouts`,
//! `home`, `hardening`, `spec_safety`, `mount_safety`, `untar`, `copyback`, `owner`, `selection` → `exec` → `driver` →
//! `collect`, `post_create` → `noop`.
//!
//! ```
//! use iterion_driver::{Error, FailureCode, SetupPhase};
//! use std::time::Duration;
//!
//! let e = Error::SetupTimeout { phase: SetupPhase::Pull, after: Duration::from_secs(600), subject: Some("alpine:3".into()) };
//! assert_eq!(e.to_string(), "pull of 'alpine:3' timed out after 10m0s (set ITERION_SANDBOX_PULL_TIMEOUT to extend)");
//! assert_eq!(e.failure_code(true), Some(FailureCode::SetupTimeout));
//! assert!(!e.is_deterministic());
//! ```
#![deny(missing_docs)]

mod collect;
pub mod copyback;
mod driver;
mod error;
mod exec;
pub mod hardening;
pub mod home;
mod kind;
pub mod labels;
pub mod mount_safety;
mod noop;
pub mod owner;
mod post_create;
pub mod selection;
pub mod spec_safety;
pub mod timeouts;
mod types;
mod untar;

pub use collect::{Collected, OutputLimits, exec_collect};
pub use driver::{Driver, Run, Started};
pub use error::{CopyDirection, Error, FailureCode, Result, SetupPhase, fmt_duration, image_pull_hint};
pub use exec::{
    DEFAULT_CAPTURE, DEFAULT_KILL_GRACE, Exec, ExecId, ExecKiller, ExecOutput, ExecParts, ExecRequest,
    ExecStdin, ExitStatus, KILL_CONFIRM, KILL_LEFTOVERS_SCRIPT, KillExec, Output, SIGKILL, SIGTERM, Stdin,
};
pub use noop::{NoopDriver, NoopRun};
pub use post_create::{LOG_PREFIX, TAIL_BYTES, run_post_create, run_post_create_with_env};
pub use types::*;
pub use untar::{DEFAULT_UNTAR_CAP, UntarReport, safe_untar, safe_untar_sync};
