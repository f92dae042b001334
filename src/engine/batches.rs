//! The writer thread's loop: takes everything queued, applies it in one transaction
//! (catching up with other daemons first on shared storage, ending what came due), commits
//! once, then answers; recovery at start and the clean finish at shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::log_limit::Limited;
use crate::store::boundary::StorageHealth;
use crate::store::boundary::WriteStorage;

use super::*;

pub(super) struct WriterLoop<M: Areas> {
    pub(super) writes: Box<dyn WriteStorage>,
    /// Set while a catch-up batch is queued; cleared as a batch reads the head revision.
    pub(super) catching_up: Arc<AtomicBool>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) stats: Arc<WriterStats<M::Figures>>,
    pub(super) health: Arc<StorageHealth>,
    pub(super) memory: Memory<M>,
    pub(super) last_purge_ms: i64,
    pub(super) deadline_tx: watch::Sender<Option<Duration>>,
    pub(super) head_tx: watch::Sender<u64>,
    /// What the next batch waits for (see [`Gather`]).
    pub(super) gather: Gather,
    /// How requests that come while the writer waits to gather a batch wake it.
    pub(super) doorbell: Arc<Doorbell>,
}

/// Wakes the writer while it waits, parked, for the requests of a batch it gathers (a
/// thread that polled instead would take the CPU the clients' requests need to arrive).
#[derive(Default)]
pub(super) struct Doorbell {
    /// The writer is waiting: whoever queues a request wakes it.
    waiting: AtomicBool,
    writer: std::sync::OnceLock<std::thread::Thread>,
}

impl Doorbell {
    /// A request was queued.
    pub(super) fn ring(&self) {
        if self.waiting.load(Ordering::SeqCst) {
            if let Some(writer) = self.writer.get() {
                writer.unpark();
            }
        }
    }
}

/// Requests the next batch waits a moment for: those of the clients the last batch
/// answered, which usually send their next request within a round trip.
///
/// Without it, a few clients that each wait for their answer split into groups that take
/// turns: one group's requests arrive while the other's batch syncs, so every batch holds
/// only part of them and each pays a sync of its own (4 DAG workers ran 2 requests a
/// commit). Requests already queued when the answers went out are another group's; the
/// next batch waits for the answered group too, at most as long as the last commit took
/// (and [`GATHER_LONGEST`]), so one sync serves both and the groups merge. A single client
/// never waits (it is the only one to come), nor does a batch already holding all it
/// expects.
#[derive(Default)]
pub(super) struct Gather {
    /// Requests the next batch expects: those queued when the last answers went out, and
    /// the ones answered.
    expected: usize,
    /// How long the last commit took, which bounds the wait.
    last_commit: Duration,
}

/// Most requests a batch waits for. With more clients the groups' turns keep the writer
/// busy while the other group's answers travel, and waiting only leaves it idle (waiting
/// for 16 made 16 lock connections slower in each of 4 alternated bench runs).
const GATHER_AT_MOST: usize = 8;
/// The longest a batch waits, whatever the last commit took (one that checkpointed the
/// WAL may have taken milliseconds).
const GATHER_LONGEST: Duration = Duration::from_micros(500);

/// A request's answer, ready to send once the batch commits.
type PendingReply = (Option<ReplyTx>, Result<Reply>);

/// How long the writer polls for work before it parks.
const SPIN: Duration = Duration::from_micros(50);

/// Where the writer takes its jobs from.
struct Intake<M: 'static> {
    rx: mpsc::Receiver<Message<M>>,
    /// The shutdown request, once it came: nothing is taken after it.
    shutdown: Option<oneshot::Sender<()>>,
}

impl<M> Intake<M> {
    fn accept(&mut self, message: Message<M>, batch: &mut Vec<Job<M>>) {
        match message {
            Message::Job(job) => batch.push(job),
            Message::Shutdown(done) => self.shutdown = Some(done),
        }
    }

