//! `iterion validate FILE…`: parse and compile workflow files, check that `iterion run` would execute them,
//! and print every diagnostic.
//!
//! Checks, in order: the language (lexing, parsing, compiling); the MCP server names a workflow uses, which
//! may also come from the `.mcp.json` next to the file (not read when `ITERION_MCP_AUTOLOAD` is `0` or
//! `false`); then, when the file is valid, the executability check `iterion run` applies (`X…`: constructs
//! the language has but this version does not execute), and the refusal a plain `iterion run FILE` gives a
//! codex node that its sandbox settings place in a container (`X011`; `--sandbox none` or the node's
//! `sandbox: none` lifts it). `--syntax-only` stops after the language.
//!
//! Exit codes: 0 when no file has an error-severity diagnostic, 1 when any has, 2 when a file cannot be read
//! (usage errors are exit 2 through clap). Every file is processed even when an earlier one fails.

use crate::render;
use iterion_spec::diag::{Diagnostic, Severity};
use iterion_spec::model::{SandboxDecl, Workflow};
use iterion_spec::source::FileRead;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The most diagnostics printed per file in human output; the rest are counted.
const MAX_SHOWN: usize = 50;

/// Arguments of `iterion validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Workflow files (.bot / .iter; any extension is accepted when named explicitly), or directories: every
    /// .bot and .iter file below them.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print one JSON object per file, one per line.
    #[arg(long)]
    pub json: bool,
    /// Check only the language (lexing, parsing, compiling), not whether `iterion run` would execute it.
    #[arg(long)]
    pub syntax_only: bool,
}

/// The text of the `.mcp.json` next to a workflow file, unless `ITERION_MCP_AUTOLOAD` is `0` or `false` or
/// there is no such file.
pub(crate) fn project_mcp_json(file: &Path, env: &BTreeMap<String, String>) -> Option<String> {
    if env
        .get("ITERION_MCP_AUTOLOAD")
        .is_some_and(|v| v == "0" || v.eq_ignore_ascii_case("false"))
    {
        return None;
    }
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::read_to_string(dir.join(".mcp.json")).ok()
}

/// Checks a workflow file the way `iterion validate` does: the language and the project's MCP servers, then
/// (unless `syntax_only`) the executability check of `iterion run` on every workflow that compiled, as `run`
/// applies it, so both report the same refusals.
pub(crate) fn check_file(
    bytes: &[u8],
    path: &Path,
    label: &str,
    env: &BTreeMap<String, String>,
    syntax_only: bool,
) -> iterion_spec::Checked {
    let mcp = project_mcp_json(path, env);
    let mut checked = iterion_spec::check_project(bytes, label, mcp.as_deref());
    if let Some(text) = &mcp {
        // the executability check sees the project's servers as `iterion run` does
        let servers = iterion_spec::compile::read_mcp_json(text, ".mcp.json").0;
        for w in &mut checked.workflows {
            w.project_mcp_servers = servers.clone();
        }
    }
    if !syntax_only {
        add_refusals(&mut checked, env);
        // the launch refusal of a codex node placed in a container, for a run without flags
        for w in &checked.workflows {
            checked
                .diagnostics
                .extend(iterion_runtime::exec::codex::placement_diagnostics(w, env));
        }
        iterion_spec::diag::sort(&mut checked.diagnostics);
    }
    checked
}

/// Adds the `X…` diagnostics of the executability check of `iterion run` for every compiled workflow.
pub(crate) fn add_refusals(checked: &mut iterion_spec::Checked, env: &BTreeMap<String, String>) {
    for w in &checked.workflows {
        checked
            .diagnostics
            .extend(iterion_runtime::exec::check_executable(w, env));
    }
    iterion_spec::diag::sort(&mut checked.diagnostics);
}

#[derive(Serialize)]
struct FileReport<'a> {
    file: String,
    ok: bool,
    diagnostics: Vec<JsonDiag<'a>>,
    workflows: Vec<JsonWorkflow<'a>>,
}

#[derive(Serialize)]
struct JsonDiag<'a> {
    code: &'a str,
    severity: Severity,
    message: &'a str,
    line: u32,
    col: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<&'a str>,
}

#[derive(Serialize)]
struct JsonWorkflow<'a> {
    name: &'a str,
    entry: Option<&'a str>,
    sandbox: Option<&'a SandboxDecl>,
    nodes: Vec<JsonNode<'a>>,
}

#[derive(Serialize)]
struct JsonNode<'a> {
    name: &'a str,
    kind: &'a str,
    sandbox: Option<&'a SandboxDecl>,
}

