//! [`canonical_without`]: the text the idempotency digest is taken over.

use super::value::{is_high_surrogate, is_low_surrogate, skip_string, unicode_escape};

/// The canonical text of a JSON document (already accepted by serde_json): object members
/// sorted by key, no insignificant whitespace, strings decoded and re-encoded one way,
/// numbers exactly as spelt.
#[cfg(test)]
pub fn canonical(raw: &str) -> String {
    canonical_without(raw, None)
}

/// `canonical`, leaving out the top-level object member named `omit` (the idempotency
/// key itself is not part of what a request asks for).
pub fn canonical_without(raw: &str, omit: Option<&str>) -> String {
    let mut canon = Canon {
        raw,
        b: raw.as_bytes(),
        i: 0,
    };
    let mut out = String::with_capacity(raw.len());
    let omit = omit.map(|key| {
        let mut text = String::new();
        encode_str(key, &mut text);
        text
    });
    canon.value(0, omit.as_deref(), &mut out);
    out
}

/// Nesting beyond which [`canonical_without`] copies the text (minus whitespace) instead of
/// sorting keys, so a deep document cannot exhaust the stack. Values are at most
/// [`MAX_DEPTH`](super::value::MAX_DEPTH) deep, so requests never get there.
const MAX_CANONICAL_DEPTH: usize = 128;

struct Canon<'a> {
    raw: &'a str,
    b: &'a [u8],
    i: usize,
}

