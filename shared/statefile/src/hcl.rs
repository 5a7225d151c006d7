//! HCL's absolute traversal syntax, as Terraform reads every address in a state (a module, a
//! provider, a dependency, a checked object) with `hclsyntax.ParseTraversalAbs`: a root name,
//! then `.name` and `[key]` steps, a key being a whole number or a quoted string.
//!
//! Identifiers are read in their ASCII form (`[A-Za-z_][A-Za-z0-9_-]*`); HCL also takes Unicode
//! letters there, which gitstate refuses (DECISIONS "What a state body must be").

/// One step of a traversal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The root name, or `.name`.
    Name(String),
    /// `[key]`.
    Index(Key),
}

/// An index key: a whole number in int64 range, or a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Int(i64),
    Str(String),
}

impl Key {
    /// As Terraform prints it in an address: `[0]`, `["a"]`.
    pub(crate) fn render(&self) -> String {
        match self {
            Key::Int(n) => format!("[{n}]"),
            Key::Str(s) => format!("[{}]", serde_json::Value::String(s.clone())),
        }
    }
}

/// A number lexeme whose value is not a whole number in int64 range, where the traversal needs
/// one: refused with the traversal.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct NotTraversal;

/// Reads `text` as an absolute traversal.
pub(crate) fn traversal(text: &str) -> Result<Vec<Step>, NotTraversal> {
    let mut lexer = Lexer {
        text: text.strip_prefix('\u{feff}').unwrap_or(text),
        at: 0,
    };
    let mut steps = vec![Step::Name(lexer.ident()?)];
    loop {
        match lexer.token()? {
            None => return Ok(steps),
            Some(Token::Dot) => steps.push(Step::Name(lexer.ident()?)),
            Some(Token::Open) => {
                let key = match lexer.token()? {
                    Some(Token::Number(n)) => Key::Int(whole(&n).ok_or(NotTraversal)?),
                    Some(Token::Str(s)) => Key::Str(s),
                    _ => return Err(NotTraversal),
                };
                if lexer.token()? != Some(Token::Close) {
                    return Err(NotTraversal);
                }
                steps.push(Step::Index(key));
            }
            Some(_) => return Err(NotTraversal),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Dot,
    Open,
    Close,
    Number(String),
    Str(String),
}

struct Lexer<'a> {
    text: &'a str,
    at: usize,
}

impl Lexer<'_> {
    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    /// Skips spaces, tabs, line ends (a CR only before LF) and comments.
    fn skip(&mut self) -> Result<(), NotTraversal> {
        loop {
            let rest = self.rest();
            if rest.starts_with([' ', '\t', '\n']) {
                self.at += 1;
            } else if rest.starts_with("\r\n") {
                self.at += 2;
            } else if rest.starts_with('#') || rest.starts_with("//") {
                self.at += rest.find('\n').unwrap_or(rest.len());
            } else if let Some(comment) = rest.strip_prefix("/*") {
                let end = comment.find("*/").ok_or(NotTraversal)?;
                self.at += 2 + end + 2;
            } else {
                return Ok(());
            }
        }
    }

    fn ident(&mut self) -> Result<String, NotTraversal> {
        match self.token()? {
            Some(Token::Ident(name)) => Ok(name),
            _ => Err(NotTraversal),
        }
    }

    fn token(&mut self) -> Result<Option<Token>, NotTraversal> {
        self.skip()?;
        let rest = self.rest();
        let Some(first) = rest.chars().next() else {
            return Ok(None);
        };
        let (token, len) = match first {
            '.' => (Token::Dot, 1),
            '[' => (Token::Open, 1),
            ']' => (Token::Close, 1),
            '"' => {
                let (text, len) = quoted(rest)?;
                (Token::Str(text), len)
            }
            c if c.is_ascii_digit() => {
                let len = number_lexeme(rest);
                (Token::Number(rest[..len].to_owned()), len)
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let len = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                    .unwrap_or(rest.len());
                (Token::Ident(rest[..len].to_owned()), len)
            }
            _ => return Err(NotTraversal),
        };
        self.at += len;
        Ok(Some(token))
    }
}

/// The length of HCL's number lexeme at the start of `text`: a digit, then digits, dots and
/// exponents (`e`/`E`, an optional sign, a digit), not ending with a dot.
fn number_lexeme(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut at = 1;
    loop {
        match bytes.get(at) {
            Some(b) if b.is_ascii_digit() => at += 1,
            Some(b'.') if bytes.get(at + 1).is_some_and(u8::is_ascii_digit) => at += 1,
            Some(b'.') if matches!(bytes.get(at + 1), Some(b'e' | b'E')) => at += 1,
            Some(b'e' | b'E') => {
                let sign = usize::from(matches!(bytes.get(at + 1), Some(b'+' | b'-')));
                if bytes.get(at + 1 + sign).is_some_and(u8::is_ascii_digit) {
                    at += 1 + sign;
                } else {
                    return at;
                }
            }
            _ => return at,
        }
    }
}

