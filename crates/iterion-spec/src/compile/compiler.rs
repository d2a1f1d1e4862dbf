//! The diagnostic sink every pass writes to.

use crate::diag::Diagnostic;
use crate::model::Span;

/// The state of one compile: the file name (for diagnostics) and the diagnostics so far.
pub(super) struct Compiler<'a> {
    file: &'a str,
    diags: Vec<Diagnostic>,
}

impl<'a> Compiler<'a> {
    /// A compile of `file` with no diagnostics yet.
    pub(super) fn new(file: &'a str) -> Compiler<'a> {
        Compiler {
            file,
            diags: Vec::new(),
        }
    }

    /// The file name diagnostics are reported against.
    pub(super) fn file(&self) -> &'a str {
        self.file
    }

    /// The diagnostics, in the order they were found.
    pub(super) fn into_diagnostics(self) -> Vec<Diagnostic> {
        self.diags
    }

    pub(super) fn push(&mut self, code: &'static str, warn: bool, span: Span, msg: String) -> usize {
        let d = if warn {
            Diagnostic::warning(code, self.file, span.line, span.col, msg)
        } else {
            Diagnostic::error(code, self.file, span.line, span.col, msg)
        };
        self.diags
            .push(d.with_end(span.end_line, span.end_col.max(span.col)));
        self.diags.len() - 1
    }

    pub(super) fn err(&mut self, code: &'static str, span: Span, msg: impl Into<String>) -> usize {
        self.push(code, false, span, msg.into())
    }

    pub(super) fn warn(&mut self, code: &'static str, span: Span, msg: impl Into<String>) -> usize {
        self.push(code, true, span, msg.into())
    }

    pub(super) fn hint(&mut self, i: usize, h: &str) {
        self.diags[i].hint = Some(h.to_string());
    }
}
