//! Template rendering (10.3, 10.4, 10.5.1) and the `${…}` rule of tool commands (10.4 step 1).
//!
//! Three renderings of a placeholder's value, one left-to-right pass each (inserted text is never
//! rescanned):
//!
//! - [`render_shell`] for tool `command:`: quoted for the shell context the placeholder sits in (a
//!   single-quoted word, the inside of `'…'`, the inside of `"…"`), refused where no quoting is safe
//!   (backticks, `${…}`, arithmetic, here-documents, comments, see [`iterion_spec::shell`]); `null` or a
//!   missing path leaves the placeholder verbatim;
//! - [`render_shell_script`] for `sh`/`bash` tool `script:`: each value's JSON literal, quoted for the shell
//!   context it lands in;
//! - [`render_script_data`] for `js`/`py` tool `script:`: never the value itself: each placeholder becomes an
//!   expression that parses the value's JSON from the script's environment (`ITERION_VALUE_<n>`), refused
//!   inside a string, a template literal's text, a regular expression or a comment (see
//!   [`iterion_spec::script`]);
//! - [`Mode::Text`] for prompts and `with` values: plain text (missing → empty, with a warning).
//!
//! Raw placeholders `{{!path}}` insert strings verbatim, `null` for null or missing, compact JSON otherwise
//! (shell and script renderings): the author asked for the value as source text.
//!
//! ```
//! use iterion_runtime::exec::render::{Scope, render_shell};
//! let input = serde_json::json!({"v": "O'Brien $(id)"});
//! let scope = Scope { input: &input, ..Scope::empty() };
//! assert_eq!(render_shell("echo {{input.v}}", &scope).unwrap().text, r"echo 'O'\''Brien $(id)'");
//! assert_eq!(render_shell("echo \"<{{input.v}}>\"", &scope).unwrap().text, r#"echo "<O'Brien \$(id)>""#);
//! assert!(render_shell("echo `{{input.v}}`", &scope).is_err());
//! ```
use std::collections::BTreeMap;

use iterion_spec::script::{ScriptContext, ScriptLanguage, ScriptLexer, ScriptRefusal};
use iterion_spec::shell::{Refusal, ShellContext, ShellLexer};
use iterion_spec::template::{Segment, scan_template};
use serde_json::{Map, Value};

/// How placeholders are rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plain text (prompts, `with` values).
    Text,
}

/// State of one loop, as templates see it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoopView {
    /// `loop.L.iteration`.
    pub iteration: u64,
    /// `loop.L.max`, once evaluated.
    pub max: Option<u64>,
    /// `loop.L.previous_output`.
    pub previous_output: Option<Value>,
}

/// The values templates read.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// `input`.
    pub input: &'a Value,
    /// `vars`.
    pub vars: &'a Map<String, Value>,
    /// `outputs.NODE`.
    pub outputs: &'a Map<String, Value>,
    /// `outputs.NODE.history`.
    pub history: &'a BTreeMap<String, Vec<Value>>,
    /// `loop.L.…`.
    pub loops: &'a BTreeMap<String, LoopView>,
    /// `artifacts.NAME`.
    pub artifacts: &'a Map<String, Value>,
    /// `run.id`.
    pub run_id: &'a str,
    /// `attachments.NAME[.path|.mime|.size|.sha256|.url]`, as the consuming node sees them
    /// ([`crate::attachments::AttachmentValues::seen_by`]); bare `attachments.NAME` is the path.
    pub attachments: &'a Map<String, Value>,
}

static NULL: Value = Value::Null;

impl Scope<'static> {
    /// A scope where every path is missing.
    pub fn empty() -> Scope<'static> {
        static EMPTY_MAP: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        static EMPTY_HIST: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        static EMPTY_LOOPS: BTreeMap<String, LoopView> = BTreeMap::new();
        let m = EMPTY_MAP.get_or_init(Map::new);
        Scope {
            input: &NULL,
            vars: m,
            outputs: m,
            history: &EMPTY_HIST,
            loops: &EMPTY_LOOPS,
            artifacts: m,
            run_id: "",
            attachments: m,
        }
    }
}

