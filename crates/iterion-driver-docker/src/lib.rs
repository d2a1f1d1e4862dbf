//! `iterion-driver-docker`: the Docker / Podman driver over the engine API.
//!
//! Layer L2: the only crate of the workspace that names `bollard`; no bollard type leaves it.
//!
//! ```no_run
//! # async fn demo() -> iterion_driver_docker::Result<()> {
//! use iterion_driver_docker::endpoint::{EndpointSettings, Family};
//! use iterion_driver_docker::engine::Engine;
//! let settings = EndpointSettings::new(None, None, None, None);
//! let engine = Engine::discover(&settings, Family::Docker, std::time::Duration::from_secs(5)).await?;
//! println!("{} {}", engine.facts().driver_name(), engine.facts().api_version);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod dexec;
mod driver;
pub mod endpoint;
pub mod engine;
mod error;
pub mod image;
pub mod imagebuild;
pub mod mounts;
pub mod names;
pub mod relay;
mod run;

pub use driver::{
    DockerDriver, DockerSettings, RELAY_BIN_TARGET, RELAY_LISTEN, RELAY_SOCK_TARGET, socket_dir,
};
pub use error::{Error, Result};
pub use run::DockerRun;
