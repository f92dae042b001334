//! The rules of resource locks, run on the writer: who may hold what (conflicts and the
//! `dir:`/`file:` hierarchy), first-come-first-served waiting, fencing tokens, expiry,
//! leases tied to a connection, and what each change puts in the journal. Storage (the
//! [`Leases`](crate::store::boundary::Leases) boundary) holds the leases, so they survive restarts and every change
//! commits with its journal event; the writer's memory ([`LockState`](super::memory::LockState)) holds a copy of
//! the live leases, which conflict checks read, and what only the running daemon needs:
//! each lease's monotonic deadline, the FIFO waiter queues, the watchers of
//! WaitResourceLock, and which connection holds which `release_on_disconnect` leases.
//!
//! Invariant: before any lock request is served, every lease whose deadline has passed is
//! ended (`expire_due`), so no answer ever shows a dead holder as live.

use std::time::Duration;

use crate::clock::format_ms;
use crate::error::{Error, Result};
use crate::protocol::journal::EventType;
use crate::protocol::locks::{
    AcquireResult, HeartbeatResult, ListResourceLocksResult, LockEntry, Outcome, ReleaseResult,
    StatusResult, WaitResult, WaitingEntry,
};
use crate::protocol::operator::{BreakLockResult, BrokenLease};
use crate::protocol::reply;
use crate::resource_key::ResourceKey;
use crate::store::boundary::{LeaseEnd, LeaseRow, NewEvent, NewLease, QueuedWait};

use super::super::journal::append;
use crate::engine::schedule::Due;
use crate::engine::{Reply, Served};

use super::super::areas::WriteCtx;
use super::super::Presented;
use super::conflicts::{blockers, holds_already, Blockers, Visible, Want};
use super::memory::{Queue, Wait, Waiter, Watcher};
use super::shown::{
    busy, busy_result, held_by, holders, lease, AcquiredData, BrokenData, EndedData,
};
use super::upkeep::left_queue;
pub use super::upkeep::{connection_closed, connection_unauthorized, end_waits, recover};
pub(crate) use super::upkeep::{end_session_leases, end_waits_of};

/// An acquisition, as the writer needs it.
pub struct AcquireRequest {
    pub key: ResourceKey,
    pub owner: String,
    /// The mode and slots it asks for.
    pub want: Want,
    pub provider: Option<String>,
    pub ttl_ms: u64,
    /// JSON text.
    pub metadata: Option<String>,
    pub release_on_disconnect: bool,
    pub connection: u64,
    /// The token the request acts with: the lease is bound to it.
    pub token_id: Option<String>,
    /// The session the lease is tied to (checked on the writer); with it, an empty
    /// `owner` means the session's name.
    pub session: Option<Presented>,
    /// Whose holders a busy answer may show.
    pub visible: Visible,
}

pub struct ReleaseRequest {
    pub lease: Presented,
    pub outcome: Outcome,
    pub moved_to: Option<String>,
    pub note: Option<String>,
}

fn lease_invalid(ctx: &WriteCtx<'_>, key: &str, why: &str) -> Result<Error> {
    let mut data = serde_json::Map::new();
    data.insert("resource_key".into(), key.into());
    let holder = ctx.memory.locks.held.holders(key).into_iter().next();
    let next = match &holder {
        Some(row) => {
            data.insert(
                "held_by".into(),
                serde_json::to_value(held_by(row, ctx.now_ms)?)?,
            );
            format!(
                "it is now held by {}; acquire it again when it is free",
                row.owner
            )
        }
        None => "acquire it again with AcquireResourceLock".to_string(),
    };
    Ok(Error::LeaseInvalid {
        // Never echo the id: messages end up in logs and agents' transcripts.
        message: format!("the lease given for {key} is {why}; {next}"),
        data,
    })
}

/// Ends the lease on `key`: deletes it, records the outcome and appends the journal event.
pub(super) fn end_lease(
    ctx: &mut WriteCtx<'_>,
    row: &LeaseRow,
    outcome: &str,
    moved_to: Option<&str>,
    note: Option<&str>,
) -> Result<()> {
    let kind = if outcome == "expired" {
        EventType::LockExpired
    } else {
        EventType::LockReleased
    };
    let data = serde_json::to_string(&EndedData {
        fencing_token: row.fencing_token,
        moved_to,
        note,
        outcome,
    })?;
    end_lease_as(ctx, row, kind, outcome, moved_to, note, &data).map(|_| ())
}

