//! The writer's memory of tasks: each node lease's monotonic deadline and the FIFO queue
//! of workers waiting in AcquireNextNode (both kept by a `Schedule`), and the recent
//! events of active tasks (kept serialized, so a node's context costs no journal read).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use serde_json::value::RawValue;

use crate::error::{Error, Result};

use super::super::journal;
use super::super::schedule::{Due, Schedule};
use super::super::writer::{Reply, ReplyTx};
use super::NodeRequest;

pub(super) struct Waiter {
    pub(super) request: NodeRequest,
    pub(super) reply: ReplyTx,
}

/// Tasks whose recent events the writer keeps in memory at most (each at most
/// BATON_CONTEXT_EVENT_LIMIT events); others are read from the journal when asked.
pub(super) const RECENT_TASKS: usize = 256;
/// Bytes of serialized events kept at most (events carry payloads of up to
/// BATON_MAX_VALUE_BYTES); a task whose events alone would take a quarter is not kept.
pub(super) const RECENT_BYTES: usize = 16 << 20;

/// The last events of tasks that nodes were recently handed out from, serialized, so
/// AcquireNextNode does not read and re-serialize them from the journal every time.
/// Always exactly what the journal holds: an entry a rolled-back request touched is
/// dropped, and so is any entry when in doubt (it is read again when next needed).
#[derive(Default)]
pub(super) struct RecentEvents {
    pub(super) tasks: HashMap<String, Recent>,
    pub(super) limit: usize,
    /// Bytes of all entries.
    pub(super) bytes: usize,
    /// Tasks whose entry the current request changed.
    pub(super) touched: Vec<String>,
}

pub(super) struct Recent {
    pub(super) events: VecDeque<(i64, Arc<RawValue>)>,
    pub(super) bytes: usize,
}

impl RecentEvents {
    pub(super) fn clear(&mut self) {
        self.tasks.clear();
        self.bytes = 0;
    }

    pub(super) fn remove(&mut self, task_id: &str) {
        if let Some(entry) = self.tasks.remove(task_id) {
            self.bytes -= entry.bytes;
        }
    }

    /// The task's last `limit` events, oldest first.
    pub(super) fn get(
        &mut self,
        conn: &Connection,
        task_id: &str,
        limit: u64,
    ) -> Result<Vec<Arc<RawValue>>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        if self.limit != limit as usize {
            self.clear();
            self.limit = limit as usize;
        }
        if let Some(entry) = self.tasks.get(task_id) {
            return Ok(entry.events.iter().map(|(_, e)| e.clone()).collect());
        }
        let events = journal::recent_for_task(conn, task_id, limit)?;
        let out = events.iter().map(|(_, e)| e.clone()).collect();
        let bytes = events.iter().map(|(_, e)| e.get().len()).sum();
        if bytes <= RECENT_BYTES / 4 {
            while self.tasks.len() >= RECENT_TASKS || self.bytes + bytes > RECENT_BYTES {
                let Some(evict) = self.tasks.keys().next().cloned() else {
                    break;
                };
                self.remove(&evict);
            }
            self.tasks
                .insert(task_id.to_string(), Recent { events, bytes });
            self.bytes += bytes;
            self.touched.push(task_id.to_string());
        }
        Ok(out)
    }

    pub(super) fn push(&mut self, task_id: &str, seq: i64, event: Arc<RawValue>) {
        let Some(entry) = self.tasks.get_mut(task_id) else {
            return;
        };
        let before = entry.bytes;
        entry.bytes += event.get().len();
        entry.events.push_back((seq, event));
        while entry.events.len() > self.limit {
            if let Some((_, old)) = entry.events.pop_front() {
                entry.bytes -= old.get().len();
            }
        }
        self.bytes = self.bytes - before + entry.bytes;
        let too_big = entry.bytes > RECENT_BYTES / 4 || self.bytes > RECENT_BYTES;
        self.touched.push(task_id.to_string());
        if too_big {
            self.remove(task_id);
        }
    }
}

/// Node leases, keyed by (task_id, node_id), and the one queue of waiting workers.
type Nodes = Schedule<(String, String), (), (), (), Waiter>;

/// The writer's in-memory task state.
#[derive(Default)]
pub struct TaskState {
    pub(super) schedule: Nodes,
    pub(super) recent: RecentEvents,
}

