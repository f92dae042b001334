//! SQL for resource-lock leases (`locks`), the last outcome of each key
//! (`lock_outcomes`) and the fencing counter: SQLite's side of [`Leases`]. The rules
//! (conflicts, the `dir:` hierarchy, waiting, fencing) are in `methods::locks`.
//!
//! Outcomes are stored in batches. Keyed by resource key, `lock_outcomes` took one page
//! per key a commit released, and each page is a 4 KiB frame in the write-ahead log: on
//! short locks that was a third of what a commit wrote. A release's outcome goes to
//! `pending_outcomes`, a table in the writer connection's temporary database (memory:
//! `temp_store = MEMORY`), which commits and rolls back with the batch like any other
//! table but is never written to disk. The journal event of the release or expiry
//! (`lock.released`, `lock.expired`) carries the same facts and is durable with the
//! batch. The writer moves the pending outcomes to `lock_outcomes` inside a batch once
//! [`OUTCOMES_HELD`] are waiting, once the journal has run [`OUTCOMES_REPLAY_SPAN`]
//! revisions past `lock_outcomes_through` (the revision through which `lock_outcomes` is
//! complete), before the journal is compacted, and at shutdown. It looks every few
//! hundred changed rows, so either may run past its bound by that much. Opening the
//! database replays the events after `lock_outcomes_through` ([`recover_outcomes`]), so a
//! crash loses none. Only the writer reads outcomes, so no other connection needs the
//! pending ones.

use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::clock::format_ms;
use crate::error::Result;
use crate::protocol::locks::{LockMode, Previous};

use super::boundary::{LeaseEnd, LeaseRow, Leases, NewLease};

/// Pending outcomes that make the writer store them (the next batch does).
pub(super) const OUTCOMES_HELD: i64 = 512;

/// How far (in revisions) the journal may run past `lock_outcomes_through` before the
/// writer stores what is pending and moves the mark: opening the database replays at most
/// about this many events.
pub(super) const OUTCOMES_REPLAY_SPAN: i64 = 8_192;

/// Creates the writer connection's table of pending outcomes and stores the outcomes of
/// the journal events after `lock_outcomes_through` (those a crash left pending), in
/// journal order.
pub(super) fn recover_outcomes(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS pending_outcomes AS SELECT * FROM lock_outcomes WHERE 0;
         CREATE UNIQUE INDEX IF NOT EXISTS temp.pending_outcomes_by_key
             ON pending_outcomes (resource_key);
         BEGIN IMMEDIATE;
         INSERT OR REPLACE INTO lock_outcomes (resource_key, outcome, owner, at, moved_to, note)
             SELECT resource_key, json_extract(data, '$.outcome'), actor, at,
                    json_extract(data, '$.moved_to'), json_extract(data, '$.note')
             FROM events
             WHERE seq > (SELECT value FROM meta WHERE name = 'lock_outcomes_through')
               AND type IN ('lock.released', 'lock.expired')
             ORDER BY seq;
         UPDATE meta SET value = (SELECT value FROM meta WHERE name = 'revision')
             WHERE name = 'lock_outcomes_through';
         COMMIT;",
    )
}

/// Inside the writer's transaction: moves the pending outcomes to `lock_outcomes` and
/// marks it complete through the head revision.
pub(super) fn store_outcomes(conn: &Connection) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO main.lock_outcomes (resource_key, outcome, owner, at, moved_to, note)
         SELECT resource_key, outcome, owner, at, moved_to, note FROM temp.pending_outcomes
         ORDER BY resource_key",
    )?
    .execute([])?;
    conn.prepare_cached("DELETE FROM temp.pending_outcomes")?
        .execute([])?;
    conn.prepare_cached(
        "UPDATE meta SET value = (SELECT value FROM meta WHERE name = 'revision')
         WHERE name = 'lock_outcomes_through'",
    )?
    .execute([])?;
    Ok(())
}

