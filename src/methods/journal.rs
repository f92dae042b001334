//! The journal: ReadEvents and Publish. Every change appends one event whose `seq` is the
//! revision of that change.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::{Error, Result};
use crate::store::journal::{self as sql, NewEvent};
use crate::store::WriteCtx;

use super::state::{check_value, Json};
use super::{limit_or_default, read, write, Ctx, Limits, Method, Plan};

/// One journal entry.
#[derive(Debug, Serialize, JsonSchema)]
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
    pub since_seq: Option<u64>,
    /// 1 to 1000, default 100.
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

#[derive(Debug, Serialize, JsonSchema)]
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

pub fn read_events(conn: &rusqlite::Connection, p: ReadEventsParams) -> Result<ReadEventsResult> {
    let limit = limit_or_default(p.limit)?;
    let filter = EventFilter {
        types: p.types,
        namespace: p.namespace,
        key_prefix: p.key_prefix,
        resource_prefix: p.resource_prefix,
        task_id: p.task_id,
    };
    let (events, next_seq) = sql::read(conn, p.since_seq.unwrap_or(0), &filter, limit)?;
    Ok(ReadEventsResult { events, next_seq })
}

pub fn check_publish(p: &PublishParams, limits: &Limits) -> Result<()> {
    if p.topic.is_empty() || p.topic.len() > super::state::MAX_NAME_BYTES {
        return Err(Error::Invalid(
            "topic must be 1 to 512 bytes; give a short name such as \"review.done\"".into(),
        ));
    }
    check_value(&p.payload, limits)
}

pub fn publish(ctx: &mut WriteCtx<'_>, p: PublishParams) -> Result<PublishResult> {
    let seq = ctx.next_revision();
    let kind = format!("custom.{}", p.topic);
    sql::append(
        ctx,
        seq,
        &NewEvent {
            kind: &kind,
            actor: p.actor.as_deref(),
            data: RawValue::get(&p.payload),
            ..NewEvent::default()
        },
    )?;
    Ok(PublishResult {
        event_seq: seq as u64,
    })
}

impl Method for ReadEventsParams {
    const NAME: &'static str = "ReadEvents";
    const SUMMARY: &'static str = "Journal events with seq > since_seq, oldest first, filtered by type, namespace, key prefix, resource prefix or task; continue from next_seq.";
    type Output = ReadEventsResult;
    fn plan(self, _: &Ctx<'_>) -> Result<Plan> {
        Ok(read::<Self>(false, move |conn| read_events(conn, self)))
    }
}

impl Method for PublishParams {
    const NAME: &'static str = "Publish";
    const SUMMARY: &'static str = "Append a custom event (type custom.<topic>) to the journal.";
    type Output = PublishResult;
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        check_publish(&self, &cx.limits())?;
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            publish(ctx, self)
        })
    }
}
