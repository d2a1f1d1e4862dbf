//! The run store's location and records (escape class 5): a repository (or an earlier node) never decides
//! where the store lives, and a signed `run.json` is only ever valid for the run and the directory it was
//! signed for.

use serde_json::json;

use crate::harness::{Hostile, engine_ready, node_output, show};

/// The repository ships `.iterion/` with the store marker and a `runs` symlink to a workspace directory. The
/// store stays in the data dir: nothing is recorded in the workspace, and a node that looks there for a
/// `run.json` to read and an `events.jsonl` to delete (its own `network_blocked` trail) finds none.
#[test]
fn a_repository_cannot_choose_the_store_location() {
    if !engine_ready("escapes::store::location") {
        return;
    }
    let h = Hostile::new();
    h.write(".iterion/.iterion-store", "");
    let exposed = h.repo().join("exposed");
    std::fs::create_dir_all(&exposed).unwrap();
    std::os::unix::fs::symlink("../exposed", h.repo().join(".iterion/runs")).unwrap();
    let out = h.run_workflow(
        "wf.bot",
        "tool look:\n  command: |\n    n=$(ls exposed/*/run.json 2>/dev/null | wc -l)\n    \
         d=0; for f in exposed/*/events.jsonl; do if [ -f \"$f\" ] && rm -f \"$f\"; then d=1; fi; done\n    \
         echo \"{\\\"run_json\\\": $n, \\\"deleted\\\": $d}\"\n\n\
         workflow w:\n  entry: look\n  sandbox: auto\n  look -> done\n",
    );
    assert!(out.status.success(), "{}", show(&out));
    let ids = h.run_ids();
    assert_eq!(
        ids.len(),
        1,
        "the run is not in the data dir's store {}: {}",
        h.data_dir().display(),
        show(&out)
    );
    let listed: Vec<_> = std::fs::read_dir(&exposed)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        listed.is_empty(),
        "the store wrote into the workspace: {listed:?}"
    );
    assert_eq!(
        node_output(&h.events(&ids[0]), "look"),
        &json!({"run_json": 0, "deleted": 0}),
        "a node reached the run's records through the workspace"
    );
    assert!(!h.repo().join(".iterion/runs").join(&ids[0]).exists());
}

/// Run X is a host run (`--sandbox none`, the operator's choice for that workflow) parked before its node
/// did anything; run Y is a sandboxed run of another workflow. Something that can write the store copies X's
/// signed `run.json` over Y's: `resume Y` is refused as tampered, naming Y's `run.json`, and X's host node
/// never runs for it. X's own record still resumes.
#[test]
fn resume_refuses_another_runs_signed_record() {
    if !engine_ready("escapes::store::swapped_record") {
        return;
    }
    let h = Hostile::new();
    let armed = h.outside().join("armed");
    let marker = h.outside().join("x-ran-on-host");
    let x_flow = format!(
        "tool step:\n  command: `if [ -f {a} ]; then touch {m}; echo '{{}}'; else exit 3; fi`\n\n\
         workflow x:\n  entry: step\n  step -> done\n",
        a = armed.display(),
        m = marker.display()
    );
    h.write("x.bot", &x_flow);
    let out = h.iterion(&["run", "x.bot", "--sandbox", "none", "--json"]);
    assert!(!out.status.success(), "x must park: {}", show(&out));
    let x = h.run_ids();
    assert_eq!(x.len(), 1, "{x:?}");
    let x = x[0].clone();
    let out = h.run_workflow(
        "y.bot",
        "tool step:\n  command: `exit 3`\n\nworkflow y:\n  entry: step\n  sandbox: auto\n  step -> done\n",
    );
    assert!(!out.status.success(), "y must park: {}", show(&out));
    let y = h.run_ids().into_iter().find(|id| *id != x).expect("run y");
    for id in [&x, &y] {
        assert_eq!(h.doc(id)["status"], "failed_resumable", "{:#}", h.doc(id));
    }
    let y_json = h.run_dir(&y).join("run.json");
    let swapped = std::fs::read(h.run_dir(&x).join("run.json")).unwrap();
    std::fs::write(&y_json, &swapped).unwrap();
    std::fs::write(&armed, "").unwrap();

    let out = h.iterion(&["resume", &y]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("RUN_RECORD_TAMPERED") && err.contains(&*y_json.to_string_lossy()),
        "{}",
        show(&out)
    );
    assert!(!marker.exists(), "resume {y} ran x's host node");
    assert_eq!(
        std::fs::read(&y_json).unwrap(),
        swapped,
        "the refused record was changed"
    );
    let out = h.iterion(&["resume", &y, "--force"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("RUN_RECORD_TAMPERED"),
        "{}",
        show(&out)
    );
    assert!(!marker.exists(), "resume {y} --force ran x's host node");

    // X's record in its own place is still valid.
    std::fs::remove_file(&armed).unwrap();
    let out = h.iterion(&["resume", &x, "--json"]);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("RUN_RECORD_TAMPERED"),
        "{}",
        show(&out)
    );
    assert_eq!(h.doc(&x)["status"], "failed_resumable");
}

