//! The settings of the docker driver, read once by the composition root.

use crate::buildkit::BuilderSetting;
use crate::endpoint::{EndpointSettings, Family};
use std::path::PathBuf;
use std::time::Duration;

/// Settings of the docker driver, read once by the composition root (the driver never reads `std::env`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DockerSettings {
    /// Endpoint discovery inputs.
    pub endpoints: EndpointSettings,
    /// Which candidate list to use (`docker` or `podman`).
    pub family: Family,
    /// Ping bound (5 s; the doctor passes its own).
    pub ping_timeout: Duration,
    /// The relay binary (installed embedded relay, or `ITERION_RELAY_BIN`).
    pub relay_binary: Option<PathBuf>,
    /// Version written to `iterion.io/iterion-version`.
    pub iterion_version: String,
    /// This host's name (owner liveness).
    pub this_host: String,
    /// This process's uid (`/tmp/iterion-<uid>` fallback of the socket directory).
    pub uid: u32,
    /// iterion itself runs on Linux.
    pub host_linux: bool,
    /// The Docker `config.json` holding registry credentials (`$DOCKER_CONFIG/config.json`, else
    /// `$HOME/.docker/config.json`), resolved by the caller.
    pub docker_config: Option<PathBuf>,
    /// The `PATH` credential helpers (`docker-credential-<name>`) are looked up in, from the caller's
    /// environment.
    pub helper_path: Option<String>,
    /// `ITERION_SANDBOX_BUILDER`: `auto`, `buildkit` or `classic`.
    pub builder: BuilderSetting,
    /// Where the start checks' results are kept per image (see [`crate::probecache`]); `None`: every start
    /// runs them.
    pub probe_cache: Option<PathBuf>,
}

impl DockerSettings {
    /// Settings for `family` with the given endpoint inputs; relay unset, 5 s ping.
    pub fn new(endpoints: EndpointSettings, family: Family, this_host: impl Into<String>, uid: u32) -> Self {
        Self {
            endpoints,
            family,
            ping_timeout: Duration::from_secs(5),
            relay_binary: None,
            iterion_version: env!("CARGO_PKG_VERSION").to_string(),
            this_host: this_host.into(),
            uid,
            host_linux: cfg!(target_os = "linux"),
            docker_config: None,
            helper_path: None,
            builder: BuilderSetting::Auto,
            probe_cache: None,
        }
    }

    /// Sets the relay binary.
    pub fn with_relay_binary(mut self, p: impl Into<PathBuf>) -> Self {
        self.relay_binary = Some(p.into());
        self
    }
}