/// [`end_lease`] with the event's type and `data` given; the event's seq.
fn end_lease_as(
    ctx: &mut WriteCtx<'_>,
    row: &LeaseRow,
    kind: EventType<'static>,
    outcome: &str,
    moved_to: Option<&str>,
    note: Option<&str>,
    data: &str,
) -> Result<i64> {
    ctx.leases()
        .delete_lease(&row.resource_key, &row.lease_id)?;
    ctx.outcomes().record_end(&LeaseEnd {
        resource_key: &row.resource_key,
        fencing_token: row.fencing_token,
        outcome,
        owner: &row.owner,
        at_ms: ctx.now_ms,
        moved_to,
        note,
    })?;
    let seq = ctx.next_revision();
    append(
        ctx,
        seq,
        &NewEvent {
            actor: Some(&row.owner),
            resource_key: Some(&row.resource_key),
            data,
            ..NewEvent::of(kind)
        },
    )?;
    ctx.memory.locks.forget(&row.lease_id);
    Ok(seq)
}

/// BreakLock: who breaks which leases of a key, and why.
pub struct BreakRequest {
    pub key: ResourceKey,
    /// Only this lease (its id, compared alone: an operator acts on any token's lease).
    pub lease_id: Option<String>,
    pub owner: Option<String>,
    /// The operator: the token's name, or `admin` on the Unix socket.
    pub by: String,
    pub reason: String,
}

/// An operator ends leases of a key (every holder, or the one `lease_id` or `owner`
/// names), as a release would: outcome `broken`, one `lock.broken` event each (with who
/// and why, never the lease id), and the key's waiters served first come first served.
/// Nothing to break is 404, before anything is written.
pub fn break_lock(ctx: &mut WriteCtx<'_>, request: BreakRequest) -> Result<BreakLockResult> {
    let key = &request.key.key;
    let holders = ctx.memory.locks.held.holders(key);
    let any = !holders.is_empty();
    let rows: Vec<LeaseRow> = holders
        .into_iter()
        .filter(|row| {
            request
                .lease_id
                .as_ref()
                .is_none_or(|id| *id == row.lease_id)
        })
        .filter(|row| request.owner.as_ref().is_none_or(|o| *o == row.owner))
        .collect();
    if rows.is_empty() {
        return Err(Error::NotFound(match (any, &request.lease_id, &request.owner) {
            (false, _, _) => format!(
                "{key} has no live lease, so there is nothing to break; ListResourceLocks shows the live ones"
            ),
            // Never echo the id: messages end up in logs.
            (true, Some(_), _) => format!(
                "no live lease of {key} has the lease_id given (it may have ended already); leave lease_id out to break every holder"
            ),
            // (With neither filter every holder matches: `any` was false.)
            (true, None, owner) => format!(
                "{key} is not held by `{}`; ResourceLockStatus shows its holders",
                owner.as_deref().unwrap_or_default()
            ),
        }));
    }
    let note = format!("broken by {}: {}", request.by, request.reason);
    let mut broken = Vec::with_capacity(rows.len());
    let mut event_seq = 0;
    for row in rows {
        let data = serde_json::to_string(&BrokenData {
            by: &request.by,
            fencing_token: row.fencing_token,
            note: &note,
            outcome: "broken",
            reason: &request.reason,
        })?;
        event_seq = end_lease_as(
            ctx,
            &row,
            EventType::LockBroken,
            "broken",
            None,
            Some(&note),
            &data,
        )?;
        broken.push(BrokenLease {
            owner: row.owner,
            mode: row.mode,
            fencing_token: row.fencing_token,
        });
    }
    let before = ctx.deferred.len();
    serve_waiters(ctx)?;
    Ok(BreakLockResult {
        resource_key: key.clone(),
        broken,
        waiters_served: (ctx.deferred.len() - before) as u64,
        event_seq: event_seq as u64,
    })
}

