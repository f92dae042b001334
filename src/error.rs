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
    /// A fenced write whose lease is no longer live, or whose fencing token is not the
    /// key's latest; `data` names the key's holders and its latest token.
    #[error("{message}")]
    Fenced {
        message: String,
        data: Map<String, Value>,
    },
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

/// The kinds of error an answer carries (`data.kind`), each with its one wire code: the
/// error table DescribeInterface and docs/protocol.md give is [`Kind::ALL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Parse,
    InvalidRequest,
    MethodNotFound,
    InvalidParams,
    RequestTooLarge,
    Internal,
    Invalid,
    Unauthenticated,
    Forbidden,
    NotFound,
    Conflict,
    IdempotencyConflict,
    Fenced,
    LeaseInvalid,
    ValueTooLarge,
    Compacted,
    Overloaded,
    Unavailable,
}

impl Kind {
    /// Every kind, in the order the error table lists them.
    pub const ALL: [Kind; 18] = [
        Kind::Parse,
        Kind::InvalidRequest,
        Kind::MethodNotFound,
        Kind::InvalidParams,
        Kind::RequestTooLarge,
        Kind::Internal,
        Kind::Invalid,
        Kind::Unauthenticated,
        Kind::Forbidden,
        Kind::NotFound,
        Kind::Conflict,
        Kind::IdempotencyConflict,
        Kind::Fenced,
        Kind::LeaseInvalid,
        Kind::ValueTooLarge,
        Kind::Compacted,
        Kind::Overloaded,
        Kind::Unavailable,
    ];

    pub fn code(self) -> i64 {
        match self {
            Kind::Parse => -32700,
            Kind::InvalidRequest => -32600,
            Kind::MethodNotFound => -32601,
            Kind::InvalidParams => -32602,
            Kind::RequestTooLarge => -32001,
            Kind::Internal => -32603,
            Kind::Invalid => 400,
            Kind::Unauthenticated => 401,
            Kind::Forbidden => 403,
            Kind::NotFound => 404,
            Kind::Conflict | Kind::IdempotencyConflict | Kind::Fenced => 409,
            Kind::LeaseInvalid => 410,
            Kind::ValueTooLarge => 413,
            Kind::Compacted => 416,
            Kind::Overloaded => 429,
            Kind::Unavailable => 503,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Parse => "parse_error",
            Kind::InvalidRequest => "invalid_request",
            Kind::MethodNotFound => "method_not_found",
            Kind::InvalidParams => "invalid_params",
            Kind::RequestTooLarge => "request_too_large",
            Kind::Internal => "internal",
            Kind::Invalid => "invalid",
            Kind::Unauthenticated => "unauthenticated",
            Kind::Forbidden => "forbidden",
            Kind::NotFound => "not_found",
            Kind::Conflict => "conflict",
            Kind::IdempotencyConflict => "idempotency_conflict",
            Kind::Fenced => "fenced",
            Kind::LeaseInvalid => "lease_invalid",
            Kind::ValueTooLarge => "value_too_large",
            Kind::Compacted => "compacted",
            Kind::Overloaded => "overloaded",
            Kind::Unavailable => "unavailable",
        }
    }

    /// When an answer carries it, as the error table says.
    pub fn when(self) -> &'static str {
        match self {
            Kind::Parse => "the line is not JSON",
            Kind::InvalidRequest => {
                "JSON but not a request object (not an object, or no string `method`)"
            }
            Kind::MethodNotFound => "unknown method; data.methods lists the known ones",
            Kind::InvalidParams => {
                "missing, ill-typed or unknown params; data.field names the field"
            }
            Kind::RequestTooLarge => "the line is over BATON_MAX_LINE_BYTES (the connection stays usable), or, before Authenticate succeeds on a network connection, over 64 KiB (the connection is closed)",
            Kind::Internal => "a bug in batond; never for bad input",
            Kind::Invalid => "well-formed but refused: empty or over-long key, bad limit, ...",
            Kind::Unauthenticated => "a network connection that has not authenticated (call Authenticate), or whose token expired or was revoked",
            Kind::Forbidden => {
                "the token lacks the grant; data.needed names the grant that would allow it"
            }
            Kind::NotFound => "a task, node, lease or subscription that does not exist",
            Kind::Conflict => "a version did not match (data has the current value), or a Txn compare failed (data.failed)",
            Kind::IdempotencyConflict => "an idempotency_key reused within 24 hours with other params (data.idempotency_key names it); use a new key for a new request",
            Kind::Fenced => "a fenced write (`fence`) whose lease is no longer live, or whose fencing token is not the key's latest: an agent's claim was lost; data.held_by and data.latest_fencing_token say who holds the key now; nothing was written",
            Kind::LeaseInvalid => "a lease id that is stale, expired, released or someone else's",
            Kind::ValueTooLarge => "a value over BATON_MAX_VALUE_BYTES",
            Kind::Compacted => "since_seq older than the retained journal (resume from data.oldest_seq), or History before versions retention removed (data.oldest_version)",
            Kind::Overloaded => "the write queue is full; safe to retry",
            Kind::Unavailable => "shutting down, or storage failing; nothing was written",
        }
    }
}

