//! Agent, judge and `llm` router nodes with `backend: codex`: the host `codex` CLI (`ITERION_CODEX_BIN`, else `codex` on
//! the PATH) runs `codex exec --json` with the prompt on stdin. Codex cannot run inside the iterion sandbox (it
//! brings its own sandbox and cannot be routed through the sandbox's command path), so a codex node only runs
//! where the run is not sandboxed: on the host, partially sandboxed by codex itself (`--sandbox read-only` for
//! a `readonly` node, else `workspace-write`). A launch whose codex node (any node that calls a model:
//! [`codex_nodes`]) would run in a container is refused before the run starts ([`plan_refusal`]), by the dry
//! run and `sandbox doctor --strict` alike, and `iterion validate` reports it for a run without flags
//! ([`placement_diagnostics`]); each execution logs a warning that it runs on the host.
//!
//! Sessions follow the `claude_code` rules: `_session_id` is codex's thread id, continued with
//! `codex exec … resume <thread id> -` (codex cannot fork a thread: `session: fork` runs fresh with a warning).
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use iterion_spec::model::{Node, Workflow};
use iterion_spec::template::{EnvContext, expand_env};
use serde_json::Value;

use super::agent::{prompt_text, session_flags};
use super::node::{CallShape, NodeEnv, NodeError, NodeRun, NodeSuccess, driver_error, ms, run_collect, tail};
use super::output::{agent_output, stamp_session};
use super::render::Scope;
use crate::events::{DelegateError, DelegateFinished, DelegateStarted, DelegateVia};
use crate::failure::FailureCode;
use crate::store::LogLevel;

const BACKEND: &str = "codex";

/// What the launch refusal of a sandboxed codex node tells the operator to do.
pub const CODEX_SANDBOX_HINT: &str = "run with --sandbox none, or set 'sandbox: none' on the workflow (an agent or judge may set it on itself; a router follows the workflow), or use backend claw, which runs inside the sandbox";

/// The codex CLI program: `ITERION_CODEX_BIN` when set and non-empty, else `codex`.
pub fn codex_program(host_env: &BTreeMap<String, String>) -> String {
    host_env
        .get("ITERION_CODEX_BIN")
        .filter(|s| !s.is_empty())
        .cloned()
        .unwrap_or_else(|| "codex".into())
}

/// Every node that can run codex: the nodes that call a model ([`Workflow::calls_model`]: agents, judges,
/// `llm` routers, human nodes a model answers) whose backend (after `${…}` expansion) is `codex`.
pub fn codex_nodes(workflow: &Workflow, env: &BTreeMap<String, String>) -> BTreeSet<String> {
    workflow
        .nodes
        .iter()
        .filter(|n| workflow.calls_model(n))
        .filter(|n| super::backends::node_backend(workflow, n, env).0 == BACKEND)
        .map(|n| n.name.value.clone())
        .collect()
}

/// The refusal (message) of a launch whose codex nodes `in_container` would run in a container; `None` when
/// there is none. The caller fails the run with `SANDBOX_SPEC_INVALID` and [`CODEX_SANDBOX_HINT`] before it
/// starts.
pub fn sandboxed_codex_refusal<'a>(in_container: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let nodes: Vec<&str> = in_container.into_iter().collect();
    if nodes.is_empty() {
        return None;
    }
    let quoted: Vec<String> = nodes.iter().map(|n| format!("'{n}'")).collect();
    Some(format!(
        "backend codex cannot run inside the iterion sandbox (it runs the host codex CLI with its own sandbox), and {} {} would run in a container",
        if nodes.len() == 1 { "node" } else { "nodes" },
        quoted.join(", ")
    ))
}

/// The refusal of a plan that places one of the `codex` nodes in a container (run or own), if any.
pub fn plan_refusal(plan: &iterion_spec::resolved::SandboxPlan, codex: &BTreeSet<String>) -> Option<String> {
    use iterion_spec::resolved::NodePlacement;
    sandboxed_codex_refusal(
        plan.nodes
            .iter()
            .filter(|(id, p)| codex.contains(*id) && !matches!(p, NodePlacement::Host { .. }))
            .map(|(id, _)| id.as_str()),
    )
}

