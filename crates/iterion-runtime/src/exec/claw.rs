//! Agent and judge nodes with `backend: claw` (10.5.3): the runner (`iterion __claw-runner`) is started where
//! the node is placed, through `Run::exec` with stdin kept open, and the node is one envelope exchange with it
//! (`iterion_envelope::launcher::run`): hello, task, then the runner's events, session captures and tool calls
//! until its `result`. The one retry after `CONTEXT_LENGTH_EXCEEDED` replays the node's stored session snapshot
//! (`session_replay` before the task); the runner compacts it before its first model call.
//!
//! What the runner may cause on the host side: forwarded events of the allowed inner types (attributed to the
//! node; anything else is dropped), the node's session snapshot under the run, and tool calls, which are
//! answered only for names the task advertised. The task advertises only runner builtins, which the runner
//! executes itself, so every tool call that reaches the launcher is refused with the spec's text.
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iterion_driver::{Output, Stdin};
use iterion_envelope::launcher::{self, Handler, Level};
use iterion_envelope::{CancelSignal, StderrTail, Task, TaskResult, ToolDef, ToolOutcome, node_failure};
use iterion_spec::model::{Node, Workflow};
use iterion_spec::template::{EnvContext, expand_env};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::agent::prompt_text;
use super::node::{CallShape, NodeEnv, NodeError, NodeRun, NodeSuccess, driver_error, ms};
use super::render::Scope;
use crate::events::{DelegateError, DelegateFinished, DelegateStarted, DelegateVia, Forwarded};
use crate::failure::FailureCode;
use crate::store::LogLevel;

const BACKEND: &str = "claw";

/// The runner's subcommand.
pub const RUNNER_SUBCOMMAND: &str = "__claw-runner";

/// Where a bound runner is mounted in a container; the name `iterion` is looked up on the image's PATH
/// otherwise.
pub const CONTAINER_RUNNER_PATH: &str = "/usr/local/bin/iterion";

/// The same bound runner a second time, the path claw nodes run: a bind directly under `/`, so no process of
/// the sandbox can rename it or move a directory above it aside (`/usr/local/bin` can be swapped for a
/// directory holding a program that would receive the next claw node's provider key).
pub const CONTAINER_RUNNER_EXEC_PATH: &str = "/.iterion-claw";

/// Host variables forwarded to the claw runner through the exec API (never on a command line) for a task:
/// the variables its provider reads (`iterion_claw::provider::env_vars`: that provider's key and base URL,
/// never another provider's or a cloud's) and the context window override of compaction.
pub fn claw_env(task: &Task) -> Vec<&'static str> {
    let mut names = iterion_claw::provider::env_vars(&task.provider_hint, &task.model);
    names.push(iterion_claw::compact::CONTEXT_WINDOW_VAR);
    names
}

/// `tool_max_steps` sent when the node sets none.
pub const DEFAULT_TOOL_MAX_STEPS: u64 = 50;

/// The handshake bound: `ITERION_ENVELOPE_HANDSHAKE_TIMEOUT` (a duration such as `30s`) when set and valid,
/// else 30 s.
pub fn handshake_timeout(host_env: &std::collections::BTreeMap<String, String>) -> Duration {
    host_env
        .get("ITERION_ENVELOPE_HANDSHAKE_TIMEOUT")
        .and_then(|v| iterion_spec::duration::parse_positive(v))
        .unwrap_or(launcher::DEFAULT_HANDSHAKE_TIMEOUT)
}

fn expanded(env: &NodeEnv<'_>, field: Option<&iterion_spec::model::Spanned<String>>) -> String {
    let lookup = |n: &str| env.host_env.get(n).cloned();
    field
        .map(|f| expand_env(&f.value, EnvContext::NodeField, &lookup))
        .unwrap_or_default()
}

/// The builtins the node may use: its `tools` list (none without one), narrowed to the read-only ones by
/// `readonly: true`. The executability check refuses names that are not builtins.
pub(crate) fn allowed_builtins(node: &Node) -> Vec<String> {
    let listed = node.tools.iter().flatten().map(|t| t.value.as_str());
    listed
        .filter(|t| iterion_claw::tools::BUILTINS.contains(t))
        .filter(|t| node.readonly != Some(true) || iterion_claw::tools::READONLY.contains(t))
        .map(str::to_string)
        .collect()
}

