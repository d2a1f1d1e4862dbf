//! File access in the run store's code that bypasses the boundary: any path through `std::fs` or `tokio::fs`
//! (an import, a type, a call), or the raw open calls (`nix::fcntl`, `libc::open*`), in the non-test code of
//! `iterion-runtime`'s `store` module and its children. Store files are opened through
//! `iterion_boundary::fs` (bounded reads that never follow a link, writes relative to a directory handle).

use super::tree::{CrateTree, is_test};
use std::path::{Path, PathBuf};
use syn::visit::{self, Visit};

/// The crate and the top-level module whose code the rule covers.
pub const SCOPE: (&str, &str) = ("iterion-runtime", "store");

/// One place that opens a store path directly.
#[derive(Debug)]
pub struct Access {
    /// The file.
    pub file: PathBuf,
    /// The line.
    pub line: usize,
    /// The path as written.
    pub path: String,
}

/// Every place of the store modules of `tree` that names direct file access, in file order.
pub fn find(tree: &CrateTree) -> Vec<Access> {
    if tree.name != SCOPE.0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for module in tree
        .modules
        .iter()
        .filter(|m| m.path.first().map(String::as_str) == Some(SCOPE.1))
    {
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

struct Finder<'a> {
    file: &'a Path,
    out: &'a mut Vec<Access>,
}

impl Finder<'_> {
    fn report(&mut self, segments: &[String], line: usize) {
        if names_file_access(segments) {
            self.out.push(Access {
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
        // paths inside macro bodies are tokens: look for `std :: fs` there too
        let tokens: Vec<String> = m
            .tokens
            .clone()
            .into_iter()
            .filter_map(|t| match t {
                proc_macro2::TokenTree::Ident(i) => Some(i.to_string()),
                _ => None,
            })
            .collect();
        if names_file_access(&tokens) {
            let line = m.path.segments.first().map_or(0, |s| s.ident.span().start().line);
            self.report(&["std".into(), "fs".into()], line);
        }
        visit::visit_macro(self, m);
    }
}
