//! SQL for resource-lock leases (`locks`), the last outcome of each key
//! (`lock_outcomes`) and the fencing counter: SQLite's side of [`Leases`]. The rules
//! (conflicts, the `dir:` hierarchy, waiting, fencing) are in `methods::locks`.

use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::clock::format_ms;
use crate::error::Result;
use crate::protocol::locks::{LockMode, Previous};

use super::boundary::{LeaseEnd, LeaseRow, Leases, NewLease};

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

    fn extend_lease(&self, lease_id: &str, expires_at: i64) -> Result<()> {
        self.prepare_cached("UPDATE locks SET expires_at = ?2 WHERE lease_id = ?1")?
            .execute(params![lease_id, expires_at])?;
        Ok(())
    }

    fn delete_lease(&self, lease_id: &str) -> Result<()> {
        self.prepare_cached("DELETE FROM locks WHERE lease_id = ?1")?
            .execute([lease_id])?;
        Ok(())
    }

    fn previous(&self, resource_key: &str) -> Result<Option<Previous>> {
        Ok(self
            .prepare_cached(
                "SELECT outcome, owner, at, moved_to, note FROM lock_outcomes WHERE resource_key = ?1",
            )?
            .query_row([resource_key], |r| {
                Ok(Previous {
                    outcome: r.get(0)?,
                    owner: r.get(1)?,
                    at: format_ms(r.get(2)?),
                    moved_to: r.get(3)?,
                    note: r.get(4)?,
                })
            })
            .optional()?)
    }

    fn record_end(&self, end: &LeaseEnd<'_>) -> Result<()> {
        self.prepare_cached(
            "INSERT OR REPLACE INTO lock_outcomes (resource_key, outcome, owner, at, moved_to, note)
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

    fn leases_of_session(&self, session_id: &str) -> Result<Vec<LeaseRow>> {
        let mut stmt = self.prepare_cached(&format!(
            "SELECT {LEASE_COLUMNS} FROM locks WHERE session_id = ?1 ORDER BY resource_key"
        ))?;
        let rows = stmt.query_map([session_id], lease_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn next_fencing_token(&self) -> Result<u64> {
        // Two plain statements: SQLite gathers RETURNING's output in a temporary table of
        // its own, which cost more than the write it reports.
        self.prepare_cached("UPDATE meta SET value = value + 1 WHERE name = 'fencing_token'")?
            .execute([])?;
        Ok(self
            .prepare_cached("SELECT value FROM meta WHERE name = 'fencing_token'")?
            .query_row([], |r| r.get(0))?)
    }
}
