//! Fan-out topology, shared by the executor and the executability check: where the branches of a fan-out
//! converge, and which branches may write to the workspace.
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use iterion_spec::model::{Node, NodeKind, Workflow};

use super::check::node_backend;

/// Tool names that only read (the reference's read-only list and the claude CLI's reading tools).
pub const READ_ONLY_TOOLS: &[&str] = &[
    "git_diff",
    "git_status",
    "read_file",
    "list_files",
    "search_codebase",
    "tree",
    "Read",
    "Glob",
    "Grep",
];

/// The distinct sources of the edges into each node (loop back edges included).
fn sources(wf: &Workflow) -> BTreeMap<&str, BTreeSet<&str>> {
    let mut m: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in &wf.edges {
        m.entry(e.to.as_str()).or_default().insert(e.from.as_str());
    }
    m
}

/// The convergence point of a fan-out to `targets` (in edge order): breadth-first from each target, the
/// first node that has `await` set or more than one distinct source. `done`/`fail` qualify like any node.
pub fn convergence_point(wf: &Workflow, targets: &[&str]) -> Option<String> {
    let src = sources(wf);
    let qualifies = |n: &str| {
        wf.node(n).is_some_and(|node| node.await_mode.is_some()) || src.get(n).is_some_and(|s| s.len() > 1)
    };
    for t in targets {
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut queue: VecDeque<&str> = VecDeque::from([*t]);
        while let Some(n) = queue.pop_front() {
            if !seen.insert(n) {
                continue;
            }
            if qualifies(n) {
                return Some(n.to_string());
            }
            for e in wf.edges.iter().filter(|e| e.from.value == n) {
                queue.push_back(e.to.as_str());
            }
        }
    }
    None
}

/// Whether one node may write to the workspace: a tool always; an agent or judge unless `readonly: true` or
/// its `tools` only read. Without `tools`, a claw agent has no tool at all while a `claude_code` agent has
/// every tool of the CLI.
pub fn is_mutating(wf: &Workflow, node: &Node, env: &BTreeMap<String, String>) -> bool {
    match node.kind {
        NodeKind::Tool => true,
        NodeKind::Agent | NodeKind::Judge => {
            if node.readonly == Some(true) {
                return false;
            }
            match &node.tools {
                Some(t) if !t.is_empty() => t.iter().any(|t| !READ_ONLY_TOOLS.contains(&t.value.as_str())),
                _ => node_backend(wf, node, env).0 != "claw",
            }
        }
        _ => false,
    }
}

/// The nodes a branch starting at `start` may execute: every node on a path from it up to (excluding) the
/// convergence point, not past `done`/`fail`.
pub fn branch_nodes<'w>(wf: &'w Workflow, start: &'w str, conv: Option<&str>) -> Vec<&'w Node> {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::new();
    let mut stack = vec![start];
    while let Some(n) = stack.pop() {
        if Some(n) == conv || n == "done" || n == "fail" || !seen.insert(n) {
            continue;
        }
        if let Some(node) = wf.node(n) {
            out.push(node);
        }
        for e in wf.edges.iter().filter(|e| e.from.value == n) {
            stack.push(e.to.as_str());
        }
    }
    out
}

/// The start nodes of the branches (of `starts`) that contain a mutating node.
pub fn mutating_branches<'s>(
    wf: &Workflow,
    starts: &[&'s str],
    conv: Option<&str>,
    env: &BTreeMap<String, String>,
) -> Vec<&'s str> {
    starts
        .iter()
        .copied()
        .filter(|s| branch_nodes(wf, s, conv).iter().any(|n| is_mutating(wf, n, env)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wf(src: &str) -> Workflow {
        let c = iterion_spec::check(src, "t.bot");
        assert!(!c.diagnostics.iter().any(|d| d.is_error()), "{:?}", c.diagnostics);
        c.workflows.into_iter().next().unwrap()
    }

    const FO: &str = "tool a:\n  command: \"true\"\n\ntool b:\n  command: \"true\"\n\nrouter fan:\n  mode: fan_out_all\n\ntool m:\n  command: \"true\"\n  await: wait_all\n\nworkflow w:\n  entry: fan\n  fan -> a\n  fan -> b\n  a -> m\n  b -> m\n  m -> done\n";

    #[test]
    fn convergence_is_the_first_node_with_await_or_two_sources() {
        let w = wf(FO);
        assert_eq!(convergence_point(&w, &["a", "b"]).as_deref(), Some("m"));
        let fo7 = "tool a:\n  command: \"true\"\n\ntool b:\n  command: \"true\"\n\nrouter fan:\n  mode: fan_out_all\n\nworkflow w:\n  entry: fan\n  fan -> a\n  fan -> b\n  a -> done\n  b -> done\n";
        assert_eq!(convergence_point(&wf(fo7), &["a", "b"]).as_deref(), Some("done"));
    }

    #[test]
    fn two_tool_branches_are_both_mutating() {
        let w = wf(FO);
        let env = BTreeMap::new();
        assert_eq!(mutating_branches(&w, &["a", "b"], Some("m"), &env), ["a", "b"]);
    }

    #[test]
    fn agents_without_tools_write_only_on_claude_code() {
        let src = |backend: &str| {
            format!(
                "agent a:\n  model: \"m\"\n  backend: \"{backend}\"\n\nagent b:\n  model: \"m\"\n  backend: \"{backend}\"\n\nrouter fan:\n  mode: fan_out_all\n\nworkflow w:\n  entry: fan\n  fan -> a\n  fan -> b\n  a -> done\n  b -> done\n"
            )
        };
        let env = BTreeMap::new();
        assert!(mutating_branches(&wf(&src("claw")), &["a", "b"], Some("done"), &env).is_empty());
        assert_eq!(
            mutating_branches(&wf(&src("claude_code")), &["a", "b"], Some("done"), &env),
            ["a", "b"]
        );
    }
}
