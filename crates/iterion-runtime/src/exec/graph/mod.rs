//! The graph executor: node input (10.3), dispatch, edge selection (10.6), loops (10.7), budget (10.8),
//! terminal nodes (10.9) and recovery (10.10).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use iterion_spec::expr::{eval, parse_expr, truthy};
use iterion_spec::model::{Condition, Edge, LoopCap, Node, NodeKind, Workflow};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::agent::run_claude_code;
use super::check::node_backend;
use super::claw::run_claw;
use super::context::{ExecContext, ExecOutcome};
use super::node::{CallShape, NodeEnv, NodeError, NodeRun, NodeSuccess, ms};
use super::render::{LoopView, Scope, with_value};
use super::tool::run_tool;
use crate::events::{
    ArtifactWritten, BudgetExceeded, BudgetValue, BudgetWarning, EdgeSelected, NodeFinished,
    NodeKind as EvKind, NodeRecovery, NodeStarted, RunFailed,
};
use crate::failure::FailureCode;
use crate::store::{Checkpoint, LogLevel};

const DONE: &str = "done";
const FAIL: &str = "fail";

/// Loop bodies: loop name → nodes on any path from a target of its edges back to a source of its edges.
///
/// Paths do not traverse the edges of other loops: an enclosing loop's back edge would otherwise put the whole
/// outer body into the inner body, and the inner loop could never be entered "from outside its body" (10.7,
/// GX6).
fn loop_bodies(wf: &Workflow) -> BTreeMap<String, BTreeSet<String>> {
    let names: BTreeSet<&str> = wf
        .edges
        .iter()
        .filter_map(|e| e.loop_spec.as_ref().map(|l| l.name.as_str()))
        .collect();
    let mut out = BTreeMap::new();
    for name in names {
        let mut fwd: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut back: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for e in &wf.edges {
            if e.loop_spec.as_ref().is_some_and(|l| l.name.value != name) {
                continue;
            }
            fwd.entry(e.from.as_str()).or_default().push(e.to.as_str());
            back.entry(e.to.as_str()).or_default().push(e.from.as_str());
        }
        let reach = |starts: Vec<&str>, adj: &BTreeMap<&str, Vec<&str>>| -> BTreeSet<String> {
            let mut seen: BTreeSet<String> = BTreeSet::new();
            let mut stack = starts;
            while let Some(n) = stack.pop() {
                if seen.insert(n.to_string()) {
                    stack.extend(adj.get(n).into_iter().flatten().copied());
                }
            }
            seen
        };
        let edges: Vec<&Edge> = wf
            .edges
            .iter()
            .filter(|e| e.loop_spec.as_ref().is_some_and(|l| l.name.value == name))
            .collect();
        let from_targets = reach(edges.iter().map(|e| e.to.as_str()).collect(), &fwd);
        let to_sources = reach(edges.iter().map(|e| e.from.as_str()).collect(), &back);
        out.insert(
            name.to_string(),
            from_targets.intersection(&to_sources).cloned().collect(),
        );
    }
    out
}

mod compute;
mod fanout;
mod human;
mod llm_router;
mod router;

/// What the budget counts: shared by the branches of a fan-out.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    tokens: u64,
    cost_usd: f64,
    iterations: u64,
}

/// Mutable execution state (what the checkpoint holds, plus per-invocation counters). A fan-out branch works
/// on a copy.
#[derive(Clone)]
struct State {
    vars: Map<String, Value>,
    outputs: Map<String, Value>,
    history: BTreeMap<String, Vec<Value>>,
    loop_counters: BTreeMap<String, u64>,
    loop_previous: Map<String, Value>,
    loop_caps: BTreeMap<String, u64>,
    artifact_versions: BTreeMap<String, u64>,
    artifacts: Map<String, Value>,
    node_attempts: BTreeMap<String, BTreeMap<String, u32>>,
    node_iterations: BTreeMap<String, u64>,
    usage: Usage,
    budget_warned: BTreeSet<&'static str>,
    /// Router id → selections made (round robin), for the whole run.
    round_robin: BTreeMap<String, u64>,
    /// Agent → times in a row it asked for input (interaction protocol).
    interaction_depth: BTreeMap<String, u32>,
    /// The agent session a re-invoked agent continues (node, session id), used once.
    resume_session: Option<(String, String)>,
    /// Agent session id → the placement of the node that made it.
    session_places: BTreeMap<String, crate::events::PlacementKind>,
}

