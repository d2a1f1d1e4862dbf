//! A started sibling pod (07 §9, §11): execs through the two-step script over WebSocket exec, status, and the
//! shared, idempotent cleanup that deletes the pod before its NetworkPolicy.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use iterion_driver::{
    CleanupReport, CopyDirection, DriverKind, Error, Result, Run, SandboxStatus, TarSource, TarStream,
};
use iterion_driver::{Exec, ExecId, ExecParts, ExecRequest, ExitStatus, KillExec, Output, Stdin};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::cluster::ClusterAccess;
use crate::kapi::Kapi;
use crate::script;
use crate::status::ExecStatus;
use crate::wsexec::{self, Attach, SessionError, TOO_OLD};

/// Bound of the first exec, the one that writes the script.
const PUT_BOUND: Duration = Duration::from_secs(30);
/// Bound of a kill exec and of the pid-file check.
const SMALL_EXEC_BOUND: Duration = Duration::from_secs(10);

/// What every clone of a run shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub api: Kapi,
    pub access: ClusterAccess,
    pub name: String,
    pub policy: bool,
    gone: AtomicBool,
    cleanup: tokio::sync::OnceCell<CleanupReport>,
}

/// The sandbox handle of one pod.
#[derive(Debug)]
pub struct K8sRun {
    shared: Arc<Shared>,
    workspace: String,
    user: Option<String>,
}

impl K8sRun {
    pub(crate) fn new(
        api: Kapi,
        access: ClusterAccess,
        name: String,
        policy: bool,
        workspace: String,
        user: Option<String>,
    ) -> K8sRun {
        K8sRun {
            shared: Arc::new(Shared {
                api,
                access,
                name,
                policy,
                gone: AtomicBool::new(false),
                cleanup: tokio::sync::OnceCell::new(),
            }),
            workspace,
            user,
        }
    }
}

impl Shared {
    /// Why an exec failed without an exit code: the pod gone or not running → `SandboxGone`, otherwise
    /// `other` (07 §9).
    async fn inspect(&self, other: Error) -> Error {
        match self.api.get_pod(&self.name).await {
            Ok(None) => Error::gone(),
            Ok(Some(pod)) => {
                let deleting = !pod["metadata"]["deletionTimestamp"].is_null();
                let phase = pod["status"]["phase"].as_str().unwrap_or_default();
                if deleting || (phase != "Running" && !phase.is_empty()) {
                    Error::gone()
                } else {
                    other
                }
            }
            Err(_) => other,
        }
    }

    async fn session_error(&self, e: SessionError) -> Error {
        match e {
            SessionError::TooOld => Error::Unavailable {
                driver: DriverKind::Kubernetes.as_str().into(),
                reason: TOO_OLD.into(),
            },
            SessionError::Api { code: 404, .. } => Error::gone(),
            SessionError::Api { code, message } => {
                self.inspect(Error::Engine {
                    status: Some(code),
                    message: format!("exec: {message}"),
                })
                .await
            }
            SessionError::Transport(m) => {
                self.inspect(Error::Engine {
                    status: None,
                    message: format!("exec: {m}"),
                })
                .await
            }
        }
    }

    /// The exit code of a finished session, or the driver error.
    async fn verdict(&self, s: std::result::Result<ExecStatus, SessionError>) -> Result<i32> {
        match s {
            Ok(ExecStatus::Exited(code)) => Ok(code),
            Ok(ExecStatus::Failure { reason, message }) => Err(self
                .inspect(Error::ExecStart {
                    reason: if message.is_empty() { reason } else { message },
                })
                .await),
            Err(e) => Err(self.session_error(e).await),
        }
    }

    /// Runs a short driver-side command, bounded.
    async fn small(&self, argv: &[String], input: Option<&[u8]>, bound: Duration) -> Result<(i32, Vec<u8>)> {
        self.small_out(argv, input, bound)
            .await
            .map(|(code, _, stderr)| (code, stderr))
    }

