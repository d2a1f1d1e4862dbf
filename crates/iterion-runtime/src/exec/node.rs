//! What tool and agent nodes share: the per-execution environment, results, and capped output collection.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use iterion_driver::{Collected, ExecRequest, ExitStatus, Output, Stdin};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::context::{NodeSandbox, RunSink};
use crate::events::PlacementKind;
use crate::failure::FailureCode;
use crate::store::LogLevel;

/// Per-stream capture cap of tool and agent processes (16 MiB).
pub(crate) const CAPTURE_CAP: usize = 16 * 1024 * 1024;
/// Bytes of stdout / stderr kept in a node error message.
pub(crate) const TAIL: usize = 4 * 1024;

/// How a model call made for something other than an agent node (an `llm` router) changes the agent call:
/// the default is a plain agent node.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallShape {
    /// Appended to the rendered system prompt.
    pub system_suffix: Option<String>,
    /// Replaces the node's `output` schema.
    pub output_schema: Option<Value>,
    /// The user prompt when the node has no `user` prompt (instead of the input as JSON).
    pub user_fallback: Option<String>,
    /// The model when the node sets none.
    pub model: Option<String>,
    /// Only reading tools.
    pub readonly: bool,
    /// Continue this agent session (`--resume`), unless the node's `session` mode already resumes one.
    pub resume_session: Option<String>,
    /// Why the session in the node's input must not be continued here (it was made in another placement).
    pub drop_session: Option<String>,
    /// A retry after `CONTEXT_LENGTH_EXCEEDED`: a claw node gets its stored session snapshot replayed (and its
    /// runner compacts it before the first model call).
    pub replay_session: bool,
}

/// Everything one node execution needs.
pub(crate) struct NodeEnv<'a> {
    pub run_id: &'a str,
    pub node_id: &'a str,
    pub sandbox: &'a NodeSandbox,
    /// Lifecycle-controlled exec entries (proxy credentials).
    pub exec_env: Vec<(String, String)>,
    pub host_env: &'a BTreeMap<String, String>,
    pub sink: &'a dyn RunSink,
    /// Cancelled on operator cancellation and on deadlines.
    pub cancel: CancellationToken,
    /// Deny-class names already warned about (once per name per run).
    pub warned_env: &'a Mutex<BTreeSet<String>>,
}

impl NodeEnv<'_> {
    /// The exec-scope env of every process of this node: the lifecycle entries plus `ITERION_RUN_ID` and
    /// `ITERION_NODE_ID`.
    pub fn base_exec_env(&self) -> Vec<(String, String)> {
        let mut env = self.exec_env.clone();
        env.push(("ITERION_RUN_ID".into(), self.run_id.into()));
        env.push(("ITERION_NODE_ID".into(), self.node_id.into()));
        env
    }

    pub fn in_container(&self) -> bool {
        self.sandbox.placement != PlacementKind::Host
    }

    pub fn warn(&self, message: &str) {
        self.sink.log(LogLevel::Warn, message);
    }

    /// Logs once per run that `${NAME}` was withheld from a container node.
    pub fn warn_withheld(&self, names: &[String]) {
        let mut warned = self.warned_env.lock().unwrap_or_else(|e| e.into_inner());
        for n in names {
            if warned.insert(n.clone()) {
                self.warn(&format!(
                    "node '{}': ${{{n}}} is not expanded from the host in a sandboxed command ({n} is in the env deny class); it is left to the container's shell",
                    self.node_id
                ));
            }
        }
    }

    /// A request with the node's workdir, env and cancellation.
    pub fn request(&self, argv: Vec<String>, env: Vec<(String, String)>) -> ExecRequest {
        let mut req = ExecRequest::new(argv)
            .workdir(self.sandbox.workdir.clone())
            .cancel(self.cancel.clone())
            .label(self.node_id.to_string());
        req.env = env;
        req
    }
}

/// A node error before retries are decided.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeError {
    pub code: FailureCode,
    pub message: String,
}

impl NodeError {
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        NodeError {
            code,
            message: message.into(),
        }
    }
}

/// A successful node output with what it consumed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeSuccess {
    pub output: Value,
    pub tokens: Option<u64>,
    pub cost_usd: Option<f64>,
}

/// How one node execution ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NodeRun {
    Ok(NodeSuccess),
    Err(NodeError),
    /// The node's exec was terminated because its cancellation token fired.
    Cancelled,
}

/// The last `TAIL` bytes of a capture, as text.
pub(crate) fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(TAIL);
    let mut s = String::from_utf8_lossy(&bytes[start..]).into_owned();
    s.truncate(s.trim_end().len());
    s
}

/// Maps a driver failure during a node (the sandbox is gone or the engine unreachable) to `SANDBOX_LOST`.
pub(crate) fn driver_error(node_id: &str, e: &iterion_driver::Error) -> NodeRun {
    if matches!(e, iterion_driver::Error::Cancelled) {
        return NodeRun::Cancelled;
    }
    NodeRun::Err(NodeError::new(
        FailureCode::SandboxLost,
        format!("node '{node_id}': the sandbox failed during execution: {e}"),
    ))
}

/// Runs a request, writes `stdin_data` (when given) to a piped stdin and closes it, reads both outputs capped at
/// [`CAPTURE_CAP`] and waits.
pub(crate) async fn run_collect(
    env: &NodeEnv<'_>,
    req: ExecRequest,
    stdin_data: Option<&[u8]>,
) -> Result<Collected, iterion_driver::Error> {
    let req = req
        .stdin(if stdin_data.is_some() {
            Stdin::Piped
        } else {
            Stdin::Closed
        })
        .outputs(Output::Piped, Output::Piped);
    let mut exec = env.sandbox.run.exec(req).await?;
    let stdin = exec.stdin.take();
    let out = exec.stdout.take();
    let err = exec.stderr.take();
    let feed = async move {
        if let (Some(mut w), Some(data)) = (stdin, stdin_data) {
            // a process that exits without reading its stdin is not an error of ours
            let _ = w.write_all(data).await;
            let _ = w.shutdown().await;
        }
    };
    async fn read<R: tokio::io::AsyncRead + Unpin>(r: Option<R>) -> (Vec<u8>, bool) {
        let Some(mut r) = r else {
            return (Vec::new(), false);
        };
        let mut out = Vec::new();
        let mut truncated = false;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let keep = n.min(CAPTURE_CAP.saturating_sub(out.len()));
                    out.extend_from_slice(&buf[..keep]);
                    truncated |= keep < n;
                }
            }
        }
        (out, truncated)
    }
    let ((), (stdout, stdout_truncated), (stderr, stderr_truncated)) =
        tokio::join!(feed, read(out), read(err));
    let status: ExitStatus = exec.wait().await?;
    for (what, t) in [("stdout", stdout_truncated), ("stderr", stderr_truncated)] {
        if t {
            env.warn(&format!(
                "node '{}': {what} exceeded {} MiB; the excess was discarded",
                env.node_id,
                CAPTURE_CAP / (1024 * 1024)
            ));
        }
    }
    Ok(Collected {
        status,
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
    })
}

/// Milliseconds of a duration, saturating.
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
