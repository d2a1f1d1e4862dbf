//! Exec over the engine API with the exec shim (03 §8.9): streaming stdin/stdout/stderr with bounded buffers,
//! failure separation, and signals delivered INSIDE the container through the recorded pid.

use crate::container::RunInner;
use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures::StreamExt;
use iterion_driver::{
    Error as DError, Exec, ExecId, ExecParts, ExecRequest, ExitStatus, KillExec, Output, Stdin,
};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Directory (tmpfs) of the shim's pid files.
pub const PID_DIR: &str = "/run/iterion/exec";
/// Bytes buffered per output stream before the engine connection stops being read (backpressure).
pub const OUTPUT_BUFFER: usize = 256 * 1024;
/// Pid files are removed in batches of this many finished execs.
pub const PID_BATCH: usize = 64;

/// The script of the exec shim of 03 §8.9: records its pid in `$1`, then becomes the command.
const SHIM_SCRIPT: &str = "echo $$ > \"$1\" && shift && exec \"$@\"";

/// The shim command of 03 §8.9.
pub fn shim_cmd(pid_file: &str, argv: &[String]) -> Vec<String> {
    shim_with(SHIM_SCRIPT.to_string(), pid_file, argv)
}

/// What the first exec's shim prints ahead of its command when the start left it the listing of the sandbox's
/// own processes: this, the pids as [`LIST_PIDS_SCRIPT`] prints them, a newline.
pub const LISTING_MAGIC: &str = "iterion-pids:";

/// The longest listing line read before it is given up (a fresh sandbox has a handful of processes).
const MAX_LISTING_LINE: usize = 4096;

/// The shim of the first exec of a run whose start checks came from the cache: before the command of
/// [`shim_cmd`] runs, it prints [`LISTING_MAGIC`] and the pids of the sandbox's processes but its own, so the
/// listing the start would have made is made before any command of the workflow runs, without an exec of its
/// own. The command's output follows it on stdout; the driver strips the line.
pub fn listing_shim_cmd(pid_file: &str, argv: &[String]) -> Vec<String> {
    let script = format!("printf '{LISTING_MAGIC}'; {LIST_PIDS_SCRIPT}; echo; {SHIM_SCRIPT}");
    shim_with(script, pid_file, argv)
}

fn shim_with(script: String, pid_file: &str, argv: &[String]) -> Vec<String> {
    let mut cmd = vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        script,
        "iterion-exec".to_string(),
        pid_file.to_string(),
    ];
    cmd.extend(argv.iter().cloned());
    cmd
}

/// Reads the listing line at the start of the first exec's stdout (see [`listing_shim_cmd`]).
#[derive(Debug, Default)]
struct ListingLine {
    buf: Vec<u8>,
}

impl ListingLine {
    /// Feeds stdout bytes. `None`: the line is not complete yet. `Some((line, rest))`: the pids of a complete
    /// line (`None` when the output does not start with one), and the bytes that belong to the command.
    fn feed(&mut self, bytes: &[u8]) -> Option<(Option<String>, Vec<u8>)> {
        self.buf.extend_from_slice(bytes);
        let magic = LISTING_MAGIC.as_bytes();
        let n = self.buf.len().min(magic.len());
        if self.buf[..n] != magic[..n] {
            return Some((None, std::mem::take(&mut self.buf)));
        }
        if let Some(nl) = self.buf.iter().position(|b| *b == b'\n') {
            let rest = self.buf.split_off(nl + 1);
            let line = String::from_utf8_lossy(&self.buf[LISTING_MAGIC.len()..nl]).into_owned();
            return Some((Some(line), rest));
        }
        if self.buf.len() > MAX_LISTING_LINE {
            return Some((None, std::mem::take(&mut self.buf)));
        }
        None
    }
}

