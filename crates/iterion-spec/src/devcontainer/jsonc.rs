//! A small JSON-with-comments reader that keeps the position of every value (01 §7.2).
//!
//! Comments (`//`, `/* */`) count as whitespace, a comma before `}` / `]` is dropped (also when comments sit
//! between them), a leading BOM is skipped. Everything else is strict JSON. The reader never panics: nesting is
//! bounded and every failure is a [`JsoncError`] with the line and column in the original text.

use std::collections::HashMap;

/// A 1-based line and column (columns count Unicode scalar values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pos {
    /// Line (1-based).
    pub line: u32,
    /// Column (1-based).
    pub col: u32,
}

/// A JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number, as written.
    Number(String),
    /// A string (escapes decoded).
    String(String),
    /// An array.
    Array(Vec<Node>),
    /// An object; keys are unique (a repeated key replaced the earlier entry, see [`Parsed::duplicates`]).
    Object(Vec<Member>),
}

impl Json {
    /// A short description of the value's type (`a string`, `an object`, …).
    pub fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }
}

/// A value with the position of its first character.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Where the value starts.
    pub pos: Pos,
    /// The value.
    pub value: Json,
}

/// One `"key": value` member of an object.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// The key (escapes decoded).
    pub key: String,
    /// Position of the key's opening quote.
    pub key_pos: Pos,
    /// The value.
    pub value: Node,
}

/// A syntax error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsoncError {
    /// Where the problem is.
    pub pos: Pos,
    /// What is wrong (lower case, no trailing period).
    pub message: String,
}

/// A successfully read document.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The top-level value.
    pub root: Node,
    /// Repeated keys (the last value is kept): key and position of the repeated occurrence.
    pub duplicates: Vec<(String, Pos)>,
}

const MAX_DEPTH: usize = 128;

/// The members left once the ones a later repeated key replaced (`None`) are dropped.
fn compact(members: Vec<Option<Member>>) -> Vec<Member> {
    members.into_iter().flatten().collect()
}

struct Reader {
    chars: Vec<char>,
    i: usize,
    line: u32,
    col: u32,
    duplicates: Vec<(String, Pos)>,
}

/// Reads JSONC text (a leading BOM is skipped).
pub fn parse(text: &str) -> Result<Parsed, JsoncError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut r = Reader {
        chars: text.chars().collect(),
        i: 0,
        line: 1,
        col: 1,
        duplicates: Vec::new(),
    };
    r.skip_ws()?;
    let root = r.value(0)?;
    r.skip_ws()?;
    if r.i < r.chars.len() {
        return Err(r.err_here(format!(
            "unexpected {} after the top-level value",
            describe(r.chars[r.i])
        )));
    }
    Ok(Parsed {
        root,
        duplicates: r.duplicates,
    })
}

fn describe(c: char) -> String {
    if c.is_control() {
        format!("character U+{:04X}", c as u32)
    } else {
        format!("character '{c}'")
    }
}

