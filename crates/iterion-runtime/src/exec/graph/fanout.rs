//! `fan_out_all` routers: concurrent branches over a snapshot of the run state, the join at the convergence
//! node, sibling cancellation and the workspace-safety rule.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Instant;

use futures::StreamExt;
use iterion_spec::model::{Condition, Edge, Node, NodeKind};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::{
    DONE, DeadlineKind, Done, Engine, FAIL, State, Stop, Usage, build_input, compute, dispatch, expr_root,
    scope, with_deadlines,
};
use crate::events::{
    ArtifactWritten, BranchFinished, BranchStarted, BudgetExceeded, BudgetWarning, EdgeSelected, Event,
    FailedBranch, JoinReady, NodeFinished, NodeKind as EvKind, NodeStarted, RunFailed,
};
use crate::exec::context::{ExecOutcome, NodeSandbox, RunSink};
use crate::exec::node::{CallShape, NodeEnv, NodeRun, ms};
use crate::exec::topology::{branch_nodes, convergence_point, mutating_branches};
use crate::failure::FailureCode;
use crate::store::{Checkpoint, LogLevel};

type BranchFuture<'f> = std::pin::Pin<Box<dyn std::future::Future<Output = BranchResult> + Send + 'f>>;

/// What the branches of one fan-out share (one budget for the whole run).
struct Shared {
    usage: Usage,
    warned: BTreeSet<&'static str>,
    node_iterations: BTreeMap<String, u64>,
    /// One (node, sandbox) per distinct sandbox a branch node ran in, swept after the join.
    used: Vec<(String, NodeSandbox)>,
    /// Agent sessions made in the branches, with where they were made.
    sessions: Vec<(String, crate::events::PlacementKind)>,
    /// The branches run one at a time, each node execution ended as outside a fan-out (its leftovers killed
    /// before the next one starts): their nodes have different network policies.
    serial: bool,
}

/// How a branch ended.
enum End {
    /// Stopped at the convergence node (not executed).
    Joined(String),
    /// Reached `done`.
    Done,
    /// Failed; `code` is the failure's class (budget failures cancel every sibling).
    Failed { error: String, code: FailureCode },
}

struct BranchResult {
    id: String,
    /// Position of the branch's edge among the fan edges.
    order: usize,
    end: End,
    /// Node id → output, in execution order.
    outputs: Vec<(String, Value)>,
    artifacts: Map<String, Value>,
    versions: BTreeMap<String, u64>,
}

/// Emits every event of a branch with its `branch_id`.
struct BranchSink<'s> {
    inner: &'s dyn RunSink,
    branch: &'s str,
}

impl RunSink for BranchSink<'_> {
    fn emit(&self, event: Event) {
        self.inner.emit(event.in_branch(self.branch));
    }
    fn log(&self, level: LogLevel, message: &str) {
        self.inner.log(level, &format!("[{}] {message}", self.branch));
    }
    fn checkpoint(&self, checkpoint: &Checkpoint) {
        self.inner.checkpoint(checkpoint);
    }
    fn write_artifact(&self, node_id: &str, name: &str, version: u64, data: &Value) -> Result<(), String> {
        self.inner.write_artifact(node_id, name, version, data)
    }
    fn write_session(&self, node_id: &str, snapshot: &Value) -> Result<(), String> {
        self.inner.write_session(node_id, snapshot)
    }
    fn read_session(&self, node_id: &str) -> Option<Value> {
        self.inner.read_session(node_id)
    }
}

/// One fan edge, with what the join needs to know.
pub(super) struct Fan<'e> {
    pub edges: Vec<&'e Edge>,
    /// `wait_all` failures cancel siblings and divergent joins fail (false for multi-pick llm routers).
    pub tolerant: bool,
}

impl<'a> Engine<'a> {
    /// `mode: fan_out_all`: every outgoing edge is a branch.
    #[allow(clippy::result_large_err)]
    pub(super) async fn fan_out_all(&mut self, node: &'a Node) -> Result<String, ExecOutcome> {
        let id = node.name.value.clone();
        let input = self.build_input(&id);
        let iteration = self.next_iteration(&id);
        let mut ev = NodeStarted::in_process(id.clone(), EvKind::Router, iteration);
        ev.mode = Some("fan_out_all".into());
        self.emit(ev);
        self.st.outputs.insert(id.clone(), input);
        self.emit(NodeFinished::terminal(id.clone()));
        let wf = self.wf;
        let edges: Vec<&'a Edge> = wf.edges.iter().filter(|e| e.from.value == id).collect();
        if edges.is_empty() {
            return Err(self.fail_code(
                FailureCode::ExecutionFailed,
                format!("fan_out_all router '{id}' has no outgoing edges"),
                &id,
            ));
        }
        self.fan_out(
            &id,
            Fan {
                edges,
                tolerant: true,
            },
        )
        .await
    }

