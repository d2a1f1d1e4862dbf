//! Misspelt property names and edge targets get a "did you mean" hint.

fn hint_of(src: &str, code: &str) -> Option<String> {
    let checked = iterion_spec::check(src, "t.bot");
    checked
        .diagnostics
        .iter()
        .find(|d| d.code == code)
        .unwrap_or_else(|| panic!("no {code} in {:#?}", checked.diagnostics))
        .hint
        .clone()
}

#[test]
fn a_misspelt_property_suggests_the_keyword() {
    let src = "tool t:\n  command: `true`\n\nworkflow w:\n  entry: t\n  sandbx: auto\n  t -> done\n";
    assert_eq!(hint_of(src, "E012").as_deref(), Some("did you mean 'sandbox'?"));
    let src = "tool t:\n  commnd: `true`\n\nworkflow w:\n  entry: t\n  t -> done\n";
    assert_eq!(hint_of(src, "E012").as_deref(), Some("did you mean 'command'?"));
}

#[test]
fn a_misspelt_edge_target_suggests_the_node() {
    let src = "tool build:\n  command: `true`\n\ntool test:\n  command: `true`\n\nworkflow w:\n  entry: build\n  build -> tset\n  test -> don\n";
    let checked = iterion_spec::check(src, "t.bot");
    let hints: Vec<_> = checked
        .diagnostics
        .iter()
        .filter(|d| d.code == "C001")
        .map(|d| d.hint.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        hints,
        ["did you mean 'test'?", "did you mean 'done'?"],
        "{:#?}",
        checked.diagnostics
    );
    let src = "tool build:\n  command: `true`\n\nworkflow w:\n  entry: build\n  build -> zzzzzz\n";
    assert_eq!(hint_of(src, "C001"), None);
}
