//! The single writer: one thread owns the only write connection to storage. Requests that
//! write are queued to it; it applies everything queued in one transaction (group commit),
//! each request undone alone if it fails before it writes (else the whole batch is), and
//! answers every request only after the transaction is durable. It keeps what the rules hold in memory (lock and node leases'
//! deadlines, waiters) and runs the rules' upkeep: recovery at start, expiry before each
//! batch, rebuilding memory after a rollback.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::store::boundary::StorageHealth;
use crate::store::boundary::{
    Agents, ForeignChanges, Foreseen, Journal, Leases, Meta, Nodes, OpenWrites, Outcomes, Records,
    Remembered, Storage, Tokens, WriteStorage,
};

use super::agents::AgentState;
use super::idempotency::Idempotency;
use super::locks::LockState;
use super::tasks::TaskState;

mod batches;
mod retention;

use batches::WriterLoop;
pub use retention::Retention;

pub use crate::protocol::Reply;
/// The channel a request is answered on, with the request's idempotency key: an answer
/// given later (after a wait) is remembered for that key like one given at once, in the
/// transaction that produced it, so a retry after a lost answer replays it (the same node
/// and lease, never a second one).
pub struct ReplyTx {
    tx: oneshot::Sender<Result<Reply>>,
    idempotency: Option<Idempotency>,
}

impl ReplyTx {
    fn new(tx: oneshot::Sender<Result<Reply>>) -> ReplyTx {
        ReplyTx {
            tx,
            idempotency: None,
        }
    }

    /// Whether nobody waits for the answer any more.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Answers the request; Err(answer) if it is no longer waited for.
    pub fn send(self, answer: Result<Reply>) -> std::result::Result<(), Result<Reply>> {
        self.tx.send(answer)
    }
}
/// A mutation, run on the writer inside a batch (`WriteStorage::start_request`). `Ok(None)` means the mutation
/// took the reply channel (`WriteCtx::take_reply`) to answer later, e.g. a waiting acquire.
pub type WriteFn = Box<dyn FnOnce(&mut WriteCtx<'_>) -> Result<Option<Reply>> + Send>;
/// One step of a request that runs in steps (`WriteCtx::continue_later`): `Ok(None)`
/// while work remains, the answer once done.
pub type StepFn = Box<dyn FnMut(&mut WriteCtx<'_>) -> Result<Option<Reply>> + Send>;
/// A read that must observe earlier writes of the same connection, run on the writer.
pub type ReadFn = Box<dyn FnOnce(&dyn Storage) -> Result<Reply> + Send>;

/// How a request that may wait is served: answered now, or later (it took its reply
/// channel, `WriteCtx::take_reply`, and is answered when what it waits for happens or its
/// wait runs out).
pub enum Served<T> {
    Now(T),
    Later,
}

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
        foreseen: Foreseen,
    },
    Read(ReadFn),
}

struct Job {
    work: Work,
    /// `None` for work nobody waits on (the sweeper's tick, a closed connection).
    reply: Option<ReplyTx>,
}

enum Message {
    Job(Job),
    Shutdown(oneshot::Sender<()>),
}

/// What a mutation sees: storage inside the open transaction, the revision counter, the
/// batch's time and what the writer keeps in memory.
pub struct WriteCtx<'a> {
    storage: &'a dyn Storage,
    outcomes: &'a dyn Outcomes,
    revision: &'a mut i64,
    /// Wall-clock time of this batch, epoch milliseconds.
    pub now_ms: i64,
    /// Monotonic time of this batch (judges lease expiry).
    pub mono_now: Duration,
    pub locks: &'a mut LockState,
    pub tasks: &'a mut TaskState,
    pub agents: &'a mut AgentState,
    /// Other daemons write to the same database: connection-bound leases and sessions may
    /// be theirs, alive, whatever this daemon's start finds.
    pub shared: bool,
    reply: &'a mut Option<ReplyTx>,
    /// Answers to other requests (waiters handed a lock) to send once this batch commits.
    pub deferred: &'a mut Vec<(ReplyTx, Result<Reply>)>,
    stepped: &'a mut std::collections::VecDeque<Stepped>,
    /// Versions written that put an older one past `BATON_HISTORY_KEEP` (retention's work).
    trimmable: &'a mut u64,
    history_keep: Option<u64>,
}

