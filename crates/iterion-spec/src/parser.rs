//! The parser of the workflow language (01 §2–§4, §6.3): tokens to [`Ast`], never panicking, with
//! line- and block-level error recovery. Every `E…` diagnostic of 01 §9.2 that needs the grammar is
//! reported here.

use std::collections::HashSet;

use crate::ast::{AttachmentsBlock, CursorDecl, Decl, PresetsBlock, VarsBlock, WorkflowDecl};
use crate::diag::Diagnostic;
use crate::lexer::{Lexed, Token, TokenKind, is_keyword, lex_bytes};
use crate::model::{
    Attachment, AttachmentKind, Budget, BuildDecl, Compaction, Condition, CursorSettings, Edge, LoopCap,
    LoopSpec, MapEntry, McpBlock, McpServer, McpTransport, Memory, NetworkDecl, Node, NodeKind, Preset,
    Prompt, SandboxDecl, SandboxScope, Schema, SchemaField, Span, Spanned, TextMap, Var, VarType,
};

/// Parses source text into an [`Ast`] and every lexical and syntactic diagnostic, sorted by position.
pub fn parse(src: &str, file: &str) -> (Ast, Vec<Diagnostic>) {
    parse_bytes(src.as_bytes(), file)
}

/// Parses raw file bytes (size and UTF-8 checked first, `E007`).
pub fn parse_bytes(bytes: &[u8], file: &str) -> (Ast, Vec<Diagnostic>) {
    let lexed = lex_bytes(bytes, file);
    parse_lexed(&lexed, file)
}

pub use crate::ast::Ast;

/// Parses an already lexed file.
pub fn parse_lexed(lexed: &Lexed, file: &str) -> (Ast, Vec<Diagnostic>) {
    let err_lines: HashSet<u32> = lexed
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.line)
        .collect();
    let mut p = Parser {
        lx: lexed,
        toks: &lexed.tokens,
        i: 0,
        file,
        diags: lexed.diagnostics.clone(),
        err_lines,
        seen_vars: false,
        seen_presets: false,
        seen_attachments: false,
        lit_depth: 0,
        nodes: Vec::with_capacity(node_decls_upper_bound(lexed)),
    };
    let decls = p.file();
    let mut diags = p.diags;
    crate::diag::sort(&mut diags);
    (
        Ast {
            file: file.to_string(),
            strict_escape: lexed.strict_escape,
            decls,
            nodes: p.nodes,
        },
        diags,
    )
}

/// At most how many node declarations the file holds: node keywords that start a line. Sizing the node table
/// up front spares growing (copying) a table of 2.3 KB entries; an overestimate only reserves address space.
fn node_decls_upper_bound(lexed: &Lexed) -> usize {
    let toks = &lexed.tokens;
    toks.iter()
        .enumerate()
        .filter(|(i, t)| {
            t.kind == TokenKind::Ident
                && (*i == 0 || matches!(toks[i - 1].kind, TokenKind::Nl | TokenKind::Dedent))
                && matches!(
                    lexed.text(t),
                    "agent" | "judge" | "router" | "human" | "tool" | "compute"
                )
        })
        .count()
}

/// Deepest accepted nesting of `[…]` / `{…}` literals.
const MAX_LITERAL_DEPTH: usize = 64;

const DECL_KEYWORDS: &[&str] = &[
    "vars",
    "presets",
    "attachments",
    "mcp_server",
    "prompt",
    "schema",
    "cursor",
    "agent",
    "judge",
    "router",
    "human",
    "tool",
    "compute",
    "workflow",
];

struct Parser<'a> {
    lx: &'a Lexed,
    toks: &'a [Token],
    i: usize,
    file: &'a str,
    diags: Vec<Diagnostic>,
    err_lines: HashSet<u32>,
    seen_vars: bool,
    seen_presets: bool,
    seen_attachments: bool,
    lit_depth: usize,
    /// Every node declaration, in file order (`Decl::Node` holds an index into it).
    nodes: Vec<Node>,
}

/// A property key as written, borrowed from the source.
#[derive(Debug, Clone, Copy)]
struct Key<'a> {
    value: &'a str,
    span: Span,
}

impl Key<'_> {
    fn owned(self) -> Spanned<String> {
        Spanned::new(self.value.to_string(), self.span)
    }
}

/// A parsed scalar-ish value on the right of `key:`.
/// The interaction modes a node or the workflow may name.
const INTERACTIONS: &[&str] = &["none", "human", "llm", "llm_or_human"];

/// The reasoning efforts a bare `reasoning_effort` may name.
const REASONING_EFFORTS: &[&str] = &["low", "medium", "high", "xhigh", "max"];

enum Val {
    Str(Spanned<String>),
    Name(Spanned<String>),
    Int(Spanned<i64>),
    Float(Spanned<f64>),
    Bool(Spanned<bool>),
}

impl Val {
    /// The value as text (strings and names are moved, numbers and booleans printed).
    fn into_text(self) -> Spanned<String> {
        match self {
            Val::Str(s) | Val::Name(s) => s,
            Val::Int(s) => Spanned::new(s.value.to_string(), s.span),
            Val::Float(s) => Spanned::new(s.value.to_string(), s.span),
            Val::Bool(s) => Spanned::new(s.value.to_string(), s.span),
        }
    }
}

impl<'a> Parser<'a> {
    // ----------------------------------------------------------------------------------------------------
    // token helpers
    // ----------------------------------------------------------------------------------------------------

