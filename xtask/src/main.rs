//! `cargo xtask`: the single entry point for project automation. Local equals CI.
//!
//! ```text
//! cargo xtask ci              format check + clippy (deny warnings) + check-layers + all tests
//! cargo xtask fmt             format the workspace
//! cargo xtask lint            clippy over every target, warnings denied
//! cargo xtask check-layers    the crate layer DAG and dependency confinement, read from cargo metadata
//! cargo xtask test            all tests
//! ```

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

mod images;
mod layers;

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
  ci             format check, clippy (warnings denied), check-layers, then every test
  fmt            format the workspace
  lint           clippy over every target with warnings denied
  check-layers   check the crate layer DAG and where heavy dependencies may appear
  test           run every test of the workspace
  images         build the local test images (no registry needed), e.g. iterion-test/busybox:latest
  bench NAME     run a benchmark: spec | proxy | docker";

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
        "test" => test(rest),
        "images" => images::run(&root()?, rest),
        "bench" => bench(rest),
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
    test(&[])
}

/// Benchmarks are `harness = false` bench targets of the crate they measure; each prints its own table.
const BENCHES: &[(&str, &str, &str)] = &[
    ("spec", "iterion-spec", "parse"),
    ("proxy", "iterion-netproxy", "proxy"),
    ("docker", "iterion-driver-docker", "docker"),
];

fn bench(args: &[String]) -> Result<()> {
    let names: Vec<&str> = BENCHES.iter().map(|b| b.0).collect();
    let Some(name) = args.first() else {
        bail!("usage: cargo xtask bench <{}> [ARGS]", names.join("|"));
    };
    let Some((_, krate, target)) = BENCHES.iter().find(|b| b.0 == name) else {
        bail!("unknown benchmark '{name}' (known: {})", names.join(", "));
    };
    if name == "docker" {
        images::run(&root()?, &[])?;
    }
    let mut cargo_args = vec!["bench", "--package", krate, "--bench", target, "--"];
    cargo_args.extend(args[1..].iter().map(String::as_str));
    cargo(&cargo_args)
}
