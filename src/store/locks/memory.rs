//! The writer's memory of locks: what only the running daemon needs beside the `locks`
//! table (each lease's monotonic deadline, the FIFO waiter queues, the watchers of
//! WaitResourceLock, which connection holds which `release_on_disconnect` lease).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use rusqlite::Connection;

use crate::error::{Error, Result};
use crate::resource_key::ResourceKey;

use super::super::writer::{Reply, ReplyTx};
use super::AcquireRequest;

pub(super) struct LiveLease {
    pub(super) lease_id: String,
    pub(super) deadline: Duration,
    /// The connection whose `release_on_disconnect` lease this is.
    pub(super) connection: Option<u64>,
    /// The connection that acquired it (0 after a restart): only there does asking again
    /// return the lease id, which is the holder's secret.
    pub(super) acquired_on: u64,
}

pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) request: AcquireRequest,
    pub(super) reply: ReplyTx,
}

pub(super) struct Watcher {
    pub(super) id: u64,
    pub(super) key: ResourceKey,
    pub(super) started: Duration,
    pub(super) connection: u64,
    pub(super) reply: ReplyTx,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Due {
    Lease { key: String, lease_id: String },
    Waiter { key: String, id: u64 },
    Watcher { key: String, id: u64 },
}

/// The writer's in-memory lock state.
#[derive(Default)]
pub struct LockState {
    pub(super) leases: HashMap<String, LiveLease>,
    pub(super) by_connection: HashMap<u64, HashSet<String>>,
    pub(super) waiters: HashMap<String, VecDeque<Waiter>>,
    pub(super) watchers: HashMap<String, Vec<Watcher>>,
    pub(super) deadlines: BinaryHeap<Reverse<(Duration, Due)>>,
    pub(super) next_id: u64,
}

impl LockState {
    /// The earliest deadline (lease expiry or end of a wait) still pending, if any.
    pub fn next_deadline(&mut self) -> Option<Duration> {
        while let Some(Reverse((at, due))) = self.deadlines.peek() {
            if self.is_current(*at, due) {
                return Some(*at);
            }
            self.deadlines.pop();
        }
        None
    }

    pub(super) fn is_current(&self, at: Duration, due: &Due) -> bool {
        match due {
            Due::Lease { key, lease_id } => self
                .leases
                .get(key)
                .is_some_and(|l| &l.lease_id == lease_id && l.deadline == at),
            Due::Waiter { key, id } => self
                .waiters
                .get(key)
                .is_some_and(|q| q.iter().any(|w| w.id == *id)),
            Due::Watcher { key, id } => self
                .watchers
                .get(key)
                .is_some_and(|ws| ws.iter().any(|w| w.id == *id)),
        }
    }

    pub(super) fn track(
        &mut self,
        key: &str,
        lease_id: &str,
        deadline: Duration,
        connection: Option<u64>,
        acquired_on: u64,
    ) {
        self.leases.insert(
            key.to_string(),
            LiveLease {
                lease_id: lease_id.to_string(),
                deadline,
                connection,
                acquired_on,
            },
        );
        if let Some(c) = connection {
            self.by_connection
                .entry(c)
                .or_default()
                .insert(key.to_string());
        }
        self.deadlines.push(Reverse((
            deadline,
            Due::Lease {
                key: key.to_string(),
                lease_id: lease_id.to_string(),
            },
        )));
    }

    pub(super) fn forget(&mut self, key: &str) {
        if let Some(lease) = self.leases.remove(key) {
            if let Some(c) = lease.connection {
                if let Some(keys) = self.by_connection.get_mut(&c) {
                    keys.remove(key);
                    if keys.is_empty() {
                        self.by_connection.remove(&c);
                    }
                }
            }
        }
    }

    pub(super) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn live(&self) -> usize {
        self.leases.len()
    }

    pub fn waiting(&self) -> usize {
        self.waiters.values().map(VecDeque::len).sum()
    }

    pub fn watching(&self) -> usize {
        self.watchers.values().map(Vec::len).sum()
    }

    /// Drops stale heap entries (left by heartbeats) once they outnumber the live ones.
    pub(super) fn compact(&mut self) {
        let live = self.leases.len()
            + self.waiters.values().map(VecDeque::len).sum::<usize>()
            + self.watchers.values().map(Vec::len).sum::<usize>();
        if self.deadlines.len() > 2 * live + 1024 {
            let entries = std::mem::take(&mut self.deadlines).into_vec();
            self.deadlines = entries
                .into_iter()
                .filter(|Reverse((at, due))| self.is_current(*at, due))
                .collect();
        }
    }

    /// Rebuilds the lease map from the table, after a write failed and was rolled back.
    /// Waiters and watchers are kept; the next release or expiry serves them.
    pub fn reload(&mut self, conn: &Connection, now_ms: i64, mono_now: Duration) -> Result<()> {
        let rows: Vec<(String, String, i64, Option<u64>)> = conn
            .prepare("SELECT resource_key, lease_id, expires_at, holder_connection FROM locks")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let acquired_on: HashMap<String, u64> = self
            .leases
            .drain()
            .map(|(_, lease)| (lease.lease_id, lease.acquired_on))
            .collect();
        self.by_connection.clear();
        self.deadlines
            .retain(|Reverse((_, due))| !matches!(due, Due::Lease { .. }));
        for (key, lease_id, expires_at, connection) in rows {
            let remaining = Duration::from_millis((expires_at - now_ms).max(0) as u64);
            let on = acquired_on.get(&lease_id).copied().unwrap_or(0);
            self.track(&key, &lease_id, mono_now + remaining, connection, on);
        }
        Ok(())
    }

    /// Ends every pending wait with 503: the daemon is stopping.
    pub fn cancel_waits(&mut self) -> Vec<(ReplyTx, Result<Reply>)> {
        let stopping =
            || Error::Unavailable("batond is shutting down; retry the wait once it is back".into());
        let mut answers = Vec::new();
        for (_, queue) in self.waiters.drain() {
            answers.extend(queue.into_iter().map(|w| (w.reply, Err(stopping()))));
        }
        for (_, watchers) in self.watchers.drain() {
            answers.extend(watchers.into_iter().map(|w| (w.reply, Err(stopping()))));
        }
        answers
    }
}
