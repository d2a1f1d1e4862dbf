//! The runner builtins, executed inside the runner (so inside the sandbox): `bash`, `read_file`,
//! `write_file`, `file_edit`, `glob`, `grep`, `web_fetch`, and the names the reference's workflows give claw
//! nodes: `list_files`, `tree`, `search_codebase`, `git_status`, `git_diff`, `run_command`, `patch`,
//! `read_image`. Relative paths resolve against the task's `work_dir`; the paths of the later eight are
//! confined to it (see `confine`), links included. `readonly` keeps only [`READONLY`]; every output is capped
//! at [`OUTPUT_CAP`] bytes.

mod confine;
mod fs;
mod git;
mod image;
mod listing;
mod patch;
mod search;
mod shell;

use crate::error::{Error, Result};
use crate::provider::ToolSpec;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Every builtin, in a stable order.
pub const BUILTINS: &[&str] = &[
    "bash",
    "read_file",
    "write_file",
    "file_edit",
    "glob",
    "grep",
    "web_fetch",
    "list_files",
    "tree",
    "search_codebase",
    "git_status",
    "git_diff",
    "run_command",
    "patch",
    "read_image",
];
/// The builtins kept by `readonly`: those that change nothing (the reference's read-only names among them).
pub const READONLY: &[&str] = &[
    "read_file",
    "glob",
    "grep",
    "list_files",
    "tree",
    "search_codebase",
    "git_status",
    "git_diff",
    "read_image",
];
/// Cap of one tool output, in bytes; the excess is replaced by a truncation note.
pub const OUTPUT_CAP: usize = 100 * 1024;

/// The builtins available to one task.
#[derive(Debug, Clone)]
pub struct Builtins {
    work_dir: PathBuf,
    enabled: Vec<&'static str>,
    http: reqwest::Client,
    shell_env: iterion_boundary::Env,
}

impl Builtins {
    /// The builtins named in `allowed` (unknown names ignored), restricted by `readonly`; `web_fetch` goes
    /// through `proxy` when given.
    pub fn new(work_dir: &Path, allowed: &[String], readonly: bool, proxy: Option<&str>) -> Result<Self> {
        let enabled = BUILTINS
            .iter()
            .copied()
            .filter(|b| allowed.iter().any(|a| a == b))
            .filter(|b| !readonly || READONLY.contains(b))
            .collect();
        let mut hb = reqwest::Client::builder()
            .no_proxy()
            .timeout(std::time::Duration::from_secs(60));
        if let Some(p) = proxy.filter(|p| !p.is_empty()) {
            hb = hb.proxy(reqwest::Proxy::all(p).map_err(|e| Error::Client {
                message: format!("proxy url: {e}"),
            })?);
        }
        let http = hb.build().map_err(|e| Error::Client {
            message: e.to_string(),
        })?;
        Ok(Builtins {
            work_dir: work_dir.to_path_buf(),
            enabled,
            http,
            shell_env: iterion_boundary::Env::new(),
        })
    }

    /// The whole environment `bash` commands start with (empty unless set: nothing of the runner's own
    /// environment is inherited).
    #[must_use]
    pub fn with_shell_env(mut self, env: iterion_boundary::Env) -> Self {
        self.shell_env = env;
        self
    }

    /// Whether `name` is an enabled builtin.
    pub fn has(&self, name: &str) -> bool {
        self.enabled.contains(&name)
    }

    /// The specs of the enabled builtins, for the model.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.enabled.iter().map(|n| spec(n)).collect()
    }

    /// Runs builtin `name` with `input`; the text goes back to the model.
    pub async fn run(&self, name: &str, input: &Value) -> Result<String> {
        if !self.has(name) {
            return Err(tool_err(name, "tool is not available"));
        }
        let out = match name {
            // capped per stream, so the JSON stays whole
            "bash" | "run_command" => return shell::bash(name, &self.work_dir, &self.shell_env, input).await,
            "read_file" => fs::read_file(&self.path(name, input, "path")?, input)?,
            "write_file" => fs::write_file(&self.path(name, input, "path")?, input)?,
            "file_edit" => fs::file_edit(&self.path(name, input, "path")?, input)?,
            "glob" => search::glob(&self.work_dir, &str_arg(name, input, "pattern")?)?,
            "grep" => search::grep(&self.work_dir, input)?,
            "web_fetch" => shell::web_fetch(&self.http, &str_arg(name, input, "url")?).await?,
            "list_files" => listing::list_files(&self.root(name)?, input)?,
            "tree" => listing::tree(&self.root(name)?, input)?,
            "search_codebase" => search::search_codebase(&self.root(name)?, input)?,
            "git_status" => git::git_status(&self.root(name)?, &self.shell_env).await?,
            "git_diff" => git::git_diff(&self.root(name)?, &self.shell_env, input).await?,
            "patch" => patch::patch(&self.root(name)?, input)?,
            // bounded below the cap by its own size limit
            "read_image" => return image::read_image(&self.root(name)?, &str_arg(name, input, "path")?),
            other => return Err(tool_err(other, "tool is not available")),
        };
        Ok(cap(out))
    }

    fn root(&self, tool: &str) -> Result<confine::Root> {
        confine::Root::new(tool, &self.work_dir)
    }

    fn path(&self, tool: &str, input: &Value, key: &str) -> Result<PathBuf> {
        Ok(resolve(&self.work_dir, &str_arg(tool, input, key)?))
    }
}

