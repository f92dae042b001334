//! Storage: the only module that speaks SQL. The traits of [`boundary`] are what the rules
//! ask of storage; each engine implements them in its own folder, SQLite in [`sqlite`] and
//! PostgreSQL in [`postgres`], with the same file names. [`Store`] fronts either: it opens
//! the engine and runs reads on its read side.

pub mod boundary;
#[cfg(test)]
mod conformance;
mod health;
pub mod postgres;
mod rows;
pub mod sqlite;

use std::path::Path;
use std::sync::Arc;

use crate::error::Result;

use boundary::{OpenWrites, Storage, WriteStorage};
pub use health::StorageHealth;
pub use sqlite::OpenError;

/// Where reads run.
enum Reads {
    Sqlite(sqlite::SqliteReads),
    Postgres(postgres::PgReads),
}

/// The database: a pool of readers (the one write connection goes to the writer).
pub struct Store {
    reads: Reads,
    health: Arc<StorageHealth>,
    pub schema_version: i64,
    /// A random id given to the database when it was created (kept in `meta`).
    pub database_id: i64,
    /// This daemon's id, new at every start (tells apart daemons sharing a database).
    pub instance_id: String,
    /// With PostgreSQL: the URL, for the connection that listens for other daemons' commits.
    shared_url: Option<String>,
}

fn new_instance_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl Store {
    /// Opens (creating if needed) and migrates the SQLite database at `path`; returns the
    /// read side and the write connection, for the writer.
    pub fn open(path: &Path, now_ms: i64) -> Result<(Store, OpenWrites), OpenError> {
        let (reads, writes, schema_version, database_id) = sqlite::open(path, now_ms)?;
        Ok((
            Store {
                reads: Reads::Sqlite(reads),
                health: Arc::default(),
                schema_version,
                database_id,
                instance_id: new_instance_id(),
                shared_url: None,
            },
            writes,
        ))
    }

    /// Runs a read inside one read transaction: every statement of `f` sees the same
    /// snapshot (the last state committed before its first statement), so e.g. Export's
    /// revision and records always agree.
    pub fn read<T>(&self, f: impl FnOnce(&dyn Storage) -> Result<T>) -> Result<T> {
        match &self.reads {
            Reads::Sqlite(reads) => reads.read(&self.health, f),
            Reads::Postgres(reads) => self.noted(reads.read(f)),
        }
    }

    /// Runs a read of exactly one SQL statement, without a transaction of its own (on
    /// SQLite, BEGIN and COMMIT around it cost as much as the read).
    pub fn read_one_statement<T>(&self, f: impl FnOnce(&dyn Storage) -> Result<T>) -> Result<T> {
        match &self.reads {
            Reads::Sqlite(reads) => reads.read_one_statement(&self.health, f),
            Reads::Postgres(reads) => self.noted(reads.read_one_statement(f)),
        }
    }

    fn noted<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(err) = &result {
            self.health.note_error(err);
        }
        result
    }

    /// Connects to a PostgreSQL database that any number of batond may share, applies its
    /// migrations; returns the read side and the writer's connection. Statements run on
    /// `handle`'s runtime; this blocks, on a thread of its own.
    pub fn open_postgres(
        url: &str,
        now_ms: i64,
        handle: tokio::runtime::Handle,
        lose_commit_answers: u64,
    ) -> Result<(Store, OpenWrites), OpenError> {
        let instance_id = new_instance_id();
        let opened = std::thread::scope(|s| {
            s.spawn(|| postgres::open(url, &instance_id, now_ms, handle, lose_commit_answers))
                .join()
        })
        .map_err(|_| OpenError::Start("the PostgreSQL connection thread panicked".into()))?;
        let (reads, writes, schema_version, database_id) =
            opened.map_err(|e| OpenError::Start(format!("PostgreSQL: {e}")))?;
        Ok((
            Store {
                reads: Reads::Postgres(reads),
                health: Arc::default(),
                schema_version,
                database_id,
                instance_id,
                shared_url: Some(url.to_string()),
            },
            Box::new(move || Box::new(writes) as Box<dyn WriteStorage>),
        ))
    }

    /// With a database other daemons share: calls `on_commit` whenever another daemon
    /// committed (and once after each reconnection, which may have missed some), until
    /// `stop`. Nothing to watch on SQLite.
    pub fn watch_other_instances(
        &self,
        on_commit: impl Fn() + Send + 'static,
        stop: tokio_util::sync::CancellationToken,
    ) {
        if let Some(url) = &self.shared_url {
            tokio::spawn(postgres::listen(
                url.clone(),
                self.instance_id.clone(),
                on_commit,
                stop,
            ));
        }
    }

    /// Which engine holds the state: `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self.reads {
            Reads::Sqlite(_) => "sqlite",
            Reads::Postgres(_) => "postgres",
        }
    }

    /// Whether other daemons may write to the same database (PostgreSQL): then this one
    /// heartbeats, and looks for what the others changed (revoked tokens, say).
    pub fn shared(&self) -> bool {
        matches!(self.reads, Reads::Postgres(_))
    }

    /// What storage has shown of its health, shared with the writer.
    pub fn health(&self) -> &Arc<StorageHealth> {
        &self.health
    }
}
