//! One exec session over the WebSocket `v5.channel.k8s.io` subprotocol (07 §9): the argv goes in the request
//! URL (only ever the fixed argv of [`crate::script`]), the streams are channel frames (0 stdin, 1 stdout,
//! 2 stderr, 3 status, 255 close). A server that cannot close stdin (`v4.channel.k8s.io`, clusters older than
//! 1.30) is refused before anything runs.

use futures::{FutureExt, SinkExt, StreamExt};
use kube::Client;
use kube::api::AttachParams;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;

use crate::names::CONTAINER_NAME;
use crate::status::{ExecStatus, exec_status};

/// The reason given when the server offers only the v4 subprotocol.
pub const TOO_OLD: &str = "the cluster's API server is older than 1.30: exec cannot close stdin";

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
const CLOSE: u8 = 255;
const PIPE: usize = 64 * 1024;

/// Why a session could not be opened or ended without a status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionError {
    /// The server speaks only v4 (or an unknown subprotocol).
    TooOld,
    /// The API server refused the upgrade with this status and message.
    Api { code: u16, message: String },
    /// Transport failure (connect, upgrade, WebSocket).
    Transport(String),
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionError::TooOld => f.write_str(TOO_OLD),
            SessionError::Api { code, message } => write!(f, "the API server answered {code}: {message}"),
            SessionError::Transport(m) => f.write_str(m),
        }
    }
}

/// What the caller asked to attach.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attach {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// An open session: the caller's ends of the streams and the status.
pub(crate) struct Session {
    pub stdin: Option<DuplexStream>,
    pub stdout: Option<DuplexStream>,
    pub stderr: Option<DuplexStream>,
    /// The status channel's verdict, or why the session ended without one.
    pub status: oneshot::Receiver<Result<ExecStatus, SessionError>>,
}

/// Opens an exec session on `pod` running `argv`.
pub(crate) async fn open(
    client: &Client,
    namespace: &str,
    pod: &str,
    argv: &[String],
    attach: Attach,
) -> Result<Session, SessionError> {
    let ap = AttachParams {
        container: Some(CONTAINER_NAME.to_string()),
        stdin: attach.stdin,
        stdout: attach.stdout,
        stderr: attach.stderr,
        tty: false,
        ..AttachParams::default()
    };
    let request = kube::core::Request::new(format!("/api/v1/namespaces/{namespace}/pods"))
        .exec(pod, argv.iter().map(String::as_str), &ap)
        .map_err(|e| SessionError::Transport(e.to_string()))?;
    let conn = client.connect(request).await.map_err(|e| match e {
        kube::Error::Api(s) => SessionError::Api {
            code: s.code,
            message: if s.message.is_empty() {
                s.reason.clone()
            } else {
                s.message.clone()
            },
        },
        kube::Error::UpgradeConnection(u) => {
            if u.to_string().contains("Sec-WebSocket-Protocol") {
                SessionError::TooOld
            } else {
                SessionError::Transport(u.to_string())
            }
        }
        other => SessionError::Transport(other.to_string()),
    })?;
    if !conn.supports_stream_close() {
        return Err(SessionError::TooOld);
    }
    let ws = conn.into_stream();
    let (caller_in, pump_in) = pair(attach.stdin);
    let (caller_out, pump_out) = pair(attach.stdout);
    let (caller_err, pump_err) = pair(attach.stderr);
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let r = pump(ws, pump_in, pump_out, pump_err).await;
        let _ = tx.send(r);
    });
    Ok(Session {
        stdin: caller_in,
        stdout: caller_out,
        stderr: caller_err,
        status: rx,
    })
}

fn pair(on: bool) -> (Option<DuplexStream>, Option<DuplexStream>) {
    if on {
        let (a, b) = tokio::io::duplex(PIPE);
        (Some(a), Some(b))
    } else {
        (None, None)
    }
}