impl Canon<'_> {
    fn peek(&self) -> u8 {
        self.b.get(self.i).copied().unwrap_or(0)
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn value(&mut self, depth: usize, omit: Option<&str>, out: &mut String) {
        self.skip_ws();
        match self.peek() {
            b'{' | b'[' if depth >= MAX_CANONICAL_DEPTH => self.compact(out),
            b'{' => self.object(depth, omit, out),
            b'[' => {
                self.i += 1;
                out.push('[');
                self.skip_ws();
                if self.peek() == b']' {
                    self.i += 1;
                } else {
                    loop {
                        self.value(depth + 1, None, out);
                        self.skip_ws();
                        let next = self.peek();
                        self.i += 1;
                        if next != b',' {
                            break;
                        }
                        out.push(',');
                    }
                }
                out.push(']');
            }
            b'"' => self.string(out),
            0 => {}
            _ => {
                // A number or a literal: copied exactly.
                let start = self.i;
                while !matches!(
                    self.peek(),
                    0 | b',' | b']' | b'}' | b':' | b' ' | b'\t' | b'\n' | b'\r'
                ) {
                    self.i += 1;
                }
                out.push_str(&self.raw[start..self.i]);
            }
        }
    }

    fn object(&mut self, depth: usize, omit: Option<&str>, out: &mut String) {
        self.i += 1;
        let mut members: Vec<(String, String)> = Vec::new();
        self.skip_ws();
        if self.peek() == b'}' {
            self.i += 1;
        } else {
            loop {
                self.skip_ws();
                let mut key = String::new();
                self.string(&mut key);
                self.skip_ws();
                self.i += 1; // ':'
                let mut value = String::new();
                self.value(depth + 1, None, &mut value);
                if omit != Some(key.as_str()) {
                    members.push((key, value));
                }
                self.skip_ws();
                let next = self.peek();
                self.i += 1;
                if next != b',' {
                    break;
                }
            }
        }
        // Stable: duplicate keys keep their order.
        members.sort_by(|a, b| a.0.cmp(&b.0));
        out.push('{');
        for (n, (key, value)) in members.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            out.push_str(key);
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
    }

    /// Decodes the string at the cursor and writes it re-encoded canonically.
    fn string(&mut self, out: &mut String) {
        if self.peek() != b'"' {
            return;
        }
        self.i += 1;
        out.push('"');
        loop {
            let rest = &self.b[self.i.min(self.b.len())..];
            let Some(offset) = memchr::memchr2(b'"', b'\\', rest) else {
                self.i = self.b.len();
                break;
            };
            // No quote, backslash or control character: already canonical.
            out.push_str(&self.raw[self.i..self.i + offset]);
            self.i += offset;
            if self.peek() == b'"' {
                self.i += 1;
                break;
            }
            let escape = self.b.get(self.i + 1).copied().unwrap_or(0);
            if escape == b'u' {
                let Some(unit) = unicode_escape(self.b, self.i) else {
                    self.i = self.b.len();
                    break;
                };
                self.i += 6;
                if is_high_surrogate(unit) {
                    if let Some(low) =
                        unicode_escape(self.b, self.i).filter(|u| is_low_surrogate(*u))
                    {
                        self.i += 6;
                        let c = 0x10000
                            + ((u32::from(unit) - 0xD800) << 10)
                            + (u32::from(low) - 0xDC00);
                        push_char(char::from_u32(c).unwrap_or('\u{FFFD}'), out);
                        continue;
                    }
                }
                match char::from_u32(u32::from(unit)) {
                    Some(c) => push_char(c, out),
                    // A lone surrogate stays an escape, so it differs from U+FFFD.
                    None => out.push_str(&format!("\\u{unit:04x}")),
                }
            } else {
                self.i += 2;
                push_char(
                    match escape {
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        other => other as char,
                    },
                    out,
                );
            }
        }
        out.push('"');
    }

    /// Copies one array or object with insignificant whitespace dropped.
    fn compact(&mut self, out: &mut String) {
        let mut depth = 0usize;
        loop {
            match self.peek() {
                0 => return,
                b' ' | b'\t' | b'\n' | b'\r' => self.i += 1,
                b'"' => {
                    let start = self.i;
                    let end = skip_string(self.b, self.i, false).unwrap_or(self.b.len());
                    out.push_str(&self.raw[start..end]);
                    self.i = end;
                }
                c => {
                    self.i += 1;
                    out.push(c as char);
                    match c {
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.saturating_sub(1);
                            if depth == 0 {
                                return;
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

/// Writes `text` as a canonical JSON string body (without quotes).
fn encode_str(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        push_char(c, out);
    }
    out.push('"');
}

/// One character of a canonical string: escapes only where JSON requires them.
fn push_char(c: char, out: &mut String) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn canonical_sorts_keys_and_drops_whitespace() {
        assert_eq!(
            canonical(r#" { "b" : 1 , "a" : { "d" : [ 1 , 2 ] , "c" : null } } "#),
            r#"{"a":{"c":null,"d":[1,2]},"b":1}"#
        );
        assert_eq!(canonical(r#"{"b":1,"a":2}"#), canonical(r#"{"a":2,"b":1}"#));
        assert_eq!(canonical("[]"), "[]");
        assert_eq!(canonical("{ }"), "{}");
        assert_eq!(canonical(" \"x\" "), "\"x\"");
    }

    #[test]
    fn canonical_keeps_numbers_exactly() {
        assert_ne!(canonical("[1.0]"), canonical("[1]"));
        assert_ne!(canonical("[1e2]"), canonical("[100]"));
        assert_ne!(
            canonical("[0.30000000000000004]"),
            canonical("[0.30000000000000005]")
        );
        assert_eq!(canonical("[-0, 1E+2]"), "[-0,1E+2]");
        assert_eq!(canonical("[true,false,null]"), "[true,false,null]");
    }

    #[test]
    fn canonical_decodes_strings_one_way() {
        assert_eq!(canonical(r#""\u0041\/\u00e9""#), r#""A/é""#);
        assert_eq!(canonical(r#""\ud83d\ude00""#), "\"😀\"");
        assert_eq!(canonical(r#""\u000a\n\u0001\"\\""#), r#""\n\n\u0001\"\\""#);
        assert_eq!(canonical(r#"{"\u0062":1,"a":2}"#), r#"{"a":2,"b":1}"#);
        // A lone surrogate stays distinct from the replacement character.
        assert_ne!(canonical(r#""\ud800""#), canonical("\"\u{FFFD}\""));
    }

    #[test]
    fn canonical_without_leaves_out_one_top_level_member() {
        let omit = Some("idempotency_key");
        assert_eq!(
            canonical_without(
                r#"{"idempotency_key":"k1","v":{"idempotency_key":1}}"#,
                omit
            ),
            r#"{"v":{"idempotency_key":1}}"#
        );
        assert_eq!(
            canonical_without(r#"{"v":1,"idempotency_key":"k2"}"#, omit),
            canonical_without(r#"{"idempotency_key":"k1","v":1}"#, omit)
        );
        assert_eq!(
            canonical_without(r#"{"idempotency\u005fkey":"k1","v":1}"#, omit),
            r#"{"v":1}"#
        );
    }

    #[test]
    fn canonical_survives_any_depth() {
        let deep = nested(100_000);
        assert_eq!(canonical(&deep), deep);
        let spaced = format!("{{\"b\":{},\"a\":1}}", "[ ".repeat(200) + &"] ".repeat(200));
        let out = canonical(&spaced);
        assert!(
            out.starts_with("{\"a\":1,\"b\":[[[") && !out.contains(' '),
            "{out}"
        );
    }
}
