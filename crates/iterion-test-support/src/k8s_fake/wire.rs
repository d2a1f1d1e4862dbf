//! The HTTP/1.1 plumbing of the fake API server: reading one request (a `content-length` or chunked body),
//! writing JSON, text and chunked answers, the WebSocket upgrade, query decoding and the Kubernetes `Status`
//! object. Enough for what `kube`'s client sends; not a general HTTP server.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

/// One request as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// The decoded query, in order (repeated keys kept).
    pub query: Vec<(String, String)>,
    /// The raw query text (empty when none).
    pub raw_query: String,
    /// Headers, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    /// Every value of query key `k`.
    pub fn q(&self, k: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The first value of query key `k`.
    pub fn q1(&self, k: &str) -> Option<&str> {
        self.q(k).into_iter().next()
    }

    /// Header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// `METHOD path[?query]`.
    pub fn line(&self) -> String {
        if self.raw_query.is_empty() {
            format!("{} {}", self.method, self.path)
        } else {
            format!("{} {}?{}", self.method, self.path, self.raw_query)
        }
    }
}

/// Reads one request; `None` at end of stream or on a malformed head.
pub async fn read_request<S: AsyncRead + Unpin>(stream: &mut BufReader<S>) -> Option<Request> {
    let mut line = String::new();
    if stream.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if stream.read_line(&mut h).await.ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':')?;
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let get = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v): &(String, String)| v.clone())
    };
    let mut body = Vec::new();
    if let Some(len) = get("content-length") {
        body.resize(len.parse().ok()?, 0);
        stream.read_exact(&mut body).await.ok()?;
    } else if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            stream.read_line(&mut size).await.ok()?;
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk).await.ok()?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
    let (path, raw_query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.clone(), String::new()),
    };
    Some(Request {
        method,
        path,
        query: decode_query(&raw_query),
        raw_query,
        headers,
        body,
    })
}

/// `a=1&b=x%20y` → `[(a, 1), (b, x y)]`.
pub fn decode_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// Percent-decoding (and `+` as a space).
pub fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The reason phrase of the codes the fake sends.
pub fn reason(code: u16) -> &'static str {
    match code {
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        422 => "Unprocessable Entity",
        500 => "Internal Server Error",
        _ => "Error",
    }
}

/// A Kubernetes `Status` failure body.
pub fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// Writes a JSON answer (keep-alive).
pub async fn write_json<S: AsyncWrite + Unpin>(out: &mut S, code: u16, body: &Value) -> std::io::Result<()> {
    write_body(out, code, "application/json", body.to_string().as_bytes()).await
}

/// Writes an answer with a `content-length` body (keep-alive).
pub async fn write_body<S: AsyncWrite + Unpin>(
    out: &mut S,
    code: u16,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {code} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        reason(code),
        body.len()
    );
    let mut all = head.into_bytes();
    all.extend_from_slice(body);
    out.write_all(&all).await?;
    out.flush().await
}

/// Starts a chunked answer (a watch stream).
pub async fn start_chunked<S: AsyncWrite + Unpin>(out: &mut S) -> std::io::Result<()> {
    out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
        .await?;
    out.flush().await
}

/// Writes one chunk (`data` must not be empty).
pub async fn write_chunk<S: AsyncWrite + Unpin>(out: &mut S, data: &[u8]) -> std::io::Result<()> {
    let mut all = format!("{:x}\r\n", data.len()).into_bytes();
    all.extend_from_slice(data);
    all.extend_from_slice(b"\r\n");
    out.write_all(&all).await?;
    out.flush().await
}

/// Ends a chunked answer.
pub async fn end_chunked<S: AsyncWrite + Unpin>(out: &mut S) -> std::io::Result<()> {
    out.write_all(b"0\r\n\r\n").await?;
    out.flush().await
}

/// Accepts a WebSocket upgrade with `protocol`.
pub async fn accept_upgrade<S: AsyncWrite + Unpin>(
    out: &mut S,
    req: &Request,
    protocol: &str,
) -> std::io::Result<()> {
    let key = req.header("sec-websocket-key").unwrap_or_default();
    let head = format!(
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
         sec-websocket-accept: {}\r\nsec-websocket-protocol: {protocol}\r\n\r\n",
        derive_accept_key(key.as_bytes()),
    );
    out.write_all(head.as_bytes()).await?;
    out.flush().await
}

/// The subprotocols a WebSocket upgrade offers (`Sec-WebSocket-Protocol`, comma-separated, possibly repeated).
pub fn offered_protocols(req: &Request) -> Vec<String> {
    req.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-protocol"))
        .flat_map(|(_, v)| v.split(',').map(|p| p.trim().to_string()))
        .filter(|p| !p.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_decoding() {
        assert_eq!(
            decode_query("command=%2Fbin%2Fsh&command=-c&x=a+b&flag"),
            vec![
                ("command".to_string(), "/bin/sh".to_string()),
                ("command".to_string(), "-c".to_string()),
                ("x".to_string(), "a b".to_string()),
                ("flag".to_string(), String::new()),
            ]
        );
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%4"), "%4");
        assert_eq!(decode("%41%42"), "AB");
    }

    #[tokio::test]
    async fn a_chunked_request_and_a_keep_alive_pair() {
        let raw = b"POST /a?b=1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
                    GET /v HTTP/1.1\r\ncontent-length: 0\r\n\r\n";
        let mut r = BufReader::new(&raw[..]);
        let a = read_request(&mut r).await.expect("first");
        assert_eq!(
            (a.method.as_str(), a.path.as_str(), &a.body[..]),
            ("POST", "/a", &b"abc"[..])
        );
        assert_eq!(a.q1("b"), Some("1"));
        let b = read_request(&mut r).await.expect("second");
        assert_eq!(b.line(), "GET /v");
        assert!(read_request(&mut r).await.is_none());
    }
}
