//! The driver conformance suite (03 §14): the cases that are not engine-specific, run against every driver.
//!
//! A driver's integration test builds a [`ConformanceCtx`] and calls [`run_all`]; the returned
//! [`ConformanceReport`] lists every case as passed, skipped (with the reason, printed as a visible notice) or
//! failed, and [`ConformanceReport::assert_ok`] fails the test when any case failed.
//!
//! Case ids and names are stable (they follow the table of 03 §14):
//!
//! | id | name | skipped when |
//! |---|---|---|
//! | C01 | `cleanup_idempotent_concurrent` | never |
//! | C02 | `echo` | never |
//! | C03 | `exit_code` | never |
//! | C04 | `stdout_stderr_separate` | never |
//! | C05 | `stdin_roundtrip` | never |
//! | C06 | `concurrent_large_outputs` | never |
//! | C07 | `backpressure_no_loss` | never |
//! | C08 | `env_layering` | never |
//! | C09 | `workdir` | never |
//! | C10 | `workspace_shared_with_host` | the driver does not share the workspace with the host (`ctx.workspace_shared == false`, kubernetes) |
//! | C11 | `user` | no `remote_user` capability and a sandbox user other than `1000:1000` (kubernetes runs it with that pod user), except on noop when the test runs as uid 0 or 1000 (noop can only switch user as root) |
//! | C12 | `cancel_terminates_group` | no `exec_kill` capability |
//! | C13 | `cancel_kill_after_grace` | no `exec_kill` capability |
//! | C14 | `drop_kills` | no `exec_kill` capability |
//! | C15 | `sandbox_gone` | never: with a `remove_behind_back` hook the sandbox is removed behind the driver's back; without one (noop) it is removed by `cleanup` |
//! | C16 | `post_create` | no `post_create` capability (noop: the helper itself is tested against `NoopRun` in `iterion-driver`'s tests) |
//! | C30 | `copy_roundtrip` | no `copy` capability |
//! | C32 | `command_not_found` | never |
//!
//! C17–C29, C31, C33, C34 need an engine; they live in the engine drivers' own tests. `NoopDriver` has no isolation: C10 is trivially true on the host and C15 uses
//! `cleanup`, which is the only way a host "sandbox" disappears.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use iterion_driver::{
    Driver, DriverKind, Error, ExecRequest, Output, OutputLimits, PrepareRequest, Run, StartRequest, Stdin,
    exec_collect, owner, run_post_create, safe_untar, safe_untar_sync,
};
use iterion_spec::resolved::{HostState, NetworkPolicySpec, Origin, ResolvedMode, ResolvedSandbox};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Removes a sandbox behind the driver's back (argument: `Run::id`).
pub type RemoveHook = Arc<dyn Fn(String) -> BoxFuture<'static, ()> + Send + Sync>;
/// Adjusts every `StartRequest` the suite sends (labels, limits, …).
pub type StartHook = Arc<dyn Fn(&mut StartRequest) + Send + Sync>;

/// Everything a case may need.
#[derive(Clone)]
pub struct ConformanceCtx {
    /// The resolved sandbox to prepare (image, user, workspace folder).
    pub sandbox: ResolvedSandbox,
    /// Host workspace directory (absolute, canonical); the suite writes into it.
    pub workspace: PathBuf,
    /// Prefix of run ids; each sandbox gets `<prefix>-<n>`.
    pub run_id_prefix: String,
    /// Whether files written inside the sandbox workspace appear on the host at the same path.
    pub workspace_shared: bool,
    /// Removes a sandbox behind the driver's back (C15); `None` → C15 removes it with `cleanup`.
    pub remove_behind_back: Option<RemoveHook>,
    /// Applied to every start request.
    pub customize_start: Option<StartHook>,
    /// Deadline of one case (turns a hang into a failure; never asserted as a speed).
    pub case_deadline: Duration,
}

impl std::fmt::Debug for ConformanceCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConformanceCtx")
            .field("workspace", &self.workspace)
            .field("run_id_prefix", &self.run_id_prefix)
            .finish_non_exhaustive()
    }
}

