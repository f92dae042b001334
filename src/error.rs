//! The one error type every request can end in: a stable wire code, a kind, a message
//! that tells the caller what to do next, and optional structured data.

use serde_json::{json, Map, Value};

/// Every way a request can fail. Each variant maps to one wire `code` and `kind`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Parse(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("unknown method `{method}`; call DescribeInterface for the list of methods")]
    MethodNotFound {
        method: String,
        /// Every method the daemon serves, sent as `data.methods`.
        known: &'static [&'static str],
    },
    #[error("{message}")]
    InvalidParams {
        message: String,
        field: Option<String>,
    },
    #[error("request line is longer than the limit of {limit} bytes; send a smaller request (the limit is BATON_MAX_LINE_BYTES)")]
    RequestTooLarge { limit: usize },
    #[error("before Authenticate succeeds a line may be at most {limit} bytes; authenticate first (Authenticate {{token}}, with a token from `baton token create`), then send larger requests; batond closes this connection")]
    UnauthenticatedLineTooLarge { limit: usize },
    #[error("internal error: {0}; this is a bug in batond, please report it")]
    Internal(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    /// A network connection that has not authenticated, or whose token expired or was
    /// revoked. The message never carries the token.
    #[error("{0}")]
    Unauthenticated(String),
    /// The token lacks the grant; `needed` is the grant that would allow the request.
    #[error("{message}")]
    Forbidden { message: String, needed: String },
    /// A compare-and-set or Txn compare did not hold; `data` carries the current state.
    /// `exact` members go into `data` as the stored JSON text (a value comes back digit
    /// for digit, as Get would show it).
    #[error("{message}")]
    Conflict {
        message: String,
        data: Map<String, Value>,
        exact: Vec<(&'static str, Box<serde_json::value::RawValue>)>,
    },
    #[error("idempotency key `{key}` was already used with different params; use a new key for a different request")]
    IdempotencyConflict { key: String },
    /// A lease that is not (or no longer) the caller's; `data` names the current holder.
    #[error("{message}")]
    LeaseInvalid {
        message: String,
        data: Map<String, Value>,
    },
    /// `since_seq` is older than the journal keeps.
    #[error("{message}")]
    Compacted { message: String, oldest_seq: u64 },
    /// History asked for versions of a key that retention removed (`BATON_HISTORY_KEEP`);
    /// the same kind as [`Error::Compacted`], with the oldest version kept.
    #[error("{message}")]
    HistoryTrimmed {
        message: String,
        oldest_version: u64,
    },
    #[error("value is {size} bytes, over the limit of {limit} bytes; store a smaller value or raise BATON_MAX_VALUE_BYTES")]
    ValueTooLarge { size: usize, limit: usize },
    #[error("batond is overloaded (write queue full); retry shortly")]
    Overloaded,
    #[error("{0}")]
    Unavailable(String),
    /// A write whose commit may or may not have happened (the database connection broke
    /// during COMMIT and could not be asked); `data.outcome` is `unknown`.
    #[error("{0}")]
    OutcomeUnknown(String),
}

impl Error {
    /// The wire code (JSON-RPC style negative codes, HTTP-like positive ones).
    pub fn code(&self) -> i64 {
        match self {
            Error::Parse(_) => -32700,
            Error::InvalidRequest(_) => -32600,
            Error::MethodNotFound { .. } => -32601,
            Error::InvalidParams { .. } => -32602,
            Error::RequestTooLarge { .. } | Error::UnauthenticatedLineTooLarge { .. } => -32001,
            Error::Internal(_) => -32603,
            Error::Invalid(_) => 400,
            Error::NotFound(_) => 404,
            Error::Unauthenticated(_) => 401,
            Error::Forbidden { .. } => 403,
            Error::Conflict { .. } | Error::IdempotencyConflict { .. } => 409,
            Error::LeaseInvalid { .. } => 410,
            Error::Compacted { .. } | Error::HistoryTrimmed { .. } => 416,
            Error::ValueTooLarge { .. } => 413,
            Error::Overloaded => 429,
            Error::Unavailable(_) | Error::OutcomeUnknown(_) => 503,
        }
    }

    /// The stable machine-readable kind, sent as `data.kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Parse(_) => "parse_error",
            Error::InvalidRequest(_) => "invalid_request",
            Error::MethodNotFound { .. } => "method_not_found",
            Error::InvalidParams { .. } => "invalid_params",
            Error::RequestTooLarge { .. } | Error::UnauthenticatedLineTooLarge { .. } => {
                "request_too_large"
            }
            Error::Internal(_) => "internal",
            Error::Invalid(_) => "invalid",
            Error::NotFound(_) => "not_found",
            Error::Unauthenticated(_) => "unauthenticated",
            Error::Forbidden { .. } => "forbidden",
            Error::Conflict { .. } => "conflict",
            Error::IdempotencyConflict { .. } => "idempotency_conflict",
            Error::LeaseInvalid { .. } => "lease_invalid",
            Error::Compacted { .. } | Error::HistoryTrimmed { .. } => "compacted",
            Error::ValueTooLarge { .. } => "value_too_large",
            Error::Overloaded => "overloaded",
            Error::Unavailable(_) | Error::OutcomeUnknown(_) => "unavailable",
        }
    }

    /// The `error` object of a response: `{code, message, data: {kind, ...}}`.
    pub fn to_wire(&self) -> Value {
        let mut data = match self {
            Error::Conflict { data, .. } | Error::LeaseInvalid { data, .. } => data.clone(),
            _ => Map::new(),
        };
        data.insert("kind".into(), Value::from(self.kind()));
        match self {
            Error::MethodNotFound { known, .. } => {
                data.insert("methods".into(), json!(known));
            }
            Error::InvalidParams {
                field: Some(field), ..
            } => {
                data.insert("field".into(), Value::from(field.as_str()));
            }
            Error::RequestTooLarge { limit } | Error::UnauthenticatedLineTooLarge { limit } => {
                data.insert("limit".into(), json!(limit));
            }
            Error::ValueTooLarge { size, limit } => {
                data.insert("size".into(), json!(size));
                data.insert("limit".into(), json!(limit));
            }
            Error::Compacted { oldest_seq, .. } => {
                data.insert("oldest_seq".into(), json!(oldest_seq));
            }
            Error::HistoryTrimmed { oldest_version, .. } => {
                data.insert("oldest_version".into(), json!(oldest_version));
            }
            Error::IdempotencyConflict { key } => {
                data.insert("idempotency_key".into(), json!(key));
            }
            Error::Forbidden { needed, .. } => {
                data.insert("needed".into(), json!(needed));
            }
            Error::OutcomeUnknown(_) => {
                data.insert("outcome".into(), json!("unknown"));
            }
            _ => {}
        }
        json!({ "code": self.code(), "message": self.to_string(), "data": data })
    }

    /// Writes the `error` object of a response, as [`Error::to_wire`] but with `exact`
    /// members as their stored text.
    pub fn write_wire(&self, out: &mut Vec<u8>) {
        let exact = match self {
            Error::Conflict { exact, .. } if !exact.is_empty() => exact,
            _ => {
                serde_json::to_writer(out, &self.to_wire()).expect("errors serialize");
                return;
            }
        };
        let wire = self.to_wire();
        out.extend_from_slice(b"{\"code\":");
        out.extend_from_slice(self.code().to_string().as_bytes());
        out.extend_from_slice(b",\"message\":");
        serde_json::to_writer(&mut *out, &wire["message"]).expect("strings serialize");
        out.extend_from_slice(b",\"data\":");
        // `exact` members are not in `data`: they follow as their stored text. `data`
        // always holds `kind`, so it ends in `}` after at least one member.
        serde_json::to_writer(&mut *out, &wire["data"]).expect("errors serialize");
        out.pop();
        for (name, raw) in exact {
            out.push(b',');
            serde_json::to_writer(&mut *out, name).expect("strings serialize");
            out.push(b':');
            out.extend_from_slice(raw.get().as_bytes());
        }
        out.extend_from_slice(b"}}");
    }

    pub fn invalid_params(field: impl Into<String>, message: impl Into<String>) -> Error {
        Error::InvalidParams {
            message: message.into(),
            field: Some(field.into()),
        }
    }

    /// Whether this error is a failure of the daemon (as opposed to a refusal of the request).
    pub fn is_server_fault(&self) -> bool {
        matches!(self, Error::Internal(_) | Error::Unavailable(_))
    }
}

