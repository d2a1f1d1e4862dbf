//! `worktree: auto` (the seed's Quick start: a devcontainer.json with the local image, `worktree: auto`,
//! `sandbox: auto`). The run works in a git worktree of the repository under the store; the sandbox can write
//! that worktree and the repository's common git dir, so when the run finishes the host's git commits and
//! branches the result treating both as hostile: a hook or a worktree config planted by a node must never run
//! on the host, and the main checkout stays as it was.

use std::path::Path;
use std::process::Command;

use crate::harness::{Hostile, engine_ready, first, show};

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A repository with one commit (the devcontainer and a README).
fn committed() -> Hostile {
    let h = Hostile::new();
    h.write("README.md", "hello\n");
    git(&h.repo(), &["add", "-A"]);
    git(&h.repo(), &["commit", "-q", "-m", "init"]);
    h
}

fn workflow(script: &str) -> String {
    format!(
        "tool work:\n  command: `{script}`\n\nworkflow quick:\n  entry: work\n  worktree: auto\n  sandbox: auto\n  work -> done\n"
    )
}

fn single_run(h: &Hostile, out: &std::process::Output) -> (String, serde_json::Value) {
    let ids = h.run_ids();
    assert_eq!(ids.len(), 1, "{}", show(out));
    let doc = h.doc(&ids[0]);
    (ids[0].clone(), doc)
}

#[test]
fn the_quick_start_runs_in_a_worktree_and_branches_its_result() {
    if !engine_ready("escapes::worktree::quick_start") {
        return;
    }
    let h = committed();
    let marker = h.outside().join("hook-ran");
    // The node writes its result, then plants every host-side trigger it can reach: hooks in the common git
    // dir, a worktree config naming a hooks path and an fsmonitor command, and a `.git` file pointing away.
    let hook = format!("#!/bin/sh\\ntouch {}\\n", marker.display());
    let script = format!(
        "echo from-the-sandbox > result.txt; \
         gd=$(sed -n 's/^gitdir: //p' .git); common=$(cd \"$gd/../..\" && pwd); \
         for h in post-commit pre-commit reference-transaction post-checkout post-index-change; do \
           printf '{hook}' > \"$common/hooks/$h\" 2>/dev/null; chmod +x \"$common/hooks/$h\" 2>/dev/null; done; \
         printf '[core]\\n\\thooksPath = {out}\\n\\tfsmonitor = {out}/fsmon\\n' > \"$gd/config.worktree\" 2>/dev/null; \
         printf '#!/bin/sh\\ntouch {marker}\\n' > {out}/post-commit 2>/dev/null; \
         echo 'gitdir: /tmp' > .git 2>/dev/null; \
         echo '{{\"done\": true}}'",
        out = h.outside().display(),
        marker = marker.display(),
    );
    // The host-side script a planted hooks path would name (the sandbox cannot see `outside`).
    std::fs::write(
        h.outside().join("post-commit"),
        format!("#!/bin/sh\ntouch {}\n", marker.display()),
    )
    .unwrap();
    let out = h.run_workflow("quick.bot", &workflow(&script));
    assert!(out.status.success(), "{}", show(&out));
    let (id, doc) = single_run(&h, &out);
    assert_eq!(doc["status"], "finished", "{doc:#}");
    assert_eq!(doc["worktree"], true, "{doc:#}");
    let ev = h.events(&id);
    first(&ev, "sandbox_started");
    // The work dir was the worktree under the store, not the checkout.
    let work_dir = doc["work_dir"].as_str().unwrap().to_owned();
    assert!(work_dir.ends_with(&format!("worktrees/{id}")), "{work_dir}");
    assert!(
        !h.repo().join("result.txt").exists(),
        "the node wrote into the main checkout"
    );
    // Committed on the run's branch, the worktree removed.
    let branch = doc["final_branch"].as_str().expect("a final branch").to_owned();
    let name = doc["name"].as_str().unwrap();
    assert_eq!(branch, format!("iterion/run/{name}"));
    assert_eq!(
        git(&h.repo(), &["show", &format!("{branch}:result.txt")]),
        "from-the-sandbox"
    );
    assert_eq!(
        doc["final_commit"].as_str(),
        Some(git(&h.repo(), &["rev-parse", &branch]).as_str())
    );
    assert_eq!(
        doc["base_commit"].as_str(),
        Some(git(&h.repo(), &["rev-parse", "HEAD"]).as_str())
    );
    assert!(!Path::new(&work_dir).exists(), "the worktree was not removed");
    assert!(!git(&h.repo(), &["worktree", "list"]).contains(&id));
    // Nothing the node planted ran on the host.
    assert!(!marker.exists(), "a hook planted by the sandbox ran on the host");
}

