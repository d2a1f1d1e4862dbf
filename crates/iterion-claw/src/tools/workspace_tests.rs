//! The work-directory tools: `list_files`, `tree`, `search_codebase`, `git_status`, `git_diff`,
//! `run_command`, `patch`, `read_image`, and their confinement.

use super::*;
use serde_json::json;
use std::os::unix::fs::symlink;

fn all(dir: &Path) -> Builtins {
    let names: Vec<String> = BUILTINS.iter().map(|s| s.to_string()).collect();
    Builtins::new(dir, &names, false, None).unwrap()
}

fn with_path(dir: &Path, path: &str) -> Builtins {
    let mut env = iterion_boundary::Env::new();
    env.set("PATH", path);
    all(dir).with_shell_env(env)
}

async fn ok(b: &Builtins, tool: &str, input: Value) -> String {
    b.run(tool, &input)
        .await
        .unwrap_or_else(|e| panic!("{tool} {input}: {e}"))
}

async fn err(b: &Builtins, tool: &str, input: Value) -> String {
    match b.run(tool, &input).await {
        Ok(out) => panic!("{tool} {input} succeeded: {out}"),
        Err(e) => e.to_string(),
    }
}

fn write(d: &Path, rel: &str, text: &str) {
    let p = d.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A work directory with sources, a `.git` to skip and a link, beside an `outside` directory holding a secret.
fn layout() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let work = t.path().join("work");
    let outside = t.path().join("outside");
    write(&work, "src/main.rs", "fn main() {\n    println!(\"Hello\");\n}\n");
    write(&work, "src/util/mod.rs", "// TODO: hello world\npub fn f() {}\n");
    write(&work, "README.md", "# Demo\nsay hello\n");
    write(&work, ".git/config", "hello in git\n");
    write(&outside, "secret.txt", "hello secret\n");
    symlink(&outside, work.join("out")).unwrap();
    symlink(outside.join("secret.txt"), work.join("secret-link")).unwrap();
    (t, work, outside)
}

#[tokio::test]
async fn list_files_lists_one_level_or_recursively_without_following_links() {
    let (_t, w, o) = layout();
    let b = all(&w);
    assert_eq!(
        ok(&b, "list_files", json!({})).await,
        format!(
            "README.md\nout -> {o}\nsecret-link -> {o}/secret.txt\nsrc/",
            o = o.display()
        )
    );
    assert_eq!(
        ok(&b, "list_files", json!({"path": "src", "recursive": true})).await,
        "src/main.rs\nsrc/util/\nsrc/util/mod.rs"
    );
    assert_eq!(
        ok(
            &b,
            "list_files",
            json!({"path": "./src/../src", "recursive": true, "max_depth": 1})
        )
        .await,
        "src/main.rs\nsrc/util/"
    );
    std::fs::create_dir(w.join("empty")).unwrap();
    assert_eq!(
        ok(&b, "list_files", json!({"path": "empty"})).await,
        "(empty directory)"
    );
    assert!(
        err(&b, "list_files", json!({"path": "README.md"}))
            .await
            .ends_with("README.md is not a directory")
    );
    assert!(
        err(
            &b,
            "list_files",
            json!({"path": "src", "recursive": true, "max_depth": 0})
        )
        .await
        .contains("positive integer")
    );
}

#[tokio::test]
async fn tree_is_indented_bounded_in_depth_and_skips_git() {
    let (_t, w, _) = layout();
    let b = all(&w);
    let out = ok(&b, "tree", json!({})).await;
    let want = format!(
        "./\n  README.md\n  out -> {o}\n  secret-link -> {o}/secret.txt\n  src/\n    main.rs\n    util/\n      mod.rs",
        o = w.parent().unwrap().join("outside").display()
    );
    assert_eq!(out, want);
    assert_eq!(
        ok(&b, "tree", json!({"path": "src", "max_depth": 1})).await,
        "src/\n  main.rs\n  util/"
    );
}

#[tokio::test]
async fn listings_stop_at_the_entry_bound() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..search::MAX_RESULTS + 5 {
        write(d.path(), &format!("f{i:05}"), "");
    }
    let b = all(d.path());
    let list = ok(&b, "list_files", json!({})).await;
    assert_eq!(list.lines().count(), search::MAX_RESULTS + 1);
    assert!(
        list.ends_with("[listing truncated at 1000 entries]"),
        "{}",
        &list[list.len() - 80..]
    );
    let tree = ok(&b, "tree", json!({})).await;
    assert!(tree.ends_with("[listing truncated at 1000 entries]"));
    assert_eq!(tree.lines().count(), search::MAX_RESULTS + 2);
}

