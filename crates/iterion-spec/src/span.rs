//! Positions inside string values: where byte `offset` of a quoted string, a block scalar or a prompt body
//! sits in the file (for diagnostics that point into a value).

use crate::model::{Span, Spanned};

/// The position of byte `offset` (and `len` bytes) inside a string value.
///
/// Quoted and backtick strings taken verbatim map exactly (continuation lines of a backtick string start
/// at column 1). Block scalars and prompt bodies carry the span of their first character and every line was
/// stripped by the same width, so a line `n` below the first starts at the same column. Strict-mode strings
/// whose escapes were decoded map to the right line, approximately.
pub(crate) fn inner_span(v: &Spanned<String>, offset: usize, len: usize) -> Span {
    inner_span_of(&v.value, v.span, offset, len)
}

/// [`inner_span`] over a borrowed text and its span.
pub(crate) fn inner_span_of(text: &str, s: Span, offset: usize, len: usize) -> Span {
    let Some(prefix) = text.get(..offset) else {
        return s;
    };
    let nl = prefix.bytes().filter(|&b| b == b'\n').count() as u32;
    let last = prefix.rsplit('\n').next().unwrap_or("");
    let chars = last.chars().count() as u32;
    // a verbatim quoted or backtick string spans exactly its text plus the two delimiters
    let verbatim_quoted = s.end.saturating_sub(s.start) == text.len() + 2
        && if s.line == s.end_line {
            s.end_col == s.col + text.chars().count() as u32 + 2
        } else {
            s.end_col == text.rsplit('\n').next().unwrap_or("").chars().count() as u32 + 2
        };
    let (line, col) = match (verbatim_quoted, nl) {
        (true, 0) => (s.line, s.col + 1 + chars),
        (true, _) => (s.line + nl, 1 + chars),
        (false, _) => (s.line + nl, s.col + chars),
    };
    let n = text
        .get(offset..offset + len)
        .map_or(1, |p| p.chars().take_while(|&c| c != '\n').count()) as u32;
    Span {
        start: s.start + offset,
        end: s.start + offset + len,
        line,
        col,
        end_line: line,
        end_col: col + n.max(1),
    }
}
