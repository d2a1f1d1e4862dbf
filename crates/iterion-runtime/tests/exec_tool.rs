//! Tool nodes on the `NoopDriver` (05 §10.4, vectors TE1–TE14 of §12.8).
mod exec_common;

use exec_common::{Harness, summary};
use iterion_runtime::events::PlacementKind;
use iterion_runtime::exec::Shell;
use serde_json::json;

fn one_tool(command: &str) -> String {
    format!("tool t:\n  command: `{command}`\n\nworkflow w:\n  entry: t\n  t -> done\n")
}

/// Runs a one-node workflow whose entry input is `vars` and returns the node output.
async fn output_of(h: &mut Harness, command: &str) -> serde_json::Value {
    let out = h.run(&one_tool(command)).await;
    assert_eq!(summary(&out), "finished", "{:?}", h.rec.types());
    h.rec.of("node_finished")[0]["output"].clone()
}

#[tokio::test]
async fn te1_to_te7_values_reach_the_shell_as_single_words() {
    // each value is inserted quoted; printf shows the word boundaries the shell saw
    let cases = [
        (json!("O'Brien"), "[O'Brien]"),
        (json!(["a b", "c"]), "[a b][c]"),
        (json!([]), ""),
        (json!({"k": 1}), r#"[{"k":1}]"#),
        (json!(3), "[3]"),
        (json!(true), "[true]"),
        (json!("{{vars.secret}}"), "[{{vars.secret}}]"),
        (json!("$(touch pwned); `id`"), "[$(touch pwned); `id`]"),
    ];
    for (v, expect) in cases {
        let mut h = Harness::new();
        h.vars.insert("v".into(), v.clone());
        h.vars.insert("secret".into(), json!("s3cr3t"));
        let out = output_of(&mut h, "for a in {{input.v}}; do printf '[%s]' \"$a\"; done").await;
        assert_eq!(out, json!({"result": expect}), "value {v}");
        assert!(!h.work_dir().join("pwned").exists());
    }
}

#[tokio::test]
async fn te6_missing_value_stays_verbatim_and_raw_is_null() {
    let mut h = Harness::new();
    h.vars.insert("other".into(), json!(1));
    let out = output_of(&mut h, "printf '%s|' '{{input.v}}' {{!input.v}}").await;
    assert_eq!(out, json!({"result": "{{input.v}}|null|"}));
}

#[tokio::test]
async fn te8_env_references_on_the_host() {
    let mut h = Harness::new().env("HOME", "/home/jo");
    let out = output_of(
        &mut h,
        "printf '%s' '${HOME}|${UNSET_X}|${UNSET_X:-d}|${x.y}|$HOME'",
    )
    .await;
    assert_eq!(out, json!({"result": "/home/jo|${UNSET_X}|d|${x.y}|$HOME"}));
}

#[tokio::test]
async fn te9_deny_class_names_are_not_expanded_into_a_container() {
    let src = "tool a:\n  command: `printf '%s' '${ANTHROPIC_API_KEY}|${NODE_ENV}'`\n\ntool b:\n  command: `printf '%s' '${ANTHROPIC_API_KEY}'`\n\nworkflow w:\n  entry: a\n  a -> b\n  b -> done\n";
    let mut h = Harness::new()
        .env("ANTHROPIC_API_KEY", "sk-host-secret")
        .env("NODE_ENV", "test")
        .placed("a", PlacementKind::Run)
        .placed("b", PlacementKind::Run);
    let out = h.run(src).await;
    assert_eq!(summary(&out), "finished");
    let outputs: Vec<_> = h
        .rec
        .of("node_finished")
        .into_iter()
        .map(|d| d["output"].clone())
        .collect();
    assert_eq!(
        outputs[..2],
        [
            json!({"result": "${ANTHROPIC_API_KEY}|test"}),
            json!({"result": "${ANTHROPIC_API_KEY}"})
        ]
    );
    let warnings: Vec<String> = h
        .rec
        .warnings()
        .into_iter()
        .filter(|w| w.contains("ANTHROPIC_API_KEY"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(!warnings[0].contains("sk-host-secret"));
    // the same reference on a host node is expanded
    let mut h = Harness::new().env("ANTHROPIC_API_KEY", "sk-host-secret");
    let out = output_of(&mut h, "printf '%s' '${ANTHROPIC_API_KEY}'").await;
    assert_eq!(out, json!({"result": "sk-host-secret"}));
}

#[tokio::test]
async fn te10_stdout_becomes_the_output() {
    for (cmd, expect) in [
        (r#"printf '{"ok": true}\n'"#, json!({"ok": true})),
        ("printf '[1,2]'", json!({"result": "[1,2]"})),
        ("printf '  hi \\n'", json!({"result": "hi"})),
    ] {
        let mut h = Harness::new();
        assert_eq!(output_of(&mut h, cmd).await, expect, "{cmd}");
    }
}

#[tokio::test]
async fn te11_non_zero_exit_is_retried_once_then_fails() {
    let mut h = Harness::new();
    let out = h.run(&one_tool("echo partial; echo boom >&2; exit 3")).await;
    assert_eq!(summary(&out), "EXECUTION_FAILED node=t checkpoint=t");
    let errors = h.rec.of("tool_error");
    assert_eq!(errors.len(), 2);
    assert_eq!(errors[0]["tool"], "shell:t");
    assert_eq!(errors[0]["exit_code"], 3);
    let msg = errors[0]["error"].as_str().unwrap();
    assert!(
        msg.contains("tool node 't': command exited with status 3"),
        "{msg}"
    );
    assert!(msg.contains("boom") && msg.contains("partial"), "{msg}");
    let rec = h.rec.of("node_recovery");
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0]["code"], "EXECUTION_FAILED");
    assert_eq!(rec[0]["attempt"], 1);
    assert_eq!(rec[0]["delay_ms"], 2000);
    assert_eq!(
        h.rec.types(),
        [
            "node_started[t]",
            "tool_started[t]",
            "tool_error[t]",
            "node_recovery[t]",
            "node_started[t]",
            "tool_started[t]",
            "tool_error[t]"
        ]
    );
    let iterations: Vec<_> = h
        .rec
        .of("node_started")
        .into_iter()
        .map(|d| d["iteration"].clone())
        .collect();
    assert_eq!(iterations, [json!(0), json!(1)]);
    match out {
        iterion_runtime::exec::ExecOutcome::Failed { failure, .. } => {
            assert!(failure.resumable);
            assert!(failure.error.contains("boom"));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn te12_image_without_bash_uses_sh() {
    let mut h = Harness::new();
    h.shell = Shell::Sh;
    assert_eq!(
        output_of(&mut h, "printf '%s' \"$0\"").await,
        json!({"result": "sh"})
    );
    let mut h = Harness::new();
    assert_eq!(
        output_of(&mut h, "printf '%s' \"$0\"").await,
        json!({"result": "bash"})
    );
}

fn script_wf(body: &str, lang: &str) -> String {
    format!("tool s:\n  language: {lang}\n  script: `{body}`\n\nworkflow w:\n  entry: s\n  s -> done\n")
}

fn leftover_scripts(h: &Harness) -> Vec<String> {
    std::fs::read_dir(h.work_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".iterion-script-"))
        .collect()
}

/// TE13 in a container placement: the file is in the work dir while it runs, and removed afterwards (also after
/// a failure).
#[tokio::test]
async fn te13_python_script_file_lives_only_during_execution() {
    let body = "import os, json, sys\nfiles = [f for f in os.listdir('.') if f.startswith('.iterion-script-')]\nprint(json.dumps({'files': files, 'v': {{input.v}}, 'raw': '{{!input.w}}', 'exe': os.path.basename(sys.executable).startswith('python')}))";
    let mut h = Harness::new().placed("s", PlacementKind::Run);
    h.vars.insert("v".into(), json!("it's"));
    h.vars.insert("w".into(), json!("plain"));
    let out = h.run(&script_wf(body, "py")).await;
    assert_eq!(summary(&out), "finished", "{:?}", h.rec.lines());
    let o = &h.rec.of("node_finished")[0]["output"];
    let files = o["files"].as_array().unwrap();
    assert_eq!(files.len(), 1);
    let name = files[0].as_str().unwrap();
    let hex = name
        .trim_start_matches(".iterion-script-")
        .trim_end_matches(".py");
    assert!(
        name.ends_with(".py") && hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "{name}"
    );
    assert_eq!(o["v"], "it's");
    assert_eq!(o["raw"], "plain");
    assert_eq!(o["exe"], true);
    assert_eq!(h.rec.of("tool_called")[0]["tool"], "script:py:s");
    assert!(leftover_scripts(&h).is_empty());

    // removed after a failure too
    let mut h = Harness::new().placed("s", PlacementKind::Run);
    let out = h.run(&script_wf("raise SystemExit(4)", "py")).await;
    assert_eq!(summary(&out), "EXECUTION_FAILED node=s checkpoint=s");
    assert!(failure_contains(
        &out,
        "tool node 's': script failed with status 4"
    ));
    assert!(leftover_scripts(&h).is_empty());
}

/// On the host a script runs from a private directory (mode 0700, outside the work dir, removed afterwards,
/// also after a failure), with the work dir as its working directory, and Python runs isolated: a `json.py`
/// written into the work dir is not what `import json` finds.
#[tokio::test]
async fn a_host_script_runs_from_a_private_directory_and_imports_nothing_from_the_work_dir() {
    let body = "import os, sys, stat\nimport json\nd = os.path.dirname(os.path.abspath(__file__))\nprint(json.dumps({'cwd': os.getcwd(), 'dir': d, 'mode': stat.S_IMODE(os.stat(d).st_mode), 'isolated': sys.flags.isolated, 'planted': hasattr(json, 'PLANTED')}))";
    let mut h = Harness::new();
    std::fs::write(
        h.work_dir().join("json.py"),
        "PLANTED = True\nopen('pwned', 'w').close()\n",
    )
    .unwrap();
    let out = h.run(&script_wf(body, "py")).await;
    assert_eq!(summary(&out), "finished", "{:?}", h.rec.lines());
    let o = h.rec.of("node_finished")[0]["output"].clone();
    let work = h.work_dir();
    assert_eq!(o["cwd"], work.to_string_lossy().as_ref(), "{o}");
    let dir = std::path::PathBuf::from(o["dir"].as_str().unwrap());
    assert!(!dir.starts_with(&work), "{o}");
    assert_eq!(o["mode"], 0o700, "{o}");
    assert_eq!(o["isolated"], 1, "{o}");
    assert_eq!(o["planted"], false, "{o}");
    assert!(!work.join("pwned").exists());
    assert!(!dir.exists(), "the private directory is removed");
    assert!(leftover_scripts(&h).is_empty());

    // node: the script's directory is the private one too, and it is removed after a failure
    let mut h = Harness::new();
    let out = h
        .run(&script_wf(
            "console.log(require('path').dirname(__filename)); process.exit(3)",
            "js",
        ))
        .await;
    assert_eq!(summary(&out), "EXECUTION_FAILED node=s checkpoint=s");
    let err = exec_common::failure_error(&out);
    let dir = err
        .lines()
        .find_map(|l| l.strip_prefix("stdout: "))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| panic!("{err}"));
    assert!(!dir.starts_with(h.work_dir()), "{err}");
    assert!(!dir.exists(), "the private directory is removed after a failure");
}

fn failure_contains(o: &iterion_runtime::exec::ExecOutcome, s: &str) -> bool {
    exec_common::failure_error(o).contains(s)
}

#[tokio::test]
async fn script_languages_sh_and_node() {
    let mut h = Harness::new();
    h.vars.insert("n".into(), json!(1));
    let out = h
        .run(&script_wf("echo \"{\\\"n\\\": $(( {{input.n}} + 1 ))}\"", "sh"))
        .await;
    assert_eq!(summary(&out), "finished", "{:?}", h.rec.lines());
    assert_eq!(h.rec.of("node_finished")[0]["output"], json!({"n": 2}));
    let mut h2 = Harness::new();
    h2.vars.insert("n".into(), json!(41));
    let out = h2
        .run(&script_wf(
            "console.log(JSON.stringify({n: {{input.n}} + 1}))",
            "js",
        ))
        .await;
    assert_eq!(summary(&out), "finished", "{:?}", h2.rec.lines());
    assert_eq!(h2.rec.of("node_finished")[0]["output"], json!({"n": 42}));
    assert_eq!(h2.rec.of("tool_started")[0]["tool"], "script:js:s");
}

/// An sh script is read by the shell, so a value in it is written for its context: hostile strings from an
/// earlier node arrive as their text in a plain word and as their exact JSON literal inside "…" and '…', and
/// nothing they spell runs. (The JSON literal used to be pasted as is: a double-quoted shell word in which
/// `$(…)` and backticks run.)
#[tokio::test]
async fn an_sh_script_quotes_hostile_values_for_their_shell_context() {
    let hostile = [
        "$(touch pwned-subst)",
        "`touch pwned-tick`",
        "\\\"; touch pwned-quote; echo \\\"",
        "'; touch pwned-single; '",
        "a\nb $HOME ${PATH} \\ ' \"",
    ];
    for value in hostile {
        for (i, body) in [
            "printf %s {{input.s}} > got",
            "printf %s \"{{input.s}}\" > got",
            "printf %s '{{input.s}}' > got",
        ]
        .into_iter()
        .enumerate()
        {
            let mut h = Harness::new();
            h.vars.insert("s".into(), json!(value));
            let out = h
                .run(&script_wf(&format!("{body}; echo '{{\"ok\": true}}'"), "sh"))
                .await;
            assert_eq!(
                summary(&out),
                "finished",
                "{value:?} in form {i}: {:?}",
                h.rec.lines()
            );
            let got = std::fs::read_to_string(h.work_dir().join("got")).unwrap();
            // a plain word is the string itself; inside quotes the shell reads its JSON literal
            let want = if i == 0 {
                value.to_string()
            } else {
                json!(value).to_string()
            };
            assert_eq!(got, want, "form {i}");
            let pwned: Vec<_> = std::fs::read_dir(h.work_dir())
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("pwned"))
                .collect();
            assert!(pwned.is_empty(), "{value:?} in form {i} ran: {pwned:?}");
        }
    }
}

/// Where no quoting is safe in an sh script (`$(( … ))`), a number is its literal, and a string is refused
/// before anything runs.
#[tokio::test]
async fn an_sh_script_refuses_a_string_where_no_quoting_is_safe() {
    let mut h = Harness::new();
    h.vars.insert("n".into(), json!("1)); touch pwned; echo $((1"));
    let out = h
        .run(&script_wf("echo \"{\\\"n\\\": $(( {{input.n}} + 1 ))}\"", "sh"))
        .await;
    assert_ne!(summary(&out), "finished", "{:?}", h.rec.lines());
    assert!(!h.work_dir().join("pwned").exists());
    assert!(h.rec.of("tool_started").is_empty(), "{:?}", h.rec.lines());
}

#[tokio::test]
async fn te14_one_tool_called_per_execution() {
    let src = "tool a:\n  command: `echo '{\"x\": 1}'`\n\ntool b:\n  command: `echo {{input.x}}`\n\nworkflow w:\n  entry: a\n  a -> b with { x: \"{{outputs.a.x}}\" }\n  b -> done\n";
    let mut h = Harness::new();
    let out = h.run(src).await;
    assert_eq!(summary(&out), "finished");
    assert_eq!(h.rec.of("tool_called").len(), 2);
    insta::assert_json_snapshot!("te14_two_tool_nodes", h.rec.lines());
}

#[tokio::test]
async fn exec_env_carries_run_and_node_ids() {
    let mut h = Harness::new();
    let out = output_of(&mut h, "printf '%s/%s' \"$ITERION_RUN_ID\" \"$ITERION_NODE_ID\"").await;
    assert_eq!(out, json!({"result": "run-1/t"}));
}

#[tokio::test]
async fn cancellation_terminates_the_running_command() {
    let mut h = Harness::new();
    let cancel = h.cancel.clone();
    let rec = h.rec.clone();
    tokio::spawn(async move {
        // cancel once the tool has started
        loop {
            if rec.types().iter().any(|t| t == "tool_started[t]") {
                cancel.cancel();
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    let out = h.run(&one_tool("sleep 100")).await;
    assert_eq!(summary(&out), "cancelled checkpoint=t");
    assert!(h.rec.of("tool_called").is_empty());
    assert!(h.rec.of("node_recovery").is_empty());
}

#[tokio::test]
async fn lc17_sandbox_gone_is_sandbox_lost_without_retry() {
    let mut h = Harness::new();
    let run = exec_common::noop_run(&h.work_dir(), &[]).await;
    run.cleanup().await;
    h.run = Some(run);
    let out = h.run(&one_tool("echo hi")).await;
    assert_eq!(summary(&out), "SANDBOX_LOST node=t checkpoint=t");
    assert!(h.rec.of("node_recovery").is_empty());
    assert_eq!(h.rec.of("tool_error").len(), 1);
}

#[tokio::test]
async fn script_written_through_the_sandbox_when_the_work_dir_is_not_shared() {
    // kubernetes-like: no host path for the workspace, the script file is written and removed by execs
    use std::sync::Arc;
    let h = Harness::new();
    let dir = h.work_dir();
    let run = exec_common::noop_run(&dir, &[]).await;
    let sandboxes = Arc::new(exec_common::HostSandboxes {
        run,
        dir: dir.clone(),
        placements: [("s".to_string(), PlacementKind::Run)].into(),
        shell: Shell::Bash,
        unavailable: Default::default(),
        exec_env: Vec::new(),
        claw_runner: None,
        policies_differ: false,
        ended: Default::default(),
    });
    struct NoHostPath(Arc<exec_common::HostSandboxes>);
    #[async_trait::async_trait]
    impl iterion_runtime::exec::NodeSandboxes for NoHostPath {
        async fn sandbox_for(
            &self,
            node_id: &str,
        ) -> Result<iterion_runtime::exec::NodeSandbox, iterion_runtime::exec::SandboxUnavailable> {
            let mut s = self.0.sandbox_for(node_id).await?;
            s.host_work_dir = None;
            Ok(s)
        }
        fn exec_env(&self, node_id: &str) -> Vec<(String, String)> {
            self.0.exec_env(node_id)
        }
    }
    let wf = exec_common::compile(
        "tool s:\n  language: sh\n  script: `ls -a | grep -c '^.iterion-script-'`\n\nworkflow w:\n  entry: s\n  s -> done\n",
    );
    let ctx = iterion_runtime::exec::ExecContext::new(
        "run-1",
        Default::default(),
        Default::default(),
        Arc::new(NoHostPath(sandboxes)),
        h.rec.clone(),
    );
    let out = iterion_runtime::exec::execute(&wf, ctx).await;
    assert_eq!(summary(&out), "finished", "{:#?}", h.rec.lines());
    assert_eq!(h.rec.of("node_finished")[0]["output"], json!({"result": "1"}));
    assert!(leftover_scripts(&h).is_empty());
}

#[tokio::test]
async fn an_environment_value_that_opens_a_quote_moves_the_quoting_of_the_placeholders_after_it() {
    // `${Q}` is `"` at run time: the value lands inside double quotes and is escaped for them
    let mut h = Harness::new().env("Q", "\"");
    h.vars.insert("v".into(), json!("$(touch pwned)`touch pwned`"));
    let out = output_of(&mut h, "printf '%s' ${Q}<{{input.v}}>${Q}").await;
    assert_eq!(out, json!({"result": "<$(touch pwned)`touch pwned`>"}));
    assert!(!h.work_dir().join("pwned").exists());
}

#[tokio::test]
async fn a_placeholder_that_lands_where_no_quoting_is_safe_fails_the_node_before_anything_runs() {
    // `${B}` opens backticks at run time, after the compile-time check has passed
    let mut h = Harness::new().env("B", "`");
    h.vars.insert("v".into(), json!("touch pwned"));
    let out = h.run(&one_tool("touch ran; echo ${B}{{input.v}}${B}")).await;
    assert_eq!(summary(&out), "EXECUTION_FAILED node=t checkpoint=t");
    assert!(!h.work_dir().join("pwned").exists());
    assert!(!h.work_dir().join("ran").exists(), "nothing of the command ran");
    assert!(h.rec.of("tool_started").is_empty(), "{:?}", h.rec.types());
}