/// A unique test name `iterion-test-<16 hex>`.
pub fn unique_name() -> String {
    let mut seed = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    seed ^= std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    seed ^= COUNTER
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        .wrapping_mul(0xbf58_476d_1ce4_e5b9);
    format!("iterion-test-{:016x}", Rng(seed).next())
}

/// A resolved sandbox for `image` (or no image, for noop) whose workspace folder is `workspace`.
pub fn sandbox_for(image: Option<&str>, workspace: &Path) -> ResolvedSandbox {
    let mut s = ResolvedSandbox {
        mode: ResolvedMode::Inline,
        source: "conformance".into(),
        origin: Origin::Workflow,
        devcontainer: None,
        image: image.map(str::to_string),
        build: None,
        user: None,
        workspace_folder: workspace.to_string_lossy().into_owned(),
        post_create: Vec::new(),
        env_layers: Default::default(),
        mounts: Vec::new(),
        host_state: HostState::None,
        host_state_source: "conformance".into(),
        network: NetworkPolicySpec::open("conformance"),
        runtime: Default::default(),
        degrade_allowed: false,
        key: String::new(),
    };
    s.refresh_key();
    s
}

impl ConformanceCtx {
    /// A context with a workspace, no hooks, a 120 s case deadline.
    pub fn new(sandbox: ResolvedSandbox, workspace: PathBuf) -> Self {
        ConformanceCtx {
            sandbox,
            workspace,
            run_id_prefix: unique_name(),
            workspace_shared: true,
            remove_behind_back: None,
            customize_start: None,
            case_deadline: Duration::from_secs(120),
        }
    }
}

/// Outcome of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Passed.
    Passed,
    /// Skipped, with the reason.
    Skipped(String),
    /// Failed, with the reason.
    Failed(String),
}

/// One case's result.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// `C01`…
    pub id: &'static str,
    /// Stable name.
    pub name: &'static str,
    /// Outcome.
    pub outcome: Outcome,
}

/// The result of [`run_all`].
#[derive(Debug, Clone, Default)]
pub struct ConformanceReport {
    /// Every case in order.
    pub cases: Vec<CaseResult>,
}

impl ConformanceReport {
    /// Cases that failed.
    pub fn failed(&self) -> Vec<&CaseResult> {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Failed(_)))
            .collect()
    }

    /// Ids of the cases that passed.
    pub fn passed_ids(&self) -> Vec<&'static str> {
        self.cases
            .iter()
            .filter(|c| c.outcome == Outcome::Passed)
            .map(|c| c.id)
            .collect()
    }

    /// Ids of the cases that were skipped.
    pub fn skipped_ids(&self) -> Vec<&'static str> {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Skipped(_)))
            .map(|c| c.id)
            .collect()
    }

    /// Panics (failing the test) listing every failed case.
    pub fn assert_ok(&self) {
        let failed = self.failed();
        if !failed.is_empty() {
            let lines: Vec<String> = failed
                .iter()
                .map(|c| match &c.outcome {
                    Outcome::Failed(m) => format!("{} {}: {m}", c.id, c.name),
                    _ => String::new(),
                })
                .collect();
            panic!("driver conformance failed:\n{}", lines.join("\n"));
        }
    }
}

type CaseResultInner = std::result::Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

fn err(e: Error) -> String {
    format!("driver error: {e} ({e:?})")
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// The suite's view of one driver.
struct Suite {
    driver: Arc<dyn Driver>,
    ctx: ConformanceCtx,
    counter: std::sync::atomic::AtomicU32,
}

/// Cleans a sandbox up when dropped without an explicit cleanup (drop guard).
struct Guard(Option<Arc<dyn Run>>);

impl Guard {
    fn run(&self) -> &Arc<dyn Run> {
        self.0.as_ref().expect("guard holds a run")
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(run) = self.0.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                let _ = run.cleanup().await;
            });
        }
    }
}

impl Suite {
    async fn start(&self) -> std::result::Result<Guard, String> {
        let n = self.counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let prepared = self
            .driver
            .prepare(PrepareRequest::new(self.ctx.sandbox.clone()))
            .await
            .map_err(err)?;
        let mut req = StartRequest::new(
            format!("{}-{n}", self.ctx.run_id_prefix),
            self.ctx.workspace.clone(),
            owner::current_owner(self.ctx.workspace.join(".iterion-test-store")),
        );
        req.container_env = vec![("A".into(), "1".into())];
        if let Some(h) = &self.ctx.customize_start {
            h(&mut req);
        }
        let started = self.driver.start(prepared, None, req).await.map_err(err)?;
        Ok(Guard(Some(Arc::from(started.run))))
    }
}

