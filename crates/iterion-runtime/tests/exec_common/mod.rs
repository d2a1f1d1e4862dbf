//! Helpers shared by the `exec_*` tests: a recording sink, host sandboxes on the `NoopDriver`, and a runner
//! that compiles a workflow and executes it.
#![allow(dead_code)]
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use iterion_driver::{Driver, NoopDriver, PrepareRequest, Run, StartRequest, owner};
use iterion_runtime::events::{Event, PlacementKind};
use iterion_runtime::exec::{
    ExecBounds, ExecContext, ExecOutcome, NodeSandbox, NodeSandboxes, RunSink, SandboxUnavailable, Shell,
    execute,
};
use iterion_runtime::store::{Checkpoint, LogLevel};
use iterion_test_support::conformance::sandbox_for;
use serde_json::{Map, Value, json};

/// Everything the executor reported.
#[derive(Default)]
pub struct Recorder {
    pub events: Mutex<Vec<Event>>,
    pub logs: Mutex<Vec<(LogLevel, String)>>,
    pub checkpoints: Mutex<Vec<Checkpoint>>,
    pub artifacts: Mutex<Vec<(String, String, u64, Value)>>,
    pub sessions: Mutex<Vec<(String, Value)>>,
    pub interactions: Mutex<BTreeMap<String, Value>>,
}

impl RunSink for Recorder {
    fn emit(&self, event: Event) {
        self.events.lock().unwrap().push(event);
    }
    fn log(&self, level: LogLevel, message: &str) {
        self.logs.lock().unwrap().push((level, message.to_string()));
    }
    fn checkpoint(&self, checkpoint: &Checkpoint) {
        self.checkpoints.lock().unwrap().push(checkpoint.clone());
    }
    fn write_artifact(&self, node_id: &str, name: &str, version: u64, data: &Value) -> Result<(), String> {
        self.artifacts
            .lock()
            .unwrap()
            .push((node_id.into(), name.into(), version, data.clone()));
        Ok(())
    }
    fn write_interaction(&self, id: &str, record: &Value) -> Result<(), String> {
        self.interactions
            .lock()
            .unwrap()
            .insert(id.into(), record.clone());
        Ok(())
    }
    fn read_interaction(&self, id: &str) -> Option<Value> {
        self.interactions.lock().unwrap().get(id).cloned()
    }
    fn read_session(&self, node_id: &str) -> Option<Value> {
        let sessions = self.sessions.lock().unwrap();
        sessions
            .iter()
            .rev()
            .find(|(n, _)| n == node_id)
            .map(|(_, v)| v.clone())
    }
    fn write_session(&self, node_id: &str, snapshot: &Value) -> Result<(), String> {
        self.sessions
            .lock()
            .unwrap()
            .push((node_id.into(), snapshot.clone()));
        Ok(())
    }
}

impl Recorder {
    /// Events as `{type, node_id?, data}` with durations zeroed (for snapshots and assertions).
    pub fn lines(&self) -> Vec<Value> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| {
                let mut data = e.data().unwrap();
                for k in ["duration_ms"] {
                    if data.contains_key(k) {
                        data.insert(k.into(), json!(0));
                    }
                }
                let mut m = Map::new();
                m.insert("type".into(), json!(e.event_type()));
                if let Some(n) = e.node_id() {
                    m.insert("node_id".into(), json!(n));
                }
                if let Some(b) = e.branch_id() {
                    m.insert("branch_id".into(), json!(b));
                }
                m.insert("data".into(), Value::Object(data));
                Value::Object(m)
            })
            .collect()
    }

    /// Compact `type[node]` list.
    pub fn types(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| match e.node_id() {
                Some(n) => format!("{}[{n}]", e.event_type()),
                None => e.event_type().to_string(),
            })
            .collect()
    }

    /// Data of every event of a type.
    pub fn of(&self, ty: &str) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|l| l["type"] == ty)
            .map(|l| l["data"].clone())
            .collect()
    }

    pub fn warnings(&self) -> Vec<String> {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .filter(|(l, _)| *l == LogLevel::Warn)
            .map(|(_, m)| m.clone())
            .collect()
    }
}

