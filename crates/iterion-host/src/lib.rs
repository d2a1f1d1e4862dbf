//! The host layer: what iterion learns about the machine it runs on, from an environment map it is handed
//! (never from `std::env`).
//!
//! - [`select`]: driver selection over the environment — the host kind, forcing by `--sandbox-driver` or
//!   `ITERION_SANDBOX_DRIVER`, the concurrent engine pings — and the only place that constructs concrete
//!   drivers (`DockerDriver`, `NoopDriver`);
//! - [`relay_path`]: the egress relay the docker driver mounts (`ITERION_RELAY_BIN`, else the relay embedded by
//!   `iterion-driver-docker`, installed by content hash under the data dir);
//! - [`repo_root`]: the repository root of a work directory.
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

mod error;
mod relay;
mod repo;
mod selection;

pub use error::{Error, Result};
pub use relay::{relay_override, relay_path};
pub use repo::repo_root;
pub use selection::{
    DEFAULT_PING_TIMEOUT, ForceSource, HostKind, SelectOptions, Selection, Tried, forced_driver, host_driver,
    host_kind, kubernetes_unavailable, select,
};