impl Error {
    /// The wire code (JSON-RPC style negative codes, HTTP-like positive ones).
    pub fn code(&self) -> i64 {
        self.error_kind().code()
    }

    /// The stable machine-readable kind, sent as `data.kind`.
    pub fn kind(&self) -> &'static str {
        self.error_kind().name()
    }

    /// Which of the [`Kind`]s this error is.
    pub fn error_kind(&self) -> Kind {
        match self {
            Error::Parse(_) => Kind::Parse,
            Error::InvalidRequest(_) => Kind::InvalidRequest,
            Error::MethodNotFound { .. } => Kind::MethodNotFound,
            Error::InvalidParams { .. } => Kind::InvalidParams,
            Error::RequestTooLarge { .. } | Error::UnauthenticatedLineTooLarge { .. } => {
                Kind::RequestTooLarge
            }
            Error::Internal(_) => Kind::Internal,
            Error::Invalid(_) => Kind::Invalid,
            Error::NotFound(_) => Kind::NotFound,
            Error::Unauthenticated(_) => Kind::Unauthenticated,
            Error::Forbidden { .. } => Kind::Forbidden,
            Error::Conflict { .. } => Kind::Conflict,
            Error::IdempotencyConflict { .. } => Kind::IdempotencyConflict,
            Error::Fenced { .. } => Kind::Fenced,
            Error::LeaseInvalid { .. } => Kind::LeaseInvalid,
            Error::Compacted { .. } | Error::HistoryTrimmed { .. } => Kind::Compacted,
            Error::ValueTooLarge { .. } => Kind::ValueTooLarge,
            Error::Overloaded => Kind::Overloaded,
            Error::Unavailable(_) | Error::OutcomeUnknown(_) => Kind::Unavailable,
        }
    }

    /// The `error` object of a response: `{code, message, data: {kind, ...}}`.
    pub fn to_wire(&self) -> Value {
        let mut data = match self {
            Error::Conflict { data, .. }
            | Error::LeaseInvalid { data, .. }
            | Error::Fenced { data, .. } => data.clone(),
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

#[cfg(test)]
mod kind_tests {
    use super::*;

    /// Every variant answers with a kind the error table lists, under the table's code.
    #[test]
    fn every_error_is_a_row_of_the_table() {
        let every = [
            Error::Parse(String::new()),
            Error::InvalidRequest(String::new()),
            Error::MethodNotFound {
                method: String::new(),
                known: &[],
            },
            Error::InvalidParams {
                message: String::new(),
                field: None,
            },
            Error::RequestTooLarge { limit: 1 },
            Error::UnauthenticatedLineTooLarge { limit: 1 },
            Error::Internal(String::new()),
            Error::Invalid(String::new()),
            Error::NotFound(String::new()),
            Error::Unauthenticated(String::new()),
            Error::Forbidden {
                message: String::new(),
                needed: String::new(),
            },
            Error::Conflict {
                message: String::new(),
                data: Default::default(),
                exact: Vec::new(),
            },
            Error::IdempotencyConflict { key: String::new() },
            Error::Fenced {
                message: String::new(),
                data: Default::default(),
            },
            Error::LeaseInvalid {
                message: String::new(),
                data: Default::default(),
            },
            Error::HistoryTrimmed {
                message: String::new(),
                oldest_version: 1,
            },
            Error::Compacted {
                message: String::new(),
                oldest_seq: 1,
            },
            Error::ValueTooLarge { size: 2, limit: 1 },
            Error::Overloaded,
            Error::Unavailable(String::new()),
            Error::OutcomeUnknown(String::new()),
        ];
        for err in every {
            let wire = err.to_wire();
            let row = Kind::ALL
                .iter()
                .find(|k| k.name() == wire["data"]["kind"])
                .unwrap_or_else(|| panic!("{err:?}: no row for {wire}"));
            assert_eq!(wire["code"], row.code(), "{err:?}");
        }
        let mut names: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Kind::ALL.len(), "a kind listed twice");
    }
}
