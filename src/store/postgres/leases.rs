//! PostgreSQL's side of [`Leases`]: lock leases (`locks`), the last outcome of each key
//! (`lock_outcomes`) and the fencing counter (same meaning as SQLite's `store::leases`).

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::clock::format_ms;
use crate::error::Result;
use crate::protocol::locks::{LockMode, Previous};
use crate::store::boundary::{LeaseEnd, LeaseRow, Leases, NewLease};

use super::{i, u, Lit, PgConn};

const LEASE_COLUMNS: &str = "resource_key, lease_id, owner, provider, fencing_token, acquired_at, expires_at, metadata, holder_connection, token_id, mode, slots";

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
        mode: match r.get::<_, &str>(10) {
            "shared" => LockMode::Shared,
            _ => LockMode::Exclusive,
        },
        slots: r.get::<_, Option<i64>>(11).map(u),
    }
}

impl PgConn {
    /// The leases `sql` (the rest of a query over `locks`) finds.
    fn leases_where(&self, sql: &str, args: &[&(dyn ToSql + Sync)]) -> Result<Vec<LeaseRow>> {
        let rows = self.query(&format!("SELECT {LEASE_COLUMNS} FROM locks {sql}"), args)?;
        Ok(rows.iter().map(lease_row).collect())
    }

    fn first_lease(&self, sql: &str, args: &[&(dyn ToSql + Sync)]) -> Result<Option<LeaseRow>> {
        let row = self.query_opt(&format!("SELECT {LEASE_COLUMNS} FROM locks {sql}"), args)?;
        Ok(row.as_ref().map(lease_row))
    }
}

/// The leases that could conflict with one `file:`/`dir:` key, read in one round trip by
/// `holders` (which a conflict check asks first): those on the key, on its path, `dir:`
/// leases on its ancestors and, for a `dir:` key, those inside it. The lookups that follow
/// are answered from it until the next write.
pub struct Lookup {
    path: String,
    ancestors: Vec<String>,
    inside: bool,
    /// Each lease with its kind and path, in fencing-token order.
    rows: Vec<(String, String, LeaseRow)>,
}

impl Lookup {
    fn first(&self, exclusive_only: bool, wanted: impl Fn(&str, &str) -> bool) -> Option<LeaseRow> {
        self.rows
            .iter()
            .find(|(kind, path, row)| {
                wanted(kind, path) && (!exclusive_only || row.mode == LockMode::Exclusive)
            })
            .map(|(_, _, row)| row.clone())
    }
}

/// The kind and path of a `file:`/`dir:` key (canonical, as the rules pass it).
fn hierarchical(resource_key: &str) -> Option<(&str, &str)> {
    let (kind, path) = resource_key.split_once(':')?;
    matches!(kind, "file" | "dir").then_some((kind, path))
}

impl Leases for PgConn {
    fn holders(&self, resource_key: &str) -> Result<Vec<LeaseRow>> {
        let Some((kind, path)) = hierarchical(resource_key) else {
            return self.leases_where(
                "WHERE resource_key = $1 ORDER BY fencing_token",
                &[&resource_key],
            );
        };
        let ancestors: Vec<String> = path
            .char_indices()
            .filter(|(_, c)| *c == '/')
            .map(|(i, _)| path[..i].to_string())
            .collect();
        let inside = kind == "dir";
        let rows = self.query(
            &format!(
                "SELECT {LEASE_COLUMNS}, kind, path FROM locks
                 WHERE resource_key = $1 OR path = $2 OR (kind = 'dir' AND path = ANY($3))
                    OR ($4 AND path > $5 AND path < $6)
                 ORDER BY fencing_token"
            ),
            &[
                &resource_key,
                &path,
                &ancestors,
                &inside,
                &format!("{path}/"),
                &format!("{path}0"),
            ],
        )?;
        let rows: Vec<(String, String, LeaseRow)> = rows
            .iter()
            .map(|r| {
                (
                    r.get(12),
                    r.get::<_, Option<String>>(13).unwrap_or_default(),
                    lease_row(r),
                )
            })
            .collect();
        let holders = rows
            .iter()
            .filter(|(_, _, row)| row.resource_key == resource_key)
            .map(|(_, _, row)| row.clone())
            .collect();
        *self.lookup.borrow_mut() = Some(Lookup {
            path: path.to_string(),
            ancestors,
            inside,
            rows,
        });
        Ok(holders)
    }

    fn lease_by_id(&self, lease_id: &str) -> Result<Option<LeaseRow>> {
        self.first_lease("WHERE lease_id = $1", &[&lease_id])
    }