    /// Runs the branches of `fan` and joins them; returns the node to continue at (the convergence node).
    #[allow(clippy::result_large_err)]
    pub(super) async fn fan_out(&mut self, router: &str, fan: Fan<'a>) -> Result<String, ExecOutcome> {
        let wf = self.wf;
        let targets: Vec<&str> = fan.edges.iter().map(|e| e.to.as_str()).collect();
        let conv = convergence_point(wf, &targets);
        let mutating = mutating_branches(wf, &targets, conv.as_deref(), &self.ctx.host_env);
        if mutating.len() > 1 {
            return Err(self.failed(
                RunFailed::new(
                    FailureCode::WorkspaceSafety,
                    format!(
                        "workspace safety violation: {} branches contain mutating nodes [{}]",
                        mutating.len(),
                        mutating.join(", ")
                    ),
                )
                .node(router)
                .hint("at most one mutating branch may run in parallel on the same workspace; mark reviewers readonly: true"),
                router,
                None,
            ));
        }
        let strategy = conv
            .as_deref()
            .and_then(|c| wf.node(c))
            .and_then(|n| n.await_mode.as_ref())
            .map_or("wait_all", |a| a.value.as_str())
            .to_string();
        let cancel_on_failure = fan.tolerant && strategy == "wait_all";
        let limit = wf
            .budget
            .as_ref()
            .and_then(|b| b.max_parallel_branches)
            .and_then(|p| usize::try_from(p).ok())
            .filter(|p| *p > 0)
            .map_or(targets.len(), |p| p.min(targets.len()));
        let serial = self.branches_need_serial(router, &targets, conv.as_deref());
        let limit = if serial { 1 } else { limit };
        let shared = Mutex::new(Shared {
            usage: self.st.usage,
            warned: self.st.budget_warned.clone(),
            node_iterations: self.st.node_iterations.clone(),
            used: Vec::new(),
            sessions: Vec::new(),
            serial,
        });
        let fan_cancel = self.ctx.cancel.child_token();
        let results: Vec<BranchResult> = {
            let this: &Engine<'a> = self;
            let snapshot = &this.st;
            // boxed one by one: a lazily mapped iterator would make the run's future not `Send`
            let mut futs: Vec<BranchFuture<'_>> = Vec::with_capacity(targets.len());
            for (order, t) in targets.iter().enumerate() {
                let start = t.to_string();
                let bid = format!("branch_{router}_{start}");
                let shared = &shared;
                let fan_cancel = &fan_cancel;
                let conv = conv.as_deref();
                futs.push(Box::pin(async move {
                    let r = this
                        .run_branch(shared, bid, order, &start, conv, snapshot.clone(), fan_cancel)
                        .await;
                    if let End::Failed { code, .. } = &r.end
                        && (*code == FailureCode::BudgetExceeded || cancel_on_failure)
                    {
                        fan_cancel.cancel();
                    }
                    r
                }));
            }
            futures::stream::iter(futs)
                .buffer_unordered(limit)
                .collect()
                .await
        };
        let shared = shared.into_inner().unwrap_or_else(|p| p.into_inner());
        self.st.usage = shared.usage;
        self.st.budget_warned = shared.warned;
        self.st.node_iterations = shared.node_iterations;
        self.st.session_places.extend(shared.sessions.iter().cloned());
        // the processes branch nodes left behind, now that no sibling can still be running
        for (node, sandbox) in &shared.used {
            self.ctx.sandboxes.node_ended(node, sandbox).await;
        }
        if self.ctx.cancel.is_cancelled() {
            return Err(ExecOutcome::Cancelled {
                checkpoint: self.st.checkpoint(router, None),
            });
        }
        if let Some(t) = self.timeout_deadline
            && Instant::now() >= t
        {
            return Err(self.timed_out(router, None));
        }
        if let Some(d) = self.budget_deadline
            && Instant::now() >= d
        {
            return Err(self.budget_exceeded_duration(router, None));
        }
        self.join(router, conv, &strategy, fan.tolerant, results)
    }

