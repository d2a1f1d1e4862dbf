//! Routers, fan-out/join, compute and human nodes on the `NoopDriver` (the router, compute and human test
//! vectors of the execution chapter: FO, RR, CR, CO, HU).
mod exec_common;

use std::path::Path;

use exec_common::{Harness, compile, summary};
use iterion_runtime::exec::ExecOutcome;
use serde_json::{Map, Value, json};

/// A harness whose `claude` answers per node from `dir`.
struct Agents {
    h: Harness,
    state: tempfile::TempDir,
}

impl Agents {
    fn new() -> Agents {
        let state = tempfile::tempdir().unwrap();
        let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-agent-by-node.sh");
        let mut h = Harness::new()
            .env("ITERION_CLAUDE_BIN", &fake.to_string_lossy())
            .env("ANTHROPIC_API_KEY", "sk-test-key");
        h.run_env = vec![(
            "FAKE_AGENT_DIR".into(),
            state.path().to_string_lossy().into_owned(),
        )];
        Agents { h, state }
    }

    /// `node` answers `result` (a JSON text), with `tokens` input tokens.
    fn reply(&self, node: &str, result: &str) -> &Self {
        self.reply_full(node, result, false, 10)
    }

    fn reply_full(&self, node: &str, result: &str, is_error: bool, tokens: u64) -> &Self {
        let r = json!({
            "type": "result",
            "is_error": is_error,
            "result": result,
            "usage": {"input_tokens": tokens, "output_tokens": 0},
        });
        std::fs::write(self.state.path().join(format!("reply.{node}")), r.to_string()).unwrap();
        self
    }

    fn sleep(&self, node: &str, secs: &str) -> &Self {
        std::fs::write(self.state.path().join(format!("sleep.{node}")), secs).unwrap();
        self
    }

    /// `(node, start ns, end ns)` of every call.
    fn spans(&self) -> Vec<(String, u128, u128)> {
        let log = std::fs::read_to_string(self.state.path().join("log")).unwrap_or_default();
        let mut starts = std::collections::BTreeMap::new();
        let mut out = Vec::new();
        for l in log.lines() {
            let f: Vec<&str> = l.split(' ').collect();
            let t: u128 = f[2].parse().unwrap();
            if f[1] == "start" {
                starts.insert(f[0].to_string(), t);
            } else {
                out.push((f[0].to_string(), starts[f[0]], t));
            }
        }
        out
    }
}

fn agent(name: &str) -> String {
    format!("agent {name}:\n  backend: \"claude_code\"\n  readonly: true\n\n")
}

/// The lines of one type, with their `node_id` and `branch_id`.
fn lines_of(h: &Harness, ty: &str) -> Vec<Value> {
    h.rec.lines().into_iter().filter(|l| l["type"] == ty).collect()
}

fn output_of(h: &Harness, node: &str) -> Value {
    lines_of(h, "node_finished")
        .into_iter()
        .rfind(|l| l["node_id"] == node)
        .map(|l| l["data"]["output"].clone())
        .unwrap_or(Value::Null)
}

fn error_of(o: &ExecOutcome) -> String {
    exec_common::failure_error(o)
}

fn fo1(await_mode: &str) -> String {
    format!(
        "{}{}router fan:\n  mode: fan_out_all\n\ncompute m:\n  await: {await_mode}\n  expr:\n    x: \"input.x\"\n    y: \"input.y\"\n\nworkflow w:\n  entry: fan\n  fan -> a\n  fan -> b\n  a -> m with {{ x: \"{{{{outputs.a.x}}}}\" }}\n  b -> m with {{ y: \"{{{{outputs.b.y}}}}\" }}\n  m -> done\n",
        agent("a"),
        agent("b")
    )
}

