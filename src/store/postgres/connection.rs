//! Opening a PostgreSQL database (a pool, migrations), reads on pooled connections, and the
//! writer's connection ([`PgWrites`]): its batches run under a transaction-scoped advisory
//! lock, so the batches of every instance sharing the database apply one at a time.

use std::cell::Cell;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::runtime::Handle;

use crate::error::{Error, Result};
use tokio_postgres::types::ToSql;

use crate::store::boundary::{ForeignChanges, Foreseen, Outcomes, Storage, WriteStorage};

use super::{leases, Driver, OwnRuntime, Params, PgConn};

/// The advisory lock every instance's writer holds for the length of a batch.
const WRITER_LOCK: i64 = 0x6261_746f_6e01;

/// Connections kept for reads.
const READ_POOL: usize = 16;

/// The channel each commit is announced on (the payload is the committing instance's id).
/// Only a wake-up: what changed is read from the tables.
const COMMITS: &str = "baton_commits";

/// The read side: a pool of connections and the runtime that drives them.
pub struct PgReads {
    pool: Pool,
    handle: Handle,
}

/// Connects to `url`: checks the server answers, applies the migrations, and returns the
/// read side, the writer's connection, the schema version and the database's id. Blocks:
/// call it from a thread outside the runtime `handle` drives.
pub fn open(
    url: &str,
    instance_id: &str,
    now_ms: i64,
    handle: Handle,
    lose_commit_answers: u64,
) -> Result<(PgReads, PgWrites, i64, i64)> {
    let config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| Error::Invalid(format!("BATON_DATABASE_URL is not a PostgreSQL URL: {e}")))?;
    let pool = |config: tokio_postgres::Config, size: usize| {
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        Pool::builder(manager)
            .max_size(size)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            // A pool that cannot give a connection says so (503) rather than wait forever.
            .wait_timeout(Some(std::time::Duration::from_secs(10)))
            .build()
            .map_err(|e| Error::Unavailable(format!("cannot build the PostgreSQL pool: {e}")))
    };
    let reads = pool(config.clone(), READ_POOL)?;
    // The writer's connection lives on a runtime of its own, driven by the writer's
    // thread while it waits for an answer (its pool makes it there, and again after a
    // reconnection).
    let own = Driver::Own(Arc::new(OwnRuntime::new()?));
    // Two: a connection found dead is replaced while it is still held.
    let writer_pool = pool(config.clone(), 2)?;
    let first = own
        .run(writer_pool.get())
        .map_err(|e| super::connect_error(&config, &e))?;
    let conn = PgConn::new(first, own.clone());
    let schema_version = super::migrations::migrate(&conn, now_ms)?;
    let database_id = conn.database_id()?;
    let writes = PgWrites {
        pool: writer_pool,
        driver: own,
        conn,
        at_request: Cell::new(0),
        at_begin: 0,
        began_at_ms: None,
        announce: format!("NOTIFY {COMMITS}, '{instance_id}'; COMMIT"),
        seen: [-1; 3],
        foreign: ForeignChanges::ALL,
        commit_mark: format!("commit:{instance_id}"),
        commits: 0,
        lose_commit_answers,
    };
    Ok((
        PgReads {
            pool: reads,
            handle,
        },
        writes,
        schema_version,
        database_id,
    ))
}