    /// Whether the branches must run one at a time: the nodes they may execute (in a sandbox) would get
    /// credentials of different reach. Logged once per fan-out.
    fn branches_need_serial(&self, router: &str, targets: &[&str], conv: Option<&str>) -> bool {
        let nodes: Vec<&str> = targets
            .iter()
            .flat_map(|t| branch_nodes(self.wf, t, conv))
            .filter(|n| matches!(n.kind, NodeKind::Agent | NodeKind::Judge | NodeKind::Tool))
            .map(|n| n.name.value.as_str())
            .collect();
        let serial = targets.len() > 1 && self.ctx.sandboxes.policies_differ(&nodes);
        if serial {
            self.ctx.sink.log(
                LogLevel::Info,
                &format!(
                    "fan-out '{router}': its branches' nodes have different network policies; the branches run one at a time"
                ),
            );
        }
        serial
    }

    /// Joins the branches: failures by strategy, the merge of successful branches, `join_ready`.
    #[allow(clippy::result_large_err)]
    fn join(
        &mut self,
        router: &str,
        conv: Option<String>,
        strategy: &str,
        tolerant: bool,
        mut results: Vec<BranchResult>,
    ) -> Result<String, ExecOutcome> {
        // failed_branches in fan edge order, not completion order (stable for readers and tests)
        results.sort_by_key(|r| r.order);
        // siblings cancelled because another branch failed are not failures of their own
        let failed: Vec<FailedBranch> = results
            .iter()
            .filter_map(|r| match &r.end {
                End::Failed { error, code } if *code != FailureCode::Cancelled => Some(FailedBranch {
                    branch_id: r.id.clone(),
                    error: error.clone(),
                }),
                _ => None,
            })
            .collect();
        if let Some(r) = results
            .iter()
            .find(|r| matches!(&r.end, End::Failed { code, .. } if *code == FailureCode::BudgetExceeded))
        {
            let End::Failed { error, .. } = &r.end else {
                unreachable!()
            };
            return Err(self.failed(
                RunFailed::new(FailureCode::BudgetExceeded, error.clone()).node(router),
                router,
                None,
            ));
        }
        let mut joins: Vec<&str> = Vec::new();
        for r in &results {
            if let End::Joined(j) = &r.end
                && !joins.contains(&j.as_str())
            {
                joins.push(j);
            }
        }
        if joins.len() > 1 {
            let msg = format!(
                "branches converge to different nodes: {} vs {}",
                joins[0], joins[1]
            );
            if strategy == "wait_all" || !tolerant {
                return Err(self.fail_code(FailureCode::ExecutionFailed, msg, router));
            }
            self.warn(&format!(
                "fan-out from '{router}': {msg}; joining at {}",
                joins[0]
            ));
        }
        let all_done = results.iter().all(|r| matches!(r.end, End::Done));
        let conv = match joins.first() {
            Some(j) => j.to_string(),
            None if tolerant && strategy == "best_effort" && all_done => {
                self.merge(&results);
                self.emit(JoinReady {
                    node_id: DONE.into(),
                    strategy: strategy.into(),
                    failed_branches: None,
                    terminal_join: Some(true),
                    branches_total: Some(results.len() as u64),
                });
                return Ok(DONE.into());
            }
            None => match conv {
                Some(c) => c,
                None => {
                    return Err(self.fail_code(
                        FailureCode::ExecutionFailed,
                        format!("no convergence point found after fan_out from {router}"),
                        router,
                    ));
                }
            },
        };
        if strategy == "wait_all" && !failed.is_empty() {
            return Err(self.fail_code(
                FailureCode::ExecutionFailed,
                format!(
                    "convergence at {conv} (wait_all): {} branch(es) failed: {}",
                    failed.len(),
                    failed[0].error
                ),
                router,
            ));
        }
        self.merge(&results);
        if !failed.is_empty() {
            let list = serde_json::to_value(&failed).unwrap_or(Value::Null);
            match self.st.outputs.get_mut(&conv) {
                Some(Value::Object(m)) => {
                    m.insert("_failed_branches".into(), list);
                }
                _ => {
                    let mut m = Map::new();
                    m.insert("_failed_branches".into(), list);
                    self.st.outputs.insert(conv.clone(), Value::Object(m));
                }
            }
        }
        self.emit(JoinReady {
            node_id: conv.clone(),
            strategy: strategy.into(),
            failed_branches: (!failed.is_empty()).then_some(failed),
            terminal_join: None,
            branches_total: None,
        });
        self.ctx.sink.checkpoint(&self.st.checkpoint(&conv, None));
        Ok(conv)
    }

