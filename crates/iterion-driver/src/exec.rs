//! The exec API (03 §3.4, §3.5): requests, the `Exec` handle with its streams, the kill sequence and
//! `exec_collect`.
//!
//! A driver implements [`KillExec`] (send one signal to the process) and hands [`Exec::new`] its raw streams
//! and a future that resolves with the raw exit code. `Exec` adds, for every driver alike: cancellation, the
//! kill sequence (SIGTERM, grace, SIGKILL), kill-on-drop, the `signal` / `cancelled` fields of the status, and
//! waiting for both output streams.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// SIGTERM's number (as engines report it: code `128 + 15`).
pub const SIGTERM: i32 = 15;
/// SIGKILL's number.
pub const SIGKILL: i32 = 9;
/// Default delay between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);
/// Kills what steps left behind in a sandbox (`Run::kill_leftovers`): SIGKILLs every process whose pid is not
/// an argument of the script (and not the shell itself), in passes until a pass finds none (at most 10, so
/// processes forked during a pass are caught by the next); zombies are skipped. Prints how many signals were
/// sent. Only shell builtins: it works in any image with a POSIX `sh`. Run it as
/// `["/bin/sh", "-c", KILL_LEFTOVERS_SCRIPT, "<name>", <pid to spare>...]`.
pub const KILL_LEFTOVERS_SCRIPT: &str = r#"keep=" $* "; n=0; i=0
while [ "$i" -lt 10 ]; do
  i=$((i+1)); found=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$keep" in *" $p "*) continue ;; esac
    [ "$p" = "$$" ] && continue
    s=
    read -r s 2>/dev/null < "$d/stat" || continue
    case "${s##*) }" in Z*|X*) continue ;; esac
    kill -9 "$p" 2>/dev/null && found=$((found+1))
  done
  [ "$found" -eq 0 ] && break
  n=$((n+found))
done
echo "$n""#;

/// How long the kill sequence waits after SIGKILL before reporting `ExecKillFailed`.
pub const KILL_CONFIRM: Duration = Duration::from_secs(5);
/// Default capture limit of [`exec_collect`], per stream.
pub const DEFAULT_CAPTURE: usize = 16 * 1024 * 1024;

/// Stdin of an exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stdin {
    /// The process reads end-of-file immediately.
    #[default]
    Closed,
    /// A pipe: `Exec::stdin` is present.
    Piped,
}

/// stdout / stderr of an exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Output {
    /// A pipe: `Exec::stdout` / `Exec::stderr` is present.
    #[default]
    Piped,
    /// Thrown away.
    Discard,
}

/// One process to start in a sandbox.
#[derive(Clone)]
#[non_exhaustive]
pub struct ExecRequest {
    /// Non-empty; `argv[0]` is looked up in the sandbox `PATH`.
    pub argv: Vec<String>,
    /// Exec scope (02 §5.2), over the container scope for this process only.
    pub env: Vec<(String, String)>,
    /// Absolute working directory; default the workspace.
    pub workdir: Option<String>,
    /// User; default the sandbox user.
    pub user: Option<String>,
    /// stdin mode.
    pub stdin: Stdin,
    /// stdout mode.
    pub stdout: Output,
    /// stderr mode.
    pub stderr: Output,
    /// Cancellation starts the kill sequence.
    pub cancel: CancellationToken,
    /// Delay between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// Node id, for logs only.
    pub label: Option<String>,
}

impl ExecRequest {
    /// A request with defaults: no env, workspace, sandbox user, stdin closed, outputs piped, 5 s grace.
    pub fn new<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Self {
        ExecRequest {
            argv: argv.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            workdir: None,
            user: None,
            stdin: Stdin::Closed,
            stdout: Output::Piped,
            stderr: Output::Piped,
            cancel: CancellationToken::new(),
            kill_grace: DEFAULT_KILL_GRACE,
            label: None,
        }
    }

    /// `["/bin/sh", "-c", script]`.
    pub fn shell(script: impl Into<String>) -> Self {
        ExecRequest::new(["/bin/sh".to_string(), "-c".to_string(), script.into()])
    }

    /// Adds one exec-scope entry.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Sets the working directory.
    pub fn workdir(mut self, dir: impl Into<String>) -> Self {
        self.workdir = Some(dir.into());
        self
    }

