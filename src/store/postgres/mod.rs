//! PostgreSQL's side of the storage boundary (`BATON_DATABASE_URL=postgres://...`): the
//! same traits as SQLite's, over tokio-postgres. Several batond may share one database;
//! each writer's batch runs under a transaction-scoped advisory lock, so batches of all
//! instances apply one after another and the revision sequence stays one.
//!
//! The boundary's methods are synchronous (the writer is a thread of its own; reads run in
//! `block_in_place`), so each statement is driven to completion on the runtime's handle.
//! Every statement that writes goes through [`PgConn::execute`], [`PgConn::query_write`]
//! or [`PgConn::defer`], which count the rows they change (a request that failed after
//! writing rolls its whole batch back, as on SQLite).
//!
//! The write path is pipelined: writes whose result the rules do not read (a record's new
//! version, a journal event, the head revision) are deferred and sent ahead of the next
//! statement, in the same round trip, or with the commit. Any error aborts a PostgreSQL
//! transaction, so after one the batch can only be rolled back ([`PgConn::aborted`]).

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

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

pub use connection::{listen, open, PgReads};

use tokio::runtime::Handle;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::error::{Error, Result};
use crate::protocol::locks::Previous;
use crate::store::boundary::{LeaseRow, QueuedWait};

/// Parameters of a statement.
pub type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// One PostgreSQL connection (pooled), with its statement cache.
pub struct PgConn {
    client: deadpool_postgres::Object,
    driver: Driver,
    /// Rows changed through this connection since it was taken.
    changed: Cell<u64>,
    /// Statements that write, as SQL with literals, not sent yet.
    deferred: RefCell<String>,
    /// A statement failed since the last [`PgConn::reset`]: the server aborted the
    /// transaction, which can then only be rolled back.
    aborted: Cell<bool>,
    /// The parts of the state this transaction wrote ([`LOCKS`], [`TASKS`], [`AGENTS`]).
    touched: Cell<u8>,
    /// The head revision read when the writer's transaction began, for the first
    /// `head_revision` of the batch (saves it a round trip).
    head_hint: Cell<Option<i64>>,
    /// The last fencing token handed out in the writer's transaction, read when it began.
    fence: Cell<Option<i64>>,
    /// Every wait to acquire, read with `leases_ahead`.
    waits_ahead: RefCell<Option<Vec<QueuedWait>>>,
    /// Every live lease, read when the writer's transaction began because another
    /// instance had changed them, until this transaction writes.
    leases_ahead: RefCell<Option<Vec<LeaseRow>>>,
    /// The last outcome of the keys the batch's requests were foreseen to ask about
    /// (None: no lease on the key ever ended), read when the transaction began and kept
    /// current as this transaction records outcomes.
    outcomes_ahead: RefCell<HashMap<String, Option<Previous>>>,
    /// Counts as closed, whatever the client says (see [`PgConn::lose_connection`]).
    lost: Cell<bool>,
}

/// Lock leases, in [`PgConn::touch`].
pub const LOCKS: u8 = 1;
/// Tasks, nodes and their leases.
pub const TASKS: u8 = 2;
/// Agents' sessions.
pub const AGENTS: u8 = 4;

impl PgConn {
    pub fn new(client: deadpool_postgres::Object, driver: Driver) -> PgConn {
        PgConn {
            client,
            driver,
            changed: Cell::new(0),
            deferred: RefCell::new(String::new()),
            aborted: Cell::new(false),
            touched: Cell::new(0),
            head_hint: Cell::new(None),
            fence: Cell::new(None),
            waits_ahead: RefCell::new(None),
            leases_ahead: RefCell::new(None),
            outcomes_ahead: RefCell::new(HashMap::new()),
            lost: Cell::new(false),
        }
    }

    /// The last fencing token handed out in this transaction, when the writer read it.
    pub fn fence_hint(&self) -> Option<i64> {
        self.fence.get()
    }

    pub fn set_fence_hint(&self, last: i64) {
        self.fence.set(Some(last));
    }

    /// Notes that this transaction writes `area` (see [`LOCKS`]); returns self, for
    /// `self.touch(LOCKS).execute(...)`.
    pub fn touch(&self, area: u8) -> &Self {
        self.touched.set(self.touched.get() | area);
        self
    }

    /// What this transaction wrote so far, as [`LOCKS`] | [`TASKS`] | [`AGENTS`].
    pub fn touched(&self) -> u8 {
        self.touched.get()
    }

    /// Queues a statement that changes no row (BEGIN, ...) to go ahead of the next one.
    pub fn send_first(&self, sql: &str) {
        let mut deferred = self.deferred.borrow_mut();
        deferred.push_str(sql);
        deferred.push_str(";\n");
    }

