//! 01 §12.5 (devcontainer.json reading) and §7.1 location.

mod devc_common;

use std::path::Path;

use devc_common::{MAIN, ROOT, codes, load_bytes, summary};
use iterion_spec::devcontainer::{MemReader, locate};

/// `expect` is the mapped summary; `diags` the `CODE@line:col` list.
fn check(content: &str, expect: &str, diags: &[&str]) {
    check_bytes(content.as_bytes(), expect, diags);
}

fn check_bytes(content: &[u8], expect: &str, diags: &[&str]) {
    let out = load_bytes(content);
    assert_eq!(
        codes(&out),
        diags,
        "diagnostics of {:?}: {:#?}",
        String::from_utf8_lossy(content),
        out.diagnostics
    );
    assert_eq!(
        summary(&out.spec),
        expect,
        "summary of {:?}",
        String::from_utf8_lossy(content)
    );
}

#[test]
fn reading_vectors() {
    check(r#"{"image": "a"}"#, "image=a", &[]); // J1
    check_bytes(b"\xEF\xBB\xBF{\"image\":\"a\"}", "image=a", &[]); // J2
    check("{\"image\": \"a\", // c\n}", "image=a", &[]); // J3
    check(
        r#"{"image":"a","mounts": ["type=volume,source=v,target=/v", /* c */ ]}"#,
        "image=a mounts=[type=volume,source=v,target=/v]",
        &[],
    ); // J4
    check(r#"{"image": "reg//x"}"#, "image=reg//x", &[]); // J5
    check(r#"{"image": "a" /* open"#, "-", &["D001@1:15"]); // J6
    check(r#"{'image': 'a'}"#, "-", &["D001@1:2"]); // J7
    check("[1, 2]", "-", &["D001@1:1"]); // J8
    check(r#"{"image": 3}"#, "-", &["D002@1:11"]); // J9
    check(r#"{"image":"a","image":"b"}"#, "image=b", &["D014@1:14"]); // J10
    check("{\n/* two\nlines */ \"image\": 1}", "-", &["D002@3:19"]); // J11
    check(
        r#"{"dockerComposeFile": "c.yml", "service": "app"}"#,
        "-",
        &["D003@1:2"],
    ); // J12
}

#[test]
fn strict_json_elsewhere() {
    check(r#"{image: "a"}"#, "-", &["D001@1:2"]);
    check(r#"{"image": NaN}"#, "-", &["D001@1:11"]);
    check(r#"{"n": 0x10, "image": "a"}"#, "-", &["D001@1:8"]);
    check(r#"{"image": "a",,}"#, "-", &["D001@1:15"]);
    check(r#"{"image": "a"} x"#, "-", &["D001@1:16"]);
    check(r#"{"image": "a\q"}"#, "-", &["D001@1:13"]);
    check("{\"image\": \"a\nb\"}", "-", &["D001@1:13"]);
    check(r#"{"image": "r//x/*y", "n": "/* no */"}"#, "image=r//x/*y", &[]);
    check(r#"{"image": "\u00e9\ud83d\ude00"}"#, "image=é😀", &[]);
    check(
        r#"{"image": "a", "x": [1, [2, {"y": null}], /* c */ ], }"#,
        "image=a",
        &[],
    );
    check_bytes(b"{\"image\": \"\xff\"}", "-", &["D001@1:12"]);
    check("", "-", &["D001@1:1"]);
    check("// only\n", "-", &["D001@2:1"]);
}

#[test]
fn error_messages() {
    let out = load_bytes(br#"{"image": "a" /* open"#);
    assert_eq!(
        out.diagnostics[0].render(),
        ".devcontainer/devcontainer.json:1:15: error[D001]: invalid JSONC: unterminated block comment"
    );
    let out = load_bytes(br#"{"image": 3}"#);
    assert_eq!(out.diagnostics[0].message, "field 'image' must be a string");
    let out = load_bytes(br#"{"dockerComposeFile": "c.yml"}"#);
    assert!(
        out.diagnostics
            .iter()
            .any(|d| d.message == "compose-based devcontainer configurations are not supported")
    );
    let out = load_bytes(br#"{"image":"a","image":"b"}"#);
    assert_eq!(
        out.diagnostics[0].message,
        "duplicate key 'image' (the last value is used)"
    );
}

/// Which file `locate` picks and which diagnostics it reports.
fn check_locate(reader: MemReader, expect: Option<&str>, diags: &[&str]) {
    let (found, d) = locate(Path::new(ROOT), &reader);
    assert_eq!(found.as_ref().map(|l| l.rel_path.as_str()), expect);
    let got: Vec<String> = d.iter().map(|d| format!("{}:{}", d.code, d.file)).collect();
    assert_eq!(got, diags);
}

#[test]
fn location() {
    let both = MemReader::new()
        .with_file(MAIN, "{}")
        .with_file("/repo/proj/.devcontainer.json", "{}");
    check_locate(
        both,
        Some(".devcontainer/devcontainer.json"),
        &["D016:.devcontainer/devcontainer.json"],
    ); // M14
    let second = MemReader::new().with_file("/repo/proj/.devcontainer.json", "{}");
    check_locate(second, Some(".devcontainer.json"), &[]); // M15
    check_locate(MemReader::new(), None, &[]); // M15
    let sub = MemReader::new().with_file("/repo/proj/.devcontainer/go/devcontainer.json", "{}");
    check_locate(sub, None, &[]);
    let broken = MemReader::new().with_unreadable(MAIN, "permission denied");
    check_locate(broken, None, &["D015:.devcontainer/devcontainer.json"]);
}

#[test]
fn fixtures_directory() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/devcontainer");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("fixtures/devcontainer exists") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let bytes = std::fs::read(&path).expect("fixture readable");
        let out = load_bytes(&bytes);
        let errors = iterion_spec::diag::has_errors(&out.diagnostics);
        if name.starts_with("ok-") {
            assert!(!errors && out.spec.is_some(), "{name}: {:#?}", out.diagnostics);
        } else if name.starts_with("err-") {
            assert!(errors && out.spec.is_none(), "{name} should fail");
        } else {
            continue;
        }
        insta::assert_snapshot!(
            format!("devc_fixture_{}", name.replace('.', "_")),
            format!(
                "{}\n{}",
                summary(&out.spec),
                out.diagnostics
                    .iter()
                    .map(|d| d.render())
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        );
        seen += 1;
    }
    assert!(seen >= 3, "expected fixtures in {}", dir.display());
}