    /// The next message: polled for a moment first, as the next request usually follows
    /// the last answer within microseconds, and parking the thread (to be woken by the
    /// next request) costs more than that on a virtual machine. The budget is CPU time,
    /// not the daemon's clock (a test's manual clock would never let it run out).
    fn next(&mut self) -> Option<Message<M>> {
        let start = std::time::Instant::now();
        loop {
            match self.rx.try_recv() {
                Ok(message) => return Some(message),
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            if start.elapsed() > SPIN {
                return self.rx.blocking_recv();
            }
            std::thread::yield_now();
        }
    }

    /// Adds to `batch` what comes within `budget`, until it holds `expected` requests,
    /// parked between arrivals (`doorbell` wakes it; this must be the thread it names).
    fn gather(
        &mut self,
        batch: &mut Vec<Job<M>>,
        expected: usize,
        budget: Duration,
        doorbell: &Doorbell,
    ) {
        let start = std::time::Instant::now();
        // Set before looking at the queue: a request queued after that look rings.
        doorbell.waiting.store(true, Ordering::SeqCst);
        while self.shutdown.is_none() && batch.len() < expected {
            match self.rx.try_recv() {
                Ok(message) => self.accept(message, batch),
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match budget.checked_sub(start.elapsed()) {
                        Some(left) if !left.is_zero() => std::thread::park_timeout(left),
                        _ => break,
                    }
                }
            }
        }
        doorbell.waiting.store(false, Ordering::SeqCst);
    }

    /// The next message if one is queued; Err(()) once every sender is gone.
    fn poll(&mut self) -> std::result::Result<Option<Message<M>>, ()> {
        match self.rx.try_recv() {
            Ok(message) => Ok(Some(message)),
            Err(mpsc::error::TryRecvError::Empty) => Ok(None),
            Err(mpsc::error::TryRecvError::Disconnected) => Err(()),
        }
    }

    /// Adds to `batch` what is queued already, up to [`MAX_BATCH`].
    fn take_queued(&mut self, batch: &mut Vec<Job<M>>) {
        while self.shutdown.is_none() && batch.len() < MAX_BATCH {
            match self.rx.try_recv() {
                Ok(message) => self.accept(message, batch),
                Err(_) => return,
            }
        }
    }
}

impl<M: Areas> WriterLoop<M> {
    pub(super) fn run(mut self, rx: mpsc::Receiver<Message<M>>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut intake = Intake { rx, shutdown: None };
        let _ = self.doorbell.writer.set(std::thread::current());
        loop {
            // Steps of work in the background (a request that runs in steps, the areas'
            // own, such as retention) run in batches of their own when no request comes:
            // the writer then does not wait for one.
            let background = !self.memory.stepped.is_empty()
                || (self.memory.areas).background_due(self.memory.revision, self.clock.wall_ms());
            let first = match background {
                true => match intake.poll() {
                    Ok(first) => first,
                    Err(()) => break,
                },
                false => match intake.next() {
                    Some(first) => Some(first),
                    None => break,
                },
            };
            if let Some(first) = first {
                intake.accept(first, &mut batch);
                intake.take_queued(&mut batch);
                let expected = self.gather.expected.min(GATHER_AT_MOST);
                if batch.len() < expected && !self.writes.shared() {
                    let budget = self.gather.last_commit.min(GATHER_LONGEST);
                    intake.gather(&mut batch, expected, budget, &self.doorbell);
                }
            }
            if !batch.is_empty() || (background && intake.shutdown.is_none()) {
                self.run_batch(&mut batch, &mut intake);
            }
            if let Some(done) = intake.shutdown.take() {
                self.finish(&mut intake.rx);
                let _ = done.send(());
                return;
            }
        }
    }

    fn next_deadline(&mut self) -> Option<Duration> {
        self.memory.next_deadline()
    }

