//! The writer's SQLite connection: opening it with the pragmas durability depends on,
//! preallocating its WAL, and its batches ([`WriteStorage`]).

use std::ffi::CStr;
use std::path::Path;
use std::time::Duration;

use rusqlite::{ffi, Connection};

use crate::error::{Error, Result};
use crate::protocol::locks::Previous;
use crate::store::boundary::{Foreseen, LeaseEnd, Outcomes, Storage, WriteStorage};

use super::leases::{self, HeldOutcomes};
use super::sql::{Sql, WriterConn};

/// Statements rusqlite's cache keeps per connection: a read connection's, and the writer's
/// built at run time or walked row by row (the rest it keeps itself, `store::sqlite::sql`). The
/// default 16 is fewer than the reads use.
pub const STATEMENT_CACHE: usize = 64;

/// The writer's connection: SQLite's side of [`WriteStorage`]. BEGIN and COMMIT run
/// through cached statements (rusqlite's `Transaction` parses them anew for every batch).
///
/// Requests run without SQL savepoints: a savepoint costs two statements and, worse, a
/// copy of every page the request touches that the batch had already changed (SQLite's
/// sub-journal), about a fifth of a small write's time. The rules refuse before they
/// write, so a request that fails has written nothing and there is nothing to undo; one
/// that fails after writing (a storage fault) cannot be undone alone, and the whole batch
/// is rolled back instead (`undo_request` refuses).
pub struct SqliteWrites {
    /// The connection with the statements it keeps prepared (see `store::sqlite::sql`).
    conn: WriterConn,
    /// Rows changed on this connection, and lock outcomes recorded, when the current
    /// request started.
    written_at_request: std::cell::Cell<(u64, u64)>,
    /// Rows changed on this connection when the journal's lead over the stored outcomes
    /// was last looked at.
    changes_at_outcome_check: u64,
    outcomes: HeldOutcomes,
    /// The database gives free pages back (`auto_vacuum = INCREMENTAL`).
    incremental: bool,
    /// Commits until the page cache is sized to the database again.
    commits_until_sizing: u32,
    /// The page cache's size now, in KiB.
    cache_kib: u64,
}

/// Commits between two looks at the database's size, to size the writer's page cache.
const COMMITS_BETWEEN_SIZINGS: u32 = 64;

/// The writer's page cache in KiB for a database of `db_bytes`: an eighth of it, at least
/// 16 MB (SQLite's pages of interior nodes and the hot leaves stay cached as the store
/// grows) and at most 128 MiB. Half the file made batond's memory grow with stored large
/// values (overflow pages the writer wrote once and never reads again).
pub fn writer_cache_kib(db_bytes: u64) -> u64 {
    (db_bytes / 8 / 1024).clamp(16_000, 128 * 1024)
}

/// A read connection's page cache in KiB: an eighth of the database, 2 MB to 64 MiB
/// (there are up to 16 of them).
pub fn reader_cache_kib(db_bytes: u64) -> u64 {
    (db_bytes / 8 / 1024).clamp(2_000, 64 * 1024)
}

/// The size of the database the connection has open, in bytes.
pub fn database_bytes(conn: &Connection) -> rusqlite::Result<u64> {
    conn.query_row(
        "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
        [],
        |r| r.get(0),
    )
}

/// Databases up to this size are converted to `auto_vacuum = INCREMENTAL` at start-up (a
/// VACUUM, which rewrites the file: about a second per 100 MB here); a larger one is
/// left as it is, with a warning saying how to convert it.
const CONVERT_AT_START_BYTES: u64 = 256 << 20;