/// The `task` of 10.5.3 for one execution of `node`.
pub(crate) fn build_task(
    env: &NodeEnv<'_>,
    workflow: &Workflow,
    node: &Node,
    scope: &Scope<'_>,
    shape: &CallShape,
) -> Task {
    let mut system_prompt = node
        .system
        .as_ref()
        .map(|s| prompt_text(env, workflow, &s.value, scope))
        .unwrap_or_default();
    if let Some(suffix) = &shape.system_suffix {
        system_prompt.push_str(suffix);
    }
    let user_prompt = match (&node.user, &shape.user_fallback) {
        (Some(u), _) => prompt_text(env, workflow, &u.value, scope),
        (None, Some(f)) => f.clone(),
        (None, None) => serde_json::to_string(scope.input).unwrap_or_default(),
    };
    let allowed = allowed_builtins(node);
    let tool_defs = allowed
        .iter()
        .map(|name| ToolDef {
            name: name.clone(),
            description: String::new(),
            input_schema: None,
        })
        .collect();
    let output_schema = shape.output_schema.clone().or_else(|| {
        node.output
            .as_ref()
            .and_then(|o| workflow.schema(&o.value))
            .map(|s| s.to_json_schema())
    });
    let model = Some(expanded(env, node.model.as_ref()))
        .filter(|m| !m.is_empty())
        .or_else(|| shape.model.clone())
        .unwrap_or_default();
    // the node's compaction settings, each falling back to the workflow's
    let node_c = node.compaction.clone().unwrap_or_default();
    let wf_c = workflow.compaction.clone().unwrap_or_default();
    let compaction = iterion_spec::model::Compaction {
        threshold: node_c.threshold.or(wf_c.threshold),
        preserve_recent: node_c.preserve_recent.or(wf_c.preserve_recent),
    };
    Task {
        node_id: env.node_id.to_string(),
        run_id: env.run_id.to_string(),
        system_prompt,
        user_prompt,
        model,
        provider_hint: expanded(env, node.provider.as_ref()),
        reasoning_effort: expanded(env, node.reasoning_effort.as_ref()),
        max_tokens: node.max_tokens.and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
        tool_max_steps: node
            .tool_max_steps
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_TOOL_MAX_STEPS),
        has_tools: !allowed.is_empty(),
        tool_defs,
        allowed_tools: allowed,
        output_schema,
        work_dir: env.sandbox.workdir.clone(),
        readonly: node.readonly == Some(true) || shape.readonly,
        compact_threshold_ratio: compaction.threshold.unwrap_or(0.0),
        compact_preserve_recent: compaction
            .preserve_recent
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
        ..Task::default()
    }
}

/// What the handler hands to the node's task, in arrival order.
enum Inbound {
    Event(Forwarded),
    Dropped(String),
    Session(Value),
    BadSession(String),
    Diagnostic(LogLevel, String),
}

/// The launcher's side of the runner's requests for one node.
struct NodeHandler {
    node_id: String,
    tool_defs: Vec<ToolDef>,
    tx: mpsc::UnboundedSender<Inbound>,
}

impl Handler for NodeHandler {
    async fn on_tool_call(&self, name: String, _input: Option<Value>) -> ToolOutcome {
        // Only advertised names, and those are the runner's own builtins: nothing runs on the host.
        match iterion_envelope::advertised_tool(&self.tool_defs, &name) {
            Err(refusal) => ToolOutcome::Error(refusal),
            Ok(def) => ToolOutcome::Error(iterion_envelope::unimplemented_tool(&def.name)),
        }
    }

    fn on_session_capture(&self, snapshot: &RawValue) {
        let _ = self.tx.send(match serde_json::from_str::<Value>(snapshot.get()) {
            Ok(v) => Inbound::Session(v),
            Err(e) => Inbound::BadSession(e.to_string()),
        });
    }

    fn on_event(&self, event: iterion_envelope::Event) {
        let payload = event.payload.unwrap_or_default();
        let _ = self
            .tx
            .send(match Forwarded::new(self.node_id.clone(), &event.kind, payload) {
                Some(f) => Inbound::Event(f),
                None => Inbound::Dropped(event.kind),
            });
    }

