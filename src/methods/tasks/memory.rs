//! The writer's memory of tasks: each node lease's monotonic deadline and the FIFO queue
//! of workers waiting in AcquireNextNode (both kept by a `Schedule`), and the recent
//! events of active tasks (`RecentEvents`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;

use crate::error::{Error, Result};
use crate::store::boundary::{Journal, Nodes};

use super::recent::RecentEvents;
use super::rules::NodeRequest;
use crate::engine::schedule::{Due, Schedule};
use crate::engine::{Reply, ReplyTx};

pub(super) struct Waiter {
    pub(super) request: NodeRequest,
    pub(super) reply: ReplyTx,
}

/// What a node's deadline ends: its lease, or the hold of a delayed node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Timer {
    Lease,
    Hold,
}

/// A node's deadline: what it ends, task_id, node_id.
pub(super) type NodeTimer = (Timer, String, String);

/// Node leases and holds, keyed by [`NodeTimer`], and the one queue of waiting workers.
type NodeSchedule = Schedule<NodeTimer, (), (), (), Waiter>;

/// The writer's in-memory task state.
#[derive(Default)]
pub struct TaskState {
    pub(super) schedule: NodeSchedule,
    pub(super) recent: RecentEvents,
}

impl TaskState {
    pub fn next_deadline(&mut self) -> Option<Duration> {
        self.schedule.next_deadline()
    }

    /// The next node lease or wait whose deadline has passed at `now`; a wait that comes
    /// due has left the queue.
    pub(super) fn pop_due(&mut self, now: Duration) -> Option<Due<NodeTimer, Waiter>> {
        self.schedule.pop_due(now)
    }

    pub(super) fn track(&mut self, node: (String, String), lease_id: String, deadline: Duration) {
        self.schedule
            .track((Timer::Lease, node.0, node.1), lease_id, deadline, ());
    }

    pub(super) fn forget(&mut self, task_id: &str, node_id: &str) {
        self.schedule
            .forget(&(Timer::Lease, task_id.to_string(), node_id.to_string()));
    }

    /// Releases the node's hold at `deadline`.
    pub(super) fn hold(&mut self, task_id: String, node_id: String, deadline: Duration) {
        self.schedule
            .track((Timer::Hold, task_id, node_id), String::new(), deadline, ());
    }

    /// Queues a worker last, until `deadline`.
    pub(super) fn wait(&mut self, deadline: Duration, waiter: Waiter) {
        self.schedule.enqueue((), (), Some(deadline), waiter);
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
        journal: &dyn Journal,
        task_id: &str,
        limit: u64,
    ) -> Result<Vec<Arc<RawValue>>> {
        self.recent.get(journal, task_id, limit)
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

    /// Rebuilds the lease map from storage after a write was rolled back.
    pub fn reload(&mut self, nodes: &dyn Nodes, now_ms: i64, mono_now: Duration) -> Result<()> {
        let leases = nodes.node_leases()?;
        // Dropping the drain drops the leases.
        self.schedule.drain_leases();
        self.recent.clear();
        for lease in leases {
            let remaining = Duration::from_millis((lease.expires_at - now_ms).max(0) as u64);
            let deadline = mono_now + remaining;
            self.track((lease.task_id, lease.node_id), lease.lease_id, deadline);
        }
        for (task_id, node_id, ready_at) in nodes.held_nodes()? {
            let remaining = Duration::from_millis((ready_at - now_ms).max(0) as u64);
            self.hold(task_id, node_id, mono_now + remaining);
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

    /// Takes the waits of a connection out of the queue.
    pub fn take_waits_of(&mut self, connection: u64) -> Vec<ReplyTx> {
        self.schedule
            .take_where(|w| w.request.connection == connection)
            .into_iter()
            .map(|w| w.reply)
            .collect()
    }

    pub fn connection_closed(&mut self, connection: u64) {
        self.schedule.retain(|w| w.request.connection != connection);
    }
}