#[tokio::test]
async fn search_codebase_finds_text_with_file_and_line() {
    let (_t, w, _) = layout();
    let b = all(&w);
    // case-insensitive text by default; .git, links and the outside are not searched
    assert_eq!(
        ok(&b, "search_codebase", json!({"query": "hello"})).await,
        "README.md:2: say hello\nsrc/main.rs:2: println!(\"Hello\");\nsrc/util/mod.rs:1: // TODO: hello world"
    );
    assert_eq!(
        ok(
            &b,
            "search_codebase",
            json!({"query": "Hello", "case_sensitive": true})
        )
        .await,
        "src/main.rs:2: println!(\"Hello\");"
    );
    assert_eq!(
        ok(
            &b,
            "search_codebase",
            json!({"query": "fn \\w+\\(\\)", "regex": true, "glob": "*.rs"})
        )
        .await,
        "src/main.rs:1: fn main() {\nsrc/util/mod.rs:2: pub fn f() {}"
    );
    // a query is text unless regex: the parenthesis is literal
    assert_eq!(
        ok(
            &b,
            "search_codebase",
            json!({"query": "f() {", "path": "src/util"})
        )
        .await,
        "src/util/mod.rs:2: pub fn f() {}"
    );
    assert_eq!(
        ok(&b, "search_codebase", json!({"query": "zzz"})).await,
        "no matches for 'zzz'"
    );
    assert!(
        err(&b, "search_codebase", json!({"query": "(", "regex": true}))
            .await
            .starts_with("search_codebase: regex parse error")
    );
    assert!(
        err(&b, "search_codebase", json!({}))
            .await
            .contains("missing string argument 'query'")
    );
}

#[tokio::test]
async fn paths_out_of_the_work_dir_are_refused() {
    let (_t, w, outside) = layout();
    let b = all(&w);
    let abs_out = outside.display().to_string();
    let abs_in = w.join("src").display().to_string();
    let escapes = [
        "..",
        "../outside",
        "src/../../outside",
        &abs_out,
        "/etc",
        "out",
        "out/",
        "secret-link",
    ];
    for p in escapes {
        for (tool, input) in [
            ("list_files", json!({"path": p})),
            ("tree", json!({"path": p})),
            ("search_codebase", json!({"query": "hello", "path": p})),
            ("read_image", json!({"path": p})),
            ("git_diff", json!({"path": p})),
        ] {
            let e = err(&b, tool, input).await;
            assert_eq!(
                e,
                format!("{tool}: path '{p}' is outside the work directory"),
                "{tool} {p}"
            );
        }
    }
    // an absolute path inside the work dir is accepted
    assert_eq!(
        ok(&b, "list_files", json!({"path": abs_in})).await,
        "src/main.rs\nsrc/util/"
    );
    // a link inside that stays inside is followed
    symlink(w.join("src"), w.join("src-link")).unwrap();
    assert_eq!(
        ok(&b, "list_files", json!({"path": "src-link"})).await,
        "src/main.rs\nsrc/util/"
    );
}

#[tokio::test]
async fn a_patch_whose_path_escapes_changes_nothing() {
    let (_t, w, outside) = layout();
    let b = all(&w);
    let secret = outside.join("secret.txt");
    let attack = |name: &str| format!("--- a/{name}\n+++ b/{name}\n@@ -1 +1 @@\n-hello secret\n+owned\n");
    for name in [
        "../outside/secret.txt",
        "out/secret.txt",
        "secret-link",
        &secret.display().to_string(),
    ] {
        let e = err(&b, "patch", json!({"patch": attack(name)})).await;
        assert!(e.contains("is outside the work directory"), "{name}: {e}");
    }
    // a new file below a link that leads out is refused too
    let create = "--- /dev/null\n+++ b/out/new.txt\n@@ -0,0 +1 @@\n+x\n";
    assert!(
        err(&b, "patch", json!({"patch": create}))
            .await
            .contains("outside the work directory")
    );
    // a file inside first, then one outside: nothing is written
    let both = format!(
        "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# Demo\n+# Changed\n{}",
        attack("../outside/secret.txt")
    );
    assert!(
        err(&b, "patch", json!({"patch": both}))
            .await
            .contains("outside the work directory")
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "hello secret\n");
    assert!(!outside.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(w.join("README.md")).unwrap(),
        "# Demo\nsay hello\n"
    );
}

