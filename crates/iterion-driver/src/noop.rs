//! `NoopDriver`: host execution without isolation (03 §3.10).
//!
//! Every exec is a host process in its own process group; the kill sequence signals the group. The
//! environment of a process is the base environment the caller injects (the CLI passes iterion's own process
//! environment), then the container scope given to `start`, then the exec entries (later wins).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use iterion_boundary::{HostCommand, Pipe};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Group, Pid, User};

use crate::driver::{Driver, Run, Started};
use crate::error::{CopyDirection, Error, Result};
use crate::exec::{Exec, ExecId, ExecKiller, ExecParts, ExecRequest, ExitStatus, KillExec, Output, Stdin};
use crate::owner::{HostProcesses, owner_liveness};
use crate::types::{
    BuildRequest, Capabilities, CleanupReport, DriverKind, EgressPlacement, EngineInfo, Liveness,
    ManagedResource, NetworkLease, NetworkRequest, PrepareRequest, Prepared, RemoveOutcome, SandboxStatus,
    StartReport, StartRequest, TarSource, TarStream,
};
use crate::untar::{DEFAULT_UNTAR_CAP, safe_untar};

/// Runs everything on the host. Always available; isolates nothing.
#[derive(Clone)]
pub struct NoopDriver {
    base_env: Arc<Vec<(String, String)>>,
    host_name: String,
}

impl std::fmt::Debug for NoopDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoopDriver")
            .field("base_env_names", &self.base_env.len())
            .finish()
    }
}

impl NoopDriver {
    /// A driver whose processes start from `base_env` (the CLI passes iterion's process environment).
    pub fn new(base_env: Vec<(String, String)>) -> Self {
        let host_name = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default();
        NoopDriver {
            base_env: Arc::new(base_env),
            host_name,
        }
    }

    fn unsupported(feature: &str) -> Error {
        Error::Unsupported {
            driver: DriverKind::Noop,
            feature: feature.to_string(),
        }
    }
}

#[async_trait]
impl Driver for NoopDriver {
    fn kind(&self) -> DriverKind {
        DriverKind::Noop
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::noop()
    }

    async fn engine_info(&self) -> Result<EngineInfo> {
        let mut info = EngineInfo::new(DriverKind::Noop, "host (no isolation)");
        info.os = std::env::consts::OS.to_string();
        info.arch = std::env::consts::ARCH.to_string();
        Ok(info)
    }

    async fn prepare(&self, req: PrepareRequest) -> Result<Prepared> {
        let mode = req.sandbox.mode.as_str();
        let mut p = Prepared::new(DriverKind::Noop, req.sandbox);
        p.skipped_reason = Some(format!(
            "noop driver does not implement mode={mode}; running on the host"
        ));
        Ok(p)
    }

    async fn build(&self, prepared: Prepared, _req: BuildRequest) -> Result<Prepared> {
        prepared.check_kind(DriverKind::Noop)?;
        Err(Self::unsupported("build"))
    }

    async fn network(&self, _req: NetworkRequest) -> Result<NetworkLease> {
        Err(Self::unsupported("network"))
    }

    async fn start(
        &self,
        prepared: Prepared,
        lease: Option<&NetworkLease>,
        req: StartRequest,
    ) -> Result<Started> {
        prepared.check_kind(DriverKind::Noop)?;
        if let Some(l) = lease {
            l.check_kind(DriverKind::Noop)?;
        }
        let workspace = req.workspace_host_path.clone();
        if !workspace.is_absolute() {
            return Err(Error::InvalidSpec {
                field: "workspace_folder".into(),
                reason: format!("{} is not an absolute path", workspace.display()),
            });
        }
        let id = format!("noop-{}", ExecId::random());
        let ws = workspace.to_string_lossy().into_owned();
        let mut env: Vec<(String, String)> = self.base_env.as_ref().clone();
        env.extend(req.container_env.iter().cloned());
        let run = NoopRun {
            inner: Arc::new(RunInner {
                id: id.clone(),
                workspace: ws.clone(),
                workspace_path: workspace,
                env,
                gone: AtomicBool::new(false),
                execs: Mutex::new(HashMap::new()),
                ended_groups: Mutex::new(Vec::new()),
                cleanup: Mutex::new(None),
            }),
        };
        let mut report = StartReport::new(id.clone(), ws);
        report.name = id;
        report.placement = EgressPlacement::Open;
        Ok(Started {
            run: Box::new(run),
            report,
        })
    }

    async fn list_managed(&self) -> Result<Vec<ManagedResource>> {
        Ok(Vec::new())
    }

    async fn owner_liveness(&self, r: &ManagedResource) -> Liveness {
        owner_liveness(&r.labels, &self.host_name, &HostProcesses)
    }