async fn sh(run: &dyn Run, script: &str) -> std::result::Result<iterion_driver::Collected, String> {
    exec_collect(run, ExecRequest::shell(script), OutputLimits::default())
        .await
        .map_err(err)
}

/// Every `/proc/<pid>/cmdline` inside the sandbox, NUL turned to spaces (no `ps` needed in the image).
async fn process_list(run: &dyn Run) -> std::result::Result<String, String> {
    let c = sh(
        run,
        r#"for f in /proc/[0-9]*/cmdline; do tr '\000' ' ' < "$f" 2>/dev/null; echo; done"#,
    )
    .await?;
    Ok(c.stdout_text())
}

/// Polls until `pred(process list)` holds, within `within` (a deadline, not a speed assertion).
async fn poll_procs(
    run: &dyn Run,
    within: Duration,
    pred: impl Fn(&str) -> bool,
) -> std::result::Result<bool, String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if pred(&process_list(run).await?) {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn token() -> u64 {
    // a sleep duration nobody else uses, so concurrent tests do not see each other's processes
    1_000_000
        + Rng(std::process::id() as u64 ^ unique_name().len() as u64 ^ {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos() as u64)
                .unwrap_or(7)
        })
        .next()
            % 8_000_000
}

async fn c01(s: &Suite) -> CaseResultInner {
    let g = s.start().await?;
    let run = g.run().clone();
    let first = run.cleanup().await;
    let second = run.cleanup().await;
    let (a, b) = tokio::join!(run.cleanup(), run.cleanup());
    ensure!(
        first == second && first == a && first == b,
        "reports differ: {first:?} {second:?} {a:?} {b:?}"
    );
    ensure!(first.container_removed, "container not removed: {first:?}");
    match run.exec(ExecRequest::new(["true"])).await {
        Err(e) if e.is_sandbox_gone() => {}
        other => {
            return Err(format!(
                "exec after cleanup: want SandboxGone, got {:?}",
                other.map(|_| ())
            ));
        }
    }
    match run.status().await {
        Err(e) if e.is_sandbox_gone() => {}
        Ok(iterion_driver::SandboxStatus::Gone) => {}
        other => return Err(format!("status after cleanup: want SandboxGone, got {other:?}")),
    }
    // a concurrent pair on a fresh sandbox: neither returns before removal finished
    let g2 = s.start().await?;
    let run2 = g2.run().clone();
    let (x, y) = tokio::join!(run2.cleanup(), run2.cleanup());
    ensure!(x == y, "concurrent reports differ: {x:?} {y:?}");
    match run2.exec(ExecRequest::new(["true"])).await {
        Err(e) if e.is_sandbox_gone() => Ok(()),
        other => Err(format!(
            "exec after concurrent cleanup: want SandboxGone, got {:?}",
            other.map(|_| ())
        )),
    }
}

async fn c02(run: &dyn Run) -> CaseResultInner {
    let c = exec_collect(run, ExecRequest::new(["echo", "hello"]), OutputLimits::default())
        .await
        .map_err(err)?;
    ensure!(c.stdout == b"hello\n", "stdout {:?}", c.stdout_text());
    ensure!(c.stderr.is_empty(), "stderr {:?}", c.stderr_text());
    ensure!(
        c.status.code == 0 && c.status.signal.is_none() && !c.status.cancelled,
        "status {:?}",
        c.status
    );
    Ok(())
}

async fn c03(run: &dyn Run) -> CaseResultInner {
    let c = sh(run, "exit 17").await?;
    ensure!(c.status.code == 17, "status {:?}", c.status);
    Ok(())
}

async fn c04(run: &dyn Run) -> CaseResultInner {
    let c = sh(run, "echo out; echo err >&2").await?;
    ensure!(c.stdout == b"out\n", "stdout {:?}", c.stdout_text());
    ensure!(c.stderr == b"err\n", "stderr {:?}", c.stderr_text());
    ensure!(c.status.code == 0, "status {:?}", c.status);
    Ok(())
}

