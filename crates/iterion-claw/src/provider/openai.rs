//! OpenAI Chat Completions (and compatible endpoints): request body, response parsing, streaming accumulator.

use super::sse::SseEvent;
use super::{Message, Request, Stop, ToolCallReq, Turn, Usage, parse_arguments};
use crate::error::{Error, Result};
use serde_json::{Value, json};

pub(crate) fn url(base: &str) -> String {
    format!("{base}/chat/completions")
}

pub(crate) fn body(model: &str, req: &Request) -> Value {
    let mut messages = Vec::new();
    if !req.system.is_empty() {
        messages.push(json!({"role": "system", "content": req.system}));
    }
    for m in &req.messages {
        push_message(&mut messages, m);
    }
    let mut body = json!({"model": model, "messages": messages});
    if req.max_tokens > 0 {
        body["max_completion_tokens"] = json!(req.max_tokens);
    }
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}))
            .collect();
    }
    if !req.reasoning_effort.is_empty() {
        body["reasoning_effort"] = json!(req.reasoning_effort);
    }
    if req.stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

fn push_message(out: &mut Vec<Value>, m: &Message) {
    match m {
        Message::User(text) => out.push(json!({"role": "user", "content": text})),
        Message::Assistant { text, tool_calls } => {
            let mut msg = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
            if !tool_calls.is_empty() {
                msg["tool_calls"] = tool_calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.input.to_string()}}))
                    .collect();
            }
            out.push(msg);
        }
        Message::ToolResults(results) => {
            for r in results {
                out.push(json!({"role": "tool", "tool_call_id": r.id, "content": r.content}));
            }
        }
    }
}

fn stop(reason: Option<&str>) -> Stop {
    match reason {
        None | Some("stop") => Stop::EndTurn,
        Some("tool_calls") | Some("function_call") => Stop::ToolUse,
        Some("length") => Stop::MaxTokens,
        Some(other) => Stop::Other(other.to_string()),
    }
}

fn malformed(provider: &str, message: impl Into<String>) -> Error {
    Error::Malformed {
        provider: provider.into(),
        message: message.into(),
    }
}

fn usage(v: &Value) -> Usage {
    Usage {
        input_tokens: v["prompt_tokens"].as_u64().unwrap_or(0),
        output_tokens: v["completion_tokens"].as_u64().unwrap_or(0),
    }
}

pub(crate) fn parse(provider: &str, v: &Value) -> Result<Turn> {
    let choice = v["choices"]
        .get(0)
        .ok_or_else(|| malformed(provider, "no 'choices'"))?;
    let msg = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| malformed(provider, "no 'message'"))?;
    let mut turn = Turn {
        text: msg["content"].as_str().unwrap_or_default().to_string(),
        stop: stop(choice["finish_reason"].as_str()),
        usage: usage(&v["usage"]),
        ..Turn::default()
    };
    for c in msg["tool_calls"].as_array().into_iter().flatten() {
        let f = &c["function"];
        turn.tool_calls.push(ToolCallReq {
            id: c["id"].as_str().unwrap_or_default().into(),
            name: f["name"]
                .as_str()
                .ok_or_else(|| malformed(provider, "tool call without a name"))?
                .into(),
            input: parse_arguments(provider, f["arguments"].as_str().unwrap_or_default())?,
        });
    }
    Ok(turn)
}

/// Accumulates streamed chunks into the same [`Turn`] as [`parse`].
#[derive(Debug, Default)]
pub(crate) struct Stream {
    text: String,
    /// Tool calls by index: id, name, argument text.
    calls: Vec<(String, String, String)>,
    stop: Option<String>,
    usage: Usage,
    done: bool,
}

impl Stream {
    pub(crate) fn event(&mut self, provider: &str, ev: &SseEvent) -> Result<()> {
        if ev.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if ev.data.is_empty() {
            return Ok(());
        }
        let v: Value =
            serde_json::from_str(&ev.data).map_err(|e| malformed(provider, format!("stream chunk: {e}")))?;
        if let Some(e) = v.get("error") {
            return Err(malformed(
                provider,
                format!("stream error: {}", e["message"].as_str().unwrap_or("?")),
            ));
        }
        if v["usage"].is_object() {
            self.usage = usage(&v["usage"]);
        }
        let Some(choice) = v["choices"].get(0) else {
            return Ok(());
        };
        let d = &choice["delta"];
        if let Some(t) = d["content"].as_str() {
            self.text.push_str(t);
        }
        for c in d["tool_calls"].as_array().into_iter().flatten() {
            let i = c["index"].as_u64().unwrap_or(self.calls.len() as u64) as usize;
            while self.calls.len() <= i {
                self.calls.push(Default::default());
            }
            let slot = &mut self.calls[i];
            if let Some(id) = c["id"].as_str() {
                slot.0.push_str(id);
            }
            if let Some(n) = c["function"]["name"].as_str() {
                slot.1.push_str(n);
            }
            if let Some(a) = c["function"]["arguments"].as_str() {
                slot.2.push_str(a);
            }
        }
        if let Some(r) = choice["finish_reason"].as_str() {
            self.stop = Some(r.to_string());
        }
        Ok(())
    }

    pub(crate) fn finish(self, provider: &str) -> Result<Turn> {
        if !self.done && self.stop.is_none() {
            return Err(malformed(provider, "stream ended without a finish reason"));
        }
        let mut tool_calls = Vec::new();
        for (id, name, args) in self.calls {
            if name.is_empty() {
                return Err(malformed(provider, "tool call without a name"));
            }
            tool_calls.push(ToolCallReq {
                id,
                name,
                input: parse_arguments(provider, &args)?,
            });
        }
        Ok(Turn {
            text: self.text,
            tool_calls,
            stop: stop(self.stop.as_deref()),
            usage: self.usage,
        })
    }
}
