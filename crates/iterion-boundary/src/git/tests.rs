use super::*;
use std::os::unix::fs::PermissionsExt;

fn operator_env(home: &Path) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("PATH".to_string(), "/usr/local/bin:/usr/bin:/bin".to_string()),
        ("HOME".to_string(), home.to_string_lossy().into_owned()),
    ])
}

/// Plain git as a test fixture would run it (the operator's HOME, no system config).
fn plain(dir: &Path, home: &Path, args: &[&str]) -> String {
    let env = Env::new()
        .with("PATH", "/usr/local/bin:/usr/bin:/bin")
        .with("HOME", home)
        .with("GIT_CONFIG_NOSYSTEM", "1");
    let c = HostCommand::new("git", env)
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

struct Fixture {
    _t: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    repo: PathBuf,
    marker: PathBuf,
}

/// A repository with one commit whose own config and hooks name programs that touch `marker`, and whose
/// `core.worktree` names a directory that does not exist.
fn hostile() -> Fixture {
    let t = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(t.path()).unwrap();
    let home = root.join("home");
    let repo = root.join("repo");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&repo).unwrap();
    let marker = root.join("marker");
    plain(&repo, &home, &["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    std::fs::write(repo.join(".gitattributes"), "* filter=evil diff=evil\n").unwrap();
    plain(&repo, &home, &["add", "-A"]);
    plain(&repo, &home, &["commit", "-q", "-m", "init"]);
    let touch = format!("touch {}", marker.display());
    let hooks = root.join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for h in [
        "reference-transaction",
        "post-commit",
        "pre-commit",
        "post-checkout",
        "post-index-change",
    ] {
        let p = hooks.join(h);
        std::fs::write(&p, format!("#!/bin/sh\n{touch}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::copy(&p, repo.join(".git/hooks").join(h)).unwrap();
    }
    let config = format!(
        "[core]\n\tfsmonitor = \"{touch}; false\"\n\thooksPath = {}\n\tworktree = /nonexistent/elsewhere\n\
         [filter \"evil\"]\n\tclean = \"{touch}; cat\"\n\tsmudge = \"{touch}; cat\"\n\tprocess = \"{touch}\"\n\
         [diff \"evil\"]\n\ttextconv = \"{touch}; cat\"\n",
        hooks.display()
    );
    let mut c = std::fs::read_to_string(repo.join(".git/config")).unwrap();
    c.push_str(&config);
    std::fs::write(repo.join(".git/config"), c).unwrap();
    // the same in the operator's global config, which the runner must not read either
    std::fs::write(home.join(".gitconfig"), config).unwrap();
    Fixture {
        _t: t,
        root,
        home,
        repo,
        marker,
    }
}

fn assert_nothing_ran(f: &Fixture) {
    assert!(!f.marker.exists(), "a configured program ran");
}

#[test]
fn a_foreign_repository_is_read_and_written_without_running_its_programs_or_following_core_worktree() {
    let f = hostile();
    let git = HostGit::from_env(&operator_env(&f.home)).unwrap();
    let scratch = f.root.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let gd = f.repo.join(".git");
    let at = Pinned::foreign(&gd, &scratch);
    let head = git
        .at(at)
        .args(["rev-parse", "--verify", "HEAD^{commit}"])
        .run()
        .unwrap();
    assert_eq!(head.len(), 40);
    git.at(at)
        .args(["update-ref", "refs/heads/iterion/run/x", &head, ""])
        .run()
        .unwrap();
    // create only: an existing branch is never moved
    let e = git
        .at(at)
        .args(["update-ref", "refs/heads/iterion/run/x", &head, ""])
        .run()
        .unwrap_err();
    assert!(
        matches!(&e, Error::Git { verb, .. } if verb == "update-ref"),
        "{e}"
    );
    assert!(e.to_string().contains("exit status 128"), "{e}");
    assert_nothing_ran(&f);
}

#[test]
fn a_checkout_and_a_commit_in_a_host_git_dir_run_no_filter_or_hook() {
    let f = hostile();
    let git = HostGit::from_env(&operator_env(&f.home)).unwrap();
    let scratch = f.root.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let op = f.repo.join(".git");
    let base = git
        .at(Pinned::foreign(&op, &scratch))
        .args(["rev-parse", "HEAD"])
        .run()
        .unwrap();
    let h = f.root.join("host.git");
    git.outside(&f.root)
        .args(["init", "-q", "--bare", "--template="])
        .arg(&h)
        .run()
        .unwrap();
    std::fs::create_dir_all(h.join("objects/info")).unwrap();
    std::fs::write(
        h.join("objects/info/alternates"),
        format!("{}\n", op.join("objects").display()),
    )
    .unwrap();
    let w = f.root.join("work");
    std::fs::create_dir_all(&w).unwrap();
    let index = h.join("index");
    let at = Pinned::checkout(&h, &w, &index, ObjectFormat::Sha1);
    git.at(at)
        .args(["read-tree", "--reset", "-u", &base])
        .run()
        .unwrap();
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "a\n");
    std::fs::write(w.join("a.txt"), "b\n").unwrap();
    std::fs::write(w.join("new.txt"), "n\n").unwrap();
    git.at(at).args(["add", "-A"]).run().unwrap();
    let tree = git.at(at).args(["write-tree"]).run().unwrap();
    let id = Identity::fallback();
    let mut call = git
        .at(Pinned::bare(&h))
        .args(["commit-tree", &tree, "-p", &base, "-m", "result"]);
    for (k, v) in id.vars() {
        call = call.env(k, v);
    }
    let commit = call.run().unwrap();
    git.at(Pinned::bare(&h))
        .args(["update-ref", "refs/iterion/result", &commit])
        .run()
        .unwrap();
    // the result travels into the operator's repository by a local fetch, then a create-only ref
    let foreign = Pinned::foreign(&op, &scratch);
    git.at(foreign)
        .args(["fetch", "-q", "--no-tags", "--no-write-fetch-head"])
        .arg(&h)
        .arg("refs/iterion/result")
        .run()
        .unwrap();
    git.at(foreign)
        .args(["update-ref", "refs/heads/iterion/run/r", &commit, ""])
        .run()
        .unwrap();
    let log = plain(
        &f.root,
        &f.home,
        &[
            &format!("--git-dir={}", op.display()),
            &format!("--work-tree={}", scratch.display()),
            "log",
            "--format=%an %s",
            "iterion/run/r",
        ],
    );
    assert_eq!(log, "iterion result\nt init");
    assert_nothing_ran(&f);
}

#[test]
fn only_the_file_transport_is_allowed() {
    let f = hostile();
    let git = HostGit::from_env(&operator_env(&f.home)).unwrap();
    let scratch = f.root.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let op = f.repo.join(".git");
    let url = format!("ext::sh -c {}", f.marker.display()).replace(' ', "% ");
    let e = git
        .at(Pinned::foreign(&op, &scratch))
        .args(["fetch", "-q", &url, "HEAD"])
        .run()
        .unwrap_err();
    assert!(e.to_string().contains("not allowed"), "{e}");
    assert_nothing_ran(&f);
}

#[test]
fn the_operator_identity_comes_from_the_global_config_only() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().to_path_buf();
    let env = operator_env(&home);
    let git = HostGit::from_env(&env).unwrap();
    assert_eq!(git.operator_identity(&env, None), Identity::fallback());
    std::fs::write(
        home.join(".gitconfig"),
        "[user]\n\tname = Op Erator\n\temail = op@example.com\n",
    )
    .unwrap();
    assert_eq!(
        git.operator_identity(&env, None),
        Identity {
            name: "Op Erator".into(),
            email: "op@example.com".into()
        }
    );
    // an include for the repository's directory is followed, and the repository's core.worktree is not
    let work = t.path().join("work");
    let repo = work.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    plain(&repo, &home, &["init", "-q"]);
    plain(
        &repo,
        &home,
        &["config", "core.worktree", "/nonexistent/elsewhere"],
    );
    std::fs::write(
        t.path().join("work.gitconfig"),
        "[user]\n\temail = op@work.example\n",
    )
    .unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        format!(
            "[user]\n\tname = Op Erator\n\temail = op@example.com\n[includeIf \"gitdir:{}/\"]\n\tpath = {}\n",
            work.display(),
            t.path().join("work.gitconfig").display()
        ),
    )
    .unwrap();
    let gd = repo.join(".git");
    assert_eq!(
        git.operator_identity(&env, Some(Pinned::foreign(&gd, t.path())))
            .email,
        "op@work.example"
    );
    // and the runner's own commands never see it
    let out = git
        .outside(t.path())
        .args(["config", "--get", "user.name"])
        .run_captured();
    assert!(matches!(out, Err(Error::Git { .. })), "{out:?}");
}

#[test]
fn a_relative_location_is_refused_before_git_runs() {
    let t = tempfile::tempdir().unwrap();
    let git = HostGit::from_env(&operator_env(t.path())).unwrap();
    let e = git
        .at(Pinned::bare(Path::new("relative/dir")))
        .args(["rev-parse", "HEAD"])
        .run()
        .unwrap_err();
    assert!(
        matches!(&e, Error::Git { status, .. } if status == "not run"),
        "{e}"
    );
}

#[test]
fn git_is_found_only_in_trusted_path_entries() {
    let t = tempfile::tempdir().unwrap();
    let mut env = operator_env(t.path());
    env.insert("PATH".into(), ".:bin".into());
    assert!(matches!(HostGit::from_env(&env), Err(Error::NotFound { .. })));
}
