//! Compile-time checks of what tool commands do with placeholder values:
//!
//! - `C130` (error): a placeholder of a tool `command:` sits where no shell quoting is safe (backticks,
//!   `${…}`, arithmetic, a here-document, a comment, right after `\` or `$`; see [`crate::shell`]);
//! - `C131` (error): a placeholder of a `js` or `py` tool `script:` sits inside a string, a template literal's
//!   text, a regular expression or a comment. In those languages a placeholder stands for an expression that
//!   reads its value as data (see [`crate::script`]); where no expression may stand it is refused;
//! - `C129` (warning): a tool node that runs on the host (`sandbox: none`) renders a value that a sandboxed
//!   node controls (its output, directly or through edges, `with` mappings, loops or artifacts) into its
//!   `command:` or `script:`. The value is quoted for its shell context, but it has crossed from the sandbox
//!   to the host, and what the command does with it (`eval`, `sh -c`, bash arithmetic) is up to the command.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::diag::Diagnostic;
use crate::model::{Node, NodeKind, SandboxKind, Span, Spanned, Workflow};
use crate::script::{ScriptContext, ScriptLanguage, ScriptRefusal};
use crate::shell::{Refusal, ShellContext, placeholder_contexts};
use crate::span::inner_span;
use crate::template::walk;

/// Every `C129`, `C130` and `C131` diagnostic of a compiled workflow.
pub fn check(w: &Workflow, file: &str) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for n in &w.nodes {
        if n.kind != NodeKind::Tool {
            continue;
        }
        if let Some(cmd) = &n.command {
            refusals(cmd, file, &mut out);
        }
        if let (Some(script), Some(lang)) = (
            &n.script,
            n.language.as_ref().and_then(|l| ScriptLanguage::of(&l.value)),
        ) {
            script_refusals(script, lang, file, &mut out);
        }
    }
    crossings(w, file, &mut out);
    out
}

fn diag(code: &'static str, warn: bool, file: &str, span: Span, msg: String, hint: &str) -> Diagnostic {
    let d = if warn {
        Diagnostic::warning(code, file, span.line, span.col, msg)
    } else {
        Diagnostic::error(code, file, span.line, span.col, msg)
    };
    d.with_end(span.end_line, span.end_col.max(span.col))
        .with_hint(hint)
}

/// How to avoid a refused context.
fn refusal_hint(r: Refusal) -> &'static str {
    match r {
        Refusal::Backtick => "use $(…) instead of backticks; placeholders inside $(…) are quoted",
        Refusal::ParamExpansion => "assign the value to a variable first (v={{…}}), then use ${v…}",
        Refusal::Arithmetic => {
            "assign the value to a variable first (v={{…}}) and check that it is a number before computing with it"
        }
        Refusal::HereDoc => "feed the value with printf '%s\\n' {{…}} | command instead of a here-document",
        Refusal::Comment => "remove the placeholder from the comment",
        Refusal::AfterBackslash => "remove the backslash before the placeholder",
        Refusal::AfterDollar => {
            "remove the '$' before the placeholder; the value is inserted as a quoted word"
        }
        Refusal::AnsiCQuote => "use '…' or \"…\" around the placeholder instead of $'…'",
        Refusal::Ambiguous => {
            "move the placeholder before that construct, or assign the value to a variable first (v={{…}}) and use \"$v\""
        }
    }
}

fn refusals(cmd: &Spanned<String>, file: &str, out: &mut Vec<Diagnostic>) {
    for (start, end, ctx) in placeholder_contexts(&cmd.value) {
        let ShellContext::Refused(r) = ctx else {
            continue;
        };
        let text = &cmd.value[start..end];
        out.push(diag(
            "C130",
            false,
            file,
            inner_span(cmd, start, end - start),
            format!(
                "placeholder '{text}' is {} of a tool command, where its value cannot be quoted safely",
                r.describe()
            ),
            refusal_hint(r),
        ));
    }
}

