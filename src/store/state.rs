//! SQL for versioned records: the current state in `records`, every version in `history`,
//! and one journal event per write, all in the caller's transaction.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::value::RawValue;

use crate::clock::format_ms;
use crate::error::{Error, Result};
use crate::protocol::state::{DeleteResult, HistoryEntry, Record, RecordState, TxnCompare};

use super::journal::{self, NewEvent};
use super::writer::WriteCtx;

/// What a write produced.
pub struct Written {
    pub version: u64,
    pub revision: u64,
}

/// A key's row, live or tombstone.
struct Current {
    version: u64,
    deleted: bool,
    value: Option<String>,
    updated_by: Option<String>,
    updated_at: i64,
}

impl Current {
    /// The version a compare sees: 0 when the key is absent or deleted.
    fn live_version(&self) -> u64 {
        if self.deleted {
            0
        } else {
            self.version
        }
    }
}

/// value, version, revision, updated_by, updated_at
type StateColumns = (Option<String>, u64, u64, Option<String>, i64);

fn json(text: Option<String>) -> Result<Box<RawValue>> {
    Ok(RawValue::from_string(
        text.unwrap_or_else(|| "null".into()),
    )?)
}

fn record_state(row: &Row<'_>, first: usize) -> rusqlite::Result<StateColumns> {
    Ok((
        row.get(first)?,
        row.get(first + 1)?,
        row.get(first + 2)?,
        row.get(first + 3)?,
        row.get(first + 4)?,
    ))
}

fn to_state(
    (value, version, revision, updated_by, updated_at): StateColumns,
) -> Result<RecordState> {
    Ok(RecordState {
        value: json(value)?,
        version,
        revision,
        updated_by,
        updated_at: format_ms(updated_at),
    })
}

/// The live record at (namespace, key), if any.
pub fn get_live(conn: &Connection, namespace: &str, key: &str) -> Result<Option<RecordState>> {
    let row = conn
        .prepare_cached(
            "SELECT value, version, revision, updated_by, updated_at FROM records
             WHERE namespace = ?1 AND key = ?2 AND deleted = 0",
        )?
        .query_row(params![namespace, key], |r| record_state(r, 0))
        .optional()?;
    row.map(to_state).transpose()
}

fn current(conn: &Connection, namespace: &str, key: &str) -> Result<Option<Current>> {
    Ok(conn
        .prepare_cached(
            "SELECT version, deleted, value, updated_by, updated_at FROM records WHERE namespace = ?1 AND key = ?2",
        )?
        .query_row(params![namespace, key], |r| {
            Ok(Current {
                version: r.get(0)?,
                deleted: r.get(1)?,
                value: r.get(2)?,
                updated_by: r.get(3)?,
                updated_at: r.get(4)?,
            })
        })
        .optional()?)
}

/// The 409 a failed compare-and-set answers with, carrying what is stored now.
fn conflict(namespace: &str, key: &str, expected: u64, current: Option<&Current>) -> Result<Error> {
    let live = current.filter(|c| !c.deleted);
    let actual_version = live.map(|c| c.version).unwrap_or(0);
    // The stored text, so the value comes back digit for digit, as Get shows it.
    let actual_value = serde_json::value::RawValue::from_string(
        live.and_then(|c| c.value.clone())
            .unwrap_or_else(|| "null".into()),
    )?;
    let (message, hint) = if expected == 0 {
        (
            format!("{namespace}/{key} already exists at version {actual_version}; it was not overwritten"),
            format!("the key exists: read it with Get, then write with expected_version {actual_version}"),
        )
    } else if actual_version == 0 {
        (
            format!("{namespace}/{key} does not exist (expected version {expected})"),
            "the key is absent or deleted: create it with expected_version 0".to_string(),
        )
    } else {
        (
            format!("{namespace}/{key} is at version {actual_version}, not the expected {expected}"),
            format!("call Get to read version {actual_version}, merge your change, and retry with expected_version {actual_version}"),
        )
    };
    let mut data = serde_json::Map::new();
    data.insert("namespace".into(), namespace.into());
    data.insert("key".into(), key.into());
    data.insert("expected_version".into(), expected.into());
    data.insert("actual_version".into(), actual_version.into());
    data.insert(
        "actual_updated_by".into(),
        live.and_then(|c| c.updated_by.clone()).into(),
    );
    data.insert(
        "actual_updated_at".into(),
        live.map(|c| format_ms(c.updated_at)).into(),
    );
    data.insert("hint".into(), hint.clone().into());
    Ok(Error::Conflict {
        message: format!("{message}; {hint}"),
        data,
        exact: vec![("actual_value", actual_value)],
    })
}