    /// The wall time of the batch just begun: a shared database's clock, which judges
    /// expiry for every daemon alike, else this daemon's (`local_ms`). A test's manual
    /// clock still rules its daemon.
    fn batch_time(&self, local_ms: i64) -> i64 {
        match self.writes.server_clock_ms() {
            Some(server_ms) if self.clock.as_manual().is_none() => {
                self.stats
                    .database_clock_ahead_ms
                    .store(server_ms - local_ms, Ordering::Relaxed);
                server_ms
            }
            _ => local_ms,
        }
    }

    /// Ends lock and node leases that lapsed while the daemon was down and tracks the rest.
    pub(super) fn recover_leases(&mut self) -> Result<()> {
        let mono_now = self.clock.monotonic();
        self.writes.begin(&Foreseen::default())?;
        // The head as it stands now that this batch holds the writer lock: on a shared
        // database another daemon may have committed since this one read it at start-up,
        // and storing that older head would move it backwards and hand its seqs out again.
        self.memory.revision = match self.writes.storage().head_revision() {
            Ok(head) => head,
            Err(err) => {
                self.writes.rollback();
                return Err(err);
            }
        };
        let now_ms = self.batch_time(self.clock.wall_ms());
        let recovered = (|| {
            let mut deferred = Vec::new();
            let mut no_reply = None;
            let mut ctx = WriteCtx::new(
                self.writes.as_ref(),
                &mut self.memory,
                now_ms,
                mono_now,
                &mut no_reply,
                &mut deferred,
            );
            M::recover(&mut ctx)?;
            self.memory.areas.store_counters(self.writes.storage())?;
            self.writes
                .storage()
                .set_head_revision(self.memory.revision)?;
            self.writes.commit()
        })();
        if recovered.is_err() {
            self.writes.rollback();
        }
        recovered?;
        let next = self.next_deadline();
        self.deadline_tx.send_replace(next);
        self.head_tx.send_replace(self.memory.revision as u64);
        self.stats.record(&self.memory);
        Ok(())
    }

    /// Refuses whatever slipped in after the shutdown request, answers pending waits and
    /// checkpoints the WAL.
    fn finish(&mut self, rx: &mut mpsc::Receiver<Message<M>>) {
        rx.close();
        while let Ok(message) = rx.try_recv() {
            match message {
                Message::Job(job) => {
                    if let Some(reply) = job.reply {
                        let _ = reply.send(Err(shutting_down()));
                    }
                }
                Message::Shutdown(done) => {
                    let _ = done.send(());
                }
            }
        }
        self.end_stepped(Error::Unavailable(
            "batond is shutting down before this request finished; the steps done so far stay done (it runs in steps), send it again once batond is back to finish".into(),
        ));
        for area in M::LIST {
            for (reply, answer) in (area.end_waits)(&mut self.memory.areas) {
                let _ = reply.send(answer);
            }
        }
        self.writes.close();
    }

    /// Answers every request that runs in steps with `err`, and forgets them.
    fn end_stepped(&mut self, err: Error) {
        for stepped in std::mem::take(&mut self.memory.stepped) {
            if let Some(reply) = stepped.reply {
                let _ = reply.send(Err(err.clone()));
            }
        }
    }

    /// Runs the next step of the first request that runs in steps (then queued last, so
    /// several take turns), like a request: a step that fails is answered with its error,
    /// and what it wrote is undone or its batch fails.
    fn step_stepped(
        &mut self,
        now_ms: i64,
        mono_now: Duration,
        deferred: &mut Vec<(ReplyTx, Result<Reply>)>,
    ) -> Result<()> {
        let Some(mut stepped) = self.memory.stepped.pop_front() else {
            return Ok(());
        };
        let step = &mut stepped.step;
        let result = unanswered(
            self.writes.as_ref(),
            &mut self.memory,
            (now_ms, mono_now),
            deferred,
            |ctx| step(ctx),
        );
        // What a step removed may leave free pages; CompactJournal moved the journal's start.
        self.memory.areas.stepped();
        let answer = match result {
            Ok(Ok(None)) => None,
            Ok(Ok(Some(answer))) => Some(Ok(answer)),
            Ok(Err(err)) => Some(Err(err)),
            Err(undo) => {
                if let Some(reply) = stepped.reply.take() {
                    deferred.push((reply, Err(undo.clone())));
                }
                return Err(undo);
            }
        };
        match answer {
            None => self.memory.stepped.push_back(stepped),
            Some(answer) => {
                if let Some(reply) = stepped.reply.take() {
                    deferred.push((reply, answer));
                }
            }
        }
        Ok(())
    }

