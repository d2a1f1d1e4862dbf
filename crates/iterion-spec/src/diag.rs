//! Diagnostics: every problem found in user input, with a stable code, a position and an optional hint.

use serde::Serialize;

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The input is rejected.
    Error,
    /// The input is accepted, but something deserves attention.
    Warning,
}

impl Severity {
    /// The lower-case word used in rendered diagnostics.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One problem in user input.
///
/// Lines and columns are 1-based; columns count Unicode scalar values (a tab counts as one column).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Stable code such as `E001`, `C044` or `D012`.
    pub code: &'static str,
    /// Error or warning.
    pub severity: Severity,
    /// The file as the user named it.
    pub file: String,
    /// Start line (1-based).
    pub line: u32,
    /// Start column (1-based, in Unicode scalar values).
    pub col: u32,
    /// End line (1-based, inclusive).
    pub end_line: u32,
    /// End column (1-based, exclusive).
    pub end_col: u32,
    /// What is wrong, lower-case, no trailing period.
    pub message: String,
    /// How to fix it, when a hint helps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Diagnostic {
    /// A diagnostic of the given severity covering one position.
    pub fn new(
        code: &'static str,
        severity: Severity,
        file: impl Into<String>,
        line: u32,
        col: u32,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            code,
            severity,
            file: file.into(),
            line,
            col,
            end_line: line,
            end_col: col + 1,
            message: message.into(),
            hint: None,
        }
    }

    /// An error diagnostic at one position.
    pub fn error(
        code: &'static str,
        file: impl Into<String>,
        line: u32,
        col: u32,
        message: impl Into<String>,
    ) -> Self {
        Self::new(code, Severity::Error, file, line, col, message)
    }

    /// A warning diagnostic at one position.
    pub fn warning(
        code: &'static str,
        file: impl Into<String>,
        line: u32,
        col: u32,
        message: impl Into<String>,
    ) -> Self {
        Self::new(code, Severity::Warning, file, line, col, message)
    }

    /// Sets the end of the blamed range.
    pub fn with_end(mut self, end_line: u32, end_col: u32) -> Self {
        self.end_line = end_line;
        self.end_col = end_col;
        self
    }

    /// Attaches a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Whether this diagnostic rejects the input.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// `<file>:<line>:<col>: <severity>[<code>]: <message>`.
    pub fn render_header(&self) -> String {
        format!(
            "{}:{}:{}: {}[{}]: {}",
            self.file,
            self.line,
            self.col,
            self.severity.as_str(),
            self.code,
            self.message
        )
    }

    /// The header, then `  hint: …` when a hint exists (no source excerpt; the CLI adds that).
    pub fn render(&self) -> String {
        match &self.hint {
            Some(h) => format!("{}\n  hint: {}", self.render_header(), h),
            None => self.render_header(),
        }
    }
}

/// Sorts diagnostics by position (file, line, column), keeping the order of equal positions.
pub fn sort(diags: &mut [Diagnostic]) {
    diags.sort_by(|a, b| (&a.file, a.line, a.col).cmp(&(&b.file, b.line, b.col)));
}

/// Whether any diagnostic is an error.
pub fn has_errors(diags: &[Diagnostic]) -> bool {
    diags.iter().any(Diagnostic::is_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_with_hint() {
        let d = Diagnostic::warning(
            "C128",
            "a.bot",
            2,
            3,
            "sandbox: none disables isolation for workflow x",
        )
        .with_hint("prefer sandbox: auto");
        assert_eq!(
            d.render(),
            "a.bot:2:3: warning[C128]: sandbox: none disables isolation for workflow x\n  hint: prefer sandbox: auto"
        );
        assert!(!d.is_error());
    }

    #[test]
    fn sorts_by_position() {
        let mut v = vec![
            Diagnostic::error("E2", "a", 3, 1, "x"),
            Diagnostic::error("E1", "a", 1, 9, "x"),
            Diagnostic::error("E3", "a", 1, 2, "x"),
        ];
        sort(&mut v);
        let codes: Vec<_> = v.iter().map(|d| d.code).collect();
        assert_eq!(codes, ["E3", "E1", "E2"]);
        assert!(has_errors(&v));
    }
}
