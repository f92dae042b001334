//! The journal: ReadEvents and Publish. Every change appends one event whose `seq` is the
//! revision of that change.

use std::sync::Arc;

use serde_json::value::RawValue;

use crate::clock::format_ms;
use crate::error::{Error, Result};
use crate::store::boundary::{Journal, NewEvent, Storage};

pub use crate::protocol::journal::*;

use super::state::check_value;
use super::writer::{Served, WriteCtx};
use super::{
    limit_or_default, read, ready, reply, write, write_in_steps, Ctx, Limits, Method, Plan,
};

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
    ctx.tasks.forget_recent();
    Ok((upto, deleted))
}

/// Events after `since_seq` up to the last committed revision.
fn events_after(
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
    const NAME: &'static str = "ReadEvents";
    const SUMMARY: &'static str = "Journal events with seq > since_seq, oldest first, filtered by type, namespace, key prefix, resource prefix or task; continue from next_seq.";
    type Output = ReadEventsResult;
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

impl Method for CompactJournalParams {
    const NAME: &'static str = "CompactJournal";
    const SUMMARY: &'static str = "Remove journal events before before_seq to bound its size (like etcd's compact); records, their history and tasks are kept. Reads and subscriptions from before it then get 416 with oldest_seq.";
    type Output = CompactJournalResult;
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
const SUBSCRIPTION_PAGE: u64 = 256;
/// Event data read per step of a subscription (past its first event), so a replay of
/// large values never holds more than about this much at once.
const SUBSCRIPTION_PAGE_BYTES: usize = 1 << 20;
/// Event data one ReadEvents answer carries (past its first event); `next_seq` continues.
const READ_MAX_BYTES: usize = super::paging::PAGE_BYTES;

impl Method for SubscribeParams {
    const NAME: &'static str = "Subscribe";
    const SUMMARY: &'static str = "Stream journal events matching a filter to this connection as Event notifications: first every stored match after since_seq, then live ones, with no gap and no duplicate. Stored events come at the reader's pace; a subscriber that falls 1,024 events or 8 MiB behind live ones gets SubscriptionEnded with resume_from_seq.";
    type Output = SubscribeResult;
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let app = cx.app.clone();
        let since = app.store.read(|storage| {
            let since = match self.since_seq {
                Some(since) => since,
                None => storage.head_revision()? as u64,
            };
            check_retained(storage, since)?;
            Ok(since)
        })?;
        let filter = self.filter.unwrap_or_default();
        let id = crate::methods::new_id();
        let end = super::SubscriptionEnd::default();
        cx.connection
            .subscriptions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.clone(), end.clone());
        let (written, gate) = tokio::sync::oneshot::channel();
        tokio::spawn(stream_events(
            app,
            Stream {
                id: id.clone(),
                since,
                filter,
                visible: cx.visible(),
            },
            cx.connection.notify.clone(),
            end,
            gate,
        ));
        Ok(Plan::ReadyThen {
            answer: reply(&SubscribeResult {
                subscription_id: id,
                since_seq: since,
            }),
            written,
        })
    }
}

