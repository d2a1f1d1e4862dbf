//! Functions longer than the limit: free functions, methods and trait default bodies, measured from
//! the line of `fn` to the line of the closing brace. Test functions are skipped.

use super::tree::{CrateTree, is_test, is_test_item};
use std::path::{Path, PathBuf};
use syn::visit::{self, Visit};

/// A function over the limit.
#[derive(Debug)]
pub struct LongFn {
    /// The file that holds it.
    pub file: PathBuf,
    /// The line of its `fn` keyword.
    pub line: usize,
    /// Its name (without the type of an impl).
    pub name: String,
    /// Its length in lines.
    pub lines: usize,
}

/// Every function of `tree` longer than `limit` lines, in file order.
pub fn find(tree: &CrateTree, limit: usize) -> Vec<LongFn> {
    let mut out = Vec::new();
    for module in &tree.modules {
        let mut finder = Finder {
            file: &module.file,
            limit,
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
    limit: usize,
    out: &'a mut Vec<LongFn>,
}

impl Finder<'_> {
    fn measure(&mut self, sig: &syn::Signature, block: &syn::Block) {
        let line = sig.fn_token.span.start().line;
        let end = block.brace_token.span.close().end().line;
        let lines = end + 1 - line;
        if lines > self.limit {
            self.out.push(LongFn {
                file: self.file.to_path_buf(),
                line,
                name: sig.ident.to_string(),
                lines,
            });
        }
    }
}

impl<'ast> Visit<'ast> for Finder<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test_item(item) {
            visit::visit_item(self, item);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.measure(&f.sig, &f.block);
        visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            self.measure(&f.sig, &f.block);
            visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        if let Some(block) = &f.default {
            self.measure(&f.sig, block);
        }
        visit::visit_trait_item_fn(self, f);
    }
}
