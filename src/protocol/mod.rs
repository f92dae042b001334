//! The wire: the envelope (a request line is parsed once into its `id`, method name and
//! raw params; an answer is rendered into one response line) and, per area, the params
//! and result types of every method. Each method's params type is its [`Request`]: it
//! names the method and its result type, and both serialize and parse with the same
//! spelling, so the daemon parses what a client serializes and a client reads what the
//! daemon writes. It imports nothing of Baton's but the error type and the value rules of
//! `json`, so the rules (`methods`), storage (`store`) and the clients (`client`, `bridge`)
//! can all use it without depending on each other.

use schemars::JsonSchema;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use crate::error::{Error, Result};

/// One request of a method: its params, as a client serializes them (an absent optional
/// field is left out, as a client would leave it) and the daemon parses them, with the
/// method's wire name and the type of its result. The daemon's handler of each is
/// `methods::Method`; a client sends it with `client::Connection::call`.
pub trait Request: Serialize + DeserializeOwned + JsonSchema {
    /// The method's wire name.
    const METHOD: &'static str;
    /// What the daemon answers: serialized by the daemon, read back by a client.
    type Result: Serialize + DeserializeOwned + JsonSchema;
}

/// Declares an area's requests (`Params => "Method", Result;`) and lists their methods in
/// the area's `METHODS`.
macro_rules! requests {
    ($($params:ty => $method:literal, $result:ty;)*) => {
        $(
            impl $crate::protocol::Request for $params {
                const METHOD: &'static str = $method;
                type Result = $result;
            }
        )*

        /// The methods of this area's requests.
        pub const METHODS: &[&str] = &[$($method),*];
    };
}

pub mod agents;
pub mod auth;
pub mod journal;
pub mod limits;
pub mod locks;
pub mod notify;
pub mod operator;
pub mod state;
pub mod system;
pub mod tasks;

#[cfg(test)]
mod round_trip;

/// A JSON value of any shape, kept as the client sent it.
pub type Json = Box<RawValue>;

/// A serialized result, ready to be placed in a response line.
pub type Reply = Box<RawValue>;

/// Every method a [`Request`] names, area by area (AdvanceClock, a test daemon's, too).
pub fn request_methods() -> Vec<&'static str> {
    [
        state::METHODS,
        journal::METHODS,
        system::METHODS,
        locks::METHODS,
        tasks::METHODS,
        auth::METHODS,
        agents::METHODS,
        operator::METHODS,
    ]
    .concat()
}

/// Reads a result that serde's derive cannot read in one pass: a struct that flattens
/// another, or an enum tagged by a field, holding a raw JSON value (a stored value, lock
/// metadata). The derive reads those shapes through a buffer out of which no raw value can
/// be read back, so such a type's `Deserialize` takes its text whole and `read` parses it
/// (once per part). The wire is JSON: this reads from serde_json's deserializers.
fn read_whole<'de, D: Deserializer<'de>, T>(
    d: D,
    read: impl FnOnce(&str) -> serde_json::Result<T>,
) -> std::result::Result<T, D::Error> {
    let text = Box::<RawValue>::deserialize(d)?;
    read(text.get()).map_err(serde::de::Error::custom)
}

/// The tag of a result enum tagged by its `status` field.
#[derive(Deserialize)]
struct Status {
    status: String,
}

/// Serializes a result for the wire.
pub fn reply<T: Serialize>(value: &T) -> Result<Reply> {
    Ok(serde_json::value::to_raw_value(value)?)
}

/// A parsed request line; borrows from the line.
#[derive(Debug)]
pub struct RequestLine<'a> {
    pub id: Option<&'a RawValue>,
    pub method: std::borrow::Cow<'a, str>,
    pub params: &'a RawValue,
}

/// The request envelope. As strict as the params: any other member is refused, so an
/// `expected_version` put beside `params` can never turn a compare-and-set into a blind
/// write.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    /// Accepted for JSON-RPC clients, and only as "2.0".
    #[serde(default, borrow)]
    jsonrpc: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct IdOnly<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
}

fn empty_params() -> &'static RawValue {
    static EMPTY: std::sync::OnceLock<Box<RawValue>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| RawValue::from_string("{}".into()).expect("{} is JSON"))
}

