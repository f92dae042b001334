//! SQL for resource-lock leases (`locks`), the last outcome of each key
//! (`lock_outcomes`) and the fencing counter: SQLite's side of [`Leases`], and of
//! [`Outcomes`](crate::store::boundary::Outcomes) through [`HeldOutcomes`]. The rules (conflicts,
//! the `dir:` hierarchy, waiting, fencing) are in `methods::locks`.
//!
//! Outcomes are stored in batches. Keyed by resource key, `lock_outcomes` took one page
//! per key a commit released, and each page is a 4 KiB frame in the write-ahead log: on
//! short locks that was a third of what a commit wrote. A release's outcome is held in
//! the writer's memory instead ([`HeldOutcomes`]; a table in SQLite's temporary database
//! did the same at about 25 us per commit for that database's own journal and commit).
//! The journal event of the release, expiry or break (`lock.released`, `lock.expired`,
//! `lock.broken`) carries
//! the same facts and is durable with the batch. The writer stores the held outcomes in
//! `lock_outcomes` inside a batch once [`OUTCOMES_HELD`] are waiting, once the journal has
//! run [`OUTCOMES_REPLAY_SPAN`] revisions past `lock_outcomes_through` (the revision
//! through which `lock_outcomes` is complete), before the journal is compacted, and at
//! shutdown. It looks at the journal's lead every few hundred changed rows, so that may
//! run past its bound by that much. The journal is what memory answers to: after a batch
//! rolls back, the next one begins by reading the held outcomes again from the events
//! after `lock_outcomes_through`, and opening the database stores those
//! ([`recover_outcomes`]), so a crash loses none. Only the writer reads outcomes.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::error::Result;
use crate::protocol::locks::Previous;
use crate::store::boundary::{LeaseEnd, LeaseRow, Leases, NewLease};
use crate::store::rows::{lock_mode, previous};

use super::sql::Sql;

/// Held outcomes that make the writer store them (the next commit does).
pub(super) const OUTCOMES_HELD: usize = 512;

/// How far (in revisions) the journal may run past `lock_outcomes_through` before the
/// writer stores what is held and moves the mark: opening the database replays at most
/// about this many events.
pub(super) const OUTCOMES_REPLAY_SPAN: i64 = 8_192;

/// The outcomes the journal events after `lock_outcomes_through` carry, in journal order
/// (a later end of the same key replaces an earlier one).
const OUTCOMES_AFTER_MARK: &str = "SELECT resource_key, json_extract(data, '$.outcome'), actor, at,
            json_extract(data, '$.moved_to'), json_extract(data, '$.note'),
            coalesce(json_extract(data, '$.fencing_token'), 0)
     FROM events
     WHERE seq > (SELECT value FROM meta WHERE name = 'lock_outcomes_through')
       AND type IN ('lock.released', 'lock.expired', 'lock.broken')
     ORDER BY seq";

/// Marks `lock_outcomes` complete through the head revision.
const MARK_STORED: &str = concat!(
    "UPDATE meta SET value = ",
    super::meta::head_revision_sql!(),
    " WHERE name = 'lock_outcomes_through'"
);

/// Stores the outcomes of the journal events after `lock_outcomes_through` (those a crash
/// left held), in journal order.
pub(super) fn recover_outcomes(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "BEGIN IMMEDIATE;
         INSERT INTO lock_outcomes (resource_key, outcome, owner, at, moved_to, note, fencing_token)
             {OUTCOMES_AFTER_MARK}
             {UPSERT_OUTCOME};
         {MARK_STORED};
         COMMIT;"
    ))
}

/// The last outcome replaces the key's earlier one; the largest ended token is kept.
macro_rules! upsert_outcome {
    () => {
        " ON CONFLICT (resource_key) DO UPDATE SET outcome = excluded.outcome,
           owner = excluded.owner, at = excluded.at, moved_to = excluded.moved_to,
           note = excluded.note, fencing_token = max(fencing_token, excluded.fencing_token)"
    };
}
const UPSERT_OUTCOME: &str = upsert_outcome!();

/// How a lease ended, held until stored.
struct Held {
    outcome: String,
    owner: String,
    at_ms: i64,
    moved_to: Option<String>,
    note: Option<String>,
    /// The largest fencing token of the key's leases ended while held.
    fencing_token: u64,
}