/// The operator put the store inside the repository (`--store-dir <repo>/sub/store`: hidden from the sandbox,
/// but its parent `sub` is the workspace's). A node renames `sub` away, and plants `sub/store -> ../exposed`
/// with `exposed/runs/<its run id>/` ready. Every later write of the run (the checkpoint, the final status, the
/// logs) goes to the run directory iterion opened, never through the planted link: nothing lands in `exposed/`,
/// and the real record, where the rename moved it, says the run finished.
#[test]
fn a_renamed_store_parent_does_not_redirect_store_writes() {
    if !engine_ready("escapes::store::renamed_parent") {
        return;
    }
    let h = Hostile::new();
    let store = h.repo().join("sub/store");
    std::fs::create_dir_all(&store).unwrap();
    h.write(
        "wf.bot",
        "tool swap:\n  command: |\n    moved=0\n    if mv sub sub2 2>/dev/null; then moved=1; fi\n    \
         mkdir -p \"exposed/runs/$ITERION_RUN_ID\" sub\n    ln -s ../exposed sub/store\n    \
         echo \"{\\\"moved\\\": $moved}\"\n\n\
         workflow w:\n  entry: swap\n  sandbox: auto\n  swap -> done\n",
    );
    let out = h.iterion(&["run", "wf.bot", "--json", "--store-dir", &store.to_string_lossy()]);
    let exposed = h.repo().join("exposed/runs");
    let planted: Vec<_> = std::fs::read_dir(&exposed)
        .map(|rd| rd.flatten().collect())
        .unwrap_or_default();
    let id = planted
        .first()
        .map(|e| e.file_name().to_string_lossy().into_owned());
    let written: Vec<String> = planted
        .iter()
        .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        written.is_empty(),
        "the store wrote through the planted link: {written:?}\n{}",
        show(&out)
    );
    let Some(id) = id else {
        panic!("the node did not plant its run directory: {}", show(&out));
    };
    // The rename took effect on the host (the store's tmpfs moved with its parent) ...
    let moved = h.repo().join("sub2/store/runs").join(&id);
    assert!(
        moved.is_dir(),
        "the node could not rename the store's parent: {}",
        show(&out)
    );
    assert!(h.repo().join("sub/store").is_symlink());
    // ... and the record followed its directory and is complete.
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(moved.join("run.json")).unwrap()).unwrap();
    assert_eq!(doc["status"], "finished", "{doc:#}\n{}", show(&out));
    assert!(out.status.success(), "{}", show(&out));
    let events = std::fs::read_to_string(moved.join("events.jsonl")).unwrap();
    assert!(events.contains("\"run_finished\""), "{events}");
}