impl PgReads {
    /// Runs `f` on a pooled connection inside one read-only snapshot.
    pub fn read<T>(&self, f: impl FnOnce(&dyn Storage) -> Result<T>) -> Result<T> {
        let conn = PgConn::new(
            super::block_on(&self.handle, self.pool.get())?,
            Driver::Shared(self.handle.clone()),
        );
        conn.batch("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
        let result = f(&conn);
        // Nothing was written: ending the snapshot cannot lose anything.
        let ended = conn.batch("COMMIT");
        let value = result?;
        ended?;
        Ok(value)
    }

    /// Runs a read of one statement on a pooled connection (a statement is one snapshot).
    pub fn read_one_statement<T>(&self, f: impl FnOnce(&dyn Storage) -> Result<T>) -> Result<T> {
        let conn = PgConn::new(
            super::block_on(&self.handle, self.pool.get())?,
            Driver::Shared(self.handle.clone()),
        );
        f(&conn)
    }
}

/// The writer's connection. Replaced by a fresh one from the pool when the server closed
/// it (a restart, `pg_terminate_backend`): the batch that met the closed connection failed
/// with 503 and nothing of it was applied.
pub struct PgWrites {
    /// The writer's own pool (one connection in use).
    pool: Pool,
    driver: Driver,
    conn: PgConn,
    /// Rows changed when the current request started.
    at_request: Cell<u64>,
    /// Rows changed when the batch started.
    at_begin: u64,
    /// The server's clock when the batch started.
    began_at_ms: Option<i64>,
    /// What ends a batch that changed something: tells the other instances, and commits.
    announce: String,
    /// The epochs of locks, tasks and agents this writer's memory reflects.
    seen: [i64; 3],
    /// What other instances changed, as found when the batch began.
    foreign: ForeignChanges,
    /// The `meta` row where each batch that writes records its number, in the same
    /// transaction: after a COMMIT whose answer was lost, it tells whether it happened.
    commit_mark: String,
    /// Batches that wrote, counted from 1; the last one's number is in `commit_mark`.
    commits: i64,
    /// For tests: treat every Nth commit's answer as lost (0: never).
    lose_commit_answers: u64,
}

/// How long the writer keeps trying to reach PostgreSQL to learn whether a COMMIT whose
/// answer was lost happened, before it answers that the outcome is unknown.
const OUTCOME_LOOKUP_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// The parts of the state with an epoch in `meta`, as `touch` flags and names.
const EPOCHS: [(u8, &str); 3] = [
    (super::LOCKS, "locks_epoch"),
    (super::TASKS, "tasks_epoch"),
    (super::AGENTS, "agents_epoch"),
];

impl WriteStorage for PgWrites {
    fn storage(&self) -> &dyn Storage {
        &self.conn
    }

    fn outcomes(&self) -> &dyn Outcomes {
        &self.conn
    }

    fn shared(&self) -> bool {
        true
    }

