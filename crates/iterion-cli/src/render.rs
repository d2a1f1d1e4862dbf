//! Human rendering of diagnostics: the header line, the source line with a caret, and the hint.

use crate::terminal::clean;
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
    // The header names a file and may quote the workflow (a node name, a value); the excerpt is the
    // workflow's own text: both go through the terminal sanitiser.
    let mut out = clean(&diag.render_header()).into_owned();
    if let Some(line_text) = source.and_then(|s| line_of(s, diag.line)) {
        let line_text = line_text.trim_end_matches(['\r', '\n']);
        let col = diag.col.max(1) as usize;
        let span = if diag.end_line == diag.line && diag.end_col > diag.col {
            (diag.end_col - diag.col) as usize
        } else {
            1
        };
        // Columns count characters of the source; an escaped control character is wider on screen, so the
        // caret is placed by the width of the escaped text before it.
        let shown_width = |chars: &mut dyn Iterator<Item = char>| -> usize {
            chars
                .map(|c| {
                    if c == '\t' {
                        1
                    } else {
                        clean(c.encode_utf8(&mut [0; 4])).chars().count()
                    }
                })
                .sum()
        };
        let len_chars = line_text.chars().count();
        // Never draw carets far past the end of the line (an end-of-line diagnostic gets one caret).
        let span = span.min(len_chars.saturating_sub(col - 1).max(1));
        let before = shown_width(&mut line_text.chars().take(col - 1)) + (col - 1).saturating_sub(len_chars);
        let under = shown_width(&mut line_text.chars().skip(col - 1).take(span)).max(1);
        let shown: String = line_text
            .chars()
            .map(|c| if c == '\t' { ' ' } else { c })
            .collect();
        let width = diag.line.to_string().len().max(3);
        out.push_str(&format!("\n{:>width$} | {}", diag.line, clean(&shown)));
        out.push_str(&format!(
            "\n{:>width$} | {}{}",
            "",
            " ".repeat(before),
            "^".repeat(under)
        ));
    }
    if let Some(hint) = &diag.hint {
        out.push_str(&format!("\n  hint: {}", clean(hint)));
    }
    out
}

/// Whether to colour output written to a stream: on a terminal, unless `NO_COLOR` is set (non-empty).
pub fn colour_on(is_terminal: bool, env: &std::collections::BTreeMap<String, String>) -> bool {
    is_terminal && env.get("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// [`render`], with the severity, the carets and `hint` coloured (as rustc and cargo do) when `colour`.
pub fn render_coloured(diag: &Diagnostic, source: Option<&str>, colour: bool) -> String {
    let text = render(diag, source);
    if !colour {
        return text;
    }
    let (sev, code) = if diag.is_error() {
        ("error", "1;31")
    } else {
        ("warning", "1;33")
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = if i == 0 {
            // the first "<severity>[" after the position is the severity; the message follows
            match line.find(&format!(": {sev}[")) {
                Some(at) => {
                    let start = at + 2;
                    let end = line[start..].find(']').map_or(line.len(), |e| start + e + 1);
                    format!(
                        "{}\x1b[{code}m{}\x1b[0m{}",
                        &line[..start],
                        &line[start..end],
                        &line[end..]
                    )
                }
                None => line.to_string(),
            }
        } else if let Some(rest) = line.strip_prefix("  hint:") {
            format!("  \x1b[1;36mhint\x1b[0m:{rest}")
        } else if line.trim_end().ends_with('^') && line.contains(" | ") {
            let at = line.find('^').unwrap_or(line.len());
            format!("{}\x1b[{code}m{}\x1b[0m", &line[..at], &line[at..])
        } else {
            line.to_string()
        };
        out.push(line);
    }
    out.join("\n")
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
    fn colours_only_when_asked() {
        let d = Diagnostic::error("E001", "wf.bot", 1, 3, "unexpected '.'").with_hint("quote it");
        let plain = render_coloured(&d, Some("a.b\n"), false);
        assert!(!plain.contains('\x1b'));
        let c = render_coloured(&d, Some("a.b\n"), true);
        assert!(
            c.starts_with("wf.bot:1:3: \x1b[1;31merror[E001]\x1b[0m: unexpected"),
            "{c:?}"
        );
        assert!(c.contains("\x1b[1;31m^\x1b[0m"), "{c:?}");
        assert!(c.contains("\x1b[1;36mhint\x1b[0m: quote it"), "{c:?}");
        assert!(!colour_on(
            true,
            &[("NO_COLOR".to_string(), "1".to_string())].into_iter().collect()
        ));
        assert!(colour_on(true, &Default::default()));
        assert!(!colour_on(false, &Default::default()));
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
    fn control_characters_in_the_excerpt_and_message_are_escaped_and_the_caret_follows() {
        let d =
            Diagnostic::error("C001", "e\x1b[2J.bot", 1, 10, "unknown node '\x1b]0;t\x07'").with_end(1, 11);
        assert_eq!(
            render(&d, Some("a -> \x1b[2Jb")),
            "e\\x1b[2J.bot:1:10: error[C001]: unknown node '\\x1b]0;t\\x07'\n  1 | a -> \\x1b[2Jb\n    |             ^"
        );
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
