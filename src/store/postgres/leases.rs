//! PostgreSQL's side of [`Leases`]: lock leases (`locks`), the last outcome of each key
//! (`lock_outcomes`) and the fencing counter (same meaning as SQLite's `store::sqlite::leases`).

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::error::Result;
use crate::protocol::locks::Previous;
use crate::store::boundary::{
    LeaseEnd, LeaseRow, Leases, NewLease, Outcomes, QueuedWait, SharedWaits,
};

use crate::store::rows::{lock_mode, previous};

use super::{i, u, Lit, PgConn};

const LEASE_COLUMNS: &str = "resource_key, lease_id, owner, provider, fencing_token, acquired_at, expires_at, metadata, holder_connection, token_id, mode, slots, session_id";

fn lease_row(r: &Row) -> LeaseRow {
    LeaseRow {
        resource_key: r.get(0),
        lease_id: r.get(1),
        owner: r.get(2),
        provider: r.get(3),
        fencing_token: u(r.get(4)),
        acquired_at: r.get(5),
        expires_at: r.get(6),
        metadata: r.get(7),
        holder_connection: r.get::<_, Option<i64>>(8).map(u),
        token_id: r.get(9),
        mode: lock_mode(r.get(10)),
        slots: r.get::<_, Option<i64>>(11).map(u),
        session_id: r.get(12),
    }
}

impl PgConn {
    /// The leases `sql` (the rest of a query over `locks`) finds.
    fn leases_where(&self, sql: &str, args: &[&(dyn ToSql + Sync)]) -> Result<Vec<LeaseRow>> {
        let rows = self.query(&format!("SELECT {LEASE_COLUMNS} FROM locks {sql}"), args)?;
        Ok(rows.iter().map(lease_row).collect())
    }
}

/// Every live lease, in key order (as `leases("", None)` reads them), when `locks_epoch`
/// is no longer `$1`: the writer's batch reads this ahead, as another instance changed
/// the leases since.
pub(super) fn leases_if_moved() -> String {
    format!(
        "SELECT {LEASE_COLUMNS} FROM locks
         WHERE (SELECT value FROM meta WHERE name = 'locks_epoch') <> $1
         ORDER BY resource_key"
    )
}

pub(super) fn lease_rows(rows: &[Row]) -> Vec<LeaseRow> {
    rows.iter().map(lease_row).collect()
}

const OUTCOME_COLUMNS: &str = "outcome, owner, at, moved_to, note";

/// The last outcome of the keys in `$1`, each with its key.
pub(super) fn outcomes_of() -> String {
    format!(
        "SELECT {OUTCOME_COLUMNS}, resource_key FROM lock_outcomes WHERE resource_key = ANY($1)"
    )
}

fn outcome(r: &Row) -> Previous {
    previous(r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))
}

pub(super) fn outcome_rows(rows: &[Row]) -> Vec<(String, Previous)> {
    rows.iter().map(|r| (r.get(5), outcome(r))).collect()
}

impl Leases for PgConn {
    fn leases(&self, prefix: &str, owner: Option<&str>) -> Result<Vec<LeaseRow>> {
        if prefix.is_empty() && owner.is_none() {
            if let Some(rows) = self.leases_ahead.take() {
                return Ok(rows);
            }
        }
        self.leases_where(
            "WHERE resource_key >= $1 AND substr(resource_key, 1, length($1)) = $1
               AND ($2::text IS NULL OR owner = $2)
             ORDER BY resource_key",
            &[&prefix, &owner],
        )
    }

    fn lease_page(
        &self,
        prefix: &str,
        owner: Option<&str>,
        after: Option<(&str, u64)>,
        limit: u64,
    ) -> Result<Vec<LeaseRow>> {
        let (after_key, after_token) = match after {
            Some((key, token)) => (Some(key), token as i64),
            None => (None, 0),
        };
        self.leases_where(
            "WHERE resource_key >= $1 AND substr(resource_key, 1, length($1)) = $1
               AND ($2::text IS NULL OR owner = $2)
               AND ($3::text IS NULL OR resource_key > $3
                    OR (resource_key = $3 AND fencing_token > $4))
             ORDER BY resource_key, fencing_token LIMIT $5",
            &[&prefix, &owner, &after_key, &after_token, &(limit as i64)],
        )
    }

