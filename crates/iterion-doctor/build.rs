//! Compiles the boundary probe program (`crates/iterion-probe`, standard library only) statically for the
//! target into OUT_DIR, embedded by `src/probe.rs`: the doctor mounts it into its throwaway sandbox. On
//! targets that cannot build it (non-Linux) an empty file is embedded and the boundary probes are unavailable.

use iterion_embed::build::{Program, Toolchain};
use std::path::PathBuf;

fn main() {
    let tc = Toolchain::from_cargo(|k| std::env::var_os(k)).unwrap_or_else(|e| panic!("{e}"));
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let src = dir.join("../iterion-probe/src");
    let (main, lib) = (src.join("main.rs"), src.join("lib.rs"));
    tc.static_program(&Program::bin("iterion_probe", &main, "iterion-probe").with_lib(&lib))
        .unwrap_or_else(|e| panic!("{e}"));
}
