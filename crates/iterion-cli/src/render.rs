//! Human rendering of diagnostics: the header line, the source line with a caret, and the hint.

use iterion_spec::diag::Diagnostic;

/// Renders one diagnostic against the text of the file it blames.
///
/// ```text
/// wf.bot:3:9: error[E001]: unexpected '.'
///    3 |   peer: github.com
///      |         ^
///   hint: quote values that contain dots or hyphens
/// ```
///
/// Tabs in the excerpt are shown as one space, so the caret lines up with the column (a tab counts as one
/// column). When the line does not exist (a diagnostic at end of file) only the header and hint are printed.
pub fn render(diag: &Diagnostic, source: Option<&str>) -> String {
    let mut out = diag.render_header();
    if let Some(line_text) = source.and_then(|s| line_of(s, diag.line)) {
        let shown: String = line_text
            .chars()
            .map(|c| if c == '\t' { ' ' } else { c })
            .collect();
        let shown = shown.trim_end_matches(['\r', '\n']);
        let width = diag.line.to_string().len().max(3);
        let col = diag.col.max(1) as usize;
        let len_chars = shown.chars().count();
        let span = if diag.end_line == diag.line && diag.end_col > diag.col {
            (diag.end_col - diag.col) as usize
        } else {
            1
        };
        // Never draw carets far past the end of the line (an end-of-line diagnostic gets one caret).
        let span = span.min(len_chars.saturating_sub(col - 1).max(1));
        out.push_str(&format!("\n{:>width$} | {}", diag.line, shown));
        out.push_str(&format!(
            "\n{:>width$} | {}{}",
            "",
            " ".repeat(col - 1),
            "^".repeat(span)
        ));
    }
    if let Some(hint) = &diag.hint {
        out.push_str(&format!("\n  hint: {hint}"));
    }
    out
}

/// The 1-based line `n` of `source`, without its line terminator.
fn line_of(source: &str, n: u32) -> Option<&str> {
    if n == 0 {
        return None;
    }
    source.split('\n').nth(n as usize - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(src: &str, d: Diagnostic, expect: &str) {
        assert_eq!(render(&d, Some(src)), expect);
    }

    #[test]
    fn caret_under_span() {
        check(
            "workflow w:\n  peer: github.com\n",
            Diagnostic::error("E001", "a.bot", 2, 9, "unexpected '.'")
                .with_end(2, 19)
                .with_hint("quote values that contain dots or hyphens"),
            "a.bot:2:9: error[E001]: unexpected '.'\n  2 |   peer: github.com\n    |         ^^^^^^^^^^\n  hint: quote values that contain dots or hyphens",
        );
    }

    #[test]
    fn tab_counts_as_one_column() {
        check(
            "\tx: 1",
            Diagnostic::error("E003", "t.bot", 1, 1, "tab in indentation"),
            "t.bot:1:1: error[E003]: tab in indentation\n  1 |  x: 1\n    | ^",
        );
    }

    #[test]
    fn missing_line_prints_header_only() {
        let d = Diagnostic::error("E002", "e.bot", 9, 1, "unexpected end of file");
        assert_eq!(
            render(&d, Some("a\n")),
            "e.bot:9:1: error[E002]: unexpected end of file"
        );
        assert_eq!(render(&d, None), "e.bot:9:1: error[E002]: unexpected end of file");
    }

    #[test]
    fn end_of_line_gets_one_caret() {
        check(
            "ab",
            Diagnostic::error("E002", "e.bot", 1, 3, "expected ':'").with_end(1, 9),
            "e.bot:1:3: error[E002]: expected ':'\n  1 | ab\n    |   ^",
        );
    }
}
