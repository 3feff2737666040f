//! JSON read as `parse_json` reads it in the reference implementation: the first value of
//! the text (whatever follows it is ignored), numbers kept exactly when asked, and errors
//! in the words of Go's JSON scanner, which users match on.

use crate::value::{Object, Value, MAX_DEPTH};

/// Reads the first JSON value of `bytes`. With `exact_numbers`, integers past `i64` keep
/// every digit ([`Value::BigInt`]).
pub fn decode_first(bytes: &[u8], exact_numbers: bool) -> Result<Value, String> {
    let mut r = Reader {
        bytes,
        at: 0,
        exact_numbers,
        depth: 0,
        meter: super::budget::Meter::new(),
    };
    r.skip_space();
    if r.at == bytes.len() {
        return Err("EOF".into());
    }
    r.value()
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    exact_numbers: bool,
    depth: usize,
    /// In a tenant's run, what the values read take: text of a few megabytes can hold
    /// millions of tiny values, each taking a value's room.
    meter: super::budget::Meter,
}

/// A character as Go's scanner quotes it in an error: `'x'`, `'\n'`, `'\''`.
fn quote_char(c: char) -> String {
    match c {
        '\'' => r"'\''".to_owned(),
        '"' => "'\"'".to_owned(),
        c => {
            let q = format!("{:?}", c.to_string());
            format!("'{}'", &q[1..q.len() - 1])
        }
    }
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// The character at the cursor, for an error.
    fn char_here(&self) -> char {
        std::str::from_utf8(&self.bytes[self.at..])
            .ok()
            .and_then(|s| s.chars().next())
            .or_else(|| {
                // Not UTF-8 from here: the byte as Go shows a lone byte.
                self.bytes.get(self.at).map(|b| char::from(*b))
            })
            .unwrap_or('\u{fffd}')
    }

    fn invalid(&self, context: &str) -> String {
        if self.at >= self.bytes.len() {
            return "unexpected EOF".into();
        }
        format!(
            "invalid character {} {context}",
            quote_char(self.char_here())
        )
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn value(&mut self) -> Result<Value, String> {
        self.meter.add(crate::value::NODE)?;
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => {
                let s = self.string()?;
                self.meter.add(s.len())?;
                Ok(Value::String(s))
            }
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.invalid("looking for beginning of value")),
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, String> {
        for (i, expected) in word.bytes().enumerate() {
            if self.peek() != Some(expected) {
                if i == 0 {
                    return Err(self.invalid("looking for beginning of value"));
                }
                return Err(self.invalid(&format!(
                    "in literal {word} (expecting {})",
                    quote_char(char::from(expected))
                )));
            }
            self.at += 1;
        }
        Ok(v)
    }

    fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("exceeded max depth of {MAX_DEPTH}"));
        }
        Ok(())
    }

    fn object(&mut self) -> Result<Value, String> {
        self.enter()?;
        self.at += 1;
        let mut out = Object::new();
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            self.depth -= 1;
            return Ok(Value::Object(out));
        }
        loop {
            self.skip_space();
            if self.peek() != Some(b'"') {
                return Err(self.invalid("looking for beginning of object key string"));
            }
            let key = self.string()?;
            if out.is_empty() {
                self.meter.add(crate::value::OBJECT)?;
            }
            self.meter.add_key(&key)?;
            self.skip_space();
            if self.peek() != Some(b':') {
                return Err(self.invalid("after object key"));
            }
            self.at += 1;
            self.skip_space();
            let v = self.value()?;
            out.insert(key, v);
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    self.depth -= 1;
                    return Ok(Value::Object(out));
                }
                _ => return Err(self.invalid("after object key:value pair")),
            }
        }
    }

    fn array(&mut self) -> Result<Value, String> {
        self.enter()?;
        self.at += 1;
        let mut out = Vec::new();
        self.skip_space();
        if self.peek() == Some(b']') {
            self.at += 1;
            self.depth -= 1;
            return Ok(Value::Array(out));
        }
        loop {
            self.skip_space();
            out.push(self.value()?);
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    self.depth -= 1;
                    return Ok(Value::Array(out));
                }
                _ => return Err(self.invalid("after array element")),
            }
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.at += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err("unexpected EOF".into());
            };
            match b {
                b'"' => {
                    self.at += 1;
                    // Invalid UTF-8 becomes U+FFFD, as Go decodes it.
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
                b'\\' => {
                    self.at += 1;
                    let Some(e) = self.peek() else {
                        return Err("unexpected EOF".into());
                    };
                    let simple = match e {
                        b'"' => Some(b'"'),
                        b'\\' => Some(b'\\'),
                        b'/' => Some(b'/'),
                        b'b' => Some(8),
                        b'f' => Some(12),
                        b'n' => Some(b'\n'),
                        b'r' => Some(b'\r'),
                        b't' => Some(b'\t'),
                        b'u' => None,
                        _ => return Err(self.invalid("in string escape code")),
                    };
                    self.at += 1;
                    match simple {
                        Some(c) => out.push(c),
                        None => {
                            let c = self.unicode_escape()?;
                            let mut buf = [0; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                }
                b if b < 0x20 => return Err(self.invalid("in string literal")),
                b => {
                    out.push(b);
                    self.at += 1;
                }
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let mut n = 0;
        for _ in 0..4 {
            let d = match self.peek() {
                Some(c @ b'0'..=b'9') => c - b'0',
                Some(c @ b'a'..=b'f') => c - b'a' + 10,
                Some(c @ b'A'..=b'F') => c - b'A' + 10,
                _ => return Err(self.invalid("in \\u hexadecimal character escape")),
            };
            n = n * 16 + u32::from(d);
            self.at += 1;
        }
        Ok(n)
    }

    /// After `\u`: one code point, a surrogate pair joined, a lone surrogate as U+FFFD.
    fn unicode_escape(&mut self) -> Result<char, String> {
        let first = self.hex4()?;
        if (0xD800..0xDC00).contains(&first) && self.bytes.get(self.at..self.at + 2) == Some(b"\\u")
        {
            let save = self.at;
            self.at += 2;
            let second = self.hex4()?;
            if (0xDC00..0xE000).contains(&second) {
                let c = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                return Ok(char::from_u32(c).unwrap_or('\u{fffd}'));
            }
            self.at = save;
        }
        Ok(char::from_u32(first).unwrap_or('\u{fffd}'))
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.invalid("in numeric literal"));
            }
        }
        if self.peek() == Some(b'0') {
            self.at += 1;
        } else {
            self.digits();
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            integer = false;
            self.at += 1;
            if self.digits() == 0 {
                return Err(self.invalid("after decimal point in numeric literal"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            integer = false;
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(self.invalid("in exponent of numeric literal"));
            }
        }
        let text = std::str::from_utf8(&self.bytes[start..self.at]).unwrap_or("0");
        if integer {
            if let Ok(i) = text.parse::<i64>() {
                return Ok(Value::Int(i));
            }
            if self.exact_numbers {
                return Ok(Value::BigInt(text.into()));
            }
        }
        text.parse::<f64>()
            .map(Value::Float)
            .map_err(|_| format!("cannot read the number {text}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        decode_first(text.as_bytes(), false).unwrap_err()
    }

    #[test]
    fn errors_read_as_go_writes_them() {
        for (text, want) in [
            (
                "not valid json",
                "invalid character 'o' in literal null (expecting 'u')",
            ),
            ("x", "invalid character 'x' looking for beginning of value"),
            (
                "{nope",
                "invalid character 'n' looking for beginning of object key string",
            ),
            ("{\"a\" 1}", "invalid character '1' after object key"),
            (
                "{\"a\":1 2}",
                "invalid character '2' after object key:value pair",
            ),
            ("[1 2]", "invalid character '2' after array element"),
            ("\"a\nb\"", "invalid character '\\n' in string literal"),
            ("\"\\x\"", "invalid character 'x' in string escape code"),
            (
                "1.x",
                "invalid character 'x' after decimal point in numeric literal",
            ),
            ("-x", "invalid character 'x' in numeric literal"),
            (
                "1ex",
                "invalid character 'x' in exponent of numeric literal",
            ),
            ("tru", "unexpected EOF"),
            ("{\"a\":", "unexpected EOF"),
            ("", "EOF"),
            (
                "'",
                "invalid character '\\'' looking for beginning of value",
            ),
        ] {
            assert_eq!(err(text), want, "{text:?}");
        }
    }

    #[test]
    fn the_first_value_is_read_and_big_numbers_kept_when_asked() {
        let first = decode_first(
            b" {\"a\":[1,2.5,\"\\u00e9\\ud83d\\ude00\"]} trailing",
            false,
        );
        assert_eq!(
            first.unwrap(),
            Value::from_json("{\"a\":[1,2.5,\"é😀\"]}".as_bytes()).unwrap()
        );
        let big = "11380878173205700000000000000000000000000000000";
        let exact = decode_first(format!("{{\"n\":{big}}}").as_bytes(), true).unwrap();
        match &exact {
            Value::Object(o) => assert_eq!(o["n"], Value::BigInt(big.into())),
            other => panic!("{other:?}"),
        }
        let float = decode_first(big.as_bytes(), false).unwrap();
        assert_eq!(float, Value::Float(1.13808781732057e46));
        let deep = "[".repeat(MAX_DEPTH + 1);
        assert!(err(&deep).contains("max depth"));
    }
}
