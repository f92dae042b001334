//! The writer's memory of locks: a mirror of the stored leases ([`Held`]), and what only
//! the running daemon needs beside them (each lease's monotonic deadline, the FIFO waiter
//! queues and the watchers of WaitResourceLock, all kept by a `Schedule`; which
//! connection holds which `release_on_disconnect` lease).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::resource_key::ResourceKey;

use crate::engine::schedule::Schedule;
use crate::engine::{Reply, ReplyTx};
use crate::store::boundary::{LeaseRow, Leases, QueuedWait};

use super::conflicts::Want;
use super::held::Held;
use super::rules::AcquireRequest;

/// What a lock lease carries beside its id and deadline.
pub(super) struct Holder {
    /// The connection whose `release_on_disconnect` lease this is.
    pub(super) connection: Option<u64>,
    /// The connection that acquired it (0 after a restart): only there does asking again
    /// return the lease id, which is the holder's secret.
    pub(super) acquired_on: u64,
}

/// The two families of lock queues, each keyed by resource key. At the same instant,
/// waits to acquire run out before waits to be told.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Queue {
    /// AcquireResourceLock with `wait_ms`: first come first served.
    Acquire,
    /// WaitResourceLock: all told once the key is free.
    Watch,
}

/// A wait in a lock queue: an `Acquire` one in `Queue::Acquire`, a `Watch` one in
/// `Queue::Watch`.
pub(super) enum Wait {
    Acquire(Waiter),
    Watch(Watcher),
}

pub(super) struct Waiter {
    pub(super) request: AcquireRequest,
    pub(super) reply: ReplyTx,
    /// Its place in the order of every daemon's waits, on a shared database.
    pub(super) queued: Option<u64>,
    /// When it began waiting (wall ms), for ListResourceLocks.
    pub(super) since_ms: i64,
}

pub(super) struct Watcher {
    pub(super) key: ResourceKey,
    pub(super) started: Duration,
    pub(super) connection: u64,
    pub(super) reply: ReplyTx,
    /// Whose holders its timeout answer may show.
    pub(super) visible: super::conflicts::Visible,
}

impl Wait {
    /// The key waited on.
    pub(super) fn key(&self) -> &ResourceKey {
        match self {
            Wait::Acquire(w) => &w.request.key,
            Wait::Watch(w) => &w.key,
        }
    }

    /// How it wants the key: a watcher waits until an exclusive acquire would succeed.
    pub(super) fn want(&self) -> Want {
        match self {
            Wait::Acquire(w) => w.request.want,
            Wait::Watch(_) => Want::EXCLUSIVE,
        }
    }

    pub(super) fn connection(&self) -> u64 {
        match self {
            Wait::Acquire(w) => w.request.connection,
            Wait::Watch(w) => w.connection,
        }
    }

    pub(super) fn reply(&self) -> &ReplyTx {
        match self {
            Wait::Acquire(w) => &w.reply,
            Wait::Watch(w) => &w.reply,
        }
    }

    fn into_reply(self) -> ReplyTx {
        match self {
            Wait::Acquire(w) => w.reply,
            Wait::Watch(w) => w.reply,
        }
    }
}

/// Leases, keyed by lease id (a key may have several holders), and queues, keyed by
/// resource key.
pub(super) type Locks = Schedule<String, Holder, Queue, String, Wait>;

/// The writer's in-memory lock state.
#[derive(Default)]
pub struct LockState {
    /// Every live lease, as storage holds it.
    pub(super) held: Held,
    pub(super) schedule: Locks,
    /// The `release_on_disconnect` leases of each connection, by lease id.
    pub(super) by_connection: HashMap<u64, HashSet<String>>,
    /// On a shared database, every daemon's waits to acquire, by key, then by place in
    /// the one order.
    pub(super) queued_anywhere: HashMap<String, BTreeMap<u64, QueuedWait>>,
    /// The last fencing token the current batch handed out, once it handed one out
    /// (`rules::next_fencing_token`); stored when the batch ends (`take_fencing`).
    pub(super) fencing: Option<u64>,
}

impl LockState {
    /// A batch begins: the fencing counter is read from storage again at its first grant
    /// (another daemon's batch may have moved it, or the last batch rolled back).
    pub fn begin_batch(&mut self) {
        self.fencing = None;
    }

    /// The last fencing token this batch handed out, for storage before it commits; None
    /// when it handed out none.
    pub fn take_fencing(&mut self) -> Option<u64> {
        self.fencing.take()
    }

    /// The earliest deadline (lease expiry or end of a wait) still pending, if any.
    pub fn next_deadline(&mut self) -> Option<Duration> {
        self.schedule.next_deadline()
    }

    /// Follows a lease just granted, extended or found in storage.
    pub(super) fn track(&mut self, row: LeaseRow, deadline: Duration, acquired_on: u64) {
        let lease_id = row.lease_id.clone();
        let connection = row.holder_connection;
        self.held.insert(row);
        if let Some(c) = connection {
            self.by_connection
                .entry(c)
                .or_default()
                .insert(lease_id.clone());
        }
        let holder = Holder {
            connection,
            acquired_on,
        };
        self.schedule
            .track(lease_id.clone(), lease_id, deadline, holder);
    }

