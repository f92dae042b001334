//! A small async client for batond's JSON-lines protocol: one request, one answer, in
//! order, on one connection (a Unix socket, TCP or TLS: [`Target`]), plus the
//! notifications a subscription pushes. Used by `mcp-bridge` and the `baton` CLI.
//!
//! A request is the protocol's own params type ([`Request`]), which names its method and
//! result type: [`Connection::call`] sends it and reads the answer as that result type, so
//! that a field a client reads is a field the daemon writes (a misspelt or missing one is
//! an error, never a silent `null`); [`Connection::send`] keeps the result as the daemon
//! wrote it, to print it or [`read`] it later. [`Connection::call_raw`] sends any method
//! by name with any params (a tool's arguments, `baton call`).

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixStream};

use crate::protocol::auth::AuthenticateParams;
use crate::protocol::Request;

mod target;
pub use target::{Dialer, Endpoint, Halves, Target};

/// Why a call did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No daemon listens at the address (or it cannot be opened, or TLS failed).
    #[error("batond is not reachable at {address}: {source}")]
    Unreachable {
        /// The socket path or the URL.
        address: String,
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
    /// The daemon answered, but not with the result this client reads for the method (a
    /// daemon of another version?). The request took effect or not as the daemon decided:
    /// to this client its outcome is unknown. The connection stays usable.
    #[error("batond answered {method} with a result this client cannot read ({detail})")]
    Unreadable { method: String, detail: String },
}

/// Reads the result of a request `R` (as the daemon wrote it) as the method's result type.
pub fn read<R: Request>(result: &RawValue) -> Result<R::Result, CallError> {
    read_as(R::METHOD, result)
}

/// Reads the result of `method` (as the daemon wrote it) as `T`: the method's result type,
/// or `Value` to take it whole.
pub fn read_as<T: DeserializeOwned>(method: &str, result: &RawValue) -> Result<T, CallError> {
    serde_json::from_str(result.get()).map_err(|e| CallError::Unreadable {
        method: method.to_string(),
        detail: e.to_string(),
    })
}

/// One answer line, its result kept as the daemon wrote it.
#[derive(Deserialize)]
struct AnswerLine<'a> {
    /// `Some` when present, even as `null`.
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

/// A member that is there, whatever its value (`null` included).
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// The `error` member of an answer: `{code, message, data: {kind, ...}}`.
#[derive(Deserialize)]
struct WireError {
    code: i64,
    message: String,
    data: Value,
}

/// What every error's `data` carries.
#[derive(Deserialize)]
struct ErrorKind {
    kind: String,
}

/// A request line: `{"id", "method", "params"}` and its newline.
fn line<P: Serialize + ?Sized>(id: u64, method: &str, params: &P) -> serde_json::Result<Vec<u8>> {
    let mut line = format!("{{\"id\":{id},\"method\":").into_bytes();
    serde_json::to_writer(&mut line, method)?;
    line.extend_from_slice(b",\"params\":");
    serde_json::to_writer(&mut line, params)?;
    line.extend_from_slice(b"}\n");
    Ok(line)
}

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// One connection to batond.
pub struct Connection {
    reader: BufReader<Reader>,
    writer: Writer,
    next_id: u64,
    line: String,
}

