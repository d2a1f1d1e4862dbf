//! The boundary probe program (06 §6): the hidden `iterion __sandbox-probe` command, and the embedded static
//! `iterion-probe` the doctor mounts into its throwaway sandbox.
//!
//! Both run the same code, the `iterion-probe` library. The doctor does not run this (dynamically linked)
//! binary inside the sandbox as the spec describes: it cannot start in images without the host's C library.
//! `build.rs` therefore compiles the `iterion-probe` program (std only, `+crt-static`), embedded here as
//! [`PROBE`] and installed once to `<data dir>/bin/iterion-probe-<first 12 hex of its SHA-256>`;
//! `iterion __sandbox-probe` stays available for images that ship their own iterion and for debugging
//! (`iterion __sandbox-probe dns`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub use iterion_probe::{METADATA_TARGETS, run_probe};

/// The static probe program built for this target (empty when the target cannot build it).
pub const PROBE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/iterion-probe"));

/// Container path of the probe program inside the doctor's sandbox.
pub const PROBE_TARGET: &str = "/run/iterion/bin/iterion-probe";

/// Arguments of `iterion __sandbox-probe`.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// `<probe> [--json] [options]`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Runs `iterion __sandbox-probe`: one JSON line on stdout; exit 0, or 2 on a usage error.
pub fn run(args: ProbeArgs, env: &BTreeMap<String, String>) -> ExitCode {
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let (code, line) = run_probe(&args.args, &env);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Writes [`PROBE`] once to `<data_dir>/bin/iterion-probe-<12 hex>` (see [`iterion_embed::install`]) and
/// returns the path.
pub fn install(data_dir: &Path) -> Result<PathBuf, String> {
    iterion_embed::install(PROBE, &data_dir.join("bin"), "iterion-probe").map_err(|e| match e {
        iterion_embed::Error::Empty { .. } => {
            "this build of iterion embeds no probe program (it was built for a non-Linux target)".into()
        }
        iterion_embed::Error::Io { what, path, source } => format!("{what} {}: {source}", path.display()),
        other => other.to_string(),
    })
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
    }
}
