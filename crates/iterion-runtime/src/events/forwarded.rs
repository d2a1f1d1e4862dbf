//! Events the claw runner forwards from inside the sandbox.
use serde_json::{Map, Value};

/// Inner event types the claw runner may forward (10.5.3); any other type is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardedType {
    /// `llm_request`.
    LlmRequest,
    /// `llm_step_finished`.
    LlmStepFinished,
    /// `llm_retry`.
    LlmRetry,
    /// `llm_compacted`.
    LlmCompacted,
    /// `tool_started` of a runner builtin tool.
    ToolStarted,
    /// `tool_called` of a runner builtin tool.
    ToolCalled,
    /// `tool_error` of a runner builtin tool.
    ToolError,
}

impl ForwardedType {
    /// The allowed type named `s`, or `None` (the container must not forge run or sandbox events).
    pub fn parse(s: &str) -> Option<ForwardedType> {
        Some(match s {
            "llm_request" => ForwardedType::LlmRequest,
            "llm_step_finished" => ForwardedType::LlmStepFinished,
            "llm_retry" => ForwardedType::LlmRetry,
            "llm_compacted" => ForwardedType::LlmCompacted,
            "tool_started" => ForwardedType::ToolStarted,
            "tool_called" => ForwardedType::ToolCalled,
            "tool_error" => ForwardedType::ToolError,
            _ => return None,
        })
    }

    /// The event type.
    pub fn as_str(self) -> &'static str {
        match self {
            ForwardedType::LlmRequest => "llm_request",
            ForwardedType::LlmStepFinished => "llm_step_finished",
            ForwardedType::LlmRetry => "llm_retry",
            ForwardedType::LlmCompacted => "llm_compacted",
            ForwardedType::ToolStarted => "tool_started",
            ForwardedType::ToolCalled => "tool_called",
            ForwardedType::ToolError => "tool_error",
        }
    }
}

/// An event forwarded from the claw runner: opaque data, node-scoped.
#[derive(Debug, Clone, PartialEq)]
pub struct Forwarded {
    /// The node the runner serves.
    pub node_id: String,
    /// Allowed inner type.
    pub kind: ForwardedType,
    /// Data as sent by the runner.
    pub data: Map<String, Value>,
}

impl Forwarded {
    /// A forwarded event, or `None` when `inner_type` is not one the runner may send (e.g. `run_finished`).
    pub fn new(node_id: impl Into<String>, inner_type: &str, data: Map<String, Value>) -> Option<Forwarded> {
        Some(Forwarded {
            node_id: node_id.into(),
            kind: ForwardedType::parse(inner_type)?,
            data,
        })
    }
}
