//! `iterion sandbox prune` on the real engine: labelled resources of a dead owner (a container, a network, a
//! cached build image) are listed by the dry run and removed with `--yes`; a container of a live owner is
//! kept by both.
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use iterion_test_support::docker_http::{encode_component, request};
use iterion_test_support::{engine_required, engine_socket};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_iterion");

/// A prune with `--yes` removes every dead owner's resources on the engine, another test's included: the tests
/// of this file take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn engine(method: &str, path: &str, body: &Value) -> (u16, Value) {
    let sock = engine_socket().expect("socket");
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(body).unwrap()
    };
    let r = request(
        &sock,
        method,
        path,
        Some("application/json"),
        &bytes,
        Duration::from_secs(60),
    )
    .expect("engine");
    (r.status, serde_json::from_slice(&r.body).unwrap_or(Value::Null))
}

/// The owner labels of a process: `pid` with `start`, on this host, with `store`.
fn labels(run_id: &str, pid: u32, start: u64, store: &Path, extra: &[(&str, &str)]) -> Value {
    let me = iterion_driver::owner::current_owner(store);
    let mut l = json!({
        "iterion.io/managed": "true",
        "iterion.io/run-id": run_id,
        "iterion.io/owner-host": me.host_name,
        "iterion.io/owner-pid": pid.to_string(),
        "iterion.io/owner-start": start.to_string(),
        "iterion.io/store": store.display().to_string(),
    });
    for (k, v) in extra {
        l[*k] = json!(v);
    }
    l
}

/// The pid of a process that has exited: it names no process (or one started at another time).
fn exited_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// A container of `image` named `name` with `labels`, created (not started); its id.
fn sleeping_container(image: &str, name: &str, labels: Value) -> String {
    let (status, v) = engine(
        "POST",
        &format!("/containers/create?name={name}"),
        &json!({"Image": image, "Cmd": ["sleep", "infinity"], "Labels": labels}),
    );
    assert_eq!(status, 201, "{v}");
    v["Id"].as_str().unwrap().to_owned()
}

/// Removes everything labelled with the test's run ids.
struct Guard(Vec<String>);

impl Drop for Guard {
    fn drop(&mut self) {
        for id in &self.0 {
            let f = encode_component(&format!("{{\"label\":[\"iterion.io/run-id={id}\"]}}"));
            for (list, del) in [
                (
                    format!("/containers/json?all=1&filters={f}"),
                    "/containers/{}?force=1&v=1",
                ),
                (format!("/networks?filters={f}"), "/networks/{}"),
                (format!("/images/json?filters={f}"), "/images/{}?force=1"),
            ] {
                let (_, v) = engine("GET", &list, &Value::Null);
                for item in v.as_array().cloned().unwrap_or_default() {
                    if let Some(x) = item["Id"].as_str() {
                        engine("DELETE", &del.replace("{}", x), &Value::Null);
                    }
                }
            }
        }
    }
}

fn prune(args: &[&str]) -> (i32, Value) {
    let out = Command::new(BIN)
        .args(["sandbox", "prune", "--json"])
        .args(args)
        .env_remove("ITERION_SANDBOX_DRIVER")
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), doc)
}

/// The entry of resource `id` in a prune document.
fn entry<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"].as_str().is_some_and(|x| x.contains(id) || id.contains(x)))
        .unwrap_or_else(|| panic!("{id} is not listed: {doc:#}"))
}

fn exists(path: &str) -> bool {
    engine("GET", path, &Value::Null).0 == 200
}

