//! Scopes: what a token's grants allow. Every method declares what it needs ([`Scoped`],
//! implemented below for each params type), and dispatch checks it in one place
//! (`checked`) before the method plans anything, so a method that forgot to declare
//! its needs does not compile.
//!
//! | grant | allows |
//! | --- | --- |
//! | `admin` | everything |
//! | `kv:read:PATTERN` | Get, List, History, Export of matching namespaces |
//! | `kv:write:PATTERN` | the above plus Set, Delete, Txn, ClearNamespace |
//! | `locks:PATTERN` | lock methods on matching resource keys |
//! | `tasks:read`, `tasks:write`, `tasks:work` | task reads; + Register/Cancel; + node work |
//! | `events:read`, `events:publish` | ReadEvents, Subscribe; Publish |
//! | `agents` | the agent and message methods; RegisterAgent of any name no other token owns |
//! | `agents:PATTERN` | the same, but RegisterAgent only of names matching PATTERN |
//! | `metrics` | Metrics and the HTTP listener's `/metrics`: a scraper never needs `admin` |
//! | `operator` | BreakLock, RetryNode, EndAgentSession (audited: each journals who and why), and nothing else: no read, not even of what it acts on |
//! | `read` | every read and nothing else: the kv reads of every namespace, ResourceLockStatus, ListResourceLocks, TaskStatus, ListTasks, ReadEvents, Subscribe, ListAgents (the dashboard's token) |
//!
//! A PATTERN is exact, or a prefix ending in `*`.

use crate::error::{Error, Result};
use crate::resource_key;

use super::auth::Principal;
use super::{journal, locks, parse, state, system, tasks, Ctx, Method, Plan};

/// A namespace or resource-key pattern: exact, or a prefix ending in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(String);

impl Pattern {
    fn parse(raw: &str, grant: &str) -> std::result::Result<Pattern, String> {
        let body = raw.strip_suffix('*').unwrap_or(raw);
        if raw.is_empty() {
            return Err(format!(
                "grant `{grant}` has an empty pattern; name one, or end a prefix with * (`*` alone matches everything)"
            ));
        }
        if body.contains('*') {
            return Err(format!(
                "grant `{grant}` has a * before its end; a pattern is exact or a prefix ending in *"
            ));
        }
        Ok(Pattern(raw.to_string()))
    }

    pub fn matches(&self, name: &str) -> bool {
        match self.0.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == self.0,
        }
    }

    fn matches_everything(&self) -> bool {
        self.0 == "*"
    }
}

/// One grant of a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    Admin,
    KvRead(Pattern),
    KvWrite(Pattern),
    Locks(Pattern),
    TasksRead,
    TasksWrite,
    TasksWork,
    EventsRead,
    EventsPublish,
    Agents,
    /// The agent methods, registering only names that match.
    AgentsNamed(Pattern),
    /// Every read, and nothing else.
    Read,
    /// Metrics and `/metrics`, nothing else.
    Metrics,
    /// The operator's audited methods (BreakLock, RetryNode, EndAgentSession), nothing else.
    Operator,
}

impl Grant {
    pub fn parse(raw: &str) -> std::result::Result<Grant, String> {
        Ok(match raw {
            "admin" => Grant::Admin,
            "tasks:read" => Grant::TasksRead,
            "tasks:write" => Grant::TasksWrite,
            "tasks:work" => Grant::TasksWork,
            "events:read" => Grant::EventsRead,
            "events:publish" => Grant::EventsPublish,
            "agents" => Grant::Agents,
            "read" => Grant::Read,
            "metrics" => Grant::Metrics,
            "operator" => Grant::Operator,
            _ => {
                if let Some(p) = raw.strip_prefix("kv:read:") {
                    Grant::KvRead(Pattern::parse(p, raw)?)
                } else if let Some(p) = raw.strip_prefix("kv:write:") {
                    Grant::KvWrite(Pattern::parse(p, raw)?)
                } else if let Some(p) = raw.strip_prefix("locks:") {
                    Grant::Locks(Pattern::parse(p, raw)?)
                } else if let Some(p) = raw.strip_prefix("agents:") {
                    Grant::AgentsNamed(Pattern::parse(p, raw)?)
                } else {
                    return Err(format!(
                        "`{raw}` is not a grant; use admin, kv:read:PATTERN, kv:write:PATTERN, locks:PATTERN, tasks:read, tasks:write, tasks:work, events:read, events:publish, agents, agents:PATTERN, read, metrics or operator"
                    ));
                }
            }
        })
    }
}

