//! Wire types of the journal: events, their filter, and the params and results of
//! ReadEvents, Publish, CompactJournal, Subscribe and Unsubscribe.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Json;

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
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventFilter {
    /// Event types; an entry ending in `.*` matches by prefix (`kv.*`).
    pub types: Option<Vec<String>>,
    pub namespace: Option<String>,
    /// With or without `namespace`: keys starting with this.
    pub key_prefix: Option<String>,
    /// Resource keys starting with this.
    pub resource_prefix: Option<String>,
    pub task_id: Option<String>,
}

impl Event {
    /// The event as it is sent, kept serialized (a task's recent events in memory).
    pub fn serialized(&self) -> serde_json::Result<std::sync::Arc<serde_json::value::RawValue>> {
        Ok(serde_json::value::to_raw_value(self)?.into())
    }
}

impl EventFilter {
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

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadEventsParams {
    /// Events with seq greater than this (default 0: from the start).
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub since_seq: Option<u64>,
    /// 1 to 1000, default 100.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Event types; an entry ending in `.*` matches by prefix (`kv.*`).
    pub types: Option<Vec<String>>,
    pub namespace: Option<String>,
    /// Keys starting with this.
    pub key_prefix: Option<String>,
    /// Resource keys starting with this.
    pub resource_prefix: Option<String>,
    pub task_id: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ReadEventsResult {
    pub events: Vec<Event>,
    /// Pass as `since_seq` to continue where this read stopped.
    pub next_seq: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishParams {
    /// The event type becomes `custom.<topic>`.
    pub topic: String,
    #[schemars(with = "serde_json::Value")]
    pub payload: Json,
    pub actor: Option<String>,
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct PublishResult {
    pub event_seq: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactJournalParams {
    /// Remove every event with a smaller seq (at most the head + 1).
    #[serde(deserialize_with = "crate::json::int_param")]
    pub before_seq: u64,
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CompactJournalResult {
    /// The first seq still kept; ReadEvents and Subscribe accept since_seq >= oldest_seq - 1.
    pub oldest_seq: u64,
    /// Events removed by this call.
    pub deleted: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscribeParams {
    /// Replay stored events after this seq first; default: only events from now on.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub since_seq: Option<u64>,
    /// Which events (all when absent): the same fields as ReadEvents.
    pub filter: Option<EventFilter>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SubscribeResult {
    pub subscription_id: String,
    /// Events after this seq are delivered, as `Event` notifications on this connection.
    pub since_seq: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnsubscribeParams {
    pub subscription_id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct UnsubscribeResult {
    pub subscription_id: String,
    pub unsubscribed: bool,
}
