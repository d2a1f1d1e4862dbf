//! Tool command rendering against a real shell: a placeholder's value, whatever its bytes, reaches the command
//! as exactly those bytes in every quoting context the renderer accepts, and never runs anything.
//!
//! Each case renders a template with a hostile value, runs it with `sh -c` (and `bash -c` when bash is
//! installed, since the runtime prefers bash) in an empty directory, and checks stdout byte for byte and that
//! the directory is still empty (every attack fragment aims a `touch` at it).

use std::path::Path;
use std::process::Command;

use iterion_runtime::exec::render::{Scope, Unquotable, render_shell};
use proptest::prelude::*;
use serde_json::{Value, json};

/// `(template, expected stdout)` with `V` standing for the value.
const CONTEXTS: &[(&str, &str)] = &[
    ("printf '%s' {{input.v}}", "V"),
    ("printf '%s' {{input.v}}{{input.v}}", "VV"),
    ("printf '%s' --x={{input.v}}", "--x=V"),
    ("printf '%s' \"{{input.v}}\"", "V"),
    ("printf '%s' \"<{{input.v}}|{{input.v}}>\"", "<V|V>"),
    ("printf '%s' 'a{{input.v}}b'", "aVb"),
    ("printf '%s' 'a'{{input.v}}\"b\"", "aVb"),
    ("printf '%s' \"x$(printf '%s.' {{input.v}})y\"", "xV.y"),
    ("printf '%s' \"x$(printf '%s.' \"{{input.v}}\")y\"", "xV.y"),
    ("printf '%s' \"x$(printf '%s.' 'q{{input.v}}')y\"", "xqV.y"),
    ("printf '%s' $(printf '%s' x){{input.v}}", "xV"),
    ("printf '%s' \"$( (printf '%s.' {{input.v}}) )\"", "V."),
    ("printf '%s' \"${1:-d}{{input.v}}\"", "dV"),
    ("v={{input.v}}; printf '%s' \"$v\"", "V"),
    ("# a comment\nprintf '%s' {{input.v}}", "V"),
    ("cat <<EOF\nhere\nEOF\nprintf '%s' {{input.v}}", "here\nV"),
    ("printf '%s' \"$(cat <<'EOF'\nin\nEOF\n)\" {{input.v}}", "inV"),
];

fn shells() -> Vec<&'static str> {
    let mut s = vec!["sh"];
    if Command::new("bash")
        .arg("-c")
        .arg("true")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        s.push("bash");
    }
    s
}

fn run(shell: &str, cmd: &str, dir: &Path) -> Vec<u8> {
    let out = Command::new(shell)
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{shell} -c {cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn render(template: &str, input: &Value) -> Result<String, Unquotable> {
    let scope = Scope {
        input,
        ..Scope::empty()
    };
    render_shell(template, &scope).map(|r| r.text)
}

fn check_value(v: &str) {
    let dir = tempfile::tempdir().unwrap();
    let input = json!({ "v": v });
    for shell in shells() {
        for (template, expect) in CONTEXTS {
            let cmd = render(template, &input).unwrap_or_else(|e| panic!("{template:?}: {e}"));
            let got = run(shell, &cmd, dir.path());
            let want = expect.replace('V', v);
            assert_eq!(
                String::from_utf8_lossy(&got),
                want,
                "{shell}: template {template:?}, value {v:?}, rendered {cmd:?}"
            );
            assert_eq!(got, want.as_bytes());
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .collect();
            assert!(left.is_empty(), "{shell}: {cmd:?} created {left:?}");
        }
    }
}

/// Characters that mean something to a shell, plus plain and non-ASCII ones.
fn hostile_char() -> impl Strategy<Value = char> {
    prop_oneof![
        6 => prop::sample::select(vec![
            '\'', '"', '\\', '$', '`', '(', ')', '{', '}', ';', '&', '|', '<', '>', '\n', '\t', ' ', '#',
            '*', '?', '[', ']', '~', '!', '%', '=', '-', '^', ',',
        ]),
        2 => prop::char::range('a', 'z'),
        1 => prop::sample::select(vec!['é', '漢', '🙂', '\u{2028}', '\u{202e}', '\u{7f}', '\u{1b}', 'ß']),
    ]
}

/// Attack fragments that each create a file when they reach a shell unquoted.
fn fragment() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "$(touch pwned)",
        "`touch pwned`",
        "'; touch pwned; '",
        "\"; touch pwned; \"",
        "\\\"; touch pwned; #",
        "${x:-$(touch pwned)}",
        "\ntouch pwned\n",
        "'\"$(touch pwned)\"'",
        "\\'; touch pwned #",
        "$((1+1))",
        "EOF\ntouch pwned\n",
        "-n",
    ])
    .prop_map(str::to_string)
}