    fn begin(&mut self, foreseen: &Foreseen) -> Result<()> {
        if self.conn.is_closed() {
            let fresh = self.driver.run(self.pool.get())?;
            self.conn = PgConn::new(fresh, self.driver.clone());
            tracing::info!("the writer reconnected to PostgreSQL");
        }
        self.conn.reset();
        self.at_begin = self.conn.changed();
        // BEGIN, the lock and the reads after it, in one round trip. The reads run once
        // the lock is held, each with a snapshot of its own, so they see every batch that
        // committed before: the head, the fencing counter, the epochs, the live leases if
        // another instance changed them, and what the batch's requests are foreseen to
        // read.
        self.conn.send_first("BEGIN");
        let lock =
            format!("SELECT {SERVER_NOW_MS} FROM (SELECT pg_advisory_xact_lock($1)) AS locked");
        let leases_sql = leases::leases_if_moved();
        let outcomes_sql = leases::outcomes_of();
        let waits_sql = leases::waits_if_moved();
        let locks_seen: [&(dyn ToSql + Sync); 1] = [&self.seen[0]];
        let mut reads: Vec<(&str, Params<'_>)> = vec![
            (&lock, &[&WRITER_LOCK]),
            (
                "SELECT name, value FROM meta
                 WHERE name IN ('revision', 'fencing_token', 'locks_epoch', 'tasks_epoch',
                                'agents_epoch')
                 UNION ALL SELECT 'journal_seq', COALESCE(max(seq), 0) FROM events",
                &[],
            ),
            (&leases_sql, &locks_seen),
            (&waits_sql, &locks_seen),
        ];
        let outcome_keys: [&(dyn ToSql + Sync); 1] = [&foreseen.lock_outcomes];
        if !foreseen.lock_outcomes.is_empty() {
            reads.push((&outcomes_sql, &outcome_keys));
        }
        let mut rows = self.conn.query_all(&reads)?.into_iter();
        let (clock, meta, live, waits) = (
            rows.next().unwrap_or_default(),
            rows.next().unwrap_or_default(),
            rows.next().unwrap_or_default(),
            rows.next().unwrap_or_default(),
        );
        if let Some(found) = rows.next() {
            self.conn
                .outcomes_read_ahead(&foreseen.lock_outcomes, leases::outcome_rows(&found));
        }
        self.began_at_ms = clock.first().map(|r| r.get(0));
        let value = |name: &str| {
            meta.iter()
                .find(|r| r.get::<_, &str>(0) == name)
                .map(|r| r.get::<_, i64>(1))
        };
        let mut head = value("revision");
        if let (Some(stored), Some(last)) = (head, value("journal_seq")) {
            if last > stored {
                // The journal holds events above the stored head: handing out the head's
                // next revisions would reuse their seqs. The head is the last event's seq;
                // it is stored with this batch.
                tracing::warn!(
                    stored_head = stored,
                    last_seq = last,
                    "the stored head revision was behind the journal (a daemon that stored an older head, from a version before this fix); the head is now the journal's last seq"
                );
                self.conn.defer(format!(
                    "UPDATE meta SET value = GREATEST(value, {last}) WHERE name = 'revision'"
                ));
                head = Some(last);
            }
        }
        self.conn.hint_head(head);
        if let Some(last) = value("fencing_token") {
            self.conn.set_fence_hint(last);
        }
        let now: Vec<i64> = EPOCHS
            .iter()
            .map(|(_, name)| value(name).unwrap_or(-1))
            .collect();
        self.foreign = ForeignChanges {
            locks: now[0] != self.seen[0],
            tasks: now[1] != self.seen[1],
            agents: now[2] != self.seen[2],
        };
        if self.foreign.locks && value("locks_epoch").is_some() {
            self.conn
                .leases_read_ahead(leases::lease_rows(&live), leases::wait_rows(&waits));
        }
        self.seen = [now[0], now[1], now[2]];
        Ok(())
    }

    fn foresee(&mut self, foreseen: &Foreseen) -> Result<()> {
        if !foreseen.lock_outcomes.is_empty() {
            let keys: [&(dyn ToSql + Sync); 1] = [&foreseen.lock_outcomes];
            let found = self.conn.query(&leases::outcomes_of(), &keys)?;
            self.conn
                .outcomes_read_ahead(&foreseen.lock_outcomes, leases::outcome_rows(&found));
        }
        Ok(())
    }

    fn foreign_changes(&self) -> ForeignChanges {
        self.foreign
    }

    fn server_clock_ms(&self) -> Option<i64> {
        self.began_at_ms
    }

    fn commit(&mut self) -> Result<()> {
        if self.conn.aborted() {
            // PostgreSQL would answer COMMIT with a silent ROLLBACK.
            return Err(aborted());
        }
        if self.conn.changed() == self.at_begin {
            let done = self.conn.batch("COMMIT");
            self.conn.reset();
            return done;
        }
        // What this batch wrote moves its epoch, so the other instances reload it.
        let touched = self.conn.touched();
        for (flag, name) in EPOCHS {
            if touched & flag != 0 {
                self.conn.send_first(&format!(
                    "UPDATE meta SET value = value + 1 WHERE name = '{name}'"
                ));
            }
        }
        // The batch's number goes in with it: if COMMIT's answer is lost, the row tells
        // whether it happened.
        self.commits += 1;
        self.conn.send_first(&format!(
            "INSERT INTO meta (name, value) VALUES ('{}', {}) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
            self.commit_mark, self.commits
        ));
        // The notification is delivered when (and only if) the transaction commits.
        let mut committed = self.conn.batch(&self.announce);
        if committed.is_ok()
            && self.lose_commit_answers > 0
            && (self.commits as u64).is_multiple_of(self.lose_commit_answers)
        {
            committed = Err(Error::Unavailable("the test lost COMMIT's answer".into()));
            self.conn.lose_connection();
        }
        if let Err(err) = committed {
            // Rolled back for sure, unless the connection broke: then COMMIT may have
            // happened, and the requests must be told the truth.
            if !self.conn.is_closed() {
                return Err(err);
            }
            self.learn_outcome(err)?;
        }
        // Nothing read at the start of this batch (head, fencing token) outlives it.
        self.conn.reset();
        for (i, (flag, _)) in EPOCHS.iter().enumerate() {
            if touched & flag != 0 {
                self.seen[i] += 1;
            }
        }
        Ok(())
    }

