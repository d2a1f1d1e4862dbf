//! `iterion validate` as a binary: the project's `.mcp.json`, the executability check of `iterion run`
//! (`X…`, positioned on the construct that is refused), `--syntax-only`, and `sandbox doctor --strict`
//! failing on the same refusals.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

/// Runs `iterion ARGS` without any inherited `ITERION_*` variable, plus `env`.
fn iterion(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_iterion"));
    c.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("ITERION_") {
            c.env_remove(k);
        }
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run iterion")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A tool-only workflow `iterion run` executes, with `extra` workflow properties (indented by two).
fn workflow(extra: &str) -> String {
    format!("tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n{extra}  t -> done\n")
}

#[test]
fn mcp_servers_of_the_project_file_are_known() {
    let t28 = repo("fixtures/fidelity/t28dir/t28_mcp_server_from_project_mcp_json.bot");
    let t28 = t28.to_str().expect("utf-8");
    let o = iterion(&["validate", "--syntax-only", t28], &[]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    // turned off: the name is unknown
    for off in ["0", "false"] {
        let o = iterion(
            &["validate", "--syntax-only", t28],
            &[("ITERION_MCP_AUTOLOAD", off)],
        );
        assert_eq!(code(&o), 1, "{}", stdout(&o));
        assert!(
            stdout(&o).contains("error[C025]: mcp: node 'a': unknown MCP server 'fromproject'"),
            "{}",
            stdout(&o)
        );
    }
    let t27 = repo("fixtures/fidelity/t27_mcp_unknown_server.bot");
    let o = iterion(&["validate", "--syntax-only", t27.to_str().expect("utf-8")], &[]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(
        stdout(&o).contains("unknown MCP server 'ghost'"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn validate_reports_what_run_refuses_at_its_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ok = dir.path().join("ok.bot");
    std::fs::write(&ok, workflow("")).expect("write");
    let o = iterion(&["validate", ok.to_str().expect("utf-8")], &[]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));

    // `worktree: auto` runs now: validate accepts it
    let wt = dir.path().join("wt.bot");
    std::fs::write(&wt, workflow("  worktree: auto\n")).expect("write");
    let o = iterion(&["validate", wt.to_str().expect("utf-8")], &[]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));

    // `interaction: llm` (a model answering) is on line 6: the caret is there, not on the workflow name (line 4)
    let wt = dir.path().join("interaction.bot");
    std::fs::write(&wt, workflow("  interaction: llm\n")).expect("write");
    let wt = wt.to_str().expect("utf-8");
    let o = iterion(&["validate", wt], &[]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains("interaction.bot:6:16: error[X004]: 'interaction: llm' is not supported"),
        "{out}"
    );
    assert!(out.contains("invalid (1 error(s)"), "{out}");
    // the language alone is fine
    let o = iterion(&["validate", "--syntax-only", wt], &[]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    // JSON: the same diagnostic
    let o = iterion(&["validate", "--json", wt], &[]);
    assert_eq!(code(&o), 1);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["diagnostics"][0]["code"], "X004");
    assert_eq!(doc["diagnostics"][0]["line"], 6);

    // an agent on a backend this version does not have: refused by run, so by validate
    let agent = dir.path().join("agent.bot");
    let src = "agent a:\n  backend: \"BACKEND\"\n  model: \"m\"\n  system: p\n\nprompt p:\n  hi\n\nworkflow w:\n  entry: a\n  a -> done\n";
    std::fs::write(&agent, src.replace("BACKEND", "gemini_cli")).expect("write");
    let agent = agent.to_str().expect("utf-8");
    let o = iterion(&["validate", agent], &[]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains("error[X002]"), "{}", stdout(&o));
    assert_eq!(code(&iterion(&["validate", "--syntax-only", agent], &[])), 0);
    // codex runs (on the host only): the compiler's discouragement is a warning
    let on_host = src
        .replace("BACKEND", "codex")
        .replace("  entry: a\n", "  entry: a\n  sandbox: none\n");
    std::fs::write(agent, on_host).expect("write");
    let o = iterion(&["validate", agent], &[]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    assert!(stdout(&o).contains("warning[C030]"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("X002"), "{}", stdout(&o));
}

/// A codex node that a plain `iterion run` would place in a container is refused by that run; `validate`
/// reports the same refusal (`X011`, at the node's backend, with the run's message and hint) for every kind
/// of node that can run codex, and `sandbox doctor --strict` fails `spec_valid` with it.
#[test]
fn validate_and_doctor_refuse_a_codex_node_placed_in_a_container() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = "schema r:\n  ok: bool\n\nagent a:\n  backend: \"codex\"\n  output: r\n\nworkflow w:\n  entry: a\nSANDBOX  a -> done\n";
    let router = "tool x:\n  command: \"true\"\n\ntool y:\n  command: \"true\"\n\nrouter r:\n  mode: llm\n  backend: \"codex\"\n\nworkflow w:\n  entry: r\nSANDBOX  r -> x\n  r -> y\n  x -> done\n  y -> done\n";
    let cases = [
        (agent, "a", "5:12"),
        (router, "r", "9:12"),
        (
            &*router
                .replace("  backend: \"codex\"\n", "")
                .replace("workflow w:\n", "workflow w:\n  default_backend: \"codex\"\n"),
            "r",
            "11:20",
        ),
    ];
    for (src, node, at) in cases {
        let file = dir.path().join(format!("{node}.bot"));
        let path = file.to_str().expect("utf-8");
        for sandbox in ["", "  sandbox: auto\n"] {
            std::fs::write(&file, src.replace("SANDBOX", sandbox)).expect("write");
            let o = iterion(&["validate", path], &[]);
            assert_eq!(code(&o), 1, "{}", stdout(&o));
            let out = stdout(&o);
            assert!(
                out.contains(&format!(
                    "{node}.bot:{at}: error[X011]: backend codex cannot run inside the iterion sandbox (it runs the host codex CLI with its own sandbox), and node '{node}' would run in a container"
                )),
                "{out}"
            );
            assert!(out.contains("hint: run with --sandbox none"), "{out}");
        }
        // on the host (the workflow's `sandbox: none`, or the machine default none): accepted
        std::fs::write(&file, src.replace("SANDBOX", "  sandbox: none\n")).expect("write");
        assert_eq!(code(&iterion(&["validate", path], &[])), 0);
        std::fs::write(&file, src.replace("SANDBOX", "")).expect("write");
        let o = iterion(&["validate", path], &[("ITERION_SANDBOX_DEFAULT", "none")]);
        assert_eq!(code(&o), 0, "{}", stdout(&o));
    }
    // the doctor resolves the plan as the run does, flags included
    let sock = format!("unix://{}", dir.path().join("absent.sock").display());
    let home = dir.path().display().to_string();
    let env = [
        ("DOCKER_HOST", sock.as_str()),
        ("CONTAINER_HOST", sock.as_str()),
        ("XDG_RUNTIME_DIR", home.as_str()),
        ("HOME", home.as_str()),
    ];
    let file = dir.path().join("r.bot");
    std::fs::write(&file, router.replace("SANDBOX", "  sandbox: auto\n")).expect("write");
    let doctor = |extra: &[&str]| {
        let mut args = vec![
            "sandbox",
            "doctor",
            "--strict",
            file.to_str().expect("utf-8"),
            "--json",
        ];
        args.extend(["--target", "local"]);
        args.extend(extra);
        let o = iterion(&args, &env);
        let doc: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("json ({e}): {}", stdout(&o)));
        let check = doc["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .find(|c| c["id"] == "spec_valid")
            .expect("spec_valid")
            .clone();
        (code(&o), check)
    };
    let (c, check) = doctor(&[]);
    assert_eq!(c, 1, "{check}");
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check.to_string().contains("node 'r' would run in a container"),
        "{check}"
    );
    let (_, check) = doctor(&["--sandbox", "none"]);
    assert_ne!(check["status"], "fail", "{check}");
}

#[test]
fn doctor_strict_fails_on_what_run_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    // no engine reachable and a local target: the battery passes for a workflow run accepts
    let sock = format!("unix://{}", dir.path().join("absent.sock").display());
    let home = dir.path().display().to_string();
    let env = [
        ("DOCKER_HOST", sock.as_str()),
        ("CONTAINER_HOST", sock.as_str()),
        ("XDG_RUNTIME_DIR", home.as_str()),
        ("HOME", home.as_str()),
    ];
    let status = |doc: &serde_json::Value, id: &str| {
        doc["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no check {id}"))
            .clone()
    };
    let run = |name: &str, extra: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, workflow(extra)).expect("write");
        let args = [
            "sandbox",
            "doctor",
            "--strict",
            p.to_str().expect("utf-8"),
            "--json",
            "--target",
            "local",
        ];
        let o = iterion(&args, &env);
        let doc: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("json ({e}): {}", stdout(&o)));
        (code(&o), doc)
    };
    let (c, doc) = run("ok.bot", "");
    assert_eq!(c, 0, "{doc}");
    assert_eq!(status(&doc, "workflow_compiles")["status"], "pass");
    let (c, doc) = run("wt.bot", "  interaction: llm\n");
    assert_eq!(c, 1, "{doc}");
    let check = status(&doc, "workflow_compiles");
    assert_eq!(check["status"], "fail", "{check}");
    assert!(check.to_string().contains("X004"), "{check}");
}

