//! MCP servers for `claude_code` nodes: the catalog (the project's `.mcp.json` overridden by
//! `mcp_server` declarations), the workflow and node active sets, the per-node config file handed to the agent
//! CLI with `--mcp-config`, and the health check before the first node.
//!
//! Where servers run: the agent CLI spawns the stdio servers of its config itself, so they run where the node
//! runs — on the host for host-placed nodes, inside the container otherwise (the server commands must exist in
//! the image). The config file is written there too: a host temp file, or a file written inside the container
//! through the driver's exec API; mode 0600, a name nobody can predict, removed after the call. `env` values
//! of stdio servers are in that file, never on a command line.
//!
//! Not built: http and sse servers and `auth` blocks (refused by the executability check with `X004`), and MCP
//! servers on `claw` nodes (`X004`).
//!
//! ```
//! use iterion_runtime::exec::mcp::allowed_tool;
//! assert_eq!(allowed_tool("mcp.github.create_issue"), "mcp__github__create_issue");
//! assert_eq!(allowed_tool("mcp.github.*"), "mcp__github");
//! assert_eq!(allowed_tool("Read"), "Read");
//! ```
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use iterion_driver::{ExecRequest, Output, Stdin};
use iterion_spec::diag::Diagnostic;
use iterion_spec::model::{McpTransport, Node, NodeKind, Workflow};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::context::{NodeSandbox, NodeSandboxes};
use super::node::{NodeEnv, NodeError};
use crate::events::PlacementKind;
use crate::failure::FailureCode;

/// Bound of one server's health check (spawn, `initialize`, `ping`).
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// One server of the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpEntry {
    /// Server name.
    pub name: String,
    /// `stdio`, `http` or `sse`.
    pub transport: String,
    /// `command` (stdio).
    pub command: Option<String>,
    /// `args` (stdio).
    pub args: Vec<String>,
    /// `env` (stdio; `.mcp.json` only).
    pub env: BTreeMap<String, String>,
    /// `url` (http, sse).
    pub url: Option<String>,
    /// `headers` (http, sse; `.mcp.json` only).
    pub headers: BTreeMap<String, String>,
    /// Whether the entry has an `auth` block.
    pub auth: bool,
}

/// Whether `ITERION_MCP_AUTOLOAD` turns the project's `.mcp.json` off (`0` or `false`).
pub fn autoload_off(env: &BTreeMap<String, String>) -> bool {
    env.get("ITERION_MCP_AUTOLOAD")
        .is_some_and(|v| v == "0" || v.eq_ignore_ascii_case("false"))
}

fn healthcheck_off(env: &BTreeMap<String, String>) -> bool {
    env.get("ITERION_MCP_HEALTHCHECK")
        .is_some_and(|v| v == "0" || v.eq_ignore_ascii_case("false"))
}

/// Reads the `.mcp.json` next to the workflow file at `path` (unless `ITERION_MCP_AUTOLOAD` is `0`/`false`)
/// into `workflow.project_mcp_servers`, and returns its diagnostics plus one for every MCP server name the
/// workflow uses that is neither declared nor a project server ("unknown MCP server '<n>'"). A missing file is
/// fine; an unreadable or invalid one is an error.
pub fn load_project(workflow: &mut Workflow, path: &Path, env: &BTreeMap<String, String>) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    workflow.project_mcp_servers = Vec::new();
    if !autoload_off(env) {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let file = dir.join(".mcp.json");
        match iterion_spec::source::read_regular(&file, 1024 * 1024) {
            iterion_spec::source::FileRead::Found(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let (servers, diags) = iterion_spec::compile::read_mcp_json(&text, ".mcp.json");
                workflow.project_mcp_servers = servers;
                out.extend(diags);
            }
            iterion_spec::source::FileRead::NotFound => {}
            other => out.push(Diagnostic::error(
                "C025",
                ".mcp.json",
                1,
                1,
                format!("cannot read {}: {other}", file.display()),
            )),
        }
    }
    out.extend(iterion_spec::compile::project_mcp_refs(
        workflow,
        &workflow.project_mcp_servers,
    ));
    out
}

