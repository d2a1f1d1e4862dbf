//! Escape class: host paths derived from repository content. The repository's `.git` file, a `.git/commondir`
//! (planted by the repository or by a node of an earlier run) and symlinked `.git/hooks` / `.git/config` must
//! not decide which host directories the sandbox sees or where iterion creates files. A pointer that does not
//! verify refuses the start (`SANDBOX_SPEC_INVALID`, naming the pointer) before any node runs; a genuine
//! linked worktree keeps its common dir mounted, under the protected overlays.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{Hostile, engine_ready, first, node_output, show};
use serde_json::json;

/// A one-node workflow running `script` in the container (its last stdout line is the node's JSON output).
fn one_node(script: &str) -> String {
    format!(
        "tool probe:\n  command: `{script}`\n\nworkflow w:\n  entry: probe\n  sandbox: auto\n  probe -> done\n"
    )
}

fn canon(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap()
}

/// A directory under `outside` that looks like a git repository (so only the missing back-pointer tells it
/// apart), holding a marker the sandbox must never see.
fn fake_repo(h: &Hostile, name: &str) -> PathBuf {
    let d = canon(&h.outside()).join(name);
    std::fs::create_dir_all(d.join("objects")).unwrap();
    std::fs::write(d.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(d.join("config"), "[core]\n").unwrap();
    std::fs::write(d.join("marker"), "host secret\n").unwrap();
    d
}

/// The script a hostile node runs against a host directory `dir`: read its marker and plant a file there.
fn attack(dir: &Path) -> String {
    format!(
        "cat {d}/marker > leaked.txt 2>/dev/null; echo pwned > {d}/pwned 2>/dev/null; echo '{{\"ran\": true}}'",
        d = dir.display()
    )
}

/// The run was refused before any node ran, with the typed spec failure naming `pointer`.
fn assert_refused(h: &Hostile, out: &std::process::Output, pointer: &str) {
    assert!(!out.status.success(), "{}", show(out));
    let ids = h.run_ids();
    assert_eq!(ids.len(), 1, "{}", show(out));
    let ev = h.events(ids.last().unwrap());
    let f = first(&ev, "run_failed");
    assert_eq!(f["data"]["code"], "SANDBOX_SPEC_INVALID", "{f}");
    let error = f["data"]["error"].as_str().unwrap_or_default();
    assert!(error.contains(pointer), "{error}");
    assert!(!ev.iter().any(|e| e["type"] == "node_finished"), "a node ran");
}

/// Nothing of `dir` reached the sandbox: no planted file, no leaked marker, no `hooks/` created by iterion.
fn assert_untouched(h: &Hostile, dir: &Path) {
    assert!(
        !dir.join("pwned").exists(),
        "the sandbox wrote into {}",
        dir.display()
    );
    assert!(
        !dir.join("hooks").exists(),
        "iterion created {}/hooks",
        dir.display()
    );
    let leaked = std::fs::read_to_string(h.repo().join("leaked.txt")).unwrap_or_default();
    assert!(
        !leaked.contains("host secret"),
        "the sandbox read {}",
        dir.display()
    );
}

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@localhost",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// (a) A `.git` file naming a host directory (`gitdir: /run` in the wild): refused, never mounted.
#[test]
fn a_git_file_naming_a_host_directory_is_not_mounted() {
    if !engine_ready("escapes::git_paths::git_file") {
        return;
    }
    let h = Hostile::new();
    let fake = fake_repo(&h, "fakegit");
    std::fs::remove_dir_all(h.repo().join(".git")).unwrap();
    h.write(".git", &format!("gitdir: {}\n", fake.display()));
    let out = h.run_workflow("wf.bot", &one_node(&attack(&fake)));
    assert_refused(&h, &out, ".git");
    assert_untouched(&h, &fake);
}

/// (b) A `.git/commondir` in the repository's own `.git` directory: refused, never mounted.
#[test]
fn a_commondir_in_the_repository_is_not_mounted() {
    if !engine_ready("escapes::git_paths::commondir") {
        return;
    }
    let h = Hostile::new();
    let fake = fake_repo(&h, "common");
    h.write(".git/commondir", &format!("{}\n", fake.display()));
    let out = h.run_workflow("wf.bot", &one_node(&attack(&fake)));
    assert_refused(&h, &out, ".git/commondir");
    assert_untouched(&h, &fake);
}

/// (c) A node of run 1 tries to plant `.git/commondir` (the operator's `.git` is read-only, so it cannot); run 2
/// does not mount what it names.
#[test]
fn a_commondir_planted_by_a_node_is_not_mounted_by_the_next_run() {
    if !engine_ready("escapes::git_paths::planted") {
        return;
    }
    let h = Hostile::new();
    let fake = fake_repo(&h, "planted");
    let repo = canon(&h.repo());
    let plant = format!(
        "(echo {} > {}/.git/commondir) 2>/dev/null; echo '{{\"planted\": true}}'",
        fake.display(),
        repo.display()
    );
    let out = h.run_workflow("plant.bot", &one_node(&plant));
    assert!(out.status.success(), "{}", show(&out));
    // The operator's `.git` is read-only inside the sandbox: the pointer is never planted.
    assert!(
        !repo.join(".git/commondir").exists(),
        "run 1 planted a pointer in the operator's git dir"
    );
    h.write("wf.bot", &one_node(&attack(&fake)));
    let out = h.iterion(&["run", "wf.bot", "--json"]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(h.run_ids().len(), 2, "{}", show(&out));
    assert_untouched(&h, &fake);
}

/// (d) `.git/hooks` as a symlink to a host directory: the protective overlay does not expose it.
#[test]
fn a_symlinked_hooks_dir_is_not_laid_over_the_sandbox() {
    if !engine_ready("escapes::git_paths::hooks_symlink") {
        return;
    }
    let h = Hostile::new();
    let target = canon(&h.outside()).join("hostdir");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("marker"), "host secret\n").unwrap();
    let hooks = h.repo().join(".git/hooks");
    let _ = std::fs::remove_dir_all(&hooks);
    std::os::unix::fs::symlink(&target, &hooks).unwrap();
    let script = "cat .git/hooks/marker > leaked.txt 2>/dev/null; echo pwned > .git/hooks/pwned 2>/dev/null; echo '{\"ran\": true}'";
    let out = h.run_workflow("wf.bot", &one_node(script));
    assert_refused(&h, &out, ".git/hooks");
    assert_untouched(&h, &target);
}

/// (d) `.git/config` as a symlink to a host file: the overlay does not expose it.
#[test]
fn a_symlinked_git_config_is_not_laid_over_the_sandbox() {
    if !engine_ready("escapes::git_paths::config_symlink") {
        return;
    }
    let h = Hostile::new();
    let target = canon(&h.outside()).join("host-config");
    std::fs::write(&target, "[user]\n\tname = host secret\n").unwrap();
    let config = h.repo().join(".git/config");
    std::fs::remove_file(&config).unwrap();
    std::os::unix::fs::symlink(&target, &config).unwrap();
    let out = h.run_workflow(
        "wf.bot",
        &one_node("cat .git/config > leaked.txt 2>/dev/null; echo '{\"ran\": true}'"),
    );
    assert_refused(&h, &out, ".git/config");
    let leaked = std::fs::read_to_string(h.repo().join("leaked.txt")).unwrap_or_default();
    assert!(!leaked.contains("host secret"), "the sandbox read the host file");
}

/// A symlinked `.git/hooks` that stays inside the workspace is protected where it leads: the node cannot plant
/// a hook that host-side git would run.
#[test]
fn a_symlinked_hooks_dir_inside_the_workspace_is_protected_at_its_target() {
    if !engine_ready("escapes::git_paths::hooks_inside") {
        return;
    }
    let h = Hostile::new();
    std::fs::create_dir_all(h.repo().join("myhooks")).unwrap();
    let hooks = h.repo().join(".git/hooks");
    let _ = std::fs::remove_dir_all(&hooks);
    std::os::unix::fs::symlink("../myhooks", &hooks).unwrap();
    let script = "echo pwned > myhooks/pre-commit 2>/dev/null; echo pwned > .git/hooks/post-checkout 2>/dev/null; echo '{\"ran\": true}'";
    let out = h.run_workflow("wf.bot", &one_node(script));
    assert!(out.status.success(), "{}", show(&out));
    let dir = h.repo().join("myhooks");
    assert!(!dir.join("pre-commit").exists() && !dir.join("post-checkout").exists());
}

/// (f) A genuine linked worktree (`git worktree add`) keeps its common dir mounted, and its hooks stay
/// read-only; its `commondir` rewritten by a node is not followed by the next run.
#[test]
fn a_genuine_linked_worktree_keeps_its_common_dir() {
    if !engine_ready("escapes::git_paths::linked_worktree") {
        return;
    }
    let h = Hostile::new();
    let main = canon(&h.outside()).join("main");
    std::fs::create_dir_all(main.join(".devcontainer")).unwrap();
    std::fs::copy(
        h.repo().join(".devcontainer/devcontainer.json"),
        main.join(".devcontainer/devcontainer.json"),
    )
    .unwrap();
    git(&main, &["init", "-q"]);
    git(&main, &["add", "-A"]);
    git(&main, &["commit", "-q", "-m", "init"]);
    std::fs::remove_dir_all(h.repo()).unwrap();
    git(
        &main,
        &["worktree", "add", "-q", "--detach", h.repo().to_str().unwrap()],
    );
    let common = main.join(".git");
    let script = format!(
        "echo x > {c}/hooks/pre-commit 2>/dev/null; if test -f {c}/HEAD && test -d {c}/objects; then echo '{{\"mounted\": true}}'; else echo '{{\"mounted\": false}}'; fi",
        c = common.display()
    );
    let out = h.run_workflow("wf.bot", &one_node(&script));
    assert!(out.status.success(), "{}", show(&out));
    let ids = h.run_ids();
    assert_eq!(
        node_output(&h.events(&ids[0]), "probe"),
        &json!({"mounted": true})
    );
    assert!(
        !common.join("hooks/pre-commit").exists(),
        "a node planted a hook in the common dir"
    );

    // a node tries to rewrite the worktree's pointers (inside the mounted common dir) and its `.git` file
    let fake = fake_repo(&h, "redirect");
    let g = std::fs::read_dir(common.join("worktrees"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let before = std::fs::read_to_string(g.join("commondir")).unwrap();
    let dot = std::fs::read_to_string(h.repo().join(".git")).unwrap();
    let plant = format!(
        "echo {f} > {g}/commondir 2>/dev/null; mv {g} {g}.old 2>/dev/null; echo 'gitdir: {f}' > .git 2>/dev/null; echo '{{\"planted\": true}}'",
        f = fake.display(),
        g = g.display()
    );
    let out = h.run_workflow("plant.bot", &one_node(&plant));
    assert!(out.status.success(), "{}", show(&out));
    assert!(g.is_dir(), "the worktree's git dir was renamed");
    assert_eq!(std::fs::read_to_string(g.join("commondir")).unwrap(), before);
    assert_eq!(std::fs::read_to_string(h.repo().join(".git")).unwrap(), dot);
    let _ = h.run_workflow("wf2.bot", &one_node(&attack(&fake)));
    assert_untouched(&h, &fake);
}

/// A node renames `.git` away (the protective overlays inside it move along) and puts a `.git` file naming a
/// git directory with its own hooks in its place, for host-side git to run later: the rename is refused.
#[test]
fn a_node_cannot_replace_the_workspace_git_dir() {
    if !engine_ready("escapes::git_paths::replace_dot_git") {
        return;
    }
    let h = Hostile::new();
    let repo = canon(&h.repo());
    let script = format!(
        "cd {r} && mv .git .git-old 2>/dev/null; rm -rf .git 2>/dev/null; mkdir -p evil/hooks evil/objects && echo 'ref: refs/heads/main' > evil/HEAD && echo 'echo pwned' > evil/hooks/post-checkout && (echo 'gitdir: evil' > .git) 2>/dev/null; echo '{{\"ran\": true}}'",
        r = repo.display()
    );
    let out = h.run_workflow("wf.bot", &one_node(&script));
    assert!(out.status.success(), "{}", show(&out));
    assert!(repo.join(".git").is_dir(), "the workspace .git was replaced");
    assert!(
        repo.join(".git/config").is_file(),
        "the workspace .git was emptied"
    );
    assert!(!repo.join(".git-old").exists(), "the workspace .git was renamed");
}

/// `sandbox doctor --strict` reports a hostile `.git` pointer as a failure with a remediation.
#[test]
fn doctor_strict_fails_a_hostile_git_pointer() {
    if !engine_ready("escapes::git_paths::doctor") {
        return;
    }
    let h = Hostile::new();
    let fake = fake_repo(&h, "fakegit");
    std::fs::remove_dir_all(h.repo().join(".git")).unwrap();
    h.write(".git", &format!("gitdir: {}\n", fake.display()));
    h.write("wf.bot", &one_node("echo '{\"ran\": true}'"));
    let out = h.iterion(&["sandbox", "doctor", "--strict", "wf.bot", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "spec_safety")
        .unwrap()
        .clone();
    assert_eq!(check["status"], "fail", "{check}");
    let message = check["message"].as_str().unwrap_or_default();
    assert!(message.contains(".git") && message.contains("fakegit"), "{check}");
    assert!(
        check["hint"]
            .as_str()
            .is_some_and(|h| h.contains("git worktree repair")),
        "{check}"
    );
    assert!(!fake.join("hooks").exists());
}

fn git_out(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git").args(args).current_dir(dir).output().unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// What a node runs to destroy every git object, ref and file it can reach under `dir`.
fn destroy_git(dir: &str) -> String {
    format!(
        "rm -rf {d}/objects/* {d}/objects {d}/refs {d}/packed-refs {d}/HEAD {d}/index {d}/worktrees {d}/* 2>/dev/null; echo '{{\"ran\": true}}'",
        d = dir
    )
}

/// The repository at `dir` still has its history: `main` where it was, every object intact.
fn assert_history_intact(dir: &Path, main: &str) {
    assert_eq!(git_out(dir, &["rev-parse", "main"]), main, "the branch was lost");
    git_out(dir, &["fsck", "--full", "--no-dangling"]);
    assert_eq!(git_out(dir, &["cat-file", "-t", main]), "commit");
}

/// In a run without a worktree the workspace is the operator's checkout: a node that deletes everything git it
/// can see leaves the repository's objects and refs intact (its `.git` is read-only inside the sandbox).
#[test]
fn an_in_place_run_cannot_delete_the_operators_history() {
    if !engine_ready("escapes::git_paths::in_place_history") {
        return;
    }
    let h = Hostile::new();
    h.write("README.md", "hello\n");
    git(&h.repo(), &["add", "-A"]);
    git(&h.repo(), &["commit", "-q", "-m", "init"]);
    let main = git_out(&h.repo(), &["rev-parse", "main"]);
    let out = h.run_workflow("wf.bot", &one_node(&destroy_git(".git")));
    assert!(out.status.success(), "{}", show(&out));
    assert_history_intact(&h.repo(), &main);
}

/// The same from a linked worktree of the operator's: the common dir it is mounted with is read-only.
#[test]
fn an_in_place_linked_worktree_cannot_delete_the_operators_history() {
    if !engine_ready("escapes::git_paths::linked_history") {
        return;
    }
    let h = Hostile::new();
    let main = canon(&h.outside()).join("main");
    std::fs::create_dir_all(main.join(".devcontainer")).unwrap();
    std::fs::copy(
        h.repo().join(".devcontainer/devcontainer.json"),
        main.join(".devcontainer/devcontainer.json"),
    )
    .unwrap();
    git(&main, &["init", "-q"]);
    git(&main, &["add", "-A"]);
    git(&main, &["commit", "-q", "-m", "init"]);
    let head = git_out(&main, &["rev-parse", "main"]);
    std::fs::remove_dir_all(h.repo()).unwrap();
    git(
        &main,
        &["worktree", "add", "-q", "--detach", h.repo().to_str().unwrap()],
    );
    let script = format!(
        "{}; {}",
        destroy_git(&main.join(".git").display().to_string()),
        destroy_git(".git")
    );
    let out = h.run_workflow("wf.bot", &one_node(&script));
    assert!(out.status.success(), "{}", show(&out));
    assert_history_intact(&main, &head);
    assert!(
        h.repo().join(".git").is_file(),
        "the worktree's .git file is gone"
    );
}
