//! Resume vectors (05 §12.7) and crash recovery (§8.5, reaper rows RP5/RP6) with a fake driver.
mod life_common;

use iterion_runtime::failure::FailureCode;
use iterion_runtime::lifecycle::reaper::recover_run;
use iterion_runtime::lifecycle::{DriverChoice, Resume, SandboxFlags};
use iterion_runtime::status::RunStatus;
use iterion_runtime::store::{Owner, Store};
use iterion_spec::resolve::ModeChoice;
use life_common::*;
use serde_json::json;

const AUTO_SLOW: &str = "tool hello:\n  command: \"echo hi\"\n\nworkflow greet:\n  entry: hello\n  sandbox:\n    mode: auto\n    post_create: \"sleep 30\"\n  hello -> done\n";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A run parked `failed_resumable` by a post-create timeout, launched with `--sandbox auto`.
fn parked(fx: &Fixture, fake: &FakeDriver) -> String {
    let mut l = fx.launch();
    l.sandbox.mode = Some(ModeChoice::Auto);
    let env = [("ITERION_SANDBOX_POST_CREATE_TIMEOUT", "50ms")];
    let o = rt()
        .block_on(fx.runtime(container(fake), &env, true).launch(l))
        .unwrap();
    assert_eq!(o.status, RunStatus::FailedResumable, "{o:?}");
    o.run_id
}

#[test]
fn rs3_recorded_inputs_win_over_the_current_environment() {
    let fx = Fixture::new(AUTO_SLOW);
    let fake = FakeDriver::new(Faults::default());
    let id = parked(&fx, &fake);
    assert_eq!(
        Store::at(&fx.store)
            .read_run(&id)
            .unwrap()
            .sandbox
            .requested
            .cli_mode
            .as_deref(),
        Some("auto")
    );
    // At resume ITERION_SANDBOX_DEFAULT=none is set: the recorded --sandbox auto still applies.
    let env = [
        ("ITERION_SANDBOX_DEFAULT", "none"),
        ("ITERION_SANDBOX_POST_CREATE_TIMEOUT", "50ms"),
    ];
    let o = rt()
        .block_on(
            fx.runtime(container(&fake), &env, true)
                .resume(Resume::new(&id, &fx.store)),
        )
        .unwrap();
    let ev = fx.events(&o);
    let resolved: Vec<_> = ev.iter().filter(|e| e.event_type == "sandbox_resolved").collect();
    assert_eq!(resolved.len(), 2);
    assert_eq!(resolved[1].data["mode"], json!("auto"));
    assert_eq!(o.failure_code, Some(FailureCode::SandboxSetupTimeout));
}

#[test]
fn rs7_resume_with_sandbox_none_runs_on_the_host_and_records_it() {
    let fx = Fixture::new(AUTO_SLOW);
    let fake = FakeDriver::new(Faults::default());
    let id = parked(&fx, &fake);
    let mut r = Resume::new(&id, &fx.store);
    let mut flags = SandboxFlags::default();
    flags.mode = Some(ModeChoice::None);
    r.sandbox = flags;
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], true).resume(r))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let doc = fx.doc(&o);
    assert_eq!(doc.sandbox.requested.cli_mode.as_deref(), Some("none"));
    let ev = fx.events(&o);
    let restarted = ev
        .iter()
        .rev()
        .find(|e| e.event_type == "node_started" && e.node_id.as_deref() == Some("hello"))
        .unwrap();
    assert_eq!(restarted.data["placement"], json!("host"));
    assert_eq!(fx.doc(&o).sandbox.containers.len(), 0);
}

#[test]
fn rs8_floor_set_only_at_resume_raises_none() {
    let fx = Fixture::new(&AUTO_SLOW.replace(
        "    mode: auto\n    post_create: \"sleep 30\"\n",
        "    mode: auto\n",
    ));
    let fake = FakeDriver::new(Faults::default());
    let mut l = fx.launch();
    l.sandbox.mode = Some(ModeChoice::None);
    let cancelled = iterion_runtime::lifecycle::Cancel::new();
    cancelled.cancel("cancelled by the caller");
    let o = rt()
        .block_on(fx.runtime_with(container(&fake), &[], true, cancelled).launch(l))
        .unwrap();
    assert_eq!(o.status, RunStatus::Cancelled);
    let o = rt()
        .block_on(
            fx.runtime(container(&fake), &[("ITERION_SANDBOX_FLOOR", "auto")], true)
                .resume(Resume::new(&o.run_id, &fx.store)),
        )
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    let floor = ev
        .iter()
        .find(|e| e.event_type == "sandbox_floor_applied")
        .unwrap();
    assert_eq!(floor.data["from"], json!("none"));
    assert_eq!(floor.data["to"], json!("auto"));
}

/// A run record left `running` by an owner that no longer exists.
fn orphan(fx: &Fixture) -> String {
    let o = rt()
        .block_on(
            fx.runtime(
                DriverChoice::Unavailable {
                    reason: "none".into(),
                },
                &[],
                false,
            )
            .launch(fx.launch()),
        )
        .unwrap();
    let store = Store::at(&fx.store);
    let path = o.run_dir.join("run.json");
    let mut doc = store.read_run(&o.run_id).unwrap();
    doc.status = RunStatus::Running;
    doc.failure_code = None;
    doc.finished_at = None;
    doc.checkpoint = Some(iterion_runtime::store::Checkpoint::stub(
        "hello",
        Default::default(),
    ));
    // An owner on this host whose pid cannot exist.
    doc.owner = Owner {
        host: Owner::current().host,
        pid: 4_194_000,
        started_at: 1,
    };
    doc.save(&path).unwrap();
    o.run_id
}

#[test]
fn rp5_crash_recovery_marks_the_run_interrupted() {
    let fx = Fixture::new(
        "tool hello:\n  command: \"echo hi\"\n\nworkflow greet:\n  entry: hello\n  hello -> done\n",
    );
    let id = orphan(&fx);
    let store = Store::at(&fx.store);
    assert!(recover_run(&store, &id, &Owner::current()));
    let doc = store.read_run(&id).unwrap();
    assert_eq!(doc.status, RunStatus::FailedResumable);
    assert_eq!(doc.failure_code, Some(FailureCode::RunInterrupted));
    assert_eq!(doc.checkpoint.unwrap().node_id, "hello");
    let last = store.read_events(&id).unwrap().pop().unwrap();
    assert_eq!(last.event_type, "run_failed");
    assert_eq!(last.data["code"], json!("RUN_INTERRUPTED"));
    assert_eq!(last.data["resumable"], json!(true));
    // A second pass changes nothing.
    assert!(!recover_run(&store, &id, &Owner::current()));
}

#[test]
fn rp6_a_held_lock_prevents_recovery() {
    let fx = Fixture::new(
        "tool hello:\n  command: \"echo hi\"\n\nworkflow greet:\n  entry: hello\n  hello -> done\n",
    );
    let id = orphan(&fx);
    let store = Store::at(&fx.store);
    let held = store.open_run(&id, &Owner::current()).unwrap();
    assert!(!recover_run(&store, &id, &Owner::current()));
    drop(held);
    assert_eq!(store.read_run(&id).unwrap().status, RunStatus::Running);
}