/// A token's grants.
#[derive(Debug, Clone)]
pub struct Scopes(Vec<Grant>);

impl Scopes {
    /// Parses a token's scope list; a bad grant is 400 naming it.
    pub fn parse(list: &[String]) -> Result<Scopes> {
        if list.is_empty() {
            return Err(Error::Invalid(
                "scopes is empty, so the token could do nothing; give at least one grant, e.g. kv:read:* (the narrowest that does the job)".into(),
            ));
        }
        list.iter()
            .map(|raw| Grant::parse(raw).map_err(Error::Invalid))
            .collect::<Result<Vec<_>>>()
            .map(Scopes)
    }

    pub fn is_admin(&self) -> bool {
        self.0.contains(&Grant::Admin)
    }

    /// Whether these grants allow `need`.
    pub fn allows(&self, need: &Need) -> bool {
        self.0.iter().any(|grant| match (grant, need) {
            (Grant::Admin, _) => true,
            (Grant::KvRead(p) | Grant::KvWrite(p), Need::KvRead(ns)) => p.matches(ns),
            (Grant::KvRead(p) | Grant::KvWrite(p), Need::KvReadAll) => p.matches_everything(),
            (Grant::KvWrite(p), Need::KvWrite(ns)) => p.matches(ns),
            (Grant::Locks(p), Need::Lock(key)) => p.matches(key),
            (Grant::Locks(_), Need::AnyLock) => true,
            (Grant::TasksRead | Grant::TasksWrite | Grant::TasksWork, Need::TasksRead) => true,
            (Grant::TasksWrite, Need::TasksWrite) => true,
            (Grant::TasksWork, Need::TasksWork) => true,
            (Grant::EventsRead, Need::EventsRead) => true,
            (Grant::EventsPublish, Need::EventsPublish) => true,
            (Grant::Agents, Need::Agents | Need::AgentsRead | Need::AgentName(_)) => true,
            (Grant::AgentsNamed(_), Need::Agents | Need::AgentsRead) => true,
            (Grant::AgentsNamed(p), Need::AgentName(name)) => p.matches(name),
            (Grant::Metrics, Need::Metrics) => true,
            (Grant::Operator, Need::Operator) => true,
            (Grant::Locks(p), Need::LockRead(key)) => p.matches(key),
            (
                Grant::Read,
                Need::KvRead(_)
                | Need::KvReadAll
                | Need::LockRead(_)
                | Need::AnyLock
                | Need::TasksRead
                | Need::EventsRead
                | Need::AgentsRead,
            ) => true,
            _ => false,
        })
    }

    /// Whether a resource key is among those the grants let this token see.
    pub fn allows_lock(&self, key: &str) -> bool {
        self.allows(&Need::LockRead(key.to_string()))
    }

    /// Whether the grants cover an event's subject: what a token reads through the
    /// journal is what it could read directly. kv events need a read grant on their
    /// namespace, lock events one on their resource key, task and node events
    /// `tasks:read`, agent and message events `agents`, token events `admin`; a custom
    /// event is the publisher's to share with `events:read` (a task's, `tasks:read`).
    pub fn sees_event(&self, event: &crate::protocol::journal::Event) -> bool {
        let kind = event.kind.as_str();
        let family = kind.split_once('.').map_or(kind, |(family, _)| family);
        let need = match family {
            "kv" => match &event.namespace {
                Some(ns) => Need::KvRead(ns.clone()),
                None => Need::KvReadAll,
            },
            "lock" => match &event.resource_key {
                Some(key) => Need::LockRead(key.clone()),
                None => Need::AnyLock,
            },
            "task" | "node" => Need::TasksRead,
            "agent" | "message" => Need::AgentsRead,
            "custom" if event.task_id.is_some() => Need::TasksRead,
            "custom" => Need::EventsRead,
            // Token events, and whatever else is the daemon's own.
            _ => Need::Admin,
        };
        self.allows(&need)
    }
}