/// Parses one request line. On failure, returns the error with whatever `id` could be read.
pub fn parse_request<'a>(line: &'a [u8]) -> Result<RequestLine<'a>, (Option<&'a RawValue>, Error)> {
    if let Err(err) = std::str::from_utf8(line) {
        return Err((
            None,
            Error::Parse(format!(
                "the line is not valid UTF-8 (at byte {}); send UTF-8 encoded JSON",
                err.valid_up_to()
            )),
        ));
    }
    // serde would read a JSON array as the envelope's fields in order: only an object is
    // a request.
    if line.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        if let Err(syntax) = serde_json::from_slice::<IgnoredAny>(line) {
            return Err((None, not_json(syntax)));
        }
        return Err((
            None,
            Error::InvalidRequest(
                "a request is a JSON object, not an array or a scalar; send {\"id\": 1, \"method\": \"Health\", \"params\": {}}".into(),
            ),
        ));
    }
    match serde_json::from_slice::<Envelope<'a>>(line) {
        Ok(Envelope { id, jsonrpc: Some(version), .. }) if version.get() != "\"2.0\"" => Err((
            id,
            Error::InvalidRequest(format!(
                "`jsonrpc` is {}; it may only be \"2.0\" (or left out)",
                version.get()
            )),
        )),
        Ok(Envelope { id, method: Some(method), params, .. }) => {
            Ok(RequestLine { id, method, params: params.unwrap_or(empty_params()) })
        }
        Ok(Envelope { id, method: None, .. }) => Err((
            id,
            Error::InvalidRequest(
                "the request has no `method`; send {\"id\": 1, \"method\": \"Health\", \"params\": {}}".into(),
            ),
        )),
        Err(err) => {
            if let Err(syntax) = serde_json::from_slice::<IgnoredAny>(line) {
                return Err((None, not_json(syntax)));
            }
            let id = serde_json::from_slice::<IdOnly<'a>>(line).ok().and_then(|e| e.id);
            let detail = err.to_string();
            let detail = detail.split(" at line ").next().unwrap_or(&detail);
            let message = match detail.strip_prefix("unknown field `") {
                Some(rest) => {
                    let member = rest.split('`').next().unwrap_or(rest);
                    format!(
                        "unknown top-level member `{member}`; a request has only id, method and params (and \"jsonrpc\": \"2.0\"): move `{member}` inside params"
                    )
                }
                None => format!(
                    "not a request object ({detail}); send {{\"id\": 1, \"method\": \"Name\", \"params\": {{...}}}} with a string method"
                ),
            };
            Err((id, Error::InvalidRequest(message)))
        }
    }
}

fn not_json(syntax: serde_json::Error) -> Error {
    Error::Parse(format!(
        "the line is not JSON ({syntax}); send one JSON object per line"
    ))
}

/// Renders a response line (with its trailing newline).
pub fn render(id: Option<&RawValue>, answer: &Result<Reply, Error>) -> Vec<u8> {
    let id = id.map(RawValue::get).unwrap_or("null");
    match answer {
        Ok(result) => {
            let body = result.get();
            let mut line = Vec::with_capacity(body.len() + id.len() + 20);
            line.extend_from_slice(b"{\"id\":");
            line.extend_from_slice(id.as_bytes());
            line.extend_from_slice(b",\"result\":");
            line.extend_from_slice(body.as_bytes());
            line.extend_from_slice(b"}\n");
            line
        }
        Err(err) => {
            let mut line = Vec::with_capacity(256);
            line.extend_from_slice(b"{\"id\":");
            line.extend_from_slice(id.as_bytes());
            line.extend_from_slice(b",\"error\":");
            err.write_wire(&mut line);
            line.extend_from_slice(b"}\n");
            line
        }
    }
}

/// A server-pushed line (`{"method", "params"}`, no id), with its newline.
pub fn notification(method: &str, params: &serde_json::Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(&serde_json::json!({"method": method, "params": params}))
        .unwrap_or_default();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(line: &str) -> &'static str {
        parse_request(line.as_bytes())
            .err()
            .map(|(_, e)| e.kind())
            .unwrap_or("ok")
    }

    #[test]
    fn classifies_request_lines() {
        for (line, kind) in [
            (r#"{"id":1,"method":"Get","params":{}}"#, "ok"),
            (r#"{"method":"Health"}"#, "ok"),
            (r#"{"id":1,"method":"Get""#, "parse_error"),
            ("not json", "parse_error"),
            ("[1,2]", "invalid_request"),
            ("42", "invalid_request"),
            (r#"{"id":1}"#, "invalid_request"),
            (r#"{"id":1,"method":7}"#, "invalid_request"),
            (r#"[1,"Health",{}]"#, "invalid_request"),
            (r#"  ["x"]"#, "invalid_request"),
            (
                r#"{"id":1,"method":"Set","params":{},"expected_version":3}"#,
                "invalid_request",
            ),
            (r#"{"jsonrpc":"2.0","id":1,"method":"Health"}"#, "ok"),
            (
                r#"{"jsonrpc":"1.0","id":1,"method":"Health"}"#,
                "invalid_request",
            ),
        ] {
            assert_eq!(kind_of(line), kind, "{line}");
        }
    }

    #[test]
    fn invalid_utf8_is_a_parse_error() {
        let line = b"{\"id\":1,\"method\":\"Get\",\"params\":{\"key\":\"\xff\"}}";
        let (_, err) = parse_request(line).unwrap_err();
        assert_eq!(err.kind(), "parse_error");
        assert!(err.to_string().contains("UTF-8"), "{err}");
    }

    #[test]
    fn an_unknown_member_is_named() {
        let (id, err) =
            parse_request(br#"{"id":7,"method":"Set","params":{},"expected_version":3}"#)
                .unwrap_err();
        assert_eq!(id.map(RawValue::get), Some("7"));
        assert!(err.to_string().contains("`expected_version`"), "{err}");
    }

    #[test]
    fn echoes_the_id_exactly() {
        let req = parse_request(br#"{"id":{"a":[1,"x"]},"method":"Health"}"#).unwrap();
        let line = render(req.id, &Ok(RawValue::from_string("true".into()).unwrap()));
        assert_eq!(line, b"{\"id\":{\"a\":[1,\"x\"]},\"result\":true}\n");
        let (id, _) = parse_request(br#"{"id":"abc","method":5}"#).unwrap_err();
        assert_eq!(id.map(RawValue::get), Some("\"abc\""));
    }
}
