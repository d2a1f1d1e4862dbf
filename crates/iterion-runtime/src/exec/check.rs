//! The executability check (10.1): constructs the parser accepts but this version cannot execute are refused
//! before any run record exists, with positioned `X…` diagnostics. Nothing is ever skipped silently.
//!
//! Backends: `claw` (the default, run by `iterion __claw-runner`), `claude_code` and `codex` (the host codex
//! CLI; a launch that would place a codex node in a container is refused before the run starts, see
//! [`super::codex`]) are executed. A claw node must use a provider the runner speaks (`anthropic`, `openai`, or
//! an OpenAI-compatible name the runner maps, see `iterion_claw::provider::COMPATIBLE`) and only runner builtin
//! tools (`iterion_claw::tools::BUILTINS`, which include the reference's `list_files`, `tree`,
//! `search_codebase`, `git_status`, `git_diff`, `run_command`, `patch` and `read_image`); anything else, MCP
//! tools and the `agent` sub-agent tool among them, is `X006`. Any other backend is refused with `X002`.
//!
//! Attachments (`attachments:` and `{{attachments.…}}`) are executed (see [`crate::attachments`]); `X004` and
//! `X005` no longer apply to them. `.url` renders as empty text with a warning at run time.
//!
//! Sessions other than `fresh` and MCP servers are executed on `claude_code` nodes (stdio servers only); on
//! claw nodes they stay refused (`X003` for `session`, `X004` for a non-empty MCP active set), as do http/sse
//! servers and `auth` blocks (`X004`). Unknown MCP server names are the compiler's `C025`, reported by
//! [`super::mcp::load_project`] with the project's `.mcp.json`.
//!
//! ```
//! use std::collections::BTreeMap;
//! let src = "agent a:\n  backend: \"gemini_cli\"\n\nworkflow w:\n  entry: a\n  a -> done\n";
//! let wf = &iterion_spec::check(src, "w.bot").workflows[0];
//! let d = iterion_runtime::exec::check_executable(wf, &BTreeMap::new());
//! assert_eq!(d[0].render_header(), "w.bot:2:12: error[X002]: backend 'gemini_cli' is not supported by this runtime");
//! ```
use std::collections::BTreeMap;

use iterion_spec::diag::Diagnostic;
use iterion_spec::model::{Node, NodeKind, Span, Spanned, Workflow};
use iterion_spec::template::{EnvContext, expand_env};

use super::backends::at;
pub use super::backends::{EXECUTABLE_BACKENDS, node_backend};

/// The nodes that call a model ([`Workflow::calls_model`]: agents, judges, `llm` routers, human nodes a model
/// answers) whose backend (after `${…}` expansion) is `claw`: they need the runner where they are placed.
pub fn claw_nodes(workflow: &Workflow, env: &BTreeMap<String, String>) -> std::collections::BTreeSet<String> {
    workflow
        .nodes
        .iter()
        .filter(|n| workflow.calls_model(n))
        .filter(|n| node_backend(workflow, n, env).0 == "claw")
        .map(|n| n.name.value.clone())
        .collect()
}

/// The key variable and base URL a claw node's runner will use (after `${…}` expansion), when its key is set.
pub(crate) fn claw_key(node: &Node, env: &BTreeMap<String, String>) -> Option<(&'static str, String)> {
    let lookup = |n: &str| env.get(n).cloned();
    let exp = |f: &Option<Spanned<String>>| {
        f.as_ref()
            .map(|s| expand_env(&s.value, EnvContext::NodeField, &lookup))
            .unwrap_or_default()
    };
    let (hint, model) = (exp(&node.provider), exp(&node.model));
    let key = *iterion_claw::provider::env_vars(&hint, &model).last()?;
    let provider = iterion_claw::provider::resolve(&hint, &model, env).ok()?;
    Some((key, provider.base_url))
}

/// The provider a claw node's runner will use (after `${…}` expansion of `provider` and `model`), with the
/// span to blame, by the runner's choice rule.
fn claw_provider(node: &Node, env: &BTreeMap<String, String>) -> (String, Span) {
    let lookup = |n: &str| env.get(n).cloned();
    let exp = |f: &Option<Spanned<String>>| {
        f.as_ref()
            .map(|s| expand_env(&s.value, EnvContext::NodeField, &lookup))
            .unwrap_or_default()
    };
    let (name, _) = iterion_claw::provider::choose(&exp(&node.provider), &exp(&node.model));
    let span = node
        .provider
        .as_ref()
        .or(node.model.as_ref())
        .map_or(node.name.span, |s| s.span);
    (name, span)
}