#[test]
fn a_run_that_changes_nothing_leaves_no_branch() {
    if !engine_ready("escapes::worktree::no_change") {
        return;
    }
    let h = committed();
    let out = h.run_workflow("quick.bot", &workflow("echo '{\"done\": true}'"));
    assert!(out.status.success(), "{}", show(&out));
    let (_, doc) = single_run(&h, &out);
    assert_eq!(doc["status"], "finished");
    assert!(doc.get("final_branch").is_none(), "{doc:#}");
    assert_eq!(doc["final_commit"], doc["base_commit"], "{doc:#}");
    assert!(!Path::new(doc["work_dir"].as_str().unwrap()).exists());
    assert_eq!(git(&h.repo(), &["branch", "--list", "iterion/*"]), "");
}

#[test]
fn outside_a_repository_the_run_fails_worktree_failed() {
    if !engine_ready("escapes::worktree::not_a_repository") {
        return;
    }
    let h = Hostile::new();
    h.write("quick.bot", &workflow("echo '{\"done\": true}' > ran.txt"));
    let outside = h.outside();
    let wf = h.repo().join("quick.bot");
    let out = h.iterion(&[
        "run",
        wf.to_str().unwrap(),
        "--work-dir",
        outside.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let (id, doc) = single_run(&h, &out);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(doc["failure_code"], "WORKTREE_FAILED", "{doc:#}");
    let f = first(&h.events(&id), "run_failed").clone();
    let error = f["data"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("is not inside a git repository"), "{error}");
    assert!(
        f["data"]["hint"]
            .as_str()
            .unwrap_or_default()
            .contains("worktree: auto"),
        "{f}"
    );
    assert!(!outside.join("ran.txt").exists(), "a node ran");
}

#[test]
fn a_failed_run_keeps_its_worktree_and_resume_reuses_it() {
    if !engine_ready("escapes::worktree::resume") {
        return;
    }
    let h = committed();
    // Fails until a file `go` exists in its work dir, which only the operator creates (between the runs).
    let script = "echo partial > partial.txt; test -f go || exit 3; echo '{\"done\": true}'";
    let out = h.run_workflow("quick.bot", &workflow(script));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let (id, doc) = single_run(&h, &out);
    assert_eq!(doc["status"], "failed_resumable", "{doc:#}");
    let work_dir = std::path::PathBuf::from(doc["work_dir"].as_str().unwrap());
    assert!(
        work_dir.join("partial.txt").is_file(),
        "the worktree was not kept"
    );
    assert!(doc.get("final_commit").is_none(), "{doc:#}");
    std::fs::write(work_dir.join("go"), "").unwrap();
    let out = h.iterion(&["resume", "--run-id", &id, "--json"]);
    assert!(out.status.success(), "{}", show(&out));
    let doc = h.doc(&id);
    assert_eq!(doc["status"], "finished", "{doc:#}");
    let branch = doc["final_branch"].as_str().expect("a branch");
    assert_eq!(
        git(&h.repo(), &["show", &format!("{branch}:partial.txt")]),
        "partial"
    );
    assert!(
        !work_dir.exists(),
        "the worktree was not removed after the resumed run finished"
    );
}

#[test]
fn a_resume_whose_worktree_is_gone_is_refused() {
    if !engine_ready("escapes::worktree::resume_gone") {
        return;
    }
    let h = committed();
    let out = h.run_workflow("quick.bot", &workflow("exit 3"));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let (id, doc) = single_run(&h, &out);
    assert_eq!(doc["status"], "failed_resumable", "{doc:#}");
    std::fs::remove_dir_all(doc["work_dir"].as_str().unwrap()).unwrap();
    let out = h.iterion(&["resume", "--run-id", &id]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the run's worktree cannot be reused"),
        "{}",
        show(&out)
    );
    assert_eq!(
        h.doc(&id)["status"],
        "failed_resumable",
        "the refused resume changed the record"
    );
}

// ---- Host git on sandbox-written data ------------------------------------------------------------------------
//
// Each attack below is run by a node of a `worktree: auto` run (or shipped in the repository) and aimed at the git
// commands iterion runs on the host: at the end of the run (commit, branch) and when the next run's workspace is
// created. A program that runs touches `marker` in `outside`, which the sandbox cannot see.

/// Shell that sets `gd` (the git dir of the work tree) and `common` (its common dir) whatever the layout: a
/// linked worktree's `.git` file, or a `.git` directory.
const LOCATE: &str = "if [ -f .git ]; then gd=$(sed -n 's/^gitdir: //p' .git); common=$(cd \"$gd/../..\" && pwd); \
                      else gd=.git; common=.git; fi; ";

fn marker(h: &Hostile) -> std::path::PathBuf {
    h.outside().join("marker")
}

/// Nothing the sandbox or the repository named ran on the host.
fn assert_no_marker(h: &Hostile) {
    let m = marker(h);
    assert!(
        !m.exists(),
        "a program planted by the sandbox or the repository ran on the host: {:?}",
        std::fs::read_to_string(&m)
    );
}

/// A shell command that leaves the marker (what a planted filter, hook or fsmonitor would run on the host).
fn touch_marker(h: &Hostile) -> String {
    format!("touch {}", marker(h).display())
}

/// The run finished and its changes are on `iterion/run/<name>`: returns the branch.
fn finished_on_branch(h: &Hostile, out: &std::process::Output) -> String {
    let (_, doc) = single_run(h, out);
    assert_eq!(doc["status"], "finished", "{doc:#}\n{}", show(out));
    let branch = doc["final_branch"]
        .as_str()
        .unwrap_or_else(|| panic!("no final branch: {doc:#}"))
        .to_owned();
    assert_eq!(branch, format!("iterion/run/{}", doc["name"].as_str().unwrap()));
    branch
}

/// `tar` of `dir` in base64 (one line), for a node to unpack with `base64 -d | tar -xf -`.
fn tar_base64(dir: &Path) -> String {
    let tar = Command::new("tar")
        .args(["-cf", "-", "-C"])
        .arg(dir)
        .arg(".")
        .output()
        .unwrap();
    assert!(tar.status.success());
    base64(&tar.stdout)
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// A node populates a submodule's git dir (a real repository prepared on the host: a clean filter and an
/// fsmonitor command in its config, a tracked file under the filter) and rewrites the file with the same size,
/// so that only its content (through the filter) tells whether it changed. iterion's end-of-run git must not
/// look inside the submodule with its config.
#[test]
fn a_filter_in_a_submodule_git_dir_populated_by_a_node_never_runs() {
    if !engine_ready("escapes::worktree::submodule_filter") {
        return;
    }
    let h = Hostile::new();
    let module = h.outside().join("module");
    std::fs::create_dir_all(&module).unwrap();
    git(&module, &["init", "-q", "--template=", "-b", "main"]);
    std::fs::write(module.join("f.txt"), "tracked\n").unwrap();
    std::fs::write(module.join(".gitattributes"), "f.txt filter=evil\n").unwrap();
    git(&module, &["add", "-A"]);
    git(&module, &["commit", "-q", "-m", "module"]);
    let module_head = git(&module, &["rev-parse", "HEAD"]);
    let cmd = touch_marker(&h);
    git(&module, &["config", "filter.evil.clean", &format!("{cmd}; cat")]);
    git(&module, &["config", "core.fsmonitor", &format!("{cmd}; false")]);
    let payload = tar_base64(&module);
    // The repository records the submodule (a gitlink), never populated on the host.
    h.write("README.md", "hello\n");
    h.write(
        ".gitmodules",
        "[submodule \"sub\"]\n\tpath = sub\n\turl = ./sub\n",
    );
    git(&h.repo(), &["add", "-A"]);
    git(
        &h.repo(),
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{module_head},sub"),
        ],
    );
    git(&h.repo(), &["commit", "-q", "-m", "init"]);
    let script = format!(
        "mkdir -p sub && echo {payload} | base64 -d | tar -xf - -C sub && printf 'TRACKED\\n' > sub/f.txt; \
         echo from-the-sandbox > result.txt; echo '{{\"done\": true}}'"
    );
    let out = h.run_workflow("quick.bot", &workflow(&script));
    assert_no_marker(&h);
    let branch = finished_on_branch(&h, &out);
    assert_eq!(
        git(&h.repo(), &["show", &format!("{branch}:result.txt")]),
        "from-the-sandbox"
    );
}

/// A repository that uses per-worktree configuration (`extensions.worktreeConfig`, as sparse checkouts do): a
/// node writes its work tree's `config.worktree` with an fsmonitor command and a clean filter.
#[test]
fn a_worktree_config_written_by_a_node_never_runs() {
    if !engine_ready("escapes::worktree::config_worktree") {
        return;
    }
    let h = committed();
    git(&h.repo(), &["config", "core.repositoryFormatVersion", "1"]);
    git(&h.repo(), &["config", "extensions.worktreeConfig", "true"]);
    let cmd = touch_marker(&h);
    let script = format!(
        "{LOCATE}printf '[core]\\n\\tfsmonitor = \"{cmd}; false\"\\n[filter \"evil\"]\\n\\tclean = \"{cmd}; cat\"\\n' > \"$gd/config.worktree\"; \
         echo '* filter=evil' > .gitattributes; echo from-the-sandbox > result.txt; echo '{{\"done\": true}}'"
    );
    let out = h.run_workflow("quick.bot", &workflow(&script));
    assert_no_marker(&h);
    let branch = finished_on_branch(&h, &out);
    assert_eq!(
        git(&h.repo(), &["show", &format!("{branch}:result.txt")]),
        "from-the-sandbox"
    );
}

/// Run 1's node plants a `commondir` in the repository's git dir naming a directory it built (its config has a
/// smudge filter for every file) and fails, so its workspace is kept; run 2's workspace creation must not
/// follow the pointer.
#[test]
fn a_commondir_planted_by_a_node_runs_nothing_when_the_next_workspace_is_created() {
    if !engine_ready("escapes::worktree::planted_commondir") {
        return;
    }
    let h = Hostile::new();
    h.write("README.md", "hello\n");
    h.write(".gitattributes", "* filter=evil\n");
    git(&h.repo(), &["add", "-A"]);
    git(&h.repo(), &["commit", "-q", "-m", "init"]);
    let cmd = touch_marker(&h);
    let script = format!(
        "{LOCATE}ev=$(pwd)/evilc; mkdir -p $ev/refs/heads $ev/objects/info; echo \"$common/objects\" > $ev/objects/info/alternates; \
         cp \"$common/refs/heads/main\" $ev/refs/heads/main 2>/dev/null; cp \"$common/packed-refs\" $ev/ 2>/dev/null; \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n[filter \"evil\"]\\n\\tsmudge = \"{cmd}; cat\"\\n\\tclean = cat\\n' > $ev/config; \
         echo $ev > \"$common/commondir\"; exit 3"
    );
    let out = h.run_workflow("plant.bot", &workflow(&script));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let out = h.run_workflow(
        "quick.bot",
        &workflow("echo next > next.txt; echo '{\"done\": true}'"),
    );
    assert_no_marker(&h);
    assert!(
        !h.repo().join(".git/commondir").exists(),
        "the node wrote into the repository's git dir"
    );
    let ids = h.run_ids();
    assert_eq!(ids.len(), 2, "{}", show(&out));
    assert!(out.status.success(), "{}", show(&out));
}

/// The repository's own config names a smudge and a clean filter that `.gitattributes` applies to every file
/// (a repository unpacked with its `.git`): creating the workspace and committing the result run neither.
#[test]
fn a_filter_in_the_repository_config_never_runs() {
    if !engine_ready("escapes::worktree::repository_filter") {
        return;
    }
    let h = Hostile::new();
    h.write("README.md", "hello\n");
    h.write(".gitattributes", "* filter=evil\n");
    git(&h.repo(), &["add", "-A"]);
    git(&h.repo(), &["commit", "-q", "-m", "init"]);
    let cmd = touch_marker(&h);
    git(
        &h.repo(),
        &["config", "filter.evil.smudge", &format!("{cmd}; cat")],
    );
    git(
        &h.repo(),
        &["config", "filter.evil.clean", &format!("{cmd}; cat")],
    );
    let out = h.run_workflow(
        "quick.bot",
        &workflow("echo from-the-sandbox > result.txt; echo '{\"done\": true}'"),
    );
    assert_no_marker(&h);
    let branch = finished_on_branch(&h, &out);
    assert_eq!(
        git(&h.repo(), &["show", &format!("{branch}:result.txt")]),
        "from-the-sandbox"
    );
}

/// The repository's `core.worktree` names another repository of the operator: the run still works on (and
/// branches in) the repository that holds the work dir, and never sees the other one.
#[test]
fn core_worktree_does_not_send_the_run_to_another_repository() {
    if !engine_ready("escapes::worktree::core_worktree") {
        return;
    }
    let h = committed();
    let victim = h.outside().join("victim");
    std::fs::create_dir_all(victim.join(".devcontainer")).unwrap();
    std::fs::copy(
        h.repo().join(".devcontainer/devcontainer.json"),
        victim.join(".devcontainer/devcontainer.json"),
    )
    .unwrap();
    std::fs::write(victim.join("secret.txt"), "host secret\n").unwrap();
    git(&victim, &["init", "-q", "-b", "main"]);
    git(&victim, &["add", "-A"]);
    git(&victim, &["commit", "-q", "-m", "victim"]);
    let victim_head = git(&victim, &["rev-parse", "HEAD"]);
    h.write(
        "quick.bot",
        &workflow(
            "if [ -f secret.txt ]; then s=true; else s=false; fi; echo from-the-sandbox > result.txt; \
             echo \"{\\\"sees_secret\\\": $s, \\\"own\\\": $(test -f README.md && echo true || echo false)}\"",
        ),
    );
    let gd = h.repo().join(".git");
    git(&h.repo(), &["config", "core.worktree", victim.to_str().unwrap()]);
    let out = h.iterion(&["run", "quick.bot", "--json"]);
    let (id, _) = single_run(&h, &out);
    assert_eq!(
        crate::harness::node_output(&h.events(&id), "work"),
        &serde_json::json!({"sees_secret": false, "own": true}),
        "{}",
        show(&out)
    );
    let branch = finished_on_branch(&h, &out);
    let gd_arg = format!("--git-dir={}", gd.display());
    assert_eq!(
        git(&h.outside(), &[&gd_arg, "show", &format!("{branch}:result.txt")]),
        "from-the-sandbox"
    );
    assert_eq!(git(&victim, &["branch", "--list", "iterion/*"]), "");
    assert_eq!(git(&victim, &["rev-parse", "HEAD"]), victim_head);
    assert!(
        !victim.join(".git/worktrees").exists(),
        "a worktree of the other repository was made"
    );
}

/// A node points its work tree's `HEAD` at the operator's checked-out branch: iterion's commit must not move
/// that branch (or the operator's `HEAD`).
#[test]
fn a_node_cannot_move_the_operators_branch_through_head() {
    if !engine_ready("escapes::worktree::head") {
        return;
    }
    let h = committed();
    let base = git(&h.repo(), &["rev-parse", "main"]);
    let script = format!(
        "{LOCATE}echo 'ref: refs/heads/main' > \"$gd/HEAD\"; echo from-the-sandbox > result.txt; echo '{{\"done\": true}}'"
    );
    let out = h.run_workflow("quick.bot", &workflow(&script));
    let branch = finished_on_branch(&h, &out);
    assert_eq!(
        git(&h.repo(), &["rev-parse", "main"]),
        base,
        "the operator's branch moved"
    );
    assert_eq!(git(&h.repo(), &["symbolic-ref", "HEAD"]), "refs/heads/main");
    assert_eq!(
        git(&h.repo(), &["show", &format!("{branch}:result.txt")]),
        "from-the-sandbox"
    );
    assert_eq!(
        git(&h.repo(), &["status", "--porcelain", "--untracked-files=no"]),
        ""
    );
}

/// A node hides its result from `git add -A` with `info/exclude`; the file must still reach the branch (it
/// would otherwise be lost when the workspace is removed).
#[test]
fn a_file_hidden_by_info_exclude_still_lands_on_the_branch() {
    if !engine_ready("escapes::worktree::info_exclude") {
        return;
    }
    let h = committed();
    let script = format!(
        "{LOCATE}echo from-the-sandbox > result.txt; mkdir -p \"$common/info\" \"$gd/info\"; \
         echo result.txt >> \"$common/info/exclude\"; echo result.txt >> \"$gd/info/exclude\"; echo '{{\"done\": true}}'"
    );
    let out = h.run_workflow("quick.bot", &workflow(&script));
    let branch = finished_on_branch(&h, &out);
    assert_eq!(
        git(&h.repo(), &["show", &format!("{branch}:result.txt")]),
        "from-the-sandbox"
    );
}

/// A node deletes every git object, ref and file it can reach (its work tree's git dir, the common dir, any
/// object directory mounted for it): the operator's repository keeps its whole history, and the run's result
/// still reaches its branch.
#[test]
fn a_node_cannot_delete_the_operators_history() {
    if !engine_ready("escapes::worktree::delete_history") {
        return;
    }
    let h = committed();
    let base = git(&h.repo(), &["rev-parse", "main"]);
    // the operator's objects are there to read (git inside the sandbox has the history) ...
    let script = format!(
        "{LOCATE}if [ -n \"$(ls /run/iterion/git/objects)\" ]; then b=true; else b=false; fi; \
         for d in \"$gd\" \"$common\" .git /run/iterion/git/objects; do \
           rm -rf \"$d\"/objects/* \"$d\"/objects \"$d\"/refs \"$d\"/packed-refs \"$d\"/HEAD \"$d\"/* 2>/dev/null; done; \
         echo from-the-sandbox > result.txt; echo \"{{\\\"objects_bound\\\": $b}}\""
    );
    let out = h.run_workflow("quick.bot", &workflow(&script));
    let (id, _) = single_run(&h, &out);
    assert_eq!(
        crate::harness::node_output(&h.events(&id), "work"),
        &serde_json::json!({"objects_bound": true}),
        "{}",
        show(&out)
    );
    // ... and none of them is gone

    assert_eq!(git(&h.repo(), &["rev-parse", "main"]), base, "{}", show(&out));
    git(&h.repo(), &["fsck", "--full", "--no-dangling"]);
    assert_eq!(git(&h.repo(), &["cat-file", "-t", &base]), "commit");
    let branch = finished_on_branch(&h, &out);
    assert_eq!(
        git(&h.repo(), &["show", &format!("{branch}:result.txt")]),
        "from-the-sandbox"
    );
}

/// The loose object file of `sha` in the git dir `gd`.
fn loose_object(gd: &Path, sha: &str) -> Vec<u8> {
    std::fs::read(gd.join("objects").join(&sha[..2]).join(&sha[2..])).unwrap()
}

/// A commit made inside the sandbox (here written object by object, as git inside the sandbox would write it)
/// lands on the run's branch with its message and author, with the uncommitted rest committed on top.
#[test]
fn a_commit_made_in_the_sandbox_lands_on_the_branch_with_its_message() {
    if !engine_ready("escapes::worktree::sandbox_commit") {
        return;
    }
    let h = committed();
    let base = git(&h.repo(), &["rev-parse", "HEAD"]);
    // The commit is prepared in a scratch repository that borrows the repository's objects, so that its own
    // objects exist nowhere but in what the node writes.
    let scratch = h.outside().join("scratch.git");
    git(
        &h.outside(),
        &["init", "-q", "--bare", "--template=", scratch.to_str().unwrap()],
    );
    std::fs::create_dir_all(scratch.join("objects/info")).unwrap();
    std::fs::write(
        scratch.join("objects/info/alternates"),
        format!("{}\n", h.repo().join(".git/objects").display()),
    )
    .unwrap();
    let gd = format!("--git-dir={}", scratch.display());
    let hash = Command::new("git")
        .args([&gd, "hash-object", "-w", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"from-a-commit\n")?;
            c.wait_with_output()
        })
        .unwrap();
    let blob = String::from_utf8_lossy(&hash.stdout).trim().to_owned();
    let mut listing = git(&h.outside(), &[&gd, "ls-tree", &base]);
    listing.push_str(&format!("\n100644 blob {blob}\tcommitted.txt\n"));
    let mktree = Command::new("git")
        .args([&gd, "mktree"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(listing.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    let tree = String::from_utf8_lossy(&mktree.stdout).trim().to_owned();
    let commit = Command::new("git")
        .args([
            &gd,
            "commit-tree",
            &tree,
            "-p",
            &base,
            "-m",
            "agent: add committed.txt",
        ])
        .env("GIT_AUTHOR_NAME", "agent")
        .env("GIT_AUTHOR_EMAIL", "agent@sandbox")
        .env("GIT_COMMITTER_NAME", "agent")
        .env("GIT_COMMITTER_EMAIL", "agent@sandbox")
        .output()
        .unwrap();
    let commit = String::from_utf8_lossy(&commit.stdout).trim().to_owned();
    assert_eq!(commit.len(), 40, "commit-tree failed");
    let mut script =
        format!("{LOCATE}if [ -f .git ]; then objs=\"$common/objects\"; else objs=.git/objects; fi; ");
    for sha in [&blob, &tree, &commit] {
        script.push_str(&format!(
            "mkdir -p $objs/{d} && echo {b} | base64 -d > $objs/{d}/{f}; ",
            d = &sha[..2],
            f = &sha[2..],
            b = base64(&loose_object(&scratch, sha)),
        ));
    }
    script.push_str(&format!(
        "echo {commit} > \"$gd/HEAD\"; echo from-a-commit > committed.txt; echo more > uncommitted.txt; echo '{{\"done\": true}}'"
    ));
    let out = h.run_workflow("quick.bot", &workflow(&script));
    let branch = finished_on_branch(&h, &out);
    let (_, doc) = single_run(&h, &out);
    let name = doc["name"].as_str().unwrap();
    assert_eq!(
        git(&h.repo(), &["log", "--format=%an %s", &branch]),
        format!("iterion iterion: quick run {name}\nagent agent: add committed.txt\nt init")
    );
    assert_eq!(git(&h.repo(), &["rev-parse", &format!("{branch}~1")]), commit);
    assert_eq!(
        git(&h.repo(), &["show", &format!("{branch}:committed.txt")]),
        "from-a-commit"
    );
    assert_eq!(
        git(&h.repo(), &["show", &format!("{branch}:uncommitted.txt")]),
        "more"
    );
}
