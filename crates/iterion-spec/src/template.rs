//! Template placeholders `{{…}}` (01 §5.1) and environment references `${…}` (01 §5.2).
//!
//! ```
//! use iterion_spec::template::{parse_template, Segment};
//! let segs = parse_template("hi {{ !input.name }}!").unwrap();
//! assert_eq!(segs.len(), 3);
//! let Segment::Placeholder(p) = &segs[1] else { panic!() };
//! assert!(p.raw);
//! assert_eq!(p.path, ["input", "name"]);
//! ```

use serde::Serialize;

/// Template namespaces (01 §5.1).
pub const NAMESPACES: &[&str] = &[
    "input",
    "vars",
    "outputs",
    "loop",
    "run",
    "artifacts",
    "attachments",
];

/// One `{{…}}` placeholder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placeholder {
    /// `{{!…}}`: inserted without shell quoting.
    pub raw: bool,
    /// The dotted path, namespace first.
    pub path: Vec<String>,
    /// Byte offset of `{{` in the template text.
    pub start: usize,
    /// Byte offset one past `}}`.
    pub end: usize,
}

impl Placeholder {
    /// The namespace (first path segment).
    pub fn namespace(&self) -> &str {
        self.path.first().map_or("", String::as_str)
    }
}

/// A piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Segment {
    /// Literal text.
    Text(String),
    /// A placeholder.
    Placeholder(Placeholder),
}

/// Why a template is invalid (`C004`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// Byte offset of the offending `{{`.
    pub offset: usize,
    /// The placeholder text (or the rest of the template when unterminated), for the message.
    pub text: String,
    /// What is wrong.
    pub detail: String,
}

/// Splits a template-bearing string into text and placeholders (01 §5.1); the first error wins.
pub fn parse_template(s: &str) -> Result<Vec<Segment>, TemplateError> {
    let (segs, mut errs) = scan_template(s);
    if errs.is_empty() {
        Ok(segs)
    } else {
        Err(errs.swap_remove(0))
    }
}

/// Like [`parse_template`] but keeps going after an invalid placeholder: returns every valid segment and
/// every error (an invalid placeholder is kept as text).
pub fn scan_template(s: &str) -> (Vec<Segment>, Vec<TemplateError>) {
    let mut out = Vec::new();
    let mut errs = Vec::new();
    let mut rest_start = 0;
    walk(
        s,
        |p| {
            if p.start > rest_start {
                out.push(Segment::Text(s[rest_start..p.start].to_string()));
            }
            out.push(Segment::Placeholder(Placeholder {
                raw: p.raw,
                path: p.path.iter().map(|x| (*x).to_string()).collect(),
                start: p.start,
                end: p.end,
            }));
            rest_start = p.end;
        },
        |e| errs.push(e),
    );
    if rest_start < s.len() {
        out.push(Segment::Text(s[rest_start..].to_string()));
    }
    (out, errs)
}

/// A placeholder borrowed from the template text (see [`walk`]).
pub(crate) struct PlaceholderRef<'s> {
    /// `{{!…}}`.
    pub(crate) raw: bool,
    /// The dotted path, namespace first.
    pub(crate) path: &'s [&'s str],
    /// Byte offset of `{{`.
    pub(crate) start: usize,
    /// Byte offset one past `}}`.
    pub(crate) end: usize,
}