/// The kill command of 03 §8.9 for a signal number.
pub fn kill_cmd(pid_file: &str, signal: i32) -> Vec<String> {
    let name = match signal {
        15 => "TERM".to_string(),
        9 => "KILL".to_string(),
        2 => "INT".to_string(),
        1 => "HUP".to_string(),
        n => n.to_string(),
    };
    vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        "p=$(cat \"$1\" 2>/dev/null) || exit 0; kill -$2 -$p 2>/dev/null || kill -$2 $p 2>/dev/null; exit 0"
            .to_string(),
        "iterion-kill".to_string(),
        pid_file.to_string(),
        name,
    ]
}

/// Runs a command to completion as user `user` without attaching any stream; returns its exit code.
pub(crate) async fn run_quiet(inner: &RunInner, user: &str, cmd: Vec<String>) -> Result<i64, DError> {
    run_capture(inner, user, cmd, 0).await.map(|(code, _)| code)
}

/// Runs a command to completion as user `user`, stdin closed; returns its exit code and the first
/// `max` bytes of its stdout (stderr is read and dropped).
pub(crate) async fn run_capture(
    inner: &RunInner,
    user: &str,
    cmd: Vec<String>,
    max: usize,
) -> Result<(i64, Vec<u8>), DError> {
    let cfg = ExecConfig {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        cmd: Some(cmd),
        user: Some(user.to_string()),
        ..Default::default()
    };
    let created = match inner.docker.create_exec(&inner.id, cfg).await {
        Ok(c) => c,
        Err(e) => return Err(inner.exec_create_error(e).await),
    };
    let mut out = Vec::new();
    match inner
        .docker
        .start_exec(
            &created.id,
            Some(StartExecOptions {
                detach: false,
                tty: false,
                output_capacity: None,
            }),
        )
        .await
    {
        Ok(StartExecResults::Attached { mut output, input }) => {
            drop(input);
            while let Some(item) = output.next().await {
                match item {
                    Ok(LogOutput::StdOut { message }) => {
                        let room = max.saturating_sub(out.len());
                        out.extend_from_slice(&message[..message.len().min(room)]);
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
        Ok(StartExecResults::Detached) => {}
        Err(e) => return Err(inner.stream_error(e.to_string()).await),
    }
    Ok((exit_code_of(inner, &created.id).await?, out))
}

/// Lists the processes of the container (each pid after a space, on one line), leaving out the listing shell
/// itself. Only shell builtins: it works in any image with a POSIX `sh`.
pub const LIST_PIDS_SCRIPT: &str =
    "for d in /proc/[0-9]*; do p=${d#/proc/}; [ \"$p\" = \"$$\" ] || printf ' %s' \"$p\"; done";

async fn exit_code_of(inner: &RunInner, exec_id: &str) -> Result<i64, DError> {
    exit_code_polled(inner, exec_id).await.map(|(code, _)| code)
}

/// The exit code and how many times the engine still reported the exec running.
async fn exit_code_polled(inner: &RunInner, exec_id: &str) -> Result<(i64, u32), DError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    // The engine may report the exec as running for a moment after its output ended: poll with a short,
    // growing delay (1 ms doubling up to 50 ms) within the 2 s bound.
    let mut delay = Duration::from_millis(1);
    let mut polls = 0;
    loop {
        match inner.docker.inspect_exec(exec_id).await {
            Ok(i) if i.running != Some(true) => return Ok((i.exit_code.unwrap_or(-1), polls)),
            Ok(_) if tokio::time::Instant::now() < deadline => {
                polls += 1;
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(50));
            }
            Ok(_) => {
                return Err(inner
                    .stream_error("the exec still runs after its output ended".into())
                    .await);
            }
            Err(e) => return Err(inner.exec_inspect_error(e).await),
        }
    }
}

/// The exec ended with 126 or 127 and wrote no pid file: its shim did not start. A container that is
/// stopping makes every exec, the pid-file probe included, end that way too, so the container's state
/// decides: `SandboxGone` when it stopped, `ExecStart` while it runs. When the probe itself could not start
/// (126 or 127), the engine is given up to 1 s to report a stopping container.
async fn shim_not_started(inner: &RunInner, probe_code: i64) -> DError {
    let polls = if probe_code == 126 || probe_code == 127 {
        10
    } else {
        1
    };
    for n in 0..polls {
        match inner.state().await {
            Ok(Some(s)) if s.running => {
                if n + 1 < polls {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Ok(Some(s)) => {
                return DError::SandboxGone {
                    exit_code: s.exit_code,
                    oom_killed: s.oom_killed,
                };
            }
            Ok(None) => return DError::gone(),
            Err(e) => return e,
        }
    }
    DError::ExecStart {
        reason: "the exec shim could not start (is /bin/sh present?)".into(),
    }
}

#[derive(Debug)]
struct DockerKill {
    inner: Arc<RunInner>,
    pid_file: String,
    signalled: Arc<AtomicBool>,
}

#[async_trait]
impl KillExec for DockerKill {
    async fn signal(&self, signal: i32) -> iterion_driver::Result<()> {
        self.signalled.store(true, Ordering::SeqCst);
        match run_quiet(&self.inner, "0", kill_cmd(&self.pid_file, signal)).await {
            Ok(_) => Ok(()),
            // The container is gone: so is the process.
            Err(DError::SandboxGone { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// A stdin writer whose drop half-closes the connection, like `shutdown()`.
struct HalfClosing {
    w: Option<Pin<Box<dyn AsyncWrite + Send>>>,
}

impl AsyncWrite for HalfClosing {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.w.as_mut() {
            Some(w) => w.as_mut().poll_write(cx, buf),
            None => Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
        }
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.w.as_mut() {
            Some(w) => w.as_mut().poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.w.as_mut() {
            Some(w) => {
                let r = w.as_mut().poll_shutdown(cx);
                if r.is_ready() {
                    self.w = None;
                }
                r
            }
            None => Poll::Ready(Ok(())),
        }
    }
}

impl Drop for HalfClosing {
    fn drop(&mut self) {
        if let Some(mut w) = self.w.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                let _ = w.shutdown().await;
            });
        }
    }
}

async fn forward(w: &mut Option<tokio::io::DuplexStream>, bytes: &[u8]) {
    if let Some(s) = w.as_mut()
        && s.write_all(bytes).await.is_err()
    {
        // The reader was dropped: keep draining the engine, discard this stream.
        *w = None;
    }
}

/// The engine's output stream of an attached exec.
type EngineOutput = Pin<Box<dyn futures::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// The exec configuration of `req` in the run container, behind the shim writing `pid_file`.
///
/// Both outputs are always attached, and the frames of a discarded stream are dropped here (a deviation from
/// the literal 03 §8.9 "AttachStdout/AttachStderr = piped outputs", keeping its intent): with no stream
/// attached, the engine (Docker 20.10) ends the hijacked connection as soon as the process has STARTED, so
/// end-of-file would not mark the process's end, the end-of-exec inspect would find it running and poll, and
/// an exec lasting beyond the 2 s polling bound would be reported as an engine failure. Attached, end-of-file
/// comes when the process's outputs close, as for piped outputs.
fn exec_config(inner: &RunInner, req: &ExecRequest, pid_file: &str, listing: bool) -> ExecConfig {
    let env: Vec<String> = req.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    ExecConfig {
        attach_stdin: Some(req.stdin == Stdin::Piped),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        env: (!env.is_empty()).then_some(env),
        cmd: Some(if listing {
            listing_shim_cmd(pid_file, &req.argv)
        } else {
            shim_cmd(pid_file, &req.argv)
        }),
        user: req.user.clone().or_else(|| inner.user.clone()),
        working_dir: Some(req.workdir.clone().unwrap_or_else(|| inner.workspace.clone())),
        ..Default::default()
    }
}

/// When each phase of an exec ended (`RUST_LOG=iterion_driver_docker=trace` shows where its time goes).
#[derive(Debug, Clone, Copy)]
struct Phases {
    begin: Instant,
    created: Instant,
    started: Instant,
}

/// Creates and starts the exec attached; returns its engine id, its output stream and its stdin.
async fn create_and_attach(
    inner: &RunInner,
    cfg: ExecConfig,
    begin: Instant,
) -> Result<(String, EngineOutput, Pin<Box<dyn AsyncWrite + Send>>, Phases), DError> {
    let created = match inner.docker.create_exec(&inner.id, cfg).await {
        Ok(c) => c,
        Err(e) => return Err(inner.exec_create_error(e).await),
    };
    let t_created = Instant::now();
    let started = inner
        .docker
        .start_exec(
            &created.id,
            Some(StartExecOptions {
                detach: false,
                tty: false,
                output_capacity: None,
            }),
        )
        .await;
    match started {
        Ok(StartExecResults::Attached { output, input }) => {
            let phases = Phases {
                begin,
                created: t_created,
                started: Instant::now(),
            };
            Ok((created.id, output, input, phases))
        }
        Ok(StartExecResults::Detached) => Err(DError::ExecStart {
            reason: "the engine detached an attached exec".into(),
        }),
        Err(e) => Err(inner.exec_create_error(e).await),
    }
}

/// A bounded in-memory pipe for a piped output, nothing for a discarded one.
fn output_pipe(piped: bool) -> (Option<tokio::io::DuplexStream>, Option<tokio::io::DuplexStream>) {
    if piped {
        let (a, b) = tokio::io::duplex(OUTPUT_BUFFER);
        (Some(a), Some(b))
    } else {
        (None, None)
    }
}

/// Records a finished exec's pid file; every [`PID_BATCH`] files, removes them with one exec.
async fn exec_finished(inner: &Arc<RunInner>, pid_file: String) {
    let Some(batch) = inner.exec_finished(pid_file, PID_BATCH).await else {
        return;
    };
    let me = Arc::clone(inner);
    tokio::spawn(async move {
        let mut cmd = vec!["rm".to_string(), "-f".to_string()];
        cmd.extend(batch);
        let _ = run_quiet(&me, "0", cmd).await;
    });
}

/// What the supervisor task of one exec owns.
struct Supervised {
    inner: Arc<RunInner>,
    exec_id: String,
    pid_file: String,
    output: EngineOutput,
    out_w: Option<tokio::io::DuplexStream>,
    err_w: Option<tokio::io::DuplexStream>,
    signalled: Arc<AtomicBool>,
    phases: Phases,
    /// The listing line to take off stdout (the first exec after a start whose checks came from the cache).
    listing: Option<ListingLine>,
}

/// Copies the engine's frames to the output pipes until the stream ends; returns the stream's failure. With
/// `listing` (the first exec of a run whose start checks came from the cache), the listing line the shim
/// prints first is taken off stdout and recorded as the sandbox's own processes.
async fn pump(
    inner: &RunInner,
    output: &mut EngineOutput,
    out_w: &mut Option<tokio::io::DuplexStream>,
    err_w: &mut Option<tokio::io::DuplexStream>,
    mut listing: Option<ListingLine>,
) -> Option<String> {
    while let Some(item) = output.next().await {
        match item {
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                match listing.as_mut() {
                    None => forward(out_w, &message).await,
                    Some(l) => {
                        let Some((line, rest)) = l.feed(&message) else {
                            continue;
                        };
                        listing = None;
                        let recorded = line
                            .ok_or_else(|| {
                                "the first exec's output did not start with the listing".to_string()
                            })
                            .and_then(|line| inner.record_infrastructure(&line).map_err(|e| e.to_string()));
                        if let Err(e) = recorded {
                            tracing::warn!(container = %inner.id, "sandbox processes not recorded: {e}");
                        }
                        forward(out_w, &rest).await
                    }
                }
            }
            Ok(LogOutput::StdErr { message }) => forward(err_w, &message).await,
            Ok(LogOutput::StdIn { .. }) => {}
            Err(e) => return Some(e.to_string()),
        }
    }
    None
}

/// The supervisor of one exec: pumps its output, then decides how it ended.
async fn supervise(mut s: Supervised) -> Result<ExitStatus, DError> {
    let listing = s.listing.take();
    let pumped = pump(&s.inner, &mut s.output, &mut s.out_w, &mut s.err_w, listing);
    let failure = if s.inner.watch_gone {
        tokio::select! {
            f = pumped => f,
            () = s.inner.until_gone() => Some("the container stopped under the exec".to_string()),
        }
    } else {
        pumped.await
    };
    // End-of-file to the readers first, so `wait` (which also waits for them) can finish.
    drop(s.out_w.take());
    drop(s.err_w.take());
    let t_eof = Instant::now();
    let ended = match failure {
        Some(msg) => Err(s.inner.stream_error(msg).await),
        None => exit_code_polled(&s.inner, &s.exec_id).await,
    };
    let micros = |a: Instant, b: Instant| (b - a).as_micros() as u64;
    let p = s.phases;
    tracing::trace!(
        exec = %s.exec_id,
        create_us = micros(p.begin, p.created),
        start_us = micros(p.created, p.started),
        stream_us = micros(p.started, t_eof),
        end_us = micros(t_eof, Instant::now()),
        end_polls = ended.as_ref().map_or(0, |(_, polls)| *polls),
        "exec phases"
    );
    let result = match ended.map(|(code, _)| code) {
        Ok(code) if code == 126 || code == 127 => shim_verdict(&s.inner, &s.pid_file, code).await,
        Ok(code) if code >= 128 => signal_verdict(&s.inner, code, s.signalled.load(Ordering::SeqCst)).await,
        Ok(code) => Ok(ExitStatus::code(i32::try_from(code).unwrap_or(-1))),
        Err(e) => Err(e),
    };
    exec_finished(&s.inner, s.pid_file).await;
    result
}

/// An exit code of 126 or 127: the command's own, when the shim wrote its pid file; else the shim did not
/// start ([`shim_not_started`]).
async fn shim_verdict(inner: &RunInner, pid_file: &str, code: i64) -> Result<ExitStatus, DError> {
    let probe = vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        "test -e \"$1\"".to_string(),
        "iterion-probe".to_string(),
        pid_file.to_string(),
    ];
    match run_quiet(inner, "0", probe).await {
        Ok(0) => Ok(ExitStatus::code(code as i32)),
        Ok(probe_code) => Err(shim_not_started(inner, probe_code).await),
        Err(e) => Err(e),
    }
}

/// A signal death: the container itself may have been stopped or removed under the exec. A SIGKILL iterion
/// did not send is what a container removal looks like: the engine is given a moment to report the
/// container's state.
async fn signal_verdict(inner: &RunInner, code: i64, signalled: bool) -> Result<ExitStatus, DError> {
    let polls = if code == 137 && !signalled { 10 } else { 1 };
    for n in 0..polls {
        match inner.state().await {
            Ok(Some(s)) if s.running => {
                if n + 1 < polls {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Ok(Some(s)) => {
                return Err(DError::SandboxGone {
                    exit_code: s.exit_code,
                    oom_killed: s.oom_killed,
                });
            }
            Ok(None) => return Err(DError::gone()),
            Err(e) => return Err(e),
        }
    }
    Ok(ExitStatus::code(i32::try_from(code).unwrap_or(-1)))
}

/// Starts `req` in the run container: create and attach the exec, hand its output to a supervisor task that
/// decides how it ended, and return the handle.
pub(crate) async fn exec(inner: Arc<RunInner>, req: ExecRequest) -> Result<Exec, DError> {
    req.validate()?;
    inner.check_open()?;
    let id = ExecId::random();
    let pid_file = format!("{PID_DIR}/{id}.pid");
    let listing = inner.take_listing();
    let cfg = exec_config(&inner, &req, &pid_file, listing);
    let (exec_id, output, input, phases) = match create_and_attach(&inner, cfg, Instant::now()).await {
        Ok(r) => r,
        Err(e) => {
            if listing {
                inner.untake_listing();
            }
            return Err(e);
        }
    };
    let (out_w, out_r) = output_pipe(req.stdout == Output::Piped);
    let (err_w, err_r) = output_pipe(req.stderr == Output::Piped);
    let stdin: Option<Pin<Box<dyn AsyncWrite + Send>>> = if req.stdin == Stdin::Piped {
        Some(Box::pin(HalfClosing { w: Some(input) }))
    } else {
        drop(input);
        None
    };
    inner.exec_started();
    let (tx, rx) = tokio::sync::oneshot::channel::<Result<ExitStatus, DError>>();
    let signalled = Arc::new(AtomicBool::new(false));
    let supervised = Supervised {
        inner: Arc::clone(&inner),
        exec_id,
        pid_file: pid_file.clone(),
        output,
        out_w,
        err_w,
        signalled: Arc::clone(&signalled),
        phases,
        listing: listing.then(ListingLine::default),
    };
    tokio::spawn(async move {
        let _ = tx.send(supervise(supervised).await);
    });
    let wait = Box::pin(async move {
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(DError::Engine {
                status: None,
                message: "the exec supervisor stopped".into(),
            }),
        }
    });
    let killer: Arc<dyn KillExec> = Arc::new(DockerKill {
        inner: Arc::clone(&inner),
        pid_file,
        signalled,
    });
    Ok(Exec::new(ExecParts {
        id,
        stdin,
        stdout: out_r.map(|r| Box::pin(r) as Pin<Box<dyn tokio::io::AsyncRead + Send>>),
        stderr: err_r.map(|r| Box::pin(r) as Pin<Box<dyn tokio::io::AsyncRead + Send>>),
        wait,
        killer,
        cancel: req.cancel.clone(),
        kill_grace: req.kill_grace,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shim_and_kill_commands() {
        let c = shim_cmd("/run/iterion/exec/ab.pid", &["echo".into(), "hi there".into()]);
        assert_eq!(c[..2], ["/bin/sh", "-c"]);
        assert_eq!(
            c[3..],
            ["iterion-exec", "/run/iterion/exec/ab.pid", "echo", "hi there"]
        );
        let k = kill_cmd("/run/iterion/exec/ab.pid", 15);
        assert_eq!(k[3..], ["iterion-kill", "/run/iterion/exec/ab.pid", "TERM"]);
        assert_eq!(kill_cmd("/p", 9)[5], "KILL");
        assert_eq!(kill_cmd("/p", 10)[5], "10");
        let l = listing_shim_cmd("/run/iterion/exec/ab.pid", &["echo".into(), "hi there".into()]);
        assert_eq!(l[..2], ["/bin/sh", "-c"]);
        assert!(
            l[2].starts_with("printf 'iterion-pids:'") && l[2].ends_with(&c[2]),
            "{}",
            l[2]
        );
        assert_eq!(l[3..], c[3..]);
    }

    #[test]
    fn the_listing_line_is_taken_off_the_output_in_any_split() {
        let stream = b"iterion-pids: 1 7\nhello\nworld";
        for cut in 1..stream.len() {
            let mut l = ListingLine::default();
            let got = l.feed(&stream[..cut]).or_else(|| l.feed(&stream[cut..]));
            let (line, mut rest) = got.expect("complete");
            assert_eq!(line.as_deref(), Some(" 1 7"), "cut at {cut}");
            if cut >= 18 {
                // The part of the first frame past the line came with it; the caller forwards the rest.
                rest.extend_from_slice(&stream[cut..]);
            }
            assert_eq!(rest, b"hello\nworld", "cut at {cut}");
        }
        // Output that does not start with the listing is the command's, from the first byte on.
        let mut l = ListingLine::default();
        assert_eq!(l.feed(b"iter"), None);
        assert_eq!(l.feed(b"ation"), Some((None, b"iteration".to_vec())));
        // A line that never ends is given up (and forwarded) past its bound.
        let mut l = ListingLine::default();
        let long = [LISTING_MAGIC.as_bytes(), &[b'1'; MAX_LISTING_LINE]].concat();
        assert_eq!(l.feed(&long), Some((None, long.clone())));
    }
}
