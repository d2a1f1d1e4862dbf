use super::*;
use serde_json::json;

fn all(dir: &Path, readonly: bool) -> Builtins {
    let names: Vec<String> = BUILTINS.iter().map(|s| s.to_string()).collect();
    Builtins::new(dir, &names, readonly, None).unwrap()
}

#[tokio::test]
async fn write_read_edit_relative_to_work_dir() {
    let d = tempfile::tempdir().unwrap();
    let b = all(d.path(), false);
    b.run(
        "write_file",
        &json!({"path": "sub/a.txt", "content": "one\ntwo\ntwo\nthree\n"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(d.path().join("sub/a.txt")).unwrap(),
        "one\ntwo\ntwo\nthree\n"
    );
    assert_eq!(
        b.run("read_file", &json!({"path": "sub/a.txt"})).await.unwrap(),
        "one\ntwo\ntwo\nthree\n"
    );
    assert_eq!(
        b.run(
            "read_file",
            &json!({"path": "sub/a.txt", "offset": 1, "limit": 2})
        )
        .await
        .unwrap(),
        "two\ntwo\n"
    );
    let e = b
        .run(
            "file_edit",
            &json!({"path": "sub/a.txt", "old_string": "two", "new_string": "2"}),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("occurs 2 times"), "{e}");
    b.run(
        "file_edit",
        &json!({"path": "sub/a.txt", "old_string": "two", "new_string": "2", "replace_all": true}),
    )
    .await
    .unwrap();
    b.run(
        "file_edit",
        &json!({"path": d.path().join("sub/a.txt"), "old_string": "one", "new_string": "1"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(d.path().join("sub/a.txt")).unwrap(),
        "1\n2\n2\nthree\n"
    );
    let e = b
        .run(
            "file_edit",
            &json!({"path": "sub/a.txt", "old_string": "zzz", "new_string": ""}),
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string().starts_with("file_edit: old_string not found"),
        "{e}"
    );
    assert!(b.run("read_file", &json!({"path": "missing"})).await.is_err());
    assert!(
        b.run("read_file", &json!({}))
            .await
            .unwrap_err()
            .to_string()
            .contains("missing string argument 'path'")
    );
}

#[tokio::test]
async fn bash_runs_in_work_dir_with_exit_code_and_timeout() {
    let d = tempfile::tempdir().unwrap();
    let b = all(d.path(), false);
    let out: Value = serde_json::from_str(
        &b.run("bash", &json!({"command": "pwd; echo err >&2; exit 3"}))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        out["stdout"].as_str().unwrap().trim(),
        d.path().canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(out["stderr"], json!("err\n"));
    assert_eq!(out["exit_code"], json!(3));
    let e = b
        .run("bash", &json!({"command": "sleep 5", "timeout_ms": 100}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("timed out after 100 ms"), "{e}");
    let big: Value = serde_json::from_str(
        &b.run(
            "bash",
            &json!({"command": "head -c 300000 /dev/zero | tr '\\0' x"}),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    assert!(big["stdout"].as_str().unwrap().ends_with("bytes shown]"));
    assert!(big["stdout"].as_str().unwrap().len() < OUTPUT_CAP);
}

#[tokio::test]
async fn glob_and_grep() {
    let d = tempfile::tempdir().unwrap();
    let b = all(d.path(), true);
    std::fs::create_dir_all(d.path().join("src/x")).unwrap();
    std::fs::create_dir_all(d.path().join(".git")).unwrap();
    std::fs::write(d.path().join("src/a.rs"), "fn main() {}\n// TODO one\n").unwrap();
    std::fs::write(d.path().join("src/x/b.rs"), "// TODO two\n").unwrap();
    std::fs::write(d.path().join("notes.md"), "TODO three\n").unwrap();
    std::fs::write(d.path().join(".git/c.rs"), "TODO hidden\n").unwrap();
    assert_eq!(
        b.run("glob", &json!({"pattern": "**/*.rs"})).await.unwrap(),
        "src/a.rs\nsrc/x/b.rs"
    );
    assert_eq!(
        b.run("glob", &json!({"pattern": "*.none"})).await.unwrap(),
        "no files match"
    );
    assert_eq!(
        b.run("grep", &json!({"pattern": "TODO \\w+"})).await.unwrap(),
        "notes.md:1:TODO three\nsrc/a.rs:2:// TODO one\nsrc/x/b.rs:1:// TODO two"
    );
    assert_eq!(
        b.run("grep", &json!({"pattern": "TODO", "glob": "*.md"}))
            .await
            .unwrap(),
        "notes.md:1:TODO three"
    );
    assert_eq!(
        b.run("grep", &json!({"pattern": "TODO", "path": "src/x"}))
            .await
            .unwrap(),
        "src/x/b.rs:1:// TODO two"
    );
    assert!(b.run("grep", &json!({"pattern": "("})).await.is_err());
}

#[tokio::test]
async fn readonly_and_allow_list() {
    let d = tempfile::tempdir().unwrap();
    let ro = all(d.path(), true);
    assert_eq!(
        ro.specs().iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        READONLY
    );
    let e = ro
        .run("write_file", &json!({"path": "a", "content": "x"}))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "write_file: tool is not available");
    assert!(!d.path().join("a").exists());
    let some = Builtins::new(d.path(), &["grep".into(), "mcp.github.x".into()], false, None).unwrap();
    assert!(some.has("grep") && !some.has("bash") && !some.has("mcp.github.x"));
    let none = Builtins::new(d.path(), &[], false, None).unwrap();
    assert!(none.specs().is_empty());
}

#[test]
fn cap_keeps_char_boundaries() {
    let s = "é".repeat(OUTPUT_CAP);
    let c = cap(s);
    assert!(c.len() < OUTPUT_CAP + 64);
    assert!(c.ends_with("bytes shown]"));
}
