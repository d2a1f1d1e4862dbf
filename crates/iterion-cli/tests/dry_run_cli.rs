//! `iterion run --dry-run`: what a run would do, decided up to its first side effect — nothing is created
//! (no run record, worktree, image or container) — and `validate` agreeing with it on every workflow file of
//! the repository.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

/// `iterion ARGS` in `cwd` with a HOME of its own, no inherited `ITERION_*` variable, plus `env`.
fn iterion(cwd: &Path, home: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_iterion"));
    c.args(args)
        .current_dir(cwd)
        .env("HOME", home)
        .env("NO_COLOR", "1");
    for (k, _) in std::env::vars() {
        if k.starts_with("ITERION_") {
            c.env_remove(k);
        }
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run iterion")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("json ({e}): {}", show(o)))
}

/// No engine reachable: both engine sockets point at a missing file.
fn no_engine(dir: &Path) -> Vec<(&'static str, String)> {
    let sock = format!("unix://{}", dir.join("absent.sock").display());
    vec![
        ("DOCKER_HOST", sock.clone()),
        ("CONTAINER_HOST", sock),
        ("XDG_RUNTIME_DIR", dir.display().to_string()),
    ]
}

/// Every file (not directory) below `dir`, relative paths sorted.
fn files_below(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            files_below(&p, out);
        } else {
            out.push(p);
        }
    }
}

struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    /// A work dir with a devcontainer.json naming the local test image.
    fn new() -> Workspace {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = Workspace { dir };
        std::fs::create_dir_all(w.work().join(".devcontainer")).unwrap();
        std::fs::create_dir_all(w.home()).unwrap();
        std::fs::write(
            w.work().join(".devcontainer/devcontainer.json"),
            "{ \"image\": \"iterion-test/busybox:latest\", \"containerEnv\": { \"GITHUB_TOKEN\": \"x\", \"CI\": \"1\" } }\n",
        )
        .unwrap();
        w
    }
    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.work().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
    fn dry(&self, file: &Path, extra: &[&str], env: &[(&str, String)]) -> Output {
        let mut args = vec!["run", file.to_str().unwrap(), "--dry-run"];
        args.extend(extra);
        iterion(&self.work(), &self.home(), &args, env)
    }
    /// Nothing was created: no store, no worktree, under the work dir or the HOME.
    fn assert_nothing_created(&self) {
        for d in [
            self.work().join(".iterion"),
            self.home().join(".iterion/projects"),
        ] {
            assert!(
                !d.join("runs").exists() && !d.exists(),
                "{} was created",
                d.display()
            );
        }
    }
}

const TOOL_AUTO: &str =
    "tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  sandbox: auto\n  t -> done\n";

#[test]
fn without_an_engine_auto_falls_back_to_the_host_and_says_so() {
    let w = Workspace::new();
    let f = w.write("w.bot", TOOL_AUTO);
    let env = no_engine(w.dir.path());
    let o = w.dry(&f, &[], &env);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("── Dry run: w ──\n"), "{out}");
    assert!(out.contains("Driver:        none"), "{out}");
    assert!(out.contains("network policy NOT enforced"), "{out}");
    assert!(out.contains("the run could start (nothing was created)"), "{out}");
    let o = w.dry(&f, &["--json"], &env);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let doc = json(&o);
    assert_eq!(doc["could_start"], true, "{doc:#}");
    assert_eq!(doc["sandboxed"], false, "{doc:#}");
    assert!(
        doc["skipped"].as_str().unwrap().contains("no container runtime"),
        "{doc:#}"
    );
    assert_eq!(
        doc["plan"]["run"]["devcontainer"]["path"],
        ".devcontainer/devcontainer.json"
    );
    w.assert_nothing_created();
}

