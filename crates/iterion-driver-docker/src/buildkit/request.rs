//! The BuildKit build request: `POST /build?version=2…` with the context archive streamed as the body, and the
//! answer read line by line. bollard's build call is not used for it: without its `buildkit` feature (which
//! brings a generated gRPC stack) it neither names a session nor decodes the BuildKit answer.

use bytes::Bytes;
use futures::Stream;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use std::path::Path;

/// Why the request failed before the engine answered a build stream.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The socket could not be reached, or the connection broke.
    #[error("build request: {0}")]
    Io(#[from] std::io::Error),
    /// The HTTP exchange failed.
    #[error("build request: {0}")]
    Http(#[from] hyper::Error),
    /// The engine refused the request.
    #[error("{0}")]
    Refused(String),
}

/// The query of a BuildKit build, in order. `params` are `(name, value)`; values are percent-encoded here.
pub fn query(params: &[(&str, String)]) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{k}={}", crate::engine_http::encode_component(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The answer of the engine, line by line.
pub struct Lines {
    body: hyper::body::Incoming,
    buf: Vec<u8>,
    done: bool,
    _conn: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Lines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lines")
            .field("buffered", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        // the connection holds the request body: ending it stops the context producer too
        self._conn.abort();
    }
}

impl Lines {
    /// The next line (without its newline); `None` at the end of the answer.
    pub async fn next(&mut self) -> Result<Option<Vec<u8>>, RequestError> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let rest = self.buf.split_off(i + 1);
                let mut line = std::mem::replace(&mut self.buf, rest);
                line.pop();
                return Ok(Some(line));
            }
            if self.done {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(std::mem::take(&mut self.buf)));
            }
            match self.body.frame().await {
                Some(f) => {
                    if let Ok(data) = f?.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                None => self.done = true,
            }
        }
    }
}

/// Sends `POST /v<api>/build?<query>` with `body` (the context archive) to the engine at `socket`.
pub async fn send<S>(socket: &Path, api_version: &str, query: &str, body: S) -> Result<Lines, RequestError>
where
    S: Stream<Item = Bytes> + Send + Sync + 'static,
{
    use futures::StreamExt;
    let stream = tokio::net::UnixStream::connect(socket).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    let conn = tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("build connection ended: {e}");
        }
    });
    let body = StreamBody::new(body.map(|b| Ok::<_, std::convert::Infallible>(Frame::data(b))));
    let req = hyper::Request::builder()
        .method("POST")
        .uri(format!("/v{api_version}/build?{query}"))
        .header("Host", "docker")
        .header("User-Agent", "iterion")
        .header("Content-Type", "application/x-tar")
        .body(body)
        .map_err(|e| RequestError::Refused(e.to_string()))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let mut lines = Lines {
        body: resp.into_body(),
        buf: Vec::new(),
        done: false,
        _conn: conn,
    };
    if !status.is_success() {
        let mut text = Vec::new();
        while let Some(l) = lines.next().await? {
            text.extend_from_slice(&l);
            if text.len() > 4096 {
                break;
            }
        }
        let text = String::from_utf8_lossy(&text).into_owned();
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
            .unwrap_or(text);
        return Err(RequestError::Refused(format!("{status}: {message}")));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_encoded() {
        let q = query(&[
            ("t", "a:b".into()),
            ("buildargs", r#"{"A":"1 2"}"#.into()),
            ("version", "2".into()),
        ]);
        assert_eq!(q, "t=a%3Ab&buildargs=%7B%22A%22%3A%221%202%22%7D&version=2");
    }
}