fn hostile_string() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::collection::vec(hostile_char(), 1..6).prop_map(|v| v.into_iter().collect::<String>()),
            1 => fragment(),
        ],
        0..8,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn a_hostile_string_reaches_the_command_byte_for_byte(v in hostile_string()) {
        check_value(&v);
    }

    /// A list is one word per item unquoted, and its items joined by a space inside quotes.
    #[test]
    fn a_hostile_list_keeps_one_argument_per_item(items in prop::collection::vec(hostile_string(), 0..4)) {
        let dir = tempfile::tempdir().unwrap();
        let input = json!({ "l": items });
        for shell in shells() {
            let cmd = render("printf '[%s]' {{input.l}}", &input).unwrap();
            let want = if items.is_empty() { "[]".to_string() } else { items.iter().map(|i| format!("[{i}]")).collect() };
            prop_assert_eq!(run(shell, &cmd, dir.path()), want.into_bytes(), "{}", cmd);
            let cmd = render("printf '%s' \"{{input.l}}\" '{{input.l}}'", &input).unwrap();
            prop_assert_eq!(run(shell, &cmd, dir.path()), items.join(" ").repeat(2).into_bytes(), "{}", cmd);
            prop_assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
        }
    }

    /// An object is its compact JSON text, in every context.
    #[test]
    fn a_hostile_object_is_its_json_text(k in hostile_string(), v in hostile_string()) {
        let dir = tempfile::tempdir().unwrap();
        let obj = json!({ k: v });
        let input = json!({ "o": obj });
        let text = serde_json::to_string(&obj).unwrap();
        for shell in shells() {
            for t in ["printf '%s' {{input.o}}", "printf '%s' \"{{input.o}}\"", "printf '%s' '{{input.o}}'"] {
                let cmd = render(t, &input).unwrap();
                prop_assert_eq!(run(shell, &cmd, dir.path()), text.clone().into_bytes(), "{}", cmd);
            }
            prop_assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
        }
    }
}

#[test]
fn the_fixed_attack_strings_are_inert() {
    for v in [
        "",
        "'",
        "\"",
        "\\",
        "\\\\",
        "$",
        "`",
        "$(touch pwned)",
        "`touch pwned`",
        "'\"$(touch pwned)\"'",
        "\\\"$(touch pwned)\\\"",
        "a\nb\n",
        "\n",
        "é漢🙂",
    ] {
        check_value(v);
    }
}

/// A raw placeholder or an environment value can open a quote; the placeholders after it are quoted for the
/// context the shell really is in.
#[test]
fn the_context_follows_the_text_the_shell_reads() {
    let input = json!({ "q": "\"", "v": "$(touch pwned)" });
    let cmd = render("printf '%s' {{!input.q}}{{input.v}}\"", &input).unwrap();
    assert_eq!(cmd, "printf '%s' \"\\$(touch pwned)\"");
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run("sh", &cmd, dir.path()), b"$(touch pwned)");
}

