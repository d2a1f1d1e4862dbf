//! `cargo xtask tidy`: source rules the compiler and clippy do not check, over the non-test code of
//! `crates/*/src` and `xtask/src`.
//!
//! - no function over [`LIMIT`] lines;
//! - no import circle between the modules of one crate;
//! - no process started outside `iterion-boundary` (no `process::Command`, std or tokio, in another crate);
//! - no direct file access in the run store's code (`std::fs`, `tokio::fs`, raw `open`): store files go
//!   through `iterion_boundary::fs`.
//!
//! Violations that exist today are listed in `xtask/tidy-allow.txt`; the list can only shrink.

mod allow;
mod cycles;
mod long_fn;
mod paths;
mod spawn;
mod store_fs;
mod tree;

#[cfg(test)]
mod tests;

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use tree::{CrateTree, Source};

/// The longest a function may be, in lines from `fn` to its closing brace.
pub const LIMIT: usize = 150;

/// Runs every check over the workspace at `root` and fails on any violation the allowlist does not
/// cover, or any allowlist line that covers nothing.
pub fn run(root: &Path) -> Result<()> {
    let source = Files { root };
    let mut trees = Vec::new();
    for (name, file) in crate_roots(root)? {
        trees.push(CrateTree::load(&name, &file, &source)?);
    }
    let allow_path = root.join(allow::FILE);
    let allow_text =
        std::fs::read_to_string(&allow_path).with_context(|| format!("read {}", allow_path.display()))?;
    let verdict = check(&trees, &allow_text)?;
    let modules: usize = trees.iter().map(|t| t.modules.len()).sum();
    for problem in &verdict.problems {
        eprintln!("{problem}");
    }
    eprintln!(
        "xtask: tidy: {} crates, {modules} modules; {} allowlisted violations left in {}",
        trees.len(),
        verdict.allowed,
        allow::FILE
    );
    if !verdict.problems.is_empty() {
        bail!("tidy found {} problem(s)", verdict.problems.len());
    }
    Ok(())
}

/// Every check over `trees`, held against the allowlist text.
fn check(trees: &[CrateTree], allow_text: &str) -> Result<allow::Verdict> {
    let entries = allow::parse(allow_text)?;
    Ok(allow::apply(&entries, &violations(trees)))
}

/// Every violation, long functions first, each with its allowlist key and its message.
fn violations(trees: &[CrateTree]) -> Vec<allow::Violation> {
    let mut out = Vec::new();
    for tree in trees {
        for f in long_fn::find(tree, LIMIT) {
            let file = f.file.display();
            out.push(allow::Violation {
                key: format!("long-fn {file}::{}", f.name),
                message: format!("{file}:{} {}: {} lines (limit {LIMIT})", f.line, f.name, f.lines),
            });
        }
    }
    for tree in trees {
        for s in spawn::find(tree) {
            let file = s.file.display();
            out.push(allow::Violation {
                key: format!("spawn {file}"),
                message: format!(
                    "{file}:{} `{}` starts a process directly; start host programs through \
                     iterion_boundary::HostCommand (an explicit environment, trusted PATH only)",
                    s.line, s.path
                ),
            });
        }
    }
    for tree in trees {
        for a in store_fs::find(tree) {
            let file = a.file.display();
            out.push(allow::Violation {
                key: format!("store-fs {file}"),
                message: format!(
                    "{file}:{} `{}` opens a store path directly; reach store files through iterion_boundary::fs (bounded reads that never follow a link, writes relative to a directory handle)",
                    a.line, a.path
                ),
            });
        }
    }
    for tree in trees {
        for c in cycles::find(tree) {
            let key = format!("cycle {}: {}", tree.name, c.modules.join(", "));
            let mut message = format!("{key}\n  module import circle; one place per edge:");
            for e in &c.edges {
                let at = format!("{}:{}", e.file.display(), e.line);
                message.push_str(&format!("\n    {} -> {}  {at}", e.from, e.to));
            }
            out.push(allow::Violation { key, message });
        }
    }
    out
}

/// The crate roots to check, with relative paths: `lib.rs` and `main.rs` of every `crates/*/src`, and
/// `xtask/src/main.rs`. A binary beside a library is its own crate, named `crate/main`.
fn crate_roots(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut dirs: Vec<String> = std::fs::read_dir(root.join("crates"))
        .with_context(|| format!("read {}", root.join("crates").display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("src").is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    let mut roots = Vec::new();
    for dir in dirs {
        let src = Path::new("crates").join(&dir).join("src");
        let lib = src.join("lib.rs");
        let has_lib = root.join(&lib).is_file();
        if has_lib {
            roots.push((dir.clone(), lib));
        }
        let main = src.join("main.rs");
        if root.join(&main).is_file() {
            let name = if has_lib { format!("{dir}/main") } else { dir };
            roots.push((name, main));
        }
    }
    roots.push(("xtask".to_string(), PathBuf::from("xtask/src/main.rs")));
    Ok(roots)
}

/// Source files under the workspace root, named by their relative paths.
struct Files<'a> {
    root: &'a Path,
}

impl Source for Files<'_> {
    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(self.root.join(path)).ok()
    }
}
