//! The contract's rules for JSON that the daemon stores, on the exact text a client sent.
//!
//! A value (`value`, `payload`, `result`, `metadata`, `context`, `error`) is kept as the
//! client's text, so it comes back digit for digit and in the same key order. Before it is
//! stored, [`check_value`] refuses what some client could not read back: a number beyond
//! the double range (`1e400`), an integer literal beyond 2^63 - 1 in magnitude (most
//! clients would lose digits; `-9223372036854775808` is refused too, so the rule is the same
//! for both signs), a lone surrogate in a `\u` escape, or nesting deeper than
//! [`MAX_DEPTH`]. A float that underflows to zero (`1e-400`) is accepted: every client
//! reads it, as 0.
//!
//! [`canonical`] is the text the idempotency digest is taken over: the same request spelt
//! with other whitespace, key order or string escapes gives the same text; numbers keep
//! their exact spelling, so `1.0` and `1` (or two doubles that differ in their last digit)
//! are different requests.
//!
//! [`int_param`] and [`opt_int_param`] bound integer params to what SQLite's signed
//! 64-bit integers hold, so an out-of-range `since_seq` is -32602 at parse time.
//!
//! Everything here works on text that serde_json has already accepted as JSON.

use serde::Deserialize;

use crate::error::{Error, Result};

/// Deepest nesting of arrays and objects a value may have.
pub const MAX_DEPTH: usize = 64;

/// The largest integer param (`since_seq`, `expected_version`, ...): 2^63 - 1.
pub const MAX_INT_PARAM: u64 = i64::MAX as u64;

/// The largest integer literal, in magnitude, that a value may hold: 2^63 - 1.
const MAX_INTEGER_DIGITS: &str = "9223372036854775807";

/// Longest JSON pointer an error message shows.
const MAX_SHOWN_PATH: usize = 200;

/// Checks a value param named `field` given as the raw JSON text the client sent:
/// at most `max_bytes` long (else 413), and readable back by every client (else 400
/// naming the path inside the value and what to send instead).
pub fn check_value(field: &str, raw: &str, max_bytes: usize) -> Result<()> {
    if raw.len() > max_bytes {
        return Err(Error::ValueTooLarge {
            size: raw.len(),
            limit: max_bytes,
        });
    }
    match scan(raw) {
        Ok(()) => Ok(()),
        Err((stack, problem)) => {
            let path = pointer(raw, &stack);
            let place = if path.is_empty() {
                field.to_string()
            } else {
                format!("{field} at {path}")
            };
            Err(Error::Invalid(format!(
                "{place}: {}",
                problem.describe(raw)
            )))
        }
    }
}

/// One open array or object on the way to the current position.
struct Frame {
    object: bool,
    /// The index of the current element of an array.
    index: usize,
    /// Byte range (with quotes) of the current member's key in an object.
    key: Option<(usize, usize)>,
}

/// What makes a value unreadable for some client.
enum Problem {
    /// An integer literal (byte range) beyond 2^63 - 1 in magnitude.
    BigInteger(usize, usize),
    /// A number (byte range) beyond the double range.
    OutOfRange(usize, usize),
    /// A `\u` escape of a surrogate without its other half.
    LoneSurrogate(u16),
    TooDeep,
    /// Not JSON at all (the callers pass text serde_json accepted, so never expected).
    Syntax,
}

impl Problem {
    fn describe(&self, raw: &str) -> String {
        match *self {
            Problem::BigInteger(start, end) => format!(
                "the integer {} is beyond 9223372036854775807 (2^63 - 1) in magnitude, so most clients would lose digits; send it as a string",
                shown_number(&raw[start..end])
            ),
            Problem::OutOfRange(start, end) => format!(
                "the number {} is outside the range of a double (about ±1.8e308), so clients cannot read it back; send a finite number within that range, or send it as a string",
                shown_number(&raw[start..end])
            ),
            Problem::LoneSurrogate(unit) => format!(
                "a string holds the lone surrogate \\u{unit:04x}, which is not valid Unicode; escape a whole pair (e.g. \\ud83d\\ude00) or send the text as UTF-8"
            ),
            Problem::TooDeep => format!(
                "the value is nested more than {MAX_DEPTH} levels deep; flatten it or send the deep part as a string"
            ),
            Problem::Syntax => "the value is not valid JSON; send a JSON value".to_string(),
        }
    }
}

/// A number as an error message shows it: long ones are cut, with their length.
fn shown_number(text: &str) -> String {
    if text.len() <= 40 {
        text.to_string()
    } else {
        format!("{}... ({} characters)", &text[..24], text.len())
    }
}