impl TaskState {
    pub fn next_deadline(&mut self) -> Option<Duration> {
        self.schedule.next_deadline()
    }

    /// The next node lease or wait whose deadline has passed at `now`; a wait that comes
    /// due has left the queue.
    pub(super) fn pop_due(&mut self, now: Duration) -> Option<Due<(String, String), Waiter>> {
        self.schedule.pop_due(now)
    }

    pub(super) fn track(&mut self, node: (String, String), lease_id: String, deadline: Duration) {
        self.schedule.track(node, lease_id, deadline, ());
    }

    pub(super) fn forget(&mut self, task_id: &str, node_id: &str) {
        self.schedule
            .forget(&(task_id.to_string(), node_id.to_string()));
    }

    /// Queues a worker last, until `deadline`.
    pub(super) fn wait(&mut self, deadline: Duration, waiter: Waiter) {
        self.schedule.enqueue((), (), Some(deadline), waiter);
    }

    /// The waiting workers, first first.
    pub(super) fn waiters(&self) -> impl Iterator<Item = &Waiter> {
        self.schedule.waiters((), &())
    }

    pub(super) fn waiter(&self, index: usize) -> Option<&Waiter> {
        self.schedule.get((), &(), index)
    }

    pub(super) fn take_waiter(&mut self, index: usize) -> Option<Waiter> {
        self.schedule.remove_at((), &(), index)
    }

    /// Drops stale deadlines once they outnumber the live ones.
    pub(super) fn compact(&mut self) {
        self.schedule.compact();
    }

    pub fn waiting(&self) -> usize {
        self.schedule.queued()
    }

    /// A request starts: nothing it changes is known yet.
    pub fn begin_request(&mut self) {
        self.recent.touched.clear();
    }

    /// The request was rolled back: forget what it did to the recent events.
    pub fn request_rolled_back(&mut self) {
        for task_id in std::mem::take(&mut self.recent.touched) {
            self.recent.remove(&task_id);
        }
    }

    /// The task's last `limit` events, oldest first.
    pub(super) fn recent_events(
        &mut self,
        conn: &Connection,
        task_id: &str,
        limit: u64,
    ) -> Result<Vec<Arc<RawValue>>> {
        self.recent.get(conn, task_id, limit)
    }

    /// Whether the task's recent events are kept (and so must see every new one).
    pub(super) fn keeps_recent(&self, task_id: &str) -> bool {
        self.recent.tasks.contains_key(task_id)
    }

    pub(super) fn note_event(&mut self, task_id: &str, seq: i64, event: Arc<RawValue>) {
        self.recent.push(task_id, seq, event);
    }

    /// Drops every copy of recent events (the journal was compacted).
    pub fn forget_recent(&mut self) {
        self.recent.clear();
    }

    /// A finished task hands out no more nodes.
    pub(super) fn task_finished(&mut self, task_id: &str) {
        self.recent.remove(task_id);
    }

    /// Rebuilds the lease map from the table after a write was rolled back.
    pub fn reload(&mut self, conn: &Connection, now_ms: i64, mono_now: Duration) -> Result<()> {
        let rows: Vec<(String, String, String, i64)> = conn
            .prepare(
                "SELECT task_id, node_id, lease_id, lease_expires_at FROM nodes WHERE state = 'RUNNING'",
            )?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<rusqlite::Result<_>>()?;
        // Dropping the drain drops the leases.
        self.schedule.drain_leases();
        self.recent.clear();
        for (task_id, node_id, lease_id, expires_at) in rows {
            let remaining = Duration::from_millis((expires_at - now_ms).max(0) as u64);
            self.track((task_id, node_id), lease_id, mono_now + remaining);
        }
        Ok(())
    }

    /// Ends every pending wait with 503: the daemon is stopping.
    pub fn cancel_waits(&mut self) -> Vec<(ReplyTx, Result<Reply>)> {
        self.schedule
            .drain_waiters()
            .into_iter()
            .map(|w| {
                let err = Error::Unavailable(
                    "batond is shutting down; retry AcquireNextNode once it is back".into(),
                );
                (w.reply, Err(err))
            })
            .collect()
    }

    pub fn connection_closed(&mut self, connection: u64) {
        self.schedule.retain(|w| w.request.connection != connection);
    }
}