/// The refusal a plain `iterion run FILE` gives a codex node, as `iterion validate` reports it: the sandbox is
/// resolved as that run would resolve it (no flags, the `ITERION_SANDBOX_*` settings of `env`, the built-in
/// `auto` default), assuming a container engine answers; each codex node it places in a container is an
/// `X011` error at the node's backend, with the message and hint of the launch refusal. Nothing is read: the
/// placement does not depend on what a `devcontainer.json` holds. A resolution that fails reports nothing
/// here (`run` says why).
pub fn placement_diagnostics(
    workflow: &Workflow,
    env: &BTreeMap<String, String>,
) -> Vec<iterion_spec::diag::Diagnostic> {
    use iterion_spec::resolve::{ModeChoice, ResolveInputs, resolve_sandbox};
    let codex = codex_nodes(workflow, env);
    if codex.is_empty() {
        return Vec::new();
    }
    let reader = iterion_spec::source::MemReader::new();
    let mut inputs = ResolveInputs::new("/", &reader);
    inputs.env = env.clone();
    inputs.builtin_default_mode = ModeChoice::Auto;
    inputs.binary_version = Some(env!("CARGO_PKG_VERSION").to_owned());
    let Ok(plan) = resolve_sandbox(workflow, &inputs) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for node in workflow.nodes.iter().filter(|n| codex.contains(&n.name.value)) {
        let id = node.name.value.as_str();
        if plan_refusal(&plan, &BTreeSet::from([id.to_owned()])).is_none() {
            continue;
        }
        let (_, span) = super::backends::node_backend(workflow, node, env);
        let message = sandboxed_codex_refusal([id]).unwrap_or_default();
        out.push(super::backends::at("X011", &workflow.file, span, message).with_hint(CODEX_SANDBOX_HINT));
    }
    out
}

/// The session fingerprint of a codex call: `openai-direct` without `OPENAI_BASE_URL`, else
/// `facade:<host of the URL>`.
fn fingerprint(host_env: &BTreeMap<String, String>) -> String {
    match host_env.get("OPENAI_BASE_URL").filter(|u| !u.is_empty()) {
        None => "openai-direct".into(),
        Some(url) => format!("facade:{}", super::agent::url_host(url)),
    }
}

/// The argv and stdin of one codex execution.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CodexInvocation {
    pub argv: Vec<String>,
    pub prompt: String,
}

/// The thread to continue, from the node's `session` mode, its input and the call shape (logging the choice).
fn resume_thread(env: &NodeEnv<'_>, node: &Node, scope: &Scope<'_>, shape: &CallShape) -> Option<String> {
    let fp = fingerprint(env.host_env);
    let mode = node.session.as_ref().map_or("fresh", |s| s.value.as_str());
    let (flags, mut note) = session_flags(mode, scope.input, &fp, env.node_id);
    let mut thread = match flags.as_slice() {
        [_, id] => Some(id.clone()),
        [_, _, _] => {
            note = Some((
                LogLevel::Warn,
                format!(
                    "node '{}': codex cannot fork a session; running fresh",
                    env.node_id
                ),
            ));
            None
        }
        _ => None,
    };
    if let Some(why) = &shape.drop_session {
        thread = None;
        note = Some((LogLevel::Warn, why.clone()));
    }
    if thread.is_none() {
        thread = shape.resume_session.clone();
    }
    if let Some((level, message)) = note {
        env.sink.log(level, &message);
    }
    thread
}

/// The JSON Schema the node's answer must follow, if any.
fn output_schema(workflow: &Workflow, node: &Node, shape: &CallShape) -> Option<Value> {
    shape.output_schema.clone().or_else(|| {
        node.output
            .as_ref()
            .and_then(|o| workflow.schema(&o.value))
            .map(|s| s.to_json_schema())
    })
}