    fn insert_lease(&self, l: &NewLease<'_>) -> Result<()> {
        // Deferred: it goes out with the next statement, or the commit.
        self.touch(super::LOCKS).defer(format!(
            "INSERT INTO locks (resource_key, kind, path, lease_id, owner, provider, fencing_token,
                                acquired_at, expires_at, metadata, holder_connection, token_id,
                                session_id, mode, slots)
             VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
            l.resource_key.lit(),
            l.kind.lit(),
            l.path.lit(),
            l.lease_id.lit(),
            l.owner.lit(),
            l.provider.lit(),
            i(l.fencing_token),
            l.acquired_at,
            l.expires_at,
            l.metadata.lit(),
            l.holder_connection.map(i).lit(),
            l.token_id.lit(),
            l.session_id.lit(),
            l.mode.as_str().lit(),
            l.slots.map(i).lit(),
        ));
        Ok(())
    }

    // A lease id is unique on its own here (the primary key); the key is not needed.
    fn extend_lease(&self, resource_key: &str, lease_id: &str, expires_at: i64) -> Result<()> {
        self.touch(super::LOCKS).defer(format!(
            "UPDATE locks SET expires_at = {expires_at} WHERE lease_id = {} AND resource_key = {}",
            lease_id.lit(),
            resource_key.lit()
        ));
        Ok(())
    }

    fn delete_lease(&self, resource_key: &str, lease_id: &str) -> Result<()> {
        self.touch(super::LOCKS).defer(format!(
            "DELETE FROM locks WHERE lease_id = {} AND resource_key = {}",
            lease_id.lit(),
            resource_key.lit()
        ));
        Ok(())
    }

    fn last_fencing_token(&self) -> Result<u64> {
        // In the writer's batch the counter was read when it began, under the lock no
        // other writer holds meanwhile.
        if let Some(last) = self.fence_hint() {
            return Ok(u(last));
        }
        let row = self.query_one("SELECT value FROM meta WHERE name = 'fencing_token'", &[])?;
        Ok(u(row.get(0)))
    }

    fn store_fencing_token(&self, last: u64) -> Result<()> {
        // As stored: only ever raised.
        self.set_fence_hint(self.fence_hint().map_or(i(last), |hint| hint.max(i(last))));
        self.touch(super::LOCKS).defer(format!(
            "UPDATE meta SET value = GREATEST(value, {last}) WHERE name = 'fencing_token'"
        ));
        Ok(())
    }

    fn leases_of_session(&self, session_id: &str) -> Result<Vec<LeaseRow>> {
        self.leases_where(
            "WHERE session_id = $1 ORDER BY resource_key",
            &[&session_id],
        )
    }

    fn shared_waits(&self) -> Option<&dyn SharedWaits> {
        Some(self)
    }
}

/// Written in the batch that records them: the daemons sharing the database read them too.
impl Outcomes for PgConn {
    fn previous(&self, resource_key: &str) -> Result<Option<Previous>> {
        if let Some(known) = self.outcomes_ahead.borrow().get(resource_key) {
            return Ok(known.clone());
        }
        let row = self.query_opt(
            &format!("SELECT {OUTCOME_COLUMNS} FROM lock_outcomes WHERE resource_key = $1"),
            &[&resource_key],
        )?;
        Ok(row.as_ref().map(outcome))
    }

