//! How the store's SQLite code runs its statements: each of the store's traits is
//! implemented for any [`Sql`], which decides how a statement is prepared and kept. A
//! plain connection uses rusqlite's statement cache.

use rusqlite::{Connection, Statement};

/// A SQLite connection as the store's code uses it.
pub trait Sql {
    /// The connection itself, for what is not one of its kept statements.
    fn conn(&self) -> &Connection;

    /// Runs `f` on the prepared statement for `sql` (whose bindings `f` sets in full).
    fn with<R>(
        &self,
        sql: &'static str,
        f: impl FnOnce(&mut Statement<'_>) -> rusqlite::Result<R>,
    ) -> rusqlite::Result<R>;
}

impl Sql for Connection {
    fn conn(&self) -> &Connection {
        self
    }

    fn with<R>(
        &self,
        sql: &'static str,
        f: impl FnOnce(&mut Statement<'_>) -> rusqlite::Result<R>,
    ) -> rusqlite::Result<R> {
        f(&mut *self.prepare_cached(sql)?)
    }
}
