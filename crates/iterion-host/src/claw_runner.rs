//! Which claw runner binary is bound into containers for claw nodes.
//!
//! The runner must run in any image, including ones without a C library, so the default is the statically
//! linked `iterion-claw-runner` program this crate's build script compiles and embeds ([`EMBEDDED`]),
//! installed by content hash under the data dir. `ITERION_BIN` names an explicit binary instead (an iterion
//! build for the image's architecture).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The static runner built for this target by `build.rs` (empty when the target cannot build it).
pub const EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/iterion-claw-runner"));

/// The SHA-256 of [`EMBEDDED`], computed by `build.rs`: hashing the 8–14 MB runner at every process start
/// cost about 100–250 ms.
pub const EMBEDDED_SHA256: &str = include_str!(concat!(env!("OUT_DIR"), "/iterion-claw-runner.sha256"));

/// `ITERION_BIN` from the environment map, when set and not empty.
pub fn claw_runner_override(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    env.get("ITERION_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The runner to bind into containers: `override_bin` (`ITERION_BIN`) when given, else [`EMBEDDED`] installed
/// at `<data_dir>/bin/iterion-claw-runner-<12 hex of SHA-256>`. The runtime probes it inside the container
/// (`--version`) before any node runs.
pub fn claw_runner_path(data_dir: &Path, override_bin: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = override_bin {
        return Ok(p);
    }
    iterion_embed::install_with_digest(
        EMBEDDED,
        EMBEDDED_SHA256,
        &data_dir.join("bin"),
        "iterion-claw-runner",
    )
    .map_err(|e| Error::ClawRunner {
        reason: match e {
            iterion_embed::Error::Empty { .. } => {
                "this build of iterion embeds no claw runner (it was built for a non-Linux target)".into()
            }
            other => other.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_in_digest_is_the_embedded_runner_s() {
        assert_eq!(
            EMBEDDED_SHA256,
            iterion_embed::to_hex(&iterion_embed::sha256(EMBEDDED))
        );
    }

    #[test]
    fn embedded_runner_is_static_and_installs_unless_overridden() {
        let facts = iterion_embed::elf_facts(EMBEDDED).expect("an ELF runner is embedded");
        assert!(facts.is_static, "the runner must be statically linked");
        assert_eq!(
            Some(facts.machine),
            iterion_embed::machine_of(std::env::consts::ARCH)
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let p = claw_runner_path(dir.path(), None).expect("install");
        assert!(p.starts_with(dir.path().join("bin")));
        iterion_embed::check_static_executable(&p, std::env::consts::ARCH).expect("static executable");
        let out = std::process::Command::new(&p)
            .arg("--version")
            .output()
            .expect("run it");
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("iterion-claw-runner "));
        let explicit = dir.path().join("mine");
        assert_eq!(
            claw_runner_path(dir.path(), Some(explicit.clone())).expect("override"),
            explicit
        );
        let env = |v: &str| BTreeMap::from([("ITERION_BIN".to_string(), v.to_string())]);
        assert_eq!(claw_runner_override(&env("")), None);
        assert_eq!(
            claw_runner_override(&env("/x/iterion")),
            Some(PathBuf::from("/x/iterion"))
        );
    }
}
