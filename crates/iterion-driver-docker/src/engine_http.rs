//! The one raw HTTP/1.1 client of the engine's Unix socket, for the requests made without the bollard client:
//! the bounded `_ping` of the handshake, the force removal of the panic path, the doctor's own probes and the
//! test helpers.
//!
//! One request per connection (`Connection: close`); the answer is read whole and a chunked body is decoded.
//! Every failure keeps its kind ([`EngineHttpError`]): no socket, refused, permission denied, unreachable, no
//! answer in time, malformed answer. [`send`] is async (tokio, bounded as a whole); [`blocking::send`] is for
//! drop paths and synchronous test helpers (standard library only, each read and write bounded).
//!
//! ```no_run
//! # async fn demo() -> Result<(), iterion_driver_docker::engine_http::EngineHttpError> {
//! use iterion_driver_docker::engine_http;
//! use std::time::Duration;
//! let r = engine_http::get("/var/run/docker.sock".as_ref(), "/_ping", Duration::from_secs(2)).await?;
//! assert_eq!(r.status, 200);
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A request to the engine: method, path with query, and an optional body with its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    method: &'a str,
    path: &'a str,
    content_type: Option<&'a str>,
    body: &'a [u8],
}

impl<'a> Request<'a> {
    /// A request without a body.
    pub fn new(method: &'a str, path: &'a str) -> Self {
        Self {
            method,
            path,
            content_type: None,
            body: &[],
        }
    }

    /// `GET path`.
    pub fn get(path: &'a str) -> Self {
        Self::new("GET", path)
    }

    /// The same request carrying `body`, sent with `Content-Type: content_type` when one is given.
    pub fn with_body(self, content_type: Option<&'a str>, body: &'a [u8]) -> Self {
        Self {
            content_type,
            body,
            ..self
        }
    }

    /// The request head (request line and headers, through the blank line).
    fn head(&self) -> String {
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: docker\r\nUser-Agent: iterion\r\nConnection: close\r\n",
            self.method, self.path
        );
        if !self.body.is_empty() || self.method != "GET" {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        if let Some(ct) = self.content_type {
            head.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        head.push_str("\r\n");
        head
    }
}

/// An answer read whole from the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// The status line as the engine sent it (`HTTP/1.1 200 OK`).
    pub status_line: String,
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

    /// The first header with this name (compared without case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request to the engine got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineHttpError {
    /// Nothing exists at the socket path.
    #[error("no engine socket at {}", socket.display())]
    Missing {
        /// The socket path.
        socket: PathBuf,
    },
    /// The socket exists but nobody accepts on it.
    #[error("engine at {} refused the connection", socket.display())]
    Refused {
        /// The socket path.
        socket: PathBuf,
    },
    /// The socket may not be opened by this user.
    #[error("permission denied on {}", socket.display())]
    PermissionDenied {
        /// The socket path.
        socket: PathBuf,
    },
    /// Connecting, writing or reading failed for another reason.
    #[error("engine at {} could not be reached: {reason}", socket.display())]
    Unreachable {
        /// The socket path.
        socket: PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// No complete answer within the bound.
    #[error("engine at {} did not answer within {}", socket.display(), short_duration(*after))]
    Timeout {
        /// The socket path.
        socket: PathBuf,
        /// The bound.
        after: Duration,
    },
    /// The answer is not an HTTP/1.1 response.
    #[error("engine at {} gave a malformed answer: {reason}", socket.display())]
    Malformed {
        /// The socket path.
        socket: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// `5s`, `1m30s`, `200ms`: a bound as a person writes it.
pub(crate) fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s == 0 {
        return format!("{}ms", d.as_millis());
    }
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec}s"),
        (h, m, sec) => format!("{h}h{m}m{sec}s"),
    }
}

fn connect_error(socket: &Path, e: &std::io::Error) -> EngineHttpError {
    let socket = socket.to_path_buf();
    match e.kind() {
        std::io::ErrorKind::NotFound => EngineHttpError::Missing { socket },
        std::io::ErrorKind::ConnectionRefused => EngineHttpError::Refused { socket },
        std::io::ErrorKind::PermissionDenied => EngineHttpError::PermissionDenied { socket },
        _ => EngineHttpError::Unreachable {
            socket,
            reason: e.to_string(),
        },
    }
}

fn io_error(socket: &Path, e: &std::io::Error, timeout: Duration) -> EngineHttpError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => EngineHttpError::Timeout {
            socket: socket.to_path_buf(),
            after: timeout,
        },
        _ => EngineHttpError::Unreachable {
            socket: socket.to_path_buf(),
            reason: e.to_string(),
        },
    }
}

/// Sends `req` to the engine at `socket` and reads the whole answer, all within `timeout`.
pub async fn send(socket: &Path, req: &Request<'_>, timeout: Duration) -> Result<Response, EngineHttpError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let work = async {
        let mut s = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| connect_error(socket, &e))?;
        let io = |e: std::io::Error| io_error(socket, &e, timeout);
        s.write_all(req.head().as_bytes()).await.map_err(io)?;
        s.write_all(req.body).await.map_err(io)?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.map_err(io)?;
        parse_response(&raw).map_err(|reason| EngineHttpError::Malformed {
            socket: socket.to_path_buf(),
            reason,
        })
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(EngineHttpError::Timeout {
            socket: socket.to_path_buf(),
            after: timeout,
        }),
    }
}

