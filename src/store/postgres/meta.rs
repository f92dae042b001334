//! PostgreSQL's side of [`Meta`]: the head revision, sizes, and the instances sharing the
//! database.

use crate::error::Result;
use crate::store::boundary::Meta;

use super::{u, PgConn};

impl Meta for PgConn {
    fn head_revision(&self) -> Result<i64> {
        if let Some(head) = self.take_head_hint() {
            return Ok(head);
        }
        Ok(self
            .query_one("SELECT value FROM meta WHERE name = 'revision'", &[])?
            .get(0))
    }

    fn set_head_revision(&self, revision: i64) -> Result<()> {
        self.defer(format!(
            "UPDATE meta SET value = GREATEST(value, {revision}) WHERE name = 'revision'"
        ));
        Ok(())
    }

    fn file_sizes(&self) -> Result<(u64, u64)> {
        // The database's size on the server; PostgreSQL's WAL is the server's, not ours.
        let size: i64 = self
            .query_one("SELECT pg_database_size(current_database())", &[])?
            .get(0);
        Ok((u(size), 0))
    }

    fn instance_heartbeat(
        &self,
        instance_id: &str,
        connection_base: u64,
        timeout_ms: i64,
    ) -> Result<Vec<u64>> {
        super::connection::heartbeat(self, instance_id, connection_base, timeout_ms)
    }

    fn live_instances(&self, timeout_ms: i64) -> Result<u64> {
        super::connection::live_instances(self, timeout_ms)
    }
}