/// Builds the invocation; `schema_path` is the file holding the output schema (`--output-schema`).
pub(crate) fn invocation(
    env: &NodeEnv<'_>,
    workflow: &Workflow,
    node: &Node,
    scope: &Scope<'_>,
    shape: &CallShape,
    schema_path: Option<&str>,
) -> CodexInvocation {
    let lookup = |n: &str| env.host_env.get(n).cloned();
    let readonly = node.readonly == Some(true) || shape.readonly;
    let mut argv = vec![
        codex_program(env.host_env),
        "exec".into(),
        "--json".into(),
        "--skip-git-repo-check".into(),
        "--color".into(),
        "never".into(),
        "-C".into(),
        env.sandbox.workdir.clone(),
        "--sandbox".into(),
        if readonly { "read-only" } else { "workspace-write" }.into(),
    ];
    let model = node
        .model
        .as_ref()
        .map(|m| expand_env(&m.value, EnvContext::NodeField, &lookup))
        .filter(|m| !m.is_empty())
        .or_else(|| shape.model.clone());
    if let Some(model) = model {
        argv.extend(["-m".into(), model]);
    }
    let schema = output_schema(workflow, node, shape);
    if let (Some(_), Some(path)) = (&schema, schema_path) {
        argv.extend(["--output-schema".into(), path.to_string()]);
    }
    // the exec options go before the subcommand: `codex exec [options] resume <thread id> -`
    if let Some(thread) = resume_thread(env, node, scope, shape) {
        argv.extend(["resume".into(), thread]);
    }
    argv.push("-".into());
    let mut system = node
        .system
        .as_ref()
        .map(|s| prompt_text(env, workflow, &s.value, scope))
        .unwrap_or_default();
    if let Some(suffix) = &shape.system_suffix {
        system.push_str(suffix);
    }
    let user = match (&node.user, &shape.user_fallback) {
        (Some(u), _) => prompt_text(env, workflow, &u.value, scope),
        (None, Some(f)) => f.clone(),
        (None, None) => serde_json::to_string(scope.input).unwrap_or_default(),
    };
    let mut prompt = if system.is_empty() {
        user
    } else {
        format!("{system}\n\n{user}")
    };
    if let Some(schema) = &schema {
        prompt.push_str(
            "\n\nAnswer with only a JSON object (no prose, no code fence) that is valid against this JSON Schema:\n",
        );
        prompt.push_str(&schema.to_string());
    }
    CodexInvocation { argv, prompt }
}

/// What the CLI's JSONL says.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct CodexResult {
    pub thread_id: Option<String>,
    /// The last `agent_message`.
    pub text: Option<String>,
    pub tokens: u64,
    /// `turn.failed` or `error` messages, in order.
    pub errors: Vec<String>,
}

/// Reads the `--json` event stream; lines that are not JSON objects are ignored.
pub(crate) fn parse_events(stdout: &str) -> CodexResult {
    let mut r = CodexResult::default();
    for line in stdout.lines() {
        let Ok(Value::Object(ev)) = serde_json::from_str::<Value>(line.trim()) else {
            continue;
        };
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        match ev.get("type").and_then(Value::as_str).unwrap_or_default() {
            "thread.started" => r.thread_id = text(ev.get("thread_id")).filter(|s| !s.is_empty()),
            "item.completed" => {
                let item = ev.get("item");
                if item.and_then(|i| i.get("type")).and_then(Value::as_str) == Some("agent_message") {
                    r.text = text(item.and_then(|i| i.get("text")));
                }
            }
            "turn.completed" => {
                let usage = ev.get("usage");
                let n = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_u64).unwrap_or(0);
                r.tokens = r
                    .tokens
                    .saturating_add(n("input_tokens"))
                    .saturating_add(n("output_tokens"));
            }
            "turn.failed" => r
                .errors
                .extend(text(ev.get("error").and_then(|e| e.get("message")))),
            "error" => r.errors.extend(text(ev.get("message"))),
            _ => {}
        }
    }
    r
}

