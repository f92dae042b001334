//! The engine: one writer thread owns the only write connection to storage. Requests that
//! write are queued to it; it applies everything queued in one transaction (group commit),
//! each request undone alone if it fails before it writes (else the whole batch is), and
//! answers every request only after the transaction is durable. It names no area: what the
//! rules keep in memory (lock and node leases' deadlines, waiters, sessions) is the `M` of
//! [`Areas`], whose list of [`Area`]s (`methods::areas`) the engine runs for upkeep:
//! recovery at start, expiry before each batch, serving waiters after another daemon's
//! changes, rebuilding memory after a rollback, ending waits at shutdown.

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

mod batches;
pub mod idempotency;
pub mod schedule;

use batches::WriterLoop;
use idempotency::Idempotency;

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
pub type WriteFn<M> = Box<dyn FnOnce(&mut WriteCtx<'_, M>) -> Result<Option<Reply>> + Send>;
/// One step of a request that runs in steps (`WriteCtx::continue_later`): `Ok(None)`
/// while work remains, the answer once done.
pub type StepFn<M> = Box<dyn FnMut(&mut WriteCtx<'_, M>) -> Result<Option<Reply>> + Send>;
/// A read that must observe earlier writes of the same connection, run on the writer.
pub type ReadFn = Box<dyn FnOnce(&dyn Storage) -> Result<Reply> + Send>;
/// A request waiting in memory, and the answer it gets when the daemon stops.
pub type EndedWait = (ReplyTx, Result<Reply>);

/// How a request that may wait is served: answered now, or later (it took its reply
/// channel, `WriteCtx::take_reply`, and is answered when what it waits for happens or its
/// wait runs out).
pub enum Served<T> {
    Now(T),
    Later,
}

/// One area's part in the engine's upkeep (`methods::areas` lists them, in the order they
/// run): what it does at start, when something is due, when another daemon changed the
/// shared database, when a connection closes, and what it holds in memory.
pub struct Area<M: 'static> {
    /// What it is called in a log line.
    pub name: &'static str,
    /// Rebuilds the area's memory from storage and ends what lapsed (at start).
    pub recover: fn(&mut WriteCtx<'_, M>) -> Result<()>,
    /// Ends what is due (leases, waits, sessions).
    pub expire_due: fn(&mut WriteCtx<'_, M>) -> Result<()>,
    /// Serves waiters what became free (after another daemon's commit).
    pub serve_waiters: fn(&mut WriteCtx<'_, M>) -> Result<()>,
    /// Ends what the connection left: waits, leases and sessions bound to it.
    pub connection_closed: fn(&mut WriteCtx<'_, M>, u64) -> Result<()>,
    /// Rebuilds the area's memory from storage (after a rollback, or when another daemon
    /// changed what it holds).
    pub reload: fn(&mut M, &dyn Storage, i64, Duration) -> Result<()>,
    /// Whether another daemon's changes touch what the area holds.
    pub changed: fn(&ForeignChanges) -> bool,
    /// The area's earliest pending deadline.
    pub next_deadline: fn(&mut M) -> Option<Duration>,
    /// Takes every wait the area holds, with the answer each gets as the daemon stops.
    pub end_waits: fn(&mut M) -> Vec<EndedWait>,
}

/// What the rules keep on the writer, area by area, and the work the engine runs for it.
pub trait Areas: Send + Sized + 'static {
    /// What Metrics shows of this memory (`WriterStats::areas`).
    type Figures: Default + Send + Sync + 'static;
    /// Every area, in the order their upkeep runs.
    const LIST: &'static [Area<Self>];

    /// Before the batch commits: stores what memory counted ahead of storage during it.
    fn store_counters(&mut self, storage: &dyn Storage) -> Result<()>;
    /// A batch begins.
    fn begin_batch(&mut self) {}
    /// A request begins; [`Areas::request_rolled_back`] if it is undone.
    fn begin_request(&mut self) {}
    fn request_rolled_back(&mut self) {}
    /// Records the figures of memory after a batch; true when waits changed (what the
    /// journal does not show).
    fn record(&self, figures: &Self::Figures) -> bool;

    /// Work in the background: whether a batch with no request should run for it.
    fn background_due(&self, _head: i64, _now_ms: i64) -> bool {
        false
    }
    /// One step of work in the background, inside the open batch.
    fn background_step(_ctx: &mut WriteCtx<'_, Self>) -> Result<()> {
        Ok(())
    }
    /// After the background step, outside any request (e.g. giving pages back).
    fn after_background(&mut self, _writes: &mut dyn WriteStorage) -> Result<()> {
        Ok(())
    }
    /// A request that runs in steps ran one (it may have removed rows).
    fn stepped(&mut self) {}

    /// Runs every area's expiry.
    fn expire_due(ctx: &mut WriteCtx<'_, Self>) -> Result<()> {
        Self::LIST
            .iter()
            .try_for_each(|area| (area.expire_due)(ctx))
    }
    /// Runs every area's recovery.
    fn recover(ctx: &mut WriteCtx<'_, Self>) -> Result<()> {
        Self::LIST.iter().try_for_each(|area| (area.recover)(ctx))
    }
    /// Serves every area's waiters.
    fn serve_waiters(ctx: &mut WriteCtx<'_, Self>) -> Result<()> {
        Self::LIST
            .iter()
            .try_for_each(|area| (area.serve_waiters)(ctx))
    }
    /// Ends, in every area, what the connection left.
    fn connection_closed(ctx: &mut WriteCtx<'_, Self>, connection: u64) -> Result<()> {
        Self::LIST
            .iter()
            .try_for_each(|area| (area.connection_closed)(ctx, connection))
    }
}

/// Most requests applied in one transaction.
const MAX_BATCH: usize = 2048;
/// Requests that may wait for the writer before new ones are refused with 429.
pub const QUEUE_CAPACITY: usize = 16 * 1024;
/// How often remembered idempotent answers older than 24 hours are purged.
const IDEMPOTENCY_PURGE_EVERY_MS: i64 = 60_000;

enum Work<M: 'static> {
    Write {
        idempotency: Option<Idempotency>,
        apply: WriteFn<M>,
        foreseen: Foreseen,
    },
    Read(ReadFn),
}

struct Job<M: 'static> {
    work: Work<M>,
    /// `None` for work nobody waits on (the sweeper's tick, a closed connection).
    reply: Option<ReplyTx>,
}

enum Message<M: 'static> {
    Job(Job<M>),
    Shutdown(oneshot::Sender<()>),
}

/// What a mutation sees: storage inside the open transaction, the revision counter, the
/// batch's time and what the rules keep in memory (`memory`).
pub struct WriteCtx<'a, M: 'static> {
    storage: &'a dyn Storage,
    outcomes: &'a dyn Outcomes,
    revision: &'a mut i64,
    /// Wall-clock time of this batch, epoch milliseconds.
    pub now_ms: i64,
    /// Monotonic time of this batch (judges lease expiry).
    pub mono_now: Duration,
    /// What the areas keep in memory.
    pub memory: &'a mut M,
    /// Other daemons write to the same database: connection-bound leases and sessions may
    /// be theirs, alive, whatever this daemon's start finds.
    pub shared: bool,
    reply: &'a mut Option<ReplyTx>,
    /// Answers to other requests (waiters handed a lock) to send once this batch commits.
    pub deferred: &'a mut Vec<EndedWait>,
    stepped: &'a mut std::collections::VecDeque<Stepped<M>>,
}

/// A request that runs in steps, one per batch, and its reply channel (None: nobody waits).
struct Stepped<M: 'static> {
    reply: Option<ReplyTx>,
    step: StepFn<M>,
}

