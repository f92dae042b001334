//! The writer's memory of tasks: each node lease's monotonic deadline, the FIFO queue of
//! workers waiting in AcquireNextNode, and the recent events of active tasks (kept
//! serialized, so a node's context costs no journal read).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;
use serde_json::value::RawValue;

use crate::error::{Error, Result};

use super::super::journal;
use super::super::writer::{Reply, ReplyTx};
use super::NodeRequest;

pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) request: NodeRequest,
    pub(super) reply: ReplyTx,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Due {
    Lease {
        task_id: String,
        node_id: String,
        lease_id: String,
    },
    Waiter {
        id: u64,
    },
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

/// The writer's in-memory task state.
#[derive(Default)]
pub struct TaskState {
    /// (task_id, node_id) -> (lease_id, deadline)
    pub(super) leases: HashMap<(String, String), (String, Duration)>,
    pub(super) waiters: VecDeque<Waiter>,
    pub(super) deadlines: BinaryHeap<Reverse<(Duration, Due)>>,
    pub(super) next_id: u64,
    pub(super) recent: RecentEvents,
}

impl TaskState {
    pub fn next_deadline(&mut self) -> Option<Duration> {
        while let Some(Reverse((at, due))) = self.deadlines.peek() {
            let current = match due {
                Due::Lease {
                    task_id,
                    node_id,
                    lease_id,
                } => self
                    .leases
                    .get(&(task_id.clone(), node_id.clone()))
                    .is_some_and(|(l, d)| l == lease_id && d == at),
                Due::Waiter { id } => self.waiters.iter().any(|w| w.id == *id),
            };
            if current {
                return Some(*at);
            }
            self.deadlines.pop();
        }
        None
    }

    pub(super) fn track(
        &mut self,
        task_id: &str,
        node_id: &str,
        lease_id: &str,
        deadline: Duration,
    ) {
        self.leases.insert(
            (task_id.to_string(), node_id.to_string()),
            (lease_id.to_string(), deadline),
        );
        self.deadlines.push(Reverse((
            deadline,
            Due::Lease {
                task_id: task_id.to_string(),
                node_id: node_id.to_string(),
                lease_id: lease_id.to_string(),
            },
        )));
    }

    pub(super) fn forget(&mut self, task_id: &str, node_id: &str) {
        self.leases
            .remove(&(task_id.to_string(), node_id.to_string()));
    }

    pub fn waiting(&self) -> usize {
        self.waiters.len()
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
        self.leases.clear();
        self.recent.clear();
        self.deadlines
            .retain(|Reverse((_, due))| !matches!(due, Due::Lease { .. }));
        for (task_id, node_id, lease_id, expires_at) in rows {
            let remaining = Duration::from_millis((expires_at - now_ms).max(0) as u64);
            self.track(&task_id, &node_id, &lease_id, mono_now + remaining);
        }
        Ok(())
    }

    /// Ends every pending wait with 503: the daemon is stopping.
    pub fn cancel_waits(&mut self) -> Vec<(ReplyTx, Result<Reply>)> {
        self.waiters
            .drain(..)
            .map(|w| {
                let err = Error::Unavailable(
                    "batond is shutting down; retry AcquireNextNode once it is back".into(),
                );
                (w.reply, Err(err))
            })
            .collect()
    }

    pub fn connection_closed(&mut self, connection: u64) {
        self.waiters.retain(|w| w.request.connection != connection);
    }
}