#[tokio::test]
async fn patch_applies_every_file_or_none() {
    let d = tempfile::tempdir().unwrap();
    let w = d.path();
    write(w, "a.txt", "one\ntwo\nthree\n");
    write(w, "b.txt", "alpha\nbeta\n");
    write(w, "gone.txt", "bye\n");
    let b = all(w);
    let bad = "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n\
               --- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@\n alpha\n-gamma\n+beta2\n";
    let e = err(&b, "patch", json!({"patch": bad})).await;
    assert_eq!(
        e,
        "patch: hunk 1 of b.txt (@@ -1,2 +1,2 @@) does not apply: line 2 is 'beta', the hunk expects 'gamma' \
         (and its context is nowhere else)"
    );
    assert_eq!(
        std::fs::read_to_string(w.join("a.txt")).unwrap(),
        "one\ntwo\nthree\n"
    );
    let good = "diff --git a/a.txt b/a.txt\nindex 1..2 100644\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n\
                --- /dev/null\n+++ b/new/c.txt\n@@ -0,0 +1,2 @@\n+c1\n+c2\n\
                --- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n";
    assert_eq!(
        ok(&b, "patch", json!({"patch": good})).await,
        "patched a.txt (1 hunk(s))\ncreated new/c.txt\ndeleted gone.txt"
    );
    assert_eq!(
        std::fs::read_to_string(w.join("a.txt")).unwrap(),
        "one\n2\nthree\n"
    );
    assert_eq!(std::fs::read_to_string(w.join("new/c.txt")).unwrap(), "c1\nc2\n");
    assert!(!w.join("gone.txt").exists());
    // no staging file is left behind
    let names: Vec<_> = std::fs::read_dir(w)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    let e = err(
        &b,
        "patch",
        json!({"patch": "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+x\n"}),
    )
    .await;
    assert_eq!(e, "patch: a.txt: the patch creates it, but it exists");
}

