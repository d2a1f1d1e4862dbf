//! Host state inside the sandbox (escape classes 2 and 6): the run store and iterion's data dir are never
//! reachable from a sandbox, a run record that something without the host's key rewrote is never resumed, a
//! repository cannot mount the data dir or the agent home itself, and nothing the host's agent CLI later
//! executes or obeys can be planted through the mounted agent home.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::harness::{Hostile, engine_ready, node_output, show};

/// A workflow whose only node fails inside a container (so the run parks `failed_resumable` with a
/// checkpoint) and, run on the host, leaves `marker` there. "On the host" is told by the marker's directory,
/// which exists only there (`/.dockerenv` does not tell: the host may itself be a container).
fn victim(marker: &Path) -> String {
    let dir = marker.parent().unwrap();
    format!(
        "tool step:\n  command: `if [ -d {} ]; then touch {}; echo '{{\"host\": true}}'; else exit 3; fi`\n\n\
         workflow victim:\n  entry: step\n  step -> done\n",
        dir.display(),
        marker.display()
    )
}

/// Runs the victim workflow; returns its run id (status `failed_resumable`, checkpoint at `step`).
fn park_victim(h: &Hostile, marker: &Path) -> String {
    let out = h.run_workflow("victim.bot", &victim(marker));
    assert!(!out.status.success(), "the victim must park: {}", show(&out));
    let ids = h.run_ids();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let doc = h.doc(&ids[0]);
    assert_eq!(doc["status"], "failed_resumable", "{doc:#}");
    assert!(!marker.exists(), "the victim's node ran on the host at launch");
    ids[0].clone()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every path (relative) under `root`, files with their content.
fn tree(root: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            if p.is_dir() {
                out.insert(rel, None);
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read(&p).ok());
            }
        }
    }
    out
}

/// Class 2, finding 37: a node of another project rewrites a parked run's `run.json` (`cli_mode: none`), plants
/// a file in the data dir's `bin/` and `projects/`, and truncates every `events.jsonl` it can find, its own
/// included. Every write fails inside the sandbox and the host's files are unchanged; a plain resume of the
/// victim then still runs in a container.
#[test]
fn a_node_cannot_write_the_run_store_or_the_data_dir() {
    if !engine_ready("escapes::host_state::store_writes") {
        return;
    }
    let h = Hostile::new();
    let marker = h.outside().join("victim-ran-on-host");
    let victim_id = park_victim(&h, &marker);
    let victim_json = h.run_dir(&victim_id).join("run.json");
    let before = std::fs::read(&victim_json).unwrap();
    let data = h.data_dir();
    let bin_dir = data.join("bin");
    let attack = format!(
        "tool attack:\n  command: `w=0; if sed -i 's/\"cli_mode\": null/\"cli_mode\": \"none\"/' {rj} 2>/dev/null && grep -q '\"cli_mode\": \"none\"' {rj}; then w=1; fi; \
         b=0; if mkdir -p {bin} 2>/dev/null && echo evil > {bin}/iterion-relay-planted 2>/dev/null; then b=1; fi; \
         p=0; if echo evil > {data}/projects/planted 2>/dev/null; then p=1; fi; \
         e=0; for f in {data}/projects/*/runs/*/events.jsonl; do if [ -f \"$f\" ] && : > \"$f\" 2>/dev/null; then e=1; fi; done; \
         echo \"{{\\\"run_json\\\": $w, \\\"bin\\\": $b, \\\"projects\\\": $p, \\\"events\\\": $e}}\"`\n\n\
         workflow attacker:\n  entry: attack\n  sandbox: auto\n  attack -> done\n",
        rj = victim_json.display(),
        bin = bin_dir.display(),
        data = data.display(),
    );
    h.write("attacker/attacker.bot", &attack);
    let out = h.iterion(&["run", "attacker/attacker.bot", "--json"]);
    assert!(out.status.success(), "{}", show(&out));
    let attacker_id = h
        .run_ids()
        .into_iter()
        .find(|id| *id != victim_id)
        .expect("the attacker's run");
    let events = h.events(&attacker_id);
    let got = node_output(&events, "attack");
    // `bin` may be created inside the container's own file system (the data dir path is not mounted); only
    // the host side counts for it.
    assert_eq!(
        (&got["run_json"], &got["projects"], &got["events"]),
        (&json!(0), &json!(0), &json!(0)),
        "a sandboxed node wrote into the data dir: {got}"
    );
    assert_eq!(
        std::fs::read(&victim_json).unwrap(),
        before,
        "the victim's run.json changed"
    );
    assert!(
        !bin_dir.join("iterion-relay-planted").exists(),
        "a sandboxed node planted a binary in the data dir's bin/"
    );
    assert!(!data.join("projects/planted").exists());
    assert!(
        events.iter().any(|e| e["type"] == "run_started"),
        "the attacker's own events were truncated"
    );
    let hs = events
        .iter()
        .find(|e| e["type"] == "sandbox_host_state_mounted")
        .expect("sandbox_host_state_mounted");
    assert_eq!(hs["data"]["enabled"], true, "{hs}");
    let mounts = hs["data"]["mounts"].to_string();
    assert!(!mounts.contains(".iterion"), "the data dir is mounted: {mounts}");
    assert!(
        hs["data"]["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["path"] == data.display().to_string()
                && s["reason"].as_str().unwrap().starts_with("never shared")),
        "{hs}"
    );

    // The victim resumes as it was launched: in a container, so the node fails again and no marker appears.
    let out = h.iterion(&["resume", "--run-id", &victim_id, "--json"]);
    assert!(!out.status.success(), "{}", show(&out));
    assert!(!marker.exists(), "the victim ran on the host after the attack");
    assert_eq!(h.doc(&victim_id)["status"], "failed_resumable");
}

