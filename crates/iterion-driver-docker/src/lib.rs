//! `iterion-driver-docker`: the Docker / Podman driver over the engine API.
//!
//! Layer L2: the only crate of the workspace that names `bollard`; no bollard type leaves it. No container
//! CLI is ever spawned; environment values travel only in request bodies (02 §7).
//!
//! Entry points:
//! - [`DockerDriver`] (`iterion_driver::Driver`) built from [`DockerSettings`], which the composition root
//!   fills once (endpoint inputs, relay binary, host name, uid); its `Run` is [`DockerRun`].
//! - [`endpoint`]: the candidate sockets of 03 §4.1; [`engine`]: ping, API negotiation, identity (§4.2–4.3);
//!   [`engine_http`]: the one raw HTTP/1.1 client of the engine socket (async and blocking), bollard-free.
//! - [`image`]: presence, pull with a bound and error classification (§5.2, §16.9); [`imagebuild`]: builds
//!   with a deterministic, streamed context (§6), without network under a filtering policy, after
//!   [`dockerfile`] has refused whatever the engine would fetch itself; [`buildcache`]: built images tagged by
//!   a content hash of their inputs and reused.
//! - [`mounts`]: host state, warm caches, protected paths, UID remap, HOME tmpfs layering (§8.3–8.6).
//! - [`relay`]: installing and checking the static egress relay (§7.2); [`names`]: run tags (§16.3).
//!
//! - [`buildkit`]: the builder choice, BuildKit builds through the engine API and the build session serving
//!   build secrets and registry credentials; [`auth`]: registry credentials and credential helpers.
//!
//! Module order (each imports only modules before it): `error`, `names`, `endpoint`, [`engine_http`], `auth`,
//! `dockerfile` → `buildkit` → `mounts`, `relay` → `engine` → `image` → `imagebuild` → `buildcache` →
//! `probecache` → `container` (the state a run shares with its execs) → `dexec` → `run` → `driver`
//! (`settings` → `plan` → `create` → `start`; `network`).
//!
//! ```no_run
//! # async fn demo() -> iterion_driver_docker::Result<()> {
//! use iterion_driver_docker::endpoint::{EndpointSettings, Family};
//! use iterion_driver_docker::{DockerDriver, DockerSettings};
//! let endpoints = EndpointSettings::new(None, None, None, None);
//! let settings = DockerSettings::new(endpoints, Family::Docker, "my-host", 1000);
//! let driver = DockerDriver::connect(settings).await?;
//! if let Some(f) = driver.facts() {
//!     println!("{} {} (API {})", f.driver_name(), f.version, f.api_version);
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod auth;
pub mod buildcache;
pub mod buildkit;
mod container;
mod dexec;
pub mod dockerfile;
mod driver;
pub mod endpoint;
pub mod engine;
pub mod engine_http;
mod error;
pub mod image;
pub mod imagebuild;
pub mod mounts;
pub mod names;
mod probecache;
pub mod relay;
mod run;

pub use driver::{
    DockerDriver, DockerSettings, RELAY_BIN_TARGET, RELAY_LISTEN, RELAY_SOCK_TARGET, socket_dir,
};
pub use error::{Error, Result};
pub use run::DockerRun;
