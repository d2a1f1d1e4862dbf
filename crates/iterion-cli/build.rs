//! Builds two standard-library-only programs for the same target as the CLI, statically linked
//! (`-C target-feature=+crt-static`), into OUT_DIR:
//! - `iterion-relay` (relay/main.rs), embedded by `src/relay.rs` (03 §7.2);
//! - `iterion-probe` (probe/main.rs including probe/probe.rs), embedded by `src/probe.rs`: the doctor's
//!   boundary probe program (06 §6), mounted into its throwaway sandbox.
//!
//! On targets where they cannot be built (non-Linux) empty files are embedded: the relay placement and the
//! boundary probes are then unavailable.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    println!("cargo:rustc-check-cfg=cfg(iterion_relay)");
    println!(
        "cargo:rerun-if-changed={}",
        dir.join("probe").join("probe.rs").display()
    );
    let relay = build_static(
        &target,
        "iterion_relay",
        &dir.join("relay").join("main.rs"),
        &out.join("iterion-relay"),
    );
    build_static(
        &target,
        "iterion_probe",
        &dir.join("probe").join("main.rs"),
        &out.join("iterion-probe"),
    );
    if relay {
        println!("cargo:rustc-cfg=iterion_relay");
    }
}

/// Compiles one static program, or writes an empty placeholder on targets that cannot run it.
fn build_static(target: &str, krate: &str, src: &Path, dest: &Path) -> bool {
    println!("cargo:rerun-if-changed={}", src.display());
    if !target.contains("linux") {
        std::fs::write(dest, b"").expect("write empty placeholder");
        println!("cargo:warning={krate} is not built for {target}; the feature that needs it is unavailable");
        return false;
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let status = Command::new(rustc)
        .args(["--edition", "2024", "--crate-name", krate, "--crate-type", "bin"])
        .args(["-C", "opt-level=s", "-C", "panic=abort", "-C", "strip=symbols"])
        .args(["-C", "target-feature=+crt-static"])
        .args(["--target", target])
        .arg("-o")
        .arg(dest)
        .arg(src)
        .status()
        .unwrap_or_else(|e| panic!("spawn rustc for {krate}: {e}"));
    assert!(status.success(), "building {krate} failed: {status}");
    true
}
