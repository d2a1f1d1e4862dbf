//! Exec sessions of the fake: the WebSocket upgrade (`v5.channel.k8s.io` only), the channel framing (0 stdin,
//! 1 stdout, 2 stderr, 3 status, 4 resize, 255 close with the closed channel as payload), and the process run
//! in the pod's container through [`iterion_driver::Run::exec`].

use std::sync::Arc;

use futures::{SinkExt, StreamExt};
use iterion_driver::{ExecRequest, Output, Run, Stdin};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::objects::not_found;
use super::pods::{Life, PodEntry};
use super::wire::{self, Request, status_body};
use super::{Shared, record};

/// The only subprotocol the fake speaks: the one that can close stdin.
pub const V5: &str = "v5.channel.k8s.io";

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
const CLOSE: u8 = 255;

/// The status frame a real API server sends for exit `code` of `argv`.
pub fn exit_status(argv: &[String], code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({"metadata": {}, "status": "Failure",
           "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                              argv.join(" ")),
           "reason": "NonZeroExitCode",
           "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
}

/// What an exec needs of its pod.
struct Target {
    run: Arc<dyn Run>,
    workdir: Option<String>,
    uid: String,
}

/// The pod's running container, or the refusal to answer.
fn target(shared: &Shared, ns: &str, name: &str, req: &Request) -> Result<Target, (u16, Value)> {
    let st = shared.lock();
    let Some(entry) = st.pods.get(&(ns.to_string(), name.to_string())) else {
        return Err((404, not_found("pods", name)));
    };
    let PodEntry {
        life: Life::Up(up), ..
    } = entry
    else {
        return Err((
            400,
            status_body(
                400,
                "BadRequest",
                &format!("pod {name} does not have a host assigned or its container is not running"),
            ),
        ));
    };
    if let Some(c) = req.q1("container").filter(|c| *c != up.container) {
        return Err((
            400,
            status_body(
                400,
                "BadRequest",
                &format!("container {c} is not valid for pod {name}"),
            ),
        ));
    }
    if !req
        .header("upgrade")
        .is_some_and(|u| u.eq_ignore_ascii_case("websocket"))
    {
        return Err((
            400,
            status_body(400, "BadRequest", "Upgrade request required (websocket)"),
        ));
    }
    if !wire::offered_protocols(req).iter().any(|p| p == V5) {
        return Err((
            400,
            status_body(
                400,
                "BadRequest",
                &format!(
                    "the engine-backed fake speaks {V5} only (offered: {:?})",
                    wire::offered_protocols(req)
                ),
            ),
        ));
    }
    if req.q("command").is_empty() {
        return Err((
            400,
            status_body(400, "BadRequest", "you must specify at least 1 command"),
        ));
    }
    Ok(Target {
        run: up.run.clone(),
        workdir: up.workdir.clone(),
        uid: entry.uid(),
    })
}

/// Whether the pod of `uid` still exists and is not being removed.
/// Whether this session loses its stdin ([`super::EngineFake::lose_stdin_of_next_execs`]).
fn take_lost_stdin(shared: &Shared) -> bool {
    let mut st = shared.lock();
    if st.lose_stdin == 0 {
        return false;
    }
    st.lose_stdin -= 1;
    true
}

fn still_there(shared: &Shared, ns: &str, name: &str, uid: &str) -> bool {
    let st = shared.lock();
    st.pods
        .get(&(ns.to_string(), name.to_string()))
        .is_some_and(|p| p.uid() == uid && !p.finalizing)
}

/// Serves one exec request on its connection.
pub(crate) async fn session(
    shared: &Arc<Shared>,
    mut stream: BufReader<TcpStream>,
    ns: &str,
    name: &str,
    req: Request,
) {
    let t = match target(shared, ns, name, &req) {
        Ok(t) => t,
        Err((code, body)) => {
            record(shared, &req, code);
            let _ = wire::write_json(stream.get_mut(), code, &body).await;
            return;
        }
    };
    record(shared, &req, 101);
    if wire::accept_upgrade(stream.get_mut(), &req, V5).await.is_err() {
        return;
    }
    let ws = WebSocketStream::from_raw_socket(stream, Role::Server, None).await;
    let argv: Vec<String> = req.q("command").into_iter().map(str::to_string).collect();
    let on = |k: &str| req.q1(k).is_some_and(|v| v == "true" || v == "1");
    let piped = |b: bool| if b { Output::Piped } else { Output::Discard };
    let mut er = ExecRequest::new(argv.clone())
        .stdin(if on("stdin") { Stdin::Piped } else { Stdin::Closed })
        .outputs(piped(on("stdout")), piped(on("stderr")));
    if let Some(wd) = &t.workdir {
        er = er.workdir(wd.clone());
    }
    let (mut sink, source) = ws.split();
    let mut exec = match t.run.exec(er).await {
        Ok(e) => e,
        Err(e) if e.is_sandbox_gone() => {
            let _ = sink.close().await;
            return;
        }
        Err(e) => {
            let failure = json!({"metadata": {}, "status": "Failure", "reason": "InternalError",
                                 "message": format!("error executing command in container: {e}")});
            let _ = sink.send(frame(STATUS, failure.to_string().as_bytes())).await;
            let _ = sink.close().await;
            return;
        }
    };
    let (tx, rx) = mpsc::channel::<Message>(8);
    let writer = tokio::spawn(write_frames(sink, rx));
    let mut stdin = exec.stdin.take();
    if stdin.is_some() && take_lost_stdin(shared) {
        // As a kubelet sometimes does to a short exec: end-of-file before the bytes sent with it arrive.
        if let Some(mut w) = stdin.take() {
            let _ = w.shutdown().await;
        }
    }
    let reader = tokio::spawn(read_frames(source, stdin));
    let out = forward(exec.stdout.take(), STDOUT, tx.clone());
    let err = forward(exec.stderr.take(), STDERR, tx.clone());
    tokio::join!(out, err);
    let status = exec.wait().await;
    // A pod removed under the exec: the stream ends without a status, as when the kubelet goes away.
    if let Ok(st) = status
        && still_there(shared, ns, name, &t.uid)
    {
        let _ = tx
            .send(frame(STATUS, exit_status(&argv, st.code).to_string().as_bytes()))
            .await;
    }
    drop(tx);
    let _ = writer.await;
    // The client answers the close; a client that does not is not waited for long.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), reader).await;
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut f = Vec::with_capacity(data.len() + 1);
    f.push(channel);
    f.extend_from_slice(data);
    Message::binary(f)
}

/// Sends the frames in order; a client that went away makes the rest be discarded (the process is never
/// stalled on a dead connection). Closes the WebSocket when the senders are done.
async fn write_frames<S>(mut sink: S, mut rx: mpsc::Receiver<Message>)
where
    S: futures::Sink<Message> + Unpin,
{
    let mut open = true;
    while let Some(m) = rx.recv().await {
        if open && sink.send(m).await.is_err() {
            open = false;
        }
    }
    if open {
        let _ = sink.close().await;
    }
}

/// Client frames: stdin data, the close of stdin (`255, 0`), resizes (ignored). Stdin is closed when the client
/// closes it or goes away.
async fn read_frames<S>(mut source: S, mut stdin: Option<iterion_driver::ExecStdin>)
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    while let Some(msg) = source.next().await {
        match msg {
            Ok(Message::Binary(d)) if d.first() == Some(&STDIN) => {
                if let Some(w) = stdin.as_mut()
                    && w.write_all(&d[1..]).await.is_err()
                {
                    stdin = None;
                }
            }
            Ok(Message::Binary(d)) if d[..] == [CLOSE, STDIN] => {
                if let Some(mut w) = stdin.take() {
                    let _ = w.shutdown().await;
                }
            }
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    if let Some(mut w) = stdin.take() {
        let _ = w.shutdown().await;
    }
}

/// Streams one output of the process as frames of `channel` until its end.
async fn forward<R: AsyncRead + Unpin>(r: Option<R>, channel: u8, tx: mpsc::Sender<Message>) {
    let Some(mut r) = r else {
        return;
    };
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                // A closed channel (the session is ending) still drains the pipe.
                let _ = tx.send(frame(channel, &buf[..n])).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_frames_as_an_api_server_sends_them() {
        let argv = vec!["/bin/sh".to_string(), "-c".to_string(), "exit 3".to_string()];
        assert_eq!(
            exit_status(&argv, 0),
            json!({"metadata": {}, "status": "Success"})
        );
        let f = exit_status(&argv, 3);
        assert_eq!(f["reason"], "NonZeroExitCode");
        assert_eq!(
            f["message"],
            "command terminated with non-zero exit code: error executing command [/bin/sh -c exit 3], exit code 3"
        );
        assert_eq!(
            f["details"]["causes"][0],
            json!({"reason": "ExitCode", "message": "3"})
        );
    }
}