    async fn remove_managed(&self, _r: &ManagedResource) -> Result<RemoveOutcome> {
        Err(Self::unsupported("managed resources"))
    }

    async fn remove_image(&self, _reference: &str) -> Result<()> {
        Err(Self::unsupported("images"))
    }
}

type SharedReport = Shared<BoxFuture<'static, CleanupReport>>;

#[derive(Debug)]
struct RunInner {
    id: String,
    workspace: String,
    workspace_path: PathBuf,
    env: Vec<(String, String)>,
    gone: AtomicBool,
    execs: Mutex<HashMap<ExecId, (ExecKiller, i32)>>,
    /// Process groups of execs whose leader already ended (their background children may live on).
    ended_groups: Mutex<Vec<i32>>,
    cleanup: Mutex<Option<SharedReport>>,
}

/// A "sandbox" that is the host: `NoopDriver::start` returns it.
#[derive(Debug, Clone)]
pub struct NoopRun {
    inner: Arc<RunInner>,
}

/// Kills a host process group.
#[derive(Debug)]
struct GroupKiller {
    pgid: i32,
}

#[async_trait]
impl KillExec for GroupKiller {
    async fn signal(&self, signal: i32) -> Result<()> {
        let sig = Signal::try_from(signal).map_err(|_| Error::ExecStart {
            reason: format!("unknown signal {signal}"),
        })?;
        match killpg(Pid::from_raw(self.pgid), sig) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(e) => Err(Error::ExecStart {
                reason: format!("signal {signal} to process group {}: {e}", self.pgid),
            }),
        }
    }
}

/// A killer for a process that never started.
#[derive(Debug)]
struct NothingToKill;

#[async_trait]
impl KillExec for NothingToKill {
    async fn signal(&self, _signal: i32) -> Result<()> {
        Ok(())
    }
}

fn resolve_user(spec: &str) -> Result<(u32, u32)> {
    let invalid = |reason: String| Error::InvalidSpec {
        field: "user".into(),
        reason,
    };
    let (u, g) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let (uid, primary) = if let Ok(n) = u.parse::<u32>() {
        (
            n,
            User::from_uid(n.into())
                .ok()
                .flatten()
                .map(|x| x.gid.as_raw())
                .unwrap_or(n),
        )
    } else {
        let user = User::from_name(u)
            .ok()
            .flatten()
            .ok_or_else(|| invalid(format!("user '{u}' does not exist on this host")))?;
        (user.uid.as_raw(), user.gid.as_raw())
    };
    let gid = match g {
        None => primary,
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => Group::from_name(g)
                .ok()
                .flatten()
                .ok_or_else(|| invalid(format!("group '{g}' does not exist on this host")))?
                .gid
                .as_raw(),
        },
    };
    Ok((uid, gid))
}

fn not_found_exec(req: &ExecRequest, code: i32, message: String) -> Exec {
    let stderr: Option<std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>> = match req.stderr {
        Output::Piped => Some(Box::pin(std::io::Cursor::new(message.into_bytes()))),
        Output::Discard => None,
    };
    let stdout: Option<std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>> = match req.stdout {
        Output::Piped => Some(Box::pin(tokio::io::empty())),
        Output::Discard => None,
    };
    let stdin: Option<std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>> = match req.stdin {
        Stdin::Piped => Some(Box::pin(tokio::io::sink())),
        Stdin::Closed => None,
    };
    Exec::new(ExecParts {
        id: ExecId::random(),
        stdin,
        stdout,
        stderr,
        wait: async move { Ok(ExitStatus::code(code)) }.boxed(),
        killer: Arc::new(NothingToKill),
        cancel: req.cancel.clone(),
        kill_grace: req.kill_grace,
    })
}

impl RunInner {
    fn check(&self) -> Result<()> {
        if self.gone.load(Ordering::SeqCst) {
            Err(Error::gone())
        } else {
            Ok(())
        }
    }

    /// A path inside the workspace (noop copies never leave it).
    fn inside_workspace(&self, p: &str, direction: CopyDirection) -> Result<PathBuf> {
        let path = Path::new(p);
        let refuse = |reason: String| Error::Copy { direction, reason };
        if !path.is_absolute()
            || path
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(refuse(format!("{p} must be an absolute path without '..'")));
        }
        if !path.starts_with(&self.workspace_path) {
            return Err(refuse(format!(
                "{p} is outside the workspace {} (the noop driver copies only inside it)",
                self.workspace
            )));
        }
        Ok(path.to_path_buf())
    }
}

