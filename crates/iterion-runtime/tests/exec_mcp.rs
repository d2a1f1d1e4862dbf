//! MCP servers on `claude_code` nodes (09 §6; MC2, MC3 of §9.5) with the fake agent CLI on the `NoopDriver`:
//! the per-node `--mcp-config` file, its content and mode during the call, its removal, and tool names.
mod exec_common;

use std::collections::BTreeMap;

use exec_common::{FakeAgent, cli_reply, summary};
use iterion_runtime::events::PlacementKind;
use serde_json::{Value, json};

const MC2: &str = "mcp_server s:\n  transport: stdio\n  command: \"srv\"\n  args: [\"--flag\"]\n\nmcp_server other:\n  transport: stdio\n  command: \"other\"\n\nagent a:\n  backend: \"claude_code\"\n  tools: [Read, mcp.s.search, mcp.s.*]\n\nagent b:\n  backend: \"claude_code\"\n  mcp:\n    inherit: false\n\nworkflow w:\n  entry: a\n  mcp:\n    servers: [s]\n  a -> b\n  b -> done\n";

/// The value after `flag` in call `n`.
fn flag_value(a: &FakeAgent, n: usize, flag: &str) -> Option<String> {
    let argv = a.argv_of(n);
    let i = argv.iter().position(|x| x == flag)?;
    argv.get(i + 1).cloned()
}

fn mcp_file(a: &FakeAgent, n: usize) -> Value {
    serde_json::from_str(&a.file(&format!("mcp.{n}"))).unwrap_or(Value::Null)
}

#[tokio::test]
async fn mc2_host_node_gets_only_its_servers_in_a_private_file_removed_after_the_call() {
    let mut a = FakeAgent::new(&cli_reply("{}", None));
    let tmp = tempfile::tempdir().unwrap();
    a.h = a.h.env("TMPDIR", &tmp.path().to_string_lossy());
    let out = a.h.run(MC2).await;
    assert_eq!(summary(&out), "finished", "{:#?}", a.h.rec.lines());
    let path = flag_value(&a, 0, "--mcp-config").unwrap();
    let argv = a.argv_of(0);
    assert_eq!(
        argv[argv.len() - 5..],
        [
            "--permission-mode",
            "acceptEdits",
            "--mcp-config",
            path.as_str(),
            "--strict-mcp-config"
        ]
    );
    // only the node's active set (s, not the declared but unused 'other'), the 6.2 shape
    assert_eq!(
        mcp_file(&a, 0),
        json!({"mcpServers": {"s": {"type": "stdio", "command": "srv", "args": ["--flag"]}}})
    );
    assert_eq!(a.file("mcp-mode.0").trim(), "600");
    assert!(path.starts_with(&*tmp.path().to_string_lossy()), "{path}");
    assert!(
        !std::path::Path::new(&path).exists(),
        "the config file was not removed"
    );
    // MCP tool names as the CLI spells them
    assert_eq!(
        flag_value(&a, 0, "--allowedTools").as_deref(),
        Some("Read,mcp__s__search,mcp__s")
    );
    // b does not inherit the workflow's servers: no config at all
    let b = a.argv_of(1);
    assert!(!b.iter().any(|x| x.contains("mcp")), "{b:?}");
}

#[tokio::test]
async fn mc2_sandboxed_node_config_is_written_through_the_exec_api() {
    let mut a = FakeAgent::new(&cli_reply("{}", None));
    a.h = a.h.placed("a", PlacementKind::Run);
    let out = a.h.run(MC2).await;
    assert_eq!(summary(&out), "finished", "{:#?}", a.h.rec.lines());
    let path = flag_value(&a, 0, "--mcp-config").unwrap();
    assert!(
        path.starts_with("/tmp/iterion-mcp-") && path.ends_with(".json"),
        "{path}"
    );
    assert_eq!(mcp_file(&a, 0)["mcpServers"]["s"]["command"], json!("srv"));
    assert_eq!(a.file("mcp-mode.0").trim(), "600");
    assert!(
        !std::path::Path::new(&path).exists(),
        "the config file was not removed"
    );
    assert!(flag_value(&a, 0, "--permission-mode").as_deref() == Some("bypassPermissions"));
}

