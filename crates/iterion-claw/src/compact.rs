//! Conversation compaction: when the provider reports a context overflow, when the conversation's estimate
//! passes `compact_threshold_ratio` of the model's context window, and before the first call of a replayed
//! session (a replay is only sent after an overflow), the older messages are replaced by a summary the model
//! writes in one call, keeping the task (the first message) and the last `compact_preserve_recent` messages
//! verbatim. If the summary call itself overflows, the outputs of the older tool calls are dropped instead.
//!
//! Context windows (tokens) by model family, overridable with `ITERION_CLAW_CONTEXT_WINDOW` in the runner's
//! environment: `claude*` 200 000; `gpt-5*` 400 000; `gpt-4.1*` 1 000 000; `o1*`/`o3*`/`o4*` 200 000;
//! `gpt-4o*` 128 000; `deepseek*` 64 000; any other model 128 000. The estimate is one token per four bytes
//! of the request's text.

use crate::provider::{Message, ToolCallReq, ToolResultMsg, ToolSpec};
use serde_json::Value;
use std::collections::BTreeMap;

/// The runner variable that overrides the context window (tokens).
pub const CONTEXT_WINDOW_VAR: &str = "ITERION_CLAW_CONTEXT_WINDOW";

/// `compact_threshold_ratio` when the task sets none.
pub const DEFAULT_THRESHOLD_RATIO: f64 = 0.8;

/// `compact_preserve_recent` when the task sets none.
pub const DEFAULT_PRESERVE_RECENT: usize = 6;

/// The system prompt of the summary call.
pub const SUMMARY_SYSTEM: &str = "You compress agent conversations. Write a concise summary of the conversation \
you are given: what was asked, what was done (tool calls and their relevant results: files, commands, findings), \
what was decided and what remains to do. Keep names, paths and values exactly. Answer with the summary only.";

/// The header placed before the summary in the first message of a compacted conversation.
pub const SUMMARY_HEADER: &str = "Summary of the earlier conversation (compacted to fit the context window):";

/// What replaces a dropped tool output.
pub const DROPPED_OUTPUT: &str = "[tool output dropped to fit the context window]";

/// The result given to a tool call whose result was not captured before a replay.
pub const LOST_RESULT: &str = "[the result of this tool call was lost when the session was replayed; call the tool again if you need it]";

/// The user message that continues a replayed conversation that ended with the model's answer.
pub const CONTINUE_PROMPT: &str =
    "Continue the task where the conversation left off and give your final answer.";

/// The context window of a model (tokens): [`CONTEXT_WINDOW_VAR`] when set to a positive integer, else the
/// default of its family.
pub fn context_window(model: &str, env: &BTreeMap<String, String>) -> u64 {
    if let Some(n) = env
        .get(CONTEXT_WINDOW_VAR)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
    {
        return n;
    }
    let m = model.to_ascii_lowercase();
    let m = m.rsplit('/').next().unwrap_or_default();
    if m.starts_with("claude") {
        200_000
    } else if m.starts_with("gpt-5") {
        400_000
    } else if m.starts_with("gpt-4.1") {
        1_000_000
    } else if m.starts_with("o1") || m.starts_with("o3") || m.starts_with("o4") {
        200_000
    } else if m.starts_with("deepseek") {
        64_000
    } else {
        128_000
    }
}

/// The token estimate of a request: a quarter of the bytes of its system prompt, messages and tools.
pub fn estimate_tokens(system: &str, messages: &[Message], tools: &[ToolSpec]) -> u64 {
    let mut bytes = system.len();
    for m in messages {
        bytes += message_bytes(m);
    }
    for t in tools {
        bytes += t.name.len() + t.description.len() + t.input_schema.to_string().len();
    }
    (bytes as u64).div_ceil(4)
}

fn message_bytes(m: &Message) -> usize {
    match m {
        Message::User(t) => t.len(),
        Message::Assistant { text, tool_calls } => {
            text.len()
                + tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.input.to_string().len())
                    .sum::<usize>()
        }
        Message::ToolResults(r) => r.iter().map(|r| r.content.len()).sum(),
    }
}