/// A request that runs in steps, one per batch, and its reply channel (None: nobody waits).
struct Stepped {
    reply: Option<ReplyTx>,
    step: StepFn,
}

/// What the writer keeps in memory across batches, and lends each mutation.
struct Memory {
    revision: i64,
    /// See [`WriteCtx::shared`].
    shared: bool,
    locks: LockState,
    tasks: TaskState,
    agents: AgentState,
    /// Requests that run in steps, in the order they began.
    stepped: std::collections::VecDeque<Stepped>,
    /// See [`WriteCtx::wrote_version`].
    trimmable: u64,
    history_keep: Option<u64>,
}

impl Memory {
    /// Rebuilds the leases and sessions from storage, after a write was rolled back.
    fn reload(&mut self, storage: &dyn Storage, now_ms: i64, mono_now: Duration) {
        self.reload_some(storage, now_ms, mono_now, ForeignChanges::ALL);
    }

    /// Rebuilds the parts `which` names from storage.
    fn reload_some(
        &mut self,
        storage: &dyn Storage,
        now_ms: i64,
        mono_now: Duration,
        which: ForeignChanges,
    ) {
        let mut reloaded = Vec::with_capacity(3);
        if which.locks {
            reloaded.push(("lock leases", self.locks.reload(storage, now_ms, mono_now)));
        }
        if which.tasks {
            reloaded.push(("node leases", self.tasks.reload(storage, now_ms, mono_now)));
        }
        if which.agents {
            reloaded.push(("sessions", self.agents.reload(storage, now_ms, mono_now)));
        }
        for (what, result) in reloaded {
            if let Err(err) = result {
                static RELOAD_FAILED: crate::log_limit::Limited =
                    crate::log_limit::Limited::new(crate::log_limit::EVERY);
                if let Some(held_back) = RELOAD_FAILED.admit() {
                    tracing::error!(%err, held_back, "cannot reload {what} from storage");
                }
            }
        }
    }

    /// Before the batch commits: stores what memory counted ahead of storage during it
    /// (the last fencing token handed out).
    fn store_counters(&mut self, storage: &dyn Storage) -> Result<()> {
        match self.locks.take_fencing() {
            Some(last) => storage.store_fencing_token(last),
            None => Ok(()),
        }
    }

    /// The earliest lease, session or wait deadline still pending.
    fn next_deadline(&mut self) -> Option<Duration> {
        [
            self.locks.next_deadline(),
            self.tasks.next_deadline(),
            self.agents.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

impl<'a> WriteCtx<'a> {
    /// A mutation's view of the batch `writes` runs.
    fn new(
        writes: &'a dyn WriteStorage,
        memory: &'a mut Memory,
        now_ms: i64,
        mono_now: Duration,
        reply: &'a mut Option<ReplyTx>,
        deferred: &'a mut Vec<(ReplyTx, Result<Reply>)>,
    ) -> WriteCtx<'a> {
        WriteCtx {
            storage: writes.storage(),
            outcomes: writes.outcomes(),
            revision: &mut memory.revision,
            now_ms,
            mono_now,
            locks: &mut memory.locks,
            tasks: &mut memory.tasks,
            agents: &mut memory.agents,
            shared: memory.shared,
            reply,
            deferred,
            stepped: &mut memory.stepped,
            trimmable: &mut memory.trimmable,
            history_keep: memory.history_keep,
        }
    }

    /// A key's version `version` was written: past `BATON_HISTORY_KEEP` versions, one
    /// older version became retention's to remove (a pass over the history begins once
    /// enough did, see `retention`).
    pub fn wrote_version(&mut self, version: u64) {
        if self.history_keep.is_some_and(|keep| version > keep) {
            *self.trimmable += 1;
        }
    }

    /// Continues this request in later batches, one `step` per batch, so that no other
    /// write waits long behind it: takes its reply channel (the mutation returns
    /// `Ok(None)`), and `step` answers once it returns `Some`. Between steps other
    /// connections' writes commit; the connection that sent it sends nothing more until it
    /// is answered (`Plan::Barrier`). A commit that fails, or the daemon stopping, answers
    /// it 503; the steps committed before stay done.
    pub fn continue_later(&mut self, step: StepFn) {
        let reply = self.reply.take();
        self.stepped.push_back(Stepped { reply, step });
    }

    /// The versioned records, through the storage boundary.
    pub fn records(&self) -> &'a dyn Records {
        self.storage
    }

    /// The journal, through the storage boundary.
    pub fn journal(&self) -> &'a dyn Journal {
        self.storage
    }

