//! The lexer of the workflow language (01 §1): indentation, comments, the strict-escape directive, the three
//! string spellings, block scalars and prompt bodies.
//!
//! The lexer works on byte offsets into one normalised copy of the source (BOM removed, CR LF turned into LF);
//! tokens only own text when it had to be rebuilt (strict escapes, block scalars, prompt bodies).

use crate::diag::Diagnostic;
use crate::model::Span;

/// Largest accepted source, in bytes (01 §1.1).
pub const MAX_SOURCE_BYTES: usize = 10 * 1024 * 1024;

/// Deepest accepted indentation nesting (01 §1.2).
pub const MAX_INDENT_LEVELS: usize = 100;

/// The kind of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// An identifier or a keyword (keywords are contextual, 01 §1.4.2).
    Ident,
    /// The type keyword `string[]`.
    StringList,
    /// An integer literal.
    Int,
    /// A float literal.
    Float,
    /// `true`.
    True,
    /// `false`.
    False,
    /// A string in any of its spellings (double-quoted, backtick, block scalar).
    Str,
    /// The raw body of a prompt declaration (01 §1.6).
    PromptBody,
    /// `:`.
    Colon,
    /// `->`.
    Arrow,
    /// `=`.
    Eq,
    /// `,`.
    Comma,
    /// `[`.
    LBracket,
    /// `]`.
    RBracket,
    /// `{`.
    LBrace,
    /// `}`.
    RBrace,
    /// `(`.
    LParen,
    /// `)`.
    RParen,
    /// `.`.
    Dot,
    /// `*`.
    Star,
    /// End of a logical line.
    Nl,
    /// Indentation increased.
    Indent,
    /// Indentation decreased.
    Dedent,
    /// End of input.
    Eof,
}

impl TokenKind {
    /// A short human description used in diagnostics.
    pub fn describe(self) -> &'static str {
        match self {
            TokenKind::Ident => "name",
            TokenKind::StringList => "type",
            TokenKind::Int => "integer",
            TokenKind::Float => "number",
            TokenKind::True | TokenKind::False => "boolean",
            TokenKind::Str => "string",
            TokenKind::PromptBody => "prompt body",
            TokenKind::Colon
            | TokenKind::Arrow
            | TokenKind::Eq
            | TokenKind::Comma
            | TokenKind::LBracket
            | TokenKind::RBracket
            | TokenKind::LBrace
            | TokenKind::RBrace
            | TokenKind::LParen
            | TokenKind::RParen
            | TokenKind::Dot
            | TokenKind::Star => "punctuation",
            TokenKind::Nl => "end of line",
            TokenKind::Indent => "indentation",
            TokenKind::Dedent => "dedent",
            TokenKind::Eof => "end of file",
        }
    }
}

/// Keywords of 01 §1.4.1 (contextual: every name position accepts them).
pub const KEYWORDS: &[&str] = &[
    "vars",
    "presets",
    "attachments",
    "file",
    "image",
    "mcp_server",
    "prompt",
    "schema",
    "agent",
    "judge",
    "router",
    "join",
    "human",
    "tool",
    "workflow",
    "compute",
    "entry",
    "mcp",
    "budget",
    "transport",
    "servers",
    "disable",
    "autoload_project",
    "model",
    "input",
    "output",
    "publish",
    "system",
    "user",
    "session",
    "tools",
    "tool_policy",
    "capabilities",
    "tool_max_steps",
    "reasoning_effort",
    "mode",
    "strategy",
    "require",
    "instructions",
    "command",
    "script",
    "language",
    "args",
    "url",
    "auth",
    "readonly",
    "backend",
    "default_backend",
    "provider",
    "interaction",
    "interaction_prompt",
    "interaction_model",
    "await",
    "when",
    "not",
    "as",
    "with",
    "enum",
    "fresh",
    "inherit",
    "inherit_if_available",
    "artifacts_only",
    "fork",
    "fan_out_all",
    "condition",
    "round_robin",
    "llm",
    "multi",
    "wait_all",
    "best_effort",
    "true",
    "false",
    "string",
    "bool",
    "int",
    "float",
    "json",
    "max_parallel_branches",
    "max_duration",
    "max_cost_usd",
    "max_tokens",
    "max_iterations",
    "compaction",
    "threshold",
    "preserve_recent",
    "memory",
    "enabled",
    "scope",
    "autoload",
    "read",
    "write",
    "pre_compact_inject",
    "worktree",
    "sandbox",
    "cursor",
    "cursors",
    "values",
    "bands",
    "done",
    "fail",
];

/// Whether `word` is a keyword of 01 §1.4.1.
pub fn is_keyword(word: &str) -> bool {
    word == "string[]" || KEYWORDS.contains(&word)
}

