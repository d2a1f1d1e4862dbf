//! Status and failure-code vectors SC1–SC5 (05 §12.2) at the store level: the transitions the lifecycle
//! performs, written through `OpenRun::transition`, and the events it appends.
mod store_common;

use iterion_runtime::Error;
use iterion_runtime::events::{NodeRecovery, RunFailed};
use iterion_runtime::failure::{FailureCode, FailurePhase};
use iterion_runtime::status::RunStatus;
use iterion_runtime::store::Transition;
use iterion_runtime::store::{Checkpoint, Owner, Store};
use serde_json::json;
use store_common::{create, raw_json};

fn vars() -> serde_json::Map<String, serde_json::Value> {
    json!({"n": 3}).as_object().unwrap().clone()
}

#[test]
fn sc1_done_finishes_without_checkpoint_or_code() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let mut run = create(&st, "sc1");
    run.save_checkpoint(Checkpoint::stub("a", vars())).unwrap();
    run.transition(Transition::Finish).unwrap();
    let v = raw_json(&run);
    assert_eq!(v["status"], "finished");
    assert!(v["finished_at"].is_string());
    assert!(v.get("checkpoint").is_none(), "{v}");
    assert!(v.get("failure_code").is_none(), "{v}");
    assert!(v.get("error").is_none(), "{v}");
}

#[test]
fn sc2_fail_node_is_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let mut run = create(&st, "sc2");
    run.save_checkpoint(Checkpoint::stub("check", vars())).unwrap();
    let failed = RunFailed::new(FailureCode::FailNodeReached, "workflow reached fail node").node("check");
    let line = run.events().append(&failed.into()).unwrap().line;
    run.transition(Transition::Fail {
        code: FailureCode::FailNodeReached,
        error: "workflow reached fail node".into(),
        phase: None,
    })
    .unwrap();
    let v = raw_json(&run);
    assert_eq!(v["status"], "failed");
    assert_eq!(v["failure_code"], "FAIL_NODE_REACHED");
    assert!(v.get("checkpoint").is_none(), "{v}");
    let rec: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        rec["data"],
        json!({"error": "workflow reached fail node", "code": "FAIL_NODE_REACHED", "resumable": false, "node_id": "check"})
    );
}

#[test]
fn sc3_setup_timeout_before_any_node_writes_a_stub_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let mut run = create(&st, "sc3");
    let failed = RunFailed::new(
        FailureCode::SandboxSetupTimeout,
        "post_create did not finish within 100ms",
    )
    .phase(FailurePhase::PostCreate)
    .timeout("100ms");
    let line = run.events().append(&failed.into()).unwrap().line;
    run.transition(Transition::FailResumable {
        code: FailureCode::SandboxSetupTimeout,
        error: "post_create did not finish within 100ms".into(),
        phase: Some(FailurePhase::PostCreate),
        checkpoint: Some(Checkpoint::stub("entry", vars())),
    })
    .unwrap();
    let v = raw_json(&run);
    assert_eq!(v["status"], "failed_resumable");
    assert_eq!(v["failure_code"], "SANDBOX_SETUP_TIMEOUT");
    assert_eq!(v["failure_phase"], "post_create");
    assert_eq!(v["checkpoint"], json!({"node_id": "entry", "vars": {"n": 3}}));
    let rec: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(rec["data"]["resumable"], true);
    assert_eq!(rec["data"]["phase"], "post_create");
    assert_eq!(rec["data"]["timeout"], "100ms");
}

fn sc4(st: &Store) {
    let mut run = create(st, "sc4");
    let mut cp = Checkpoint::stub("build", vars());
    cp.outputs.insert("plan".into(), json!({"x": 1}));
    run.save_checkpoint(cp).unwrap();
    let policy = FailureCode::ExecutionFailed.retry_policy();
    assert_eq!(policy.retries(), 1);
    let recovery = NodeRecovery {
        node_id: "build".into(),
        code: FailureCode::ExecutionFailed,
        reason: "retrying after failure".into(),
        attempt: 1,
        delay_ms: u64::try_from(policy.delay(1).unwrap().as_millis()).unwrap(),
        error: "tool node 'build': command exited with status 3".into(),
    };
    let line = run.events().append(&recovery.into()).unwrap().line;
    let rec: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(rec["node_id"], "build");
    assert_eq!(rec["data"]["code"], "EXECUTION_FAILED");
    assert_eq!(rec["data"]["attempt"], 1);
    assert_eq!(rec["data"]["delay_ms"], 2000);
    run.transition(Transition::FailResumable {
        code: FailureCode::ExecutionFailed,
        error: "tool node 'build': command exited with status 3".into(),
        phase: None,
        checkpoint: None,
    })
    .unwrap();
}

#[test]
fn sc4_retried_tool_failure_parks_at_the_node() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    sc4(&st);
    let doc = st.read_run("sc4").unwrap();
    assert_eq!(doc.status, RunStatus::FailedResumable);
    assert_eq!(doc.failure_code, Some(FailureCode::ExecutionFailed));
    let cp = doc.checkpoint.unwrap();
    assert_eq!(cp.node_id, "build");
    assert_eq!(cp.outputs["plan"], json!({"x": 1}));
}

