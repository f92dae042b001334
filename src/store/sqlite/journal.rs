//! SQL for the journal (`events`): SQLite's side of [`Journal`]. What is journalled, and
//! when a read is refused (compacted), are rules in `methods::journal`.

use std::collections::VecDeque;

use rusqlite::{params, OptionalExtension};

use crate::error::Result;
use crate::protocol::journal::{Event, EventFilter, Narrowest};
use crate::store::boundary::{Journal, NewEvent, SerializedEvent};
use crate::store::rows::EventColumns;

use super::sql::Sql;

/// The columns [`event_from_row`] reads, in its order.
macro_rules! event_columns {
    () => {
        "seq, type, at, actor, namespace, key, resource_key, task_id, node_id, data"
    };
}

/// How many events one read examines at most before answering with what it found, so a
/// filter that matches rarely cannot hold a read connection for long.
const SCAN_BUDGET: u64 = 10_000;

/// Events in a seq range, oldest first.
const EVENTS_IN_RANGE: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM events WHERE seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3 + 0"
);

/// The events in a seq range (`?1` < seq <= `?2`, at most `?3`) that a filter's narrowest
/// condition picks, through that condition's index (`INDEXED BY`: the planner cannot
/// prefer a scan of the journal in seq order), so a read's cost follows the events of that
/// task or namespace, or those that name a resource, not the journal. Its value is bound
/// from `?4`. (A `?4 IS NULL OR task_id = ?4` form would scan every event.)
pub(crate) fn events_query(narrowest: &Narrowest<'_>) -> (String, Vec<String>) {
    let (index, condition, values) = match narrowest {
        Narrowest::Task(task_id) => ("events_by_task", "task_id = ?4", vec![task_id.to_string()]),
        Narrowest::Namespace(namespace) => (
            "events_by_namespace",
            "namespace = ?4",
            vec![namespace.to_string()],
        ),
        Narrowest::Resources => (
            "events_with_resource",
            "resource_key IS NOT NULL",
            Vec::new(),
        ),
        Narrowest::Everything => return (EVENTS_IN_RANGE.to_string(), Vec::new()),
    };
    let sql = format!(
        concat!(
            "SELECT ",
            event_columns!(),
            " FROM events INDEXED BY {} WHERE {} AND seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3 + 0"
        ),
        index, condition
    );
    (sql, values)
}

