//! PostgreSQL's side of [`Journal`].

use std::collections::VecDeque;

use crate::protocol::journal::{Event, EventFilter};
use crate::store::boundary::{Journal, NewEvent, SerializedEvent};

use crate::error::Result;

use super::PgConn;

impl Journal for PgConn {
    fn append_event(&self, seq: i64, at_ms: i64, event: &NewEvent<'_>) -> Result<()> {
        todo!("PostgreSQL: Journal")
    }

    fn read_events(
        &self,
        since_seq: u64,
        head: u64,
        filter: &EventFilter,
        limit: u64,
        max_bytes: usize,
    ) -> Result<(Vec<Event>, u64)> {
        todo!("PostgreSQL: Journal")
    }

    fn recent_for_task(&self, task_id: &str, limit: u64) -> Result<VecDeque<SerializedEvent>> {
        todo!("PostgreSQL: Journal")
    }

    fn length(&self) -> Result<u64> {
        todo!("PostgreSQL: Journal")
    }

    fn oldest_seq(&self) -> Result<u64> {
        todo!("PostgreSQL: Journal")
    }

    fn remove_before(&self, before_seq: u64) -> Result<u64> {
        todo!("PostgreSQL: Journal")
    }
}