/// `p` against `work_dir` when relative.
pub(crate) fn resolve(work_dir: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        work_dir.join(p)
    }
}

pub(crate) fn tool_err(tool: &str, message: impl Into<String>) -> Error {
    Error::Tool {
        tool: tool.into(),
        message: message.into(),
    }
}

pub(crate) fn str_arg(tool: &str, input: &Value, key: &str) -> Result<String> {
    input[key]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| tool_err(tool, format!("missing string argument '{key}'")))
}

/// Truncates `s` to [`OUTPUT_CAP`] bytes.
pub(crate) fn cap(s: String) -> String {
    cap_at(s, OUTPUT_CAP)
}

/// Truncates `s` to `limit` bytes at a char boundary, noting how much was dropped.
pub(crate) fn cap_at(s: String, limit: usize) -> String {
    if s.len() <= limit {
        return s;
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[output truncated: {} of {} bytes shown]",
        &s[..end],
        end,
        s.len()
    )
}

fn spec(name: &str) -> ToolSpec {
    let (description, schema) = match name {
        "bash" | "run_command" => (
            "Run a shell command in the work directory; returns stdout, stderr and exit_code.",
            json!({"type": "object", "properties": {"command": {"type": "string"}, "timeout_ms": {"type": "integer"}}, "required": ["command"]}),
        ),
        "read_file" => (
            "Read a text file; offset is the first line (0-based), limit the number of lines.",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}, "limit": {"type": "integer"}}, "required": ["path"]}),
        ),
        "write_file" => (
            "Write a file, creating parent directories.",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}),
        ),
        "file_edit" => (
            "Replace old_string with new_string in a file; old_string must be unique unless replace_all.",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}, "replace_all": {"type": "boolean"}}, "required": ["path", "old_string", "new_string"]}),
        ),
        "glob" => (
            "List files matching a glob pattern relative to the work directory.",
            json!({"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]}),
        ),
        "grep" => (
            "Search files for a regular expression; optional path and file-name glob.",
            json!({"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}, "glob": {"type": "string"}}, "required": ["pattern"]}),
        ),
        "list_files" => (
            "List a directory of the work directory (default: its top); recursive descends, to max_depth levels when given. Directories end with /.",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "recursive": {"type": "boolean"}, "max_depth": {"type": "integer", "minimum": 1}}}),
        ),
        "tree" => (
            "Show an indented tree of a directory of the work directory (default: all of it), max_depth levels deep (default 3); .git is skipped.",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "max_depth": {"type": "integer", "minimum": 1}}}),
        ),
        "search_codebase" => (
            "Search the text files of the work directory for query (case-insensitive text, or a regular expression with regex); optional path and file-name glob. Results are file:line: text.",
            json!({"type": "object", "properties": {"query": {"type": "string"}, "path": {"type": "string"}, "glob": {"type": "string"}, "regex": {"type": "boolean"}, "case_sensitive": {"type": "boolean"}}, "required": ["query"]}),
        ),
        "git_status" => (
            "Show git status --short --branch of the work directory.",
            json!({"type": "object", "properties": {}}),
        ),
        "git_diff" => (
            "Show the git diff of the work directory: unstaged changes, staged ones with staged, or against the revision base; only below path when given.",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "staged": {"type": "boolean"}, "base": {"type": "string"}}}),
        ),
        "patch" => (
            "Apply a unified diff (diff -u or git diff format) to files of the work directory, all or nothing; /dev/null creates or deletes a file.",
            json!({"type": "object", "properties": {"patch": {"type": "string"}}, "required": ["patch"]}),
        ),
        "read_image" => (
            "Read a PNG, JPEG, GIF or WebP image of the work directory (at most 72 KiB); returns its media_type and base64 data.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        ),
        _ => (
            "Fetch a URL over HTTP(S) and return the body text.",
            json!({"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}),
        ),
    };
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: schema,
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod workspace_tests;
