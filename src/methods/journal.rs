//! The journal: ReadEvents and Publish. Every change appends one event whose `seq` is the
//! revision of that change.

use std::sync::Arc;

use serde_json::value::RawValue;

use crate::clock::format_ms;
use crate::error::{Error, Result};
use crate::store::boundary::{Journal, NewEvent, Storage};

pub use crate::protocol::journal::*;

use super::areas::WriteCtx;
use super::state::check_value;
use super::{
    limit_or_default, read, ready, reply, write, write_in_steps, Ctx, Limits, Method, Plan,
};
use crate::engine::Served;

/// Appends one event with `seq` (taken from `ctx.next_revision()` by the caller),
/// stamped with the batch's time.
pub fn append(ctx: &WriteCtx<'_>, seq: i64, event: &NewEvent<'_>) -> Result<()> {
    ctx.journal().append_event(seq, ctx.now_ms, event)
}

/// The event [`append`] stores, as it is sent.
pub fn appended(ctx: &WriteCtx<'_>, seq: i64, event: &NewEvent<'_>) -> Result<Arc<RawValue>> {
    let owned = |s: Option<&str>| s.map(str::to_string);
    Ok(Event {
        seq: seq as u64,
        kind: event.kind.as_str().to_string(),
        at: format_ms(ctx.now_ms),
        actor: owned(event.actor),
        namespace: owned(event.namespace),
        key: owned(event.key),
        resource_key: owned(event.resource_key),
        task_id: owned(event.task_id),
        node_id: owned(event.node_id),
        data: RawValue::from_string(event.data.to_string())?,
    }
    .serialized()?)
}

/// 416 when events after `since_seq` may have been compacted away.
pub fn check_retained(journal: &dyn Journal, since_seq: u64) -> Result<()> {
    let oldest = journal.oldest_seq()?;
    if since_seq + 1 >= oldest {
        return Ok(());
    }
    Err(Error::Compacted {
        message: format!(
            "events before seq {oldest} are no longer kept (CompactJournal); re-read the state you need, then continue with since_seq {}",
            oldest - 1
        ),
        oldest_seq: oldest,
    })
}

/// Events one step of a compaction removes at most (seqs are revisions, nearly all with
/// an event, so a step of this many seqs removes at most this many rows).
pub const COMPACT_STEP: u64 = 1000;

/// Removes every event before `before_seq`, [`COMPACT_STEP`] events per batch: answered
/// (the new oldest seq, how many events went) once all are gone. Record history and task
/// state are not touched. Readers see the journal's start move up step by step.
pub fn compact(ctx: &mut WriteCtx<'_>, before_seq: u64) -> Result<Served<(u64, u64)>> {
    let head = ctx.head_revision() as u64;
    if before_seq > head + 1 {
        return Err(Error::Invalid(format!(
            "before_seq {before_seq} is past the journal head {head}; pass at most {}",
            head + 1
        )));
    }
    let (oldest, mut deleted) = compact_step(ctx, before_seq)?;
    if oldest >= before_seq {
        return Ok(Served::Now((oldest.max(before_seq), deleted)));
    }
    ctx.continue_later(Box::new(move |ctx| {
        let (oldest, removed) = compact_step(ctx, before_seq)?;
        deleted += removed;
        if oldest < before_seq {
            return Ok(None);
        }
        reply(&CompactJournalResult {
            oldest_seq: oldest,
            deleted,
        })
        .map(Some)
    }));
    Ok(Served::Later)
}

/// One step of removing the events before `before_seq`: at most [`COMPACT_STEP`] of
/// them, the oldest first. Returns the oldest seq now held and how many events went.
pub fn compact_step(ctx: &mut WriteCtx<'_>, before_seq: u64) -> Result<(u64, u64)> {
    let oldest = ctx.journal().oldest_seq()?;
    if before_seq <= oldest {
        return Ok((oldest, 0));
    }
    let upto = before_seq.min(oldest.saturating_add(COMPACT_STEP));
    // Lock outcomes held back are in the events about to go (see `store::sqlite::leases`).
    ctx.outcomes().store_held()?;
    let deleted = ctx.journal().remove_before(upto)?;
    // The writer's copies of recent task events may include some that are gone now.
    ctx.memory.tasks.forget_recent();
    Ok((upto, deleted))
}

/// Events after `since_seq` up to the last committed revision.
pub fn events_after(
    storage: &dyn Storage,
    since_seq: u64,
    filter: &EventFilter,
    limit: u64,
    max_bytes: usize,
) -> Result<(Vec<Event>, u64)> {
    let head = storage.head_revision()? as u64;
    storage.read_events(since_seq, head, filter, limit, max_bytes)
}

pub fn read_events(storage: &dyn Storage, p: ReadEventsParams) -> Result<ReadEventsResult> {
    let limit = limit_or_default(p.limit)?;
    let filter = EventFilter {
        types: p.types,
        namespace: p.namespace,
        key_prefix: p.key_prefix,
        resource_prefix: p.resource_prefix,
        task_id: p.task_id,
    };
    let since_seq = p.since_seq.unwrap_or(0);
    let (events, next_seq) = events_after(storage, since_seq, &filter, limit, READ_MAX_BYTES)?;
    // Checked after reading: a compaction that ran meanwhile cannot leave a silent gap.
    check_retained(storage, since_seq)?;
    Ok(ReadEventsResult { events, next_seq })
}

