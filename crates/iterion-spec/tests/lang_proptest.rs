//! `check` (lex + parse + compile) never panics: on arbitrary text, on token soup shaped like the language,
//! and on arbitrary mutations of the fixture workflows. Every diagnostic it returns has a position.

use proptest::prelude::*;

fn fixtures() -> Vec<Vec<u8>> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/spec");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .expect("fixtures/spec")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "bot"))
        .collect();
    v.sort();
    v.into_iter()
        .map(|p| std::fs::read(p).expect("fixture"))
        .collect()
}

/// Runs every phase, including compile on the tree even when parsing reported errors.
fn run_all(bytes: &[u8]) {
    let c = iterion_spec::check_bytes(bytes, "p.bot");
    let (ast, _) = iterion_spec::parser::parse_bytes(bytes, "p.bot");
    let (_, d) = iterion_spec::compile(ast, "p.bot");
    for diag in c.diagnostics.iter().chain(d.iter()) {
        assert!(diag.line >= 1 && diag.col >= 1, "{diag:?}");
    }
    if let Ok(s) = std::str::from_utf8(bytes) {
        let l = iterion_spec::lex(s, "p.bot");
        for t in &l.tokens {
            let _ = l.text(t);
        }
    }
}

const SNIPPETS: &[&str] = &[
    "agent ",
    "judge ",
    "router ",
    "human ",
    "tool ",
    "compute ",
    "workflow ",
    "prompt ",
    "schema ",
    "cursor ",
    "vars:",
    "presets:",
    "attachments:",
    "mcp_server ",
    "sandbox:",
    "network:",
    "build:",
    "env:",
    "mounts:",
    "mode:",
    "image:",
    "rules:",
    "entry:",
    "a",
    "b",
    "done",
    "fail",
    ":",
    "->",
    " when ",
    " not ",
    " as l(",
    ")",
    " with {",
    "}",
    "[",
    "]",
    ",",
    ".",
    "*",
    "=",
    "|",
    "\"",
    "`",
    "##",
    "#",
    "\n",
    "  ",
    "    ",
    "\t",
    "\r",
    "{{",
    "}}",
    "${",
    "-",
    "1",
    "2.5",
    "true",
    "string[]",
    "é",
    "\u{feff}",
    "\"x\"",
    "`y`",
    "{{outputs.a.x}}",
    "{{vars.v}}",
    "\"**.x.com\"",
    "auto",
    "none",
    "inline",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(s in any::<String>()) {
        run_all(s.as_bytes());
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..400)) {
        run_all(&b);
    }

    #[test]
    fn token_soup_never_panics(parts in proptest::collection::vec(0..SNIPPETS.len(), 0..300)) {
        let s: String = parts.into_iter().map(|i| SNIPPETS[i]).collect();
        run_all(s.as_bytes());
    }

    #[test]
    fn fixture_mutations_never_panic(
        which in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..5, 0..SNIPPETS.len(), 0usize..40), 1..8),
    ) {
        let all = fixtures();
        let mut b = all[which.index(all.len())].clone();
        for (at, op, snip, len) in edits {
            let pos = at.index(b.len() + 1);
            match op {
                // delete a range
                0 => {
                    let end = (pos + len).min(b.len());
                    b.drain(pos..end);
                }
                // insert a snippet
                1 => {
                    let s = SNIPPETS[snip].as_bytes();
                    b.splice(pos..pos, s.iter().copied());
                }
                // duplicate a range
                2 => {
                    let end = (pos + len).min(b.len());
                    let chunk: Vec<u8> = b[pos..end].to_vec();
                    b.splice(pos..pos, chunk);
                }
                // overwrite one byte
                3 => {
                    if pos < b.len() {
                        b[pos] = SNIPPETS[snip].as_bytes().first().copied().unwrap_or(b' ');
                    }
                }
                // truncate
                _ => b.truncate(pos),
            }
        }
        run_all(&b);
    }
}
