//! PostgreSQL's side of [`Journal`] (`events`; same meaning as SQLite's `store::journal`).

use std::collections::VecDeque;

use serde_json::value::RawValue;
use tokio_postgres::Row;

use crate::clock::format_ms;
use crate::error::Result;
use crate::protocol::journal::{Event, EventFilter};
use crate::store::boundary::{Journal, NewEvent, SerializedEvent};

use super::{i, u, Lit, PgConn};

/// The columns [`event_from_row`] reads, in its order.
const EVENT_COLUMNS: &str =
    "seq, type, at, actor, namespace, key, resource_key, task_id, node_id, data";

/// How many events one read examines at most before answering with what it found.
const SCAN_BUDGET: u64 = 10_000;

fn event_from_row(row: &Row) -> Result<Event> {
    Ok(Event {
        seq: u(row.get(0)),
        kind: row.get(1),
        at: format_ms(row.get(2)),
        actor: row.get(3),
        namespace: row.get(4),
        key: row.get(5),
        resource_key: row.get(6),
        task_id: row.get(7),
        node_id: row.get(8),
        data: RawValue::from_string(row.get(9))?,
    })
}

impl Journal for PgConn {
    fn append_event(&self, seq: i64, at_ms: i64, event: &NewEvent<'_>) -> Result<()> {
        // Deferred: it goes out with the next statement, or the commit. A task's event
        // changes what writers keep of its recent events.
        if event.task_id.is_some() {
            self.touch(super::TASKS);
        }
        self.defer(format!(
            "INSERT INTO events (seq, type, at, actor, namespace, key, resource_key, task_id,
                                 node_id, data)
             VALUES ({seq}, {}, {at_ms}, {}, {}, {}, {}, {}, {}, {})",
            event.kind.as_str().lit(),
            event.actor.lit(),
            event.namespace.lit(),
            event.key.lit(),
            event.resource_key.lit(),
            event.task_id.lit(),
            event.node_id.lit(),
            event.data.lit(),
        ));
        Ok(())
    }

    fn read_events(
        &self,
        since_seq: u64,
        head: u64,
        filter: &EventFilter,
        limit: u64,
        max_bytes: usize,
    ) -> Result<(Vec<Event>, u64)> {
        // A task's events through `events_by_task` (a `$3 IS NULL OR task_id = $3` form
        // cannot use it in a generic plan).
        let rows = match &filter.task_id {
            Some(task_id) => self.query(
                &format!(
                    "SELECT {EVENT_COLUMNS} FROM events
                     WHERE task_id = $4 AND seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3"
                ),
                &[&i(since_seq), &i(head), &i(SCAN_BUDGET), task_id],
            )?,
            None => self.query(
                &format!(
                    "SELECT {EVENT_COLUMNS} FROM events
                     WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3"
                ),
                &[&i(since_seq), &i(head), &i(SCAN_BUDGET)],
            )?,
        };
        let mut events = Vec::new();
        let mut bytes = 0;
        let mut last_examined = since_seq;
        for row in &rows {
            let seq = u(row.get(0));
            last_examined = seq;
            let kind: &str = row.get(1);
            if !filter.matches(kind, row.get(4), row.get(5), row.get(6)) {
                continue;
            }
            let event = event_from_row(row)?;
            bytes += event.data.get().len();
            events.push(event);
            if events.len() as u64 >= limit || bytes >= max_bytes {
                return Ok((events, seq));
            }
        }
        let next = if (rows.len() as u64) < SCAN_BUDGET {
            head.max(since_seq)
        } else {
            last_examined
        };
        Ok((events, next))
    }

    fn recent_for_task(&self, task_id: &str, limit: u64) -> Result<VecDeque<SerializedEvent>> {
        let rows = self.query(
            &format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE task_id = $1 ORDER BY seq DESC LIMIT $2"
            ),
            &[&task_id, &i(limit)],
        )?;
        let mut events = VecDeque::with_capacity(rows.len());
        for row in &rows {
            let event = event_from_row(row)?;
            events.push_front((event.seq as i64, event.serialized()?));
        }
        Ok(events)
    }

    fn length(&self) -> Result<u64> {
        Ok(u(self
            .query_one("SELECT count(*) FROM events", &[])?
            .get(0)))
    }

    fn oldest_seq(&self) -> Result<u64> {
        let row = self.query_opt("SELECT value FROM meta WHERE name = 'journal_start'", &[])?;
        Ok(row.map_or(1, |r| u(r.get(0))))
    }

    fn remove_before(&self, before_seq: u64) -> Result<u64> {
        let deleted = self.execute("DELETE FROM events WHERE seq < $1", &[&i(before_seq)])?;
        self.execute(
            "INSERT INTO meta (name, value) VALUES ('journal_start', $1)
             ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
            &[&i(before_seq)],
        )?;
        Ok(deleted)
    }

    fn first_seq_since(&self, at_ms: i64, from_seq: u64, scan: u64) -> Result<u64> {
        let rows = self.query(
            "SELECT seq, at FROM events WHERE seq >= $1 ORDER BY seq LIMIT $2",
            &[&i(from_seq), &i(scan)],
        )?;
        let mut past = from_seq;
        for row in &rows {
            let (seq, at) = (u(row.get(0)), row.get::<_, i64>(1));
            if at >= at_ms {
                return Ok(seq);
            }
            past = seq + 1;
        }
        Ok(past)
    }
}
