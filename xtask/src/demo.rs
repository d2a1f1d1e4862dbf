//! `cargo xtask demo`: builds the local test image, then runs `iterion run examples/demo/demo.bot`.
//!
//! The demo is copied to a fresh temporary directory first: `sandbox: auto` looks for `devcontainer.json` at
//! the repository root, and inside this checkout that root would be the iterion repository itself. The copy
//! is its own root, and the file the sandbox writes (`demo-output.txt`) lands in the copy, not in the checkout.
//!
//! When no container engine answers, the run degrades to the host and says so (`sandbox_skipped`). When one
//! answers, the local test image is prepared first (installing `busybox-static` through apt when run as
//! root, see `images`), and a failure stops the demo at once with its reason: a run would otherwise try to
//! pull the local image from a registry and fail later. The run uses pull policy `never` then (the image is
//! local; an operator's own `ITERION_SANDBOX_PULL_POLICY` wins).
//!
//! The copy is a git repository of its own (one commit), so the run does not warn that its project is outside
//! one; iterion's data dir (`ITERION_HOME`) is a directory beside the copy (never inside the workspace a sandbox
//! sees), so nothing is created under the user's home; and both are removed at the end, after its output and events are shown (`--keep` keeps it).
//!
//! `--no-images` skips the image step (the image must then be present already); every other argument is
//! passed to `iterion run` (for example `--json`).
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
    let keep = args.iter().any(|a| a == "--keep");
    let pass: Vec<&String> = args
        .iter()
        .filter(|a| *a != "--no-images" && *a != "--keep")
        .collect();
    let docker = iterion_test_support::engine_answers();
    let podman = iterion_test_support::podman::answers();
    match (&docker, &podman) {
        (Err(d), Err(p)) => {
            // No engine: the demo still runs, visibly unsandboxed.
            println!(
                "demo: no container engine answers (docker: {d}; podman: {p}); the run will show sandbox_skipped"
            );
        }
        _ if skip_images => println!("demo: skipping the image step"),
        (Ok(()), _) => crate::images::run(root, &[]).context("prepare the local test image")?,
        (Err(d), Ok(socket)) => {
            // iterion selects Podman when Docker does not answer: the image goes there.
            println!(
                "demo: docker does not answer ({d}); preparing the local test image on Podman at {}",
                socket.display()
            );
            crate::images::ensure_static_busybox()?;
            iterion_test_support::podman::ensure_test_images(socket)
                .map_err(|e| anyhow::anyhow!(e))
                .context("prepare the local test image on Podman")?;
        }
    }
    println!(
        "demo: building iterion (cargo build -p iterion-cli): a first build takes about 15 minutes on 2 cores, a \
         later one seconds"
    );
    let status = Command::new("cargo")
        .args(["build", "-p", "iterion-cli"])
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
    git_init(&dir)?;
    println!(
        "demo: running in {} (a copy of examples/demo, a git repository of its own)",
        dir.display()
    );
    let home = dir.with_extension("home");
    let result = run_in(&iterion, &dir, &home, &pass);
    if keep {
        println!(
            "demo: kept {} (iterion's data dir: {})",
            dir.display(),
            home.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&home);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => println!("demo: removed {} (pass --keep to keep it)", dir.display()),
            Err(e) => println!("demo: could not remove {}: {e}", dir.display()),
        }
    }
    result
}

/// `git init` and one commit of the copy, through iterion's hardened git (`PATH`'s git, no system or global
/// configuration, hooks and filters off), with an identity of its own.
fn git_init(dir: &Path) -> Result<()> {
    use iterion_boundary::git::{Identity, ObjectFormat, Pinned};
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let git = iterion_boundary::HostGit::from_env(&env)
        .context("find git (the demo copy is made a git repository)")?;
    git.outside(dir)
        .args(["init", "-q", "--object-format=sha1"])
        .arg(dir)
        .run()
        .context("git init of the demo copy")?;
    let (git_dir, index) = (dir.join(".git"), dir.join(".git/index"));
    let at = Pinned::checkout(&git_dir, dir, &index, ObjectFormat::Sha1);
    git.at(at)
        .args(["add", "-A"])
        .run()
        .context("git add of the demo copy")?;
    let me = Identity {
        name: "iterion demo".into(),
        email: "demo@iterion.invalid".into(),
    };
    let mut commit = git.at(at).args(["commit", "-q", "-m", "iterion demo"]);
    for (k, v) in me.vars() {
        commit = commit.env(k, v);
    }
    commit.run().context("git commit of the demo copy")?;
    Ok(())
}

/// The run in the copy `dir`, then what it wrote and what the proxy blocked.
fn run_in(iterion: &Path, dir: &Path, home: &Path, pass: &[&String]) -> Result<()> {
    let status = Command::new(iterion)
        .arg("run")
        .arg("demo.bot")
        .arg("--store-dir")
        .arg(dir.join(".iterion"))
        // iterion's own data (record key, caches) stays in the copy
        .env("ITERION_HOME", home)
        // the image is local: a registry is never asked for it (an operator's own setting wins)
        .env(
            "ITERION_SANDBOX_PULL_POLICY",
            std::env::var("ITERION_SANDBOX_PULL_POLICY").unwrap_or_else(|_| "never".into()),
        )
        .args(pass)
        .current_dir(dir)
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
        let count = events.lines().filter(|l| !l.trim().is_empty()).count();
        println!("demo: {count} events recorded in the run's events.jsonl");
    }
    if !status.success() {
        bail!("iterion run exited with {status}");
    }
    Ok(())
}
