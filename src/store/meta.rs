//! SQL for facts about the whole database (`meta`, file sizes): SQLite's side of [`Meta`].

use rusqlite::Connection;

use crate::error::Result;

use super::boundary::Meta;

impl Meta for Connection {
    fn head_revision(&self) -> Result<i64> {
        Ok(self
            .prepare_cached("SELECT value FROM meta WHERE name = 'revision'")?
            .query_row([], |r| r.get(0))?)
    }

    fn set_head_revision(&self, revision: i64) -> Result<()> {
        self.prepare_cached("UPDATE meta SET value = ?1 WHERE name = 'revision'")?
            .execute([revision])?;
        Ok(())
    }

    fn file_sizes(&self) -> Result<(u64, u64)> {
        let db: u64 = self.query_row(
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
            [],
            |r| r.get(0),
        )?;
        let wal = match self.path().filter(|p| !p.is_empty()) {
            Some(path) => std::fs::metadata(format!("{path}-wal")).map_or(0, |m| m.len()),
            None => 0,
        };
        Ok((db, wal))
    }

    fn instance_heartbeat(&self, _: &str, _: u64, _: i64) -> Result<Vec<u64>> {
        // One daemon per SQLite file (it holds the file's lock).
        Ok(Vec::new())
    }

    fn live_instances(&self, _: i64) -> Result<u64> {
        Ok(1)
    }
}
