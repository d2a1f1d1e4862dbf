//! A small lexer for JavaScript and Python tool scripts that says, at any point of a script, whether the next
//! byte lands in code or inside a literal or a comment.
//!
//! A placeholder of a `js` or `py` script stands for an expression: the runtime replaces it by code that reads
//! the value from the script's environment, so the value's bytes never become source text. That is only
//! meaningful where an expression may stand; inside a string, a template literal's text, a regular expression
//! literal or a comment the placeholder is refused (`C131`, with its position) instead of being replaced.
//!
//! The lexer follows strings (`'…'`, `"…"`, Python's triple-quoted strings and every prefixed form, f-strings
//! included, whose `{…}` fields count as string), JavaScript template literals with their `${…}` nesting,
//! line comments (ended in JavaScript by any line terminator, U+2028 and U+2029 included), block comments,
//! a hashbang line and, by the usual heuristic on the previous token, JavaScript regular expression literals.
//! Where it guesses wrong the cost is a refusal or a placeholder replaced inside a literal (a wrong result),
//! never a value read as code: the replacement text is iterion's own and the value is data either way.
//!
//! ```
//! use iterion_spec::script::{ScriptContext, ScriptLanguage, ScriptLexer};
//! let mut l = ScriptLexer::new(ScriptLanguage::JavaScript);
//! l.feed("const s = `a ${");
//! assert_eq!(l.context(), ScriptContext::Code);
//! l.feed("1} b");
//! assert!(matches!(l.context(), ScriptContext::Refused(_)));
//! ```

/// The languages whose scripts receive values as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptLanguage {
    /// `js`, `node`.
    JavaScript,
    /// `py`, `python`, `python3`.
    Python,
}

impl ScriptLanguage {
    /// The language of a tool's `language:` value; `None` for the shells and unknown names.
    pub fn of(language: &str) -> Option<ScriptLanguage> {
        match language {
            "js" | "node" => Some(ScriptLanguage::JavaScript),
            "py" | "python" | "python3" => Some(ScriptLanguage::Python),
            _ => None,
        }
    }

    /// `js` or `py`, for messages.
    pub fn short(self) -> &'static str {
        match self {
            ScriptLanguage::JavaScript => "js",
            ScriptLanguage::Python => "py",
        }
    }
}

/// Why a placeholder cannot stand at some point of a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptRefusal {
    /// Inside a string literal (a Python f-string included).
    String,
    /// Inside the text of a JavaScript template literal (outside its `${…}`).
    Template,
    /// Inside a JavaScript regular expression literal.
    Regex,
    /// Inside a comment.
    Comment,
}

impl ScriptRefusal {
    /// Where the placeholder is, for a message ("inside a string literal").
    pub fn describe(self) -> &'static str {
        match self {
            ScriptRefusal::String => "inside a string literal",
            ScriptRefusal::Template => "inside the text of a template literal",
            ScriptRefusal::Regex => "inside a regular expression literal",
            ScriptRefusal::Comment => "inside a comment",
        }
    }
}

/// The context at one point of a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptContext {
    /// Code: an expression may stand here.
    Code,
    /// Inside a literal or a comment.
    Refused(ScriptRefusal),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Code,
    /// A single-line string; `escaped` after a backslash.
    Str {
        quote: char,
        escaped: bool,
    },
    /// Python: `count` opening quotes seen (1 or 2): `''` is an empty string, `'''` opens a triple-quoted one.
    PyOpen {
        quote: char,
        count: u8,
    },
    /// A Python triple-quoted string; `run` closing quotes seen in a row.
    Triple {
        quote: char,
        escaped: bool,
        run: u8,
    },
    /// A JavaScript template literal's text; `dollar` right after an unescaped `$`.
    Template {
        escaped: bool,
        dollar: bool,
    },
    LineComment,
    /// `star` right after a `*`.
    BlockComment {
        star: bool,
    },
    /// JavaScript: `/` seen in code (a comment, a regular expression or a division).
    Slash,
    /// A JavaScript regular expression literal; `class` inside `[…]`.
    Regex {
        escaped: bool,
        class: bool,
    },
}