    /// One step of the areas' work in the background (retention), undone alone if it
    /// fails without writing (else its batch fails, as a request's would).
    fn step_background(
        &mut self,
        now_ms: i64,
        mono_now: Duration,
        deferred: &mut Vec<(ReplyTx, Result<Reply>)>,
    ) -> Result<()> {
        // Nothing due (the usual case): no cost beyond this look at memory.
        if !(self.memory.areas).background_due(self.memory.revision, now_ms) {
            return Ok(());
        }
        let stepped = unanswered(
            self.writes.as_ref(),
            &mut self.memory,
            (now_ms, mono_now),
            deferred,
            M::background_step,
        )?;
        if let Err(err) = stepped {
            static BACKGROUND_FAILED: Limited = Limited::new(crate::log_limit::EVERY);
            if let Some(held_back) = BACKGROUND_FAILED.admit() {
                tracing::warn!(%err, held_back, "a step of work in the background (retention) failed; it is tried again with the next batch");
            }
        }
        self.memory.areas.after_background(self.writes.as_mut())
    }

    fn run_batch(&mut self, batch: &mut Vec<Job<M>>, intake: &mut Intake<M>) {
        let start_revision = self.memory.revision;
        let now_ms = self.clock.wall_ms();
        let mono_now = self.clock.monotonic();
        let mut answers: Vec<PendingReply> = Vec::with_capacity(batch.len());
        let mut deferred = Vec::new();
        let mut lock_state_suspect = false;
        let mut size = (batch.len(), 0);
        let committed = self.apply_all(
            batch,
            intake,
            &mut size,
            now_ms,
            mono_now,
            &mut answers,
            &mut deferred,
            &mut lock_state_suspect,
        );
        let (n_jobs, n_writes) = size;
        match committed {
            Ok(()) => {
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
                if self.health.commit_succeeded() {
                    tracing::info!("a commit succeeded again; storage recovered");
                }
                self.stats.writes.fetch_add(n_writes, Ordering::Relaxed);
                self.stats
                    .max_batch
                    .fetch_max(n_jobs as u64, Ordering::Relaxed);
            }
            Err(err) => {
                static COMMIT_FAILED: Limited = Limited::new(crate::log_limit::EVERY);
                if let Some(held_back) = COMMIT_FAILED.admit() {
                    tracing::error!(%err, held_back, "commit failed; every request in the batch is answered 503 (held_back: failures not logged since the last report; Metrics counts them all as failed_commits)");
                }
                self.stats.failed_commits.fetch_add(1, Ordering::Relaxed);
                self.memory.revision = start_revision;
                lock_state_suspect = true;
                let failure = match err {
                    Error::Internal(msg) => Error::Unavailable(format!(
                        "storage failed to commit ({msg}), nothing was written; retry"
                    )),
                    other => other,
                };
                self.health.commit_failed(&failure);
                self.end_stepped(Error::Unavailable(format!(
                    "{failure}; this request runs in steps and the steps committed before stay done: send it again to finish"
                )));
                // A refusal (conflict, ...) stays true; anything that was to be written was not.
                let results = answers.iter_mut().map(|(_, r)| r);
                for result in results.chain(deferred.iter_mut().map(|(_, r)| r)) {
                    if !matches!(result, Err(e) if !e.is_server_fault()) {
                        *result = Err(failure.clone());
                    }
                }
                // Jobs the failed transaction never reached.
                answers.extend(
                    batch
                        .drain(..)
                        .rev()
                        .map(|job| (job.reply, Err(failure.clone()))),
                );
            }
        }
        batch.clear();
        let head = self.memory.revision as u64;
        self.head_tx.send_if_modified(|current| {
            let changed = *current != head;
            *current = head;
            changed
        });
        if lock_state_suspect {
            // Memory may have run ahead of what was rolled back: rebuild it from storage.
            self.memory.reload(self.writes.storage(), now_ms, mono_now);
        }
        // Figures first: a client that reads Metrics after its answer sees this batch.
        self.stats.record(&self.memory);
        let answered = answers.iter().filter(|(r, _)| r.is_some()).count() + deferred.len();
        for (reply, result) in answers {
            if let Some(reply) = reply {
                let _ = reply.send(result);
            }
        }
        for (reply, result) in deferred {
            let _ = reply.send(result);
        }
        // Whoever was just answered is likely to send again soon; what is queued already
        // came before the answers.
        self.gather.expected = intake.rx.len() + answered;
        let next = self.next_deadline();
        self.deadline_tx.send_if_modified(|current| {
            let changed = *current != next;
            *current = next;
            changed
        });
    }

