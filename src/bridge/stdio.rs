//! The bridge's stdio, between the MCP client and rmcp's service.
//!
//! Every line from the client is screened before the service sees it, for the protocol
//! faults rmcp does not answer in a way the client can use: a line that is not JSON gets
//! -32700 (rmcp drops it silently), a request whose `id` is not a string or an integer
//! gets -32600 carrying that same `id` (rmcp answers with id null, which no client can
//! match to its request), so does a request without a method (rmcp leaves the id out), a
//! line over [`MAX_LINE`] gets -32600, params that are not an object, a `tools/call`
//! whose `arguments` are not one, and an `initialize` without its fields get -32602
//! saying what to send (rmcp answers -32601, or about a newer protocol's `_meta`), and a
//! `tools/call` without a `name` gets an empty one, so it is answered -32602 naming the
//! tools rather than -32601. The screen's answers and the service's messages share stdout one whole
//! line at a time.
//!
//! When stdin ends, `closing` becomes true: the bridge ends its waiting calls at once
//! (the client is gone, and rmcp would hold the exit up to 5 s for their answers).

use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, FramedRead};

/// The longest line the bridge reads from its client (rmcp's own limit).
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// What the screen does with one line from the client.
#[derive(Debug, PartialEq)]
pub enum Screened {
    /// Pass these bytes (one line, without its newline) to the service.
    Pass(Vec<u8>),
    /// Answer the client with this message; the service never sees the line.
    Answer(Value),
    /// Nothing to do (a blank line).
    Skip,
}

/// Judges one line from the client (without its newline).
pub fn screen(line: &[u8]) -> Screened {
    let line = line
        .strip_prefix(b"\xEF\xBB\xBF")
        .unwrap_or(line)
        .trim_ascii();
    if line.is_empty() {
        return Screened::Skip;
    }
    let mut message: Value = match serde_json::from_slice(line) {
        Ok(message) => message,
        Err(err) => {
            tracing::warn!(%err, bytes = line.len(), "a line on stdin is not JSON");
            return Screened::Answer(fault(
                Value::Null,
                -32700,
                format!("Parse error: the line is not JSON ({err}); send one JSON-RPC 2.0 message per line"),
            ));
        }
    };
    let Some(object) = message.as_object() else {
        return Screened::Pass(line.to_vec());
    };
    let id = object.get("id").cloned().unwrap_or(Value::Null);
    let method = match object.get("method") {
        Some(Value::String(method)) => method.as_str(),
        // A response to one of the bridge's own requests.
        None if object.contains_key("result") || object.contains_key("error") => {
            return Screened::Pass(line.to_vec())
        }
        None => {
            return Screened::Answer(fault(
                id,
                -32600,
                "Invalid request: it has no method; a JSON-RPC 2.0 request names its method, e.g. {\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/list\"}".into(),
            ))
        }
        Some(other) => {
            return Screened::Answer(fault(
                id,
                -32600,
                format!("Invalid request: method is {other}, not a string; send the method's name, e.g. \"tools/list\""),
            ))
        }
    };
    if object.contains_key("id") && !usable_id(&id) {
        return Screened::Answer(fault(
            id.clone(),
            -32600,
            format!("Invalid request: id {id} is not a string or an integer (JSON-RPC 2.0 as MCP uses it); send the request again with a string or integer id"),
        ));
    }
    if let Some(problem) = bad_params(method, object.get("params")) {
        // A notification gets no answer, even to say what is wrong with it.
        if !object.contains_key("id") {
            return Screened::Skip;
        }
        return Screened::Answer(fault(id, -32602, format!("Invalid params: {problem}")));
    }
    let nameless_call = method == "tools/call"
        && !object
            .get("params")
            .and_then(|p| p.get("name"))
            .is_some_and(Value::is_string);
    if !nameless_call {
        return Screened::Pass(line.to_vec());
    }
    match message.get_mut("params") {
        Some(Value::Object(params)) => {
            params.insert("name".into(), json!(""));
        }
        _ => message["params"] = json!({"name": ""}),
    }
    Screened::Pass(serde_json::to_vec(&message).unwrap_or_default())
}

