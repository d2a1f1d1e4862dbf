//! Node outputs: tool stdout (10.4 "Result") and agent final text (10.5.1 "Output parsing").
//!
//! ```
//! use iterion_runtime::exec::output::{tool_output, agent_output};
//! assert_eq!(tool_output("  hi \n").to_string(), r#"{"result":"hi"}"#);
//! assert_eq!(agent_output("Done: {\"ok\": true}").to_string(), r#"{"ok":true}"#);
//! ```
use serde_json::{Map, Value};

/// The output of a tool whose exit status is 0: trimmed stdout, the object itself when it parses as a JSON
/// object, otherwise `{"result": "<trimmed stdout>"}`.
pub fn tool_output(stdout: &str) -> Value {
    let t = stdout.trim();
    match serde_json::from_str::<Value>(t) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            let mut m = Map::new();
            m.insert("result".into(), Value::String(t.to_string()));
            Value::Object(m)
        }
    }
}

fn as_object(s: &str) -> Option<Value> {
    match serde_json::from_str::<Value>(s.trim()) {
        Ok(v @ Value::Object(_)) => Some(v),
        _ => None,
    }
}

/// The first fenced block marked `json` whose content is a JSON object.
fn fenced_json(text: &str) -> Option<Value> {
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let line_end = after.find('\n')?;
        let lang = after[..line_end].trim();
        let body_start = &after[line_end + 1..];
        let end = body_start.find("```")?;
        if lang.eq_ignore_ascii_case("json")
            && let Some(v) = as_object(&body_start[..end])
        {
            return Some(v);
        }
        rest = &body_start[end + 3..];
    }
    None
}

/// The outermost balanced `{…}` spans (string-aware), in order.
fn balanced_objects(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    let mut in_str = false;
    let mut escaped = false;
    for (i, &c) in b.iter().enumerate() {
        if in_str {
            match c {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' if depth > 0 => in_str = true,
            b'{' => {
                if depth == 0 {
                    start = i;
                }
                depth += 1;
            }
            b'}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    out.push(&text[start..=i]);
                }
            }
            _ => {}
        }
    }
    out
}

/// Stamps the session keys of a successful backend call on a node output: `_session_id` (when the backend
/// reported one), `_backend` and `_session_fingerprint`.
///
/// ```
/// use iterion_runtime::exec::output::stamp_session;
/// let out = stamp_session(serde_json::json!({"ok": true}), Some("abc"), "claude_code", "anthropic-direct");
/// assert_eq!(out["_session_id"], "abc");
/// assert_eq!(out["_backend"], "claude_code");
/// assert_eq!(out["_session_fingerprint"], "anthropic-direct");
/// assert_eq!(out["ok"], true);
/// ```
pub fn stamp_session(mut output: Value, session_id: Option<&str>, backend: &str, fingerprint: &str) -> Value {
    if let Value::Object(m) = &mut output {
        if let Some(id) = session_id.filter(|s| !s.is_empty()) {
            m.insert("_session_id".into(), Value::String(id.into()));
        }
        m.insert("_backend".into(), Value::String(backend.into()));
        m.insert("_session_fingerprint".into(), Value::String(fingerprint.into()));
    }
    output
}

/// The output of an agent or judge from its final text: the text itself when it is a JSON object; else the
/// object in a fenced block marked `json`; else the outermost balanced `{…}` that parses; else
/// `{"text": "<final text>"}`.
pub fn agent_output(text: &str) -> Value {
    if let Some(v) = as_object(text) {
        return v;
    }
    if let Some(v) = fenced_json(text) {
        return v;
    }
    for candidate in balanced_objects(text) {
        if let Some(v) = as_object(candidate) {
            return v;
        }
    }
    let mut m = Map::new();
    m.insert("text".into(), Value::String(text.to_string()));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_tool(stdout: &str, expect: &str) {
        assert_eq!(tool_output(stdout).to_string(), expect, "{stdout:?}");
    }

    #[test]
    fn tool_stdout_vectors() {
        // TE10
        check_tool("{\"ok\": true}\n", r#"{"ok":true}"#);
        check_tool("[1,2]", r#"{"result":"[1,2]"}"#);
        check_tool("  hi \n", r#"{"result":"hi"}"#);
        check_tool("", r#"{"result":""}"#);
        check_tool("42", r#"{"result":"42"}"#);
    }

    fn check_agent(text: &str, expect: &str) {
        assert_eq!(agent_output(text).to_string(), expect, "{text:?}");
    }

    #[test]
    fn agent_text_vectors() {
        check_agent("{\"ok\": true}", r#"{"ok":true}"#);
        check_agent("Here:\n```json\n{\"ok\": true}\n```\n", r#"{"ok":true}"#); // AG2
        check_agent("```js\n{x}\n```\n```json\n{\"a\": 1}\n```", r#"{"a":1}"#);
        check_agent(
            "verdict {\"pass\": false, \"why\": \"a } b\"} end",
            r#"{"pass":false,"why":"a } b"}"#,
        );
        check_agent("{not json} then {\"b\": 2}", r#"{"b":2}"#);
        check_agent("plain words", r#"{"text":"plain words"}"#);
        check_agent("[1, 2]", r#"{"text":"[1, 2]"}"#);
    }
}