    /// Sets the user.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Sets the stdin mode.
    pub fn stdin(mut self, stdin: Stdin) -> Self {
        self.stdin = stdin;
        self
    }

    /// Sets both output modes.
    pub fn outputs(mut self, stdout: Output, stderr: Output) -> Self {
        self.stdout = stdout;
        self.stderr = stderr;
        self
    }

    /// Sets the cancellation token.
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Sets the kill grace.
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// Sets the log label.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Checks the request: non-empty argv without NUL, valid exec-scope env (02 §2), a valid user (03 §11.1),
    /// an absolute workdir.
    pub fn validate(&self) -> Result<()> {
        let invalid = |field: &str, reason: &str| Error::InvalidSpec {
            field: field.to_string(),
            reason: reason.to_string(),
        };
        if self.argv.is_empty() || self.argv[0].is_empty() {
            return Err(invalid("argv", "the command is empty"));
        }
        if self.argv.iter().any(|a| a.contains('\0')) {
            return Err(invalid("argv", "an argument contains a NUL byte"));
        }
        for (n, v) in &self.env {
            iterion_envdeny::validate_entry(iterion_envdeny::Layer::Exec, n, v).map_err(|e| {
                Error::InvalidSpec {
                    field: format!("env.{}", iterion_envdeny::escape_name(n.as_bytes())),
                    reason: e.to_string(),
                }
            })?;
        }
        if let Some(u) = &self.user {
            crate::spec_safety::check_user(u).map_err(|r| invalid("user", &r))?;
        }
        if let Some(w) = &self.workdir
            && (!w.starts_with('/') || w.contains('\0'))
        {
            return Err(invalid(
                "workdir",
                "the working directory must be an absolute path",
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<&str> = self.env.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("ExecRequest")
            .field("argv", &self.argv)
            .field("env_names", &env)
            .field("workdir", &self.workdir)
            .field("user", &self.user)
            .field("stdin", &self.stdin)
            .field("stdout", &self.stdout)
            .field("stderr", &self.stderr)
            .field("kill_grace", &self.kill_grace)
            .field("label", &self.label)
            .finish()
    }
}

/// How a process ended (03 §3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct ExitStatus {
    /// 0..=255 as reported by the engine; a signal death n is `128 + n`.
    pub code: i32,
    /// `Some(n)` only when iterion sent signal n and `code == 128 + n`.
    pub signal: Option<i32>,
    /// Cancellation was requested before the process ended.
    pub cancelled: bool,
}

impl ExitStatus {
    /// A plain exit code (what a driver's wait future returns).
    pub fn code(code: i32) -> Self {
        ExitStatus {
            code,
            signal: None,
            cancelled: false,
        }
    }

    /// Whether the code is 0.
    pub fn success(&self) -> bool {
        self.code == 0
    }
}

/// An exec id: 16 lower-case hex characters, random.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecId(String);

impl ExecId {
    /// A fresh random id.
    pub fn random() -> Self {
        ExecId(format!("{:016x}", rand::random::<u64>()))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ExecId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Sends one signal to an exec's process (and its group, where the driver can). Implemented by drivers.
#[async_trait]
pub trait KillExec: Send + Sync + fmt::Debug {
    /// Sends `signal` (a POSIX number: 15 TERM, 9 KILL). A process that already ended is not an error.
    async fn signal(&self, signal: i32) -> Result<()>;
}

#[derive(Debug)]
struct ExecState {
    sent: Mutex<Vec<i32>>,
    cancelled: AtomicBool,
    exited: watch::Sender<bool>,
}

/// Cloneable handle that signals or terminates one exec.
#[derive(Clone)]
pub struct ExecKiller {
    id: ExecId,
    inner: Arc<dyn KillExec>,
    state: Arc<ExecState>,
    failures: mpsc::UnboundedSender<Error>,
}

impl fmt::Debug for ExecKiller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecKiller")
            .field("id", &self.id)
            .field("exited", &self.has_exited())
            .finish()
    }
}

impl ExecKiller {
    /// Whether the process has ended.
    pub fn has_exited(&self) -> bool {
        *self.state.exited.borrow()
    }

    async fn wait_exit(&self, within: Duration) -> bool {
        let mut rx = self.state.exited.subscribe();
        tokio::time::timeout(within, rx.wait_for(|e| *e)).await.is_ok()
    }

    /// Sends one signal (recorded, so a matching exit code reports it in `ExitStatus::signal`).
    pub async fn signal(&self, signal: i32) -> Result<()> {
        if self.has_exited() {
            return Ok(());
        }
        self.state
            .sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(signal);
        self.inner.signal(signal).await
    }

    /// The kill sequence: SIGTERM, wait `grace`, SIGKILL, wait 5 s; still running → `ExecKillFailed`.
    pub async fn terminate(&self, grace: Duration) -> Result<()> {
        if self.has_exited() {
            return Ok(());
        }
        self.signal(SIGTERM).await?;
        if self.wait_exit(grace).await {
            return Ok(());
        }
        self.signal(SIGKILL).await?;
        if self.wait_exit(KILL_CONFIRM).await {
            return Ok(());
        }
        let e = Error::ExecKillFailed {
            exec_id: self.id.to_string(),
        };
        let _ = self.failures.send(e.clone());
        Err(e)
    }

    fn terminate_in_background(&self, grace: Duration) {
        if self.has_exited() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let k = self.clone();
            rt.spawn(async move {
                let _ = k.terminate(grace).await;
            });
        }
    }
}

/// The writable stdin of an exec. `shutdown()` (or dropping it) delivers end-of-file to the process.
pub struct ExecStdin(Pin<Box<dyn AsyncWrite + Send>>);

impl fmt::Debug for ExecStdin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ExecStdin")
    }
}