/// One thing a request needs a grant for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    Admin,
    KvRead(String),
    /// Every namespace (Export without a namespace).
    KvReadAll,
    KvWrite(String),
    /// A canonical resource key.
    Lock(String),
    /// Reading a canonical resource key's state (ResourceLockStatus, WaitResourceLock).
    LockRead(String),
    /// Some `locks:` grant (ListResourceLocks, which then shows only what they cover).
    AnyLock,
    TasksRead,
    TasksWrite,
    TasksWork,
    EventsRead,
    EventsPublish,
    Agents,
    /// ListAgents.
    AgentsRead,
    /// RegisterAgent of this name (whether another token owns it is the rules' to judge).
    AgentName(String),
    /// Metrics, `/metrics`.
    Metrics,
    /// BreakLock, RetryNode, EndAgentSession.
    Operator,
}

impl Need {
    /// The narrowest grant that allows it, as `data.needed` names it.
    pub fn grant(&self) -> String {
        match self {
            Need::Admin => "admin".into(),
            Need::KvRead(ns) => format!("kv:read:{ns}"),
            Need::KvReadAll => "kv:read:*".into(),
            Need::KvWrite(ns) => format!("kv:write:{ns}"),
            Need::Lock(key) | Need::LockRead(key) => format!("locks:{key}"),
            Need::AnyLock => "locks:*".into(),
            Need::TasksRead => "tasks:read".into(),
            Need::TasksWrite => "tasks:write".into(),
            Need::TasksWork => "tasks:work".into(),
            Need::EventsRead => "events:read".into(),
            Need::EventsPublish => "events:publish".into(),
            Need::Agents | Need::AgentsRead => "agents".into(),
            Need::AgentName(name) => format!("agents:{name}"),
            Need::Metrics => "metrics".into(),
            Need::Operator => "operator".into(),
        }
    }
}

