//! One handler per wire method. Each method is a params type implementing [`Method`] on
//! top of its [`Request`] (the wire name and result type, declared once in `protocol`):
//! its summary and a `plan` saying how to serve it (answer now, read, or queue a write). The registry below is the one list of methods; parsing, dispatch and
//! DescribeInterface are all generated from it.
//!
//! Beside the handlers: the rules they share with the writer (`state`, `locks::rules`,
//! `tasks::rules`, `journal`, `idempotency`), written over the storage boundary
//! (`store::boundary`), and the writer that runs them (`writer`, with its `schedule`).

// Remote access: who a connection acts as (`auth`), what its token's grants allow (`scopes`).
pub mod agents;
pub mod app;
pub mod areas;
pub mod auth;
pub mod instances;
pub mod journal;
pub mod locks;
pub mod operator;
pub mod paging;
pub mod retention;
pub mod scopes;
pub mod state;
pub mod system;
pub mod tasks;

pub use paging::{limit_or_default, MAX_PAGE};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::value::RawValue;

use crate::error::{Error, Result};
use crate::protocol::notify::Notifier;
pub use crate::protocol::Request;
use crate::store::boundary::{Foreseen, Storage};
use app::App;

use crate::engine::idempotency::Idempotency;
use crate::engine::{ReadFn, Reply, Served};
use areas::{WriteCtx, WriteFn};

/// Size limits that checks before queueing need.
pub struct Limits {
    pub max_value_bytes: usize,
}

/// The client connection a request came in on.
#[derive(Debug)]
pub struct ConnectionInfo {
    /// Unique for the daemon's life.
    pub id: u64,
    /// Set once the connection takes or waits for a lock or a node: its close must then be
    /// told to the writer (abandoned leases, waits that leave their queues).
    uses_locks: AtomicBool,
    /// Server-pushed lines (subscription events) for this connection; bounded.
    pub notify: Notifier,
    /// Live subscriptions of this connection, by id.
    pub subscriptions: std::sync::Mutex<std::collections::HashMap<String, SubscriptionEnd>>,
    /// Who the connection acts as: unauthenticated until told otherwise.
    pub auth: auth::ConnectionAuth,
}

impl ConnectionInfo {
    pub fn new(id: u64, notify: Notifier) -> ConnectionInfo {
        ConnectionInfo {
            id,
            uses_locks: AtomicBool::new(false),
            notify,
            subscriptions: Default::default(),
            auth: Default::default(),
        }
    }

    /// Ends every subscription: the connection is closing (`unauthorized` false), or its
    /// token ended, when each subscription's last line says so.
    pub fn end_subscriptions(&self, unauthorized: bool) {
        let mut subs = self.subscriptions.lock().unwrap_or_else(|e| e.into_inner());
        for (_, end) in subs.drain() {
            end.end(unauthorized);
        }
    }

    pub fn mark_lock_user(&self) {
        self.uses_locks.store(true, Ordering::Relaxed);
    }

    pub fn uses_locks(&self) -> bool {
        self.uses_locks.load(Ordering::Relaxed)
    }
}

/// How a subscription is told to end. Its own task writes its last line, after the last
/// event it queued, so nothing of it follows that line.
#[derive(Debug, Clone, Default)]
pub struct SubscriptionEnd {
    cancel: tokio_util::sync::CancellationToken,
    unauthorized: Arc<AtomicBool>,
}

impl SubscriptionEnd {
    /// Ends the subscription; `unauthorized`: because its connection's token ended, which
    /// its last line says.
    pub fn end(&self, unauthorized: bool) {
        if unauthorized {
            self.unauthorized.store(true, Ordering::Release);
        }
        self.cancel.cancel();
    }

    pub fn is_ended(&self) -> bool {
        self.cancel.is_cancelled()
    }

    pub async fn ended(&self) {
        self.cancel.cancelled().await
    }

    /// Why it ended: its token ended (rather than Unsubscribe or the connection closing).
    pub fn unauthorized(&self) -> bool {
        self.unauthorized.load(Ordering::Acquire)
    }
}

/// What a method needs to make its plan.
pub struct Ctx<'a> {
    pub app: &'a std::sync::Arc<App>,
    /// The params exactly as sent (for idempotency digests).
    pub raw_params: &'a RawValue,
    pub connection: &'a ConnectionInfo,
}

/// A lease id as a request presents it, with the token the request acts with: a lease is
/// bound to the token that obtained it, and another token presenting its id gets 410 as
/// if it did not exist.
#[derive(Debug, Clone)]
pub struct Presented {
    pub lease_id: String,
    /// None: a Unix-socket connection acting as admin without a token.
    pub token_id: Option<String>,
}

