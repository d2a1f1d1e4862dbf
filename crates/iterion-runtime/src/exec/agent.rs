//! Agent and judge nodes with `backend: claude_code` (10.5.1, 10.5.2): the agent CLI runs where the node is
//! placed, through `Run::exec`, with the user prompt on stdin and credentials in the exec-scope env.
use std::time::Instant;

use iterion_spec::model::{Node, Workflow};
use iterion_spec::template::{EnvContext, expand_env};
use serde_json::Value;

use super::node::{CallShape, NodeEnv, NodeError, NodeRun, NodeSuccess, driver_error, ms, run_collect, tail};
use super::output::{agent_output, stamp_session};
use super::render::{Mode, Scope, render};
use crate::events::{DelegateError, DelegateFinished, DelegateStarted, DelegateVia, PlacementKind};
use crate::failure::FailureCode;
use crate::store::LogLevel;

/// Host variables forwarded to the agent CLI through the exec API (never on a command line).
pub const CLAUDE_ENV: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
];

/// The credentials of [`CLAUDE_ENV`]: in a container, each reaches the agent CLI as a placeholder of the run's
/// proxy bound to the Anthropic endpoint (unless the operator keeps provider keys direct).
pub const CLAUDE_KEYS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
];

const BACKEND: &str = "claude_code";

/// Bound of the agent CLI probe (4.12).
pub const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The agent CLI program: `ITERION_CLAUDE_BIN` when set and non-empty, else `claude`.
pub fn agent_cli_program(host_env: &std::collections::BTreeMap<String, String>) -> String {
    host_env
        .get("ITERION_CLAUDE_BIN")
        .filter(|s| !s.is_empty())
        .cloned()
        .unwrap_or_else(|| "claude".into())
}

/// Agent and judge nodes whose backend (after `${…}` expansion) is `claude_code`, in declaration order: the
/// sandboxes they are placed in need the agent CLI probe of 4.12.
pub fn agent_cli_nodes(
    workflow: &Workflow,
    host_env: &std::collections::BTreeMap<String, String>,
) -> Vec<String> {
    workflow
        .nodes
        .iter()
        .filter(|n| {
            matches!(
                n.kind,
                iterion_spec::model::NodeKind::Agent | iterion_spec::model::NodeKind::Judge
            )
        })
        .filter(|n| super::check::node_backend(workflow, n, host_env).0 == BACKEND)
        .map(|n| n.name.value.clone())
        .collect()
}

/// The probe of 4.12 for sandboxes running `claude_code` nodes: `<agent cli> --version` must succeed within
/// [`PROBE_TIMEOUT`]; otherwise `AGENT_CLI_UNAVAILABLE` (phase `probe`) with a remediation hint.
pub async fn probe_agent_cli(
    run: &dyn iterion_driver::Run,
    host_env: &std::collections::BTreeMap<String, String>,
) -> Result<(), super::context::SandboxUnavailable> {
    let program = agent_cli_program(host_env);
    let cancel = tokio_util::sync::CancellationToken::new();
    let req = iterion_driver::ExecRequest::new([program.clone(), "--version".to_string()])
        .cancel(cancel.clone())
        .label("probe");
    let limits = iterion_driver::OutputLimits {
        max_stdout: 64 * 1024,
        max_stderr: 64 * 1024,
    };
    let fail = |why: String| super::context::SandboxUnavailable {
        code: FailureCode::AgentCliUnavailable,
        error: format!("the agent CLI '{program}' is not usable where claude_code nodes run: {why}"),
        phase: Some(crate::failure::FailurePhase::Probe),
        hint: Some(
            "install the claude CLI in the image or in post_create, or set ITERION_CLAUDE_BIN to its path"
                .into(),
        ),
    };
    let collect = iterion_driver::exec_collect(run, req, limits);
    tokio::pin!(collect);
    let res = tokio::select! {
        r = &mut collect => r,
        _ = tokio::time::sleep(PROBE_TIMEOUT) => {
            cancel.cancel();
            let _ = collect.await;
            return Err(fail(format!("'{program} --version' did not finish within 60s")));
        }
    };
    match res {
        Ok(c) if c.status.success() => Ok(()),
        Ok(c) => Err(fail(format!(
            "'{program} --version' exited with status {}: {}",
            c.status.code,
            tail(&c.stderr)
        ))),
        Err(e) => Err(fail(e.to_string())),
    }
}

/// The argv and stdin of one `claude_code` execution.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClaudeInvocation {
    pub argv: Vec<String>,
    pub prompt: String,
}