/// Every node runs on one `NoopRun` in `dir`; `placements` overrides the reported placement of a node (a
/// `run` placement makes the executor apply the container rules while the process still runs on the host).
pub struct HostSandboxes {
    pub run: Arc<dyn Run>,
    pub dir: PathBuf,
    pub placements: BTreeMap<String, PlacementKind>,
    pub shell: Shell,
    pub unavailable: BTreeMap<String, SandboxUnavailable>,
    pub exec_env: Vec<(String, String)>,
    /// The program answering `__claw-runner` (none: claw nodes fail `RUNNER_INCOMPATIBLE`).
    pub claw_runner: Option<String>,
    /// What `policies_differ` answers for any nodes.
    pub policies_differ: bool,
    /// `ended <node>` / `ended-concurrently <node>`, in call order.
    pub ended: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl NodeSandboxes for HostSandboxes {
    fn policies_differ(&self, _node_ids: &[&str]) -> bool {
        self.policies_differ
    }

    async fn node_ended(&self, node_id: &str, _sandbox: &NodeSandbox) {
        self.ended.lock().unwrap().push(format!("ended {node_id}"));
    }

    async fn node_ended_concurrently(&self, node_id: &str, _sandbox: &NodeSandbox) {
        self.ended
            .lock()
            .unwrap()
            .push(format!("ended-concurrently {node_id}"));
    }

    async fn sandbox_for(&self, node_id: &str) -> Result<NodeSandbox, SandboxUnavailable> {
        if let Some(u) = self.unavailable.get(node_id) {
            return Err(u.clone());
        }
        Ok(NodeSandbox {
            run: self.run.clone(),
            placement: self
                .placements
                .get(node_id)
                .copied()
                .unwrap_or(PlacementKind::Host),
            shell: self.shell,
            workdir: self.dir.to_string_lossy().into_owned(),
            host_work_dir: Some(self.dir.clone()),
            claw_runner: self.claw_runner.clone(),
            key_placeholders: Default::default(),
        })
    }

    fn exec_env(&self, _node_id: &str) -> Vec<(String, String)> {
        self.exec_env.clone()
    }
}

/// A started `NoopRun` on `dir` whose processes see PATH plus `extra`.
pub async fn noop_run(dir: &Path, extra: &[(&str, &str)]) -> Arc<dyn Run> {
    let mut env = vec![("PATH".to_string(), std::env::var("PATH").unwrap_or_default())];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let d = NoopDriver::new(env);
    let p = d
        .prepare(PrepareRequest::new(sandbox_for(None, dir)))
        .await
        .unwrap();
    let req = StartRequest::new("r1", dir, owner::current_owner(dir));
    Arc::from(d.start(p, None, req).await.unwrap().run)
}

/// A test setup: a work dir, a recorder, sandboxes, host env and bounds.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub rec: Arc<Recorder>,
    pub placements: BTreeMap<String, PlacementKind>,
    pub shell: Shell,
    pub host_env: BTreeMap<String, String>,
    pub run_env: Vec<(String, String)>,
    pub unavailable: BTreeMap<String, SandboxUnavailable>,
    pub bounds: ExecBounds,
    pub resume: Option<Checkpoint>,
    pub answers: Option<Map<String, Value>>,
    pub vars: Map<String, Value>,
    pub cancel: tokio_util::sync::CancellationToken,
    pub run: Option<Arc<dyn Run>>,
    pub claw_runner: Option<String>,
    pub attachments: Option<iterion_runtime::attachments::AttachmentValues>,
    pub policies_differ: bool,
    pub ended: Arc<Mutex<Vec<String>>>,
}

impl Harness {
    pub fn new() -> Harness {
        let bounds = ExecBounds {
            retry_delay_cap: Some(Duration::ZERO),
            ..ExecBounds::default()
        };
        Harness {
            dir: tempfile::tempdir().unwrap(),
            rec: Arc::new(Recorder::default()),
            placements: BTreeMap::new(),
            shell: Shell::Bash,
            host_env: BTreeMap::new(),
            run_env: Vec::new(),
            unavailable: BTreeMap::new(),
            bounds,
            resume: None,
            answers: None,
            vars: Map::new(),
            cancel: tokio_util::sync::CancellationToken::new(),
            run: None,
            claw_runner: None,
            attachments: None,
            policies_differ: false,
            ended: Arc::default(),
        }
    }

    pub fn work_dir(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.host_env.insert(k.into(), v.into());
        self
    }

    pub fn placed(mut self, node: &str, p: PlacementKind) -> Self {
        self.placements.insert(node.into(), p);
        self
    }

    /// Compiles `src` (must have no error) and runs it.
    pub async fn run(&mut self, src: &str) -> ExecOutcome {
        self.run_workflow(compile(src)).await
    }