fn check_claw(file: &str, node: &Node, env: &BTreeMap<String, String>, out: &mut Vec<Diagnostic>) {
    let (provider, span) = claw_provider(node, env);
    if !iterion_claw::provider::supported(&provider) {
        out.push(
            at(
                "X002",
                file,
                span,
                format!("claw provider '{provider}' is not supported (anthropic, openai)"),
            )
            .with_hint(
                "use anthropic, openai or an OpenAI-compatible name (kimi, moonshot, grok, xai, groq, deepseek, mistral)",
            ),
        );
    }
    for t in node.tools.iter().flatten() {
        if !iterion_claw::tools::BUILTINS.contains(&t.value.as_str()) {
            out.push(
                at(
                    "X006",
                    file,
                    t.span,
                    format!(
                        "tool '{}' is not available to claw agents in this version",
                        t.value
                    ),
                )
                .with_hint(claw_tool_hint(&t.value)),
            );
        }
    }
}

/// Why a tool a claw node names is refused, and what to use instead.
fn claw_tool_hint(tool: &str) -> String {
    let builtins = iterion_claw::tools::BUILTINS.join(", ");
    if tool.starts_with("mcp.") || tool.starts_with("mcp__") {
        format!(
            "MCP tools are not offered to claw agents yet: run the node with backend: claude_code (stdio servers), \
             or use the runner builtins: {builtins}"
        )
    } else if tool == "agent" {
        format!(
            "sub-agents are not available to claw agents yet: split the work into workflow nodes, or run the \
             node with backend: claude_code; the runner builtins are: {builtins}"
        )
    } else {
        format!("claw agents have the runner builtins: {builtins}")
    }
}

fn unsupported_prop(file: &str, span: Span, prop: &str, value: &str, node: &str) -> Diagnostic {
    at(
        "X003",
        file,
        span,
        format!("'{prop}: {value}' on '{node}' is not supported in this version"),
    )
}

fn list(v: &[Spanned<String>]) -> String {
    format!(
        "[{}]",
        v.iter().map(|s| s.value.as_str()).collect::<Vec<_>>().join(", ")
    )
}

/// Checks a compiled workflow (whose compile diagnostics have no error) against what this version executes.
/// `env` is the launching environment, used to expand `${…}` in `backend`. Returns every `X…` diagnostic
/// (errors and `X007` warnings), sorted by position.
pub fn check_executable(workflow: &Workflow, env: &BTreeMap<String, String>) -> Vec<Diagnostic> {
    let file = workflow.file.as_str();
    let mut out = Vec::new();
    for node in &workflow.nodes {
        match node.kind {
            NodeKind::Router => super::check_flow::router(workflow, node, env, &mut out),
            NodeKind::Human => super::check_flow::human(workflow, node, &mut out),
            NodeKind::Agent | NodeKind::Judge => check_agent(workflow, node, env, &mut out),
            NodeKind::Tool | NodeKind::Compute => {}
        }
    }
    // `human` pauses for a person (human nodes, agents through the interaction protocol); the modes where a
    // model answers are not executed
    if let Some(i) = &workflow.interaction
        && matches!(i.value.as_str(), "llm" | "llm_or_human")
    {
        out.push(
            at(
                "X004",
                file,
                i.span,
                format!("'interaction: {}' is not supported in this version", i.value),
            )
            .with_hint(
                "use 'interaction: human': the run pauses and `iterion resume --answers-file` answers",
            ),
        );
    }
    super::check_flow::fan_out_warnings(workflow, &mut out);
    iterion_spec::diag::sort(&mut out);
    out
}

