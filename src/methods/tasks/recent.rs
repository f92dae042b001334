//! The recent events of active tasks, kept serialized so that handing out a node (whose
//! context carries its task's last events) costs no journal read.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::value::RawValue;

use crate::error::Result;
use crate::store::boundary::Journal;

/// Tasks whose recent events the writer keeps in memory at most (each at most
/// BATON_CONTEXT_EVENT_LIMIT events); others are read from the journal when asked.
const RECENT_TASKS: usize = 256;
/// Bytes of serialized events kept at most (events carry payloads of up to
/// BATON_MAX_VALUE_BYTES); a task whose events alone would take a quarter is not kept.
const RECENT_BYTES: usize = 16 << 20;

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
        journal: &dyn Journal,
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
        let events = journal.recent_for_task(task_id, limit)?;
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
