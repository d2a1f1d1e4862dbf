//! The escape suite: attacks on the sandbox boundary by a hostile repository and hostile nodes, run against the
//! real engine with the default settings (store under `$HOME/.iterion`, `host_state: auto`). Each test
//! reproduces one attack and asserts that its observable effect on the host is absent (a marker file, a host
//! listener hit, the engine answering, a host execution on resume, bounded memory or time).
//!
//! The threat model and what each module proves are in docs/security.md. One module per escape class; the
//! shared workspace and assertions live in `harness`.

mod attachments;
mod bad_input;
mod builds;
mod claw_env;
mod credentials;
mod full_disk;
mod git_paths;
mod harness;
mod host_programs;
mod host_state;
mod placement;
mod procs;
mod quoting;
mod scripts;
mod store;
mod worktree;

use harness::{Hostile, engine_ready, node_output, show};
use serde_json::json;

/// The baseline every attack starts from: with the default settings a tool node runs inside the container and
/// the run lands in the default store under HOME.
#[test]
fn baseline_a_tool_node_runs_in_the_container_with_the_default_store() {
    if !engine_ready("escapes::baseline") {
        return;
    }
    let h = Hostile::new();
    // `/.dockerenv` would not do: the host itself may be a container. The `outside` directory exists on the
    // host only, so a node that cannot see it runs in the sandbox.
    let outside = h.outside();
    let out = h.run_workflow(
        "wf.bot",
        &format!(
            "tool where:\n  command: `if [ -d {} ]; then echo '{{\"inside\": false}}'; else echo '{{\"inside\": true}}'; fi`\n\nworkflow w:\n  entry: where\n  sandbox: auto\n  where -> done\n",
            outside.display()
        ),
    );
    assert!(out.status.success(), "{}", show(&out));
    let ids = h.run_ids();
    assert_eq!(ids.len(), 1, "one run in {}", h.data_dir().display());
    assert_eq!(node_output(&h.events(&ids[0]), "where"), &json!({"inside": true}));
}