/// Where the older part ends: messages `1..b` are summarised, `b..` kept. The first message (the task) is
/// always kept, the kept part never starts with tool results (they stay with the call that asked for them),
/// and `None` when there is nothing older to summarise.
pub fn boundary(messages: &[Message], preserve_recent: usize) -> Option<usize> {
    let mut b = messages.len().saturating_sub(preserve_recent.max(1)).max(1);
    while b > 1 && matches!(messages.get(b), Some(Message::ToolResults(_))) {
        b -= 1;
    }
    (b > 1).then_some(b)
}

/// The older messages as text for the summary call (tool outputs cut at 4 000 bytes each).
pub fn transcript(messages: &[Message]) -> String {
    const CUT: usize = 4000;
    let cut = |s: &str| -> String {
        if s.len() <= CUT {
            return s.to_string();
        }
        let mut end = CUT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}… [{} more bytes]", &s[..end], s.len() - end)
    };
    let mut out = String::new();
    for m in messages {
        match m {
            Message::User(t) => out.push_str(&format!("USER:\n{t}\n\n")),
            Message::Assistant { text, tool_calls } => {
                out.push_str("ASSISTANT:\n");
                if !text.is_empty() {
                    out.push_str(text);
                    out.push('\n');
                }
                for c in tool_calls {
                    out.push_str(&format!(
                        "[tool call {} {}: {}]\n",
                        c.id,
                        c.name,
                        cut(&c.input.to_string())
                    ));
                }
                out.push('\n');
            }
            Message::ToolResults(rs) => {
                for r in rs {
                    let kind = if r.is_error { "tool error" } else { "tool result" };
                    out.push_str(&format!("[{kind} {}]:\n{}\n\n", r.id, cut(&r.content)));
                }
            }
        }
    }
    out
}

/// The compacted conversation: the task with the summary appended, then the kept messages (a kept user text
/// that would follow it is merged into it).
pub fn with_summary(messages: &[Message], b: usize, summary: &str) -> Vec<Message> {
    let mut kept = &messages[b.min(messages.len())..];
    let mut out = Vec::with_capacity(kept.len() + 2);
    match messages.first() {
        Some(Message::User(task)) => {
            let mut first = format!("{task}\n\n{SUMMARY_HEADER}\n{summary}");
            if let Some(Message::User(t)) = kept.first() {
                first.push_str("\n\n");
                first.push_str(t);
                kept = &kept[1..];
            }
            out.push(Message::User(first));
        }
        // a conversation that does not start with the task keeps its first message after the summary
        other => {
            out.push(Message::User(format!("{SUMMARY_HEADER}\n{summary}")));
            out.extend(other.cloned());
        }
    }
    out.extend(kept.iter().cloned());
    out
}

/// The conversation with the outputs of the tool calls before `b` replaced by [`DROPPED_OUTPUT`]; `None` when
/// there was no such output to drop.
pub fn drop_tool_outputs(messages: &[Message], b: usize) -> Option<Vec<Message>> {
    let mut changed = false;
    let out = messages
        .iter()
        .enumerate()
        .map(|(i, m)| match m {
            Message::ToolResults(rs) if i < b => Message::ToolResults(
                rs.iter()
                    .map(|r| {
                        changed |= r.content != DROPPED_OUTPUT;
                        ToolResultMsg {
                            content: DROPPED_OUTPUT.into(),
                            ..r.clone()
                        }
                    })
                    .collect(),
            ),
            other => other.clone(),
        })
        .collect();
    changed.then_some(out)
}

/// Makes a replayed conversation ready for the next model call: a trailing tool call gets [`LOST_RESULT`]s, a
/// trailing answer a [`CONTINUE_PROMPT`].
pub fn close_replayed(messages: &mut Vec<Message>) {
    match messages.last() {
        Some(Message::Assistant { tool_calls, .. }) if !tool_calls.is_empty() => {
            let results = tool_calls
                .iter()
                .map(|c| ToolResultMsg {
                    id: c.id.clone(),
                    content: LOST_RESULT.into(),
                    is_error: true,
                })
                .collect();
            messages.push(Message::ToolResults(results));
        }
        Some(Message::Assistant { .. }) => messages.push(Message::User(CONTINUE_PROMPT.into())),
        _ => {}
    }
}