/// One token: 16 bytes. Its position is read back with [`Lexed::span`] and its text with [`Lexed::text`].
///
/// A token on one line whose text is its source slice stores its byte range and line; the columns are
/// computed from the line start on demand. The rare others (multi-line strings, block scalars, prompt
/// bodies, decoded strings) keep their full span and value in a side table of [`Lexed`].
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// What kind of token.
    pub kind: TokenKind,
    /// Whether `line` indexes the side table instead.
    extra: bool,
    start: u32,
    end: u32,
    /// 1-based line, or the side-table index when `extra`.
    line: u32,
}

/// A side-table entry: the full span and the decoded value of a token that needs them.
#[derive(Debug, Clone, PartialEq)]
struct Extra {
    span: Span,
    value: Option<Box<str>>,
}

/// The result of lexing: the normalised source, the tokens and the lexical diagnostics.
#[derive(Debug, Clone)]
pub struct Lexed {
    /// The source after BOM removal and CR LF normalisation; token spans index into it.
    pub source: String,
    /// The tokens, ending with [`TokenKind::Eof`].
    pub tokens: Vec<Token>,
    /// Lexical diagnostics (`E001`, `E003`–`E007`, `E020`), sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    /// Whether the strict-escape directive is on (01 §1.3).
    pub strict_escape: bool,
    /// Byte offset of the start of each line (index 0 is line 1).
    line_starts: Vec<u32>,
    /// Spans and values of the tokens that do not fit in [`Token`].
    extras: Vec<Extra>,
}

impl Lexed {
    /// The text of a token: the string value for strings and prompt bodies, the source slice otherwise.
    pub fn text<'a>(&'a self, tok: &'a Token) -> &'a str {
        let (start, end) = if tok.extra {
            let x = &self.extras[tok.line as usize];
            if let Some(v) = &x.value {
                return v;
            }
            (x.span.start, x.span.end)
        } else {
            (tok.start as usize, tok.end as usize)
        };
        match tok.kind {
            TokenKind::Str => {
                let (s, e) = (start + 1, end.saturating_sub(1));
                self.source.get(s..e.max(s)).unwrap_or("")
            }
            _ => self.source.get(start..end).unwrap_or(""),
        }
    }

    /// Where a token is. For strings the span includes the quotes.
    pub fn span(&self, tok: &Token) -> Span {
        if tok.extra {
            return self.extras[tok.line as usize].span;
        }
        let (start, end) = (tok.start as usize, tok.end as usize);
        let ls = self
            .line_starts
            .get(tok.line as usize - 1)
            .map_or(0, |&l| l as usize);
        let b = self.source.as_bytes();
        let col = cols(&b[ls..start]) + 1;
        let end_col = col + cols(&b[start..end]);
        Span {
            start,
            end,
            line: tok.line,
            col,
            end_line: tok.line,
            end_col,
        }
    }
}

/// The number of characters in a slice of UTF-8 text.
fn cols(b: &[u8]) -> u32 {
    if b.is_ascii() {
        b.len() as u32
    } else {
        b.iter().filter(|&&c| (c & 0xC0) != 0x80).count() as u32
    }
}

/// Lexes source text. `file` labels the diagnostics.
pub fn lex(src: &str, file: &str) -> Lexed {
    lex_bytes(src.as_bytes(), file)
}

/// `E007` for a source over [`MAX_SOURCE_BYTES`], at 1:1 (the only diagnostic such a file gets).
pub fn too_large(file: &str) -> Diagnostic {
    Diagnostic::error("E007", file, 1, 1, "source file exceeds maximum size (10 MiB)")
}