fn walk(mut cur: Value, rest: &[String]) -> Option<Value> {
    for seg in rest {
        cur = match cur {
            Value::Object(mut o) => o.remove(seg)?,
            Value::Array(mut a) => {
                let i: usize = seg.parse().ok()?;
                if i >= a.len() {
                    return None;
                }
                a.swap_remove(i)
            }
            _ => return None,
        };
    }
    Some(cur)
}

impl Scope<'_> {
    /// The value at a placeholder path (namespace first); `None` when missing.
    pub fn lookup(&self, path: &[String]) -> Option<Value> {
        let (ns, rest) = path.split_first()?;
        match ns.as_str() {
            "input" => walk(self.input.clone(), rest),
            "vars" => {
                let (name, rest) = rest.split_first()?;
                walk(self.vars.get(name)?.clone(), rest)
            }
            "outputs" => {
                let (node, rest) = rest.split_first()?;
                if rest.first().map(String::as_str) == Some("history")
                    && !self.outputs_has_history_field(node)
                {
                    let h = self.history.get(node).cloned().unwrap_or_default();
                    return walk(Value::Array(h), &rest[1..]);
                }
                walk(self.outputs.get(node)?.clone(), rest)
            }
            "loop" => {
                let (name, rest) = rest.split_first()?;
                let l = self.loops.get(name)?;
                let (what, rest) = rest.split_first()?;
                match what.as_str() {
                    "iteration" => Some(Value::from(l.iteration)),
                    "max" => l.max.map(Value::from),
                    "previous_output" => walk(l.previous_output.clone()?, rest),
                    _ => None,
                }
            }
            "run" => (rest.len() == 1 && rest[0] == "id").then(|| Value::from(self.run_id)),
            "artifacts" => {
                let (name, rest) = rest.split_first()?;
                walk(self.artifacts.get(name)?.clone(), rest)
            }
            "attachments" => {
                let (name, rest) = rest.split_first()?;
                let a = self.attachments.get(name)?;
                match rest {
                    [] => a.get("path").cloned(),
                    [field] => a.get(field).cloned(),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn outputs_has_history_field(&self, node: &str) -> bool {
        self.outputs
            .get(node)
            .and_then(Value::as_object)
            .is_some_and(|o| o.contains_key("history"))
    }
}

/// Single-quotes a string for `sh`: `'` + every `'` replaced by `'\''` + `'`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn shell_scalar(v: &Value) -> String {
    match v {
        Value::String(s) => shell_quote(s),
        other => shell_quote(&compact(other)),
    }
}

fn raw_text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "null".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => compact(other),
    }
}

/// Renders one placeholder's value as text (a raw placeholder in text is ordinary text).
fn render_value(v: Option<&Value>, mode: Mode) -> String {
    match mode {
        Mode::Text => match v {
            None => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => compact(other),
        },
    }
}

/// A value as one piece of text inside a quoted string: strings verbatim, a list of scalars as its items'
/// text joined by one space, anything else compact JSON.
fn quoted_text(v: &Value) -> String {
    let scalar = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => compact(other),
    };
    match v {
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
            items.iter().map(scalar).collect::<Vec<_>>().join(" ")
        }
        other => scalar(other),
    }
}

/// The text of a (non-null) value for one shell context; `None` when the context refuses placeholders.
fn shell_value(v: &Value, ctx: ShellContext) -> Option<String> {
    Some(match ctx {
        ShellContext::Unquoted => match v {
            Value::String(s) => shell_quote(s),
            Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
                items.iter().map(shell_scalar).collect::<Vec<_>>().join(" ")
            }
            other => shell_scalar(other),
        },
        ShellContext::SingleQuoted => quoted_text(v).replace('\'', r"'\''"),
        ShellContext::DoubleQuoted => double_quoted(&quoted_text(v)),
        ShellContext::Refused(_) => return None,
    })
}