impl Ctx<'_> {
    /// The id of the token this request acts with (None: admin by the socket's mode).
    /// Dispatch has already checked the connection may act, so a refusal here is None.
    pub fn token_id(&self) -> Option<String> {
        match self.connection.auth.principal(self.app) {
            Ok(Some(principal)) => Some(principal.token_id.clone()),
            _ => None,
        }
    }

    /// The token whose grants limit what this request may see of others (None: admin).
    pub fn visible(&self) -> Option<std::sync::Arc<auth::Principal>> {
        match self.connection.auth.principal(self.app) {
            Ok(Some(principal)) if !principal.scopes.is_admin() => Some(principal),
            _ => None,
        }
    }

    /// Whether this request acts as an admin: the Unix socket's, or a token with `admin`.
    pub fn is_admin(&self) -> bool {
        match self.connection.auth.principal(self.app) {
            Ok(None) => true,
            Ok(Some(principal)) => principal.scopes.is_admin(),
            Err(_) => false,
        }
    }

    /// `lease_id` as presented by this request.
    pub fn presented(&self, lease_id: String) -> Presented {
        Presented {
            lease_id,
            token_id: self.token_id(),
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_value_bytes: self.app.config.max_value_bytes,
        }
    }
}

/// How a request is served.
pub enum Plan {
    /// Already answered.
    Ready(Result<Reply>),
    /// Subscribe: the connection opens it (`journal::open`, a read of where it starts),
    /// answers, and starts streaming once the answer line is on its way to the client
    /// (`server::subscriptions`).
    Subscribe(journal::Opening),
    /// A read: runs on a read connection, or behind the writer when the same connection
    /// has writes in flight. `heavy` reads may take long and run off the async workers.
    /// A read of several statements runs in one read transaction (one snapshot); a
    /// `single_statement` one needs none (SQLite makes each statement atomic), which
    /// saves Get, List and History a BEGIN and a COMMIT.
    Read {
        apply: ReadFn,
        heavy: bool,
        single_statement: bool,
    },
    /// A mutation for the writer.
    Write {
        idempotency: Option<Idempotency>,
        apply: WriteFn,
        /// What it will read, for the batch to read ahead.
        foreseen: Foreseen,
    },
    /// A write that runs in steps (`WriteCtx::continue_later`): the connection reads no
    /// further request until it is answered, so what it sends next applies after it.
    Barrier(Box<Plan>),
}

impl Plan {
    /// Names what a write will read (see [`Foreseen`]).
    pub fn foreseeing(mut self, f: impl FnOnce(&mut Foreseen)) -> Plan {
        if let Plan::Write { foreseen, .. } = &mut self {
            f(foreseen);
        }
        self
    }
}

/// A wire method, implemented by its params type: its [`Request`] names it and its result
/// (`Self::METHOD`, `Self::Result`); here, what DescribeInterface says of it and how the
/// daemon serves it.
pub trait Method: Request + Send + 'static {
    const SUMMARY: &'static str;
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan>;
}

pub use crate::protocol::reply;

/// A read of method `M`, checked to produce `M::Result`; its statements see one snapshot.
pub fn read<M: Method>(
    heavy: bool,
    f: impl FnOnce(&dyn Storage) -> Result<M::Result> + Send + 'static,
) -> Plan {
    Plan::Read {
        apply: Box::new(move |storage| reply(&f(storage)?)),
        heavy,
        single_statement: false,
    }
}

/// A read of method `M` that runs exactly one storage query (atomic by itself).
pub fn read_one_statement<M: Method>(
    f: impl FnOnce(&dyn Storage) -> Result<M::Result> + Send + 'static,
) -> Plan {
    Plan::Read {
        apply: Box::new(move |storage| reply(&f(storage)?)),
        heavy: false,
        single_statement: true,
    }
}

/// Runs a read on the pool of read connections: it sees the last commit (a read that must
/// see this connection's writes in flight goes to the writer instead, `Writer::read`).
pub fn read_now(app: &App, apply: ReadFn, single_statement: bool) -> Result<Reply> {
    if single_statement {
        app.store.read_one_statement(apply)
    } else {
        app.store.read(apply)
    }
}

/// The idempotency identity of a request of method `M`, if it carries a key.
fn idempotency<M: Method>(cx: &Ctx<'_>, key: Option<String>) -> Result<Option<Idempotency>> {
    match key {
        Some(key) if key.is_empty() || key.len() > 256 => Err(Error::invalid_params(
            "idempotency_key",
            "idempotency_key must be 1 to 256 bytes; use a UUID",
        )),
        Some(key) => Ok(Some(Idempotency::new(
            key,
            M::METHOD,
            cx.raw_params,
            cx.token_id().as_deref(),
        )?)),
        None => Ok(None),
    }
}