impl State {
    fn fresh(vars: Map<String, Value>) -> State {
        State {
            vars,
            outputs: Map::new(),
            history: BTreeMap::new(),
            loop_counters: BTreeMap::new(),
            loop_previous: Map::new(),
            loop_caps: BTreeMap::new(),
            artifact_versions: BTreeMap::new(),
            artifacts: Map::new(),
            node_attempts: BTreeMap::new(),
            node_iterations: BTreeMap::new(),
            usage: Usage::default(),
            budget_warned: BTreeSet::new(),
            round_robin: BTreeMap::new(),
            interaction_depth: BTreeMap::new(),
            resume_session: None,
            session_places: BTreeMap::new(),
        }
    }

    /// The state of a resumed run: everything from the checkpoint except budget counters and node attempts,
    /// which start from zero (section 9 step 7); artifacts are the latest outputs of their publishing nodes.
    fn resumed(workflow: &Workflow, cp: &Checkpoint) -> State {
        let mut st = State::fresh(cp.vars.clone());
        st.outputs = cp.outputs.clone();
        st.history = cp.history.clone();
        st.loop_counters = cp.loop_counters.clone();
        st.loop_previous = cp.loop_previous_output.clone();
        st.artifact_versions = cp.artifact_versions.clone();
        st.round_robin = cp.round_robin_counters.clone();
        st.session_places = cp.session_placements.clone();
        if cp.interaction_depth > 0 {
            st.interaction_depth
                .insert(cp.node_id.clone(), cp.interaction_depth);
        }
        for n in &workflow.nodes {
            if let (Some(p), Some(o)) = (&n.publish, cp.outputs.get(&n.name.value)) {
                st.artifacts.insert(p.value.clone(), o.clone());
            }
        }
        st
    }

    fn checkpoint(&self, node_id: &str, pending_input: Option<Value>) -> Checkpoint {
        Checkpoint {
            node_id: node_id.to_string(),
            outputs: self.outputs.clone(),
            history: self.history.clone(),
            loop_counters: self.loop_counters.clone(),
            loop_previous_output: self.loop_previous.clone(),
            artifact_versions: self.artifact_versions.clone(),
            vars: self.vars.clone(),
            node_attempts: self.node_attempts.clone(),
            pending_input,
            round_robin_counters: self.round_robin.clone(),
            session_placements: self.session_places.clone(),
            ..Checkpoint::default()
        }
    }

    fn loops(&self) -> BTreeMap<String, LoopView> {
        let mut names: BTreeSet<&String> = self.loop_counters.keys().collect();
        names.extend(self.loop_caps.keys());
        names.extend(self.loop_previous.keys());
        names
            .into_iter()
            .map(|n| {
                (
                    n.clone(),
                    LoopView {
                        iteration: self.loop_counters.get(n).copied().unwrap_or(0),
                        max: self.loop_caps.get(n).copied(),
                        previous_output: self.loop_previous.get(n).cloned(),
                    },
                )
            })
            .collect()
    }
}

/// The scope of templates rendered for node `node` (attachment paths as that node sees them).
fn scope<'a>(
    st: &'a State,
    input: &'a Value,
    loops: &'a BTreeMap<String, LoopView>,
    ctx: &'a ExecContext,
    node: &str,
) -> Scope<'a> {
    Scope {
        input,
        vars: &st.vars,
        outputs: &st.outputs,
        history: &st.history,
        loops,
        artifacts: &st.artifacts,
        run_id: &ctx.run_id,
        attachments: ctx.attachments.seen_by(node),
    }
}

/// Why a node stopped besides success or error.
enum Stop {
    Cancelled,
    Deadline(DeadlineKind),
}

#[derive(Clone, Copy)]
enum DeadlineKind {
    Budget,
    Timeout,
}

struct Engine<'a> {
    wf: &'a Workflow,
    ctx: &'a ExecContext,
    bodies: BTreeMap<String, BTreeSet<String>>,
    started: Instant,
    budget_deadline: Option<Instant>,
    timeout_deadline: Option<Instant>,
    warned_env: Mutex<BTreeSet<String>>,
    st: State,
}