async fn c05(run: &dyn Run) -> CaseResultInner {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let input: Vec<u8> = (0..(1 << 20) / 8)
        .flat_map(|_| rng.next().to_le_bytes())
        .collect();
    let mut exec = run
        .exec(
            ExecRequest::new(["cat"])
                .stdin(Stdin::Piped)
                .outputs(Output::Piped, Output::Discard),
        )
        .await
        .map_err(err)?;
    let mut stdin = exec.stdin.take().ok_or("no stdin")?;
    let mut stdout = exec.stdout.take().ok_or("no stdout")?;
    let data = input.clone();
    let writer = async move {
        for chunk in data.chunks(7919) {
            stdin.write_all(chunk).await?;
        }
        stdin.shutdown().await
    };
    let reader = async move {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).await.map(|_| out)
    };
    let (w, r) = tokio::join!(writer, reader);
    w.map_err(|e| format!("write stdin: {e}"))?;
    let out = r.map_err(|e| format!("read stdout: {e}"))?;
    let st = exec.wait().await.map_err(err)?;
    ensure!(
        out == input,
        "stdout ({} bytes) differs from the input ({} bytes)",
        out.len(),
        input.len()
    );
    ensure!(st.code == 0, "status {st:?}");
    Ok(())
}

async fn c06(run: &dyn Run) -> CaseResultInner {
    let c = sh(
        run,
        "head -c 10485760 /dev/zero & head -c 1048576 /dev/zero >&2; wait",
    )
    .await?;
    ensure!(
        c.stdout.len() == 10 * 1024 * 1024,
        "stdout {} bytes",
        c.stdout.len()
    );
    ensure!(c.stderr.len() == 1024 * 1024, "stderr {} bytes", c.stderr.len());
    ensure!(c.status.code == 0, "status {:?}", c.status);
    Ok(())
}

async fn c07(run: &dyn Run) -> CaseResultInner {
    let mut exec = run
        .exec(ExecRequest::shell("head -c 5242880 /dev/zero; echo done >&2"))
        .await
        .map_err(err)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut out = exec.stdout.take().ok_or("no stdout")?;
    let mut errs = exec.stderr.take().ok_or("no stderr")?;
    let (o, e) = tokio::join!(
        async {
            let mut v = Vec::new();
            out.read_to_end(&mut v).await.map(|_| v)
        },
        async {
            let mut v = Vec::new();
            errs.read_to_end(&mut v).await.map(|_| v)
        }
    );
    let o = o.map_err(|e| format!("read stdout: {e}"))?;
    let e = e.map_err(|e| format!("read stderr: {e}"))?;
    let st = exec.wait().await.map_err(err)?;
    ensure!(
        o.len() == 5 * 1024 * 1024 && o.iter().all(|b| *b == 0),
        "stdout {} bytes",
        o.len()
    );
    ensure!(e == b"done\n", "stderr {:?}", String::from_utf8_lossy(&e));
    ensure!(st.code == 0, "status {st:?}");
    Ok(())
}