/// What the writer keeps across batches, and lends each mutation.
struct Memory<M: 'static> {
    revision: i64,
    /// See [`WriteCtx::shared`].
    shared: bool,
    areas: M,
    /// Requests that run in steps, in the order they began.
    stepped: std::collections::VecDeque<Stepped<M>>,
}

impl<M: Areas> Memory<M> {
    /// Rebuilds the areas' memory from storage, after a write was rolled back.
    fn reload(&mut self, storage: &dyn Storage, now_ms: i64, mono_now: Duration) {
        self.reload_some(storage, now_ms, mono_now, ForeignChanges::ALL);
    }

    /// Rebuilds the areas that `which` touches from storage.
    fn reload_some(
        &mut self,
        storage: &dyn Storage,
        now_ms: i64,
        mono_now: Duration,
        which: ForeignChanges,
    ) {
        for area in M::LIST.iter().filter(|area| (area.changed)(&which)) {
            if let Err(err) = (area.reload)(&mut self.areas, storage, now_ms, mono_now) {
                static RELOAD_FAILED: crate::log_limit::Limited =
                    crate::log_limit::Limited::new(crate::log_limit::EVERY);
                if let Some(held_back) = RELOAD_FAILED.admit() {
                    let what = area.name;
                    tracing::error!(%err, held_back, "cannot reload the {what} from storage");
                }
            }
        }
    }

    /// The earliest deadline still pending in any area.
    fn next_deadline(&mut self) -> Option<Duration> {
        M::LIST
            .iter()
            .filter_map(|area| (area.next_deadline)(&mut self.areas))
            .min()
    }
}