/// Executes the workflow graph from its entry node (or the checkpoint's node) to a terminal outcome.
///
/// The checkpoint is handed to [`super::context::RunSink::checkpoint`] after every completed node; failures carry the
/// checkpoint at the node to re-execute.
pub async fn execute(workflow: &Workflow, ctx: ExecContext) -> ExecOutcome {
    let started = Instant::now();
    let (start_node, pending, st) = match &ctx.resume {
        Some(cp) => (
            cp.node_id.clone(),
            cp.pending_input.clone(),
            State::resumed(workflow, cp),
        ),
        None => (
            workflow
                .entry
                .as_ref()
                .map(|e| e.value.clone())
                .unwrap_or_default(),
            None,
            State::fresh(ctx.vars.clone()),
        ),
    };
    let budget_deadline = workflow
        .budget
        .as_ref()
        .and_then(|b| b.max_duration_ns)
        .map(|ns| started + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)));
    let mut ex = Engine {
        wf: workflow,
        ctx: &ctx,
        bodies: loop_bodies(workflow),
        started,
        budget_deadline,
        timeout_deadline: ctx.bounds.timeout.map(|t| started + t),
        warned_env: Mutex::new(BTreeSet::new()),
        st,
    };
    // a paused run continues from the human node's answers
    if let Some(cp) = ctx.resume.as_ref().filter(|c| c.interaction_id.is_some()) {
        let Some(answers) = ctx.answers.clone() else {
            return ExecOutcome::Paused {
                checkpoint: cp.clone(),
            };
        };
        if cp.backend_name.is_some() {
            // an agent asked: it runs again with the answers in its input
            let input = ex.answer_delegate(cp, answers);
            return ex.run(cp.node_id.clone(), Some(input)).await;
        }
        return match ex.answer(cp, answers) {
            Ok(next) => ex.run(next, None).await,
            Err(outcome) => outcome,
        };
    }
    ex.run(start_node, pending).await
}

impl<'a> Engine<'a> {
    fn emit(&self, e: impl Into<crate::events::Event>) {
        self.ctx.sink.emit(e.into());
    }

    fn warn(&self, msg: &str) {
        self.ctx.sink.log(LogLevel::Warn, msg);
    }

    fn failed(&self, failure: RunFailed, at: &str, pending: Option<Value>) -> ExecOutcome {
        let checkpoint = failure
            .code
            .is_resumable()
            .then(|| self.st.checkpoint(at, pending));
        ExecOutcome::Failed { failure, checkpoint }
    }

    fn fail_code(&self, code: FailureCode, error: impl Into<String>, node: &str) -> ExecOutcome {
        self.failed(RunFailed::new(code, error).node(node), node, None)
    }

    async fn run(&mut self, start: String, mut pending: Option<Value>) -> ExecOutcome {
        let mut current = start;
        let mut came_from: Option<String> = None;
        loop {
            if self.ctx.cancel.is_cancelled() {
                return ExecOutcome::Cancelled {
                    checkpoint: self.st.checkpoint(&current, pending),
                };
            }
            if current == DONE || current == FAIL {
                return self.terminal(&current, came_from);
            }
            let Some(node) = self.wf.node(&current) else {
                return ExecOutcome::Failed {
                    failure: RunFailed::new(
                        FailureCode::NodeNotFound,
                        format!(
                            "node '{current}' is not part of workflow '{}'",
                            self.wf.name.value
                        ),
                    )
                    .node(current.clone()),
                    checkpoint: None,
                };
            };
            let next = match self.step(node, pending.take()).await {
                Ok(n) => n,
                Err(outcome) => return outcome,
            };
            came_from = Some(current);
            current = next;
        }
    }

    /// The `done` or `fail` node.
    fn terminal(&mut self, current: &str, came_from: Option<String>) -> ExecOutcome {
        let it = self.st.node_iterations.entry(current.to_string()).or_insert(0);
        let iteration = *it;
        *it += 1;
        self.emit(NodeStarted::terminal(current, iteration));
        if current == DONE {
            self.emit(NodeFinished::terminal(DONE));
            return ExecOutcome::Finished {
                duration: self.started.elapsed(),
            };
        }
        let source = came_from.unwrap_or_default();
        let mut failure = RunFailed::new(FailureCode::FailNodeReached, "workflow reached fail node");
        if !source.is_empty() {
            failure = failure.node(source);
        }
        ExecOutcome::Failed {
            failure,
            checkpoint: None,
        }
    }

    /// Executes one node and returns the next node to execute.
    #[allow(clippy::result_large_err)]
    async fn step(&mut self, node: &'a Node, pending: Option<Value>) -> Result<String, ExecOutcome> {
        let id = node.name.value.clone();
        match (node.kind, router::mode(node)) {
            (NodeKind::Router, router::Mode::RoundRobin) => return self.round_robin(node),
            (NodeKind::Router, router::Mode::FanOutAll) => return self.fan_out_all(node).await,
            (NodeKind::Router, router::Mode::Llm) => return self.llm_router(node).await,
            (NodeKind::Router, router::Mode::Other(m)) => {
                return Err(self.fail_code(
                    FailureCode::ExecutionFailed,
                    format!("router '{id}': mode '{m}' is not executable in this version"),
                    &id,
                ));
            }
            (NodeKind::Human, _) => return Err(self.pause(node, pending)),
            _ => {}
        }
        // compute nodes are not budgeted (no check, no iteration, no tokens)
        if node.kind != NodeKind::Compute
            && let Some(out) = self.check_budget(&id, pending.clone())
        {
            return Err(out);
        }
        if let Some(t) = self.timeout_deadline
            && Instant::now() >= t
        {
            return Err(self.timed_out(&id, pending));
        }
        let input = match pending {
            Some(i) => i,
            None => self.build_input(&id),
        };
        let mut output = match node.kind {
            NodeKind::Router => self.condition_router(node, input.clone()),
            NodeKind::Compute => self.compute(node, input.clone())?,
            _ => self.run_node(node, &input).await?,
        };
        // an agent asking for input through the interaction protocol pauses the run
        if let Some(questions) = self.asks(node, &mut output.output) {
            return Err(self.pause_delegate(node, input, questions, &output));
        }
        self.st.interaction_depth.remove(&id);
        self.finish(node, output)
    }

