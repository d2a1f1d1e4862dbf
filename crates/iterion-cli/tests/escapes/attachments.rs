//! `--attach NAME=PATH` reads a host file and copies it into the store and the sandbox
//! (`/run/iterion/attachments`). The repository chooses the names under the work dir: a symbolic link there
//! used to be followed (the path was canonicalised), so `spec.pdf -> /proc/self/environ` copied iterion's
//! environment, and `creds -> ../home/.aws/credentials` the operator's keys, to every node. Now no link the
//! repository controls is followed, and `/proc`, `/sys`, `/dev` and the credential locations are refused
//! whatever the spelling; the run is refused before it starts, and nothing of the targets reaches the store
//! or a container.
use std::path::Path;

use serde_json::json;

use super::harness::{Hostile, engine_ready, node_output, show};

/// Marks the bytes an attack would leak: in the operator's credentials, a private file outside the
/// repository, and iterion's own environment.
const MARKER: &str = "leak-marker-7f3c9a";

const PDF: &str = "%PDF-1.7\nthe operator's report\n";

/// A workflow whose node, in the run container, prints the attachment.
const WORKFLOW: &str = "attachments:\n  spec: file\n    required: true\n\ntool show:\n  command: `printf '{\"text\": \"%s\"}' \"$(tr -dc 'a-zA-Z0-9 .%-' < {{attachments.spec}})\"`\n\nworkflow w:\n  entry: show\n  sandbox: auto\n  show -> done\n";

/// Every file below `dir` whose bytes hold the marker.
fn holding_marker(dir: &Path, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            holding_marker(&e.path(), out);
        } else if ft.is_file()
            && std::fs::read(e.path()).is_ok_and(|b| b.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()))
        {
            out.push(e.path().display().to_string());
        }
    }
}

/// A hostile repository with the workflow, the operator's credentials and a private directory outside it.
fn setup() -> Hostile {
    let h = Hostile::new();
    h.write("wf.bot", WORKFLOW);
    std::fs::create_dir_all(h.home().join(".aws")).unwrap();
    std::fs::write(
        h.home().join(".aws/credentials"),
        format!("[default]\naws_secret_access_key = {MARKER}\n"),
    )
    .unwrap();
    std::fs::create_dir_all(h.outside().join("private")).unwrap();
    std::fs::write(
        h.outside().join("private/plan.pdf"),
        format!("%PDF-1.7\n{MARKER}\n"),
    )
    .unwrap();
    h
}

