//! Typed payloads of the envelope types. Field order is the wire order, so encodings are reproducible byte for
//! byte; empty, zero and false fields are omitted, unknown fields are ignored on decode.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The value of `hello.protocol`.
pub const PROTOCOL: &str = "iterion.envelope";

/// The key of an `ask_user_answer` that carries the launcher's error instead of answers.
pub const ANSWER_ERROR_KEY: &str = "__error__";

/// The backend name a launcher assumes when a `result` leaves `backend_name` empty.
pub const DEFAULT_BACKEND_NAME: &str = "claw";

/// Envelope type names (the header's `type`).
pub mod kind {
    /// First envelope of each side.
    pub const HELLO: &str = "hello";
    /// Launcher → runner: a session snapshot to resume from.
    pub const SESSION_REPLAY: &str = "session_replay";
    /// Launcher → runner: the task to run.
    pub const TASK: &str = "task";
    /// Runner → launcher: a tool for the launcher to execute.
    pub const TOOL_CALL: &str = "tool_call";
    /// Launcher → runner: the reply to a `tool_call`.
    pub const TOOL_RESULT: &str = "tool_result";
    /// Runner → launcher: questions for the user.
    pub const ASK_USER: &str = "ask_user";
    /// Launcher → runner: the reply to an `ask_user`.
    pub const ASK_USER_ANSWER: &str = "ask_user_answer";
    /// Runner → launcher: the latest session snapshot.
    pub const SESSION_CAPTURE: &str = "session_capture";
    /// Runner → launcher: an observability record.
    pub const EVENT: &str = "event";
    /// Runner → launcher: the terminal result of the task.
    pub const RESULT: &str = "result";
    /// Launcher → runner: stop the task.
    pub const CANCEL: &str = "cancel";
}

/// Values of [`TaskResult::error_code`].
pub mod error_code {
    /// The provider answered HTTP 429.
    pub const RATE_LIMITED: &str = "RATE_LIMITED";
    /// The conversation no longer fits the model's context window.
    pub const CONTEXT_LENGTH_EXCEEDED: &str = "CONTEXT_LENGTH_EXCEEDED";
    /// A connection to the provider failed.
    pub const NETWORK_TRANSIENT: &str = "NETWORK_TRANSIENT";
    /// Any other failure of the task.
    pub const EXECUTION_FAILED: &str = "EXECUTION_FAILED";
    /// The launcher broke the envelope protocol.
    pub const ENVELOPE_PROTOCOL_ERROR: &str = "ENVELOPE_PROTOCOL_ERROR";
    /// Launcher and runner share no protocol version.
    pub const PROTOCOL_VERSION_MISMATCH: &str = "PROTOCOL_VERSION_MISMATCH";
    /// The task was cancelled.
    pub const CANCELLED: &str = "CANCELLED";
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero_i64(n: &i64) -> bool {
    *n == 0
}

fn is_zero_f64(n: &f64) -> bool {
    *n == 0.0
}

/// Which side sent a `hello`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The host-side runtime.
    Launcher,
    /// `iterion __claw-runner`.
    Runner,
}

/// The `hello` payload of either side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Always [`PROTOCOL`].
    pub protocol: String,
    /// The sender's role.
    pub role: Role,
    /// Launcher: lowest version it speaks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_version: Option<u32>,
    /// Launcher: highest version it speaks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_version: Option<u32>,
    /// Runner: the chosen version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// Free text for diagnostics.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub software: String,
    /// Runner: optional features it implements, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
}

/// A tool the model may use, as the launcher advertises it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolDef {
    /// The launcher's tool name.
    pub name: String,
    /// What the tool does.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// JSON Schema of the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
}

/// The `task` payload: one agent or judge node to execute. Secrets never go here.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[allow(missing_docs)] // the carried fields have no effect in this version; the others are documented
pub struct Task {
    /// Node being executed (required).
    pub node_id: String,
    /// Run id, for runner-side logs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run_id: String,
    /// Rendered system prompt.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub system_prompt: String,
    /// Rendered user prompt.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_prompt: String,
    /// Model id, provider prefix allowed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// Explicit provider.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider_hint: String,
    /// `low` … `max` or a provider-specific string.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reasoning_effort: String,
    /// Per-call output limit.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub max_tokens: u64,
    /// Maximum model calls in the loop.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub tool_max_steps: u64,
    /// Whether any tool is available.
    #[serde(default, skip_serializing_if = "is_false")]
    pub has_tools: bool,
    /// Every tool the model may use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_defs: Vec<ToolDef>,
    /// Allow-list applied by the runner on top of `tool_defs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_tools: Vec<String>,
    /// Expected output shape (JSON Schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Directory the builtin tools operate in.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub work_dir: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub base_dir: String,
    /// Restrict builtins to read-only ones.
    #[serde(default, skip_serializing_if = "is_false")]
    pub readonly: bool,
    /// Compaction trigger, a fraction of the context window.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub compact_threshold_ratio: f64,
    /// Messages kept verbatim when compacting.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub compact_preserve_recent: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub store_dir: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub board_http_endpoint: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub board_run_token: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session_fingerprint: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub fork_session: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub interaction_enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_conversation: Option<Value>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resume_pending_tool_use_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resume_answer: String,
}

