//! A small async client for batond's JSON-lines protocol: one request, one answer, in
//! order, on one Unix socket connection, plus the notifications a subscription pushes.
//! Used by `mcp-bridge` and the `baton` CLI.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// Why a call did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No daemon listens on the socket (or it cannot be opened).
    #[error("batond is not reachable at {}: {source}", path.display())]
    Unreachable {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The request could not be sent: the connection was already closed by the daemon,
    /// so the request had no effect and may be sent again on a new connection.
    #[error("the connection to batond was closed before the request was sent: {0}")]
    NotSent(std::io::Error),
    /// The connection broke after the request was sent: its outcome is unknown.
    #[error("the connection to batond broke before it answered: {0}")]
    Lost(String),
    /// The daemon answered with an error.
    #[error("{message}")]
    Daemon {
        code: i64,
        kind: String,
        message: String,
        data: Value,
    },
}

/// One connection to batond.
pub struct Connection {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_id: u64,
    line: String,
}

impl Connection {
    pub async fn connect(path: &Path) -> Result<Connection, CallError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| CallError::Unreachable {
                path: path.to_path_buf(),
                source,
            })?;
        let (reader, writer) = stream.into_split();
        Ok(Connection {
            reader: BufReader::new(reader),
            writer,
            next_id: 1,
            line: String::new(),
        })
    }

    /// Sends `method` with `params` and returns the `result` of its answer.
    pub async fn call(&mut self, method: &str, params: &Value) -> Result<Value, CallError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut request = format!(
            "{{\"id\":{id},\"method\":{},\"params\":{params}}}",
            Value::from(method)
        );
        request.push('\n');
        self.writer
            .write_all(request.as_bytes())
            .await
            .map_err(CallError::NotSent)?;
        let mut answer = self.read_line().await?;
        // batond answers a line it could not read (one over BATON_MAX_LINE_BYTES) with
        // an error of id null. One request is in flight on this connection at a time, so
        // that error is this request's: refused unread, with nothing done.
        let refused_unread =
            answer.get("id") == Some(&Value::Null) && answer.get("error").is_some();
        if answer.get("id") != Some(&json!(id)) && !refused_unread {
            return Err(CallError::Lost(format!(
                "batond answered another request: {answer}"
            )));
        }
        if let Some(error) = answer.get_mut("error") {
            let error = error.take();
            return Err(CallError::Daemon {
                code: error["code"].as_i64().unwrap_or(0),
                kind: error["data"]["kind"].as_str().unwrap_or("").to_string(),
                message: error["message"].as_str().unwrap_or("").to_string(),
                data: error["data"].clone(),
            });
        }
        Ok(answer
            .get_mut("result")
            .map(Value::take)
            .unwrap_or(Value::Null))
    }

    /// The next line the daemon pushes with no request (a subscription's `Event` or
    /// `SubscriptionEnded`), as JSON.
    pub async fn notification(&mut self) -> Result<Value, CallError> {
        self.read_line().await
    }

    /// The next line from the daemon, as JSON.
    async fn read_line(&mut self) -> Result<Value, CallError> {
        self.line.clear();
        let n = self
            .reader
            .read_line(&mut self.line)
            .await
            .map_err(|e| CallError::Lost(e.to_string()))?;
        if n == 0 {
            return Err(CallError::Lost("batond closed the connection".into()));
        }
        serde_json::from_str(&self.line)
            .map_err(|e| CallError::Lost(format!("batond sent a line that is not JSON: {e}")))
    }
}