/// The catalog: project servers, overridden by same-named `mcp_server` declarations.
pub fn catalog(workflow: &Workflow) -> BTreeMap<String, McpEntry> {
    let mut out = BTreeMap::new();
    for p in &workflow.project_mcp_servers {
        out.insert(
            p.name.clone(),
            McpEntry {
                name: p.name.clone(),
                transport: p.transport.clone().unwrap_or_else(|| "stdio".into()),
                command: p.command.clone(),
                args: p.args.clone(),
                env: p.env.clone(),
                url: p.url.clone(),
                headers: p.headers.clone(),
                auth: p.auth,
            },
        );
    }
    for m in &workflow.mcp_servers {
        let transport = match m.transport {
            Some(McpTransport::Http) => "http",
            Some(McpTransport::Sse) => "sse",
            _ => "stdio",
        };
        out.insert(
            m.name.value.clone(),
            McpEntry {
                name: m.name.value.clone(),
                transport: transport.into(),
                command: m.command.clone(),
                args: m.args.clone(),
                env: BTreeMap::new(),
                url: m.url.clone(),
                headers: BTreeMap::new(),
                auth: !m.auth.is_empty() || !m.auth_scopes.is_empty(),
            },
        );
    }
    out
}

fn push_unique(set: &mut Vec<String>, name: &str) {
    if !set.iter().any(|s| s == name) {
        set.push(name.to_string());
    }
}

/// The workflow active set, in order: the project servers sorted by name (unless `mcp.autoload_project` is
/// `false`), then the workflow's `mcp.servers`, minus its `mcp.disable`.
pub fn workflow_set(workflow: &Workflow) -> Vec<String> {
    let block = workflow.mcp.as_ref();
    let mut set = Vec::new();
    if block.and_then(|m| m.autoload_project) != Some(false) {
        let mut names: Vec<&str> = workflow
            .project_mcp_servers
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        names.sort_unstable();
        for n in names {
            push_unique(&mut set, n);
        }
    }
    for s in block.and_then(|m| m.servers.as_ref()).into_iter().flatten() {
        push_unique(&mut set, &s.value);
    }
    let disable = block.and_then(|m| m.disable.as_ref());
    set.retain(|n| !disable.is_some_and(|d| d.contains(n)));
    set
}

/// The active set of an agent or judge node: the workflow set (unless the node's `mcp.inherit` is `false`),
/// plus the node's `mcp.servers`, minus its `mcp.disable`. Empty for other node kinds.
pub fn node_set(workflow: &Workflow, node: &Node) -> Vec<String> {
    if !matches!(node.kind, NodeKind::Agent | NodeKind::Judge) {
        return Vec::new();
    }
    let block = node.mcp.as_ref();
    let mut set = if block.and_then(|m| m.inherit) == Some(false) {
        Vec::new()
    } else {
        workflow_set(workflow)
    };
    for s in block.and_then(|m| m.servers.as_ref()).into_iter().flatten() {
        push_unique(&mut set, &s.value);
    }
    let disable = block.and_then(|m| m.disable.as_ref());
    set.retain(|n| !disable.is_some_and(|d| d.contains(n)));
    set
}

/// The catalog entries of a node's active set (names the catalog lacks are left out: the check refuses them
/// before a run exists).
pub fn node_servers(workflow: &Workflow, node: &Node) -> Vec<McpEntry> {
    let cat = catalog(workflow);
    node_set(workflow, node)
        .iter()
        .filter_map(|n| cat.get(n).cloned())
        .collect()
}

