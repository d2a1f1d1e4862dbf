//! The host layer: what iterion learns about the machine it runs on, from an environment map it is handed
//! (never from `std::env`).
//!
//! - [`Host::from_env`]: all of the below in one call, the way `iterion run` and `Runtime::from_env` use it;
//! - [`HostFacts`] and [`data_dir`]: home, uid/gid, OS and iterion's data dir (the one place it is worked out);
//! - [`select`]: driver selection over the environment — the host kind, forcing by `--sandbox-driver` or
//!   `ITERION_SANDBOX_DRIVER`, the concurrent engine pings — and the only place that constructs concrete
//!   drivers (`DockerDriver`, `NoopDriver`);
//! - [`relay_path`]: the egress relay the docker driver mounts (`ITERION_RELAY_BIN`, else the relay embedded by
//!   `iterion-driver-docker`, installed by content hash under the data dir);
//! - [`claw_runner_path`]: the claw runner bound into containers for claw nodes (`ITERION_BIN`, else the
//!   static runner this crate's build script compiles from `crates/iterion-claw-runner`, installed by content
//!   hash under the data dir);
//! - [`repo_root`]: the repository root of a work directory;
//! - [`DriverChoice`]: the selection as the runtime consumes it ([`Selection::driver_choice`]).
//!
//! ```no_run
//! # async fn demo(env: std::collections::BTreeMap<String, String>) -> Result<(), Box<dyn std::error::Error>> {
//! let mut opts = iterion_host::SelectOptions::new(None);
//! opts.relay_binary = iterion_host::relay_path(std::path::Path::new("/tmp/iterion"), None).ok();
//! let selection = iterion_host::select(&env, &opts).await?;
//! let driver = selection.require()?; // SANDBOX_DRIVER_UNAVAILABLE when forced and down
//! println!("{} ({})", selection.kind, selection.reason);
//! # let _ = driver; Ok(()) }
//! ```
#![deny(missing_docs)]

mod choice;
mod claw_runner;
mod error;
mod facts;
mod force;
mod host;
mod relay;
mod repo;
mod selection;

pub use choice::DriverChoice;
pub use claw_runner::{EMBEDDED as EMBEDDED_CLAW_RUNNER, claw_runner_override, claw_runner_path};
pub use error::{Error, Result};
pub use facts::{HostFacts, absolutize, cwd_of, data_dir};
pub use host::{Host, HostOptions};
pub use relay::{relay_override, relay_path};
pub use repo::repo_root;
pub use selection::{
    DEFAULT_PING_TIMEOUT, ForceSource, HostKind, OFF_CLUSTER_RUN, SelectOptions, Selection, Tried,
    forced_driver, host_driver, host_kind, k8s_settings, select,
};

/// Where, under the data dir, the docker driver keeps what the checks after a container start found out per
/// image (a shell runs; whether `bash` is there), so that a later start of the same image skips the check's
/// exec. Deleting it is always safe: the next start of each image checks again.
pub const START_CHECKS_CACHE: &str = "cache/start-checks";