impl<'a, M: Areas> WriteCtx<'a, M> {
    /// A mutation's view of the batch `writes` runs.
    fn new(
        writes: &'a dyn WriteStorage,
        memory: &'a mut Memory<M>,
        now_ms: i64,
        mono_now: Duration,
        reply: &'a mut Option<ReplyTx>,
        deferred: &'a mut Vec<EndedWait>,
    ) -> WriteCtx<'a, M> {
        WriteCtx {
            storage: writes.storage(),
            outcomes: writes.outcomes(),
            revision: &mut memory.revision,
            now_ms,
            mono_now,
            memory: &mut memory.areas,
            shared: memory.shared,
            reply,
            deferred,
            stepped: &mut memory.stepped,
        }
    }
}

impl<'a, M> WriteCtx<'a, M> {
    /// Continues this request in later batches, one `step` per batch, so that no other
    /// write waits long behind it: takes its reply channel (the mutation returns
    /// `Ok(None)`), and `step` answers once it returns `Some`. Between steps other
    /// connections' writes commit; the connection that sent it sends nothing more until it
    /// is answered (`Plan::Barrier`). A commit that fails, or the daemon stopping, answers
    /// it 503; the steps committed before stay done.
    pub fn continue_later(&mut self, step: StepFn<M>) {
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

/// Counters about commits, for Metrics, and the areas' figures.
pub struct WriterStats<F> {
    pub commits: AtomicU64,
    pub writes: AtomicU64,
    pub max_batch: AtomicU64,
    pub failed_commits: AtomicU64,
    /// What the areas hold in memory ([`Areas::record`]).
    pub areas: F,
    /// Counts the batches after which the waits were not the same: what the journal does
    /// not show, for the dashboard.
    waits_changed: watch::Sender<u64>,
    /// How far the shared database's clock is ahead of this daemon's (ms; 0 on SQLite),
    /// as the last batch read it: what judges expiry judges tokens too.
    database_clock_ahead_ms: std::sync::atomic::AtomicI64,
}

impl<F: Default> Default for WriterStats<F> {
    fn default() -> Self {
        WriterStats {
            commits: Default::default(),
            writes: Default::default(),
            max_batch: Default::default(),
            failed_commits: Default::default(),
            areas: F::default(),
            waits_changed: Default::default(),
            database_clock_ahead_ms: Default::default(),
        }
    }
}

impl<F> WriterStats<F> {
    /// Records the figures of what the writer holds in memory, for Metrics.
    fn record<M: Areas<Figures = F>>(&self, memory: &Memory<M>) {
        if memory.areas.record(&self.areas) {
            self.waits_changed.send_modify(|n| *n += 1);
        }
    }
}

/// A handle to the writer thread; cheap to clone.
pub struct Writer<M: Areas> {
    jobs: mpsc::Sender<Message<M>>,
    /// Rung after each request is queued, for a writer waiting to gather a batch.
    doorbell: Arc<batches::Doorbell>,
    pub stats: Arc<WriterStats<M::Figures>>,
    next_deadline: watch::Receiver<Option<Duration>>,
    head: watch::Receiver<u64>,
    /// A catch-up batch is queued (see [`Writer::catch_up`]).
    catching_up: Arc<AtomicBool>,
}

impl<M: Areas> Clone for Writer<M> {
    fn clone(&self) -> Self {
        Writer {
            jobs: self.jobs.clone(),
            doorbell: self.doorbell.clone(),
            stats: self.stats.clone(),
            next_deadline: self.next_deadline.clone(),
            head: self.head.clone(),
            catching_up: self.catching_up.clone(),
        }
    }
}

impl<M: Areas> Writer<M> {
    /// Starts the writer thread on `writes`, the write side of migrated storage, with
    /// `areas` (empty) as what the rules keep in memory.
    pub fn spawn(
        writes: OpenWrites,
        health: Arc<StorageHealth>,
        clock: Arc<dyn Clock>,
        areas: M,
    ) -> Result<(Writer<M>, std::thread::JoinHandle<()>)> {
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
                let started: Result<WriterLoop<M>> = (|| {
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
                            areas,
                            stepped: Default::default(),
                        },
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

    /// Changes whenever requests start or stop waiting (which the journal does not
    /// record: a wait changes no state).
    pub fn waits_changed(&self) -> watch::Receiver<u64> {
        self.stats.waits_changed.subscribe()
    }

    /// Queues a mutation nobody waits on (expiry sweeps, closed connections). Before any
    /// batch runs, the writer ends every lease and wait that is due.
    pub fn detached(&self, apply: WriteFn<M>) -> Result<()> {
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
        apply: WriteFn<M>,
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

    fn submit(&self, job: Job<M>) -> Result<()> {
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