/// The `--mcp-config` document: `{"mcpServers": {<name>: {"type": "stdio", "command", "args"?, "env"?} |
/// {"type": "http"|"sse", "url", "headers"?}}}`.
pub fn config_json(servers: &[McpEntry]) -> Value {
    let mut map = Map::new();
    for s in servers {
        let mut o = Map::new();
        o.insert("type".into(), json!(s.transport));
        if s.transport == "stdio" {
            o.insert("command".into(), json!(s.command.clone().unwrap_or_default()));
            if !s.args.is_empty() {
                o.insert("args".into(), json!(s.args));
            }
            if !s.env.is_empty() {
                o.insert("env".into(), json!(s.env));
            }
        } else {
            o.insert("url".into(), json!(s.url.clone().unwrap_or_default()));
            if !s.headers.is_empty() {
                o.insert("headers".into(), json!(s.headers));
            }
        }
        map.insert(s.name.clone(), Value::Object(o));
    }
    json!({ "mcpServers": map })
}

/// A `tools` entry as the agent CLI names it: `mcp.<s>.<t>` → `mcp__<s>__<t>`, `mcp.<s>.*` → `mcp__<s>`;
/// anything else unchanged.
pub fn allowed_tool(t: &str) -> String {
    let Some(rest) = t.strip_prefix("mcp.") else {
        return t.to_string();
    };
    match rest.split_once('.') {
        Some((s, "*")) if !s.is_empty() => format!("mcp__{s}"),
        Some((s, tool)) if !s.is_empty() && !tool.is_empty() => format!("mcp__{s}__{tool}"),
        _ => t.to_string(),
    }
}

/// A config file written for one call, removed by [`remove_config`].
#[derive(Debug)]
pub(crate) enum ConfigFile {
    /// On the host file system.
    Host(PathBuf),
    /// Inside the node's sandbox, written through the exec API.
    Sandbox(String),
}

impl ConfigFile {
    pub fn path(&self) -> String {
        match self {
            ConfigFile::Host(p) => p.to_string_lossy().into_owned(),
            ConfigFile::Sandbox(p) => p.clone(),
        }
    }
}

fn file_name() -> String {
    format!("iterion-mcp-{:032x}.json", rand::random::<u128>())
}

/// Writes the node's config where the agent CLI runs: a host temp file (`TMPDIR` of the launching environment,
/// else `/tmp`) for host-placed nodes, `/tmp/…` inside the sandbox otherwise; created exclusively, mode 0600.
pub(crate) async fn write_config(env: &NodeEnv<'_>, servers: &[McpEntry]) -> Result<ConfigFile, NodeError> {
    let text = config_json(servers).to_string();
    let id = env.node_id;
    let fail = |why: String| {
        NodeError::new(
            FailureCode::ExecutionFailed,
            format!("agent node '{id}': the MCP config file could not be written: {why}"),
        )
    };
    if env.sandbox.placement == PlacementKind::Host {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = env
            .host_env
            .get("TMPDIR")
            .filter(|d| !d.is_empty())
            .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        let path = dir.join(file_name());
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| fail(format!("{}: {e}", path.display())))?;
        f.write_all(text.as_bytes())
            .map_err(|e| fail(format!("{}: {e}", path.display())))?;
        return Ok(ConfigFile::Host(path));
    }
    let path = format!("/tmp/{}", file_name());
    // umask first, noclobber: the file is created 0600 and never follows an existing name
    let argv = vec![
        "sh".to_string(),
        "-c".into(),
        "umask 077; set -C; cat > \"$1\"".into(),
        "sh".into(),
        path.clone(),
    ];
    let req = ExecRequest::new(argv)
        .workdir(env.sandbox.workdir.clone())
        .cancel(env.cancel.clone())
        .label(id.to_string());
    let c = super::node::run_collect(env, req, Some(text.as_bytes()))
        .await
        .map_err(|e| fail(e.to_string()))?;
    if !c.status.success() {
        return Err(fail(format!(
            "exit {}: {}",
            c.status.code,
            super::node::tail(&c.stderr)
        )));
    }
    Ok(ConfigFile::Sandbox(path))
}

