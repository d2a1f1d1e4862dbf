//! Host scripts: a `sandbox: none` node's `script:` runs on the host, after sandboxed nodes have written what
//! they like into the workspace and produced the values it reads. The interpreter must find nothing a sandbox
//! planted (Python's `json.py` beside the script or in the working directory), and no value may run as code.

use super::harness::{Hostile, engine_ready, node_output, show};

/// Node `plant` (in the container) writes a `json.py` and a `sitecustomize.py` into the workspace, each
/// dropping a marker outside when imported; host node `use` runs a Python script that imports `json`, with the
/// workspace as its working directory. No marker appears and the
/// standard library's `json` answers.
#[test]
fn a_module_a_sandbox_plants_in_the_workspace_is_never_imported_by_a_host_script() {
    if !engine_ready("escapes::scripts::planted_module") {
        return;
    }
    let h = Hostile::new();
    let out = h.outside();
    let m = out.join("pwned-json");
    let s = out.join("pwned-site");
    let wf = format!(
        "tool plant:\n  command: |\n    printf 'open(\"{m}\", \"w\").close()\\nPLANTED = True\\n' > json.py\n    printf 'open(\"{s}\", \"w\").close()\\n' > sitecustomize.py\n    echo '{{\"planted\": true}}'\n\n\
         tool use:\n  sandbox: none\n  language: py\n  script: |\n    import json, os\n    print(json.dumps({{\"planted\": hasattr(json, \"PLANTED\"), \"cwd\": os.getcwd()}}))\n\n\
         workflow w:\n  entry: plant\n  sandbox: auto\n  plant -> use\n  use -> done\n",
        m = m.display(),
        s = s.display()
    );
    let run = h.run_workflow("wf.bot", &wf);
    assert!(!m.exists(), "the planted json.py ran on the host\n{}", show(&run));
    assert!(!s.exists(), "the planted sitecustomize.py ran on the host");
    assert!(run.status.success(), "{}", show(&run));
    let ids = h.run_ids();
    let events = h.events(&ids[0]);
    let used = node_output(&events, "use");
    assert_eq!(used["planted"], false, "{used}");
    assert!(
        h.repo().join("json.py").exists(),
        "the module was planted in the workspace the host script ran in"
    );
}
