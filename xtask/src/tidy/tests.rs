use super::tree::{CrateTree, Source};
use super::{LIMIT, check};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An in-memory crate: `(path, text)` pairs, the root at `src/lib.rs`.
struct Mem(BTreeMap<PathBuf, String>);

impl Source for Mem {
    fn read(&self, path: &Path) -> Option<String> {
        self.0.get(path).cloned()
    }
}

fn tree(files: &[(&str, &str)]) -> CrateTree {
    let mem = Mem(files
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect());
    CrateTree::load("demo", Path::new("src/lib.rs"), &mem).expect("the crate loads")
}

/// The problems tidy reports for `files` held against `allow`.
fn problems(files: &[(&str, &str)], allow: &str) -> Vec<String> {
    check(&[tree(files)], allow)
        .expect("the allowlist parses")
        .problems
}

/// A function `name` of exactly `lines` lines, `fn` line and closing brace included.
fn fn_of(name: &str, lines: usize) -> String {
    let body = "    let _ = 1;\n".repeat(lines - 2);
    format!("fn {name}() {{\n{body}}}\n")
}

#[test]
fn a_function_over_the_limit_is_reported_with_its_place_and_length() {
    let lib = format!("use std::fmt;\n{}", fn_of("long", LIMIT + 1));
    assert_eq!(
        problems(&[("src/lib.rs", &lib)], ""),
        ["src/lib.rs:2 long: 151 lines (limit 150)"]
    );
}

#[test]
fn a_function_at_the_limit_passes_and_methods_and_trait_defaults_count() {
    let at_limit = fn_of("fits", LIMIT);
    let method = format!("struct S;\nimpl S {{\n{}}}\n", fn_of("method", LIMIT + 2));
    let default = format!("trait T {{\n{}}}\n", fn_of("provided", LIMIT + 3));
    let lib = format!("{at_limit}{method}{default}");
    let found = problems(&[("src/lib.rs", &lib)], "");
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains(" method: 152 lines"), "{found:?}");
    assert!(found[1].contains(" provided: 153 lines"), "{found:?}");
}

#[test]
fn test_code_is_not_measured_nor_read() {
    let long = fn_of("long", LIMIT + 10);
    let lib = format!(
        "#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod inline {{\n{long}}}\n#[test]\n{long}\n\
         #[cfg(all(test, unix))]\nmod unix_tests;\nstruct S;\nimpl S {{\n#[cfg(test)]\n{long}}}\n"
    );
    // `tests.rs` and `unix_tests.rs` do not exist: loading would fail if tidy followed them.
    assert_eq!(problems(&[("src/lib.rs", &lib)], ""), Vec::<String>::new());
}

#[test]
fn two_modules_naming_each_other_are_a_circle_with_one_witness_per_edge() {
    let files = [
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "use crate::b::Thing;\npub fn f() {}\n"),
        ("src/b.rs", "pub struct Thing;\nfn g() {\n    super::a::f();\n}\n"),
    ];
    assert_eq!(
        problems(&files, ""),
        [
            "cycle demo: a, b\n  module import circle; one place per edge:\n    \
          a -> b  src/a.rs:1\n    b -> a  src/b.rs:3"
        ]
    );
}

#[test]
fn paths_in_macros_and_nested_modules_are_edges_to_the_deepest_module_named() {
    let files = [
        ("src/lib.rs", "mod a;\nmod b;\n"),
        (
            "src/a.rs",
            "mod inner {\n    fn f() { println!(\"{}\", crate::b::c::X); }\n}\n",
        ),
        ("src/b/mod.rs", "mod c;\n"),
        ("src/b/c.rs", "pub const X: u8 = 1;\nuse crate::a::inner as _;\n"),
    ];
    assert_eq!(
        problems(&files, ""),
        [
            "cycle demo: a::inner, b::c\n  module import circle; one place per edge:\n    \
          a::inner -> b::c  src/a.rs:2\n    b::c -> a::inner  src/b/c.rs:2"
        ]
    );
}

#[test]
fn a_parent_using_its_child_is_no_circle() {
    let files = [
        ("src/lib.rs", "mod a;\npub struct Root;\n"),
        (
            "src/a.rs",
            "mod child;\nuse self::child::C;\npub struct P;\nfn f(_: child::C) {}\n",
        ),
        (
            "src/a/child.rs",
            "use super::P;\npub(super) struct C;\npub(crate) fn g(_: crate::Root) {}\n",
        ),
    ];
    assert_eq!(problems(&files, ""), Vec::<String>::new());
}

#[test]
fn test_modules_do_not_make_circles() {
    let files = [
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "use crate::b::Thing;\n"),
        (
            "src/b.rs",
            "pub struct Thing;\n#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n",
        ),
    ];
    assert_eq!(problems(&files, ""), Vec::<String>::new());
}

#[test]
fn an_allowlisted_violation_passes_and_a_stale_entry_is_a_problem() {
    let lib = format!("mod a;\n{}", fn_of("long", LIMIT + 1));
    let files = [("src/lib.rs", lib.as_str()), ("src/a.rs", "")];
    let allow = "# today\nlong-fn src/lib.rs::long\n\nlong-fn src/a.rs::gone\ncycle demo: a, b\n";
    assert_eq!(
        problems(&files, allow),
        [
            "xtask/tidy-allow.txt:4: `long-fn src/a.rs::gone` matches nothing any more; \
             remove it from tidy-allow.txt",
            "xtask/tidy-allow.txt:5: `cycle demo: a, b` matches nothing any more; \
             remove it from tidy-allow.txt",
        ]
    );
}

