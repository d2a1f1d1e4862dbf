//! `iterion help environment` lists every `ITERION_*` variable the code names outside its tests.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Read by the test suites or set by the Kubernetes deployment's downward API; not for users.
const INTERNAL: &[&str] = &[
    "ITERION_REQUIRE_DOCKER",
    "ITERION_REQUIRE_PODMAN",
    "ITERION_TEST_BUSYBOX",
    "ITERION_POD_IP",
    "ITERION_POD_IPS",
    "ITERION_POD_NAME",
    "ITERION_POD_UID",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `ITERION_*` string literals of the non-test code: every `src/` file of every crate but the test-support
/// one, up to its first `#[cfg(test)]`, without files named `tests.rs`.
fn named_in_code() -> BTreeSet<String> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for c in std::fs::read_dir(&crates).unwrap().flatten() {
        let src = c.path().join("src");
        if src.is_dir() && !c.path().ends_with("iterion-test-support") {
            rust_files(&src, &mut files);
        }
    }
    let mut names = BTreeSet::new();
    for f in files {
        if f.file_name()
            .is_some_and(|n| n == "tests.rs" || n.to_string_lossy().ends_with("_tests.rs"))
        {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, _) in code.match_indices("\"ITERION_") {
            let rest = &code[i + 1..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if rest[name.len()..].starts_with('"') && name.len() > "ITERION_".len() {
                names.insert(name);
            }
        }
    }
    names
}

#[test]
fn help_environment_lists_every_variable_the_code_names() {
    let o = Command::new(env!("CARGO_BIN_EXE_iterion"))
        .args(["help", "environment"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.starts_with("Environment variables iterion reads"), "{text}");
    let listed: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter_map(|l| l.split_whitespace().next())
        .map(|n| n.trim_end_matches(',').to_owned())
        .collect();
    let named = named_in_code();
    assert!(named.len() > 20, "only {} names found: {named:?}", named.len());
    let missing: Vec<&String> = named
        .iter()
        .filter(|n| !listed.contains(*n) && !INTERNAL.contains(&n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "`iterion help environment` does not list {missing:?}"
    );
    for (name, default) in [
        ("ITERION_SANDBOX_PULL_TIMEOUT", "10m"),
        ("ITERION_HOME", "~/.iterion"),
    ] {
        let at = text
            .find(&format!("  {name} "))
            .unwrap_or_else(|| panic!("{name} missing"));
        let next = text[at..].lines().nth(1).unwrap_or_default();
        assert!(next.contains(&format!("default: {default}")), "{name}: {next}");
    }
}