    /// Runs reads back to back in one round trip, in this order; the rows of each.
    pub fn query_all(&self, statements: &[(&str, Params<'_>)]) -> Result<Vec<Vec<Row>>> {
        self.block(async {
            // Prepared first, so the executions go out in order.
            let mut prepared = Vec::with_capacity(statements.len());
            for (sql, _) in statements {
                prepared.push(self.client.prepare_cached(sql).await?);
            }
            let runs = prepared
                .iter()
                .zip(statements)
                .map(|(statement, (_, params))| self.client.query(statement, params));
            futures::future::join_all(runs).await.into_iter().collect()
        })
    }

    /// Keeps the live leases and waits read ahead, for the next `leases("", None)` and
    /// `queued_waits`.
    pub fn leases_read_ahead(&self, rows: Vec<LeaseRow>, waits: Vec<QueuedWait>) {
        *self.leases_ahead.borrow_mut() = Some(rows);
        *self.waits_ahead.borrow_mut() = Some(waits);
    }

    /// Drops the leases and waits read ahead: a write may have changed them.
    fn forget_read_ahead(&self) {
        self.leases_ahead.take();
        self.waits_ahead.take();
    }

    /// Keeps the outcomes read ahead for `keys` (`found` are those that have one).
    pub fn outcomes_read_ahead(&self, keys: &[String], found: Vec<(String, Previous)>) {
        let mut ahead = self.outcomes_ahead.borrow_mut();
        ahead.extend(keys.iter().map(|k| (k.clone(), None)));
        ahead.extend(found.into_iter().map(|(k, p)| (k, Some(p))));
    }

    /// Sets the head revision the next `head_revision` answers without asking.
    pub fn hint_head(&self, revision: Option<i64>) {
        self.head_hint.set(revision);
    }

    /// The hinted head revision, once.
    pub fn take_head_hint(&self) -> Option<i64> {
        self.head_hint.take()
    }

    /// Queues a statement that writes and whose result nobody reads; it is sent ahead of
    /// the next statement, or with the commit. Its values must be literals ([`Lit`]).
    /// Counts as one change.
    pub fn defer(&self, sql: String) {
        self.forget_read_ahead();
        let mut deferred = self.deferred.borrow_mut();
        deferred.push_str(&sql);
        deferred.push_str(";\n");
        self.changed.set(self.changed.get() + 1);
    }

    /// Forgets what is deferred and any failure: a new transaction starts (or the last
    /// one was rolled back).
    pub fn reset(&self) {
        self.deferred.borrow_mut().clear();
        self.aborted.set(false);
        self.touched.set(0);
        self.head_hint.set(None);
        self.fence.set(None);
        self.forget_read_ahead();
        self.outcomes_ahead.borrow_mut().clear();
    }

    /// Whether a statement failed in the current transaction.
    pub fn aborted(&self) -> bool {
        self.aborted.get()
    }

    /// Whether the connection to the server is gone (a restart, `pg_terminate_backend`).
    pub fn is_closed(&self) -> bool {
        self.lost.get() || self.client.is_closed()
    }

    /// For tests: from now on the connection counts as broken (and is replaced).
    pub fn lose_connection(&self) {
        self.lost.set(true);
    }

    /// Rows changed so far through [`PgConn::execute`] and [`PgConn::query_write`].
    pub fn changed(&self) -> u64 {
        self.changed.get()
    }

    /// Runs `work`, after the deferred writes: both go out together, so the writes cost
    /// no round trip of their own.
    fn block<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        let deferred = self.deferred.take();
        let done = if deferred.is_empty() {
            self.driver.run(work)
        } else {
            // `join` polls the deferred batch first, so it is sent first.
            let (sent, done) = self.driver.run(futures::future::join(
                self.client.batch_execute(&deferred),
                work,
            ));
            sent.and(done)
        };
        if done.is_err() {
            self.aborted.set(true);
        }
        Ok(done?)
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
        self.forget_read_ahead();
        let rows = self.query(sql, params)?;
        self.changed
            .set(self.changed.get() + rows.len().max(1) as u64);
        Ok(rows)
    }

    /// Runs a statement that writes; the rows it changed.
    pub fn execute(&self, sql: &str, params: Params<'_>) -> Result<u64> {
        self.forget_read_ahead();
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

/// What drives a connection's I/O while a statement waits.
#[derive(Clone)]
pub enum Driver {
    /// The daemon's runtime (reads, from any thread; see [`block_on`]).
    Shared(Handle),
    /// A runtime of the writer's own, run on the writer's thread while it waits: a
    /// statement's answer then wakes no other thread.
    Own(Arc<OwnRuntime>),
}

impl Driver {
    pub fn run<F: std::future::Future>(&self, work: F) -> F::Output {
        match self {
            Driver::Shared(handle) => block_on(handle, work),
            Driver::Own(own) => own.block_on(work),
        }
    }
}

/// A current-thread runtime for the writer's connection. Dropped without waiting, so
/// dropping it is safe anywhere (even inside the daemon's runtime).
pub struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl OwnRuntime {
    pub fn new() -> Result<OwnRuntime> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Unavailable(format!("cannot start the writer's runtime: {e}")))?;
        Ok(OwnRuntime(Some(runtime)))
    }

    fn block_on<F: std::future::Future>(&self, work: F) -> F::Output {
        self.0
            .as_ref()
            .expect("the runtime lives until dropped")
            .block_on(work)
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
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

/// A value as an SQL literal, for [`PgConn::defer`].
pub trait Lit {
    fn lit(&self) -> String;
}

impl Lit for i64 {
    fn lit(&self) -> String {
        self.to_string()
    }
}

impl Lit for bool {
    fn lit(&self) -> String {
        if *self { "TRUE" } else { "FALSE" }.into()
    }
}

impl Lit for &str {
    /// An escape string (`E'...'`): its meaning does not depend on the server's
    /// `standard_conforming_strings`.
    fn lit(&self) -> String {
        let mut out = String::with_capacity(self.len() + 3);
        out.push_str("E'");
        for c in self.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                c => out.push(c),
            }
        }
        out.push('\'');
        out
    }
}

impl<T: Lit> Lit for Option<T> {
    fn lit(&self) -> String {
        match self {
            Some(v) => v.lit(),
            None => "NULL".into(),
        }
    }
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
            "no PostgreSQL connection available ({}); nothing was written, retry shortly",
            pool_cause(&err)
        ))
    }
}