/// Removes a config file written by [`write_config`] (also after a cancelled call; bounded to 10 s).
pub(crate) async fn remove_config(env: &NodeEnv<'_>, file: ConfigFile) {
    match file {
        ConfigFile::Host(p) => {
            if let Err(e) = std::fs::remove_file(&p)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                env.warn(&format!(
                    "node '{}': the MCP config file {} was not removed: {e}",
                    env.node_id,
                    p.display()
                ));
            }
        }
        ConfigFile::Sandbox(p) => {
            let cancel = CancellationToken::new();
            let req = ExecRequest::new(["rm", "-f", p.as_str()])
                .workdir(env.sandbox.workdir.clone())
                .cancel(cancel.clone())
                .label(env.node_id.to_string());
            let limits = iterion_driver::OutputLimits {
                max_stdout: 4096,
                max_stderr: 4096,
            };
            let r = tokio::time::timeout(
                Duration::from_secs(10),
                iterion_driver::exec_collect(env.sandbox.run.as_ref(), req, limits),
            )
            .await;
            let ok = matches!(&r, Ok(Ok(c)) if c.status.success());
            if r.is_err() {
                cancel.cancel();
            }
            if !ok {
                env.warn(&format!(
                    "node '{}': the MCP config file {p} was not removed from the sandbox",
                    env.node_id
                ));
            }
        }
    }
}

/// The health check before the first node: every stdio server of the workflow active set that one of the
/// `claude_code` nodes `claude_nodes` (`agent_cli_nodes`) will start is spawned where that node runs
/// (once per sandbox), sent `initialize` and `ping`, and must answer both within [`HEALTH_TIMEOUT`]. Skipped
/// when `ITERION_MCP_HEALTHCHECK` is `0`/`false` or the workflow set is empty. Servers of no `claude_code`
/// node's set are not started: nothing would use them (MCP servers on claw nodes are refused before the run).
/// `Err` is the run's error text.
pub async fn health_check(
    workflow: &Workflow,
    claude_nodes: &[String],
    sandboxes: &dyn NodeSandboxes,
    host_env: &BTreeMap<String, String>,
) -> Result<(), String> {
    if healthcheck_off(host_env) {
        return Ok(());
    }
    let wset = workflow_set(workflow);
    if wset.is_empty() {
        return Ok(());
    }
    let cat = catalog(workflow);
    // (sandbox, node whose exec env is used, servers) — one entry per distinct sandbox
    let mut plans: Vec<(NodeSandbox, String, Vec<McpEntry>)> = Vec::new();
    for name in claude_nodes {
        let Some(node) = workflow.node(name) else {
            continue;
        };
        let servers: Vec<McpEntry> = node_set(workflow, node)
            .iter()
            .filter(|n| wset.contains(n))
            .filter_map(|n| cat.get(n))
            .filter(|e| e.transport == "stdio")
            .cloned()
            .collect();
        if servers.is_empty() {
            continue;
        }
        let sandbox = sandboxes.sandbox_for(name).await.map_err(|u| {
            format!(
                "MCP health check failed: the sandbox of node '{name}' is not available: {}",
                u.error
            )
        })?;
        let same = plans.iter_mut().find(|(s, _, _)| {
            std::sync::Arc::ptr_eq(&s.run, &sandbox.run) && s.placement == sandbox.placement
        });
        match same {
            Some((_, _, list)) => {
                for s in servers {
                    if !list.iter().any(|x| x.name == s.name) {
                        list.push(s);
                    }
                }
            }
            None => plans.push((sandbox, name.clone(), servers)),
        }
    }
    let mut failures = Vec::new();
    for (sandbox, node, servers) in plans {
        sandboxes.step_starting(&node).await;
        let mut exec_env = sandboxes.exec_env(&node);
        exec_env.push(("ITERION_NODE_ID".into(), node.clone()));
        let mut set = tokio::task::JoinSet::new();
        for s in servers {
            let run = sandbox.run.clone();
            let workdir = sandbox.workdir.clone();
            let mut env = exec_env.clone();
            env.extend(s.env.iter().map(|(k, v)| (k.clone(), v.clone())));
            set.spawn(async move {
                let r = check_stdio(run.as_ref(), &workdir, env, &s).await;
                (s.name, r)
            });
        }
        let mut results = Vec::new();
        while let Some(r) = set.join_next().await {
            match r {
                Ok(x) => results.push(x),
                Err(e) => results.push(("?".into(), Err(format!("the check did not complete: {e}")))),
            }
        }
        sandboxes.node_ended(&node, &sandbox).await;
        results.sort();
        for (name, r) in results {
            if let Err(e) = r {
                failures.push(format!("server '{name}' ({}): {e}", where_label(&sandbox)));
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("MCP health check failed: {}", failures.join("; ")))
    }
}

fn where_label(s: &NodeSandbox) -> &'static str {
    match s.placement {
        PlacementKind::Host => "on the host",
        _ => "in the sandbox",
    }
}