/// The value of a number lexeme when it is a whole number in int64 range (`1e3` is 1000, `1.0`
/// is 1; `1.5`, `1e-1` and `1e19` are not), as `big.Float.Int64` must read it exactly.
fn whole(lexeme: &str) -> Option<i64> {
    let (mantissa, exponent) = match lexeme.find(['e', 'E']) {
        Some(at) => (&lexeme[..at], lexeme[at + 1..].parse::<i64>().ok()?),
        None => (lexeme, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    // digits × 10^(exponent − fraction digits)
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let scale = exponent.checked_sub(frac.len() as i64)?;
    let text = if scale >= 0 {
        if digits.is_empty() {
            return Some(0);
        }
        if scale > 19 {
            return None;
        }
        format!("{digits}{}", "0".repeat(scale as usize))
    } else {
        let cut = usize::try_from(-scale).ok()?;
        if cut > digits.len() {
            return digits.bytes().all(|b| b == b'0').then_some(0);
        }
        let (keep, dropped) = digits.split_at(digits.len() - cut);
        if !dropped.bytes().all(|b| b == b'0') {
            return None;
        }
        if keep.is_empty() {
            return Some(0);
        }
        keep.to_owned()
    };
    text.parse::<i64>().ok()
}

/// A quoted string at the start of `text`: its value and its length. Escapes `\n \r \t \" \\`,
/// `\uXXXX` and `\UXXXXXXXX` (a Unicode scalar value); `$${` and `%%{` stand for `${` and `%{`;
/// a template (`${`, `%{`), a raw line end or any other escape is refused.
fn quoted(text: &str) -> Result<(String, usize), NotTraversal> {
    let mut value = String::new();
    let mut chars = text.char_indices().skip(1).peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Ok((value, at + 1)),
            '\r' | '\n' => return Err(NotTraversal),
            '\\' => {
                let (_, escape) = chars.next().ok_or(NotTraversal)?;
                match escape {
                    'n' => value.push('\n'),
                    'r' => value.push('\r'),
                    't' => value.push('\t'),
                    '"' => value.push('"'),
                    '\\' => value.push('\\'),
                    'u' | 'U' => {
                        let len = if escape == 'u' { 4 } else { 8 };
                        let hex: String = (0..len)
                            .filter_map(|_| chars.next().map(|(_, c)| c))
                            .collect();
                        if hex.len() != len || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                            return Err(NotTraversal);
                        }
                        let code = u32::from_str_radix(&hex, 16).map_err(|_| NotTraversal)?;
                        value.push(char::from_u32(code).ok_or(NotTraversal)?);
                    }
                    _ => return Err(NotTraversal),
                }
            }
            '$' | '%' => {
                let next = chars.peek().map(|(_, c)| *c);
                if next == Some('{') {
                    return Err(NotTraversal);
                }
                let escaped = next == Some(c) && text[at + 2..].starts_with('{');
                value.push(c);
                if escaped {
                    chars.next();
                    chars.next();
                    value.push('{');
                }
            }
            c => value.push(c),
        }
    }
    Err(NotTraversal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(steps: &[Step]) -> String {
        steps
            .iter()
            .map(|s| match s {
                Step::Name(n) => format!(".{n}"),
                Step::Index(k) => k.render(),
            })
            .collect()
    }

    #[test]
    fn reads_what_parse_traversal_abs_reads() {
        for (text, read) in [
            ("module.a", ".module.a"),
            ("module . a [ 0 ]", ".module.a[0]"),
            ("module.a\n[0]", ".module.a[0]"),
            ("module.a /*c*/ [0]", ".module.a[0]"),
            ("module.a # c", ".module.a"),
            ("module.a // c", ".module.a"),
            (" module.a ", ".module.a"),
            ("module.a--b", ".module.a--b"),
            ("module._a", ".module._a"),
            ("module.a-", ".module.a-"),
            ("module.a\t[\"k\"]", ".module.a[\"k\"]"),
            ("module.a[00]", ".module.a[0]"),
            ("module.a[1e3]", ".module.a[1000]"),
            ("module.a[1.0]", ".module.a[1]"),
            ("module.a[1.e5]", ".module.a[100000]"),
            ("module.a[10e-1]", ".module.a[1]"),
            (
                "module.a[9223372036854775807]",
                ".module.a[9223372036854775807]",
            ),
            (
                "provider[\"registry.terraform.io/hashicorp/aws\"]",
                ".provider[\"registry.terraform.io/hashicorp/aws\"]",
            ),
            (
                "a[\"\\u00e9x\\n$${y}%%{z}$$%\"]",
                ".a[\"éx\\n${y}%{z}$$%\"]",
            ),
            ("\u{feff}a", ".a"),
            ("a\r\n.b", ".a.b"),
        ] {
            assert_eq!(
                names(&traversal(text).unwrap_or_else(|_| panic!("{text:?}"))),
                read,
                "{text:?}"
            );
        }
    }

    #[test]
    fn refuses_what_parse_traversal_abs_refuses() {
        for text in [
            "",
            " ",
            "module.a.0",
            "module.-a",
            "module.9a",
            "module.a[*]",
            "module.a.*",
            "module.a[-1]",
            "module.a[+1]",
            "module.a[true]",
            "module.a[(0)]",
            "module.a[0,1]",
            "module.a['x']",
            "module.a[0]garbage",
            "module.a..b",
            "module.a;",
            "module.a\r",
            "module.a[1.]",
            "module.a[1..2]",
            "module.a[1e5e5]",
            "module.a[.5]",
            "module.a[0x1]",
            "module.a[1.5]",
            "module.a[1e-1]",
            "module.a[9223372036854775808]",
            "module.a[1e19]",
            "module.a[\"${x}\"]",
            "module.a[\"%{x}\"]",
            "module.a[\"~${x}\"]",
            "module.a[\"\\x41\"]",
            "module.a[\"\\uD83D\\uDE00\"]",
            "module.a[\"\\u00e\"]",
            "module.a[\"a\nb\"]",
            "module.a[\"open",
            "module.a /* open",
            "module.é",
            "a\u{a0}.b",
        ] {
            assert_eq!(traversal(text), Err(NotTraversal), "{text:?}");
        }
    }
}
