//! SQL for the journal: appending an event inside the writer's transaction, and reading
//! events back with filters.

use std::collections::VecDeque;
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::value::RawValue;

use crate::clock::format_ms;
use crate::error::{Error, Result};
use crate::protocol::journal::{Event, EventFilter};

use super::boundary::Journal;
use super::writer::WriteCtx;

/// The columns [`event_from_row`] reads, in its order.
macro_rules! event_columns {
    () => {
        "seq, type, at, actor, namespace, key, resource_key, task_id, node_id, data"
    };
}

/// An event about to be appended; `seq` is the revision of the change it records.
#[derive(Default)]
pub struct NewEvent<'a> {
    pub kind: &'a str,
    pub actor: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub key: Option<&'a str>,
    pub resource_key: Option<&'a str>,
    pub task_id: Option<&'a str>,
    pub node_id: Option<&'a str>,
    /// JSON text.
    pub data: &'a str,
}

/// Appends one event with `seq` (taken from `ctx.next_revision()` by the caller),
/// stamped with the batch's time.
pub fn append(ctx: &WriteCtx<'_>, seq: i64, event: &NewEvent<'_>) -> Result<()> {
    ctx.journal().append_event(seq, ctx.now_ms, event)
}

impl Journal for Connection {
    fn append_event(&self, seq: i64, at_ms: i64, event: &NewEvent<'_>) -> Result<()> {
        self.prepare_cached(
            "INSERT INTO events (seq, type, at, actor, namespace, key, resource_key, task_id, node_id, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?
        .execute(params![
            seq,
            event.kind,
            at_ms,
            event.actor,
            event.namespace,
            event.key,
            event.resource_key,
            event.task_id,
            event.node_id,
            event.data
        ])?;
        Ok(())
    }
}

/// The last seq written (0 for an empty journal).
pub fn head_seq(conn: &Connection) -> Result<u64> {
    Ok(
        conn.query_row("SELECT value FROM meta WHERE name = 'revision'", [], |r| {
            r.get(0)
        })?,
    )
}

/// Number of events stored.
pub fn length(conn: &Connection) -> Result<u64> {
    Ok(conn.query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))?)
}

/// How many events one read examines at most before answering with what it found, so a
/// filter that matches rarely cannot hold a read connection for long.
const SCAN_BUDGET: u64 = 10_000;

/// Events after `since_seq` matching `filter`, in seq order, at most `limit` and (past the
/// first) at most about `max_bytes` of event data; and the seq to resume from (the last one
/// returned, or the last one examined when the scan ran out).
pub fn read(
    conn: &Connection,
    since_seq: u64,
    filter: &EventFilter,
    limit: u64,
    max_bytes: usize,
) -> Result<(Vec<Event>, u64)> {
    let head = head_seq(conn)?;
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        event_columns!(),
        " FROM events
         WHERE seq > ?1 AND seq <= ?2 AND (?3 IS NULL OR task_id = ?3) ORDER BY seq LIMIT ?4 + 0"
    ))?;
    let mut rows = stmt.query(params![since_seq, head, filter.task_id, SCAN_BUDGET])?;
    let mut events = Vec::new();
    let mut bytes = 0;
    let mut last_examined = since_seq;
    let mut scanned = 0;
    while let Some(row) = rows.next()? {
        scanned += 1;
        let seq: u64 = row.get(0)?;
        last_examined = seq;
        let text = |i: usize| -> Result<Option<&str>> {
            Ok(row
                .get_ref(i)?
                .as_str_or_null()
                .map_err(rusqlite::Error::from)?)
        };
        if !filter.matches(text(1)?.unwrap_or(""), text(4)?, text(5)?, text(6)?) {
            continue;
        }
        events.push(event_from_row(row)?);
        bytes += events.last().map_or(0, |e| e.data.get().len());
        if events.len() as u64 >= limit || bytes >= max_bytes {
            return Ok((events, seq));
        }
    }
    // Examined everything up to the head (or the scan budget): resume after what was examined.
    let next = if scanned < SCAN_BUDGET {
        head.max(since_seq)
    } else {
        last_examined
    };
    Ok((events, next))
}

