//! SQLite's side of the storage boundary (the default engine): one write connection (which
//! the writer in `engine` owns and batches on) and a pool of read connections over
//! one database in WAL mode, which this process keeps to itself.

mod agents;
mod connection;
mod gathered_wal;
mod idempotency;
mod journal;
mod leases;
mod meta;
pub mod migrations;
mod nodes;
mod records;
mod sql;
mod tokens;

use std::path::{Path, PathBuf};

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::error::Result;
use crate::store::boundary::{OpenWrites, Storage, WriteStorage};
use crate::store::health::StorageHealth;

pub use connection::SqliteWrites;

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open the database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("the database {path} is open in another process (a sqlite3 shell, a backup tool?); batond keeps its database to itself while it runs: close that process and start batond again")]
    InUse { path: PathBuf },
    #[error("the database {path} is damaged ({detail}); batond will not serve it: restore it from a backup")]
    Damaged { path: PathBuf, detail: String },
    #[error(transparent)]
    Migration(#[from] migrations::MigrationError),
    #[error("cannot start storage: {0}")]
    Start(String),
}

/// Whether an SQLite error says the file is not (or no longer) a sound database.
pub fn is_damage(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// Whether the daemon that last used this database stopped cleanly (`meta.clean_shutdown`
/// is 0 while a daemon runs; the writer sets it to 1 as it stops). A new database, or one
/// from before the flag, counts as clean.
fn was_shut_down_cleanly(conn: &Connection) -> rusqlite::Result<bool> {
    let has_meta: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta')",
        [],
        |r| r.get(0),
    )?;
    if !has_meta {
        return Ok(true);
    }
    let flag: Option<i64> = conn
        .query_row(
            "SELECT value FROM meta WHERE name = 'clean_shutdown'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(flag != Some(0))
}

/// SQLite's quick check; the problems it found (none: the database is sound).
fn quick_check(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("PRAGMA quick_check")?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let mut problems = Vec::new();
    for row in rows {
        let row = row?;
        if row != "ok" && problems.len() < 5 {
            problems.push(row);
        }
    }
    Ok(problems)
}

/// Marks the database as in use (not cleanly shut down until the writer finishes) and
/// returns its id, giving it one if it has none.
fn mark_open(conn: &Connection) -> rusqlite::Result<i64> {
    let fresh_id = (uuid::Uuid::new_v4().as_u64_pair().0 >> 1) as i64;
    conn.execute(
        "INSERT OR IGNORE INTO meta (name, value) VALUES ('database_id', ?1)",
        [fresh_id],
    )?;
    conn.execute(
        "INSERT INTO meta (name, value) VALUES ('clean_shutdown', 0)
         ON CONFLICT (name) DO UPDATE SET value = 0",
        [],
    )?;
    conn.query_row(
        "SELECT value FROM meta WHERE name = 'database_id'",
        [],
        |r| r.get(0),
    )
}

/// Opens (creating if needed) and migrates the database; returns the read side, the write
/// connection (for the writer), the schema version and the database's id.
pub fn open(path: &Path, now_ms: i64) -> Result<(SqliteReads, OpenWrites, i64, i64), OpenError> {
    let open_error = |source: rusqlite::Error| {
        if source.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) {
            OpenError::InUse {
                path: path.to_path_buf(),
            }
        } else if is_damage(&source) {
            OpenError::Damaged {
                path: path.to_path_buf(),
                detail: source.to_string(),
            }
        } else {
            OpenError::Open {
                path: path.to_path_buf(),
                source,
            }
        }
    };
    let mut conn = connection::open_writer_connection(path).map_err(open_error)?;
    if !was_shut_down_cleanly(&conn).map_err(open_error)? {
        tracing::warn!(database = %path.display(), "the last shutdown was not clean; checking the database (PRAGMA quick_check)");
        let problems = quick_check(&conn).map_err(open_error)?;
        if !problems.is_empty() {
            return Err(OpenError::Damaged {
                path: path.to_path_buf(),
                detail: format!("quick_check: {}", problems.join("; ")),
            });
        }
    }
    connection::ensure_incremental_vacuum(&conn).map_err(open_error)?;
    let schema_version = match migrations::migrate(&mut conn, now_ms) {
        Err(migrations::MigrationError::Sqlite(e)) => return Err(open_error(e)),
        Err(migrations::MigrationError::Failed { source, .. }) if is_damage(&source) => {
            return Err(open_error(source))
        }
        other => other?,
    };
    let database_id = mark_open(&conn).map_err(open_error)?;
    leases::recover_outcomes(&conn).map_err(open_error)?;
    if connection::exclusive_vfs().is_some() {
        // The WAL index of an older batond, which used `unix`; nothing reads it now.
        let _ = std::fs::remove_file(format!("{}-shm", path.display()));
    }
    if let Err(err) = connection::preallocate_wal(&conn) {
        tracing::warn!(%err, "cannot preallocate the WAL; commits may be slower until it has grown");
    }
    // Read connections' page caches grow with the database as it is at start.
    let reader_cache_kib =
        connection::reader_cache_kib(connection::database_bytes(&conn).unwrap_or(0));
    // Read-write handles kept from writing by `query_only`: a read-only one would take
    // real locks (`connection::EXCLUSIVE_VFS`).
    let manager = SqliteConnectionManager::file(connection::read_connection_target(path))
        .with_flags(
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )
        .with_init(move |c| {
            c.set_prepared_statement_cache_capacity(connection::STATEMENT_CACHE);
            c.execute_batch(&format!(
                "PRAGMA busy_timeout = 5000; PRAGMA query_only = ON; PRAGMA cache_size = -{reader_cache_kib};"
            ))
        });
    let reads = r2d2::Pool::builder()
        .max_size(16)
        .min_idle(Some(2))
        .build(manager)
        .map_err(|e| OpenError::Start(format!("read pool: {e}")))?;
    Ok((
        SqliteReads(reads),
        Box::new(move || Box::new(SqliteWrites::new(conn)) as Box<dyn WriteStorage>),
        schema_version,
        database_id,
    ))
}