#[test]
fn a_malformed_or_repeated_allowlist_line_is_an_error() {
    let files = [("src/lib.rs", "")];
    let err = check(&[tree(&files)], "long fn x").expect_err("bad line");
    assert!(err.to_string().contains("tidy-allow.txt:1: expected"), "{err}");
    let err = check(&[tree(&files)], "cycle d: a, b\ncycle d: a, b\n").expect_err("repeat");
    assert!(
        err.to_string().contains(":2: `cycle d: a, b` repeats line 1"),
        "{err}"
    );
}

#[test]
fn a_missing_module_file_is_an_error_naming_both_candidates() {
    let mem = Mem([(PathBuf::from("src/lib.rs"), "mod gone;\n".to_string())].into());
    let err = CrateTree::load("demo", Path::new("src/lib.rs"), &mem).expect_err("missing");
    assert_eq!(
        err.to_string(),
        "src/lib.rs: `mod gone;` has neither src/gone.rs nor src/gone/mod.rs"
    );
}

#[test]
fn a_process_started_outside_the_boundary_crate_is_reported_wherever_it_is_named() {
    let lib = "mod a;\nmod b;\nuse std::process::{Command, Stdio};\n\
               fn f() { let _ = Command::new(\"git\"); }\n";
    let a = "fn g() -> tokio::process::Command { todo() }\n";
    let b = "use std::process as p;\nfn h() { let _ = p::Stdio::null(); }\n\
             fn i() { let _ = vec![std::process::Command::new(\"x\")]; }\n";
    let tests = "#[cfg(test)]\nmod t { fn j() { std::process::Command::new(\"true\"); } }\n";
    let lib = format!("{lib}{tests}");
    let files = [("src/lib.rs", lib.as_str()), ("src/a.rs", a), ("src/b.rs", b)];
    let p = problems(&files, "");
    assert_eq!(p.len(), 3, "{p:#?}");
    assert!(
        p[0].starts_with("src/lib.rs:3 `std::process::Command` starts a process directly"),
        "{}",
        p[0]
    );
    assert!(
        p[1].starts_with("src/a.rs:1 `tokio::process::Command`"),
        "{}",
        p[1]
    );
    assert!(p[2].starts_with("src/b.rs:3 `process::Command`"), "{}", p[2]);
    // allowlisted by file
    let allow = "spawn src/lib.rs\nspawn src/a.rs\nspawn src/b.rs\n";
    assert_eq!(problems(&files, allow), Vec::<String>::new());
}

#[test]
fn the_boundary_crate_may_start_processes() {
    let mem = Mem(BTreeMap::from([(
        PathBuf::from("src/lib.rs"),
        "fn f() { let _ = std::process::Command::new(\"git\"); }\n".to_string(),
    )]));
    let t = CrateTree::load("iterion-boundary", Path::new("src/lib.rs"), &mem).expect("loads");
    assert_eq!(check(&[t], "").expect("parses").problems, Vec::<String>::new());
}

fn runtime_tree(files: &[(&str, &str)]) -> CrateTree {
    let mem = Mem(files
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect());
    CrateTree::load("iterion-runtime", Path::new("src/lib.rs"), &mem).expect("the crate loads")
}

#[test]
fn direct_file_access_in_the_store_is_reported_and_elsewhere_and_in_tests_is_not() {
    let files = [
        ("src/lib.rs", "mod store;\nmod other;\n"),
        (
            "src/store/mod.rs",
            "mod run;\nuse std::fs::{self, File};\nfn f() { let _ = tokio::fs::read(\"x\"); }\n\
             #[cfg(test)]\nmod tests { fn t() { std::fs::read(\"x\").unwrap(); } }\n",
        ),
        (
            "src/store/run.rs",
            "use iterion_boundary::fs::Dir;\nuse std::os::unix::fs::PermissionsExt;\n\
             fn g() { let _ = nix::fcntl::open(\"x\", 0, 0); let _ = format!(\"{}\", std::fs::read(\"y\")); }\n",
        ),
        ("src/other.rs", "fn h() { let _ = std::fs::read(\"x\"); }\n"),
    ];
    let t = runtime_tree(&files);
    let p = check(&[t], "").expect("parses").problems;
    let got: Vec<&str> = p
        .iter()
        .map(|m| m.split(" opens").next().unwrap_or_default())
        .collect();
    assert_eq!(
        got,
        [
            "src/store/mod.rs:2 `std::fs::self`",
            "src/store/mod.rs:2 `std::fs::File`",
            "src/store/mod.rs:3 `tokio::fs::read`",
            "src/store/run.rs:3 `nix::fcntl::open`",
            "src/store/run.rs:3 `std::fs`",
        ],
        "{p:#?}"
    );
    // allowlisted by file
    let t = runtime_tree(&files);
    let allow = "store-fs src/store/mod.rs\nstore-fs src/store/run.rs\n";
    assert_eq!(check(&[t], allow).expect("parses").problems, Vec::<String>::new());
    // another crate's `store` module is not the run store
    let mem = Mem(BTreeMap::from([
        (PathBuf::from("src/lib.rs"), "mod store;\n".to_string()),
        (PathBuf::from("src/store.rs"), "use std::fs::File;\n".to_string()),
    ]));
    let t = CrateTree::load("iterion-cli", Path::new("src/lib.rs"), &mem).expect("loads");
    assert_eq!(check(&[t], "").expect("parses").problems, Vec::<String>::new());
}