/// What a method needs of the token that calls it. Every method in the registry
/// implements it (dispatch will not compile otherwise).
pub trait Scoped {
    /// Served before authentication (Health, DescribeInterface, Authenticate).
    const PUBLIC: bool = false;
    /// Every grant this request needs; all must be held.
    fn needs(&self, cx: &Ctx<'_>) -> Result<Vec<Need>>;
}

/// Parses and plans a request of `M` for this connection: 401 before authentication
/// (unless `M` is public), 403 when the token lacks a grant `M` needs.
pub(super) fn checked<M: Method + Scoped>(cx: &Ctx<'_>) -> Result<Plan> {
    let principal = if M::PUBLIC {
        None
    } else {
        cx.connection.auth.principal(cx.app)?
    };
    let params = parse::<M>(cx.raw_params)?;
    let Some(principal) = principal.filter(|p| !p.scopes.is_admin()) else {
        return params.plan(cx);
    };
    for need in params.needs(cx)? {
        if !principal.scopes.allows(&need) {
            return Err(forbidden(M::METHOD, &principal, &need));
        }
    }
    params.plan(cx)
}

fn forbidden(method: &str, principal: &Principal, need: &Need) -> Error {
    let needed = need.grant();
    Error::Forbidden {
        message: format!(
            "{method} needs the grant `{needed}`, which the token `{}` does not have; ask an admin for a token that has it (baton token create --scope '{needed}')",
            principal.name
        ),
        needed,
    }
}

fn lock(cx: &Ctx<'_>, raw: &str) -> Result<Vec<Need>> {
    let key = resource_key::canonicalize(raw, &cx.app.config.workspace)?;
    Ok(vec![Need::Lock(key.key)])
}

fn lock_read(cx: &Ctx<'_>, raw: &str) -> Result<Vec<Need>> {
    let key = resource_key::canonicalize(raw, &cx.app.config.workspace)?;
    Ok(vec![Need::LockRead(key.key)])
}

/// Implements [`Scoped`] for methods whose needs do not depend on their params.
macro_rules! fixed {
    ($($method:ty => [$($need:expr),*] $(public = $public:expr)?;)*) => {$(
        impl Scoped for $method {
            $(const PUBLIC: bool = $public;)?
            fn needs(&self, _: &Ctx<'_>) -> Result<Vec<Need>> {
                Ok(vec![$($need),*])
            }
        }
    )*};
}

fixed! {
    system::DescribeInterfaceParams => [] public = true;
    system::HealthParams => [] public = true;
    super::auth::AuthenticateParams => [] public = true;
    system::MetricsParams => [Need::Metrics];
    system::AdvanceClockParams => [Need::Admin];
    super::auth::CreateTokenParams => [Need::Admin];
    super::auth::ListTokensParams => [Need::Admin];
    super::auth::RevokeTokenParams => [Need::Admin];
    journal::CompactJournalParams => [Need::Admin];
    journal::ReadEventsParams => [Need::EventsRead];
    journal::SubscribeParams => [Need::EventsRead];
    journal::UnsubscribeParams => [Need::EventsRead];
    journal::PublishParams => [Need::EventsPublish];
    tasks::RegisterTaskParams => [Need::TasksWrite];
    tasks::CancelTaskParams => [Need::TasksWrite];
    tasks::TaskStatusParams => [Need::TasksRead];
    tasks::ListTasksParams => [Need::TasksRead];
    tasks::AcquireNextNodeParams => [Need::TasksWork];
    tasks::HeartbeatNodeParams => [Need::TasksWork];
    tasks::CompleteNodeParams => [Need::TasksWork];
    tasks::FailNodeParams => [Need::TasksWork];
    tasks::CommitEventParams => [Need::TasksWork];
    super::agents::AgentHeartbeatParams => [Need::Agents];
    super::agents::EndSessionParams => [Need::Agents];
    super::agents::ListAgentsParams => [Need::AgentsRead];
    super::agents::SendMessageParams => [Need::Agents];
    super::agents::ReadInboxParams => [Need::Agents];
    super::agents::AckMessagesParams => [Need::Agents];
    super::operator::BreakLockParams => [Need::Operator];
    super::operator::RetryNodeParams => [Need::Operator];
    super::operator::EndAgentSessionParams => [Need::Operator];
}

/// Implements [`Scoped`] for methods on one namespace: `need` of their `namespace`.
macro_rules! on_namespace {
    ($need:ident: $($method:ty),*) => {$(
        impl Scoped for $method {
            fn needs(&self, _: &Ctx<'_>) -> Result<Vec<Need>> {
                Ok(vec![Need::$need(self.namespace.clone())])
            }
        }
    )*};
}

on_namespace!(KvRead: state::GetParams, state::ListParams, state::HistoryParams);
on_namespace!(KvWrite: state::SetParams, state::DeleteParams);

/// Implements [`Scoped`] for methods on one resource key: the `locks:` grant for it.
macro_rules! on_resource_key {
    ($($method:ty),*) => {$(
        impl Scoped for $method {
            fn needs(&self, cx: &Ctx<'_>) -> Result<Vec<Need>> {
                lock(cx, &self.resource_key)
            }
        }
    )*};
}

on_resource_key!(
    locks::AcquireResourceLockParams,
    locks::HeartbeatResourceLockParams,
    locks::ReleaseResourceLockParams
);

impl Scoped for locks::ResourceLockStatusParams {
    fn needs(&self, cx: &Ctx<'_>) -> Result<Vec<Need>> {
        lock_read(cx, &self.resource_key)
    }
}

impl Scoped for locks::CheckFenceParams {
    fn needs(&self, cx: &Ctx<'_>) -> Result<Vec<Need>> {
        lock_read(cx, &self.resource_key)
    }
}

impl Scoped for locks::WaitResourceLockParams {
    fn needs(&self, cx: &Ctx<'_>) -> Result<Vec<Need>> {
        lock_read(cx, &self.resource_key)
    }
}

impl Scoped for state::ExportParams {
    fn needs(&self, _: &Ctx<'_>) -> Result<Vec<Need>> {
        Ok(vec![match &self.namespace {
            Some(ns) => Need::KvRead(ns.clone()),
            None => Need::KvReadAll,
        }])
    }
}

impl Scoped for state::ClearNamespaceParams {
    fn needs(&self, _: &Ctx<'_>) -> Result<Vec<Need>> {
        Ok(vec![Need::KvWrite(self.namespace.clone())])
    }
}

impl Scoped for state::TxnParams {
    /// Every op's namespace for writing, every compare's for reading.
    /// A lease compare needs to read its resource key's state.
    fn needs(&self, cx: &Ctx<'_>) -> Result<Vec<Need>> {
        let mut needs: Vec<Need> = self
            .ops
            .iter()
            .map(|op| Need::KvWrite(op.namespace.clone()))
            .collect();
        for c in &self.compare {
            match (&c.namespace, &c.resource_key) {
                (Some(namespace), _) => needs.push(Need::KvRead(namespace.clone())),
                (None, Some(key)) => needs.extend(lock_read(cx, key)?),
                // Refused as incomplete when its params are checked.
                (None, None) => {}
            }
        }
        Ok(needs)
    }
}

impl Scoped for super::agents::RegisterAgentParams {
    fn needs(&self, _: &Ctx<'_>) -> Result<Vec<Need>> {
        Ok(vec![Need::AgentName(self.name.clone())])
    }
}

impl Scoped for locks::ListResourceLocksParams {
    fn needs(&self, _: &Ctx<'_>) -> Result<Vec<Need>> {
        Ok(vec![Need::AnyLock])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scopes(list: &[&str]) -> Scopes {
        Scopes::parse(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn patterns_are_exact_or_a_prefix() {
        let s = scopes(&["kv:read:app*", "kv:write:cfg", "locks:file:src/*"]);
        assert!(s.allows(&Need::KvRead("app".into())));
        assert!(s.allows(&Need::KvRead("apples".into())));
        assert!(!s.allows(&Need::KvRead("ap".into())));
        assert!(!s.allows(&Need::KvWrite("app".into())));
        assert!(s.allows(&Need::KvRead("cfg".into())), "write implies read");
        assert!(!s.allows(&Need::KvWrite("cfg2".into())));
        assert!(!s.allows(&Need::KvReadAll));
        assert!(s.allows(&Need::Lock("file:src/a.rs".into())));
        assert!(!s.allows(&Need::Lock("dir:src".into())));
        assert!(s.allows(&Need::AnyLock));
        assert!(scopes(&["kv:read:*"]).allows(&Need::KvReadAll));
    }

    #[test]
    fn the_read_grant_reads_everything_and_writes_nothing() {
        let s = scopes(&["read"]);
        for need in [
            Need::KvRead("any".into()),
            Need::KvReadAll,
            Need::LockRead("file:a".into()),
            Need::AnyLock,
            Need::TasksRead,
            Need::EventsRead,
            Need::AgentsRead,
        ] {
            assert!(s.allows(&need), "{need:?}");
        }
        for need in [
            Need::KvWrite("any".into()),
            Need::Lock("file:a".into()),
            Need::TasksWrite,
            Need::TasksWork,
            Need::EventsPublish,
            Need::Agents,
            Need::Admin,
        ] {
            assert!(!s.allows(&need), "{need:?}");
        }
    }

    #[test]
    fn agents_patterns_limit_the_names_registered_not_the_other_agent_methods() {
        let s = scopes(&["agents:bot-*"]);
        assert!(s.allows(&Need::AgentName("bot-1".into())));
        assert!(!s.allows(&Need::AgentName("planner".into())));
        assert!(s.allows(&Need::Agents));
        assert!(s.allows(&Need::AgentsRead));
        assert!(scopes(&["agents"]).allows(&Need::AgentName("planner".into())));
        assert!(!scopes(&["read"]).allows(&Need::AgentName("planner".into())));
        assert_eq!(Need::AgentName("planner".into()).grant(), "agents:planner");
    }

    #[test]
    fn operator_allows_its_three_methods_and_nothing_else() {
        let s = scopes(&["operator"]);
        assert!(s.allows(&Need::Operator));
        for need in [
            Need::KvRead("any".into()),
            Need::LockRead("file:a".into()),
            Need::Lock("file:a".into()),
            Need::AnyLock,
            Need::TasksRead,
            Need::TasksWrite,
            Need::EventsRead,
            Need::AgentsRead,
            Need::Agents,
            Need::Admin,
        ] {
            assert!(!s.allows(&need), "{need:?}");
        }
        for other in ["read", "tasks:write", "agents", "locks:*", "metrics"] {
            assert!(!scopes(&[other]).allows(&Need::Operator), "{other}");
        }
        assert!(scopes(&["admin"]).allows(&Need::Operator));
        assert_eq!(Need::Operator.grant(), "operator");
    }

    #[test]
    fn bad_grants_are_refused_with_what_to_write() {
        for bad in [
            "kv:read:",
            "kv:read:a*b",
            "kv:*",
            "root",
            "locks:",
            "agents:",
            "agents:a*b",
        ] {
            let err = Scopes::parse(&[bad.to_string()]).unwrap_err();
            assert_eq!(err.code(), 400, "{bad}: {err}");
        }
        assert_eq!(Scopes::parse(&[]).unwrap_err().code(), 400);
    }
}
