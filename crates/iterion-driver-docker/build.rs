//! Compiles the egress relay (`crates/iterion-relay`, standard library only) statically for the target into
//! OUT_DIR, embedded by `src/relay.rs` as `relay::EMBEDDED`. On targets that cannot build it (non-Linux) an
//! empty file is embedded and the relay egress is unavailable.

use iterion_embed::build::{Program, Toolchain};
use std::path::PathBuf;

fn main() {
    let tc = Toolchain::from_cargo(|k| std::env::var_os(k)).unwrap_or_else(|e| panic!("{e}"));
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let main = dir.join("../iterion-relay/src/main.rs");
    tc.static_program(&Program::bin("iterion_relay", &main, "iterion-relay"))
        .unwrap_or_else(|e| panic!("{e}"));
}
