//! The one path finder of the rules that forbid naming something: every path of a module's non-test code —
//! in `use` trees (globs included), in types and expressions, and as identifier tokens inside macro bodies —
//! offered to a predicate, each hit with its file and line.

use super::tree::{Module, is_test};
use std::path::{Path, PathBuf};
use syn::visit::{self, Visit};

/// One place whose path the predicate matched.
#[derive(Debug)]
pub struct Hit {
    /// The file.
    pub file: PathBuf,
    /// The line.
    pub line: usize,
    /// The path as written (for a macro, `macro_path` of [`find`]).
    pub path: String,
}

/// Every path of the non-test code of `modules` that `matches`, in file order. A macro body whose identifier
/// tokens match is reported as `macro_path` (its tokens are not a path to print).
pub fn find<'m>(
    modules: impl IntoIterator<Item = &'m Module>,
    matches: fn(&[String]) -> bool,
    macro_path: &[&str],
) -> Vec<Hit> {
    let mut out = Vec::new();
    let macro_path: Vec<String> = macro_path.iter().map(|s| s.to_string()).collect();
    for module in modules {
        let mut finder = Finder {
            file: &module.file,
            matches,
            macro_path: &macro_path,
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
    matches: fn(&[String]) -> bool,
    macro_path: &'a [String],
    out: &'a mut Vec<Hit>,
}

impl Finder<'_> {
    fn report(&mut self, segments: &[String], line: usize) {
        if (self.matches)(segments) {
            self.out.push(Hit {
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
        // paths inside macro bodies (`format!`, `vec!`) are tokens: offer their identifiers too
        let tokens: Vec<String> = m
            .tokens
            .clone()
            .into_iter()
            .filter_map(|t| match t {
                proc_macro2::TokenTree::Ident(i) => Some(i.to_string()),
                _ => None,
            })
            .collect();
        if (self.matches)(&tokens) {
            let line = m.path.segments.first().map_or(0, |s| s.ident.span().start().line);
            let path = self.macro_path.to_vec();
            self.report(&path, line);
        }
        visit::visit_macro(self, m);
    }
}
