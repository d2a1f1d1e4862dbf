//! Graph execution on the `NoopDriver` (05 §10.2–§10.10, vectors GX1–GX10 of §12.9 and RS9 of §12.7).
mod exec_common;

use std::collections::BTreeMap;
use std::time::Duration;

use exec_common::{Harness, compile, summary};
use iterion_runtime::exec::{ExecOutcome, SandboxUnavailable, VarInputs, resolve_vars};
use iterion_runtime::failure::{FailureCode, FailurePhase};
use iterion_runtime::store::Checkpoint;
use serde_json::{Value, json};

/// A tool node printing a fixed JSON object.
fn echo(name: &str, json: &str) -> String {
    format!("tool {name}:\n  command: `printf '%s' '{json}'`\n\n")
}

/// Edges selected, as `from->to` with `(loop iteration)` when a loop edge was taken.
fn edges(h: &Harness) -> Vec<String> {
    h.rec
        .of("edge_selected")
        .into_iter()
        .map(|d| match (&d["loop"], &d["iteration"]) {
            (Value::String(l), Value::Number(i)) => {
                format!(
                    "{}->{} ({l} {i})",
                    d["from"].as_str().unwrap(),
                    d["to"].as_str().unwrap()
                )
            }
            _ => format!("{}->{}", d["from"].as_str().unwrap(), d["to"].as_str().unwrap()),
        })
        .collect()
}

fn started(h: &Harness, node: &str) -> usize {
    h.rec
        .types()
        .iter()
        .filter(|t| *t == &format!("node_started[{node}]"))
        .count()
}

#[tokio::test]
async fn gx1_loop_edge_until_cap_then_fallback() {
    let src = format!(
        "{}{}{}workflow w:\n  entry: a\n  a -> b as fix(3)\n  a -> c\n  b -> a\n  c -> done\n",
        echo("a", "{}"),
        echo("b", "{}"),
        echo("c", "{}")
    );
    let mut h = Harness::new();
    let out = h.run(&src).await;
    assert_eq!(summary(&out), "finished");
    assert_eq!(
        edges(&h),
        [
            "a->b (fix 1)",
            "b->a",
            "a->b (fix 2)",
            "b->a",
            "a->b (fix 3)",
            "b->a",
            "a->c",
            "c->done"
        ]
    );
}

