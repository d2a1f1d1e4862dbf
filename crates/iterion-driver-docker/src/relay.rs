//! The egress relay binary: the static `iterion-relay` program this crate's build script compiles and
//! embeds ([`EMBEDDED`]), its installation by content hash, and the check that a relay file is a statically
//! linked executable for the engine's architecture.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

pub use iterion_embed::{ElfFacts, elf_facts, machine_of, short_hash};

/// The relay bytes built for this target by `build.rs` from `crates/iterion-relay` (empty when the target
/// cannot build it).
pub const EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/iterion-relay"));

/// The SHA-256 of [`EMBEDDED`] (64 hex characters), computed by `build.rs`: installing the embedded relay
/// does not hash it at every process start.
pub const EMBEDDED_SHA256: &str = include_str!(concat!(env!("OUT_DIR"), "/iterion-relay.sha256"));

/// Checks that `path` is a regular, executable, statically linked ELF file for `arch`; otherwise
/// `StartFailed` (`the egress relay <path> is not a static <arch> executable`), never a silent downgrade.
pub fn check_relay_binary(path: &Path, arch: &str) -> Result<()> {
    iterion_embed::check_static_executable(path, arch).map_err(|e| {
        let why = match e {
            iterion_embed::Error::NotStaticExecutable { why, .. } => why,
            other => other.to_string(),
        };
        Error::StartFailed {
            reason: format!(
                "the egress relay {} is not a static {arch} executable ({why})",
                path.display()
            ),
            hint: Some("rebuild iterion, or point ITERION_RELAY_BIN at a statically linked relay".into()),
        }
    })
}

/// Writes the relay `bytes` once to `<data_dir>/bin/iterion-relay-<first 12 hex of SHA-256>` (see
/// [`iterion_embed::install`]) and returns the path.
pub fn install(bytes: &[u8], data_dir: &Path) -> Result<PathBuf> {
    installed(iterion_embed::install(
        bytes,
        &data_dir.join("bin"),
        "iterion-relay",
    ))
}

fn installed(r: iterion_embed::Result<PathBuf>) -> Result<PathBuf> {
    r.map_err(|e| match e {
        iterion_embed::Error::Empty { .. } => Error::StartFailed {
            reason: "this build of iterion embeds no egress relay (it was built for a non-Linux target)"
                .into(),
            hint: Some("set ITERION_RELAY_BIN to a statically linked relay".into()),
        },
        iterion_embed::Error::Io { what, path, source } => Error::Io {
            what,
            path: path.display().to_string(),
            source,
        },
        iterion_embed::Error::Mismatch { path } => Error::StartFailed {
            reason: format!(
                "the installed egress relay {} does not match the embedded one",
                path.display()
            ),
            hint: None,
        },
        other => Error::StartFailed {
            reason: format!("cannot install the egress relay: {other}"),
            hint: None,
        },
    })
}

/// Installs [`EMBEDDED`] under `data_dir` (see [`install`]).
pub fn install_embedded(data_dir: &Path) -> Result<PathBuf> {
    installed(iterion_embed::install_with_digest(
        EMBEDDED,
        EMBEDDED_SHA256,
        &data_dir.join("bin"),
        "iterion-relay",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn the_compiled_in_digest_is_the_embedded_relay_s() {
        assert_eq!(
            EMBEDDED_SHA256,
            iterion_embed::to_hex(&iterion_embed::sha256(EMBEDDED))
        );
    }

    #[test]
    fn embedded_relay_is_static() {
        let facts = elf_facts(EMBEDDED).expect("an ELF relay is embedded");
        assert!(facts.is_static, "the relay must be statically linked");
        assert_eq!(Some(facts.machine), machine_of(std::env::consts::ARCH));
    }

    #[test]
    fn install_and_check_keep_their_messages() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = install_embedded(dir.path()).expect("install");
        assert_eq!(
            p,
            dir.path()
                .join("bin")
                .join(format!("iterion-relay-{}", short_hash(EMBEDDED)))
        );
        check_relay_binary(&p, std::env::consts::ARCH).expect("the installed relay passes the check");
        let err = install(b"", dir.path()).expect_err("nothing embedded");
        assert!(err.to_string().contains("embeds no egress relay"), "{err}");
        let script = dir.path().join("relay.sh");
        std::fs::write(&script, b"#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let err = check_relay_binary(&script, "x86_64").expect_err("a script");
        assert_eq!(
            err.to_string(),
            format!(
                "{}",
                Error::StartFailed {
                    reason: format!(
                        "the egress relay {} is not a static x86_64 executable (not an ELF file)",
                        script.display()
                    ),
                    hint: Some(
                        "rebuild iterion, or point ITERION_RELAY_BIN at a statically linked relay".into()
                    ),
                }
            )
        );
    }
}
