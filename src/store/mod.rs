//! Storage: the only module that speaks SQL. One writer thread (group commit) and a pool of
//! read connections over one SQLite database in WAL mode.

pub mod idempotency;
pub mod journal;
pub mod locks;
pub mod migrations;
pub mod state;
pub mod tasks;
pub mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};

use crate::clock::Clock;
use crate::error::Result;

pub use idempotency::Idempotency;
pub use writer::{ReadFn, Reply, WriteCtx, WriteFn, Writer, WriterStats};

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open the database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error(transparent)]
    Migration(#[from] migrations::MigrationError),
    #[error("cannot start storage: {0}")]
    Start(String),
}

/// The database: a writer handle and a pool of readers.
pub struct Store {
    writer: Writer,
    reads: r2d2::Pool<SqliteConnectionManager>,
    path: PathBuf,
    pub schema_version: i64,
}

impl Store {
    /// Opens (creating if needed) and migrates the database, then starts the writer.
    pub fn open(
        path: &Path,
        clock: Arc<dyn Clock>,
    ) -> Result<(Store, std::thread::JoinHandle<()>), OpenError> {
        let open_error = |source| OpenError::Open {
            path: path.to_path_buf(),
            source,
        };
        let mut conn = writer::open_writer_connection(path).map_err(open_error)?;
        let schema_version = migrations::migrate(&mut conn, clock.wall_ms())?;
        if let Err(err) = writer::preallocate_wal(&conn) {
            tracing::warn!(%err, "cannot preallocate the WAL; commits may be slower until it has grown");
        }
        let (writer, handle) =
            Writer::spawn(conn, clock).map_err(|e| OpenError::Start(e.to_string()))?;
        let manager = SqliteConnectionManager::file(path)
            .with_flags(
                OpenFlags::SQLITE_OPEN_READ_ONLY
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX
                    | OpenFlags::SQLITE_OPEN_URI,
            )
            .with_init(|c| {
                c.set_prepared_statement_cache_capacity(writer::STATEMENT_CACHE);
                c.execute_batch("PRAGMA busy_timeout = 5000; PRAGMA query_only = ON;")
            });
        let reads = r2d2::Pool::builder()
            .max_size(16)
            .min_idle(Some(2))
            .build(manager)
            .map_err(|e| OpenError::Start(format!("read pool: {e}")))?;
        Ok((
            Store {
                writer,
                reads,
                path: path.to_path_buf(),
                schema_version,
            },
            handle,
        ))
    }

    /// Runs a read on a pooled read connection, inside one read transaction: every
    /// statement of `f` sees the same snapshot (the last state committed before its first
    /// statement), so e.g. Export's revision and records always agree.
    pub fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.reads.get()?;
        if !conn.is_autocommit() {
            // A read that panicked left its transaction open.
            conn.prepare_cached("ROLLBACK")?.execute([])?;
        }
        conn.prepare_cached("BEGIN")?.execute([])?;
        let result = f(&conn);
        // Nothing was written: ending the snapshot cannot lose anything.
        let ended = conn
            .prepare_cached("COMMIT")
            .and_then(|mut s| s.execute([]));
        let value = result?;
        ended?;
        Ok(value)
    }

    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    pub fn writer_stats(&self) -> &WriterStats {
        &self.writer.stats
    }

    /// Database and WAL sizes in bytes.
    pub fn file_sizes(&self, conn: &Connection) -> Result<(u64, u64)> {
        let db: u64 = conn.query_row(
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
            [],
            |r| r.get(0),
        )?;
        let mut wal_path = self.path.clone().into_os_string();
        wal_path.push("-wal");
        let wal = std::fs::metadata(wal_path).map(|m| m.len()).unwrap_or(0);
        Ok((db, wal))
    }
}