/// Text escaped for the inside of a double-quoted shell word: `\`, `"`, `$` and backtick get a backslash.
fn double_quoted(t: &str) -> String {
    let mut out = String::with_capacity(t.len() + 8);
    for c in t.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A value of an `sh`/`bash` script for one shell context: the shell reads its JSON literal (the script
/// rendering of every language) exactly, whatever the context. A plain word is single-quoted (a string as
/// its text, as a JSON string literal read by the shell gives); inside `'…'` and `"…"` the literal is escaped
/// for that quote; where no quoting is safe only `null`, a number or a boolean is written, whose literal holds
/// no shell syntax; any other value there is refused with the place's [`Refusal`].
fn script_value(v: Option<&Value>, ctx: ShellContext) -> Result<String, Refusal> {
    let literal = v.map_or_else(|| "null".to_string(), compact);
    Ok(match ctx {
        ShellContext::Unquoted => match v {
            Some(Value::String(s)) => shell_quote(s),
            _ => shell_quote(&literal),
        },
        ShellContext::SingleQuoted => literal.replace('\'', r"'\''"),
        ShellContext::DoubleQuoted => double_quoted(&literal),
        ShellContext::Refused(refusal) => match v {
            None | Some(Value::Null | Value::Number(_) | Value::Bool(_)) => literal,
            Some(_) => return Err(refusal),
        },
    })
}

/// Why a tool command could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unquotable {
    /// The placeholder sits where no quoting is safe.
    Context {
        /// The placeholder text (`{{input.x}}`).
        placeholder: String,
        /// Where it sits.
        refusal: Refusal,
    },
    /// The value holds a NUL byte, which no shell argument can carry.
    Nul {
        /// The placeholder text.
        placeholder: String,
    },
}

impl std::fmt::Display for Unquotable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unquotable::Context { placeholder, refusal } => write!(
                f,
                "placeholder {placeholder} is {} of the shell command, where its value cannot be quoted safely",
                refusal.describe()
            ),
            Unquotable::Nul { placeholder } => write!(
                f,
                "the value of placeholder {placeholder} contains a NUL byte, which a shell command cannot carry"
            ),
        }
    }
}

/// Renders a tool `command:` in one left-to-right pass, quoting each value for the shell context it lands
/// in. The context is tracked over the text the shell will actually read (authored text, expanded `${…}`
/// values, raw insertions and the quoted values themselves), so a raw value or an environment value that
/// opens a quote moves the context of the placeholders after it.
pub fn render_shell(template: &str, scope: &Scope<'_>) -> Result<Rendered, Unquotable> {
    render_shell_with(template, scope, ShellValues::Command)
}

/// Renders an `sh`/`bash` tool `script:` like [`render_shell`]: a script is read by the same shell, so each
/// value is written for the context it lands in (see [`script_value`]): the shell reads the value's JSON
/// literal, never a string's `$(…)` or backticks. A string or a structure where no quoting is safe is refused.
pub fn render_shell_script(template: &str, scope: &Scope<'_>) -> Result<Rendered, Unquotable> {
    render_shell_with(template, scope, ShellValues::Script)
}

/// How values are written into shell text: a command's (each value as its text) or a script's (each value as
/// its JSON literal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShellValues {
    Command,
    Script,
}

fn render_shell_with(template: &str, scope: &Scope<'_>, how: ShellValues) -> Result<Rendered, Unquotable> {
    let (segs, _errors) = scan_template(template);
    let mut text = String::with_capacity(template.len());
    let mut missing = Vec::new();
    let mut lexer = ShellLexer::new();
    for seg in segs {
        let piece = match seg {
            Segment::Text(t) => t,
            Segment::Placeholder(p) => {
                let original = &template[p.start..p.end];
                let v = scope.lookup(&p.path);
                if v.is_none() {
                    missing.push(original.to_string());
                }
                if p.raw {
                    raw_text(v.as_ref())
                } else {
                    let ctx = lexer.context();
                    let context = |refusal| Unquotable::Context {
                        placeholder: original.to_string(),
                        refusal,
                    };
                    let s = match (how, ctx) {
                        (ShellValues::Command, ShellContext::Refused(refusal)) => {
                            return Err(context(refusal));
                        }
                        (ShellValues::Command, _) => match v {
                            None | Some(Value::Null) => original.to_string(),
                            Some(v) => shell_value(&v, ctx).unwrap_or_default(),
                        },
                        (ShellValues::Script, _) => script_value(v.as_ref(), ctx).map_err(context)?,
                    };
                    if s.contains('\0') {
                        return Err(Unquotable::Nul {
                            placeholder: original.to_string(),
                        });
                    }
                    s
                }
            }
        };
        lexer.feed(&piece);
        text.push_str(&piece);
    }
    Ok(Rendered { text, missing })
}

