//! The bridge's stdio, between the MCP client and rmcp's service.
//!
//! Every line from the client is screened before the service sees it, for the protocol
//! faults rmcp does not answer in a way the client can use: a line that is not JSON gets
//! -32700 (rmcp drops it silently), a request whose `id` is not a string or an integer
//! gets -32600 carrying that same `id` (rmcp answers with id null, which no client can
//! match to its request), a line over [`MAX_LINE`] gets -32600, and a `tools/call`
//! without a `name` gets an empty one, so it is answered -32602 naming the tools rather
//! than -32601. The screen's answers and the service's messages share stdout one whole
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
    if !object.get("method").is_some_and(Value::is_string) {
        // A response to one of the bridge's own requests, or a shape rmcp answers itself.
        return Screened::Pass(line.to_vec());
    }
    if let Some(id) = object.get("id") {
        if !usable_id(id) {
            return Screened::Answer(fault(
                id.clone(),
                -32600,
                format!("Invalid request: id {id} is not a string or an integer (JSON-RPC 2.0 as MCP uses it); send the request again with a string or integer id"),
            ));
        }
    }
    let nameless_call = object["method"] == "tools/call"
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
    fn good_lines_pass_and_a_nameless_call_gets_an_empty_name() {
        for line in [
            r#"{"jsonrpc":"2.0","id":"x","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":2.0,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
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
