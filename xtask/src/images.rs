//! `cargo xtask images`: local test images built without a registry.

use anyhow::{Result, bail};
use std::path::Path;

pub fn run(_root: &Path, _args: &[String]) -> Result<()> {
    bail!("`cargo xtask images` is not built yet")
}
