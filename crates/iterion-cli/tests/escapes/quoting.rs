//! Untrusted output rendered into host commands: a sandboxed node's output is attacker-controlled, and a
//! `sandbox: none` node that renders it into its `command:` runs on the host. Each `{{…}}` value must reach
//! the host command as exactly its bytes, whatever shell context the placeholder sits in, or the workflow is
//! refused before anything runs.

use std::path::Path;

use super::harness::{Hostile, engine_ready, node_output, refused_before_running, show};

/// Hostile values a sandboxed node emits; each aims a `touch` at the host's `outside/` directory.
fn hostile_values(out: &Path) -> Vec<(&'static str, String)> {
    let o = out.display();
    vec![
        ("subst", format!("$(touch {o}/pwned-subst)")),
        ("semi", format!("\"; touch {o}/pwned-semi; echo \"")),
        ("tick", format!("`touch {o}/pwned-tick`")),
        ("mixed", format!("'\"$(touch {o}/pwned-mixed)\"'")),
        ("bslash", format!("\\\"; touch {o}/pwned-bslash; #\\")),
        (
            "newline",
            format!("a\ntouch {o}/pwned-newline\n'\n\"\ntouch {o}/pwned-newline2"),
        ),
        (
            "dollar",
            format!("${{IFS}}$((1+1))${{x:-$(touch {o}/pwned-dollar)}}!é漢🙂"),
        ),
        ("sq", format!("'; touch {o}/pwned-sq; echo '")),
    ]
}

/// A tool node that prints `values` as one JSON object (inside the run's container). `${` is spelled `@{` in
/// the authored text and restored by `sed`, so that the environment expansion of tool commands leaves it alone.
fn emitter(values: &[(&str, String)]) -> String {
    let obj: serde_json::Map<String, serde_json::Value> = values
        .iter()
        .map(|(k, v)| ((*k).to_string(), serde_json::Value::String(v.clone())))
        .collect();
    let json = serde_json::Value::Object(obj).to_string().replace("${", "@{");
    assert!(!json.contains("{{"));
    format!(
        "tool a:\n  command: |\n    cat <<'ITERION_EOF' | sed \"s/@{{/$(printf '\\044'){{/g\"\n    {json}\n    ITERION_EOF\n\n"
    )
}

fn markers(out: &Path) -> Vec<String> {
    std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pwned"))
        .collect()
}

/// Node `a` runs in the container and emits hostile strings; host node `b` renders each of them inside double
/// quotes, inside `$(…)` nested in double quotes, inside single quotes and as a bare word, writing what it
/// received to a file. No marker appears on the host and every file holds the value byte for byte.
#[test]
fn sandboxed_output_reaches_a_host_command_as_inert_bytes_in_every_quoting_context() {
    if !engine_ready("escapes::quoting::contexts") {
        return;
    }
    let h = Hostile::new();
    let out = h.outside();
    let values = hostile_values(&out);
    let o = out.display();
    let mut b = String::from("tool b:\n  sandbox: none\n  command: |\n");
    for (k, _) in &values {
        b.push_str(&format!(
            "    printf '%s' \"{{{{outputs.a.{k}}}}}\" > {o}/dq-{k}\n\
             \x20   printf '%s' \"<$(printf '%s' {{{{outputs.a.{k}}}}})>\" > {o}/subst-{k}\n\
             \x20   printf '%s' 'x{{{{outputs.a.{k}}}}}y' > {o}/sq-{k}\n\
             \x20   printf '%s' {{{{outputs.a.{k}}}}} > {o}/word-{k}\n\
             \x20   printf '%s' \"$(printf '%s' \"{{{{outputs.a.{k}}}}}\")\" > {o}/nested-{k}\n"
        ));
    }
    b.push_str("    echo '{\"ok\": true}'\n\n");
    let wf = format!(
        "{}{b}workflow w:\n  entry: a\n  sandbox: auto\n  a -> b\n  b -> done\n",
        emitter(&values)
    );
    let run = h.run_workflow("wf.bot", &wf);
    assert_eq!(
        markers(&out),
        Vec::<String>::new(),
        "commands ran on the host\n{}",
        show(&run)
    );
    assert!(run.status.success(), "{}", show(&run));
    let ids = h.run_ids();
    assert_eq!(
        node_output(&h.events(&ids[0]), "b"),
        &serde_json::json!({"ok": true})
    );
    for (k, v) in &values {
        let read = |name: &str| std::fs::read(out.join(name)).unwrap_or_default();
        assert_eq!(read(&format!("dq-{k}")), v.as_bytes(), "double quotes, {k}");
        assert_eq!(
            read(&format!("subst-{k}")),
            format!("<{v}>").as_bytes(),
            "$(…) in double quotes, {k}"
        );
        assert_eq!(
            read(&format!("sq-{k}")),
            format!("x{v}y").as_bytes(),
            "single quotes, {k}"
        );
        assert_eq!(read(&format!("word-{k}")), v.as_bytes(), "bare word, {k}");
        // `$(…)` drops trailing newlines; none of the values ends with one
        assert_eq!(
            read(&format!("nested-{k}")),
            v.as_bytes(),
            "\"$(printf '%s' \"…\")\", {k}"
        );
    }
}