    /// Lock leases, through the storage boundary.
    pub fn leases(&self) -> &'a dyn Leases {
        self.storage
    }

    /// How each key's last lock lease ended, through the storage boundary.
    pub fn outcomes(&self) -> &'a dyn Outcomes {
        self.outcomes
    }

    /// Tasks and nodes, through the storage boundary.
    pub fn nodes(&self) -> &'a dyn Nodes {
        self.storage
    }

    /// Remembered answers to idempotency keys, through the storage boundary.
    pub fn remembered(&self) -> &'a dyn Remembered {
        self.storage
    }

    /// Access tokens, through the storage boundary.
    pub fn tokens(&self) -> &'a dyn Tokens {
        self.storage
    }

    /// Agents' sessions and inboxes, through the storage boundary.
    pub fn roster(&self) -> &'a dyn Agents {
        self.storage
    }

    /// All of storage, for a rule that reads across areas.
    pub fn storage(&self) -> &'a dyn Storage {
        self.storage
    }

    /// Facts about the whole database, through the storage boundary.
    pub fn meta(&self) -> &'a dyn Meta {
        self.storage
    }

    /// Takes this request's reply channel, to answer it later (after a wait).
    pub fn take_reply(&mut self) -> Option<ReplyTx> {
        self.reply.take()
    }

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
    pub live_locks: AtomicU64,
    pub lock_waiters: AtomicU64,
    pub lock_watchers: AtomicU64,
    pub node_waiters: AtomicU64,
    pub inbox_waiters: AtomicU64,
    /// Counts the batches after which the lock waiters were not the same number: what
    /// the journal does not show, for the dashboard.
    waiters_changed: watch::Sender<u64>,
    /// The shared line of waits as last recorded (`LockState::shared_waits_mark`).
    shared_waits: AtomicU64,
    /// How far the shared database's clock is ahead of this daemon's (ms; 0 on SQLite),
    /// as the last batch read it: what judges expiry judges tokens too.
    database_clock_ahead_ms: std::sync::atomic::AtomicI64,
}

impl WriterStats {
    /// The figures of what the writer holds in memory, for Metrics.
    fn record(&self, memory: &Memory) {
        let figures = [
            (&self.live_locks, memory.locks.live()),
            (&self.lock_waiters, memory.locks.waiting()),
            (&self.lock_watchers, memory.locks.watching()),
            (&self.node_waiters, memory.tasks.waiting()),
            (&self.inbox_waiters, memory.agents.waiting()),
        ];
        let waiters = memory.locks.waiting() as u64;
        let shared = memory.locks.shared_waits_mark();
        let line_moved = self.shared_waits.swap(shared, Ordering::Relaxed) != shared;
        if self.lock_waiters.load(Ordering::Relaxed) != waiters || line_moved {
            self.waiters_changed.send_modify(|n| *n += 1);
        }
        for (stat, value) in figures {
            stat.store(value as u64, Ordering::Relaxed);
        }
    }
}

/// A handle to the writer thread; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    jobs: mpsc::Sender<Message>,
    /// Rung after each request is queued, for a writer waiting to gather a batch.
    doorbell: Arc<batches::Doorbell>,
    pub stats: Arc<WriterStats>,
    next_deadline: watch::Receiver<Option<Duration>>,
    head: watch::Receiver<u64>,
    /// A catch-up batch is queued (see [`Writer::catch_up`]).
    catching_up: Arc<AtomicBool>,
}

