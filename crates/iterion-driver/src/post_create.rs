//! The post-create helper shared by every driver (03 §3.9).

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::driver::Run;
use crate::error::{Error, Result, SetupPhase};
use crate::exec::{ExecRequest, Stdin};
use crate::types::{EventSink, LogLevel};

/// Bytes of each stream kept for `PostCreateFailed`.
pub const TAIL_BYTES: usize = 4096;
/// Prefix of every streamed line.
pub const LOG_PREFIX: &str = "sandbox: post_create: ";

fn push_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    tail.extend_from_slice(bytes);
    if tail.len() > TAIL_BYTES {
        tail.drain(..tail.len() - TAIL_BYTES);
    }
}

async fn stream_lines(r: Option<impl AsyncRead + Unpin>, level: LogLevel, log: &EventSink) -> Vec<u8> {
    let mut tail = Vec::new();
    let Some(r) = r else {
        return tail;
    };
    let mut r = BufReader::new(r);
    let mut line = Vec::new();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                push_tail(&mut tail, &line);
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\n', '\r']);
                if !text.is_empty() {
                    log.log(level, format!("{LOG_PREFIX}{text}"));
                }
            }
        }
    }
    tail
}

fn with_env(mut req: ExecRequest, env: &[(String, String)]) -> ExecRequest {
    req.env.extend(env.iter().cloned());
    req
}

/// Runs the resolved post-create commands one after another, each as `["/bin/sh", "-c", command]`, as the
/// sandbox user, in the workspace, with the container environment only and stdin closed.
///
/// stdout lines are logged at info, stderr lines at warn, prefixed `sandbox: post_create: ` (empty lines
/// skipped). The whole phase is bounded by `timeout`: on expiry the running command is killed and
/// `SetupTimeout {phase: post_create}` is returned. A non-zero exit returns `PostCreateFailed` with the 1-based
/// index of the command and the last 4 KiB of each stream; later commands do not run.
pub async fn run_post_create(
    run: &dyn Run,
    commands: &[String],
    timeout: Duration,
    log: &EventSink,
) -> Result<()> {
    run_post_create_with_env(run, commands, &[], timeout, log).await
}

/// [`run_post_create`] with exec-scope entries for every command (for example the proxy credentials of the
/// setup step, which the container environment never carries).
pub async fn run_post_create_with_env(
    run: &dyn Run,
    commands: &[String],
    env: &[(String, String)],
    timeout: Duration,
    log: &EventSink,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    for (i, cmd) in commands.iter().enumerate() {
        let mut exec = run
            .exec(with_env(
                ExecRequest::shell(cmd.clone()).stdin(Stdin::Closed),
                env,
            ))
            .await?;
        let killer = exec.killer();
        let out = exec.stdout.take();
        let err = exec.stderr.take();
        let work = async {
            let (o, e) = tokio::join!(
                stream_lines(out, LogLevel::Info, log),
                stream_lines(err, LogLevel::Warn, log)
            );
            exec.wait().await.map(|s| (s, o, e))
        };
        match tokio::time::timeout_at(deadline, work).await {
            Err(_) => {
                let _ = killer.terminate(Duration::from_secs(2)).await;
                return Err(Error::SetupTimeout {
                    phase: SetupPhase::PostCreate,
                    after: timeout,
                    subject: None,
                });
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok((status, o, e))) if !status.success() => {
                return Err(Error::PostCreateFailed {
                    index: i + 1,
                    code: status.code,
                    stdout_tail: String::from_utf8_lossy(&o).into_owned(),
                    stderr_tail: String::from_utf8_lossy(&e).into_owned(),
                });
            }
            Ok(Ok(_)) => {}
        }
    }
    Ok(())
}
