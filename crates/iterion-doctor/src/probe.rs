//! The embedded static `iterion-probe` program the doctor mounts into its throwaway sandbox.
//!
//! The doctor does not run the (dynamically linked) iterion binary inside the sandbox: it cannot start in
//! images without the host's C library. `build.rs` therefore compiles the `iterion-probe` program (std only,
//! `+crt-static`), embedded here as [`PROBE`] and installed once to
//! `<data dir>/bin/iterion-probe-<first 12 hex of its SHA-256>`. The CLI's hidden `iterion __sandbox-probe`
//! runs the same `iterion-probe` library, for images that ship their own iterion and for debugging.

use std::path::{Path, PathBuf};

pub use iterion_probe::METADATA_TARGETS;

/// The static probe program built for this target (empty when the target cannot build it).
pub const PROBE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/iterion-probe"));

/// The SHA-256 of [`PROBE`], computed by `build.rs`.
pub const PROBE_SHA256: &str = include_str!(concat!(env!("OUT_DIR"), "/iterion-probe.sha256"));

/// Container path of the probe program inside the doctor's sandbox.
pub const PROBE_TARGET: &str = "/run/iterion/bin/iterion-probe";

/// Writes [`PROBE`] once to `<data_dir>/bin/iterion-probe-<12 hex>` (see [`iterion_embed::install`]) and
/// returns the path.
pub fn install(data_dir: &Path) -> Result<PathBuf, String> {
    iterion_embed::install_with_digest(PROBE, PROBE_SHA256, &data_dir.join("bin"), "iterion-probe").map_err(
        |e| match e {
            iterion_embed::Error::Empty { .. } => {
                "this build of iterion embeds no probe program (it was built for a non-Linux target)".into()
            }
            iterion_embed::Error::Io { what, path, source } => format!("{what} {}: {source}", path.display()),
            other => other.to_string(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_probe_is_static_and_installs() {
        let facts = iterion_embed::elf_facts(PROBE).expect("an ELF probe is embedded");
        assert!(facts.is_static, "the probe program must be statically linked");
        let dir = tempfile::tempdir().expect("tempdir");
        let p = install(dir.path()).expect("install");
        assert_eq!(std::fs::read(&p).expect("read"), PROBE);
        assert_eq!(
            p.file_name().and_then(|n| n.to_str()),
            Some(format!("iterion-probe-{}", iterion_embed::short_hash(PROBE)).as_str())
        );
        assert_eq!(install(dir.path()).expect("again"), p);
        assert_eq!(PROBE_SHA256, iterion_embed::to_hex(&iterion_embed::sha256(PROBE)));
    }
}