/// How to avoid a placeholder inside a literal or a comment of a script.
fn script_hint(r: ScriptRefusal, lang: ScriptLanguage) -> &'static str {
    match (r, lang) {
        (ScriptRefusal::Comment, _) => "remove the placeholder from the comment",
        (ScriptRefusal::Template, _) => {
            "write the placeholder inside ${…} of the template literal: `… ${ {{…}} } …`"
        }
        (_, ScriptLanguage::JavaScript) => {
            "a placeholder is a value: use it as an expression outside the literal ('a ' + {{…}}, or `a ${ {{…}} }`)"
        }
        (_, ScriptLanguage::Python) => {
            "a placeholder is a value: use it as an expression outside the literal ('a ' + str({{…}}), or '%s' % ({{…}},))"
        }
    }
}

fn script_refusals(script: &Spanned<String>, lang: ScriptLanguage, file: &str, out: &mut Vec<Diagnostic>) {
    for (start, end, ctx) in crate::script::placeholder_contexts(lang, &script.value) {
        let ScriptContext::Refused(r) = ctx else {
            continue;
        };
        let text = &script.value[start..end];
        out.push(diag(
            "C131",
            false,
            file,
            inner_span(script, start, end - start),
            format!(
                "placeholder '{text}' is {} of a {} script, where no expression can stand (a placeholder of a script is passed as data, never spliced into its source)",
                r.describe(),
                lang.short()
            ),
            script_hint(r, lang),
        ));
    }
}

/// Whether a node that executes something runs on the host whatever the operator's defaults: its own
/// declaration is `none`, or it has none (or only a network override) and the workflow's is `none`.
fn on_host(w: &Workflow, n: &Node) -> bool {
    let wf_off = w.sandbox.as_ref().is_some_and(|d| d.kind == SandboxKind::Off);
    match n.sandbox.as_deref().map(|d| d.kind) {
        Some(SandboxKind::Off) => true,
        Some(SandboxKind::Auto | SandboxKind::Inline) => false,
        Some(SandboxKind::Override | SandboxKind::Invalid) | None => wf_off,
    }
}

fn executes(n: &Node) -> bool {
    matches!(n.kind, NodeKind::Agent | NodeKind::Judge | NodeKind::Tool)
}

/// Whether a template text has a placeholder whose value may come from a node (not `vars`, `run`,
/// `attachments`, loop counters).
fn reads_node_data(s: &str) -> bool {
    let mut any = false;
    walk(s, |p| any |= node_namespace(p.path), |_| {});
    any
}

fn node_namespace(path: &[&str]) -> bool {
    match path.first().copied() {
        Some("input" | "outputs" | "artifacts") => true,
        Some("loop") => path.get(2) == Some(&"previous_output"),
        _ => false,
    }
}

/// The nodes whose output may carry bytes a sandboxed process chose: every node that may run in a container,
/// and, along the edges, every node fed by one (a host tool only when its own text reads node data).
fn tainted(w: &Workflow) -> HashSet<&str> {
    let by_name: HashMap<&str, &Node> = w.nodes.iter().map(|n| (n.name.value.as_str(), n)).collect();
    let mut next: HashMap<&str, Vec<&str>> = HashMap::new();
    for e in &w.edges {
        next.entry(e.from.value.as_str())
            .or_default()
            .push(e.to.value.as_str());
    }
    let mut set = HashSet::new();
    let mut queue = VecDeque::new();
    for n in &w.nodes {
        if executes(n) && !on_host(w, n) {
            set.insert(n.name.value.as_str());
            queue.push_back(n.name.value.as_str());
        }
    }
    while let Some(from) = queue.pop_front() {
        for &to in next.get(from).map(Vec::as_slice).unwrap_or_default() {
            let Some(n) = by_name.get(to) else { continue };
            let fed = match n.kind {
                NodeKind::Tool => n
                    .command
                    .iter()
                    .chain(n.script.iter())
                    .any(|t| reads_node_data(&t.value)),
                _ => true,
            };
            if fed && set.insert(to) {
                queue.push_back(to);
            }
        }
    }
    set
}