#[test]
fn an_inline_container_without_an_engine_is_refused() {
    let w = Workspace::new();
    let f = w.write(
        "w.bot",
        "tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  sandbox:\n    mode: inline\n    image: \"iterion-test/busybox:latest\"\n  t -> done\n",
    );
    let o = w.dry(&f, &["--json"], &no_engine(w.dir.path()));
    assert_eq!(code(&o), 1, "{}", show(&o));
    let doc = json(&o);
    assert_eq!(doc["could_start"], false);
    assert_eq!(doc["refused"]["code"], "SANDBOX_DRIVER_UNAVAILABLE", "{doc:#}");
    assert!(
        doc["refused"]["error"]
            .as_str()
            .unwrap()
            .contains("--sandbox none"),
        "{doc:#}"
    );
    let o = w.dry(&f, &[], &no_engine(w.dir.path()));
    assert_eq!(code(&o), 1);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("Verdict:       REFUSED SANDBOX_DRIVER_UNAVAILABLE"),
        "{}",
        show(&o)
    );
    w.assert_nothing_created();
}

#[test]
fn worktree_auto_outside_a_repository_is_refused() {
    let w = Workspace::new();
    let f = w.write(
        "w.bot",
        "tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  worktree: auto\n  sandbox: none\n  t -> done\n",
    );
    let mut env = no_engine(w.dir.path());
    env.push(("GIT_CEILING_DIRECTORIES", w.dir.path().display().to_string()));
    let o = w.dry(&f, &["--json"], &env);
    assert_eq!(code(&o), 1, "{}", show(&o));
    let doc = json(&o);
    assert_eq!(doc["refused"]["code"], "WORKTREE_FAILED", "{doc:#}");
    assert!(
        doc["refused"]["hint"]
            .as_str()
            .unwrap()
            .contains("worktree: auto")
    );
    w.assert_nothing_created();
}

#[test]
fn on_the_engine_it_names_the_driver_the_rules_and_the_denied_names_and_starts_nothing() {
    if !iterion_test_support::engine_required("dry_run_on_the_engine") {
        return;
    }
    let w = Workspace::new();
    let f = w.write(
        "w.bot",
        "tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  sandbox:\n    mode: auto\n    runtime: gvisor\n    network:\n      mode: allowlist\n      rules: [\"api.example.org\", \"!bad.example.org\"]\n  t -> done\n",
    );
    let before = containers();
    let o = w.dry(&f, &["--json"], &[]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let doc = json(&o);
    assert_eq!(doc["sandboxed"], true, "{doc:#}");
    assert!(
        ["docker", "podman"].contains(&doc["driver"].as_str().unwrap()),
        "{doc:#}"
    );
    assert_eq!(doc["plan"]["run"]["network"]["mode"], "allowlist", "{doc:#}");
    assert_eq!(doc["plan"]["run"]["runtime"]["name"], "gvisor", "{doc:#}");
    assert_eq!(
        doc["plan"]["run"]["runtime"]["source"], "workflow sandbox.runtime",
        "{doc:#}"
    );
    assert_eq!(
        doc["plan"]["run"]["network"]["rules"][1], "!bad.example.org",
        "{doc:#}"
    );
    assert_eq!(
        doc["env_denied"]["run"],
        serde_json::json!(["GITHUB_TOKEN"]),
        "{doc:#}"
    );
    let o = w.dry(&f, &[], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("rule !bad.example.org"), "{out}");
    assert!(out.contains("Env denied:    GITHUB_TOKEN"), "{out}");
    assert!(out.contains("gvisor (workflow sandbox.runtime)"), "{out}");
    // the flag beats the workflow, and the floor beats the flag
    let o = w.dry(&f, &["--sandbox-runtime", "default"], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("default (cli flag --sandbox-runtime)"), "{out}");
    let floor = [("ITERION_SANDBOX_RUNTIME_FLOOR", "kata".to_owned())];
    let o = w.dry(&f, &["--sandbox-runtime", "default"], &floor);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("kata (ITERION_SANDBOX_RUNTIME_FLOOR)"), "{out}");
    let o = w.dry(&f, &["--sandbox-runtime", "a b"], &[]);
    assert_eq!(code(&o), 2, "{}", show(&o));
    assert!(
        show(&o).contains("--sandbox-runtime: invalid runtime 'a b'"),
        "{}",
        show(&o)
    );
    assert_eq!(containers(), before, "a container was created");
    w.assert_nothing_created();
}

