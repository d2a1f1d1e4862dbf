//! Untrusted text on its way to the operator's terminal.
//!
//! A sandboxed node's output, the text of a workflow or `devcontainer.json` echoed in a diagnostic, a run's
//! stored error: none of it may drive the terminal (set its title, clear the screen, move the cursor, rewrite
//! the line with a carriage return, or reorder what is shown with bidirectional overrides). [`clean`] is the
//! one function every human-readable output of the CLI passes such text through; JSON output is encoded by
//! serde and left alone.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal raw: C0 controls except newline and tab, DEL, C1 controls, and the
/// bidirectional formatting characters (embeddings, overrides, isolates, marks).
fn is_unsafe(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

/// `text` with every character that could drive a terminal written as a visible escape (`\x1b`, `\r`,
/// `\u{202e}`); newlines and tabs are kept. Borrowed when there is nothing to escape.
///
/// ```text
/// clean("\x1b]0;pwned\x07 ok") == "\\x1b]0;pwned\\x07 ok"
/// ```
pub fn clean(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !is_unsafe(c) {
            out.push(c);
        } else if c == '\r' {
            out.push_str("\\r");
        } else if (c as u32) < 0x100 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:04x}}}", c as u32));
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_text_is_kept() {
        assert_eq!(clean("\x1b]0;pwned\x07\x1b[2J"), "\\x1b]0;pwned\\x07\\x1b[2J");
        assert_eq!(clean("a\rb\x7f\u{9b}c"), "a\\rb\\x7f\\x9bc");
        assert_eq!(clean("user \u{202e}gnp.exe"), "user \\u{202e}gnp.exe");
        assert_eq!(
            clean("\u{2066}x\u{2069}\u{200f}\u{61c}"),
            "\\u{2066}x\\u{2069}\\u{200f}\\u{061c}"
        );
        assert!(matches!(clean("line 1\n\tline 2 · é ✓"), Cow::Borrowed(_)));
        assert_eq!(clean("\0"), "\\x00");
    }

    proptest::proptest! {
        #[test]
        fn no_output_holds_a_control_character_but_newline_and_tab(s in "\\PC*|[\\x00-\\x{ff}\\u{202a}-\\u{202e}]*") {
            let out = clean(&s);
            proptest::prop_assert!(!out.chars().any(is_unsafe), "{out:?}");
            proptest::prop_assert_eq!(out.matches('\n').count(), s.matches('\n').count());
        }
    }
}