/// Which sandboxed source a placeholder of host node `n` reads, if any: `Some(description)`.
fn source_of(w: &Workflow, n: &Node, path: &[&str], tainted: &HashSet<&str>) -> Option<String> {
    let is = |x: &str| tainted.contains(x);
    match path.first().copied()? {
        "outputs" => {
            let src = path.get(1)?;
            is(src).then(|| format!("output of node '{src}'"))
        }
        "artifacts" => {
            let a = path.get(1)?;
            let p = w
                .nodes
                .iter()
                .find(|m| m.publish.as_ref().is_some_and(|x| x.value == *a) && is(&m.name.value))?;
            Some(format!("artifact '{a}' published by node '{}'", p.name.value))
        }
        "loop" if path.get(2) == Some(&"previous_output") => {
            (!tainted.is_empty()).then(|| format!("previous output of loop '{}'", path.get(1).unwrap_or(&"")))
        }
        "input" => {
            for e in w.edges.iter().filter(|e| e.to.value == n.name.value) {
                for m in &e.with.entries {
                    let mut hit = None;
                    walk(
                        &m.value.value,
                        |p| {
                            if hit.is_none() {
                                hit = match p.path.first().copied() {
                                    Some("input") if is(&e.from.value) => {
                                        Some(format!("output of node '{}'", e.from.value))
                                    }
                                    Some("input") => None,
                                    _ => source_of(w, n, p.path, tainted),
                                };
                            }
                        },
                        |_| {},
                    );
                    if let Some(h) = hit {
                        return Some(format!(
                            "{h} (mapped by the edge {} -> {})",
                            e.from.value, n.name.value
                        ));
                    }
                }
            }
            None
        }
        _ => None,
    }
}

