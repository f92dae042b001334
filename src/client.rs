//! A small async client for batond's JSON-lines protocol: one request, one answer, in
//! order, on one connection (a Unix socket, TCP or TLS: [`Target`]), plus the
//! notifications a subscription pushes. Used by `mcp-bridge` and the `baton` CLI.
//!
//! A result comes back as the daemon wrote it ([`Connection::call_raw`]) or read into the
//! protocol's own result type ([`Connection::call_typed`], [`Answer`]), so that a field
//! a client reads is a field the daemon writes: a misspelt or missing one is an error,
//! never a silent `null`.

use std::path::Path;

use serde::de::{DeserializeOwned, Error as _};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixStream};

use crate::protocol::locks::{
    AcquireResult, Holders, ListResourceLocksResult, LockEntry, Previous, StatusResult,
    WaitingEntry,
};
use crate::protocol::state::{GetResult, ListResult, Record};

mod target;
pub use target::{Endpoint, Target};

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

/// A result type a client reads from the text of the daemon's answer.
///
/// Every type that derives `Deserialize` is one. The result types that flatten one
/// struct into another, or tag an enum by a field, are read below by hand, in two passes
/// over the same text: serde reads those shapes through a buffer, and a raw JSON value (a
/// stored value, lock metadata) cannot be read back out of that buffer, so a derived
/// reader would refuse them, or drop the flattened part without a word. Deriving
/// `Deserialize` for one of them makes this impl conflict with the blanket one, on purpose.
pub trait Answer: Sized {
    fn read(text: &str) -> serde_json::Result<Self>;
}

impl<T: DeserializeOwned> Answer for T {
    fn read(text: &str) -> serde_json::Result<T> {
        serde_json::from_str(text)
    }
}

/// Reads `method`'s result (as the daemon sent it) as `R`.
pub fn read<R: Answer>(method: &str, result: &RawValue) -> Result<R, CallError> {
    R::read(result.get()).map_err(|e| CallError::Unreadable {
        method: method.to_string(),
        detail: e.to_string(),
    })
}

/// An element of a derived reader's list that is read by its own [`Answer`] impl.
struct Item<T>(T);

impl<'de, T: Answer> Deserialize<'de> for Item<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Item<T>, D::Error> {
        let raw = <&RawValue>::deserialize(d)?;
        T::read(raw.get()).map(Item).map_err(D::Error::custom)
    }
}

fn items<T>(items: Vec<Item<T>>) -> Vec<T> {
    items.into_iter().map(|Item(t)| t).collect()
}

/// The members of [`GetResult`] beside its flattened record.
#[derive(Deserialize)]
struct GetHead {
    found: bool,
    namespace: String,
    key: String,
}

impl Answer for GetResult {
    fn read(text: &str) -> serde_json::Result<GetResult> {
        let GetHead {
            found,
            namespace,
            key,
        } = serde_json::from_str(text)?;
        let record = if found {
            Some(serde_json::from_str(text)?)
        } else {
            None
        };
        Ok(GetResult {
            found,
            namespace,
            key,
            record,
        })
    }
}

/// The members of [`Record`] beside its flattened state.
#[derive(Deserialize)]
struct RecordHead {
    namespace: String,
    key: String,
}

impl Answer for Record {
    fn read(text: &str) -> serde_json::Result<Record> {
        let RecordHead { namespace, key } = serde_json::from_str(text)?;
        Ok(Record {
            namespace,
            key,
            state: serde_json::from_str(text)?,
        })
    }
}

#[derive(Deserialize)]
struct ListBody {
    records: Vec<Item<Record>>,
    next_after: Option<String>,
}

impl Answer for ListResult {
    fn read(text: &str) -> serde_json::Result<ListResult> {
        let ListBody {
            records,
            next_after,
        } = serde_json::from_str(text)?;
        Ok(ListResult {
            records: items(records),
            next: next_after.clone(),
            next_after,
        })
    }
}

/// The member of [`LockEntry`] beside its flattened holder.
#[derive(Deserialize)]
struct LockHead {
    resource_key: String,
}

impl Answer for LockEntry {
    fn read(text: &str) -> serde_json::Result<LockEntry> {
        let LockHead { resource_key } = serde_json::from_str(text)?;
        Ok(LockEntry {
            resource_key,
            held_by: serde_json::from_str(text)?,
        })
    }
}

#[derive(Deserialize)]
struct LocksBody {
    locks: Vec<Item<LockEntry>>,
    #[serde(default)]
    waiting: Vec<WaitingEntry>,
    #[serde(default)]
    next: Option<String>,
}