/// One pass over the bytes: numbers, `\u` escapes and depth. On a problem, returns the
/// open containers (for the path) with it.
fn scan(raw: &str) -> std::result::Result<(), (Vec<Frame>, Problem)> {
    let b = raw.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut expect_key = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\n' | b'\r' | b':' => i += 1,
            b',' => {
                if let Some(top) = stack.last_mut() {
                    if top.object {
                        expect_key = true;
                    } else {
                        top.index += 1;
                    }
                }
                i += 1;
            }
            open @ (b'{' | b'[') => {
                if stack.len() >= MAX_DEPTH {
                    return Err((stack, Problem::TooDeep));
                }
                let object = open == b'{';
                stack.push(Frame {
                    object,
                    index: 0,
                    key: None,
                });
                expect_key = object;
                i += 1;
            }
            b'}' | b']' => {
                stack.pop();
                expect_key = false;
                i += 1;
            }
            b'"' => {
                let start = i;
                match skip_string(b, i, true) {
                    Ok(end) => i = end,
                    Err(problem) => return Err((stack, problem)),
                }
                if expect_key {
                    if let Some(top) = stack.last_mut() {
                        top.key = Some((start, i));
                    }
                    expect_key = false;
                }
            }
            b't' | b'n' => i += 4,
            b'f' => i += 5,
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                if let Err(problem) = check_number(raw, start, i) {
                    return Err((stack, problem));
                }
            }
            _ => return Err((stack, Problem::Syntax)),
        }
    }
    Ok(())
}

/// Refuses an integer literal beyond 2^63 - 1 in magnitude and a number beyond the double
/// range.
fn check_number(raw: &str, start: usize, end: usize) -> std::result::Result<(), Problem> {
    let text = &raw[start..end];
    if text.bytes().any(|c| matches!(c, b'.' | b'e' | b'E')) {
        return match text.parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(()),
            _ => Err(Problem::OutOfRange(start, end)),
        };
    }
    // JSON integers have no leading zeros, so more digits means a larger magnitude.
    let digits = text.strip_prefix('-').unwrap_or(text);
    let too_big = digits.len() > MAX_INTEGER_DIGITS.len()
        || (digits.len() == MAX_INTEGER_DIGITS.len() && digits > MAX_INTEGER_DIGITS);
    if too_big {
        return Err(Problem::BigInteger(start, end));
    }
    Ok(())
}

/// The four hex digits of a `\u` escape starting at `at` (the backslash).
fn unicode_escape(b: &[u8], at: usize) -> Option<u16> {
    if b.get(at) != Some(&b'\\') || b.get(at + 1) != Some(&b'u') {
        return None;
    }
    let hex = std::str::from_utf8(b.get(at + 2..at + 6)?).ok()?;
    u16::from_str_radix(hex, 16).ok()
}

fn is_high_surrogate(unit: u16) -> bool {
    (0xD800..0xDC00).contains(&unit)
}

fn is_low_surrogate(unit: u16) -> bool {
    (0xDC00..0xE000).contains(&unit)
}

/// Skips the string whose opening quote is at `i`; returns the index after its closing
/// quote. Refuses a lone surrogate when `check` is set.
fn skip_string(b: &[u8], mut i: usize, check: bool) -> std::result::Result<usize, Problem> {
    i += 1;
    loop {
        let Some(offset) = memchr::memchr2(b'"', b'\\', &b[i.min(b.len())..]) else {
            return Err(Problem::Syntax);
        };
        i += offset;
        if b[i] == b'"' {
            return Ok(i + 1);
        }
        match b.get(i + 1) {
            Some(b'u') if check => {
                let unit = unicode_escape(b, i).ok_or(Problem::Syntax)?;
                i += 6;
                if is_high_surrogate(unit) {
                    match unicode_escape(b, i) {
                        Some(low) if is_low_surrogate(low) => i += 6,
                        _ => return Err(Problem::LoneSurrogate(unit)),
                    }
                } else if is_low_surrogate(unit) {
                    return Err(Problem::LoneSurrogate(unit));
                }
            }
            Some(_) => i += 2,
            None => return Err(Problem::Syntax),
        }
    }
}

/// The JSON pointer (RFC 6901) of the position `stack` describes, cut to a readable length.
fn pointer(raw: &str, stack: &[Frame]) -> String {
    let mut path = String::new();
    for frame in stack {
        if path.len() > MAX_SHOWN_PATH {
            break;
        }
        if frame.object {
            let Some((start, end)) = frame.key else { break };
            let key_text = &raw[start..end];
            let key = serde_json::from_str::<String>(key_text)
                .unwrap_or_else(|_| key_text[1..key_text.len() - 1].to_string());
            path.push('/');
            path.push_str(&key.replace('~', "~0").replace('/', "~1"));
        } else {
            path.push('/');
            path.push_str(&frame.index.to_string());
        }
    }
    if path.len() > MAX_SHOWN_PATH {
        let mut cut = MAX_SHOWN_PATH;
        while !path.is_char_boundary(cut) {
            cut -= 1;
        }
        path.truncate(cut);
        path.push_str("...");
    }
    path
}

