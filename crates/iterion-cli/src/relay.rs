//! The embedded egress relay (03 §7.2): built by `build.rs` from `relay/main.rs`, statically linked, and
//! installed once to `<data dir>/bin/iterion-relay-<first 12 hex of its SHA-256>` for the docker driver.
//!
//! Wiring: the run command calls [`relay_path`] with the data directory and `ITERION_RELAY_BIN` (read once
//! from the environment) and hands the path to the docker driver's settings.
#![allow(dead_code)] // called by the run command once the runtime is wired in

use std::path::{Path, PathBuf};

/// The relay bytes built for this target (empty when the target cannot build it).
pub const RELAY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/iterion-relay"));

/// The relay to mount: `override_bin` (`ITERION_RELAY_BIN`) when given, else the embedded relay installed
/// under `data_dir`. The docker driver checks the file (static, right architecture) before using it.
pub fn relay_path(
    data_dir: &Path,
    override_bin: Option<PathBuf>,
) -> Result<PathBuf, iterion_driver_docker::Error> {
    match override_bin {
        Some(p) => Ok(p),
        None => iterion_driver_docker::relay::install(RELAY, data_dir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_relay_is_static_and_installs() {
        let facts = iterion_driver_docker::relay::elf_facts(RELAY).expect("an ELF relay is embedded");
        assert!(facts.is_static, "the relay must be statically linked");
        let dir = tempfile::tempdir().expect("tempdir");
        let p = relay_path(dir.path(), None).expect("install");
        assert!(p.starts_with(dir.path().join("bin")));
        let explicit = dir.path().join("mine");
        assert_eq!(
            relay_path(dir.path(), Some(explicit.clone())).expect("override"),
            explicit
        );
    }
}
