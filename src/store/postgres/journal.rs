//! PostgreSQL's side of [`Journal`] (`events`; same meaning as SQLite's `store::sqlite::journal`).

use std::collections::VecDeque;

use tokio_postgres::Row;

use crate::error::Result;
use crate::protocol::journal::{Event, EventFilter, Narrowest};
use crate::store::boundary::{Journal, NewEvent, SerializedEvent};
use crate::store::rows::EventColumns;

use super::{i, u, Lit, PgConn};

/// The columns [`event_from_row`] reads, in its order.
const EVENT_COLUMNS: &str =
    "seq, type, at, actor, namespace, key, resource_key, task_id, node_id, data";

/// How many events one read examines at most before answering with what it found.
const SCAN_BUDGET: u64 = 10_000;

/// The events in a seq range (`$1` < seq <= `$2`, at most `$3`) that a filter's narrowest
/// condition picks, in a form its index serves; its text value is bound from `$4`. (A
/// `$4 IS NULL OR task_id = $4` form cannot use an index in a generic plan.)
pub(crate) fn events_query(narrowest: &Narrowest<'_>) -> (String, Vec<String>) {
    let (condition, values) = match narrowest {
        Narrowest::Task(task_id) => ("task_id = $4".to_string(), vec![task_id.to_string()]),
        Narrowest::Namespace(namespace) => {
            ("namespace = $4".to_string(), vec![namespace.to_string()])
        }
        Narrowest::Resources => ("resource_key IS NOT NULL".to_string(), Vec::new()),
        Narrowest::Everything => ("TRUE".to_string(), Vec::new()),
    };
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM events
         WHERE {condition} AND seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3"
    );
    (sql, values)
}

fn event_from_row(row: &Row) -> Result<Event> {
    EventColumns {
        seq: u(row.get(0)),
        kind: row.get(1),
        at: row.get(2),
        actor: row.get(3),
        namespace: row.get(4),
        key: row.get(5),
        resource_key: row.get(6),
        task_id: row.get(7),
        node_id: row.get(8),
        data: row.get(9),
    }
    .into_event()
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
        let (sql, values) = events_query(&filter.narrowest());
        let (since, head_seq, budget) = (i(since_seq), i(head), i(SCAN_BUDGET));
        let mut args: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            vec![&since, &head_seq, &budget];
        args.extend(
            values
                .iter()
                .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync)),
        );
        let rows = self.query(&sql, &args)?;
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

#[cfg(test)]
mod tests {
    use crate::protocol::journal::EventFilter;

    /// A task, namespace (keys included) or resource filter reads through an index on
    /// PostgreSQL too.
    #[test]
    fn task_namespace_and_resource_filters_read_through_an_index() {
        let server = std::env::var("BATON_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        if server == "none" {
            eprintln!("SKIPPED: no PostgreSQL available; the journal's index plans were not checked on it");
            return;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let connect = |url: String| async move {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {url}: {e}"));
                tokio::spawn(connection);
                client
            };
            let admin = connect(server.clone()).await;
            let name = format!("baton_unit_{}", uuid::Uuid::new_v4().simple());
            admin
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .unwrap();
            let base = server.rsplit_once('/').map_or(server.as_str(), |(b, _)| b);
            let db = connect(format!("{base}/{name}")).await;
            for (_, _, sql) in super::super::migrations::MIGRATIONS {
                db.batch_execute(sql).await.unwrap();
            }
            // A journal of 20,000 events where each filter below matches few: the planner,
            // knowing that, must look them up rather than walk the journal in seq order.
            db.batch_execute(
                "INSERT INTO events (seq, type, at, namespace, key, resource_key, task_id, data)
                 SELECT g, CASE WHEN g % 500 = 0 THEN 'lock.acquired' ELSE 'kv.set' END, 0,
                        'ns' || (g % 50), 'k' || g,
                        CASE WHEN g % 500 = 0 THEN 'file:other/' || g END,
                        CASE WHEN g % 500 = 1 THEN 'task-' || g END, '{}'
                   FROM generate_series(1, 20000) g;
                 ANALYZE events",
            )
            .await
            .unwrap();
            let cases = [
                (r#"{"task_id": "t"}"#, &["events_by_task"][..]),
                (
                    r#"{"namespace": "ns", "key_prefix": "k", "types": ["kv.set"]}"#,
                    &["events_by_namespace"],
                ),
                (
                    r#"{"namespace": "ns", "key_prefix": ""}"#,
                    &["events_by_namespace"],
                ),
                (r#"{"namespace": "ns"}"#, &["events_by_namespace"]),
                (
                    r#"{"resource_prefix": "file:src/"}"#,
                    &["events_with_resource"],
                ),
            ];
            let mut failures = Vec::new();
            for (filter, indexes) in cases {
                let filter: EventFilter = serde_json::from_str(filter).unwrap();
                let (sql, values) = super::events_query(&filter.narrowest());
                let (since, head, budget) = (0i64, 20_000i64, 10_000i64);
                let mut args: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                    vec![&since, &head, &budget];
                args.extend(
                    values
                        .iter()
                        .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync)),
                );
                let plan: Vec<String> = db
                    .query(&format!("EXPLAIN {sql}"), &args)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                let through = |index: &&str| plan.iter().any(|line| line.contains(index));
                if !indexes.iter().any(through) {
                    failures.push(format!("{filter:?}: {plan:#?}"));
                }
            }
            drop(db);
            admin
                .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
                .await
                .unwrap();
            assert!(failures.is_empty(), "{failures:#?}");
        });
    }
}
