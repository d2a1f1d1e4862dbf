use super::*;
use iterion_boundary::{Bounds, Env, HostCommand};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

fn env(home: &Path) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("HOME".to_string(), home.to_string_lossy().into_owned()),
        ("PATH".to_string(), "/usr/local/bin:/usr/bin:/bin".to_string()),
    ])
}

/// Plain git, as the operator (or a test fixture) runs it.
fn git(dir: &Path, home: &Path, args: &[&str]) -> String {
    let e = Env::new()
        .with("PATH", "/usr/local/bin:/usr/bin:/bin")
        .with("HOME", home)
        .with("GIT_CONFIG_NOSYSTEM", "1");
    let c = HostCommand::new("git", e)
        .current_dir(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .run_bounded(None, Bounds::new(Duration::from_secs(60)))
        .unwrap();
    assert!(
        c.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&c.stderr)
    );
    String::from_utf8_lossy(&c.stdout).trim().to_owned()
}

struct Repo {
    _t: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    repo: PathBuf,
    store: PathBuf,
}

impl Repo {
    fn new() -> Repo {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let (home, repo, store) = (root.join("home"), root.join("repo"), root.join("store"));
        for d in [&home, &repo, &store] {
            std::fs::create_dir_all(d).unwrap();
        }
        git(&repo, &home, &["init", "-q"]);
        std::fs::write(repo.join("a.txt"), "a\n").unwrap();
        git(&repo, &home, &["add", "-A"]);
        git(&repo, &home, &["commit", "-q", "-m", "init"]);
        Repo {
            _t: t,
            root,
            home,
            repo,
            store,
        }
    }

    fn env(&self) -> BTreeMap<String, String> {
        env(&self.home)
    }

    fn git(&self, args: &[&str]) -> String {
        git(&self.repo, &self.home, args)
    }

    fn create(&self, id: &str) -> Worktree {
        let src = source_repo(&self.repo).unwrap().unwrap();
        create_worktree(
            &src,
            &self.store.join("worktrees").join(id),
            &host_git_dir(&self.store, id),
            id,
            &self.env(),
        )
        .unwrap()
    }
}

#[test]
fn changes_are_committed_and_branched_and_the_workspace_removed() {
    let r = Repo::new();
    let wt = r.create("r1");
    assert_eq!(wt.base_commit, r.git(&["rev-parse", "HEAD"]));
    assert_eq!(std::fs::read_to_string(wt.path.join("a.txt")).unwrap(), "a\n");
    // the private repository: detached at the base, objects borrowed from the bind target
    assert_eq!(
        std::fs::read_to_string(wt.path.join(".git/HEAD")).unwrap().trim(),
        wt.base_commit
    );
    assert_eq!(
        std::fs::read_to_string(wt.path.join(".git/objects/info/alternates")).unwrap(),
        format!("{OBJECTS_TARGET}\n")
    );
    assert!(
        !r.repo.join(".git/worktrees").exists(),
        "nothing is registered in the repository"
    );
    std::fs::write(wt.path.join("b.txt"), "b\n").unwrap();
    let fin = finish_worktree(&wt, "gate", "calm-blue-fox-1a2b", &r.env()).unwrap();
    assert!(fin.committed && !fin.imported);
    assert_eq!(
        fin.final_branch.as_deref(),
        Some("iterion/run/calm-blue-fox-1a2b")
    );
    assert!(!wt.path.exists() && !wt.git_dir.exists());
    assert_eq!(
        r.git(&[
            "log",
            "-1",
            "--format=%an <%ae> %s",
            "iterion/run/calm-blue-fox-1a2b"
        ]),
        "iterion <iterion@localhost> iterion: gate run calm-blue-fox-1a2b"
    );
    assert_eq!(
        r.git(&["rev-parse", "iterion/run/calm-blue-fox-1a2b"]),
        fin.final_commit
    );
    // the operator's identity from their global config
    std::fs::write(
        r.home.join(".gitconfig"),
        "[user]\n\tname = Op\n\temail = op@example.com\n",
    )
    .unwrap();
    let wt = r.create("r2");
    std::fs::write(wt.path.join("c.txt"), "c\n").unwrap();
    finish_worktree(&wt, "gate", "n2", &r.env()).unwrap();
    assert_eq!(
        r.git(&["log", "-1", "--format=%an <%ae>", "iterion/run/n2"]),
        "Op <op@example.com>"
    );
}

