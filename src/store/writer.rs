//! The single writer: one thread owns the only read-write SQLite connection. Requests that
//! write are queued to it; it applies everything queued in one transaction (group commit),
//! each request inside its own savepoint, and answers every request only after the
//! transaction is durable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use crate::clock::Clock;
use crate::error::{Error, Result};

use super::idempotency::{self, Idempotency};

/// A serialized result, ready to be placed in a response line.
pub type Reply = Box<RawValue>;
/// A mutation, run on the writer inside its own savepoint.
pub type WriteFn = Box<dyn FnOnce(&mut WriteCtx<'_>) -> Result<Reply> + Send>;
/// A read that must observe earlier writes of the same connection, run on the writer.
pub type ReadFn = Box<dyn FnOnce(&Connection) -> Result<Reply> + Send>;

/// Prepared statements kept per connection (the default 16 is fewer than the writer uses).
pub const STATEMENT_CACHE: usize = 64;
/// Most requests applied in one transaction.
const MAX_BATCH: usize = 2048;
/// Requests that may wait for the writer before new ones are refused with 429.
pub const QUEUE_CAPACITY: usize = 16 * 1024;
/// How often remembered idempotent answers older than 24 hours are purged.
const IDEMPOTENCY_PURGE_EVERY_MS: i64 = 60_000;

enum Work {
    Write {
        idempotency: Option<Idempotency>,
        apply: WriteFn,
    },
    Read(ReadFn),
}

struct Job {
    work: Work,
    reply: oneshot::Sender<Result<Reply>>,
}

enum Message {
    Job(Job),
    Shutdown(oneshot::Sender<()>),
}

/// What a mutation sees: the open transaction, the revision counter and the batch's time.
pub struct WriteCtx<'a> {
    pub conn: &'a Connection,
    revision: &'a mut i64,
    /// Wall-clock time of this batch, epoch milliseconds.
    pub now_ms: i64,
}

impl WriteCtx<'_> {
    /// Takes the next global revision (also the seq of the journal event it goes with).
    pub fn next_revision(&mut self) -> i64 {
        *self.revision += 1;
        *self.revision
    }

    /// The last revision handed out so far.
    pub fn head_revision(&self) -> i64 {
        *self.revision
    }
}

/// Counters about commits, for Metrics.
#[derive(Default)]
pub struct WriterStats {
    pub commits: AtomicU64,
    pub writes: AtomicU64,
    pub max_batch: AtomicU64,
    pub failed_commits: AtomicU64,
    pub queued: AtomicU64,
}

/// A handle to the writer thread; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    jobs: mpsc::Sender<Message>,
    pub stats: Arc<WriterStats>,
}

impl Writer {
    /// Starts the writer thread on `conn`, which must already be migrated.
    pub fn spawn(
        conn: Connection,
        clock: Arc<dyn Clock>,
    ) -> Result<(Writer, std::thread::JoinHandle<()>)> {
        let revision: i64 =
            conn.query_row("SELECT value FROM meta WHERE name = 'revision'", [], |r| {
                r.get(0)
            })?;
        let (jobs, rx) = mpsc::channel(QUEUE_CAPACITY);
        let stats = Arc::new(WriterStats::default());
        let thread_stats = stats.clone();
        let handle = std::thread::Builder::new()
            .name("baton-writer".into())
            .spawn(move || {
                WriterLoop {
                    conn,
                    clock,
                    stats: thread_stats,
                    revision,
                    last_purge_ms: 0,
                }
                .run(rx)
            })
            .map_err(|e| Error::Internal(format!("cannot start the writer thread: {e}")))?;
        Ok((Writer { jobs, stats }, handle))
    }

    /// Queues a mutation; the receiver resolves once its transaction is durable.
    pub fn write(
        &self,
        idempotency: Option<Idempotency>,
        apply: WriteFn,
    ) -> Result<oneshot::Receiver<Result<Reply>>> {
        let (reply, rx) = oneshot::channel();
        self.submit(Job {
            work: Work::Write { idempotency, apply },
            reply,
        })?;
        Ok(rx)
    }

    /// Queues a read behind every write queued before it.
    pub fn read(&self, apply: ReadFn) -> Result<oneshot::Receiver<Result<Reply>>> {
        let (reply, rx) = oneshot::channel();
        self.submit(Job {
            work: Work::Read(apply),
            reply,
        })?;
        Ok(rx)
    }

    fn submit(&self, job: Job) -> Result<()> {
        match self.jobs.try_send(Message::Job(job)) {
            Ok(()) => {
                self.stats.queued.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(_)) => Err(Error::Overloaded),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(shutting_down()),
        }
    }