fn link(target: impl AsRef<Path>, at: &Path) {
    if let Some(p) = at.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// The attack: the repository ships links to the operator's secrets, and the operator attaches what looks
/// like a repository file. Each is refused before the run starts (exit 2 naming the attachment and the
/// link), in a run and its dry run; no run exists and the marker is nowhere under the data dir.
#[test]
fn repository_links_to_host_secrets_are_never_attached() {
    if !engine_ready("escapes::attachments::repository_links_to_host_secrets_are_never_attached") {
        return;
    }
    let h = setup();
    let repo = h.repo();
    link("/proc/self/environ", &repo.join("spec.pdf"));
    link("../../home/.aws/credentials", &repo.join("docs/creds"));
    link("docs/creds", &repo.join("chain.pdf"));
    link("chain.pdf", &repo.join("chain2.pdf"));
    link(h.outside().join("private"), &repo.join("shared"));
    let cases = [
        ("spec.pdf", "spec.pdf is a symbolic link inside the repository"),
        ("docs/creds", "creds is a symbolic link inside the repository"),
        (
            "chain2.pdf",
            "chain2.pdf is a symbolic link inside the repository",
        ),
        (
            "shared/plan.pdf",
            "shared is a symbolic link inside the repository",
        ),
    ];
    for (path, want) in cases {
        for dry in [false, true] {
            let arg = format!("spec={path}");
            let mut args = vec!["run", "wf.bot", "--attach", arg.as_str()];
            if dry {
                args.push("--dry-run");
            }
            let out = h.cmd(&args).env("LEAK_MARKER", MARKER).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{path}: {}", show(&out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("attachment 'spec': "), "{path}: {err}");
            assert!(err.contains(want), "{path}: {err}");
            assert!(
                err.contains("links the repository controls are never followed"),
                "{path}: {err}"
            );
            assert!(!err.contains(MARKER), "{path}: {err}");
        }
    }
    assert!(h.run_ids().is_empty(), "a run was created: {:?}", h.run_ids());
    let mut leaked = Vec::new();
    holding_marker(&h.data_dir(), &mut leaked);
    assert!(leaked.is_empty(), "the marker reached {leaked:?}");
}

/// The same places named directly, or through a link outside the repository: `/proc`, `/sys`, `/dev` and
/// the credential locations are refused whatever the spelling, before the run starts.
#[test]
fn protected_places_are_refused_whatever_the_spelling() {
    if !engine_ready("escapes::attachments::protected_places_are_refused_whatever_the_spelling") {
        return;
    }
    let h = setup();
    link("/proc/self/environ", &h.outside().join("env.pdf"));
    link(h.home().join(".aws"), &h.outside().join("aws"));
    let creds = h.home().join(".aws/credentials").display().to_string();
    let via_root = format!("/proc/self/root{creds}");
    let outside_env = h.outside().join("env.pdf").display().to_string();
    let outside_aws = h.outside().join("aws/credentials").display().to_string();
    let cases = [
        ("/proc/self/environ", "leads into /proc"),
        ("/proc/self/../self/environ", "leads into /proc"),
        ("//proc//self/environ", "leads into /proc"),
        (via_root.as_str(), "leads into /proc"),
        ("/dev/fd/0", "leads into /dev"),
        ("/dev/stdin", "leads into /dev"),
        ("/sys/kernel/hostname", "leads into /sys"),
        (outside_env.as_str(), "leads into /proc"),
        (creds.as_str(), "is a credential location (.aws)"),
        (outside_aws.as_str(), "is a credential location (.aws)"),
    ];
    for (path, want) in cases {
        let arg = format!("spec={path}");
        let out = h
            .cmd(&["run", "wf.bot", "--attach", &arg])
            .env("LEAK_MARKER", MARKER)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{path}: {}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("attachment 'spec': "), "{path}: {err}");
        assert!(err.contains(want), "{path}: {err}");
        assert!(
            err.contains("which attachments may not come from"),
            "{path}: {err}"
        );
        assert!(!err.contains(MARKER), "{path}: {err}");
    }
    assert!(h.run_ids().is_empty(), "a run was created: {:?}", h.run_ids());
    let mut leaked = Vec::new();
    holding_marker(&h.data_dir(), &mut leaked);
    assert!(leaked.is_empty(), "the marker reached {leaked:?}");
}

/// The operator's own link outside the repository, to an ordinary file, keeps working: the node in the
/// container reads the file it leads to.
#[test]
fn an_operator_link_outside_the_repository_still_attaches() {
    if !engine_ready("escapes::attachments::an_operator_link_outside_the_repository_still_attaches") {
        return;
    }
    let h = setup();
    std::fs::write(h.outside().join("report.pdf"), PDF).unwrap();
    link(h.outside(), &h.home().join("docs"));
    let arg = format!("spec={}", h.home().join("docs/report.pdf").display());
    let out = h.iterion(&["run", "wf.bot", "--json", "--attach", &arg]);
    assert!(out.status.success(), "{}", show(&out));
    let ids = h.run_ids();
    assert_eq!(ids.len(), 1);
    let ev = h.events(&ids[0]);
    let started = ev
        .iter()
        .find(|e| e["type"] == "node_started" && e["node_id"] == "show")
        .unwrap();
    assert_eq!(started["data"]["placement"], json!("run"));
    assert_eq!(
        node_output(&ev, "show"),
        &json!({"text": "%PDF-1.7the operators report"})
    );
    let stored = h.run_dir(&ids[0]).join("attachments/spec/report.pdf");
    assert_eq!(std::fs::read_to_string(stored).unwrap(), PDF);
}
