//! A minimal server-sent-events splitter: bytes in, `(event, data)` pairs out.

/// One SSE event: its `event:` name (empty when none) and its joined `data:` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub event: String,
    pub data: String,
}

/// Incremental SSE parser; feed it chunks, take the complete events.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buf: String,
    pending: Vec<u8>,
}

impl SseParser {
    /// Adds a chunk and returns the events it completed.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.pending.extend_from_slice(chunk);
        // keep an incomplete UTF-8 sequence for the next chunk
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(s) => s.len(),
            Err(e) => e.valid_up_to(),
        };
        let text = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
        self.pending.drain(..valid);
        self.buf.push_str(&text.replace("\r\n", "\n"));
        let mut out = Vec::new();
        while let Some(end) = self.buf.find("\n\n") {
            let block: String = self.buf.drain(..end + 2).collect();
            if let Some(ev) = parse_block(&block) {
                out.push(ev);
            }
        }
        out
    }

    /// The last event when the stream ended without a blank line.
    pub(crate) fn finish(&mut self) -> Option<SseEvent> {
        let rest = std::mem::take(&mut self.buf);
        parse_block(&rest)
    }
}

fn parse_block(block: &str) -> Option<SseEvent> {
    let mut event = String::new();
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            event = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    if data.is_empty() && event.is_empty() {
        return None;
    }
    Some(SseEvent {
        event,
        data: data.join("\n"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_across_chunks() {
        let mut p = SseParser::default();
        assert!(p.feed(b"event: a\ndata: {\"x\"").is_empty());
        let evs = p.feed(b":1}\n\n: comment\n\ndata: [DONE]\r\n\r\n");
        assert_eq!(
            evs,
            vec![
                SseEvent {
                    event: "a".into(),
                    data: "{\"x\":1}".into()
                },
                SseEvent {
                    event: String::new(),
                    data: "[DONE]".into()
                }
            ]
        );
        assert!(p.feed("data: é".as_bytes()[..7].as_ref()).is_empty());
        assert!(p.feed(&"é".as_bytes()[1..]).is_empty());
        assert_eq!(p.finish().unwrap().data, "é");
    }
}
