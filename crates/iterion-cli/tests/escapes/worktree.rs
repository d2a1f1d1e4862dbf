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
    git(
        &h.repo(),
        &["worktree", "remove", "--force", doc["work_dir"].as_str().unwrap()],
    );
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