#[tokio::test]
async fn fo1_fan_out_two_branches_joined_wait_all() {
    let mut a = Agents::new();
    a.reply("a", r#"{"x":1}"#).reply("b", r#"{"y":2}"#);
    let out = a.h.run(&fo1("wait_all")).await;
    assert_eq!(summary(&out), "finished", "{:#?}", a.h.rec.lines());
    let fan = lines_of(&a.h, "node_started")
        .into_iter()
        .find(|l| l["node_id"] == "fan")
        .unwrap();
    assert_eq!(fan["data"]["kind"], "router");
    assert_eq!(fan["data"]["mode"], "fan_out_all");
    for (b, start) in [("branch_fan_a", "a"), ("branch_fan_b", "b")] {
        let mine: Vec<String> =
            a.h.rec
                .lines()
                .into_iter()
                .filter(|l| l["branch_id"] == b)
                .map(|l| l["type"].as_str().unwrap().to_string())
                .filter(|t| !t.starts_with("delegate"))
                .collect();
        assert_eq!(
            mine,
            [
                "branch_started",
                "node_started",
                "node_finished",
                "edge_selected",
                "branch_finished"
            ],
            "{b}"
        );
        let fin = lines_of(&a.h, "branch_finished")
            .into_iter()
            .find(|l| l["branch_id"] == b)
            .unwrap();
        assert_eq!(fin["node_id"], start);
        assert_eq!(fin["data"], json!({"join_node": "m"}));
    }
    let join = lines_of(&a.h, "join_ready");
    assert_eq!(join.len(), 1);
    assert_eq!(join[0]["node_id"], "m");
    assert_eq!(join[0]["data"], json!({"strategy": "wait_all"}));
    assert_eq!(output_of(&a.h, "m"), json!({"x": 1, "y": 2}));
    // the join node runs in the main flow: no branch id
    let m_started = lines_of(&a.h, "node_started")
        .into_iter()
        .find(|l| l["node_id"] == "m")
        .unwrap();
    assert!(m_started.get("branch_id").is_none());
    assert_eq!(m_started["data"]["kind"], "compute");
}

#[tokio::test]
async fn fo2_a_failed_branch_fails_wait_all_and_cancels_its_sibling() {
    let mut a = Agents::new();
    a.reply("a", r#"{"x":1}"#).sleep("a", "20");
    a.reply_full("b", "boom", true, 1);
    let t0 = std::time::Instant::now();
    let out = a.h.run(&fo1("wait_all")).await;
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(15),
        "a was not cancelled"
    );
    assert_eq!(summary(&out), "EXECUTION_FAILED node=fan checkpoint=fan");
    assert!(
        error_of(&out).contains("convergence at m (wait_all): 1 branch(es) failed"),
        "{}",
        error_of(&out)
    );
    let fins = lines_of(&a.h, "branch_finished");
    assert_eq!(fins.len(), 2);
    assert!(fins.iter().all(|f| f["data"]["error"].is_string()), "{fins:#?}");
    assert!(lines_of(&a.h, "join_ready").is_empty());
}

#[tokio::test]
async fn fo3_best_effort_keeps_the_sibling_and_exposes_failed_branches() {
    let mut a = Agents::new();
    a.reply("a", r#"{"x":1}"#).sleep("a", "1");
    a.reply_full("b", "boom", true, 1);
    let out = a.h.run(&fo1("best_effort")).await;
    assert_eq!(summary(&out), "finished", "{:#?}", a.h.rec.lines());
    let join = lines_of(&a.h, "join_ready");
    assert_eq!(join[0]["data"]["strategy"], "best_effort");
    let failed = &join[0]["data"]["failed_branches"];
    assert_eq!(failed.as_array().unwrap().len(), 1);
    assert_eq!(failed[0]["branch_id"], "branch_fan_b");
    let m = output_of(&a.h, "m");
    assert_eq!(m["x"], 1);
    assert_eq!(m["y"], Value::Null, "b has no output: its mapping does not apply");
    assert!(
        m.get("_failed_branches").is_none(),
        "m's own output replaces the join's note"
    );
    // while m runs, outputs.m._failed_branches holds the list: the checkpoint written at the join shows it
    let at_join =
        a.h.rec
            .checkpoints
            .lock()
            .unwrap()
            .iter()
            .find(|c| c.node_id == "m")
            .cloned()
            .unwrap();
    assert_eq!(
        at_join.outputs["m"]["_failed_branches"][0]["branch_id"],
        "branch_fan_b"
    );
    let a_fin = lines_of(&a.h, "branch_finished")
        .into_iter()
        .find(|l| l["branch_id"] == "branch_fan_a")
        .unwrap();
    assert_eq!(a_fin["data"], json!({"join_node": "m"}), "a was not cancelled");
}

#[tokio::test]
async fn fo4_max_parallel_branches_bounds_concurrency() {
    let mut a = Agents::new();
    for n in ["a", "b", "c"] {
        a.reply(n, "{}").sleep(n, "0.3");
    }
    let src = format!(
        "{}{}{}router fan:\n  mode: fan_out_all\n\ncompute m:\n  await: wait_all\n  expr:\n    k: \"1\"\n\nworkflow w:\n  entry: fan\n  budget:\n    max_parallel_branches: 1\n  fan -> a\n  fan -> b\n  fan -> c\n  a -> m\n  b -> m\n  c -> m\n  m -> done\n",
        agent("a"),
        agent("b"),
        agent("c")
    );
    let out = a.h.run(&src).await;
    assert_eq!(summary(&out), "finished", "{:#?}", a.h.rec.lines());
    let mut spans = a.spans();
    assert_eq!(spans.len(), 3);
    spans.sort_by_key(|s| s.1);
    for w in spans.windows(2) {
        assert!(w[0].2 <= w[1].1, "two branch nodes overlapped: {spans:?}");
    }
}

#[tokio::test]
async fn branches_whose_nodes_have_different_network_policies_run_one_at_a_time() {
    let mut a = Agents::new();
    for n in ["a", "b"] {
        a.reply(n, "{}").sleep(n, "0.5");
    }
    a.h.policies_differ = true;
    let out = a.h.run(&fo1("wait_all")).await;
    assert_eq!(summary(&out), "finished", "{:#?}", a.h.rec.lines());
    let mut spans = a.spans();
    assert_eq!(spans.len(), 2);
    spans.sort_by_key(|s| s.1);
    assert!(spans[0].2 <= spans[1].1, "the branch nodes overlapped: {spans:?}");
    // each execution ends as outside a fan-out (its leftovers killed before the next starts)
    let ended = a.h.ended.lock().unwrap().clone();
    assert!(
        ended.starts_with(&["ended a".to_string(), "ended b".to_string()]),
        "{ended:?}"
    );
    assert!(
        !ended.iter().any(|e| e.starts_with("ended-concurrently")),
        "{ended:?}"
    );
    assert!(
        a.h.rec
            .logs
            .lock()
            .unwrap()
            .iter()
            .any(|(_, m)| m.contains("the branches run one at a time")),
        "the serialisation is logged"
    );
}

#[tokio::test]
async fn fo4_without_a_limit_branches_overlap() {
    let mut a = Agents::new();
    for n in ["a", "b"] {
        a.reply(n, "{}").sleep(n, "1");
    }
    let out = a.h.run(&fo1("wait_all")).await;
    assert_eq!(summary(&out), "finished");
    let s = a.spans();
    assert_eq!(s.len(), 2);
    assert!(
        s[0].1 < s[1].2 && s[1].1 < s[0].2,
        "the branches did not run concurrently: {s:?}"
    );
}

const FO5: &str = "tool a:\n  command: \"printf '{}'\"\n\ntool b:\n  command: \"printf '{}'\"\n\nrouter fan:\n  mode: fan_out_all\n\nworkflow w:\n  entry: fan\n  fan -> a\n  fan -> b\n  a -> done\n  b -> done\n";

#[tokio::test]
async fn fo5_two_mutating_branches_are_refused_before_any_branch() {
    let mut h = Harness::new();
    let out = h.run(FO5).await;
    assert_eq!(summary(&out), "WORKSPACE_SAFETY node=fan checkpoint=fan");
    assert!(
        error_of(&out).contains("2 branches contain mutating nodes [a, b]"),
        "{}",
        error_of(&out)
    );
    assert!(lines_of(&h, "branch_started").is_empty());
    // and the executability check says so before any run
    let d = iterion_runtime::exec::check_executable(&compile(FO5), &Default::default());
    assert!(d.iter().any(|d| d.code == "X010" && d.is_error()), "{d:#?}");
}

#[tokio::test]
async fn fo6_one_tool_branch_and_one_readonly_agent_run() {
    let mut a = Agents::new();
    a.reply("b", "{}");
    let src = format!(
        "tool a:\n  command: \"printf '{{}}'\"\n\n{}router fan:\n  mode: fan_out_all\n\nworkflow w:\n  entry: fan\n  fan -> a\n  fan -> b\n  a -> done\n  b -> done\n",
        agent("b")
    );
    let out = a.h.run(&src).await;
    assert_eq!(summary(&out), "finished", "{:#?}", a.h.rec.lines());
    assert!(iterion_runtime::exec::check_executable(&compile(&src), &Default::default()).is_empty());
}

#[tokio::test]
async fn fo7_branches_converge_at_done() {
    let mut a = Agents::new();
    a.reply("a", "{}").reply("b", "{}");
    let src = format!(
        "{}{}router fan:\n  mode: fan_out_all\n\nworkflow w:\n  entry: fan\n  fan -> a\n  fan -> b\n  a -> done\n  b -> done\n",
        agent("a"),
        agent("b")
    );
    let out = a.h.run(&src).await;
    assert_eq!(summary(&out), "finished");
    let fins = lines_of(&a.h, "branch_finished");
    assert!(fins.iter().all(|f| f["data"]["join_node"] == "done"), "{fins:#?}");
    let join = lines_of(&a.h, "join_ready");
    assert_eq!(join[0]["node_id"], "done");
    assert_eq!(join[0]["data"]["strategy"], "wait_all");
}

#[tokio::test]
async fn fo9_budget_exceeded_in_a_branch_cancels_the_siblings() {
    let mut a = Agents::new();
    a.reply_full("a", "{}", false, 15);
    a.reply("a2", "{}");
    a.reply("b", "{}").sleep("b", "20");
    let src = format!(
        "{}{}{}router fan:\n  mode: fan_out_all\n\ncompute m:\n  await: wait_all\n  expr:\n    k: \"1\"\n\nworkflow w:\n  entry: fan\n  budget:\n    max_tokens: 10\n  fan -> a\n  fan -> b\n  a -> a2\n  a2 -> m\n  b -> m\n  m -> done\n",
        agent("a"),
        agent("a2"),
        agent("b")
    );
    let t0 = std::time::Instant::now();
    let out = a.h.run(&src).await;
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(15),
        "b was not cancelled"
    );
    assert_eq!(summary(&out), "BUDGET_EXCEEDED node=fan checkpoint=fan");
    let ex = lines_of(&a.h, "budget_exceeded");
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0]["branch_id"], "branch_fan_a");
}