    pub(super) fn forget(&mut self, lease_id: &str) {
        self.held.remove(lease_id);
        if let Some(lease) = self.schedule.forget(lease_id) {
            if let Some(c) = lease.data.connection {
                if let Some(keys) = self.by_connection.get_mut(&c) {
                    keys.remove(lease_id);
                    if keys.is_empty() {
                        self.by_connection.remove(&c);
                    }
                }
            }
        }
    }

    /// Notes a wait queued on a shared database (by any daemon).
    pub(super) fn note_wait(&mut self, wait: QueuedWait) {
        self.queued_anywhere
            .entry(wait.resource_key.clone())
            .or_default()
            .insert(wait.queued, wait);
    }

    /// Forgets a wait on a shared database.
    pub(super) fn drop_wait(&mut self, resource_key: &str, queued: u64) {
        if let Some(waits) = self.queued_anywhere.get_mut(resource_key) {
            waits.remove(&queued);
            if waits.is_empty() {
                self.queued_anywhere.remove(resource_key);
            }
        }
    }

    /// Forgets the waits of `connections` on a shared database.
    pub(super) fn drop_waits_of(&mut self, connections: &std::ops::Range<u64>) {
        self.queued_anywhere.retain(|_, waits| {
            waits.retain(|_, w| !connections.contains(&w.connection));
            !waits.is_empty()
        });
    }

    /// Changes whenever a wait joins or leaves the shared line (of any daemon), as this
    /// daemon last saw it.
    pub fn shared_waits_mark(&self) -> u64 {
        let (mut n, mut sum) = (0u64, 0u64);
        for waits in self.queued_anywhere.values() {
            n += waits.len() as u64;
            sum = waits.keys().fold(sum, |s, q| s.wrapping_add(*q));
        }
        n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ sum
    }

    /// When this daemon's waiter at `queued` (its place in the shared order) began
    /// waiting, for ListResourceLocks; None for another daemon's.
    pub(super) fn waiting_since(&self, queued: u64) -> Option<String> {
        self.schedule
            .queue_keys(Queue::Acquire)
            .flat_map(|key| self.schedule.waiters(Queue::Acquire, key))
            .find_map(|wait| match wait {
                Wait::Acquire(w) if w.queued == Some(queued) => {
                    Some(crate::clock::format_ms(w.since_ms))
                }
                _ => None,
            })
    }

    /// The first wait for `resource_key` on a shared database, of any daemon.
    pub(super) fn first_queued(&self, resource_key: &str) -> Option<u64> {
        self.queued_anywhere
            .get(resource_key)
            .and_then(|w| w.keys().next().copied())
    }

    /// The connections that `release_on_disconnect` leases end with.
    pub fn connections(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_connection.keys().copied()
    }

    pub fn live(&self) -> usize {
        self.schedule.leases()
    }

    pub fn waiting(&self) -> usize {
        self.schedule.queued_in(Queue::Acquire)
    }

    pub fn watching(&self) -> usize {
        self.schedule.queued_in(Queue::Watch)
    }

    /// Rebuilds the leases from storage, after a write failed and was rolled back or
    /// another daemon changed them. Waiters and watchers are kept; the next release or
    /// expiry serves them.
    pub fn reload(&mut self, leases: &dyn Leases, now_ms: i64, mono_now: Duration) -> Result<()> {
        let rows = leases.leases("", None)?;
        let acquired_on: HashMap<String, u64> = self
            .schedule
            .drain_leases()
            .map(|(_, lease)| (lease.lease_id, lease.data.acquired_on))
            .collect();
        self.by_connection.clear();
        self.held.clear();
        for row in rows {
            let remaining = Duration::from_millis((row.expires_at - now_ms).max(0) as u64);
            let on = acquired_on.get(&row.lease_id).copied().unwrap_or(0);
            let deadline = mono_now + remaining;
            self.track(row, deadline, on);
        }
        if let Some(shared) = leases.shared_waits() {
            self.queued_anywhere.clear();
            for wait in shared.queued_waits()? {
                self.note_wait(wait);
            }
        }
        Ok(())
    }

    /// Ends every pending wait with 503: the daemon is stopping.
    /// Takes the waits of a connection (to acquire and to be told) out of their queues.
    pub fn take_waits_of(&mut self, connection: u64) -> Vec<ReplyTx> {
        self.schedule
            .take_where(|w| w.connection() == connection)
            .into_iter()
            .map(Wait::into_reply)
            .collect()
    }

    pub fn cancel_waits(&mut self) -> Vec<(ReplyTx, Result<Reply>)> {
        let stopping =
            || Error::Unavailable("batond is shutting down; retry the wait once it is back".into());
        // Waits to acquire first, then waits to be told.
        self.schedule
            .drain_waiters()
            .into_iter()
            .map(|w| (w.into_reply(), Err(stopping())))
            .collect()
    }
}