/// Walks the placeholders of a template in order without copying text: `on_ph` gets every valid
/// placeholder, `on_err` every invalid one (the same as [`scan_template`], which is built on it).
pub(crate) fn walk<'s>(
    s: &'s str,
    mut on_ph: impl FnMut(&PlaceholderRef<'_>),
    mut on_err: impl FnMut(TemplateError),
) {
    let mut segs: Vec<&'s str> = Vec::new();
    let mut i = 0;
    while let Some(off) = s[i..].find("{{") {
        let open = i + off;
        let inner_start = open + 2;
        let close = s[inner_start..].find("}}").map(|c| inner_start + c);
        let Some(close) = close else {
            on_err(TemplateError {
                offset: open,
                text: s[open..].chars().take(60).collect(),
                detail: "unterminated '{{'".into(),
            });
            break;
        };
        if s[inner_start..close].contains("{{") {
            on_err(TemplateError {
                offset: open,
                text: s[open..close + 2].to_string(),
                detail: "'{{' inside a placeholder".into(),
            });
            i = close + 2;
            continue;
        }
        let inner = s[inner_start..close].trim();
        let (raw, path_text) = match inner.strip_prefix('!') {
            Some(p) => (true, p.trim()),
            None => (false, inner),
        };
        match check_path(path_text, &mut segs) {
            Ok(()) => on_ph(&PlaceholderRef {
                raw,
                path: &segs,
                start: open,
                end: close + 2,
            }),
            Err(detail) => on_err(TemplateError {
                offset: open,
                text: s[open..close + 2].to_string(),
                detail,
            }),
        }
        i = close + 2;
    }
}

/// Splits and checks a placeholder path into `segs` (cleared first): at least two dot-separated parts, the
/// first a namespace. Nothing else is checked here (`{{outputs.a.ok.deep-er}}` and `{{run.anything}}` are
/// well formed; what the names refer to is the compiler's business).
fn check_path<'s>(p: &'s str, segs: &mut Vec<&'s str>) -> Result<(), String> {
    segs.clear();
    segs.extend(p.split('.'));
    if segs.len() < 2 {
        return Err("a placeholder is a namespace and a name, e.g. {{input.name}}".into());
    }
    let ns = segs[0];
    if !NAMESPACES.contains(&ns) {
        return Err(format!(
            "unknown namespace '{ns}' (want {})",
            NAMESPACES.join(", ")
        ));
    }
    Ok(())
}

