//! Wire types of the journal: events, their filter, and the params and results of
//! ReadEvents, Publish, CompactJournal, Subscribe and Unsubscribe.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Json;

requests! {
    ReadEventsParams => "ReadEvents", ReadEventsResult;
    PublishParams => "Publish", PublishResult;
    SubscribeParams => "Subscribe", SubscribeResult;
    UnsubscribeParams => "Unsubscribe", UnsubscribeResult;
    CompactJournalParams => "CompactJournal", CompactJournalResult;
}

/// An event's type, as the journal stores it. The daemon's own types are the variants,
/// each spelt once (in [`EventType::as_str`]); a client writes only `custom.*` (Publish's
/// topic, CommitEvent's action_type) and, through CommitEvent, its node's `node.progress`
/// ([`EventType::from_client`]). Every event the daemon journals names its type through
/// this enum, so no request can write an audit event (`token.revoked`, `agent.left`,
/// `message.sent`, ...) that the daemon did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType<'a> {
    KvSet,
    KvDelete,
    LockAcquired,
    LockReleased,
    LockExpired,
    /// An operator ended a lease (BreakLock).
    LockBroken,
    TaskRegistered,
    TaskRunning,
    TaskCompleted,
    TaskFailed,
    TaskCancelled,
    NodeAcquired,
    NodeCompleted,
    NodeFailed,
    NodeRolledBack,
    /// An operator put a failed node back to PENDING (RetryNode).
    NodeRetried,
    /// A worker's note on its own node (CommitEvent).
    NodeProgress,
    AgentJoined,
    AgentLeft,
    MessageSent,
    TokenCreated,
    TokenRevoked,
    /// A client's type: `custom.` and at least one byte more.
    Custom(CustomType<'a>),
}

/// A client's event type: `custom.` and at least one byte more (made only by
/// [`EventType::from_client`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CustomType<'a>(&'a str);

/// What every client-written event type starts with.
pub const CUSTOM_PREFIX: &str = "custom.";

impl<'a> EventType<'a> {
    /// Every type of the daemon's (all but [`EventType::Custom`]).
    pub const DAEMON: [EventType<'static>; 22] = [
        EventType::KvSet,
        EventType::KvDelete,
        EventType::LockAcquired,
        EventType::LockReleased,
        EventType::LockExpired,
        EventType::LockBroken,
        EventType::TaskRegistered,
        EventType::TaskRunning,
        EventType::TaskCompleted,
        EventType::TaskFailed,
        EventType::TaskCancelled,
        EventType::NodeAcquired,
        EventType::NodeCompleted,
        EventType::NodeFailed,
        EventType::NodeRolledBack,
        EventType::NodeRetried,
        EventType::NodeProgress,
        EventType::AgentJoined,
        EventType::AgentLeft,
        EventType::MessageSent,
        EventType::TokenCreated,
        EventType::TokenRevoked,
    ];