/// Spawns one stdio server and exchanges `initialize` and `ping` with it, within [`HEALTH_TIMEOUT`].
async fn check_stdio(
    run: &dyn iterion_driver::Run,
    workdir: &str,
    env: Vec<(String, String)>,
    server: &McpEntry,
) -> Result<(), String> {
    let mut argv = vec![server.command.clone().unwrap_or_default()];
    argv.extend(server.args.iter().cloned());
    let cancel = CancellationToken::new();
    let mut req = ExecRequest::new(argv)
        .workdir(workdir.to_string())
        .cancel(cancel.clone())
        .kill_grace(Duration::from_millis(500))
        .label("mcp-health")
        .stdin(Stdin::Piped)
        .outputs(Output::Piped, Output::Piped);
    req.env = env;
    let mut exec = run.exec(req).await.map_err(|e| format!("cannot start: {e}"))?;
    let mut stdin = exec.stdin.take().ok_or("no stdin")?;
    let stdout = exec.stdout.take().ok_or("no stdout")?;
    let mut stderr = exec.stderr.take();
    let talk = async {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2024-11-05",
            "capabilities": {},
            "clientInfo": {"name": "iterion", "version": env!("CARGO_PKG_VERSION")}
        }});
        send(&mut stdin, &init).await?;
        answer(&mut lines, 1, "initialize").await?;
        send(
            &mut stdin,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await?;
        send(&mut stdin, &json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})).await?;
        answer(&mut lines, 2, "ping").await
    };
    let r = match tokio::time::timeout(HEALTH_TIMEOUT, talk).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {}s", HEALTH_TIMEOUT.as_secs())),
    };
    // closing stdin ends a well-behaved server; one that lingers is killed
    drop(stdin);
    let mut err_text = Vec::new();
    if let Some(mut stderr) = stderr.take() {
        use tokio::io::AsyncReadExt;
        let read = async {
            let mut buf = [0u8; 1024];
            loop {
                match stderr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) if err_text.len() < 2048 => err_text.extend_from_slice(&buf[..n]),
                    Ok(_) => {}
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_millis(300), read).await;
    }
    let wait = exec.wait();
    tokio::pin!(wait);
    let status = tokio::select! {
        s = &mut wait => s.ok(),
        _ = tokio::time::sleep(Duration::from_millis(300)) => {
            cancel.cancel();
            tokio::time::timeout(Duration::from_secs(5), &mut wait).await.ok().and_then(Result::ok)
        }
    };
    let Err(e) = r else {
        return Ok(());
    };
    let code = match status {
        Some(s) if !s.cancelled => format!(" (exit {})", s.code),
        _ => String::new(),
    };
    let err_text = String::from_utf8_lossy(&err_text).trim().to_string();
    let tail = if err_text.is_empty() {
        String::new()
    } else {
        format!(": {err_text}")
    };
    Err(format!("{e}{code}{tail}"))
}

async fn send(w: &mut iterion_driver::ExecStdin, v: &Value) -> Result<(), String> {
    let mut line = v.to_string();
    line.push('\n');
    w.write_all(line.as_bytes())
        .await
        .map_err(|e| format!("cannot write to the server: {e}"))?;
    w.flush()
        .await
        .map_err(|e| format!("cannot write to the server: {e}"))
}