/// A streaming lexer: [`feed`](Self::feed) text, ask [`context`](Self::context). Linear in its input.
#[derive(Debug, Clone)]
pub struct ScriptLexer {
    lang: ScriptLanguage,
    state: State,
    /// JavaScript: for each open `${` of a template literal, the `{` opened inside it and not yet closed.
    templates: Vec<u32>,
    /// JavaScript: whether a `/` here starts a regular expression (after an operator or a keyword).
    regex_ok: bool,
    /// JavaScript: the identifier being read (up to 10 characters), to spot keywords.
    word: String,
    word_long: bool,
    /// Nothing read yet (a hashbang line may follow).
    at_start: bool,
}

/// Keywords after which a `/` starts a regular expression.
const REGEX_KEYWORDS: &[&str] = &[
    "return",
    "typeof",
    "instanceof",
    "in",
    "of",
    "new",
    "delete",
    "void",
    "throw",
    "case",
    "do",
    "else",
    "yield",
    "await",
];

fn js_line_end(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

fn ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

impl ScriptLexer {
    /// A lexer at the start of a script.
    pub fn new(lang: ScriptLanguage) -> Self {
        ScriptLexer {
            lang,
            state: State::Code,
            templates: Vec::new(),
            regex_ok: true,
            word: String::new(),
            word_long: false,
            at_start: true,
        }
    }

    /// Consumes text.
    pub fn feed(&mut self, s: &str) {
        for c in s.chars() {
            self.step(c);
        }
    }

    /// The context the next byte would land in.
    pub fn context(&self) -> ScriptContext {
        use ScriptContext::{Code, Refused};
        match self.state {
            State::Code => Code,
            State::PyOpen { count: 2, .. } => Code,
            State::Str { .. } | State::PyOpen { .. } | State::Triple { .. } => Refused(ScriptRefusal::String),
            State::Template { .. } => Refused(ScriptRefusal::Template),
            State::LineComment | State::BlockComment { .. } => Refused(ScriptRefusal::Comment),
            State::Slash if self.regex_ok => Refused(ScriptRefusal::Regex),
            State::Slash => Code,
            State::Regex { .. } => Refused(ScriptRefusal::Regex),
        }
    }

    fn step(&mut self, c: char) {
        let at_start = std::mem::replace(&mut self.at_start, false);
        match self.state {
            State::Code => {
                if at_start && c == '#' && self.lang == ScriptLanguage::JavaScript {
                    // a hashbang line
                    self.state = State::LineComment;
                } else {
                    self.code(c);
                }
            }
            State::Str { quote, escaped } => {
                self.state = if escaped {
                    State::Str {
                        quote,
                        escaped: false,
                    }
                } else if c == '\\' {
                    State::Str { quote, escaped: true }
                } else if c == quote || c == '\n' || c == '\r' {
                    // a line break ends an unterminated string (a syntax error the interpreter reports)
                    self.regex_ok = false;
                    State::Code
                } else {
                    State::Str {
                        quote,
                        escaped: false,
                    }
                };
            }
            State::PyOpen { quote, count } => {
                if c == quote && count == 1 {
                    self.state = State::PyOpen { quote, count: 2 };
                } else if c == quote {
                    self.state = State::Triple {
                        quote,
                        escaped: false,
                        run: 0,
                    };
                } else if count == 2 {
                    // `''`: an empty string, then code
                    self.state = State::Code;
                    self.code(c);
                } else {
                    self.state = State::Str {
                        quote,
                        escaped: false,
                    };
                    self.step(c);
                }
            }
            State::Triple { quote, escaped, run } => self.state = triple(quote, escaped, run, c),
            State::Template { escaped, dollar } => {
                self.state = if escaped {
                    State::Template {
                        escaped: false,
                        dollar: false,
                    }
                } else if c == '\\' {
                    State::Template {
                        escaped: true,
                        dollar: false,
                    }
                } else if c == '`' {
                    self.regex_ok = false;
                    State::Code
                } else if c == '{' && dollar {
                    self.templates.push(0);
                    self.regex_ok = true;
                    State::Code
                } else {
                    State::Template {
                        escaped: false,
                        dollar: c == '$',
                    }
                };
            }
            State::LineComment => {
                let end = match self.lang {
                    ScriptLanguage::JavaScript => js_line_end(c),
                    ScriptLanguage::Python => c == '\n' || c == '\r',
                };
                if end {
                    self.state = State::Code;
                }
            }
            State::BlockComment { star } => {
                self.state = if star && c == '/' {
                    State::Code
                } else {
                    State::BlockComment { star: c == '*' }
                };
            }
            State::Slash => match c {
                '/' => self.state = State::LineComment,
                '*' => self.state = State::BlockComment { star: false },
                _ if self.regex_ok => {
                    self.state = State::Regex {
                        escaped: false,
                        class: false,
                    };
                    self.step(c);
                }
                _ => {
                    // a division
                    self.state = State::Code;
                    self.regex_ok = true;
                    self.code(c);
                }
            },
            State::Regex { escaped, class } => self.regex(escaped, class, c),
        }
    }

    /// A character of a JavaScript regular expression literal.
    fn regex(&mut self, escaped: bool, class: bool, c: char) {
        self.state = if escaped {
            State::Regex {
                escaped: false,
                class,
            }
        } else if c == '\\' {
            State::Regex { escaped: true, class }
        } else if js_line_end(c) {
            // not a regular expression after all (the heuristic guessed wrong): back to code
            State::Code
        } else if c == '[' {
            State::Regex {
                escaped: false,
                class: true,
            }
        } else if c == ']' {
            State::Regex {
                escaped: false,
                class: false,
            }
        } else if c == '/' && !class {
            self.regex_ok = false;
            State::Code
        } else {
            State::Regex {
                escaped: false,
                class,
            }
        };
    }

    /// A character of code.
    fn code(&mut self, c: char) {
        if self.lang == ScriptLanguage::Python {
            match c {
                '#' => self.state = State::LineComment,
                '\'' | '"' => self.state = State::PyOpen { quote: c, count: 1 },
                _ => {}
            }
            return;
        }
        if ident_char(c) {
            if self.word.chars().count() < 10 {
                self.word.push(c);
            } else {
                self.word_long = true;
            }
            self.regex_ok = false;
            return;
        }
        if !self.word.is_empty() {
            let keyword = !self.word_long
                && REGEX_KEYWORDS.contains(&self.word.as_str())
                && !self.word.starts_with(|d: char| d.is_ascii_digit());
            self.word.clear();
            self.word_long = false;
            self.regex_ok = keyword;
        }
        match c {
            '\'' | '"' => {
                self.state = State::Str {
                    quote: c,
                    escaped: false,
                }
            }
            '`' => {
                self.state = State::Template {
                    escaped: false,
                    dollar: false,
                }
            }
            '/' => self.state = State::Slash,
            '{' => {
                if let Some(open) = self.templates.last_mut() {
                    *open += 1;
                }
                self.regex_ok = true;
            }
            '}' => match self.templates.last_mut() {
                Some(0) => {
                    self.templates.pop();
                    self.state = State::Template {
                        escaped: false,
                        dollar: false,
                    };
                }
                Some(open) => {
                    *open -= 1;
                    self.regex_ok = false;
                }
                None => self.regex_ok = false,
            },
            ')' | ']' => self.regex_ok = false,
            c if c.is_whitespace() => {}
            _ => self.regex_ok = true,
        }
    }
}

/// The next state of a Python triple-quoted string.
fn triple(quote: char, escaped: bool, run: u8, c: char) -> State {
    if escaped {
        State::Triple {
            quote,
            escaped: false,
            run: 0,
        }
    } else if c == '\\' {
        State::Triple {
            quote,
            escaped: true,
            run: 0,
        }
    } else if c == quote && run == 2 {
        State::Code
    } else if c == quote {
        State::Triple {
            quote,
            escaped: false,
            run: run + 1,
        }
    } else {
        State::Triple {
            quote,
            escaped: false,
            run: 0,
        }
    }
}

/// The context of every non-raw placeholder of a script template, in order: `(start, end, context)` byte
/// offsets of the `{{…}}` text. Each placeholder is taken to be replaced by one expression (as the runtime
/// does); raw placeholders are taken to insert nothing that changes the context.
pub fn placeholder_contexts(lang: ScriptLanguage, template: &str) -> Vec<(usize, usize, ScriptContext)> {
    let mut out = Vec::new();
    let mut lexer = ScriptLexer::new(lang);
    let mut at = 0;
    crate::template::walk(
        template,
        |p| {
            lexer.feed(&template[at..p.start]);
            if !p.raw {
                let ctx = lexer.context();
                out.push((p.start, p.end, ctx));
                if ctx == ScriptContext::Code {
                    lexer.feed("(0)");
                }
            }
            at = p.end;
        },
        |_| {},
    );
    out
}

#[cfg(test)]
mod tests {
    use super::ScriptContext::*;
    use super::ScriptLanguage::{JavaScript, Python};
    use super::ScriptRefusal::*;
    use super::*;
    use proptest::prelude::*;

    fn check(lang: ScriptLanguage, before: &str, want: ScriptContext) {
        let mut l = ScriptLexer::new(lang);
        l.feed(before);
        assert_eq!(l.context(), want, "{lang:?} {before:?}");
    }

    #[test]
    fn javascript_contexts() {
        let cases: &[(&str, ScriptContext)] = &[
            ("const x = ", Code),
            ("f(", Code),
            ("const s = 'a", Refused(String)),
            ("const s = \"a\\\"", Refused(String)),
            ("const s = 'a\\'' + ", Code),
            ("const s = `a", Refused(Template)),
            ("const s = `a ${", Code),
            ("const s = `a ${ {k: ", Code),
            ("const s = `a ${ {k: 1} ", Code),
            ("const s = `a ${ {k: 1} }", Refused(Template)),
            ("const s = `a ${ `b ${", Code),
            ("const s = `a ${ `b ${1}", Refused(Template)),
            ("const s = `a ${ `b ${1}` ", Code),
            ("const s = `a $ {", Refused(Template)),
            ("const s = `a \\${", Refused(Template)),
            ("const s = `a` + ", Code),
            ("// c ", Refused(Comment)),
            ("// c\u{2028}", Code),
            ("// c\u{2029}", Code),
            ("// c\r", Code),
            ("/* a ", Refused(Comment)),
            ("/* a * / ", Refused(Comment)),
            ("/* a */ ", Code),
            ("#!/usr/bin/env node\n", Code),
            ("#!/usr/bin/env node", Refused(Comment)),
            ("x = /ab", Refused(Regex)),
            ("x = /a[/]", Refused(Regex)),
            ("x = /a[/]b/ + ", Code),
            ("x = /a\\/", Refused(Regex)),
            ("x = a / ", Code),
            ("x = a /", Code),
            ("x = f(a) / ", Code),
            ("return /", Refused(Regex)),
            ("returns /", Code),
            ("x = /'/; y = ", Code),
            ("x = 1 / 2; y = '", Refused(String)),
            ("'\u{2028}", Refused(String)),
        ];
        for (before, want) in cases {
            check(JavaScript, before, *want);
        }
    }

    #[test]
    fn python_contexts() {
        let cases: &[(&str, ScriptContext)] = &[
            ("x = ", Code),
            ("x = 'a", Refused(String)),
            ("x = \"a", Refused(String)),
            ("x = 'a\\'", Refused(String)),
            ("x = 'a' + ", Code),
            ("x = ''", Code),
            ("x = '' + ", Code),
            ("x = '''", Refused(String)),
            ("x = '''a'", Refused(String)),
            ("x = '''a''", Refused(String)),
            ("x = '''a'''", Code),
            ("x = \"\"\"a\n\"b\"\n", Refused(String)),
            ("x = \"\"\"a\n\"b\"\n\"\"\" + ", Code),
            ("x = '''a\\'''", Refused(String)),
            ("x = '''a\\''''", Code),
            ("x = f'a {", Refused(String)),
            ("x = f'a {1}' + ", Code),
            ("x = rb'a\\'", Refused(String)),
            ("x = 1 # c", Refused(Comment)),
            ("x = 1 # c\n", Code),
            ("x = '#' + ", Code),
            ("x = 'a\n", Code),
            ("x = 1 // ", Code),
            ("x = 1 / ", Code),
            ("x = `", Code),
        ];
        for (before, want) in cases {
            check(Python, before, *want);
        }
    }

    #[test]
    fn placeholders_of_a_script() {
        let ctx = |lang, t: &str| -> Vec<ScriptContext> {
            placeholder_contexts(lang, t)
                .into_iter()
                .map(|(_, _, c)| c)
                .collect()
        };
        assert_eq!(
            ctx(
                JavaScript,
                "f({{input.a}}, '{{input.b}}', `{{input.c}} ${ {{input.d}} }`) // {{input.e}}\n{{!input.f}} x = /{{input.g}}/"
            ),
            [
                Code,
                Refused(String),
                Refused(Template),
                Code,
                Refused(Comment),
                Refused(Regex)
            ]
        );
        assert_eq!(
            ctx(
                Python,
                "f({{input.a}}, '{{input.b}}', f\"{ {{input.c}} }\", \"\"\"\n{{input.d}}\"\"\") # {{input.e}}\nx = {{input.f}}"
            ),
            [
                Code,
                Refused(String),
                Refused(String),
                Refused(String),
                Refused(Comment),
                Code
            ]
        );
        // after an accepted placeholder (an expression) a '/' is a division
        assert_eq!(ctx(JavaScript, "x = {{input.a}} / {{input.b}}"), [Code, Code]);
    }

    proptest! {
        /// Any input, either language: the lexer never panics.
        #[test]
        fn never_panics(
            s in "[ -~\n\r\u{2028}'\"`/*#{}$\\\\\\[\\]]{0,80}",
            py in any::<bool>(),
        ) {
            let lang = if py { Python } else { JavaScript };
            let mut l = ScriptLexer::new(lang);
            l.feed(&s);
            let _ = l.context();
        }

        /// Whatever a string or template literal holds (any text with its quote and backslashes escaped, line
        /// terminators, comment and regex openers, `{{…}}`), every point inside is refused and the closed
        /// literal is followed by code.
        #[test]
        fn a_literal_is_refused_inside_and_code_after(
            body in "[ -~\n\u{2028}\u{2029}]{0,40}",
            kind in 0usize..4,
        ) {
            let (lang, open, close, refusal) = [
                (JavaScript, "x = '", "'", String),
                (JavaScript, "x = `", "`", Template),
                (Python, "x = \"", "\"", String),
                (Python, "x = '''", "'''", String),
            ][kind];
            let quote = close.chars().next().unwrap();
            let single_line = kind == 0 || kind == 2;
            let mut text = std::string::String::from(open);
            for c in body.chars() {
                match c {
                    '\\' => text.push_str("\\\\"),
                    '\n' if single_line => text.push_str("\\n"),
                    '$' if kind == 1 => text.push_str("\\$"),
                    c if c == quote => {
                        text.push('\\');
                        text.push(c);
                    }
                    c => text.push(c),
                }
                let mut l = ScriptLexer::new(lang);
                l.feed(&text);
                prop_assert_eq!(l.context(), Refused(refusal), "{:?}", text);
            }
            text.push_str(close);
            text.push_str(" + ");
            let mut l = ScriptLexer::new(lang);
            l.feed(&text);
            prop_assert_eq!(l.context(), Code, "{:?}", text);
        }
    }
}