/// Ends every lease whose deadline has passed and every wait that has run out.
pub fn expire_due(ctx: &mut WriteCtx<'_>) -> Result<()> {
    let mut ended = false;
    while let Some(due) = ctx.memory.locks.schedule.pop_due(ctx.mono_now) {
        match due {
            Due::Lease(lease_id) => match ctx.memory.locks.held.by_id(&lease_id).cloned() {
                Some(row) => {
                    end_lease(ctx, &row, "expired", None, None)?;
                    ended = true;
                }
                None => ctx.memory.locks.forget(&lease_id),
            },
            Due::Wait(Wait::Acquire(waiter)) => {
                left_queue(ctx, &waiter.request.key.key, waiter.queued)?;
                let request = &waiter.request;
                let answer = match blockers(&ctx.memory.locks.held, &request.key, request.want) {
                    Ok(Some(b)) => busy(&request.key, &b.seen_by(&request.visible), ctx.now_ms),
                    // Freed in this same instant: the waiter gets it.
                    Ok(None) => grant(ctx, request).and_then(|r| reply(&r)),
                    Err(refused) => Err(refused),
                };
                ctx.deferred.push((waiter.reply, answer));
            }
            Due::Wait(Wait::Watch(w)) => {
                let answer = match blockers(&ctx.memory.locks.held, &w.key, Want::EXCLUSIVE)? {
                    Some(b) => reply(&WaitResult::Timeout {
                        resource_key: w.key.key.clone(),
                        held_by: held_by(&b.seen_by(&w.visible).rows[0], ctx.now_ms)?,
                        waited_ms: waited_ms(ctx, w.started),
                    }),
                    None => wait_available(ctx, &w),
                };
                ctx.deferred.push((w.reply, answer));
            }
        }
    }
    if ended {
        serve_waiters(ctx)?;
    }
    ctx.memory.locks.schedule.compact();
    Ok(())
}

fn waited_ms(ctx: &WriteCtx<'_>, started: Duration) -> u64 {
    ctx.mono_now.saturating_sub(started).as_millis() as u64
}

fn wait_available(ctx: &WriteCtx<'_>, w: &Watcher) -> Result<Reply> {
    reply(&WaitResult::Available {
        resource_key: w.key.key.clone(),
        waited_ms: waited_ms(ctx, w.started),
        previous: ctx.outcomes().previous(&w.key.key)?,
    })
}

/// The next fencing token: one more than any handed out before, forever. The batch counts
/// on from the last one stored, read at its first grant, and stores the last it handed
/// out once, before it commits (`LockState::take_fencing`): one write per batch instead of
/// one per grant. A token handed to a request that is then refused is never handed out
/// again; a batch rolled back stores nothing, and the next one counts from storage.
fn next_fencing_token(ctx: &mut WriteCtx<'_>) -> Result<u64> {
    let last = match ctx.memory.locks.fencing {
        Some(last) => last,
        None => ctx.leases().last_fencing_token()?,
    };
    ctx.memory.locks.fencing = Some(last + 1);
    Ok(last + 1)
}

/// Grants the lock: a new lease with the next fencing token.
fn grant(ctx: &mut WriteCtx<'_>, request: &AcquireRequest) -> Result<AcquireResult> {
    let fencing_token = next_fencing_token(ctx)?;
    let lease_id = crate::methods::new_id();
    let expires_at = ctx.now_ms + request.ttl_ms as i64;
    let holder_connection = request.release_on_disconnect.then_some(request.connection);
    ctx.leases().insert_lease(&NewLease {
        resource_key: &request.key.key,
        kind: &request.key.kind,
        path: request.key.path.as_deref(),
        lease_id: &lease_id,
        owner: &request.owner,
        provider: request.provider.as_deref(),
        fencing_token,
        acquired_at: ctx.now_ms,
        expires_at,
        metadata: request.metadata.as_deref(),
        holder_connection,
        token_id: request.token_id.as_deref(),
        session_id: request.session.as_ref().map(|s| s.lease_id.as_str()),
        mode: request.want.mode,
        slots: request.want.slots,
    })?;
    // The lease id is the holder's secret: the event carries the owner and fencing token only.
    let data = serde_json::to_string(&AcquiredData {
        expires_at: &format_ms(expires_at),
        fencing_token,
    })?;
    let seq = ctx.next_revision();
    append(
        ctx,
        seq,
        &NewEvent {
            actor: Some(&request.owner),
            resource_key: Some(&request.key.key),
            data: &data,
            ..NewEvent::of(EventType::LockAcquired)
        },
    )?;
    let row = LeaseRow {
        resource_key: request.key.key.clone(),
        lease_id,
        owner: request.owner.clone(),
        provider: request.provider.clone(),
        fencing_token,
        acquired_at: ctx.now_ms,
        expires_at,
        metadata: request.metadata.clone(),
        holder_connection,
        token_id: request.token_id.clone(),
        session_id: request.session.as_ref().map(|s| s.lease_id.clone()),
        mode: request.want.mode,
        slots: request.want.slots,
    };
    let deadline = ctx.mono_now + Duration::from_millis(request.ttl_ms);
    ctx.memory
        .locks
        .track(row.clone(), deadline, request.connection);
    let previous = ctx.outcomes().previous(&request.key.key)?;
    Ok(AcquireResult::Acquired(lease(&row, ctx.now_ms, previous)?))
}

