//! The executability check of routers, fan-outs and human nodes.
use std::collections::{BTreeMap, BTreeSet};

use iterion_spec::diag::Diagnostic;
use iterion_spec::model::{Node, NodeKind, Workflow};

use super::backends::{EXECUTABLE_BACKENDS, at, node_backend, warn_at};
use super::topology::{branch_nodes, convergence_point, is_mutating, mutating_branches};

/// The interaction mode of a human node: its own, else the workflow's when not `none`, else `human`.
pub fn human_mode<'w>(workflow: &'w Workflow, node: &'w Node) -> &'w str {
    workflow.human_mode(node)
}

/// The interaction mode of an agent or judge: its own, else the workflow's, else `none`.
pub fn agent_interaction<'w>(workflow: &'w Workflow, node: &'w Node) -> &'w str {
    node.interaction
        .as_ref()
        .or(workflow.interaction.as_ref())
        .map_or("none", |i| i.value.as_str())
}

/// A human node pauses the run (`human`, `none`); the model-answered modes are refused.
pub(super) fn human(workflow: &Workflow, node: &Node, out: &mut Vec<Diagnostic>) {
    let mode = human_mode(workflow, node);
    if matches!(mode, "llm" | "llm_or_human") {
        let span = node.interaction.as_ref().map_or(node.name.span, |i| i.span);
        out.push(
            at(
                "X002",
                &workflow.file,
                span,
                format!(
                    "human node '{}': 'interaction: {mode}' needs a model to answer, which this version does not call for human nodes",
                    node.name.value
                ),
            )
            .with_hint("use 'interaction: human' (the run pauses for an answer), or an agent node that produces the answer"),
        );
    }
}

pub(crate) fn mode(node: &Node) -> &str {
    node.router_mode_name()
}

/// Routers: `llm` is refused; a `fan_out_all` is checked statically (duplicate targets, what its branches hold,
/// workspace safety).
pub(super) fn router(
    workflow: &Workflow,
    node: &Node,
    env: &BTreeMap<String, String>,
    out: &mut Vec<Diagnostic>,
) {
    let file = workflow.file.as_str();
    let id = node.name.value.as_str();
    match mode(node) {
        "llm" => {
            // the model call goes through the router's backend, like an agent's
            let (backend, span) = node_backend(workflow, node, env);
            if !EXECUTABLE_BACKENDS.contains(&backend.as_str()) {
                out.push(
                    at(
                        "X002",
                        file,
                        span,
                        format!("llm router '{id}': backend '{backend}' is not supported by this runtime"),
                    )
                    .with_hint(format!("supported: {}", EXECUTABLE_BACKENDS.join(", "))),
                );
            }
        }
        "fan_out_all" => fan_out(workflow, node, env, out),
        "round_robin" => {
            for e in workflow.edges.iter().filter(|e| e.from.value == id) {
                if let Some(l) = &e.loop_spec {
                    out.push(warn_at(
                        "X007",
                        file,
                        l.name.span,
                        format!(
                            "loop '{}' on an edge leaving round-robin router '{id}' is not counted; put the loop edge before the router",
                            l.name.value
                        ),
                    ));
                }
            }
        }
        _ => {}
    }
}

fn fan_out(workflow: &Workflow, node: &Node, env: &BTreeMap<String, String>, out: &mut Vec<Diagnostic>) {
    let file = workflow.file.as_str();
    let id = node.name.value.as_str();
    let edges: Vec<_> = workflow.edges.iter().filter(|e| e.from.value == id).collect();
    let mut seen = BTreeSet::new();
    for e in &edges {
        if !seen.insert(e.to.as_str()) {
            out.push(
                at(
                    "X009",
                    file,
                    e.to.span,
                    format!("fan_out_all router '{id}' has two edges to '{}'", e.to.value),
                )
                .with_hint("each branch of a fan-out needs its own target node"),
            );
        }
        if e.condition.is_some() || e.loop_spec.is_some() {
            out.push(warn_at(
                "X007",
                file,
                e.to.span,
                format!(
                    "the condition or loop on edge {id} -> {} is ignored: a fan_out_all router takes every edge",
                    e.to.value
                ),
            ));
        }
    }
    let targets: Vec<&str> = edges.iter().map(|e| e.to.as_str()).collect();
    let conv = convergence_point(workflow, &targets);
    let mut inside: BTreeSet<&str> = BTreeSet::new();
    for t in &targets {
        for n in branch_nodes(workflow, t, conv.as_deref()) {
            if !inside.insert(n.name.as_str()) {
                continue;
            }
            let why = match n.kind {
                NodeKind::Human => Some("a human node (a pause inside a branch has no resume point)"),
                NodeKind::Router => Some("a router (nested routers are not executed)"),
                NodeKind::Agent | NodeKind::Judge if agent_interaction(workflow, n) != "none" => {
                    Some("an agent with 'interaction' (it could not pause inside a branch)")
                }
                _ => None,
            };
            if let Some(why) = why {
                out.push(
                    at(
                        "X008",
                        file,
                        n.name.span,
                        format!(
                            "'{}' runs inside a branch of fan-out '{id}' and is {why}",
                            n.name.value
                        ),
                    )
                    .with_hint("move it after the convergence node of the fan-out"),
                );
            }
        }
    }
    let mutating = mutating_branches(workflow, &targets, conv.as_deref(), env);
    if mutating.len() > 1 {
        let writers: Vec<String> = mutating
            .iter()
            .map(|s| {
                let nodes: Vec<&str> = branch_nodes(workflow, s, conv.as_deref())
                    .into_iter()
                    .filter(|n| is_mutating(workflow, n, env))
                    .map(|n| n.name.as_str())
                    .collect();
                format!("{s} ({})", nodes.join(", "))
            })
            .collect();
        out.push(at(
            "X010",
            file,
            node.name.span,
            format!(
                "fan-out '{id}' would run {} branches that write to the workspace in parallel: {}",
                mutating.len(),
                writers.join("; ")
            ),
        ).with_hint("at most one branch may write: mark reviewers 'readonly: true' or give them only read tools (Read, Glob, Grep)"));
    }
}

/// `await` on a node that is no fan-out's convergence point, and `budget.max_parallel_branches` without any
/// fan-out, have no effect.
pub(super) fn fan_out_warnings(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let file = workflow.file.as_str();
    let fans: Vec<&Node> = workflow
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Router && matches!(mode(n), "fan_out_all" | "llm"))
        .collect();
    let convs: BTreeSet<String> = fans
        .iter()
        .filter_map(|f| {
            let targets: Vec<&str> = workflow
                .edges
                .iter()
                .filter(|e| e.from.value == f.name.value)
                .map(|e| e.to.as_str())
                .collect();
            convergence_point(workflow, &targets)
        })
        .collect();
    for n in &workflow.nodes {
        if let Some(a) = &n.await_mode
            && !convs.contains(&n.name.value)
        {
            out.push(warn_at(
                "X007",
                file,
                a.span,
                format!(
                    "'await' on '{}' has no effect: it is not where a fan-out converges",
                    n.name.value
                ),
            ));
        }
    }
    if fans.is_empty()
        && let Some(b) = &workflow.budget
        && b.max_parallel_branches.is_some()
    {
        out.push(warn_at(
            "X007",
            file,
            workflow.name.span,
            "'budget.max_parallel_branches' has no effect: the workflow has no fan_out_all router".into(),
        ));
    }
}