    fn record_end(&self, end: &LeaseEnd<'_>) -> Result<()> {
        let mut ahead = self.outcomes_ahead.borrow_mut();
        if let Some(known) = ahead.get_mut(end.resource_key) {
            *known = Some(previous(
                end.outcome.to_string(),
                end.owner.to_string(),
                end.at_ms,
                end.moved_to.map(str::to_string),
                end.note.map(str::to_string),
            ));
        }
        drop(ahead);
        self.touch(super::LOCKS).defer(format!(
            "INSERT INTO lock_outcomes (resource_key, outcome, owner, at, moved_to, note, fencing_token)
             VALUES ({}, {}, {}, {}, {}, {}, {})
             ON CONFLICT (resource_key) DO UPDATE SET outcome = EXCLUDED.outcome,
               owner = EXCLUDED.owner, at = EXCLUDED.at, moved_to = EXCLUDED.moved_to,
               note = EXCLUDED.note,
               fencing_token = GREATEST(lock_outcomes.fencing_token, EXCLUDED.fencing_token)",
            end.resource_key.lit(),
            end.outcome.lit(),
            end.owner.lit(),
            end.at_ms,
            end.moved_to.lit(),
            end.note.lit(),
            i(end.fencing_token),
        ));
        Ok(())
    }

    /// Reads after the ends this batch deferred (they go out ahead of the query).
    fn latest_ended_token(&self, resource_key: &str) -> Result<u64> {
        let row = self.query_opt(
            "SELECT fencing_token FROM lock_outcomes WHERE resource_key = $1",
            &[&resource_key],
        )?;
        Ok(row.map_or(0, |r| u(r.get(0))))
    }

    fn store_held(&self) -> Result<()> {
        Ok(())
    }
}

/// Every wait to acquire, in order, when `locks_epoch` is no longer `$1` (read ahead with
/// [`leases_if_moved`]).
pub(super) fn waits_if_moved() -> String {
    format!(
        "SELECT {WAIT_COLUMNS} FROM lock_waits
         WHERE (SELECT value FROM meta WHERE name = 'locks_epoch') <> $1
         ORDER BY queued"
    )
}

const WAIT_COLUMNS: &str = "queued, resource_key, connection, owner, mode, slots";

pub(super) fn wait_rows(rows: &[Row]) -> Vec<QueuedWait> {
    rows.iter()
        .map(|r| QueuedWait {
            queued: u(r.get(0)),
            resource_key: r.get(1),
            connection: u(r.get(2)),
            owner: r.get(3),
            mode: lock_mode(r.get(4)),
            slots: r.get::<_, Option<i64>>(5).map(u),
        })
        .collect()
}

impl SharedWaits for PgConn {
    fn queue_wait(&self, wait: &QueuedWait) -> Result<u64> {
        // A round trip, but only for a request that must wait anyway.
        let rows = self.touch(super::LOCKS).query_write(
            "INSERT INTO lock_waits (queued, resource_key, connection, owner, mode, slots)
             VALUES (nextval('lock_wait_seq'), $1, $2, $3, $4, $5) RETURNING queued",
            &[
                &wait.resource_key,
                &i(wait.connection),
                &wait.owner,
                &wait.mode.as_str(),
                &wait.slots.map(i),
            ],
        )?;
        let queued = rows.first().map(|r| r.get::<_, i64>(0)).ok_or_else(|| {
            crate::error::Error::Unavailable(
                "PostgreSQL did not number a queued wait; retry".into(),
            )
        })?;
        Ok(u(queued))
    }

    fn end_wait(&self, queued: u64) -> Result<()> {
        self.touch(super::LOCKS).defer(format!(
            "DELETE FROM lock_waits WHERE queued = {}",
            i(queued)
        ));
        Ok(())
    }

    fn end_waits_of(&self, connections: std::ops::Range<u64>) -> Result<()> {
        self.touch(super::LOCKS).defer(format!(
            "DELETE FROM lock_waits WHERE connection >= {} AND connection < {}",
            i(connections.start),
            i(connections.end),
        ));
        Ok(())
    }

    fn queued_waits(&self) -> Result<Vec<QueuedWait>> {
        if let Some(waits) = self.waits_ahead.take() {
            return Ok(waits);
        }
        let rows = self.query(
            &format!("SELECT {WAIT_COLUMNS} FROM lock_waits ORDER BY queued"),
            &[],
        )?;
        Ok(wait_rows(&rows))
    }
}
