//! `cargo xtask`: the single entry point for project automation. Local equals CI.
//!
//! ```text
//! cargo xtask ci              format check + clippy (deny warnings) + check-layers + tidy + all tests
//! cargo xtask fmt             format the workspace
//! cargo xtask lint            clippy over every target, warnings denied
//! cargo xtask check-layers    the crate layer DAG and dependency confinement, read from cargo metadata
//! cargo xtask tidy            no function over 150 lines, no module import circle (allowlist: xtask/tidy-allow.txt)
//! cargo xtask test            all tests
//! ```

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

mod demo;
mod images;
mod layers;
mod tidy;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask <command>

commands:
  ci             format check, clippy (warnings denied), check-layers, tidy, then every test
  fmt            format the workspace
  lint           clippy over every target with warnings denied
  check-layers   check the crate layer DAG and where heavy dependencies may appear
  tidy           no function over 150 lines and no module import circle, outside xtask/tidy-allow.txt
  test           run every test of the workspace
  images         build the local test images (no registry needed), e.g. iterion-test/busybox:latest
  bench NAME     run a benchmark: spec | devcontainer | proxy | docker | doctor | lifecycle | envelope | claw | k8s
  demo           prepare the local test image and run the sandboxed demo workflow
  fuzz [DIR TARGET [SECONDS]]
                 list fuzz targets, or run fuzz/DIR's TARGET for SECONDS (default 300) with cargo-fuzz";

fn run(args: &[String]) -> Result<()> {
    let Some(cmd) = args.first() else {
        println!("{USAGE}");
        bail!("no command given");
    };
    let rest = &args[1..];
    match cmd.as_str() {
        "ci" => ci(),
        "fmt" => cargo(&["fmt", "--all"]),
        "lint" => lint(),
        "check-layers" => layers::check(&root()?),
        "tidy" => tidy::run(&root()?),
        "test" => test(rest),
        "images" => images::run(&root()?, rest),
        "bench" => bench(rest),
        "fuzz" => fuzz(rest),
        "demo" => demo::run(&root()?, rest),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown command '{other}'\n\n{USAGE}"),
    }
}

/// The workspace root (the parent of this crate's manifest directory).
fn root() -> Result<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    Ok(dir
        .parent()
        .context("xtask has no parent directory")?
        .to_path_buf())
}

fn cargo(args: &[&str]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    step(Command::new(cargo).args(args).current_dir(root()?))
}

fn step(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    eprintln!("xtask: running {shown}");
    let status = cmd.status().with_context(|| format!("spawn {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

fn lint() -> Result<()> {
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--locked",
        "--",
        "-D",
        "warnings",
    ])
}

fn test(extra: &[String]) -> Result<()> {
    let mut args = vec!["test", "--workspace", "--all-targets", "--locked"];
    args.extend(extra.iter().map(String::as_str));
    cargo(&args)?;
    cargo(&["test", "--workspace", "--doc", "--locked"])
}

fn ci() -> Result<()> {
    cargo(&["fmt", "--all", "--check"])?;
    lint()?;
    layers::check(&root()?)?;
    tidy::run(&root()?)?;
    test(&[])?;
    feature_sets()
}

/// The standalone proxy without TLS inspection is a supported build: lint and test it too.
fn feature_sets() -> Result<()> {
    let lean = [
        "-p",
        "iterion-netproxy",
        "--no-default-features",
        "--features",
        "cli",
        "--locked",
    ];
    let mut clippy = vec!["clippy", "--all-targets"];
    clippy.extend(lean);
    clippy.extend(["--", "-D", "warnings"]);
    cargo(&clippy)?;
    let mut test = vec!["test"];
    test.extend(lean);
    cargo(&test)
}

/// Benchmarks are `harness = false` bench targets of the crate they measure; each prints its own table.
const BENCHES: &[(&str, &str, &str)] = &[
    ("spec", "iterion-spec", "parse"),
    ("devcontainer", "iterion-spec", "devcontainer"),
    ("proxy", "iterion-netproxy", "proxy"),
    ("docker", "iterion-driver-docker", "docker"),
    ("doctor", "iterion-doctor", "doctor"),
    ("lifecycle", "iterion-cli", "lifecycle"),
    ("envelope", "iterion-envelope", "codec"),
    ("claw", "iterion-runtime", "claw"),
    ("k8s", "iterion-driver-k8s", "k8s"),
];

fn bench(args: &[String]) -> Result<()> {
    let names: Vec<&str> = BENCHES.iter().map(|b| b.0).collect();
    let Some(name) = args.first() else {
        bail!("usage: cargo xtask bench <{}> [ARGS]", names.join("|"));
    };
    let Some((_, krate, target)) = BENCHES.iter().find(|b| b.0 == name) else {
        bail!("unknown benchmark '{name}' (known: {})", names.join(", "));
    };
    if matches!(name.as_str(), "docker" | "doctor" | "lifecycle" | "claw") {
        images::run(&root()?, &[])?;
    }
    let mut cargo_args = vec!["bench", "--package", krate, "--bench", target, "--"];
    cargo_args.extend(args[1..].iter().map(String::as_str));
    cargo(&cargo_args)
}

/// Fuzz targets live in `fuzz/<dir>/` (cargo-fuzz layouts outside the workspace). cargo-fuzz needs nightly
/// compiler flags; `RUSTC_BOOTSTRAP=1` lets the pinned stable toolchain accept them.
fn fuzz(args: &[String]) -> Result<()> {
    let fuzz_root = root()?.join("fuzz");
    let Some(dir) = args.first() else {
        println!("fuzz targets (cargo xtask fuzz DIR TARGET [SECONDS]):");
        let mut dirs: Vec<_> = std::fs::read_dir(&fuzz_root)
            .with_context(|| format!("read {}", fuzz_root.display()))?
            .filter_map(|e| e.ok())
            .collect();
        dirs.sort_by_key(|e| e.file_name());
        for d in dirs {
            let targets = d.path().join("fuzz_targets");
            let Ok(entries) = std::fs::read_dir(&targets) else {
                continue;
            };
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.path().file_stem().map(|s| s.to_string_lossy().into_owned()))
                .collect();
            names.sort();
            for n in names {
                println!("  {} {}", d.file_name().to_string_lossy(), n);
            }
        }
        return Ok(());
    };
    let Some(target) = args.get(1) else {
        bail!("usage: cargo xtask fuzz DIR TARGET [SECONDS]")
    };
    let seconds: u64 = match args.get(2) {
        Some(s) => s
            .parse()
            .with_context(|| format!("SECONDS must be a whole number, got '{s}'"))?,
        None => 300,
    };
    let dir = fuzz_root.join(dir);
    if !dir.join("Cargo.toml").exists() {
        bail!("no fuzz crate at {}", dir.display());
    }
    if Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        eprintln!("xtask: cargo-fuzz is missing; installing it from crates.io");
        step(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    step(
        Command::new("cargo")
            .env("RUSTC_BOOTSTRAP", "1")
            .args([
                "fuzz",
                "run",
                "--fuzz-dir",
                ".",
                target,
                "--",
                &format!("-max_total_time={seconds}"),
            ])
            .current_dir(&dir),
    )
}
