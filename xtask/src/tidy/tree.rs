//! The module tree of one crate, read from its root file by following `mod` items. Test code
//! (`#[cfg(test)]` items and modules, `#[test]` functions) is left out, so the files a test module
//! includes are never read.

use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};
use syn::ext::IdentExt;
use syn::punctuated::Punctuated;
use syn::{Attribute, Item, Meta, Token};

/// Where source files come from: the file system in `cargo xtask tidy`, a map in the unit tests.
pub trait Source {
    /// The text of `path`, or `None` when there is no such file.
    fn read(&self, path: &Path) -> Option<String>;
}

/// One module of a crate: a file, or an inline `mod name { … }` inside one.
pub struct Module {
    /// The path from the crate root: empty for the root, `["store", "index"]` for `crate::store::index`.
    pub path: Vec<String>,
    /// The file that holds the module's items.
    pub file: PathBuf,
    /// The module's own items: its child modules and its test code are not among them.
    pub items: Vec<Item>,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("path", &self.path)
            .field("file", &self.file)
            .field("items", &self.items.len())
            .finish()
    }
}

/// Every non-test module of one crate (one library or one binary target).
#[derive(Debug)]
pub struct CrateTree {
    /// The name reports use for the crate.
    pub name: String,
    /// The modules, the root first.
    pub modules: Vec<Module>,
}

impl CrateTree {
    /// Reads the crate whose root file (`src/lib.rs`, `src/main.rs`) is `root_file`.
    pub fn load(name: &str, root_file: &Path, src: &dyn Source) -> Result<CrateTree> {
        let mut tree = CrateTree {
            name: name.to_string(),
            modules: Vec::new(),
        };
        let dir = root_file.parent().unwrap_or(Path::new("")).to_path_buf();
        tree.load_file(Vec::new(), root_file, &dir, src)?;
        Ok(tree)
    }

    /// `dir` is where the files of this module's children live.
    fn load_file(&mut self, path: Vec<String>, file: &Path, dir: &Path, src: &dyn Source) -> Result<()> {
        let text = src
            .read(file)
            .with_context(|| format!("read {}", file.display()))?;
        let parsed = syn::parse_file(&text).map_err(|e| {
            let at = e.span().start();
            anyhow!("{}:{}:{}: {e}", file.display(), at.line, at.column + 1)
        })?;
        self.add_module(path, file, dir, parsed.items, src)
    }

    fn add_module(
        &mut self,
        path: Vec<String>,
        file: &Path,
        dir: &Path,
        items: Vec<Item>,
        src: &dyn Source,
    ) -> Result<()> {
        let mut own = Vec::new();
        let mut children = Vec::new();
        for item in items {
            match item {
                item if is_test_item(&item) => {}
                Item::Mod(m) => children.push(m),
                other => own.push(other),
            }
        }
        self.modules.push(Module {
            path: path.clone(),
            file: file.to_path_buf(),
            items: own,
        });
        for m in children {
            let name = m.ident.unraw().to_string();
            let mut child = path.clone();
            child.push(name.clone());
            match m.content {
                Some((_, items)) => self.add_module(child, file, &dir.join(&name), items, src)?,
                None => {
                    let (child_file, child_dir) = child_file(file, dir, &name, &m.attrs, src)?;
                    self.load_file(child, &child_file, &child_dir, src)?;
                }
            }
        }
        Ok(())
    }
}

/// The file of `mod name;` and the directory of its own children: `dir/name.rs` or `dir/name/mod.rs`,
/// or a `#[path]` taken relative to the declaring file's directory (children then sit beside it).
fn child_file(
    file: &Path,
    dir: &Path,
    name: &str,
    attrs: &[Attribute],
    src: &dyn Source,
) -> Result<(PathBuf, PathBuf)> {
    if let Some(p) = path_attr(attrs) {
        let f = file.parent().unwrap_or(Path::new("")).join(p);
        let d = f.parent().unwrap_or(Path::new("")).to_path_buf();
        return Ok((f, d));
    }
    let flat = dir.join(format!("{name}.rs"));
    if src.read(&flat).is_some() {
        return Ok((flat, dir.join(name)));
    }
    let nested = dir.join(name).join("mod.rs");
    if src.read(&nested).is_some() {
        return Ok((nested, dir.join(name)));
    }
    bail!(
        "{}: `mod {name};` has neither {} nor {}",
        file.display(),
        flat.display(),
        nested.display()
    )
}

fn path_attr(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// True for an item that exists only in test builds.
pub fn is_test_item(item: &Item) -> bool {
    let attrs = match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => return false,
    };
    is_test(attrs)
}

/// True when the attributes make an item test code: `#[test]`, `#[tokio::test]`, `#[cfg(test)]` or a
/// `#[cfg(all(…, test, …))]`.
pub fn is_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        if path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        path.is_ident("cfg") && a.parse_args::<Meta>().is_ok_and(|m| cfg_requires_test(&m))
    })
}

fn cfg_requires_test(meta: &Meta) -> bool {
    match meta {
        Meta::Path(p) => p.is_ident("test"),
        Meta::List(list) if list.path.is_ident("all") => list
            .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            .is_ok_and(|nested| nested.iter().any(cfg_requires_test)),
        _ => false,
    }
}

/// `crate` for the root, `a::b` for any other module.
pub fn display(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}