    fn lease_on_path(&self, path: &str, exclusive_only: bool) -> Result<Option<LeaseRow>> {
        if let Some(lookup) = self.lookup.borrow().as_ref().filter(|l| l.path == path) {
            return Ok(lookup.first(exclusive_only, |_, p| p == path));
        }
        self.first_lease(
            "WHERE path = $1 AND (NOT $2 OR mode = 'exclusive') LIMIT 1",
            &[&path, &exclusive_only],
        )
    }

    fn dir_lease_at(&self, path: &str, exclusive_only: bool) -> Result<Option<LeaseRow>> {
        let cached = self.lookup.borrow();
        if let Some(lookup) = cached
            .as_ref()
            .filter(|l| l.ancestors.iter().any(|a| a == path))
        {
            return Ok(lookup.first(exclusive_only, |k, p| k == "dir" && p == path));
        }
        drop(cached);
        self.first_lease(
            "WHERE path = $1 AND kind = 'dir' AND (NOT $2 OR mode = 'exclusive') LIMIT 1",
            &[&path, &exclusive_only],
        )
    }

    fn lease_inside(&self, path: &str, exclusive_only: bool) -> Result<Option<LeaseRow>> {
        // Every path strictly inside `path/`: from "path/" up to "path0" ('0' follows '/').
        let (low, high) = (format!("{path}/"), format!("{path}0"));
        let cached = self.lookup.borrow();
        if let Some(lookup) = cached.as_ref().filter(|l| l.inside && l.path == path) {
            return Ok(lookup.first(exclusive_only, |_, p| p > low.as_str() && p < high.as_str()));
        }
        drop(cached);
        self.first_lease(
            "WHERE path > $1 AND path < $2 AND (NOT $3 OR mode = 'exclusive') LIMIT 1",
            &[&low, &high, &exclusive_only],
        )
    }

    fn leases(&self, prefix: &str, owner: Option<&str>) -> Result<Vec<LeaseRow>> {
        self.leases_where(
            "WHERE resource_key >= $1 AND substr(resource_key, 1, length($1)) = $1
               AND ($2::text IS NULL OR owner = $2)
             ORDER BY resource_key",
            &[&prefix, &owner],
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

    fn extend_lease(&self, lease_id: &str, expires_at: i64) -> Result<()> {
        self.touch(super::LOCKS).defer(format!(
            "UPDATE locks SET expires_at = {expires_at} WHERE lease_id = {}",
            lease_id.lit()
        ));
        Ok(())
    }

    fn delete_lease(&self, lease_id: &str) -> Result<()> {
        self.touch(super::LOCKS).defer(format!(
            "DELETE FROM locks WHERE lease_id = {}",
            lease_id.lit()
        ));
        Ok(())
    }

    fn previous(&self, resource_key: &str) -> Result<Option<Previous>> {
        let row = self.query_opt(
            "SELECT outcome, owner, at, moved_to, note FROM lock_outcomes WHERE resource_key = $1",
            &[&resource_key],
        )?;
        Ok(row.map(|r| Previous {
            outcome: r.get(0),
            owner: r.get(1),
            at: format_ms(r.get(2)),
            moved_to: r.get(3),
            note: r.get(4),
        }))
    }

    fn record_end(&self, end: &LeaseEnd<'_>) -> Result<()> {
        self.touch(super::LOCKS).defer(format!(
            "INSERT INTO lock_outcomes (resource_key, outcome, owner, at, moved_to, note)
             VALUES ({}, {}, {}, {}, {}, {})
             ON CONFLICT (resource_key) DO UPDATE SET outcome = EXCLUDED.outcome,
               owner = EXCLUDED.owner, at = EXCLUDED.at, moved_to = EXCLUDED.moved_to,
               note = EXCLUDED.note",
            end.resource_key.lit(),
            end.outcome.lit(),
            end.owner.lit(),
            end.at_ms,
            end.moved_to.lit(),
            end.note.lit(),
        ));
        Ok(())
    }

    fn next_fencing_token(&self) -> Result<u64> {
        // In the writer's batch the counter was read when it began (no other writer moves
        // it while the batch holds the lock): count on from it, and store the last one.
        if let Some(last) = self.fence_hint() {
            let next = last + 1;
            self.set_fence_hint(next);
            self.touch(super::LOCKS).defer(format!(
                "UPDATE meta SET value = {next} WHERE name = 'fencing_token'"
            ));
            return Ok(u(next));
        }
        let row = self.touch(super::LOCKS).query_write(
            "UPDATE meta SET value = value + 1 WHERE name = 'fencing_token' RETURNING value",
            &[],
        )?;
        Ok(row.first().map_or(0, |r| u(r.get(0))))
    }

    fn leases_of_session(&self, session_id: &str) -> Result<Vec<LeaseRow>> {
        self.leases_where(
            "WHERE session_id = $1 ORDER BY resource_key",
            &[&session_id],
        )
    }
}
