//! `cargo xtask images`: local test images built without a registry (03 §15).
//!
//! Builds a deterministic root file system around a static BusyBox and imports it through the engine API
//! (`POST /images/create?fromSrc=-`) as `iterion-test/busybox:latest` and `iterion-test/nosh:latest`. The
//! archive code is shared with the tests' `ensure_test_image()` (iterion-test-support).

use anyhow::{Result, anyhow, bail};
use iterion_test_support::docker_image::{self, Outcome};
use std::path::{Path, PathBuf};

pub fn run(_root: &Path, args: &[String]) -> Result<()> {
    if let Some(a) = args.first() {
        bail!("`cargo xtask images` takes no arguments (got '{a}')");
    }
    let socket = iterion_test_support::engine_socket()
        .ok_or_else(|| anyhow!("DOCKER_HOST is not a unix:// socket; only local engines are supported"))?;
    iterion_test_support::engine_answers()
        .map_err(|e| anyhow!("no container engine answers at {}: {e}", socket.display()))?;
    let busybox = std::env::var_os("ITERION_TEST_BUSYBOX").map(PathBuf::from);
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