    /// [`Shared::small`] with its stdout: exit code, stdout, stderr.
    async fn small_out(
        &self,
        argv: &[String],
        input: Option<&[u8]>,
        bound: Duration,
    ) -> Result<(i32, Vec<u8>, Vec<u8>)> {
        let r = tokio::time::timeout(
            bound,
            wsexec::run_collect(&self.api.client, &self.api.namespace, &self.name, argv, input),
        )
        .await
        .map_err(|_| Error::ExecStart {
            reason: format!(
                "{} did not finish within {}",
                argv.first().map(String::as_str).unwrap_or("exec"),
                iterion_driver::fmt_duration(bound)
            ),
        })?;
        match r {
            Ok((status, stdout, stderr)) => Ok((self.verdict(Ok(status)).await?, stdout, stderr)),
            Err(e) => Err(self.session_error(e).await),
        }
    }

    async fn teardown(self: Arc<Self>) -> CleanupReport {
        let (removed, errors) = self.api.teardown(&self.name, self.policy).await;
        let mut report = CleanupReport::new(self.name.clone(), removed);
        report.errors = errors;
        report
    }
}

/// Finds the pid `kill_leftovers` spares besides PID 1 (the pod's pause process, or the container's init): the
/// earliest-started other process, the container's own `sleep infinity`, which no exec can predate; then hands
/// PID 1 and it to [`iterion_driver::KILL_LEFTOVERS_SCRIPT`] as the pids to keep. Shell builtins only.
const FIND_MAIN: &str = r#"main=; main_t=
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = 1 ] || [ "$p" = "$$" ] && continue
  s=; read -r s 2>/dev/null < "$d/stat" || continue
  set -- ${s##*) }
  t=${20}
  if [ -z "$main" ] || [ "$t" -lt "$main_t" ]; then main=$p; main_t=$t; fi
done
set -- 1 $main
"#;

/// Sends a signal to the exec's recorded process group, then to its pid (03 §8.9).
#[derive(Debug)]
struct Killer {
    shared: Arc<Shared>,
    id: String,
}

#[async_trait]
impl KillExec for Killer {
    async fn signal(&self, signal: i32) -> Result<()> {
        let argv: Vec<String> = vec![
            "/bin/sh".into(),
            "-c".into(),
            "p=$(cat \"$1\" 2>/dev/null) || exit 0; kill -s \"$2\" -- \"-$p\" 2>/dev/null; kill -s \"$2\" \"$p\" 2>/dev/null; exit 0".into(),
            "iterion-kill".into(),
            script::pid_path(&self.id),
            signal_name(signal).into(),
        ];
        self.shared.small(&argv, None, SMALL_EXEC_BOUND).await.map(|_| ())
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        9 => "KILL",
        2 => "INT",
        1 => "HUP",
        _ => "TERM",
    }
}

type Reader = Pin<Box<dyn AsyncRead + Send>>;
type Writer = Pin<Box<dyn AsyncWrite + Send>>;

#[async_trait]
impl Run for K8sRun {
    fn id(&self) -> &str {
        &self.shared.name
    }

    fn kind(&self) -> DriverKind {
        DriverKind::Kubernetes
    }

    fn workspace(&self) -> &str {
        &self.workspace
    }

    fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    async fn exec(&self, req: ExecRequest) -> Result<Exec> {
        if self.shared.gone.load(Ordering::SeqCst) {
            return Err(Error::gone());
        }
        req.validate()?;
        if let Some(u) = &req.user
            && Some(u.as_str()) != self.user.as_deref()
        {
            return Err(Error::Unsupported {
                driver: DriverKind::Kubernetes,
                feature: format!("exec as user {u} (a pod runs every exec as its own user)"),
            });
        }
        let id = ExecId::random();
        let workdir = req.workdir.clone().unwrap_or_else(|| self.workspace.clone());
        let text =
            script::script(id.as_str(), &workdir, &req.env, &req.argv).map_err(|r| Error::InvalidSpec {
                field: "exec".into(),
                reason: r.message,
            })?;
        let shared = self.shared.clone();
        // Step 1: the script, over stdin, so that no value reaches the request URL; written again (twice at
        // most) when it did not arrive whole.
        let put = script::put_argv(id.as_str(), text.len());
        let mut attempt = 0;
        let (code, stderr) = loop {
            attempt += 1;
            let (code, stderr) = shared.small(&put, Some(text.as_bytes()), PUT_BOUND).await?;
            if code != script::PUT_INCOMPLETE || attempt == 3 {
                break (code, stderr);
            }
        };
        if code == script::PUT_INCOMPLETE {
            return Err(Error::ExecStart {
                reason: format!(
                    "the exec script did not reach the pod whole in {attempt} attempts (the kubelet ended its stdin early)"
                ),
            });
        }
        if code != 0 {
            return Err(Error::ExecStart {
                reason: format!("writing the exec script exited {code}: {}", tail(&stderr)),
            });
        }
        // Step 2: run it. The exec API needs at least one stream: a caller that wants none still gets stdout
        // attached, and its end is dropped below, so the bytes are discarded.
        let attach = Attach {
            stdin: req.stdin == Stdin::Piped,
            stdout: req.stdout == Output::Piped || (req.stdin != Stdin::Piped && req.stderr != Output::Piped),
            stderr: req.stderr == Output::Piped,
        };
        let session = match wsexec::open(
            &shared.api.client,
            &shared.api.namespace,
            &shared.name,
            &script::run_argv(id.as_str()),
            attach,
        )
        .await
        {
            Ok(s) => s,
            Err(e) => return Err(shared.session_error(e).await),
        };
        let exec_id = id.as_str().to_string();
        let status = session.status;
        let waiter = shared.clone();
        let wait = async move {
            let s = status
                .await
                .unwrap_or_else(|_| Err(SessionError::Transport("the exec session was dropped".into())));
            let code = waiter.verdict(s).await?;
            // Killed by a signal: when the pod is gone or going (deleted, evicted) the command went with it.
            if code > 128 && waiter.inspect(Error::Cancelled).await.is_sandbox_gone() {
                return Err(Error::gone());
            }
            if code == 126 && !pid_file_exists(&waiter, &exec_id).await {
                return Err(Error::ExecStart {
                    reason: "the exec script could not run in the pod (exit 126 before it recorded its pid)"
                        .into(),
                });
            }
            Ok(ExitStatus::code(code))
        }
        .boxed();
        Ok(Exec::new(ExecParts {
            id: id.clone(),
            stdin: session.stdin.map(|s| Box::pin(s) as Writer),
            stdout: session
                .stdout
                .filter(|_| req.stdout == Output::Piped)
                .map(|s| Box::pin(s) as Reader),
            stderr: session.stderr.map(|s| Box::pin(s) as Reader),
            wait,
            killer: Arc::new(Killer {
                shared: shared.clone(),
                id: id.as_str().to_string(),
            }),
            cancel: req.cancel.clone(),
            kill_grace: req.kill_grace,
        }))
    }

    async fn kill_leftovers(&self) -> Result<Option<u64>> {
        if self.shared.gone.load(Ordering::SeqCst) {
            return Err(Error::gone());
        }
        let argv: Vec<String> = vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("{FIND_MAIN}{}", iterion_driver::KILL_LEFTOVERS_SCRIPT),
            "iterion-reap".into(),
        ];
        let (code, out, err) = self.shared.small_out(&argv, None, SMALL_EXEC_BOUND).await?;
        if code != 0 {
            return Err(Error::Engine {
                status: None,
                message: format!(
                    "killing the processes left in the pod exited {code}: {}",
                    tail(&err)
                ),
            });
        }
        Ok(Some(String::from_utf8_lossy(&out).trim().parse().unwrap_or(0)))
    }

    async fn copy_in(&self, dest_dir: &str, mut tar: TarSource) -> Result<()> {
        if self.shared.gone.load(Ordering::SeqCst) {
            return Err(Error::gone());
        }
        let argv: Vec<String> = ["tar", "-x", "-f", "-", "-C", dest_dir]
            .map(String::from)
            .to_vec();
        let attach = Attach {
            stdin: true,
            stdout: false,
            stderr: true,
        };
        let s = &self.shared;
        let mut session = match wsexec::open(&s.api.client, &s.api.namespace, &s.name, &argv, attach).await {
            Ok(x) => x,
            Err(e) => return Err(s.session_error(e).await),
        };
        let mut stdin = session.stdin.take();
        let mut stderr = session.stderr.take();
        let feed = async {
            let Some(w) = stdin.as_mut() else {
                return Ok(0);
            };
            let n = tokio::io::copy(&mut tar, w).await?;
            w.shutdown().await?;
            Ok::<u64, std::io::Error>(n)
        };
        let drain = async {
            let mut v = Vec::new();
            if let Some(r) = stderr.as_mut() {
                let _ = r.read_to_end(&mut v).await;
            }
            v
        };
        let (fed, err) = tokio::join!(feed, drain);
        drop(stdin);
        let status = session
            .status
            .await
            .unwrap_or_else(|_| Err(SessionError::Transport("the exec session was dropped".into())));
        let code = s.verdict(status).await?;
        let copy = |reason: String| Error::Copy {
            direction: CopyDirection::In,
            reason,
        };
        if code != 0 {
            return Err(copy(format!("tar exited {code}: {}", tail(&err))));
        }
        if let Err(e) = fed {
            return Err(copy(format!("reading the archive: {e}")));
        }
        Ok(())
    }

    async fn copy_out(&self, src: &str) -> Result<TarStream> {
        if self.shared.gone.load(Ordering::SeqCst) {
            return Err(Error::gone());
        }
        // As every driver's copy_out: the archive holds `src` itself under its base name (`tree/…` for
        // `/w/tree`), so that extracting it somewhere recreates the directory.
        let (parent, base) = archive_root(src);
        let argv: Vec<String> = ["tar", "-c", "-f", "-", "-C", parent.as_str(), base.as_str()]
            .map(String::from)
            .to_vec();
        let attach = Attach {
            stdin: false,
            stdout: true,
            stderr: true,
        };
        let s = &self.shared;
        let mut session = match wsexec::open(&s.api.client, &s.api.namespace, &s.name, &argv, attach).await {
            Ok(x) => x,
            Err(e) => return Err(s.session_error(e).await),
        };
        let stderr = Arc::new(std::sync::Mutex::new(Vec::new()));
        if let Some(mut r) = session.stderr.take() {
            let sink = stderr.clone();
            tokio::spawn(async move {
                let mut v = Vec::new();
                let _ = r.read_to_end(&mut v).await;
                *sink.lock().unwrap_or_else(|e| e.into_inner()) = v;
            });
        }
        let Some(out) = session.stdout.take() else {
            return Err(Error::ExecStart {
                reason: "no stdout for the copy".into(),
            });
        };
        Ok(Box::pin(CopyOut {
            out,
            status: Some(session.status),
            stderr,
        }))
    }

    async fn status(&self) -> Result<SandboxStatus> {
        if self.shared.gone.load(Ordering::SeqCst) {
            return Ok(SandboxStatus::Gone);
        }
        let pod = self
            .shared
            .api
            .get_pod(&self.shared.name)
            .await
            .map_err(|f| f.into_error())?;
        let Some(pod) = pod else {
            return Ok(SandboxStatus::Gone);
        };
        let terminated = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
        if !terminated.is_null() {
            return Ok(SandboxStatus::Exited {
                code: terminated["exitCode"].as_i64().unwrap_or(-1),
                oom_killed: terminated["reason"] == "OOMKilled",
            });
        }
        match pod["status"]["phase"].as_str() {
            Some("Failed") | Some("Succeeded") => Ok(SandboxStatus::Exited {
                code: -1,
                oom_killed: false,
            }),
            _ => Ok(SandboxStatus::Running),
        }
    }

    async fn cleanup(&self) -> CleanupReport {
        self.shared.gone.store(true, Ordering::SeqCst);
        let shared = self.shared.clone();
        self.shared
            .cleanup
            .get_or_init(|| async move {
                let name = shared.name.clone();
                // Its own task: the caller's cancellation does not cut a cleanup short.
                tokio::spawn(shared.teardown()).await.unwrap_or_else(|e| {
                    let mut r = CleanupReport::new(name, false);
                    r.errors.push(format!("cleanup task failed: {e}"));
                    r
                })
            })
            .await
            .clone()
    }

    fn force_cleanup_blocking(&self) {
        self.shared.gone.store(true, Ordering::SeqCst);
        let access = self.shared.access.clone();
        let namespace = self.shared.api.namespace.clone();
        let name = self.shared.name.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async move {
                if let Ok(client) = access.driver_client(Duration::from_secs(2)) {
                    let api = Kapi {
                        client,
                        namespace,
                        request_timeout: Duration::from_secs(4),
                        poll: Duration::from_secs(1),
                        delete_wait: Duration::ZERO,
                    };
                    let _ = api.delete_pod(&name).await;
                }
            });
            let _ = tx.send(());
        });
        let _ = rx.recv_timeout(Duration::from_secs(5));
    }
}

