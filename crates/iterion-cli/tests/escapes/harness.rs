//! The hostile workspace every escape test starts from: a git repository (the untrusted input) with the local
//! test image as its devcontainer, a HOME of its own (so the default store is `HOME/.iterion` and the agent
//! home `HOME/.claude`), and an `outside` directory standing for the rest of the host, where markers land when an
//! attack succeeds.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

pub use iterion_test_support::containers_of;
use iterion_test_support::docker_http::request;
use iterion_test_support::{engine_required, engine_socket};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_iterion");
pub const IMAGE: &str = "iterion-test/busybox:latest";

/// Whether the engine answers and the local test image is present; under CI a missing engine fails the test.
/// Whether the operator's environment puts this test process's sandboxes under gVisor (the suite run under
/// `ITERION_SANDBOX_RUNTIME_FLOOR=gvisor`).
pub fn under_gvisor() -> bool {
    ["ITERION_SANDBOX_RUNTIME_FLOOR", "ITERION_SANDBOX_OCI_RUNTIME"]
        .iter()
        .any(|k| {
            std::env::var(k)
                .is_ok_and(|v| iterion_spec::resolved::OciRuntime::parse(&v).is_ok_and(|r| r.is_gvisor()))
        })
}

/// Under gVisor, a run the runtime refuses before anything starts: failed, with `why` in its output.
pub fn refused_under_gvisor(out: &std::process::Output, why: &str) -> bool {
    if !under_gvisor() {
        return false;
    }
    assert!(!out.status.success(), "{}", show(out));
    assert!(
        show(out).contains(why),
        "want a refusal naming {why:?}: {}",
        show(out)
    );
    true
}

/// The refusal of a claw node (a claw agent, an llm router) under gVisor.
pub const CLAW_UNDER_GVISOR: &str = "would run under gVisor";

/// The refusal of an open policy under a gVisor registered with `--network=none`.
pub const OPEN_UNDER_GVISOR: &str = "registered with --network=none";

pub fn engine_ready(test: &str) -> bool {
    if !engine_required(test) {
        return false;
    }
    if let Err(e) = iterion_test_support::docker_image::ensure_test_image() {
        panic!("cannot prepare the local test image: {e}");
    }
    true
}

/// A hostile repository and the host around it. Dropping it force-removes every container of its runs.
pub struct Hostile {
    dir: tempfile::TempDir,
}

impl Hostile {
    /// A git repository with `.devcontainer/devcontainer.json` naming the local test image.
    pub fn new() -> Hostile {
        let dir = tempfile::tempdir().unwrap();
        let h = Hostile { dir };
        for d in [h.repo(), h.home(), h.outside()] {
            std::fs::create_dir_all(d).unwrap();
        }
        h.write(
            ".devcontainer/devcontainer.json",
            &format!("{{ \"name\": \"hostile\", \"image\": \"{IMAGE}\" }}\n"),
        );
        let git = Command::new("git")
            .args(["init", "-q", "-b", "main"])
            .current_dir(h.repo())
            .output()
            .expect("git is installed");
        assert!(
            git.status.success(),
            "git init: {}",
            String::from_utf8_lossy(&git.stderr)
        );
        h
    }

    /// The repository root (the work dir of every command).
    pub fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    /// The operator's HOME: the default store is `home/.iterion`, the agent home `home/.claude`.
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The default data dir (`HOME/.iterion`).
    pub fn data_dir(&self) -> PathBuf {
        self.home().join(".iterion")
    }

    /// A host directory outside the repository and the data dir; attacks aim their markers here.
    pub fn outside(&self) -> PathBuf {
        self.dir.path().join("outside")
    }

    /// Writes `rel` (relative to the repository), creating its parents.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.repo().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `iterion ARGS` in the repository, with this HOME, the default store, and no registry contact.
    pub fn cmd(&self, args: &[&str]) -> Command {
        self.cmd_under(&[], args)
    }

    /// [`Hostile::cmd`] started through `wrapper` (a program and its arguments, e.g. `/usr/bin/time -f %M`),
    /// which is given the iterion binary and `args`.
    pub fn cmd_under(&self, wrapper: &[&str], args: &[&str]) -> Command {
        let mut c = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        c.args(args)
            .current_dir(self.repo())
            .env("HOME", self.home())
            .env("ITERION_SANDBOX_PULL_POLICY", "never")
            .env("NO_COLOR", "1")
            .env_remove("ITERION_SANDBOX_DEFAULT")
            .env_remove("ITERION_SANDBOX_FLOOR")
            .env_remove("ITERION_SANDBOX_HOST_STATE")
            .env_remove("ITERION_SANDBOX_HOST_STATE_GUARD")
            .env_remove("ITERION_HOME")
            .env_remove("ITERION_MODE");
        c
    }