#[test]
fn an_unchanged_workspace_has_no_branch() {
    let r = Repo::new();
    let wt = r.create("r1");
    let fin = finish_worktree(&wt, "gate", "n", &r.env()).unwrap();
    assert_eq!(
        (fin.final_commit.as_str(), fin.final_branch, fin.committed),
        (wt.base_commit.as_str(), None, false)
    );
    assert_eq!(r.git(&["branch", "--list", "iterion/*"]), "");
}

#[test]
fn outside_a_repository_there_is_no_source() {
    let t = tempfile::tempdir().unwrap();
    assert_eq!(source_repo(t.path()).unwrap(), None);
    std::fs::create_dir_all(t.path().join("r/.git")).unwrap();
    std::fs::write(t.path().join("r/.git/commondir"), "/etc\n").unwrap();
    let e = source_repo(&t.path().join("r")).unwrap_err();
    assert!(e.to_string().contains("commondir"), "{e}");
}

#[test]
fn a_repository_without_a_commit_fails_and_leaves_nothing() {
    let r = Repo::new();
    let empty = r.root.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    git(&empty, &r.home, &["init", "-q"]);
    let src = source_repo(&empty).unwrap().unwrap();
    let (path, gd) = (r.store.join("worktrees/x"), host_git_dir(&r.store, "x"));
    let e = create_worktree(&src, &path, &gd, "x", &r.env()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("worktree: rev-parse HEAD failed: git rev-parse failed"),
        "{e}"
    );
    assert!(!path.exists() && !gd.exists());
}