    /// The type as the journal stores it and ReadEvents filters it.
    pub fn as_str(&self) -> &'a str {
        match self {
            EventType::KvSet => "kv.set",
            EventType::KvDelete => "kv.delete",
            EventType::LockAcquired => "lock.acquired",
            EventType::LockReleased => "lock.released",
            EventType::LockExpired => "lock.expired",
            EventType::LockBroken => "lock.broken",
            EventType::TaskRegistered => "task.registered",
            EventType::TaskRunning => "task.running",
            EventType::TaskCompleted => "task.completed",
            EventType::TaskFailed => "task.failed",
            EventType::TaskCancelled => "task.cancelled",
            EventType::NodeAcquired => "node.acquired",
            EventType::NodeCompleted => "node.completed",
            EventType::NodeFailed => "node.failed",
            EventType::NodeRolledBack => "node.rolled_back",
            EventType::NodeRetried => "node.retried",
            EventType::NodeProgress => "node.progress",
            EventType::AgentJoined => "agent.joined",
            EventType::AgentLeft => "agent.left",
            EventType::MessageSent => "message.sent",
            EventType::TokenCreated => "token.created",
            EventType::TokenRevoked => "token.revoked",
            EventType::Custom(CustomType(text)) => text,
        }
    }

    /// A type a client asked to write: `custom.*`, or `node.progress`; any other is the
    /// daemon's alone, and the error says which type to use instead.
    pub fn from_client(text: &'a str) -> Result<EventType<'a>, String> {
        if text == EventType::NodeProgress.as_str() {
            return Ok(EventType::NodeProgress);
        }
        match text.strip_prefix(CUSTOM_PREFIX) {
            Some(rest) if !rest.is_empty() => Ok(EventType::Custom(CustomType(text))),
            Some(_) => Err(format!(
                "the event type `{text}` names nothing after `{CUSTOM_PREFIX}`; name what happened, e.g. `{CUSTOM_PREFIX}file.written`"
            )),
            None => {
                let instead = if text.is_empty() { "file.written" } else { text };
                Err(format!(
                    "the event type `{text}` is not a client's: clients write only `{CUSTOM_PREFIX}*` types (and `node.progress` on their node), every other type is the daemon's; use `{CUSTOM_PREFIX}{instead}`"
                ))
            }
        }
    }

    /// The event a task's status change journals.
    pub fn task_status(status: super::tasks::TaskStatus) -> EventType<'static> {
        use super::tasks::TaskStatus;
        match status {
            TaskStatus::Running => EventType::TaskRunning,
            TaskStatus::Completed => EventType::TaskCompleted,
            TaskStatus::Failed => EventType::TaskFailed,
            TaskStatus::Cancelled => EventType::TaskCancelled,
        }
    }
}

/// One journal entry.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    pub seq: u64,
    #[serde(rename = "type")]
    pub kind: String,
    pub at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    #[schemars(with = "serde_json::Value")]
    pub data: Json,
}

/// Which events a reader wants; every given field must match.
#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventFilter {
    /// Event types; an entry ending in `.*` matches by prefix (`kv.*`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub types: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// With or without `namespace`: keys starting with this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
    /// Resource keys starting with this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

impl Event {
    /// The event as it is sent, kept serialized (a task's recent events in memory).
    pub fn serialized(&self) -> serde_json::Result<std::sync::Arc<serde_json::value::RawValue>> {
        Ok(serde_json::value::to_raw_value(self)?.into())
    }
}

