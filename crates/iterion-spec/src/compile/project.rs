//! The project-level MCP server check: the server names a workflow uses (`mcp.servers` and `mcp.disable`,
//! of the workflow and of its nodes) must be declared `mcp_server`s or servers of the project's `.mcp.json`
//! (the file next to the workflow file, unless the caller turned that off). `C025` for an unknown name, and
//! for a `.mcp.json` server whose transport settings disagree.
//!
//! The caller reads `.mcp.json`; this module only parses the text it is given.

use serde_json::Value;

use super::check::{Checked, check_bytes};
use crate::diag::Diagnostic;
use crate::model::{McpBlock, Workflow};

pub use crate::model::ProjectMcpServer;

/// Parses the text of a `.mcp.json` (`file` names it in diagnostics): its servers, and a `C025` error for the
/// file when it is not an object with an optional `mcpServers` object, or for each server whose transport
/// settings disagree (stdio needs a command and takes no url; http and sse need a url and take no command or
/// args).
pub fn read_mcp_json(text: &str, file: &str) -> (Vec<ProjectMcpServer>, Vec<Diagnostic>) {
    let bad = |m: String| vec![Diagnostic::error("C025", file, 1, 1, m)];
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return (Vec::new(), bad(format!("cannot read {file}: {e}"))),
    };
    let servers = match v.get("mcpServers") {
        None => return (Vec::new(), Vec::new()),
        Some(Value::Object(m)) => m,
        Some(_) => return (Vec::new(), bad(format!("{file}: mcpServers is not an object"))),
    };
    let mut out = Vec::new();
    let mut diags = Vec::new();
    for (name, s) in servers {
        let text = |k: &str| s.get(k).and_then(Value::as_str).map(str::to_string);
        let args: Vec<String> = s
            .get("args")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let command = text("command");
        let url = text("url");
        let transport = text("type").or_else(|| text("transport")).or_else(|| {
            if command.is_some() {
                Some("stdio".into())
            } else if url.is_some() {
                Some("http".into())
            } else {
                None
            }
        });
        let problem = match transport.as_deref() {
            None => Some("no transport (set command or url)"),
            Some("stdio") if command.is_none() => Some("stdio transport needs a command"),
            Some("stdio") if url.is_some() => Some("stdio transport does not take a url"),
            Some("http" | "sse") if url.is_none() => Some("http and sse transports need a url"),
            Some("http" | "sse") if command.is_some() || !args.is_empty() => {
                Some("http and sse transports do not take command or args")
            }
            Some("stdio" | "http" | "sse") => None,
            Some(_) => Some("unknown transport (want stdio, http or sse)"),
        };
        if let Some(p) = problem {
            diags.push(Diagnostic::error(
                "C025",
                file,
                1,
                1,
                format!("{file}: mcp server '{name}': {p}"),
            ));
        }
        let strings = |k: &str| -> std::collections::BTreeMap<String, String> {
            s.get(k)
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                        .collect()
                })
                .unwrap_or_default()
        };
        out.push(ProjectMcpServer {
            name: name.clone(),
            transport,
            command,
            url,
            args,
            env: strings("env"),
            headers: strings("headers"),
            auth: s.get("auth").is_some_and(|a| !a.is_null()),
        });
    }
    (out, diags)
}

/// `C025` for every server name used by the workflow (in `mcp.servers` or `mcp.disable`, of the workflow or
/// of a node) that is neither a declared `mcp_server` nor in `project`.
pub fn project_mcp_refs(w: &Workflow, project: &[ProjectMcpServer]) -> Vec<Diagnostic> {
    let known =
        |n: &str| w.mcp_servers.iter().any(|m| m.name.value == n) || project.iter().any(|p| p.name == n);
    let mut out = Vec::new();
    let mut check = |owner: String, m: &McpBlock, fallback: crate::model::Span| {
        for s in m.servers.iter().flatten() {
            if !known(&s.value) {
                out.push(
                    Diagnostic::error(
                        "C025",
                        &w.file,
                        s.span.line,
                        s.span.col,
                        format!("mcp: {owner}: unknown MCP server '{}'", s.value),
                    )
                    .with_end(s.span.end_line, s.span.end_col.max(s.span.col)),
                );
            }
        }
        for s in m.disable.iter().flatten() {
            if !known(s) {
                out.push(Diagnostic::error(
                    "C025",
                    &w.file,
                    fallback.line,
                    fallback.col,
                    format!("mcp: {owner}: unknown MCP server '{s}' in disable"),
                ));
            }
        }
    };
    if let Some(m) = &w.mcp {
        check(format!("workflow '{}'", w.name.value), m, w.name.span);
    }
    for n in &w.nodes {
        if let Some(m) = &n.mcp {
            check(format!("node '{}'", n.name.value), m, n.name.span);
        }
    }
    out.sort_by_key(|d| (d.line, d.col));
    out
}

/// [`check_bytes`], then the project-level MCP server check against `mcp_json` (the text of the project's
/// `.mcp.json`, `None` when there is none or the caller turned project servers off).
pub fn check_project(bytes: &[u8], file: &str, mcp_json: Option<&str>) -> Checked {
    let mut c = check_bytes(bytes, file);
    if c.has_errors() && c.workflows.is_empty() {
        return c;
    }
    let (project, mut diags) = match mcp_json {
        Some(t) => read_mcp_json(t, ".mcp.json"),
        None => (Vec::new(), Vec::new()),
    };
    if let Some(w) = c.workflows.first() {
        diags.extend(project_mcp_refs(w, &project));
    }
    c.diagnostics.extend(diags);
    crate::diag::sort(&mut c.diagnostics);
    c
}
