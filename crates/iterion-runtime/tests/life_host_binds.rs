//! A driver without a host file system (kubernetes) and host state (05 §4.6 step 1, vector LC10): a defaulted
//! `host_state: auto` drops the host binds with `sandbox_host_binds_dropped` and the run proceeds; an explicit
//! `auto` is refused before anything starts.
mod life_common;

use iterion_runtime::failure::FailureCode;
use iterion_runtime::status::RunStatus;
use life_common::*;
use serde_json::json;

const FLOW: &str = "tool t:\n  command: `echo '{}'`\n\nworkflow w:\n  entry: t\n  sandbox:\n    image: \"alpine:3\"\n  t -> done\n";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn lc10_a_defaulted_auto_drops_the_host_binds_and_the_run_proceeds() {
    let fx = Fixture::new(FLOW);
    std::fs::create_dir_all(fx.dir.path().join("data")).unwrap();
    let mut fake = FakeDriver::new(Faults::default());
    fake.host_binds = false;
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], false).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    let ev = fx.events(&o);
    let dropped = first(&ev, "sandbox_host_binds_dropped");
    assert_eq!(dropped.data["reason"], json!("driver has no host file system"));
    assert_eq!(dropped.data["driver"], json!("docker"), "the fake driver's kind");
    let binds: Vec<String> = serde_json::from_value(dropped.data["binds"].clone()).unwrap();
    assert!(
        binds.contains(&path_str(&fx.dir.path().join("data"))),
        "the data directory is among the dropped binds: {binds:?}"
    );
    let mounted = first(&ev, "sandbox_host_state_mounted");
    assert_eq!(mounted.data["enabled"], json!(false));

    // with host binds nothing is dropped
    fake.host_binds = true;
    let o = rt()
        .block_on(fx.runtime(container(&fake), &[], false).launch(fx.launch()))
        .unwrap();
    assert_eq!(o.status, RunStatus::Finished, "{o:?}");
    assert!(!types(&fx.events(&o)).contains(&"sandbox_host_binds_dropped".to_string()));
}

#[test]
fn lc10_an_explicit_auto_is_refused_before_any_container() {
    let fx = Fixture::new(FLOW);
    let mut fake = FakeDriver::new(Faults::default());
    fake.host_binds = false;
    let o = rt()
        .block_on(
            fx.runtime(container(&fake), &[("ITERION_SANDBOX_HOST_STATE", "auto")], false)
                .launch(fx.launch()),
        )
        .unwrap();
    assert_eq!(
        (o.status, o.failure_code),
        (RunStatus::Failed, Some(FailureCode::SandboxSpecInvalid)),
        "{o:?}"
    );
    let ev = fx.events(&o);
    assert_eq!(
        first(&ev, "run_failed").data["error"],
        json!("host_state auto cannot be honoured by the docker driver; set host_state: none")
    );
    assert!(
        !fake.calls().iter().any(|c| c.starts_with("start")),
        "{:?}",
        fake.calls()
    );
    // the dry run says the same
    let d = fx
        .runtime(container(&fake), &[("ITERION_SANDBOX_HOST_STATE", "auto")], false)
        .dry_run(&fx.launch())
        .unwrap();
    assert!(!d.could_start());
    assert_eq!(d.refused.unwrap().code, FailureCode::SandboxSpecInvalid);
    let d = fx
        .runtime(container(&fake), &[], false)
        .dry_run(&fx.launch())
        .unwrap();
    assert!(d.could_start(), "{:?}", d.refused);
}
