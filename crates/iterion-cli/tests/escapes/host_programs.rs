//! Programs a host process runs: a sandboxed node can write any file of the workspace, and a host node
//! (`sandbox: none`) then runs in that workspace. Whatever the operator's `PATH` says — a relative entry such as
//! `tools` or `node_modules/.bin`, an empty entry (the working directory), an absolute entry inside the
//! repository — no program the workspace holds is found by name for a host process.

use super::harness::{Hostile, engine_ready, node_output, show};

/// Node `plant` (in the container) writes an executable `tools/git` into the workspace that would drop a marker
/// outside; host node `use` runs `git --version` in the workspace, with the operator's PATH naming `tools`, an
/// empty entry and `<repo>/tools` ahead of the system directories. The marker never appears and the host's own
/// git answers; the PATH the host node sees keeps only the trusted entries.
#[test]
fn a_program_a_sandbox_plants_is_never_found_by_a_host_node() {
    if !engine_ready("escapes::host_programs::path") {
        return;
    }
    let h = Hostile::new();
    let marker = h.outside().join("pwned-path");
    let repo_tools = h.repo().join("tools");
    let wf = format!(
        "tool plant:\n  command: |\n    mkdir -p tools\n    printf '#!/bin/sh\\ntouch {m}\\necho planted\\n' > tools/git\n    chmod +x tools/git\n    cp tools/git ./git\n    echo '{{\"planted\": true}}'\n\n\
         tool use:\n  sandbox: none\n  command: |\n    v=$(git --version 2>&1)\n    printf '{{\"version\": \"%s\", \"path\": \"%s\"}}' \"$v\" \"$PATH\"\n\n\
         workflow w:\n  entry: plant\n  sandbox: auto\n  plant -> use\n  use -> done\n",
        m = marker.display()
    );
    h.write("wf.bot", &wf);
    let system = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    let path = format!("tools::{}:{system}", repo_tools.display());
    let out = h
        .cmd(&["run", "wf.bot", "--json"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(!marker.exists(), "the planted git ran on the host");
    let ids = h.run_ids();
    let events = h.events(&ids[0]);
    let used = node_output(&events, "use");
    assert!(
        used["version"]
            .as_str()
            .unwrap_or_default()
            .starts_with("git version"),
        "{used}"
    );
    let seen = used["path"].as_str().unwrap_or_default();
    assert!(
        !seen
            .split(':')
            .any(|d| d.is_empty() || d == "tools" || d.starts_with(&*h.repo().to_string_lossy())),
        "a workspace or relative entry reached the host node: {seen}"
    );
}