    /// Runs every job in one transaction, pushing one answer per job, then commits; rolls
    /// the whole batch back if that fails. Jobs not reached when a statement fails stay in
    /// `jobs`. On shared storage, the jobs that came while the transaction waited to begin
    /// (another daemon's batch held the lock) join it. `size`: the jobs, and the writes
    /// among them, the batch ended up with.
    #[allow(clippy::too_many_arguments)]
    fn apply_all(
        &mut self,
        jobs: &mut Vec<Job<M>>,
        intake: &mut Intake<M>,
        size: &mut (usize, u64),
        now_ms: i64,
        mono_now: Duration,
        answers: &mut Vec<PendingReply>,
        deferred: &mut Vec<(ReplyTx, Result<Reply>)>,
        lock_state_suspect: &mut bool,
    ) -> Result<()> {
        self.writes.begin(&take_foreseen(jobs))?;
        // From here on the transaction is open: whatever fails rolls it back.
        let mut applied = self.join_late(jobs, intake);
        let writes = jobs
            .iter()
            .filter(|j| matches!(j.work, Work::Write { .. }))
            .count();
        *size = (jobs.len(), writes as u64);
        if applied.is_ok() {
            let now_ms = self.batch_time(now_ms);
            applied = self.apply_in_transaction(
                jobs,
                now_ms,
                mono_now,
                answers,
                deferred,
                lock_state_suspect,
            );
        }
        if applied.is_err() {
            self.writes.rollback();
        }
        applied
    }

    /// On shared storage, the jobs that came while the batch waited to begin join it,
    /// and what they will read is read ahead too.
    fn join_late(&mut self, jobs: &mut Vec<Job<M>>, intake: &mut Intake<M>) -> Result<()> {
        if !self.writes.shared() {
            return Ok(());
        }
        let before = jobs.len();
        intake.take_queued(jobs);
        let late = take_foreseen(&mut jobs[before..]);
        match late.is_empty() {
            true => Ok(()),
            false => self.writes.foresee(&late),
        }
    }