impl Reader {
    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            col: self.col,
        }
    }

    fn err_here(&self, message: impl Into<String>) -> JsoncError {
        JsoncError {
            pos: self.pos(),
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn peek2(&self) -> Option<char> {
        self.chars.get(self.i + 1).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += 1;
        if c == '\n' {
            self.line = self.line.saturating_add(1);
            self.col = 1;
        } else {
            self.col = self.col.saturating_add(1);
        }
        Some(c)
    }

    /// Skips JSON whitespace and comments.
    fn skip_ws(&mut self) -> Result<(), JsoncError> {
        loop {
            match self.peek() {
                Some(' ' | '\t' | '\n' | '\r') => {
                    self.bump();
                }
                Some('/') if self.peek2() == Some('/') => {
                    while let Some(c) = self.peek() {
                        if c == '\n' {
                            break;
                        }
                        self.bump();
                    }
                }
                Some('/') if self.peek2() == Some('*') => {
                    let start = self.pos();
                    self.bump();
                    self.bump();
                    loop {
                        match self.bump() {
                            None => {
                                return Err(JsoncError {
                                    pos: start,
                                    message: "unterminated block comment".to_owned(),
                                });
                            }
                            Some('*') if self.peek() == Some('/') => {
                                self.bump();
                                break;
                            }
                            Some(_) => {}
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, JsoncError> {
        if depth > MAX_DEPTH {
            return Err(self.err_here(format!("nesting deeper than {MAX_DEPTH} levels")));
        }
        let pos = self.pos();
        let value = match self.peek() {
            None => return Err(self.err_here("unexpected end of input")),
            Some('{') => self.object(depth)?,
            Some('[') => self.array(depth)?,
            Some('"') => Json::String(self.string()?),
            Some('-' | '0'..='9') => Json::Number(self.number()?),
            Some(c) if c.is_ascii_alphabetic() => {
                let mut word = String::new();
                while let Some(c) = self.peek().filter(|c| c.is_ascii_alphanumeric() || *c == '_') {
                    word.push(c);
                    self.bump();
                }
                match word.as_str() {
                    "true" => Json::Bool(true),
                    "false" => Json::Bool(false),
                    "null" => Json::Null,
                    _ => {
                        return Err(JsoncError {
                            pos,
                            message: format!("unexpected word '{word}' (strings need double quotes)"),
                        });
                    }
                }
            }
            Some('\'') => return Err(self.err_here("single-quoted strings are not JSON; use double quotes")),
            Some(c) => return Err(self.err_here(format!("unexpected {}", describe(c)))),
        };
        Ok(Node { pos, value })
    }

    fn object(&mut self, depth: usize) -> Result<Json, JsoncError> {
        self.bump(); // {
        let mut members: Vec<Option<Member>> = Vec::new();
        // Index of each key in `members`: a repeated key is found in constant time, so an object with
        // hundreds of thousands of keys reads in linear time.
        let mut index: HashMap<String, usize> = HashMap::new();
        self.skip_ws()?;
        if self.peek() == Some('}') {
            self.bump();
            return Ok(Json::Object(Vec::new()));
        }
        loop {
            self.skip_ws()?;
            let key_pos = self.pos();
            let key = match self.peek() {
                Some('"') => self.string()?,
                None => return Err(self.err_here("unexpected end of input inside an object")),
                Some(c) => {
                    return Err(self.err_here(format!("expected a double-quoted key, found {}", describe(c))));
                }
            };
            self.skip_ws()?;
            match self.peek() {
                Some(':') => {
                    self.bump();
                }
                Some(c) => {
                    return Err(self.err_here(format!("expected ':' after a key, found {}", describe(c))));
                }
                None => return Err(self.err_here("unexpected end of input inside an object")),
            }
            self.skip_ws()?;
            let value = self.value(depth + 1)?;
            // The last value wins, at the place of the last occurrence: the earlier one becomes `None` and is
            // dropped when the object closes.
            if let Some(i) = index.insert(key.clone(), members.len()) {
                members[i] = None;
                self.duplicates.push((key.clone(), key_pos));
            }
            members.push(Some(Member { key, key_pos, value }));
            self.skip_ws()?;
            match self.peek() {
                Some(',') => {
                    self.bump();
                    self.skip_ws()?;
                    if self.peek() == Some('}') {
                        self.bump();
                        return Ok(Json::Object(compact(members)));
                    }
                }
                Some('}') => {
                    self.bump();
                    return Ok(Json::Object(compact(members)));
                }
                Some(c) => return Err(self.err_here(format!("expected ',' or '}}', found {}", describe(c)))),
                None => return Err(self.err_here("unexpected end of input inside an object")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json, JsoncError> {
        self.bump(); // [
        let mut items = Vec::new();
        self.skip_ws()?;
        if self.peek() == Some(']') {
            self.bump();
            return Ok(Json::Array(items));
        }
        loop {
            self.skip_ws()?;
            items.push(self.value(depth + 1)?);
            self.skip_ws()?;
            match self.peek() {
                Some(',') => {
                    self.bump();
                    self.skip_ws()?;
                    if self.peek() == Some(']') {
                        self.bump();
                        return Ok(Json::Array(items));
                    }
                }
                Some(']') => {
                    self.bump();
                    return Ok(Json::Array(items));
                }
                Some(c) => return Err(self.err_here(format!("expected ',' or ']', found {}", describe(c)))),
                None => return Err(self.err_here("unexpected end of input inside an array")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, JsoncError> {
        let mut n = 0u32;
        for _ in 0..4 {
            let d = self
                .peek()
                .and_then(|c| c.to_digit(16))
                .ok_or_else(|| self.err_here("invalid \\u escape (want four hex digits)"))?;
            self.bump();
            n = n * 16 + d;
        }
        Ok(n)
    }

    fn string(&mut self) -> Result<String, JsoncError> {
        let start = self.pos();
        self.bump(); // "
        let mut out = String::new();
        loop {
            let here = self.pos();
            match self.bump() {
                None => {
                    return Err(JsoncError {
                        pos: start,
                        message: "unterminated string".to_owned(),
                    });
                }
                Some('"') => return Ok(out),
                Some('\\') => {
                    let esc_pos = here;
                    match self.bump() {
                        Some('"') => out.push('"'),
                        Some('\\') => out.push('\\'),
                        Some('/') => out.push('/'),
                        Some('b') => out.push('\u{8}'),
                        Some('f') => out.push('\u{c}'),
                        Some('n') => out.push('\n'),
                        Some('r') => out.push('\r'),
                        Some('t') => out.push('\t'),
                        Some('u') => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if self.peek() == Some('\\') && self.peek2() == Some('u') {
                                    self.bump();
                                    self.bump();
                                    let lo = self.hex4()?;
                                    if !(0xDC00..0xE000).contains(&lo) {
                                        return Err(JsoncError {
                                            pos: esc_pos,
                                            message: "invalid surrogate pair in \\u escape".to_owned(),
                                        });
                                    }
                                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                                } else {
                                    return Err(JsoncError {
                                        pos: esc_pos,
                                        message: "lone surrogate in \\u escape".to_owned(),
                                    });
                                }
                            } else {
                                hi
                            };
                            match char::from_u32(code) {
                                Some(c) => out.push(c),
                                None => {
                                    return Err(JsoncError {
                                        pos: esc_pos,
                                        message: "lone surrogate in \\u escape".to_owned(),
                                    });
                                }
                            }
                        }
                        Some(c) => {
                            return Err(JsoncError {
                                pos: esc_pos,
                                message: format!("invalid escape '\\{c}'"),
                            });
                        }
                        None => {
                            return Err(JsoncError {
                                pos: start,
                                message: "unterminated string".to_owned(),
                            });
                        }
                    }
                }
                Some(c) if (c as u32) < 0x20 => {
                    return Err(JsoncError {
                        pos: here,
                        message: "control character inside a string (escape it)".to_owned(),
                    });
                }
                Some(c) => out.push(c),
            }
        }
    }

    fn digits(&mut self, out: &mut String) -> usize {
        let mut n = 0;
        while let Some(c) = self.peek().filter(char::is_ascii_digit) {
            out.push(c);
            self.bump();
            n += 1;
        }
        n
    }

    fn number(&mut self) -> Result<String, JsoncError> {
        let mut out = String::new();
        if self.peek() == Some('-') {
            out.push('-');
            self.bump();
        }
        match self.peek() {
            Some('0') => {
                out.push('0');
                self.bump();
            }
            Some('1'..='9') => {
                self.digits(&mut out);
            }
            _ => return Err(self.err_here("invalid number")),
        }
        if self.peek() == Some('.') {
            out.push('.');
            self.bump();
            if self.digits(&mut out) == 0 {
                return Err(self.err_here("invalid number: digits expected after '.'"));
            }
        }
        if let Some(e @ ('e' | 'E')) = self.peek() {
            out.push(e);
            self.bump();
            if let Some(s @ ('+' | '-')) = self.peek() {
                out.push(s);
                self.bump();
            }
            if self.digits(&mut out) == 0 {
                return Err(self.err_here("invalid number: digits expected in the exponent"));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_survive_comments() {
        let p = parse("{\n/* two\nlines */ \"image\": 1}").unwrap();
        let Json::Object(m) = p.root.value else {
            panic!("object expected")
        };
        assert_eq!(m[0].value.pos, Pos { line: 3, col: 19 });
    }

    /// The members and duplicates the former scan produced: remove the earlier member, push the new one.
    fn reference(pairs: &[(String, u32)]) -> (Vec<(String, String)>, Vec<String>) {
        let mut members: Vec<(String, String)> = Vec::new();
        let mut dups = Vec::new();
        for (k, v) in pairs {
            if let Some(i) = members.iter().position(|m| &m.0 == k) {
                members.remove(i);
                dups.push(k.clone());
            }
            members.push((k.clone(), v.to_string()));
        }
        (members, dups)
    }

    proptest::proptest! {
        #[test]
        fn repeated_keys_keep_the_last_value_in_the_last_place(
            pairs in proptest::collection::vec(("[a-d]{1,2}", 0u32..100), 0..40)
        ) {
            let text = format!(
                "{{{}}}",
                pairs.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect::<Vec<_>>().join(",")
            );
            let p = parse(&text).unwrap();
            let Json::Object(m) = p.root.value else { panic!("object expected") };
            let got: Vec<(String, String)> = m
                .iter()
                .map(|m| match &m.value.value {
                    Json::Number(n) => (m.key.clone(), n.clone()),
                    other => panic!("{other:?}"),
                })
                .collect();
            let (want, dups) = reference(&pairs);
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(p.duplicates.into_iter().map(|d| d.0).collect::<Vec<_>>(), dups);
        }
    }

    #[test]
    fn an_object_with_two_hundred_thousand_keys_and_repeats_reads() {
        // Each key once, then every tenth again: 220 k members, 20 k duplicates (the former scan was
        // quadratic here and did not finish).
        let mut text = String::from("{");
        for i in 0..200_000 {
            text.push_str(&format!("\"k{i}\":1,"));
        }
        for i in (0..200_000).step_by(10) {
            text.push_str(&format!("\"k{i}\":2,"));
        }
        text.push('}');
        let p = parse(&text).unwrap();
        let Json::Object(m) = p.root.value else {
            panic!("object expected")
        };
        assert_eq!(m.len(), 200_000);
        assert_eq!(p.duplicates.len(), 20_000);
        assert_eq!(m[0].key, "k1");
        assert_eq!(m.last().unwrap().key, "k199990");
        assert_eq!(m.last().unwrap().value.value, Json::Number("2".into()));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let text = "[".repeat(10_000);
        let e = parse(&text).unwrap_err();
        assert!(e.message.contains("nesting"), "{e:?}");
    }
}