    /// After a node succeeded: output, history, artifact, `node_finished`, edge selection and the checkpoint.
    /// Returns the next node.
    #[allow(clippy::result_large_err)]
    fn finish(&mut self, node: &Node, output: Done) -> Result<String, ExecOutcome> {
        let current = node.name.value.clone();
        if let Some(t) = output.tokens {
            self.st.usage.tokens = self.st.usage.tokens.saturating_add(t);
        }
        if let Some(c) = output.cost_usd {
            self.st.usage.cost_usd += c;
        }
        self.st.outputs.insert(current.clone(), output.output.clone());
        self.st
            .history
            .entry(current.clone())
            .or_default()
            .push(output.output.clone());
        self.st.node_attempts.remove(&current);
        if let Some(p) = &node.publish {
            self.publish(&current, &p.value, &output.output);
        }
        let mut fin = NodeFinished::new(current.clone(), output.output.clone(), output.duration_ms);
        fin.tokens = output.tokens;
        fin.cost_usd = output.cost_usd;
        self.emit(fin);
        self.budget_warnings();
        let next = self.select_edge(&current, &output.output)?;
        self.take_edge(next, &output.output);
        let to = next.to.value.clone();
        self.ctx.sink.checkpoint(&self.st.checkpoint(&to, None));
        Ok(to)
    }

    fn timed_out(&self, node: &str, pending: Option<Value>) -> ExecOutcome {
        let t = self.ctx.bounds.timeout.unwrap_or_default();
        self.failed(
            RunFailed::new(
                FailureCode::Timeout,
                format!(
                    "the --timeout deadline of {} expired",
                    iterion_driver::fmt_duration(t)
                ),
            )
            .node(node),
            node,
            pending,
        )
    }

    fn publish(&mut self, node_id: &str, name: &str, output: &Value) {
        let v = self.st.artifact_versions.entry(name.to_string()).or_insert(0);
        let version = *v;
        *v += 1;
        self.st.artifacts.insert(name.to_string(), output.clone());
        match self.ctx.sink.write_artifact(node_id, name, version, output) {
            Ok(()) => self.emit(ArtifactWritten {
                node_id: node_id.into(),
                publish: name.into(),
                version,
            }),
            Err(e) => self.warn(&format!(
                "node '{node_id}': cannot write artifact '{name}' v{version}: {e}"
            )),
        }
    }

    /// 10.3: the input of `node` from the `with` mappings of its incoming edges.
    fn build_input(&self, node: &str) -> Value {
        build_input(self.wf, &self.st, node, self.ctx)
    }

    fn budget_dims(&self) -> Vec<(&'static str, BudgetValue, BudgetValue, bool)> {
        self.budget_dims_of(&self.st.usage)
    }

    /// The budget dimensions with `usage` as what was used.
    fn budget_dims_of(&self, usage: &Usage) -> Vec<(&'static str, BudgetValue, BudgetValue, bool)> {
        let Some(b) = &self.wf.budget else {
            return Vec::new();
        };
        let mut v = Vec::new();
        if let Some(ns) = b.max_duration_ns {
            let limit = u64::try_from(ns / 1_000_000).unwrap_or(u64::MAX);
            let used = ms(self.started.elapsed());
            v.push((
                "max_duration",
                BudgetValue::Int(used),
                BudgetValue::Int(limit),
                used * 5 >= limit * 4,
            ));
        }
        if let Some(l) = b.max_tokens {
            let limit = u64::try_from(l).unwrap_or(0);
            let used = usage.tokens;
            v.push((
                "max_tokens",
                BudgetValue::Int(used),
                BudgetValue::Int(limit),
                used * 5 >= limit * 4,
            ));
        }
        if let Some(l) = b.max_cost_usd {
            let used = usage.cost_usd;
            v.push((
                "max_cost_usd",
                BudgetValue::Float(used),
                BudgetValue::Float(l),
                used * 5.0 >= l * 4.0,
            ));
        }
        if let Some(l) = b.max_iterations {
            let limit = u64::try_from(l).unwrap_or(0);
            let used = usage.iterations;
            v.push((
                "max_iterations",
                BudgetValue::Int(used),
                BudgetValue::Int(limit),
                used * 5 >= limit * 4,
            ));
        }
        v
    }