/// Decodes a session snapshot (`{"system", "messages": [{role, content}]}` as the runner captures it, or the
/// bare array of messages) into the conversation.
pub fn decode_snapshot(v: &Value) -> Result<Vec<Message>, String> {
    let list = match v {
        Value::Array(a) => a,
        Value::Object(o) => o
            .get("messages")
            .and_then(Value::as_array)
            .ok_or("the snapshot has no 'messages' array")?,
        _ => return Err("the snapshot is neither an object nor an array".into()),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        out.push(decode_message(m).map_err(|e| format!("message {i}: {e}"))?);
    }
    if out.is_empty() {
        return Err("the snapshot has no messages".into());
    }
    Ok(out)
}

fn decode_message(m: &Value) -> Result<Message, String> {
    let role = m.get("role").and_then(Value::as_str).ok_or("no 'role'")?;
    let content = m.get("content").ok_or("no 'content'")?;
    let blocks: Vec<Value> = match content {
        Value::String(s) => return text_message(role, s.clone()),
        Value::Array(b) => b.clone(),
        _ => return Err("'content' is neither text nor a list of blocks".into()),
    };
    let kind = |b: &Value| {
        b.get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let text_of = |b: &Value| {
        b.get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    match role {
        "assistant" => {
            let mut text = String::new();
            let mut tool_calls = Vec::new();
            for b in &blocks {
                match kind(b).as_str() {
                    "text" => text.push_str(&text_of(b)),
                    "tool_use" => tool_calls.push(ToolCallReq {
                        id: b
                            .get("id")
                            .and_then(Value::as_str)
                            .ok_or("tool_use without 'id'")?
                            .into(),
                        name: b
                            .get("name")
                            .and_then(Value::as_str)
                            .ok_or("tool_use without 'name'")?
                            .into(),
                        input: b
                            .get("input")
                            .cloned()
                            .unwrap_or_else(|| Value::Object(Default::default())),
                    }),
                    other => return Err(format!("unknown assistant block '{other}'")),
                }
            }
            Ok(Message::Assistant { text, tool_calls })
        }
        "user" if blocks.iter().all(|b| kind(b) == "tool_result") && !blocks.is_empty() => {
            let mut results = Vec::new();
            for b in &blocks {
                let content = match b.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => parts.iter().map(&text_of).collect(),
                    _ => String::new(),
                };
                results.push(ToolResultMsg {
                    id: b
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .ok_or("tool_result without 'tool_use_id'")?
                        .into(),
                    content,
                    is_error: b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                });
            }
            Ok(Message::ToolResults(results))
        }
        "user" => {
            if let Some(b) = blocks.iter().find(|b| kind(b) != "text") {
                return Err(format!("unknown user block '{}'", kind(b)));
            }
            text_message(role, blocks.iter().map(text_of).collect())
        }
        other => Err(format!("unknown role '{other}'")),
    }
}

fn text_message(role: &str, text: String) -> Result<Message, String> {
    match role {
        "user" => Ok(Message::User(text)),
        "assistant" => Ok(Message::Assistant {
            text,
            tool_calls: Vec::new(),
        }),
        other => Err(format!("unknown role '{other}'")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Message {
        Message::Assistant {
            text: String::new(),
            tool_calls: vec![ToolCallReq {
                id: id.into(),
                name: "bash".into(),
                input: json!({"command": "ls"}),
            }],
        }
    }

    fn result(id: &str, content: &str) -> Message {
        Message::ToolResults(vec![ToolResultMsg {
            id: id.into(),
            content: content.into(),
            is_error: false,
        }])
    }

    fn conversation() -> Vec<Message> {
        vec![
            Message::User("task".into()),
            call("c1"),
            result("c1", "out1"),
            call("c2"),
            result("c2", "out2"),
            call("c3"),
            result("c3", "out3"),
        ]
    }

    #[test]
    fn windows_by_family_and_override() {
        let none = BTreeMap::new();
        assert_eq!(context_window("claude-sonnet-4-5", &none), 200_000);
        assert_eq!(context_window("anthropic/claude-x", &none), 200_000);
        assert_eq!(context_window("gpt-5-mini", &none), 400_000);
        assert_eq!(context_window("gpt-4.1", &none), 1_000_000);
        assert_eq!(context_window("o3-mini", &none), 200_000);
        assert_eq!(context_window("gpt-4o", &none), 128_000);
        assert_eq!(context_window("deepseek-chat", &none), 64_000);
        assert_eq!(context_window("llama-3", &none), 128_000);
        let env = |v: &str| BTreeMap::from([(CONTEXT_WINDOW_VAR.to_string(), v.to_string())]);
        assert_eq!(context_window("claude-x", &env("1000")), 1000);
        assert_eq!(context_window("claude-x", &env("0")), 200_000);
        assert_eq!(context_window("claude-x", &env("lots")), 200_000);
    }

    #[test]
    fn estimate_is_a_quarter_of_the_bytes() {
        assert_eq!(
            estimate_tokens("12345678", &[Message::User("1234".into())], &[]),
            3
        );
        assert_eq!(estimate_tokens("", &[], &[]), 0);
    }

    #[test]
    fn the_boundary_keeps_the_task_and_tool_pairs() {
        let c = conversation();
        // the last message is a tool result: it stays with its call
        assert_eq!(boundary(&c, 1), Some(5));
        assert_eq!(boundary(&c, 2), Some(5));
        assert_eq!(boundary(&c, 3), Some(3));
        assert_eq!(boundary(&c, 6), None);
        assert_eq!(boundary(&c[..3], 1), None);
        assert_eq!(boundary(&c[..2], 1), None);
        assert_eq!(boundary(&[], 1), None);
    }

    #[test]
    fn summary_replaces_the_older_messages() {
        let c = conversation();
        let out = with_summary(&c, 5, "S");
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], Message::User(format!("task\n\n{SUMMARY_HEADER}\nS")));
        assert_eq!(out[1], c[5]);
        assert_eq!(out[2], c[6]);
        // a kept user text merges into the first message
        let mut c2 = c.clone();
        c2.push(Message::User("more".into()));
        let out = with_summary(&c2, 7, "S");
        assert_eq!(
            out,
            [Message::User(format!("task\n\n{SUMMARY_HEADER}\nS\n\nmore"))]
        );
        let t = transcript(&c[1..3]);
        assert!(t.contains("[tool call c1 bash: {\"command\":\"ls\"}]"), "{t}");
        assert!(t.contains("[tool result c1]:\nout1"), "{t}");
    }

    #[test]
    fn dropping_tool_outputs() {
        let c = conversation();
        let out = drop_tool_outputs(&c, 5).unwrap();
        assert_eq!(out[2], result("c1", DROPPED_OUTPUT));
        assert_eq!(out[4], result("c2", DROPPED_OUTPUT));
        assert_eq!(out[6], c[6]);
        assert_eq!(drop_tool_outputs(&out, 5), None, "nothing left to drop");
    }

    #[test]
    fn a_replayed_conversation_is_closed() {
        let mut c = vec![Message::User("task".into()), call("c1")];
        close_replayed(&mut c);
        assert_eq!(
            c[2],
            Message::ToolResults(vec![ToolResultMsg {
                id: "c1".into(),
                content: LOST_RESULT.into(),
                is_error: true
            }])
        );
        let mut c = vec![
            Message::User("task".into()),
            Message::Assistant {
                text: "done".into(),
                tool_calls: vec![],
            },
        ];
        close_replayed(&mut c);
        assert_eq!(c[2], Message::User(CONTINUE_PROMPT.into()));
        let mut c = vec![Message::User("task".into())];
        close_replayed(&mut c);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn snapshots_round_trip_and_bad_ones_are_refused() {
        let c = conversation();
        let snap = crate::provider::snapshot("sys", &c);
        assert_eq!(decode_snapshot(&snap).unwrap(), c);
        let arr = snap["messages"].clone();
        assert_eq!(decode_snapshot(&arr).unwrap(), c);
        let blocks = json!([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]);
        assert_eq!(decode_snapshot(&blocks).unwrap(), [Message::User("ab".into())]);
        for (bad, why) in [
            (json!("x"), "neither an object nor an array"),
            (json!({"system": "s"}), "no 'messages' array"),
            (json!({"messages": []}), "no messages"),
            (
                json!([{"role": "system", "content": "x"}]),
                "message 0: unknown role 'system'",
            ),
            (json!([{"role": "user"}]), "message 0: no 'content'"),
            (
                json!([{"role": "assistant", "content": [{"type": "image"}]}]),
                "message 0: unknown assistant block 'image'",
            ),
        ] {
            let e = decode_snapshot(&bad).unwrap_err();
            assert!(e.contains(why), "{e} should contain {why}");
        }
    }
}
