//! `list_files` and `tree`: directory listings of the work directory, bounded in depth and entries, never
//! following a symbolic link and never entering `.git`.

use super::confine::Root;
use super::search::MAX_RESULTS;
use super::tool_err;
use crate::error::Result;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Depth of `tree` when the call gives none.
pub const DEFAULT_TREE_DEPTH: u64 = 3;
/// Deepest `tree` and recursive `list_files` go.
pub const MAX_DEPTH: u64 = 20;

/// One entry of a directory: its path, and what it is.
struct Entry {
    path: PathBuf,
    kind: Kind,
}

enum Kind {
    Dir,
    File,
    Link(String),
    Other,
}

/// The entries of `dir`, sorted by name, `.git` left out; unreadable directories are empty.
fn entries(dir: &Path) -> Vec<Entry> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<Entry> = rd
        .flatten()
        .filter(|e| e.file_name() != ".git")
        .map(|e| {
            let path = e.path();
            let kind = match e.file_type() {
                Ok(t) if t.is_dir() => Kind::Dir,
                Ok(t) if t.is_file() => Kind::File,
                Ok(t) if t.is_symlink() => Kind::Link(
                    std::fs::read_link(&path)
                        .map(|t| t.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                ),
                _ => Kind::Other,
            };
            Entry { path, kind }
        })
        .collect();
    out.sort_by(|a, b| a.path.file_name().cmp(&b.path.file_name()));
    out
}

fn label(name: &str, kind: &Kind) -> String {
    match kind {
        Kind::Dir => format!("{name}/"),
        Kind::Link(target) => format!("{name} -> {target}"),
        Kind::File | Kind::Other => name.to_string(),
    }
}

/// The directory `input[path]` names (the work directory when absent), confined.
fn start(root: &Root, tool: &str, input: &Value) -> Result<PathBuf> {
    let dir = root.confine(tool, input["path"].as_str().unwrap_or("."))?;
    match dir.symlink_metadata() {
        Ok(m) if m.is_dir() => Ok(dir),
        Ok(_) => Err(tool_err(tool, format!("{} is not a directory", root.shown(&dir)))),
        Err(e) => Err(tool_err(tool, format!("{}: {e}", root.shown(&dir)))),
    }
}

fn depth_arg(tool: &str, input: &Value, key: &str, default: u64) -> Result<u64> {
    match &input[key] {
        Value::Null => Ok(default),
        v => v
            .as_u64()
            .filter(|d| *d >= 1)
            .map(|d| d.min(MAX_DEPTH))
            .ok_or_else(|| tool_err(tool, format!("'{key}' must be a positive integer"))),
    }
}

/// `out` as lines, with a note when the listing stopped at [`MAX_RESULTS`] entries.
fn bounded(mut out: Vec<String>, truncated: bool, empty: &str) -> String {
    if out.is_empty() {
        return empty.into();
    }
    if truncated {
        out.push(format!("[listing truncated at {MAX_RESULTS} entries]"));
    }
    out.join("\n")
}

/// `list_files`: the entries of a directory as paths relative to the work directory (directories end with
/// `/`, links show their target); `recursive` descends (to `max_depth` levels when given).
pub(super) fn list_files(root: &Root, input: &Value) -> Result<String> {
    let dir = start(root, "list_files", input)?;
    let recursive = input["recursive"].as_bool().unwrap_or(false);
    let depth = if recursive {
        depth_arg("list_files", input, "max_depth", MAX_DEPTH)?
    } else {
        1
    };
    let mut out = Vec::new();
    let mut stack = vec![(dir, 1)];
    while let Some((d, level)) = stack.pop() {
        for e in entries(&d) {
            if out.len() == MAX_RESULTS {
                out.sort();
                return Ok(bounded(out, true, ""));
            }
            out.push(label(&root.shown(&e.path), &e.kind));
            if matches!(e.kind, Kind::Dir) && level < depth {
                stack.push((e.path, level + 1));
            }
        }
    }
    out.sort();
    Ok(bounded(out, false, "(empty directory)"))
}

/// `tree`: an indented tree of a directory, two spaces a level, to `max_depth` levels (default
/// [`DEFAULT_TREE_DEPTH`]).
pub(super) fn tree(root: &Root, input: &Value) -> Result<String> {
    let dir = start(root, "tree", input)?;
    let depth = depth_arg("tree", input, "max_depth", DEFAULT_TREE_DEPTH)?;
    let mut out = vec![format!("{}/", root.shown(&dir))];
    let truncated = !walk_tree(&dir, 1, depth, &mut out);
    Ok(bounded(out, truncated, ""))
}

/// Appends the entries below `dir`; `false` once [`MAX_RESULTS`] entries are listed (the walk stops).
fn walk_tree(dir: &Path, level: u64, depth: u64, out: &mut Vec<String>) -> bool {
    for e in entries(dir) {
        if out.len() > MAX_RESULTS {
            return false;
        }
        let name = e
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push(format!(
            "{}{}",
            "  ".repeat(level as usize),
            label(&name, &e.kind)
        ));
        if matches!(e.kind, Kind::Dir) && level < depth && !walk_tree(&e.path, level + 1, depth, out) {
            return false;
        }
    }
    true
}
