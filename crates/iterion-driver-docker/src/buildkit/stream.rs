//! The answer of a BuildKit build (`POST /build?version=2`): JSON lines, of which
//! `{"id":"moby.buildkit.trace","aux":"<base64 StatusResponse>"}` carry the progress,
//! `{"id":"moby.image.id","aux":{"ID":"sha256:…"}}` the image id, `{"stream":…}` plain text and
//! `{"errorDetail":{"message":…},"error":…}` the failure. [`Parser`] turns them into the progress lines of the
//! classic builder's style (`#3 [2/3] RUN make`, then its output, `#3 DONE` / `#3 CACHED` / `#3 ERROR: …`).

use super::proto;
use std::collections::HashMap;

/// What one line of the answer says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A progress line.
    Progress(String),
    /// The id of the built image.
    ImageId(String),
    /// The build failed with this message.
    Error(String),
}

/// The state of a build's progress: the number given to each vertex and which have been reported done.
#[derive(Debug, Default)]
pub struct Parser {
    numbers: HashMap<String, usize>,
    finished: HashMap<String, bool>,
}

impl Parser {
    /// Reads one line of the answer.
    pub fn line(&mut self, line: &[u8]) -> Vec<Item> {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        if text.is_empty() {
            return Vec::new();
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
            return vec![Item::Progress(text.to_owned())];
        };
        if let Some(m) = v
            .pointer("/errorDetail/message")
            .or_else(|| v.get("error"))
            .and_then(|m| m.as_str())
        {
            return vec![Item::Error(m.to_owned())];
        }
        match v.get("id").and_then(|i| i.as_str()) {
            Some("moby.buildkit.trace") => {
                let Some(raw) = v.get("aux").and_then(|a| a.as_str()) else {
                    return Vec::new();
                };
                match crate::auth::b64_decode(raw).map(|b| proto::status(&b)) {
                    Some(Ok(s)) => self.status(s),
                    // a trace this parser cannot read is progress only: the build goes on
                    _ => Vec::new(),
                }
            }
            Some("moby.image.id") => v
                .pointer("/aux/ID")
                .and_then(|i| i.as_str())
                .map(|i| vec![Item::ImageId(i.to_owned())])
                .unwrap_or_default(),
            _ => v
                .get("stream")
                .or_else(|| v.get("status"))
                .and_then(|s| s.as_str())
                .map(|s| {
                    s.lines()
                        .filter(|l| !l.trim().is_empty())
                        .map(|l| Item::Progress(l.to_owned()))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    fn number(&mut self, digest: &str) -> usize {
        let next = self.numbers.len() + 1;
        *self.numbers.entry(digest.to_owned()).or_insert(next)
    }

    fn status(&mut self, s: proto::Status) -> Vec<Item> {
        let mut out = Vec::new();
        for v in s.vertexes {
            let known = self.numbers.contains_key(&v.digest);
            let n = self.number(&v.digest);
            if !known && !v.name.is_empty() {
                out.push(Item::Progress(format!("#{n} {}", v.name)));
            }
            if !v.completed || self.finished.get(&v.digest) == Some(&true) {
                continue;
            }
            self.finished.insert(v.digest.clone(), true);
            let end = if !v.error.is_empty() {
                format!("#{n} ERROR: {}", v.error)
            } else if v.cached {
                format!("#{n} CACHED")
            } else {
                format!("#{n} DONE")
            };
            out.push(Item::Progress(end));
        }
        for l in s.logs {
            let n = self.number(&l.vertex);
            for line in String::from_utf8_lossy(&l.msg).lines() {
                if !line.trim().is_empty() {
                    out.push(Item::Progress(format!("#{n} {line}")));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::put_bytes;

    fn b64(data: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = String::new();
        for c in data.chunks(3) {
            let n = c
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..4 {
                if i <= c.len() {
                    s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    s.push('=');
                }
            }
        }
        s
    }

    fn trace(vertexes: &[Vec<u8>], logs: &[Vec<u8>]) -> String {
        let mut msg = Vec::new();
        for v in vertexes {
            put_bytes(&mut msg, 1, v);
        }
        for l in logs {
            put_bytes(&mut msg, 3, l);
        }
        format!(r#"{{"id":"moby.buildkit.trace","aux":"{}"}}"#, b64(&msg))
    }

    fn vertex(digest: &str, name: &str, completed: bool, cached: bool, error: &str) -> Vec<u8> {
        let mut v = Vec::new();
        put_bytes(&mut v, 1, digest.as_bytes());
        put_bytes(&mut v, 3, name.as_bytes());
        if cached {
            v.extend_from_slice(&[0x20, 1]);
        }
        put_bytes(&mut v, 5, &[0x08, 1]);
        if completed {
            put_bytes(&mut v, 6, &[0x08, 2]);
        }
        if !error.is_empty() {
            put_bytes(&mut v, 7, error.as_bytes());
        }
        v
    }

    fn log(digest: &str, msg: &str) -> Vec<u8> {
        let mut l = Vec::new();
        put_bytes(&mut l, 1, digest.as_bytes());
        l.extend_from_slice(&[0x18, 1]);
        put_bytes(&mut l, 4, msg.as_bytes());
        l
    }

    fn progress(items: Vec<Item>) -> Vec<String> {
        items
            .into_iter()
            .map(|i| match i {
                Item::Progress(p) => p,
                other => panic!("not progress: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_build_answer_is_progress_then_the_image_id() {
        let mut p = Parser::default();
        let l1 = trace(&[vertex("d1", "[1/2] FROM base", false, false, "")], &[]);
        assert_eq!(progress(p.line(l1.as_bytes())), ["#1 [1/2] FROM base"]);
        let l2 = trace(
            &[
                vertex("d1", "[1/2] FROM base", true, true, ""),
                vertex("d2", "[2/2] RUN make", false, false, ""),
            ],
            &[log("d2", "compiling\nlinking\n")],
        );
        assert_eq!(
            progress(p.line(l2.as_bytes())),
            ["#1 CACHED", "#2 [2/2] RUN make", "#2 compiling", "#2 linking"]
        );
        // a repeated completion is reported once
        let l3 = trace(&[vertex("d1", "[1/2] FROM base", true, true, "")], &[]);
        assert!(p.line(l3.as_bytes()).is_empty());
        let l4 = trace(&[vertex("d2", "[2/2] RUN make", true, false, "")], &[]);
        assert_eq!(progress(p.line(l4.as_bytes())), ["#2 DONE"]);
        assert_eq!(
            p.line(br#"{"id":"moby.image.id","aux":{"ID":"sha256:abc"}}"#),
            [Item::ImageId("sha256:abc".into())]
        );
        assert_eq!(
            progress(p.line(b"{\"stream\":\"Successfully tagged x:1\\n\"}\n")),
            ["Successfully tagged x:1"]
        );
        assert!(p.line(b"  \r\n").is_empty());
    }

    #[test]
    fn errors_are_found_in_every_form() {
        let mut p = Parser::default();
        assert_eq!(
            p.line(br#"{"errorDetail":{"message":"no active sessions"},"error":"no active sessions"}"#),
            [Item::Error("no active sessions".into())]
        );
        assert_eq!(p.line(br#"{"error":"boom"}"#), [Item::Error("boom".into())]);
        let failed = trace(
            &[vertex("d9", "[2/2] RUN false", true, false, "exit code: 1")],
            &[],
        );
        assert_eq!(
            progress(p.line(failed.as_bytes())),
            ["#1 [2/2] RUN false", "#1 ERROR: exit code: 1"]
        );
        // an unreadable trace and a line that is not JSON do not stop the build
        assert!(p.line(br#"{"id":"moby.buildkit.trace","aux":"!!"}"#).is_empty());
        assert_eq!(progress(p.line(b"plain text")), ["plain text"]);
    }
}