    /// Commits everything queued so far, checkpoints the WAL and stops the thread.
    pub async fn shutdown(&self) {
        let (done, rx) = oneshot::channel();
        if self.jobs.send(Message::Shutdown(done)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

fn shutting_down() -> Error {
    Error::Unavailable("batond is shutting down, nothing was written; retry once it is back".into())
}

struct WriterLoop {
    conn: Connection,
    clock: Arc<dyn Clock>,
    stats: Arc<WriterStats>,
    revision: i64,
    last_purge_ms: i64,
}

impl WriterLoop {
    fn run(mut self, mut rx: mpsc::Receiver<Message>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut shutdown = None;
        while let Some(first) = rx.blocking_recv() {
            let mut next = Some(first);
            while let Some(message) = next.take() {
                match message {
                    Message::Job(job) => batch.push(job),
                    Message::Shutdown(done) => {
                        shutdown = Some(done);
                        break;
                    }
                }
                if batch.len() < MAX_BATCH {
                    next = rx.try_recv().ok();
                }
            }
            if !batch.is_empty() {
                self.run_batch(&mut batch);
            }
            if let Some(done) = shutdown.take() {
                self.finish(&mut rx);
                let _ = done.send(());
                return;
            }
        }
    }

    /// Refuses whatever slipped in after the shutdown request and checkpoints the WAL.
    fn finish(&mut self, rx: &mut mpsc::Receiver<Message>) {
        rx.close();
        while let Ok(message) = rx.try_recv() {
            match message {
                Message::Job(job) => {
                    let _ = job.reply.send(Err(shutting_down()));
                }
                Message::Shutdown(done) => {
                    let _ = done.send(());
                }
            }
        }
        if let Err(err) = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);") {
            tracing::warn!(%err, "WAL checkpoint at shutdown failed");
        }
    }

    fn run_batch(&mut self, batch: &mut Vec<Job>) {
        let start_revision = self.revision;
        let now_ms = self.clock.wall_ms();
        let (works, replies): (Vec<Work>, Vec<_>) =
            batch.drain(..).map(|j| (j.work, j.reply)).unzip();
        let n_jobs = works.len();
        let n_writes = works
            .iter()
            .filter(|w| matches!(w, Work::Write { .. }))
            .count() as u64;
        let mut results: Vec<Result<Reply>> = Vec::with_capacity(n_jobs);
        match self.apply_all(works, now_ms, &mut results) {
            Ok(()) => {
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
                self.stats.writes.fetch_add(n_writes, Ordering::Relaxed);
                self.stats
                    .max_batch
                    .fetch_max(n_jobs as u64, Ordering::Relaxed);
            }
            Err(err) => {
                tracing::error!(%err, "commit failed; every request in the batch is answered 503");
                self.stats.failed_commits.fetch_add(1, Ordering::Relaxed);
                self.revision = start_revision;
                let failure = match Error::from(err) {
                    Error::Internal(msg) => Error::Unavailable(format!(
                        "storage failed to commit ({msg}), nothing was written; retry"
                    )),
                    other => other,
                };
                // A refusal (conflict, ...) stays true; anything that was to be written was not.
                for result in results.iter_mut() {
                    if !matches!(result, Err(e) if !e.is_server_fault()) {
                        *result = Err(failure.clone());
                    }
                }
                results.resize_with(n_jobs, || Err(failure.clone()));
            }
        }
        for (reply, result) in replies.into_iter().zip(results) {
            let _ = reply.send(result);
        }
    }

    /// Runs every job in one transaction, pushing one result per job, then commits.
    fn apply_all(
        &mut self,
        works: Vec<Work>,
        now_ms: i64,
        results: &mut Vec<Result<Reply>>,
    ) -> rusqlite::Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        for work in works {
            let result = match work {
                Work::Write { idempotency, apply } => {
                    // Cached statements: a savepoint per request costs two cheap steps.
                    tx.prepare_cached("SAVEPOINT request")?.execute([])?;
                    let before = self.revision;
                    let mut ctx = WriteCtx {
                        conn: &tx,
                        revision: &mut self.revision,
                        now_ms,
                    };
                    let result = idempotency::apply(&mut ctx, idempotency.as_ref(), apply);
                    if result.is_err() {
                        // Undo whatever the refused request wrote.
                        self.revision = before;
                        tx.prepare_cached("ROLLBACK TO request")?.execute([])?;
                    }
                    tx.prepare_cached("RELEASE request")?.execute([])?;
                    result
                }
                Work::Read(apply) => apply(&tx),
            };
            results.push(result);
        }
        if now_ms - self.last_purge_ms > IDEMPOTENCY_PURGE_EVERY_MS {
            idempotency::purge_expired(&tx, now_ms)?;
            self.last_purge_ms = now_ms;
        }
        tx.prepare_cached("UPDATE meta SET value = ?1 WHERE name = 'revision'")?
            .execute([self.revision])?;
        tx.commit()
    }
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
