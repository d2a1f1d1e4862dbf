//! The executability check (05 §10.1; XC1, XC2 of §12.11).
mod exec_common;

use std::collections::BTreeMap;

use exec_common::compile;
use iterion_runtime::exec::check_executable;

/// Rendered headers of the `X…` diagnostics of a workflow that compiles.
fn check(src: &str, env: &[(&str, &str)], expect: &[&str]) {
    let wf = compile(src);
    let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let got: Vec<String> = check_executable(&wf, &env)
        .iter()
        .map(|d| d.render_header())
        .collect();
    assert_eq!(got, expect, "{src}");
}

const CC: &str = "  backend: \"claude_code\"\n";

#[test]
fn xc1_compute_nodes_and_llm_routers_run_on_executable_backends() {
    check(
        "tool t:\n  command: `true`\n\ncompute c:\n  expr:\n    x: \"1 + 1\"\n\nworkflow w:\n  entry: t\n  t -> c\n  c -> done\n",
        &[],
        &[],
    );
    check(
        "agent x:\n  backend: \"claude_code\"\n\nagent y:\n  backend: \"claude_code\"\n\nrouter r:\n  mode: llm\n  model: \"m\"\n\nworkflow w:\n  entry: r\n  r -> x\n  r -> y\n  x -> done\n  y -> done\n",
        &[],
        &[],
    );
    check(
        "agent x:\n  backend: \"claude_code\"\n\nagent y:\n  backend: \"claude_code\"\n\nrouter r:\n  mode: llm\n  backend: \"codex\"\n\nworkflow w:\n  entry: r\n  r -> x\n  r -> y\n  x -> done\n  y -> done\n",
        &[],
        &[],
    );
    check(
        "agent x:\n  backend: \"claude_code\"\n\nagent y:\n  backend: \"claude_code\"\n\nrouter r:\n  mode: llm\n  backend: \"gemini_cli\"\n\nworkflow w:\n  entry: r\n  r -> x\n  r -> y\n  x -> done\n  y -> done\n",
        &[],
        &[
            "test.bot:9:12: error[X002]: llm router 'r': backend 'gemini_cli' is not supported by this runtime",
        ],
    );
}

#[test]
fn xc2_backends() {
    let wf = |backend: &str| {
        format!("agent a:\n  backend: \"{backend}\"\n\nworkflow w:\n  entry: a\n  a -> done\n")
    };
    // codex runs the host CLI: accepted here, refused at launch when the node would be sandboxed
    check(&wf("codex"), &[], &[]);
    check(
        &wf("gemini_cli"),
        &[],
        &["test.bot:2:12: error[X002]: backend 'gemini_cli' is not supported by this runtime"],
    );
    check(&wf("claude_code"), &[], &[]);
    // expanded from the launching environment
    check(&wf("${B:-claude_code}"), &[], &[]);
    check(&wf("${B:-claude_code}"), &[("B", "codex")], &[]);
    check(
        &wf("${B:-claude_code}"),
        &[("B", "gemini_cli")],
        &["test.bot:2:12: error[X002]: backend 'gemini_cli' is not supported by this runtime"],
    );
    // the default backend is claw: executed with a provider the runner speaks and builtin tools only
    check(
        "agent a:\n  model: \"m\"\n\nworkflow w:\n  entry: a\n  a -> done\n",
        &[],
        &[],
    );
    check(
        "agent a:\n  model: \"claude-sonnet-4-5\"\n  tools: [bash, write_file]\n\nworkflow w:\n  entry: a\n  a -> done\n",
        &[],
        &[],
    );
    check(
        "agent a:\n  model: \"groq/llama-3\"\n\nworkflow w:\n  entry: a\n  a -> done\n",
        &[],
        &[],
    );
    check(
        "agent a:\n  model: \"m\"\n  provider: \"${P}\"\n\nworkflow w:\n  entry: a\n  a -> done\n",
        &[("P", "gemini")],
        &["test.bot:3:13: error[X002]: claw provider 'gemini' is not supported (anthropic, openai)"],
    );
    check(
        "agent a:\n  model: \"m\"\n  tools: [bash, mcp.github.search]\n\nworkflow w:\n  entry: a\n  a -> done\n",
        &[],
        &[
            "test.bot:3:17: error[X006]: tool 'mcp.github.search' is not available to claw agents in this version",
        ],
    );
    // an unknown backend is refused, naming the ones that run
    let d = check_executable(
        &compile("agent a:\n  backend: \"gemini_cli\"\n\nworkflow w:\n  entry: a\n  a -> done\n"),
        &BTreeMap::new(),
    );
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].hint.as_deref(), Some("supported: claw, claude_code, codex"));
    // workflow default_backend applies
    check(
        "agent a:\n  model: \"m\"\n\nworkflow w:\n  entry: a\n  default_backend: \"claude_code\"\n  a -> done\n",
        &[],
        &[],
    );
}

#[test]
fn xc2_session_interaction_and_capabilities() {
    // claude_code nodes run every session mode; claw nodes keep refusing anything but fresh
    for mode in ["inherit", "inherit_if_available", "fork", "artifacts_only"] {
        check(
            &format!("agent a:\n{CC}  session: {mode}\n\nworkflow w:\n  entry: a\n  a -> done\n"),
            &[],
            &[],
        );
    }
    check(
        "agent a:\n  model: \"m\"\n  session: inherit\n\nworkflow w:\n  entry: a\n  a -> done\n",
        &[],
        &["test.bot:3:12: error[X003]: 'session: inherit' on 'a' is not supported in this version"],
    );
    check(
        &format!("agent a:\n{CC}  session: fresh\n\nworkflow w:\n  entry: a\n  a -> done\n"),
        &[],
        &[],
    );
}