#[test]
fn refused_contexts_and_nul_bytes_are_errors() {
    let input = json!({ "v": "x", "nul": "a\u{0}b" });
    for t in [
        "echo `{{input.v}}`",
        "echo \"`{{input.v}}`\"",
        "echo ${X:-{{input.v}}}",
        "echo $(( {{input.v}} ))",
        "(( {{input.v}} ))",
        "cat <<EOF\n{{input.v}}\nEOF",
        "cat <<{{input.v}}",
        "echo # {{input.v}}",
        "echo \\{{input.v}}",
        "echo \"\\{{input.v}}\"",
        "echo ${{input.v}}",
        "echo $'{{input.v}}'",
        "x=$(case a in a) echo {{input.v}};; esac)",
        // the value of a raw placeholder moves the context into backticks
        "echo {{!input.tick}}{{input.v}}",
    ] {
        let input = json!({ "v": "x", "tick": "`" });
        match render(t, &input) {
            Err(Unquotable::Context { placeholder, .. }) => assert_eq!(placeholder, "{{input.v}}", "{t:?}"),
            other => panic!("{t:?}: {other:?}"),
        }
    }
    assert_eq!(
        render("echo {{input.nul}}", &input),
        Err(Unquotable::Nul {
            placeholder: "{{input.nul}}".into()
        })
    );
    // a missing value is still refused where no quoting is safe
    assert!(render("echo `{{input.nope}}`", &input).is_err());
    // and left verbatim elsewhere (compat)
    assert_eq!(
        render("echo \"{{input.nope}}\"", &input).unwrap(),
        "echo \"{{input.nope}}\""
    );
}

/// Pieces of shell text that carry line continuations and here-documents (every kind of delimiter, several
/// pending on one line, bodies with expansions and lines ending in `\`), around ordinary quoting.
fn continuation_piece() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "\\\n",
        "\\",
        "\n",
        "\t",
        " ",
        "cat <<E",
        "cat <<-E",
        "cat <<'E'",
        "cat <<\\E",
        "cat <<E <<'F'",
        "<<E",
        "E",
        "F",
        "\tE",
        "E\\\n",
        "x\\\n",
        "$(",
        "$\\\n(",
        ")",
        "${",
        "}",
        "`",
        "'",
        "\"",
        "#",
        "printf %s ",
        "ca\\\nt ",
        "ec\\\nho ",
        "x",
        // whole constructs where a continuation changes what follows
        "echo \"$\\\n(printf %s ",
        "echo a \\\n# ",
        "cat <<E\nfoo\\\nE\n",
        "cat <<-E\n\tfoo\\\n\tE\n",
        "cat <<'E'\nfoo\\\nE\n",
        "cat <\\\n<E\n",
        "cat <<E\n$(echo\nE\n)\n",
    ])
}

/// A template of continuation pieces with placeholders between them.
fn continuation_template() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![4 => continuation_piece().prop_map(str::to_string), 1 => Just("{{input.v}}".to_string())],
        1..16,
    )
    .prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Differential check against the real shells: whatever continuations and here-documents surround a
    /// placeholder, either the renderer refuses it or `sh` and `bash` running the rendered command never run
    /// what the value spells (no file appears in the empty working directory).
    #[test]
    fn continuations_and_here_documents_never_let_a_value_run(
        template in continuation_template(),
        v in prop::sample::select(vec![
            "$(touch pwned-subst)",
            "`touch pwned-tick`",
            "'; touch pwned-sq; '",
            "\"; touch pwned-dq; \"",
            "\ntouch pwned-nl\n",
            "E\ntouch pwned-eof\nE\n",
            "\\\ntouch pwned-cont\n",
        ]),
    ) {
        let input = json!({ "v": v });
        let Ok(cmd) = render(&template, &input) else {
            return Ok(());
        };
        let dir = tempfile::tempdir().unwrap();
        for shell in shells() {
            // the generated text may well be a syntax error: only what it runs matters
            let _ = Command::new(shell)
                .arg("-c")
                .arg(&cmd)
                .current_dir(dir.path())
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .output()
                .unwrap();
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .collect();
            prop_assert!(left.is_empty(), "{}: {:?} rendered {:?} created {:?}", shell, template, cmd, left);
        }
    }
}