/// Lexes raw file bytes: checks the size limit and UTF-8 first (`E007`).
pub fn lex_bytes(bytes: &[u8], file: &str) -> Lexed {
    let empty = |d: Diagnostic| Lexed {
        source: String::new(),
        tokens: vec![Token {
            kind: TokenKind::Eof,
            extra: false,
            start: 0,
            end: 0,
            line: 1,
        }],
        diagnostics: vec![d],
        strict_escape: false,
        line_starts: vec![0],
        extras: Vec::new(),
    };
    if bytes.len() > MAX_SOURCE_BYTES {
        return empty(too_large(file));
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let line = good.iter().filter(|&&b| b == b'\n').count() as u32 + 1;
            let last_nl = good.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
            let col = std::str::from_utf8(&good[last_nl..]).map_or(1, |s| s.chars().count() + 1);
            return empty(Diagnostic::error(
                "E007",
                file,
                line,
                col as u32,
                "source is not valid UTF-8",
            ));
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let source = if text.contains("\r\n") {
        text.replace("\r\n", "\n")
    } else {
        text.to_string()
    };
    let strict = detect_strict_escape(&source);
    let mut lx = Lexer {
        src: &source,
        b: source.as_bytes(),
        file,
        pos: 0,
        line: 1,
        line_start: 0,
        col_cache: (0, 1),
        tokens: Vec::with_capacity(source.len() / 5 + 16),
        line_starts: Vec::with_capacity(source.len() / 16 + 1),
        extras: Vec::new(),
        diags: Vec::new(),
        strict,
        stack: vec![0],
        depth: 0,
        cur_indent: 0,
        line_has_tokens: false,
        at_line_start: true,
    };
    lx.run();
    let Lexer {
        tokens,
        diags,
        mut line_starts,
        extras,
        ..
    } = lx;
    let mut diagnostics = diags;
    crate::diag::sort(&mut diagnostics);
    line_starts.insert(0, 0);
    Lexed {
        tokens,
        diagnostics,
        strict_escape: strict,
        source,
        line_starts,
        extras,
    }
}

/// Whether the leading comment lines carry the strict-escape directive (01 §1.3).
pub fn detect_strict_escape(src: &str) -> bool {
    for line in src.split('\n').take(32) {
        let t = line.trim_matches(|c| c == ' ' || c == '\t' || c == '\r');
        if t.is_empty() {
            continue;
        }
        let Some(c) = t.strip_prefix("##") else {
            return false;
        };
        let c = c.trim_matches(|c| c == ' ' || c == '\t' || c == '\r');
        if matches!(c, "strict-escape: on" | "strict-escape:on" | "strict-escape = on") {
            return true;
        }
    }
    false
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_continue(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

/// The lines of a prompt body and where they end.
struct PromptBodyScan<'s> {
    /// the body's lines, stripped of the body's indentation
    lines: Vec<&'s str>,
    /// the first captured character: byte position, line and column
    first: Option<(usize, u32, u32)>,
    /// line, end position and line start of the last captured line
    end_line: u32,
    end_pos: usize,
    end_line_start: usize,
    /// where lexing continues (a line start)
    pos: usize,
}

struct Lexer<'s> {
    src: &'s str,
    b: &'s [u8],
    file: &'s str,
    pos: usize,
    line: u32,
    line_start: usize,
    col_cache: (usize, u32),
    tokens: Vec<Token>,
    /// starts of lines 2, 3, …
    line_starts: Vec<u32>,
    extras: Vec<Extra>,
    diags: Vec<Diagnostic>,
    strict: bool,
    stack: Vec<usize>,
    depth: usize,
    cur_indent: usize,
    line_has_tokens: bool,
    at_line_start: bool,
}

impl<'s> Lexer<'s> {
    fn col_at(&mut self, pos: usize) -> u32 {
        let (cp, cc) = self.col_cache;
        let (from, base) = if cp >= self.line_start && cp <= pos {
            (cp, cc)
        } else {
            (self.line_start, 1)
        };
        let n = self.b[from..pos].iter().filter(|&&b| (b & 0xC0) != 0x80).count() as u32;
        let col = base + n;
        self.col_cache = (pos, col);
        col
    }

    fn newline(&mut self, next_line_start: usize) {
        self.line += 1;
        self.line_starts.push(next_line_start as u32);
        self.line_start = next_line_start;
        self.col_cache = (next_line_start, 1);
    }

    fn span(&mut self, start: usize, end: usize) -> Span {
        // start and end are on the current line
        let col = self.col_at(start);
        let end_col = self.col_at(end);
        Span {
            start,
            end,
            line: self.line,
            col,
            end_line: self.line,
            end_col,
        }
    }

    fn push(&mut self, kind: TokenKind, start: usize, end: usize) {
        // start and end are on the current line: the columns are computed when asked for
        self.tokens.push(Token {
            kind,
            extra: false,
            start: start as u32,
            end: end as u32,
            line: self.line,
        });
        if !matches!(kind, TokenKind::Indent | TokenKind::Dedent | TokenKind::Nl) {
            self.line_has_tokens = true;
        }
    }

    /// Pushes a token with an explicit span and an optional decoded value (side table).
    fn push_full(&mut self, kind: TokenKind, span: Span, value: Option<Box<str>>) {
        self.tokens.push(Token {
            kind,
            extra: true,
            start: span.start as u32,
            end: span.end as u32,
            line: self.extras.len() as u32,
        });
        self.extras.push(Extra { span, value });
    }

    fn error_at(&mut self, code: &'static str, pos: usize, msg: impl Into<String>) -> usize {
        let col = self.col_at(pos);
        self.diags
            .push(Diagnostic::error(code, self.file, self.line, col, msg));
        self.diags.len() - 1
    }

    fn eol(&self, from: usize) -> usize {
        memchr(b'\n', &self.b[from..]).map_or(self.b.len(), |i| from + i)
    }

    fn run(&mut self) {
        while self.pos < self.b.len() {
            if self.at_line_start {
                self.at_line_start = false;
                if self.depth == 0 {
                    match self.line_start_indent() {
                        LineStart::Skip => {
                            self.at_line_start = true;
                            continue;
                        }
                        LineStart::Tokens => {}
                    }
                }
            }
            let c = self.b[self.pos];
            match c {
                b' ' | b'\t' | b'\r' => self.pos += 1,
                b'\n' => {
                    // recovery: an unclosed bracket must not swallow the rest of the file; a line that
                    // starts at column 1 with a declaration keyword closes every open bracket (the parser
                    // reports the unclosed bracket when it meets the line end)
                    if self.depth > 0 && starts_declaration(&self.b[self.pos + 1..]) {
                        self.depth = 0;
                    }
                    if self.depth == 0 && self.line_has_tokens {
                        self.push(TokenKind::Nl, self.pos, self.pos);
                        self.line_has_tokens = false;
                    }
                    self.pos += 1;
                    self.newline(self.pos);
                    self.at_line_start = true;
                }
                b'#' => {
                    if self.b.get(self.pos + 1) == Some(&b'#') {
                        self.pos = self.eol(self.pos);
                    } else {
                        let i = self.error_at("E001", self.pos, "unexpected character '#'");
                        self.diags[i].hint = Some("comments start with '##'".into());
                        self.pos = self.eol(self.pos);
                    }
                }
                b'"' => self.lex_dq_string(),
                b'`' => self.lex_raw_string(),
                b'0'..=b'9' => self.lex_number(),
                b':' => {
                    self.push(TokenKind::Colon, self.pos, self.pos + 1);
                    self.pos += 1;
                    if self.depth == 0 {
                        let mut p = self.pos;
                        while p < self.b.len() && (self.b[p] == b' ' || self.b[p] == b'\t') {
                            p += 1;
                        }
                        if self.b.get(p) == Some(&b'|') {
                            self.lex_block_scalar(p);
                        }
                    }
                }
                b'-' => {
                    if self.b.get(self.pos + 1) == Some(&b'>') {
                        self.push(TokenKind::Arrow, self.pos, self.pos + 2);
                        self.pos += 2;
                    } else {
                        let prev_ident = self.pos > 0
                            && self.src[..self.pos]
                                .chars()
                                .next_back()
                                .is_some_and(is_ident_continue);
                        let next = self.src[self.pos + 1..].chars().next();
                        let i = self.error_at("E001", self.pos, "unexpected character '-'");
                        if prev_ident || next.is_some_and(is_ident_start) {
                            self.diags[i].hint = Some("quote values that contain dots or hyphens".into());
                        } else if next.is_some_and(|c| c.is_ascii_digit()) {
                            self.diags[i].hint = Some("negative numbers cannot be written".into());
                        }
                        self.pos += 1;
                    }
                }
                b'=' => self.punct(TokenKind::Eq),
                b',' => self.punct(TokenKind::Comma),
                b'[' => {
                    self.depth += 1;
                    self.punct(TokenKind::LBracket)
                }
                b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    self.punct(TokenKind::RBracket)
                }
                b'{' => {
                    self.depth += 1;
                    self.punct(TokenKind::LBrace)
                }
                b'}' => {
                    self.depth = self.depth.saturating_sub(1);
                    self.punct(TokenKind::RBrace)
                }
                b'(' => self.punct(TokenKind::LParen),
                b')' => self.punct(TokenKind::RParen),
                b'.' => self.punct(TokenKind::Dot),
                b'*' => self.punct(TokenKind::Star),
                _ => {
                    let ch = self.src[self.pos..].chars().next().unwrap_or('\0');
                    if is_ident_start(ch) {
                        self.lex_ident();
                    } else {
                        self.error_at("E001", self.pos, format!("unexpected character '{ch}'"));
                        // coalesce a run of unexpected characters into one diagnostic
                        let mut p = self.pos + ch.len_utf8();
                        while let Some(c2) = self.src[p..].chars().next() {
                            if c2.is_whitespace()
                                || is_ident_start(c2)
                                || c2.is_ascii_digit()
                                || "\"`:-=,[]{}().*#".contains(c2)
                            {
                                break;
                            }
                            p += c2.len_utf8();
                        }
                        self.pos = p;
                    }
                }
            }
        }
        if self.line_has_tokens {
            self.push(TokenKind::Nl, self.pos, self.pos);
        }
        while self.stack.len() > 1 {
            self.stack.pop();
            self.push(TokenKind::Dedent, self.pos, self.pos);
        }
        self.push(TokenKind::Eof, self.pos, self.pos);
    }

    fn punct(&mut self, kind: TokenKind) {
        self.push(kind, self.pos, self.pos + 1);
        self.pos += 1;
    }

    /// Handles the start of a physical line outside brackets: blank and comment lines, tab errors,
    /// INDENT / DEDENT, prompt headers.
    fn line_start_indent(&mut self) -> LineStart {
        let start = self.pos;
        let mut p = start;
        while p < self.b.len() && self.b[p] == b' ' {
            p += 1;
        }
        let width = p - start;
        // first non-whitespace character
        let mut q = p;
        while q < self.b.len() && matches!(self.b[q], b' ' | b'\t' | b'\r') {
            q += 1;
        }
        let eol = self.eol(q);
        if q == eol || self.b[q..].starts_with(b"##") {
            // blank or comment-only line
            self.pos = eol;
            if eol < self.b.len() {
                self.pos += 1;
                self.newline(self.pos);
            }
            return LineStart::Skip;
        }
        if p < self.b.len() && self.b[p] == b'\t' {
            self.error_at(
                "E003",
                start,
                "bad indentation: tabs are not allowed for indentation; use spaces",
            );
            self.pos = eol;
            if eol < self.b.len() {
                self.pos += 1;
                self.newline(self.pos);
            }
            return LineStart::Skip;
        }
        // indentation
        let top = *self.stack.last().unwrap_or(&0);
        if width > top {
            if self.stack.len() > MAX_INDENT_LEVELS {
                self.error_at("E003", p, "bad indentation: nested too deeply (max 100)");
            } else {
                self.stack.push(width);
                self.push(TokenKind::Indent, p, p);
            }
        } else if width < top {
            loop {
                let top = *self.stack.last().unwrap_or(&0);
                if top <= width {
                    break;
                }
                let below = self.stack.get(self.stack.len().wrapping_sub(2)).copied();
                match below {
                    Some(b) if b >= width => {
                        self.stack.pop();
                        self.push(TokenKind::Dedent, p, p);
                    }
                    Some(_) => {
                        // between two levels: keep the inner level (recovery)
                        self.error_at(
                            "E003",
                            p,
                            "bad indentation: indentation does not match any outer level",
                        );
                        break;
                    }
                    None => break,
                }
            }
        }
        self.cur_indent = width;
        self.pos = p;
        if self.b[p..].starts_with(b"prompt") && self.try_prompt(p, eol) {
            return LineStart::Skip;
        }
        LineStart::Tokens
    }

    /// Recognises `prompt NAME: [## comment]` and lexes the header and the raw body (01 §1.6).
    fn try_prompt(&mut self, p: usize, eol: usize) -> bool {
        let Some((name_start, name_len, colon)) = self.prompt_header(p, eol) else {
            return false;
        };
        self.push(TokenKind::Ident, p, p + "prompt".len());
        self.push(TokenKind::Ident, name_start, name_start + name_len);
        self.push(TokenKind::Colon, colon, colon + 1);
        // the header's end, where the body's span starts when it is empty
        let (hdr_line, hdr_col) = (self.line, self.col_at(colon + 1));
        let body_start_pos = eol;
        let scan = self.scan_prompt_body(eol);
        let body = scan.lines.join("\n");
        // span: from the end of the header line to the end of the last captured line
        let end_col = {
            let n = self.b[scan.end_line_start..scan.end_pos]
                .iter()
                .filter(|&&b| (b & 0xC0) != 0x80)
                .count() as u32;
            n + 1
        };
        // the body's span starts at its first character (line and column of the first captured line), so
        // positions inside the body can be mapped back to the source
        let (b_start, b_line, b_col) = scan.first.unwrap_or((body_start_pos, hdr_line, hdr_col));
        self.push_full(
            TokenKind::PromptBody,
            Span {
                start: b_start,
                end: scan.end_pos.max(b_start),
                line: b_line,
                col: b_col,
                end_line: scan.end_line,
                end_col,
            },
            Some(body.into_boxed_str()),
        );
        let nl_span = Span {
            start: body_start_pos,
            end: body_start_pos,
            line: hdr_line,
            col: hdr_col,
            end_line: hdr_line,
            end_col: hdr_col,
        };
        self.push_full(TokenKind::Nl, nl_span, None);
        self.line_has_tokens = false;
        self.pos = scan.pos;
        // the main loop continues at a line start
        true
    }

    /// The header `prompt NAME:` of the line `p..eol` (a `##` comment may follow): the name's start and
    /// length and the colon's position; `None` when the line is something else.
    fn prompt_header(&self, p: usize, eol: usize) -> Option<(usize, usize, usize)> {
        let line = &self.src[p..eol];
        let rest = &line["prompt".len()..];
        let ws = rest.len() - rest.trim_start_matches([' ', '\t', '\r']).len();
        if ws == 0 {
            return None;
        }
        let rest2 = &rest[ws..];
        let mut chars = rest2.char_indices();
        match chars.next() {
            Some((_, c)) if is_ident_start(c) => {}
            _ => return None,
        }
        let name_len = rest2
            .char_indices()
            .find(|&(_, c)| !is_ident_continue(c))
            .map_or(rest2.len(), |(i, _)| i);
        let name = &rest2[..name_len];
        if name == "true" || name == "false" {
            return None;
        }
        let after = &rest2[name_len..];
        let after_t = after.trim_start_matches([' ', '\t', '\r']);
        let tail = after_t.strip_prefix(':')?;
        let tail_t = tail.trim_start_matches([' ', '\t', '\r']);
        if !(tail_t.is_empty() || tail_t.starts_with("##")) {
            return None;
        }
        let name_start = p + "prompt".len() + ws;
        let colon = name_start + name_len + (after.len() - after_t.len());
        Some((name_start, name_len, colon))
    }

    /// Reads the lines of a prompt body after the header line ending at `eol`: the lines indented deeper
    /// than the header, each stripped by the first line's indentation, blank lines kept inside the body.
    fn scan_prompt_body(&mut self, eol: usize) -> PromptBodyScan<'s> {
        let header_indent = self.cur_indent;
        let mut pos = eol;
        let mut lines: Vec<&'s str> = Vec::new();
        let mut pending_blank = 0usize;
        let mut level: Option<usize> = None;
        let mut end_line = self.line;
        let mut first: Option<(usize, u32, u32)> = None;
        let mut end_pos = eol;
        let mut end_line_start = self.line_start;
        if pos < self.b.len() {
            pos += 1;
            self.newline(pos);
        }
        loop {
            if pos >= self.b.len() {
                break;
            }
            let le = self.eol(pos);
            let lb = &self.b[pos..le];
            let spaces = lb.iter().take_while(|&&c| c == b' ').count();
            let blank = lb.iter().all(|&c| matches!(c, b' ' | b'\t' | b'\r'));
            if blank {
                if level.is_some() {
                    pending_blank += 1;
                }
                if le < self.b.len() {
                    pos = le + 1;
                    self.newline(pos);
                    continue;
                }
                pos = le;
                break;
            }
            let tab_first = lb.get(spaces) == Some(&b'\t');
            let b_level = match level {
                Some(b) => b,
                None => {
                    if spaces <= header_indent || tab_first {
                        break;
                    }
                    level = Some(spaces);
                    spaces
                }
            };
            if spaces < b_level {
                if spaces > header_indent && !tab_first {
                    self.error_at(
                        "E003",
                        pos + spaces,
                        "bad indentation: indentation does not match any outer level",
                    );
                    // skip the offending line
                    pos = le;
                    if le < self.b.len() {
                        pos += 1;
                        self.newline(pos);
                    }
                }
                break;
            }
            lines.extend(std::iter::repeat_n("", pending_blank));
            pending_blank = 0;
            if first.is_none() {
                first = Some((pos + b_level, self.line, b_level as u32 + 1));
            }
            lines.push(&self.src[pos + b_level..le]);
            end_line = self.line;
            end_pos = le;
            end_line_start = self.line_start;
            if le < self.b.len() {
                pos = le + 1;
                self.newline(pos);
            } else {
                pos = le;
                break;
            }
        }
        PromptBodyScan {
            lines,
            first,
            end_line,
            end_pos,
            end_line_start,
            pos,
        }
    }

    fn lex_ident(&mut self) {
        let start = self.pos;
        let mut p = start;
        while p < self.b.len() {
            let c = self.b[p];
            if c.is_ascii_alphanumeric() || c == b'_' {
                p += 1;
            } else if c < 0x80 {
                break;
            } else {
                let ch = self.src[p..].chars().next().unwrap_or(' ');
                if is_ident_continue(ch) {
                    p += ch.len_utf8();
                } else {
                    break;
                }
            }
        }
        let word = &self.src[start..p];
        let kind = match word {
            "true" => TokenKind::True,
            "false" => TokenKind::False,
            "string" if self.b[p..].starts_with(b"[]") => {
                p += 2;
                TokenKind::StringList
            }
            _ => TokenKind::Ident,
        };
        self.push(kind, start, p);
        self.pos = p;
    }

    fn lex_number(&mut self) {
        let start = self.pos;
        let mut p = start;
        while p < self.b.len() && self.b[p].is_ascii_digit() {
            p += 1;
        }
        let mut kind = TokenKind::Int;
        if self.b.get(p) == Some(&b'.') && self.b.get(p + 1).is_some_and(u8::is_ascii_digit) {
            p += 1;
            while p < self.b.len() && self.b[p].is_ascii_digit() {
                p += 1;
            }
            kind = TokenKind::Float;
        }
        if kind == TokenKind::Int && self.src[start..p].parse::<i64>().is_err() {
            self.error_at("E020", start, "invalid value: integer out of range");
        }
        self.push(kind, start, p);
        self.pos = p;
    }

    fn lex_dq_string(&mut self) {
        let start = self.pos;
        let mut p = start + 1;
        let mut decoded: Option<String> = None;
        let mut seg = p;
        let closed = loop {
            match self.b.get(p) {
                None | Some(b'\n') => break false,
                Some(b'"') => break true,
                Some(b'\\') => match self.b.get(p + 1) {
                    None | Some(b'\n') => break false,
                    Some(&n) => {
                        if self.strict {
                            let d = decoded.get_or_insert_with(String::new);
                            d.push_str(&self.src[seg..p]);
                            let rep = match n {
                                b'"' => Some('"'),
                                b'\\' => Some('\\'),
                                b'n' => Some('\n'),
                                b't' => Some('\t'),
                                b'r' => Some('\r'),
                                b'0' => Some('\0'),
                                _ => None,
                            };
                            let clen = self.src[p + 1..].chars().next().map_or(1, char::len_utf8);
                            match rep {
                                Some(r) => d.push(r),
                                None => {
                                    let ch = &self.src[p + 1..p + 1 + clen];
                                    self.error_at(
                                        "E005",
                                        p,
                                        format!("invalid escape sequence '\\{ch}' (strict-escape is on)"),
                                    );
                                    d.push('\\');
                                    d.push_str(ch);
                                }
                            }
                            p += 1 + clen;
                            seg = p;
                        } else {
                            p += 2;
                        }
                    }
                },
                Some(_) => p += 1,
            }
        };
        if !closed {
            self.error_at("E004", start, "unterminated string literal");
            let end = p;
            let mut tok_value = decoded;
            if let Some(d) = tok_value.as_mut() {
                d.push_str(&self.src[seg..end]);
            } else {
                tok_value = Some(self.src[start + 1..end].to_string());
            }
            let span = self.span(start, end);
            self.push_full(TokenKind::Str, span, tok_value.map(String::into_boxed_str));
            self.line_has_tokens = true;
            self.pos = end;
            return;
        }
        if let Some(d) = decoded.as_mut() {
            d.push_str(&self.src[seg..p]);
        }
        match decoded {
            Some(d) => {
                let span = self.span(start, p + 1);
                self.push_full(TokenKind::Str, span, Some(d.into_boxed_str()));
            }
            None => self.push(TokenKind::Str, start, p + 1),
        }
        self.line_has_tokens = true;
        self.pos = p + 1;
    }

    fn lex_raw_string(&mut self) {
        let start = self.pos;
        let start_line = self.line;
        let start_col = self.col_at(start);
        match memchr(b'`', &self.b[start + 1..]) {
            None => {
                self.error_at("E004", start, "unterminated raw string");
                // swallow the rest of the file as the string, keep line tracking right
                let end = self.b.len();
                let mut p = start + 1;
                while let Some(i) = memchr(b'\n', &self.b[p..end]) {
                    p += i + 1;
                    self.newline(p);
                }
                let end_col = self.col_at(end);
                self.push_full(
                    TokenKind::Str,
                    Span {
                        start,
                        end,
                        line: start_line,
                        col: start_col,
                        end_line: self.line,
                        end_col,
                    },
                    Some(self.src[start + 1..end].into()),
                );
                self.line_has_tokens = true;
                self.pos = end;
            }
            Some(i) => {
                let close = start + 1 + i;
                let mut p = start + 1;
                while let Some(j) = memchr(b'\n', &self.b[p..close]) {
                    p += j + 1;
                    self.newline(p);
                }
                let end_col = self.col_at(close + 1);
                self.push_full(
                    TokenKind::Str,
                    Span {
                        start,
                        end: close + 1,
                        line: start_line,
                        col: start_col,
                        end_line: self.line,
                        end_col,
                    },
                    None,
                );
                self.line_has_tokens = true;
                self.pos = close + 1;
            }
        }
    }

    /// `key: |` block scalar (01 §1.5.3). `bar` is the offset of `|`.
    fn lex_block_scalar(&mut self, bar: usize) {
        let key_indent = self.cur_indent;
        let eol = self.eol(bar);
        // after '|': only spaces and an optional comment
        let mut q = bar + 1;
        while q < eol && matches!(self.b[q], b' ' | b'\t' | b'\r') {
            q += 1;
        }
        if q < eol && !self.b[q..].starts_with(b"##") {
            self.error_at("E006", q, "expected newline after '|'");
        }
        let start_line = self.line;
        let start_col = self.col_at(bar);
        let mut first: Option<(usize, u32, u32)> = None;
        let mut value = String::new();
        let mut pos = eol;
        let mut end_line = self.line;
        let mut end_col = self.col_at(eol);
        let mut end = eol;
        if pos < self.b.len() {
            pos += 1;
            self.newline(pos);
            // find the first content line and its strip width
            let mut probe = pos;
            let mut width = None;
            while probe < self.b.len() {
                let le = self.eol(probe);
                let lb = &self.b[probe..le];
                if lb.iter().all(|&c| matches!(c, b' ' | b'\t' | b'\r')) {
                    if le >= self.b.len() {
                        break;
                    }
                    probe = le + 1;
                    continue;
                }
                let sp = lb.iter().take_while(|&&c| c == b' ').count();
                if sp > key_indent {
                    width = Some(sp);
                }
                break;
            }
            if let Some(w) = width {
                let mut pending_blank = 0usize;
                let mut started = false;
                loop {
                    if pos >= self.b.len() {
                        break;
                    }
                    let le = self.eol(pos);
                    let lb = &self.b[pos..le];
                    let has_nl = le < self.b.len();
                    if lb.iter().all(|&c| matches!(c, b' ' | b'\t' | b'\r')) {
                        if started && has_nl {
                            pending_blank += 1;
                        }
                        if !has_nl {
                            pos = le;
                            break;
                        }
                        pos = le + 1;
                        self.newline(pos);
                        continue;
                    }
                    let sp = lb.iter().take_while(|&&c| c == b' ').count();
                    if sp < w {
                        break;
                    }
                    for _ in 0..pending_blank {
                        value.push('\n');
                    }
                    pending_blank = 0;
                    if !started {
                        first = Some((pos + w, self.line, w as u32 + 1));
                    }
                    started = true;
                    value.push_str(&self.src[pos + w..le]);
                    end_line = self.line;
                    end_col = self.col_at(le);
                    end = le;
                    if has_nl {
                        value.push('\n');
                        pos = le + 1;
                        self.newline(pos);
                    } else {
                        pos = le;
                        break;
                    }
                }
                // blank lines that precede the terminating line are kept (compat)
                for _ in 0..pending_blank {
                    value.push('\n');
                }
            } else {
                // empty value; the next non-blank line is lexed normally (blank lines skipped by the
                // line-start routine)
            }
        } else {
            pos = eol;
        }
        // a non-empty value's span starts at its first character (first content line, column W + 1), so
        // positions inside the value can be mapped back to the source; an empty value points at '|'
        let (v_start, v_line, v_col) = first.unwrap_or((bar, start_line, start_col));
        self.push_full(
            TokenKind::Str,
            Span {
                start: v_start,
                end: end.max(v_start + 1),
                line: v_line,
                col: v_col,
                end_line,
                end_col,
            },
            Some(value.into_boxed_str()),
        );
        let nl = Span {
            start: end,
            end,
            line: end_line,
            col: end_col,
            end_line,
            end_col,
        };
        self.push_full(TokenKind::Nl, nl, None);
        self.line_has_tokens = false;
        self.pos = pos;
        self.at_line_start = true;
    }
}