#[test]
fn a_directory_stands_for_the_workflows_below_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("flows/nested")).expect("mkdir");
    std::fs::create_dir_all(dir.path().join(".hidden")).expect("mkdir");
    std::fs::write(dir.path().join("flows/a.bot"), workflow("")).expect("write");
    std::fs::write(dir.path().join("flows/nested/b.iter"), workflow("")).expect("write");
    std::fs::write(dir.path().join("flows/notes.txt"), "not a workflow").expect("write");
    std::fs::write(dir.path().join(".hidden/c.bot"), "garbage").expect("write");
    let o = iterion(&["validate", dir.path().to_str().expect("utf-8")], &[]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let out = stdout(&o);
    assert!(out.contains("a.bot: ok") && out.contains("b.iter: ok"), "{out}");
    assert!(!out.contains("c.bot") && !out.contains("notes.txt"), "{out}");
    let empty = tempfile::tempdir().expect("tempdir");
    let o = iterion(&["validate", empty.path().to_str().expect("utf-8")], &[]);
    assert_eq!(code(&o), 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no .bot or .iter file in"));
}

#[test]
fn mcp_servers_run_on_claude_code_nodes_only() {
    // t28's agent is a claw node: its project server is refused by run, so by validate
    let t28 = repo("fixtures/fidelity/t28dir/t28_mcp_server_from_project_mcp_json.bot");
    let o = iterion(&["validate", t28.to_str().expect("utf-8")], &[]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains("error[X004]: MCP servers on 'a' (fromproject) are not supported on claw nodes")
            && out.contains("hint: MCP servers are supported on claude_code nodes"),
        "{out}"
    );
    // the same on a claude_code node, with a project server and a declared one: accepted
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join(".mcp.json"),
        r#"{"mcpServers": {"fromproject": {"command": "echo", "args": ["hi"]}}}"#,
    )
    .expect("write");
    let file = dir.path().join("cc.bot");
    std::fs::write(
        &file,
        "mcp_server mine:\n  transport: stdio\n  command: \"srv\"\n\nagent a:\n  backend: \"claude_code\"\n  session: inherit_if_available\n  mcp:\n    servers: [mine]\n\nworkflow w:\n  entry: a\n  a -> done\n",
    )
    .expect("write");
    let o = iterion(&["validate", file.to_str().expect("utf-8")], &[]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

#[test]
fn diagnostics_are_coloured_on_a_terminal_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.bot");
    std::fs::write(&bad, "workflow w:\n  entry: a\n  a -> don\n").expect("write");
    let on_tty = |no_color: Option<&str>| {
        let mut c = std::process::Command::new("script");
        c.args([
            "-qec",
            &format!("{} validate {}", env!("CARGO_BIN_EXE_iterion"), bad.display()),
            "/dev/null",
        ]);
        c.env_remove("NO_COLOR");
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        String::from_utf8_lossy(&c.output().expect("script (util-linux)").stdout).into_owned()
    };
    let coloured = on_tty(None);
    assert!(coloured.contains("\x1b[1;31merror["), "{coloured:?}");
    let plain = on_tty(Some("1"));
    assert!(plain.contains("error[") && !plain.contains('\x1b'), "{plain:?}");
    // piped: never
    let o = iterion(&["validate", bad.to_str().expect("utf-8")], &[]);
    assert!(!stdout(&o).contains('\x1b'), "{}", stdout(&o));
}