async fn pid_file_exists(shared: &Shared, id: &str) -> bool {
    let argv: Vec<String> = vec![
        "/bin/sh".into(),
        "-c".into(),
        "test -e \"$1\"".into(),
        "iterion-check".into(),
        script::pid_path(id),
    ];
    // When the check itself fails, keep the command's own exit code.
    !matches!(shared.small(&argv, None, SMALL_EXEC_BOUND).await, Ok((1, _)))
}

/// The archive of `copy_out`: the tar's stdout, ending with an error when tar did not exit 0.
struct CopyOut {
    out: tokio::io::DuplexStream,
    status: Option<tokio::sync::oneshot::Receiver<std::result::Result<ExecStatus, SessionError>>>,
    stderr: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl AsyncRead for CopyOut {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let before = buf.filled().len();
        match Pin::new(&mut self.out).poll_read(cx, buf) {
            Poll::Ready(Ok(())) if buf.filled().len() == before && buf.remaining() > 0 => {}
            other => return other,
        }
        let Some(rx) = self.status.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let status = match Pin::new(rx).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(s) => s,
        };
        self.status = None;
        let failed = |why: String| {
            Poll::Ready(Err(std::io::Error::other(Error::Copy {
                direction: CopyDirection::Out,
                reason: why,
            })))
        };
        match status {
            Ok(Ok(ExecStatus::Exited(0))) => Poll::Ready(Ok(())),
            Ok(Ok(ExecStatus::Exited(code))) => {
                let err = self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone();
                failed(format!("tar exited {code}: {}", tail(&err)))
            }
            Ok(Ok(ExecStatus::Failure { reason, message })) => failed(format!("{reason}: {message}")),
            Ok(Err(e)) => failed(e.to_string()),
            Err(_) => failed("the exec session was dropped".into()),
        }
    }
}

/// `tar -C <parent> <base>` for `src`: `/w/tree` → (`/w`, `tree`); the root → (`/`, `.`).
fn archive_root(src: &str) -> (String, String) {
    let p = std::path::Path::new(src);
    match (p.parent(), p.file_name()) {
        (Some(parent), Some(base)) => {
            let parent = parent.to_string_lossy();
            let parent = if parent.is_empty() {
                ".".into()
            } else {
                parent.into_owned()
            };
            (parent, base.to_string_lossy().into_owned())
        }
        _ => (src.to_string(), ".".to_string()),
    }
}

/// The last 4 KiB of `bytes`, as text.
fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(4096);
    String::from_utf8_lossy(&bytes[start..]).trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::archive_root;

    #[test]
    fn copy_out_archives_the_directory_under_its_name() {
        let check = |src: &str, parent: &str, base: &str| {
            assert_eq!(archive_root(src), (parent.to_string(), base.to_string()), "{src}")
        };
        check("/workspace", "/", "workspace");
        check("/w/copy-1/tree", "/w/copy-1", "tree");
        check("/w/tree/", "/w", "tree");
        check("/", "/", ".");
        check("rel", ".", "rel");
    }
}