/// The longest environment entry (`NAME=value` and its NUL) a Linux `execve` accepts.
const ENV_ENTRY_MAX: usize = 128 * 1024;

/// Why a `js`/`py` tool script could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misplaced {
    /// The placeholder sits where no expression can stand.
    Context {
        /// The placeholder text (`{{input.x}}`).
        placeholder: String,
        /// Where it sits.
        refusal: ScriptRefusal,
    },
    /// The value's JSON is longer than one environment entry can be.
    TooLarge {
        /// The placeholder text.
        placeholder: String,
        /// The length of the value's JSON.
        bytes: usize,
    },
}

impl std::fmt::Display for Misplaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Misplaced::Context { placeholder, refusal } => write!(
                f,
                "placeholder {placeholder} is {} of the script, where no expression can stand",
                refusal.describe()
            ),
            Misplaced::TooLarge { placeholder, bytes } => write!(
                f,
                "the value of placeholder {placeholder} is {bytes} bytes of JSON, more than one environment entry of a script can hold ({} KiB)",
                ENV_ENTRY_MAX / 1024
            ),
        }
    }
}

/// A `js`/`py` script whose placeholders read their values from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataScript {
    /// The script text.
    pub text: String,
    /// The environment entries the script reads: `ITERION_VALUE_<n>` = the compact JSON of the n-th value
    /// (`null` for a missing path).
    pub values: Vec<(String, String)>,
    /// Placeholder texts whose path was missing.
    pub missing: Vec<String>,
}

/// The expression a placeholder of a script becomes: the value, parsed from its JSON in environment entry
/// `name`.
fn value_expression(lang: ScriptLanguage, name: &str) -> String {
    match lang {
        ScriptLanguage::JavaScript => format!("(JSON.parse(process.env.{name}))"),
        ScriptLanguage::Python => {
            format!("(__import__('json').loads(__import__('os').environ['{name}']))")
        }
    }
}

/// Renders a `js`/`py` tool `script:` in one left-to-right pass. A value never becomes source text: each
/// placeholder is replaced by an expression that parses the value from the environment entry
/// `ITERION_VALUE_<n>` (its JSON; `null` for a missing path), so `{{input.n}} + 1` is arithmetic and a string
/// holding quotes, `*/` or U+2028 is only ever a string. The context is tracked over the text the interpreter
/// reads (authored text, expanded `${…}` values, raw insertions, the expressions); a placeholder inside a
/// string, a template literal's text, a regular expression or a comment is refused. Raw placeholders insert
/// their text verbatim, as the author asked.
pub fn render_script_data(
    template: &str,
    lang: ScriptLanguage,
    scope: &Scope<'_>,
) -> Result<DataScript, Misplaced> {
    let (segs, _errors) = scan_template(template);
    let mut text = String::with_capacity(template.len());
    let mut values = Vec::new();
    let mut missing = Vec::new();
    let mut lexer = ScriptLexer::new(lang);
    for seg in segs {
        let piece = match seg {
            Segment::Text(t) => t,
            Segment::Placeholder(p) => {
                let original = &template[p.start..p.end];
                let v = scope.lookup(&p.path);
                if v.is_none() {
                    missing.push(original.to_string());
                }
                if p.raw {
                    raw_text(v.as_ref())
                } else {
                    if let ScriptContext::Refused(refusal) = lexer.context() {
                        return Err(Misplaced::Context {
                            placeholder: original.to_string(),
                            refusal,
                        });
                    }
                    let name = format!("ITERION_VALUE_{}", values.len());
                    let json = v.as_ref().map_or_else(|| "null".to_string(), compact);
                    if name.len() + json.len() + 2 > ENV_ENTRY_MAX {
                        return Err(Misplaced::TooLarge {
                            placeholder: original.to_string(),
                            bytes: json.len(),
                        });
                    }
                    let expr = value_expression(lang, &name);
                    values.push((name, json));
                    expr
                }
            }
        };
        lexer.feed(&piece);
        text.push_str(&piece);
    }
    Ok(DataScript {
        text,
        values,
        missing,
    })
}

/// A rendered template and the placeholders that resolved to nothing (missing paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The text.
    pub text: String,
    /// Placeholder texts (`{{input.x}}`) whose path was missing.
    pub missing: Vec<String>,
}

