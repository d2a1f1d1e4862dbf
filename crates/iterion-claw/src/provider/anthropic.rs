//! The Anthropic Messages API: request body, response parsing, and the streaming accumulator.

use super::sse::SseEvent;
use super::{DEFAULT_MAX_TOKENS, Message, Request, Stop, ToolCallReq, Turn, Usage, parse_arguments};
use crate::error::{Error, Result};
use serde_json::{Value, json};

/// API version header value.
pub(crate) const VERSION: &str = "2023-06-01";

pub(crate) fn url(base: &str) -> String {
    format!("{base}/v1/messages")
}

pub(crate) fn body(model: &str, req: &Request) -> Value {
    let messages: Vec<Value> = req.messages.iter().map(message).collect();
    let mut body = json!({
        "model": model,
        "max_tokens": if req.max_tokens == 0 { DEFAULT_MAX_TOKENS } else { req.max_tokens },
        "messages": messages,
    });
    if !req.system.is_empty() {
        body["system"] = json!(req.system);
    }
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
    }
    if req.stream {
        body["stream"] = json!(true);
    }
    body
}

pub(crate) fn message(m: &Message) -> Value {
    match m {
        Message::User(text) => json!({"role": "user", "content": text}),
        Message::Assistant { text, tool_calls } => {
            let mut content = Vec::new();
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for c in tool_calls {
                content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.input}));
            }
            json!({"role": "assistant", "content": content})
        }
        Message::ToolResults(results) => {
            let content: Vec<Value> = results
                .iter()
                .map(|r| json!({"type": "tool_result", "tool_use_id": r.id, "content": r.content, "is_error": r.is_error}))
                .collect();
            json!({"role": "user", "content": content})
        }
    }
}

fn stop(reason: Option<&str>) -> Stop {
    match reason {
        None | Some("end_turn") | Some("stop_sequence") => Stop::EndTurn,
        Some("tool_use") => Stop::ToolUse,
        Some("max_tokens") => Stop::MaxTokens,
        Some(other) => Stop::Other(other.to_string()),
    }
}

fn malformed(provider: &str, message: impl Into<String>) -> Error {
    Error::Malformed {
        provider: provider.into(),
        message: message.into(),
    }
}

pub(crate) fn parse(provider: &str, v: &Value) -> Result<Turn> {
    let content = v["content"]
        .as_array()
        .ok_or_else(|| malformed(provider, "no 'content' array"))?;
    let mut turn = Turn {
        stop: stop(v["stop_reason"].as_str()),
        ..Turn::default()
    };
    for block in content {
        match block["type"].as_str() {
            Some("text") => turn.text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => turn.tool_calls.push(ToolCallReq {
                id: block["id"].as_str().unwrap_or_default().to_string(),
                name: block["name"]
                    .as_str()
                    .ok_or_else(|| malformed(provider, "tool_use without a name"))?
                    .into(),
                input: if block["input"].is_object() {
                    block["input"].clone()
                } else {
                    json!({})
                },
            }),
            _ => {}
        }
    }
    turn.usage = Usage {
        input_tokens: v["usage"]["input_tokens"].as_u64().unwrap_or(0),
        output_tokens: v["usage"]["output_tokens"].as_u64().unwrap_or(0),
    };
    Ok(turn)
}

/// Accumulates the events of a streamed answer into the same [`Turn`] as [`parse`].
#[derive(Debug, Default)]
pub(crate) struct Stream {
    turn: Turn,
    /// Open blocks by index: text or a tool call with its partial JSON.
    blocks: Vec<Block>,
    done: bool,
}

#[derive(Debug)]
enum Block {
    Text,
    Tool { id: String, name: String, json: String },
}

impl Stream {
    pub(crate) fn event(&mut self, provider: &str, ev: &SseEvent) -> Result<()> {
        if ev.data.is_empty() {
            return Ok(());
        }
        let v: Value =
            serde_json::from_str(&ev.data).map_err(|e| malformed(provider, format!("stream event: {e}")))?;
        match v["type"].as_str().unwrap_or(ev.event.as_str()) {
            "message_start" => {
                self.turn.usage.input_tokens = v["message"]["usage"]["input_tokens"].as_u64().unwrap_or(0);
            }
            "content_block_start" => {
                let b = &v["content_block"];
                let block = match b["type"].as_str() {
                    Some("tool_use") => Block::Tool {
                        id: b["id"].as_str().unwrap_or_default().into(),
                        name: b["name"].as_str().unwrap_or_default().into(),
                        json: String::new(),
                    },
                    _ => Block::Text,
                };
                self.blocks.push(block);
            }
            "content_block_delta" => {
                let d = &v["delta"];
                match (d["type"].as_str(), self.blocks.last_mut()) {
                    (Some("text_delta"), _) => {
                        self.turn.text.push_str(d["text"].as_str().unwrap_or_default())
                    }
                    (Some("input_json_delta"), Some(Block::Tool { json, .. })) => {
                        json.push_str(d["partial_json"].as_str().unwrap_or_default())
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(Block::Tool { id, name, json }) = self.blocks.last_mut() {
                    let input = parse_arguments(provider, json)?;
                    self.turn.tool_calls.push(ToolCallReq {
                        id: std::mem::take(id),
                        name: std::mem::take(name),
                        input,
                    });
                }
                self.blocks.pop();
            }
            "message_delta" => {
                self.turn.stop = stop(v["delta"]["stop_reason"].as_str());
                if let Some(n) = v["usage"]["output_tokens"].as_u64() {
                    self.turn.usage.output_tokens = n;
                }
            }
            "message_stop" => self.done = true,
            "error" => {
                return Err(malformed(
                    provider,
                    format!("stream error: {}", v["error"]["message"].as_str().unwrap_or("?")),
                ));
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn finish(self, provider: &str) -> Result<Turn> {
        if !self.done {
            return Err(malformed(provider, "stream ended before message_stop"));
        }
        Ok(self.turn)
    }
}
