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
//!   certainty (a `case` inside `$(…)`, a `'` inside a double-quoted `${…}`, a here-document bash and dash
//!   read differently): no quoting is attempted.
//!
//! Line continuations (`\<newline>`) are removed first, wherever the shell removes them, and here-documents
//! follow POSIX. The cost is constant per character.
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
                "after a construct whose quoting cannot be followed (a 'case' inside $(…), a quote or a '{' inside ${…}, an unbalanced ')', or a here-document that shells read differently)"
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
    /// A here-document body.
    HereBody(Body),
}

/// A pending here-document: its delimiter, `<<-`, and whether any part of the delimiter word was quoted (the
/// body is then taken literally).
#[derive(Debug, Clone, PartialEq, Eq)]
struct HereDoc {
    delim: String,
    strip_tabs: bool,
    quoted: bool,
}

/// A here-document body being read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Body {
    doc: HereDoc,
    /// The current logical line after its leading tabs (`<<-`), kept only up to one byte longer than the
    /// delimiter: a longer line cannot end the document.
    line: String,
    /// Still at the start of the logical line (leading tabs are stripped there only).
    line_start: bool,
    /// The logical line was joined from several physical lines by `\<newline>`.
    continued: bool,
    /// Unquoted body: right after an unescaped `\` / `$`.
    escaped: bool,
    dollar: bool,
    /// Unquoted body: `$(`, `${` or `` ` `` constructs opened on this line and not closed (their own
    /// brackets counted); a quote, a backslash or a line end inside one is beyond this lexer.
    depth: u32,
    tick: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Delim {
    text: String,
    strip_tabs: bool,
    started: bool,
    quote: Option<char>,
    escaped: bool,
    /// A quote or a backslash was part of the word.
    quoted: bool,
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
    /// Here-documents whose body starts at the next unquoted newline, in order.
    heredocs: std::collections::VecDeque<HereDoc>,
    /// A `\` that may start a line continuation (`\<newline>`, removed before anything else reads the text).
    held: bool,
    poisoned: bool,
    /// Units of work done, to check that the cost is linear in the input.
    #[cfg(test)]
    ops: usize,
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
            heredocs: std::collections::VecDeque::new(),
            held: false,
            poisoned: false,
            #[cfg(test)]
            ops: 0,
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
        if self.held {
            return Refused(match self.top() {
                Frame::HereDelim(_) | Frame::HereBody(_) => Refusal::HereDoc,
                Frame::Backtick => Refusal::Backtick,
                _ => Refusal::AfterBackslash,
            });
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
            Frame::HereDelim(_) | Frame::HereBody(_) => Refused(Refusal::HereDoc),
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

    /// One character: a line continuation (`\<newline>` wherever the shell removes it: everywhere but inside
    /// `'…'`, `$'…'`, a comment and a literal here-document) is removed before the lexer proper sees the text,
    /// as the shell does, so `$\<newline>(`, a keyword, `<<` or a `#` split by one read as if it were not
    /// there.
    fn step(&mut self, c: char) {
        if self.poisoned {
            return;
        }
        #[cfg(test)]
        {
            self.ops += 1;
        }
        if std::mem::take(&mut self.held) {
            if c == '\n' {
                self.continuation();
                return;
            }
            self.lex('\\');
            self.lex(c);
            return;
        }
        if c == '\\' && self.continues() {
            self.held = true;
            return;
        }
        self.lex(c);
    }

    /// Whether a `\<newline>` here is a line continuation.
    fn continues(&self) -> bool {
        match self.top() {
            Frame::Single | Frame::AnsiC | Frame::Comment => false,
            Frame::HereDelim(d) => d.quote != Some('\''),
            Frame::HereBody(b) => !b.doc.quoted,
            _ => true,
        }
    }

    /// A line continuation was removed; where shells differ on what it means, nothing after it is trusted.
    fn continuation(&mut self) {
        match self.stack.last_mut() {
            // bash removes it inside a double-quoted delimiter, dash keeps it
            Some(Frame::HereDelim(d)) if d.quote == Some('"') => self.poisoned = true,
            Some(Frame::HereDelim(d)) => d.started = true,
            Some(Frame::HereBody(b)) => {
                if b.depth > 0 || b.escaped || b.dollar {
                    self.poisoned = true;
                }
                b.continued = true;
            }
            _ => {}
        }
    }

    fn lex(&mut self, c: char) {
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
            Some(Frame::HereBody(_)) => self.here_body_char(c),
        }
    }

    /// A character of a here-document delimiter word.
    fn here_delim_char(&mut self, c: char) {
        let Some(Frame::HereDelim(d)) = self.stack.last_mut() else {
            return;
        };
        if let Some(q) = d.quote {
            if c == '\n' {
                // a delimiter holding a line break: no line can equal it
                self.poisoned = true;
                return;
            }
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
                d.quoted = true;
                d.quote = Some(c);
            }
            '\\' => {
                d.started = true;
                d.quoted = true;
                d.escaped = true;
            }
            c if META.contains(&c) => {
                let d = std::mem::take(d);
                self.pop();
                if d.text.is_empty() {
                    self.poisoned = true;
                    return;
                }
                #[cfg(test)]
                {
                    self.ops += d.text.len();
                }
                self.heredocs.push_back(HereDoc {
                    delim: d.text,
                    strip_tabs: d.strip_tabs,
                    quoted: d.quoted,
                });
                self.command_char(c);
            }
            '$' | '`' => self.poisoned = true, // a computed delimiter
            c => {
                d.started = true;
                d.text.push(c);
            }
        }
    }

    /// A character of a here-document body: a logical line equal to the delimiter (after its leading tabs
    /// with `<<-`) ends it. In an unquoted body `$(…)`, `${…}` and backticks are expanded, and bash reads
    /// them with its parser while it looks for the delimiter: one that does not close on its line, or holds a
    /// quote or a backslash, is beyond this lexer.
    fn here_body_char(&mut self, c: char) {
        let Some(Frame::HereBody(b)) = self.stack.last_mut() else {
            return;
        };
        if c == '\n' {
            if b.depth > 0 || b.escaped {
                self.poisoned = true;
                return;
            }
            #[cfg(test)]
            {
                self.ops += b.line.len();
            }
            if b.line == b.doc.delim {
                if b.continued {
                    // bash ends the document on a joined line equal to the delimiter, dash does not
                    self.poisoned = true;
                    return;
                }
                self.pop();
                self.next_heredoc();
            } else {
                b.line.clear();
                b.line_start = true;
                b.continued = false;
                b.dollar = false;
            }
            return;
        }
        if b.line_start && b.doc.strip_tabs && c == '\t' {
            return;
        }
        b.line_start = false;
        if b.line.len() <= b.doc.delim.len() {
            b.line.push(c);
        }
        if b.doc.quoted {
            return;
        }
        let dollar = std::mem::take(&mut b.dollar);
        if std::mem::take(&mut b.escaped) {
            return;
        }
        match c {
            '\\' | '\'' | '"' if b.depth > 0 => self.poisoned = true,
            '\\' => b.escaped = true,
            '$' => b.dollar = true,
            '(' | '{' if dollar || b.depth > 0 => b.depth += 1,
            ')' | '}' if b.depth > u32::from(b.tick) => b.depth -= 1,
            '`' if b.tick => {
                b.tick = false;
                b.depth = b.depth.saturating_sub(1);
            }
            '`' if b.depth > 0 => self.poisoned = true,
            '`' => {
                b.tick = true;
                b.depth += 1;
            }
            _ => {}
        }
    }

    fn next_heredoc(&mut self) {
        if let Some(doc) = self.heredocs.pop_front() {
            self.push(Frame::HereBody(Body {
                line_start: true,
                doc,
                line: String::new(),
                continued: false,
                escaped: false,
                dollar: false,
                depth: 0,
                tick: false,
            }));
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
    use proptest::prelude::*;

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
            // line continuations, removed before anything else reads the text
            ("echo \"$\\\n(", Refused(AfterDollar)),
            ("echo \"$\\\n(x ", Unquoted),
            ("echo \"$\\\n(x) ", DoubleQuoted),
            ("echo $\\\n{x:-", Refused(ParamExpansion)),
            ("echo $\\\n(\\\n(1 + ", Refused(Arithmetic)),
            ("echo a \\\n# ", Refused(Comment)),
            ("echo a\\\n# ", Unquoted),
            ("echo a # \\\necho ", Unquoted),
            ("echo '\\\n", SingleQuoted),
            ("echo \"\\\n", DoubleQuoted),
            ("echo \\\n", Unquoted),
            ("echo \\", Refused(AfterBackslash)),
            ("echo \"\\", Refused(AfterBackslash)),
            ("x=$(ca\\\nse a in a) echo ", Refused(Ambiguous)),
            ("cat <\\\n<E\nx\n", Refused(HereDoc)),
            ("cat <\\\n<E\nx\nE\necho ", Unquoted),
            ("cat <<E\\\nOF\nx\nEOF\necho ", Unquoted),
            ("cat <<\"E\\\nF\"\n", Refused(Ambiguous)),
            ("cat <<'E\nF'\n", Refused(Ambiguous)),
            // here-document bodies
            ("cat <<E\nfoo\\\nE\n", Refused(HereDoc)),
            ("cat <<E\nfoo\\\nE\nE\necho ", Unquoted),
            ("cat <<E\nE\\\n\n", Refused(Ambiguous)),
            ("cat <<'E'\nfoo\\\nE\necho ", Unquoted),
            ("cat <<\\E\nfoo\\\nE\necho ", Unquoted),
            ("cat <<-E\n\tfoo\\\n\tE\n", Refused(HereDoc)),
            ("cat <<-E\n\tfoo\\\n\tE\n\tE\necho ", Unquoted),
            ("cat <<E\n\\\\\nE\necho ", Unquoted),
            ("cat <<E\na $(id) ${HOME} `date` $((1+2))\nE\necho ", Unquoted),
            ("cat <<E\n$(echo\nE\n)\nE\n", Refused(Ambiguous)),
            ("cat <<E\n`echo\nE\n`\nE\n", Refused(Ambiguous)),
            ("cat <<E\n$(echo \")\")\nE\n", Refused(Ambiguous)),
            ("cat <<'E'\n$(echo\nE\necho ", Unquoted),
            ("cat <<A <<'B'\n$(x)\nA\n$(\nB\necho ", Unquoted),
        ];
        for (before, want) in cases {
            assert_eq!(ctx(before), *want, "{before:?}");
        }
    }

    /// Inputs built from the pieces that carry continuations and here-documents.
    fn shell_text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("\\\n"),
            Just("\\"),
            Just("\n"),
            Just("\t"),
            Just(" "),
            Just("<<E"),
            Just("<<-E"),
            Just("<<'E'"),
            Just("<<\"E\""),
            Just("<<\\E"),
            Just("E"),
            Just("cat"),
            Just("case"),
            Just("#"),
            Just("'"),
            Just("\""),
            Just("`"),
            Just("$"),
            Just("("),
            Just(")"),
            Just("{"),
            Just("}"),
            Just("x"),
        ];
        proptest::collection::vec(piece, 0..60).prop_map(|v| v.concat())
    }

    proptest! {
        /// No input makes the lexer panic, and its work is linear in the input: many pending here-documents
        /// and long body lines included.
        #[test]
        fn never_panics_and_costs_linear_work(s in shell_text(), n in 1usize..200) {
            let mut l = ShellLexer::new();
            l.feed(&s);
            let _ = l.context();
            prop_assert!(l.ops <= 3 * s.chars().count() + 1, "{} ops for {:?}", l.ops, s);
            // n pending documents on one line, then their bodies
            let mut t = "cat".to_string();
            for i in 0..n {
                t.push_str(&format!(" <<E{i}"));
            }
            t.push('\n');
            for i in 0..n {
                t.push_str(&format!("{}\nE{i}\n", "y".repeat(n)));
            }
            t.push_str("echo ");
            let mut l = ShellLexer::new();
            l.feed(&t);
            prop_assert_eq!(l.context(), Unquoted);
            prop_assert!(l.ops <= 3 * t.len(), "{} ops for {} bytes", l.ops, t.len());
        }

        /// A line continuation is invisible: inserting `\<newline>` anywhere in a text without single quotes,
        /// comments and here-documents (where it is not one) changes no context.
        #[test]
        fn a_continuation_outside_literals_changes_nothing(
            s in "[a-z $(){}\"`;|&<>=]{0,30}",
            at in any::<proptest::sample::Index>(),
        ) {
            prop_assume!(!s.contains("<<"));
            let i = at.index(s.len() + 1);
            let joined = format!("{}\\\n{}", &s[..i], &s[i..]);
            prop_assert_eq!(ctx(&joined), ctx(&s), "{:?}", joined);
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
