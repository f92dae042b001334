//! PostgreSQL's side of [`Records`]: the current state in `records`, every version in
//! `history` (same meaning as SQLite's `store::sqlite::records`).

use tokio_postgres::Row;

use crate::error::Result;
use crate::protocol::state::{HistoryEntry, Record, RecordState};
use crate::store::boundary::{NewVersion, Records, StoredVersion, TrimStep};
use crate::store::rows::{HistoryColumns, RecordColumns};

use super::{i, u, Lit, PgConn};

/// value, version, revision, updated_by, updated_at from column `first` on.
fn record_state(row: &Row, first: usize) -> Result<RecordState> {
    RecordColumns {
        value: row.get(first),
        version: u(row.get(first + 1)),
        revision: u(row.get(first + 2)),
        updated_by: row.get(first + 3),
        updated_at: row.get(first + 4),
    }
    .into_state()
}

impl Records for PgConn {
    fn stored(&self, namespace: &str, key: &str) -> Result<Option<StoredVersion>> {
        let row = self.query_opt(
            "SELECT version, deleted, revision FROM records WHERE namespace = $1 AND key = $2",
            &[&namespace, &key],
        )?;
        Ok(row.map(|r| StoredVersion {
            version: u(r.get(0)),
            revision: u(r.get(2)),
            deleted: r.get(1),
        }))
    }

    fn live(&self, namespace: &str, key: &str) -> Result<Option<RecordState>> {
        self.query_opt(
            "SELECT value, version, revision, updated_by, updated_at FROM records
             WHERE namespace = $1 AND key = $2 AND NOT deleted",
            &[&namespace, &key],
        )?
        .map(|r| record_state(&r, 0))
        .transpose()
    }