/// Acquires now, or answers busy, or (with `wait_ms`) queues the caller first come first served.
pub fn acquire(
    ctx: &mut WriteCtx<'_>,
    mut request: AcquireRequest,
    wait_ms: u64,
) -> Result<Served<AcquireResult>> {
    if let Some(presented) = &request.session {
        // An empty owner was not given: the session's name is.
        let given = Some(request.owner.as_str()).filter(|o| !o.is_empty());
        request.owner = super::super::agents::rules::session_name(ctx, presented, "owner", given)?;
    }
    let holders = ctx.memory.locks.held.holders(&request.key.key);
    if let Some(row) = holders.into_iter().find(|row| {
        holds_already(
            row,
            &request.owner,
            request.session.as_ref().map(|s| s.lease_id.as_str()),
            request.token_id.as_deref(),
        )
    }) {
        let previous = ctx.outcomes().previous(&row.resource_key)?;
        let mut lease = lease(&row, ctx.now_ms, previous)?;
        // Anyone can say an owner's name; only the connection that acquired the lease,
        // or the session it is tied to (a secret of its holder), is shown its id again.
        let same_connection = ctx
            .memory
            .locks
            .schedule
            .lease(&row.lease_id)
            .is_some_and(|l| l.data.acquired_on == request.connection);
        if !same_connection && row.session_id.is_none() {
            lease.lease_id = None;
        }
        return Ok(Served::Now(AcquireResult::AlreadyHeld(lease)));
    }
    // Waiters queued before this caller go first: serve them before judging this request.
    let key = request.key.key.clone();
    if ctx.memory.locks.schedule.has_queue(Queue::Acquire, &key) {
        serve_waiters(ctx)?;
    }
    let mut in_the_way = blockers(&ctx.memory.locks.held, &request.key, request.want)?;
    // Someone still queued (an exclusive request behind shared holders) keeps later
    // requests behind it, whatever they ask for: no writer starves.
    if in_the_way.is_none() && ctx.memory.locks.schedule.has_queue(Queue::Acquire, &key) {
        in_the_way = blockers(&ctx.memory.locks.held, &request.key, Want::EXCLUSIVE)?;
    }
    // On a shared database, a key another daemon's waiter is queued for is promised to it
    // even while free (that daemon hands it over once it sees the key freed): a request
    // that waits queues behind. One that does not wait takes a free key.
    let queued_elsewhere = wait_ms > 0 && ctx.memory.locks.first_queued(&key).is_some();
    match in_the_way {
        None if !queued_elsewhere => return grant(ctx, &request).map(Served::Now),
        Some(in_the_way) if wait_ms == 0 => {
            let in_the_way = in_the_way.seen_by(&request.visible);
            return busy_result(&request.key, &in_the_way, ctx.now_ms).map(Served::Now);
        }
        _ => {}
    }
    let Some(reply) = ctx.take_reply() else {
        return Err(Error::Internal(
            "a waiting acquire had no reply channel".into(),
        ));
    };
    let deadline = ctx.mono_now + Duration::from_millis(wait_ms);
    let queued = match ctx.leases().shared_waits() {
        Some(shared) => {
            let mut wait = QueuedWait {
                queued: 0,
                resource_key: key.clone(),
                connection: request.connection,
                owner: request.owner.clone(),
                mode: request.want.mode,
                slots: request.want.slots,
            };
            wait.queued = shared.queue_wait(&wait)?;
            let queued = wait.queued;
            ctx.memory.locks.note_wait(wait);
            Some(queued)
        }
        None => None,
    };
    let waiter = Wait::Acquire(Waiter {
        request,
        reply,
        queued,
        since_ms: ctx.now_ms,
    });
    ctx.memory
        .locks
        .schedule
        .enqueue(Queue::Acquire, key, Some(deadline), waiter);
    Ok(Served::Later)
}