pub(crate) fn prompt_text(env: &NodeEnv<'_>, workflow: &Workflow, name: &str, scope: &Scope<'_>) -> String {
    let Some(p) = workflow.prompt(name) else {
        env.warn(&format!(
            "node '{}': prompt '{name}' is not declared",
            env.node_id
        ));
        return String::new();
    };
    let r = render(&p.body, Mode::Text, scope);
    for m in &r.missing {
        env.warn(&format!(
            "node '{}': placeholder {m} in prompt '{name}' has no value; rendered as empty text",
            env.node_id
        ));
    }
    r.text
}

/// The provider routing the agent CLI uses, stamped as `_session_fingerprint`: `anthropic-direct` when
/// `ANTHROPIC_BASE_URL` is unset (or empty) in the environment the CLI gets, else `facade:<host of the URL>`.
pub(crate) fn session_fingerprint(host_env: &std::collections::BTreeMap<String, String>) -> String {
    match host_env.get("ANTHROPIC_BASE_URL").filter(|u| !u.is_empty()) {
        None => "anthropic-direct".into(),
        Some(url) => format!("facade:{}", url_host(url)),
    }
}

/// The host of a URL (no scheme, user info, port or path), lower case.
pub(crate) fn url_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    host.to_ascii_lowercase()
}

/// The session flags of a node from its `session` mode and input, and the log line the choice
/// calls for.
pub(crate) fn session_flags(
    mode: &str,
    input: &Value,
    fingerprint: &str,
    node: &str,
) -> (Vec<String>, Option<(LogLevel, String)>) {
    let text = |k: &str| {
        input
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let id = text("_session_id");
    match (mode, id) {
        ("inherit" | "inherit_if_available", Some(id)) => (vec!["--resume".into(), id], None),
        ("inherit", None) => (
            Vec::new(),
            Some((
                LogLevel::Warn,
                format!("node '{node}': session: inherit, but its input has no _session_id; running fresh"),
            )),
        ),
        ("inherit_if_available", None) => (
            Vec::new(),
            Some((
                LogLevel::Info,
                format!("node '{node}': no upstream _session_id; running fresh"),
            )),
        ),
        ("fork", Some(id)) => match text("_session_fingerprint") {
            Some(f) if f == fingerprint => (vec!["--resume".into(), id, "--fork-session".into()], None),
            got => {
                let why = match got {
                    None => "its input has no _session_fingerprint".to_string(),
                    Some(f) => {
                        format!("the session was made through '{f}', this call goes through '{fingerprint}'")
                    }
                };
                (
                    Vec::new(),
                    Some((
                        LogLevel::Warn,
                        format!("node '{node}': dropping session fork: {why}; running fresh"),
                    )),
                )
            }
        },
        _ => (Vec::new(), None),
    }
}

/// Builds the invocation of 10.5.2.
pub(crate) fn invocation(
    env: &NodeEnv<'_>,
    workflow: &Workflow,
    node: &Node,
    scope: &Scope<'_>,
    shape: &CallShape,
) -> ClaudeInvocation {
    let lookup = |n: &str| env.host_env.get(n).cloned();
    let program = agent_cli_program(env.host_env);
    let mut argv = vec![program, "-p".into(), "--output-format".into(), "json".into()];
    let model = node
        .model
        .as_ref()
        .map(|m| expand_env(&m.value, EnvContext::NodeField, &lookup))
        .filter(|m| !m.is_empty())
        .or_else(|| shape.model.clone());
    if let Some(model) = model {
        argv.extend(["--model".into(), model]);
    }
    let mut system = node
        .system
        .as_ref()
        .map(|s| prompt_text(env, workflow, &s.value, scope))
        .unwrap_or_default();
    if let Some(suffix) = &shape.system_suffix {
        system.push_str(suffix);
    }
    if !system.is_empty() {
        argv.extend(["--append-system-prompt".into(), system]);
    }
    let tools: Option<String> = if node.readonly == Some(true) || shape.readonly {
        Some("Read,Glob,Grep".into())
    } else {
        node.tools.as_ref().filter(|t| !t.is_empty()).map(|t| {
            t.iter()
                .map(|s| super::mcp::allowed_tool(&s.value))
                .collect::<Vec<_>>()
                .join(",")
        })
    };
    if let Some(t) = tools {
        argv.extend(["--allowedTools".into(), t]);
    }
    if let Some(n) = node.tool_max_steps {
        argv.extend(["--max-turns".into(), n.to_string()]);
    }
    let mode = if env.sandbox.placement == PlacementKind::Host {
        "acceptEdits"
    } else {
        "bypassPermissions"
    };
    argv.extend(["--permission-mode".into(), mode.into()]);
    let fingerprint = session_fingerprint(env.host_env);
    let mode = node.session.as_ref().map_or("fresh", |s| s.value.as_str());
    let (mut flags, mut note) = session_flags(mode, scope.input, &fingerprint, env.node_id);
    if let Some(why) = &shape.drop_session {
        flags.clear();
        note = Some((LogLevel::Warn, why.clone()));
    }
    if let Some(id) = &shape.resume_session
        && !flags.iter().any(|f| f == "--resume")
    {
        flags = vec!["--resume".into(), id.clone()];
    }
    argv.extend(flags);
    if let Some((level, message)) = note {
        env.sink.log(level, &message);
    }
    let mut prompt = match (&node.user, &shape.user_fallback) {
        (Some(u), _) => prompt_text(env, workflow, &u.value, scope),
        (None, Some(f)) => f.clone(),
        (None, None) => serde_json::to_string(scope.input).unwrap_or_default(),
    };
    let schema = shape.output_schema.clone().or_else(|| {
        node.output
            .as_ref()
            .and_then(|o| workflow.schema(&o.value))
            .map(|s| s.to_json_schema())
    });
    if let Some(schema) = schema {
        prompt.push_str(
            "\n\nAnswer with only a JSON object (no prose, no code fence) that is valid against this JSON Schema:\n",
        );
        prompt.push_str(&schema.to_string());
    }
    ClaudeInvocation { argv, prompt }
}

fn classify(text: &str) -> FailureCode {
    let lower = text.to_ascii_lowercase();
    if lower.contains("rate limit") || lower.contains("rate_limit") || lower.contains("429") {
        FailureCode::RateLimited
    } else {
        FailureCode::ExecutionFailed
    }
}

/// What the CLI's result object says.
#[derive(Debug, Clone, PartialEq)]
struct CliResult {
    text: String,
    tokens: u64,
    cost: Option<f64>,
    session_id: Option<String>,
}

/// Interprets the CLI's stdout (one JSON object) after a zero exit.
fn parse_result(stdout: &str) -> Result<CliResult, String> {
    let v: Value =
        serde_json::from_str(stdout.trim()).map_err(|e| format!("unparseable agent output: {e}"))?;
    let Value::Object(o) = v else {
        return Err("agent output is not a JSON object".into());
    };
    let text = o
        .get("result")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if o.get("is_error").and_then(Value::as_bool) == Some(true) {
        return Err(if text.is_empty() {
            "the agent reported an error".into()
        } else {
            format!("the agent reported an error: {text}")
        });
    }
    let usage = o.get("usage");
    let count = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_u64).unwrap_or(0);
    let tokens = count("input_tokens").saturating_add(count("output_tokens"));
    let cost = o.get("total_cost_usd").and_then(Value::as_f64);
    let session_id = o
        .get("session_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    Ok(CliResult {
        text,
        tokens,
        cost,
        session_id,
    })
}