impl<C: Sql> Journal for C {
    fn append_event(&self, seq: i64, at_ms: i64, event: &NewEvent<'_>) -> Result<()> {
        self.with(
            "INSERT INTO events
                    (seq, type, at, actor, namespace, key, resource_key, task_id, node_id, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            |s| {
                s.execute(params![
                    seq,
                    event.kind.as_str(),
                    at_ms,
                    event.actor,
                    event.namespace,
                    event.key,
                    event.resource_key,
                    event.task_id,
                    event.node_id,
                    event.data
                ])
            },
        )?;
        Ok(())
    }

    /// Resumes after the last event returned, or after the last one examined when the scan
    /// budget ran out.
    fn read_events(
        &self,
        since_seq: u64,
        head: u64,
        filter: &EventFilter,
        limit: u64,
        max_bytes: usize,
    ) -> Result<(Vec<Event>, u64)> {
        let narrowest = filter.narrowest();
        let (sql, values) = events_query(&narrowest);
        let mut stmt = self.conn().prepare_cached(&sql)?;
        let mut bound: Vec<&dyn rusqlite::ToSql> = vec![&since_seq, &head, &SCAN_BUDGET];
        bound.extend(values.iter().map(|v| v as &dyn rusqlite::ToSql));
        let mut rows = stmt.query(bound.as_slice())?;
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
        let next = if scanned < SCAN_BUDGET {
            head.max(since_seq)
        } else {
            last_examined
        };
        Ok((events, next))
    }

    /// `LIMIT ?n + 0` (here and in the other paged queries): SQLite plans a bare bound LIMIT
    /// with its value and so re-prepares the statement at every bind; an expression keeps
    /// the cached plan.
    fn recent_for_task(&self, task_id: &str, limit: u64) -> Result<VecDeque<SerializedEvent>> {
        let mut stmt = self.conn().prepare_cached(concat!(
            "SELECT ",
            event_columns!(),
            " FROM events WHERE task_id = ?1 ORDER BY seq DESC LIMIT ?2 + 0"
        ))?;
        let mut rows = stmt.query(params![task_id, limit])?;
        let mut events = VecDeque::new();
        while let Some(row) = rows.next()? {
            let event = event_from_row(row)?;
            events.push_front((event.seq as i64, event.serialized()?));
        }
        Ok(events)
    }

    fn length(&self) -> Result<u64> {
        Ok(self
            .conn()
            .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))?)
    }

    fn oldest_seq(&self) -> Result<u64> {
        Ok(self
            .with("SELECT value FROM meta WHERE name = 'journal_start'", |s| {
                s.query_row([], |r| r.get(0))
            })
            .optional()?
            .unwrap_or(1))
    }

    fn remove_before(&self, before_seq: u64) -> Result<u64> {
        // The head is read from the last event (`meta::head_revision_sql`): keep it in
        // `meta` before the events that may hold it go.
        self.with(
            concat!(
                "UPDATE meta SET value = ",
                super::meta::head_revision_sql!(),
                " WHERE name = 'revision'"
            ),
            |s| s.execute([]),
        )?;
        let deleted = self.with("DELETE FROM events WHERE seq < ?1", |s| {
            s.execute([before_seq])
        })?;
        self.with(
            "INSERT OR REPLACE INTO meta (name, value) VALUES ('journal_start', ?1)",
            |s| s.execute([before_seq]),
        )?;
        Ok(deleted as u64)
    }

    fn first_seq_since(&self, at_ms: i64, from_seq: u64, scan: u64) -> Result<u64> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT seq, at FROM events WHERE seq >= ?1 ORDER BY seq LIMIT ?2 + 0",
        )?;
        let mut rows = stmt.query(params![from_seq, scan])?;
        let mut past = from_seq;
        while let Some(row) = rows.next()? {
            let (seq, at): (u64, i64) = (row.get(0)?, row.get(1)?);
            if at >= at_ms {
                return Ok(seq);
            }
            past = seq + 1;
        }
        Ok(past)
    }
}

/// An event as stored, from a row of `event_columns!()`.
fn event_from_row(row: &rusqlite::Row<'_>) -> Result<Event> {
    EventColumns {
        seq: row.get(0)?,
        kind: row.get(1)?,
        at: row.get(2)?,
        actor: row.get(3)?,
        namespace: row.get(4)?,
        key: row.get(5)?,
        resource_key: row.get(6)?,
        task_id: row.get(7)?,
        node_id: row.get(8)?,
        data: row.get(9)?,
    }
    .into_event()
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use crate::protocol::journal::EventFilter;

    /// A task, namespace (keys included) or resource filter of ReadEvents and Subscribe
    /// reads through an index: its cost follows those events, not the journal. (A type
    /// filter alone reads the journal in order, within the scan budget.)
    #[test]
    fn task_namespace_and_resource_filters_read_through_an_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(&mut conn, 0).unwrap();
        let cases = [
            (r#"{"task_id": "t"}"#, "events_by_task"),
            (
                r#"{"namespace": "ns", "key_prefix": "k", "types": ["kv.set"]}"#,
                "events_by_namespace",
            ),
            (
                r#"{"namespace": "ns", "key_prefix": ""}"#,
                "events_by_namespace",
            ),
            (r#"{"namespace": "ns"}"#, "events_by_namespace"),
            (
                r#"{"resource_prefix": "file:src/"}"#,
                "events_with_resource",
            ),
        ];
        for (filter, index) in cases {
            let filter: EventFilter = serde_json::from_str(filter).unwrap();
            let narrowest = filter.narrowest();
            let (sql, values) = super::events_query(&narrowest);
            let mut bound: Vec<&dyn rusqlite::ToSql> = vec![&0, &10, &100];
            bound.extend(values.iter().map(|v| v as &dyn rusqlite::ToSql));
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map(bound.as_slice(), |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert!(
                plan.iter()
                    .any(|step| step.contains(&format!("USING INDEX {index}"))),
                "{filter:?}: {plan:?}"
            );
            assert!(
                !plan.iter().any(|step| step.starts_with("SCAN events")),
                "{filter:?}: {plan:?}"
            );
        }
    }
}
