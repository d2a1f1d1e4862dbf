//! Every workflow under `fixtures/spec/`: `ok-*` files must compile without errors, `err-*` files must
//! report at least one error. The rendered diagnostics, the `iterion validate` summary and the syntax tree
//! (as JSON) are snapshotted per file.

use std::path::PathBuf;

fn fixtures() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/spec");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "bot"))
        .collect();
    v.sort();
    v
}

fn report(name: &str, bytes: &[u8]) -> String {
    let c = iterion_spec::check_bytes(bytes, name);
    let mut out = String::from("== diagnostics ==\n");
    for d in &c.diagnostics {
        out.push_str(&d.render());
        out.push('\n');
    }
    out.push_str("== workflows ==\n");
    for w in &c.workflows {
        out.push_str(&serde_json::to_string_pretty(&w.summary()).expect("summary json"));
        out.push('\n');
    }
    out.push_str("== ast ==\n");
    let (ast, _) = iterion_spec::parser::parse_bytes(bytes, name);
    out.push_str(&serde_json::to_string_pretty(&ast).expect("ast json"));
    out.push('\n');
    out
}

#[test]
fn fixtures_compile_as_expected_and_match_snapshots() {
    let files = fixtures();
    assert!(
        files.len() >= 24,
        "expected the fixture set, found {}",
        files.len()
    );
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let bytes = std::fs::read(&path).expect("fixture bytes");
        let c = iterion_spec::check_bytes(&bytes, &name);
        if name.starts_with("ok-") {
            assert!(
                !c.has_errors(),
                "{name} has errors:\n{}",
                c.diagnostics
                    .iter()
                    .map(|d| d.render())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            assert_eq!(c.workflows.len(), 1, "{name} compiles to one workflow");
        } else {
            assert!(c.has_errors(), "{name} should report an error");
        }
        let stem = name.trim_end_matches(".bot").to_string();
        insta::assert_snapshot!(stem, report(&name, &bytes));
    }
}