/// Writes a new version (a value, or a tombstone when `value` is None) after checking
/// `expected`; appends the history row and the journal event.
fn write_version(
    ctx: &mut WriteCtx<'_>,
    namespace: &str,
    key: &str,
    value: Option<&str>,
    updated_by: Option<&str>,
    previous: Option<&Current>,
) -> Result<Written> {
    let version = previous.map(|c| c.version).unwrap_or(0) + 1;
    let revision = ctx.next_revision();
    let deleted = value.is_none();
    ctx.conn
        .prepare_cached(
            "INSERT INTO records (namespace, key, value, version, revision, updated_by, updated_at, deleted)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, version = excluded.version,
               revision = excluded.revision, updated_by = excluded.updated_by,
               updated_at = excluded.updated_at, deleted = excluded.deleted",
        )?
        .execute(params![namespace, key, value, version, revision, updated_by, ctx.now_ms, deleted])?;
    ctx.conn
        .prepare_cached(
            "INSERT INTO history (namespace, key, version, value, revision, updated_by, updated_at, deleted)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![namespace, key, version, value, revision, updated_by, ctx.now_ms, deleted])?;
    let data = match value {
        Some(v) => format!("{{\"version\":{version},\"value\":{v}}}"),
        None => format!("{{\"version\":{version}}}"),
    };
    journal::append(
        ctx,
        revision,
        &NewEvent {
            kind: if deleted { "kv.delete" } else { "kv.set" },
            actor: updated_by,
            namespace: Some(namespace),
            key: Some(key),
            data: &data,
            ..NewEvent::default()
        },
    )?;
    Ok(Written {
        version,
        revision: revision as u64,
    })
}

/// Set: writes `value` if `expected` (None = unconditional) matches the live version.
pub fn put(
    ctx: &mut WriteCtx<'_>,
    namespace: &str,
    key: &str,
    value: Option<&str>,
    updated_by: Option<&str>,
    expected: Option<u64>,
) -> Result<Written> {
    let current = current(ctx.conn, namespace, key)?;
    if let Some(expected) = expected {
        if current.as_ref().map(Current::live_version).unwrap_or(0) != expected {
            return Err(conflict(namespace, key, expected, current.as_ref())?);
        }
    }
    write_version(ctx, namespace, key, value, updated_by, current.as_ref())
}

/// Delete: writes a tombstone version if the key is live and `expected` matches.
pub fn delete(
    ctx: &mut WriteCtx<'_>,
    namespace: &str,
    key: &str,
    updated_by: Option<&str>,
    expected: Option<u64>,
) -> Result<DeleteResult> {
    let current = current(ctx.conn, namespace, key)?;
    let live_version = current.as_ref().map(Current::live_version).unwrap_or(0);
    if let Some(expected) = expected {
        if live_version != expected {
            return Err(conflict(namespace, key, expected, current.as_ref())?);
        }
    }
    if live_version == 0 {
        return Ok(DeleteResult {
            deleted: false,
            version: current.map(|c| c.version).unwrap_or(0),
            revision: None,
        });
    }
    let written = write_version(ctx, namespace, key, None, updated_by, current.as_ref())?;
    Ok(DeleteResult {
        deleted: true,
        version: written.version,
        revision: Some(written.revision),
    })
}

/// Every Txn compare that does not hold, as `{namespace, key, expected_version, actual_version}`.
pub fn failed_compares(
    conn: &Connection,
    compares: &[TxnCompare],
) -> Result<Vec<serde_json::Value>> {
    let mut failed = Vec::new();
    for c in compares {
        let actual = current(conn, &c.namespace, &c.key)?
            .map(|c| c.live_version())
            .unwrap_or(0);
        if actual != c.version {
            failed.push(serde_json::json!({
                "namespace": c.namespace,
                "key": c.key,
                "expected_version": c.version,
                "actual_version": actual,
            }));
        }
    }
    Ok(failed)
}

/// Live records of a namespace in key order, after `after`, starting with `prefix`; the
/// flag says whether more may follow.
pub fn list(
    conn: &Connection,
    namespace: &str,
    prefix: &str,
    after: Option<&str>,
    limit: u64,
) -> Result<(Vec<Record>, bool)> {
    let mut stmt = conn.prepare_cached(
        "SELECT key, value, version, revision, updated_by, updated_at FROM records
         WHERE namespace = ?1 AND deleted = 0 AND key >= ?2 AND (?3 IS NULL OR key > ?3)
           AND substr(key, 1, length(?2)) = ?2
         ORDER BY key LIMIT ?4 + 0",
    )?;
    let rows = stmt.query_map(params![namespace, prefix, after, limit + 1], |r| {
        Ok((r.get::<_, String>(0)?, record_state(r, 1)?))
    })?;
    let mut records = Vec::new();
    for row in rows {
        let (key, state) = row?;
        records.push(Record {
            namespace: namespace.to_string(),
            key,
            state: to_state(state)?,
        });
    }
    let more = records.len() as u64 > limit;
    records.truncate(limit as usize);
    Ok((records, more))
}

/// Versions of one key, newest first.
pub fn history(
    conn: &Connection,
    namespace: &str,
    key: &str,
    before_version: Option<u64>,
    limit: u64,
) -> Result<Vec<HistoryEntry>> {
    let mut stmt = conn.prepare_cached(
        "SELECT version, value, updated_by, updated_at, revision, deleted FROM history
         WHERE namespace = ?1 AND key = ?2 AND (?3 IS NULL OR version < ?3)
         ORDER BY version DESC LIMIT ?4 + 0",
    )?;
    let rows = stmt.query_map(params![namespace, key, before_version, limit], |r| {
        Ok((
            r.get::<_, u64>(0)?,
            r.get::<_, Option<String>>(1)?,
            r.get(2)?,
            r.get::<_, i64>(3)?,
            r.get(4)?,
            r.get(5)?,
        ))
    })?;
    let mut history = Vec::new();
    for row in rows {
        let (version, value, updated_by, updated_at, revision, deleted) = row?;
        history.push(HistoryEntry {
            version,
            value: json(value)?,
            updated_by,
            updated_at: format_ms(updated_at),
            revision,
            deleted,
        });
    }
    Ok(history)
}

/// Every live record (of one namespace, or all), and the head revision of the snapshot.
pub fn export(conn: &Connection, namespace: Option<&str>) -> Result<(Vec<Record>, u64)> {
    let revision: u64 =
        conn.query_row("SELECT value FROM meta WHERE name = 'revision'", [], |r| {
            r.get(0)
        })?;
    let mut stmt = conn.prepare_cached(
        "SELECT namespace, key, value, version, revision, updated_by, updated_at FROM records
         WHERE deleted = 0 AND (?1 IS NULL OR namespace = ?1) ORDER BY namespace, key",
    )?;
    let rows = stmt.query_map(params![namespace], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            record_state(r, 2)?,
        ))
    })?;
    let mut records = Vec::new();
    for row in rows {
        let (namespace, key, state) = row?;
        records.push(Record {
            namespace,
            key,
            state: to_state(state)?,
        });
    }
    Ok((records, revision))
}

/// Deletes every live key of a namespace, each as its own tombstone write.
pub fn clear_namespace(
    ctx: &mut WriteCtx<'_>,
    namespace: &str,
    updated_by: Option<&str>,
) -> Result<u64> {
    let keys: Vec<(String, u64)> = {
        let mut stmt = ctx.conn.prepare_cached(
            "SELECT key, version FROM records WHERE namespace = ?1 AND deleted = 0 ORDER BY key",
        )?;
        let rows = stmt.query_map([namespace], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for (key, version) in &keys {
        let previous = Current {
            version: *version,
            deleted: false,
            value: None,
            updated_by: None,
            updated_at: 0,
        };
        write_version(ctx, namespace, key, None, updated_by, Some(&previous))?;
    }
    Ok(keys.len() as u64)
}

/// Counts for Metrics: live records and tombstones.
pub fn counts(conn: &Connection) -> Result<(u64, u64)> {
    Ok(conn.query_row(
        "SELECT COALESCE(SUM(deleted = 0), 0), COALESCE(SUM(deleted = 1), 0) FROM records",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
}