#[tokio::test]
async fn mc2_env_values_are_in_the_file_and_never_on_the_command_line() {
    let src = "agent a:\n  backend: \"claude_code\"\n\nworkflow w:\n  entry: a\n  a -> done\n";
    let mut wf = exec_common::compile(src);
    wf.project_mcp_servers = iterion_spec::compile::read_mcp_json(
        r#"{"mcpServers": {"gh": {"command": "gh-mcp", "env": {"GH_TOKEN": "secret-value-123"}}}}"#,
        ".mcp.json",
    )
    .0;
    let mut a = FakeAgent::new(&cli_reply("{}", None));
    let out = a.h.run_workflow(wf).await;
    assert_eq!(summary(&out), "finished");
    assert_eq!(
        mcp_file(&a, 0),
        json!({"mcpServers": {"gh": {"type": "stdio", "command": "gh-mcp", "env": {"GH_TOKEN": "secret-value-123"}}}})
    );
    assert!(a.argv_of(0).iter().all(|x| !x.contains("secret-value-123")));
    let events = serde_json::to_string(&a.h.rec.lines()).unwrap();
    assert!(!events.contains("secret-value-123"));
}

/// A workflow file next to a `.mcp.json` with server `s`; the node lists `extra` servers.
fn project(extra: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".mcp.json"),
        r#"{"mcpServers": {"s": {"command": "true"}}}"#,
    )
    .unwrap();
    let file = dir.path().join("wf.bot");
    std::fs::write(
        &file,
        format!("agent a:\n  backend: \"claude_code\"\n  mcp:\n    servers: [{extra}]\n\nworkflow w:\n  entry: a\n  a -> done\n"),
    )
    .unwrap();
    (dir, file)
}

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn mc3_autoload_off_ignores_the_project_servers() {
    let (dir, file) = project("s");
    // autoload on: the project server is known and handed to the node
    let c = iterion_runtime::api::compile(&file, dir.path(), &env(&[])).unwrap();
    assert!(!c.has_errors(), "{:#?}", c.diagnostics);
    let mut a = FakeAgent::new(&cli_reply("{}", None));
    assert_eq!(summary(&a.h.run_workflow(c.workflow.unwrap()).await), "finished");
    assert_eq!(
        mcp_file(&a, 0),
        json!({"mcpServers": {"s": {"type": "stdio", "command": "true"}}})
    );
    // autoload off: `s` is unknown, and a node that does not name it gets no MCP config
    for off in ["0", "false"] {
        let c =
            iterion_runtime::api::compile(&file, dir.path(), &env(&[("ITERION_MCP_AUTOLOAD", off)])).unwrap();
        assert!(c.has_errors());
        assert!(
            c.diagnostics
                .iter()
                .any(|d| d.is_error() && d.message.contains("unknown MCP server 's'")),
            "{:#?}",
            c.diagnostics
        );
    }
    let (dir, file) = project("");
    let c = iterion_runtime::api::compile(&file, dir.path(), &env(&[("ITERION_MCP_AUTOLOAD", "0")])).unwrap();
    assert!(!c.has_errors(), "{:#?}", c.diagnostics);
    let wf = c.workflow.unwrap();
    assert!(wf.project_mcp_servers.is_empty());
    let mut a = FakeAgent::new(&cli_reply("{}", None));
    assert_eq!(summary(&a.h.run_workflow(wf).await), "finished");
    assert!(!a.argv_of(0).iter().any(|x| x.contains("mcp")));
}

#[test]
fn mc1_unknown_server_is_a_check_time_error() {
    let (dir, file) = project("t");
    let c = iterion_runtime::api::compile(&file, dir.path(), &env(&[])).unwrap();
    let errors: Vec<String> = c
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.render_header())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].contains("unknown MCP server 't'"), "{errors:#?}");
    // an invalid .mcp.json is an error too
    std::fs::write(dir.path().join(".mcp.json"), "{not json").unwrap();
    let c = iterion_runtime::api::compile(&file, dir.path(), &env(&[])).unwrap();
    assert!(
        c.diagnostics
            .iter()
            .any(|d| d.is_error() && d.message.starts_with("cannot read .mcp.json")),
        "{:#?}",
        c.diagnostics
    );
}