/// How the last lease on `resource_key` ended: pending first, then stored.
pub(super) fn previous(conn: &Connection, resource_key: &str) -> Result<Option<Previous>> {
    let row = |r: &Row<'_>| {
        Ok(Previous {
            outcome: r.get(0)?,
            owner: r.get(1)?,
            at: format_ms(r.get(2)?),
            moved_to: r.get(3)?,
            note: r.get(4)?,
        })
    };
    // An outcome not yet stored in batch is newer than the stored one, so it comes
    // first. UNION ALL with LIMIT 1 runs the two point lookups in order and stops at
    // the first row (a plain UNION, or an ORDER BY, would sort them in a temporary
    // B-tree).
    Ok(conn
        .prepare_cached(
            "SELECT outcome, owner, at, moved_to, note FROM temp.pending_outcomes WHERE resource_key = ?1
             UNION ALL
             SELECT outcome, owner, at, moved_to, note FROM main.lock_outcomes WHERE resource_key = ?1
             LIMIT 1",
        )?
        .query_row([resource_key], row)
        .optional()?)
}

/// Holds `end` among the pending outcomes.
pub(super) fn record_end(conn: &Connection, end: &LeaseEnd<'_>) -> Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO temp.pending_outcomes (resource_key, outcome, owner, at, moved_to, note)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        end.resource_key,
        end.outcome,
        end.owner,
        end.at_ms,
        end.moved_to,
        end.note
    ])?;
    Ok(())
}

const LEASE_COLUMNS: &str = "resource_key, lease_id, owner, provider, fencing_token, acquired_at, expires_at, metadata, holder_connection, token_id, mode, slots";

fn lease_row(r: &Row<'_>) -> rusqlite::Result<LeaseRow> {
    Ok(LeaseRow {
        resource_key: r.get(0)?,
        lease_id: r.get(1)?,
        owner: r.get(2)?,
        provider: r.get(3)?,
        fencing_token: r.get(4)?,
        acquired_at: r.get(5)?,
        expires_at: r.get(6)?,
        metadata: r.get(7)?,
        holder_connection: r.get(8)?,
        token_id: r.get(9)?,
        mode: match r.get_ref(10)?.as_str()? {
            "shared" => LockMode::Shared,
            _ => LockMode::Exclusive,
        },
        slots: r.get(11)?,
    })
}

impl Leases for Connection {
    fn leases(&self, prefix: &str, owner: Option<&str>) -> Result<Vec<LeaseRow>> {
        let mut stmt = self.prepare_cached(&format!(
            "SELECT {LEASE_COLUMNS} FROM locks
             WHERE resource_key >= ?1 AND substr(resource_key, 1, length(?1)) = ?1
               AND (?2 IS NULL OR owner = ?2)
             ORDER BY resource_key"
        ))?;
        let rows = stmt.query_map(params![prefix, owner], lease_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn insert_lease(&self, l: &NewLease<'_>) -> Result<()> {
        self.prepare_cached(
            "INSERT INTO locks (resource_key, kind, path, lease_id, owner, provider, fencing_token,
                                acquired_at, expires_at, metadata, holder_connection, token_id,
                                session_id, mode, slots)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )?
        .execute(params![
            l.resource_key,
            l.kind,
            l.path,
            l.lease_id,
            l.owner,
            l.provider,
            l.fencing_token,
            l.acquired_at,
            l.expires_at,
            l.metadata,
            l.holder_connection,
            l.token_id,
            l.session_id,
            l.mode.as_str(),
            l.slots
        ])?;
        Ok(())
    }

    fn extend_lease(&self, resource_key: &str, lease_id: &str, expires_at: i64) -> Result<()> {
        self.prepare_cached(
            "UPDATE locks SET expires_at = ?3 WHERE resource_key = ?1 AND lease_id = ?2",
        )?
        .execute(params![resource_key, lease_id, expires_at])?;
        Ok(())
    }

    fn delete_lease(&self, resource_key: &str, lease_id: &str) -> Result<()> {
        self.prepare_cached("DELETE FROM locks WHERE resource_key = ?1 AND lease_id = ?2")?
            .execute([resource_key, lease_id])?;
        Ok(())
    }

    fn leases_of_session(&self, session_id: &str) -> Result<Vec<LeaseRow>> {
        let mut stmt = self.prepare_cached(&format!(
            "SELECT {LEASE_COLUMNS} FROM locks WHERE session_id = ?1 ORDER BY resource_key"
        ))?;
        let rows = stmt.query_map([session_id], lease_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn last_fencing_token(&self) -> Result<u64> {
        Ok(self
            .prepare_cached("SELECT value FROM meta WHERE name = 'fencing_token'")?
            .query_row([], |r| r.get(0))?)
    }

    fn store_fencing_token(&self, last: u64) -> Result<()> {
        self.prepare_cached("UPDATE meta SET value = ?1 WHERE name = 'fencing_token'")?
            .execute([last])?;
        Ok(())
    }
}
