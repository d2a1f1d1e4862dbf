//! How the launcher turns the multiplexer's outcome, the runner's exit status and its stderr into a node error.

use std::collections::VecDeque;

use crate::error::Error;
use crate::wire::{TaskResult, error_code};

/// Bytes of runner stderr the launcher keeps.
pub const STDERR_TAIL_BYTES: usize = 64 * 1024;

/// The runtime failure code of a runner that cannot do the handshake.
pub const RUNNER_INCOMPATIBLE: &str = "RUNNER_INCOMPATIBLE";

/// The run-level code of a cancelled node.
pub const CANCELLED: &str = "CANCELLED";

/// The last [`STDERR_TAIL_BYTES`] of a runner's stderr.
#[derive(Debug, Default, Clone)]
pub struct StderrTail {
    bytes: VecDeque<u8>,
}

impl StderrTail {
    /// An empty tail.
    pub fn new() -> Self {
        StderrTail::default()
    }

    /// Appends bytes, dropping the oldest beyond the limit.
    pub fn push(&mut self, chunk: &[u8]) {
        let chunk = &chunk[chunk.len().saturating_sub(STDERR_TAIL_BYTES)..];
        let overflow = (self.bytes.len() + chunk.len()).saturating_sub(STDERR_TAIL_BYTES);
        self.bytes.drain(..overflow);
        self.bytes.extend(chunk);
    }

    /// The tail as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        String::from_utf8_lossy(&all).into_owned()
    }
}

/// A failed claw node: the message and its failure code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFailure {
    /// `claw backend: …`, with the stderr tail appended when there is one.
    pub message: String,
    /// The failure code.
    pub code: String,
}

/// The node error for a multiplexer outcome, or `None` when the task succeeded.
///
/// `exit_status` is the runner's exit status when known; `stderr_tail` is appended to every message.
pub fn node_failure(
    outcome: &Result<TaskResult, Error>,
    exit_status: Option<i32>,
    stderr_tail: &str,
) -> Option<NodeFailure> {
    let (message, code) = match outcome {
        Ok(result) if result.is_success() => return None,
        Ok(result) => {
            let code = if result.error_code.is_empty() {
                error_code::EXECUTION_FAILED
            } else {
                &result.error_code
            };
            (
                format!("claw backend: runner: {}", result.error),
                code.to_string(),
            )
        }
        Err(Error::RunnerExited) => {
            let message = match exit_status {
                Some(0) => "claw backend: runner exited without sending a result".to_string(),
                Some(n) => format!("claw backend: runner exited with status {n} without a result"),
                None => "claw backend: runner exited without sending a result".to_string(),
            };
            (message, error_code::ENVELOPE_PROTOCOL_ERROR.to_string())
        }
        Err(Error::Protocol { detail }) => (
            format!("claw backend: envelope protocol: {detail}"),
            error_code::ENVELOPE_PROTOCOL_ERROR.to_string(),
        ),
        Err(e @ Error::HandshakeFailed { .. }) => {
            (format!("claw backend: {e}"), RUNNER_INCOMPATIBLE.to_string())
        }
        Err(Error::Cancelled { .. }) => ("claw backend: cancelled".to_string(), CANCELLED.to_string()),
        Err(e) => (
            format!("claw backend: envelope protocol: {}", error_chain(e)),
            error_code::ENVELOPE_PROTOCOL_ERROR.to_string(),
        ),
    };
    let tail = stderr_tail.trim_end();
    let message = if tail.is_empty() {
        message
    } else {
        format!("{message}\nrunner stderr:\n{tail}")
    };
    Some(NodeFailure { message, code })
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
