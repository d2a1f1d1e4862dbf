//! Helpers shared by the `store_*` tests.
#![allow(dead_code)]
use iterion_runtime::store::{LaunchInputs, NewRun, OpenRun, Owner, RunId, Store};
use std::collections::BTreeMap;

pub fn new_run(id: &str, env: &[(&str, &str)]) -> NewRun {
    NewRun {
        id: id.to_owned(),
        workflow_name: "release_gate".into(),
        file_path: "/w/app/release.bot".into(),
        workflow_bytes: b"workflow release_gate {}".to_vec(),
        inputs: LaunchInputs::default(),
        work_dir: "/w/app".into(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        iterion_version: "0.1.0".into(),
        owner: Owner::current(),
        now: "2026-01-14T09:31:07Z".into(),
    }
}

pub fn create(store: &Store, id: &str) -> OpenRun {
    create_with_env(store, id, &[])
}

pub fn create_with_env(store: &Store, id: &str, env: &[(&str, &str)]) -> OpenRun {
    let rid = RunId::parse(id).unwrap();
    store.create_run(&rid, new_run(id, env)).unwrap()
}

pub fn raw_json(run: &OpenRun) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(run.dir().join("run.json")).unwrap()).unwrap()
}