/// The canonical text of a JSON document (already accepted by serde_json): object members
/// sorted by key, no insignificant whitespace, strings decoded and re-encoded one way,
/// numbers exactly as spelt.
pub fn canonical(raw: &str) -> String {
    canonical_without(raw, None)
}

/// [`canonical`], leaving out the top-level object member named `omit` (the idempotency
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

/// Nesting beyond which [`canonical`] copies the text (minus whitespace) instead of
/// sorting keys, so a deep document cannot exhaust the stack. Values are at most
/// [`MAX_DEPTH`] deep, so requests never get there.
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

/// Deserializes an integer param that must fit SQLite's signed 64-bit integers
/// (0 to 2^63 - 1); anything larger is -32602 naming the field.
pub fn int_param<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
    in_range(u64::deserialize(d)?)
}

fn in_range<E: serde::de::Error>(n: u64) -> std::result::Result<u64, E> {
    if n > MAX_INT_PARAM {
        return Err(E::custom(format!(
            "{n} is out of range: integer params are 0 to {MAX_INT_PARAM} (2^63 - 1); send a smaller number"
        )));
    }
    Ok(n)
}

/// [`int_param`] for an optional param (absent or null is None). Use with
/// `#[serde(default, deserialize_with = "crate::json::opt_int_param")]` and
/// `#[schemars(skip_serializing_if = "Option::is_none")]` (which keeps `"default": null`
/// out of the DescribeInterface schema).
pub fn opt_int_param<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<u64>, D::Error> {
    Option::<u64>::deserialize(d)?.map(in_range).transpose()
}