/// Makes the database give freed pages back to the file system in steps (`auto_vacuum =
/// INCREMENTAL`, then `PRAGMA incremental_vacuum` after retention removes rows): set on a
/// new database before its first table, and on an existing one by a VACUUM at start-up
/// when it is small enough.
pub fn ensure_incremental_vacuum(conn: &Connection) -> rusqlite::Result<()> {
    let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
    if mode == 2 {
        return Ok(());
    }
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
    if tables == 0 {
        // In WAL mode the setting takes effect only through a VACUUM, even when empty.
        return conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;");
    }
    let bytes = database_bytes(conn)?;
    if bytes > CONVERT_AT_START_BYTES {
        tracing::warn!(
            bytes,
            "the database does not give freed pages back to the file system (it predates incremental vacuum) and is too large to convert at every start; stop batond and run `sqlite3 PATH 'PRAGMA auto_vacuum = INCREMENTAL; VACUUM;'` once to convert it"
        );
        return Ok(());
    }
    let started = std::time::Instant::now();
    conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")?;
    tracing::info!(
        bytes,
        ms = started.elapsed().as_millis() as u64,
        "converted the database to give freed pages back to the file system (auto_vacuum = INCREMENTAL)"
    );
    Ok(())
}

/// Rows changed between two looks at how far the journal has run past the stored lock
/// outcomes. Every journal event is a changed row, so that lead grows by at most this (and
/// one batch) between looks, and most commits skip the look's query.
const CHANGES_BETWEEN_OUTCOME_CHECKS: u64 = 256;

impl SqliteWrites {
    /// `conn` holds no outcome back: [`leases::recover_outcomes`] stored them.
    pub(super) fn new(conn: Connection) -> SqliteWrites {
        let incremental = conn
            .query_row("PRAGMA auto_vacuum", [], |r| r.get::<_, i64>(0))
            .is_ok_and(|mode| mode == 2);
        let mut writes = SqliteWrites {
            conn: WriterConn::wrap(conn),
            written_at_request: std::cell::Cell::new((0, 0)),
            changes_at_outcome_check: 0,
            outcomes: HeldOutcomes::default(),
            incremental,
            commits_until_sizing: 0,
            cache_kib: 16_000,
        };
        writes.size_cache();
        writes
    }

    /// Sizes the page cache to the database ([`writer_cache_kib`]) when it is off by more
    /// than a quarter; looked at every [`COMMITS_BETWEEN_SIZINGS`] commits.
    fn size_cache(&mut self) {
        self.commits_until_sizing = COMMITS_BETWEEN_SIZINGS;
        let Ok(bytes) = database_bytes(self.conn.conn()) else {
            return;
        };
        let want = writer_cache_kib(bytes);
        if want.abs_diff(self.cache_kib) * 4 > self.cache_kib {
            let set = format!("PRAGMA cache_size = -{want}");
            if self.conn.conn().execute_batch(&set).is_ok() {
                self.cache_kib = want;
            }
        }
    }

    /// Inside the batch, before it commits: stores the held lock outcomes when enough
    /// wait or the journal has run far enough past the mark (see `store::sqlite::leases`), looking
    /// at the journal only once enough rows changed since the last look.
    fn store_outcomes_when_due(&mut self) -> Result<()> {
        if self.outcomes.len() >= leases::OUTCOMES_HELD {
            return self.outcomes.store(&self.conn);
        }
        let changes = self.conn.conn().total_changes();
        if changes - self.changes_at_outcome_check < CHANGES_BETWEEN_OUTCOME_CHECKS {
            return Ok(());
        }
        self.changes_at_outcome_check = changes;
        let past_mark: i64 = self.conn.with(
            concat!(
                "SELECT ",
                super::meta::head_revision_sql!(),
                " - (SELECT value FROM meta WHERE name = 'lock_outcomes_through')"
            ),
            |s| s.query_row([], |r| r.get(0)),
        )?;
        if past_mark >= leases::OUTCOMES_REPLAY_SPAN {
            self.outcomes.store(&self.conn)?;
        }
        Ok(())
    }

    /// Rows changed and lock outcomes recorded so far.
    fn written(&self) -> (u64, u64) {
        (self.conn.conn().total_changes(), self.outcomes.recorded())
    }

