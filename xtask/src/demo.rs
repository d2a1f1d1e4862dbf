//! `cargo xtask demo`: builds the local test image, then runs `iterion run examples/demo/demo.bot`.
//!
//! The demo is copied to a fresh temporary directory first: `sandbox: auto` looks for `devcontainer.json` at
//! the repository root, and inside this checkout that root would be the iterion repository itself. The copy
//! is its own root, and the file the sandbox writes (`demo-output.txt`) lands in the copy, not in the checkout.
//!
//! `--no-images` skips the image step (the run then degrades to the host when the image is missing or no
//! engine answers, which the demo shows as `sandbox_skipped`); every other argument is passed to
//! `iterion run` (for example `--json`).
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("create {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("read {}", from.display()))? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &dest)?;
        } else {
            std::fs::copy(entry.path(), &dest).with_context(|| format!("copy to {}", dest.display()))?;
        }
    }
    Ok(())
}

/// Runs the demo.
pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let skip_images = args.iter().any(|a| a == "--no-images");
    let pass: Vec<&String> = args.iter().filter(|a| *a != "--no-images").collect();
    if skip_images {
        println!("demo: skipping the image step");
    } else if let Err(e) = crate::images::run(root, &[]) {
        // No engine: the demo still runs, visibly unsandboxed.
        println!("demo: local test image not prepared ({e:#}); the run will show sandbox_skipped");
    }
    let status = Command::new("cargo")
        .args(["build", "-q", "-p", "iterion-cli"])
        .current_dir(root)
        .status()
        .context("run cargo build")?;
    if !status.success() {
        bail!("cargo build -p iterion-cli failed");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let iterion = target.join("debug").join("iterion");
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("iterion-demo-{nonce:x}"));
    copy_dir(&root.join("examples").join("demo"), &dir)?;
    println!("demo: running in {}", dir.display());
    let status = Command::new(&iterion)
        .arg("run")
        .arg("demo.bot")
        .arg("--store-dir")
        .arg(dir.join(".iterion"))
        // the image was just built locally: do not let the engine try to refresh its `latest` tag from a
        // registry (an operator's own setting wins)
        .env(
            "ITERION_SANDBOX_PULL_POLICY",
            std::env::var("ITERION_SANDBOX_PULL_POLICY").unwrap_or_else(|_| "missing".into()),
        )
        .args(pass)
        .current_dir(&dir)
        .status()
        .with_context(|| format!("run {}", iterion.display()))?;
    let out = dir.join("demo-output.txt");
    match std::fs::read_to_string(&out) {
        Ok(text) => println!("demo: {} says: {}", out.display(), text.trim()),
        Err(_) => println!("demo: {} was not written", out.display()),
    }
    let runs = dir.join(".iterion").join("runs");
    for run in std::fs::read_dir(&runs).into_iter().flatten().flatten() {
        let events = std::fs::read_to_string(run.path().join("events.jsonl")).unwrap_or_default();
        for line in events.lines() {
            let Ok(ev) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if ev["type"] == "network_blocked" {
                println!(
                    "demo: network_blocked: node {} asked for {}:{} ({}, {})",
                    ev["node_id"].as_str().unwrap_or("?"),
                    ev["data"]["host"].as_str().unwrap_or("?"),
                    ev["data"]["port"],
                    ev["data"]["reason"].as_str().unwrap_or("?"),
                    ev["data"]["rule"].as_str().unwrap_or("?"),
                );
            }
        }
        println!("demo: events in {}", run.path().join("events.jsonl").display());
    }
    if !status.success() {
        bail!("iterion run exited with {status}");
    }
    Ok(())
}