/// `expected_version` of Set and Delete: like [`opt_int_param`], but an explicit `null` is
/// refused rather than read as absent, so a client that meant to compare can never make
/// an unconditional write by sending null.
pub fn expected_version<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<u64>, D::Error> {
    match opt_int_param(d)? {
        None => Err(serde::de::Error::custom(
            "null is not a version; leave expected_version out for an unconditional write, send 0 to create only, or the version you read",
        )),
        some => Ok(some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 1 << 20;

    /// The message of a refusal, or "ok".
    fn verdict(raw: &str) -> String {
        serde_json::from_str::<serde::de::IgnoredAny>(raw).expect("the test input is JSON");
        match check_value("value", raw, LIMIT) {
            Ok(()) => "ok".to_string(),
            Err(err) => {
                assert_eq!(err.kind(), "invalid", "{err}");
                err.to_string()
            }
        }
    }

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn accepts_what_every_client_reads() {
        let big = "9".repeat(400);
        let many_digits_float = format!("1.{big}");
        for raw in [
            "null",
            "true",
            "false",
            "0",
            "-0",
            "0.1",
            "1e308",
            "-1e308",
            "1.7976931348623157e308",
            "-1.7976931348623157e308",
            "5e-324",
            "1e-400",
            "1E+2",
            "9223372036854775807",
            "-9223372036854775807",
            "12345678901234567.0",
            many_digits_float.as_str(),
            r#""\ud83d\ude00""#,
            r#""😀 \" \\ \/ \b\f\n\r\t \u0041""#,
            r#"{"a":[1,{"b":"\ud800\udc00"}],"c":{}}"#,
            r#" { "a" : [ 1 , 2 ] } "#,
            "[]",
            "{}",
        ] {
            assert_eq!(verdict(raw), "ok", "{raw}");
        }
        assert_eq!(verdict(&nested(MAX_DEPTH)), "ok");
        let objects = format!("{}1{}", r#"{"a":"#.repeat(MAX_DEPTH), "}".repeat(MAX_DEPTH));
        assert_eq!(verdict(&objects), "ok");
    }

    #[test]
    fn refuses_numbers_beyond_a_double_and_big_integers() {
        let big = "1".repeat(400);
        for (raw, needle) in [
            ("1e400", "the number 1e400 is outside the range of a double"),
            (
                "-1e400",
                "the number -1e400 is outside the range of a double",
            ),
            ("1.8e308", "outside the range of a double"),
            (
                "9223372036854775808",
                "the integer 9223372036854775808 is beyond",
            ),
            (
                "-9223372036854775808",
                "the integer -9223372036854775808 is beyond",
            ),
            ("18446744073709551616", "is beyond 9223372036854775807"),
            (big.as_str(), "(400 characters)"),
        ] {
            let message = verdict(raw);
            assert!(message.starts_with("value: "), "{message}");
            assert!(message.contains(needle), "{raw}: {message}");
            assert!(message.contains("send"), "says what to send: {message}");
        }
        assert!(verdict(&format!("{big}.0")).contains("outside the range of a double"));
        assert!(verdict(&big).contains("send it as a string"));
    }

    #[test]
    fn names_the_path_inside_the_value() {
        assert_eq!(
            verdict(r#"{"a":[0,1,2,1e400]}"#),
            "value at /a/3: the number 1e400 is outside the range of a double (about ±1.8e308), so clients cannot read it back; send a finite number within that range, or send it as a string"
        );
        assert!(verdict(r#"[{"x":1},{"y":[true,"s",{"z~/w":1e999}]}]"#)
            .starts_with("value at /1/y/2/z~0~1w: "));
        assert!(verdict(r#"{"a":1,"b":{"c":2,"d":-1e400}}"#).starts_with("value at /b/d: "));
        assert!(verdict(r#"{"a":{},"b":[[],[1e400]]}"#).starts_with("value at /b/1/0: "));
        assert!(verdict(r#"{"\u00e9":"\ud800"}"#).starts_with("value at /é: "));
        let err = check_value("ops[2].value", "[1e400]", LIMIT).unwrap_err();
        assert!(err.to_string().starts_with("ops[2].value at /0: "), "{err}");
    }

    #[test]
    fn refuses_lone_surrogates() {
        for raw in [
            r#""\ud800""#,
            r#""\udfff""#,
            r#""a\ud83d""#,
            r#""\ud83dx""#,
            r#""\ud83d\u0041""#,
            r#""\ude00\ud83d""#,
            r#"{"\ud800":1}"#,
        ] {
            let message = verdict(raw);
            assert!(message.contains("lone surrogate"), "{raw}: {message}");
            assert!(message.contains("escape a whole pair"), "{message}");
        }
        assert!(verdict(r#""\ud800""#).contains("\\ud800"));
        // An escaped backslash before "u" is not an escape.
        assert_eq!(verdict(r#""\\ud800""#), "ok");
    }

    #[test]
    fn nesting_is_at_most_64_deep() {
        let message = verdict(&nested(MAX_DEPTH + 1));
        assert!(message.contains("nested more than 64 levels"), "{message}");
        assert!(message.starts_with(&format!("value at {}: ", "/0".repeat(MAX_DEPTH))));
        assert!(verdict(&nested(10_000)).contains("nested more than 64"));
        let deep_inside = format!(r#"{{"a":[{}]}}"#, nested(MAX_DEPTH - 1));
        assert!(verdict(&deep_inside).starts_with("value at /a/0/0/"));
    }

    #[test]
    fn the_size_limit_is_413() {
        let err = check_value("payload", "\"12345\"", 6).unwrap_err();
        assert_eq!(err.kind(), "value_too_large");
        assert!(check_value("payload", "\"1234\"", 6).is_ok());
    }

    /// A small deterministic generator, so the test needs no dependency.
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn random_doubles_are_accepted_and_kept_digit_for_digit() {
        let mut state = 0x9E37_79B9_7F4A_7C15;
        let mut checked = 0;
        while checked < 20_000 {
            let x = f64::from_bits(xorshift(&mut state));
            if !x.is_finite() {
                continue;
            }
            let text = serde_json::to_string(&x).unwrap();
            assert_eq!(verdict(&text), "ok", "{text}");
            let doc = format!("{{\"b\":{text},\"a\":[{text}]}}");
            assert_eq!(canonical(&doc), format!("{{\"a\":[{text}],\"b\":{text}}}"));
            assert_eq!(text.parse::<f64>().unwrap().to_bits(), x.to_bits());
            checked += 1;
        }
        for text in [
            "0.1",
            "0.30000000000000004",
            "1.7976931348623157e308",
            "5e-324",
        ] {
            assert_eq!(canonical(&format!("[{text}]")), format!("[{text}]"));
        }
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

    #[derive(Debug, serde::Deserialize)]
    struct Ints {
        #[serde(default, deserialize_with = "opt_int_param")]
        since_seq: Option<u64>,
        #[serde(default, deserialize_with = "int_param")]
        before_seq: u64,
    }

    #[test]
    fn integer_params_fit_a_signed_64_bit_integer() {
        let ok: Ints = serde_json::from_str(
            r#"{"since_seq":9223372036854775807,"before_seq":9223372036854775807}"#,
        )
        .unwrap();
        assert_eq!(ok.since_seq, Some(i64::MAX as u64));
        assert_eq!(ok.before_seq, i64::MAX as u64);
        let none: Ints = serde_json::from_str(r#"{"since_seq":null}"#).unwrap();
        assert_eq!(none.since_seq, None);
        for raw in [
            r#"{"since_seq":9223372036854775808}"#,
            r#"{"before_seq":18446744073709551615}"#,
        ] {
            let err = serde_json::from_str::<Ints>(raw).unwrap_err().to_string();
            assert!(
                err.contains("is out of range: integer params are 0 to 9223372036854775807"),
                "{err}"
            );
        }
    }
}