    fn run(&self, sql: &'static str) -> Result<()> {
        self.conn.with(sql, |s| s.execute([]))?;
        Ok(())
    }
}

impl Outcomes for SqliteWrites {
    fn previous(&self, resource_key: &str) -> Result<Option<Previous>> {
        self.outcomes.previous(&self.conn, resource_key)
    }

    fn record_end(&self, end: &LeaseEnd<'_>) -> Result<()> {
        self.outcomes.record(end);
        Ok(())
    }

    fn latest_ended_token(&self, resource_key: &str) -> Result<u64> {
        self.outcomes.latest_ended_token(&self.conn, resource_key)
    }

    fn store_held(&self) -> Result<()> {
        self.outcomes.store(&self.conn)
    }
}

impl WriteStorage for SqliteWrites {
    fn storage(&self) -> &dyn Storage {
        &self.conn
    }

    fn outcomes(&self) -> &dyn Outcomes {
        self
    }

    fn begin(&mut self, _foreseen: &Foreseen) -> Result<()> {
        self.run("BEGIN IMMEDIATE")?;
        // The writer rolls back only a batch that began.
        let refreshed = self.outcomes.refresh(&self.conn);
        if refreshed.is_err() {
            self.rollback();
        }
        refreshed
    }

    fn commit(&mut self) -> Result<()> {
        self.store_outcomes_when_due()?;
        self.run("COMMIT")?;
        self.commits_until_sizing -= 1;
        if self.commits_until_sizing == 0 {
            self.size_cache();
        }
        Ok(())
    }

    fn reclaim(&mut self, pages: u64) -> Result<bool> {
        if !self.incremental {
            return Ok(false);
        }
        let free: u64 = self
            .conn
            .with("PRAGMA freelist_count", |s| s.query_row([], |r| r.get(0)))?;
        if free == 0 {
            return Ok(false);
        }
        let n = pages.min(free);
        // One row per page given back: stepped to the end.
        let mut stmt = self
            .conn
            .conn()
            .prepare(&format!("PRAGMA incremental_vacuum({n})"))?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
        Ok(free > n)
    }

    fn rollback(&mut self) {
        self.outcomes.rolled_back();
        // Still inside the transaction: it was not committed (or COMMIT failed).
        if !self.conn.conn().is_autocommit() {
            if let Err(err) = self.conn.conn().execute_batch("ROLLBACK") {
                tracing::error!(%err, "cannot roll back a failed batch");
            }
        }
    }

    fn start_request(&self) -> Result<()> {
        self.written_at_request.set(self.written());
        Ok(())
    }

    fn undo_request(&self) -> Result<()> {
        if self.written() == self.written_at_request.get() {
            return Ok(());
        }
        Err(Error::Unavailable(
            "a request failed after it had written, so its whole batch was rolled back; nothing was written, retry".into(),
        ))
    }