    fn on_diagnostic(&self, level: Level, message: &str) {
        let level = match level {
            Level::Debug => LogLevel::Debug,
            Level::Warning => LogLevel::Warn,
        };
        let _ = self.tx.send(Inbound::Diagnostic(level, message.to_string()));
    }
}

fn deliver(env: &NodeEnv<'_>, msg: Inbound) {
    let id = env.node_id;
    match msg {
        Inbound::Event(f) => env.sink.emit(f.into()),
        Inbound::Dropped(kind) => env.sink.log(
            LogLevel::Debug,
            &format!("node '{id}': runner event '{kind}' dropped (not a type the runner may send)"),
        ),
        Inbound::Session(v) => {
            // a failed write is the sink's business (the run's sink ends the run STORE_WRITE_FAILED)
            let _ = env.sink.write_session(id, &v);
        }
        Inbound::BadSession(e) => {
            env.warn(&format!("node '{id}': undecodable session snapshot dropped: {e}"))
        }
        Inbound::Diagnostic(level, m) => env.sink.log(level, &format!("node '{id}': claw runner: {m}")),
    }
}

/// The exec-scope env of the runner: the node's base entries plus the non-empty host values of
/// [`claw_env`] for its task — in a container, a provider key is the run proxy's placeholder for it.
fn runner_env(env: &NodeEnv<'_>, task: &Task) -> Vec<(String, String)> {
    let mut exec_env = env.base_exec_env();
    for name in claw_env(task) {
        if let Some(v) = env.host_env.get(name).filter(|v| !v.is_empty()) {
            let v = env.sandbox.key_placeholders.get(name).unwrap_or(v);
            exec_env.push(((*name).to_string(), v.clone()));
        }
    }
    exec_env
}

/// How the exchange with the runner ended, with what the process left behind.
struct Exchange {
    outcome: iterion_envelope::Result<TaskResult>,
    exit: Option<i32>,
    stderr: String,
}

/// Starts the runner, runs the envelope exchange while delivering the runner's events in order, then waits
/// for the process (killing it after the spec's bounds).
async fn exchange(
    env: &NodeEnv<'_>,
    program: String,
    task: &Task,
    replay: Option<&RawValue>,
) -> Result<Exchange, NodeRun> {
    let kill = tokio_util::sync::CancellationToken::new();
    let req = env
        .request(vec![program, RUNNER_SUBCOMMAND.into()], runner_env(env, task))
        .cancel(kill.clone())
        .stdin(Stdin::Piped)
        .outputs(Output::Piped, Output::Piped);
    let mut exec = match env.sandbox.run.exec(req).await {
        Ok(e) => e,
        Err(e) => return Err(driver_error(env.node_id, &e)),
    };
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (exec.stdin.take(), exec.stdout.take(), exec.stderr.take())
    else {
        return Err(NodeRun::Err(NodeError::new(
            FailureCode::EnvelopeProtocolError,
            format!(
                "node '{}': the runner's pipes were not provided by the driver",
                env.node_id
            ),
        )));
    };
    let tail = Arc::new(Mutex::new(StderrTail::new()));
    let stderr_task = tokio::spawn(collect_stderr(stderr, tail.clone()));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handler = Arc::new(NodeHandler {
        node_id: env.node_id.to_string(),
        tool_defs: task.tool_defs.clone(),
        tx,
    });
    let mut options = launcher::Options::new(concat!("iterion ", env!("CARGO_PKG_VERSION")));
    options.handshake_timeout = handshake_timeout(env.host_env);
    let signal = CancelSignal::new();
    options.cancel = signal.clone();
    let run = launcher::run(stdout, stdin, handler, task, replay, options);
    tokio::pin!(run);
    let mut cancel_sent = false;
    let outcome = loop {
        tokio::select! {
            r = &mut run => break r,
            Some(msg) = rx.recv() => deliver(env, msg),
            () = env.cancel.cancelled(), if !cancel_sent => {
                cancel_sent = true;
                signal.cancel("the node was cancelled");
            }
        }
    };
    while let Ok(msg) = rx.try_recv() {
        deliver(env, msg);
    }
    let bound = if outcome.is_ok() {
        launcher::EXIT_WAIT_AFTER_RESULT
    } else {
        launcher::KILL_AFTER_CLOSE
    };
    let killer = exec.killer();
    let wait = exec.wait();
    tokio::pin!(wait);
    let status = tokio::select! {
        s = &mut wait => s,
        () = tokio::time::sleep(bound) => {
            if !killer.has_exited() {
                env.warn(&format!("node '{}': the claw runner did not exit; killing it", env.node_id));
            }
            kill.cancel();
            wait.await
        }
    };
    // a process the runner left behind may still hold its stderr: keep what arrived, bounded
    let _ = tokio::time::timeout(launcher::KILL_AFTER_CLOSE, stderr_task).await;
    let stderr = tail.lock().unwrap_or_else(|e| e.into_inner()).text();
    Ok(Exchange {
        outcome,
        exit: status.ok().map(|s| s.code),
        stderr,
    })
}