impl Writer {
    /// Starts the writer thread on `writes`, the write side of migrated storage.
    pub fn spawn(
        writes: OpenWrites,
        health: Arc<StorageHealth>,
        clock: Arc<dyn Clock>,
        retention: Retention,
    ) -> Result<(Writer, std::thread::JoinHandle<()>)> {
        let (jobs, rx) = mpsc::channel(QUEUE_CAPACITY);
        let doorbell = Arc::new(batches::Doorbell::default());
        let rung = doorbell.clone();
        let stats = Arc::new(WriterStats::default());
        let (deadline_tx, next_deadline) = watch::channel(None);
        let (head_tx, head) = watch::channel(0);
        let catching_up = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let (caught, counted) = (catching_up.clone(), stats.clone());
        // Storage is touched only from the writer's own thread (a blocking engine must not
        // run on the runtime's threads), the start-up included; the caller waits for it.
        let handle = std::thread::Builder::new()
            .name("baton-writer".into())
            .spawn(move || {
                let writes = writes();
                let started: Result<WriterLoop> = (|| {
                    let revision = writes.storage().head_revision()?;
                    let shared = writes.shared();
                    let mut writer_loop = WriterLoop {
                        catching_up: caught,
                        writes,
                        clock,
                        stats: counted,
                        health,
                        memory: Memory {
                            revision,
                            shared,
                            locks: LockState::default(),
                            tasks: TaskState::default(),
                            agents: AgentState::default(),
                            stepped: Default::default(),
                            trimmable: 0,
                            history_keep: retention.history_keep,
                        },
                        background: retention::Background::new(retention),
                        last_purge_ms: 0,
                        deadline_tx,
                        head_tx,
                        gather: Default::default(),
                        doorbell: rung,
                    };
                    // Leases that lapsed while the daemon was down end before anything is
                    // served.
                    writer_loop.recover_leases()?;
                    Ok(writer_loop)
                })();
                match started {
                    Ok(writer_loop) => {
                        let _ = ready_tx.send(Ok(()));
                        writer_loop.run(rx);
                    }
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                    }
                }
            })
            .map_err(|e| Error::Internal(format!("cannot start the writer thread: {e}")))?;
        ready
            .recv()
            .map_err(|_| Error::Internal("the writer thread stopped while starting".into()))??;
        Ok((
            Writer {
                jobs,
                doorbell,
                stats,
                next_deadline,
                head,
                catching_up,
            },
            handle,
        ))
    }

    /// The monotonic time of the earliest pending lock deadline (a lease expiry or the end
    /// of a wait), updated after every batch; the sweeper sleeps until it.
    pub fn next_deadline(&self) -> watch::Receiver<Option<Duration>> {
        self.next_deadline.clone()
    }

    /// The time by the clock that judges expiry (the shared database's, else this
    /// daemon's), from this daemon's `local_ms`.
    pub fn database_now_ms(&self, local_ms: i64) -> i64 {
        local_ms.saturating_add(self.stats.database_clock_ahead_ms.load(Ordering::Relaxed))
    }

    /// The last committed revision (journal seq), updated after every commit.
    pub fn head(&self) -> watch::Receiver<u64> {
        self.head.clone()
    }

    /// Changes whenever requests start or stop waiting for locks (which the journal does
    /// not record: a wait changes no state).
    pub fn lock_waiters_changed(&self) -> watch::Receiver<u64> {
        self.stats.waiters_changed.subscribe()
    }

    /// Queues a mutation nobody waits on (expiry sweeps, closed connections). Before any
    /// batch runs, the writer ends every lease and wait that is due.
    pub fn detached(&self, apply: WriteFn) -> Result<()> {
        self.submit(Job {
            work: Work::Write {
                idempotency: None,
                apply,
                foreseen: Foreseen::default(),
            },
            reply: None,
        })
    }

    /// Another daemon sharing the database committed: runs a batch soon, which continues
    /// from the revision storage holds (so this daemon's subscribers see the change),
    /// rebuilds what memory holds of leases and sessions, and hands what was freed to this
    /// daemon's waiters. At most one such batch is queued at a time.
    pub fn catch_up(&self) {
        if self.catching_up.swap(true, Ordering::AcqRel) {
            return;
        }
        // The batch itself does the work; this job only makes one run.
        if self.detached(Box::new(|_| Ok(None))).is_err() {
            self.catching_up.store(false, Ordering::Release);
        }
    }

    /// Queues a mutation; the receiver resolves once its transaction is durable.
    pub fn write(
        &self,
        idempotency: Option<Idempotency>,
        apply: WriteFn,
        foreseen: Foreseen,
    ) -> Result<oneshot::Receiver<Result<Reply>>> {
        let (reply, rx) = oneshot::channel();
        let reply = ReplyTx::new(reply);
        self.submit(Job {
            work: Work::Write {
                idempotency,
                apply,
                foreseen,
            },
            reply: Some(reply),
        })?;
        Ok(rx)
    }

    /// Queues a read behind every write queued before it.
    pub fn read(&self, apply: ReadFn) -> Result<oneshot::Receiver<Result<Reply>>> {
        let (reply, rx) = oneshot::channel();
        let reply = ReplyTx::new(reply);
        self.submit(Job {
            work: Work::Read(apply),
            reply: Some(reply),
        })?;
        Ok(rx)
    }

    fn submit(&self, job: Job) -> Result<()> {
        match self.jobs.try_send(Message::Job(job)) {
            Ok(()) => {
                self.doorbell.ring();
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::clock::SystemClock;
    use crate::methods::locks::rules::{self as locks, AcquireRequest, ReleaseRequest};
    use crate::resource_key::canonicalize;
    use crate::store::Store;

    fn acquire(owner: &str, connection: u64) -> AcquireRequest {
        AcquireRequest {
            key: canonicalize("tool:x", Path::new("/")).unwrap(),
            owner: owner.into(),
            want: crate::methods::locks::Want::EXCLUSIVE,
            provider: None,
            ttl_ms: 60_000,
            metadata: None,
            release_on_disconnect: false,
            connection,
            token_id: None,
            session: None,
            visible: None,
        }
    }

    fn answer(rx: oneshot::Receiver<Result<Reply>>) -> Result<serde_json::Value> {
        let reply = rx.blocking_recv().expect("answered")?;
        Ok(serde_json::from_str(reply.get()).unwrap())
    }

    /// A request that frees a lock and then fails is rolled back whole: the waiter it
    /// handed the lock to must not be told "acquired" for a lease that never committed.
    #[test]
    fn a_rolled_back_request_grants_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(SystemClock::new());
        let (store, writes) = Store::open(&dir.path().join("b.db"), clock.wall_ms()).unwrap();
        let (writer, _thread) =
            Writer::spawn(writes, store.health().clone(), clock, Retention::default()).unwrap();
        let first = writer
            .write(
                None,
                Box::new(|ctx| {
                    let Served::Now(r) = locks::acquire(ctx, acquire("alice", 1), 0)? else {
                        panic!("a free lock is granted at once");
                    };
                    Ok(Some(serde_json::value::to_raw_value(&r)?))
                }),
                Foreseen::default(),
            )
            .unwrap();
        let lease = answer(first).unwrap();
        assert_eq!(lease["status"], "acquired");
        let lease_id = lease["lease_id"].as_str().unwrap().to_string();
        let waiting = writer
            .write(
                None,
                Box::new(
                    |ctx| match locks::acquire(ctx, acquire("bob", 2), 60_000)? {
                        Served::Now(r) => Ok(Some(serde_json::value::to_raw_value(&r)?)),
                        Served::Later => Ok(None),
                    },
                ),
                Foreseen::default(),
            )
            .unwrap();
        let failing = writer
            .write(
                None,
                Box::new(move |ctx| {
                    let key = canonicalize("tool:x", Path::new("/")).unwrap();
                    let release = ReleaseRequest {
                        lease: crate::methods::Presented {
                            lease_id,
                            token_id: None,
                        },
                        outcome: serde_json::from_str("\"released\"").unwrap(),
                        moved_to: None,
                        note: None,
                    };
                    locks::release(ctx, &key, release)?;
                    Err(Error::Internal("injected failure after the release".into()))
                }),
                Foreseen::default(),
            )
            .unwrap();
        assert!(answer(failing).is_err());
        let told = answer(waiting);
        assert!(
            matches!(&told, Err(Error::Unavailable(_))),
            "the waiter must be told to retry, not {told:?}"
        );
        // The release was rolled back: alice still holds the lock.
        let status = writer
            .write(
                None,
                Box::new(|ctx| {
                    let key = canonicalize("tool:x", Path::new("/")).unwrap();
                    let r = locks::status(ctx, &key, &None)?;
                    Ok(Some(serde_json::value::to_raw_value(&r)?))
                }),
                Foreseen::default(),
            )
            .unwrap();
        let status = answer(status).unwrap();
        assert_eq!(status["status"], "held", "{status}");
        assert_eq!(status["held_by"]["owner"], "alice");
    }
}