fn git(dir: &Path, args: &[&str]) {
    let mut env = iterion_boundary::Env::new();
    env.set("PATH", "/usr/local/bin:/usr/bin:/bin");
    env.set("HOME", dir);
    for (k, v) in [
        ("GIT_AUTHOR_NAME", "t"),
        ("GIT_AUTHOR_EMAIL", "t@t"),
        ("GIT_COMMITTER_NAME", "t"),
        ("GIT_COMMITTER_EMAIL", "t@t"),
    ] {
        env.set(k, v);
    }
    let out = iterion_boundary::HostCommand::new("git", env)
        .current_dir(dir)
        .args(args)
        .run_bounded(
            None,
            iterion_boundary::Bounds::new(std::time::Duration::from_secs(30)),
        )
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn git_status_and_diff_in_a_repository() {
    let d = tempfile::tempdir().unwrap();
    let w = d.path();
    if iterion_boundary::find_program("git".as_ref(), Some("/usr/local/bin:/usr/bin:/bin".as_ref()), &[])
        .is_err()
    {
        panic!("these tests need git on the machine");
    }
    git(w, &["init", "-q", "-b", "main"]);
    write(w, "a.txt", "one\n");
    write(w, "same.txt", "s\n");
    git(w, &["add", "a.txt", "same.txt"]);
    git(w, &["commit", "-q", "-m", "first"]);
    // same content, other mtime: a status refreshing the index would write it back
    let past = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    std::fs::File::options()
        .write(true)
        .open(w.join("same.txt"))
        .unwrap()
        .set_modified(past)
        .unwrap();
    write(w, "a.txt", "one\ntwo\n");
    write(w, "new.txt", "n\n");
    // a filter and an external diff the repository names never run
    write(w, ".gitattributes", "*.txt filter=evil diff=evil\n");
    git(w, &["config", "filter.evil.clean", "touch FILTER_RAN; cat"]);
    git(w, &["config", "diff.evil.textconv", "touch TEXTCONV_RAN; cat"]);
    git(w, &["config", "diff.external", "touch EXTERNAL_RAN; true"]);
    git(w, &["config", "core.fsmonitor", "touch FSMONITOR_RAN; true"]);
    let b = with_path(w, "/usr/local/bin:/usr/bin:/bin");
    let index = std::fs::read(w.join(".git/index")).unwrap();
    assert_eq!(
        ok(&b, "git_status", json!({})).await,
        "## main\n M a.txt\n?? .gitattributes\n?? new.txt\n"
    );
    // a status writes nothing, not even the index's refreshed stat data (a diff may refresh it, as git does)
    assert!(
        std::fs::read(w.join(".git/index")).unwrap() == index,
        "the index was written"
    );
    let diff = ok(&b, "git_diff", json!({})).await;
    assert!(
        diff.contains("--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n one\n+two\n"),
        "{diff}"
    );
    assert_eq!(
        ok(&b, "git_diff", json!({"staged": true})).await,
        "no differences"
    );
    assert_eq!(
        ok(&b, "git_diff", json!({"path": "new.txt"})).await,
        "no differences"
    );
    assert!(
        ok(&b, "git_diff", json!({"base": "HEAD", "path": "a.txt"}))
            .await
            .contains("+two")
    );
    assert_eq!(
        err(&b, "git_diff", json!({"base": "--output=x"})).await,
        "git_diff: '--output=x' is not a revision"
    );
    for f in ["FILTER_RAN", "TEXTCONV_RAN", "EXTERNAL_RAN", "FSMONITOR_RAN"] {
        assert!(!w.join(f).exists(), "{f}");
    }
    // outside a repository: git's own error
    let plain = tempfile::tempdir().unwrap();
    let e = err(
        &with_path(plain.path(), "/usr/local/bin:/usr/bin:/bin"),
        "git_status",
        json!({}),
    )
    .await;
    assert!(
        e.starts_with("git_status: git exited with 128: fatal: not a git repository"),
        "{e}"
    );
}

#[tokio::test]
async fn git_absent_is_a_clear_tool_error() {
    let d = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let b = with_path(d.path(), empty.path().to_str().unwrap());
    for tool in ["git_status", "git_diff"] {
        assert_eq!(
            err(&b, tool, json!({})).await,
            format!("{tool}: git is not available in this environment (no git program on PATH)")
        );
    }
    // a git planted in the work directory is not the one started
    write(d.path(), "git", "#!/bin/sh\ntouch PLANTED_RAN\n");
    std::fs::set_permissions(
        d.path().join("git"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let planted = with_path(d.path(), d.path().to_str().unwrap());
    assert!(
        err(&planted, "git_status", json!({}))
            .await
            .contains("git is not available")
    );
    assert!(!d.path().join("PLANTED_RAN").exists());
}

#[tokio::test]
async fn run_command_is_bash_under_the_reference_name() {
    let d = tempfile::tempdir().unwrap();
    let b = with_path(d.path(), "/usr/bin:/bin");
    let out: Value =
        serde_json::from_str(&ok(&b, "run_command", json!({"command": "echo hi; exit 4"})).await).unwrap();
    assert_eq!(out, json!({"stdout": "hi\n", "stderr": "", "exit_code": 4}));
    let e = err(&b, "run_command", json!({"command": "sleep 5", "timeout_ms": 50})).await;
    assert_eq!(e, "run_command: command timed out after 50 ms");
    assert_eq!(
        err(&b, "run_command", json!({})).await,
        "run_command: missing string argument 'command'"
    );
}

#[tokio::test]
async fn read_image_returns_base64_with_the_media_type() {
    let d = tempfile::tempdir().unwrap();
    let png = b"\x89PNG\r\n\x1a\nrest";
    std::fs::write(d.path().join("a.png"), png).unwrap();
    std::fs::write(d.path().join("a.txt"), "text").unwrap();
    std::fs::write(
        d.path().join("big.png"),
        vec![0u8; image::MAX_IMAGE_BYTES as usize + 1],
    )
    .unwrap();
    let b = all(d.path());
    let out: Value = serde_json::from_str(&ok(&b, "read_image", json!({"path": "a.png"})).await).unwrap();
    assert_eq!(
        out,
        json!({"path": "a.png", "media_type": "image/png", "size": 12, "data": "iVBORw0KGgpyZXN0"})
    );
    assert_eq!(
        err(&b, "read_image", json!({"path": "a.txt"})).await,
        "read_image: a.txt is not a PNG, JPEG, GIF or WebP image"
    );
    assert!(
        err(&b, "read_image", json!({"path": "big.png"}))
            .await
            .contains("more than the 73728 bytes")
    );
}

#[tokio::test]
async fn readonly_keeps_the_reading_tools() {
    let d = tempfile::tempdir().unwrap();
    let names: Vec<String> = BUILTINS.iter().map(|s| s.to_string()).collect();
    let ro = Builtins::new(d.path(), &names, true, None).unwrap();
    for t in [
        "list_files",
        "tree",
        "search_codebase",
        "git_status",
        "git_diff",
        "read_image",
    ] {
        assert!(ro.has(t), "{t}");
    }
    for t in ["patch", "run_command", "bash", "write_file"] {
        assert_eq!(
            err(&ro, t, json!({})).await,
            format!("{t}: tool is not available")
        );
    }
    let specs = all(d.path()).specs();
    assert_eq!(specs.len(), BUILTINS.len());
    for s in specs {
        assert_eq!(s.input_schema["type"], "object", "{}", s.name);
    }
}