impl Method for UnsubscribeParams {
    const NAME: &'static str = "Unsubscribe";
    const SUMMARY: &'static str = "End a subscription of this connection (events already queued may still arrive before the answer).";
    type Output = UnsubscribeResult;
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

/// After a stalled subscriber's backlog is dropped, returns what glibc's heap holds free to
/// the system. Under batond's jemalloc this reaches only memory C code (SQLite) took from
/// glibc: the backlog itself was jemalloc's, which gives freed pages back on its own
/// schedule (its decay), not at this call. Programs on the system allocator (the library's
/// other users) get the trim itself.
fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory at the top of glibc's heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// One subscription: pages through the journal after `since`, then follows the writer's
/// head. Reads committed rows only, in seq order, so there is no gap and no duplicate.
/// What one subscription streams.
struct Stream {
    id: String,
    since: u64,
    filter: EventFilter,
    /// The token whose grants limit which events it sees (None: admin).
    visible: Option<Arc<super::auth::Principal>>,
}

async fn stream_events(
    app: std::sync::Arc<crate::app::App>,
    stream: Stream,
    notify: super::Notifier,
    end: super::SubscriptionEnd,
    gate: tokio::sync::oneshot::Receiver<()>,
) {
    if gate.await.is_err() {
        return;
    }
    let id = stream.id.clone();
    pump(app, stream, &notify, &end).await;
    if end.is_ended() && end.unauthorized() {
        // Written here, after the last event this task queued: nothing of the
        // subscription follows it.
        let line = crate::protocol::notification(
            "Event",
            &serde_json::json!({"subscription_id": id, "ended": "unauthorized"}),
        );
        let _ = notify.try_send(line);
    }
}

/// Delivers a subscription's events until it ends (or its connection does).
async fn pump(
    app: std::sync::Arc<crate::app::App>,
    stream: Stream,
    notify: &super::Notifier,
    end: &super::SubscriptionEnd,
) {
    let Stream {
        id,
        since,
        filter,
        visible,
    } = stream;
    let mut head = app.writer.head();
    let mut last = since;
    // Replaying the past goes at the reader's pace; once a read reached the head, events
    // are live, and a reader that falls behind them is ended (`overflow`).
    let mut live = false;
    loop {
        if end.is_ended() {
            return;
        }
        head.borrow_and_update();
        let page = app.store.read(|storage| {
            let page = events_after(
                storage,
                last,
                &filter,
                SUBSCRIPTION_PAGE,
                SUBSCRIPTION_PAGE_BYTES,
            )?;
            Ok((page, storage.oldest_seq()?))
        });
        let (events, next) = match page {
            Ok((_, oldest)) if last + 1 < oldest => {
                // Compacted past what this subscriber has seen: it cannot go on gap-free.
                let last_line = crate::protocol::notification(
                    "SubscriptionEnded",
                    &serde_json::json!({
                        "subscription_id": id,
                        "reason": "compacted",
                        "resume_from_seq": last,
                        "oldest_seq": oldest,
                        "message": format!("events after seq {last} were compacted away before they were delivered; re-read the state you need, then Subscribe with since_seq {}", oldest - 1),
                    }),
                );
                tokio::select! {
                    _ = notify.send(last_line) => {}
                    _ = end.ended() => {}
                }
                return;
            }
            Ok((page, _)) => page,
            Err(err) => {
                static READ_FAILED: crate::log_limit::Limited =
                    crate::log_limit::Limited::new(crate::log_limit::EVERY);
                if let Some(held_back) = READ_FAILED.admit() {
                    tracing::warn!(%err, subscription = %id, held_back, "a subscription's read failed; it retries every 50 ms");
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Cut short by count or by bytes: more may be waiting already.
        let page_bytes: usize = events.iter().map(|e| e.data.get().len()).sum();
        let full_page =
            events.len() as u64 >= SUBSCRIPTION_PAGE || page_bytes >= SUBSCRIPTION_PAGE_BYTES;
        for event in events {
            let seq = event.seq;
            if visible
                .as_ref()
                .is_some_and(|principal| !principal.scopes.sees_event(&event))
            {
                last = seq;
                continue;
            }
            let line = crate::protocol::notification(
                "Event",
                &serde_json::json!({"subscription_id": id, "event": event}),
            );
            if end.is_ended() {
                return;
            }
            let sent = if live {
                notify.try_send(line)
            } else {
                tokio::select! {
                    sent = notify.send_paced(line) => sent,
                    _ = end.ended() => return,
                }
            };
            match sent {
                Ok(()) => last = seq,
                Err(super::NotifyError::Full) => {
                    let last_line = crate::protocol::notification(
                        "SubscriptionEnded",
                        &serde_json::json!({
                            "subscription_id": id,
                            "reason": "overflow",
                            "resume_from_seq": last,
                            "message": format!("this connection fell too far behind reading events; Subscribe again with since_seq {last}"),
                        }),
                    );
                    tokio::select! {
                        _ = notify.send(last_line) => {}
                        _ = end.ended() => {}
                    }
                    give_memory_back();
                    return;
                }
                Err(super::NotifyError::Closed) => return,
            }
        }
        last = last.max(next);
        if full_page {
            continue;
        }
        live = true;
        tokio::select! {
            changed = head.changed() => if changed.is_err() { return },
            _ = end.ended() => return,
        }
    }
}