/// Where no quoting is safe (backticks, `${…}`, here-documents) the workflow is refused at compile time with
/// `C130`, by `validate` and by `run`, and nothing runs: no marker, no run.
#[test]
fn a_placeholder_where_no_quoting_is_safe_is_refused_before_anything_runs() {
    if !engine_ready("escapes::quoting::refused") {
        return;
    }
    let h = Hostile::new();
    let out = h.outside();
    let values = hostile_values(&out);
    let o = out.display();
    for (i, cmd) in [
        "echo `echo {{outputs.a.tick}}`".to_string(),
        "echo \"`echo {{outputs.a.subst}}`\"".to_string(),
        "echo ${NOPE:-{{outputs.a.subst}}}".to_string(),
        "cat <<EOF\n    {{outputs.a.newline}}\n    EOF".to_string(),
        "echo $(( {{outputs.a.dollar}} ))".to_string(),
        format!("echo hi > {o}/x # {{{{outputs.a.newline}}}}"),
    ]
    .iter()
    .enumerate()
    {
        let wf = format!(
            "{}tool b:\n  sandbox: none\n  command: |\n    {cmd}\n\nworkflow w:\n  entry: a\n  sandbox: auto\n  a -> b\n  b -> done\n",
            emitter(&values)
        );
        let name = format!("wf{i}.bot");
        refused_before_running(&h, &name, &wf, "C130", &format!("{name}:"), cmd);
    }
    assert_eq!(markers(&out), Vec::<String>::new());
    assert_eq!(
        h.run_ids(),
        Vec::<String>::new(),
        "a refused workflow leaves no run"
    );
}

/// `validate` shows the crossing from a sandboxed node's output into a host node's command (`C129`), and
/// stays silent when the host command reads only trusted values.
#[test]
fn validate_warns_when_sandboxed_output_reaches_a_host_command() {
    let h = Hostile::new();
    h.write(
        "cross.bot",
        "tool a:\n  command: \"echo '{}'\"\n\ntool b:\n  sandbox: none\n  command: \"echo {{outputs.a.x}}\"\n\nworkflow w:\n  entry: a\n  sandbox: auto\n  a -> b\n  b -> done\n",
    );
    let v = h.iterion(&["validate", "cross.bot"]);
    let text = show(&v);
    assert!(v.status.success(), "{text}");
    assert!(text.contains("cross.bot:6:"), "{text}");
    assert!(text.contains("warning[C129]"), "{text}");
    h.write(
        "trusted.bot",
        "tool b:\n  sandbox: none\n  command: \"echo {{run.id}}\"\n\nworkflow w:\n  entry: b\n  sandbox: auto\n  b -> done\n",
    );
    let v = h.iterion(&["validate", "trusted.bot"]);
    assert!(!show(&v).contains("C129"), "{}", show(&v));
}

/// Line continuations are removed before the shell reads anything else, so `"$\⏎(…)"` is a command
/// substitution, not a quoted `$`: a value placed in it is quoted as the plain word it is, reaches the host
/// command byte for byte and runs nothing. Where a continuation makes a placeholder land in a comment
/// (`echo a \⏎# …`), in a here-document whose line ending in `\` hides the delimiter, or after a `case`
/// split by one, the workflow is refused with `C130` and nothing runs.
#[test]
fn line_continuations_are_read_as_the_shell_reads_them() {
    if !engine_ready("escapes::quoting::continuations") {
        return;
    }
    let h = Hostile::new();
    let out = h.outside();
    let values = hostile_values(&out);
    let o = out.display();
    let wf = format!(
        "{}tool b:\n  sandbox: none\n  command: |\n    printf '%s' \"$\\\n    (printf '%s' {{{{outputs.a.semi}}}})\" > {o}/cont-semi\n    printf '%s' \"$\\\n    (printf '%s' {{{{outputs.a.subst}}}})\" > {o}/cont-subst\n    echo '{{\"ok\": true}}'\n\nworkflow w:\n  entry: a\n  sandbox: auto\n  a -> b\n  b -> done\n",
        emitter(&values)
    );
    let run = h.run_workflow("wf.bot", &wf);
    assert_eq!(markers(&out), Vec::<String>::new(), "{}", show(&run));
    assert!(run.status.success(), "{}", show(&run));
    let get = |k: &str| {
        values
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    for k in ["semi", "subst"] {
        let got = std::fs::read_to_string(out.join(format!("cont-{k}"))).unwrap_or_default();
        assert_eq!(got, get(k), "{k}");
    }
    for (i, cmd) in [
        format!("echo hi > {o}/x \\\n    # {{{{outputs.a.newline}}}}"),
        "cat <<E\n    foo\\\n    E\n    {{outputs.a.subst}}\n    E".to_string(),
        "x=$(ca\\\n    se a in a) echo {{outputs.a.subst}};; esac)".to_string(),
    ]
    .iter()
    .enumerate()
    {
        let wf = format!(
            "{}tool b:\n  sandbox: none\n  command: |\n    {cmd}\n\nworkflow w:\n  entry: a\n  sandbox: auto\n  a -> b\n  b -> done\n",
            emitter(&values)
        );
        let name = format!("cont{i}.bot");
        h.write(&name, &wf);
        let v = h.iterion(&["validate", &name]);
        assert!(show(&v).contains("error[C130]"), "{cmd}: {}", show(&v));
        let run = h.iterion(&["run", &name, "--json"]);
        assert!(!run.status.success(), "{cmd}: {}", show(&run));
    }
    assert_eq!(markers(&out), Vec::<String>::new());
    assert_eq!(h.run_ids().len(), 1, "only the first workflow ran");
}