async fn c08(run: &dyn Run) -> CaseResultInner {
    let c = exec_collect(
        run,
        ExecRequest::shell(r#"echo "A=$A B=$B""#)
            .env("B", "2")
            .env("A", "3"),
        OutputLimits::default(),
    )
    .await
    .map_err(err)?;
    ensure!(
        c.stdout_text() == "A=3 B=2\n",
        "with exec env: {:?}",
        c.stdout_text()
    );
    let c = sh(run, r#"echo "A=$A B=${B-unset}""#).await?;
    ensure!(
        c.stdout_text() == "A=1 B=unset\n",
        "without exec env: {:?}",
        c.stdout_text()
    );
    Ok(())
}

async fn c09(run: &dyn Run) -> CaseResultInner {
    let c = exec_collect(run, ExecRequest::new(["pwd"]), OutputLimits::default())
        .await
        .map_err(err)?;
    ensure!(
        c.stdout_text() == format!("{}\n", run.workspace()),
        "default pwd {:?}",
        c.stdout_text()
    );
    let c = exec_collect(
        run,
        ExecRequest::new(["pwd"]).workdir("/tmp"),
        OutputLimits::default(),
    )
    .await
    .map_err(err)?;
    ensure!(c.stdout_text() == "/tmp\n", "pwd in /tmp {:?}", c.stdout_text());
    Ok(())
}

async fn c10(s: &Suite, run: &dyn Run) -> CaseResultInner {
    let name = format!("marker-{}", token());
    let c = sh(run, &format!("echo here > {name}")).await?;
    ensure!(
        c.status.code == 0,
        "write failed: {:?} {}",
        c.status,
        c.stderr_text()
    );
    let host = s.ctx.workspace.join(&name);
    let got = std::fs::read_to_string(&host).map_err(|e| format!("{}: {e}", host.display()))?;
    let _ = std::fs::remove_file(&host);
    ensure!(got == "here\n", "marker content {got:?}");
    Ok(())
}

/// The user C11 asks for.
const C11_USER: &str = "1000:1000";

async fn c11(run: &dyn Run) -> CaseResultInner {
    let c = exec_collect(
        run,
        ExecRequest::shell("id -u; id -g").user(C11_USER).workdir("/tmp"),
        OutputLimits::default(),
    )
    .await
    .map_err(err)?;
    ensure!(
        c.stdout_text() == "1000\n1000\n",
        "id: {:?} {:?}",
        c.stdout_text(),
        c.stderr_text()
    );
    Ok(())
}

async fn c12(run: &dyn Run) -> CaseResultInner {
    let t = token();
    let (a, b) = (format!("sleep {t}"), format!("sleep {}", t + 1));
    let cancel = CancellationToken::new();
    let exec = run
        .exec(
            ExecRequest::shell(format!("{a} & {b} & wait"))
                .cancel(cancel.clone())
                .outputs(Output::Discard, Output::Discard),
        )
        .await
        .map_err(err)?;
    let both = |p: &str| p.contains(&a) && p.contains(&b);
    ensure!(
        poll_procs(run, Duration::from_secs(20), both).await?,
        "the sleeps never appeared"
    );
    cancel.cancel();
    let st = exec.wait().await.map_err(err)?;
    ensure!(
        st.cancelled && st.signal == Some(15) && st.code == 143,
        "status {st:?}"
    );
    let none = |p: &str| !p.contains(&a) && !p.contains(&b);
    ensure!(
        poll_procs(run, Duration::from_secs(20), none).await?,
        "a sleep survived the cancellation"
    );
    Ok(())
}

async fn c13(run: &dyn Run) -> CaseResultInner {
    let t = token();
    let a = format!("sleep {t}");
    let cancel = CancellationToken::new();
    let exec = run
        .exec(
            ExecRequest::shell(format!("trap '' TERM; {a}"))
                .cancel(cancel.clone())
                .kill_grace(Duration::from_secs(1))
                .outputs(Output::Discard, Output::Discard),
        )
        .await
        .map_err(err)?;
    ensure!(
        poll_procs(run, Duration::from_secs(20), |p| p.contains(&a)).await?,
        "the sleep never appeared"
    );
    cancel.cancel();
    let st = exec.wait().await.map_err(err)?;
    ensure!(
        st.cancelled && st.signal == Some(9) && st.code == 137,
        "status {st:?}"
    );
    Ok(())
}

async fn c14(run: &dyn Run) -> CaseResultInner {
    let a = format!("sleep {}", token());
    let exec = run
        .exec(ExecRequest::new(a.split(' ').map(str::to_string)).outputs(Output::Discard, Output::Discard))
        .await
        .map_err(err)?;
    ensure!(
        poll_procs(run, Duration::from_secs(20), |p| p.contains(&a)).await?,
        "the sleep never appeared"
    );
    drop(exec);
    ensure!(
        poll_procs(run, Duration::from_secs(20), |p| !p.contains(&a)).await?,
        "the process survived the drop of its Exec"
    );
    Ok(())
}

async fn c15(s: &Suite) -> CaseResultInner {
    let g = s.start().await?;
    let run = g.run().clone();
    let a = format!("sleep {}", token());
    let inflight = run
        .exec(ExecRequest::new(a.split(' ').map(str::to_string)).outputs(Output::Discard, Output::Discard))
        .await
        .map_err(err)?;
    ensure!(
        poll_procs(&*run, Duration::from_secs(20), |p| p.contains(&a)).await?,
        "the sleep never appeared"
    );
    match &s.ctx.remove_behind_back {
        Some(hook) => hook(run.id().to_string()).await,
        None => {
            let _ = run.cleanup().await;
        }
    }
    match inflight.wait().await {
        Err(e) if e.is_sandbox_gone() => {}
        other => return Err(format!("in-flight exec: want SandboxGone, got {other:?}")),
    }
    match run.exec(ExecRequest::new(["true"])).await {
        Err(e) if e.is_sandbox_gone() => Ok(()),
        Ok(e) => match e.wait().await {
            Err(e) if e.is_sandbox_gone() => Ok(()),
            other => Err(format!("exec after removal: want SandboxGone, got {other:?}")),
        },
        Err(e) => Err(format!("exec after removal: want SandboxGone, got {e:?}")),
    }
}

async fn c16(s: &Suite) -> CaseResultInner {
    let g = s.start().await?;
    let run = g.run().clone();
    let log = iterion_driver::EventSink::discard();
    let name = format!("post-create-{}", token());
    let ok = vec![format!("echo made > {name}")];
    run_post_create(&*run, &ok, Duration::from_secs(60), &log)
        .await
        .map_err(err)?;
    if s.ctx.workspace_shared {
        let host = s.ctx.workspace.join(&name);
        let got = std::fs::read_to_string(&host).map_err(|e| format!("{}: {e}", host.display()))?;
        let _ = std::fs::remove_file(&host);
        ensure!(got == "made\n", "post-create file content {got:?}");
    }
    match run_post_create(&*run, &["exit 99".to_string()], Duration::from_secs(60), &log).await {
        Err(e @ Error::PostCreateFailed { code: 99, .. }) => {
            ensure!(e.to_string().contains("99"), "message {e}");
        }
        other => return Err(format!("exit 99: want PostCreateFailed, got {other:?}")),
    }
    match run_post_create(&*run, &["sleep 30".to_string()], Duration::from_secs(1), &log).await {
        Err(Error::SetupTimeout {
            phase: iterion_driver::SetupPhase::PostCreate,
            ..
        }) => {}
        other => {
            return Err(format!(
                "sleep 30 bounded by 1 s: want SetupTimeout, got {other:?}"
            ));
        }
    }
    let _ = run.cleanup().await;
    Ok(())
}

fn tree_tar() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |path: &str, kind: tar::EntryType, data: &[u8], link: Option<&str>| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(if kind == tar::EntryType::Directory {
            0o755
        } else {
            0o644
        });
        if let Some(l) = link {
            h.set_link_name(l).expect("link name");
        }
        h.set_cksum();
        b.append_data(&mut h, path, data).expect("append");
    };
    add("tree/", tar::EntryType::Directory, b"", None);
    add("tree/a.txt", tar::EntryType::Regular, b"alpha\n", None);
    add("tree/sub/", tar::EntryType::Directory, b"", None);
    add("tree/sub/b.bin", tar::EntryType::Regular, &[0, 1, 2, 255], None);
    add("tree/link", tar::EntryType::Symlink, b"", Some("a.txt"));
    b.into_inner().expect("tar")
}