/// Moves frames both ways until the server sends the status and closes.
async fn pump<S>(
    ws: tokio_tungstenite::WebSocketStream<S>,
    mut stdin: Option<DuplexStream>,
    mut stdout: Option<DuplexStream>,
    mut stderr: Option<DuplexStream>,
) -> Result<ExecStatus, SessionError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = ws.split();
    let mut status: Option<ExecStatus> = None;
    let mut buf = vec![0u8; 32 * 1024];
    let mut stdin_open = stdin.is_some();
    loop {
        tokio::select! {
            n = read_some(stdin.as_mut(), &mut buf[1..]), if stdin_open => {
                // Whatever stdin already holds (the end included) goes out in one write: separate small
                // writes would wait on the server's delayed acknowledgement.
                let mut n = n;
                loop {
                    match n {
                        Ok(0) | Err(_) => {
                            stdin_open = false;
                            stdin = None;
                            // v5: the close signal for channel 0 is end-of-file for the process.
                            sink.feed(Message::binary(vec![CLOSE, STDIN])).await
                                .map_err(|e| SessionError::Transport(e.to_string()))?;
                            break;
                        }
                        Ok(k) => {
                            buf[0] = STDIN;
                            sink.feed(Message::binary(buf[..=k].to_vec())).await
                                .map_err(|e| SessionError::Transport(e.to_string()))?;
                            match stdin.as_mut().and_then(|r| r.read(&mut buf[1..]).now_or_never()) {
                                Some(next) => n = next,
                                None => break,
                            }
                        }
                    }
                }
                sink.flush().await.map_err(|e| SessionError::Transport(e.to_string()))?;
            }
            msg = stream.next() => {
                let Some(msg) = msg else { break };
                let msg = match msg {
                    Ok(m) => m,
                    Err(_) if status.is_some() => break,
                    Err(e) => return Err(SessionError::Transport(e.to_string())),
                };
                match msg {
                    Message::Binary(data) if !data.is_empty() => {
                        let payload = &data[1..];
                        match data[0] {
                            STDOUT => write_to(&mut stdout, payload).await,
                            STDERR => write_to(&mut stderr, payload).await,
                            STATUS => status = Some(exec_status(payload)),
                            _ => {}
                        }
                    }
                    Message::Close(_) => break,
                    _ => {}
                }
            }
        }
    }
    drop(stdout);
    drop(stderr);
    status.ok_or_else(|| SessionError::Transport("the exec stream ended without a status".into()))
}

async fn read_some(r: Option<&mut DuplexStream>, buf: &mut [u8]) -> std::io::Result<usize> {
    match r {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

/// Writes to a caller's pipe; a caller that dropped its end loses the bytes (the process is not stalled).
async fn write_to(w: &mut Option<DuplexStream>, data: &[u8]) {
    if let Some(pipe) = w
        && pipe.write_all(data).await.is_err()
    {
        *w = None;
    }
}

/// Runs `argv` with `input` on stdin, collecting stdout and stderr (for the driver's own short execs).
pub(crate) async fn run_collect(
    client: &Client,
    namespace: &str,
    pod: &str,
    argv: &[String],
    input: Option<&[u8]>,
) -> Result<(ExecStatus, Vec<u8>, Vec<u8>), SessionError> {
    let attach = Attach {
        stdin: input.is_some(),
        stdout: true,
        stderr: true,
    };
    let mut s = open(client, namespace, pod, argv, attach).await?;
    if let (Some(mut w), Some(data)) = (s.stdin.take(), input) {
        let data = data.to_vec();
        tokio::spawn(async move {
            let _ = w.write_all(&data).await;
            let _ = w.shutdown().await;
        });
    }
    let mut out = s.stdout.take();
    let mut err = s.stderr.take();
    let (o, e) = tokio::join!(drain(out.as_mut()), drain(err.as_mut()));
    let status = s
        .status
        .await
        .map_err(|_| SessionError::Transport("the exec session was dropped".into()))??;
    Ok((status, o, e))
}

async fn drain(r: Option<&mut DuplexStream>) -> Vec<u8> {
    let mut v = Vec::new();
    if let Some(r) = r {
        let _ = r.read_to_end(&mut v).await;
    }
    v
}