pub(crate) async fn run_claude_code(
    env: &NodeEnv<'_>,
    workflow: &Workflow,
    node: &Node,
    scope: &Scope<'_>,
    shape: &CallShape,
) -> NodeRun {
    let id = env.node_id;
    let inv = invocation(env, workflow, node, scope, shape);
    env.sink.emit(
        DelegateStarted {
            node_id: id.into(),
            backend: BACKEND.into(),
            placement: env.sandbox.placement,
            via: DelegateVia::Cli,
        }
        .into(),
    );
    let mut exec_env = env.base_exec_env();
    for name in CLAUDE_ENV {
        if let Some(v) = env.host_env.get(*name).filter(|v| !v.is_empty()) {
            // in a container, a key is the run proxy's placeholder for it
            let v = env.sandbox.key_placeholders.get(*name).unwrap_or(v);
            exec_env.push(((*name).to_string(), v.clone()));
        }
    }
    let program = inv.argv[0].clone();
    let fingerprint = session_fingerprint(env.host_env);
    let mut argv = inv.argv;
    let servers = super::mcp::node_servers(workflow, node);
    let config = if servers.is_empty() {
        None
    } else {
        match super::mcp::write_config(env, &servers).await {
            Ok(f) => {
                argv.extend(["--mcp-config".into(), f.path(), "--strict-mcp-config".into()]);
                Some(f)
            }
            Err(e) => {
                env.sink.emit(
                    DelegateError {
                        node_id: id.into(),
                        backend: BACKEND.into(),
                        error: e.message.clone(),
                    }
                    .into(),
                );
                return NodeRun::Err(e);
            }
        }
    };
    let started = Instant::now();
    let result = run_collect(env, env.request(argv, exec_env), Some(inv.prompt.as_bytes())).await;
    if let Some(f) = config {
        super::mcp::remove_config(env, f).await;
    }
    let fail = |code: FailureCode, error: String| {
        env.sink.emit(
            DelegateError {
                node_id: id.into(),
                backend: BACKEND.into(),
                error: error.clone(),
            }
            .into(),
        );
        NodeRun::Err(NodeError::new(code, error))
    };
    let c = match result {
        Ok(c) => c,
        Err(e) => {
            let run = driver_error(id, &e);
            if let NodeRun::Err(err) = &run {
                return fail(err.code, err.message.clone());
            }
            return run;
        }
    };
    if c.status.cancelled {
        return NodeRun::Cancelled;
    }
    if c.status.code == 127 || c.status.code == 126 {
        return fail(
            FailureCode::AgentCliUnavailable,
            format!(
                "agent node '{id}': the agent CLI '{program}' is not available where the node runs (exit {}): {}",
                c.status.code,
                tail(&c.stderr)
            ),
        );
    }
    let stdout = c.stdout_text();
    if !c.status.success() {
        let detail = format!("{}\n{}", tail(&c.stdout), tail(&c.stderr));
        return fail(
            classify(&detail),
            format!(
                "agent node '{id}': {program} exited with status {}: {}",
                c.status.code,
                detail.trim()
            ),
        );
    }
    match parse_result(&stdout) {
        Ok(CliResult {
            text,
            tokens,
            cost: cost_usd,
            session_id,
        }) => {
            env.sink.emit(
                DelegateFinished {
                    node_id: id.into(),
                    backend: BACKEND.into(),
                    tokens,
                    cost_usd,
                    duration_ms: ms(started.elapsed()),
                }
                .into(),
            );
            NodeRun::Ok(NodeSuccess {
                output: stamp_session(agent_output(&text), session_id.as_deref(), BACKEND, &fingerprint),
                tokens: Some(tokens),
                cost_usd,
            })
        }
        Err(e) => fail(classify(&e), format!("agent node '{id}': {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(stdout: &str, expect: &str) {
        let got = match parse_result(stdout) {
            Ok(CliResult {
                text: t,
                tokens: n,
                cost: c,
                ..
            }) => format!("ok {t:?} {n} {c:?}"),
            Err(e) => format!("err {e} -> {}", classify(&e)),
        };
        assert_eq!(got, expect, "{stdout:?}");
    }

    #[test]
    fn fingerprints() {
        let fp = |url: &str| {
            let env = std::collections::BTreeMap::from([("ANTHROPIC_BASE_URL".to_string(), url.to_string())]);
            session_fingerprint(&env)
        };
        assert_eq!(session_fingerprint(&Default::default()), "anthropic-direct");
        assert_eq!(fp(""), "anthropic-direct");
        assert_eq!(fp("https://Gateway.example.com/v1"), "facade:gateway.example.com");
        assert_eq!(fp("http://u:p@127.0.0.1:8080"), "facade:127.0.0.1");
        assert_eq!(fp("http://[::1]:4000/x"), "facade:::1");
        assert_eq!(fp("proxy.local:9000"), "facade:proxy.local");
    }

    #[test]
    fn session_table() {
        let input = serde_json::json!({"_session_id": "abc", "_session_fingerprint": "anthropic-direct"});
        let flags =
            |mode: &str, input: &Value| session_flags(mode, input, "anthropic-direct", "n").0.join(" ");
        assert_eq!(flags("fresh", &input), "");
        assert_eq!(flags("artifacts_only", &input), "");
        assert_eq!(flags("inherit", &input), "--resume abc");
        assert_eq!(flags("inherit_if_available", &input), "--resume abc");
        assert_eq!(flags("fork", &input), "--resume abc --fork-session");
        let empty = serde_json::json!({"_session_id": "", "_session_fingerprint": "anthropic-direct"});
        for mode in ["inherit", "inherit_if_available", "fork"] {
            assert_eq!(flags(mode, &empty), "", "{mode}");
        }
        // fork without an id is fresh, silently; inherit without one warns
        assert!(session_flags("fork", &empty, "anthropic-direct", "n").1.is_none());
        let (_, note) = session_flags("inherit", &serde_json::json!({}), "anthropic-direct", "n");
        assert_eq!(note.unwrap().0, LogLevel::Warn);
    }

    #[test]
    fn cli_results() {
        check(
            r#"{"result":"hi","is_error":false,"usage":{"input_tokens":10,"output_tokens":5},"total_cost_usd":0.01}"#,
            r#"ok "hi" 15 Some(0.01)"#,
        );
        check(r#"{"result":"x"}"#, r#"ok "x" 0 None"#);
        check(
            r#"{"result":"API Error: 429 Too Many Requests","is_error":true}"#,
            "err the agent reported an error: API Error: 429 Too Many Requests -> RATE_LIMITED",
        );
        check(
            r#"{"result":"boom","is_error":true}"#,
            "err the agent reported an error: boom -> EXECUTION_FAILED",
        );
        check("[]", "err agent output is not a JSON object -> EXECUTION_FAILED");
        assert!(parse_result("not json").is_err());
    }
}
