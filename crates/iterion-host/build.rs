//! Builds the claw runner (`crates/iterion-claw-runner`) as a statically linked program for the target and
//! puts it in OUT_DIR, embedded by `src/claw_runner.rs` and bind-mounted into sandboxes at
//! `/usr/local/bin/iterion`.
//!
//! The runner has dependencies (tokio, reqwest with rustls), so a bare `rustc` is not enough: this runs a
//! nested `cargo build -p iterion-claw-runner --target <TARGET>` with `-C target-feature=+crt-static` (an
//! explicit `--target` keeps build scripts and proc-macros dynamic) in a target directory of its own next to
//! the outer one (`<target dir>/claw-runner-static`), the way wasm builders do. Only Linux targets build it;
//! elsewhere an empty file is embedded and claw nodes in containers need `ITERION_BIN`.

use std::path::{Path, PathBuf};
use std::process::Command;

const OUTPUT: &str = "iterion-claw-runner";

fn main() {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("cargo sets {k}"));
    let out_dir = PathBuf::from(var("OUT_DIR"));
    let manifest_dir = PathBuf::from(var("CARGO_MANIFEST_DIR"));
    let target = var("TARGET");
    let root = manifest_dir.join("../..");
    for watched in [
        "crates/iterion-claw-runner",
        "crates/iterion-claw/src",
        "crates/iterion-claw/Cargo.toml",
        "crates/iterion-envelope/src",
        "crates/iterion-envelope/Cargo.toml",
        "crates/iterion-boundary/src",
        "crates/iterion-boundary/Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    let dest = out_dir.join(OUTPUT);
    if !target.contains("linux") {
        std::fs::write(&dest, b"").expect("write an empty runner");
        iterion_embed::build::write_digest(&dest).unwrap_or_else(|e| panic!("{e}"));
        println!(
            "cargo:warning=the claw runner is not built for {target}; set ITERION_BIN for claw nodes in containers"
        );
        return;
    }
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let target_dir = outer_target_dir(&out_dir, &target).join("claw-runner-static");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = Command::new(cargo);
    c.current_dir(&root)
        .args([
            "build",
            "--locked",
            "-p",
            "iterion-claw-runner",
            "--target",
            &target,
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    if release {
        c.arg("--release");
    }
    // A clean environment for the nested build: our flags only, no wrapper of the outer build (clippy's
    // workspace wrapper would lint and refingerprint the whole runner), no inherited target settings.
    for k in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        c.env_remove(k);
    }
    c.env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static")
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env("CARGO_PROFILE_DEV_STRIP", "symbols")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols");
    let status = c.status().expect("run the nested cargo build of the claw runner");
    assert!(
        status.success(),
        "the static claw runner did not build ({status})"
    );
    let built = target_dir
        .join(&target)
        .join(if release { "release" } else { "debug" })
        .join(OUTPUT);
    std::fs::copy(&built, &dest).unwrap_or_else(|e| panic!("copy {}: {e}", built.display()));
    iterion_embed::build::write_digest(&dest).unwrap_or_else(|e| panic!("{e}"));
}

/// The outer target directory: OUT_DIR is `<target dir>[/<triple>]/<profile>/build/<pkg>-<hash>/out`.
fn outer_target_dir(out_dir: &Path, target: &str) -> PathBuf {
    let profile_dir = out_dir
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "build"))
        .and_then(Path::parent)
        .unwrap_or(out_dir);
    let above = profile_dir.parent().unwrap_or(profile_dir);
    if above.file_name().is_some_and(|n| n == target) {
        above.parent().unwrap_or(above).to_path_buf()
    } else {
        above.to_path_buf()
    }
}
