//! `cargo xtask images`: local test images built without a registry (03 §15).
//!
//! Builds a deterministic root file system around a static BusyBox and imports it through the engine API
//! (`POST /images/create?fromSrc=-`) as `iterion-test/busybox:latest` and `iterion-test/nosh:latest`. The
//! archive code is shared with the tests' `ensure_test_image()` (iterion-test-support).
//!
//! On a machine without a static BusyBox (and without `ITERION_TEST_BUSYBOX`), Debian's `busybox-static` is
//! installed through apt when this runs as root (`apt-get install -y busybox-static`, after `apt-get update`
//! when the first attempt fails), each command printed first; otherwise it stops at once with the command to
//! run.

use anyhow::{Context, Result, anyhow, bail};
use iterion_test_support::docker_image::{self, Outcome};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The command that installs the static BusyBox on Debian and Ubuntu.
pub const INSTALL: &str = "apt-get install -y busybox-static";

pub fn run(_root: &Path, args: &[String]) -> Result<()> {
    if let Some(a) = args.first() {
        bail!("`cargo xtask images` takes no arguments (got '{a}')");
    }
    let socket = iterion_test_support::engine_socket()
        .ok_or_else(|| anyhow!("DOCKER_HOST is not a unix:// socket; only local engines are supported"))?;
    iterion_test_support::engine_answers()
        .map_err(|e| anyhow!("no container engine answers at {}: {e}", socket.display()))?;
    let busybox = std::env::var_os("ITERION_TEST_BUSYBOX").map(PathBuf::from);
    if busybox.is_none() {
        ensure_static_busybox()?;
    }
    let archives = docker_image::test_archives(busybox.as_deref()).map_err(|e| anyhow!(e))?;
    for a in &archives {
        let outcome = docker_image::ensure_image(&socket, a).map_err(|e| anyhow!(e))?;
        let what = match outcome {
            Outcome::Present => "present",
            Outcome::Imported => "imported",
        };
        println!(
            "{:<30} {what:<9} sha256:{} ({} bytes)",
            a.reference,
            &a.digest()[..16],
            a.tar.len()
        );
    }
    Ok(())
}

/// Whether this process runs as root (the effective uid of `/proc/self/status`, else `id -u`).
fn is_root() -> bool {
    let from_proc = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
    });
    from_proc.unwrap_or_else(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
    })
}

/// Runs `apt-get ARGS` non-interactively, printing the command first; whether it succeeded.
fn apt(args: &[&str]) -> Result<bool> {
    println!("images: running apt-get {}", args.join(" "));
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("run apt-get")?;
    Ok(status.success())
}

/// What to do about a missing static BusyBox.
#[derive(Debug, PartialEq, Eq)]
enum Remedy {
    /// Install it through apt now.
    Install,
    /// Stop with this message.
    Stop(String),
}

fn remedy(why: &str, has_apt: bool, root: bool) -> Remedy {
    match (has_apt, root) {
        (false, _) => Remedy::Stop(format!(
            "no static busybox on this machine ({why}); install one with the system's package manager (Debian and \
             Ubuntu: `sudo {INSTALL}`), or set ITERION_TEST_BUSYBOX to a statically linked busybox"
        )),
        (true, false) => Remedy::Stop(format!(
            "no static busybox on this machine ({why}); install it, then run this command again:\n\n    sudo {INSTALL}\n"
        )),
        (true, true) => Remedy::Install,
    }
}

/// Makes a static BusyBox available: present, or installed through apt as root, or an error naming the command.
pub fn ensure_static_busybox() -> Result<()> {
    let Err(why) = docker_image::find_static_busybox(None) else {
        return Ok(());
    };
    let has_apt = Command::new("apt-get")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if let Remedy::Stop(message) = remedy(&why, has_apt, is_root()) {
        bail!(message);
    }
    println!(
        "images: no static busybox on this machine; installing Debian's busybox-static package (the local test \
         images are built from it: no registry is needed)"
    );
    let install: Vec<&str> = INSTALL.split_whitespace().skip(1).collect();
    // the package lists of a fresh machine may be empty: update them when the first attempt fails
    let installed = apt(&install)? || (apt(&["update"])? && apt(&install)?);
    if !installed {
        bail!("`{INSTALL}` failed (see its output above)");
    }
    docker_image::find_static_busybox(None)
        .map(|p| println!("images: static busybox at {}", p.display()))
        .map_err(|e| anyhow!("busybox-static was installed but no static busybox is found: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_installs_others_stop_with_the_command() {
        assert_eq!(remedy("none", true, true), Remedy::Install);
        let Remedy::Stop(m) = remedy("none", true, false) else {
            panic!("a user stops")
        };
        assert!(m.contains("sudo apt-get install -y busybox-static"), "{m}");
        let Remedy::Stop(m) = remedy("none", false, true) else {
            panic!("no apt stops")
        };
        assert!(m.contains("ITERION_TEST_BUSYBOX"), "{m}");
    }
}
