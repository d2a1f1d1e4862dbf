//! A BuildKit session over the engine's session endpoint: the side of `docker buildx` that serves build secrets
//! (and registry credentials) to the builder.
//!
//! `POST /session` with `Upgrade: h2c` and one `X-Docker-Expose-Session-Grpc-Method` header per method served;
//! after `101 Switching Protocols` the engine is the gRPC client on the hijacked connection and this side serves
//! HTTP/2 (the `h2` crate; the messages are coded by hand in [`super::proto`]). A build names the session with
//! `session=<id>`.
//!
//! Served methods: `grpc.health.v1.Health/Check` (the engine checks the session is alive),
//! `moby.buildkit.secrets.v1.Secrets/GetSecret` (an unknown id answers `NotFound`, which BuildKit reports as
//! the build's error) and `moby.filesync.v1.Auth/Credentials` (the registry credentials of a host, for the base
//! images the builder pulls). Any other method answers `Unimplemented`. Secret values are only ever written to
//! the session's connection.

use super::proto;
use crate::auth::RegistryAuth;
use bytes::Bytes;
use iterion_driver::SecretBytes;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The health method.
pub const HEALTH: &str = "/grpc.health.v1.Health/Check";
/// The secrets method.
pub const GET_SECRET: &str = "/moby.buildkit.secrets.v1.Secrets/GetSecret";
/// The registry credentials method.
pub const CREDENTIALS: &str = "/moby.filesync.v1.Auth/Credentials";

/// gRPC status `NotFound`.
const NOT_FOUND: u32 = 5;
/// gRPC status `InvalidArgument`.
const INVALID_ARGUMENT: u32 = 3;
/// gRPC status `Internal`.
const INTERNAL: u32 = 13;
/// gRPC status `Unimplemented`.
const UNIMPLEMENTED: u32 = 12;