impl Answer for ListResourceLocksResult {
    fn read(text: &str) -> serde_json::Result<ListResourceLocksResult> {
        let LocksBody {
            locks,
            waiting,
            next,
        } = serde_json::from_str(text)?;
        Ok(ListResourceLocksResult {
            locks: items(locks),
            waiting,
            next,
        })
    }
}

/// The tag of a lock result.
#[derive(Deserialize)]
struct Status {
    status: String,
}

/// The body of [`AcquireResult::Busy`] and [`StatusResult::Held`].
#[derive(Deserialize)]
struct HeldBody {
    resource_key: String,
    held_by: Box<RawValue>,
    conflicting_key: String,
}

/// `held_by`: one holder, or a list of them (a key that can have several).
fn holders(raw: &RawValue) -> serde_json::Result<Holders> {
    if raw.get().trim_start().starts_with('[') {
        Ok(Holders::Many(serde_json::from_str(raw.get())?))
    } else {
        Ok(Holders::One(serde_json::from_str(raw.get())?))
    }
}

/// The body of [`StatusResult::Available`].
#[derive(Deserialize)]
struct AvailableBody {
    resource_key: String,
    previous: Option<Previous>,
}

impl Answer for AcquireResult {
    fn read(text: &str) -> serde_json::Result<AcquireResult> {
        let Status { status } = serde_json::from_str(text)?;
        Ok(match status.as_str() {
            "acquired" => AcquireResult::Acquired(serde_json::from_str(text)?),
            "already_held" => AcquireResult::AlreadyHeld(serde_json::from_str(text)?),
            "busy" => {
                let HeldBody {
                    resource_key,
                    held_by,
                    conflicting_key,
                } = serde_json::from_str(text)?;
                AcquireResult::Busy {
                    resource_key,
                    held_by: holders(&held_by)?,
                    conflicting_key,
                }
            }
            other => {
                return Err(serde_json::Error::unknown_variant(
                    other,
                    &["acquired", "already_held", "busy"],
                ))
            }
        })
    }
}

impl Answer for StatusResult {
    fn read(text: &str) -> serde_json::Result<StatusResult> {
        let Status { status } = serde_json::from_str(text)?;
        Ok(match status.as_str() {
            "available" => {
                let AvailableBody {
                    resource_key,
                    previous,
                } = serde_json::from_str(text)?;
                StatusResult::Available {
                    resource_key,
                    previous,
                }
            }
            "held" => {
                let HeldBody {
                    resource_key,
                    held_by,
                    conflicting_key,
                } = serde_json::from_str(text)?;
                StatusResult::Held {
                    resource_key,
                    held_by: holders(&held_by)?,
                    conflicting_key,
                }
            }
            other => {
                return Err(serde_json::Error::unknown_variant(
                    other,
                    &["available", "held"],
                ))
            }
        })
    }
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
            conn.call_raw("Authenticate", &serde_json::json!({ "token": token }))
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

    /// Sends `method` with `params` and returns the `result` of its answer, as JSON.
    pub async fn call(&mut self, method: &str, params: &Value) -> Result<Value, CallError> {
        let result = self.call_raw(method, params).await?;
        read(method, &result)
    }

    /// Sends `method` with `params` and returns the `result` of its answer read as `R`,
    /// the method's result type.
    pub async fn call_typed<R: Answer>(
        &mut self,
        method: &str,
        params: &Value,
    ) -> Result<R, CallError> {
        let result = self.call_raw(method, params).await?;
        read(method, &result)
    }

