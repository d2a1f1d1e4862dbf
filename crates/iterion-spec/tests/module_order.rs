//! The modules of the crate form an order: no file uses, directly or through others, a module that uses it
//! back. A reference is a `crate::…` or `super::…` path, or a child module named from its parent; tests
//! (`#[cfg(test)] mod tests`) and comments are not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`compile::graph`, `""` for the crate root) → source file, for every file under `src/`.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src").with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The code of a file without comments and without its unit tests.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths named at `rest` (just after `crate::` or `super::`): one path, or each item of a `{…}` group.
fn paths_at(rest: &str) -> Vec<String> {
    let path_len = |s: &str| s.find(|c: char| !(ident_char(c) || c == ':')).unwrap_or(s.len());
    if let Some(group) = rest.strip_prefix('{') {
        let end = group.find('}').unwrap_or(group.len());
        return group[..end]
            .split(',')
            .map(|item| {
                let item = item.trim();
                item[..path_len(item)].to_owned()
            })
            .filter(|p| !p.is_empty())
            .collect();
    }
    vec![rest[..path_len(rest)].to_owned()]
}

/// The longest module named by `segments` below `base`.
fn resolve(names: &BTreeMap<String, PathBuf>, base: &[&str], segments: &str) -> String {
    let mut acc: Vec<&str> = base.to_vec();
    let mut best = acc.join("::");
    for s in segments.split("::").filter(|s| !s.is_empty()) {
        acc.push(s);
        if names.contains_key(&acc.join("::")) {
            best = acc.join("::");
        } else {
            break;
        }
    }
    best
}

fn references(names: &BTreeMap<String, PathBuf>, module: &str, code: &str) -> BTreeSet<String> {
    let here: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
    let mut out = BTreeSet::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", here[..here.len().saturating_sub(1)].to_vec()),
    ] {
        for (i, _) in code.match_indices(prefix) {
            if code[..i].ends_with(|c: char| ident_char(c) || c == ':') {
                continue;
            }
            for p in paths_at(&code[i + prefix.len()..]) {
                out.insert(resolve(names, &base, &p));
            }
        }
    }
    // children named from their parent (`mod x;` then `x::…`)
    for child in names.keys() {
        let Some(leaf) = child.strip_prefix(module).and_then(|r| r.strip_prefix("::")) else {
            continue;
        };
        if module.is_empty() || leaf.contains("::") {
            continue;
        }
        let pat = format!("{leaf}::");
        let named = code
            .match_indices(&pat)
            .any(|(i, _)| !code[..i].ends_with(|c: char| ident_char(c) || c == ':'));
        if named {
            out.insert(child.clone());
        }
    }
    out.remove(module);
    // the crate root only re-exports
    out.remove("");
    out
}

/// A cycle of the graph, if there is one.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        v: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(v.to_owned(), 1);
        path.push(v.to_owned());
        for w in edges.get(v).into_iter().flatten() {
            match state.get(w.as_str()).copied().unwrap_or(0) {
                0 => {
                    if let Some(c) = visit(w, edges, state, path) {
                        return Some(c);
                    }
                }
                1 => {
                    let start = path.iter().position(|p| p == w).unwrap_or(0);
                    let mut c = path[start..].to_vec();
                    c.push(w.clone());
                    return Some(c);
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(v.to_owned(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for v in edges.keys() {
        if state.get(v.as_str()).copied().unwrap_or(0) == 0
            && let Some(c) = visit(v, edges, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let names = modules(&src);
    names
        .iter()
        .filter(|(m, _)| !m.is_empty())
        .map(|(m, path)| {
            let text = std::fs::read_to_string(path).expect("read module");
            (m.clone(), references(&names, m, &code(&text)))
        })
        .collect()
}

#[test]
fn no_import_cycles() {
    let g = graph();
    assert!(g.len() > 20, "modules found: {:?}", g.keys());
    if let Some(c) = cycle(&g) {
        panic!("import cycle between modules: {}", c.join(" -> "));
    }
}

#[test]
fn the_checker_sees_references() {
    // the graph is not empty by accident: known edges are found
    let g = graph();
    let has = |from: &str, to: &str| g.get(from).is_some_and(|d| d.contains(to));
    assert!(has("parser", "lexer"), "{:?}", g.get("parser"));
    assert!(
        has("compile::check", "compile::compiler"),
        "{:?}",
        g.get("compile::check")
    );
    assert!(has("compile", "compile::check"), "{:?}", g.get("compile"));
    assert!(
        has("compile::sandbox", "devcontainer::vars"),
        "{:?}",
        g.get("compile::sandbox")
    );
    let mut with_cycle = g.clone();
    with_cycle
        .entry("lexer".to_owned())
        .or_default()
        .insert("parser".to_owned());
    assert!(cycle(&with_cycle).is_some());
}