    fn budget_warnings(&mut self) {
        for (dim, used, limit, at80) in self.budget_dims() {
            if at80 && self.st.budget_warned.insert(dim) {
                self.emit(BudgetWarning {
                    dimension: dim.into(),
                    used,
                    limit,
                });
            }
        }
    }

    /// The first budget dimension at or above its limit, with `usage` as what was used.
    fn over_budget(&self, usage: &Usage) -> Option<(&'static str, BudgetValue, BudgetValue)> {
        self.budget_dims_of(usage)
            .into_iter()
            .find(|(_, used, limit, _)| match (used, limit) {
                (BudgetValue::Int(u), BudgetValue::Int(l)) => u >= l,
                (BudgetValue::Float(u), BudgetValue::Float(l)) => u >= l,
                _ => false,
            })
            .map(|(dim, used, limit, _)| (dim, used, limit))
    }

    /// Before starting a node: a dimension at or above its limit stops the run.
    fn check_budget(&mut self, node: &str, pending: Option<Value>) -> Option<ExecOutcome> {
        self.budget_warnings();
        let (dim, used, limit) = self.over_budget(&self.st.usage)?;
        Some(self.budget_exceeded(dim, used, limit, node, pending))
    }

    fn budget_exceeded(
        &self,
        dim: &str,
        used: BudgetValue,
        limit: BudgetValue,
        node: &str,
        pending: Option<Value>,
    ) -> ExecOutcome {
        self.emit(BudgetExceeded {
            dimension: dim.into(),
            used,
            limit,
        });
        self.failed(
            RunFailed::new(FailureCode::BudgetExceeded, format!("budget {dim} exceeded")).node(node),
            node,
            pending,
        )
    }

    fn budget_exceeded_duration(&self, node: &str, pending: Option<Value>) -> ExecOutcome {
        let limit = self
            .wf
            .budget
            .as_ref()
            .and_then(|b| b.max_duration_ns)
            .map_or(0, |ns| u64::try_from(ns / 1_000_000).unwrap_or(u64::MAX));
        self.budget_exceeded(
            "max_duration",
            BudgetValue::Int(ms(self.started.elapsed())),
            BudgetValue::Int(limit),
            node,
            pending,
        )
    }