fn snapshot_tree(root: &Path) -> std::result::Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let e = e.map_err(|e| e.to_string())?;
            let p = e.path();
            let rel = p
                .strip_prefix(root)
                .map_err(|e| e.to_string())?
                .to_string_lossy()
                .into_owned();
            let meta = std::fs::symlink_metadata(&p).map_err(|e| e.to_string())?;
            let v = if meta.file_type().is_symlink() {
                format!(
                    "link -> {}",
                    std::fs::read_link(&p).map_err(|e| e.to_string())?.display()
                )
            } else if meta.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else {
                format!("file {:?}", std::fs::read(&p).map_err(|e| e.to_string())?)
            };
            out.insert(rel, v);
        }
    }
    Ok(out)
}

async fn c30(_s: &Suite, run: &dyn Run) -> CaseResultInner {
    let dest = format!("{}/copy-{}", run.workspace(), token());
    let made = sh(run, &format!("mkdir -p '{dest}'")).await?;
    ensure!(made.status.code == 0, "mkdir {dest}: {}", made.stderr_text());
    run.copy_in(&dest, Box::pin(std::io::Cursor::new(tree_tar())))
        .await
        .map_err(err)?;
    let stream = run.copy_out(&format!("{dest}/tree")).await.map_err(err)?;
    let host = tempfile::tempdir().map_err(|e| e.to_string())?;
    safe_untar(stream, host.path(), 1 << 30).await.map_err(err)?;
    let got = snapshot_tree(&host.path().join("tree"))?;
    let expected = {
        let want = tempfile::tempdir().map_err(|e| e.to_string())?;
        safe_untar_sync(&tree_tar()[..], want.path(), 1 << 30).map_err(err)?;
        snapshot_tree(&want.path().join("tree"))?
    };
    let _ = sh(run, &format!("rm -rf '{dest}'")).await;
    ensure!(
        got == expected,
        "round trip differs:\n got {got:?}\nwant {expected:?}"
    );
    ensure!(
        expected.len() == 4,
        "expected tree has {} entries",
        expected.len()
    );
    // a crafted archive with `../x` is refused
    let mut crafted = tar::Header::new_gnu();
    crafted.set_entry_type(tar::EntryType::Regular);
    crafted.as_gnu_mut().ok_or("gnu header")?.name[..4].copy_from_slice(b"../x");
    crafted.set_size(1);
    crafted.set_mode(0o644);
    crafted.set_cksum();
    let mut bytes = crafted.as_bytes().to_vec();
    bytes.push(b'x');
    bytes.resize(1024 + 2048, 0);
    let out = tempfile::tempdir().map_err(|e| e.to_string())?;
    match safe_untar_sync(&bytes[..], &out.path().join("in"), 1 << 20) {
        Err(Error::Copy { .. }) => Ok(()),
        other => Err(format!("crafted ../x: want a Copy error, got {other:?}")),
    }
}