impl AsyncWrite for ExecStdin {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.0.as_mut().poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.as_mut().poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.as_mut().poll_shutdown(cx)
    }
}

/// A readable output stream of an exec. Signals its end (end-of-file or drop) to `Exec::wait`.
///
/// A driver may fail a read with `io::Error::other(iterion_driver::Error)`; [`exec_collect`] and
/// [`Error::from_io`] recover the typed error.
pub struct ExecOutput {
    inner: Pin<Box<dyn AsyncRead + Send>>,
    done: Option<oneshot::Sender<()>>,
}

impl fmt::Debug for ExecOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecOutput")
            .field("ended", &self.done.is_none())
            .finish()
    }
}

impl AsyncRead for ExecOutput {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let room = buf.remaining();
        let r = self.inner.as_mut().poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &r
            && room > 0
            && buf.filled().len() == before
            && let Some(tx) = self.done.take()
        {
            let _ = tx.send(());
        }
        r
    }
}

/// What a driver hands to [`Exec::new`].
pub struct ExecParts {
    /// The exec id.
    pub id: ExecId,
    /// Raw stdin writer when `Stdin::Piped`.
    pub stdin: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    /// Raw stdout reader when `Output::Piped`.
    pub stdout: Option<Pin<Box<dyn AsyncRead + Send>>>,
    /// Raw stderr reader when `Output::Piped`.
    pub stderr: Option<Pin<Box<dyn AsyncRead + Send>>>,
    /// Resolves when the process has ended, with its raw code (`ExitStatus::code(n)`), or a driver error
    /// (`SandboxGone`, `Engine`, `ExecStart`).
    pub wait: BoxFuture<'static, Result<ExitStatus>>,
    /// Sends signals to the process.
    pub killer: Arc<dyn KillExec>,
    /// The request's cancellation token.
    pub cancel: CancellationToken,
    /// The request's kill grace.
    pub kill_grace: Duration,
}

impl fmt::Debug for ExecParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecParts")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// A process started in a sandbox.
///
/// Dropping an `Exec` whose process still runs starts the kill sequence in the background.
pub struct Exec {
    id: ExecId,
    /// stdin, present when `Stdin::Piped`.
    pub stdin: Option<ExecStdin>,
    /// stdout, present when `Output::Piped`.
    pub stdout: Option<ExecOutput>,
    /// stderr, present when `Output::Piped`.
    pub stderr: Option<ExecOutput>,
    task: Option<JoinHandle<Result<ExitStatus>>>,
    killer: ExecKiller,
    grace: Duration,
    outputs_done: Vec<oneshot::Receiver<()>>,
}

impl fmt::Debug for Exec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exec")
            .field("id", &self.id)
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .finish()
    }
}