pub fn check_publish(p: &PublishParams, limits: &Limits) -> Result<()> {
    if p.topic.is_empty() || p.topic.len() > super::state::MAX_NAME_BYTES {
        return Err(Error::Invalid(
            "topic must be 1 to 512 bytes; give a short name such as \"review.done\"".into(),
        ));
    }
    check_value("payload", &p.payload, limits)
}

pub fn publish(ctx: &mut WriteCtx<'_>, p: PublishParams) -> Result<PublishResult> {
    let seq = ctx.next_revision();
    // Whatever the topic says, the type is a client's: `custom.<topic>`.
    let kind = format!("{CUSTOM_PREFIX}{}", p.topic);
    append(
        ctx,
        seq,
        &NewEvent {
            actor: p.actor.as_deref(),
            data: RawValue::get(&p.payload),
            ..NewEvent::of(EventType::from_client(&kind).map_err(Error::Invalid)?)
        },
    )?;
    Ok(PublishResult {
        event_seq: seq as u64,
    })
}

impl Method for ReadEventsParams {
    const SUMMARY: &'static str = "Journal events with seq > since_seq, oldest first, filtered by type, namespace, key prefix, resource prefix or task; continue from next_seq.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let visible = cx.visible();
        Ok(read::<Self>(false, move |storage| {
            let mut read = read_events(storage, self)?;
            // What the token may not read directly is skipped; next_seq moves past it.
            if let Some(principal) = &visible {
                read.events
                    .retain(|event| principal.scopes.sees_event(event));
            }
            Ok(read)
        }))
    }
}

impl Method for PublishParams {
    const SUMMARY: &'static str = "Append a custom event (type custom.<topic>) to the journal.";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        check_publish(&self, &cx.limits())?;
        let fence = super::locks::fence::WriteFence::of(cx, self.fence.take())?;
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            fence.check(ctx)?;
            publish(ctx, self)
        })
    }
}

impl Method for CompactJournalParams {
    const SUMMARY: &'static str = "Remove journal events before before_seq to bound its size (like etcd's compact); records, their history and tasks are kept. Reads and subscriptions from before it then get 416 with oldest_seq.";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        write_in_steps::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            Ok(match compact(ctx, self.before_seq)? {
                Served::Now((oldest_seq, deleted)) => Served::Now(CompactJournalResult {
                    oldest_seq,
                    deleted,
                }),
                Served::Later => Served::Later,
            })
        })
    }
}

/// Events read from the journal per step of a subscription.
pub const SUBSCRIPTION_PAGE: u64 = 256;
/// Event data read per step of a subscription (past its first event), so a replay of
/// large values never holds more than about this much at once.
pub const SUBSCRIPTION_PAGE_BYTES: usize = 1 << 20;
/// Event data one ReadEvents answer carries (past its first event); `next_seq` continues.
const READ_MAX_BYTES: usize = super::paging::PAGE_BYTES;

impl Method for SubscribeParams {
    const SUMMARY: &'static str = "Stream journal events matching a filter to this connection as Event notifications: first every stored match after since_seq, then live ones, with no gap and no duplicate. Stored events come at the reader's pace; a subscriber that falls 1,024 events or 8 MiB behind live ones gets SubscriptionEnded with resume_from_seq.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        Ok(Plan::Subscribe(Opening {
            since_seq: self.since_seq,
            filter: self.filter.unwrap_or_default(),
            visible: cx.visible(),
        }))
    }
}

/// A subscription asked for, not yet opened: the server opens it ([`open`]) when it
/// serves the request, as it runs a read.
pub struct Opening {
    since_seq: Option<u64>,
    filter: EventFilter,
    visible: Option<Arc<super::auth::Principal>>,
}

/// Opens a subscription on `connection`: reads where it starts (the head when no
/// `since_seq`; 416 when that was compacted), registers it so Unsubscribe and the
/// connection's end reach it, and returns the answer, what to stream and how it is ended.
pub fn open(
    app: &super::app::App,
    connection: &super::ConnectionInfo,
    opening: Opening,
) -> Result<(crate::protocol::Reply, Stream, super::SubscriptionEnd)> {
    let since = app.store.read(|storage| {
        let since = match opening.since_seq {
            Some(since) => since,
            None => storage.head_revision()? as u64,
        };
        check_retained(storage, since)?;
        Ok(since)
    })?;
    let id = crate::methods::new_id();
    let answer = reply(&SubscribeResult {
        subscription_id: id.clone(),
        since_seq: since,
    })?;
    let end = super::SubscriptionEnd::default();
    connection
        .subscriptions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id.clone(), end.clone());
    let stream = Stream {
        id,
        since,
        filter: opening.filter,
        visible: opening.visible,
    };
    Ok((answer, stream, end))
}

impl Method for UnsubscribeParams {
    const SUMMARY: &'static str = "End a subscription of this connection (events already queued may still arrive before the answer).";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let end = cx
            .connection
            .subscriptions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.subscription_id);
        match end {
            Some(end) => {
                end.end(false);
                ready::<Self>(Ok(UnsubscribeResult {
                    subscription_id: self.subscription_id,
                    unsubscribed: true,
                }))
            }
            None => Err(Error::NotFound(format!(
                "subscription `{}` is not open on this connection; subscriptions belong to the connection that made them",
                self.subscription_id
            ))),
        }
    }
}

/// What one subscription streams (`server::subscriptions` runs it).
pub struct Stream {
    pub id: String,
    pub since: u64,
    pub filter: EventFilter,
    /// The token whose grants limit which events it sees (None: admin).
    pub visible: Option<Arc<super::auth::Principal>>,
}