    fn peek(&self) -> &'a Token {
        &self.toks[self.i.min(self.toks.len() - 1)]
    }

    fn peek_at(&self, n: usize) -> &'a Token {
        &self.toks[(self.i + n).min(self.toks.len() - 1)]
    }

    fn kind(&self) -> TokenKind {
        self.peek().kind
    }

    fn bump(&mut self) -> &'a Token {
        let t = self.peek();
        if self.i < self.toks.len() - 1 {
            self.i += 1;
        }
        t
    }

    fn text(&self, t: &'a Token) -> &'a str {
        self.lx.text(t)
    }

    fn sp(&self, t: &Token) -> Span {
        self.lx.span(t)
    }

    fn at_word(&self, w: &str) -> bool {
        let t = self.peek();
        t.kind == TokenKind::Ident && self.text(t) == w
    }

    fn describe(&self, t: &Token) -> String {
        match t.kind {
            TokenKind::Nl | TokenKind::Eof | TokenKind::Indent | TokenKind::Dedent => {
                t.kind.describe().to_string()
            }
            TokenKind::PromptBody => "prompt body".to_string(),
            TokenKind::Str => format!("string \"{}\"", short(self.lx.text(t))),
            TokenKind::Ident if is_keyword(self.lx.text(t)) => {
                format!("keyword '{}'", self.lx.text(t))
            }
            k => format!("{} '{}'", k.describe(), self.lx.text(t)),
        }
    }

    fn diag_at(&mut self, code: &'static str, span: Span, msg: impl Into<String>) -> Option<usize> {
        if matches!(code, "E001" | "E002") && self.err_lines.contains(&span.line) {
            return None;
        }
        self.diags.push(
            Diagnostic::error(code, self.file, span.line, span.col, msg)
                .with_end(span.end_line, span.end_col.max(span.col)),
        );
        self.err_lines.insert(span.line);
        Some(self.diags.len() - 1)
    }

    fn hint(&mut self, idx: Option<usize>, hint: &str) {
        if let Some(i) = idx {
            self.diags[i].hint = Some(hint.to_string());
        }
    }

    fn expected(&mut self, what: &str) {
        let t = self.peek();
        let msg = format!("expected {what}, found {}", self.describe(t));
        let code = if t.kind == TokenKind::Dot { "E001" } else { "E002" };
        let idx = self.diag_at(code, self.sp(t), msg);
        if t.kind == TokenKind::Dot {
            self.hint(idx, "quote values that contain dots or hyphens");
        }
    }

    /// Skips to the end of the current line (consuming `NL`) and any block nested under it.
    fn skip_line(&mut self) {
        let mut depth = 0usize;
        loop {
            match self.kind() {
                TokenKind::Eof => return,
                TokenKind::Nl => {
                    self.bump();
                    if depth == 0 {
                        break;
                    }
                }
                TokenKind::Indent => {
                    depth += 1;
                    self.bump();
                }
                TokenKind::Dedent => {
                    if depth == 0 {
                        return;
                    }
                    depth -= 1;
                    self.bump();
                }
                _ => {
                    self.bump();
                }
            }
        }
        if self.kind() == TokenKind::Indent {
            self.skip_block();
        }
    }

    /// Skips an indented block starting at `INDENT`.
    fn skip_block(&mut self) {
        let mut depth = 0usize;
        loop {
            match self.kind() {
                TokenKind::Eof => return,
                TokenKind::Indent => depth += 1,
                TokenKind::Dedent => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        self.bump();
                        return;
                    }
                }
                _ => {}
            }
            self.bump();
        }
    }

    /// Expects the end of a logical line; otherwise reports `E002` and skips the rest of the line.
    fn end_line(&mut self) {
        match self.kind() {
            TokenKind::Nl => {
                self.bump();
                if self.kind() == TokenKind::Indent {
                    let t = self.peek();
                    self.diag_at("E002", self.sp(t), "unexpected indentation");
                    self.skip_block();
                }
            }
            TokenKind::Eof | TokenKind::Dedent => {}
            _ => {
                self.expected("end of line");
                self.skip_line();
            }
        }
    }

    fn name(&mut self, what: &str) -> Option<Spanned<String>> {
        let t = self.peek();
        if t.kind == TokenKind::Ident {
            self.bump();
            Some(Spanned::new(self.text(t).to_string(), self.sp(t)))
        } else {
            self.expected(what);
            None
        }
    }

    fn expect(&mut self, kind: TokenKind, what: &str) -> bool {
        if self.kind() == kind {
            self.bump();
            true
        } else {
            self.expected(what);
            false
        }
    }

    /// Runs `item` for each line of an indented block (`NL INDENT { … } DEDENT`). Returns false (after
    /// reporting `E002`) when no block follows.
    fn block(&mut self, what: &str, mut item: impl FnMut(&mut Self)) -> bool {
        if self.kind() != TokenKind::Nl {
            self.expected(&format!("end of line before {what}"));
            self.skip_line();
            return false;
        }
        self.bump();
        if self.kind() != TokenKind::Indent {
            let t = self.peek();
            // a block whose lines were all rejected by the lexer (tabs, bad indentation) was already reported
            let after_lex_error = self.toks[..self.i].last().is_some_and(|prev| {
                (self.sp(prev).line..self.sp(t).line).any(|l| self.err_lines.contains(&l))
            });
            if !after_lex_error {
                let msg = format!("expected {what}, found {}", self.describe(t));
                self.diag_at("E002", self.sp(t), msg);
            }
            return false;
        }
        self.bump();
        loop {
            match self.kind() {
                TokenKind::Dedent => {
                    self.bump();
                    break;
                }
                TokenKind::Eof => break,
                TokenKind::Nl => {
                    self.bump();
                }
                TokenKind::Indent => {
                    let t = self.peek();
                    self.diag_at("E002", self.sp(t), "unexpected indentation");
                    self.skip_block();
                }
                _ => {
                    let before = self.i;
                    item(self);
                    if self.i == before {
                        // no progress: skip the line to guarantee termination
                        self.skip_line();
                    }
                }
            }
        }
        true
    }

    /// Reads a property key and its colon (without allocating). On failure reports and skips the line.
    fn key(&mut self) -> Option<Key<'a>> {
        let t = self.peek();
        let key = match t.kind {
            TokenKind::Ident => {
                self.bump();
                Key {
                    value: self.text(t),
                    span: self.sp(t),
                }
            }
            _ => {
                self.expected("a property name");
                self.skip_line();
                return None;
            }
        };
        if !self.expect(TokenKind::Colon, "':'") {
            self.skip_line();
            return None;
        }
        Some(key)
    }

    fn unknown_prop(&mut self, key: &Key<'_>, ctx: &str) {
        let idx = self.diag_at(
            "E012",
            key.span,
            format!("unknown property '{}' in {ctx}", key.value),
        );
        if let Some(known) = crate::suggest::closest(key.value, crate::lexer::KEYWORDS.iter().copied()) {
            self.hint(idx, &format!("did you mean '{known}'?"));
        }
        self.skip_line();
    }

    // ----------------------------------------------------------------------------------------------------
    // values
    // ----------------------------------------------------------------------------------------------------

    /// Reads one scalar-ish value token (string, name, number, bool) without consuming the line end.
    fn val(&mut self) -> Option<Val> {
        let t = self.peek();
        let v = match t.kind {
            TokenKind::Str => Val::Str(Spanned::new(self.text(t).to_string(), self.sp(t))),
            TokenKind::Ident => Val::Name(Spanned::new(self.text(t).to_string(), self.sp(t))),
            TokenKind::Int => Val::Int(Spanned::new(self.text(t).parse().unwrap_or(i64::MAX), self.sp(t))),
            TokenKind::Float => Val::Float(Spanned::new(self.text(t).parse().unwrap_or(0.0), self.sp(t))),
            TokenKind::True => Val::Bool(Spanned::new(true, self.sp(t))),
            TokenKind::False => Val::Bool(Spanned::new(false, self.sp(t))),
            _ => return None,
        };
        self.bump();
        if self.kind() == TokenKind::Dot && matches!(v, Val::Name(_) | Val::Int(_)) {
            let d = self.peek();
            let idx = self.diag_at("E001", self.sp(d), "unexpected punctuation '.'");
            self.hint(idx, "quote values that contain dots or hyphens");
            // swallow the dotted tail
            while matches!(
                self.kind(),
                TokenKind::Dot | TokenKind::Ident | TokenKind::Int | TokenKind::Float
            ) {
                self.bump();
            }
        }
        Some(v)
    }

    fn bad_value(&mut self, prop: &str, expected: &str, span: Span) {
        self.diag_at(
            "E020",
            span,
            format!("invalid value for '{prop}': expected {expected}"),
        );
    }

    /// `key: <kind>` then end of line. `accept` selects the accepted value kinds.
    fn simple(&mut self, prop: &str, accept: Accept) -> Option<Val> {
        let start = self.peek();
        let v = self.val();
        let ok = match &v {
            None => false,
            Some(Val::Str(_)) => accept.str,
            Some(Val::Name(_)) => accept.name,
            Some(Val::Int(_)) => accept.int || accept.num,
            Some(Val::Float(_)) => accept.num,
            Some(Val::Bool(_)) => accept.bool,
        };
        if !ok {
            if v.is_none() && matches!(start.kind, TokenKind::Nl | TokenKind::Eof) {
                let msg = format!(
                    "invalid value for '{prop}': expected {}, found end of line",
                    accept.describe()
                );
                self.diag_at("E020", self.sp(start), msg);
            } else {
                self.bad_value(prop, accept.describe(), self.sp(start));
            }
            self.skip_line();
            return None;
        }
        self.end_line();
        v
    }

    fn str_prop(&mut self, prop: &str) -> Option<Spanned<String>> {
        self.simple(prop, Accept::STR).map(Val::into_text)
    }

    fn name_prop(&mut self, prop: &str) -> Option<Spanned<String>> {
        self.simple(prop, Accept::NAME).map(Val::into_text)
    }

    fn str_or_name_prop(&mut self, prop: &str) -> Option<Spanned<String>> {
        self.simple(prop, Accept::STR_NAME).map(Val::into_text)
    }

    fn int_prop(&mut self, prop: &str) -> Option<i64> {
        match self.simple(prop, Accept::INT) {
            Some(Val::Int(i)) => Some(i.value),
            _ => None,
        }
    }

    fn num_prop(&mut self, prop: &str) -> Option<f64> {
        match self.simple(prop, Accept::NUM) {
            Some(Val::Int(i)) => Some(i.value as f64),
            Some(Val::Float(f)) => Some(f.value),
            _ => None,
        }
    }

    fn bool_prop(&mut self, prop: &str) -> Option<bool> {
        match self.simple(prop, Accept::BOOL) {
            Some(Val::Bool(b)) => Some(b.value),
            _ => None,
        }
    }

    /// `reasoning_effort`: a bare name must be one of [`REASONING_EFFORTS`] (else `E020`, as the reference's
    /// parser reads it); a quoted string is kept for the compiler (`C027`, skipped when it holds `$`).
    fn reasoning_effort_prop(&mut self, prop: &str) -> Option<Spanned<String>> {
        match self.simple(prop, Accept::STR_NAME)? {
            Val::Name(n) if !REASONING_EFFORTS.contains(&n.value.as_str()) => {
                self.diag_at(
                    "E020",
                    n.span,
                    format!(
                        "invalid value for '{prop}': '{}' (want {}, or a quoted string such as \"${{EFFORT:-high}}\")",
                        n.value,
                        REASONING_EFFORTS.join(", ")
                    ),
                );
                None
            }
            v => Some(v.into_text()),
        }
    }

    /// A name restricted to `allowed` (else `E020`).
    fn enum_prop(&mut self, prop: &str, allowed: &[&str]) -> Option<Spanned<String>> {
        let v = self.name_prop(prop)?;
        if allowed.contains(&v.value.as_str()) {
            Some(v)
        } else {
            self.diag_at(
                "E020",
                v.span,
                format!(
                    "invalid value for '{prop}': '{}' (want {})",
                    v.value,
                    allowed.join(", ")
                ),
            );
            None
        }
    }

    /// `[ item, … ]` of strings, names and numbers (no line end consumed).
    fn list_inner(&mut self, prop: &str) -> Option<Vec<Spanned<String>>> {
        let open = self.peek();
        if open.kind != TokenKind::LBracket {
            self.bad_value(prop, "a list", self.sp(open));
            return None;
        }
        self.bump();
        let mut items = Vec::new();
        loop {
            match self.kind() {
                TokenKind::RBracket => {
                    self.bump();
                    return Some(items);
                }
                TokenKind::Comma => {
                    self.bump();
                }
                TokenKind::Nl | TokenKind::Eof | TokenKind::Dedent | TokenKind::Indent => {
                    self.diag_at("E002", self.sp(open), "unclosed '['");
                    return Some(items);
                }
                _ => match self.val() {
                    Some(Val::Bool(b)) => {
                        self.bad_value(prop, "a string, name or number", b.span);
                    }
                    Some(v) => items.push(v.into_text()),
                    None => {
                        self.expected("a list item or ']'");
                        self.bump();
                    }
                },
            }
        }
    }

    fn list_prop(&mut self, prop: &str) -> Option<Vec<Spanned<String>>> {
        let v = self.list_inner(prop);
        if v.is_none() {
            self.skip_line();
            return None;
        }
        self.end_line();
        v
    }

    /// `[tool_ref, …]` where a tool ref is `NAME { . NAME } [ . * ]`.
    fn tool_list_prop(&mut self, prop: &str) -> Option<Vec<Spanned<String>>> {
        let open = self.peek();
        if open.kind != TokenKind::LBracket {
            self.bad_value(prop, "a tool list", self.sp(open));
            self.skip_line();
            return None;
        }
        self.bump();
        let mut items = Vec::new();
        loop {
            match self.kind() {
                TokenKind::RBracket => {
                    self.bump();
                    break;
                }
                TokenKind::Comma => {
                    self.bump();
                }
                TokenKind::Ident => {
                    let first = self.bump();
                    let mut text = self.text(first).to_string();
                    let mut span = self.sp(first);
                    while self.kind() == TokenKind::Dot {
                        let nt = self.peek_at(1);
                        match nt.kind {
                            TokenKind::Ident | TokenKind::Star => {
                                self.bump();
                                self.bump();
                                text.push('.');
                                text.push_str(self.text(nt));
                                span = span.to(self.sp(nt));
                                if nt.kind == TokenKind::Star {
                                    break;
                                }
                            }
                            _ => {
                                self.bump();
                                self.expected("a tool name or '*'");
                                break;
                            }
                        }
                    }
                    items.push(Spanned::new(text, span));
                }
                TokenKind::Nl | TokenKind::Eof | TokenKind::Dedent | TokenKind::Indent => {
                    self.diag_at("E002", self.sp(open), "unclosed '['");
                    return Some(items);
                }
                _ => {
                    let t = self.peek();
                    self.bad_value(prop, "a tool name", self.sp(t));
                    self.bump();
                }
            }
        }
        self.end_line();
        Some(items)
    }

    /// `{ KEY: value … }` (no line end consumed). Keys are names (or strings when `string_keys`).
    fn inline_map(&mut self, block: &str, string_keys: bool) -> Vec<(Spanned<String>, Val)> {
        let open = self.bump();
        let mut out: Vec<(Spanned<String>, Val)> = Vec::new();
        loop {
            match self.kind() {
                TokenKind::RBrace => {
                    self.bump();
                    break;
                }
                TokenKind::Comma => {
                    self.bump();
                }
                TokenKind::Nl | TokenKind::Eof | TokenKind::Dedent | TokenKind::Indent => {
                    self.diag_at("E002", self.sp(open), "unclosed '{'");
                    break;
                }
                TokenKind::Ident | TokenKind::Str if string_keys || self.kind() == TokenKind::Ident => {
                    let kt = self.bump();
                    let key = Spanned::new(self.text(kt).to_string(), self.sp(kt));
                    if !self.expect(TokenKind::Colon, "':'") {
                        continue;
                    }
                    match self.val() {
                        Some(v) => self.push_unique(&mut out, key, v, block),
                        None => {
                            self.expected("a value");
                            if !matches!(self.kind(), TokenKind::RBrace | TokenKind::Nl) {
                                self.bump();
                            }
                        }
                    }
                }
                _ => {
                    self.expected("a key or '}'");
                    self.bump();
                }
            }
        }
        out
    }

    fn push_unique<T>(
        &mut self,
        out: &mut Vec<(Spanned<String>, T)>,
        key: Spanned<String>,
        v: T,
        block: &str,
    ) {
        if out.iter().any(|(k, _)| k.value == key.value) {
            self.diag_at(
                "E010",
                key.span,
                format!("duplicate entry '{}' in {block}", key.value),
            );
        } else {
            out.push((key, v));
        }
    }

    /// `string_map ::= inline_map NL | block( NAME ':' map_value NL )`.
    fn string_map(&mut self, prop: &str, block: &str) -> Option<TextMap> {
        let mut entries: Vec<(Spanned<String>, Val)> = Vec::new();
        if self.kind() == TokenKind::LBrace {
            entries = self.inline_map(block, false);
            self.end_line();
        } else {
            let ok = self.block(&format!("an inline map or an indented block for '{prop}'"), |p| {
                let Some(key) = p.key() else { return };
                if let Some(v) = p.simple(key.value, Accept::MAP_VALUE) {
                    p.push_unique(&mut entries, key.owned(), v, block);
                }
            });
            if !ok {
                return None;
            }
        }
        Some(TextMap {
            entries: entries
                .into_iter()
                .map(|(k, v)| MapEntry {
                    key: k,
                    value: v.into_text(),
                })
                .collect(),
        })
    }

    /// A literal (01 §3.1): scalar, `[…]` or `{…}`.
    fn literal(&mut self) -> Option<(serde_json::Value, Span, LitKind)> {
        self.lit_depth += 1;
        let r = if self.lit_depth > MAX_LITERAL_DEPTH {
            let t = self.peek();
            self.diag_at(
                "E020",
                self.sp(t),
                format!("invalid value: literal nested too deeply (max {MAX_LITERAL_DEPTH})"),
            );
            None
        } else {
            self.literal_inner()
        };
        self.lit_depth -= 1;
        r
    }

    fn literal_inner(&mut self) -> Option<(serde_json::Value, Span, LitKind)> {
        let t = self.peek();
        match t.kind {
            TokenKind::LBracket => {
                self.bump();
                let mut items = Vec::new();
                let mut all_str = true;
                loop {
                    match self.kind() {
                        TokenKind::RBracket => {
                            let c = self.bump();
                            return Some((
                                serde_json::Value::Array(items),
                                self.sp(t).to(self.sp(c)),
                                LitKind::List { all_str },
                            ));
                        }
                        TokenKind::Comma => {
                            self.bump();
                        }
                        TokenKind::Nl | TokenKind::Eof | TokenKind::Dedent | TokenKind::Indent => {
                            self.diag_at("E002", self.sp(t), "unclosed '['");
                            return None;
                        }
                        _ => {
                            let (v, _, k) = self.literal()?;
                            all_str &= k == LitKind::Str;
                            items.push(v);
                        }
                    }
                }
            }
            TokenKind::LBrace => {
                self.bump();
                let mut map = serde_json::Map::new();
                loop {
                    match self.kind() {
                        TokenKind::RBrace => {
                            let c = self.bump();
                            return Some((
                                serde_json::Value::Object(map),
                                self.sp(t).to(self.sp(c)),
                                LitKind::Map,
                            ));
                        }
                        TokenKind::Comma => {
                            self.bump();
                        }
                        TokenKind::Ident | TokenKind::Str => {
                            let kt = self.bump();
                            let key = self.text(kt).to_string();
                            if !self.expect(TokenKind::Colon, "':'") {
                                return None;
                            }
                            let (v, _, _) = self.literal()?;
                            if map.contains_key(&key) {
                                self.diag_at(
                                    "E010",
                                    self.sp(kt),
                                    format!("duplicate entry '{key}' in map literal"),
                                );
                            } else {
                                map.insert(key, v);
                            }
                        }
                        _ => {
                            self.expected("a key or '}'");
                            return None;
                        }
                    }
                }
            }
            TokenKind::Str => {
                self.bump();
                Some((
                    serde_json::Value::String(self.text(t).to_string()),
                    self.sp(t),
                    LitKind::Str,
                ))
            }
            TokenKind::Int => {
                self.bump();
                let v: i64 = self.text(t).parse().unwrap_or(i64::MAX);
                Some((serde_json::Value::from(v), self.sp(t), LitKind::Int))
            }
            TokenKind::Float => {
                self.bump();
                let v: f64 = self.text(t).parse().unwrap_or(0.0);
                Some((serde_json::Value::from(v), self.sp(t), LitKind::Float))
            }
            TokenKind::True | TokenKind::False => {
                self.bump();
                Some((
                    serde_json::Value::Bool(t.kind == TokenKind::True),
                    self.sp(t),
                    LitKind::Bool,
                ))
            }
            _ => {
                self.expected("a literal value");
                None
            }
        }
    }

    fn var_type(&mut self) -> Option<VarType> {
        let t = self.peek();
        match t.kind {
            TokenKind::StringList => {
                self.bump();
                Some(VarType::StringList)
            }
            TokenKind::Ident => {
                self.bump();
                let w = self.text(t);
                match VarType::from_word(w) {
                    Some(ty) => Some(ty),
                    None => {
                        self.diag_at(
                            "E021",
                            self.sp(t),
                            format!("unknown type '{w}' (want string, bool, int, float, json, string[])"),
                        );
                        None
                    }
                }
            }
            _ => {
                self.expected("a type");
                None
            }
        }
    }

    // ----------------------------------------------------------------------------------------------------
    // file and top-level declarations
    // ----------------------------------------------------------------------------------------------------

    fn file(&mut self) -> Vec<Decl> {
        let mut decls = Vec::new();
        loop {
            let t = self.peek();
            match t.kind {
                TokenKind::Eof => break,
                TokenKind::Nl | TokenKind::Dedent => {
                    self.bump();
                }
                TokenKind::Indent => {
                    self.diag_at("E001", self.sp(t), "unexpected indentation");
                    self.skip_block();
                }
                TokenKind::Ident if DECL_KEYWORDS.contains(&self.text(t)) => {
                    let before = self.i;
                    if let Some(d) = self.top_decl() {
                        decls.push(d);
                    }
                    if self.i == before {
                        self.bump();
                        self.skip_to_decl();
                    }
                }
                _ => {
                    let msg = format!("unexpected {}", self.describe(t));
                    self.diag_at("E001", self.sp(t), msg);
                    self.bump();
                    self.skip_to_decl();
                }
            }
        }
        decls
    }

    /// Skips to the next line that starts at column 1 with a declaration keyword.
    fn skip_to_decl(&mut self) {
        loop {
            let t = self.peek();
            if t.kind == TokenKind::Eof {
                return;
            }
            let prev_is_break =
                self.i == 0 || matches!(self.toks[self.i - 1].kind, TokenKind::Nl | TokenKind::Dedent);
            if t.kind == TokenKind::Ident
                && self.sp(t).col == 1
                && prev_is_break
                && DECL_KEYWORDS.contains(&self.text(t))
            {
                return;
            }
            self.bump();
        }
    }

    fn decl_name(&mut self, kind: &str) -> Option<Spanned<String>> {
        let name = self.name(&format!("a {kind} name"));
        let name = match name {
            Some(n) => n,
            None => {
                self.skip_line();
                return None;
            }
        };
        if !self.expect(TokenKind::Colon, "':'") {
            self.skip_line();
            return None;
        }
        Some(name)
    }

    fn reserved(&mut self, name: &Spanned<String>) -> bool {
        if name.value == "done" || name.value == "fail" {
            self.diag_at(
                "E011",
                name.span,
                format!("'{}' is reserved for the implicit terminal node", name.value),
            );
            true
        } else {
            false
        }
    }

    /// A node declared `done` or `fail`: `C042`, as the reference's validator reports it (other declarations
    /// with those names are `E011`).
    fn reserved_node(&mut self, name: &Spanned<String>) -> bool {
        if name.value == "done" || name.value == "fail" {
            self.diag_at(
                "C042",
                name.span,
                format!("'{}' is a terminal node and cannot be declared", name.value),
            );
            true
        } else {
            false
        }
    }

    fn top_decl(&mut self) -> Option<Decl> {
        let kw_tok = self.bump();
        let kw = self.text(kw_tok);
        match kw {
            "vars" | "presets" | "attachments" => {
                if !self.expect(TokenKind::Colon, "':'") {
                    self.skip_line();
                    return None;
                }
                let seen = match kw {
                    "vars" => std::mem::replace(&mut self.seen_vars, true),
                    "presets" => std::mem::replace(&mut self.seen_presets, true),
                    _ => std::mem::replace(&mut self.seen_attachments, true),
                };
                if seen {
                    self.diag_at(
                        "E014",
                        self.sp(kw_tok),
                        format!("duplicate top-level '{kw}' block (the first one is used)"),
                    );
                }
                let d = match kw {
                    "vars" => Decl::Vars(self.vars_block(self.sp(kw_tok))),
                    "presets" => Decl::Presets(self.presets_block(self.sp(kw_tok))),
                    _ => Decl::Attachments(self.attachments_block(self.sp(kw_tok))),
                };
                if seen { None } else { Some(d) }
            }
            "prompt" => {
                let name = self.decl_name("prompt")?;
                let reserved = self.reserved(&name);
                let t = self.peek();
                let body_span = self.sp(t);
                let body = if t.kind == TokenKind::PromptBody {
                    self.bump();
                    self.text(t).to_string()
                } else {
                    self.expected("end of line after the prompt header");
                    self.skip_line();
                    return None;
                };
                self.end_line();
                if reserved {
                    return None;
                }
                Some(Decl::Prompt(Prompt {
                    name,
                    body,
                    body_span,
                }))
            }
            "schema" => {
                let name = self.decl_name("schema")?;
                let reserved = self.reserved(&name);
                let s = self.schema_body(name);
                (!reserved).then_some(Decl::Schema(s))
            }
            "cursor" => {
                let name = self.decl_name("cursor")?;
                let reserved = self.reserved(&name);
                let c = self.cursor_body(name);
                (!reserved).then_some(Decl::Cursor(c))
            }
            "mcp_server" => {
                let name = self.decl_name("mcp_server")?;
                let reserved = self.reserved(&name);
                let m = self.mcp_server_body(name);
                (!reserved).then(|| Decl::McpServer(Box::new(m)))
            }
            "workflow" => {
                let name = self.decl_name("workflow")?;
                let reserved = self.reserved(&name);
                let w = self.workflow_body(name);
                (!reserved).then(|| Decl::Workflow(Box::new(w)))
            }
            _ => {
                let kind = match kw {
                    "agent" => NodeKind::Agent,
                    "judge" => NodeKind::Judge,
                    "router" => NodeKind::Router,
                    "human" => NodeKind::Human,
                    "tool" => NodeKind::Tool,
                    _ => NodeKind::Compute,
                };
                let name = self.decl_name(kw)?;
                let reserved = self.reserved_node(&name);
                let n = self.node_body(name, kind);
                if reserved {
                    self.nodes.truncate(n);
                    return None;
                }
                Some(Decl::Node(n))
            }
        }
    }

    fn vars_block(&mut self, span: Span) -> VarsBlock {
        let mut vars: Vec<Var> = Vec::new();
        self.block("var declarations", |p| {
            let Some(name) = p.key() else { return };
            let Some(ty) = p.var_type() else {
                p.skip_line();
                return;
            };
            let mut default = None;
            if p.kind() == TokenKind::Eq {
                p.bump();
                let Some((v, vspan, kind)) = p.literal() else {
                    p.skip_line();
                    return;
                };
                match check_default(ty, v, kind) {
                    Some(v) => default = Some(v),
                    None => {
                        p.diag_at(
                            "E020",
                            vspan,
                            format!(
                                "invalid value for '{}': default for '{}' does not match type '{}'",
                                name.value,
                                name.value,
                                ty.as_str()
                            ),
                        );
                    }
                }
            } else if p.kind() != TokenKind::Nl {
                p.expected("'=' or end of line");
                p.skip_line();
                return;
            }
            p.end_line();
            if vars.iter().any(|v| v.name.value == name.value) {
                p.diag_at(
                    "E010",
                    name.span,
                    format!("duplicate entry '{}' in vars", name.value),
                );
            } else {
                vars.push(Var {
                    name: name.owned(),
                    ty,
                    default,
                });
            }
        });
        VarsBlock { span, vars }
    }

    fn presets_block(&mut self, span: Span) -> PresetsBlock {
        let mut presets: Vec<Preset> = Vec::new();
        self.block("preset declarations", |p| {
            let Some(name) = p.key() else { return };
            let mut values: Vec<(Spanned<String>, serde_json::Value)> = Vec::new();
            let block_name = format!("preset '{}'", name.value);
            p.block("preset values", |p| {
                let Some(var) = p.key() else { return };
                let Some((v, _, _)) = p.literal() else {
                    p.skip_line();
                    return;
                };
                p.end_line();
                p.push_unique(&mut values, var.owned(), v, &block_name);
            });
            presets.push(Preset {
                name: name.owned(),
                values,
            });
        });
        PresetsBlock { span, presets }
    }

    fn attachments_block(&mut self, span: Span) -> AttachmentsBlock {
        let mut attachments: Vec<Attachment> = Vec::new();
        self.block("attachment declarations", |p| {
            let Some(name) = p.key() else { return };
            let kt = p.peek();
            let kind = match (kt.kind, p.text(kt)) {
                (TokenKind::Ident, "file") => AttachmentKind::File,
                (TokenKind::Ident, "image") => AttachmentKind::Image,
                _ => {
                    p.bad_value(name.value, "file or image", p.sp(kt));
                    p.skip_line();
                    return;
                }
            };
            p.bump();
            let mut a = Attachment {
                name: name.owned(),
                kind,
                description: None,
                accept_mime: Vec::new(),
                required: false,
            };
            let ctx = format!("attachment '{}'", a.name.value);
            if p.kind() == TokenKind::Nl && p.peek_at(1).kind == TokenKind::Indent {
                p.block("attachment properties", |p| {
                    let Some(key) = p.key() else { return };
                    match key.value {
                        "description" => a.description = p.str_prop("description").map(|s| s.value),
                        "accept_mime" => {
                            if let Some(l) = p.list_prop("accept_mime") {
                                a.accept_mime = l.into_iter().map(|s| s.value).collect();
                            }
                        }
                        "required" => a.required = p.bool_prop("required").unwrap_or(false),
                        _ => p.unknown_prop(&key, &ctx),
                    }
                });
            } else {
                p.end_line();
            }
            attachments.push(a);
        });
        AttachmentsBlock { span, attachments }
    }

    fn mcp_server_body(&mut self, name: Spanned<String>) -> McpServer {
        let mut m = McpServer {
            name,
            transport: None,
            command: None,
            args: Vec::new(),
            url: None,
            auth: Vec::new(),
            auth_scopes: Vec::new(),
        };
        let ctx = format!("mcp_server '{}'", m.name.value);
        self.block("mcp_server properties", |p| {
            let Some(key) = p.key() else { return };
            match key.value {
                "transport" => {
                    if let Some(t) = p.enum_prop("transport", &["stdio", "http", "sse"]) {
                        m.transport = Some(match t.value.as_str() {
                            "stdio" => McpTransport::Stdio,
                            "http" => McpTransport::Http,
                            _ => McpTransport::Sse,
                        });
                    }
                }
                "command" => m.command = p.str_prop("command").map(|s| s.value),
                "args" => {
                    if let Some(l) = p.list_prop("args") {
                        m.args = l.into_iter().map(|s| s.value).collect();
                    }
                }
                "url" => m.url = p.str_prop("url").map(|s| s.value),
                "auth" => {
                    let mut auth: Vec<(String, String)> = Vec::new();
                    let mut scopes = Vec::new();
                    p.block("auth properties", |p| {
                        let Some(k) = p.key() else { return };
                        match k.value {
                            "type" | "auth_url" | "token_url" | "revoke_url" | "client_id" => {
                                if let Some(v) = p.str_prop(k.value) {
                                    auth.retain(|(a, _)| a != k.value);
                                    auth.push((k.value.to_string(), v.value));
                                }
                            }
                            "scopes" => {
                                if let Some(l) = p.list_prop("scopes") {
                                    scopes = l.into_iter().map(|s| s.value).collect();
                                }
                            }
                            _ => p.unknown_prop(&k, "mcp_server auth"),
                        }
                    });
                    m.auth = auth;
                    m.auth_scopes = scopes;
                }
                _ => p.unknown_prop(&key, &ctx),
            }
        });
        m
    }

    fn schema_body(&mut self, name: Spanned<String>) -> Schema {
        let mut fields: Vec<SchemaField> = Vec::new();
        let block_name = format!("schema '{}'", name.value);
        self.block("schema fields", |p| {
            let Some(fname) = p.key() else { return };
            let Some(ty) = p.var_type() else {
                p.skip_line();
                return;
            };
            let mut enum_values = None;
            if p.kind() == TokenKind::LBracket {
                let open = p.bump();
                if !(p.at_word("enum") && p.peek_at(1).kind == TokenKind::Colon) {
                    p.expected("'enum:'");
                    p.skip_line();
                    return;
                }
                p.bump();
                p.bump();
                let mut vals = Vec::new();
                loop {
                    let t = p.peek();
                    match t.kind {
                        TokenKind::Str => {
                            p.bump();
                            vals.push(p.text(t).to_string());
                        }
                        TokenKind::Comma => {
                            p.bump();
                        }
                        TokenKind::RBracket => {
                            p.bump();
                            break;
                        }
                        _ => {
                            p.expected("an enum string or ']'");
                            p.skip_line();
                            return;
                        }
                    }
                }
                if ty != VarType::String {
                    p.diag_at(
                        "E020",
                        p.sp(open),
                        format!(
                            "invalid value for '{}': enum is only allowed on string fields",
                            fname.value
                        ),
                    );
                } else if vals.is_empty() {
                    p.diag_at(
                        "E020",
                        p.sp(open),
                        format!(
                            "invalid value for '{}': enum needs at least one string",
                            fname.value
                        ),
                    );
                } else {
                    enum_values = Some(vals);
                }
            }
            p.end_line();
            if fields.iter().any(|f| f.name.value == fname.value) {
                p.diag_at(
                    "E010",
                    fname.span,
                    format!("duplicate entry '{}' in {block_name}", fname.value),
                );
            } else {
                fields.push(SchemaField {
                    name: fname.owned(),
                    ty,
                    enum_values,
                });
            }
        });
        Schema { name, fields }
    }

    fn cursor_body(&mut self, name: Spanned<String>) -> CursorDecl {
        let mut c = CursorDecl {
            name,
            description: None,
            values: None,
            bands: None,
        };
        let ctx = format!("cursor '{}'", c.name.value);
        self.block("cursor properties", |p| {
            let Some(key) = p.key() else { return };
            match key.value {
                "description" => c.description = p.str_prop("description").map(|s| s.value),
                "values" | "bands" => {
                    let is_values = key.value == "values";
                    let mut out: Vec<(Spanned<String>, Spanned<String>)> = Vec::new();
                    let block_name = format!("{ctx} {}", key.value);
                    p.block("cursor levels", |p| {
                        let kt = p.peek();
                        let ok_key = if is_values {
                            kt.kind == TokenKind::Ident
                        } else {
                            kt.kind == TokenKind::Str
                        };
                        if !ok_key {
                            p.expected(if is_values {
                                "a level name"
                            } else {
                                "a quoted band \"LO..HI\""
                            });
                            p.skip_line();
                            return;
                        }
                        p.bump();
                        let k = Spanned::new(p.text(kt).to_string(), p.sp(kt));
                        if !p.expect(TokenKind::Colon, "':'") {
                            p.skip_line();
                            return;
                        }
                        let Some(v) = p.str_prop(&k.value) else { return };
                        p.push_unique(&mut out, k, v, &block_name);
                    });
                    if is_values {
                        c.values = Some(out);
                    } else {
                        c.bands = Some(out);
                    }
                }
                _ => p.unknown_prop(&key, &ctx),
            }
        });
        c
    }

    // ----------------------------------------------------------------------------------------------------
    // nodes
    // ----------------------------------------------------------------------------------------------------

    /// Parses a node's properties into a new node at the end of `self.nodes` and returns its index. A node is
    /// large (2.3 KB): it is built in place in the node table, never moved; `compile` takes the whole table.
    fn node_body(&mut self, name: Spanned<String>, kind: NodeKind) -> usize {
        let idx = self.nodes.len();
        self.nodes.push(Node::new(name, kind));
        self.block("node properties", |p| {
            // the value is parsed first (it needs the parser), then stored in the node
            macro_rules! set {
                ($field:ident, $value:expr) => {{
                    let v = $value;
                    p.nodes[idx].$field = v;
                }};
            }
            let Some(key) = p.key() else { return };
            if !node_prop_allowed(kind, key.value) {
                let ctx = format!("{} '{}'", kind.as_str(), p.nodes[idx].name.value);
                p.unknown_prop(&key, &ctx);
                return;
            }
            let k = key.value;
            match k {
                "model" => set!(model, p.str_prop(k)),
                "backend" => set!(backend, p.str_or_name_prop(k)),
                "provider" => set!(provider, p.str_prop(k)),
                "input" => set!(input, p.name_prop(k)),
                "output" => set!(output, p.name_prop(k)),
                "publish" => set!(publish, p.name_prop(k)),
                "system" => set!(system, p.name_prop(k)),
                "user" => set!(user, p.name_prop(k)),
                "instructions" => set!(instructions, p.name_prop(k)),
                "session" => {
                    set!(
                        session,
                        p.enum_prop(
                            k,
                            &[
                                "fresh",
                                "inherit",
                                "inherit_if_available",
                                "artifacts_only",
                                "fork",
                            ],
                        )
                    )
                }
                "tools" => set!(tools, p.tool_list_prop(k)),
                "tool_policy" => set!(tool_policy, p.tool_list_prop(k)),
                "capabilities" => set!(capabilities, p.tool_list_prop(k)),
                "tool_max_steps" => set!(tool_max_steps, p.int_prop(k)),
                "max_tokens" => set!(max_tokens, p.int_prop(k)),
                "reasoning_effort" => set!(reasoning_effort, p.reasoning_effort_prop(k)),
                "readonly" => set!(readonly, p.bool_prop(k)),
                "interaction" => set!(interaction, p.enum_prop(k, INTERACTIONS)),
                "interaction_prompt" => set!(interaction_prompt, p.name_prop(k)),
                "interaction_model" => set!(interaction_model, p.str_prop(k)),
                "await" => set!(await_mode, p.enum_prop(k, &["wait_all", "best_effort"])),
                "mode" => set!(
                    router_mode,
                    p.enum_prop(k, &["fan_out_all", "condition", "round_robin", "llm"])
                ),
                "multi" => set!(multi, p.bool_prop(k)),
                "min_answers" => set!(min_answers, p.int_prop(k)),
                "command" => set!(command, p.str_prop(k)),
                "script" => set!(script, p.str_prop(k)),
                "language" => set!(language, p.name_prop(k)),
                "mcp" => set!(mcp, Some(p.mcp_block())),
                "compaction" => set!(compaction, Some(p.compaction_block())),
                "memory" => set!(memory, Some(p.memory_block())),
                "cursors" => set!(cursors, Some(p.cursors_block())),
                "expr" => {
                    let mut entries: Vec<(Spanned<String>, Spanned<String>)> = Vec::new();
                    let block_name = format!("expr of '{}'", p.nodes[idx].name.value);
                    p.block("expr entries", |p| {
                        let Some(ek) = p.key() else { return };
                        let Some(v) = p.str_prop(ek.value) else { return };
                        p.push_unique(&mut entries, ek.owned(), v, &block_name);
                    });
                    p.nodes[idx].expr = entries;
                }
                "sandbox" => set!(sandbox, p.sandbox(key.span, SandboxScope::Node).map(Box::new)),
                _ => {
                    let ctx = format!("{} '{}'", kind.as_str(), p.nodes[idx].name.value);
                    p.unknown_prop(&key, &ctx)
                }
            }
        });
        idx
    }

    fn mcp_block(&mut self) -> McpBlock {
        let mut m = McpBlock::default();
        self.block("mcp properties", |p| {
            let Some(key) = p.key() else { return };
            match key.value {
                "autoload_project" => m.autoload_project = p.bool_prop("autoload_project"),
                "inherit" => m.inherit = p.bool_prop("inherit"),
                "servers" => m.servers = p.list_prop("servers"),
                "disable" => {
                    m.disable = p
                        .list_prop("disable")
                        .map(|l| l.into_iter().map(|s| s.value).collect())
                }
                _ => p.unknown_prop(&key, "mcp"),
            }
        });
        m
    }

    fn compaction_block(&mut self) -> Compaction {
        let mut c = Compaction::default();
        self.block("compaction properties", |p| {
            let Some(key) = p.key() else { return };
            match key.value {
                "threshold" => c.threshold = p.num_prop("threshold"),
                "preserve_recent" => c.preserve_recent = p.int_prop("preserve_recent"),
                _ => p.unknown_prop(&key, "compaction"),
            }
        });
        c
    }

    fn memory_block(&mut self) -> Memory {
        let mut m = Memory::default();
        self.block("memory properties", |p| {
            let Some(key) = p.key() else { return };
            let k = key.value;
            match k {
                "enabled" => m.enabled = p.bool_prop(k),
                "scope" => m.scope = p.str_prop(k).map(|s| s.value),
                "autoload" => m.autoload = p.list_prop(k).map(|l| l.into_iter().map(|s| s.value).collect()),
                "read" => m.read = p.bool_prop(k),
                "write" => m.write = p.bool_prop(k),
                "pre_compact_inject" => m.pre_compact_inject = p.bool_prop(k),
                _ => p.unknown_prop(&key, "memory"),
            }
        });
        m
    }

    fn cursors_block(&mut self) -> CursorSettings {
        let mut c = CursorSettings {
            enabled: true,
            values: Vec::new(),
        };
        self.block("cursor settings", |p| {
            let Some(key) = p.key() else { return };
            if key.value == "enabled" {
                if let Some(b) = p.bool_prop("enabled") {
                    c.enabled = b;
                }
                return;
            }
            let Some(v) = p.simple(key.value, Accept::MAP_VALUE) else {
                return;
            };
            let mut vals = std::mem::take(&mut c.values);
            p.push_unique(&mut vals, key.owned(), v.into_text(), "cursors");
            c.values = vals;
        });
        c
    }

    // ----------------------------------------------------------------------------------------------------
    // sandbox (01 §6)
    // ----------------------------------------------------------------------------------------------------

    fn sandbox(&mut self, key_span: Span, scope: SandboxScope) -> Option<SandboxDecl> {
        let mut d = SandboxDecl::empty(key_span, scope);
        let t = self.peek();
        match t.kind {
            TokenKind::Ident => {
                self.bump();
                d.short = true;
                d.mode = Some(Spanned::new(self.text(t).to_string(), self.sp(t)));
                self.end_line();
                d.kind = d.derive_kind();
                return Some(d);
            }
            TokenKind::Nl => {
                if self.peek_at(1).kind != TokenKind::Indent {
                    let n = self.peek_at(1);
                    let msg = format!(
                        "expected a sandbox mode or an indented block, found {}",
                        self.describe(n)
                    );
                    self.bump();
                    self.diag_at("E002", key_span, msg);
                    return None;
                }
            }
            _ => {
                self.expected("a sandbox mode or an indented block");
                self.skip_line();
                return None;
            }
        }
        self.block("sandbox properties", |p| {
            let Some(key) = p.key() else { return };
            let k = key.value;
            match k {
                "mode" => d.mode = p.name_prop(k),
                "image" => d.image = p.str_prop(k),
                "user" => d.user = p.str_prop(k),
                "workspace_folder" => d.workspace_folder = p.str_prop(k),
                "host_state" => d.host_state = p.name_prop(k),
                "runtime" => d.runtime = p.str_or_name_prop(k),
                "post_create" => d.post_create = p.str_prop(k),
                "env" => {
                    if let Some(m) = p.string_map(k, "sandbox.env") {
                        d.env = Some(m);
                    }
                }
                "mounts" => d.mounts = p.list_prop(k),
                "build" => {
                    let mut b = BuildDecl {
                        span: key.span,
                        ..BuildDecl::default()
                    };
                    p.block("build properties", |p| {
                        let Some(bk) = p.key() else { return };
                        let k = bk.value;
                        match k {
                            "dockerfile" => b.dockerfile = p.str_prop(k),
                            "context" => b.context = p.str_prop(k),
                            "target" => b.target = p.str_prop(k),
                            "args" => {
                                if let Some(m) = p.string_map(k, "sandbox.build.args") {
                                    b.args = Some(m);
                                }
                            }
                            _ => p.unknown_prop(&bk, "sandbox.build"),
                        }
                    });
                    d.build = Some(b);
                }
                "network" => {
                    let mut nw = NetworkDecl {
                        span: key.span,
                        ..NetworkDecl::default()
                    };
                    // an empty `network:` (end of line, no block) is allowed: no property set
                    if p.kind() == TokenKind::Nl && p.peek_at(1).kind != TokenKind::Indent {
                        p.bump();
                    } else {
                        p.block("network properties", |p| {
                            let Some(nk) = p.key() else { return };
                            let k = nk.value;
                            match k {
                                "mode" => nw.mode = p.name_prop(k),
                                "preset" => nw.preset = p.str_or_name_prop(k),
                                "inherit" => nw.inherit = p.name_prop(k),
                                "rules" => nw.rules = p.list_prop(k),
                                _ => p.unknown_prop(&nk, "sandbox.network"),
                            }
                        });
                    }
                    d.network = Some(nw);
                }
                "secrets" => {
                    let mut list: Vec<crate::model::SecretDecl> = Vec::new();
                    p.block("secret names", |p| {
                        if let Some(s) = p.secret_decl() {
                            list.push(s);
                        }
                    });
                    d.secrets = Some(list);
                }
                _ => p.unknown_prop(&key, "sandbox"),
            }
        });
        d.kind = d.derive_kind();
        Some(d)
    }

    /// One `NAME: [hosts…]` or `NAME:` block (`hosts`, `as`, `plain_http`) of `sandbox.secrets`.
    fn secret_decl(&mut self) -> Option<crate::model::SecretDecl> {
        let name = self.key()?;
        let prop = name.value;
        let mut s = crate::model::SecretDecl {
            name: name.owned(),
            hosts: None,
            delivery: None,
            plain_http: None,
        };
        if self.kind() == TokenKind::LBracket {
            s.hosts = self.list_prop(prop);
            return Some(s);
        }
        self.block("secret properties", |p| {
            let Some(k) = p.key() else { return };
            match k.value {
                "hosts" => s.hosts = p.list_prop(k.value),
                "as" => s.delivery = p.name_prop(k.value),
                "plain_http" => s.plain_http = p.bool_prop(k.value),
                _ => p.unknown_prop(&k, "sandbox.secrets"),
            }
        });
        Some(s)
    }

    // ----------------------------------------------------------------------------------------------------
    // workflow
    // ----------------------------------------------------------------------------------------------------

    fn workflow_body(&mut self, name: Spanned<String>) -> WorkflowDecl {
        let mut w = WorkflowDecl {
            name,
            entry: None,
            vars: None,
            attachments: None,
            default_backend: None,
            tool_policy: None,
            capabilities: None,
            interaction: None,
            mcp: None,
            compaction: None,
            budget: None,
            worktree: None,
            sandbox: None,
            edges: Vec::new(),
        };
        let ctx = format!("workflow '{}'", w.name.value);
        self.block("workflow properties or edges", |p| {
            let first = p.peek();
            let second = p.peek_at(1);
            if first.kind == TokenKind::Ident && second.kind == TokenKind::Arrow {
                if let Some(e) = p.edge() {
                    w.edges.push(e);
                }
                return;
            }
            let Some(key) = p.key() else { return };
            let k = key.value;
            match k {
                "entry" => w.entry = p.name_prop(k),
                "vars" => {
                    let b = p.vars_block(key.span);
                    if w.vars.is_some() {
                        p.diag_at(
                            "E010",
                            key.span,
                            "duplicate entry 'vars' in workflow (the first one is used)",
                        );
                    } else {
                        w.vars = Some(b);
                    }
                }
                "attachments" => {
                    let b = p.attachments_block(key.span);
                    if w.attachments.is_some() {
                        p.diag_at(
                            "E010",
                            key.span,
                            "duplicate entry 'attachments' in workflow (the first one is used)",
                        );
                    } else {
                        w.attachments = Some(b);
                    }
                }
                "default_backend" => w.default_backend = p.str_or_name_prop(k),
                "tool_policy" => w.tool_policy = p.tool_list_prop(k),
                "capabilities" => w.capabilities = p.tool_list_prop(k),
                "interaction" => w.interaction = p.enum_prop(k, INTERACTIONS),
                "mcp" => w.mcp = Some(p.mcp_block()),
                "compaction" => w.compaction = Some(Spanned::new(p.compaction_block(), key.span)),
                "budget" => {
                    let mut b = Budget::default();
                    p.block("budget properties", |p| {
                        let Some(bk) = p.key() else { return };
                        let k = bk.value;
                        match k {
                            "max_parallel_branches" => b.max_parallel_branches = p.int_prop(k),
                            "max_duration" => b.max_duration = p.str_prop(k),
                            "max_cost_usd" => b.max_cost_usd = p.num_prop(k),
                            "max_tokens" => b.max_tokens = p.int_prop(k),
                            "max_iterations" => b.max_iterations = p.int_prop(k),
                            _ => p.unknown_prop(&bk, "budget"),
                        }
                    });
                    w.budget = Some(Spanned::new(b, key.span));
                }
                "worktree" => w.worktree = p.name_prop(k),
                "sandbox" => w.sandbox = p.sandbox(key.span, SandboxScope::Workflow),
                _ => p.unknown_prop(&key, &ctx),
            }
        });
        w
    }

    fn edge(&mut self) -> Option<Edge> {
        let ft = self.bump();
        let from = Spanned::new(self.text(ft).to_string(), self.sp(ft));
        let arrow = self.bump();
        let to = match self.name("a target node name") {
            Some(t) => t,
            None => {
                self.skip_line();
                return None;
            }
        };
        let mut e = Edge {
            span: self.sp(arrow),
            from,
            to,
            condition: None,
            loop_spec: None,
            with: TextMap::default(),
        };
        let mut seen_with = false;
        loop {
            let t = self.peek();
            match t.kind {
                TokenKind::Nl | TokenKind::Eof | TokenKind::Dedent => break,
                TokenKind::Ident if self.text(t) == "when" => {
                    self.bump();
                    let cond = self.when_clause()?;
                    if e.condition.is_some() {
                        self.dup_clause("when", &e, self.sp(t));
                    } else {
                        e.condition = Some(cond);
                    }
                }
                TokenKind::Ident if self.text(t) == "as" => {
                    self.bump();
                    let l = self.loop_clause()?;
                    if e.loop_spec.is_some() {
                        self.dup_clause("as", &e, self.sp(t));
                    } else {
                        e.loop_spec = Some(l);
                    }
                }
                TokenKind::Ident if self.text(t) == "with" => {
                    self.bump();
                    if self.kind() != TokenKind::LBrace {
                        self.expected("'{' after 'with'");
                        self.skip_line();
                        return None;
                    }
                    let block = format!("with map of edge {} -> {}", e.from.value, e.to.value);
                    let entries = self.inline_map(&block, false);
                    if seen_with {
                        self.dup_clause("with", &e, self.sp(t));
                    } else {
                        seen_with = true;
                        e.with = TextMap {
                            entries: entries
                                .into_iter()
                                .map(|(k, v)| MapEntry {
                                    key: k,
                                    value: v.into_text(),
                                })
                                .collect(),
                        };
                    }
                }
                _ => {
                    self.expected("'when', 'as', 'with' or end of line");
                    self.skip_line();
                    return Some(e);
                }
            }
        }
        self.end_line();
        Some(e)
    }

    fn dup_clause(&mut self, clause: &str, e: &Edge, span: Span) {
        self.diag_at(
            "E030",
            span,
            format!(
                "duplicate '{clause}' clause on edge {} -> {} (the first one is used)",
                e.from.value, e.to.value
            ),
        );
    }

    fn when_clause(&mut self) -> Option<Condition> {
        let t = self.peek();
        match t.kind {
            TokenKind::Str => {
                self.bump();
                let text = self.text(t).to_string();
                if text.trim().is_empty() {
                    self.diag_at(
                        "E020",
                        self.sp(t),
                        "invalid value for 'when': the expression is empty",
                    );
                }
                Some(Condition::Expr {
                    text: Spanned::new(text, self.sp(t)),
                })
            }
            TokenKind::Ident => {
                self.bump();
                let mut negated = false;
                let mut field = Spanned::new(self.text(t).to_string(), self.sp(t));
                if field.value == "not" && self.kind() == TokenKind::Ident {
                    let f = self.bump();
                    negated = true;
                    field = Spanned::new(self.text(f).to_string(), self.sp(f));
                }
                Some(Condition::Field { field, negated })
            }
            _ => {
                self.expected("a field name or a quoted expression after 'when'");
                self.skip_line();
                None
            }
        }
    }

    fn loop_clause(&mut self) -> Option<LoopSpec> {
        let name = match self.name("a loop name after 'as'") {
            Some(n) => n,
            None => {
                self.skip_line();
                return None;
            }
        };
        if !self.expect(TokenKind::LParen, "'('") {
            self.skip_line();
            return None;
        }
        let t = self.peek();
        let cap = match t.kind {
            TokenKind::Int => LoopCap::Literal(self.text(t).parse().unwrap_or(i64::MAX)),
            TokenKind::Str => LoopCap::Template(self.text(t).to_string()),
            _ => {
                self.expected("a loop cap (integer or quoted template)");
                self.skip_line();
                return None;
            }
        };
        self.bump();
        if !self.expect(TokenKind::RParen, "')'") {
            self.skip_line();
            return None;
        }
        Some(LoopSpec {
            name,
            cap: Spanned::new(cap, self.sp(t)),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LitKind {
    Str,
    Int,
    Float,
    Bool,
    List { all_str: bool },
    Map,
}

/// Checks (and normalises) a var default against its type (01 §3.1).
fn check_default(ty: VarType, v: serde_json::Value, kind: LitKind) -> Option<serde_json::Value> {
    match ty {
        VarType::String => (kind == LitKind::Str).then_some(v),
        VarType::Bool => (kind == LitKind::Bool).then_some(v),
        VarType::Int => (kind == LitKind::Int).then_some(v),
        VarType::Float => match kind {
            LitKind::Int | LitKind::Float => Some(serde_json::Value::from(v.as_f64().unwrap_or(0.0))),
            _ => None,
        },
        VarType::Json => Some(v),
        VarType::StringList => match kind {
            LitKind::List { all_str: true } => Some(v),
            LitKind::Str => {
                let s = v.as_str().unwrap_or("");
                if let Ok(serde_json::Value::Array(items)) =
                    serde_json::from_str::<serde_json::Value>(s.trim())
                {
                    if items.iter().all(serde_json::Value::is_string) {
                        return Some(serde_json::Value::Array(items));
                    }
                    return None;
                }
                let items: Vec<serde_json::Value> = if s.trim().is_empty() {
                    Vec::new()
                } else {
                    s.split(',')
                        .map(|x| serde_json::Value::String(x.trim().to_string()))
                        .collect()
                };
                Some(serde_json::Value::Array(items))
            }
            _ => None,
        },
    }
}

/// Value kinds accepted by a simple property.
#[derive(Debug, Clone, Copy)]
struct Accept {
    str: bool,
    name: bool,
    int: bool,
    num: bool,
    bool: bool,
}

impl Accept {
    const STR: Accept = Accept {
        str: true,
        name: false,
        int: false,
        num: false,
        bool: false,
    };
    const NAME: Accept = Accept {
        str: false,
        name: true,
        int: false,
        num: false,
        bool: false,
    };
    const STR_NAME: Accept = Accept {
        str: true,
        name: true,
        int: false,
        num: false,
        bool: false,
    };
    const INT: Accept = Accept {
        str: false,
        name: false,
        int: true,
        num: false,
        bool: false,
    };
    const NUM: Accept = Accept {
        str: false,
        name: false,
        int: true,
        num: true,
        bool: false,
    };
    const BOOL: Accept = Accept {
        str: false,
        name: false,
        int: false,
        num: false,
        bool: true,
    };
    const MAP_VALUE: Accept = Accept {
        str: true,
        name: true,
        int: true,
        num: true,
        bool: true,
    };

    fn describe(self) -> &'static str {
        match (self.str, self.name, self.int, self.num, self.bool) {
            (true, false, false, false, false) => "a string",
            (false, true, false, false, false) => "a name",
            (true, true, false, false, false) => "a string or a name",
            (false, false, true, false, false) => "an integer",
            (false, false, _, true, false) => "a number",
            (false, false, false, false, true) => "true or false",
            _ => "a string, name, number or boolean",
        }
    }
}

/// Which simple properties and sub-blocks each node kind accepts (01 §3.8–§3.12).
fn node_prop_allowed(kind: NodeKind, prop: &str) -> bool {
    const AGENT: &[&str] = &[
        "model",
        "backend",
        "provider",
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
        "max_tokens",
        "reasoning_effort",
        "readonly",
        "interaction",
        "interaction_prompt",
        "interaction_model",
        "await",
        "mcp",
        "compaction",
        "memory",
        "cursors",
        "sandbox",
    ];
    const ROUTER: &[&str] = &[
        "mode",
        "model",
        "backend",
        "provider",
        "system",
        "user",
        "multi",
        "reasoning_effort",
    ];
    const HUMAN: &[&str] = &[
        "input",
        "output",
        "publish",
        "instructions",
        "interaction",
        "interaction_prompt",
        "interaction_model",
        "model",
        "system",
        "min_answers",
        "await",
    ];
    const TOOL: &[&str] = &[
        "command", "script", "language", "input", "output", "await", "sandbox",
    ];
    const COMPUTE: &[&str] = &["input", "output", "await", "expr"];
    let list = match kind {
        NodeKind::Agent | NodeKind::Judge => AGENT,
        NodeKind::Router => ROUTER,
        NodeKind::Human => HUMAN,
        NodeKind::Tool => TOOL,
        NodeKind::Compute => COMPUTE,
    };
    list.contains(&prop)
}

fn short(s: &str) -> String {
    let mut out: String = s.chars().take(40).collect();
    if s.chars().count() > 40 {
        out.push('…');
    }
    out.replace('\n', "\\n")
}