    /// Runs `iterion ARGS` to completion.
    pub fn iterion(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// Writes `name` (a workflow) into the repository and runs it with `--json`.
    pub fn run_workflow(&self, name: &str, text: &str) -> Output {
        self.write(name, text);
        self.iterion(&["run", name, "--json"])
    }

    /// Every run directory of the default store (any project), oldest name first.
    pub fn run_dirs(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        collect_run_dirs(&self.data_dir(), &mut out);
        out.sort();
        out
    }

    /// The run ids of the store.
    pub fn run_ids(&self) -> Vec<String> {
        self.run_dirs()
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect()
    }

    /// `run.json` of the run with this id.
    pub fn doc(&self, id: &str) -> Value {
        let dir = self.run_dir(id);
        serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap()
    }

    /// The run directory of `id`.
    pub fn run_dir(&self, id: &str) -> PathBuf {
        self.run_dirs()
            .into_iter()
            .find(|p| p.file_name().is_some_and(|n| n == id))
            .unwrap_or_else(|| panic!("no run {id} under {}", self.data_dir().display()))
    }

    /// The events of the run with this id.
    pub fn events(&self, id: &str) -> Vec<Value> {
        std::fs::read_to_string(self.run_dir(id).join("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Default for Hostile {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        for id in self.run_ids() {
            for c in containers_of(&id) {
                if let Some(sock) = engine_socket() {
                    let _ = request(
                        &sock,
                        "DELETE",
                        &format!("/containers/{c}?force=1&v=1"),
                        None,
                        b"",
                        Duration::from_secs(10),
                    );
                }
            }
            // the images its builds left in the build cache
            remove_images_of(&id);
        }
        // Containers may leave root-owned files in the repository; removal is best effort.
        let _ = Command::new("chmod")
            .args(["-R", "u+rwX"])
            .arg(self.dir.path())
            .output();
    }
}

/// Force-removes the images labelled with `run_id` (what the run's builds put in the build cache).
fn remove_images_of(run_id: &str) {
    let Some(sock) = engine_socket() else { return };
    let filter = iterion_test_support::docker_http::encode_component(&format!(
        "{{\"label\":[\"iterion.io/run-id={run_id}\"]}}"
    ));
    let Ok(list) = request(
        &sock,
        "GET",
        &format!("/images/json?filters={filter}"),
        None,
        b"",
        Duration::from_secs(10),
    ) else {
        return;
    };
    let images: serde_json::Value = serde_json::from_slice(&list.body).unwrap_or_default();
    for id in images
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["Id"].as_str())
    {
        let _ = request(
            &sock,
            "DELETE",
            &format!("/images/{id}?force=1"),
            None,
            b"",
            Duration::from_secs(10),
        );
    }
}

/// Every directory holding a `run.json` below `root`.
fn collect_run_dirs(root: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(root) else {
        return;
    };
    for e in rd.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        if !ft.is_dir() {
            continue;
        }
        let p = e.path();
        if p.join("run.json").is_file() {
            out.push(p);
        } else {
            collect_run_dirs(&p, out);
        }
    }
}

/// The `type` of each event.
pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The first event of type `t`, failing the test when there is none.
pub fn first<'a>(events: &'a [Value], t: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == t)
        .unwrap_or_else(|| panic!("no {t} in {:?}", types(events)))
}

/// The stored output of node `id` (its `node_finished` event's `data.output`).
pub fn node_output<'a>(events: &'a [Value], id: &str) -> &'a Value {
    &events
        .iter()
        .find(|e| e["type"] == "node_finished" && e["node_id"] == id)
        .unwrap_or_else(|| panic!("node {id} did not finish: {:?}", types(events)))["data"]["output"]
}

/// stdout and stderr of an output, for assertion messages.
/// Writes workflow `name` and checks that both `validate` and `run` refuse it with `code` before anything
/// runs, `validate` positioning the diagnostic at a location that starts with `at` (`what` labels failures).
pub fn refused_before_running(h: &Hostile, name: &str, wf: &str, code: &str, at: &str, what: &str) {
    h.write(name, wf);
    let v = h.iterion(&["validate", name]);
    let text = show(&v);
    assert!(!v.status.success(), "{what}: {text}");
    assert!(text.contains(&format!("error[{code}]")), "{what}: {text}");
    assert!(text.contains(at), "{what}: positioned diagnostic: {text}");
    let run = h.iterion(&["run", name, "--json"]);
    assert!(!run.status.success(), "{what}: {}", show(&run));
    assert!(show(&run).contains(code), "{what}: {}", show(&run));
}

pub fn show(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