/// The failure code of a codex error text.
pub(crate) fn classify(text: &str) -> FailureCode {
    let lower = text.to_ascii_lowercase();
    if lower.contains("rate limit") || lower.contains("rate_limit") || lower.contains("429") {
        FailureCode::RateLimited
    } else if lower.contains("context window")
        || lower.contains("context_length_exceeded")
        || lower.contains("context length")
    {
        FailureCode::ContextLengthExceeded
    } else {
        FailureCode::classify_message(text)
    }
}

/// The schema as codex's structured output accepts it: every object with `properties` closed
/// (`additionalProperties: false`), as OpenAI's strict mode requires.
pub(crate) fn strict_schema(mut v: Value) -> Value {
    fn close(v: &mut Value) {
        match v {
            Value::Object(o) => {
                if o.contains_key("properties") && !o.contains_key("additionalProperties") {
                    o.insert("additionalProperties".into(), Value::Bool(false));
                }
                o.values_mut().for_each(close);
            }
            Value::Array(a) => a.iter_mut().for_each(close),
            _ => {}
        }
    }
    close(&mut v);
    v
}

/// The output schema written for `--output-schema`, removed when dropped.
struct SchemaFile(PathBuf);

impl SchemaFile {
    fn create(env: &NodeEnv<'_>, schema: &Value) -> Result<SchemaFile, String> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "iterion-codex-schema-{}-{}-{}.json",
            std::process::id(),
            env.run_id.replace(['/', '\\'], "_"),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| format!("cannot write the output schema file {}: {e}", path.display()))?;
        f.write_all(strict_schema(schema.clone()).to_string().as_bytes())
            .map_err(|e| format!("cannot write the output schema file {}: {e}", path.display()))?;
        Ok(SchemaFile(path))
    }
}