    fn rollback(&mut self) {
        self.conn.reset();
        if self.conn.is_closed() {
            return;
        }
        if let Err(err) = self.conn.batch("ROLLBACK") {
            tracing::error!(%err, "cannot roll back a failed batch");
        }
    }

    fn start_request(&self) -> Result<()> {
        self.at_request.set(self.conn.changed());
        Ok(())
    }

    fn undo_request(&self) -> Result<()> {
        if self.conn.aborted() {
            return Err(aborted());
        }
        if self.conn.changed() == self.at_request.get() {
            return Ok(());
        }
        Err(Error::Unavailable(
            "a request failed after it had written, so its whole batch was rolled back; nothing was written, retry".into(),
        ))
    }

    fn close(&mut self) {}
}

impl PgWrites {
    /// COMMIT's answer was lost with the connection: on a fresh connection, the batch's
    /// number in `commit_mark` says whether it committed (Ok) or not (the error, true:
    /// nothing was written). If PostgreSQL cannot be reached for [`OUTCOME_LOOKUP_FOR`],
    /// the outcome is unknown, and the requests are told so.
    fn learn_outcome(&mut self, lost: Error) -> Result<()> {
        let started = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(50);
        loop {
            let looked = self
                .driver
                .run(self.pool.get())
                .map_err(Error::from)
                .and_then(|fresh| {
                    let conn = PgConn::new(fresh, self.driver.clone());
                    let row = conn.query_opt(
                        "SELECT value FROM meta WHERE name = $1",
                        &[&self.commit_mark],
                    )?;
                    Ok((conn, row.map(|r| r.get::<_, i64>(0))))
                });
            match looked {
                Ok((conn, mark)) => {
                    self.conn = conn;
                    if mark == Some(self.commits) {
                        tracing::warn!("the connection to PostgreSQL broke during COMMIT; the batch had committed, so its requests are answered as done");
                        return Ok(());
                    }
                    tracing::warn!("the connection to PostgreSQL broke during COMMIT; the batch had not committed, so its requests are told nothing was written");
                    return Err(lost);
                }
                Err(err) if started.elapsed() >= OUTCOME_LOOKUP_FOR => {
                    tracing::error!(%err, "the connection to PostgreSQL broke during COMMIT and PostgreSQL stayed unreachable, so whether the batch committed is unknown");
                    return Err(Error::OutcomeUnknown(format!(
                        "the connection to PostgreSQL broke while this write was committing and PostgreSQL could not be reached to learn whether it did ({err}); it may or may not have been written: retry with the same idempotency_key (a repeat of a write that happened replays its answer), or read the state before writing again"
                    )));
                }
                Err(_) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
            }
        }
    }
}

/// The batch met a failed statement, after which PostgreSQL only rolls back.
fn aborted() -> Error {
    Error::Unavailable(
        "a statement failed in PostgreSQL, so the whole batch was rolled back; nothing was written, retry".into(),
    )
}

impl PgConn {
    /// The random id the database was given when its schema was made.
    fn database_id(&self) -> Result<i64> {
        let row = self.query_opt("SELECT value FROM meta WHERE name = 'database_id'", &[])?;
        Ok(row.map(|r| r.get::<_, i64>(0)).unwrap_or(0))
    }
}

/// The database server's clock, epoch milliseconds, as SQL.
const SERVER_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// See `Meta::instance_heartbeat`: the server's clock judges who is silent.
pub(super) fn heartbeat(
    conn: &PgConn,
    instance_id: &str,
    connection_base: u64,
    timeout_ms: i64,
) -> Result<Vec<u64>> {
    // Not counted as changes: a heartbeat is not news for the other instances.
    conn.query(
        &format!(
            "INSERT INTO instances (instance_id, connection_base, started_at, heartbeat_at)
             VALUES ($1, $2, {SERVER_NOW_MS}, {SERVER_NOW_MS})
             ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at"
        ),
        &[&instance_id, &super::i(connection_base)],
    )?;
    let silent = conn.query(
        &format!(
            "WITH gone AS (DELETE FROM instances WHERE heartbeat_at < {SERVER_NOW_MS} - $1
                           RETURNING instance_id, connection_base),
                  marks AS (DELETE FROM meta
                            WHERE name IN (SELECT 'commit:' || instance_id FROM gone))
             SELECT connection_base FROM gone"
        ),
        &[&timeout_ms],
    )?;
    Ok(silent.iter().map(|r| super::u(r.get(0))).collect())
}