/// What is wrong with a request's `params` that rmcp would answer as something else: MCP
/// params are an object (rmcp reads an array as an unknown method), `tools/call`'s
/// `arguments` an object (likewise), and `initialize` needs its three fields (rmcp answers
/// about the `_meta` of a newer protocol instead).
fn bad_params(method: &str, params: Option<&Value>) -> Option<String> {
    let params = match params {
        None | Some(Value::Null) => None,
        Some(Value::Object(params)) => Some(params),
        Some(other) => {
            return Some(format!(
                "params of {method} is {}; MCP sends params as an object (or leaves them out)",
                kind(other)
            ))
        }
    };
    match method {
        "tools/call" => match params.and_then(|p| p.get("arguments")) {
            None | Some(Value::Null) | Some(Value::Object(_)) => None,
            Some(other) => Some(format!(
                "params.arguments of tools/call is {}; it must be an object of the tool's arguments by name, e.g. {{\"namespace\": \"p\", \"key\": \"k\"}} (tools/list gives each tool's inputSchema)",
                kind(other)
            )),
        },
        "initialize" => {
            let field = |name: &str| params.and_then(|p| p.get(name));
            let named = |v: &Value, member: &str| v.get(member).is_some_and(Value::is_string);
            let mut wrong = Vec::new();
            if !field("protocolVersion").is_some_and(Value::is_string) {
                wrong.push("protocolVersion (a string, e.g. \"2025-06-18\")");
            }
            if !field("capabilities").is_some_and(Value::is_object) {
                wrong.push("capabilities (an object; {} when the client offers none)");
            }
            if !field("clientInfo").is_some_and(|c| named(c, "name") && named(c, "version")) {
                wrong.push("clientInfo (an object with the client's name and version, e.g. {\"name\": \"my-client\", \"version\": \"1.0\"})");
            }
            (!wrong.is_empty()).then(|| {
                format!(
                    "initialize needs params.protocolVersion, params.capabilities and params.clientInfo; missing or wrong: {}",
                    wrong.join(", ")
                )
            })
        }
        _ => None,
    }
}

/// A JSON value's type, in words.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Whether rmcp can read `id` as a request id, and echo it as the client sent it: a
/// string, or an integer in i64 (written as an integer, or as a float that is exactly one).
fn usable_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => {
            n.as_i64().is_some()
                || n.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0)
        }
        _ => false,
    }
}

fn fault(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The service's side of the relay, and the task writing to stdout.
pub struct Relay {
    /// What the service reads: the client's screened lines.
    pub input: DuplexStream,
    /// What the service writes: passed on to stdout a line at a time.
    pub output: DuplexStream,
    /// Ends once the service has dropped `output` and all it wrote, and every answer of
    /// the screen, is on stdout: await it before the process exits.
    pub writer: JoinHandle<()>,
}

impl Relay {
    /// Starts relaying between the client (`stdin`, `stdout`) and the service's pipes.
    pub fn start(
        stdin: impl AsyncRead + Unpin + Send + 'static,
        stdout: impl AsyncWrite + Unpin + Send + 'static,
        closing: watch::Sender<bool>,
    ) -> Relay {
        let (feed, input) = tokio::io::duplex(1 << 16);
        let (output, from_service) = tokio::io::duplex(1 << 16);
        let (answers, answered) = mpsc::unbounded_channel();
        tokio::spawn(read_client(stdin, feed, answers, closing));
        let writer = tokio::spawn(write_client(stdout, from_service, answered));
        Relay {
            input,
            output,
            writer,
        }
    }
}

fn lines(max: usize) -> AnyDelimiterCodec {
    AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), Vec::new(), max)
}

async fn read_client(
    stdin: impl AsyncRead + Unpin,
    mut feed: DuplexStream,
    answers: mpsc::UnboundedSender<Value>,
    closing: watch::Sender<bool>,
) {
    let mut stdin = FramedRead::new(stdin, lines(MAX_LINE));
    while let Some(line) = stdin.next().await {
        let line: Bytes = match line {
            Ok(line) => line,
            Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => {
                tracing::warn!(limit = MAX_LINE, "a line on stdin is too long; dropped");
                let _ = answers.send(fault(
                    Value::Null,
                    -32600,
                    format!("Invalid request: a line is longer than {MAX_LINE} bytes and was dropped unread; send smaller messages"),
                ));
                continue;
            }
            Err(AnyDelimiterCodecError::Io(err)) => {
                tracing::warn!(%err, "reading stdin failed; ending the session");
                break;
            }
        };
        match screen(&line) {
            Screened::Skip => {}
            Screened::Answer(answer) => {
                let _ = answers.send(answer);
            }
            Screened::Pass(mut message) => {
                message.push(b'\n');
                if feed.write_all(&message).await.is_err() {
                    break; // the service has ended
                }
            }
        }
    }
    let _ = closing.send(true);
}

