//! PostgreSQL's side of the storage boundary (`BATON_DATABASE_URL=postgres://...`): the
//! same traits as SQLite's, over tokio-postgres. Several batond may share one database;
//! each writer's batch runs under a transaction-scoped advisory lock, so batches of all
//! instances apply one after another and the revision sequence stays one.
//!
//! The boundary's methods are synchronous (the writer is a thread of its own; reads run in
//! `block_in_place`), so each statement is driven to completion on the runtime's handle.
//! Every statement that writes goes through [`PgConn::execute`] or
//! [`PgConn::query_write`], which count the rows they change (a request that failed after
//! writing rolls its whole batch back, as on SQLite).

mod agents;
mod connection;
mod idempotency;
mod journal;
mod leases;
mod meta;
pub mod migrations;
mod nodes;
mod records;
mod tokens;

use std::cell::Cell;

pub use connection::{listen, open, PgReads, PgWrites};

use tokio::runtime::Handle;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::error::{Error, Result};

/// Parameters of a statement.
pub type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// One PostgreSQL connection (pooled), with its statement cache.
pub struct PgConn {
    client: deadpool_postgres::Object,
    handle: Handle,
    /// Rows changed through this connection since it was taken.
    changed: Cell<u64>,
}

impl PgConn {
    pub fn new(client: deadpool_postgres::Object, handle: Handle) -> PgConn {
        PgConn {
            client,
            handle,
            changed: Cell::new(0),
        }
    }

    /// Whether the connection to the server is gone (a restart, `pg_terminate_backend`).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Rows changed so far through [`PgConn::execute`] and [`PgConn::query_write`].
    pub fn changed(&self) -> u64 {
        self.changed.get()
    }

    fn block<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        Ok(block_on(&self.handle, work)?)
    }

    /// Rows of a statement that only reads.
    pub fn query(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>> {
        self.block(async {
            let statement = self.client.prepare_cached(sql).await?;
            self.client.query(&statement, params).await
        })
    }

    /// The row of a statement that reads at most one.
    pub fn query_opt(&self, sql: &str, params: Params<'_>) -> Result<Option<Row>> {
        self.block(async {
            let statement = self.client.prepare_cached(sql).await?;
            self.client.query_opt(&statement, params).await
        })
    }

    /// The row of a statement that reads exactly one.
    pub fn query_one(&self, sql: &str, params: Params<'_>) -> Result<Row> {
        self.block(async {
            let statement = self.client.prepare_cached(sql).await?;
            self.client.query_one(&statement, params).await
        })
    }

    /// Rows of a statement that writes (`INSERT ... RETURNING`, ...); each counts as a
    /// change.
    pub fn query_write(&self, sql: &str, params: Params<'_>) -> Result<Vec<Row>> {
        let rows = self.query(sql, params)?;
        self.changed
            .set(self.changed.get() + rows.len().max(1) as u64);
        Ok(rows)
    }

    /// Runs a statement that writes; the rows it changed.
    pub fn execute(&self, sql: &str, params: Params<'_>) -> Result<u64> {
        let n = self.block(async {
            let statement = self.client.prepare_cached(sql).await?;
            self.client.execute(&statement, params).await
        })?;
        self.changed.set(self.changed.get() + n);
        Ok(n)
    }

    /// Runs statements without parameters or results (BEGIN, COMMIT, ...).
    pub fn batch(&self, sql: &str) -> Result<()> {
        self.block(self.client.batch_execute(sql))
    }
}

/// Drives `work` to completion on this thread, whether or not it is one of the runtime's.
/// On a worker, the worker's other tasks (the connections' I/O among them) first move to
/// another thread (`block_in_place`), so waiting here cannot starve them; the runtime's
/// own `block_on` is refused there, so a plain executor waits for the answers.
pub fn block_on<F: std::future::Future>(handle: &Handle, work: F) -> F::Output {
    tokio::task::block_in_place(|| {
        let _runtime = handle.enter();
        futures::executor::block_on(work)
    })
}

/// A stored unsigned figure (PostgreSQL has no unsigned integers; every stored one fits).
pub fn u(value: i64) -> u64 {
    value.max(0) as u64
}

/// An unsigned figure as PostgreSQL stores it.
pub fn i(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl From<deadpool_postgres::PoolError> for Error {
    fn from(err: deadpool_postgres::PoolError) -> Error {
        Error::Unavailable(format!(
            "no PostgreSQL connection available ({err}); nothing was written, retry shortly"
        ))
    }
}