/// See `Meta::live_instances`.
pub(super) fn live_instances(conn: &PgConn, timeout_ms: i64) -> Result<u64> {
    let row = conn.query_one(
        &format!("SELECT count(*) FROM instances WHERE heartbeat_at >= {SERVER_NOW_MS} - $1"),
        &[&timeout_ms],
    )?;
    Ok(super::u(row.get(0)))
}

/// Listens for the commits of other instances on a connection of its own and calls
/// `on_commit` for each (and once after every reconnection, which may have missed some),
/// until `stop`. Reconnects by itself, at most every second.
pub async fn listen(
    url: String,
    instance_id: String,
    on_commit: impl Fn() + Send + 'static,
    stop: tokio_util::sync::CancellationToken,
) {
    use futures::StreamExt;
    let mut failures = 0u32;
    loop {
        let connected = tokio_postgres::connect(&url, tokio_postgres::NoTls).await;
        let (client, mut connection) = match connected {
            Ok(pair) => pair,
            Err(err) => {
                failures += 1;
                if failures == 1 || failures.is_multiple_of(60) {
                    tracing::warn!(%err, "cannot listen for other instances' commits; retrying every second");
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => continue,
                }
            }
        };
        // The connection must be polled for LISTEN to complete and for notifications to
        // arrive: a task of its own drives it and passes the notifications on.
        let (tx, mut notified) = tokio::sync::mpsc::unbounded_channel::<String>();
        let driver = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let tokio_postgres::AsyncMessage::Notification(n) = message {
                    if tx.send(n.payload().to_string()).is_err() {
                        return;
                    }
                }
            }
        });
        let listen = format!("LISTEN {COMMITS}");
        let listened = tokio::select! {
            done = client.batch_execute(&listen) => done,
            _ = stop.cancelled() => {
                driver.abort();
                return;
            }
        };
        if let Err(err) = listened {
            driver.abort();
            tracing::warn!(%err, "cannot LISTEN for other instances' commits; retrying");
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => continue,
            }
        }
        if failures > 0 {
            tracing::info!("listening for other instances' commits again");
        }
        // Commits made while this connection was down are caught up now.
        on_commit();
        loop {
            let payload = tokio::select! {
                payload = notified.recv() => payload,
                _ = stop.cancelled() => {
                    driver.abort();
                    return;
                }
            };
            match payload {
                Some(from) if from != instance_id => on_commit(),
                Some(_) => {}
                // The connection ended or failed: connect again.
                None => break,
            }
        }
        drop(client);
        failures = 1;
        tracing::warn!(
            "lost the connection that listens for other instances' commits; reconnecting"
        );
    }
}
