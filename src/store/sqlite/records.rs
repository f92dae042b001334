//! SQL for versioned records: the current state in `records` and every version in
//! `history`. The rules (versions, tombstones, compares) are in `methods::state`; this is
//! SQLite's side of [`Records`].

use rusqlite::{params, OptionalExtension, Row};

use crate::error::{Error, Result};
use crate::protocol::state::{HistoryEntry, Record, RecordState};
use crate::store::boundary::{NewVersion, Records, StoredVersion, TrimStep};
use crate::store::rows::{HistoryColumns, RecordColumns};

use super::sql::Sql;

/// Every how many versions of a key `history_marks` notes where its version is. History
/// walks at most this many rows past the mark it starts from, so it must equal the
/// spacing migration 0014 gave the marks of existing keys (64), or History would stop
/// short on them: changing it needs a migration that marks every key anew.
pub(super) const HISTORY_MARK_EVERY: u64 = 64;

/// value, version, revision, updated_by, updated_at from column `first` on.
fn record_columns(row: &Row<'_>, first: usize) -> rusqlite::Result<RecordColumns> {
    Ok(RecordColumns {
        value: row.get(first)?,
        version: row.get(first + 1)?,
        revision: row.get(first + 2)?,
        updated_by: row.get(first + 3)?,
        updated_at: row.get(first + 4)?,
    })
}

impl<C: Sql> Records for C {
    fn stored(&self, namespace: &str, key: &str) -> Result<Option<StoredVersion>> {
        Ok(self
            .with(
                "SELECT version, deleted, revision FROM records WHERE namespace = ?1 AND key = ?2",
                |s| {
                    s.query_row(params![namespace, key], |r| {
                        Ok(StoredVersion {
                            version: r.get(0)?,
                            revision: r.get(2)?,
                            deleted: r.get(1)?,
                        })
                    })
                },
            )
            .optional()?)
    }

    fn live(&self, namespace: &str, key: &str) -> Result<Option<RecordState>> {
        let row = self
            .with(
                "SELECT value, version, revision, updated_by, updated_at FROM records
                 WHERE namespace = ?1 AND key = ?2 AND deleted = 0",
                |s| s.query_row(params![namespace, key], |r| record_columns(r, 0)),
            )
            .optional()?;
        row.map(RecordColumns::into_state).transpose()
    }