    fn apply_in_transaction(
        &mut self,
        jobs: &mut Vec<Job<M>>,
        now_ms: i64,
        mono_now: Duration,
        answers: &mut Vec<PendingReply>,
        deferred: &mut Vec<(ReplyTx, Result<Reply>)>,
        lock_state_suspect: &mut bool,
    ) -> Result<()> {
        let writes = self.writes.as_ref();
        let storage = writes.storage();
        self.memory.areas.begin_batch();
        // The revision this batch starts from: what it writes beyond it is recorded as the
        // new head before the commit (including what catching up below grants).
        let mut start_revision = self.memory.revision;
        if self.writes.shared() {
            // Another daemon may have written since this one's last batch: continue its
            // revisions, rebuild what memory holds of leases and sessions, and serve the
            // waiters what it freed. A commit announced from now on queues another batch.
            self.catching_up.store(false, Ordering::Release);
            let head = storage.head_revision()?;
            start_revision = head;
            // Some changes move no revision (a wait queued or ended elsewhere): the epochs
            // tell those.
            let changed = self.writes.foreign_changes();
            if head != self.memory.revision || changed.any() {
                self.memory.revision = head;
                self.memory.reload_some(storage, now_ms, mono_now, changed);
                let serve = M::serve_waiters;
                let upkept = upkeep(writes, &mut self.memory, now_ms, mono_now, deferred, serve);
                if let Err(err) = upkept {
                    *lock_state_suspect = true;
                    return Err(err);
                }
            }
        }
        // Leases and waits that are due end first, so no request sees a dead holder.
        if self.memory.next_deadline().is_some_and(|at| at <= mono_now) {
            let expire = M::expire_due;
            let expired = upkeep(writes, &mut self.memory, now_ms, mono_now, deferred, expire);
            if let Err(err) = expired {
                *lock_state_suspect = true;
                return Err(err);
            }
        }
        jobs.reverse();
        while let Some(job) = jobs.pop() {
            let mut reply = job.reply;
            let result = match job.work {
                Work::Write {
                    idempotency, apply, ..
                } => {
                    if let (Some(reply), Some(idem)) = (&mut reply, &idempotency) {
                        reply.idempotency = Some(idem.clone());
                    }
                    self.writes.start_request()?;
                    let before = self.memory.revision;
                    let deferred_before = deferred.len();
                    self.memory.areas.begin_request();
                    let mut ctx = WriteCtx::new(
                        writes,
                        &mut self.memory,
                        now_ms,
                        mono_now,
                        &mut reply,
                        deferred,
                    );
                    let result = idempotency::apply(&mut ctx, idempotency.as_ref(), apply);
                    if let Err(err) = &result {
                        // Undo whatever the refused request wrote.
                        self.memory.revision = before;
                        self.memory.areas.request_rolled_back();
                        *lock_state_suspect |= err.is_server_fault();
                        if let Err(undo) = self.writes.undo_request() {
                            // It cannot be undone alone: the whole batch goes.
                            tracing::error!(%err, "a request failed after writing; its batch is rolled back");
                            *lock_state_suspect = true;
                            answers.push((reply, Err(undo.clone())));
                            return Err(undo);
                        }
                        // What it granted others (a waiter handed the lock it freed) was
                        // rolled back with it: those answers must not escape. The waiters
                        // were taken off their queues, so they are told to retry, and the
                        // memory that handed them out is rebuilt from storage.
                        if deferred.len() > deferred_before {
                            *lock_state_suspect = true;
                            for (_, answer) in &mut deferred[deferred_before..] {
                                *answer = Err(Error::Unavailable(
                                    "the request that freed what you waited for failed and was rolled back, so nothing was granted; retry".into(),
                                ));
                            }
                        }
                    }
                    match result {
                        // The request took its reply channel and answers later.
                        Ok(None) => continue,
                        Ok(Some(reply)) => Ok(reply),
                        Err(err) => Err(err),
                    }
                }
                Work::Read(apply) => apply(storage),
            };
            answers.push((reply, result));
        }
        // Work in steps: the next step of a request that runs in steps, then retention.
        self.step_stepped(now_ms, mono_now, deferred)?;
        self.step_background(now_ms, mono_now, deferred)?;
        let storage = self.writes.storage();
        if now_ms - self.last_purge_ms > IDEMPOTENCY_PURGE_EVERY_MS {
            storage.forget_before(now_ms - idempotency::RETENTION_MS)?;
            self.last_purge_ms = now_ms;
        }
        // Answers given after a wait are remembered for their keys, with what produced them.
        for (reply, answer) in deferred.iter() {
            if let (Some(idem), Ok(answer)) = (&reply.idempotency, answer) {
                storage.remember(
                    &idem.key,
                    idem.method,
                    &idem.request_hash,
                    answer.get(),
                    now_ms,
                )?;
            }
        }
        self.memory.areas.store_counters(storage)?;
        if self.memory.revision != start_revision {
            storage.set_head_revision(self.memory.revision)?;
        }
        let started = std::time::Instant::now();
        let committed = self.writes.commit();
        self.gather.last_commit = started.elapsed();
        committed
    }
}