/// The placeholders of a template (empty on error).
pub fn placeholders(s: &str) -> Vec<Placeholder> {
    parse_template(s)
        .map(|v| {
            v.into_iter()
                .filter_map(|seg| match seg {
                    Segment::Placeholder(p) => Some(p),
                    Segment::Text(_) => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------------------
// ${…} environment references (01 §5.2)
// ---------------------------------------------------------------------------------------------------------

/// The three expansion contexts of 01 §5.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvContext {
    /// Tool `command` / `script`: `${NAME}` (left verbatim when unset) and `${NAME:-DEFAULT}`; everything
    /// else is left for the shell.
    Command,
    /// String values of vars: `$NAME`, `${NAME}`, `${NAME:-DEFAULT}`; unset expands to empty.
    VarValue,
    /// `model`, `backend`, `provider`, `reasoning_effort`: like `Command` but unset `${NAME}` becomes empty.
    NodeField,
}

fn is_env_name(n: &str) -> bool {
    let b = n.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// Whether `s` contains a `${NAME}` / `${NAME:-DEFAULT}` reference that the given context expands.
pub fn has_env_ref(s: &str) -> bool {
    let mut i = 0;
    while let Some(off) = s[i..].find("${") {
        let st = i + off + 2;
        if let Some(c) = s[st..].find('}') {
            let inner = &s[st..st + c];
            let name = inner.split_once(":-").map_or(inner, |(n, _)| n);
            if is_env_name(name) {
                return true;
            }
        }
        i = st;
    }
    false
}

/// Expands environment references in one pass (inserted text is not rescanned). `lookup` returns the value
/// of a variable when it is set (an empty value counts as set).
pub fn expand_env(s: &str, ctx: EnvContext, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            if b.get(i + 1) == Some(&b'{') {
                if let Some(c) = s[i + 2..].find('}') {
                    let inner = &s[i + 2..i + 2 + c];
                    let (name, default) = match inner.split_once(":-") {
                        Some((n, d)) => (n, Some(d)),
                        None => (inner, None),
                    };
                    if is_env_name(name) {
                        let val = lookup(name);
                        let rep = match (default, val) {
                            (Some(d), Some(v)) => Some(if v.is_empty() { d.to_string() } else { v }),
                            (Some(d), None) => Some(d.to_string()),
                            (None, Some(v)) => Some(v),
                            (None, None) => match ctx {
                                EnvContext::Command => None,
                                EnvContext::VarValue | EnvContext::NodeField => Some(String::new()),
                            },
                        };
                        match rep {
                            Some(r) => out.push_str(&r),
                            None => out.push_str(&s[i..i + 3 + c]),
                        }
                        i += 3 + c;
                        continue;
                    }
                }
            } else if ctx == EnvContext::VarValue {
                let rest = &s[i + 1..];
                let n = rest
                    .bytes()
                    .enumerate()
                    .take_while(|&(k, c)| {
                        c == b'_' || c.is_ascii_alphabetic() || (k > 0 && c.is_ascii_digit())
                    })
                    .count();
                if n > 0 {
                    out.push_str(&lookup(&rest[..n]).unwrap_or_default());
                    i += 1 + n;
                    continue;
                }
            }
        }
        let ch = s[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expect: &str) {
        let got = match parse_template(input) {
            Ok(segs) => segs
                .iter()
                .map(|s| match s {
                    Segment::Text(t) => format!("T({t})"),
                    Segment::Placeholder(p) => {
                        format!("{}P({})", if p.raw { "!" } else { "" }, p.path.join("."))
                    }
                })
                .collect::<Vec<_>>()
                .join(" "),
            Err(e) => format!("C004@{}: {}", e.offset, e.detail),
        };
        assert_eq!(got, expect, "input {input:?}");
    }

    #[test]
    fn templates() {
        check("a {{input.x}} b", "T(a ) P(input.x) T( b)");
        check("{{ !vars.v }}", "!P(vars.v)");
        check("{{outputs.n.items.0}}", "P(outputs.n.items.0)");
        check("{{loop.l.previous_output.f}}", "P(loop.l.previous_output.f)");
        check("{{run.id}}", "P(run.id)");
        check("{{attachments.a.sha256}}", "P(attachments.a.sha256)");
        check(
            "{{foo.bar}}",
            "C004@0: unknown namespace 'foo' (want input, vars, outputs, loop, run, artifacts, attachments)",
        );
        check("x {{input.a", "C004@2: unterminated '{{'");
        check("{{input.{{x}}}}", "C004@0: '{{' inside a placeholder");
        // only the namespace and the number of parts are checked (as the reference validator does)
        check("{{run.x}}", "P(run.x)");
        check("{{loop.l}}", "P(loop.l)");
        check("{{outputs.a.ok.deep-er}}", "P(outputs.a.ok.deep-er)");
        check("{{input.k.sub field}}", "P(input.k.sub field)");
        check(
            "{{}}",
            "C004@0: a placeholder is a namespace and a name, e.g. {{input.name}}",
        );
        check(
            "{{attachments}}",
            "C004@0: a placeholder is a namespace and a name, e.g. {{input.name}}",
        );
        check("${x.y} \\{{input.a}}", "T(${x.y} \\) P(input.a)");
    }

    fn env(input: &str, ctx: EnvContext, expect: &str) {
        let lookup = |n: &str| match n {
            "HOME" => Some("/home/jo".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        assert_eq!(expand_env(input, ctx, &lookup), expect, "input {input:?}");
    }

    #[test]
    fn env_refs() {
        use EnvContext::*;
        env("${HOME}/x", Command, "/home/jo/x");
        env("${NOPE}", Command, "${NOPE}");
        env("${NOPE}", NodeField, "");
        env("${NOPE:-d}", Command, "d");
        env("${EMPTY:-d}", Command, "d");
        env("${EMPTY}", Command, "");
        env("$HOME ${out.length}", Command, "$HOME ${out.length}");
        env("$HOME/$NOPE.", VarValue, "/home/jo/.");
        env("${M:-anthropic/claude}", NodeField, "anthropic/claude");
        assert!(has_env_ref("${B:-claw}"));
        assert!(!has_env_ref("${x.y}"));
    }
}