/// `GET path` with [`send`].
pub async fn get(socket: &Path, path: &str, timeout: Duration) -> Result<Response, EngineHttpError> {
    send(socket, &Request::get(path), timeout).await
}

/// The same requests without an async runtime.
pub mod blocking {
    use super::{EngineHttpError, Request, Response, connect_error, io_error, parse_response};
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::path::Path;
    use std::time::Duration;

    /// Sends `req` to the engine at `socket` and reads the whole answer; each write and read is bounded by
    /// `timeout`.
    pub fn send(socket: &Path, req: &Request<'_>, timeout: Duration) -> Result<Response, EngineHttpError> {
        let mut s = UnixStream::connect(socket).map_err(|e| connect_error(socket, &e))?;
        let io = |e: std::io::Error| io_error(socket, &e, timeout);
        s.set_read_timeout(Some(timeout)).map_err(io)?;
        s.set_write_timeout(Some(timeout)).map_err(io)?;
        s.write_all(req.head().as_bytes()).map_err(io)?;
        s.write_all(req.body).map_err(io)?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).map_err(io)?;
        parse_response(&raw).map_err(|reason| EngineHttpError::Malformed {
            socket: socket.to_path_buf(),
            reason,
        })
    }

    /// `GET path` with [`send`].
    pub fn get(socket: &Path, path: &str, timeout: Duration) -> Result<Response, EngineHttpError> {
        send(socket, &Request::get(path), timeout)
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

/// Parses a complete HTTP/1.1 response (head and body, chunked or not).
pub fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| "response has no header terminator".to_string())?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default().to_string();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|s| s.split(' ').nth(1))
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
        status_line,
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
        let r = parse_response(b"HTTP/1.1 200 OK\r\nApi-Version: 1.45\r\n\r\n").expect("parse");
        assert_eq!(r.header("API-VERSION"), Some("1.45"));
        assert_eq!(r.status_line, "HTTP/1.1 200 OK");
    }

    #[test]
    fn refuses_truncated_or_foreign_answers() {
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\nab").is_err());
        assert!(parse_response(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
    }

    #[test]
    fn encodes_query_components() {
        assert_eq!(
            encode_component("CMD [\"/bin/sh\"]"),
            "CMD%20%5B%22%2Fbin%2Fsh%22%5D"
        );
        assert_eq!(encode_component("a-b_c.d~"), "a-b_c.d~");
    }

    #[test]
    fn request_heads() {
        assert_eq!(
            Request::get("/_ping").head(),
            "GET /_ping HTTP/1.1\r\nHost: docker\r\nUser-Agent: iterion\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(
            Request::new("POST", "/images/load")
                .with_body(Some("application/x-tar"), b"abc")
                .head(),
            "POST /images/load HTTP/1.1\r\nHost: docker\r\nUser-Agent: iterion\r\nConnection: close\r\n\
             Content-Length: 3\r\nContent-Type: application/x-tar\r\n\r\n"
        );
    }

    /// The failure kinds, for the async and the blocking client alike.
    #[tokio::test]
    async fn failure_kinds_are_distinct() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("none.sock");
        let stale = dir.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind"));
        let silent = dir.path().join("silent.sock");
        let _held = std::os::unix::net::UnixListener::bind(&silent).expect("bind");
        let garbled = dir.path().join("garbled.sock");
        let l = tokio::net::UnixListener::bind(&garbled).expect("bind");
        let serve = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            for _ in 0..2 {
                let (mut s, _) = l.accept().await.expect("accept");
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).await.unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let _ = s.write_all(b"hello\r\n\r\n").await;
            }
        });
        let t = Duration::from_millis(200);
        let cases = [
            (
                &missing,
                EngineHttpError::Missing {
                    socket: missing.clone(),
                },
            ),
            (
                &stale,
                EngineHttpError::Refused {
                    socket: stale.clone(),
                },
            ),
            (
                &silent,
                EngineHttpError::Timeout {
                    socket: silent.clone(),
                    after: t,
                },
            ),
            (
                &garbled,
                EngineHttpError::Malformed {
                    socket: garbled.clone(),
                    reason: "bad status line 'hello'".into(),
                },
            ),
        ];
        for (socket, expect) in cases {
            assert_eq!(get(socket, "/_ping", t).await.expect_err("async"), expect);
            let s = socket.clone();
            let got = tokio::task::spawn_blocking(move || blocking::get(&s, "/_ping", t))
                .await
                .expect("join");
            assert_eq!(got.expect_err("blocking"), expect);
        }
        serve.await.expect("serve");
        assert_eq!(
            EngineHttpError::Timeout {
                socket: silent,
                after: t
            }
            .to_string(),
            format!(
                "engine at {} did not answer within 200ms",
                dir.path().join("silent.sock").display()
            )
        );
    }
}