    /// Sends `method` with `params` and returns the `result` of its answer exactly as
    /// the daemon wrote it.
    pub async fn call_raw(
        &mut self,
        method: &str,
        params: &Value,
    ) -> Result<Box<RawValue>, CallError> {
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
    use serde::Serialize;
    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::protocol::journal::ReadEventsResult;
    use crate::protocol::locks::HeartbeatResult;
    use crate::protocol::state::{DeleteResult, HistoryResult, SetResult};
    use crate::protocol::tasks::{
        AcquiredNode, CancelTaskResult, ListTasksResult, RegisterTaskResult, TaskStatusResult,
    };

    /// Reads `text` as `R` and writes it again: the daemon's bytes must come back, raw
    /// values (kept as the daemon stored them) included.
    fn round_trip<R: Answer + Serialize>(text: &str) {
        let result = RawValue::from_string(text.to_string()).unwrap();
        let read: R = read("Test", &result).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(serde_json::to_string(&read).unwrap(), text);
    }

    const HOLDER: &str = r#"{"owner":"bob","mode":"exclusive","provider":"mcp","fencing_token":3,"acquired_at":"2026-01-02T03:04:05.678Z","expires_at":"2026-01-02T03:09:05.678Z","remaining_ms":299000,"metadata":{"intent": "refactor", "n": [1.50, 2e3]}}"#;

    const SLOT: &str = r#"{"owner":"ci","mode":"exclusive","slots":2,"provider":null,"fencing_token":5,"acquired_at":"2026-01-02T03:04:05.678Z","expires_at":"2026-01-02T03:09:05.678Z","remaining_ms":1,"metadata":null}"#;

    #[test]
    fn state_results_read_back_byte_for_byte() {
        round_trip::<GetResult>(
            r#"{"found":true,"namespace":"ns","key":"k","value":{"b": 1.50, "a": ["\u00e9", 1e400]},"version":3,"revision":7,"updated_by":"alice","updated_at":"2026-01-02T03:04:05.678Z"}"#,
        );
        round_trip::<GetResult>(r#"{"found":false,"namespace":"ns","key":"k"}"#);
        round_trip::<ListResult>(
            r#"{"records":[{"namespace":"ns","key":"a","value":12345678901234567890123,"version":1,"revision":2,"updated_by":null,"updated_at":"2026-01-02T03:04:05.678Z"},{"namespace":"ns","key":"b","value":"x","version":4,"revision":6,"updated_by":"bob","updated_at":"2026-01-02T03:04:05.678Z"}],"next_after":"b","next":"b"}"#,
        );
        round_trip::<ListResult>(r#"{"records":[],"next_after":null,"next":null}"#);
        round_trip::<HistoryResult>(
            r#"{"history":[{"version":2,"value":null,"updated_by":null,"updated_at":"2026-01-02T03:04:05.678Z","revision":5,"deleted":true},{"version":1,"value":[1.0],"updated_by":"a","updated_at":"2026-01-02T03:04:05.678Z","revision":4,"deleted":false}],"next":2}"#,
        );
        round_trip::<SetResult>(
            r#"{"namespace":"ns","key":"k","version":2,"previous_version":1,"revision":9}"#,
        );
        round_trip::<DeleteResult>(r#"{"deleted":true,"version":3,"revision":10}"#);
        round_trip::<DeleteResult>(r#"{"deleted":false,"version":0}"#);
    }

    #[test]
    fn lock_results_read_back_byte_for_byte() {
        round_trip::<AcquireResult>(
            r#"{"status":"acquired","resource_key":"file:a","lease_id":"L1","owner":"alice","mode":"exclusive","provider":null,"fencing_token":4,"acquired_at":"2026-01-02T03:04:05.678Z","expires_at":"2026-01-02T03:09:05.678Z","remaining_ms":300000,"metadata":{"intent": "x"},"previous":{"outcome":"moved","owner":"bob","at":"2026-01-02T03:04:05.678Z","moved_to":"file:b","note":"n"}}"#,
        );
        round_trip::<AcquireResult>(
            r#"{"status":"already_held","resource_key":"file:a","owner":"alice","mode":"shared","provider":"mcp","fencing_token":4,"acquired_at":"2026-01-02T03:04:05.678Z","expires_at":"2026-01-02T03:09:05.678Z","remaining_ms":1,"metadata":null}"#,
        );
        round_trip::<AcquireResult>(&format!(
            r#"{{"status":"busy","resource_key":"file:a/b","held_by":{HOLDER},"conflicting_key":"dir:a"}}"#
        ));
        // A key with several holders lists them all.
        round_trip::<AcquireResult>(&format!(
            r#"{{"status":"busy","resource_key":"tool:build","held_by":[{SLOT},{SLOT}],"conflicting_key":"tool:build"}}"#
        ));
        round_trip::<StatusResult>(r#"{"status":"available","resource_key":"file:a"}"#);
        round_trip::<StatusResult>(
            r#"{"status":"available","resource_key":"file:a","previous":{"outcome":"abandoned","owner":"bob","at":"2026-01-02T03:04:05.678Z"}}"#,
        );
        round_trip::<StatusResult>(&format!(
            r#"{{"status":"held","resource_key":"file:a","held_by":{HOLDER},"conflicting_key":"file:a"}}"#
        ));
        round_trip::<ListResourceLocksResult>(&format!(
            r#"{{"locks":[{{"resource_key":"file:a",{}],"waiting":[{{"resource_key":"file:a","owner":"carol","mode":"shared"}},{{"resource_key":"tool:build","owner":"dan","mode":"shared","slots":2}}],"next":"[\"file:a\",3]"}}"#,
            &HOLDER[1..]
        ));
        round_trip::<HeartbeatResult>(
            r#"{"resource_key":"file:a","expires_at":"2026-01-02T03:09:05.678Z","remaining_ms":1000}"#,
        );
    }

    #[test]
    fn task_and_journal_results_read_back_byte_for_byte() {
        round_trip::<RegisterTaskResult>(r#"{"task_id":"t","node_ids":["a","b"],"event_seq":3}"#);
        round_trip::<Option<AcquiredNode>>("null");
        round_trip::<Option<AcquiredNode>>(
            r#"{"task_id":"t","node_id":"n","name":null,"lease_id":"l","lease_owner":"w","lease_expires_at":"2026-01-02T03:09:05.678Z","attempt":1,"max_attempts":2,"payload":{"x": 1.50},"context":{"goal":"g","task_context":[ 1 ],"dependency_results":{"a":true,"b":{"c": 2.0}},"recent_events":[{"seq":1,"type":"task.registered","at":"2026-01-02T03:04:05.678Z","task_id":"t","data":{}}]}}"#,
        );
        round_trip::<TaskStatusResult>(
            r#"{"task":{"task_id":"t","goal":"g","status":"running","created_at":"2026-01-02T03:04:05.678Z","updated_at":"2026-01-02T03:04:05.678Z"},"counts":{"COMPLETED":0,"PENDING":1},"nodes":[{"node_id":"n","name":"build","state":"FAILED","dependencies":["m"],"attempts":1,"max_attempts":1,"lease_owner":null,"lease_expires_at":null,"result":null,"error":{"why": 1.50},"updated_at":"2026-01-02T03:04:05.678Z"}],"next":null}"#,
        );
        round_trip::<ListTasksResult>(
            r#"{"tasks":[{"task_id":"t","goal":"g","status":"completed","created_at":"2026-01-02T03:04:05.678Z","updated_at":"2026-01-02T03:04:05.678Z"}],"next":"t"}"#,
        );
        round_trip::<CancelTaskResult>(
            r#"{"task_id":"t","status":"cancelled","cancelled_nodes":2}"#,
        );
        round_trip::<ReadEventsResult>(
            r#"{"events":[{"seq":1,"type":"kv.set","at":"2026-01-02T03:04:05.678Z","actor":"a","namespace":"ns","key":"k","data":{"version": 1}},{"seq":2,"type":"lock.acquired","at":"2026-01-02T03:04:05.678Z","resource_key":"file:a","data":{}}],"next_seq":2}"#,
        );
    }

    #[test]
    fn a_missing_or_misspelt_field_is_an_error() {
        let read_get =
            |text: &str| read::<GetResult>("Get", &RawValue::from_string(text.into()).unwrap());
        // found, but no record: a derived reader of the flattened record would say None.
        let err = read_get(r#"{"found":true,"namespace":"ns","key":"k"}"#).unwrap_err();
        assert!(
            matches!(&err, CallError::Unreadable { method, .. } if method == "Get"),
            "{err}"
        );
        assert!(err.to_string().contains("missing field"), "{err}");
        let err = read::<AcquireResult>(
            "AcquireResourceLock",
            &RawValue::from_string(r#"{"status":"taken","resource_key":"file:a"}"#.into()).unwrap(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("taken"), "{err}");
        let err = read::<SetResult>(
            "Set",
            &RawValue::from_string(r#"{"namespace":"ns","key":"k","versoin":2}"#.into()).unwrap(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("missing field `version`"), "{err}");
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
                assert_eq!(conn.call("Get", &Value::Null).await.unwrap(), Value::Null);
                match conn.call("Set", &Value::Null).await {
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
                match conn.call("Set", &Value::Null).await {
                    Err(CallError::Daemon { kind, .. }) => assert_eq!(kind, "request_too_large"),
                    other => panic!("{other:?}"),
                }
                match conn.call("Get", &Value::Null).await {
                    Err(CallError::Lost(why)) => assert!(why.contains("another request"), "{why}"),
                    other => panic!("{other:?}"),
                }
            },
        );
        with_answers(&["not json"], async |conn| {
            match conn.call("Get", &Value::Null).await {
                Err(CallError::Lost(why)) => assert!(why.contains("not JSON"), "{why}"),
                other => panic!("{other:?}"),
            }
        });
        with_answers(
            &[r#"{"id":ID,"error":{"code":400,"message":"x","data":{}}}"#],
            async |conn| match conn.call("Get", &Value::Null).await {
                Err(CallError::Unreadable { detail, .. }) => {
                    assert!(detail.contains("kind"), "{detail}")
                }
                other => panic!("{other:?}"),
            },
        );
    }
}