/// How the answer to a request that met a damaged database file begins.
pub const DAMAGED: &str = "the database file is damaged";

impl From<rusqlite::Error> for Error {
    fn from(err: rusqlite::Error) -> Error {
        use rusqlite::ErrorCode;
        // batond only ever stores valid UTF-8 text: text that is not came from a damaged file.
        let bad_text = match &err {
            rusqlite::Error::Utf8Error(_) => true,
            rusqlite::Error::FromSqlConversionFailure(_, rusqlite::types::Type::Text, e) => {
                e.downcast_ref::<std::str::Utf8Error>().is_some()
                    || e.downcast_ref::<std::string::FromUtf8Error>().is_some()
            }
            _ => false,
        };
        if bad_text {
            return Error::Unavailable(format!(
                "{DAMAGED} (unreadable text: {err}); stop batond and restore the database from a backup"
            ));
        }
        match err.sqlite_error_code() {
            Some(ErrorCode::DiskFull) => Error::Unavailable(
                "storage is full, nothing was written; free disk space and retry".into(),
            ),
            Some(ErrorCode::ReadOnly)
            | Some(ErrorCode::SystemIoFailure)
            | Some(ErrorCode::CannotOpen)
            | Some(ErrorCode::PermissionDenied) => Error::Unavailable(format!(
                "storage is failing ({err}), nothing was written; check the database file and disk, then retry"
            )),
            Some(ErrorCode::DatabaseCorrupt) | Some(ErrorCode::NotADatabase) => {
                Error::Unavailable(format!(
                    "{DAMAGED} ({err}); stop batond and restore the database from a backup"
                ))
            }
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => {
                Error::Unavailable(format!("storage is busy ({err}); retry shortly"))
            }
            _ => Error::Internal(format!("storage: {err}")),
        }
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(err: tokio_postgres::Error) -> Error {
        use tokio_postgres::error::SqlState;
        let Some(code) = err.code() else {
            // No SQLSTATE: the connection or the network failed.
            return Error::Unavailable(format!(
                "PostgreSQL is unreachable ({err}); nothing was written, retry once it is back"
            ));
        };
        let class = &code.code()[..2];
        // tokio-postgres says only "db error": the server's message and SQLSTATE say what.
        let err = match err.as_db_error() {
            Some(db) => format!("{} (SQLSTATE {})", db.message(), code.code()),
            None => err.to_string(),
        };
        if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
        {
            return Error::Unavailable(format!("storage is busy ({err}); retry shortly"));
        }
        match class {
            // Bad data, integrity, syntax or a missing object: not the server's state.
            "22" | "23" | "42" => Error::Internal(format!("storage: {err}")),
            // Resources, shutdown, connection, operator intervention, system errors.
            _ => Error::Unavailable(format!(
                "PostgreSQL refused or failed ({err}); nothing was written, retry shortly"
            )),
        }
    }
}

impl From<r2d2::Error> for Error {
    fn from(err: r2d2::Error) -> Error {
        Error::Unavailable(format!(
            "no database connection available ({err}); retry shortly"
        ))
    }
}

impl From<serde_json::Error> for Error {
    fn from(err: serde_json::Error) -> Error {
        Error::Internal(format!("json: {err}"))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