#[test]
fn sc5_resume_then_done_clears_the_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    sc4(&st);
    let mut run = st.open_run("sc4", &Owner::current()).unwrap();
    run.transition(Transition::Resume).unwrap();
    let v = raw_json(&run);
    assert_eq!(v["status"], "running");
    assert!(v.get("finished_at").is_none() && v.get("failure_code").is_none() && v.get("error").is_none());
    assert_eq!(v["checkpoint"]["node_id"], "build", "resume keeps the checkpoint");
    run.transition(Transition::Finish).unwrap();
    let v = raw_json(&run);
    assert_eq!(v["status"], "finished");
    assert!(v.get("failure_code").is_none() && v.get("error").is_none() && v.get("checkpoint").is_none());
}

#[test]
fn cancel_records_code_reason_and_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let mut run = create(&st, "cancel");
    run.transition(Transition::Cancel {
        reason: "signal SIGINT".into(),
        checkpoint: Some(Checkpoint::stub("slow", vars())),
    })
    .unwrap();
    let v = raw_json(&run);
    assert_eq!(v["status"], "cancelled");
    assert_eq!(v["failure_code"], "CANCELLED");
    assert_eq!(v["error"], "run cancelled: signal SIGINT");
    assert_eq!(v["checkpoint"]["node_id"], "slow");
}

fn check_refused(setup: &[Transition], t: Transition, expect: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let mut run = create(&st, "refused");
    for s in setup {
        run.transition(s.clone()).unwrap();
    }
    let before = std::fs::read_to_string(run.dir().join("run.json")).unwrap();
    let err: Error = run.transition(t).unwrap_err();
    assert_eq!(err.to_string(), expect);
    assert_eq!(
        std::fs::read_to_string(run.dir().join("run.json")).unwrap(),
        before,
        "record changed"
    );
}

#[test]
fn invalid_transitions_change_nothing() {
    let fail = |code| Transition::Fail {
        code,
        error: "e".into(),
        phase: None,
    };
    let parked = Transition::FailResumable {
        code: FailureCode::Timeout,
        error: "e".into(),
        phase: None,
        checkpoint: Some(Checkpoint::stub("a", vars())),
    };
    // RS1: a finished run cannot go back to running.
    check_refused(
        &[Transition::Finish],
        Transition::Resume,
        "cannot move run from status finished to running",
    );
    check_refused(
        &[fail(FailureCode::FailNodeReached)],
        Transition::Resume,
        "cannot move run from status failed to running",
    );
    check_refused(
        &[],
        Transition::Resume,
        "cannot move run from status running to running",
    );
    check_refused(
        &[parked],
        Transition::Finish,
        "cannot move run from status failed_resumable to finished",
    );
    check_refused(
        &[],
        fail(FailureCode::SandboxLost),
        "failure code SANDBOX_LOST cannot produce status failed",
    );
    check_refused(
        &[],
        Transition::FailResumable {
            code: FailureCode::SandboxSpecInvalid,
            error: "e".into(),
            phase: None,
            checkpoint: Some(Checkpoint::stub("a", vars())),
        },
        "failure code SANDBOX_SPEC_INVALID cannot produce status failed_resumable",
    );
    check_refused(
        &[],
        fail(FailureCode::ResumeInvalid),
        "failure code RESUME_INVALID cannot produce status failed",
    );
    check_refused(
        &[],
        Transition::FailResumable {
            code: FailureCode::Timeout,
            error: "e".into(),
            phase: None,
            checkpoint: None,
        },
        "status failed_resumable requires a checkpoint and the run has none",
    );
    check_refused(
        &[],
        Transition::Cancel {
            reason: "signal SIGTERM".into(),
            checkpoint: None,
        },
        "status cancelled requires a checkpoint and the run has none",
    );
}

#[test]
fn transition_for_code_follows_the_class() {
    let t = |c| Transition::for_code(c, "e".into(), None).map(|t| t.target());
    assert_eq!(t(FailureCode::SandboxDriverUnavailable), Some(RunStatus::Failed));
    assert_eq!(t(FailureCode::RunInterrupted), Some(RunStatus::FailedResumable));
    assert_eq!(t(FailureCode::Cancelled), Some(RunStatus::Cancelled));
    assert_eq!(t(FailureCode::ResumeInvalid), None);
}

#[test]
fn crash_recovery_marks_interrupted_and_keeps_checkpoint() {
    // 8.5: a `running` run whose owner died is parked failed_resumable / RUN_INTERRUPTED.
    let tmp = tempfile::tempdir().unwrap();
    let st = Store::create(tmp.path()).unwrap();
    let mut run = create(&st, "crashed");
    run.save_checkpoint(Checkpoint::stub("b", vars())).unwrap();
    drop(run);
    let mut run = st.open_run("crashed", &Owner::current()).unwrap();
    run.transition(
        Transition::for_code(
            FailureCode::RunInterrupted,
            "the process that owned this run exited without finishing it".into(),
            None,
        )
        .unwrap(),
    )
    .unwrap();
    let doc = st.read_run("crashed").unwrap();
    assert_eq!(doc.status, RunStatus::FailedResumable);
    assert_eq!(doc.failure_code, Some(FailureCode::RunInterrupted));
    assert_eq!(doc.checkpoint.unwrap().node_id, "b");
}