async fn write_client(
    mut stdout: impl AsyncWrite + Unpin,
    from_service: DuplexStream,
    mut answers: mpsc::UnboundedReceiver<Value>,
) {
    let mut service = FramedRead::new(from_service, lines(usize::MAX));
    loop {
        let mut line = tokio::select! {
            line = service.next() => match line {
                Some(Ok(line)) => line.to_vec(),
                // The service has ended (or its pipe failed): nothing more will come.
                _ => break,
            },
            Some(answer) = answers.recv() => serde_json::to_vec(&answer).unwrap_or_default(),
        };
        line.push(b'\n');
        if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
            return;
        }
    }
    while let Ok(answer) = answers.try_recv() {
        let mut line = serde_json::to_vec(&answer).unwrap_or_default();
        line.push(b'\n');
        if stdout.write_all(&line).await.is_err() {
            return;
        }
    }
    let _ = stdout.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Value {
        match screen(line.as_bytes()) {
            Screened::Answer(answer) => answer,
            other => panic!("{line} was not answered: {other:?}"),
        }
    }

    #[test]
    fn a_line_that_is_not_json_is_a_parse_error_of_id_null() {
        let a = answer("{this is not json");
        assert_eq!(a["id"], Value::Null);
        assert_eq!(a["error"]["code"], -32700);
    }

    #[test]
    fn an_id_rmcp_cannot_read_is_answered_with_that_id() {
        for id in [
            r#"{"a":1}"#,
            "[1]",
            "true",
            "1.5",
            "9223372036854775808",
            "null",
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            let a = answer(&line);
            assert_eq!(
                a["id"],
                serde_json::from_str::<Value>(id).unwrap(),
                "{line}"
            );
            assert_eq!(a["error"]["code"], -32600, "{line}");
        }
    }

    #[test]
    fn a_request_without_a_method_is_answered_with_its_id() {
        let a = answer(r#"{"jsonrpc":"2.0","id":9,"params":{}}"#);
        assert_eq!(a["id"], 9);
        assert_eq!(a["error"]["code"], -32600);
        assert!(a["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no method"));
        let a = answer(r#"{"jsonrpc":"2.0","id":"x","method":5}"#);
        assert_eq!(
            (a["id"].as_str(), a["error"]["code"].as_i64()),
            (Some("x"), Some(-32600))
        );
        // Without an id it is still answered (JSON-RPC 2.0: id null).
        let a = answer(r#"{"jsonrpc":"2.0"}"#);
        assert_eq!(a["id"], Value::Null);
        assert!(a.as_object().unwrap().contains_key("id"), "{a}");
    }

    #[test]
    fn params_that_are_not_what_mcp_sends_are_invalid_params() {
        let a = answer(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"baton_get","arguments":[1]}}"#,
        );
        assert_eq!(
            (a["id"].as_i64(), a["error"]["code"].as_i64()),
            (Some(1), Some(-32602))
        );
        let message = a["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("arguments") && message.contains("must be an object"),
            "{message}"
        );
        let a = answer(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":[1]}"#);
        assert_eq!(a["error"]["code"], -32602, "{a}");
        let a = answer(r#"{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}}"#);
        assert_eq!(
            (a["id"].as_i64(), a["error"]["code"].as_i64()),
            (Some(3), Some(-32602))
        );
        let message = a["error"]["message"].as_str().unwrap();
        for field in ["protocolVersion", "capabilities", "clientInfo"] {
            assert!(message.contains(field), "{message}");
        }
        assert!(!message.contains("_meta"), "{message}");
        let a = answer(
            r#"{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x"}}}"#,
        );
        let message = a["error"]["message"].as_str().unwrap();
        assert!(message.contains("wrong: clientInfo"), "{message}");
        // A notification with bad params is dropped: it gets no answer.
        assert_eq!(
            screen(br#"{"jsonrpc":"2.0","method":"notifications/initialized","params":5}"#),
            Screened::Skip
        );
    }

    #[test]
    fn good_lines_pass_and_a_nameless_call_gets_an_empty_name() {
        for line in [
            r#"{"jsonrpc":"2.0","id":"x","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":2.0,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"baton_get","arguments":null}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#,
        ] {
            assert_eq!(
                screen(line.as_bytes()),
                Screened::Pass(line.as_bytes().to_vec())
            );
        }
        let Screened::Pass(repaired) =
            screen(br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}}"#)
        else {
            panic!("a nameless call passes, repaired");
        };
        let repaired: Value = serde_json::from_slice(&repaired).unwrap();
        assert_eq!(repaired["params"]["name"], "");
        assert_eq!(screen(b"  \r"), Screened::Skip);
    }
}
