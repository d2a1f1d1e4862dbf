//! Import circles between the modules of one crate.
//!
//! A module names another through `crate::…`, `super::…` or `self::…` paths, in `use` items, in code
//! and inside macro calls. The target is the deepest known module along the path (`crate::a::b::Item`
//! names `a::b` when that is a module, else `a`). A module naming itself or one of its descendants is
//! no edge (a parent may use its children); a child naming an ancestor's items is an edge. Every
//! strongly connected component of more than one module is a circle.

use super::tree::{CrateTree, display, is_test, is_test_item};
use proc_macro2::{TokenStream, TokenTree};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use syn::visit::{self, Visit};

/// One edge of a circle with the first place that makes it.
#[derive(Debug)]
pub struct Edge {
    /// The naming module.
    pub from: String,
    /// The named module.
    pub to: String,
    /// The file of the naming path.
    pub file: PathBuf,
    /// Its line.
    pub line: usize,
}

/// A strongly connected component of the module graph.
#[derive(Debug)]
pub struct Cycle {
    /// The modules, sorted.
    pub modules: Vec<String>,
    /// Every edge between two of its modules, one witness each, sorted.
    pub edges: Vec<Edge>,
}

/// Every circle of `tree`, sorted by module list.
pub fn find(tree: &CrateTree) -> Vec<Cycle> {
    let index: HashMap<&[String], usize> = tree
        .modules
        .iter()
        .enumerate()
        .map(|(i, m)| (m.path.as_slice(), i))
        .collect();
    // (from, to) -> line of the first naming path
    let mut edges: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (from, module) in tree.modules.iter().enumerate() {
        let mut refs = Refs::default();
        for item in &module.items {
            refs.visit_item(item);
        }
        for (segments, line) in refs.found {
            let Some(target) = resolve(&module.path, &segments, &index) else {
                continue;
            };
            let to = index[target.as_slice()];
            if !target.starts_with(&module.path) {
                edges.entry((from, to)).or_insert(line);
            }
        }
    }
    let mut adjacency = vec![Vec::new(); tree.modules.len()];
    for &(from, to) in edges.keys() {
        adjacency[from].push(to);
    }
    let mut cycles: Vec<Cycle> = strongly_connected(&adjacency)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|members| {
            let name = |i: usize| display(&tree.modules[i].path);
            let mut modules: Vec<String> = members.iter().map(|&i| name(i)).collect();
            modules.sort();
            let mut cycle_edges: Vec<Edge> = edges
                .iter()
                .filter(|((f, t), _)| members.contains(f) && members.contains(t))
                .map(|(&(f, t), &line)| Edge {
                    from: name(f),
                    to: name(t),
                    file: tree.modules[f].file.clone(),
                    line,
                })
                .collect();
            cycle_edges.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
            Cycle {
                modules,
                edges: cycle_edges,
            }
        })
        .collect();
    cycles.sort_by(|a, b| a.modules.cmp(&b.modules));
    cycles
}

/// The deepest known module a path names from module `from`, or `None` for a path that does not start
/// at `crate`, `super` or `self` (an extern crate, a local name, a prelude item).
fn resolve(from: &[String], segments: &[String], index: &HashMap<&[String], usize>) -> Option<Vec<String>> {
    let mut base = match segments.first()?.as_str() {
        "crate" => Vec::new(),
        "super" | "self" => from.to_vec(),
        _ => return None,
    };
    let mut rest = segments.iter().peekable();
    if segments[0] == "crate" {
        rest.next();
    }
    while let Some(s) = rest.next_if(|s| *s == "super" || *s == "self") {
        if s == "super" {
            base.pop()?;
        }
    }
    for s in rest {
        base.push(s.clone());
        if !index.contains_key(base.as_slice()) {
            base.pop();
            break;
        }
    }
    Some(base)
}

/// The paths of a module's items with the line of their first segment.
#[derive(Default)]
struct Refs {
    found: Vec<(Vec<String>, usize)>,
}

impl Refs {
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.use_leaf(prefix, &n.ident),
            syn::UseTree::Rename(r) => self.use_leaf(prefix, &r.ident),
            syn::UseTree::Glob(g) => {
                let line = g.star_token.span.start().line;
                self.found.push((prefix.clone(), line));
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix);
                }
            }
        }
    }

    /// `use a::b::{self}` names `a::b`; `use a::b::c` names `a::b::c`.
    fn use_leaf(&mut self, prefix: &[String], ident: &syn::Ident) {
        let mut path = prefix.to_vec();
        if ident != "self" || path.is_empty() {
            path.push(ident.to_string());
        }
        self.found.push((path, ident.span().start().line));
    }

    /// `crate::a::b`, `super::x` and `self::y` sequences inside a macro's tokens (syn does not parse
    /// macro arguments).
    fn tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if id == "crate" || id == "super" || id == "self" => {
                    let mut segments = vec![id.to_string()];
                    while let Some(next) = path_step(&tokens, i) {
                        segments.push(next);
                        i += 3;
                    }
                    if segments.len() > 1 {
                        self.found.push((segments, id.span().start().line));
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// The identifier after `tokens[i]` when `::` joins them.
fn path_step(tokens: &[TokenTree], i: usize) -> Option<String> {
    match tokens.get(i + 1..i + 4)? {
        [TokenTree::Punct(a), TokenTree::Punct(b), TokenTree::Ident(id)]
            if a.as_char() == ':' && b.as_char() == ':' =>
        {
            Some(id.to_string())
        }
        _ => None,
    }
}

impl<'ast> Visit<'ast> for Refs {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test_item(item) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&u.tree, &mut Vec::new());
    }

    /// `pub(super)`, `pub(in crate::a)` restrict visibility; they name nothing that is used.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if let Some(first) = path.segments.first() {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.found.push((segments, first.ident.span().start().line));
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.tokens(mac.tokens.clone());
    }
}

/// Tarjan's algorithm: the strongly connected components of a graph given as adjacency lists.
fn strongly_connected(adjacency: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adjacency: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn connect(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.adjacency[v] {
            match s.index[w] {
                None => {
                    connect(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let n = adjacency.len();
    let mut s = State {
        adjacency,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            connect(&mut s, v);
        }
    }
    s.out
}