#[test]
fn prune_lists_then_removes_what_a_dead_owner_left_and_keeps_a_live_owners() {
    if !engine_required("sandbox_prune") {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let image = iterion_test_support::docker_image::ensure_test_image().expect("image");
    let store = tempfile::tempdir().unwrap();
    let (dead_run, live_run) = (
        iterion_test_support::conformance::unique_name(),
        iterion_test_support::conformance::unique_name(),
    );
    let _g = Guard(vec![dead_run.clone(), live_run.clone()]);
    let dead_pid = exited_pid();
    let me = iterion_driver::owner::current_owner(store.path());

    let create = |name: &str, l: Value| sleeping_container(&image, name, l);
    let dead_c = create(
        &format!("iterion-{dead_run}"),
        labels(
            &dead_run,
            dead_pid,
            1,
            store.path(),
            &[("iterion.io/component", "run")],
        ),
    );
    let live_c = create(
        &format!("iterion-{live_run}"),
        labels(
            &live_run,
            me.pid,
            me.start_time,
            store.path(),
            &[("iterion.io/component", "run")],
        ),
    );
    let (status, net) = engine(
        "POST",
        "/networks/create",
        &json!({"Name": format!("iterion-{dead_run}"), "Labels": labels(&dead_run, dead_pid, 1, store.path(), &[("iterion.io/component", "network")])}),
    );
    assert_eq!(status, 201, "{net}");
    let dead_n = net["Id"].as_str().unwrap().to_owned();
    let tag = format!("iterion-sandbox-build:cache-{dead_run}");
    let dockerfile = format!(
        "FROM {image}\nLABEL \"iterion.io/managed\"=\"true\" \"iterion.io/run-id\"=\"{dead_run}\" \
         \"iterion.io/build-key\"=\"{dead_run}\" \"iterion.io/builder-host\"=\"{}\" \"iterion.io/builder-pid\"=\"{dead_pid}\" \
         \"iterion.io/builder-start\"=\"1\" \"iterion.io/store\"=\"{}\"\n",
        me.host_name,
        store.path().display()
    );
    iterion_test_support::docker_image::build_image(&engine_socket().unwrap(), &tag, &dockerfile)
        .expect("build");
    let (_, img) = engine("GET", &format!("/images/{tag}/json"), &Value::Null);
    let dead_i = img["Id"].as_str().unwrap().to_owned();

    // the dry run lists and removes nothing
    let (code, doc) = prune(&[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["dry_run"], json!(true));
    for id in [&dead_c, &dead_n, &dead_i] {
        let e = entry(&doc, id);
        assert_eq!(e["action"], "would_remove", "{e:#}");
        assert!(
            e["reason"].as_str().unwrap().contains(&format!("pid {dead_pid}")),
            "{e:#}"
        );
    }
    assert_eq!(entry(&doc, &dead_i)["kind"], "image");
    let live = entry(&doc, &live_c);
    assert_eq!(
        (live["action"].as_str(), live["reason"].as_str()),
        (Some("kept"), Some("its owner is alive"))
    );
    assert!(exists(&format!("/containers/{dead_c}/json")));
    assert!(exists(&format!("/networks/{dead_n}")));
    assert!(exists(&format!("/images/{dead_i}/json")));

    // --yes removes the dead owner's resources and keeps the live one's
    let (code, doc) = prune(&["--yes"]);
    assert_eq!(doc["dry_run"], json!(false));
    let failed = doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["action"] == "failed");
    assert_eq!(code, if failed { 1 } else { 0 }, "{doc:#}");
    for id in [&dead_c, &dead_n, &dead_i] {
        assert_eq!(entry(&doc, id)["action"], "removed", "{doc:#}");
    }
    assert_eq!(entry(&doc, &live_c)["action"], "kept");
    assert!(!exists(&format!("/containers/{dead_c}/json")));
    assert!(!exists(&format!("/networks/{dead_n}")));
    assert!(!exists(&format!("/images/{dead_i}/json")));
    assert!(exists(&format!("/containers/{live_c}/json")));
}

#[test]
fn prune_keeps_what_another_users_store_left_unless_asked_for_all_users() {
    if !engine_required("sandbox_prune_other_user") {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let image = iterion_test_support::docker_image::ensure_test_image().expect("image");
    // a store another user owns (this test runs as root in CI; elsewhere it cannot give a directory away)
    let store = tempfile::tempdir().unwrap();
    if nix::unistd::chown(store.path(), Some(nix::unistd::Uid::from_raw(4242)), None).is_err() {
        iterion_test_support::notice(
            "SKIPPED prune_keeps_what_another_users_store_left: cannot chown as this user",
        );
        return;
    }
    let run = iterion_test_support::conformance::unique_name();
    let _g = Guard(vec![run.clone()]);
    let dead_pid = exited_pid();
    let id = sleeping_container(
        &image,
        &format!("iterion-{run}"),
        labels(
            &run,
            dead_pid,
            1,
            store.path(),
            &[("iterion.io/component", "run")],
        ),
    );
    let (_, doc) = prune(&["--yes"]);
    let e = entry(&doc, &id);
    assert_eq!(e["action"], "kept", "{e:#}");
    assert!(
        e["reason"].as_str().unwrap().contains("another user (uid 4242)"),
        "{e:#}"
    );
    assert!(exists(&format!("/containers/{id}/json")));
    let (_, doc) = prune(&["--all-users"]);
    assert_eq!(entry(&doc, &id)["action"], "would_remove", "{doc:#}");
    let (_, doc) = prune(&["--all-users", "--yes"]);
    assert_eq!(entry(&doc, &id)["action"], "removed", "{doc:#}");
    assert!(!exists(&format!("/containers/{id}/json")));
}

#[test]
fn runs_rm_of_a_run_whose_process_is_gone_removes_what_it_left_on_the_engine() {
    if !engine_required("runs_rm_leftovers") {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    use iterion_runtime::store::{LaunchInputs, NewRun, Owner, RunId, Store};
    let image = iterion_test_support::docker_image::ensure_test_image().expect("image");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let store = Store::create(&root).unwrap();
    let run = iterion_test_support::conformance::unique_name();
    // `kill -9` of the run's process: the record says running, nobody holds its lock, its container is left
    store
        .create_run(
            &RunId::parse(&run).unwrap(),
            NewRun {
                id: run.clone(),
                workflow_name: "w".into(),
                file_path: "/w/w.bot".into(),
                workflow_bytes: b"workflow w {}".to_vec(),
                inputs: LaunchInputs::default(),
                work_dir: "/w".into(),
                env: Default::default(),
                iterion_version: "0.1.0".into(),
                owner: Owner::current(),
                now: "2026-01-14T08:00:00Z".into(),
            },
        )
        .map(drop)
        .unwrap();
    let _g = Guard(vec![run.clone()]);
    let dead_pid = exited_pid();
    let id = sleeping_container(
        &image,
        &format!("iterion-{run}"),
        labels(&run, dead_pid, 1, &root, &[("iterion.io/component", "run")]),
    );
    let out = Command::new(BIN)
        .args(["runs", "rm", &run, "--store-dir"])
        .arg(&root)
        .env("HOME", tmp.path())
        .env_remove("ITERION_SANDBOX_DRIVER")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("removed container iterion-{run} of a removed run")),
        "{err}"
    );
    assert!(!exists(&format!("/containers/{id}/json")));
}
