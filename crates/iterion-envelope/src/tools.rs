//! The launcher's tool boundary: a runner may only make the host execute tools the launcher advertised.

use crate::codec::LINE_CAP;
use crate::wire::ToolDef;

/// What the multiplexer answers a `tool_call` with when the handler implements no tool dispatch.
pub const NO_TOOL_DISPATCHER: &str =
    "launcher: no tool dispatcher registered (host doesn't know how to execute this tool)";

/// What the multiplexer answers an `ask_user` with when the handler implements no questions.
pub const NO_ASK_USER_HANDLER: &str = "launcher: no ask_user handler registered";

/// The advertised tool a runner's `tool_call` names: an exact name of `tool_defs`, or the alias
/// `mcp__<server>__<tool>` of `mcp.<server>.<tool>`. Anything else is refused with the error text to reply with.
pub fn advertised_tool<'a>(tool_defs: &'a [ToolDef], requested: &str) -> Result<&'a ToolDef, String> {
    if let Some(def) = tool_defs.iter().find(|d| d.name == requested) {
        return Ok(def);
    }
    if let Some(rest) = requested.strip_prefix("mcp__")
        && let Some((server, tool)) = rest.split_once("__")
        && !server.is_empty()
        && !tool.is_empty()
    {
        let dotted = format!("mcp.{server}.{tool}");
        if let Some(def) = tool_defs.iter().find(|d| d.name == dotted) {
            return Ok(def);
        }
    }
    Err(format!(
        "launcher: tool {requested:?} not in task.tool_defs (runner asked for an unknown tool)"
    ))
}

/// The error text for a tool that was advertised but has no implementation.
pub fn unimplemented_tool(name: &str) -> String {
    format!("launcher: tool {name:?} has no implementation (engine misconfiguration)")
}

/// The error text that replaces a tool output whose `tool_result` would exceed the line cap.
pub fn oversized_tool_output(size: usize) -> String {
    format!("tool output too large for the envelope channel ({size} bytes > {LINE_CAP})")
}