/// What went wrong in a pool's attempt at a connection, down to the cause the server or
/// the network gave.
pub fn pool_cause(err: &deadpool_postgres::PoolError) -> String {
    match err {
        deadpool_postgres::PoolError::Backend(e) => cause(e),
        other => other.to_string(),
    }
}

/// The root of a PostgreSQL failure: the server's message and SQLSTATE, or the network's
/// error.
pub fn cause(err: &tokio_postgres::Error) -> String {
    if let Some(db) = err.as_db_error() {
        return format!("{} (SQLSTATE {})", db.message(), db.code().code());
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        text = format!("{text}: {inner}");
        source = inner.source();
    }
    text
}

/// A failed first connection, said with where batond tried to connect (never the
/// password) and what to check.
pub fn connect_error(config: &tokio_postgres::Config, err: &deadpool_postgres::PoolError) -> Error {
    use tokio_postgres::config::Host;
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let at = format!(
        "{}:{} (database `{}`, user `{}`)",
        if hosts.is_empty() {
            "localhost".into()
        } else {
            hosts.join(",")
        },
        if ports.is_empty() {
            "5432".into()
        } else {
            ports.join(",")
        },
        config.get_dbname().unwrap_or("(the user's name)"),
        config.get_user().unwrap_or("(unset)"),
    );
    let code = match err {
        deadpool_postgres::PoolError::Backend(e) => e.code().map(|c| c.code().to_string()),
        _ => None,
    };
    let check = match code.as_deref() {
        Some("3D000") => "create the database (`createdb NAME`) or fix its name in BATON_DATABASE_URL",
        Some("28000" | "28P01") => "check the user and password in BATON_DATABASE_URL and the server's pg_hba.conf",
        Some("57P03") => "the server is starting up or shutting down; start batond again once it accepts connections",
        Some(_) => "check BATON_DATABASE_URL and the PostgreSQL server's log",
        None => "check that PostgreSQL runs there and accepts TCP connections (listen_addresses, port, firewall), or fix the host and port in BATON_DATABASE_URL",
    };
    Error::Unavailable(format!(
        "cannot connect to PostgreSQL at {at}: {}; {check}",
        pool_cause(err)
    ))
}

#[cfg(test)]
mod tests {
    use super::Lit;

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!("it's".lit(), r"E'it\'s'");
        assert_eq!(r#"{"a":"\"\\"}"#.lit(), r#"E'{"a":"\\"\\\\"}'"#);
        assert_eq!("naïve ✓".lit(), "E'naïve ✓'");
        assert_eq!(None::<&str>.lit(), "NULL");
        assert_eq!(Some(-5i64).lit(), "-5");
        assert_eq!(true.lit(), "TRUE");
    }
}
