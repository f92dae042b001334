//! SQL for remembered answers to requests with an idempotency key (`idempotency`):
//! SQLite's side of [`Remembered`]. When an answer is replayed or refused is the rule of
//! `methods::idempotency`.

use rusqlite::{params, OptionalExtension};

use crate::error::Result;
use crate::store::boundary::{Remembered, RememberedAnswer};

use super::sql::Sql;

impl<C: Sql> Remembered for C {
    fn remembered(&self, key: &str) -> Result<Option<RememberedAnswer>> {
        Ok(self
            .with(
                "SELECT method, request_hash, response, created_at FROM idempotency
                 WHERE idempotency_key = ?1",
                |s| {
                    s.query_row([key], |r| {
                        Ok(RememberedAnswer {
                            method: r.get(0)?,
                            request_hash: r.get(1)?,
                            response: r.get(2)?,
                            created_at_ms: r.get(3)?,
                        })
                    })
                },
            )
            .optional()?)
    }

    fn remember(
        &self,
        key: &str,
        method: &str,
        request_hash: &[u8],
        response: &str,
        at_ms: i64,
    ) -> Result<()> {
        self.with(
            "INSERT OR REPLACE INTO idempotency
                    (idempotency_key, method, request_hash, response, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            |s| s.execute(params![key, method, request_hash, response, at_ms]),
        )?;
        Ok(())
    }

    fn forget_before(&self, before_ms: i64) -> Result<()> {
        self.with("DELETE FROM idempotency WHERE created_at < ?1", |s| {
            s.execute([before_ms])
        })?;
        Ok(())
    }
}