/// The one condition of a filter that a journal read looks events up by (each has an
/// index that grows at its end); the others, key and resource prefixes included, are
/// checked on what it finds, within the read's scan budget.
#[derive(Debug, PartialEq, Eq)]
pub enum Narrowest<'a> {
    Task(&'a str),
    /// A namespace's events (a key prefix is checked on them).
    Namespace(&'a str),
    /// Events that name a resource key (a prefix is checked on them).
    Resources,
    /// Nothing to look up by: the journal in order, within the scan budget (types too:
    /// an index by type cost every write about a tenth of a Set's instructions).
    Everything,
}

impl EventFilter {
    /// What a read looks events up by: a task, else a namespace, else events with a
    /// resource key.
    pub fn narrowest(&self) -> Narrowest<'_> {
        if let Some(task_id) = &self.task_id {
            return Narrowest::Task(task_id);
        }
        if let Some(namespace) = &self.namespace {
            return Narrowest::Namespace(namespace);
        }
        if self.resource_prefix.is_some() {
            return Narrowest::Resources;
        }
        Narrowest::Everything
    }

    pub fn matches(
        &self,
        kind: &str,
        namespace: Option<&str>,
        key: Option<&str>,
        resource_key: Option<&str>,
    ) -> bool {
        if let Some(types) = &self.types {
            let hit = types.iter().any(|t| match t.strip_suffix('*') {
                Some(prefix) => kind.starts_with(prefix),
                None => t == kind,
            });
            if !hit {
                return false;
            }
        }
        if let Some(ns) = &self.namespace {
            if namespace != Some(ns.as_str()) {
                return false;
            }
        }
        if let Some(prefix) = &self.key_prefix {
            if !key.is_some_and(|k| k.starts_with(prefix.as_str())) {
                return false;
            }
        }
        if let Some(prefix) = &self.resource_prefix {
            if !resource_key.is_some_and(|k| k.starts_with(prefix.as_str())) {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod narrowest_tests {
    use super::*;

    #[test]
    fn a_read_looks_up_by_the_narrowest_condition() {
        let filter = EventFilter {
            types: Some(vec!["kv.*".into()]),
            namespace: Some("ns".into()),
            key_prefix: Some("k".into()),
            ..EventFilter::default()
        };
        assert_eq!(filter.narrowest(), Narrowest::Namespace("ns"));
        let resources = EventFilter {
            types: Some(vec!["lock.acquired".into()]),
            resource_prefix: Some("file:src/".into()),
            ..EventFilter::default()
        };
        assert_eq!(resources.narrowest(), Narrowest::Resources);
        let types = EventFilter {
            types: Some(vec!["kv.*".into()]),
            key_prefix: Some("k".into()),
            ..EventFilter::default()
        };
        assert_eq!(types.narrowest(), Narrowest::Everything);
        let two = EventFilter {
            types: Some(vec!["kv.set".into(), "kv.deleted".into()]),
            ..EventFilter::default()
        };
        assert_eq!(two.narrowest(), Narrowest::Everything);
    }
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadEventsParams {
    /// Events with seq greater than this (default 0: from the start).
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_seq: Option<u64>,
    /// 1 to 1000, default 100.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Event types; an entry ending in `.*` matches by prefix (`kv.*`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub types: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Keys starting with this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
    /// Resource keys starting with this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ReadEventsResult {
    pub events: Vec<Event>,
    /// Pass as `since_seq` to continue where this read stopped.
    pub next_seq: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishParams {
    /// The event type becomes `custom.<topic>`.
    pub topic: String,
    #[schemars(with = "serde_json::Value")]
    pub payload: Json,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Apply only while this lease holds (`{resource_key, lease_id}`) or this fencing
    /// token is the key's latest (`{resource_key, fencing_token}`); else 409 `fenced`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<super::locks::Fence>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct PublishResult {
    pub event_seq: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactJournalParams {
    /// Remove every event with a smaller seq (at most the head + 1).
    #[serde(deserialize_with = "crate::json::int_param")]
    pub before_seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct CompactJournalResult {
    /// The first seq still kept; ReadEvents and Subscribe accept since_seq >= oldest_seq - 1.
    pub oldest_seq: u64,
    /// Events removed by this call.
    pub deleted: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscribeParams {
    /// Replay stored events after this seq first; default: only events from now on.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_seq: Option<u64>,
    /// Which events (all when absent): the same fields as ReadEvents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<EventFilter>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct SubscribeResult {
    pub subscription_id: String,
    /// Events after this seq are delivered, as `Event` notifications on this connection.
    pub since_seq: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnsubscribeParams {
    pub subscription_id: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct UnsubscribeResult {
    pub subscription_id: String,
    pub unsubscribed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_write_only_custom_types_and_node_progress() {
        for daemon in EventType::DAEMON {
            let text = daemon.as_str();
            match daemon {
                EventType::NodeProgress => assert_eq!(EventType::from_client(text), Ok(daemon)),
                _ => {
                    let err = EventType::from_client(text).unwrap_err();
                    assert!(err.contains(&format!("`custom.{text}`")), "{err}");
                }
            }
        }
        let custom = EventType::from_client("custom.file.written").unwrap();
        assert_eq!(custom.as_str(), "custom.file.written");
        for bad in ["", "custom.", "file.written", "Custom.x", "node.progress2"] {
            assert!(EventType::from_client(bad).is_err(), "{bad}");
        }
    }
}
