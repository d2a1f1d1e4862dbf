//! A small POSIX shell lexer that says, at any point of a command text, in which quoting context the next
//! byte lands. Tool `command:` rendering uses it to quote each `{{…}}` value for the context it is inserted
//! in, and the compiler uses it to refuse a placeholder where no quoting is safe (`C130`).
//!
//! Contexts and what a value needs there:
//!
//! - [`ShellContext::Unquoted`] — an ordinary word (also inside `$(…)`, `<(…)`, `>(…)`, whose content is a
//!   fresh command): the value becomes single-quoted words;
//! - [`ShellContext::SingleQuoted`] — inside `'…'`: every `'` is written `'\''`;
//! - [`ShellContext::DoubleQuoted`] — inside `"…"` (and bash `$"…"`): `\`, `"`, `$` and `` ` `` get a
//!   backslash;
//! - [`ShellContext::Refused`] — backticks, `${…}`, `$((…))` / `((…))`, here-documents, comments, right after
//!   an unquoted `\` or `$`, bash `$'…'`, and anything after a construct this lexer cannot follow with
//!   certainty (a `case` inside `$(…)`, a `'` inside a double-quoted `${…}`): no quoting is attempted.
//!
//! ```
//! use iterion_spec::shell::{ShellContext, ShellLexer};
//! let mut l = ShellLexer::new();
//! l.feed("echo \"a $(printf %s ");
//! assert_eq!(l.context(), ShellContext::Unquoted);
//! l.feed(") b");
//! assert_eq!(l.context(), ShellContext::DoubleQuoted);
//! ```

/// Why a placeholder cannot be quoted at some point of a shell command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Inside `` `…` ``: backslashes are processed once more before the inner command is parsed.
    Backtick,
    /// Inside `${…}`: the word rules differ between shells and between operators.
    ParamExpansion,
    /// Inside `$((…))`, `((…))` or `$[…]`: the text is evaluated as arithmetic, which can run commands in bash.
    Arithmetic,
    /// Inside a here-document or its delimiter: a line of the value could end it early.
    HereDoc,
    /// Inside a `#` comment: a newline in the value would end the comment.
    Comment,
    /// Right after an unquoted or double-quoted `\`, which would escape the quoting itself.
    AfterBackslash,
    /// Right after `$` (or `$(` not yet known to be `$((`), which would combine with the value.
    AfterDollar,
    /// Inside bash `$'…'`, where backslash escapes are interpreted.
    AnsiCQuote,
    /// After a construct this lexer cannot follow with certainty.
    Ambiguous,
}

impl Refusal {
    /// Where the placeholder is, for a message ("inside backticks").
    pub fn describe(self) -> &'static str {
        match self {
            Refusal::Backtick => "inside backticks",
            Refusal::ParamExpansion => "inside a ${…} expansion",
            Refusal::Arithmetic => "inside an arithmetic expression",
            Refusal::HereDoc => "inside a here-document",
            Refusal::Comment => "inside a shell comment",
            Refusal::AfterBackslash => "right after a backslash",
            Refusal::AfterDollar => "right after '$'",
            Refusal::AnsiCQuote => "inside a $'…' string",
            Refusal::Ambiguous => {
                "after a construct whose quoting cannot be followed (a 'case' inside $(…), a quote or a '{' inside ${…}, or an unbalanced ')')"
            }
        }
    }
}