/// SQLite's read side: a pool of read connections.
pub struct SqliteReads(r2d2::Pool<SqliteConnectionManager>);

impl SqliteReads {
    /// A pooled read connection, out of any transaction a read that panicked left open.
    fn connection(&self) -> Result<r2d2::PooledConnection<SqliteConnectionManager>> {
        let conn = self.0.get()?;
        if !conn.is_autocommit() {
            conn.prepare_cached("ROLLBACK")?.execute([])?;
        }
        Ok(conn)
    }

    /// Runs a read on a pooled read connection, inside one read transaction: every
    /// statement of `f` sees the same snapshot (the last state committed before its first
    /// statement), so e.g. Export's revision and records always agree. An error of `f` is
    /// noted in `health`.
    pub fn read<T>(
        &self,
        health: &StorageHealth,
        f: impl FnOnce(&dyn Storage) -> Result<T>,
    ) -> Result<T> {
        let conn = self.connection()?;
        conn.prepare_cached("BEGIN")?.execute([])?;
        let result = f(&*conn);
        // Nothing was written: ending the snapshot cannot lose anything.
        let ended = conn
            .prepare_cached("COMMIT")
            .and_then(|mut s| s.execute([]));
        if let Err(err) = &result {
            health.note_error(err);
        }
        let value = result?;
        ended?;
        Ok(value)
    }

    /// Runs a read of exactly one SQL statement on a pooled read connection, without a
    /// transaction of its own: SQLite runs each statement on one snapshot already, and
    /// BEGIN and COMMIT around it cost as much as the read (Get's latency doubled). An
    /// error of `f` is noted in `health`.
    pub fn read_one_statement<T>(
        &self,
        health: &StorageHealth,
        f: impl FnOnce(&dyn Storage) -> Result<T>,
    ) -> Result<T> {
        let conn = self.connection()?;
        let result = f(&*conn);
        if let Err(err) = &result {
            health.note_error(err);
        }
        result
    }
}
