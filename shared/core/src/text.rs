//! Text that came from a caller (a lock's `Who`, `Info`, `Operation` and `ID`, a basic-auth user
//! name, a repository name) on its way into a commit message or a log line: control characters
//! are written as escapes, so such a value can never start a new line, add a commit trailer
//! (`Signed-off-by: …`), rewrite a terminal (ESC sequences) or reverse the text around it.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` must not appear as itself in a commit message or a log line: the C0 controls
/// (newline, carriage return, tab, ESC, …), DEL, the C1 controls (U+0080–U+009F, NEL among
/// them), the Unicode line and paragraph separators, and the bidirectional formatting
/// characters (which can make a line read differently from what it holds).
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every [`is_unsafe_char`] written as an escape: `\n`, `\r`, `\t`, and `\u{…}` for
/// the others (ESC is `\u{1b}`). Everything else is unchanged (a backslash stays a backslash, so
/// a Windows `DOMAIN\user` reads as it is). Borrowed when nothing needed escaping.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_every_control_character() {
        assert!(matches!(escape_controls("me@host"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("x\n\nSigned-off-by: evil"),
            "x\\n\\nSigned-off-by: evil"
        );
        assert_eq!(escape_controls("a\r\tb"), "a\\r\\tb");
        assert_eq!(escape_controls("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(escape_controls("del\u{7f}"), "del\\u{7f}");
        assert_eq!(escape_controls("nel\u{85}c1\u{9b}"), "nel\\u{85}c1\\u{9b}");
        assert_eq!(
            escape_controls("a\u{2028}b\u{202e}c"),
            "a\\u{2028}b\\u{202e}c"
        );
        assert_eq!(escape_controls("nul\0"), "nul\\u{0}");
        assert_eq!(escape_controls("DOMAIN\\user"), "DOMAIN\\user");
        assert_eq!(escape_controls("ünïcödé ✓"), "ünïcödé ✓");
        // Nothing unsafe survives, whatever the input.
        for c in (0u32..0x3000).filter_map(char::from_u32) {
            let escaped = escape_controls(&c.to_string()).into_owned();
            assert!(!escaped.chars().any(is_unsafe_char), "{c:?} -> {escaped:?}");
        }
    }
}