/// Process groups among `pgids` that still have members (Linux: `/proc/<pid>/stat` field 5). A group id stays
/// allocated while it has members, so a group found here is still the one the exec created.
fn live_groups(pgids: &[i32]) -> Vec<i32> {
    if pgids.is_empty() {
        return Vec::new();
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut live: Vec<i32> = dir
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| {
            let rest = &stat[stat.rfind(')')? + 1..];
            rest.split_whitespace().nth(2)?.parse::<i32>().ok()
        })
        .filter(|g| pgids.contains(g))
        .collect();
    live.sort_unstable();
    live.dedup();
    live
}

async fn do_cleanup(inner: Arc<RunInner>) -> CleanupReport {
    inner.gone.store(true, Ordering::SeqCst);
    let mut ended: Vec<i32> =
        std::mem::take(&mut *inner.ended_groups.lock().unwrap_or_else(|e| e.into_inner()));
    let mut killers: Vec<ExecKiller> = Vec::new();
    for (_, (k, pgid)) in inner.execs.lock().unwrap_or_else(|e| e.into_inner()).drain() {
        if k.has_exited() {
            ended.push(pgid);
        } else {
            killers.push(k);
        }
    }
    let mut report = CleanupReport::new(inner.id.clone(), true);
    report.execs_terminated = killers.len();
    let results =
        futures::future::join_all(killers.iter().map(|k| k.terminate(Duration::from_secs(2)))).await;
    report.errors = results
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    // background children of execs whose leader already ended: TERM, 2 s, KILL
    let orphans = live_groups(&ended);
    for g in &orphans {
        let _ = killpg(Pid::from_raw(*g), Signal::SIGTERM);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut left = orphans;
    while !left.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = live_groups(&left);
    }
    for g in &left {
        let _ = killpg(Pid::from_raw(*g), Signal::SIGKILL);
    }
    report
}

#[async_trait]
impl Run for NoopRun {
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn kind(&self) -> DriverKind {
        DriverKind::Noop
    }

    fn workspace(&self) -> &str {
        &self.inner.workspace
    }

    fn user(&self) -> Option<&str> {
        None
    }