    fn close(&mut self) {
        // The next start need not replay outcomes from the journal (it would be harmless).
        let stored = self
            .begin(&Foreseen::default())
            .and_then(|()| self.outcomes.store(&self.conn))
            .and_then(|()| self.run("COMMIT"));
        if let Err(err) = stored {
            tracing::warn!(%err, "cannot store the held lock outcomes at shutdown; the next start replays them from the journal");
            self.rollback();
        }
        // The next start need not check the database.
        if let Err(err) = self.conn.conn().execute(
            "UPDATE meta SET value = 1 WHERE name = 'clean_shutdown'",
            [],
        ) {
            tracing::warn!(%err, "cannot record the clean shutdown; the next start checks the database");
        }
        if let Err(err) = self
            .conn
            .conn()
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        {
            tracing::warn!(%err, "WAL checkpoint at shutdown failed");
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

/// SQLite's `unix` VFS in its exclusive form: the first lock a connection takes on the
/// database is a write lock on it for the whole process, held until the last connection of
/// the process closes it, and every lock after that is counted in the process's memory;
/// the WAL index is in memory shared by the process's connections, not in a `-shm` file.
///
/// batond is the only process that may use its database (the `flock` in `server`), so the
/// locks other processes would see are of no use to it, and taking them cost the writer
/// about five `fcntl` calls per commit (5% of its CPU under 4 DAG workers) and every read
/// transaction one or two. Every connection of the store must open the same way: a
/// connection on plain `unix` would take real locks that replace the process's write lock.
/// Another process can then not open the database while the daemon runs (it is told the
/// database is locked), nor can the daemon start while another process reads it.
pub const EXCLUSIVE_VFS: &CStr = c"unix-excl";

/// [`EXCLUSIVE_VFS`], if this SQLite has it (every Unix build does); otherwise connections
/// open with the default VFS.
pub fn exclusive_vfs() -> Option<&'static str> {
    // SAFETY: sqlite3_vfs_find only reads SQLite's VFS list (initializing SQLite first).
    let found = unsafe { !ffi::sqlite3_vfs_find(EXCLUSIVE_VFS.as_ptr()).is_null() };
    found.then(|| EXCLUSIVE_VFS.to_str().unwrap_or("unix-excl"))
}

/// What a read connection opens (with `SQLITE_OPEN_URI`): a `file:` URI naming the
/// exclusive VFS, since the pool opens by name only. The path is made absolute and every
/// byte but letters, digits and `/-._~` is percent-encoded, so `?`, `#` and `%` in a
/// directory name stay part of the path.
pub fn read_connection_target(path: &Path) -> String {
    let Some(vfs) = exclusive_vfs() else {
        return path.display().to_string();
    };
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut uri = String::from("file://");
    for &byte in std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()) {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            uri.push(byte as char);
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri.push_str("?vfs=");
    uri.push_str(vfs);
    uri
}

/// Opens the writer's connection with the pragmas durability depends on.
pub fn open_writer_connection(path: &std::path::Path) -> rusqlite::Result<Connection> {
    // Each commit's WAL frames reach the kernel in one write (`gathered_wal`, over the
    // exclusive VFS); where that VFS cannot be registered, SQLite's own writes them.
    let conn = match super::gathered_wal::register() {
        Ok(()) => Connection::open_with_flags_and_vfs(
            path,
            rusqlite::OpenFlags::default(),
            super::gathered_wal::name(),
        )?,
        Err(rc) => {
            tracing::warn!(
                rc,
                "cannot register the WAL-gathering VFS; commits make one write per frame"
            );
            match exclusive_vfs() {
                Some(vfs) => {
                    Connection::open_with_flags_and_vfs(path, rusqlite::OpenFlags::default(), vfs)?
                }
                None => Connection::open(path)?,
            }
        }
    };
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA cache_size = -16000;
         PRAGMA temp_store = MEMORY;",
    )?;
    // The gathering VFS writes a commit's frames when SQLite syncs them, which it does
    // before readers can see them only while every commit is synced (FULL or EXTRA).
    let synchronous: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    if synchronous < 2 {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISUSE),
            Some(format!(
                "the writer's connection must sync every commit (PRAGMA synchronous is {synchronous})"
            )),
        ));
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    /// A database in a directory whose name is URI syntax (`?`, `#`, `%`, a space) opens,
    /// and its read connections open the same file (they may not create one).
    #[test]
    fn read_connections_open_a_path_with_uri_syntax() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("a?b#c%41 d");
        std::fs::create_dir(&home).unwrap();
        let path = home.join("baton.db");
        assert!(super::read_connection_target(&path)
            .ends_with("/a%3Fb%23c%2541%20d/baton.db?vfs=unix-excl"));
        let (store, writes) = Store::open(&path, 0).unwrap();
        let mut writes = writes();
        writes.begin(&Foreseen::default()).unwrap();
        writes.storage().set_head_revision(7).unwrap();
        writes.commit().unwrap();
        let head = store.read(|s| s.head_revision()).unwrap();
        assert_eq!(head, 7);
        assert_eq!(
            std::fs::read_dir(&home).unwrap().count(),
            2,
            "baton.db and its WAL only"
        );
    }

    use crate::store::boundary::{Foreseen, LeaseEnd, NewEvent, WriteStorage};
    use crate::store::Store;

    /// Ends a lease on `key` as the rules do: its outcome, and the journal event of it.
    fn end(writes: &dyn WriteStorage, seq: i64, key: &str, outcome: &str, owner: &str) {
        let at_ms = 1_000 * seq;
        writes
            .outcomes()
            .record_end(&LeaseEnd {
                resource_key: key,
                fencing_token: seq as u64,
                outcome,
                owner,
                at_ms,
                moved_to: None,
                note: None,
            })
            .unwrap();
        let data = format!("{{\"outcome\":\"{outcome}\"}}");
        let event = NewEvent {
            actor: Some(owner),
            resource_key: Some(key),
            data: &data,
            ..NewEvent::of(crate::protocol::journal::EventType::LockReleased)
        };
        writes.storage().append_event(seq, at_ms, &event).unwrap();
        writes.storage().set_head_revision(seq).unwrap();
    }

    fn previous(writes: &dyn WriteStorage, key: &str) -> Option<(String, String)> {
        let previous = writes.outcomes().previous(key).unwrap()?;
        Some((previous.outcome, previous.owner))
    }

    fn known(outcome: &str, owner: &str) -> Option<(String, String)> {
        Some((outcome.to_string(), owner.to_string()))
    }

    /// Outcomes held in memory follow the batch that recorded them: kept when it commits,
    /// gone when it rolls back (stored or not), and what the journal holds is what
    /// memory answers after a rollback.
    #[test]
    fn held_outcomes_follow_commits_and_rollbacks() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, writes) = Store::open(&dir.path().join("baton.db"), 0).unwrap();
        let mut writes = writes();
        let batch = Foreseen::default();

        writes.begin(&batch).unwrap();
        end(&*writes, 1, "file:a", "released", "ann");
        writes.commit().unwrap();
        assert_eq!(previous(&*writes, "file:a"), known("released", "ann"));

        // Rolled back: neither end it recorded is known.
        writes.begin(&batch).unwrap();
        end(&*writes, 2, "file:a", "abandoned", "bob");
        end(&*writes, 3, "file:b", "released", "bob");
        writes.rollback();
        writes.begin(&batch).unwrap();
        assert_eq!(previous(&*writes, "file:a"), known("released", "ann"));
        assert_eq!(previous(&*writes, "file:b"), None);

        // Stored in a batch that rolls back: still known, read again from the journal.
        writes.outcomes().store_held().unwrap();
        writes.rollback();
        writes.begin(&batch).unwrap();
        assert_eq!(previous(&*writes, "file:a"), known("released", "ann"));

        // Stored and committed, then a later end in the same batch: the later one wins,
        // before and after it is stored too.
        writes.outcomes().store_held().unwrap();
        assert_eq!(previous(&*writes, "file:a"), known("released", "ann"));
        end(&*writes, 2, "file:a", "expired", "cy");
        writes.commit().unwrap();
        assert_eq!(previous(&*writes, "file:a"), known("expired", "cy"));
        writes.begin(&batch).unwrap();
        writes.outcomes().store_held().unwrap();
        writes.commit().unwrap();
        assert_eq!(previous(&*writes, "file:a"), known("expired", "cy"));

        // After a rollback, only the ends after the stored mark are read again.
        writes.begin(&batch).unwrap();
        writes.rollback();
        writes.begin(&batch).unwrap();
        assert_eq!(previous(&*writes, "file:a"), known("expired", "cy"));
        assert_eq!(previous(&*writes, "file:b"), None);
        writes.commit().unwrap();
    }
}
