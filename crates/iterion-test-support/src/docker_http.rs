//! A tiny blocking HTTP/1.1 client for the container engine's Unix socket (standard library only).
//!
//! Used by test helpers and `cargo xtask images`, which must stay light and must never shell out to a
//! container CLI. One request per connection (`Connection: close`); chunked responses are decoded.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A response read whole from the engine.
#[derive(Debug, Clone)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Header lines as `(lower-case name, value)`.
    pub headers: Vec<(String, String)>,
    /// The decoded body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as lossy UTF-8 text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Percent-encodes a query-string component (RFC 3986 unreserved characters are kept).
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Sends one request to the engine at `socket` and reads the whole response, bounded by `timeout` per read.
pub fn request(
    socket: &Path,
    method: &str,
    path_and_query: &str,
    content_type: Option<&str>,
    body: &[u8],
    timeout: Duration,
) -> Result<Response, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| format!("connect {}: {e}", socket.display()))?;
    s.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    let mut head = format!(
        "{method} {path_and_query} HTTP/1.1\r\nHost: docker\r\nUser-Agent: iterion-test-support\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(ct) = content_type {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())
        .map_err(|e| format!("write request head: {e}"))?;
    s.write_all(body)
        .map_err(|e| format!("write request body: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("read response: {e}"))?;
    parse_response(&raw)
}

/// Parses a complete HTTP/1.1 response (head and body, chunked or not).
pub fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| "response has no header terminator".to_string())?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line '{status_line}'"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked { dechunk(rest)? } else { rest.to_vec() };
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| "truncated chunk size line".to_string())?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size =
            usize::from_str_radix(size_text, 16).map_err(|_| format!("bad chunk size '{size_text}'"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size {
            return Err("truncated chunk".to_string());
        }
        out.extend_from_slice(&data[..size]);
        data = data.get(size + 2..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: &str, status: u16, body: &str) {
        let r = parse_response(raw.as_bytes()).expect("parse");
        assert_eq!((r.status, r.text().as_str()), (status, body));
    }

    #[test]
    fn parses_plain_and_chunked_responses() {
        check("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK", 200, "OK");
        check(
            "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
            404,
            "abcde",
        );
        check("HTTP/1.0 204 No Content\r\n\r\n", 204, "");
    }

    #[test]
    fn refuses_truncated_responses() {
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\nab").is_err());
    }

    #[test]
    fn encodes_query_components() {
        assert_eq!(
            encode_component("CMD [\"/bin/sh\"]"),
            "CMD%20%5B%22%2Fbin%2Fsh%22%5D"
        );
        assert_eq!(encode_component("a-b_c.d~"), "a-b_c.d~");
    }
}
