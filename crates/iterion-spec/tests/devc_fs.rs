//! `FsReader` against a real directory: regular files only and symlinked paths.

use std::collections::BTreeMap;

use iterion_spec::devcontainer::{FileRead, FsReader, LoadContext, SourceReader, load, locate};

#[test]
fn reads_regular_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // A directory named like the second candidate is not a file.
    std::fs::create_dir(root.join(".devcontainer.json")).unwrap();
    assert_eq!(
        FsReader.read(&root.join(".devcontainer.json")),
        FileRead::NotRegular("a directory")
    );
    assert_eq!(FsReader.read(&root.join("missing.json")), FileRead::NotFound);
    let (found, diags) = locate(root, &FsReader);
    assert!(found.is_none() && diags.is_empty());

    std::fs::create_dir(root.join(".devcontainer")).unwrap();
    std::fs::write(root.join(".devcontainer/devcontainer.json"), br#"{"image": "a"}"#).unwrap();
    let (found, diags) = locate(root, &FsReader);
    assert_eq!(found.unwrap().rel_path, ".devcontainer/devcontainer.json");
    assert!(diags.is_empty(), "{diags:?}");
}

#[cfg(unix)]
#[test]
fn symlinked_build_context_outside_the_repository_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join(".devcontainer")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join(".devcontainer/ctx")).unwrap();
    std::fs::write(
        root.join(".devcontainer/devcontainer.json"),
        br#"{"build": {"dockerfile": "Dockerfile", "context": "ctx"}}"#,
    )
    .unwrap();
    let env = BTreeMap::new();
    let ws = root.to_string_lossy().into_owned();
    let out = load(&LoadContext {
        repo_root: &root,
        env: &env,
        host_workspace: &ws,
        reader: &FsReader,
    });
    let codes: Vec<&str> = out.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["D011"]);
    assert!(out.spec.is_none());
}