    /// Runs one node with its retries. `Err` is the run's outcome (failure, cancellation, deadline).
    #[allow(clippy::result_large_err)]
    async fn run_node(&mut self, node: &Node, input: &Value) -> Result<Done, ExecOutcome> {
        let id = node.name.value.clone();
        let sandbox = match self.ctx.sandboxes.sandbox_for(&id).await {
            Ok(s) => s,
            Err(u) => {
                let mut f = RunFailed::new(u.code, u.error).node(id.clone());
                f.phase = u.phase;
                f.hint = u.hint;
                return Err(self.failed(f, &id, Some(input.clone())));
            }
        };
        let kind = match node.kind {
            NodeKind::Agent => EvKind::Agent,
            NodeKind::Judge => EvKind::Judge,
            _ => EvKind::Tool,
        };
        let mut shape = self.agent_shape(node);
        shape.drop_session = session_crossing(&self.st, node, input, sandbox.placement);
        loop {
            let it = self.st.node_iterations.entry(id.clone()).or_insert(0);
            let iteration = *it;
            *it += 1;
            self.emit(NodeStarted::new(id.clone(), kind, iteration, sandbox.placement));
            self.ctx.sandboxes.step_starting(&id).await;
            let cancel = self.ctx.cancel.child_token();
            let env = NodeEnv {
                run_id: &self.ctx.run_id,
                node_id: &id,
                sandbox: &sandbox,
                exec_env: self.ctx.sandboxes.exec_env(&id),
                host_env: &self.ctx.host_env,
                sink: &*self.ctx.sink,
                cancel: cancel.clone(),
                warned_env: &self.warned_env,
            };
            let loops = self.st.loops();
            let sc = scope(&self.st, input, &loops, self.ctx, &id);
            let t0 = Instant::now();
            let result = {
                let fut = dispatch(&env, self.wf, node, &sc, &shape);
                with_deadlines(fut, &cancel, self.budget_deadline, self.timeout_deadline).await
            };
            // The execution's credential and the processes it left behind end with it.
            self.ctx.sandboxes.node_ended(&id, &sandbox).await;
            let duration_ms = ms(t0.elapsed());
            // every execution counts, failed attempts included (max_iterations)
            self.st.usage.iterations += 1;
            let err = match result {
                (NodeRun::Ok(s), _) => {
                    remember_session(&mut self.st, &s.output, sandbox.placement);
                    return Ok(Done::from(s, duration_ms));
                }
                (_, Some(Stop::Deadline(DeadlineKind::Budget))) => {
                    return Err(self.budget_exceeded_duration(&id, Some(input.clone())));
                }
                (_, Some(Stop::Deadline(DeadlineKind::Timeout))) => {
                    return Err(self.timed_out(&id, Some(input.clone())));
                }
                (NodeRun::Cancelled, _) | (_, Some(Stop::Cancelled)) => {
                    return Err(ExecOutcome::Cancelled {
                        checkpoint: self.st.checkpoint(&id, Some(input.clone())),
                    });
                }
                (NodeRun::Err(e), None) => e,
            };
            let attempts = self
                .st
                .node_attempts
                .entry(id.clone())
                .or_default()
                .entry(err.code.as_str().to_string())
                .or_insert(0);
            *attempts += 1;
            let attempt = *attempts;
            let Some(delay) = err.code.retry_policy().delay(attempt) else {
                return Err(self.failed(
                    RunFailed::new(err.code, err.message).node(id.clone()),
                    &id,
                    Some(input.clone()),
                ));
            };
            self.emit(NodeRecovery {
                node_id: id.clone(),
                code: err.code,
                reason: format!(
                    "retry {attempt} of {} for {}",
                    err.code.retry_policy().retries(),
                    err.code
                ),
                attempt,
                delay_ms: ms(delay),
                error: err.message.clone(),
            });
            shape.replay_session = err.code == FailureCode::ContextLengthExceeded;
            let wait = self.ctx.bounds.retry_delay_cap.map_or(delay, |c| delay.min(c));
            // the wait ends early at a deadline: max_duration and --timeout bound retries too
            let deadline = match (self.budget_deadline, self.timeout_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let sleep_end = Instant::now() + wait;
            let until = deadline.map_or(sleep_end, |d| d.min(sleep_end));
            tokio::select! {
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(until)) => {}
                _ = self.ctx.cancel.cancelled() => {
                    return Err(ExecOutcome::Cancelled { checkpoint: self.st.checkpoint(&id, Some(input.clone())) });
                }
            }
            if let Some(t) = self.timeout_deadline
                && Instant::now() >= t
            {
                return Err(self.timed_out(&id, Some(input.clone())));
            }
            // a retry starts the node again: the budget is checked first
            if let Some(out) = self.check_budget(&id, Some(input.clone())) {
                return Err(out);
            }
        }
    }