fn crossings(w: &Workflow, file: &str, out: &mut Vec<Diagnostic>) {
    let host_tools: Vec<&Node> = w
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Tool && on_host(w, n))
        .collect();
    if host_tools.is_empty() {
        return;
    }
    let tainted = tainted(w);
    if tainted.is_empty() {
        return;
    }
    for n in host_tools {
        for (what, t) in [("command", &n.command), ("script", &n.script)] {
            let Some(t) = t else { continue };
            let mut found = Vec::new();
            walk(
                &t.value,
                |p| {
                    if let Some(src) = source_of(w, n, p.path, &tainted) {
                        found.push((p.start, p.end, p.raw, src));
                    }
                },
                |_| {},
            );
            for (start, end, raw, src) in found {
                let text = &t.value[start..end];
                let how = if raw { ", unquoted (raw placeholder)" } else { "" };
                out.push(diag(
                    "C129",
                    true,
                    file,
                    inner_span(t, start, end - start),
                    format!(
                        "'{text}' brings the {src}, produced in the sandbox, into the host {what} of node '{}'{how}",
                        n.name.value
                    ),
                    "the value is quoted for its shell context, but the host command decides what to do with it; \
                     run this node in the sandbox (drop sandbox: none) or check the value before using it",
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::compile::check;

    fn codes(src: &str) -> Vec<String> {
        check(src, "t.bot")
            .diagnostics
            .iter()
            .filter(|d| matches!(d.code, "C129" | "C130"))
            .map(|d| format!("{}@{}:{}", d.code, d.line, d.col))
            .collect()
    }

    const TAIL: &str = "\nworkflow w:\n  entry: a\n  sandbox: auto\n  a -> b\n  b -> done\n";

    #[test]
    fn refused_contexts_are_positioned_errors() {
        let src = format!(
            "tool a:\n  command: \"echo '{{}}'\"\n\ntool b:\n  command: \"echo `x {{{{input.v}}}}` ${{X:-{{{{input.v}}}}}} \\\"{{{{input.v}}}}\\\"\"\n{TAIL}"
        );
        assert_eq!(codes(&src), ["C130@5:21", "C130@5:39"]);
        let c = check(&src, "t.bot");
        let d = c.diagnostics.iter().find(|d| d.code == "C130").unwrap();
        assert_eq!(
            d.message,
            "placeholder '{{input.v}}' is inside backticks of a tool command, where its value cannot be quoted safely"
        );
        assert!(d.hint.as_deref().unwrap().contains("$(…)"));
        assert!(c.has_errors());
    }

    fn script_codes(lang: &str, script: &str) -> Vec<String> {
        let src = format!(
            "tool a:\n  language: {lang}\n  script: |\n{}\nworkflow w:\n  entry: a\n  a -> done\n",
            script.lines().map(|l| format!("    {l}\n")).collect::<String>()
        );
        check(&src, "t.bot")
            .diagnostics
            .iter()
            .filter(|d| d.code == "C131")
            .map(|d| format!("{}:{}-{}", d.line, d.col, d.end_col))
            .collect()
    }

    #[test]
    fn a_script_placeholder_inside_a_literal_or_a_comment_is_a_positioned_error() {
        assert_eq!(
            script_codes(
                "js",
                "const a = {{input.a}};\nconst b = \"x{{input.b}}\";\nconst c = `${ {{input.c}} } {{input.d}}`;\n// {{input.e}}\nconst f = /{{input.f}}/;"
            ),
            ["5:17-28", "6:33-44", "7:8-19", "8:16-27"]
        );
        assert_eq!(
            script_codes(
                "py",
                "a = {{input.a}}\nb = f'{ {{input.b}} }'\nc = \"\"\"\n{{input.c}}\"\"\"\n# {{input.d}}\ne = '{{!input.e}}'"
            ),
            ["5:13-24", "7:5-16", "8:7-18"]
        );
        assert_eq!(
            script_codes("node", "f({{input.a}}, {{!input.b}})"),
            Vec::<String>::new()
        );
        assert_eq!(script_codes("python3", "x = [{{input.a}}]"), Vec::<String>::new());
        // a shell script is the shell's business (C130 rules at run time), not this check's
        assert_eq!(script_codes("sh", "echo '{{input.a}}'"), Vec::<String>::new());
        let src = "tool a:\n  language: js\n  script: \"f('{{input.a}}')\"\n\nworkflow w:\n  entry: a\n  a -> done\n";
        let c = check(src, "t.bot");
        let d = c.diagnostics.iter().find(|d| d.code == "C131").unwrap();
        assert_eq!(
            d.message,
            "placeholder '{{input.a}}' is inside a string literal of a js script, where no expression can stand (a placeholder of a script is passed as data, never spliced into its source)"
        );
        assert!(d.hint.as_deref().unwrap().contains("'a ' + {{…}}"));
        assert!(c.has_errors());
    }

    #[test]
    fn crossing_from_a_sandboxed_node_into_a_host_command_is_a_warning() {
        let host = |cmd: &str| {
            format!(
                "tool a:\n  command: \"echo '{{}}'\"\n\ntool b:\n  sandbox: none\n  command: \"{cmd}\"\n{TAIL}"
            )
        };
        assert_eq!(codes(&host("echo {{outputs.a.x}}")), ["C129@6:18"]);
        assert_eq!(codes(&host("echo {{run.id}} {{vars.v}}")), Vec::<String>::new());
        // through a with mapping of the edge into b
        let src = "tool a:\n  command: \"echo '{}'\"\n\ntool b:\n  sandbox: none\n  command: \"echo {{input.y}}\"\n\nworkflow w:\n  entry: a\n  sandbox: auto\n  a -> b with { y: \"{{outputs.a.x}}\" }\n  b -> done\n";
        assert_eq!(codes(src), ["C129@6:18"]);
        // a sandboxed reader is not a crossing
        let src = "tool a:\n  command: \"echo '{}'\"\n\ntool b:\n  command: \"echo {{outputs.a.x}}\"\n\nworkflow w:\n  entry: a\n  sandbox: auto\n  a -> b\n  b -> done\n";
        assert_eq!(codes(src), Vec::<String>::new());
        // through a compute node
        let src = "tool a:\n  command: \"echo '{}'\"\n\ncompute c:\n  expr:\n    y: \"outputs.a.x\"\n\ntool b:\n  sandbox: none\n  command: \"echo {{outputs.c.y}}\"\n\nworkflow w:\n  entry: a\n  sandbox: auto\n  a -> c\n  c -> b\n  b -> done\n";
        assert_eq!(codes(src), ["C129@10:18"]);
        // everything on the host: nothing crosses
        let src = "tool a:\n  command: \"echo '{}'\"\n\ntool b:\n  command: \"echo {{outputs.a.x}}\"\n\nworkflow w:\n  entry: a\n  sandbox: none\n  a -> b\n  b -> done\n";
        assert_eq!(codes(src), Vec::<String>::new());
    }
}