/// Reads lines until the response with `id` (notifications and non-JSON lines are skipped).
async fn answer<R: tokio::io::AsyncBufRead + Unpin>(
    lines: &mut tokio::io::Lines<R>,
    id: i64,
    what: &str,
) -> Result<(), String> {
    loop {
        let line = lines
            .next_line()
            .await
            .map_err(|e| format!("cannot read from the server: {e}"))?
            .ok_or_else(|| format!("the server closed its output before answering {what}"))?;
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else {
            continue;
        };
        if v.get("id").and_then(Value::as_i64) != Some(id) {
            continue;
        }
        if let Some(e) = v.get("error") {
            return Err(format!("{what} failed: {e}"));
        }
        if v.get("result").is_some() {
            return Ok(());
        }
        return Err(format!("{what}: the answer has no result"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wf(src: &str, project: &str) -> Workflow {
        let c = iterion_spec::check(src, "w.bot");
        let mut w = c.workflows.into_iter().next().unwrap();
        w.project_mcp_servers = iterion_spec::compile::read_mcp_json(project, ".mcp.json").0;
        w
    }

    const PROJECT: &str = r#"{"mcpServers":{"zeta":{"command":"z"},"alpha":{"command":"a","env":{"K":"v"}},"web":{"url":"http://h"}}}"#;

    #[test]
    fn active_sets() {
        let src = "mcp_server s:\n  transport: stdio\n  command: \"srv\"\n\nmcp_server alpha:\n  transport: stdio\n  command: \"declared\"\n\nagent a:\n  backend: \"claude_code\"\n  mcp:\n    servers: [s]\n    disable: [zeta]\n\nagent b:\n  backend: \"claude_code\"\n  mcp:\n    inherit: false\n\nworkflow w:\n  entry: a\n  mcp:\n    servers: [alpha]\n    disable: [web]\n  a -> b\n  b -> done\n";
        let w = wf(src, PROJECT);
        assert_eq!(workflow_set(&w), ["alpha", "zeta"]);
        assert_eq!(node_set(&w, w.node("a").unwrap()), ["alpha", "s"]);
        assert!(node_set(&w, w.node("b").unwrap()).is_empty());
        let servers = node_servers(&w, w.node("a").unwrap());
        // the declaration overrides the project entry of the same name
        assert_eq!(servers[0].command.as_deref(), Some("declared"));
        assert_eq!(
            config_json(&servers),
            json!({"mcpServers": {"alpha": {"type": "stdio", "command": "declared"}, "s": {"type": "stdio", "command": "srv"}}})
        );
    }

    #[test]
    fn autoload_project_false_and_project_entries() {
        let src = "agent a:\n  backend: \"claude_code\"\n\nworkflow w:\n  entry: a\n  mcp:\n    autoload_project: false\n  a -> done\n";
        let w = wf(src, PROJECT);
        assert!(workflow_set(&w).is_empty());
        let src = "agent a:\n  backend: \"claude_code\"\n\nworkflow w:\n  entry: a\n  a -> done\n";
        let w = wf(src, PROJECT);
        assert_eq!(workflow_set(&w), ["alpha", "web", "zeta"]);
        let all = node_servers(&w, w.node("a").unwrap());
        assert_eq!(
            config_json(&all)["mcpServers"],
            json!({"alpha": {"type": "stdio", "command": "a", "env": {"K": "v"}}, "web": {"type": "http", "url": "http://h"}, "zeta": {"type": "stdio", "command": "z"}})
        );
    }

    #[test]
    fn tool_names() {
        assert_eq!(allowed_tool("mcp.s.t"), "mcp__s__t");
        assert_eq!(allowed_tool("mcp.s.*"), "mcp__s");
        assert_eq!(allowed_tool("mcp.s"), "mcp.s");
        assert_eq!(allowed_tool("Bash"), "Bash");
    }
}
