//! The writer's SQLite connection: opening it with the pragmas durability depends on,
//! preallocating its WAL, and the batch transaction each group commit runs in.

use std::time::Duration;

use rusqlite::Connection;

/// Prepared statements kept per connection (the default 16 is fewer than the writer uses).
pub const STATEMENT_CACHE: usize = 64;

/// A batch's write transaction, begun and committed through cached statements (rusqlite's
/// `Transaction` parses `BEGIN` and `COMMIT` anew for every batch). Rolls back on drop
/// unless committed.
pub(super) struct BatchTx<'c> {
    conn: &'c Connection,
}

impl<'c> BatchTx<'c> {
    pub(super) fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(BatchTx { conn })
    }

    pub(super) fn commit(self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }
}

impl std::ops::Deref for BatchTx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for BatchTx<'_> {
    fn drop(&mut self) {
        // Still inside the transaction: it was not committed (or COMMIT failed).
        if !self.conn.is_autocommit() {
            if let Err(err) = self.conn.execute_batch("ROLLBACK") {
                tracing::error!(%err, "cannot roll back a failed batch");
            }
        }
    }
}

/// WAL frames written before SQLite's automatic checkpoint (its default, 1,000 pages) starts
/// the log over, with headroom for a batch that runs past it.
const WAL_PREALLOCATED_FRAMES: u64 = 1_100;

/// Fills the WAL file with zeros up to the size one checkpoint cycle uses, so commits
/// overwrite allocated blocks instead of growing the file: on ext4 and most file systems a
/// sync after a write that grows a file also commits the size change (twice the cost of an
/// overwrite here). PostgreSQL zero-fills new WAL segments for the same reason. Zeros after
/// the last frame are ignored (frames carry salts and checksums); SQLite never truncates
/// the log while it is open (journal_size_limit is unset) and deletes it at close.
pub fn preallocate_wal(conn: &Connection) -> std::io::Result<()> {
    use std::io::Write;
    let Some(db) = conn.path().filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let page: u64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .map_err(std::io::Error::other)?;
    let target = 32 + WAL_PREALLOCATED_FRAMES * (24 + page);
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .open(format!("{db}-wal"))
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len >= target {
        return Ok(());
    }
    let zeros = vec![0u8; 64 * 1024];
    let mut at = len;
    use std::io::Seek;
    file.seek(std::io::SeekFrom::Start(len))?;
    while at < target {
        let n = (target - at).min(zeros.len() as u64) as usize;
        file.write_all(&zeros[..n])?;
        at += n as u64;
    }
    file.sync_all()
}

/// Opens the writer's connection with the pragmas durability depends on.
pub fn open_writer_connection(path: &std::path::Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA cache_size = -16000;
         PRAGMA temp_store = MEMORY;",
    )?;
    Ok(conn)
}