async fn c32(run: &dyn Run) -> CaseResultInner {
    let c = exec_collect(
        run,
        ExecRequest::new([format!("nonexistent-command-{}", token())]),
        OutputLimits::default(),
    )
    .await
    .map_err(err)?;
    ensure!(c.status.code == 127, "status {:?}", c.status);
    Ok(())
}

async fn timed(deadline: Duration, f: BoxFuture<'_, CaseResultInner>) -> Outcome {
    match tokio::time::timeout(deadline, f).await {
        Ok(Ok(())) => Outcome::Passed,
        Ok(Err(m)) => Outcome::Failed(m),
        Err(_) => Outcome::Failed(format!("did not finish within the {deadline:?} deadline")),
    }
}

/// Collects the outcome of each case, printing skips to stderr as visible notices.
struct Recorder {
    report: ConformanceReport,
    deadline: Duration,
}

impl Recorder {
    fn record(&mut self, id: &'static str, name: &'static str, outcome: Outcome) {
        if let Outcome::Skipped(why) = &outcome {
            crate::notice(&format!("SKIPPED conformance {id} {name}: {why}"));
        }
        self.report.cases.push(CaseResult { id, name, outcome });
    }

    /// Runs one case within the deadline.
    async fn case(&mut self, id: &'static str, name: &'static str, f: BoxFuture<'_, CaseResultInner>) {
        let outcome = timed(self.deadline, f).await;
        self.record(id, name, outcome);
    }

    /// Runs one case when `available`, else records it skipped for `why`.
    async fn case_if(
        &mut self,
        available: bool,
        id: &'static str,
        name: &'static str,
        f: BoxFuture<'_, CaseResultInner>,
        why: &str,
    ) {
        if available {
            self.case(id, name, f).await;
        } else {
            self.record(id, name, Outcome::Skipped(why.to_string()));
        }
    }
}

