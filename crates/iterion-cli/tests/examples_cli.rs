//! The shipped examples do what they say on a fresh machine: every workflow under `examples/` validates; the
//! ones that need only the local test image run for real in a copy of their own (a git repository with one
//! commit, a scratch `HOME`); the devbox template resolves to its devcontainer.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use iterion_test_support::engine_required;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_iterion");

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn bots(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            bots(&p, out);
        } else if p.extension().is_some_and(|x| x == "bot" || x == "iter") {
            out.push(p);
        }
    }
}

/// A scratch project: `files` (relative path → source file) copied in, made a git repository with one commit.
struct Project {
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
    store: tempfile::TempDir,
}

impl Project {
    fn new(files: &[(&str, PathBuf)]) -> Project {
        let p = Project {
            dir: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            store: tempfile::tempdir().unwrap(),
        };
        for (rel, from) in files {
            let to = p.dir.path().join(rel);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(from, &to).unwrap();
        }
        for args in [&["init", "-q"][..], &["add", "-A"], &["commit", "-qm", "example"]] {
            let o = Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
                .args(args)
                .current_dir(p.dir.path())
                .env("HOME", p.home.path())
                .output()
                .unwrap();
            assert!(o.status.success(), "git {args:?}: {}", text(&o));
        }
        p
    }

    fn iterion(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .arg("--store-dir")
            .arg(self.store.path())
            .current_dir(self.dir.path())
            .env("HOME", self.home.path())
            // the local test image: no registry is asked
            .env("ITERION_SANDBOX_PULL_POLICY", "never")
            .output()
            .unwrap()
    }
}

fn outputs(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "node_finished")
        .map(|e| e["data"]["output"].clone())
        .collect()
}

#[test]
fn every_shipped_workflow_validates() {
    let mut files = Vec::new();
    bots(&examples(), &mut files);
    assert!(files.len() >= 4, "{files:?}");
    for f in files {
        let o = Command::new(BIN).arg("validate").arg(&f).output().unwrap();
        assert!(o.status.success(), "{}: {}", f.display(), text(&o));
    }
}

#[test]
fn locked_down_runs_in_a_fresh_project_and_notifies_on_the_host() {
    if !engine_required("locked_down_runs_in_a_fresh_project_and_notifies_on_the_host") {
        return;
    }
    let p = Project::new(&[("locked_down.bot", examples().join("locked_down.bot"))]);
    let o = p.iterion(&["run", "locked_down.bot", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    // no run-tests.sh in this project: the suite is red, and the host node appends that to a log it creates
    assert_eq!(
        outputs(&o)[0],
        serde_json::json!({"passed": false, "summary": "red"}),
        "{}",
        text(&o)
    );
    let log = std::fs::read_to_string(p.home.path().join(".local/state/test-runs.log")).unwrap();
    assert_eq!(log, "red\n");
}

#[test]
fn sandbox_build_builds_its_image_with_the_build_argument() {
    if !engine_required("sandbox_build_builds_its_image_with_the_build_argument") {
        return;
    }
    let p = Project::new(&[
        ("examples/sandbox_build.bot", examples().join("sandbox_build.bot")),
        (
            "examples/sandbox_build.dockerfile",
            examples().join("sandbox_build.dockerfile"),
        ),
    ]);
    let o = p.iterion(&["run", "examples/sandbox_build.bot", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        outputs(&o)[0],
        serde_json::json!({"version": "tool 1.2.3"}),
        "{}",
        text(&o)
    );
}

#[test]
fn review_and_the_devbox_template_resolve_as_documented() {
    let p = Project::new(&[("review.bot", examples().join("review.bot"))]);
    let o = p.iterion(&["run", "review.bot", "--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let t = examples().join("devcontainer-devbox");
    let p = Project::new(&[
        (
            ".devcontainer/devcontainer.json",
            t.join(".devcontainer/devcontainer.json"),
        ),
        ("devbox.json", t.join("devbox.json")),
    ]);
    let wf = "tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  sandbox: auto\n  t -> done\n";
    std::fs::write(p.dir.path().join("w.bot"), wf).unwrap();
    let o = p.iterion(&["run", "w.bot", "--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(
        shown.contains("devcontainer .devcontainer/devcontainer.json · image jetpackio/devbox:latest"),
        "{shown}"
    );
    assert!(shown.contains("Post-create:   1 command(s)"), "{shown}");
}
