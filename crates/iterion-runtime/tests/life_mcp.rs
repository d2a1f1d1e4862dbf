//! MCP servers through the whole run (09 §6; MC1 and MC4 of §9.5): the unknown-server refusal before any run
//! record, and the health check before the first node, on the host and in a (fake) container.
mod life_common;

use std::path::{Path, PathBuf};

use iterion_runtime::api::RunOptions;
use iterion_runtime::failure::FailureCode;
use iterion_runtime::lifecycle::DriverChoice;
use iterion_runtime::status::RunStatus;
use life_common::*;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn server_script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp-server.sh")
        .to_string_lossy()
        .into_owned()
}

/// An agent CLI that needs no environment: records that it ran and the path of its MCP config, answers `{}`.
fn agent_cli(dir: &Path) -> (String, PathBuf) {
    let log = dir.join("agent-calls");
    let bin = dir.join("claude");
    std::fs::write(
        &bin,
        format!(
            "#!/bin/sh\ncat >/dev/null\necho \"$*\" >> '{}'\necho '{{\"result\":\"{{}}\",\"session_id\":\"s1\"}}'\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin.to_string_lossy().into_owned(), log)
}

/// A claude_code node `a` with workflow server `srv` running `command args`; `sandbox` lines go in the workflow.
fn workflow(command: &str, args: &[&str], sandbox: &str) -> String {
    let args = args
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "mcp_server srv:\n  transport: stdio\n  command: \"{command}\"\n  args: [{args}]\n\nagent a:\n  backend: \"claude_code\"\n\nworkflow w:\n  entry: a\n{sandbox}  mcp:\n    servers: [srv]\n  a -> done\n"
    )
}

const INLINE: &str = "  sandbox:\n    image: \"alpine:3\"\n";

#[test]
fn mc4_a_server_that_exits_fails_the_run_before_the_first_node() {
    let fx = Fixture::new(&workflow("true", &[], ""));
    let (bin, calls) = agent_cli(fx.dir.path());
    let o = rt()
        .block_on(
            fx.runtime(DriverChoice::ForcedNoop, &[("ITERION_CLAUDE_BIN", &bin)], false)
                .launch(fx.launch()),
        )
        .unwrap();
    assert_eq!(o.failure_code, Some(FailureCode::ExecutionFailed), "{o:?}");
    let error = o.error.clone().unwrap();
    assert!(
        error.starts_with("MCP health check failed: server 'srv' (on the host): "),
        "{error}"
    );
    let ev = fx.events(&o);
    assert!(
        !types(&ev).contains(&"node_started".to_string()),
        "{:?}",
        types(&ev)
    );
    assert_eq!(first(&ev, "run_failed").data["code"], "EXECUTION_FAILED");
    assert!(!calls.exists(), "the agent ran");
}

#[test]
fn mc4_a_server_that_answers_passes_and_the_check_can_be_turned_off() {
    let fx = Fixture::new("");
    let mark = fx.dir.path().join("started");
    let mark_s = mark.to_string_lossy().into_owned();
    std::fs::write(&fx.file, workflow("sh", &[&server_script(), &mark_s], "")).unwrap();
    let (bin, calls) = agent_cli(fx.dir.path());
    let o = rt()
        .block_on(
            fx.runtime(DriverChoice::ForcedNoop, &[("ITERION_CLAUDE_BIN", &bin)], false)
                .launch(fx.launch()),
        )
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    // started once, by the health check (the stand-in CLI starts no server)
    assert_eq!(std::fs::read_to_string(&mark).unwrap(), "started\n");
    let call = std::fs::read_to_string(&calls).unwrap();
    assert!(
        call.contains("--mcp-config") && call.ends_with("--strict-mcp-config\n"),
        "{call}"
    );

    // ITERION_MCP_HEALTHCHECK=0: a broken server does not stop the run
    for off in ["0", "false"] {
        let fx = Fixture::new(&workflow("true", &[], ""));
        let (bin, _) = agent_cli(fx.dir.path());
        let o = rt()
            .block_on(
                fx.runtime(
                    DriverChoice::ForcedNoop,
                    &[("ITERION_CLAUDE_BIN", &bin), ("ITERION_MCP_HEALTHCHECK", off)],
                    false,
                )
                .launch(fx.launch()),
            )
            .unwrap();
        assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    }
}

#[test]
fn mc4_the_check_runs_where_the_node_runs() {
    // the fake container driver runs execs on the host, through the sandbox's exec API
    let fx = Fixture::new(&workflow("sh", &["-c", "echo gone >&2; exit 3"], INLINE));
    let (bin, calls) = agent_cli(fx.dir.path());
    let fake = FakeDriver::new(Faults::default());
    let o = rt()
        .block_on(
            fx.runtime(container(&fake), &[("ITERION_CLAUDE_BIN", &bin)], false)
                .launch(fx.launch()),
        )
        .unwrap();
    assert_eq!(o.failure_code, Some(FailureCode::ExecutionFailed), "{o:?}");
    let error = o.error.clone().unwrap();
    assert!(
        error.starts_with("MCP health check failed: server 'srv' (in the sandbox): ")
            && error.contains("exit 3")
            && error.contains("gone"),
        "{error}"
    );
    let ev = fx.events(&o);
    let t = types(&ev);
    assert!(
        t.contains(&"sandbox_started".to_string()) && !t.contains(&"node_started".to_string()),
        "{t:?}"
    );
    assert!(
        fake.calls().iter().any(|c| c.starts_with("cleanup")),
        "{:?}",
        fake.calls()
    );
    assert!(!calls.exists());
}

#[test]
fn mc1_unknown_server_refused_before_any_run_record() {
    let fx = Fixture::new(
        "agent a:\n  backend: \"claude_code\"\n  mcp:\n    servers: [t]\n\nworkflow w:\n  entry: a\n  a -> done\n",
    );
    fx.write(".mcp.json", r#"{"mcpServers": {"s": {"command": "true"}}}"#);
    let rt_ = fx.runtime(DriverChoice::ForcedNoop, &[], false);
    let err = rt()
        .block_on(rt_.run(&fx.file, RunOptions::new(&fx.work)))
        .unwrap_err();
    let text = match &err {
        iterion_runtime::Error::Compile { diagnostics, .. } => diagnostics
            .iter()
            .map(|d| d.render_header())
            .collect::<Vec<_>>()
            .join("\n"),
        other => panic!("{other:?}"),
    };
    assert!(text.contains("unknown MCP server 't'"), "{text}");
    let runs = fx.store.join("runs");
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none(),
        "a run record was created"
    );
}

#[test]
fn project_servers_are_read_again_on_resume() {
    let fx = Fixture::new("agent a:\n  backend: \"claude_code\"\n\nworkflow w:\n  entry: a\n  a -> done\n");
    fx.write(".mcp.json", r#"{"mcpServers": {"proj": {"command": "true"}}}"#);
    let (bin, calls) = agent_cli(fx.dir.path());
    let env = [("ITERION_CLAUDE_BIN", bin.as_str())];
    let o = rt()
        .block_on(
            fx.runtime(DriverChoice::ForcedNoop, &env, false)
                .run(&fx.file, RunOptions::new(&fx.work)),
        )
        .unwrap();
    assert_eq!(o.status, RunStatus::FailedResumable, "{o:?}");
    assert!(
        o.error
            .unwrap()
            .starts_with("MCP health check failed: server 'proj'")
    );
    // the project file is fixed; the resume reads it again
    let mark = fx.dir.path().join("started");
    fx.write(
        ".mcp.json",
        &serde_json::json!({"mcpServers": {"proj": {"command": "sh", "args": [server_script(), mark]}}})
            .to_string(),
    );
    let o = rt()
        .block_on(
            fx.runtime(DriverChoice::ForcedNoop, &env, false)
                .resume(iterion_runtime::lifecycle::Resume::new(&o.run_id, &fx.store)),
        )
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    assert_eq!(std::fs::read_to_string(&mark).unwrap(), "started\n");
    assert!(std::fs::read_to_string(&calls).unwrap().contains("--mcp-config"));
}