/// The `tool_call` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Tool name as the model spelled it.
    pub name: String,
    /// The tool's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
}

/// A tool that paused to ask the user (the `ask_user` member of a `tool_result`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AskUserToolFail {
    /// The question.
    pub question: String,
    /// The tool use to resume with the answer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pending_tool_use_id: String,
    /// The conversation to resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Value>,
}

/// The `tool_result` payload. A launcher sets at most one member; see [`ToolResult::outcome`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolResult {
    /// The tool's output.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
    /// The tool's failure, fed back to the model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// The tool paused to ask the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_user: Option<AskUserToolFail>,
}

/// What a tool invocation produced, on either side of the channel.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// The tool's output text.
    Output(String),
    /// The tool failed with this text.
    Error(String),
    /// The tool asked the user (typed pause).
    AskUser(AskUserToolFail),
}

impl ToolResult {
    /// Interprets the reply: `ask_user` first, then a non-empty `error`, else `output`.
    pub fn outcome(self) -> ToolOutcome {
        if let Some(ask) = self.ask_user {
            ToolOutcome::AskUser(ask)
        } else if !self.error.is_empty() {
            ToolOutcome::Error(self.error)
        } else {
            ToolOutcome::Output(self.output)
        }
    }
}

impl From<ToolOutcome> for ToolResult {
    fn from(outcome: ToolOutcome) -> Self {
        match outcome {
            ToolOutcome::Output(output) => ToolResult {
                output,
                ..ToolResult::default()
            },
            ToolOutcome::Error(error) => ToolResult {
                error,
                ..ToolResult::default()
            },
            ToolOutcome::AskUser(ask) => ToolResult {
                ask_user: Some(ask),
                ..ToolResult::default()
            },
        }
    }
}

/// One choice of an [`AskUserQuestion`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskUserOption {
    /// What the user picks.
    pub label: String,
    /// What it means.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// One question of an `ask_user` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskUserQuestion {
    /// Short title.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub header: String,
    /// The question text (also the answer's key).
    pub question: String,
    /// Choices offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<AskUserOption>,
    /// Whether several choices may be picked.
    #[serde(default, skip_serializing_if = "is_false")]
    pub multi_select: bool,
}

/// The `ask_user` payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskUser {
    /// Why the runner asks.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The questions.
    pub questions: Vec<AskUserQuestion>,
}

/// The `ask_user_answer` payload: question text → answer, or [`ANSWER_ERROR_KEY`] → the launcher's error.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AskUserAnswer {
    /// The answers.
    pub answers: BTreeMap<String, String>,
}

impl AskUserAnswer {
    /// An answer that reports the launcher's error instead.
    pub fn error(message: impl Into<String>) -> Self {
        AskUserAnswer {
            answers: BTreeMap::from([(ANSWER_ERROR_KEY.to_string(), message.into())]),
        }
    }
}

/// The `event` payload: an observability record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The inner event type, e.g. `llm_request`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Map<String, Value>>,
}

/// The `cancel` payload.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Cancel {
    /// Why the task is cancelled.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The `result` payload: exactly one per task, the runner's last envelope.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[allow(missing_docs)] // the carried fields have no effect in this version; the others are documented
pub struct TaskResult {
    /// Parsed node output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Map<String, Value>>,
    /// Total tokens used.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub tokens: u64,
    /// Cost when the provider reports prices.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub cost_usd: f64,
    /// Wall-clock duration in whole milliseconds (see [`TaskResult::millis`]).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub duration_ms: u64,
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub exit_code: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
    /// `claw`; see [`TaskResult::backend_name`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub backend_name: String,
    /// Length of the model's final text.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub raw_output_len: u64,
    /// The output is `{"text": …}` because parsing failed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub parse_fallback: bool,
    /// An extra reformatting call was made.
    #[serde(default, skip_serializing_if = "is_false")]
    pub formatting_pass_used: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_conversation: Option<Value>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pending_tool_use_id: String,
    /// Non-empty: the task failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// Classification of `error`, one of [`error_code`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error_code: String,
}

impl TaskResult {
    /// A failed result with its classification.
    pub fn failure(error: impl Into<String>, error_code: &str) -> Self {
        TaskResult {
            error: error.into(),
            error_code: error_code.to_string(),
            ..TaskResult::default()
        }
    }

    /// The result a runner sends when cancelled: `cancelled: <reason>`, `CANCELLED`.
    pub fn cancelled(reason: &str) -> Self {
        TaskResult::failure(format!("cancelled: {reason}"), error_code::CANCELLED)
    }

    /// Whole milliseconds of a duration, as `duration_ms` carries them (sub-millisecond values become 0).
    pub fn millis(elapsed: std::time::Duration) -> u64 {
        u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether the task succeeded (`error` empty).
    pub fn is_success(&self) -> bool {
        self.error.is_empty()
    }

    /// The backend name, [`DEFAULT_BACKEND_NAME`] when the runner left it empty.
    pub fn backend_name(&self) -> &str {
        if self.backend_name.is_empty() {
            DEFAULT_BACKEND_NAME
        } else {
            &self.backend_name
        }
    }

    /// The exit status a runner ends with after writing this result: 0 on success, 1 on a task error.
    pub fn runner_exit_code(&self) -> i32 {
        if self.is_success() { 0 } else { 1 }
    }
}
