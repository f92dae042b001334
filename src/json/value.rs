//! [`check_value`]: one pass over a value's text refusing what some client could not
//! read back, naming the path inside the value.

use crate::error::{Error, Result};

/// Deepest nesting of arrays and objects a value may have.
pub const MAX_DEPTH: usize = 64;

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
pub(super) enum Problem {
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
pub(super) fn unicode_escape(b: &[u8], at: usize) -> Option<u16> {
    if b.get(at) != Some(&b'\\') || b.get(at + 1) != Some(&b'u') {
        return None;
    }
    let hex = std::str::from_utf8(b.get(at + 2..at + 6)?).ok()?;
    u16::from_str_radix(hex, 16).ok()
}

pub(super) fn is_high_surrogate(unit: u16) -> bool {
    (0xD800..0xDC00).contains(&unit)
}

pub(super) fn is_low_surrogate(unit: u16) -> bool {
    (0xDC00..0xE000).contains(&unit)
}

/// Skips the string whose opening quote is at `i`; returns the index after its closing
/// quote. Refuses a lone surrogate when `check` is set.
pub(super) fn skip_string(
    b: &[u8],
    mut i: usize,
    check: bool,
) -> std::result::Result<usize, Problem> {
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

#[cfg(test)]
mod tests {
    use super::super::canonical::canonical;
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
}