/// A mutation of method `M`, checked to produce `M::Result`.
pub fn write<M: Method>(
    cx: &Ctx<'_>,
    idempotency_key: Option<String>,
    f: impl FnOnce(&mut WriteCtx<'_>) -> Result<M::Result> + Send + 'static,
) -> Result<Plan> {
    Ok(Plan::Write {
        idempotency: idempotency::<M>(cx, idempotency_key)?,
        apply: Box::new(move |ctx| reply(&f(ctx)?).map(Some)),
        foreseen: Foreseen::default(),
    })
}

/// A mutation of method `M` that may answer later ([`Served::Later`]: a request that
/// waits took its reply channel).
pub fn write_or_wait<M: Method>(
    cx: &Ctx<'_>,
    idempotency_key: Option<String>,
    f: impl FnOnce(&mut WriteCtx<'_>) -> Result<Served<M::Result>> + Send + 'static,
) -> Result<Plan> {
    Ok(Plan::Write {
        idempotency: idempotency::<M>(cx, idempotency_key)?,
        apply: Box::new(move |ctx| match f(ctx)? {
            Served::Now(out) => reply(&out).map(Some),
            Served::Later => Ok(None),
        }),
        foreseen: Foreseen::default(),
    })
}

/// A mutation of method `M` that may run in steps ([`WriteCtx::continue_later`]); the
/// connection that sends it waits for its answer before it reads its next request.
pub fn write_in_steps<M: Method>(
    cx: &Ctx<'_>,
    idempotency_key: Option<String>,
    f: impl FnOnce(&mut WriteCtx<'_>) -> Result<Served<M::Result>> + Send + 'static,
) -> Result<Plan> {
    Ok(Plan::Barrier(Box::new(write_or_wait::<M>(
        cx,
        idempotency_key,
        f,
    )?)))
}

/// An answer of method `M` available at once.
pub fn ready<M: Method>(result: Result<M::Result>) -> Result<Plan> {
    Ok(Plan::Ready(result.and_then(|r| reply(&r))))
}

/// A new random id (a version 4 UUID, hyphenated, lower case) for a lease, session,
/// task, message or token. Written through uuid's encoder: `to_string` would go through
/// the formatting machinery, which costs the writer thread more than drawing the id.
pub fn new_id() -> String {
    uuid::Uuid::new_v4()
        .hyphenated()
        .encode_lower(&mut uuid::Uuid::encode_buffer())
        .to_string()
}

/// Parses params into `M`, naming the offending field on failure.
fn parse<M: Method>(raw: &RawValue) -> Result<M> {
    let text = raw.get();
    let text = if text == "null" { "{}" } else { text };
    if !text.starts_with('{') {
        return Err(Error::InvalidParams {
            message: format!(
                "params of {} must be a JSON object; send {{...}} or omit params",
                M::METHOD
            ),
            field: None,
        });
    }
    // The plain parse first: tracking the path costs on every field, and only a refusal
    // needs it (to name the field).
    if let Ok(params) = serde_json::from_str::<M>(text) {
        return Ok(params);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize::<_, M>(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner().to_string();
        let inner = inner
            .split(" at line ")
            .next()
            .unwrap_or(&inner)
            .to_string();
        let (field, message) = if let Some(missing) = inner.strip_prefix("missing field `") {
            let name = missing.trim_end_matches('`');
            let field = if path == "." {
                name.to_string()
            } else {
                format!("{path}.{name}")
            };
            (
                Some(field.clone()),
                format!(
                    "{} needs `{field}`; add it (see DescribeInterface)",
                    M::METHOD
                ),
            )
        } else if inner.starts_with("unknown field") {
            let name = inner.split('`').nth(1).unwrap_or("").to_string();
            let field = if path == "." { name } else { path.clone() };
            (
                Some(field),
                format!("{}: {inner}; remove or correct it", M::METHOD),
            )
        } else if path == "." {
            (None, format!("{}: {inner}", M::METHOD))
        } else {
            (
                Some(path.clone()),
                format!("{}: field `{path}`: {inner}", M::METHOD),
            )
        };
        Error::InvalidParams { message, field }
    })
}

/// Accepts PascalCase names and their snake_case aliases (`clear_namespace`).
pub fn canonical_name(method: &str) -> std::borrow::Cow<'_, str> {
    if method.starts_with(|c: char| c.is_ascii_uppercase()) {
        return method.into();
    }
    method
        .split('_')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect::<String>()
        .into()
}

pub use crate::protocol::system::MethodDescription;

fn describe<M: Method>() -> MethodDescription {
    MethodDescription {
        method: M::METHOD.into(),
        summary: M::SUMMARY.into(),
        params_schema: schemars::schema_for!(M),
        result_schema: schemars::schema_for!(M::Result),
    }
}

macro_rules! registry {
    ($($method:ty),* $(,)?) => {
        /// Every wire method name, in the order DescribeInterface lists them.
        pub const METHOD_NAMES: &[&str] = &[$(<$method as Request>::METHOD),*];

        /// Parses `params` for `method` (a canonical name) and plans the request.
        pub fn plan(method: &str, cx: &Ctx<'_>) -> Result<(&'static str, Plan)> {
            $(
                if method == <$method as Request>::METHOD {
                    // Authentication and the token's grants, then params and the plan.
                    return Ok((<$method as Request>::METHOD, scopes::checked::<$method>(cx)?));
                }
            )*
            if method == <system::AdvanceClockParams as Request>::METHOD && cx.app.clock.as_manual().is_some() {
                // Only a daemon started for tests (on a manual clock) knows this method.
                let plan = scopes::checked::<system::AdvanceClockParams>(cx)?;
                return Ok((<system::AdvanceClockParams as Request>::METHOD, plan));
            }
            Err(Error::MethodNotFound { method: method.to_string(), known: METHOD_NAMES })
        }

        /// Descriptions of every method, generated from the types that parse them.
        pub fn describe_all() -> Vec<MethodDescription> {
            vec![$(describe::<$method>()),*]
        }
    };
}

registry!(
    state::GetParams,
    state::SetParams,
    state::DeleteParams,
    state::ListParams,
    state::HistoryParams,
    state::TxnParams,
    state::ClearNamespaceParams,
    state::ExportParams,
    journal::ReadEventsParams,
    journal::PublishParams,
    journal::SubscribeParams,
    journal::UnsubscribeParams,
    journal::CompactJournalParams,
    system::DescribeInterfaceParams,
    system::HealthParams,
    system::MetricsParams,
    locks::AcquireResourceLockParams,
    locks::HeartbeatResourceLockParams,
    locks::ReleaseResourceLockParams,
    locks::ResourceLockStatusParams,
    locks::ListResourceLocksParams,
    locks::WaitResourceLockParams,
    locks::CheckFenceParams,
    tasks::RegisterTaskParams,
    tasks::AcquireNextNodeParams,
    tasks::HeartbeatNodeParams,
    tasks::CompleteNodeParams,
    tasks::FailNodeParams,
    tasks::CommitEventParams,
    tasks::TaskStatusParams,
    tasks::ListTasksParams,
    tasks::CancelTaskParams,
    auth::AuthenticateParams,
    auth::CreateTokenParams,
    auth::ListTokensParams,
    auth::RevokeTokenParams,
    agents::RegisterAgentParams,
    agents::AgentHeartbeatParams,
    agents::EndSessionParams,
    agents::ListAgentsParams,
    agents::SendMessageParams,
    agents::ReadInboxParams,
    agents::AckMessagesParams,
    operator::BreakLockParams,
    operator::RetryNodeParams,
    operator::EndAgentSessionParams,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_aliases_map_to_pascal_case() {
        assert_eq!(canonical_name("clear_namespace"), "ClearNamespace");
        assert_eq!(canonical_name("get"), "Get");
        assert_eq!(canonical_name("ReadEvents"), "ReadEvents");
    }

    #[test]
    fn every_request_is_a_method() {
        // The wire's requests (AdvanceClock is served only on a test daemon's clock) are
        // the daemon's methods: none a client could send that the daemon does not serve.
        let mut requests = crate::protocol::request_methods();
        requests.sort_unstable();
        let mut methods: Vec<&str> = METHOD_NAMES
            .iter()
            .copied()
            .chain([<system::AdvanceClockParams as Request>::METHOD])
            .collect();
        methods.sort_unstable();
        assert_eq!(requests, methods);
    }

    #[test]
    fn every_method_describes_params_and_result() {
        let all = describe_all();
        assert_eq!(all.len(), METHOD_NAMES.len());
        for m in all {
            let params = serde_json::to_value(&m.params_schema).unwrap();
            assert_eq!(params["type"], "object", "{}", m.method);
            assert!(serde_json::to_value(&m.result_schema).unwrap().is_object());
        }
    }
}