#[test]
fn xc2_mcp_server_refused_and_attachments_executed() {
    let src = format!(
        "mcp_server gh:\n  transport: stdio\n  command: \"gh-mcp\"\n\nagent a:\n{CC}  mcp:\n    servers: [gh]\n\nworkflow w:\n  entry: a\n  a -> done\n"
    );
    check(&src, &[], &[]);
    // the same server on a claw node stays refused, with where MCP servers work
    let claw = src.replace(CC, "  model: \"m\"\n");
    let wf = compile(&claw);
    let d = check_executable(&wf, &BTreeMap::new());
    assert_eq!(
        d.iter().map(|d| d.render_header()).collect::<Vec<_>>(),
        [
            "test.bot:8:15: error[X004]: MCP servers on 'a' (gh) are not supported on claw nodes in this version"
        ]
    );
    assert!(
        d[0].hint
            .as_deref()
            .unwrap()
            .starts_with("MCP servers are supported on claude_code nodes")
    );
    // http/sse servers and auth blocks are refused on claude_code nodes
    check(
        &format!(
            "mcp_server web:\n  transport: http\n  url: \"https://mcp.example.com\"\n\nagent a:\n{CC}\nworkflow w:\n  entry: a\n  mcp:\n    servers: [web]\n  a -> done\n"
        ),
        &[],
        &[
            "test.bot:5:7: error[X004]: MCP server 'web' on 'a': http servers are not supported in this version",
        ],
    );
    check(
        &format!(
            "mcp_server gh:\n  transport: stdio\n  command: \"gh-mcp\"\n  auth:\n    type: \"oauth2\"\n    auth_url: \"https://a.example.com/auth\"\n    token_url: \"https://a.example.com/token\"\n    client_id: \"c\"\n\nagent a:\n{CC}  mcp:\n    servers: [gh]\n\nworkflow w:\n  entry: a\n  a -> done\n"
        ),
        &[],
        &[
            "test.bot:13:15: error[X004]: MCP server 'gh' on 'a': 'auth' blocks are not supported in this version",
        ],
    );
    // a node block without servers (inherit: false) is fine
    check(
        &format!("agent a:\n{CC}  mcp:\n    inherit: false\n\nworkflow w:\n  entry: a\n  a -> done\n"),
        &[],
        &[],
    );

    // attachments are executed: neither the declaration nor a placeholder (prompt, command, `with`, `.url`)
    // is refused any more (X004 / X005 used to)
    let src = format!(
        "attachments:\n  doc: file\n    required: true\n\nprompt p:\n  Read {{{{attachments.doc}}}} {{{{attachments.doc.url}}}}\n\nagent a:\n{CC}  user: p\n\ntool t:\n  command: `wc -c {{{{attachments.doc.path}}}}`\n\nworkflow w:\n  entry: t\n  attachments:\n    extra: image\n  t -> a with {{ size: \"{{{{attachments.doc.size}}}}\" }}\n  a -> done\n"
    );
    let wf = compile(&src);
    let d = check_executable(&wf, &BTreeMap::new());
    assert!(d.is_empty(), "{d:#?}");
}

#[test]
fn executable_workflow_has_no_diagnostic() {
    check(
        "tool a:\n  command: `echo hi`\n\nworkflow w:\n  entry: a\n  budget:\n    max_iterations: 3\n  a -> done\n",
        &[],
        &[],
    );
}

#[test]
fn x007_fan_out_properties_are_warnings() {
    let src = "tool a:\n  command: `true`\n  await: wait_all\n\nworkflow w:\n  entry: a\n  budget:\n    max_parallel_branches: 4\n  a -> done\n";
    let wf = compile(src);
    let d = check_executable(&wf, &BTreeMap::new());
    let got: Vec<(String, bool)> = d.iter().map(|d| (d.render_header(), d.is_error())).collect();
    assert_eq!(
        got,
        [
            (
                "test.bot:3:10: warning[X007]: 'await' on 'a' has no effect: it is not where a fan-out converges"
                    .to_string(),
                false
            ),
            (
                "test.bot:5:10: warning[X007]: 'budget.max_parallel_branches' has no effect: the workflow has no fan_out_all router"
                    .to_string(),
                false
            ),
        ]
    );
}

#[test]
fn x003_memory_and_inherited_capabilities() {
    let src = format!(
        "agent a:\n{CC}  memory:\n    enabled: true\n    scope: \"repo\"\n\nworkflow w:\n  entry: a\n  capabilities: [web]\n  a -> done\n"
    );
    let wf = compile(&src);
    let msgs: Vec<String> = check_executable(&wf, &BTreeMap::new())
        .iter()
        .filter(|d| d.is_error())
        .map(|d| format!("{} {}", d.code, d.message))
        .collect();
    assert_eq!(
        msgs,
        [
            "X003 'memory.enabled: true' on 'a' is not supported in this version",
            "X003 'capabilities: [web] (inherited from the workflow)' on 'a' is not supported in this version"
        ]
    );
}

#[test]
fn worktree_auto_is_executable() {
    // `worktree: auto` runs in a git worktree of the repository (it used to be refused with X004 at 6:13)
    for value in ["auto", "none"] {
        check(
            &format!(
                "tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  worktree: {value}\n  t -> done\n"
            ),
            &[],
            &[],
        );
    }
}