/// Hands free keys to their first live waiters, and tells watchers of free keys.
pub fn serve_waiters(ctx: &mut WriteCtx<'_>) -> Result<()> {
    let keys: Vec<String> = ctx
        .memory
        .locks
        .schedule
        .queue_keys(Queue::Acquire)
        .cloned()
        .collect();
    for key in keys {
        loop {
            let first_anywhere = ctx.memory.locks.first_queued(&key);
            let queues = &mut ctx.memory.locks.schedule;
            let Some(front) = queues.front(Queue::Acquire, &key) else {
                queues.remove_queue(Queue::Acquire, &key);
                break;
            };
            // Waiters that hung up leave the queue.
            if front.reply().is_closed() {
                if let Some(Wait::Acquire(gone)) = queues.pop_front(Queue::Acquire, &key) {
                    left_queue(ctx, &key, gone.queued)?;
                }
                continue;
            }
            // On a shared database, another daemon's waiter that queued first goes first.
            // (A waiter whose place a failed batch rolled back is behind only those.)
            if let Wait::Acquire(Waiter {
                queued: Some(queued),
                ..
            }) = front
            {
                if first_anywhere.is_some_and(|first| first < *queued) {
                    break;
                }
            }
            let judged = blockers(&ctx.memory.locks.held, front.key(), front.want());
            if matches!(judged, Ok(Some(_))) {
                break;
            }
            let Some(Wait::Acquire(waiter)) = queues.pop_front(Queue::Acquire, &key) else {
                break;
            };
            left_queue(ctx, &key, waiter.queued)?;
            let answer = match judged {
                // Its slots no longer match the key's: told why, it leaves the queue.
                Err(refused) => Err(refused),
                Ok(_) => grant(ctx, &waiter.request).and_then(|r| reply(&r)),
            };
            ctx.deferred.push((waiter.reply, answer));
        }
    }
    // Every watcher of a key waits on the same key: all are told together.
    let keys: Vec<String> = ctx
        .memory
        .locks
        .schedule
        .queue_keys(Queue::Watch)
        .cloned()
        .collect();
    for key in keys {
        let queues = &mut ctx.memory.locks.schedule;
        queues.retain_in(Queue::Watch, &key, |w| !w.reply().is_closed());
        let Some(front) = queues.front(Queue::Watch, &key) else {
            queues.remove_queue(Queue::Watch, &key);
            continue;
        };
        if blockers(&ctx.memory.locks.held, front.key(), Want::EXCLUSIVE)?.is_some() {
            continue;
        }
        for w in ctx.memory.locks.schedule.remove_queue(Queue::Watch, &key) {
            if let Wait::Watch(w) = w {
                let answer = wait_available(ctx, &w);
                ctx.deferred.push((w.reply, answer));
            }
        }
    }
    Ok(())
}

/// The lease on `key`, if `presented` is it: its id, presented with the token that
/// obtained it (another token's request gets 410 as if the id did not exist).
fn own_lease(ctx: &mut WriteCtx<'_>, key: &ResourceKey, presented: &Presented) -> Result<LeaseRow> {
    match ctx.memory.locks.held.by_id(&presented.lease_id) {
        Some(row) if row.resource_key == key.key && row.token_id == presented.token_id => {
            return Ok(row.clone())
        }
        _ => {}
    }
    match ctx.memory.locks.held.holders(&key.key).is_empty() {
        false => Err(lease_invalid(ctx, &key.key, "not the current lease")?),
        true => {
            let why = match ctx.outcomes().previous(&key.key)? {
                Some(p) if p.outcome == "expired" => "expired",
                Some(p) if p.outcome == "broken" => "broken by an operator (BreakLock)",
                Some(_) => "released",
                None => "unknown",
            };
            Err(lease_invalid(ctx, &key.key, why)?)
        }
    }
}

