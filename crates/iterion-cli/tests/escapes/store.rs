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