/// Everything a sandbox can plant in its workspace (and everything a repository's own config names) stays
/// inert on the host: hooks, filters, an fsmonitor, a `commondir`, an `info/exclude`, a `HEAD` naming the
/// operator's branch.
#[test]
fn nothing_planted_in_the_workspace_or_the_repository_runs_or_redirects() {
    let r = Repo::new();
    let marker = r.root.join("marker");
    let touch = format!("touch {}", marker.display());
    std::fs::write(r.repo.join(".gitattributes"), "* filter=evil\n").unwrap();
    r.git(&["add", "-A"]);
    r.git(&["commit", "-q", "-m", "attributes"]);
    let main = r.git(&["rev-parse", "main"]);
    r.git(&["config", "filter.evil.smudge", &format!("{touch}; cat")]);
    r.git(&["config", "filter.evil.clean", &format!("{touch}; cat")]);
    r.git(&["config", "core.fsmonitor", &format!("{touch}; false")]);
    for h in [
        "post-checkout",
        "reference-transaction",
        "post-commit",
        "pre-commit",
    ] {
        let p = r.repo.join(".git/hooks").join(h);
        std::fs::write(&p, format!("#!/bin/sh\n{touch}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let wt = r.create("r1");
    let dot = wt.path.join(".git");
    std::fs::write(
        dot.join("config"),
        format!("[core]\n\tfsmonitor = \"{touch}; false\"\n\thooksPath = /tmp\n"),
    )
    .unwrap();
    std::fs::write(
        dot.join("commondir"),
        format!("{}\n", r.repo.join(".git").display()),
    )
    .unwrap();
    std::fs::write(dot.join("info/exclude"), "result.txt\n").unwrap();
    std::fs::write(dot.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(wt.path.join("result.txt"), "r\n").unwrap();
    let fin = finish_worktree(&wt, "gate", "n", &r.env()).unwrap();
    assert!(!marker.exists(), "a planted program ran");
    assert_eq!(r.git(&["rev-parse", "main"]), main, "the operator's branch moved");
    assert_eq!(r.git(&["show", "iterion/run/n:result.txt"]), "r");
    assert!(
        fin.notes.iter().any(|n| n.contains("names no commit")),
        "{:?}",
        fin.notes
    );
}

/// Commits written into the workspace's `.git` (loose and packed, as git inside the sandbox writes them)
/// become the branch's history.
#[test]
fn commits_made_in_the_workspace_are_taken_over() {
    let r = Repo::new();
    let wt = r.create("r1");
    // what git inside the sandbox would do, the objects dir bound at its own path instead of OBJECTS_TARGET
    std::fs::write(
        wt.path.join(".git/objects/info/alternates"),
        format!("{}\n", r.repo.join(".git/objects").display()),
    )
    .unwrap();
    std::fs::write(wt.path.join("b.txt"), "b\n").unwrap();
    git(&wt.path, &r.home, &["add", "b.txt"]);
    git(&wt.path, &r.home, &["commit", "-q", "-m", "agent one"]);
    git(&wt.path, &r.home, &["gc", "-q"]);
    std::fs::write(wt.path.join("c.txt"), "c\n").unwrap();
    git(&wt.path, &r.home, &["add", "c.txt"]);
    git(&wt.path, &r.home, &["commit", "-q", "-m", "agent two"]);
    std::fs::write(wt.path.join("d.txt"), "d\n").unwrap();
    let fin = finish_worktree(&wt, "gate", "n", &r.env()).unwrap();
    assert!(fin.imported && fin.committed);
    assert_eq!(
        r.git(&["log", "--format=%s", "iterion/run/n"]),
        "iterion: gate run n\nagent two\nagent one\ninit"
    );
    r.git(&["fsck", "--full", "--no-dangling"]);
}

/// A `HEAD` naming an object the sandbox never wrote fails the finish: the workspace and its git dir are kept.
#[test]
fn a_head_without_its_objects_keeps_everything() {
    let r = Repo::new();
    let wt = r.create("r1");
    std::fs::write(wt.path.join(".git/HEAD"), format!("{}\n", "1".repeat(40))).unwrap();
    std::fs::write(wt.path.join("b.txt"), "b\n").unwrap();
    let e = finish_worktree(&wt, "gate", "n", &r.env()).unwrap_err();
    assert!(e.to_string().contains("the sandbox's commits"), "{e}");
    assert!(wt.path.join("b.txt").exists() && wt.git_dir.is_dir());
    assert_eq!(r.git(&["branch", "--list", "iterion/*"]), "");
}

#[test]
fn a_resumed_workspace_must_have_the_host_git_dir_made_for_its_run() {
    let r = Repo::new();
    let wt = r.create("r1");
    let again = reopen_worktree(&r.repo, &wt.path, &wt.git_dir, "r1", &wt.base_commit, &r.env()).unwrap();
    assert_eq!(again, wt);
    let e = reopen_worktree(&r.repo, &wt.path, &wt.git_dir, "other", &wt.base_commit, &r.env()).unwrap_err();
    assert!(e.to_string().contains("is not the host git dir"), "{e}");
    let fake = r.root.join("fake");
    std::os::unix::fs::symlink(&wt.git_dir, &fake).unwrap();
    let e = reopen_worktree(&r.repo, &wt.path, &fake, "r1", &wt.base_commit, &r.env()).unwrap_err();
    assert!(e.to_string().contains("is not the host git dir"), "{e}");
    let e = reopen_worktree(
        &r.repo,
        &r.root.join("gone"),
        &wt.git_dir,
        "r1",
        &wt.base_commit,
        &r.env(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("no longer exists"), "{e}");
}

#[test]
fn removal_never_follows_a_link_out_of_the_workspace() {
    let r = Repo::new();
    let wt = r.create("r1");
    let precious = r.root.join("precious");
    std::fs::create_dir_all(&precious).unwrap();
    std::fs::write(precious.join("f"), "keep").unwrap();
    std::os::unix::fs::symlink(&precious, wt.path.join("link")).unwrap();
    remove_worktree(&wt.path, &wt.git_dir).unwrap();
    assert!(!wt.path.exists());
    assert_eq!(std::fs::read_to_string(precious.join("f")).unwrap(), "keep");
}
