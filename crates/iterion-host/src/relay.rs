//! Which egress relay binary the docker driver mounts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::Result;

/// `ITERION_RELAY_BIN` from the environment map, when set and not empty.
pub fn relay_override(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    env.get("ITERION_RELAY_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The relay to mount: `override_bin` (`ITERION_RELAY_BIN`) when given, else the relay embedded by
/// `iterion-driver-docker` installed under `data_dir`. The docker driver checks the file (static, right
/// architecture) before using it.
pub fn relay_path(data_dir: &Path, override_bin: Option<PathBuf>) -> Result<PathBuf> {
    match override_bin {
        Some(p) => Ok(p),
        None => Ok(iterion_driver_docker::relay::install_embedded(data_dir)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_relay_installs_unless_overridden() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = relay_path(dir.path(), None).expect("install");
        assert!(p.starts_with(dir.path().join("bin")));
        let explicit = dir.path().join("mine");
        assert_eq!(
            relay_path(dir.path(), Some(explicit.clone())).expect("override"),
            explicit
        );
        let env = |v: &str| BTreeMap::from([("ITERION_RELAY_BIN".to_string(), v.to_string())]);
        assert_eq!(relay_override(&env("")), None);
        assert_eq!(relay_override(&env("/x/relay")), Some(PathBuf::from("/x/relay")));
        assert_eq!(relay_override(&BTreeMap::new()), None);
    }
}
