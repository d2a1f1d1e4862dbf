//! Host scripts: a `sandbox: none` node's `script:` runs on the host, after sandboxed nodes have written what
//! they like into the workspace and produced the values it reads. The interpreter must find nothing a sandbox
//! planted (Python's `json.py` beside the script or in the working directory), and no value may run as code.

use super::harness::{Hostile, engine_ready, node_output, refused_before_running, show};

/// Node `plant` (in the container) writes a `json.py` and a `sitecustomize.py` into the workspace, each
/// dropping a marker outside when imported; host node `use` runs a Python script that imports `json`, with the
/// workspace as its working directory. No marker appears and the
/// standard library's `json` answers.
#[test]
fn a_module_a_sandbox_plants_in_the_workspace_is_never_imported_by_a_host_script() {
    if !engine_ready("escapes::scripts::planted_module") {
        return;
    }
    let h = Hostile::new();
    let out = h.outside();
    let m = out.join("pwned-json");
    let s = out.join("pwned-site");
    let wf = format!(
        "tool plant:\n  command: |\n    printf 'open(\"{m}\", \"w\").close()\\nPLANTED = True\\n' > json.py\n    printf 'open(\"{s}\", \"w\").close()\\n' > sitecustomize.py\n    echo '{{\"planted\": true}}'\n\n\
         tool use:\n  sandbox: none\n  language: py\n  script: |\n    import json, os\n    print(json.dumps({{\"planted\": hasattr(json, \"PLANTED\"), \"cwd\": os.getcwd()}}))\n\n\
         workflow w:\n  entry: plant\n  sandbox: auto\n  plant -> use\n  use -> done\n",
        m = m.display(),
        s = s.display()
    );
    let run = h.run_workflow("wf.bot", &wf);
    assert!(!m.exists(), "the planted json.py ran on the host\n{}", show(&run));
    assert!(!s.exists(), "the planted sitecustomize.py ran on the host");
    assert!(run.status.success(), "{}", show(&run));
    let ids = h.run_ids();
    let events = h.events(&ids[0]);
    let used = node_output(&events, "use");
    assert_eq!(used["planted"], false, "{used}");
    assert!(
        h.repo().join("json.py").exists(),
        "the module was planted in the workspace the host script ran in"
    );
}

/// Hostile strings a sandboxed node emits, each aimed at one way a JSON literal spliced into a script's source
/// broke out of the author's literal: the literal's own `"` closing a JavaScript `"…"`, `${…}` in a template
/// literal, U+2028 (a line terminator that ends a `//` comment), `*/`, a `'` closing a Python `'…'`; and a
/// newline for a Python comment.
fn hostile_values(out: &std::path::Path) -> Vec<(&'static str, String)> {
    let o = out.display();
    let js = |m: &str| format!("require('child_process').execSync('touch {o}/pwned-{m}')");
    vec![
        ("jsq", format!("+{}+", js("jsq"))),
        ("tick", format!("@{{{}}}", js("tick"))),
        ("ls", format!("\u{2028}{}//", js("ls"))),
        ("star", format!("*/{};/*", js("star"))),
        (
            "pyq",
            format!("'); __import__('os').system('touch {o}/pwned-pyq'); print('"),
        ),
        (
            "nl",
            format!("x\n__import__('os').system('touch {o}/pwned-nl')\r\n#"),
        ),
    ]
}

/// A tool node (in the container) that prints `values` as one JSON object. `@{` stands for `${` in the values
/// (restored by `sed`, past the environment expansion of tool commands).
fn emitter(values: &[(&str, String)]) -> String {
    let obj: serde_json::Map<String, serde_json::Value> = values
        .iter()
        .map(|(k, v)| ((*k).to_string(), serde_json::Value::String(v.clone())))
        .collect();
    // U+2028 as its JSON escape: the workflow file's lines stay lines
    let json = serde_json::Value::Object(obj)
        .to_string()
        .replace('\u{2028}', "\\u2028");
    assert!(!json.contains("{{") && !json.contains("${"));
    format!(
        "tool a:\n  command: |\n    cat <<'ITERION_EOF' | sed \"s/@{{/$(printf '\\044'){{/g\"\n    {json}\n    ITERION_EOF\n\n"
    )
}

