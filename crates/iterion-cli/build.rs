//! Builds `iterion-relay` (relay/main.rs, standard library only) for the same target as the CLI, statically
//! linked (`-C target-feature=+crt-static`), into OUT_DIR; `src/relay.rs` embeds the bytes (03 §7.2).
//! On targets where the relay cannot be built (non-Linux) an empty file is embedded and the relay placement
//! is unavailable.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let dest = out.join("iterion-relay");
    let src = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("relay")
        .join("main.rs");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rustc-check-cfg=cfg(iterion_relay)");
    if !target.contains("linux") {
        std::fs::write(&dest, b"").expect("write empty relay placeholder");
        println!("cargo:warning=iterion-relay is not built for {target}; the relay placement is unavailable");
        return;
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let status = Command::new(rustc)
        .args([
            "--edition",
            "2024",
            "--crate-name",
            "iterion_relay",
            "--crate-type",
            "bin",
        ])
        .args(["-C", "opt-level=s", "-C", "panic=abort", "-C", "strip=symbols"])
        .args(["-C", "target-feature=+crt-static"])
        .args(["--target", &target])
        .arg("-o")
        .arg(&dest)
        .arg(&src)
        .status()
        .expect("spawn rustc for iterion-relay");
    assert!(status.success(), "building iterion-relay failed: {status}");
    println!("cargo:rustc-cfg=iterion_relay");
}