impl Exec {
    /// Wraps a driver's process. Must be called inside a tokio runtime: a supervising task watches the
    /// process and the cancellation token from now on.
    pub fn new(parts: ExecParts) -> Self {
        let (exited, _) = watch::channel(false);
        let state = Arc::new(ExecState {
            sent: Mutex::new(Vec::new()),
            cancelled: AtomicBool::new(false),
            exited,
        });
        let (fail_tx, mut fail_rx) = mpsc::unbounded_channel();
        let killer = ExecKiller {
            id: parts.id.clone(),
            inner: parts.killer,
            state: state.clone(),
            failures: fail_tx,
        };
        let mut outputs_done = Vec::new();
        let mut wrap = |r: Option<Pin<Box<dyn AsyncRead + Send>>>| {
            r.map(|inner| {
                let (tx, rx) = oneshot::channel();
                outputs_done.push(rx);
                ExecOutput {
                    inner,
                    done: Some(tx),
                }
            })
        };
        let stdout = wrap(parts.stdout);
        let stderr = wrap(parts.stderr);
        let cancel = parts.cancel;
        let grace = parts.kill_grace;
        let k = killer.clone();
        let mut wait = parts.wait;
        let task = tokio::spawn(async move {
            let mut cancel_seen = false;
            let r = loop {
                tokio::select! {
                    r = &mut wait => break r,
                    Some(e) = fail_rx.recv() => break Err(e),
                    _ = cancel.cancelled(), if !cancel_seen => {
                        cancel_seen = true;
                        k.state.cancelled.store(true, Ordering::SeqCst);
                        let k2 = k.clone();
                        tokio::spawn(async move {
                            let _ = k2.terminate(grace).await;
                        });
                    }
                }
            };
            k.state.exited.send_replace(true);
            r
        });
        Exec {
            id: parts.id,
            stdin: parts.stdin.map(ExecStdin),
            stdout,
            stderr,
            task: Some(task),
            killer,
            grace,
            outputs_done,
        }
    }

    /// The exec id.
    pub fn id(&self) -> &ExecId {
        &self.id
    }

    /// A cloneable killer.
    pub fn killer(&self) -> ExecKiller {
        self.killer.clone()
    }

    /// Resolves when the process has ended and both output streams reached end-of-file or were dropped.
    /// Streams still held by this `Exec` are dropped first.
    pub async fn wait(mut self) -> Result<ExitStatus> {
        self.stdin = None;
        self.stdout = None;
        self.stderr = None;
        let Some(task) = self.task.take() else {
            return Err(Error::ExecStart {
                reason: "wait called twice".into(),
            });
        };
        let raw = match task.await {
            Ok(r) => r?,
            Err(e) => {
                return Err(Error::Engine {
                    status: None,
                    message: format!("exec supervisor failed: {e}"),
                });
            }
        };
        for rx in std::mem::take(&mut self.outputs_done) {
            let _ = rx.await;
        }
        let sent = self
            .killer
            .state
            .sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Ok(ExitStatus {
            code: raw.code,
            signal: sent.iter().rev().copied().find(|n| raw.code == 128 + n),
            cancelled: self.killer.state.cancelled.load(Ordering::SeqCst),
        })
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        if self.task.is_some() {
            self.killer.terminate_in_background(self.grace);
        }
    }
}