#[tokio::test]
async fn gx2_non_boolean_field_skips_both_edges() {
    let src = format!(
        "{}{}{}workflow w:\n  entry: a\n  a -> b when ok\n  a -> c when not ok\n  b -> done\n  c -> done\n",
        echo("a", r#"{"ok": "yes"}"#),
        echo("b", "{}"),
        echo("c", "{}")
    );
    let mut h = Harness::new();
    let out = h.run(&src).await;
    assert_eq!(summary(&out), "NO_OUTGOING_EDGE node=a checkpoint=a");
    let w = h.rec.warnings();
    assert_eq!(
        w.iter()
            .filter(|m| m.contains("not a boolean; edge skipped"))
            .count(),
        2,
        "{w:?}"
    );
    match &out {
        ExecOutcome::Failed { failure, checkpoint } => {
            assert!(failure.resumable);
            assert_eq!(checkpoint.as_ref().unwrap().outputs["a"], json!({"ok": "yes"}));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn when_and_when_not_select_by_boolean_field() {
    for (ok, to) in [("true", "b"), ("false", "c")] {
        let src = format!(
            "{}{}{}workflow w:\n  entry: a\n  a -> b when ok\n  a -> c when not ok\n  b -> done\n  c -> done\n",
            echo("a", &format!(r#"{{"ok": {ok}}}"#)),
            echo("b", "{}"),
            echo("c", "{}")
        );
        let mut h = Harness::new();
        assert_eq!(summary(&h.run(&src).await), "finished");
        let first = &h.rec.of("edge_selected")[0];
        assert_eq!(first["to"], to);
        assert_eq!(first["condition"], "ok");
        assert_eq!(first["negated"], json!(to == "c"));
    }
}

fn gx3() -> String {
    format!(
        "{}workflow w:\n  entry: r\n  r -> done when \"status == 'pass'\"\n  r -> r when \"status == 'flaky'\" as retry(2)\n  r -> fail\n",
        echo("r", r#"{"status": "flaky"}"#),
    )
}

#[tokio::test]
async fn gx3_expression_loop_then_fail_node() {
    let mut h = Harness::new();
    let out = h.run(&gx3()).await;
    assert_eq!(summary(&out), "FAIL_NODE_REACHED node=r checkpoint=-");
    assert_eq!(started(&h, "r"), 3);
    match &out {
        ExecOutcome::Failed { failure, .. } => {
            assert_eq!(failure.error, "workflow reached fail node");
            assert!(!failure.resumable);
        }
        other => panic!("{other:?}"),
    }
    insta::assert_json_snapshot!("gx3_flaky_until_fail", h.rec.lines());
}

#[tokio::test]
async fn gx4_loop_exhausted_without_fallback() {
    // GX3 without `r -> fail` does not compile any more (C012: a loop edge is no fallback), so the node keeps
    // only its loop edge: once at the cap, nothing applies
    let src = format!(
        "{}workflow w:\n  entry: r\n  r -> r as retry(2)\n",
        echo("r", r#"{"status": "flaky"}"#)
    );
    let mut h = Harness::new();
    let out = h.run(&src).await;
    assert_eq!(summary(&out), "LOOP_EXHAUSTED node=r checkpoint=r");
    assert_eq!(started(&h, "r"), 3);
}

#[tokio::test]
async fn gx5_templated_loop_cap() {
    for (n, expect, runs) in [
        (r#""0""#, "EXECUTION_FAILED node=r checkpoint=r", 1),
        (r#""2""#, "finished", 3),
        ("2", "finished", 3),
        ("2.5", "EXECUTION_FAILED node=r checkpoint=r", 1),
    ] {
        let src = format!(
            "{}{}workflow w:\n  entry: plan\n  plan -> r\n  r -> r as retry(\"{{{{outputs.plan.n}}}}\")\n  r -> done\n",
            echo("plan", &format!(r#"{{"n": {n}}}"#)),
            echo("r", "{}")
        );
        let mut h = Harness::new();
        let out = h.run(&src).await;
        assert_eq!(summary(&out), expect, "n = {n}");
        assert_eq!(started(&h, "r"), runs, "n = {n}");
        if expect != "finished" {
            let v = n.trim_matches('"');
            assert_eq!(
                exec_common::failure_error(&out),
                format!("loop 'retry' cap '{v}' is not a positive integer")
            );
        }
    }
}

#[tokio::test]
async fn gx6_inner_loop_restarts_when_entered_from_outside() {
    let src = format!(
        "{}{}{}workflow w:\n  entry: a\n  a -> b\n  b -> b as inner(2)\n  b -> c\n  c -> a as outer(2)\n  c -> done\n",
        echo("a", "{}"),
        echo("b", "{}"),
        echo("c", "{}")
    );
    let mut h = Harness::new();
    let out = h.run(&src).await;
    assert_eq!(summary(&out), "finished");
    let inner: Vec<String> = edges(&h).into_iter().filter(|e| e.contains("inner")).collect();
    assert_eq!(
        inner,
        [
            "b->b (inner 1)",
            "b->b (inner 2)",
            "b->b (inner 1)",
            "b->b (inner 2)",
            "b->b (inner 1)",
            "b->b (inner 2)"
        ]
    );
    assert_eq!(started(&h, "b"), 9);
    assert_eq!(started(&h, "a"), 3);
}

#[tokio::test]
async fn gx7_with_mappings_typed_and_rendered() {
    let src = format!(
        "{}tool b:\n  script: `printf '%s' '{{\"items\": {{{{input.items}}}}, \"s\": {{{{input.s}}}}}}'`\n\nworkflow w:\n  entry: a\n  vars:\n    n: int = 3\n  a -> b with {{ items: \"{{{{outputs.a.list}}}}\", s: \"n={{{{vars.n}}}}\" }}\n  b -> done\n",
        echo("a", r#"{"list": ["x", "y"]}"#)
    );
    let mut h = Harness::new();
    let out = h.run(&src).await;
    assert_eq!(summary(&out), "finished", "{:#?}", h.rec.lines());
    assert_eq!(
        h.rec.of("node_finished")[1]["output"],
        json!({"items": ["x", "y"], "s": "n=3"})
    );
}

#[tokio::test]
async fn entry_input_is_the_vars_object() {
    let src = "tool a:\n  command: `printf '%s|%s' {{input.n}} {{input.s}}`\n\nworkflow w:\n  entry: a\n  vars:\n    n: int = 3\n    s: string = \"x\"\n  a -> done\n";
    let mut h = Harness::new();
    assert_eq!(summary(&h.run(src).await), "finished");
    assert_eq!(h.rec.of("node_finished")[0]["output"], json!({"result": "3|x"}));
}

#[tokio::test]
async fn gx8_max_iterations() {
    let src = format!(
        "{}workflow w:\n  entry: a\n  budget:\n    max_iterations: 5\n  a -> a as l(100)\n",
        echo("a", "{}")
    );
    let mut h = Harness::new();
    let out = h.run(&src).await;
    assert_eq!(summary(&out), "BUDGET_EXCEEDED node=a checkpoint=a");
    assert_eq!(started(&h, "a"), 5);
    assert_eq!(
        h.rec.of("budget_warning"),
        [json!({"dimension": "max_iterations", "used": 4, "limit": 5})]
    );
    assert_eq!(
        h.rec.of("budget_exceeded"),
        [json!({"dimension": "max_iterations", "used": 5, "limit": 5})]
    );
    let types = h.rec.types();
    assert_eq!(types.last().unwrap(), "budget_exceeded");
}

#[tokio::test]
async fn max_duration_is_a_deadline_during_a_node() {
    let src = "tool a:\n  command: `sleep 30`\n\nworkflow w:\n  entry: a\n  budget:\n    max_duration: \"1s\"\n  a -> done\n";
    let mut h = Harness::new();
    let out = h.run(src).await;
    assert_eq!(summary(&out), "BUDGET_EXCEEDED node=a checkpoint=a");
    let ex = h.rec.of("budget_exceeded");
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0]["dimension"], "max_duration");
    assert_eq!(ex[0]["limit"], 1000);
    assert!(h.rec.of("node_recovery").is_empty());
}

#[tokio::test]
async fn timeout_deadline() {
    let src = "tool a:\n  command: `sleep 30`\n\nworkflow w:\n  entry: a\n  a -> done\n";
    let mut h = Harness::new();
    h.bounds.timeout = Some(Duration::from_millis(200));
    let out = h.run(src).await;
    assert_eq!(summary(&out), "TIMEOUT node=a checkpoint=a");
}

fn vars_of(
    src: &str,
    args: &[(&str, &str)],
    project_dir: &str,
) -> Result<serde_json::Map<String, Value>, String> {
    let wf = compile(src);
    let vars: Vec<(String, String)> = args.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let env: BTreeMap<String, String> = [("HOME".to_string(), "/home/jo".to_string())].into();
    resolve_vars(
        &wf,
        VarInputs {
            preset: None,
            vars: &vars,
            env: &env,
            project_dir,
        },
    )
    .map_err(|e| e.to_string())
}

const VARS_WF: &str = "tool a:\n  command: `true`\n\nworkflow w:\n  entry: a\n  vars:\n    flag: bool\n    n: int\n    tags: string[]\n    cfg: json\n    dir: string = \"${PROJECT_DIR}/out\"\n    home: string = \"$HOME/x\"\n  a -> done\n";

#[test]
fn gx9_var_coercion() {
    let check = |args: &[(&str, &str)], key: &str, expect: Result<Value, &str>| {
        let got = vars_of(VARS_WF, args, "/w").map(|m| m.get(key).cloned().unwrap_or(Value::Null));
        assert_eq!(got, expect.map_err(str::to_string), "{args:?}");
    };
    check(&[("flag", "yes")], "flag", Ok(json!(true)));
    check(&[("n", "abc")], "n", Err("invalid var 'n': 'abc' is not an int"));
    check(&[("tags", "a,b, c")], "tags", Ok(json!(["a", "b", "c"])));
    check(&[("tags", r#"["x"]"#)], "tags", Ok(json!(["x"])));
    check(&[("cfg", "{bad")], "cfg", Ok(json!("{bad")));
    check(&[("nope", "1")], "nope", Err("unknown var 'nope'"));
    // a var without a value is absent
    assert!(!vars_of(VARS_WF, &[], "/w").unwrap().contains_key("flag"));
}

#[test]
fn gx10_project_dir_is_the_workspace_path() {
    let v = vars_of(VARS_WF, &[], "/job").unwrap();
    assert_eq!(v["dir"], "/job/out");
    assert_eq!(v["home"], "/home/jo/x");
}

#[tokio::test]
async fn rs9_resume_reexecutes_the_checkpoint_node() {
    let src = "tool a:\n  command: `printf '%s' '{\"x\": 1}'`\n\ntool b:\n  command: `printf '%s' {{outputs.a.x}}`\n\nworkflow w:\n  entry: a\n  a -> b\n  b -> done\n";
    let mut h = Harness::new();
    let mut cp = Checkpoint::stub("b", serde_json::Map::new());
    cp.outputs.insert("a".into(), json!({"x": 7}));
    h.resume = Some(cp);
    let out = h.run(src).await;
    assert_eq!(summary(&out), "finished");
    assert_eq!(started(&h, "a"), 0);
    assert_eq!(h.rec.of("node_finished")[0]["output"], json!({"result": "7"}));
}

#[tokio::test]
async fn checkpoint_after_every_node() {
    let src = format!(
        "{}{}workflow w:\n  entry: a\n  a -> b\n  b -> done\n",
        echo("a", r#"{"v": 1}"#),
        echo("b", r#"{"v": 2}"#)
    );
    let mut h = Harness::new();
    assert_eq!(summary(&h.run(&src).await), "finished");
    let cps = h.rec.checkpoints.lock().unwrap().clone();
    let at: Vec<&str> = cps.iter().map(|c| c.node_id.as_str()).collect();
    assert_eq!(at, ["b", "done"]);
    assert_eq!(cps[0].outputs["a"], json!({"v": 1}));
    assert_eq!(cps[1].outputs.len(), 2);
}

#[tokio::test]
async fn node_container_failure_stops_the_run_with_its_phase() {
    let mut h = Harness::new();
    h.unavailable.insert(
        "a".into(),
        SandboxUnavailable {
            code: FailureCode::SandboxStartFailed,
            error: "cannot start node container".into(),
            phase: Some(FailurePhase::NodeContainer),
            hint: None,
        },
    );
    let out = h
        .run(&format!(
            "{}workflow w:\n  entry: a\n  a -> done\n",
            echo("a", "{}")
        ))
        .await;
    assert_eq!(summary(&out), "SANDBOX_START_FAILED node=a checkpoint=a");
    match out {
        ExecOutcome::Failed { failure, .. } => assert_eq!(failure.phase, Some(FailurePhase::NodeContainer)),
        other => panic!("{other:?}"),
    }
    assert!(h.rec.events.lock().unwrap().is_empty());
}

#[tokio::test]
async fn cancelled_before_start_keeps_the_entry_checkpoint() {
    let mut h = Harness::new();
    h.cancel.cancel();
    let out = h
        .run(&format!(
            "{}workflow w:\n  entry: a\n  a -> done\n",
            echo("a", "{}")
        ))
        .await;
    assert_eq!(summary(&out), "cancelled checkpoint=a");
}

#[tokio::test]
async fn expressions_read_loop_outputs_vars_and_run() {
    let src = format!(
        "{}{}workflow w:\n  entry: a\n  vars:\n    limit: int = 2\n  a -> b when \"loop.again.iteration >= vars.limit && outputs.a.k == 'v' && run.id == 'run-1'\"\n  a -> a as again(5)\n  a -> fail\n  b -> done\n",
        echo("a", r#"{"k": "v"}"#),
        echo("b", "{}")
    );
    let mut h = Harness::new();
    assert_eq!(summary(&h.run(&src).await), "finished");
    assert_eq!(edges(&h), ["a->a (again 1)", "a->a (again 2)", "a->b", "b->done"]);
}

#[tokio::test]
async fn expression_errors_skip_the_edge_with_a_warning() {
    let src = format!(
        "{}{}workflow w:\n  entry: a\n  a -> b when \"k < 3\"\n  a -> done\n  b -> done\n",
        echo("a", r#"{"k": "text"}"#),
        echo("b", "{}")
    );
    let mut h = Harness::new();
    assert_eq!(summary(&h.run(&src).await), "finished");
    assert_eq!(edges(&h), ["a->done"]);
    let w = h.rec.warnings();
    assert!(
        w.iter()
            .any(|m| m.starts_with("edge a -> b: condition \"k < 3\" failed to evaluate")),
        "{w:?}"
    );
}

#[tokio::test]
async fn with_templates_read_the_edge_source_output_as_input() {
    let src = format!(
        "{}tool b:\n  command: `printf '%s' {{{{input.got}}}}`\n\nworkflow w:\n  entry: a\n  a -> b with {{ got: \"<{{{{input.name}}}}>\" }}\n  b -> done\n",
        echo("a", r#"{"name": "x y"}"#)
    );
    let mut h = Harness::new();
    assert_eq!(summary(&h.run(&src).await), "finished");
    assert_eq!(h.rec.of("node_finished")[1]["output"], json!({"result": "<x y>"}));
}

#[tokio::test]
async fn failed_attempts_count_as_iterations() {
    let src = "tool a:\n  command: `exit 1`\n\nworkflow w:\n  entry: a\n  budget:\n    max_iterations: 1\n  a -> done\n";
    let mut h = Harness::new();
    let out = h.run(src).await;
    // the first attempt fails; the retry would be the second execution
    assert_eq!(summary(&out), "BUDGET_EXCEEDED node=a checkpoint=a");
    assert_eq!(started(&h, "a"), 1);
    assert_eq!(h.rec.of("node_recovery").len(), 1);
    assert_eq!(
        h.rec.of("budget_exceeded"),
        [json!({"dimension": "max_iterations", "used": 1, "limit": 1})]
    );
}

#[tokio::test]
async fn timeout_ends_a_retry_wait() {
    // the retry delay (2 s) is waited for real here; the 300 ms --timeout ends it
    let src = "tool a:\n  command: `exit 1`\n\nworkflow w:\n  entry: a\n  a -> done\n";
    let mut h = Harness::new();
    h.bounds.retry_delay_cap = None;
    h.bounds.timeout = Some(Duration::from_millis(300));
    let out = h.run(src).await;
    assert_eq!(summary(&out), "TIMEOUT node=a checkpoint=a");
    assert_eq!(started(&h, "a"), 1);
    assert_eq!(h.rec.of("node_recovery").len(), 1);
}