    /// Runs a compiled workflow.
    pub async fn run_workflow(&mut self, wf: iterion_spec::model::Workflow) -> ExecOutcome {
        let dir = self.work_dir();
        let env: Vec<(&str, &str)> = self
            .run_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let run = match &self.run {
            Some(r) => r.clone(),
            None => noop_run(&dir, &env).await,
        };
        let sandboxes = Arc::new(HostSandboxes {
            run,
            dir,
            placements: self.placements.clone(),
            shell: self.shell,
            unavailable: self.unavailable.clone(),
            exec_env: Vec::new(),
            claw_runner: self.claw_runner.clone(),
            policies_differ: self.policies_differ,
            ended: self.ended.clone(),
        });
        let vars = if self.vars.is_empty() {
            iterion_runtime::exec::resolve_vars(
                &wf,
                iterion_runtime::exec::VarInputs {
                    preset: None,
                    vars: &[],
                    env: &self.host_env,
                    project_dir: "/work",
                },
            )
            .unwrap()
        } else {
            self.vars.clone()
        };
        let mut ctx = ExecContext::new("run-1", vars, self.host_env.clone(), sandboxes, self.rec.clone())
            .with_bounds(self.bounds)
            .with_cancel(self.cancel.clone());
        if let Some(cp) = self.resume.clone() {
            ctx = ctx.with_resume(cp);
        }
        if let Some(a) = self.attachments.clone() {
            ctx = ctx.with_attachments(a);
        }
        if let Some(a) = self.answers.clone() {
            ctx = ctx.with_answers(a);
        }
        execute(&wf, ctx).await
    }
}

pub fn compile(src: &str) -> iterion_spec::model::Workflow {
    let checked = iterion_spec::check(src, "test.bot");
    let errors: Vec<String> = checked
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.render_header())
        .collect();
    assert!(errors.is_empty(), "workflow does not compile: {errors:#?}");
    checked.workflows.into_iter().next().expect("a workflow")
}

/// `(code, resumable, node_id)` of a failure, `finished`, or `cancelled@node`.
pub fn summary(o: &ExecOutcome) -> String {
    match o {
        ExecOutcome::Finished { .. } => "finished".into(),
        ExecOutcome::Failed { failure, checkpoint } => format!(
            "{} node={} checkpoint={}",
            failure.code,
            failure.node_id.as_deref().unwrap_or("-"),
            checkpoint.as_ref().map_or("-", |c| c.node_id.as_str())
        ),
        ExecOutcome::Cancelled { checkpoint } => format!("cancelled checkpoint={}", checkpoint.node_id),
        ExecOutcome::Paused { checkpoint } => format!("paused checkpoint={}", checkpoint.node_id),
    }
}

pub fn failure_error(o: &ExecOutcome) -> String {
    match o {
        ExecOutcome::Failed { failure, .. } => failure.error.clone(),
        _ => String::new(),
    }
}

/// The fixture agent CLI.
pub fn fake_agent() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fake-agent.sh")
        .to_string_lossy()
        .into_owned()
}

/// A harness whose agent CLI is the fixture script, recording into its own directory.
pub struct FakeAgent {
    pub h: Harness,
    pub state: tempfile::TempDir,
}

impl FakeAgent {
    /// Every call answers `reply` unless `reply.N` exists.
    pub fn new(reply: &str) -> FakeAgent {
        let state = tempfile::tempdir().unwrap();
        std::fs::write(state.path().join("reply"), reply).unwrap();
        let mut h = Harness::new()
            .env("ITERION_CLAUDE_BIN", &fake_agent())
            .env("ANTHROPIC_API_KEY", "sk-test-key");
        h.run_env = vec![(
            "FAKE_AGENT_DIR".into(),
            state.path().to_string_lossy().into_owned(),
        )];
        FakeAgent { h, state }
    }

    /// The answer of call `n` (0-based).
    pub fn reply_at(&self, n: usize, reply: &str) {
        std::fs::write(self.path(&format!("reply.{n}")), reply).unwrap();
    }

    pub fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.state.path().join(name)
    }

    /// The arguments of call `n` (without the program).
    pub fn argv_of(&self, n: usize) -> Vec<String> {
        self.file(&format!("argv.{n}"))
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// A successful CLI result object with `result` text and, when given, a `session_id`.
pub fn cli_reply(result: &str, session_id: Option<&str>) -> String {
    let mut v = json!({
        "type": "result",
        "is_error": false,
        "result": result,
        "usage": {"input_tokens": 10, "output_tokens": 5},
        "total_cost_usd": 0.01
    });
    if let Some(s) = session_id {
        v["session_id"] = json!(s);
    }
    v.to_string()
}
