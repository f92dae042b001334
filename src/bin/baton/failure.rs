//! Why a command failed, and the exit code it maps to.

use baton::client::CallError;

/// Why the command failed, with the exit code it maps to.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<CallError> for Failure {
    fn from(err: CallError) -> Failure {
        let code = match &err {
            CallError::Unreachable { .. } => 69,
            CallError::NotSent(_) | CallError::Lost(_) | CallError::Unreadable { .. } => 1,
            CallError::Daemon { kind, .. } => match kind.as_str() {
                "invalid" | "invalid_params" | "parse_error" | "invalid_request"
                | "method_not_found" | "request_too_large" | "value_too_large" => 2,
                "not_found" => 3,
                "conflict" | "idempotency_conflict" => 4,
                "lease_invalid" | "fenced" => 6,
                "unauthenticated" | "forbidden" => 77,
                "overloaded" | "unavailable" => 75,
                _ => 1,
            },
        };
        let message = match &err {
            CallError::Unreachable { address, source } if !address.contains("://") => format!(
                "batond is not running at {address} ({source}); start it with `batond` (or install the service: scripts/install-service), or pass --socket or --url"
            ),
            CallError::Unreachable { address, source } => format!(
                "batond is not reachable at {address} ({source}); check that it listens there (BATON_LISTEN), that --url is right, and that BATON_TLS_CA names the CA of its certificate"
            ),
            _ => err.to_string(),
        };
        Failure::new(code, message)
    }
}

pub type Outcome = Result<u8, Failure>;
