//! `read_file`, `write_file`, `file_edit`.

use super::tool_err;
use crate::error::Result;
use serde_json::Value;
use std::path::Path;

/// Lines returned by `read_file` when no limit is given.
pub const DEFAULT_READ_LINES: u64 = 2000;

pub(super) fn read_file(path: &Path, input: &Value) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| tool_err("read_file", format!("{}: {e}", path.display())))?;
    let offset = input["offset"].as_u64().unwrap_or(0) as usize;
    let limit = input["limit"].as_u64().unwrap_or(DEFAULT_READ_LINES) as usize;
    if offset == 0 && text.lines().count() <= limit {
        return Ok(text);
    }
    let mut out: String = text
        .lines()
        .skip(offset)
        .take(limit)
        .collect::<Vec<_>>()
        .join("\n");
    out.push('\n');
    Ok(out)
}

pub(super) fn write_file(path: &Path, input: &Value) -> Result<String> {
    let content = super::str_arg("write_file", input, "content")?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| tool_err("write_file", format!("{}: {e}", parent.display())))?;
    }
    std::fs::write(path, &content).map_err(|e| tool_err("write_file", format!("{}: {e}", path.display())))?;
    Ok(format!("wrote {} bytes to {}", content.len(), shown(input)))
}

pub(super) fn file_edit(path: &Path, input: &Value) -> Result<String> {
    let old = super::str_arg("file_edit", input, "old_string")?;
    let new = super::str_arg("file_edit", input, "new_string")?;
    let all = input["replace_all"].as_bool().unwrap_or(false);
    if old.is_empty() {
        return Err(tool_err("file_edit", "old_string is empty"));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| tool_err("file_edit", format!("{}: {e}", path.display())))?;
    let n = text.matches(&old).count();
    if n == 0 {
        return Err(tool_err(
            "file_edit",
            format!("old_string not found in {}", path.display()),
        ));
    }
    if n > 1 && !all {
        return Err(tool_err(
            "file_edit",
            format!(
                "old_string occurs {n} times in {}; set replace_all or give more context",
                path.display()
            ),
        ));
    }
    let edited = if all {
        text.replace(&old, &new)
    } else {
        text.replacen(&old, &new, 1)
    };
    std::fs::write(path, edited).map_err(|e| tool_err("file_edit", format!("{}: {e}", path.display())))?;
    Ok(format!(
        "replaced {} occurrence(s) in {}",
        if all { n } else { 1 },
        path.display()
    ))
}

/// The path as the model gave it, for result texts.
fn shown(input: &Value) -> &str {
    input["path"].as_str().unwrap_or_default()
}