/// The quoting context at one point of a shell command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShellContext {
    /// An ordinary (unquoted) word.
    Unquoted,
    /// Inside `'…'`.
    SingleQuoted,
    /// Inside `"…"`.
    DoubleQuoted,
    /// No quoting is safe here.
    Refused(Refusal),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Frame {
    /// The command itself.
    Top,
    /// `$(…)`, `<(…)`, `>(…)`: a command inside; `parens` counts open `(` inside it.
    Cmd {
        parens: u32,
    },
    Single,
    Double,
    Backtick,
    /// `${…}`; `in_double` when the expansion itself is inside `"…"`.
    Param {
        in_double: bool,
    },
    /// `$((…))` or `((…))`; `parens` counts open `(` inside it.
    Arith {
        parens: u32,
    },
    /// bash `$[…]` arithmetic; `brackets` counts open `[` inside it.
    ArithBracket {
        brackets: u32,
    },
    AnsiC,
    Comment,
    /// The delimiter word after `<<` / `<<-`.
    HereDelim(Delim),
    /// A here-document body; `line` is the current line so far.
    HereBody {
        delim: String,
        strip_tabs: bool,
        line: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Delim {
    text: String,
    strip_tabs: bool,
    started: bool,
    quote: Option<char>,
    escaped: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    None,
    Backslash,
    Dollar,
    /// `$(` seen: `$((` (arithmetic) or `$(` (command)?
    DollarParen,
    /// An unquoted `(` at the start of a word: `((` is arithmetic.
    Paren,
    Lt,
    LtLt,
    Gt,
    /// `)` inside an arithmetic frame at depth 0: the next must be `)`.
    ArithClose,
}

/// A streaming lexer: [`feed`](Self::feed) text, ask [`context`](Self::context).
#[derive(Debug, Clone)]
pub struct ShellLexer {
    stack: Vec<Frame>,
    pending: Pending,
    word_start: bool,
    /// The current unquoted word, when it is made only of letters (to spot `case`).
    word: String,
    heredocs: Vec<(String, bool)>,
    poisoned: bool,
}

impl Default for ShellLexer {
    fn default() -> Self {
        Self::new()
    }
}

const META: &[char] = &[' ', '\t', '\n', ';', '&', '|', '(', ')', '<', '>'];

impl ShellLexer {
    /// A lexer at the start of a command.
    pub fn new() -> Self {
        ShellLexer {
            stack: vec![Frame::Top],
            pending: Pending::None,
            word_start: true,
            word: String::new(),
            heredocs: Vec::new(),
            poisoned: false,
        }
    }

    /// Consumes text.
    pub fn feed(&mut self, s: &str) {
        for c in s.chars() {
            self.step(c);
        }
    }

    /// The context the next byte would land in.
    pub fn context(&self) -> ShellContext {
        use ShellContext::{DoubleQuoted, Refused, SingleQuoted, Unquoted};
        if self.poisoned {
            return Refused(Refusal::Ambiguous);
        }
        match self.pending {
            Pending::Backslash => return Refused(Refusal::AfterBackslash),
            Pending::Dollar | Pending::DollarParen => return Refused(Refusal::AfterDollar),
            Pending::LtLt => return Refused(Refusal::HereDoc),
            Pending::ArithClose => return Refused(Refusal::Arithmetic),
            Pending::None | Pending::Paren | Pending::Lt | Pending::Gt => {}
        }
        match self.top() {
            Frame::Top | Frame::Cmd { .. } => Unquoted,
            Frame::Single => SingleQuoted,
            Frame::Double => DoubleQuoted,
            Frame::Backtick => Refused(Refusal::Backtick),
            Frame::Param { .. } => Refused(Refusal::ParamExpansion),
            Frame::Arith { .. } | Frame::ArithBracket { .. } => Refused(Refusal::Arithmetic),
            Frame::AnsiC => Refused(Refusal::AnsiCQuote),
            Frame::Comment => Refused(Refusal::Comment),
            Frame::HereDelim(_) | Frame::HereBody { .. } => Refused(Refusal::HereDoc),
        }
    }

    fn top(&self) -> &Frame {
        self.stack.last().unwrap_or(&Frame::Top)
    }

    fn pop(&mut self) {
        if self.stack.len() > 1 {
            self.stack.pop();
        }
    }

    fn push(&mut self, f: Frame) {
        self.stack.push(f);
    }

    fn in_command(&self) -> bool {
        matches!(self.top(), Frame::Top | Frame::Cmd { .. })
    }

    fn step(&mut self, c: char) {
        if self.poisoned {
            return;
        }
        if !self.resolve_pending(c) {
            self.frame_char(c);
        }
    }

    /// Resolves a pending lookahead with the next character; returns whether `c` was consumed by it.
    fn resolve_pending(&mut self, c: char) -> bool {
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => {}
            Pending::Backslash => {
                // the escaped character is literal (an escaped newline is a line continuation)
                if self.in_command() {
                    self.word_start = false;
                    self.word.clear();
                    self.word.push('\\');
                }
                return true;
            }
            Pending::Dollar => match c {
                '(' => {
                    self.pending = Pending::DollarParen;
                    return true;
                }
                '{' => {
                    let in_double = matches!(self.top(), Frame::Double);
                    self.push(Frame::Param { in_double });
                    return true;
                }
                '[' => {
                    self.push(Frame::ArithBracket { brackets: 0 });
                    return true;
                }
                '\'' if self.in_command() => {
                    self.push(Frame::AnsiC);
                    return true;
                }
                '"' if self.in_command() => {
                    self.push(Frame::Double);
                    return true;
                }
                _ => {}
            },
            Pending::DollarParen => {
                if c == '(' {
                    self.push(Frame::Arith { parens: 0 });
                    return true;
                }
                self.push(Frame::Cmd { parens: 0 });
                self.word_start = true;
                self.word.clear();
            }
            Pending::Paren => {
                if c == '(' && self.in_command() {
                    if let Some(Frame::Cmd { parens }) = self.stack.last_mut() {
                        *parens = parens.saturating_sub(1);
                    }
                    self.push(Frame::Arith { parens: 0 });
                    return true;
                }
            }
            Pending::Lt => match c {
                '<' => {
                    self.pending = Pending::LtLt;
                    return true;
                }
                '(' => {
                    self.push(Frame::Cmd { parens: 0 });
                    self.word_start = true;
                    return true;
                }
                _ => {}
            },
            Pending::LtLt => match c {
                '<' => return true, // a here-string: an ordinary word follows
                '-' => {
                    self.push(Frame::HereDelim(Delim {
                        strip_tabs: true,
                        ..Delim::default()
                    }));
                    return true;
                }
                _ => self.push(Frame::HereDelim(Delim::default())),
            },
            Pending::Gt => {
                if c == '(' {
                    self.push(Frame::Cmd { parens: 0 });
                    self.word_start = true;
                    return true;
                }
            }
            Pending::ArithClose => {
                if c == ')' {
                    self.pop();
                } else {
                    self.poisoned = true;
                }
                return true;
            }
        }
        false
    }

    /// A character in the context of the innermost frame.
    fn frame_char(&mut self, c: char) {
        match self.stack.last_mut() {
            Some(Frame::Top | Frame::Cmd { .. }) | None => self.command_char(c),
            Some(Frame::Single) => {
                if c == '\'' {
                    self.pop();
                }
            }
            Some(Frame::Double) => match c {
                '"' => self.pop(),
                '\\' => self.pending = Pending::Backslash,
                '$' => self.pending = Pending::Dollar,
                '`' => self.push(Frame::Backtick),
                _ => {}
            },
            Some(Frame::Backtick) => match c {
                '\\' => self.pending = Pending::Backslash,
                '`' => self.pop(),
                _ => {}
            },
            Some(Frame::Param { in_double }) => {
                let in_double = *in_double;
                match c {
                    '}' => self.pop(),
                    '\\' => self.pending = Pending::Backslash,
                    '$' => self.pending = Pending::Dollar,
                    '`' => self.push(Frame::Backtick),
                    '"' => self.push(Frame::Double),
                    '\'' if in_double => self.poisoned = true,
                    '\'' => self.push(Frame::Single),
                    // shells disagree on whether a nested '{' needs its own '}'
                    '{' => self.poisoned = true,
                    _ => {}
                }
            }
            Some(Frame::Arith { parens }) => match c {
                '(' => *parens += 1,
                ')' if *parens > 0 => *parens -= 1,
                ')' => self.pending = Pending::ArithClose,
                '\\' => self.pending = Pending::Backslash,
                '$' => self.pending = Pending::Dollar,
                '`' => self.push(Frame::Backtick),
                '"' => self.push(Frame::Double),
                '\'' => self.push(Frame::Single),
                _ => {}
            },
            Some(Frame::ArithBracket { brackets }) => match c {
                '[' => *brackets += 1,
                ']' if *brackets > 0 => *brackets -= 1,
                ']' => self.pop(),
                '\\' => self.pending = Pending::Backslash,
                '$' => self.pending = Pending::Dollar,
                '`' => self.push(Frame::Backtick),
                '"' => self.push(Frame::Double),
                '\'' => self.push(Frame::Single),
                _ => {}
            },
            Some(Frame::AnsiC) => match c {
                '\'' => self.pop(),
                '\\' => self.poisoned = true,
                _ => {}
            },
            Some(Frame::Comment) => {
                if c == '\n' {
                    self.pop();
                    self.command_char('\n');
                }
            }
            Some(Frame::HereDelim(_)) => self.here_delim_char(c),
            Some(Frame::HereBody { .. }) => self.here_body_char(c),
        }
    }

    /// A character of a here-document delimiter word.
    fn here_delim_char(&mut self, c: char) {
        let Some(Frame::HereDelim(d)) = self.stack.last_mut() else {
            return;
        };
        if let Some(q) = d.quote {
            if q == '"' && d.escaped {
                d.escaped = false;
                d.text.push(c);
            } else if c == q {
                d.quote = None;
            } else if q == '"' && c == '\\' {
                d.escaped = true;
            } else {
                d.text.push(c);
            }
            return;
        }
        if d.escaped {
            d.escaped = false;
            d.text.push(c);
            return;
        }
        match c {
            ' ' | '\t' if !d.started => {}
            '\'' | '"' => {
                d.started = true;
                d.quote = Some(c);
            }
            '\\' => {
                d.started = true;
                d.escaped = true;
            }
            c if META.contains(&c) => {
                let d = std::mem::take(d);
                self.pop();
                if d.text.is_empty() {
                    self.poisoned = true;
                    return;
                }
                self.heredocs.push((d.text, d.strip_tabs));
                self.command_char(c);
            }
            '$' | '`' => self.poisoned = true, // a computed delimiter
            c => {
                d.started = true;
                d.text.push(c);
            }
        }
    }

    /// A character of a here-document body: a line equal to the delimiter ends it.
    fn here_body_char(&mut self, c: char) {
        let Some(Frame::HereBody {
            delim,
            strip_tabs,
            line,
        }) = self.stack.last_mut()
        else {
            return;
        };
        if c != '\n' {
            line.push(c);
            return;
        }
        let l = if *strip_tabs {
            line.trim_start_matches('\t')
        } else {
            line.as_str()
        };
        if l == delim {
            self.pop();
            self.next_heredoc();
        } else {
            line.clear();
        }
    }

    fn next_heredoc(&mut self) {
        if !self.heredocs.is_empty() {
            let (delim, strip_tabs) = self.heredocs.remove(0);
            self.push(Frame::HereBody {
                delim,
                strip_tabs,
                line: String::new(),
            });
        }
    }

    /// A character of an unquoted command (`Top` or `Cmd`).
    fn command_char(&mut self, c: char) {
        let word_start = std::mem::replace(&mut self.word_start, false);
        let ends_word = META.contains(&c);
        if ends_word {
            if self.word == "case" && matches!(self.top(), Frame::Cmd { .. }) {
                // a case pattern's ')' would look like the end of the substitution
                self.poisoned = true;
                return;
            }
            self.word.clear();
        } else if c.is_ascii_alphabetic() && (word_start || !self.word.is_empty()) && self.word.len() < 8 {
            self.word.push(c);
        } else {
            self.word.clear();
            self.word.push('\0');
        }
        match c {
            '\'' => self.push(Frame::Single),
            '"' => self.push(Frame::Double),
            '`' => self.push(Frame::Backtick),
            '\\' => self.pending = Pending::Backslash,
            '$' => self.pending = Pending::Dollar,
            '#' if word_start => self.push(Frame::Comment),
            '<' => {
                self.pending = Pending::Lt;
                self.word_start = true;
            }
            '>' => {
                self.pending = Pending::Gt;
                self.word_start = true;
            }
            '(' => {
                if let Some(Frame::Cmd { parens }) = self.stack.last_mut() {
                    *parens += 1;
                }
                if word_start {
                    self.pending = Pending::Paren;
                }
                self.word_start = true;
            }
            ')' => {
                match self.stack.last_mut() {
                    Some(Frame::Cmd { parens }) if *parens > 0 => *parens -= 1,
                    Some(Frame::Cmd { .. }) => self.pop(),
                    _ => {}
                }
                self.word_start = true;
            }
            '\n' => {
                self.word_start = true;
                self.next_heredoc();
            }
            _ if ends_word => self.word_start = true,
            _ => {}
        }
    }
}

/// The context of every non-raw placeholder of a tool command template, in order: `(start, end, context)`
/// byte offsets of the `{{…}}` text. Placeholder values are assumed to keep the context they are rendered in
/// (which the renderer guarantees); raw placeholders are assumed to insert nothing that changes it.
pub fn placeholder_contexts(template: &str) -> Vec<(usize, usize, ShellContext)> {
    let mut out = Vec::new();
    let mut lexer = ShellLexer::new();
    let mut at = 0;
    crate::template::walk(
        template,
        |p| {
            lexer.feed(&template[at..p.start]);
            if !p.raw {
                out.push((p.start, p.end, lexer.context()));
            }
            at = p.end;
        },
        |_| {},
    );
    out
}

#[cfg(test)]
mod tests {
    use super::Refusal::*;
    use super::ShellContext::*;
    use super::*;

    fn ctx(before: &str) -> ShellContext {
        let mut l = ShellLexer::new();
        l.feed(before);
        l.context()
    }

    #[test]
    fn contexts() {
        let cases: &[(&str, ShellContext)] = &[
            ("echo ", Unquoted),
            ("echo a", Unquoted),
            ("echo --x=", Unquoted),
            ("echo 'a", SingleQuoted),
            ("echo 'a\"' ", Unquoted),
            ("echo \"a", DoubleQuoted),
            ("echo \"a\\\"", DoubleQuoted),
            ("echo \"a'", DoubleQuoted),
            ("echo \"$(echo ", Unquoted),
            ("echo \"$(echo \"", DoubleQuoted),
            ("echo \"$(echo \"x\") ", DoubleQuoted),
            ("echo $(echo (a) ", Unquoted),
            ("echo $(echo $(ls) ", Unquoted),
            ("echo <(cat ", Unquoted),
            ("echo `echo ", Refused(Backtick)),
            ("echo \"`echo ", Refused(Backtick)),
            ("echo `echo \\` ", Refused(Backtick)),
            ("echo `echo \\`` ", Unquoted),
            ("echo `a` ", Unquoted),
            ("echo ${x:-", Refused(ParamExpansion)),
            ("echo \"${x:-", Refused(ParamExpansion)),
            ("echo ${x:-a} ", Unquoted),
            ("echo ${x:-'}'} ", Unquoted),
            ("echo \"${x:-'}'}\" ", Refused(Ambiguous)),
            ("echo $((1 + ", Refused(Arithmetic)),
            ("(( 1 + ", Refused(Arithmetic)),
            ("echo $(( (1) + 2 )) ", Unquoted),
            ("echo $[1 + ", Refused(Arithmetic)),
            ("echo $[a[1]] ", Unquoted),
            ("for ((i = 0; i < ", Refused(Arithmetic)),
            ("echo ${x:-{a}} ", Refused(Ambiguous)),
            ("echo $", Refused(AfterDollar)),
            ("echo \"$", Refused(AfterDollar)),
            ("echo $(", Refused(AfterDollar)),
            ("echo \\", Refused(AfterBackslash)),
            ("echo \"\\", Refused(AfterBackslash)),
            ("echo '\\", SingleQuoted),
            ("echo $'a", Refused(AnsiCQuote)),
            ("echo $'a' ", Unquoted),
            ("echo $\"a", DoubleQuoted),
            ("# ", Refused(Comment)),
            ("echo a # ", Refused(Comment)),
            ("echo a#", Unquoted),
            ("echo a # x\necho ", Unquoted),
            ("cat <<EOF\n", Refused(HereDoc)),
            ("cat <<EOF ", Unquoted),
            ("cat <<", Refused(HereDoc)),
            ("cat << 'E O'\nx\n", Refused(HereDoc)),
            ("cat << 'E O'\nx\nE O\necho ", Unquoted),
            ("cat <<-EOF\n\tx\n\tEOF\necho ", Unquoted),
            ("cat <<A <<B\nA\n", Refused(HereDoc)),
            ("cat <<A <<B\nA\nB\n", Unquoted),
            ("cat <<<", Unquoted),
            ("x=$(case a in a) echo ", Refused(Ambiguous)),
            ("case a in a) echo ", Unquoted),
            ("echo $(echo case) ", Refused(Ambiguous)),
            ("echo $(echo casex) ", Unquoted),
            ("echo > ", Unquoted),
        ];
        for (before, want) in cases {
            assert_eq!(ctx(before), *want, "{before:?}");
        }
    }

    #[test]
    fn contexts_of_placeholders() {
        let got: Vec<ShellContext> = placeholder_contexts(
            "echo {{input.a}} \"{{input.b}}\" '{{input.c}}' `{{input.d}}` {{!input.e}} ${x:-{{input.f}}}",
        )
        .into_iter()
        .map(|(_, _, c)| c)
        .collect();
        assert_eq!(
            got,
            [
                Unquoted,
                DoubleQuoted,
                SingleQuoted,
                Refused(Backtick),
                Refused(ParamExpansion)
            ]
        );
    }
}