async fn collect_stderr<R: tokio::io::AsyncRead + Unpin>(mut r: R, tail: Arc<Mutex<StderrTail>>) {
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        tail.lock().unwrap_or_else(|e| e.into_inner()).push(&buf[..n]);
    }
}

/// The stored session snapshot to replay on a retry after `CONTEXT_LENGTH_EXCEEDED` (the runner seeds its
/// conversation with it and compacts it first); `None` otherwise or when no snapshot was stored.
fn replay_snapshot(env: &NodeEnv<'_>, shape: &CallShape) -> Option<Box<RawValue>> {
    if !shape.replay_session {
        return None;
    }
    let id = env.node_id;
    let Some(snapshot) = env.sink.read_session(id) else {
        env.sink.log(
            LogLevel::Info,
            &format!("node '{id}': no stored session snapshot to replay; the retry starts fresh"),
        );
        return None;
    };
    match serde_json::value::to_raw_value(&snapshot) {
        Ok(raw) => {
            env.sink.log(
                LogLevel::Info,
                &format!("node '{id}': retrying with its stored session replayed, compacted first"),
            );
            Some(raw)
        }
        Err(e) => {
            env.warn(&format!(
                "node '{id}': the stored session snapshot cannot be replayed: {e}"
            ));
            None
        }
    }
}

/// Executes a claw node (10.5.3).
pub(crate) async fn run_claw(
    env: &NodeEnv<'_>,
    workflow: &Workflow,
    node: &Node,
    scope: &Scope<'_>,
    shape: &CallShape,
) -> NodeRun {
    let id = env.node_id;
    let task = build_task(env, workflow, node, scope, shape);
    env.sink.emit(
        DelegateStarted {
            node_id: id.into(),
            backend: BACKEND.into(),
            placement: env.sandbox.placement,
            via: DelegateVia::Runner,
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
    let Some(program) = env.sandbox.claw_runner.clone() else {
        return fail(
            FailureCode::RunnerIncompatible,
            format!("node '{id}': no claw runner program is configured where the node runs"),
        );
    };
    let replay = replay_snapshot(env, shape);
    let started = Instant::now();
    let ex = match exchange(env, program, &task, replay.as_deref()).await {
        Ok(ex) => ex,
        Err(NodeRun::Err(e)) => return fail(e.code, e.message),
        Err(other) => return other,
    };
    if matches!(ex.outcome, Err(iterion_envelope::Error::Cancelled { .. })) || env.cancel.is_cancelled() {
        return NodeRun::Cancelled;
    }
    if let Some(f) = node_failure(&ex.outcome, ex.exit, &ex.stderr) {
        let code = FailureCode::parse(&f.code).unwrap_or(FailureCode::ExecutionFailed);
        return fail(code, format!("node '{id}': {}", f.message));
    }
    let Ok(result) = ex.outcome else {
        return fail(
            FailureCode::EnvelopeProtocolError,
            format!("node '{id}': claw backend: no result"),
        );
    };
    let cost_usd = (result.cost_usd > 0.0).then_some(result.cost_usd);
    env.sink.emit(
        DelegateFinished {
            node_id: id.into(),
            backend: BACKEND.into(),
            tokens: result.tokens,
            cost_usd,
            duration_ms: ms(started.elapsed()),
        }
        .into(),
    );
    NodeRun::Ok(NodeSuccess {
        output: Value::Object(result.output.unwrap_or_default()),
        tokens: Some(result.tokens),
        cost_usd,
    })
}