/// Whether a line starts at column 1 with a top-level declaration keyword followed by a space or ':'.
fn starts_declaration(line: &[u8]) -> bool {
    const DECLS: &[&[u8]] = &[
        b"vars",
        b"presets",
        b"attachments",
        b"mcp_server",
        b"prompt",
        b"schema",
        b"cursor",
        b"agent",
        b"judge",
        b"router",
        b"human",
        b"tool",
        b"compute",
        b"workflow",
    ];
    DECLS
        .iter()
        .any(|d| line.starts_with(d) && matches!(line.get(d.len()), Some(b' ' | b':')))
}

enum LineStart {
    Skip,
    Tokens,
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> String {
        let l = lex(src, "t");
        l.tokens
            .iter()
            .map(|t| match t.kind {
                TokenKind::Ident | TokenKind::Int | TokenKind::Float => l.text(t).to_string(),
                TokenKind::Str | TokenKind::PromptBody => format!("{:?}", l.text(t)),
                k => format!("{k:?}"),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn indentation_tokens() {
        assert_eq!(
            kinds("a:\n  b: 1\nc: 2\n"),
            "a Colon Nl Indent b Colon 1 Nl Dedent c Colon 2 Nl Eof"
        );
    }

    #[test]
    fn block_scalar_then_dedent() {
        assert_eq!(
            kinds("t:\n  s: |\n    x\n  l: sh\n"),
            "t Colon Nl Indent s Colon \"x\\n\" Nl l Colon sh Nl Dedent Eof"
        );
    }
}