/// What a session serves.
#[derive(Clone)]
pub struct Served {
    /// Secret id → value.
    pub secrets: BTreeMap<String, SecretBytes>,
    /// Registry credentials (a helper may run: the session calls it on a blocking thread).
    pub credentials: crate::auth::Credentials,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The socket could not be reached or the connection broke.
    #[error("build session: {0}")]
    Io(#[from] std::io::Error),
    /// The engine answered something else than `101 Switching Protocols`.
    #[error("build session refused by the engine: {0}")]
    Refused(String),
    /// The engine did not answer in time.
    #[error("build session: no answer from the engine within {0:?}")]
    Timeout(Duration),
}

/// An open session; dropping it closes the connection.
#[derive(Debug)]
pub struct Session {
    /// The id a build names (`session=`).
    pub id: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::fill(&mut b[..]);
    hex::encode(b)
}

/// The request head of `POST /session`.
pub fn request_head(api_version: &str, id: &str, shared_key: &str) -> String {
    let mut head = format!(
        "POST /v{api_version}/session HTTP/1.1\r\nHost: docker\r\nUser-Agent: iterion\r\nUpgrade: h2c\r\n\
         Connection: Upgrade\r\nContent-Length: 0\r\nX-Docker-Expose-Session-Uuid: {id}\r\n\
         X-Docker-Expose-Session-Name: iterion\r\nX-Docker-Expose-Session-Sharedkey: {shared_key}\r\n"
    );
    for m in [HEALTH, GET_SECRET, CREDENTIALS] {
        head.push_str(&format!("X-Docker-Expose-Session-Grpc-Method: {m}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// Reads an HTTP/1.1 response head byte by byte (nothing after it is consumed: the HTTP/2 preface follows).
async fn read_head(s: &mut tokio::net::UnixStream) -> Result<String, SessionError> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await? == 0 || head.len() > 16 * 1024 {
            return Err(SessionError::Refused(format!(
                "the engine closed the connection after {:?}",
                String::from_utf8_lossy(&head)
            )));
        }
        head.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// Opens a session on the engine at `socket` (API `api_version`) serving `served`; the handshake is bounded by
/// `timeout`.
pub async fn open(
    socket: &Path,
    api_version: &str,
    served: Served,
    timeout: Duration,
) -> Result<Session, SessionError> {
    let id = random_hex(16);
    let key = random_hex(16);
    let handshake = async {
        let mut s = tokio::net::UnixStream::connect(socket).await?;
        s.write_all(request_head(api_version, &id, &key).as_bytes())
            .await?;
        let head = read_head(&mut s).await?;
        let status = head.lines().next().unwrap_or_default().to_owned();
        if status.split_whitespace().nth(1) != Some("101") {
            let mut body = vec![0u8; 1024];
            let n = tokio::time::timeout(Duration::from_secs(1), s.read(&mut body))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(0);
            let body = String::from_utf8_lossy(&body[..n]);
            return Err(SessionError::Refused(format!("{status} {}", body.trim())));
        }
        Ok(s)
    };
    let stream = tokio::time::timeout(timeout, handshake)
        .await
        .map_err(|_| SessionError::Timeout(timeout))??;
    let served = Arc::new(served);
    let task = tokio::spawn(async move {
        if let Err(e) = serve(stream, served).await {
            tracing::debug!("build session ended: {e}");
        }
    });
    Ok(Session { id, task })
}

async fn serve(stream: tokio::net::UnixStream, served: Arc<Served>) -> Result<(), h2::Error> {
    let mut conn = h2::server::handshake(stream).await?;
    while let Some(next) = conn.accept().await {
        let (req, respond) = next?;
        let served = served.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(req, respond, served).await {
                tracing::debug!("build session call failed: {e}");
            }
        });
    }
    Ok(())
}

/// A gRPC outcome: a message, or a status code with a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// `grpc-status: 0` with this message.
    Ok(Vec<u8>),
    /// An error status.
    Status(u32, String),
}

/// Answers one call of `method` with the request message `msg` (the gRPC frame removed).
pub fn dispatch(method: &str, msg: &[u8], served: &Served) -> Reply {
    match method {
        HEALTH => Reply::Ok(proto::health_serving()),
        GET_SECRET => match proto::secret_request_id(msg) {
            Ok(id) => match served.secrets.get(&id) {
                Some(v) => Reply::Ok(proto::secret_response(v.expose())),
                None => Reply::Status(
                    NOT_FOUND,
                    format!(
                        "secret {id} not found: the operator gives build secrets with \
                         --sandbox-build-secret id={id},env=VAR (or src=PATH)"
                    ),
                ),
            },
            Err(e) => Reply::Status(INVALID_ARGUMENT, e.to_string()),
        },
        CREDENTIALS => match proto::credentials_request_host(msg) {
            Ok(host) => {
                let resp = match served.credentials.lookup_blocking(&host) {
                    Some(RegistryAuth {
                        identity_token: Some(t),
                        ..
                    }) => proto::credentials_response("", &t),
                    Some(a) => proto::credentials_response(
                        a.username.as_deref().unwrap_or(""),
                        a.password.as_deref().unwrap_or(""),
                    ),
                    None => proto::credentials_response("", ""),
                };
                Reply::Ok(resp)
            }
            Err(e) => Reply::Status(INVALID_ARGUMENT, e.to_string()),
        },
        other => Reply::Status(UNIMPLEMENTED, format!("method {other} is not served")),
    }
}

fn percent_encode_message(m: &str) -> String {
    m.bytes()
        .map(|b| {
            if (0x20..0x7f).contains(&b) && b != b'%' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn answer(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    served: Arc<Served>,
) -> Result<(), h2::Error> {
    let method = req.uri().path().to_owned();
    let mut body = req.into_body();
    let mut buf = Vec::new();
    let msg = loop {
        match proto::grpc_unframe(&buf) {
            Ok(Some(m)) => break Ok(m.to_vec()),
            Ok(None) => {}
            Err(e) => break Err(e.to_string()),
        }
        match body.data().await {
            Some(chunk) => {
                let chunk = chunk?;
                let _ = body.flow_control().release_capacity(chunk.len());
                buf.extend_from_slice(&chunk);
            }
            None => break Err("the request has no message".to_owned()),
        }
    };
    let reply = match msg {
        // a credential helper may run: off the async threads
        Ok(m) => tokio::task::spawn_blocking(move || dispatch(&method, &m, &served))
            .await
            .unwrap_or_else(|e| Reply::Status(INTERNAL, e.to_string())),
        Err(e) => Reply::Status(INVALID_ARGUMENT, e),
    };
    let head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc");
    match reply {
        Reply::Ok(m) => {
            let resp = head.body(()).unwrap_or_default();
            let mut send = respond.send_response(resp, false)?;
            send.send_data(Bytes::from(proto::grpc_frame(&m)), false)?;
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            send.send_trailers(trailers)?;
        }
        Reply::Status(code, message) => {
            let resp = head
                .header("grpc-status", code.to_string())
                .header("grpc-message", percent_encode_message(&message))
                .body(())
                .unwrap_or_default();
            respond.send_response(resp, true)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> crate::auth::Credentials {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.keep().join("config.json");
        // "am86cHc=" is base64 of "jo:pw"
        std::fs::write(&p, r#"{"auths":{"registry.example":{"auth":"am86cHc="}}}"#).expect("write");
        crate::auth::Credentials::new(Some(p), None)
    }

    fn served() -> Served {
        let mut secrets = BTreeMap::new();
        secrets.insert("tok".to_owned(), SecretBytes::new(b"s3cr3t".to_vec()));
        Served {
            secrets,
            credentials: creds(),
        }
    }

    #[test]
    fn the_head_exposes_each_method() {
        let h = request_head("1.41", "abc", "key");
        assert!(h.starts_with("POST /v1.41/session HTTP/1.1\r\n"), "{h}");
        for m in [HEALTH, GET_SECRET, CREDENTIALS] {
            assert!(
                h.contains(&format!("X-Docker-Expose-Session-Grpc-Method: {m}\r\n")),
                "{h}"
            );
        }
        assert!(h.contains("Upgrade: h2c\r\nConnection: Upgrade\r\n") && h.ends_with("\r\n\r\n"));
        assert!(h.contains("X-Docker-Expose-Session-Uuid: abc\r\n"));
    }

    #[test]
    fn calls_are_answered() {
        let s = served();
        assert_eq!(dispatch(HEALTH, &[], &s), Reply::Ok(vec![8, 1]));
        let mut req = Vec::new();
        proto::put_bytes(&mut req, 1, b"tok");
        assert_eq!(
            dispatch(GET_SECRET, &req, &s),
            Reply::Ok(proto::secret_response(b"s3cr3t"))
        );
        let mut other = Vec::new();
        proto::put_bytes(&mut other, 1, b"nope");
        match dispatch(GET_SECRET, &other, &s) {
            Reply::Status(5, m) => assert!(m.contains("secret nope not found"), "{m}"),
            r => panic!("{r:?}"),
        }
        let mut host = Vec::new();
        proto::put_bytes(&mut host, 1, b"registry.example");
        assert_eq!(
            dispatch(CREDENTIALS, &host, &s),
            Reply::Ok(proto::credentials_response("jo", "pw"))
        );
        assert_eq!(dispatch(CREDENTIALS, &[], &s), Reply::Ok(Vec::new()));
        assert!(matches!(dispatch("/x.Y/Z", &[], &s), Reply::Status(12, _)));
        assert!(matches!(
            dispatch(GET_SECRET, &[0x0a, 9], &s),
            Reply::Status(3, _)
        ));
        let d = format!("{s:?}");
        assert!(d.contains("tok") && !d.contains("s3cr3t"), "{d}");
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(percent_encode_message("a b%\n"), "a b%25%0A");
    }
}