    fn store_version(&self, v: &NewVersion<'_>) -> Result<()> {
        let deleted = v.value.is_none();
        self.with(
            "INSERT INTO history_log (revision, namespace, key, version, value, updated_by,
                                      updated_at, deleted, prev)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            |s| {
                s.execute(params![
                    v.revision,
                    v.namespace,
                    v.key,
                    v.version,
                    v.value,
                    v.updated_by,
                    v.at_ms,
                    deleted,
                    v.previous_revision
                ])
            },
        )?;
        if v.version.is_multiple_of(HISTORY_MARK_EVERY) {
            self.with(
                "INSERT INTO history_marks (namespace, key, version, revision)
                 VALUES (?1, ?2, ?3, ?4)",
                |s| s.execute(params![v.namespace, v.key, v.version, v.revision]),
            )?;
        }
        // The batch read the key's row already: an update or an insert, not an upsert
        // that looks the key up twice.
        let current = if v.previous_revision.is_some() {
            "UPDATE records SET value = ?3, version = ?4, revision = ?5, updated_by = ?6,
                                updated_at = ?7, deleted = ?8, session_id = ?9
             WHERE namespace = ?1 AND key = ?2"
        } else {
            "INSERT INTO records (namespace, key, value, version, revision, updated_by, updated_at,
                                  deleted, session_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
        };
        let changed = self.with(current, |s| {
            s.execute(params![
                v.namespace,
                v.key,
                v.value,
                v.version,
                v.revision,
                v.updated_by,
                v.at_ms,
                deleted,
                v.session_id
            ])
        })?;
        if changed != 1 {
            return Err(Error::Internal(format!(
                "the stored row of `{}` in `{}` changed within its batch",
                v.key, v.namespace
            )));
        }
        Ok(())
    }

    fn live_versions_page(
        &self,
        namespace: &str,
        after: Option<&str>,
        up_to_revision: u64,
        limit: u64,
    ) -> Result<Vec<(String, u64, u64)>> {
        // Two forms: `?2 IS NULL OR key > ?2` would scan from the namespace's first key
        // (past every tombstone earlier steps left) instead of seeking past `after`.
        let sql = match after {
            Some(_) => {
                "SELECT key, version, revision FROM records
                 WHERE namespace = ?1 AND key > ?2 AND deleted = 0 AND revision <= ?3
                 ORDER BY key LIMIT ?4 + 0"
            }
            None => {
                "SELECT key, version, revision FROM records
                 WHERE namespace = ?1 AND ?2 IS NULL AND deleted = 0 AND revision <= ?3
                 ORDER BY key LIMIT ?4 + 0"
            }
        };
        let mut stmt = self.conn().prepare_cached(sql)?;
        let rows = stmt.query_map(params![namespace, after, up_to_revision, limit], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn trim_history(&self, keep: u64, after_revision: u64, scan: u64) -> Result<TrimStep> {
        // The window of versions looked at, then which of them are `keep` or more behind
        // their key's current row (each a point lookup in `records`).
        let mut stmt = self.conn().prepare_cached(
            "SELECT h.revision, h.namespace, h.key, h.version,
                    h.version + ?3 <= coalesce(r.version, 0)
               FROM (SELECT revision, namespace, key, version FROM history_log
                      WHERE revision > ?1 ORDER BY revision LIMIT ?2 + 0) h
               LEFT JOIN records r ON r.namespace = h.namespace AND r.key = h.key
              ORDER BY h.revision",
        )?;
        let rows = stmt.query_map(params![after_revision, scan, keep], |r| {
            Ok((
                r.get::<_, u64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, u64>(3)?,
                r.get::<_, bool>(4)?,
            ))
        })?;
        let mut step = TrimStep::default();
        let mut trimmed = Vec::new();
        for row in rows {
            let (revision, namespace, key, version, behind) = row?;
            step.scanned += 1;
            step.last = Some(revision);
            if behind {
                trimmed.push((revision, namespace, key, version));
            }
        }
        drop(stmt);
        for (revision, namespace, key, version) in &trimmed {
            self.with("DELETE FROM history_log WHERE revision = ?1", |s| {
                s.execute([revision])
            })?;
            if version.is_multiple_of(HISTORY_MARK_EVERY) {
                self.with(
                    "DELETE FROM history_marks WHERE namespace = ?1 AND key = ?2 AND version = ?3",
                    |s| s.execute(params![namespace, key, version]),
                )?;
            }
        }
        step.removed = trimmed.len() as u64;
        Ok(step)
    }

    fn oldest_version(&self, namespace: &str, key: &str) -> Result<Option<u64>> {
        // From the lowest mark still kept (else the current row) back along `prev` until
        // a version is missing: retention removes a key's versions oldest first, so
        // below the lowest mark at most 63 versions remain.
        let mut stmt = self.conn().prepare_cached(
            "WITH RECURSIVE
               start(revision) AS (
                 SELECT COALESCE(
                   (SELECT revision FROM history_marks WHERE namespace = ?1 AND key = ?2
                     ORDER BY version LIMIT 1),
                   (SELECT revision FROM records WHERE namespace = ?1 AND key = ?2))),
               chain(revision, version, prev) AS (
                 SELECT h.revision, h.version, h.prev FROM history_log h, start
                  WHERE h.revision = start.revision
                 UNION ALL
                 SELECT h.revision, h.version, h.prev FROM chain c, history_log h
                  WHERE h.revision = c.prev)
             SELECT min(version) FROM chain",
        )?;
        Ok(stmt.query_row(params![namespace, key], |r| r.get(0))?)
    }

    /// Live records of a namespace in key order, after `after`, starting with `prefix`; the
    /// flag says whether more may follow.
    fn list(
        &self,
        namespace: &str,
        prefix: &str,
        after: Option<&str>,
        limit: u64,
    ) -> Result<(Vec<Record>, bool)> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT key, value, version, revision, updated_by, updated_at FROM records
             WHERE namespace = ?1 AND deleted = 0 AND key >= ?2 AND (?3 IS NULL OR key > ?3)
               AND substr(key, 1, length(?2)) = ?2
             ORDER BY key LIMIT ?4 + 0",
        )?;
        let rows = stmt.query_map(params![namespace, prefix, after, limit + 1], |r| {
            Ok((r.get::<_, String>(0)?, record_columns(r, 1)?))
        })?;
        let mut records = Vec::new();
        for row in rows {
            let (key, state) = row?;
            records.push(Record {
                namespace: namespace.to_string(),
                key,
                state: state.into_state()?,
            });
        }
        let more = records.len() as u64 > limit;
        records.truncate(limit as usize);
        Ok((records, more))
    }

    /// Versions of one key, newest first.
    fn history(
        &self,
        namespace: &str,
        key: &str,
        before_version: Option<u64>,
        limit: u64,
    ) -> Result<Vec<HistoryEntry>> {
        // One statement, so one snapshot: from the mark at or above the newest version
        // wanted (else the current row), back along `prev` until `limit` versions are found.
        let mut stmt = self.conn().prepare_cached(
            "WITH RECURSIVE
               head(version, revision) AS (
                 SELECT version, revision FROM records WHERE namespace = ?1 AND key = ?2),
               wanted(version) AS (
                 SELECT CASE WHEN ?3 IS NULL OR ?3 > version THEN version ELSE ?3 - 1 END FROM head),
               start(revision) AS (
                 SELECT COALESCE(
                   (SELECT m.revision FROM history_marks m, wanted w
                     WHERE m.namespace = ?1 AND m.key = ?2 AND m.version >= w.version
                     ORDER BY m.version LIMIT 1),
                   (SELECT revision FROM head))),
               chain(revision, version, prev, steps) AS (
                 SELECT h.revision, h.version, h.prev, 1 FROM history_log h, start
                  WHERE h.revision = start.revision
                 UNION ALL
                 SELECT h.revision, h.version, h.prev, c.steps + 1 FROM chain c, history_log h
                  WHERE h.revision = c.prev AND c.steps < ?4 + ?5)
             SELECT h.version, h.value, h.updated_by, h.updated_at, h.revision, h.deleted
               FROM chain c JOIN history_log h ON h.revision = c.revision, wanted w
              WHERE c.version <= w.version
              ORDER BY c.version DESC LIMIT ?4 + 0",
        )?;
        let walk = HISTORY_MARK_EVERY as i64;
        let rows = stmt.query_map(params![namespace, key, before_version, limit, walk], |r| {
            Ok(HistoryColumns {
                version: r.get(0)?,
                value: r.get(1)?,
                updated_by: r.get(2)?,
                updated_at: r.get(3)?,
                revision: r.get(4)?,
                deleted: r.get(5)?,
            })
        })?;
        let mut history = Vec::new();
        for row in rows {
            history.push(row?.into_entry()?);
        }
        Ok(history)
    }

    /// Every live record (of one namespace, or all), and the head revision of the snapshot.
    fn export(
        &self,
        namespace: Option<&str>,
        after: Option<(&str, &str)>,
        limit: u64,
    ) -> Result<(Vec<Record>, u64)> {
        let revision = crate::store::boundary::Meta::head_revision(self)? as u64;
        let mut stmt = self.conn().prepare_cached(
            "SELECT namespace, key, value, version, revision, updated_by, updated_at FROM records
             WHERE deleted = 0 AND (?1 IS NULL OR namespace = ?1)
               AND (?2 IS NULL OR namespace > ?2 OR (namespace = ?2 AND key > ?3))
             ORDER BY namespace, key LIMIT ?4 + 0",
        )?;
        let (after_ns, after_key) = after.unzip();
        let rows = stmt.query_map(params![namespace, after_ns, after_key, limit], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                record_columns(r, 2)?,
            ))
        })?;
        let mut records = Vec::new();
        for row in rows {
            let (namespace, key, state) = row?;
            records.push(Record {
                namespace,
                key,
                state: state.into_state()?,
            });
        }
        Ok((records, revision))
    }

    fn counts(&self) -> Result<(u64, u64)> {
        Ok(self.conn().query_row(
            "SELECT COALESCE(SUM(deleted = 0), 0), COALESCE(SUM(deleted = 1), 0) FROM records",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?)
    }

    fn keys_of_session(&self, session_id: &str) -> Result<Vec<(String, String)>> {
        Ok(self.with(
            "SELECT namespace, key FROM records WHERE session_id = ?1 AND deleted = 0
                 ORDER BY namespace, key",
            |s| {
                s.query_map([session_id], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            },
        )?)
    }
}