    /// Merges the outputs, artifacts and versions of every successful branch into the run state.
    fn merge(&mut self, results: &[BranchResult]) {
        for r in results.iter().filter(|r| !matches!(r.end, End::Failed { .. })) {
            for (node, out) in &r.outputs {
                self.st.outputs.insert(node.clone(), out.clone());
                self.st.history.entry(node.clone()).or_default().push(out.clone());
            }
            for (k, v) in &r.artifacts {
                self.st.artifacts.insert(k.clone(), v.clone());
            }
            for (k, v) in &r.versions {
                let e = self.st.artifact_versions.entry(k.clone()).or_insert(0);
                *e = (*e).max(*v);
            }
        }
    }

    /// One branch, from its start node to the convergence node, `done`, or an error.
    #[allow(clippy::too_many_arguments)]
    async fn run_branch(
        &self,
        shared: &Mutex<Shared>,
        id: String,
        order: usize,
        start: &str,
        conv: Option<&str>,
        mut view: State,
        fan_cancel: &CancellationToken,
    ) -> BranchResult {
        let sink = BranchSink {
            inner: &*self.ctx.sink,
            branch: &id,
        };
        sink.emit(
            BranchStarted {
                node_id: start.into(),
            }
            .into(),
        );
        let mut outputs: Vec<(String, Value)> = Vec::new();
        let mut artifacts = Map::new();
        let end = self
            .branch_loop(
                shared,
                &sink,
                start,
                conv,
                &mut view,
                &mut outputs,
                &mut artifacts,
                fan_cancel,
            )
            .await;
        let (error, join_node) = match &end {
            End::Joined(j) => (None, Some(j.clone())),
            End::Done => (None, None),
            End::Failed { error, .. } => (Some(error.clone()), None),
        };
        sink.emit(
            BranchFinished {
                node_id: start.into(),
                error,
                join_node,
            }
            .into(),
        );
        BranchResult {
            id,
            order,
            end,
            outputs,
            artifacts,
            versions: view.artifact_versions,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn branch_loop(
        &self,
        shared: &Mutex<Shared>,
        sink: &BranchSink<'_>,
        start: &str,
        conv: Option<&str>,
        view: &mut State,
        outputs: &mut Vec<(String, Value)>,
        artifacts: &mut Map<String, Value>,
        fan_cancel: &CancellationToken,
    ) -> End {
        let bid = sink.branch;
        let fail = |error: String| End::Failed {
            error,
            code: FailureCode::ExecutionFailed,
        };
        let mut current = start.to_string();
        loop {
            if fan_cancel.is_cancelled() {
                return End::Failed {
                    error: format!("branch {bid} cancelled"),
                    code: FailureCode::Cancelled,
                };
            }
            if conv == Some(current.as_str()) {
                return End::Joined(current);
            }
            if current == DONE {
                return End::Done;
            }
            if current == FAIL {
                return fail(format!("branch {bid} reached fail node '{current}'"));
            }
            let Some(node) = self.wf.node(&current) else {
                return fail(format!(
                    "node '{current}' is not part of workflow '{}'",
                    self.wf.name.value
                ));
            };
            let compute = node.kind == NodeKind::Compute;
            if !compute && let Some(e) = self.branch_budget_check(shared, sink) {
                return e;
            }
            let iteration = {
                let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
                let it = g.node_iterations.entry(current.clone()).or_insert(0);
                let n = *it;
                *it += 1;
                n
            };
            let input = build_input(self.wf, view, &current, self.ctx);
            let done = match self
                .branch_node(shared, node, iteration, &input, view, sink, fan_cancel)
                .await
            {
                Ok(d) => d,
                Err(end) => return end,
            };
            {
                let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(t) = done.tokens {
                    g.usage.tokens = g.usage.tokens.saturating_add(t);
                }
                if let Some(c) = done.cost_usd {
                    g.usage.cost_usd += c;
                }
                if !compute {
                    g.usage.iterations += 1;
                }
            }
            view.outputs.insert(current.clone(), done.output.clone());
            outputs.push((current.clone(), done.output.clone()));
            if let Some(p) = &node.publish {
                let v = view.artifact_versions.entry(p.value.clone()).or_insert(0);
                let version = *v;
                *v += 1;
                view.artifacts.insert(p.value.clone(), done.output.clone());
                artifacts.insert(p.value.clone(), done.output.clone());
                match sink.write_artifact(&current, &p.value, version, &done.output) {
                    Ok(()) => sink.emit(
                        ArtifactWritten {
                            node_id: current.clone(),
                            publish: p.value.clone(),
                            version,
                        }
                        .into(),
                    ),
                    Err(e) => sink.log(
                        LogLevel::Warn,
                        &format!(
                            "node '{current}': cannot write artifact '{}' v{version}: {e}",
                            p.value
                        ),
                    ),
                }
            }
            let mut fin = NodeFinished::new(current.clone(), done.output.clone(), done.duration_ms);
            fin.tokens = done.tokens;
            fin.cost_usd = done.cost_usd;
            sink.emit(fin.into());
            self.branch_budget_warnings(shared, sink);
            let Some(edge) = self.branch_edge(view, &current, &done.output, sink) else {
                return fail(format!("no outgoing edge from node '{current}' in branch {bid}"));
            };
            sink.emit(
                EdgeSelected {
                    from: current.clone(),
                    to: edge.to.value.clone(),
                    condition: None,
                    negated: None,
                    expression: None,
                    loop_name: None,
                    iteration: None,
                    round_robin_index: None,
                }
                .into(),
            );
            current = edge.to.value.clone();
        }
    }

    /// Executes one node of a branch once (no recovery retries inside branches).
    #[allow(clippy::too_many_arguments)]
    async fn branch_node(
        &self,
        shared: &Mutex<Shared>,
        node: &Node,
        iteration: u64,
        input: &Value,
        view: &State,
        sink: &BranchSink<'_>,
        fan_cancel: &CancellationToken,
    ) -> Result<Done, End> {
        let id = node.name.value.as_str();
        let bid = sink.branch;
        let node_error = |error: String| {
            sink.emit(
                NodeFinished {
                    error: Some(error.clone()),
                    ..NodeFinished::terminal(id)
                }
                .into(),
            );
            End::Failed {
                error: format!("node '{id}' in branch {bid}: {error}"),
                code: FailureCode::ExecutionFailed,
            }
        };
        if node.kind == NodeKind::Compute {
            sink.emit(NodeStarted::in_process(id, EvKind::Compute, iteration).into());
            let root = expr_root(view, input, &self.ctx.run_id);
            return match compute::evaluate(node, &root) {
                Ok(output) => Ok(Done {
                    output,
                    tokens: None,
                    cost_usd: None,
                    duration_ms: 0,
                }),
                Err(e) => Err(node_error(e)),
            };
        }
        let sandbox = match self.ctx.sandboxes.sandbox_for(id).await {
            Ok(s) => s,
            Err(u) => return Err(node_error(u.error)),
        };
        let kind = match node.kind {
            NodeKind::Agent => EvKind::Agent,
            NodeKind::Judge => EvKind::Judge,
            _ => EvKind::Tool,
        };
        sink.emit(NodeStarted::new(id, kind, iteration, sandbox.placement).into());
        self.ctx.sandboxes.step_starting(id).await;
        let cancel = fan_cancel.child_token();
        let env = NodeEnv {
            run_id: &self.ctx.run_id,
            node_id: id,
            sandbox: &sandbox,
            exec_env: self.ctx.sandboxes.exec_env(id),
            host_env: &self.ctx.host_env,
            sink,
            cancel: cancel.clone(),
            warned_env: &self.warned_env,
        };
        let loops = view.loops();
        let sc = scope(view, input, &loops, self.ctx, id);
        let t0 = Instant::now();
        let result = {
            // agents that may ask a person are refused inside branches: a plain call
            let shape = CallShape {
                drop_session: super::session_crossing(view, node, input, sandbox.placement),
                ..CallShape::default()
            };
            let fut = dispatch(&env, self.wf, node, &sc, &shape);
            with_deadlines(fut, &cancel, self.budget_deadline, self.timeout_deadline).await
        };
        // Siblings may be running in the same sandbox: only this execution's credential ends here; processes
        // left behind are swept once every branch has reported. Branches that run one at a time end each
        // execution as outside a fan-out.
        let serial = shared.lock().unwrap_or_else(|p| p.into_inner()).serial;
        if serial {
            self.ctx.sandboxes.node_ended(id, &sandbox).await;
        } else {
            self.ctx.sandboxes.node_ended_concurrently(id, &sandbox).await;
        }
        {
            let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
            if !g
                .used
                .iter()
                .any(|(_, s)| std::sync::Arc::ptr_eq(&s.run, &sandbox.run))
            {
                g.used.push((id.to_string(), sandbox.clone()));
            }
        }
        match result {
            (NodeRun::Ok(s), _) => {
                if let Some(id) = s.output.get("_session_id").and_then(Value::as_str) {
                    let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
                    g.sessions.push((id.to_string(), sandbox.placement));
                }
                Ok(Done::from(s, ms(t0.elapsed())))
            }
            (_, Some(Stop::Deadline(DeadlineKind::Budget))) => Err(End::Failed {
                error: format!("node '{id}' in branch {bid}: budget max_duration exceeded"),
                code: FailureCode::BudgetExceeded,
            }),
            (_, Some(Stop::Deadline(DeadlineKind::Timeout))) => Err(End::Failed {
                error: format!("node '{id}' in branch {bid}: the --timeout deadline expired"),
                code: FailureCode::Timeout,
            }),
            (NodeRun::Cancelled, _) | (_, Some(Stop::Cancelled)) => Err(End::Failed {
                error: format!("node '{id}' in branch {bid}: cancelled"),
                code: FailureCode::Cancelled,
            }),
            (NodeRun::Err(e), None) => Err(node_error(e.message)),
        }
    }

    /// The budget check before a branch node, against the shared usage.
    fn branch_budget_check(&self, shared: &Mutex<Shared>, sink: &BranchSink<'_>) -> Option<End> {
        let usage = shared.lock().unwrap_or_else(|p| p.into_inner()).usage;
        let (dim, used, limit) = self.over_budget(&usage)?;
        sink.emit(
            BudgetExceeded {
                dimension: dim.into(),
                used,
                limit,
            }
            .into(),
        );
        Some(End::Failed {
            error: format!("budget {dim} exceeded"),
            code: FailureCode::BudgetExceeded,
        })
    }

    fn branch_budget_warnings(&self, shared: &Mutex<Shared>, sink: &BranchSink<'_>) {
        let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
        for (dim, used, limit, at80) in self.budget_dims_of(&g.usage) {
            if at80 && g.warned.insert(dim) {
                sink.emit(
                    BudgetWarning {
                        dimension: dim.into(),
                        used,
                        limit,
                    }
                    .into(),
                );
            }
        }
    }

    /// Branch-local edge selection: loop edges are skipped (loops are undefined inside branches), conditions
    /// are evaluated against the branch's view, the first unconditional edge is the fallback.
    fn branch_edge(
        &self,
        view: &State,
        from: &str,
        output: &Value,
        sink: &BranchSink<'_>,
    ) -> Option<&'a Edge> {
        let wf = self.wf;
        let mut fallback = None;
        for e in wf.edges.iter().filter(|e| e.from.value == from) {
            if e.loop_spec.is_some() {
                sink.log(
                    LogLevel::Warn,
                    &format!(
                        "edge {} -> {}: loop edges are not taken inside a fan-out branch",
                        e.from.value, e.to.value
                    ),
                );
                continue;
            }
            let holds = match &e.condition {
                None => {
                    fallback.get_or_insert(e);
                    continue;
                }
                Some(Condition::Field { field, negated }) => {
                    matches!(output.get(&field.value), Some(Value::Bool(b)) if *b != *negated)
                }
                Some(Condition::Expr { text }) => {
                    let root = expr_root(view, output, &self.ctx.run_id);
                    iterion_spec::expr::parse_expr(&text.value)
                        .ok()
                        .and_then(|x| iterion_spec::expr::eval(&x, &root).ok())
                        .is_some_and(|v| iterion_spec::expr::truthy(&v))
                }
            };
            if holds {
                return Some(e);
            }
        }
        fallback
    }
}