pub fn heartbeat(
    ctx: &mut WriteCtx<'_>,
    key: &ResourceKey,
    presented: &Presented,
    ttl_ms: u64,
) -> Result<HeartbeatResult> {
    let mut row = own_lease(ctx, key, presented)?;
    let expires_at = ctx.now_ms + ttl_ms as i64;
    ctx.leases()
        .extend_lease(&row.resource_key, &row.lease_id, expires_at)?;
    let acquired_on = ctx
        .memory
        .locks
        .schedule
        .lease(&row.lease_id)
        .map(|l| l.data.acquired_on)
        .unwrap_or_default();
    ctx.memory.locks.forget(&row.lease_id);
    row.expires_at = expires_at;
    let deadline = ctx.mono_now + Duration::from_millis(ttl_ms);
    ctx.memory.locks.track(row, deadline, acquired_on);
    Ok(HeartbeatResult {
        resource_key: key.key.clone(),
        expires_at: format_ms(expires_at),
        remaining_ms: ttl_ms,
    })
}

pub fn release(
    ctx: &mut WriteCtx<'_>,
    key: &ResourceKey,
    request: ReleaseRequest,
) -> Result<ReleaseResult> {
    let row = own_lease(ctx, key, &request.lease)?;
    end_lease(
        ctx,
        &row,
        request.outcome.as_str(),
        request.moved_to.as_deref(),
        request.note.as_deref(),
    )?;
    serve_waiters(ctx)?;
    Ok(ReleaseResult {
        status: "released",
        resource_key: key.key.clone(),
        outcome: request.outcome,
    })
}

pub fn status(
    ctx: &mut WriteCtx<'_>,
    key: &ResourceKey,
    visible: &Visible,
) -> Result<StatusResult> {
    // A counting key is shown with every holder (each with the key's slots), free slots
    // or not: judged as an exclusive acquire it would be refused for its missing slots.
    let rows = ctx.memory.locks.held.holders(&key.key);
    let counting = rows
        .first()
        .is_some_and(|h| h.slots.is_some())
        .then(|| Blockers {
            rows,
            conflicting_key: key.key.clone(),
            many: true,
        });
    Ok(
        match counting.map_or_else(
            || blockers(&ctx.memory.locks.held, key, Want::EXCLUSIVE),
            |b| Ok(Some(b)),
        )? {
            Some(b) => {
                let b = b.seen_by(visible);
                StatusResult::Held {
                    resource_key: key.key.clone(),
                    held_by: holders(&b, ctx.now_ms)?,
                    conflicting_key: b.conflicting_key,
                }
            }
            None => StatusResult::Available {
                resource_key: key.key.clone(),
                previous: ctx.outcomes().previous(&key.key)?,
            },
        },
    )
}

/// A page of ListResourceLocks: the leases after (key, fencing token), at most `limit`.
pub struct Page<'a> {
    pub after: Option<(&'a str, u64)>,
    pub limit: u64,
}

