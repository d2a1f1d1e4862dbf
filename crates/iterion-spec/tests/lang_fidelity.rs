//! Fidelity with the reference validator: every probe under `fixtures/fidelity/` must get the reference's
//! verdict and error codes (`fixtures/fidelity/expected.tsv`). Warnings must match too, except for the
//! differences the table allows (each with its reason).
//!
//! A probe is checked the way `iterion validate` checks a file: compile, then the project-level MCP server
//! check with the `.mcp.json` found next to the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use iterion_spec::diag::Severity;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/fidelity")
}

/// One row of `expected.tsv`.
struct Expect {
    probe: String,
    ok: bool,
    errors: BTreeMap<String, usize>,
    warnings: BTreeMap<String, usize>,
    /// `+CODE` may be added, `-CODE` may be missing (warnings only)
    allowed: Vec<(char, String)>,
}

/// `C031*3 C032` → {C031: 3, C032: 1}; `mcp-prepare` is iterion's C025 from the project-level check.
fn codes(field: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    if field == "-" {
        return m;
    }
    for c in field.split_whitespace() {
        let (code, n) = match c.split_once('*') {
            Some((code, n)) => (code, n.parse().expect("count")),
            None => (c, 1),
        };
        let code = if code == "mcp-prepare" { "C025" } else { code };
        *m.entry(code.to_string()).or_insert(0) += n;
    }
    m
}

fn table() -> Vec<Expect> {
    let text = std::fs::read_to_string(dir().join("expected.tsv")).expect("expected.tsv");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("probe\t") && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 5, "expected.tsv row has 5 columns: {l}");
            assert!(matches!(f[1], "OK" | "INVALID"), "verdict of {}", f[0]);
            let allowed = match f[4] {
                "-" => Vec::new(),
                a => {
                    let code = a.split_whitespace().next().unwrap_or("");
                    let sign = code.chars().next().expect("sign");
                    assert!(sign == '+' || sign == '-', "allowed starts with + or -: {a}");
                    vec![(sign, code[1..].to_string())]
                }
            };
            Expect {
                probe: f[0].to_string(),
                ok: f[1] == "OK",
                errors: codes(f[2]),
                warnings: codes(f[3]),
                allowed,
            }
        })
        .collect()
}

fn count(diags: &[iterion_spec::diag::Diagnostic], sev: Severity) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for d in diags.iter().filter(|d| d.severity == sev) {
        *m.entry(d.code.to_string()).or_insert(0) += 1;
    }
    m
}

fn show(m: &BTreeMap<String, usize>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(c, n)| if *n == 1 { c.clone() } else { format!("{c}*{n}") })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What differs between the probe's diagnostics and the reference's, or `None` when they agree.
fn check(path: &Path, expect: &Expect) -> Option<String> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let mcp_json = path
        .parent()
        .map(|p| p.join(".mcp.json"))
        .and_then(|p| std::fs::read_to_string(p).ok());
    let checked = iterion_spec::check_project(&bytes, &name, mcp_json.as_deref());
    let errors = count(&checked.diagnostics, Severity::Error);
    let mut warnings = count(&checked.diagnostics, Severity::Warning);
    for (sign, code) in &expect.allowed {
        match sign {
            '+' => {
                warnings.remove(code);
            }
            _ => {
                if !warnings.contains_key(code) {
                    warnings.insert(code.clone(), expect.warnings.get(code).copied().unwrap_or(1));
                }
            }
        }
    }
    let ok = !checked.has_errors();
    if ok == expect.ok && errors == expect.errors && warnings == expect.warnings {
        return None;
    }
    let rendered: Vec<String> = checked.diagnostics.iter().map(|d| d.render_header()).collect();
    Some(format!(
        "{}: want {} errors [{}] warnings [{}]; got {} errors [{}] warnings [{}]\n    {}",
        expect.probe,
        if expect.ok { "OK" } else { "INVALID" },
        show(&expect.errors),
        show(&expect.warnings),
        if ok { "OK" } else { "INVALID" },
        show(&errors),
        show(&warnings),
        rendered.join("\n    ")
    ))
}

#[test]
fn every_probe_gets_the_reference_verdict_and_codes() {
    let rows = table();
    // every probe file has a row, and every row a file
    let mut files: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(dir()).expect("fixtures/fidelity") {
        let p = entry.expect("entry").path();
        if p.is_dir() {
            for sub in std::fs::read_dir(&p).expect("probe dir") {
                let s = sub.expect("entry").path();
                if s.extension().is_some_and(|e| e == "bot") {
                    let stem = s.file_stem().unwrap().to_string_lossy().to_string();
                    let d = p.file_name().unwrap().to_string_lossy().to_string();
                    files.push(format!("{d}/{stem}"));
                }
            }
        } else if p.extension().is_some_and(|e| e == "bot") {
            files.push(p.file_stem().unwrap().to_string_lossy().to_string());
        }
    }
    files.sort();
    let mut listed: Vec<String> = rows.iter().map(|r| r.probe.clone()).collect();
    listed.sort();
    assert_eq!(files, listed, "probe files and expected.tsv rows");
    assert_eq!(rows.len(), 47, "the probe set");

    let failures: Vec<String> = rows
        .iter()
        .filter_map(|r| check(&dir().join(format!("{}.bot", r.probe)), r))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} probes differ from the reference:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}