impl Drop for SchemaFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Executes a codex node on the host.
pub(crate) async fn run_codex(
    env: &NodeEnv<'_>,
    workflow: &Workflow,
    node: &Node,
    scope: &Scope<'_>,
    shape: &CallShape,
) -> NodeRun {
    let id = env.node_id;
    env.sink.emit(
        DelegateStarted {
            node_id: id.into(),
            backend: BACKEND.into(),
            placement: env.sandbox.placement,
            via: DelegateVia::Cli,
        }
        .into(),
    );
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
    if env.in_container() {
        return fail(
            FailureCode::SandboxSpecInvalid,
            format!(
                "node '{id}': {}",
                sandboxed_codex_refusal([id]).unwrap_or_default()
            ),
        );
    }
    let schema_file = match output_schema(workflow, node, shape) {
        Some(schema) => match SchemaFile::create(env, &schema) {
            Ok(f) => Some(f),
            Err(e) => return fail(FailureCode::ExecutionFailed, format!("node '{id}': {e}")),
        },
        None => None,
    };
    let schema_path = schema_file.as_ref().map(|f| f.0.to_string_lossy().into_owned());
    let inv = invocation(env, workflow, node, scope, shape, schema_path.as_deref());
    let argv = inv.argv;
    let mode = if argv.iter().any(|a| a == "read-only") {
        "read-only"
    } else {
        "workspace-write"
    };
    env.warn(&format!(
        "node '{id}': backend codex runs the host codex CLI outside the iterion sandbox, partially sandboxed by codex itself (--sandbox {mode})"
    ));
    let program = argv[0].clone();
    let started = Instant::now();
    let result = run_collect(
        env,
        env.request(argv, env.base_exec_env()),
        Some(inv.prompt.as_bytes()),
    )
    .await;
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
                "node '{id}': the codex CLI '{program}' is not available on the host (exit {}): {}; install codex or set ITERION_CODEX_BIN to its path",
                c.status.code,
                tail(&c.stderr)
            ),
        );
    }
    let parsed = parse_events(&c.stdout_text());
    if !c.status.success() || !parsed.errors.is_empty() {
        let detail = if parsed.errors.is_empty() {
            format!("{}\n{}", tail(&c.stdout), tail(&c.stderr))
        } else {
            parsed.errors.join("; ")
        };
        return fail(
            classify(&detail),
            format!(
                "node '{id}': {program} exited with status {}: {}",
                c.status.code,
                detail.trim()
            ),
        );
    }
    let Some(text) = parsed.text else {
        return fail(
            FailureCode::ExecutionFailed,
            format!("node '{id}': codex finished without an agent message"),
        );
    };
    env.sink.emit(
        DelegateFinished {
            node_id: id.into(),
            backend: BACKEND.into(),
            tokens: parsed.tokens,
            cost_usd: None,
            duration_ms: ms(started.elapsed()),
        }
        .into(),
    );
    NodeRun::Ok(NodeSuccess {
        output: stamp_session(
            agent_output(&text),
            parsed.thread_id.as_deref(),
            BACKEND,
            &fingerprint(env.host_env),
        ),
        tokens: Some(parsed.tokens),
        cost_usd: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_of_a_successful_turn() {
        let out = [
            r#"{"type":"thread.started","thread_id":"th-1"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.completed","item":{"id":"i0","type":"reasoning","text":"thinking"}}"#,
            r#"{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"first"}}"#,
            "not json",
            r#"{"type":"item.completed","item":{"id":"i2","type":"agent_message","text":"{\"ok\":true}"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":40,"output_tokens":7}}"#,
        ]
        .join("\n");
        let r = parse_events(&out);
        assert_eq!(r.thread_id.as_deref(), Some("th-1"));
        assert_eq!(r.text.as_deref(), Some("{\"ok\":true}"));
        assert_eq!(r.tokens, 107);
        assert!(r.errors.is_empty());
    }

    #[test]
    fn failures_and_their_codes() {
        let r = parse_events(
            "{\"type\":\"turn.failed\",\"error\":{\"message\":\"Rate limit reached for gpt-5\"}}\n{\"type\":\"error\",\"message\":\"stream closed\"}",
        );
        assert_eq!(r.errors, ["Rate limit reached for gpt-5", "stream closed"]);
        assert_eq!(classify(&r.errors.join("; ")), FailureCode::RateLimited);
        assert_eq!(
            classify("Your input exceeds the context window of this model"),
            FailureCode::ContextLengthExceeded
        );
        assert_eq!(classify("something broke"), FailureCode::ExecutionFailed);
        assert_eq!(classify("connection refused"), FailureCode::NetworkTransient);
    }

    #[test]
    fn schemas_are_closed_for_strict_mode() {
        let s = serde_json::json!({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}, "c": {}}, "required": ["a", "c"]});
        assert_eq!(
            strict_schema(s),
            serde_json::json!({"type": "object", "additionalProperties": false, "properties": {"a": {"type": "object", "additionalProperties": false, "properties": {"b": {"type": "string"}}}, "c": {}}, "required": ["a", "c"]})
        );
    }

    #[test]
    fn refusal_names_the_nodes() {
        assert_eq!(sandboxed_codex_refusal(std::iter::empty()), None);
        assert_eq!(
            sandboxed_codex_refusal(["a"]).unwrap(),
            "backend codex cannot run inside the iterion sandbox (it runs the host codex CLI with its own sandbox), and node 'a' would run in a container"
        );
        assert!(
            sandboxed_codex_refusal(["a", "b"])
                .unwrap()
                .ends_with("nodes 'a', 'b' would run in a container")
        );
    }

    #[test]
    fn program_and_fingerprint() {
        let env = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert_eq!(codex_program(&BTreeMap::new()), "codex");
        assert_eq!(codex_program(&env("ITERION_CODEX_BIN", "")), "codex");
        assert_eq!(
            codex_program(&env("ITERION_CODEX_BIN", "/opt/codex")),
            "/opt/codex"
        );
        assert_eq!(fingerprint(&BTreeMap::new()), "openai-direct");
        assert_eq!(
            fingerprint(&env("OPENAI_BASE_URL", "https://gw.example.com/v1")),
            "facade:gw.example.com"
        );
    }
}
