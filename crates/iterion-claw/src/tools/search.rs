//! `glob` and `grep`: a walk of the work directory (skipping `.git`), bounded in results.

use super::{resolve, tool_err};
use crate::error::Result;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// At most this many paths (glob) or matching lines (grep) are returned.
pub const MAX_RESULTS: usize = 1000;

fn walk(root: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(root) else { return };
    let mut entries: Vec<_> = rd.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            if e.file_name() != ".git" {
                walk(&p, out);
            }
        } else if ft.is_file() {
            out.push(p);
        }
    }
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).to_string_lossy().into_owned()
}

pub(super) fn glob(work_dir: &Path, pattern: &str) -> Result<String> {
    let m = globset::Glob::new(pattern)
        .map_err(|e| tool_err("glob", e.to_string()))?
        .compile_matcher();
    let mut files = Vec::new();
    walk(work_dir, &mut files);
    let hits: Vec<String> = files
        .iter()
        .map(|p| rel(work_dir, p))
        .filter(|r| m.is_match(r))
        .collect();
    if hits.is_empty() {
        return Ok("no files match".into());
    }
    let mut out: Vec<String> = hits.iter().take(MAX_RESULTS).cloned().collect();
    if hits.len() > MAX_RESULTS {
        out.push(format!("[{} more not shown]", hits.len() - MAX_RESULTS));
    }
    Ok(out.join("\n"))
}

pub(super) fn grep(work_dir: &Path, input: &Value) -> Result<String> {
    let pattern = super::str_arg("grep", input, "pattern")?;
    let re = regex::Regex::new(&pattern).map_err(|e| tool_err("grep", e.to_string()))?;
    let root = input["path"]
        .as_str()
        .map_or_else(|| work_dir.to_path_buf(), |p| resolve(work_dir, p));
    let filter = match input["glob"].as_str() {
        Some(g) => Some(
            globset::Glob::new(g)
                .map_err(|e| tool_err("grep", e.to_string()))?
                .compile_matcher(),
        ),
        None => None,
    };
    let mut files = Vec::new();
    if root.is_file() {
        files.push(root.clone());
    } else {
        walk(&root, &mut files);
    }
    let mut out = Vec::new();
    for f in files {
        let name = rel(work_dir, &f);
        if let Some(m) = &filter
            && !m.is_match(&name)
            && !f.file_name().is_some_and(|n| m.is_match(n))
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        }; // binary or unreadable
        for (i, line) in text.lines().enumerate() {
            if re.is_match(line) {
                if out.len() == MAX_RESULTS {
                    out.push("[more matches not shown]".to_string());
                    return Ok(out.join("\n"));
                }
                out.push(format!("{name}:{}:{line}", i + 1));
            }
        }
    }
    Ok(if out.is_empty() {
        "no matches".into()
    } else {
        out.join("\n")
    })
}