fn json_workflow(w: &Workflow) -> JsonWorkflow<'_> {
    JsonWorkflow {
        name: w.name.as_str(),
        entry: w.entry.as_ref().map(|e| e.as_str()),
        sandbox: w.sandbox.as_ref(),
        nodes: w
            .nodes
            .iter()
            .map(|n| JsonNode {
                name: n.name.as_str(),
                kind: n.kind.as_str(),
                sandbox: n.sandbox.as_deref(),
            })
            .collect(),
    }
}

fn json_diag(d: &Diagnostic) -> JsonDiag<'_> {
    JsonDiag {
        code: d.code,
        severity: d.severity,
        message: &d.message,
        line: d.line,
        col: d.col,
        hint: d.hint.as_deref(),
    }
}

/// The `.bot` and `.iter` files below `dir`, sorted, skipping hidden directories and `target/` (a directory
/// given to `validate` stands for the workflows it holds). Symbolic links are not followed.
fn workflows_below(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = rd.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                workflows_below(&e.path(), out);
            }
        } else if ft.is_file() && (name.ends_with(".bot") || name.ends_with(".iter")) {
            out.push(e.path());
        }
    }
}

/// Runs the command, writing results to stdout and problems with files to stderr.
pub fn run(args: ValidateArgs, env: &BTreeMap<String, String>) -> ExitCode {
    let stdout = std::io::stdout();
    let colour = render::colour_on(std::io::IsTerminal::is_terminal(&stdout), env);
    let mut out = stdout.lock();
    let mut worst = 0u8;
    let mut files = Vec::new();
    for path in &args.files {
        if path.is_dir() {
            let before = files.len();
            workflows_below(path, &mut files);
            if files.len() == before {
                eprintln!(
                    "error: no .bot or .iter file in {}",
                    crate::terminal::clean(&path.display().to_string())
                );
                worst = 2;
            }
        } else {
            files.push(path.clone());
        }
    }
    for path in &files {
        let label = path.display().to_string();
        // Regular files only, bounded: a FIFO, a device or a file over the size limit is never read.
        let limit = iterion_spec::lexer::MAX_SOURCE_BYTES as u64;
        let (bytes, checked) = match iterion_spec::source::read_regular(path, limit) {
            FileRead::Found(bytes) => {
                let checked = check_file(&bytes, path, &label, env, args.syntax_only);
                (bytes, checked)
            }
            FileRead::TooLarge(_) => (
                Vec::new(),
                iterion_spec::Checked {
                    workflows: Vec::new(),
                    diagnostics: vec![iterion_spec::lexer::too_large(&label)],
                },
            ),
            other => {
                eprintln!("error: cannot read {}: {other}", crate::terminal::clean(&label));
                worst = worst.max(2);
                continue;
            }
        };
        let failed = checked.has_errors();
        if failed {
            worst = worst.max(1);
        }
        let result = if args.json {
            let report = FileReport {
                file: label.clone(),
                ok: !failed,
                diagnostics: checked.diagnostics.iter().map(json_diag).collect(),
                workflows: checked.workflows.iter().map(json_workflow).collect(),
            };
            serde_json::to_string(&report)
                .map_err(std::io::Error::other)
                .and_then(|line| writeln!(out, "{line}"))
        } else {
            let text = std::str::from_utf8(&bytes).ok();
            write_human(&mut out, &label, text, &checked.diagnostics, failed, colour)
        };
        if let Err(e) = result {
            // stdout closed (for example piped into `head`): nothing more can be reported there.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                break;
            }
            eprintln!("error: writing output: {e}");
            return ExitCode::from(2);
        }
    }
    ExitCode::from(worst)
}

fn write_human(
    out: &mut impl Write,
    label: &str,
    text: Option<&str>,
    diags: &[Diagnostic],
    failed: bool,
    colour: bool,
) -> std::io::Result<()> {
    // The parser strips a BOM and turns CR LF into LF before counting lines and columns; do the same here
    // so the excerpt shows the line the diagnostic counts.
    let normalised = text.map(|t| t.strip_prefix('\u{feff}').unwrap_or(t).replace("\r\n", "\n"));
    for d in diags.iter().take(MAX_SHOWN) {
        writeln!(
            out,
            "{}",
            render::render_coloured(d, normalised.as_deref(), colour)
        )?;
    }
    if diags.len() > MAX_SHOWN {
        writeln!(out, "… and {} more", diags.len() - MAX_SHOWN)?;
    }
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let warnings = diags.len() - errors;
    let verdict = if failed { "invalid" } else { "ok" };
    writeln!(
        out,
        "{}: {verdict} ({errors} error(s), {warnings} warning(s))",
        crate::terminal::clean(label)
    )
}
