//! PostgreSQL's side of [`Remembered`] (`idempotency`; as SQLite's `store::sqlite::idempotency`).

use crate::error::Result;
use crate::store::boundary::{Remembered, RememberedAnswer};

use super::PgConn;

impl Remembered for PgConn {
    fn remembered(&self, key: &str) -> Result<Option<RememberedAnswer>> {
        let row = self.query_opt(
            "SELECT method, request_hash, response, created_at FROM idempotency
             WHERE idempotency_key = $1",
            &[&key],
        )?;
        Ok(row.map(|r| RememberedAnswer {
            method: r.get(0),
            request_hash: r.get(1),
            response: r.get(2),
            created_at_ms: r.get(3),
        }))
    }

    fn remember(
        &self,
        key: &str,
        method: &str,
        request_hash: &[u8],
        response: &str,
        at_ms: i64,
    ) -> Result<()> {
        self.execute(
            "INSERT INTO idempotency (idempotency_key, method, request_hash, response, created_at)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (idempotency_key) DO UPDATE SET method = EXCLUDED.method,
               request_hash = EXCLUDED.request_hash, response = EXCLUDED.response,
               created_at = EXCLUDED.created_at",
            &[&key, &method, &request_hash, &response, &at_ms],
        )?;
        Ok(())
    }

    fn forget_before(&self, before_ms: i64) -> Result<()> {
        // Not counted as a change: forgetting expired answers is housekeeping that must
        // not make an otherwise read-only batch announce a commit.
        self.query(
            "DELETE FROM idempotency WHERE created_at < $1",
            &[&before_ms],
        )?;
        Ok(())
    }
}
