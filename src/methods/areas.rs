//! The areas whose state the rules keep on the writer, and the one list of them in the
//! order their upkeep runs (recovery at start, expiry of what came due, serving waiters
//! after another daemon's changes, ending what a closed connection left, the waits the
//! daemon's stop ends). The engine (`crate::engine`) runs this list and names no area: an
//! area that keeps state on the writer adds a field to [`Memory`] and an entry to
//! [`Memory::LIST`], and the engine does not change.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::{self, Area, Areas};
use crate::error::Result;
use crate::store::boundary::{Storage, WriteStorage};

use super::agents::{self, AgentState};
use super::locks::{self, LockState};
use super::retention::{Background, Retention};
use super::tasks::{self, TaskState};

/// What a mutation sees (`engine::WriteCtx` over this daemon's areas).
pub type WriteCtx<'a> = engine::WriteCtx<'a, Memory>;
/// A mutation for the writer.
pub type WriteFn = engine::WriteFn<Memory>;
/// The handle to the writer thread.
pub type Writer = engine::Writer<Memory>;

/// What the rules keep in memory on the writer, area by area.
pub struct Memory {
    /// Lock leases' deadlines, acquire queues, watchers, leases per connection.
    pub locks: LockState,
    /// Node leases and waiting workers.
    pub tasks: TaskState,
    /// Sessions' deadlines and inbox waiters.
    pub agents: AgentState,
    /// Where retention is, across batches.
    pub retention: Background,
}

impl Memory {
    pub fn new(retention: Retention) -> Memory {
        Memory {
            locks: LockState::default(),
            tasks: TaskState::default(),
            agents: AgentState::default(),
            retention: Background::new(retention),
        }
    }
}

/// What Metrics shows of the writer's memory.
#[derive(Default)]
pub struct Figures {
    pub live_locks: AtomicU64,
    pub lock_waiters: AtomicU64,
    pub lock_watchers: AtomicU64,
    pub node_waiters: AtomicU64,
    pub inbox_waiters: AtomicU64,
    /// The shared line of waits as last recorded (`LockState::shared_waits_mark`).
    shared_waits: AtomicU64,
}

impl Areas for Memory {
    type Figures = Figures;

    const LIST: &'static [Area<Memory>] = &[
        Area {
            name: "lock leases",
            recover: locks::recover,
            expire_due: locks::expire_due,
            serve_waiters: locks::serve_waiters,
            connection_closed: locks::rules::connection_closed,
            reload: |m, storage, now_ms, mono_now| m.locks.reload(storage, now_ms, mono_now),
            changed: |c| c.locks,
            next_deadline: |m| m.locks.next_deadline(),
            end_waits: |m| m.locks.cancel_waits(),
        },
        Area {
            name: "node leases",
            recover: tasks::recover,
            expire_due: tasks::expire_due,
            serve_waiters: tasks::serve_waiters,
            connection_closed: tasks::rules::connection_closed,
            reload: |m, storage, now_ms, mono_now| m.tasks.reload(storage, now_ms, mono_now),
            changed: |c| c.tasks,
            next_deadline: |m| m.tasks.next_deadline(),
            end_waits: |m| m.tasks.cancel_waits(),
        },
        Area {
            name: "sessions",
            recover: agents::recover,
            expire_due: agents::expire_due,
            serve_waiters: agents::serve_waiters,
            connection_closed: agents::rules::connection_closed,
            reload: |m, storage, now_ms, mono_now| m.agents.reload(storage, now_ms, mono_now),
            changed: |c| c.agents,
            next_deadline: |m| m.agents.next_deadline(),
            end_waits: |m| m.agents.cancel_waits(),
        },
    ];

    /// The last fencing token handed out, which memory counts ahead of storage.
    fn store_counters(&mut self, storage: &dyn Storage) -> Result<()> {
        match self.locks.take_fencing() {
            Some(last) => storage.store_fencing_token(last),
            None => Ok(()),
        }
    }

    fn begin_batch(&mut self) {
        self.locks.begin_batch();
    }

    fn begin_request(&mut self) {
        self.tasks.begin_request();
    }

    fn request_rolled_back(&mut self) {
        self.tasks.request_rolled_back();
    }

    fn record(&self, figures: &Figures) -> bool {
        let waiters = self.locks.waiting() as u64;
        let shared = self.locks.shared_waits_mark();
        let line_moved = figures.shared_waits.swap(shared, Ordering::Relaxed) != shared;
        let changed = figures.lock_waiters.load(Ordering::Relaxed) != waiters || line_moved;
        for (stat, value) in [
            (&figures.live_locks, self.locks.live()),
            (&figures.lock_waiters, self.locks.waiting()),
            (&figures.lock_watchers, self.locks.watching()),
            (&figures.node_waiters, self.tasks.waiting()),
            (&figures.inbox_waiters, self.agents.waiting()),
        ] {
            stat.store(value as u64, Ordering::Relaxed);
        }
        changed
    }

    fn background_due(&self, head: i64, now_ms: i64) -> bool {
        self.retention.pending(head, now_ms)
    }

    fn background_step(ctx: &mut WriteCtx<'_>) -> Result<()> {
        let mut retention = std::mem::take(&mut ctx.memory.retention);
        let stepped = retention.step(ctx);
        ctx.memory.retention = retention;
        stepped
    }

    fn after_background(&mut self, writes: &mut dyn WriteStorage) -> Result<()> {
        self.retention.reclaim(writes)
    }

    /// What a request in steps removed may leave free pages; CompactJournal moved the
    /// journal's start.
    fn stepped(&mut self) {
        self.retention.removed_rows();
        self.retention.forget_journal_start();
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use tokio::sync::oneshot;

    use super::*;
    use crate::clock::{Clock, SystemClock};
    use crate::engine::{Reply, Served};
    use crate::error::Error;
    use crate::methods::locks::rules::{self as locks, AcquireRequest, ReleaseRequest};
    use crate::resource_key::canonicalize;
    use crate::store::boundary::Foreseen;
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
        let (writer, _thread) = Writer::spawn(
            writes,
            store.health().clone(),
            clock,
            Memory::new(Retention::default()),
        )
        .unwrap();
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