/// The ids of every container on the engine.
fn containers() -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--no-trunc"])
        .output()
        .expect("docker");
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

/// `validate` reports an executability diagnostic (`X…`) exactly when `run --dry-run` refuses the file for
/// it, on every workflow file of the repository (fixtures and examples); a file `validate` accepts is one
/// `run --dry-run` accepts (on the host, `--sandbox none`, so the verdict depends on the file alone). `X011`,
/// a codex node that a run without flags would place in a container, is left out: `--sandbox none` lifts it.
#[test]
fn validate_and_dry_run_agree_on_every_workflow_of_the_repository() {
    let home = tempfile::tempdir().expect("tempdir");
    let mut files = Vec::new();
    files_below(&repo("fixtures"), &mut files);
    files_below(&repo("examples"), &mut files);
    files.retain(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("bot" | "iter")));
    files.sort();
    assert!(files.len() > 40, "only {} workflow files found", files.len());
    let env = no_engine(home.path());
    let mut compared = 0;
    for f in &files {
        let cwd = f.parent().unwrap();
        let fs = f.to_str().unwrap();
        let v = iterion(cwd, home.path(), &["validate", "--json", fs], &env);
        let vdoc: serde_json::Value = serde_json::from_slice(&v.stdout).unwrap_or_default();
        let x_codes = |doc: &serde_json::Value| -> Vec<String> {
            let mut c: Vec<String> = doc["diagnostics"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["severity"] == "error")
                .filter_map(|d| d["code"].as_str())
                .filter(|c| c.starts_with('X'))
                // the refusal of a codex node placed in a container: a run without `--sandbox none` only
                .filter(|c| *c != "X011")
                .map(str::to_owned)
                .collect();
            c.sort();
            c
        };
        let vx = x_codes(&vdoc);
        let d = iterion(
            cwd,
            home.path(),
            &["run", fs, "--dry-run", "--json", "--sandbox", "none"],
            &env,
        );
        let dc = code(&d);
        if dc == 2 {
            // a usage error before anything is decided (a required var without a value): not a verdict
            continue;
        }
        compared += 1;
        let ddoc: serde_json::Value = serde_json::from_slice(&d.stdout).unwrap_or_default();
        let only_placement = vdoc["diagnostics"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["severity"] == "error")
            .all(|d| d["code"] == "X011");
        match code(&v) {
            _ if only_placement => assert_eq!(
                dc,
                0,
                "{fs}: refused by validate for a sandboxed run only, but run --dry-run --sandbox none refuses it:\n{}",
                show(&d)
            ),
            0 => assert_eq!(
                dc,
                0,
                "validate accepts {fs} but run --dry-run refuses it:\n{}",
                show(&d)
            ),
            _ => {
                assert_eq!(
                    dc,
                    1,
                    "validate refuses {fs} but run --dry-run does not:\n{}",
                    show(&d)
                );
                assert_eq!(
                    x_codes(&ddoc),
                    vx,
                    "{fs}: validate and run --dry-run name other X codes"
                );
            }
        }
        assert!(
            !cwd.join(".iterion/runs").exists(),
            "{fs}: a run record was created"
        );
    }
    assert!(compared > 40, "only {compared} files compared");
}

/// Without an engine an `auto` run goes on on the host: a warning (not an info line) names what is lost,
/// including the defaulted allowlist of a repository-defined sandbox.
#[test]
fn a_run_that_falls_back_to_the_host_warns_what_is_lost() {
    let w = Workspace::new();
    let f = w.write("w.bot", TOOL_AUTO);
    let mut env = no_engine(w.dir.path());
    env.push(("ITERION_LOG_LEVEL", "warn".into()));
    let o = iterion(&w.work(), &w.home(), &["run", f.to_str().unwrap()], &env);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "WARN  sandbox: the run runs on the host, NOT sandboxed (no container runtime available"
        ),
        "{err}"
    );
    assert!(
        err.contains("its network policy (allowlist) is NOT enforced"),
        "{err}"
    );
}
