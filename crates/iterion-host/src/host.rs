//! Everything the host layer learns in one call: facts, data dir, relay, driver selection.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use iterion_driver::Driver;

use crate::choice::DriverChoice;
use crate::claw_runner::{claw_runner_override, claw_runner_path};
use crate::error::Result;
use crate::facts::{HostFacts, cwd_of};
use crate::relay::{relay_override, relay_path};
use crate::selection::{DEFAULT_PING_TIMEOUT, SelectOptions, Selection, host_driver, select};

/// Inputs of [`Host::from_env`] besides the environment map.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HostOptions {
    /// The current directory (relative `ITERION_HOME`); default: `PWD` from the map when absolute, else `/`.
    pub cwd: Option<PathBuf>,
    /// `--sandbox-driver` (wins over `ITERION_SANDBOX_DRIVER`).
    pub forced_driver: Option<String>,
    /// `argv[0]` of the embedding program (desktop detection).
    pub argv0: Option<String>,
    /// Bound of each engine ping.
    pub ping_timeout: Duration,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl HostOptions {
    /// No forced driver, no `argv[0]`, the cwd from `PWD`, 5 s pings.
    pub fn new() -> Self {
        Self {
            cwd: None,
            forced_driver: None,
            argv0: None,
            ping_timeout: DEFAULT_PING_TIMEOUT,
        }
    }

    /// With the current directory.
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// With a forced driver name (`--sandbox-driver`).
    pub fn forced_driver(mut self, name: Option<String>) -> Self {
        self.forced_driver = name;
        self
    }

    /// With `argv[0]`.
    pub fn argv0(mut self, argv0: Option<String>) -> Self {
        self.argv0 = argv0;
        self
    }
}

/// What the host layer found: the facts, the selected drivers and the warnings met on the way.
#[derive(Debug, Clone)]
pub struct Host {
    /// Home, uid/gid, OS, data dir.
    pub facts: HostFacts,
    /// The full driver selection (for reports).
    pub selection: Selection,
    /// The selection as the runtime consumes it.
    pub choice: DriverChoice,
    /// The driver of host-placed nodes: a `NoopDriver` starting processes from the environment map.
    pub host_driver: Arc<dyn Driver>,
    /// The egress relay handed to the docker driver, when one could be installed.
    pub relay: Option<PathBuf>,
    /// The claw runner bound into containers for claw nodes, when one could be installed.
    pub claw_runner: Option<PathBuf>,
    /// Warnings, in order: an egress relay that could not be installed, an ignored `ITERION_MODE`.
    pub warnings: Vec<String>,
}

impl Host {
    /// Gathers the host facts, installs the egress relay (`ITERION_RELAY_BIN` wins) under the data dir and
    /// selects the drivers (pinging the engines). `Err` only for an invalid forced driver name.
    pub async fn from_env(env: &BTreeMap<String, String>, opts: &HostOptions) -> Result<Host> {
        let cwd = opts.cwd.clone().unwrap_or_else(|| cwd_of(env));
        let facts = HostFacts::of_process(env, &cwd);
        let mut warnings = Vec::new();
        let relay = match relay_path(&facts.data_dir, relay_override(env)) {
            Ok(p) => Some(p),
            Err(e) => {
                warnings.push(format!("egress relay unavailable: {e}"));
                None
            }
        };
        // Checking the installed claw runner reads and compares 8–14 MB: it runs on the blocking pool while
        // the engines answer the selection's pings instead of before them.
        let (data_dir, claw_override) = (facts.data_dir.clone(), claw_runner_override(env));
        let claw_install = tokio::task::spawn_blocking(move || claw_runner_path(&data_dir, claw_override));
        let mut sel_opts = SelectOptions::new(opts.forced_driver.clone());
        sel_opts.ping_timeout = opts.ping_timeout;
        sel_opts.relay_binary = relay.clone();
        sel_opts.probe_cache = Some(facts.data_dir.join(crate::START_CHECKS_CACHE));
        sel_opts.argv0 = opts.argv0.clone();
        let selection = select(env, &sel_opts).await;
        let claw_runner = match claw_install.await {
            Ok(Ok(p)) => Some(p),
            Ok(Err(e)) => {
                warnings.push(e.to_string());
                None
            }
            Err(e) => {
                warnings.push(format!(
                    "claw runner unavailable: the install did not finish: {e}"
                ));
                None
            }
        };
        let selection = selection?;
        warnings.extend(selection.warnings.iter().cloned());
        let base: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        Ok(Host {
            facts,
            choice: selection.driver_choice(),
            selection,
            host_driver: host_driver(base),
            relay,
            claw_runner,
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_facts_relay_and_selection() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = format!("unix://{}", dir.path().join("absent.sock").display());
        let data = dir.path().join("data");
        let env = BTreeMap::from([
            ("DOCKER_HOST".to_string(), sock.clone()),
            ("CONTAINER_HOST".to_string(), sock),
            ("ITERION_HOME".to_string(), data.display().to_string()),
            ("ITERION_MODE".to_string(), "edge".to_string()),
        ]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let host = rt
            .block_on(Host::from_env(&env, &HostOptions::new().cwd("/w")))
            .expect("host");
        assert_eq!(host.facts.data_dir, data);
        assert!(
            host.relay
                .as_ref()
                .is_some_and(|r| r.starts_with(data.join("bin")))
        );
        assert!(matches!(host.choice, DriverChoice::Unavailable { .. }));
        assert_eq!(
            host.warnings,
            ["ITERION_MODE 'edge' is not cloud or local; ignored"]
        );
        let err = rt
            .block_on(Host::from_env(
                &env,
                &HostOptions::new().forced_driver(Some("lxc".into())),
            ))
            .expect_err("invalid name");
        assert!(matches!(err, crate::Error::InvalidDriver { .. }), "{err}");
    }
}
