//! PostgreSQL's migrations: `migrations/postgres/*.sql`, applied in order at start, each
//! recorded; safe when several instances start at once.

use crate::error::Result;

use super::PgConn;

/// Applies every migration not applied yet; the schema version after.
pub fn migrate(conn: &PgConn, now_ms: i64) -> Result<i64> {
    let _ = (conn, now_ms);
    todo!("PostgreSQL: migrations")
}
