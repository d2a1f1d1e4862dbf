//! Processes started outside the boundary crate: any path through `process::Command` (std or tokio) — an
//! import, a type, a call — in the non-test code of a crate other than `iterion-boundary` (and the tooling
//! crates `iterion-test-support` and `xtask`). A host program starts through `iterion_boundary::HostCommand`,
//! from an explicitly built environment.

use super::paths::{self, Hit};
use super::tree::CrateTree;

/// The crates that may name `process::Command`: the boundary itself, the tooling above the product, and
/// `iterion-embed`, whose process is the compiler its `build` module runs inside build scripts (std only, it
/// cannot depend on the boundary crate, and it never runs in `iterion`).
pub const EXEMPT: &[&str] = &[
    "iterion-boundary",
    "iterion-embed",
    "iterion-test-support",
    "xtask",
];

/// Every place of `tree` that names `process::Command`, in file order (none for an exempt crate).
pub fn find(tree: &CrateTree) -> Vec<Hit> {
    let root = tree.name.split('/').next().unwrap_or_default();
    if EXEMPT.contains(&root) {
        return Vec::new();
    }
    paths::find(&tree.modules, names_command, &["process", "Command"])
}

/// Whether `segments` pass through `process` then `Command` (`std::process::Command`, `process::Command::new`,
/// `tokio::process::Command`), or glob-import `process`.
fn names_command(segments: &[String]) -> bool {
    segments
        .windows(2)
        .any(|w| w[0] == "process" && (w[1] == "Command" || w[1] == "*"))
}