fn markers(out: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pwned"))
        .collect()
}

/// The same hostile strings used as expressions by a host JavaScript and a host Python script: each arrives as
/// exactly its text (the script writes it to a file outside) and nothing it spells runs.
#[test]
fn sandboxed_values_reach_a_host_script_as_data() {
    if !engine_ready("escapes::scripts::data") {
        return;
    }
    let h = Hostile::new();
    let out = h.outside();
    let values = hostile_values(&out);
    let o = out.display();
    let mut js = String::from(
        "tool js:\n  sandbox: none\n  language: js\n  script: |\n    const fs = require('fs');\n",
    );
    let mut py = String::from("tool py:\n  sandbox: none\n  language: py\n  script: |\n");
    for (k, _) in &values {
        js.push_str(&format!(
            "    fs.writeFileSync('{o}/js-{k}', {{{{outputs.a.{k}}}}});\n"
        ));
        py.push_str(&format!(
            "    open('{o}/py-{k}', 'w', encoding='utf-8', newline='').write({{{{outputs.a.{k}}}}})\n"
        ));
    }
    js.push_str("    console.log('{\"ok\": true}');\n\n");
    py.push_str("    print('{\"ok\": true}')\n\n");
    let wf = format!(
        "{}{js}{py}workflow w:\n  entry: a\n  sandbox: auto\n  a -> js\n  js -> py\n  py -> done\n",
        emitter(&values)
    );
    let run = h.run_workflow("wf.bot", &wf);
    assert_eq!(
        markers(&out),
        Vec::<String>::new(),
        "a value ran on the host\n{}",
        show(&run)
    );
    assert!(run.status.success(), "{}", show(&run));
    for (k, v) in &values {
        let v = v.replace("@{", "${");
        for lang in ["js", "py"] {
            let got = std::fs::read_to_string(out.join(format!("{lang}-{k}"))).unwrap_or_default();
            assert_eq!(got, v, "{lang}, {k}");
        }
    }
}

/// A placeholder inside a string, a template literal's text or a comment of a host script is refused at
/// compile time (`C131`, positioned), by `validate` and by `run`, and nothing runs: no marker, no run. The
/// four JavaScript forms and the first Python form ran their value on the host when values were spliced as
/// JSON literals; the others are refused all the same (a placeholder there is never an expression).
#[test]
fn a_script_placeholder_inside_a_literal_or_a_comment_is_refused_before_anything_runs() {
    if !engine_ready("escapes::scripts::refused") {
        return;
    }
    let h = Hostile::new();
    let out = h.outside();
    let values = hostile_values(&out);
    for (i, (lang, body)) in [
        ("js", "console.log(\"{{outputs.a.jsq}}\")"),
        ("js", "console.log(`got {{outputs.a.tick}}`)"),
        ("js", "// {{outputs.a.ls}}\n    console.log('{}')"),
        ("js", "/* {{outputs.a.star}} */ console.log('{}')"),
        ("py", "print('{{outputs.a.pyq}}')"),
        ("py", "print(\"\"\"{{outputs.a.pyq}}\"\"\")"),
        ("py", "print(f'{ {{outputs.a.pyq}} }')"),
        ("py", "# {{outputs.a.nl}}\n    print('{}')"),
    ]
    .iter()
    .enumerate()
    {
        let wf = format!(
            "{}tool b:\n  sandbox: none\n  language: {lang}\n  script: |\n    {body}\n\nworkflow w:\n  entry: a\n  sandbox: auto\n  a -> b\n  b -> done\n",
            emitter(&values)
        );
        let name = format!("wf{i}.bot");
        refused_before_running(&h, &name, &wf, "C131", &format!("{name}:11:"), body);
    }
    assert_eq!(markers(&out), Vec::<String>::new());
    assert_eq!(
        h.run_ids(),
        Vec::<String>::new(),
        "a refused workflow leaves no run"
    );
}
