//! The writer's memory of agents: each live session's monotonic deadline (a lease on the
//! scheduler, keyed by name), which connection ends which session, and the ReadInbox
//! calls waiting for a message, queued per name.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::boundary::Agents;

use crate::engine::schedule::{Due, Schedule};
use crate::engine::{Reply, ReplyTx};

/// A ReadInbox waiting for a message.
pub(super) struct InboxWaiter {
    pub(super) name: String,
    pub(super) after: u64,
    pub(super) limit: u64,
    pub(super) connection: u64,
    pub(super) reply: ReplyTx,
}

/// Sessions by name, and the waiting readers of each name's inbox.
type SessionSchedule = Schedule<String, (), (), String, InboxWaiter>;

/// The writer's in-memory agent state.
#[derive(Default)]
pub struct AgentState {
    pub(super) schedule: SessionSchedule,
    /// Names whose session ends with the connection.
    pub(super) by_connection: HashMap<u64, HashSet<String>>,
}

impl AgentState {
    pub fn next_deadline(&mut self) -> Option<Duration> {
        self.schedule.next_deadline()
    }

    pub(super) fn pop_due(&mut self, now: Duration) -> Option<Due<String, InboxWaiter>> {
        self.schedule.pop_due(now)
    }

    pub(super) fn track(
        &mut self,
        name: String,
        session_id: String,
        deadline: Duration,
        connection: Option<u64>,
    ) {
        if let Some(c) = connection {
            self.by_connection
                .entry(c)
                .or_default()
                .insert(name.clone());
        }
        self.schedule.track(name, session_id, deadline, ());
    }

    pub(super) fn forget(&mut self, name: &str) {
        self.schedule.forget(name);
        self.by_connection.retain(|_, names| {
            names.remove(name);
            !names.is_empty()
        });
    }

    /// The session a name's tracked lease belongs to.
    pub(super) fn session_of(&self, name: &str) -> Option<&str> {
        self.schedule.lease(name).map(|l| l.lease_id.as_str())
    }

    pub(super) fn wait(&mut self, deadline: Duration, waiter: InboxWaiter) {
        let name = waiter.name.clone();
        self.schedule.enqueue((), name, Some(deadline), waiter);
    }

    /// Every reader waiting on `name`'s inbox, leaving the queue.
    pub(super) fn take_waiters(&mut self, name: &str) -> Vec<InboxWaiter> {
        self.schedule.remove_queue((), name).collect()
    }

    /// The names whose inbox someone waits on.
    pub(super) fn awaited(&self) -> Vec<String> {
        self.schedule.queue_keys(()).cloned().collect()
    }

    /// The `index`th reader waiting on `name`'s inbox.
    pub(super) fn waiter(&self, name: &str, index: usize) -> Option<&InboxWaiter> {
        self.schedule.get((), name, index)
    }

    /// Takes the `index`th reader waiting on `name`'s inbox off its queue.
    pub(super) fn take_waiter(&mut self, name: &str, index: usize) -> Option<InboxWaiter> {
        self.schedule.remove_at((), name, index)
    }

    /// The connections that sessions end with.
    pub fn connections(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_connection.keys().copied()
    }

    pub fn waiting(&self) -> usize {
        self.schedule.queued()
    }

    pub(super) fn compact(&mut self) {
        self.schedule.compact();
    }

    /// A connection closed: its waiting reads go; its sessions are returned to be ended.
    pub(super) fn connection_closed(&mut self, connection: u64) -> Vec<String> {
        self.schedule.retain(|w| w.connection != connection);
        self.by_connection
            .remove(&connection)
            .into_iter()
            .flatten()
            .collect()
    }

    /// Rebuilds the session deadlines from storage after a write was rolled back.
    pub fn reload(&mut self, agents: &dyn Agents, now_ms: i64, mono_now: Duration) -> Result<()> {
        let sessions = agents.sessions()?;
        self.schedule.drain_leases();
        self.by_connection.clear();
        for s in sessions {
            let remaining = Duration::from_millis((s.expires_at - now_ms).max(0) as u64);
            self.track(
                s.name,
                s.session_id,
                mono_now + remaining,
                s.holder_connection,
            );
        }
        Ok(())
    }

    /// Ends every waiting read with 503: the daemon is stopping.
    /// Takes the waiting ReadInbox calls of a connection out of their queues.
    pub fn take_waits_of(&mut self, connection: u64) -> Vec<ReplyTx> {
        self.schedule
            .take_where(|w| w.connection == connection)
            .into_iter()
            .map(|w| w.reply)
            .collect()
    }

    pub fn cancel_waits(&mut self) -> Vec<(ReplyTx, Result<Reply>)> {
        self.schedule
            .drain_waiters()
            .into_iter()
            .map(|w| {
                let err = Error::Unavailable(
                    "batond is shutting down; retry ReadInbox once it is back".into(),
                );
                (w.reply, Err(err))
            })
            .collect()
    }
}