#[tokio::test]
async fn fo10_expression_edges_inside_a_branch_see_the_branch() {
    let mut h = Harness::new();
    let src = "compute a:\n  expr:\n    ok: \"true\"\n\ncompute a2:\n  expr:\n    via: \"'a2'\"\n\ncompute a3:\n  expr:\n    via: \"'a3'\"\n\ncompute b:\n  expr:\n    k: \"1\"\n\nrouter fan:\n  mode: fan_out_all\n\nworkflow w:\n  entry: fan\n  fan -> a\n  fan -> b\n  a -> a2 when \"outputs.a.ok == true\"\n  a -> a3\n  a2 -> done\n  a3 -> done\n  b -> done\n";
    let out = h.run(src).await;
    assert_eq!(summary(&out), "finished", "{:#?}", h.rec.lines());
    let started: Vec<String> = lines_of(&h, "node_started")
        .into_iter()
        .map(|l| l["node_id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        started.contains(&"a2".to_string()) && !started.contains(&"a3".to_string()),
        "{started:?}"
    );
}

#[tokio::test]
async fn fan_out_without_convergence_point_fails() {
    let mut h = Harness::new();
    // FO8: each branch reaches done through its own node, and done has a single source
    let src = "compute a:\n  expr:\n    k: \"1\"\n\ncompute b:\n  expr:\n    k: \"2\"\n\ncompute z:\n  expr:\n    k: \"3\"\n\nrouter fan:\n  mode: fan_out_all\n\nworkflow w:\n  entry: fan\n  fan -> a\n  fan -> b\n  a -> z\n  b -> fail\n  z -> done\n";
    let out = h.run(src).await;
    assert_eq!(
        summary(&out),
        "EXECUTION_FAILED node=fan checkpoint=fan",
        "{:#?}",
        h.rec.lines()
    );
}

// ---- round robin ----------------------------------------------------------------------------------------

fn rr1(c2: &str) -> String {
    format!(
        "compute j:\n  expr:\n    ok: \"false\"\n\nrouter sel:\n  mode: round_robin\n\ntool c1:\n  command: \"printf '{{}}'\"\n\ntool c2:\n  command: \"{c2}\"\n\nworkflow w:\n  entry: j\n  j -> done when ok\n  j -> sel when not ok as refine(4)\n  sel -> c1\n  sel -> c2\n  c1 -> j\n  c2 -> j\n"
    )
}

fn rr_targets(h: &Harness) -> Vec<(String, u64)> {
    lines_of(h, "edge_selected")
        .into_iter()
        .filter(|l| l["data"]["from"] == "sel")
        .map(|l| {
            (
                l["data"]["to"].as_str().unwrap().to_string(),
                l["data"]["round_robin_index"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn rr1_round_robin_alternates_until_the_loop_is_exhausted() {
    let mut h = Harness::new();
    let out = h.run(&rr1("printf '{}'")).await;
    assert_eq!(summary(&out), "LOOP_EXHAUSTED node=j checkpoint=j");
    assert_eq!(
        rr_targets(&h),
        [
            ("c1".into(), 0),
            ("c2".into(), 1),
            ("c1".into(), 2),
            ("c2".into(), 3)
        ]
    );
    let sel = lines_of(&h, "node_started")
        .into_iter()
        .find(|l| l["node_id"] == "sel")
        .unwrap();
    assert_eq!(sel["data"]["mode"], "round_robin");
    assert_eq!(sel["data"]["round_robin_index"], 0);
    assert_eq!(sel["data"]["selected_target"], "c1");
}

#[tokio::test]
async fn rr2_the_counter_survives_a_failure_and_resume() {
    let mut h = Harness::new();
    let out = h.run(&rr1("cat ok.json")).await;
    assert_eq!(summary(&out), "EXECUTION_FAILED node=c2 checkpoint=c2");
    assert_eq!(rr_targets(&h), [("c1".into(), 0), ("c2".into(), 1)]);
    let ExecOutcome::Failed {
        checkpoint: Some(cp), ..
    } = out
    else {
        unreachable!()
    };
    assert_eq!(cp.round_robin_counters.get("sel"), Some(&2));
    std::fs::write(h.work_dir().join("ok.json"), "{}").unwrap();
    let mut again = Harness::new();
    again.dir = h.dir;
    again.resume = Some(cp);
    let out = again.run(&rr1("cat ok.json")).await;
    assert_eq!(summary(&out), "LOOP_EXHAUSTED node=j checkpoint=j");
    assert_eq!(
        rr_targets(&again)[0],
        ("c1".into(), 2),
        "the next selection continues the counter"
    );
}

#[tokio::test]
async fn rr3_the_output_of_the_target_not_selected_is_forgotten() {
    let mut h = Harness::new();
    let src = "tool c1:\n  command: \"printf '{\\\"x\\\":1}'\"\n\nrouter sel:\n  mode: round_robin\n\ntool c2:\n  command: \"printf '{}'\"\n\ncompute r:\n  expr:\n    v: \"outputs.c1.x\"\n\nworkflow w:\n  entry: c1\n  c1 -> sel\n  sel -> c2\n  sel -> c1 as back(2)\n  c2 -> r\n  r -> done\n";
    let out = h.run(src).await;
    assert_eq!(summary(&out), "finished", "{:#?}", h.rec.lines());
    assert_eq!(output_of(&h, "r"), json!({"v": null}));
}

// ---- condition router -----------------------------------------------------------------------------------

fn cr(with: &str) -> String {
    format!(
        "compute judge:\n  expr:\n    approved: \"true\"\n\nrouter dec:\n  mode: condition\n\ntool fix:\n  command: \"printf '{{}}'\"\n\nworkflow w:\n  entry: judge\n  judge -> dec{with}\n  dec -> done when approved\n  dec -> fix when not approved\n  fix -> done\n"
    )
}

#[tokio::test]
async fn cr1_a_condition_router_reads_its_own_input() {
    let mut h = Harness::new();
    let out = h.run(&cr("")).await;
    assert_eq!(summary(&out), "NO_OUTGOING_EDGE node=dec checkpoint=dec");
}

#[tokio::test]
async fn cr2_with_a_mapping_the_router_routes() {
    let mut h = Harness::new();
    let out = h
        .run(&cr(" with { approved: \"{{outputs.judge.approved}}\" }"))
        .await;
    assert_eq!(summary(&out), "finished");
    assert_eq!(output_of(&h, "dec"), json!({"approved": true}));
    let e = lines_of(&h, "edge_selected")
        .into_iter()
        .find(|l| l["data"]["from"] == "dec")
        .unwrap();
    assert_eq!(
        e["data"],
        json!({"from": "dec", "to": "done", "condition": "approved", "negated": false})
    );
    let started = lines_of(&h, "node_started")
        .into_iter()
        .find(|l| l["node_id"] == "dec")
        .unwrap();
    assert_eq!(
        started["data"],
        json!({"kind": "router", "iteration": 0, "mode": "condition"})
    );
}

// ---- compute --------------------------------------------------------------------------------------------

fn co(exprs: &str) -> String {
    format!(
        "tool t:\n  command: \"printf '{{\\\"items\\\":[1,2,3]}}'\"\n\ncompute c:\n  expr:\n{exprs}\nworkflow w:\n  entry: t\n  vars:\n    limit: int = 3\n  budget:\n    max_iterations: 5\n  t -> c with {{ items: \"{{{{outputs.t.items}}}}\" }}\n  c -> done\n"
    )
}

#[tokio::test]
async fn co1_keys_do_not_see_each_other() {
    let mut h = Harness::new();
    let out = h
        .run(&co("    n: \"length(input.items)\"\n    big: \"n > 2\"\n"))
        .await;
    assert_eq!(summary(&out), "EXECUTION_FAILED node=c checkpoint=c");
    let e = error_of(&out);
    assert!(
        e.starts_with("compute 'c': field 'big' expression 'n > 2': "),
        "{e}"
    );
    let mut h = Harness::new();
    let out = h
        .run(&co(
            "    n: \"length(input.items)\"\n    big: \"length(input.items) > 2\"\n",
        ))
        .await;
    assert_eq!(summary(&out), "finished");
    assert_eq!(output_of(&h, "c"), json!({"n": 3, "big": true}));
}

#[tokio::test]
async fn co2_vars_and_no_iteration_counted() {
    let mut h = Harness::new();
    let out = h
        .run(&co("    total: \"1 + 2\"\n    ok: \"vars.limit >= 3\"\n"))
        .await;
    assert_eq!(summary(&out), "finished");
    assert_eq!(output_of(&h, "c"), json!({"total": 3, "ok": true}));
    let c = lines_of(&h, "node_started")
        .into_iter()
        .find(|l| l["node_id"] == "c")
        .unwrap();
    assert_eq!(c["data"]["kind"], "compute");
    assert!(c["data"].get("placement").is_none());
}

#[tokio::test]
async fn co2_a_compute_node_does_not_use_the_iteration_budget() {
    // one tool iteration allowed: the compute node after it still runs
    let mut h = Harness::new();
    let src = "tool t:\n  command: \"printf '{}'\"\n\ncompute c:\n  expr:\n    k: \"1\"\n\nworkflow w:\n  entry: t\n  budget:\n    max_iterations: 1\n  t -> c\n  c -> done\n";
    let out = h.run(src).await;
    assert_eq!(summary(&out), "finished", "{:#?}", h.rec.lines());
}

#[tokio::test]
async fn co3_the_artifacts_namespace() {
    let mut a = Agents::new();
    a.reply("p", r#"{"steps":[1]}"#);
    let h = &mut a.h;
    let src = "agent p:\n  backend: \"claude_code\"\n  publish: plan\n\ncompute c:\n  expr:\n    a: \"artifacts.plan.steps\"\n\nworkflow w:\n  entry: p\n  p -> c\n  c -> done\n";
    let out = h.run(src).await;
    assert_eq!(summary(&out), "finished", "{:#?}", h.rec.lines());
    assert_eq!(output_of(h, "c"), json!({"a": [1]}));
}

#[tokio::test]
async fn co4_a_counter_in_a_loop() {
    let mut h = Harness::new();
    let src = "compute c:\n  expr:\n    count: \"if(loop.again.previous_output == null, 0, loop.again.previous_output.count) + 1\"\n\nworkflow w:\n  entry: c\n  c -> c when \"outputs.c.count < 3\" as again(10)\n  c -> done\n";
    let out = h.run(src).await;
    assert_eq!(summary(&out), "finished", "{:#?}", h.rec.lines());
    assert_eq!(output_of(&h, "c"), json!({"count": 3}));
    let mut h = Harness::new();
    let bad = "compute c:\n  expr:\n    count: \"input.count + 1\"\n\nworkflow w:\n  entry: c\n  c -> done\n";
    assert_eq!(summary(&h.run(bad).await), "EXECUTION_FAILED node=c checkpoint=c");
}

// ---- human ----------------------------------------------------------------------------------------------

const HU1: &str = "tool a:\n  command: \"printf '{\\\"text\\\":\\\"the diff\\\"}'\"\n\nhuman h:\n  interaction: human\n\nworkflow w:\n  entry: a\n  a -> h with { summary: \"{{outputs.a.text}}\" }\n  h -> done when approved\n  h -> a when not approved as retry(2)\n";

async fn paused_hu1() -> (Harness, iterion_runtime::store::Checkpoint) {
    let mut h = Harness::new();
    let out = h.run(HU1).await;
    assert_eq!(summary(&out), "paused checkpoint=h", "{:#?}", h.rec.lines());
    let ExecOutcome::Paused { checkpoint } = out else {
        unreachable!()
    };
    (h, checkpoint)
}

#[tokio::test]
async fn hu1_a_human_node_pauses_the_run() {
    let (h, cp) = paused_hu1().await;
    let types = h.rec.types();
    let tail: Vec<&str> = types.iter().rev().take(3).rev().map(String::as_str).collect();
    assert_eq!(
        tail,
        ["node_started[h]", "human_input_requested[h]", "run_paused"]
    );
    let req = lines_of(&h, "human_input_requested");
    assert_eq!(
        req[0]["data"],
        json!({"interaction_id": "run-1_h", "questions": {"summary": "the diff"}})
    );
    assert_eq!(cp.interaction_id.as_deref(), Some("run-1_h"));
    assert_eq!(cp.interaction_questions, Some(json!({"summary": "the diff"})));
    let rec = h
        .rec
        .interactions
        .lock()
        .unwrap()
        .get("run-1_h")
        .cloned()
        .unwrap();
    assert_eq!(rec["questions"], json!({"summary": "the diff"}));
    assert!(rec["requested_at"].is_string());
}

fn answers(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[tokio::test]
async fn hu2_resume_with_typed_answers_continues() {
    let (h, cp) = paused_hu1().await;
    let mut r = Harness::new();
    r.rec = h.rec.clone();
    r.rec.events.lock().unwrap().clear();
    r.resume = Some(cp);
    r.answers = Some(answers(json!({"approved": true})));
    let out = r.run(HU1).await;
    assert_eq!(summary(&out), "finished", "{:#?}", r.rec.lines());
    let types = r.rec.types();
    assert_eq!(
        &types[..3],
        ["human_answers_recorded[h]", "node_finished[h]", "edge_selected"]
    );
    assert_eq!(output_of(&r, "h"), json!({"approved": true}));
    let rec = r
        .rec
        .interactions
        .lock()
        .unwrap()
        .get("run-1_h")
        .cloned()
        .unwrap();
    assert_eq!(rec["answers"], json!({"approved": true}));
    assert!(rec["answered_at"].is_string());
}

#[tokio::test]
async fn hu3_string_answers_do_not_satisfy_a_boolean_condition() {
    let (_h, cp) = paused_hu1().await;
    let mut r = Harness::new();
    r.resume = Some(cp);
    r.answers = Some(answers(json!({"approved": "true"})));
    let out = r.run(HU1).await;
    assert_eq!(summary(&out), "NO_OUTGOING_EDGE node=h checkpoint=h");
}

#[tokio::test]
async fn hu4_without_answers_the_run_stays_paused() {
    let (_h, cp) = paused_hu1().await;
    let mut r = Harness::new();
    r.resume = Some(cp);
    let out = r.run(HU1).await;
    assert_eq!(summary(&out), "paused checkpoint=h");
    assert!(r.rec.events.lock().unwrap().is_empty());
}

#[tokio::test]
async fn hu5_a_second_pause_in_the_loop_has_its_own_interaction_id() {
    let (h, cp) = paused_hu1().await;
    let mut r = Harness::new();
    r.rec = h.rec.clone();
    r.resume = Some(cp);
    r.answers = Some(answers(json!({"approved": false})));
    let out = r.run(HU1).await;
    let ExecOutcome::Paused { checkpoint } = out else {
        panic!("{:#?}", r.rec.lines())
    };
    assert_eq!(checkpoint.interaction_id.as_deref(), Some("run-1_h_1"));
}

#[test]
fn human_llm_modes_and_llm_routers_stay_refused() {
    let human = "human h:\n  interaction: llm\n  model: \"m\"\n  output: out\n\nschema out:\n  x: string\n\nworkflow w:\n  entry: h\n  h -> done\n";
    let c = iterion_spec::check(human, "t.bot");
    if c.diagnostics.iter().any(|d| d.is_error()) {
        return; // the compiler already refuses it
    }
    let d = iterion_runtime::exec::check_executable(&c.workflows[0], &Default::default());
    assert!(d.iter().any(|d| d.code == "X002"), "{d:#?}");
}

#[test]
fn nested_routers_and_human_nodes_inside_branches_are_refused() {
    let src = "compute a:\n  expr:\n    k: \"1\"\n\nhuman b:\n  interaction: human\n\nrouter fan:\n  mode: fan_out_all\n\nworkflow w:\n  entry: fan\n  fan -> a\n  fan -> b\n  a -> done\n  b -> done\n";
    let d = iterion_runtime::exec::check_executable(&compile(src), &Default::default());
    assert!(
        d.iter().any(|d| d.code == "X008" && d.message.contains("'b'")),
        "{d:#?}"
    );
}

// ---- llm router -----------------------------------------------------------------------------------------

fn lr(multi: bool) -> String {
    let multi = if multi { "  multi: true\n" } else { "" };
    format!(
        "prompt sys:\n  Route the work.\n\nprompt ask:\n  Pick one of {{{{input._route_candidates}}}}.\n\nrouter r:\n  mode: llm\n  backend: \"claude_code\"\n{multi}  system: sys\n  user: ask\n\ncompute x:\n  expr:\n    via: \"'x'\"\n\ncompute y:\n  expr:\n    via: \"'y'\"\n\ncompute m:\n  await: wait_all\n  expr:\n    k: \"1\"\n\nworkflow w:\n  entry: r\n  r -> x\n  r -> y\n  x -> m\n  y -> m\n  m -> done\n"
    )
}

impl Agents {
    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.state.path().join(name)).unwrap_or_default()
    }
}

#[tokio::test]
async fn lr1_an_llm_router_takes_the_route_the_model_picks() {
    let mut a = Agents::new();
    a.reply("r", r#"{"selected_route":"y","reasoning":"because"}"#);
    let out = a.h.run(&lr(false)).await;
    assert_eq!(summary(&out), "finished", "{:#?}", a.h.rec.lines());
    let raw = a.file("argv.r");
    assert!(
        raw.contains("--append-system-prompt\nRoute the work.\n\nYou are a routing decision maker. Based on the input context, select the most appropriate route(s) from the available options: [x y].\nRespond with your selection using the required output format.\n"),
        "{raw}"
    );
    // one argument per line, the system prompt (several lines) aside
    let argv: Vec<String> = raw.lines().map(str::to_string).collect();
    let model = &argv[argv.iter().position(|s| s == "--model").unwrap() + 1];
    assert_eq!(
        model, "claude-sonnet-4-6",
        "the default model without its provider prefix"
    );
    let tools = &argv[argv.iter().position(|s| s == "--allowedTools").unwrap() + 1];
    assert_eq!(tools, "Read,Glob,Grep");
    let stdin = a.file("stdin.r");
    assert!(
        stdin.contains("\"selected_route\""),
        "the schema is in the prompt"
    );
    assert!(stdin.starts_with("Pick one of [\"x\",\"y\"]."), "{stdin}");
    let fin = lines_of(&a.h, "node_finished")
        .into_iter()
        .find(|l| l["node_id"] == "r")
        .unwrap();
    assert_eq!(fin["data"]["selected_route"], "y");
    assert_eq!(fin["data"]["reasoning"], "because");
    let started = lines_of(&a.h, "node_started")
        .into_iter()
        .find(|l| l["node_id"] == "r")
        .unwrap();
    assert_eq!(started["data"]["mode"], "llm");
    let e = lines_of(&a.h, "edge_selected")
        .into_iter()
        .find(|l| l["data"]["from"] == "r")
        .unwrap();
    assert_eq!(e["data"], json!({"from": "r", "to": "y"}));
    assert_eq!(output_of(&a.h, "y"), json!({"via": "y"}));
}

#[tokio::test]
async fn lr2_an_invalid_or_unstructured_selection_fails_at_the_router() {
    let mut a = Agents::new();
    a.reply("r", r#"{"selected_route":"z","reasoning":""}"#);
    let out = a.h.run(&lr(false)).await;
    assert_eq!(summary(&out), "EXECUTION_FAILED node=r checkpoint=r");
    assert!(
        error_of(&out).contains("selected 'z' which is not a valid target"),
        "{}",
        error_of(&out)
    );
    let mut a = Agents::new();
    a.reply("r", "pick y");
    let out = a.h.run(&lr(false)).await;
    assert_eq!(summary(&out), "EXECUTION_FAILED node=r checkpoint=r");
    assert!(error_of(&out).contains("unstructured text"), "{}", error_of(&out));
}

#[tokio::test]
async fn lr3_a_multi_pick_router_fans_out_to_what_it_picked() {
    let mut a = Agents::new();
    a.reply("r", r#"{"selected_routes":["x","y"],"reasoning":""}"#);
    let out = a.h.run(&lr(true)).await;
    assert_eq!(summary(&out), "finished", "{:#?}", a.h.rec.lines());
    let ids: Vec<String> = lines_of(&a.h, "branch_started")
        .into_iter()
        .map(|l| l["branch_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&"branch_r_x".to_string()) && ids.contains(&"branch_r_y".to_string()));
    assert_eq!(lines_of(&a.h, "join_ready")[0]["node_id"], "m");
    let fin = lines_of(&a.h, "node_finished")
        .into_iter()
        .find(|l| l["node_id"] == "r")
        .unwrap();
    assert_eq!(fin["data"]["selected_routes"], json!(["x", "y"]));
}

// ---- agents asking through the interaction protocol (HU7) -----------------------------------------------

const HU7: &str =
    "agent a:\n  backend: \"claude_code\"\n  interaction: human\n\nworkflow w:\n  entry: a\n  a -> done\n";

#[tokio::test]
async fn hu7_an_agent_that_asks_pauses_and_its_answer_reinvokes_it_in_its_session() {
    let mut a = Agents::new();
    let asks = json!({
        "type": "result", "is_error": false, "session_id": "S1",
        "result": r#"{"_needs_interaction":true,"_interaction_questions":{"q":"Which DB?"}}"#,
        "usage": {"input_tokens": 4, "output_tokens": 0}
    });
    std::fs::write(a.state.path().join("reply.a.0"), asks.to_string()).unwrap();
    a.reply("a", r#"{"db":"pg"}"#);
    let out = a.h.run(HU7).await;
    let ExecOutcome::Paused { checkpoint } = out else {
        panic!("{:#?}", a.h.rec.lines())
    };
    assert!(
        a.file("argv.a.0").contains("[INTERACTION PROTOCOL]"),
        "the protocol is in the system prompt"
    );
    let req = lines_of(&a.h, "human_input_requested");
    assert_eq!(
        req[0]["data"],
        json!({"interaction_id": "run-1_a", "questions": {"q": "Which DB?"}, "source": "delegate", "backend": "claude_code"})
    );
    assert_eq!(checkpoint.backend_session_id.as_deref(), Some("S1"));
    assert_eq!(checkpoint.backend_name.as_deref(), Some("claude_code"));
    assert!(
        lines_of(&a.h, "node_finished").is_empty(),
        "the agent's answer is not its output yet"
    );

    // resume with the answer: the agent runs again, in its session, with the answer in its input
    let mut r = Agents::new();
    std::fs::write(
        r.state.path().join("reply.a"),
        std::fs::read(a.state.path().join("reply.a")).unwrap(),
    )
    .unwrap();
    r.h.resume = Some(checkpoint);
    r.h.answers = Some(answers(json!({"q": "pg"})));
    let out = r.h.run(HU7).await;
    assert_eq!(summary(&out), "finished", "{:#?}", r.h.rec.lines());
    let argv = r.file("argv.a.0");
    assert!(argv.contains("--resume\nS1\n"), "{argv}");
    let stdin = r.file("stdin.a.0");
    assert!(stdin.contains("\"q\":\"pg\""), "{stdin}");
    assert_eq!(output_of(&r.h, "a")["db"], "pg");
    let types = r.h.rec.types();
    assert_eq!(types[0], "human_answers_recorded[a]");
}

#[tokio::test]
async fn an_agent_that_keeps_asking_fails_after_five_rounds() {
    let a = Agents::new();
    let asks = json!({"type": "result", "is_error": false, "result": r#"{"_needs_interaction":true}"#});
    std::fs::write(a.state.path().join("reply.a"), asks.to_string()).unwrap();
    let mut h = a.h;
    let mut cp = None;
    for round in 0..6 {
        h.resume = cp.take();
        h.answers = (round > 0).then(|| answers(json!({"input": "more"})));
        match h.run(HU7).await {
            ExecOutcome::Paused { checkpoint } => {
                assert_eq!(
                    checkpoint.interaction_questions,
                    Some(json!({"input": "The backend needs your input to continue."}))
                );
                cp = Some(checkpoint);
            }
            other => {
                assert_eq!(round, 5, "{}", summary(&other));
                assert!(
                    error_of(&other).contains("exceeded interaction recursion depth"),
                    "{}",
                    error_of(&other)
                );
                return;
            }
        }
    }
    panic!("the sixth question did not fail the node");
}