    /// Evaluates (once per activation) the cap of loop `name`.
    fn loop_cap(&mut self, name: &str, cap: &LoopCap, output: &Value) -> Result<u64, String> {
        if let Some(c) = self.st.loop_caps.get(name) {
            return Ok(*c);
        }
        let c = match cap {
            LoopCap::Literal(n) => u64::try_from(*n)
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| n.to_string())?,
            LoopCap::Template(t) => {
                let loops = self.st.loops();
                let v = with_value(t, &scope(&self.st, output, &loops, self.ctx, ""));
                let parsed = match &v {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                        s.parse().ok()
                    }
                    _ => None,
                };
                parsed.filter(|n| *n >= 1).ok_or_else(|| match &v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })?
            }
        };
        self.st.loop_caps.insert(name.to_string(), c);
        Ok(c)
    }

    /// 10.6: the edge to take after `from` produced `output`.
    // the error is the run's final outcome, built at most once per run: its size does not matter
    #[allow(clippy::result_large_err)]
    fn select_edge(&mut self, from: &str, output: &Value) -> Result<&'a Edge, ExecOutcome> {
        let wf = self.wf;
        let mut fallback: Option<&'a Edge> = None;
        let mut exhausted = false;
        for e in wf.edges.iter().filter(|e| e.from.value == from) {
            if let Some(l) = &e.loop_spec {
                let cap = match self.loop_cap(&l.name.value, &l.cap.value, output) {
                    Ok(c) => c,
                    Err(v) => {
                        return Err(self.fail_code(
                            FailureCode::ExecutionFailed,
                            format!("loop '{}' cap '{v}' is not a positive integer", l.name.value),
                            from,
                        ));
                    }
                };
                if self.st.loop_counters.get(&l.name.value).copied().unwrap_or(0) >= cap {
                    exhausted = true;
                    continue;
                }
            }
            let holds = match &e.condition {
                None => {
                    fallback.get_or_insert(e);
                    continue;
                }
                Some(Condition::Field { field, negated }) => match output.get(&field.value) {
                    Some(Value::Bool(b)) => *b != *negated,
                    other => {
                        self.warn(&format!(
                            "edge {} -> {}: field '{}' of the output of '{from}' is {}, not a boolean; edge skipped",
                            e.from.value,
                            e.to.value,
                            field.value,
                            other.map_or("missing".to_string(), |v| format!("{v}"))
                        ));
                        false
                    }
                },
                Some(Condition::Expr { text }) => {
                    let root = expr_root(&self.st, output, &self.ctx.run_id);
                    match parse_expr(&text.value)
                        .map_err(|e| e.detail)
                        .and_then(|x| eval(&x, &root).map_err(|e| e.0))
                    {
                        Ok(v) => truthy(&v),
                        Err(err) => {
                            self.warn(&format!(
                                "edge {} -> {}: condition \"{}\" failed to evaluate ({err}); edge skipped",
                                e.from.value, e.to.value, text.value
                            ));
                            false
                        }
                    }
                }
            };
            if holds {
                return Ok(e);
            }
        }
        if let Some(e) = fallback {
            return Ok(e);
        }
        let (code, why) = if exhausted {
            (
                FailureCode::LoopExhausted,
                "every applicable edge is a loop edge at its cap",
            )
        } else {
            (FailureCode::NoOutgoingEdge, "no outgoing edge applies")
        };
        Err(self.fail_code(code, format!("node '{from}': {why}"), from))
    }

    /// Takes `edge` (10.7 counters and activations) and emits `edge_selected`.
    fn take_edge(&mut self, edge: &Edge, output: &Value) {
        let mut ev = EdgeSelected {
            from: edge.from.value.clone(),
            to: edge.to.value.clone(),
            condition: None,
            negated: None,
            expression: None,
            loop_name: None,
            iteration: None,
            round_robin_index: None,
        };
        match &edge.condition {
            Some(Condition::Field { field, negated }) => {
                ev.condition = Some(field.value.clone());
                ev.negated = Some(*negated);
            }
            Some(Condition::Expr { text }) => ev.expression = Some(text.value.clone()),
            None => {}
        }
        if let Some(l) = &edge.loop_spec {
            let c = self.st.loop_counters.entry(l.name.value.clone()).or_insert(0);
            *c += 1;
            ev.loop_name = Some(l.name.value.clone());
            ev.iteration = Some(*c);
            self.st.loop_previous.insert(l.name.value.clone(), output.clone());
        } else {
            // a non-loop edge into a loop's target from outside its body starts a new activation
            let wf = self.wf;
            let restarted: Vec<String> = self
                .bodies
                .iter()
                .filter(|(name, body)| {
                    !body.contains(&edge.from.value)
                        && wf.edges.iter().any(|e| {
                            e.to.value == edge.to.value
                                && e.loop_spec.as_ref().is_some_and(|l| &l.name.value == *name)
                        })
                })
                .map(|(n, _)| n.clone())
                .collect();
            for name in restarted {
                self.st.loop_counters.remove(&name);
                self.st.loop_caps.remove(&name);
                self.st.loop_previous.remove(&name);
                if let Some(body) = self.bodies.get(&name) {
                    for n in body {
                        self.st.history.remove(n);
                    }
                }
            }
        }
        self.emit(ev);
    }
}

/// Records where the agent session in `output` (`_session_id`) was made.
fn remember_session(st: &mut State, output: &Value, placement: crate::events::PlacementKind) {
    if let Some(id) = output.get("_session_id").and_then(Value::as_str) {
        st.session_places.insert(id.to_string(), placement);
    }
}

/// Why the session a node would continue (`session: inherit|inherit_if_available|fork` and a mapped
/// `_session_id`) must not be: it was made where this node does not run. The CLI keeps sessions where it runs
/// (the container's home or the host's), so a session never crosses between the host and a container.
fn session_crossing(
    st: &State,
    node: &Node,
    input: &Value,
    here: crate::events::PlacementKind,
) -> Option<String> {
    let mode = node.session.as_ref().map(|s| s.value.as_str())?;
    if !matches!(mode, "inherit" | "inherit_if_available" | "fork") {
        return None;
    }
    let id = input.get("_session_id").and_then(Value::as_str)?;
    let made = *st.session_places.get(id)?;
    let name = |p: crate::events::PlacementKind| match p {
        crate::events::PlacementKind::Host => "on the host",
        crate::events::PlacementKind::Run => "in the run container",
        crate::events::PlacementKind::Own => "in a node container",
    };
    (made != here).then(|| {
        format!(
            "node '{}': session {id} was made {} and this node runs {}; a session never crosses between the host and a container: running fresh",
            node.name.value,
            name(made),
            name(here)
        )
    })
}