impl Connection {
    /// Connects to the Unix socket at `path` (acting as admin, unless batond runs with
    /// `BATON_UNIX_AUTH=token`).
    pub async fn connect(path: &Path) -> Result<Connection, CallError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| CallError::Unreachable {
                address: path.display().to_string(),
                source,
            })?;
        Ok(Connection::over(stream))
    }

    /// Connects to `target` and, when it carries a token, authenticates with it (a
    /// refused token is the daemon's 401).
    pub async fn open(target: &Target) -> Result<Connection, CallError> {
        let unreachable = |source| CallError::Unreachable {
            address: target.endpoint.to_string(),
            source,
        };
        let mut conn = match &target.endpoint {
            Endpoint::Unix(path) => Connection::connect(path).await?,
            Endpoint::InProcess(dialer) => {
                let (reader, writer) = dialer.dial().map_err(unreachable)?;
                Connection::from_halves(reader, writer)
            }
            Endpoint::Tcp { host, port } => {
                let tcp = TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(unreachable)?;
                let _ = tcp.set_nodelay(true);
                let (reader, writer) = tcp.into_split();
                Connection::from_halves(Box::new(reader), Box::new(writer))
            }
            Endpoint::Tls { host, port } => {
                let connector = target.tls_connector().map_err(unreachable)?;
                let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| {
                    unreachable(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
                })?;
                let tcp = TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(unreachable)?;
                let _ = tcp.set_nodelay(true);
                let tls = connector.connect(name, tcp).await.map_err(unreachable)?;
                let (reader, writer) = tokio::io::split(tls);
                Connection::from_halves(Box::new(reader), Box::new(writer))
            }
        };
        if let Some(token) = &target.token {
            conn.send(&AuthenticateParams {
                token: token.clone(),
            })
            .await?;
        }
        Ok(conn)
    }

    fn over(stream: UnixStream) -> Connection {
        let (reader, writer) = stream.into_split();
        Connection::from_halves(Box::new(reader), Box::new(writer))
    }

    fn from_halves(reader: Reader, writer: Writer) -> Connection {
        Connection {
            reader: BufReader::new(reader),
            writer,
            next_id: 1,
            line: String::new(),
        }
    }

    /// Sends `request` and returns the `result` of its answer read as the method's result
    /// type.
    pub async fn call<R: Request>(&mut self, request: &R) -> Result<R::Result, CallError> {
        let result = self.send(request).await?;
        read::<R>(&result)
    }

    /// Sends `request` and returns the `result` of its answer exactly as the daemon wrote
    /// it (to print it as it is, or [`read`] it).
    pub async fn send<R: Request>(&mut self, request: &R) -> Result<Box<RawValue>, CallError> {
        self.call_raw(R::METHOD, request).await
    }

    /// Sends `method` with `params` (any JSON: a tool's arguments, `baton call`'s) and
    /// returns the `result` of its answer exactly as the daemon wrote it.
    pub async fn call_raw<P: Serialize + ?Sized>(
        &mut self,
        method: &str,
        params: &P,
    ) -> Result<Box<RawValue>, CallError> {
        let id = self.next_id;
        self.next_id += 1;
        let request = line(id, method, params).map_err(|e| {
            CallError::NotSent(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
        })?;
        self.writer
            .write_all(&request)
            .await
            .map_err(CallError::NotSent)?;
        // TLS keeps what it encrypts until flushed (a no-op on a socket).
        self.writer.flush().await.map_err(CallError::NotSent)?;
        self.read_line().await?;
        let answer: AnswerLine<'_> = match serde_json::from_str(&self.line) {
            Ok(answer) => answer,
            Err(e) if e.is_data() => {
                return Err(CallError::Lost(format!(
                    "batond sent a line that is not an answer ({e}): {}",
                    self.line.trim_end()
                )))
            }
            Err(e) => {
                return Err(CallError::Lost(format!(
                    "batond sent a line that is not JSON: {e}"
                )))
            }
        };
        // batond answers a line it could not read (one over BATON_MAX_LINE_BYTES) with
        // an error of id null. One request is in flight on this connection at a time, so
        // that error is this request's: refused unread, with nothing done.
        let refused_unread = answer.id.map(RawValue::get) == Some("null") && answer.error.is_some();
        let ours = answer
            .id
            .is_some_and(|echo| serde_json::from_str::<u64>(echo.get()).ok() == Some(id));
        if !ours && !refused_unread {
            return Err(CallError::Lost(format!(
                "batond answered another request: {}",
                self.line.trim_end()
            )));
        }
        if let Some(error) = answer.error {
            let unreadable = |e: serde_json::Error| CallError::Unreadable {
                method: method.to_string(),
                detail: format!("its error is not {{code, message, data: {{kind}}}}: {e}"),
            };
            let WireError {
                code,
                message,
                data,
            } = serde_json::from_str(error.get()).map_err(unreadable)?;
            let ErrorKind { kind } = ErrorKind::deserialize(&data).map_err(unreadable)?;
            return Err(CallError::Daemon {
                code,
                kind,
                message,
                data,
            });
        }
        Ok(answer
            .result
            .map(RawValue::to_owned)
            .unwrap_or_else(|| RawValue::from_string("null".into()).expect("null is JSON")))
    }

    /// The next line the daemon pushes with no request (a subscription's `Event` or
    /// `SubscriptionEnded`), as JSON.
    pub async fn notification(&mut self) -> Result<Value, CallError> {
        self.read_line().await?;
        serde_json::from_str(&self.line)
            .map_err(|e| CallError::Lost(format!("batond sent a line that is not JSON: {e}")))
    }

    /// Reads the next line from the daemon into `self.line`.
    async fn read_line(&mut self) -> Result<(), CallError> {
        self.line.clear();
        let n = self
            .reader
            .read_line(&mut self.line)
            .await
            .map_err(|e| CallError::Lost(e.to_string()))?;
        if n == 0 {
            return Err(CallError::Lost("batond closed the connection".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::protocol::locks::AcquireResourceLockParams;
    use crate::protocol::state::{GetParams, SetParams};

    fn text(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.into()).unwrap()
    }

    #[test]
    fn a_result_not_of_its_type_is_unreadable() {
        // found, but no record: a derived reader of the flattened record would say None.
        let err =
            read::<GetParams>(&text(r#"{"found":true,"namespace":"ns","key":"k"}"#)).unwrap_err();
        assert!(
            matches!(&err, CallError::Unreadable { method, .. } if method == "Get"),
            "{err}"
        );
        assert!(err.to_string().contains("missing field"), "{err}");
        let err = read::<AcquireResourceLockParams>(&text(
            r#"{"status":"taken","resource_key":"file:a"}"#,
        ))
        .unwrap_err();
        assert!(err.to_string().contains("taken"), "{err}");
        let err =
            read::<SetParams>(&text(r#"{"namespace":"ns","key":"k","versoin":2}"#)).unwrap_err();
        assert!(err.to_string().contains("missing field `version`"), "{err}");
    }

    #[test]
    fn a_request_is_one_line_of_its_params() {
        let get = GetParams {
            namespace: "ns".into(),
            key: "k\n\"".into(),
        };
        let line = line(7, GetParams::METHOD, &get).unwrap();
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "{\"id\":7,\"method\":\"Get\",\"params\":{\"namespace\":\"ns\",\"key\":\"k\\n\\\"\"}}\n"
        );
    }

    /// Runs `check` against a connection whose daemon answers every request line with
    /// the next of `answers`, the request's id put in place of `ID`.
    fn with_answers(answers: &'static [&'static str], check: impl AsyncFnOnce(&mut Connection)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (client, mut daemon) = UnixStream::pair().unwrap();
            let fake = tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut id = 0;
                for answer in answers {
                    let n = daemon.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    id += 1;
                    let line = format!("{}\n", answer.replace("ID", &id.to_string()));
                    daemon.write_all(line.as_bytes()).await.unwrap();
                }
            });
            let mut conn = Connection::over(client);
            check(&mut conn).await;
            drop(conn);
            fake.await.unwrap();
        });
    }

    #[test]
    fn answers_are_read_off_the_line() {
        with_answers(
            &[
                r#"{"id":ID,"result":{"b": 1.50,"a":[1e3]}}"#,
                r#"{"id":ID}"#,
                r#"{"id":ID,"error":{"code":409,"message":"no","data":{"kind":"conflict","actual_version":2}}}"#,
                r#"{"id":null,"error":{"code":-32001,"message":"too large","data":{"kind":"request_too_large","limit":10}}}"#,
                r#"{"id":99,"result":true}"#,
            ],
            async |conn| {
                let raw = conn.call_raw("Get", &Value::Null).await.unwrap();
                assert_eq!(raw.get(), r#"{"b": 1.50,"a":[1e3]}"#);
                assert_eq!(conn.call_raw("Get", &()).await.unwrap().get(), "null");
                match conn.call_raw("Set", &Value::Null).await {
                    Err(CallError::Daemon {
                        code: 409,
                        kind,
                        data,
                        ..
                    }) => {
                        assert_eq!(kind, "conflict");
                        assert_eq!(data["actual_version"], 2);
                    }
                    other => panic!("{other:?}"),
                }
                match conn.call_raw("Set", &Value::Null).await {
                    Err(CallError::Daemon { kind, .. }) => assert_eq!(kind, "request_too_large"),
                    other => panic!("{other:?}"),
                }
                match conn.call_raw("Get", &Value::Null).await {
                    Err(CallError::Lost(why)) => assert!(why.contains("another request"), "{why}"),
                    other => panic!("{other:?}"),
                }
            },
        );
        with_answers(&["not json"], async |conn| {
            match conn.call_raw("Get", &Value::Null).await {
                Err(CallError::Lost(why)) => assert!(why.contains("not JSON"), "{why}"),
                other => panic!("{other:?}"),
            }
        });
        with_answers(
            &[r#"{"id":ID,"error":{"code":400,"message":"x","data":{}}}"#],
            async |conn| match conn.call_raw("Get", &Value::Null).await {
                Err(CallError::Unreadable { detail, .. }) => {
                    assert!(detail.contains("kind"), "{detail}")
                }
                other => panic!("{other:?}"),
            },
        );
    }
}