impl Held {
    /// From the columns outcome, owner, at, moved_to, note and fencing_token, in that
    /// order from `first`.
    fn from_row(r: &Row<'_>, first: usize) -> rusqlite::Result<Held> {
        Ok(Held {
            outcome: r.get(first)?,
            owner: r.get(first + 1)?,
            at_ms: r.get(first + 2)?,
            moved_to: r.get(first + 3)?,
            note: r.get(first + 4)?,
            fencing_token: r.get(first + 5)?,
        })
    }

    fn previous(&self) -> Previous {
        previous(
            self.outcome.clone(),
            self.owner.clone(),
            self.at_ms,
            self.moved_to.clone(),
            self.note.clone(),
        )
    }
}

/// The outcomes the writer holds back from `lock_outcomes`, the latest of each key.
#[derive(Default)]
pub(super) struct HeldOutcomes {
    held: RefCell<HashMap<String, Held>>,
    /// A batch rolled back: memory may hold outcomes it recorded, or lack ones it stored.
    stale: Cell<bool>,
    /// Outcomes recorded so far.
    recorded: Cell<u64>,
}

impl HeldOutcomes {
    pub(super) fn len(&self) -> usize {
        self.held.borrow().len()
    }

    /// Outcomes recorded so far (a request that recorded one has written).
    pub(super) fn recorded(&self) -> u64 {
        self.recorded.get()
    }

    /// The batch that began rolled back.
    pub(super) fn rolled_back(&self) {
        self.stale.set(true);
    }

    /// At the start of a batch, after a rollback: reads the held outcomes again from the
    /// journal.
    pub(super) fn refresh(&self, conn: &impl Sql) -> Result<()> {
        if !self.stale.get() {
            return Ok(());
        }
        let held = conn.with(OUTCOMES_AFTER_MARK, |stmt| {
            let mut rows = stmt.query([])?;
            let mut held = HashMap::new();
            while let Some(r) = rows.next()? {
                let mut h = Held::from_row(r, 1)?;
                let key: String = r.get(0)?;
                if let Some(earlier) = held.get(&key) {
                    let earlier: &Held = earlier;
                    h.fencing_token = h.fencing_token.max(earlier.fencing_token);
                }
                held.insert(key, h);
            }
            Ok(held)
        })?;
        *self.held.borrow_mut() = held;
        self.stale.set(false);
        Ok(())
    }

    pub(super) fn previous(&self, conn: &impl Sql, resource_key: &str) -> Result<Option<Previous>> {
        if let Some(h) = self.held.borrow().get(resource_key) {
            return Ok(Some(h.previous()));
        }
        let stored = conn
            .with(
                "SELECT outcome, owner, at, moved_to, note, fencing_token FROM lock_outcomes WHERE resource_key = ?1",
                |s| s.query_row([resource_key], |r| Held::from_row(r, 0)),
            )
            .optional()?;
        Ok(stored.as_ref().map(Held::previous))
    }

    /// The largest fencing token of the leases on `resource_key` that ended: held or stored.
    pub(super) fn latest_ended_token(&self, conn: &impl Sql, resource_key: &str) -> Result<u64> {
        let held = self
            .held
            .borrow()
            .get(resource_key)
            .map_or(0, |h| h.fencing_token);
        let stored: Option<u64> = conn
            .with(
                "SELECT fencing_token FROM lock_outcomes WHERE resource_key = ?1",
                |s| s.query_row([resource_key], |r| r.get(0)),
            )
            .optional()?;
        Ok(held.max(stored.unwrap_or(0)))
    }

    pub(super) fn record(&self, end: &LeaseEnd<'_>) {
        let mut held = self.held.borrow_mut();
        let earlier = held
            .get(end.resource_key)
            .map_or(0, |h: &Held| h.fencing_token);
        held.insert(
            end.resource_key.to_string(),
            Held {
                outcome: end.outcome.to_string(),
                owner: end.owner.to_string(),
                at_ms: end.at_ms,
                moved_to: end.moved_to.map(str::to_string),
                note: end.note.map(str::to_string),
                fencing_token: earlier.max(end.fencing_token),
            },
        );
        self.recorded.set(self.recorded.get() + 1);
    }