fn check_agent(workflow: &Workflow, node: &Node, env: &BTreeMap<String, String>, out: &mut Vec<Diagnostic>) {
    let file = workflow.file.as_str();
    let name = node.name.value.as_str();
    let (backend, bspan) = node_backend(workflow, node, env);
    if !EXECUTABLE_BACKENDS.contains(&backend.as_str()) {
        out.push(
            at(
                "X002",
                file,
                bspan,
                format!("backend '{backend}' is not supported by this runtime"),
            )
            .with_hint(format!("supported: {}", EXECUTABLE_BACKENDS.join(", "))),
        );
    }
    if backend == "claw" {
        check_claw(file, node, env, out);
    }
    // claude_code and codex sessions are executed (09 §5); claw keeps refusing them. The placement warning of 09 §8 (an
    // inherit/fork node reading the session of a node placed elsewhere) is not given here: placements are
    // resolved after this check, from CLI flags, machine defaults and floors this check does not see.
    if let Some(s) = &node.session
        && s.value != "fresh"
        && backend != "claude_code"
        && backend != "codex"
    {
        out.push(
            unsupported_prop(file, s.span, "session", &s.value, name)
                .with_hint("sessions are supported on claude_code and codex nodes"),
        );
    }
    if let Some(i) = &node.interaction
        && matches!(i.value.as_str(), "llm" | "llm_or_human")
    {
        out.push(
            unsupported_prop(file, i.span, "interaction", &i.value, name)
                .with_hint("use 'interaction: human': the run pauses for a person's answer"),
        );
    }
    check_mcp(workflow, node, &backend, out);
    if node.memory.as_ref().and_then(|m| m.enabled) == Some(true) {
        out.push(unsupported_prop(
            file,
            node.name.span,
            "memory.enabled",
            "true",
            name,
        ));
    }
    if node.cursors.is_some() {
        out.push(unsupported_prop(file, node.name.span, "cursors", "{…}", name));
    }
    match (&node.capabilities, &workflow.capabilities) {
        (Some(c), _) if !c.is_empty() => {
            let span = c[0].span;
            out.push(unsupported_prop(file, span, "capabilities", &list(c), name));
        }
        (None, Some(c)) if !c.is_empty() => {
            out.push(unsupported_prop(
                file,
                node.name.span,
                "capabilities",
                &format!("{} (inherited from the workflow)", list(c)),
                name,
            ));
        }
        _ => {}
    }
}

/// MCP servers of an agent or judge node: executed for `claude_code` nodes with stdio servers; `X004`
/// for a claw node with a non-empty active set, for http/sse servers and for `auth` blocks. Names the catalog
/// lacks are the compiler's `C025` ("unknown MCP server").
fn check_mcp(workflow: &Workflow, node: &Node, backend: &str, out: &mut Vec<Diagnostic>) {
    let file = workflow.file.as_str();
    let name = node.name.value.as_str();
    let set = super::mcp::node_set(workflow, node);
    if set.is_empty() {
        return;
    }
    // blame the node's own server name when it lists the server, else the node
    let span_of = |server: &str| {
        node.mcp
            .as_ref()
            .and_then(|m| m.servers.as_ref())
            .and_then(|l| l.iter().find(|s| s.value == server))
            .map_or(node.name.span, |s| s.span)
    };
    if backend != "claude_code" {
        out.push(
            at(
                "X004",
                file,
                span_of(&set[0]),
                format!(
                    "MCP servers on '{name}' ({}) are not supported on {backend} nodes in this version",
                    set.join(", ")
                ),
            )
            .with_hint(
                "MCP servers are supported on claude_code nodes; to run without them, set 'mcp: inherit: false' on the node, 'mcp: autoload_project: false' on the workflow, or ITERION_MCP_AUTOLOAD=0",
            ),
        );
        return;
    }
    let catalog = super::mcp::catalog(workflow);
    for server in &set {
        let Some(e) = catalog.get(server) else {
            continue;
        };
        if e.auth {
            out.push(at(
                "X004",
                file,
                span_of(server),
                format!("MCP server '{server}' on '{name}': 'auth' blocks are not supported in this version"),
            ));
        } else if e.transport != "stdio" {
            out.push(
                at(
                    "X004",
                    file,
                    span_of(server),
                    format!(
                        "MCP server '{server}' on '{name}': {} servers are not supported in this version",
                        e.transport
                    ),
                )
                .with_hint("only stdio MCP servers are supported on claude_code nodes"),
            );
        }
    }
}