/// Renders `template` in one left-to-right pass.
pub fn render(template: &str, mode: Mode, scope: &Scope<'_>) -> Rendered {
    let (segs, _errors) = scan_template(template);
    let mut text = String::with_capacity(template.len());
    let mut missing = Vec::new();
    for seg in segs {
        match seg {
            Segment::Text(t) => text.push_str(&t),
            Segment::Placeholder(p) => {
                let original = &template[p.start..p.end];
                let v = scope.lookup(&p.path);
                if v.is_none() {
                    missing.push(original.to_string());
                }
                text.push_str(&render_value(v.as_ref(), mode));
            }
        }
    }
    Rendered { text, missing }
}

/// A `with` value (10.3): the typed value when the template is exactly one placeholder (null when its path
/// is missing), otherwise the template rendered as text.
pub fn with_value(template: &str, scope: &Scope<'_>) -> Value {
    let (segs, errors) = scan_template(template);
    if errors.is_empty()
        && let [Segment::Placeholder(p)] = segs.as_slice()
    {
        return scope.lookup(&p.path).unwrap_or(Value::Null);
    }
    Value::String(render(template, Mode::Text, scope).text)
}

fn is_env_name(n: &str) -> bool {
    let b = n.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// Environment expansion of tool `command:` / `script:` text (01 5.2, 10.4 step 1): `${NAME}` is replaced when
/// NAME is set (even empty), otherwise left verbatim; `${NAME:-DEFAULT}` gives the value when set and
/// non-empty, else DEFAULT; every other `${…}` and bare `$NAME` are left for the shell. A reference whose
/// NAME satisfies `withhold` (deny-class names of a node running in a container) is left verbatim whole and
/// NAME is reported once in `withheld`.
pub fn expand_command_env(
    text: &str,
    env: &BTreeMap<String, String>,
    withhold: &dyn Fn(&str) -> bool,
    withheld: &mut Vec<String>,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("${") {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 2..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[pos..]);
            return out;
        };
        let inner = &after[..close];
        let whole = &rest[pos..pos + 3 + close];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        if !is_env_name(name) {
            out.push_str("${");
            rest = after;
            continue;
        }
        if withhold(name) {
            if !withheld.iter().any(|w| w == name) {
                withheld.push(name.to_string());
            }
            out.push_str(whole);
        } else {
            match (env.get(name), default) {
                (Some(v), Some(d)) => out.push_str(if v.is_empty() { d } else { v }),
                (None, Some(d)) => out.push_str(d),
                (Some(v), None) => out.push_str(v),
                (None, None) => out.push_str(whole),
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// TE1–TE7: `{{input.v}}`, `{{!input.v}}` in `command:`, `{{input.v}}` in a js `script:` (the JSON its
    /// environment entry holds).
    fn check(v: Option<Value>, shell: &str, raw: &str, script: &str) {
        let input = match &v {
            Some(v) => json!({ "v": v }),
            None => json!({}),
        };
        let scope = Scope {
            input: &input,
            ..Scope::empty()
        };
        let data = render_script_data("{{input.v}}", ScriptLanguage::JavaScript, &scope).unwrap();
        assert_eq!(data.text, "(JSON.parse(process.env.ITERION_VALUE_0))");
        assert_eq!(data.values.len(), 1);
        let got = (
            render_shell("{{input.v}}", &scope).unwrap().text,
            render_shell("{{!input.v}}", &scope).unwrap().text,
            data.values[0].1.clone(),
        );
        assert_eq!(got, (shell.into(), raw.into(), script.into()), "value {v:?}");
    }

    #[test]
    fn tool_template_vectors() {
        check(Some(json!("O'Brien")), r"'O'\''Brien'", "O'Brien", r#""O'Brien""#); // TE1
        check(
            Some(json!(["a b", "c"])),
            "'a b' 'c'",
            r#"["a b","c"]"#,
            r#"["a b","c"]"#,
        ); // TE2
        check(Some(json!([])), "", "[]", "[]"); // TE3
        check(Some(json!({"k": 1})), r#"'{"k":1}'"#, r#"{"k":1}"#, r#"{"k":1}"#); // TE4
        check(Some(json!(3)), "'3'", "3", "3"); // TE5
        check(Some(json!(true)), "'true'", "true", "true"); // TE5
        check(None, "{{input.v}}", "null", "null"); // TE6
        check(
            Some(json!("{{vars.secret}}")),
            "'{{vars.secret}}'",
            "{{vars.secret}}",
            r#""{{vars.secret}}""#,
        ); // TE7
        check(Some(Value::Null), "{{input.v}}", "null", "null");
        check(Some(json!([[1], 2])), "'[[1],2]'", "[[1],2]", "[[1],2]");
    }

    #[test]
    fn script_values_are_data_and_misplaced_placeholders_are_refused() {
        let input = json!({"s": "\"); require('x') //\u{2028}*/", "n": 2});
        let scope = Scope {
            input: &input,
            ..Scope::empty()
        };
        let py = render_script_data(
            "x = {{input.n}} + 1; y = [{{input.s}}, {{input.nope}}, '{{!input.n}}']",
            ScriptLanguage::Python,
            &scope,
        )
        .unwrap();
        assert_eq!(
            py.text,
            "x = (__import__('json').loads(__import__('os').environ['ITERION_VALUE_0'])) + 1; y = [(__import__('json').loads(__import__('os').environ['ITERION_VALUE_1'])), (__import__('json').loads(__import__('os').environ['ITERION_VALUE_2'])), '2']"
        );
        assert_eq!(
            py.values,
            [
                ("ITERION_VALUE_0".to_string(), "2".to_string()),
                ("ITERION_VALUE_1".to_string(), json!(input["s"]).to_string()),
                ("ITERION_VALUE_2".to_string(), "null".to_string()),
            ]
        );
        assert_eq!(py.missing, ["{{input.nope}}"]);
        for (lang, t, refusal) in [
            (
                ScriptLanguage::JavaScript,
                "f('{{input.s}}')",
                ScriptRefusal::String,
            ),
            (
                ScriptLanguage::JavaScript,
                "f(`a {{input.s}}`)",
                ScriptRefusal::Template,
            ),
            (
                ScriptLanguage::JavaScript,
                "/* {{input.s}} */",
                ScriptRefusal::Comment,
            ),
            (
                ScriptLanguage::Python,
                "f'{ {{input.s}} }'",
                ScriptRefusal::String,
            ),
            // a raw value that opens a string moves the placeholders after it into it
            (
                ScriptLanguage::Python,
                "{{!input.s}} {{input.n}}",
                ScriptRefusal::String,
            ),
        ] {
            assert_eq!(
                render_script_data(t, lang, &scope),
                Err(Misplaced::Context {
                    placeholder: if t.contains("input.n") {
                        "{{input.n}}"
                    } else {
                        "{{input.s}}"
                    }
                    .into(),
                    refusal
                }),
                "{t}"
            );
        }
        let big = json!({"b": "x".repeat(ENV_ENTRY_MAX)});
        let scope = Scope {
            input: &big,
            ..Scope::empty()
        };
        assert!(matches!(
            render_script_data("f({{input.b}})", ScriptLanguage::JavaScript, &scope),
            Err(Misplaced::TooLarge { .. })
        ));
    }

    #[test]
    fn text_rendering_and_with_values() {
        let outputs = json!({"a": {"list": [1, 2], "s": "x"}});
        let vars = json!({"n": 3});
        let scope = Scope {
            outputs: outputs.as_object().unwrap(),
            vars: vars.as_object().unwrap(),
            ..Scope::empty()
        };
        assert_eq!(with_value("{{outputs.a.list}}", &scope), json!([1, 2])); // GX7
        assert_eq!(with_value("n={{vars.n}}", &scope), json!("n=3")); // GX7
        assert_eq!(with_value("{{outputs.a.nope}}", &scope), Value::Null);
        let r = render(
            "[{{outputs.a.s}}|{{outputs.a.list}}|{{vars.x}}]",
            Mode::Text,
            &scope,
        );
        assert_eq!(r.text, "[x|[1,2]|]");
        assert_eq!(r.missing, vec!["{{vars.x}}".to_string()]);
        // a raw placeholder in text is ordinary text
        assert_eq!(
            render("[{{!outputs.a.s}}|{{!vars.x}}]", Mode::Text, &scope).text,
            "[x|]"
        );
    }

    #[test]
    fn loop_history_and_run_namespaces() {
        let mut history = BTreeMap::new();
        history.insert("b".to_string(), vec![json!({"i": 1}), json!({"i": 2})]);
        let mut loops = BTreeMap::new();
        loops.insert(
            "fix".to_string(),
            LoopView {
                iteration: 2,
                max: Some(3),
                previous_output: Some(json!({"f": "x"})),
            },
        );
        let scope = Scope {
            history: &history,
            loops: &loops,
            run_id: "r1",
            ..Scope::empty()
        };
        let r = render(
            "{{outputs.b.history.1.i}} {{loop.fix.iteration}}/{{loop.fix.max}} {{loop.fix.previous_output.f}} {{run.id}}",
            Mode::Text,
            &scope,
        );
        assert_eq!(r.text, "2 2/3 x r1");
    }

    #[test]
    fn attachments_namespace() {
        let attachments = json!({
            "spec": {"path": "/s/runs/r/attachments/spec/it's.pdf", "mime": "application/pdf", "size": "12",
                     "sha256": "ab", "url": ""},
            "logo": {"path": "", "mime": "", "size": "", "sha256": "", "url": ""}
        });
        let scope = Scope {
            attachments: attachments.as_object().unwrap(),
            ..Scope::empty()
        };
        // AT5: the path is one single-quoted word in a command
        assert_eq!(
            render_shell("wc -c {{attachments.spec}}", &scope).unwrap().text,
            r"wc -c '/s/runs/r/attachments/spec/it'\''s.pdf'"
        );
        assert_eq!(
            render_shell("echo {{attachments.spec.size}} {{attachments.logo}}", &scope)
                .unwrap()
                .text,
            "echo '12' ''"
        );
        let r = render(
            "[{{attachments.spec.path}}|{{attachments.spec.mime}}|{{attachments.spec.sha256}}|{{attachments.spec.url}}|{{attachments.logo}}]",
            Mode::Text,
            &scope,
        );
        assert_eq!(
            r.text,
            "[/s/runs/r/attachments/spec/it's.pdf|application/pdf|ab||]"
        );
        assert!(r.missing.is_empty());
        assert_eq!(with_value("{{attachments.spec.size}}", &scope), json!("12"));
        // an unknown field or a deeper path is missing
        let r = render(
            "{{attachments.spec.nope}}{{attachments.spec.path.x}}",
            Mode::Text,
            &scope,
        );
        assert_eq!(r.missing.len(), 2);
    }

    fn env_check(text: &str, container: bool, expect: &str, withheld: &[&str]) {
        let env: BTreeMap<String, String> = [
            ("HOME", "/home/jo"),
            ("ANTHROPIC_API_KEY", "sk-secret"),
            ("NODE_ENV", "test"),
            ("EMPTY", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut got_withheld = Vec::new();
        let withhold = |n: &str| container && iterion_envdeny::is_denied(n);
        let got = expand_command_env(text, &env, &withhold, &mut got_withheld);
        assert_eq!(got, expect, "{text:?}");
        assert_eq!(got_withheld, withheld, "{text:?}");
    }

    #[test]
    fn command_env_rules() {
        // TE8 (host)
        env_check("${HOME}", false, "/home/jo", &[]);
        env_check("${UNSET_X}", false, "${UNSET_X}", &[]);
        env_check("${UNSET_X:-d}", false, "d", &[]);
        env_check("${x.y}", false, "${x.y}", &[]);
        env_check("$HOME", false, "$HOME", &[]);
        env_check("${EMPTY:-d} ${EMPTY}.", false, "d .", &[]);
        env_check("a ${ unterminated", false, "a ${ unterminated", &[]);
        // TE9 (container)
        env_check(
            "${ANTHROPIC_API_KEY} ${ANTHROPIC_API_KEY:-x}",
            true,
            "${ANTHROPIC_API_KEY} ${ANTHROPIC_API_KEY:-x}",
            &["ANTHROPIC_API_KEY"],
        );
        env_check("${NODE_ENV}", true, "test", &[]);
        env_check("${ANTHROPIC_API_KEY}", false, "sk-secret", &[]);
    }
}