/// The last `limit` events of a task, oldest first, serialized.
///
/// `LIMIT ?n + 0` (here and in the other paged queries): SQLite plans a bare bound LIMIT
/// with its value and so re-prepares the statement at every bind; an expression keeps the
/// cached plan.
pub fn recent_for_task(
    conn: &Connection,
    task_id: &str,
    limit: u64,
) -> Result<VecDeque<(i64, Arc<RawValue>)>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        event_columns!(),
        " FROM events WHERE task_id = ?1 ORDER BY seq DESC LIMIT ?2 + 0"
    ))?;
    let mut rows = stmt.query(params![task_id, limit])?;
    let mut events = VecDeque::new();
    while let Some(row) = rows.next()? {
        let event = event_from_row(row)?;
        events.push_front((event.seq as i64, serialized(&event)?));
    }
    Ok(events)
}

/// An event as stored, from a row of `event_columns!()`.
fn event_from_row(row: &rusqlite::Row<'_>) -> Result<Event> {
    Ok(Event {
        seq: row.get(0)?,
        kind: row.get(1)?,
        at: format_ms(row.get(2)?),
        actor: row.get(3)?,
        namespace: row.get(4)?,
        key: row.get(5)?,
        resource_key: row.get(6)?,
        task_id: row.get(7)?,
        node_id: row.get(8)?,
        data: RawValue::from_string(row.get(9)?)?,
    })
}

/// An event as it is sent, for the in-memory copy of a task's recent events.
fn serialized(event: &Event) -> Result<Arc<RawValue>> {
    Ok(serde_json::value::to_raw_value(event)?.into())
}

/// The event `append` stores, as it is sent.
pub fn appended(ctx: &WriteCtx<'_>, seq: i64, event: &NewEvent<'_>) -> Result<Arc<RawValue>> {
    let owned = |s: Option<&str>| s.map(str::to_string);
    serialized(&Event {
        seq: seq as u64,
        kind: event.kind.to_string(),
        at: format_ms(ctx.now_ms),
        actor: owned(event.actor),
        namespace: owned(event.namespace),
        key: owned(event.key),
        resource_key: owned(event.resource_key),
        task_id: owned(event.task_id),
        node_id: owned(event.node_id),
        data: RawValue::from_string(event.data.to_string())?,
    })
}

/// The first seq the journal still holds events from: 1 until CompactJournal removed older
/// ones. Events after `oldest_seq - 1` are all there.
pub fn oldest_seq(conn: &Connection) -> Result<u64> {
    Ok(conn
        .prepare_cached("SELECT value FROM meta WHERE name = 'journal_start'")?
        .query_row([], |r| r.get(0))
        .optional()?
        .unwrap_or(1))
}

/// 416 when events after `since_seq` may have been compacted away.
pub fn check_retained(conn: &Connection, since_seq: u64) -> Result<()> {
    let oldest = oldest_seq(conn)?;
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

/// Removes every event before `before_seq`; returns the new oldest seq and how many events
/// went. Record history and task state are not touched.
pub fn compact(ctx: &mut WriteCtx<'_>, before_seq: u64) -> Result<(u64, u64)> {
    let head = ctx.head_revision() as u64;
    if before_seq > head + 1 {
        return Err(Error::Invalid(format!(
            "before_seq {before_seq} is past the journal head {head}; pass at most {}",
            head + 1
        )));
    }
    let oldest = oldest_seq(ctx.conn)?;
    if before_seq <= oldest {
        return Ok((oldest, 0));
    }
    let deleted = ctx
        .conn
        .prepare_cached("DELETE FROM events WHERE seq < ?1")?
        .execute([before_seq])?;
    ctx.conn
        .prepare_cached("INSERT OR REPLACE INTO meta (name, value) VALUES ('journal_start', ?1)")?
        .execute([before_seq])?;
    // The writer's copies of recent task events may include some that are gone now.
    ctx.tasks.forget_recent();
    Ok((before_seq, deleted as u64))
}
