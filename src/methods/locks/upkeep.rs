//! The lock rules the writer runs outside any one request: what a session's end, a
//! closed connection or an ended token leaves, recovery at start, the end of every wait
//! at shutdown, and the order of waits on a database several daemons share.

use std::ops::Range;
use std::time::Duration;

use crate::error::{Error, Result};

use super::super::areas::WriteCtx;
use super::memory::{Queue, Wait};
use super::rules::*;

/// A session ended: the leases acquired with it end as `abandoned`.
pub(crate) fn end_session_leases(ctx: &mut WriteCtx<'_>, session_id: &str) -> Result<()> {
    let rows = ctx.leases().leases_of_session(session_id)?;
    if rows.is_empty() {
        return Ok(());
    }
    for row in rows {
        let note = Some("the holder's session ended");
        end_lease(ctx, &row, "abandoned", None, note)?;
    }
    serve_waiters(ctx)
}

/// A connection closed: its `release_on_disconnect` leases end as `abandoned`, its waits end.
pub fn connection_closed(ctx: &mut WriteCtx<'_>, connection: u64) -> Result<()> {
    for (key, queued) in shared_waits_of(ctx, |c| c == connection) {
        left_queue(ctx, &key, Some(queued))?;
    }
    ctx.memory
        .locks
        .schedule
        .retain(|w| w.connection() != connection);
    let lease_ids: Vec<String> = ctx
        .memory
        .locks
        .by_connection
        .remove(&connection)
        .into_iter()
        .flatten()
        .collect();
    let mut ended = false;
    for lease_id in lease_ids {
        if let Some(row) = ctx.memory.locks.held.by_id(&lease_id).cloned() {
            end_lease(
                ctx,
                &row,
                "abandoned",
                None,
                Some("the holder's connection closed"),
            )?;
            ended = true;
        }
    }
    if ended {
        serve_waiters(ctx)?;
    }
    Ok(())
}

/// The token a connection acts with was revoked or expired: its waits (locks, nodes,
/// inboxes) leave their queues and are answered 401, and those queued behind them are
/// served.
pub fn connection_unauthorized(ctx: &mut WriteCtx<'_>, connection: u64) -> Result<()> {
    for (key, queued) in shared_waits_of(ctx, |c| c == connection) {
        left_queue(ctx, &key, Some(queued))?;
    }
    let mut replies = ctx.memory.locks.take_waits_of(connection);
    replies.extend(ctx.memory.tasks.take_waits_of(connection));
    replies.extend(ctx.memory.agents.take_waits_of(connection));
    if replies.is_empty() {
        return Ok(());
    }
    let ended = || {
        Error::Unauthenticated(
            "the token this wait was made with was revoked or expired, so the wait ended; authenticate with a valid token and ask again".into(),
        )
    };
    ctx.deferred
        .extend(replies.into_iter().map(|reply| (reply, Err(ended()))));
    serve_waiters(ctx)
}

/// At start-up: leases that expired while the daemon was down, or that were tied to a
/// connection (all connections died with the old process), end; the rest are tracked with
/// monotonic deadlines for their remaining time.
pub fn recover(ctx: &mut WriteCtx<'_>) -> Result<()> {
    for row in ctx.leases().leases("", None)? {
        if row.expires_at <= ctx.now_ms {
            end_lease(
                ctx,
                &row,
                "expired",
                None,
                Some("expired while batond was stopped"),
            )?;
        } else if row.holder_connection.is_some() && !ctx.shared {
            end_lease(
                ctx,
                &row,
                "abandoned",
                None,
                Some("batond restarted; the holder's connection is gone"),
            )?;
        } else {
            // Shared: the connection may be another daemon's, which ends it when it
            // closes, or dies and falls silent (`methods::instances`).
            let remaining = Duration::from_millis((row.expires_at - ctx.now_ms) as u64);
            let deadline = ctx.mono_now + remaining;
            ctx.memory.locks.track(row, deadline, 0);
        }
    }
    Ok(())
}

/// Ends every pending wait with 503 (the daemon is stopping).
pub fn end_waits(ctx: &mut WriteCtx<'_>) -> Result<()> {
    for (key, queued) in shared_waits_of(ctx, |_| true) {
        left_queue(ctx, &key, Some(queued))?;
    }
    let answers = ctx.memory.locks.cancel_waits();
    ctx.deferred.extend(answers);
    let answers = ctx.memory.tasks.cancel_waits();
    ctx.deferred.extend(answers);
    let answers = ctx.memory.agents.cancel_waits();
    ctx.deferred.extend(answers);
    Ok(())
}

/// A waiter leaves its queue (granted, refused, out of time, gone): on a shared database,
/// its place in the order of every daemon's waits goes too.
pub(super) fn left_queue(ctx: &mut WriteCtx<'_>, key: &str, queued: Option<u64>) -> Result<()> {
    if let (Some(queued), Some(shared)) = (queued, ctx.leases().shared_waits()) {
        shared.end_wait(queued)?;
        ctx.memory.locks.drop_wait(key, queued);
    }
    Ok(())
}

/// The key and place of this daemon's waits to acquire, on a shared database, of the
/// connections `whose` picks.
pub(super) fn shared_waits_of(
    ctx: &WriteCtx<'_>,
    whose: impl Fn(u64) -> bool,
) -> Vec<(String, u64)> {
    let schedule = &ctx.memory.locks.schedule;
    schedule
        .queue_keys(Queue::Acquire)
        .flat_map(|key| schedule.waiters(Queue::Acquire, key))
        .filter_map(|wait| match wait {
            Wait::Acquire(w) if whose(w.request.connection) => {
                w.queued.map(|q| (w.request.key.key.clone(), q))
            }
            _ => None,
        })
        .collect()
}

/// A daemon sharing the database fell silent: its waits leave the order, so the waits
/// queued after them on live daemons are served.
pub(crate) fn end_waits_of(ctx: &mut WriteCtx<'_>, connections: Range<u64>) -> Result<()> {
    if let Some(shared) = ctx.leases().shared_waits() {
        shared.end_waits_of(connections.clone())?;
        ctx.memory.locks.drop_waits_of(&connections);
        serve_waiters(ctx)?;
    }
    Ok(())
}