/// ListResourceLocks: a page of live leases (those the caller's `locks:` grants cover, for
/// a token that is not an admin) and the waiters of the keys the page spans.
pub fn list(
    ctx: &mut WriteCtx<'_>,
    prefix: Option<&str>,
    owner: Option<&str>,
    page: Page<'_>,
    visible: Option<&super::super::auth::Principal>,
) -> Result<ListResourceLocksResult> {
    let prefix = prefix.unwrap_or("");
    let sees = |key: &str| visible.is_none_or(|p| p.scopes.allows_lock(key));
    // Read on until the page is full of leases the caller may see, or the leases end.
    let mut rows: Vec<LeaseRow> = Vec::new();
    let mut cursor = page.after.map(|(key, token)| (key.to_string(), token));
    loop {
        let after = cursor.as_ref().map(|(key, token)| (key.as_str(), *token));
        let chunk = ctx
            .leases()
            .lease_page(prefix, owner, after, page.limit + 1)?;
        let ended = (chunk.len() as u64) <= page.limit;
        if let Some(last) = chunk.last() {
            cursor = Some((last.resource_key.clone(), last.fencing_token));
        }
        rows.extend(chunk.into_iter().filter(|row| sees(&row.resource_key)));
        if ended || rows.len() as u64 > page.limit {
            break;
        }
    }
    let mut locks = rows
        .iter()
        .map(|row| {
            Ok(LockEntry {
                resource_key: row.resource_key.clone(),
                held_by: held_by(row, ctx.now_ms)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let more = super::super::paging::cut(&mut locks, page.limit)?;
    let next = match (more, rows.get(locks.len().wrapping_sub(1))) {
        (true, Some(last)) => Some(super::super::paging::cursor(&(
            &last.resource_key,
            last.fencing_token,
        ))?),
        _ => None,
    };
    // The waiters of the keys from the previous page's last key (excluded; a key split
    // between pages shows its waiters on its first) to this page's last (included).
    let low = page.after.map(|(key, _)| key);
    let high = next
        .as_ref()
        .and(locks.last().map(|l| l.resource_key.as_str()));
    let spanned = |key: &str| {
        key.starts_with(prefix)
            && low.is_none_or(|low| key > low)
            && high.is_none_or(|high| key <= high)
            && sees(key)
    };
    let mut waiting: Vec<WaitingEntry> = if ctx.leases().shared_waits().is_some() {
        // Every daemon's waiters, each key's in the order they are served.
        let waits = ctx.memory.locks.queued_anywhere.iter();
        waits
            .filter(|(key, _)| spanned(key))
            .flat_map(|(_, waits)| waits.values())
            .filter(|w| owner.is_none_or(|o| o == w.owner))
            .map(|w| WaitingEntry {
                resource_key: w.resource_key.clone(),
                owner: w.owner.clone(),
                mode: w.mode,
                slots: w.slots,
                since: ctx.memory.locks.waiting_since(w.queued),
            })
            .collect()
    } else {
        let schedule = &ctx.memory.locks.schedule;
        schedule
            .queue_keys(Queue::Acquire)
            .filter(|key| spanned(key))
            .flat_map(|key| schedule.waiters(Queue::Acquire, key))
            .filter_map(|wait| match wait {
                Wait::Acquire(w) if owner.is_none_or(|o| o == w.request.owner) => {
                    Some(WaitingEntry {
                        resource_key: w.request.key.key.clone(),
                        owner: w.request.owner.clone(),
                        mode: w.request.want.mode,
                        slots: w.request.want.slots,
                        since: Some(format_ms(w.since_ms)),
                    })
                }
                _ => None,
            })
            .collect()
    };
    waiting.sort_by(|a, b| a.resource_key.cmp(&b.resource_key));
    Ok(ListResourceLocksResult {
        locks,
        waiting,
        next,
    })
}

pub fn wait(
    ctx: &mut WriteCtx<'_>,
    key: ResourceKey,
    timeout_ms: u64,
    connection: u64,
    visible: Visible,
) -> Result<Served<WaitResult>> {
    let Some(in_the_way) = blockers(&ctx.memory.locks.held, &key, Want::EXCLUSIVE)? else {
        return Ok(Served::Now(WaitResult::Available {
            previous: ctx.outcomes().previous(&key.key)?,
            resource_key: key.key,
            waited_ms: 0,
        }));
    };
    if timeout_ms == 0 {
        return Ok(Served::Now(WaitResult::Timeout {
            resource_key: key.key,
            held_by: held_by(&in_the_way.seen_by(&visible).rows[0], ctx.now_ms)?,
            waited_ms: 0,
        }));
    }
    let Some(reply) = ctx.take_reply() else {
        return Err(Error::Internal("a wait had no reply channel".into()));
    };
    let deadline = ctx.mono_now + Duration::from_millis(timeout_ms);
    let queue = key.key.clone();
    let watcher = Wait::Watch(Watcher {
        key,
        started: ctx.mono_now,
        connection,
        reply,
        visible,
    });
    ctx.memory
        .locks
        .schedule
        .enqueue(Queue::Watch, queue, Some(deadline), watcher);
    Ok(Served::Later)
}