    fn store_version(&self, v: &NewVersion<'_>) -> Result<()> {
        // Both rows in one statement, deferred: it goes out with the next one.
        let (namespace, key) = (v.namespace.lit(), v.key.lit());
        let (value, version, revision) = (v.value.lit(), i(v.version), v.revision);
        let (by, at, deleted) = (v.updated_by.lit(), v.at_ms, v.value.is_none().lit());
        let session = v.session_id.lit();
        self.defer(format!(
            "WITH current AS (
                 INSERT INTO records (namespace, key, value, version, revision, updated_by,
                                      updated_at, deleted, session_id)
                 VALUES ({namespace}, {key}, {value}, {version}, {revision}, {by}, {at},
                         {deleted}, {session})
                 ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value,
                   version = EXCLUDED.version, revision = EXCLUDED.revision,
                   updated_by = EXCLUDED.updated_by, updated_at = EXCLUDED.updated_at,
                   deleted = EXCLUDED.deleted, session_id = EXCLUDED.session_id
             )
             INSERT INTO history (namespace, key, version, value, revision, updated_by,
                                  updated_at, deleted)
             VALUES ({namespace}, {key}, {version}, {value}, {revision}, {by}, {at}, {deleted})"
        ));
        Ok(())
    }

    fn live_versions_page(
        &self,
        namespace: &str,
        after: Option<&str>,
        up_to_revision: u64,
        limit: u64,
    ) -> Result<Vec<(String, u64, u64)>> {
        // Past `after` by an index range (an `IS NULL OR` form would scan from the start).
        let rows = self.query(
            "SELECT key, version, revision FROM records
             WHERE namespace = $1 AND key > COALESCE($2::text, '') AND NOT deleted
               AND revision <= $3
             ORDER BY key LIMIT $4",
            &[&namespace, &after, &i(up_to_revision), &i(limit)],
        )?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), u(r.get(1)), u(r.get(2))))
            .collect())
    }

    fn trim_history(&self, keep: u64, after_revision: u64, scan: u64) -> Result<TrimStep> {
        // The window through `history_by_revision`; the versions in it `keep` or more
        // behind their key's current row go, in the same statement.
        let row = self.query_one(
            "WITH seen AS (
                 SELECT namespace, key, version, revision FROM history
                  WHERE revision > $1 ORDER BY revision LIMIT $2),
             gone AS (
                 DELETE FROM history h USING seen s, records r
                  WHERE h.namespace = s.namespace AND h.key = s.key AND h.version = s.version
                    AND r.namespace = s.namespace AND r.key = s.key
                    AND s.version + $3 <= r.version
                 RETURNING 1)
             SELECT (SELECT count(*) FROM seen), (SELECT max(revision) FROM seen),
                    (SELECT count(*) FROM gone)",
            &[&i(after_revision), &i(scan), &i(keep)],
        )?;
        let removed = u(row.get(2));
        // Rows removed are changes: the batch commits them as it does any write.
        self.changed.set(self.changed.get() + removed);
        Ok(TrimStep {
            scanned: u(row.get(0)),
            last: row.get::<_, Option<i64>>(1).map(u),
            removed,
        })
    }

    fn oldest_version(&self, namespace: &str, key: &str) -> Result<Option<u64>> {
        let row = self.query_one(
            "SELECT min(version) FROM history WHERE namespace = $1 AND key = $2",
            &[&namespace, &key],
        )?;
        Ok(row.get::<_, Option<i64>>(0).map(u))
    }

    fn list(
        &self,
        namespace: &str,
        prefix: &str,
        after: Option<&str>,
        limit: u64,
    ) -> Result<(Vec<Record>, bool)> {
        let rows = self.query(
            "SELECT key, value, version, revision, updated_by, updated_at FROM records
             WHERE namespace = $1 AND NOT deleted AND key >= $2
               AND ($3::text IS NULL OR key > $3)
               AND substr(key, 1, length($2)) = $2
             ORDER BY key LIMIT $4",
            &[&namespace, &prefix, &after, &i(limit.saturating_add(1))],
        )?;
        let mut records = Vec::with_capacity(rows.len());
        for r in &rows {
            records.push(Record {
                namespace: namespace.to_string(),
                key: r.get(0),
                state: record_state(r, 1)?,
            });
        }
        let more = records.len() as u64 > limit;
        records.truncate(limit as usize);
        Ok((records, more))
    }

    fn history(
        &self,
        namespace: &str,
        key: &str,
        before_version: Option<u64>,
        limit: u64,
    ) -> Result<Vec<HistoryEntry>> {
        let rows = self.query(
            "SELECT version, value, updated_by, updated_at, revision, deleted FROM history
             WHERE namespace = $1 AND key = $2 AND ($3::bigint IS NULL OR version < $3)
             ORDER BY version DESC LIMIT $4",
            &[&namespace, &key, &before_version.map(i), &i(limit)],
        )?;
        rows.iter()
            .map(|r| {
                HistoryColumns {
                    version: u(r.get(0)),
                    value: r.get(1),
                    updated_by: r.get(2),
                    updated_at: r.get(3),
                    revision: u(r.get(4)),
                    deleted: r.get(5),
                }
                .into_entry()
            })
            .collect()
    }

    fn export(
        &self,
        namespace: Option<&str>,
        after: Option<(&str, &str)>,
        limit: u64,
    ) -> Result<(Vec<Record>, u64)> {
        let revision: i64 = self
            .query_one("SELECT value FROM meta WHERE name = 'revision'", &[])?
            .get(0);
        let (after_ns, after_key) = after.unzip();
        let rows = self.query(
            "SELECT namespace, key, value, version, revision, updated_by, updated_at FROM records
             WHERE NOT deleted AND ($1::text IS NULL OR namespace = $1)
               AND ($2::text IS NULL OR namespace > $2 OR (namespace = $2 AND key > $3))
             ORDER BY namespace, key LIMIT $4",
            &[&namespace, &after_ns, &after_key, &(limit as i64)],
        )?;
        let mut records = Vec::with_capacity(rows.len());
        for r in &rows {
            records.push(Record {
                namespace: r.get(0),
                key: r.get(1),
                state: record_state(r, 2)?,
            });
        }
        Ok((records, u(revision)))
    }

    fn counts(&self) -> Result<(u64, u64)> {
        let r = self.query_one(
            "SELECT count(*) FILTER (WHERE NOT deleted), count(*) FILTER (WHERE deleted)
             FROM records",
            &[],
        )?;
        Ok((u(r.get(0)), u(r.get(1))))
    }

    fn keys_of_session(&self, session_id: &str) -> Result<Vec<(String, String)>> {
        let rows = self.query(
            "SELECT namespace, key FROM records WHERE session_id = $1 AND NOT deleted
             ORDER BY namespace, key",
            &[&session_id],
        )?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}
