//! File access in the run store's code that bypasses the boundary: any path through `std::fs` or `tokio::fs`
//! (an import, a type, a call), or the raw open calls (`nix::fcntl`, `libc::open*`), in the non-test code of
//! `iterion-runtime`'s `store` module and its children. Store files are opened through
//! `iterion_boundary::fs` (bounded reads that never follow a link, writes relative to a directory handle).

use super::paths::{self, Hit};
use super::tree::CrateTree;

/// The crate and the top-level module whose code the rule covers.
pub const SCOPE: (&str, &str) = ("iterion-runtime", "store");

/// Every place of the store modules of `tree` that names direct file access, in file order.
pub fn find(tree: &CrateTree) -> Vec<Hit> {
    if tree.name != SCOPE.0 {
        return Vec::new();
    }
    let store = tree
        .modules
        .iter()
        .filter(|m| m.path.first().map(String::as_str) == Some(SCOPE.1));
    paths::find(store, names_file_access, &["std", "fs"])
}

/// Whether `segments` name direct file access: `std::fs` / `tokio::fs` (and anything below or a glob of it),
/// `nix::fcntl`, or `libc::open` / `libc::openat`.
fn names_file_access(segments: &[String]) -> bool {
    segments.windows(2).any(|w| {
        let (a, b) = (w[0].as_str(), w[1].as_str());
        (matches!(a, "std" | "tokio") && b == "fs")
            || (a == "nix" && b == "fcntl")
            || (a == "libc" && matches!(b, "open" | "openat" | "open64" | "openat64" | "creat"))
    })
}
