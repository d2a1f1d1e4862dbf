//! The `events.jsonl` line: size limits, encoding and decoding.
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::catalogue::Event;
use crate::error::{Error, Result};

/// A `data` value whose compact JSON exceeds this many bytes is replaced by `{"_truncated": true, "bytes": n}`.
pub const MAX_VALUE_BYTES: usize = 256 * 1024;

/// A stored line must stay below this many bytes.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

fn truncated(bytes: usize) -> Value {
    serde_json::json!({"_truncated": true, "bytes": bytes})
}

fn json_len(v: &Value) -> usize {
    serde_json::to_string(v).map(|s| s.len()).unwrap_or(usize::MAX)
}

/// Applies the size rules of 1.3 to a `data` object: each value whose compact JSON exceeds
/// [`MAX_VALUE_BYTES`] becomes `{"_truncated": true, "bytes": <size>}`; if the object is still too large for
/// a line, the largest remaining values are truncated the same way until it fits.
pub fn limit_data(data: &mut Map<String, Value>) {
    let mut sizes: Vec<(String, usize)> = Vec::new();
    for (k, v) in data.iter_mut() {
        let n = json_len(v);
        if n > MAX_VALUE_BYTES {
            *v = truncated(n);
        } else {
            sizes.push((k.clone(), n));
        }
    }
    // Leave room for the envelope keys (seq, timestamp, type, ids).
    let budget = MAX_LINE_BYTES - 4096;
    let mut total: usize = data.iter().map(|(k, v)| k.len() + 4 + json_len(v)).sum();
    sizes.sort_by_key(|s| std::cmp::Reverse(s.1));
    for (k, n) in sizes {
        if total < budget {
            break;
        }
        if let Some(v) = data.get_mut(&k) {
            let t = truncated(n);
            total = total - n + json_len(&t);
            *v = t;
        }
    }
}

/// Encodes one `events.jsonl` line (without the trailing LF): keys in the order `seq`, `timestamp`, `type`,
/// `run_id`, `node_id` (when node-scoped), `branch_id` (inside a fan-out branch), `data`, with the size rules of [`limit_data`] applied.
pub fn encode_line(seq: u64, timestamp: &str, run_id: &str, event: &Event) -> Result<String> {
    let mut data = event.data()?;
    limit_data(&mut data);
    let mut line = Map::new();
    line.insert("seq".into(), Value::from(seq));
    line.insert("timestamp".into(), Value::from(timestamp));
    line.insert("type".into(), Value::from(event.event_type()));
    line.insert("run_id".into(), Value::from(run_id));
    if let Some(node) = event.node_id() {
        line.insert("node_id".into(), Value::from(node));
    }
    if let Some(branch) = event.branch_id() {
        line.insert("branch_id".into(), Value::from(branch));
    }
    line.insert("data".into(), Value::Object(data));
    serde_json::to_string(&line).map_err(|source| Error::Encode {
        what: "event line",
        source,
    })
}

/// One decoded `events.jsonl` line. Unknown event types and unknown `data` keys are kept as they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Sequence number.
    pub seq: u64,
    /// RFC 3339 UTC time.
    pub timestamp: String,
    /// Event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// Run id.
    pub run_id: String,
    /// Node of a node-scoped event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The fan-out branch the event was emitted for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch_id: Option<String>,
    /// Event data.
    #[serde(default)]
    pub data: Map<String, Value>,
}

impl EventRecord {
    /// Decodes one line; `None` for blank or undecodable lines (readers skip them).
    pub fn decode(line: &str) -> Option<EventRecord> {
        let t = line.trim();
        if t.is_empty() {
            return None;
        }
        serde_json::from_str(t).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_values_are_truncated() {
        // ST11: a 300 KiB output.
        let mut data = Map::new();
        let filler = "x".repeat(307_200 - "{\"k\":\"\"}".len());
        data.insert("output".into(), serde_json::json!({ "k": filler }));
        data.insert("duration_ms".into(), Value::from(5));
        limit_data(&mut data);
        assert_eq!(
            data["output"],
            serde_json::json!({"_truncated": true, "bytes": 307_200})
        );
        assert_eq!(data["duration_ms"], Value::from(5));
    }

    #[test]
    fn many_large_values_keep_the_line_below_one_mebibyte() {
        let mut data = Map::new();
        for i in 0..6 {
            data.insert(format!("v{i}"), Value::from("y".repeat(200 * 1024)));
        }
        limit_data(&mut data);
        let len = serde_json::to_string(&data).unwrap().len();
        assert!(len < MAX_LINE_BYTES, "{len}");
        assert!(data.values().any(|v| v.get("_truncated").is_some()));
    }

    #[test]
    fn decode_skips_blank_and_broken_lines() {
        assert!(EventRecord::decode("").is_none());
        assert!(EventRecord::decode("   ").is_none());
        assert!(EventRecord::decode("{\"seq\":5,\"timestamp\":\"2026").is_none());
        let r = EventRecord::decode(
            r#"{"seq":1,"timestamp":"t","type":"future_event","run_id":"r","data":{"new_key":1}}"#,
        )
        .unwrap();
        assert_eq!(r.event_type, "future_event");
        assert_eq!(r.data["new_key"], Value::from(1));
    }
}