impl Error {
    /// Recovers a driver error carried in an `io::Error` (`io::Error::other(Error)`), or describes the I/O
    /// failure as an engine error.
    pub fn from_io(e: io::Error) -> Error {
        if e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
            if let Some(inner) = e.into_inner()
                && let Ok(err) = inner.downcast::<Error>()
            {
                return *err;
            }
            return Error::Engine {
                status: None,
                message: "stream failed".into(),
            };
        }
        Error::Engine {
            status: None,
            message: format!("stream failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use tokio::io::AsyncReadExt;

    /// A fake process: ends with `128 + n` when it receives a signal it does not ignore.
    #[derive(Debug)]
    struct Fake {
        ignore: Vec<i32>,
        end: Mutex<Option<oneshot::Sender<i32>>>,
        got: Arc<Mutex<Vec<i32>>>,
    }

    #[async_trait]
    impl KillExec for Fake {
        async fn signal(&self, signal: i32) -> Result<()> {
            self.got.lock().unwrap().push(signal);
            if !self.ignore.contains(&signal)
                && let Some(tx) = self.end.lock().unwrap().take()
            {
                let _ = tx.send(128 + signal);
            }
            Ok(())
        }
    }

    struct Proc {
        exec: Exec,
        end: Arc<Fake>,
        cancel: CancellationToken,
    }

    fn spawn(ignore: &[i32], stdout: Option<Pin<Box<dyn AsyncRead + Send>>>) -> Proc {
        let (tx, rx) = oneshot::channel::<i32>();
        let fake = Arc::new(Fake {
            ignore: ignore.to_vec(),
            end: Mutex::new(Some(tx)),
            got: Arc::default(),
        });
        let cancel = CancellationToken::new();
        let exec = Exec::new(ExecParts {
            id: ExecId::random(),
            stdin: None,
            stdout,
            stderr: None,
            wait: async move { rx.await.map(ExitStatus::code).map_err(|_| Error::gone()) }.boxed(),
            killer: fake.clone(),
            cancel: cancel.clone(),
            kill_grace: Duration::from_millis(50),
        });
        Proc {
            exec,
            end: fake,
            cancel,
        }
    }

    fn exit(p: &Proc, code: i32) {
        if let Some(tx) = p.end.end.lock().unwrap().take() {
            let _ = tx.send(code);
        }
    }

    async fn check(ignore: &[i32], cancel: bool, code: Option<i32>, expect: Result<ExitStatus>) {
        let p = spawn(ignore, None);
        if let Some(c) = code {
            exit(&p, c);
        }
        if cancel {
            p.cancel.cancel();
        }
        assert_eq!(
            p.exec.wait().await,
            expect,
            "ignore {ignore:?} cancel {cancel} code {code:?}"
        );
    }

    fn st(code: i32, signal: Option<i32>, cancelled: bool) -> Result<ExitStatus> {
        Ok(ExitStatus {
            code,
            signal,
            cancelled,
        })
    }

    #[tokio::test]
    async fn vectors_16_5() {
        check(&[], false, Some(0), st(0, None, false)).await;
        check(&[], false, Some(17), st(17, None, false)).await;
        check(&[], false, Some(127), st(127, None, false)).await;
        check(&[], true, None, st(143, Some(15), true)).await;
        check(&[SIGTERM], true, None, st(137, Some(9), true)).await;
        check(&[], false, Some(143), st(143, None, false)).await;
    }

    #[tokio::test]
    async fn driver_errors_pass_through() {
        let p = spawn(&[], None);
        p.end.end.lock().unwrap().take();
        assert_eq!(p.exec.wait().await, Err(Error::gone()));
    }

    #[tokio::test]
    async fn an_unkillable_process_is_exec_kill_failed() {
        let p = spawn(&[SIGTERM, SIGKILL], None);
        let id = p.exec.id().to_string();
        p.cancel.cancel();
        assert_eq!(p.exec.wait().await, Err(Error::ExecKillFailed { exec_id: id }));
        assert_eq!(*p.end.got.lock().unwrap(), vec![SIGTERM, SIGKILL]);
    }

    #[tokio::test]
    async fn dropping_a_running_exec_starts_the_kill_sequence() {
        let p = spawn(&[], None);
        let got = p.end.got.clone();
        drop(p.exec);
        for _ in 0..200 {
            if !got.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(*got.lock().unwrap(), vec![SIGTERM]);
    }

    #[tokio::test]
    async fn wait_also_waits_for_a_taken_output_stream() {
        let (mut w, r) = tokio::io::duplex(64);
        let mut p = spawn(&[], Some(Box::pin(r)));
        let mut out = p.exec.stdout.take().unwrap();
        exit(&p, 0);
        let waiting = tokio::spawn(p.exec.wait());
        tokio::io::AsyncWriteExt::write_all(&mut w, b"tail")
            .await
            .unwrap();
        drop(w);
        let mut buf = Vec::new();
        out.read_to_end(&mut buf).await.unwrap();
        assert_eq!(buf, b"tail");
        assert_eq!(waiting.await.unwrap(), st(0, None, false));
    }

    #[test]
    fn exec_ids_are_16_lower_hex() {
        let id = ExecId::random();
        assert_eq!(id.as_str().len(), 16);
        assert!(
            id.as_str()
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
    }

    #[test]
    fn request_debug_never_shows_env_values() {
        let r = ExecRequest::new(["x"]).env("ANTHROPIC_API_KEY", "sk-secret-value");
        let d = format!("{r:?}");
        assert!(
            d.contains("ANTHROPIC_API_KEY") && !d.contains("sk-secret-value"),
            "{d}"
        );
    }
}