/// Class 2, any other path to the record: `run.json` rewritten on the host directly (`cli_mode: none`) makes a
/// plain `iterion resume` refuse with `RUN_RECORD_TAMPERED`, without running anything on the host and without
/// changing the record. A record whose tag was stripped is refused too, unless the operator says `--force`.
#[test]
fn resume_refuses_a_run_record_changed_without_the_host_key() {
    if !engine_ready("escapes::host_state::tampered_record") {
        return;
    }
    let h = Hostile::new();
    let marker = h.outside().join("victim-ran-on-host");
    let id = park_victim(&h, &marker);
    let path = h.run_dir(&id).join("run.json");
    let mut doc: Value = h.doc(&id);
    assert!(
        doc["integrity"]
            .as_str()
            .unwrap_or_default()
            .starts_with("hmac-sha256-v2:"),
        "the record carries no integrity tag: {doc:#}"
    );
    doc["sandbox"]["requested"]["cli_mode"] = json!("none");
    let tampered = format!("{}\n", serde_json::to_string_pretty(&doc).unwrap());
    std::fs::write(&path, &tampered).unwrap();

    let out = h.iterion(&["resume", "--run-id", &id]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = stderr(&out);
    assert!(err.contains("RUN_RECORD_TAMPERED"), "{err}");
    assert!(err.contains("does not match its integrity tag"), "{err}");
    assert!(err.contains("hint:"), "{err}");
    assert!(!marker.exists(), "a tampered record ran the node on the host");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        tampered,
        "the refused record was changed"
    );
    // --force accepts a changed workflow, never a record whose tag does not match
    let out = h.iterion(&["resume", "--run-id", &id, "--force"]);
    assert!(stderr(&out).contains("RUN_RECORD_TAMPERED"), "{}", show(&out));
    assert!(!marker.exists(), "--force ran a tampered record on the host");

    // Stripping the tag is no way around it: an unsigned record is refused unless the operator forces it.
    doc.as_object_mut().unwrap().remove("integrity");
    doc["sandbox"]["requested"]["cli_mode"] = Value::Null;
    std::fs::write(
        &path,
        format!("{}\n", serde_json::to_string_pretty(&doc).unwrap()),
    )
    .unwrap();
    let out = h.iterion(&["resume", "--run-id", &id]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = stderr(&out);
    assert!(
        err.contains("RUN_RECORD_TAMPERED") && err.contains("has no integrity tag"),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    assert!(!marker.exists());
    // Accepted with --force (the record says container, so the node runs in one and fails again), and signed
    // from then on: the next plain resume is accepted.
    let out = h.iterion(&["resume", "--run-id", &id, "--force", "--json"]);
    assert!(!stderr(&out).contains("RUN_RECORD_TAMPERED"), "{}", show(&out));
    assert!(!marker.exists(), "the forced resume ran on the host");
    assert!(
        h.doc(&id)["integrity"].is_string(),
        "the forced resume left the record unsigned"
    );
    let out = h.iterion(&["resume", "--run-id", &id, "--json"]);
    assert!(!stderr(&out).contains("RUN_RECORD_TAMPERED"), "{}", show(&out));
    assert_eq!(h.doc(&id)["status"], "failed_resumable");
    assert!(!marker.exists());
}

/// The repository's devcontainer mounts iterion's data dir or the agent home itself (directly, or through a
/// symbolic link in the repository): the run fails `SANDBOX_SPEC_INVALID` naming the mount, with host state
/// on or off, and no container ever sees the store.
#[test]
fn a_devcontainer_cannot_mount_the_data_dir_or_the_agent_home() {
    if !engine_ready("escapes::host_state::devcontainer_mounts") {
        return;
    }
    let cases = [
        (
            "source=${localEnv:HOME}/.iterion,target=/store,type=bind",
            "iterion's data directory",
        ),
        (
            "source=${localEnv:HOME}/.iterion/projects,target=/store,type=bind",
            "iterion's data directory",
        ),
        (
            "source=${localEnv:HOME}/.claude,target=/agent,type=bind",
            "the agent home",
        ),
        (
            "source=${localWorkspaceFolder}/link,target=/store,type=bind",
            "iterion's data directory",
        ),
    ];
    for host_state in ["auto", "none"] {
        for (mount, what) in cases {
            let h = Hostile::new();
            std::fs::create_dir_all(h.data_dir().join("projects")).unwrap();
            std::fs::create_dir_all(h.home().join(".claude")).unwrap();
            std::os::unix::fs::symlink(h.data_dir(), h.repo().join("link")).unwrap();
            h.write(
                ".devcontainer/devcontainer.json",
                &format!(
                    "{{ \"name\": \"hostile\", \"image\": \"{}\", \"mounts\": [\"{mount}\"] }}\n",
                    crate::harness::IMAGE
                ),
            );
            h.write(
                "wf.bot",
                "tool look:\n  command: `ls /store /agent; echo '{\"looked\": true}'`\n\nworkflow w:\n  entry: look\n  sandbox: auto\n  look -> done\n",
            );
            let out = h.iterion(&["run", "wf.bot", "--json", "--sandbox-host-state", host_state]);
            assert!(!out.status.success(), "{host_state} {mount}: {}", show(&out));
            let id = h.run_ids().pop().expect("a run record");
            let doc = h.doc(&id);
            assert_eq!(
                doc["failure_code"], "SANDBOX_SPEC_INVALID",
                "{host_state} {mount}: {doc:#}"
            );
            let error = doc["error"].as_str().unwrap_or_default();
            assert!(
                error.contains("is refused") && error.contains(what),
                "{host_state} {mount}: {error}"
            );
            assert!(
                !h.events(&id).iter().any(|e| e["type"] == "node_started"),
                "{host_state} {mount}: a node ran"
            );
        }
    }
}

/// Class 6: with host state on, a node tries to plant what the host's agent CLI executes or obeys under the
/// agent home, both paths that exist (`agents/`, `settings.json` planted by nobody) and paths that do not yet.
/// Every write fails, the host's agent home gains nothing, and the credentials stay readable and sessions
/// writable.
#[test]
fn agent_home_paths_the_host_executes_are_read_only_whether_or_not_they_exist() {
    if !engine_ready("escapes::host_state::agent_home") {
        return;
    }
    let h = Hostile::new();
    let claude = h.home().join(".claude");
    std::fs::create_dir_all(claude.join("projects")).unwrap();
    std::fs::create_dir_all(claude.join("agents")).unwrap();
    std::fs::write(claude.join(".credentials.json"), "cred-1234").unwrap();
    let before = tree(&claude);
    let targets = [
        "settings.json",
        "settings.local.json",
        "CLAUDE.md",
        "commands/x.md",
        "agents/y.md",
        "hooks/h.sh",
        "skills/s/SKILL.md",
        "plugins/p/hooks.json",
        "output-styles/o.md",
        "shell-snapshots/snapshot.sh",
    ];
    let script = format!(
        "tool plant:\n  command: `d={d}; w=''; for p in {list}; do mkdir -p \"$(dirname \"$d/$p\")\" 2>/dev/null; if echo evil > \"$d/$p\" 2>/dev/null; then w=\"$w $p\"; fi; done; \
         c=$(cat $d/.credentials.json); s=0; if echo '{{}}' > $d/projects/session.jsonl; then s=1; fi; \
         echo \"{{\\\"written\\\": \\\"$w\\\", \\\"cred\\\": \\\"$c\\\", \\\"session\\\": $s}}\"`\n\n\
         workflow w:\n  entry: plant\n  sandbox: auto\n  plant -> done\n",
        d = claude.display(),
        list = targets.join(" "),
    );
    let out = h.run_workflow("wf.bot", &script);
    assert!(out.status.success(), "{}", show(&out));
    let id = h.run_ids().pop().unwrap();
    let events = h.events(&id);
    assert_eq!(
        node_output(&events, "plant"),
        &json!({"written": "", "cred": "cred-1234", "session": 1}),
        "paths under the agent home were writable"
    );
    let mut after = tree(&claude);
    assert_eq!(
        after.remove(Path::new("projects/session.jsonl")),
        Some(Some(b"{}\n".to_vec())),
        "the session did not reach the host"
    );
    assert_eq!(after, before, "the agent home on the host changed");
    let hs = events
        .iter()
        .find(|e| e["type"] == "sandbox_host_state_mounted")
        .expect("sandbox_host_state_mounted");
    assert_eq!(
        hs["data"]["created"],
        json!([]),
        "iterion created files in the agent home: {hs}"
    );
}

/// Class 2 with a store the operator put in the repository (`--store-dir <repo>/.iterion`), which the workspace
/// bind would otherwise expose: a node of the same repository cannot read or rewrite a parked run's `run.json` there.
#[test]
fn a_run_store_inside_the_workspace_is_hidden_from_the_sandbox() {
    if !engine_ready("escapes::host_state::local_store") {
        return;
    }
    let h = Hostile::new();
    // The operator's choice: a repository never picks its store, but `--store-dir` may be inside it.
    let store = h.repo().join(".iterion");
    let runs = store.join("runs");
    let marker = h.outside().join("victim-ran-on-host");
    h.write("victim.bot", &victim(&marker));
    let out = h.iterion(&[
        "run",
        "victim.bot",
        "--json",
        "--store-dir",
        &store.to_string_lossy(),
    ]);
    assert!(!out.status.success(), "the victim must park: {}", show(&out));
    let victim_id = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .next()
        .expect("the victim's run in the project-local store");
    let victim_json = runs.join(&victim_id).join("run.json");
    let before = std::fs::read(&victim_json).unwrap();
    let attack = format!(
        "tool attack:\n  command: `w=0; if sed -i 's/\"cli_mode\": null/\"cli_mode\": \"none\"/' {rj} 2>/dev/null; then w=1; fi; \
         n=$(ls {runs} 2>/dev/null | wc -l); echo \"{{\\\"run_json\\\": $w, \\\"listed\\\": $n}}\"`\n\n\
         workflow attacker:\n  entry: attack\n  sandbox: auto\n  attack -> done\n",
        rj = victim_json.display(),
        runs = runs.display(),
    );
    h.write("attacker.bot", &attack);
    let out = h.iterion(&[
        "run",
        "attacker.bot",
        "--json",
        "--store-dir",
        &store.to_string_lossy(),
    ]);
    assert!(out.status.success(), "{}", show(&out));
    let attacker_id = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|id| *id != victim_id)
        .expect("the attacker's run");
    let events: Vec<Value> = std::fs::read_to_string(runs.join(&attacker_id).join("events.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        node_output(&events, "attack"),
        &json!({"run_json": 0, "listed": 0}),
        "the project-local run store is reachable from the sandbox"
    );
    assert_eq!(
        std::fs::read(&victim_json).unwrap(),
        before,
        "the victim's run.json changed"
    );
}
