//! Processes started outside the boundary crate: any path through `process::Command` (std or tokio) — an
//! import, a type, a call — in the non-test code of a crate other than `iterion-boundary` (and the tooling
//! crates `iterion-test-support` and `xtask`). A host program starts through `iterion_boundary::HostCommand`,
//! from an explicitly built environment.

use super::tree::{CrateTree, is_test};
use std::path::{Path, PathBuf};
use syn::visit::{self, Visit};

/// The crates that may name `process::Command`: the boundary itself, the tooling above the product, and
/// `iterion-embed`, whose process is the compiler its `build` module runs inside build scripts (std only, it
/// cannot depend on the boundary crate, and it never runs in `iterion`).
pub const EXEMPT: &[&str] = &[
    "iterion-boundary",
    "iterion-embed",
    "iterion-test-support",
    "xtask",
];

/// One place that names `process::Command`.
#[derive(Debug)]
pub struct Spawn {
    /// The file.
    pub file: PathBuf,
    /// The line.
    pub line: usize,
    /// The path as written.
    pub path: String,
}

/// Every place of `tree` that names `process::Command`, in file order (none for an exempt crate).
pub fn find(tree: &CrateTree) -> Vec<Spawn> {
    let root = tree.name.split('/').next().unwrap_or_default();
    if EXEMPT.contains(&root) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for module in &tree.modules {
        let mut finder = Finder {
            file: &module.file,
            out: &mut out,
        };
        for item in &module.items {
            finder.visit_item(item);
        }
    }
    out
}

struct Finder<'a> {
    file: &'a Path,
    out: &'a mut Vec<Spawn>,
}

/// Whether `segments` pass through `process` then `Command` (`std::process::Command`, `process::Command::new`,
/// `tokio::process::Command`), or glob-import `process`.
fn names_command(segments: &[String]) -> bool {
    segments
        .windows(2)
        .any(|w| w[0] == "process" && (w[1] == "Command" || w[1] == "*"))
}

impl Finder<'_> {
    fn report(&mut self, segments: &[String], line: usize) {
        if names_command(segments) {
            self.out.push(Spawn {
                file: self.file.to_path_buf(),
                line,
                path: segments.join("::"),
            });
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.report(&prefix.clone(), n.ident.span().start().line);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.report(&prefix.clone(), r.ident.span().start().line);
                prefix.pop();
            }
            syn::UseTree::Glob(g) => {
                prefix.push("*".to_string());
                self.report(&prefix.clone(), g.star_token.spans[0].start().line);
                prefix.pop();
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Finder<'_> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if !is_test(&u.attrs) {
            self.use_tree(&mut Vec::new(), &u.tree);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test(&f.attrs) {
            visit::visit_item_fn(self, f);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            visit::visit_item_mod(self, m);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = p.segments.first().map_or(0, |s| s.ident.span().start().line);
        self.report(&segments, line);
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // paths inside macro bodies (`format!`, `vec!`) are tokens: look for `process :: Command` there too
        let tokens: Vec<String> = m
            .tokens
            .clone()
            .into_iter()
            .filter_map(|t| match t {
                proc_macro2::TokenTree::Ident(i) => Some(i.to_string()),
                _ => None,
            })
            .collect();
        if names_command(&tokens) {
            let line = m.path.segments.first().map_or(0, |s| s.ident.span().start().line);
            self.report(&["process".into(), "Command".into()], line);
        }
        visit::visit_macro(self, m);
    }
}
