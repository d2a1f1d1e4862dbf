//! `glob`, `grep` and `search_codebase`: a walk of the work directory (skipping `.git`, never following a
//! symbolic link), bounded in results.

use super::confine::Root;
use super::{resolve, tool_err};
use crate::error::Result;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// At most this many paths (glob) or matching lines (grep) are returned.
pub const MAX_RESULTS: usize = 1000;
/// `search_codebase` skips files larger than this.
pub const MAX_SEARCHED_FILE: u64 = 4 << 20;
/// A matching line longer than this is cut in `search_codebase` results.
pub const MAX_LINE_CHARS: usize = 400;

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

/// `search_codebase`: the lines of the work directory's text files (below `path`, names matching `glob`)
/// that contain `query` (case-insensitive unless `case_sensitive`; a regular expression with `regex`), as
/// `file:line: text`.
pub(super) fn search_codebase(root: &Root, input: &Value) -> Result<String> {
    const TOOL: &str = "search_codebase";
    let query = super::str_arg(TOOL, input, "query")?;
    if query.is_empty() {
        return Err(tool_err(TOOL, "query is empty"));
    }
    let pattern = if input["regex"].as_bool().unwrap_or(false) {
        query
    } else {
        regex::escape(&query)
    };
    let re = regex::RegexBuilder::new(&pattern)
        .case_insensitive(!input["case_sensitive"].as_bool().unwrap_or(false))
        .size_limit(1 << 20)
        .build()
        .map_err(|e| tool_err(TOOL, e.to_string()))?;
    let filter = match input["glob"].as_str() {
        Some(g) => Some(
            globset::Glob::new(g)
                .map_err(|e| tool_err(TOOL, e.to_string()))?
                .compile_matcher(),
        ),
        None => None,
    };
    let start = root.confine(TOOL, input["path"].as_str().unwrap_or("."))?;
    let mut files = Vec::new();
    match start.symlink_metadata() {
        Ok(m) if m.is_file() => files.push(start),
        Ok(m) if m.is_dir() => walk(&start, &mut files),
        Ok(_) => {
            return Err(tool_err(
                TOOL,
                format!("{} is not a file or directory", root.shown(&start)),
            ));
        }
        Err(e) => return Err(tool_err(TOOL, format!("{}: {e}", root.shown(&start)))),
    }
    let mut out = Vec::new();
    for f in files {
        let name = root.shown(&f);
        if let Some(m) = &filter
            && !m.is_match(&name)
            && !f.file_name().is_some_and(|n| m.is_match(n))
        {
            continue;
        }
        if f.metadata().map_or(true, |m| m.len() > MAX_SEARCHED_FILE) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue; // binary or unreadable
        };
        for (i, line) in text.lines().enumerate() {
            if !re.is_match(line) {
                continue;
            }
            if out.len() == MAX_RESULTS {
                out.push(format!(
                    "[stopped at {MAX_RESULTS} matches; narrow the query, path or glob]"
                ));
                return Ok(out.join("\n"));
            }
            let shown: String = line.trim().chars().take(MAX_LINE_CHARS).collect();
            out.push(format!("{name}:{}: {shown}", i + 1));
        }
    }
    Ok(if out.is_empty() {
        format!("no matches for '{}'", input["query"].as_str().unwrap_or_default())
    } else {
        out.join("\n")
    })
}