/// What `jobs` will read, taken out of them (the batch reads it ahead once).
fn take_foreseen<M>(jobs: &mut [Job<M>]) -> Foreseen {
    let mut foreseen = Foreseen::default();
    for job in jobs {
        if let Work::Write { foreseen: f, .. } = &mut job.work {
            foreseen.take_from(f);
        }
    }
    foreseen
}

/// One rule of upkeep for each part of memory (serving waiters, ending what is due), run
/// in order on behalf of nobody: what they grant is answered once the batch commits.
type Upkeep<M> = fn(&mut WriteCtx<'_, M>) -> Result<()>;

fn upkeep<M: Areas>(
    writes: &dyn WriteStorage,
    memory: &mut Memory<M>,
    now_ms: i64,
    mono_now: Duration,
    deferred: &mut Vec<(ReplyTx, Result<Reply>)>,
    step: Upkeep<M>,
) -> Result<()> {
    let mut no_reply = None;
    let mut ctx = WriteCtx::new(writes, memory, now_ms, mono_now, &mut no_reply, deferred);
    step(&mut ctx)
}

/// Runs `f` in the open batch as a request with no reply of its own (a step of work in the
/// background): Ok(Ok) when it succeeded; Ok(Err) when it failed and was undone alone (the
/// revision counter restored); Err when it cannot be undone alone, and the batch fails.
fn unanswered<M: Areas, T>(
    writes: &dyn WriteStorage,
    memory: &mut Memory<M>,
    (now_ms, mono_now): (i64, Duration),
    deferred: &mut Vec<(ReplyTx, Result<Reply>)>,
    f: impl FnOnce(&mut WriteCtx<'_, M>) -> Result<T>,
) -> Result<Result<T>> {
    writes.start_request()?;
    let before = memory.revision;
    let mut no_reply = None;
    let mut ctx = WriteCtx::new(writes, memory, now_ms, mono_now, &mut no_reply, deferred);
    match f(&mut ctx) {
        Ok(value) => Ok(Ok(value)),
        Err(err) => {
            memory.revision = before;
            writes.undo_request()?;
            Ok(Err(err))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Message<()> {
        Message::Job(Job {
            work: Work::Read(Box::new(|_| Err(Error::Internal("never run".into())))),
            reply: None,
        })
    }

    /// A batch waits for as many requests as it expects, for however long its budget
    /// allows, and not at all when it holds them already.
    #[test]
    fn a_batch_waits_for_the_requests_it_expects_and_no_more() {
        let (tx, rx) = mpsc::channel(16);
        let mut intake = Intake { rx, shutdown: None };
        let doorbell = Arc::new(Doorbell::default());
        let _ = doorbell.writer.set(std::thread::current());
        let mut batch = Vec::new();
        let long = Duration::from_secs(3600);
        // Nothing expected: back at once, whatever the budget.
        intake.gather(&mut batch, 0, long, &doorbell);
        assert!(batch.is_empty());
        // Two expected, one queued: it waits for the second, sent once the wait began.
        tx.try_send(job()).ok().unwrap();
        let (late, rung) = (tx.clone(), doorbell.clone());
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            late.blocking_send(job()).ok().unwrap();
            rung.ring();
        });
        intake.gather(&mut batch, 2, long, &doorbell);
        assert_eq!(
            batch.len(),
            2,
            "the batch did not wait for the late request"
        );
        sender.join().unwrap();
        // A third never comes: the wait ends with its budget.
        intake.gather(&mut batch, 3, Duration::ZERO, &doorbell);
        assert_eq!(batch.len(), 2);
        // Already holding what it expects: it takes nothing more, though more is queued.
        tx.try_send(job()).ok().unwrap();
        intake.gather(&mut batch, 2, long, &doorbell);
        assert_eq!(batch.len(), 2);
    }
}