    async fn exec(&self, req: ExecRequest) -> Result<Exec> {
        self.inner.check()?;
        req.validate()?;
        let workdir = req
            .workdir
            .clone()
            .unwrap_or_else(|| self.inner.workspace.clone());
        if !Path::new(&workdir).is_dir() {
            return Err(Error::ExecStart {
                reason: format!("the working directory {workdir} does not exist"),
            });
        }
        let mut env = iterion_boundary::Env::from_map(self.inner.env.iter().map(|(k, v)| (k, v)));
        env.extend(req.env.iter().map(|(k, v)| (k, v)));
        // A PATH entry that is relative, empty or inside the workspace would let the repository name the
        // programs a host process runs (its own `git`, `make`…): the process gets the trusted entries only.
        let untrusted = [PathBuf::from(&self.inner.workspace), PathBuf::from(&workdir)];
        match iterion_boundary::trusted_path(env.get("PATH"), &untrusted) {
            Some(p) => env.set("PATH", p),
            None => env.remove("PATH"),
        };
        let pipe = |piped: bool| if piped { Pipe::Piped } else { Pipe::Null };
        let mut host = HostCommand::new(&req.argv[0], env)
            .args(&req.argv[1..])
            .current_dir(&workdir)
            .untrusted_dir(&self.inner.workspace)
            .untrusted_dir(&workdir)
            .stdin(pipe(req.stdin == Stdin::Piped))
            .stdout(pipe(req.stdout == Output::Piped))
            .stderr(pipe(req.stderr == Output::Piped));
        if let Some(u) = &req.user {
            let (uid, gid) = resolve_user(u)?;
            let (me, my_gid) = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
            if (uid, gid) != (me, my_gid) {
                if me != 0 {
                    return Err(NoopDriver::unsupported(&format!(
                        "running as user {u} (iterion is not root, so host processes keep its uid)"
                    )));
                }
                host = host.user(uid, gid);
            }
        }
        let spawned = match host.into_tokio() {
            Ok(mut cmd) => cmd.kill_on_drop(false).spawn(),
            Err(iterion_boundary::Error::NotFound { .. }) => {
                return Ok(not_found_exec(
                    &req,
                    127,
                    format!("{}: command not found\n", req.argv[0]),
                ));
            }
            Err(e) => {
                return Err(Error::ExecStart {
                    reason: e.to_string(),
                });
            }
        };
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(not_found_exec(
                    &req,
                    127,
                    format!("{}: command not found\n", req.argv[0]),
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Ok(not_found_exec(
                    &req,
                    126,
                    format!("{}: permission denied\n", req.argv[0]),
                ));
            }
            Err(e) => {
                return Err(Error::ExecStart {
                    reason: format!("spawning {} failed: {e}", req.argv[0]),
                });
            }
        };
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| Error::ExecStart {
                reason: "the process has no pid".into(),
            })?;
        let stdin = child
            .stdin
            .take()
            .map(|s| Box::pin(s) as std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>);
        let stdout = child
            .stdout
            .take()
            .map(|s| Box::pin(s) as std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>);
        let stderr = child
            .stderr
            .take()
            .map(|s| Box::pin(s) as std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>);
        let inner = self.inner.clone();
        let wait = async move {
            let st = child.wait().await.map_err(|e| Error::Engine {
                status: None,
                message: format!("waiting for the host process failed: {e}"),
            })?;
            if inner.gone.load(Ordering::SeqCst) {
                return Err(Error::gone());
            }
            use std::os::unix::process::ExitStatusExt;
            Ok(ExitStatus::code(match (st.code(), st.signal()) {
                (Some(c), _) => c,
                (None, Some(s)) => 128 + s,
                (None, None) => 255,
            }))
        }
        .boxed();
        let id = ExecId::random();
        let exec = Exec::new(ExecParts {
            id: id.clone(),
            stdin,
            stdout,
            stderr,
            wait,
            killer: Arc::new(GroupKiller { pgid: pid }),
            cancel: req.cancel.clone(),
            kill_grace: req.kill_grace,
        });
        {
            let mut execs = self.inner.execs.lock().unwrap_or_else(|e| e.into_inner());
            let mut ended = self.inner.ended_groups.lock().unwrap_or_else(|e| e.into_inner());
            execs.retain(|_, (k, pgid)| {
                if k.has_exited() {
                    ended.push(*pgid);
                }
                !k.has_exited()
            });
            execs.insert(id, (exec.killer(), pid));
        }
        if self.inner.gone.load(Ordering::SeqCst) {
            // cleanup raced with this exec: do not leave the process behind
            let _ = exec.killer().terminate(Duration::from_secs(2)).await;
            return Err(Error::gone());
        }
        Ok(exec)
    }

    async fn copy_in(&self, dest_dir: &str, tar: TarSource) -> Result<()> {
        self.inner.check()?;
        let dest = self.inner.inside_workspace(dest_dir, CopyDirection::In)?;
        if !dest.is_dir() {
            return Err(Error::Copy {
                direction: CopyDirection::In,
                reason: format!("{dest_dir} is not a directory"),
            });
        }
        safe_untar(tar, &dest, DEFAULT_UNTAR_CAP)
            .await
            .map(|_| ())
            .map_err(|e| match e {
                Error::Copy { reason, .. } => Error::Copy {
                    direction: CopyDirection::In,
                    reason,
                },
                other => other,
            })
    }

    async fn copy_out(&self, src: &str) -> Result<TarStream> {
        self.inner.check()?;
        let path = self.inner.inside_workspace(src, CopyDirection::Out)?;
        let bytes = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
            let name = path
                .file_name()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("."));
            let meta = std::fs::symlink_metadata(&path)?;
            let mut b = tar::Builder::new(Vec::new());
            b.follow_symlinks(false);
            if meta.is_dir() {
                b.append_dir_all(&name, &path)?;
            } else {
                b.append_path_with_name(&path, &name)?;
            }
            b.into_inner()
        })
        .await
        .map_err(|e| Error::Copy {
            direction: CopyDirection::Out,
            reason: format!("archiving task failed: {e}"),
        })?
        .map_err(|e| Error::Copy {
            direction: CopyDirection::Out,
            reason: format!("archiving {src} failed: {e}"),
        })?;
        Ok(Box::pin(std::io::Cursor::new(bytes)))
    }

    async fn status(&self) -> Result<SandboxStatus> {
        self.inner.check()?;
        Ok(SandboxStatus::Running)
    }

    async fn cleanup(&self) -> CleanupReport {
        let shared = {
            let mut slot = self.inner.cleanup.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert_with(|| {
                let inner = self.inner.clone();
                let task = tokio::spawn(do_cleanup(inner));
                let id = self.inner.id.clone();
                async move {
                    task.await.unwrap_or_else(|e| {
                        let mut r = CleanupReport::new(id, true);
                        r.errors.push(format!("cleanup task failed: {e}"));
                        r
                    })
                }
                .boxed()
                .shared()
            })
            .clone()
        };
        shared.await
    }

    fn force_cleanup_blocking(&self) {
        self.inner.gone.store(true, Ordering::SeqCst);
        let killers: Vec<(ExecKiller, i32)> = self
            .inner
            .execs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, k)| k)
            .collect();
        for (k, pgid) in killers {
            if !k.has_exited() {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
        }
    }
}