/// 10.3: the input of `node` from the `with` mappings of its incoming edges whose source has an output in
/// `st` (later edges and entries overwrite earlier ones); the entry node without mapping gets the vars.
fn build_input(wf: &Workflow, st: &State, node: &str, ctx: &ExecContext) -> Value {
    let mut input = Map::new();
    let mut mapped = false;
    let loops = st.loops();
    for e in wf.edges.iter().filter(|e| e.to.value == node) {
        let Some(src_out) = st.outputs.get(&e.from.value) else {
            continue;
        };
        if e.with.is_empty() {
            continue;
        }
        mapped = true;
        let sc = scope(st, src_out, &loops, ctx, node);
        for (k, t) in e.with.iter() {
            input.insert(k.to_string(), with_value(t, &sc));
        }
    }
    let is_entry = wf.entry.as_ref().is_some_and(|e| e.value == node);
    if !mapped && is_entry {
        return Value::Object(st.vars.clone());
    }
    Value::Object(input)
}

/// The roots of an expression evaluated against `st` with `input` as the input: `input`, `outputs`, `vars`,
/// `artifacts`, `loop`, `run`.
fn expr_root<'s>(st: &'s State, input: &'s Value, run_id: &'s str) -> impl Fn(&str) -> Option<Value> + 's {
    let loops_v: Map<String, Value> = st
        .loops()
        .iter()
        .map(|(k, l)| {
            let mut m = Map::new();
            m.insert("iteration".into(), Value::from(l.iteration));
            if let Some(x) = l.max {
                m.insert("max".into(), Value::from(x));
            }
            if let Some(p) = &l.previous_output {
                m.insert("previous_output".into(), p.clone());
            }
            (k.clone(), Value::Object(m))
        })
        .collect();
    move |ns: &str| -> Option<Value> {
        match ns {
            "input" => Some(input.clone()),
            "outputs" => Some(Value::Object(st.outputs.clone())),
            "vars" => Some(Value::Object(st.vars.clone())),
            "artifacts" => Some(Value::Object(st.artifacts.clone())),
            "loop" => Some(Value::Object(loops_v.clone())),
            "run" => Some(serde_json::json!({ "id": run_id })),
            _ => None,
        }
    }
}

/// A node's successful result with its duration.
struct Done {
    output: Value,
    tokens: Option<u64>,
    cost_usd: Option<f64>,
    duration_ms: u64,
}

impl Done {
    fn from(s: NodeSuccess, duration_ms: u64) -> Self {
        Done {
            output: s.output,
            tokens: s.tokens,
            cost_usd: s.cost_usd,
            duration_ms,
        }
    }
}

async fn dispatch(
    env: &NodeEnv<'_>,
    wf: &Workflow,
    node: &Node,
    sc: &Scope<'_>,
    shape: &CallShape,
) -> NodeRun {
    match node.kind {
        NodeKind::Tool => run_tool(env, node, sc).await,
        NodeKind::Agent | NodeKind::Judge => {
            let (backend, _) = node_backend(wf, node, env.host_env);
            if backend == "claude_code" {
                run_claude_code(env, wf, node, sc, shape).await
            } else if backend == "claw" {
                run_claw(env, wf, node, sc, shape).await
            } else if backend == "codex" {
                super::codex::run_codex(env, wf, node, sc, shape).await
            } else {
                NodeRun::Err(NodeError::new(
                    FailureCode::ExecutionFailed,
                    format!(
                        "node '{}': backend '{backend}' is not supported by this runtime (the executability check refuses it)",
                        env.node_id
                    ),
                ))
            }
        }
        other => NodeRun::Err(NodeError::new(
            FailureCode::ExecutionFailed,
            format!(
                "node kind '{}' ('{}') is not executable in this version",
                other.as_str(),
                env.node_id
            ),
        )),
    }
}

/// Runs a node future; when a deadline passes or the run is cancelled, cancels the node's token and waits
/// for the node to wind down (its exec is terminated).
async fn with_deadlines(
    fut: impl std::future::Future<Output = NodeRun>,
    cancel: &CancellationToken,
    budget: Option<Instant>,
    timeout: Option<Instant>,
) -> (NodeRun, Option<Stop>) {
    let sleep_until = |t: Option<Instant>| async move {
        match t {
            Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
            None => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(fut);
    let stop = tokio::select! {
        r = &mut fut => return (r, None),
        _ = cancel.cancelled() => Stop::Cancelled,
        _ = sleep_until(budget) => Stop::Deadline(DeadlineKind::Budget),
        _ = sleep_until(timeout) => Stop::Deadline(DeadlineKind::Timeout),
    };
    cancel.cancel();
    (fut.await, Some(stop))
}