/// Runs every case of the suite against `driver`. Skips are printed to stderr as visible notices.
pub async fn run_all(driver: Arc<dyn Driver>, ctx: ConformanceCtx) -> ConformanceReport {
    let caps = driver.capabilities();
    let mut rec = Recorder {
        report: ConformanceReport::default(),
        deadline: ctx.case_deadline,
    };
    let suite = Suite {
        driver,
        ctx,
        counter: std::sync::atomic::AtomicU32::new(0),
    };
    let shared = suite.start().await;
    rec.case("C01", "cleanup_idempotent_concurrent", Box::pin(c01(&suite)))
        .await;
    let run: Arc<dyn Run> = match &shared {
        Ok(g) => g.run().clone(),
        Err(e) => {
            rec.record(
                "C02",
                "start",
                Outcome::Failed(format!("could not start the shared sandbox: {e}")),
            );
            return rec.report;
        }
    };
    let r = &*run;
    exec_cases(&mut rec, r).await;
    rec.case_if(
        suite.ctx.workspace_shared,
        "C10",
        "workspace_shared_with_host",
        Box::pin(c10(&suite, r)),
        "the workspace is not shared with the host",
    )
    .await;
    user_case(&mut rec, &suite, r, caps.remote_user).await;
    for (id, name, case) in [
        (
            "C12",
            "cancel_terminates_group",
            Box::pin(c12(r)) as BoxFuture<'_, _>,
        ),
        ("C13", "cancel_kill_after_grace", Box::pin(c13(r))),
        ("C14", "drop_kills", Box::pin(c14(r))),
    ] {
        rec.case_if(caps.exec_kill, id, name, case, "capability exec_kill is missing")
            .await;
    }
    rec.case("C15", "sandbox_gone", Box::pin(c15(&suite))).await;
    rec.case_if(
        caps.post_create,
        "C16",
        "post_create",
        Box::pin(c16(&suite)),
        "capability post_create is missing",
    )
    .await;
    rec.case_if(
        caps.copy,
        "C30",
        "copy_roundtrip",
        Box::pin(c30(&suite, r)),
        "capability copy is missing",
    )
    .await;
    rec.case("C32", "command_not_found", Box::pin(c32(r))).await;
    let _ = run.cleanup().await;
    drop(shared);
    rec.report
}

/// The exec cases on the shared sandbox every driver runs (C02–C09).
async fn exec_cases(rec: &mut Recorder, r: &dyn Run) {
    rec.case("C02", "echo", Box::pin(c02(r))).await;
    rec.case("C03", "exit_code", Box::pin(c03(r))).await;
    rec.case("C04", "stdout_stderr_separate", Box::pin(c04(r))).await;
    rec.case("C05", "stdin_roundtrip", Box::pin(c05(r))).await;
    rec.case("C06", "concurrent_large_outputs", Box::pin(c06(r)))
        .await;
    rec.case("C07", "backpressure_no_loss", Box::pin(c07(r))).await;
    rec.case("C08", "env_layering", Box::pin(c08(r))).await;
    rec.case("C09", "workdir", Box::pin(c09(r))).await;
}

/// C11: noop can switch to uid 1000 only as root or uid 1000; another driver needs `remote_user`.
async fn user_case(rec: &mut Recorder, suite: &Suite, r: &dyn Run, remote_user: bool) {
    let noop = suite.driver.kind() == DriverKind::Noop;
    let uid = sh(r, "id -u").await.map(|c| c.stdout_text()).unwrap_or_default();
    // A driver without `remote_user` (kubernetes: a pod runs every exec as its own user) still runs C11 when
    // the sandbox's own user is the one the case asks for: the exec needs no switch, and `id` must agree.
    let own_user = suite.ctx.sandbox.user.as_deref() == Some(C11_USER);
    let c11_ok = if noop {
        matches!(uid.trim(), "0" | "1000")
    } else {
        remote_user || own_user
    };
    if c11_ok {
        rec.case("C11", "user", Box::pin(c11(r))).await;
    } else if noop {
        rec.record(
            "C11",
            "user",
            Outcome::Skipped(format!(
                "noop can switch to uid 1000 only as root or uid 1000 (running as {})",
                uid.trim()
            )),
        );
    } else {
        rec.record(
            "C11",
            "user",
            Outcome::Skipped(format!(
                "capability remote_user is missing and the sandbox user is not {C11_USER}"
            )),
        );
    }
}