    /// Inside the writer's transaction: stores the held outcomes in `lock_outcomes` (in key
    /// order, page by page) and marks it complete through the head revision. Memory lets
    /// them go now; if the batch rolls back, the next one reads them again.
    pub(super) fn store(&self, conn: &impl Sql) -> Result<()> {
        let mut held: Vec<(String, Held)> = self.held.borrow_mut().drain().collect();
        held.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        conn.with(
            concat!(
                "INSERT INTO lock_outcomes (resource_key, outcome, owner, at, moved_to, note, fencing_token)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                upsert_outcome!()
            ),
            |insert| {
                for (key, h) in &held {
                    insert.execute(params![
                        key,
                        h.outcome,
                        h.owner,
                        h.at_ms,
                        h.moved_to,
                        h.note,
                        h.fencing_token
                    ])?;
                }
                Ok(())
            },
        )?;
        conn.with(MARK_STORED, |s| s.execute([]))?;
        Ok(())
    }
}

const LEASE_COLUMNS: &str = "resource_key, lease_id, owner, provider, fencing_token, acquired_at, expires_at, metadata, holder_connection, token_id, mode, slots, session_id";

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
        mode: lock_mode(r.get_ref(10)?.as_str()?),
        slots: r.get(11)?,
        session_id: r.get(12)?,
    })
}

impl<C: Sql> Leases for C {
    fn leases(&self, prefix: &str, owner: Option<&str>) -> Result<Vec<LeaseRow>> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {LEASE_COLUMNS} FROM locks
             WHERE resource_key >= ?1 AND substr(resource_key, 1, length(?1)) = ?1
               AND (?2 IS NULL OR owner = ?2)
             ORDER BY resource_key"
        ))?;
        let rows = stmt.query_map(params![prefix, owner], lease_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn lease_page(
        &self,
        prefix: &str,
        owner: Option<&str>,
        after: Option<(&str, u64)>,
        limit: u64,
    ) -> Result<Vec<LeaseRow>> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {LEASE_COLUMNS} FROM locks
             WHERE resource_key >= ?1 AND substr(resource_key, 1, length(?1)) = ?1
               AND (?2 IS NULL OR owner = ?2)
               AND (?3 IS NULL OR resource_key > ?3 OR (resource_key = ?3 AND fencing_token > ?4))
             ORDER BY resource_key, fencing_token LIMIT ?5 + 0"
        ))?;
        let (after_key, after_token) = match after {
            Some((key, token)) => (Some(key), token as i64),
            None => (None, 0),
        };
        let rows = stmt.query_map(
            params![prefix, owner, after_key, after_token, limit],
            lease_row,
        )?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn insert_lease(&self, l: &NewLease<'_>) -> Result<()> {
        self.with(
            "INSERT INTO locks (resource_key, kind, path, lease_id, owner, provider, fencing_token,
                                acquired_at, expires_at, metadata, holder_connection, token_id,
                                session_id, mode, slots)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            |s| {
                s.execute(params![
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
                ])
            },
        )?;
        Ok(())
    }

    fn extend_lease(&self, resource_key: &str, lease_id: &str, expires_at: i64) -> Result<()> {
        self.with(
            "UPDATE locks SET expires_at = ?3 WHERE resource_key = ?1 AND lease_id = ?2",
            |s| s.execute(params![resource_key, lease_id, expires_at]),
        )?;
        Ok(())
    }

    fn delete_lease(&self, resource_key: &str, lease_id: &str) -> Result<()> {
        self.with(
            "DELETE FROM locks WHERE resource_key = ?1 AND lease_id = ?2",
            |s| s.execute([resource_key, lease_id]),
        )?;
        Ok(())
    }

    fn leases_of_session(&self, session_id: &str) -> Result<Vec<LeaseRow>> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {LEASE_COLUMNS} FROM locks WHERE session_id = ?1 ORDER BY resource_key"
        ))?;
        let rows = stmt.query_map([session_id], lease_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn last_fencing_token(&self) -> Result<u64> {
        Ok(
            self.with("SELECT value FROM meta WHERE name = 'fencing_token'", |s| {
                s.query_row([], |r| r.get(0))
            })?,
        )
    }

    fn store_fencing_token(&self, last: u64) -> Result<()> {
        self.with(
            "UPDATE meta SET value = max(value, ?1) WHERE name = 'fencing_token'",
            |s| s.execute([last]),
        )?;
        Ok(())
    }
}
