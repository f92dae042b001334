//! How the store's SQLite code runs its statements: through rusqlite's statement cache on
//! read connections, and through statements the writer's connection keeps prepared.
//!
//! rusqlite's cache (`prepare_cached`) finds a statement by its text: every use trims and
//! hashes the text twice, copies it into a new allocation, clears the bindings and moves
//! the statement out of and back into an LRU list. Measured with callgrind, that was
//! 1.5-1.7 k instructions per statement, about a tenth of the writer's work per Set, lock
//! cycle or node. The writer runs the same few statements all day, so [`WriterConn`] keeps
//! each statement it ran, found by the address of its `&'static str` text.

use std::cell::RefCell;
use std::collections::HashMap;

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

/// The statements a connection keeps, by the address and length of their text.
#[derive(Default)]
pub struct Kept<'c>(RefCell<HashMap<(usize, usize), Statement<'c>, foldhash::fast::FixedState>>);

self_cell::self_cell!(
    /// The writer's connection with the statements it keeps prepared (dropped before it).
    pub struct WriterConn {
        owner: Connection,
        #[not_covariant]
        dependent: Kept,
    }
);

impl WriterConn {
    pub fn wrap(conn: Connection) -> WriterConn {
        WriterConn::new(conn, |_| Kept::default())
    }
}

impl Sql for WriterConn {
    fn conn(&self) -> &Connection {
        self.borrow_owner()
    }

    fn with<R>(
        &self,
        sql: &'static str,
        f: impl FnOnce(&mut Statement<'_>) -> rusqlite::Result<R>,
    ) -> rusqlite::Result<R> {
        self.with_dependent(|conn, kept| {
            let key = (sql.as_ptr() as usize, sql.len());
            // Taken out while it runs: a statement that runs another (or itself, nested)
            // never finds it borrowed; a nested use of the same text prepares its own.
            let taken = kept.0.borrow_mut().remove(&key);
            let mut stmt = match taken {
                Some(stmt) => stmt,
                None => {
                    conn.prepare_with_flags(sql, rusqlite::PrepFlags::SQLITE_PREPARE_PERSISTENT)?
                }
            };
            let out = f(&mut stmt);
            // rusqlite resets a statement when it is done with it (after `execute`, when
            // `Rows` is dropped), so it goes back ready for its next bindings.
            kept.0.borrow_mut().entry(key).or_insert(stmt);
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Sql, WriterConn};
    use rusqlite::{Connection, OptionalExtension};

    fn writer() -> WriterConn {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c');")
            .unwrap();
        WriterConn::wrap(conn)
    }

    const BY_KEY: &str = "SELECT v FROM t WHERE k = ?1";
    const FROM: &str = "SELECT v FROM t WHERE k >= ?1 ORDER BY k";

    #[test]
    fn a_kept_statement_runs_again_with_new_bindings_whatever_its_last_use_left() {
        let w = writer();
        let v = |k: i64| {
            w.with(BY_KEY, |s| s.query_row([k], |r| r.get::<_, String>(0)))
                .optional()
                .unwrap()
        };
        assert_eq!(v(1).as_deref(), Some("a"));
        // No row: the statement is reset all the same and runs again.
        assert_eq!(v(9), None);
        assert_eq!(v(2).as_deref(), Some("b"));
        // A use that reads one row of several leaves nothing for the next.
        let first = |k: i64| {
            w.with(FROM, |s| {
                let mut rows = s.query([k])?;
                rows.next()?.map(|r| r.get::<_, String>(0)).transpose()
            })
            .unwrap()
        };
        assert_eq!(first(1).as_deref(), Some("a"));
        assert_eq!(first(2).as_deref(), Some("b"));
        // A failed use (wrong bindings) leaves the statement usable.
        assert!(w
            .with(BY_KEY, |s| s.query_row([1, 2], |r| r.get::<_, String>(0)))
            .is_err());
        assert_eq!(v(3).as_deref(), Some("c"));
    }

    #[test]
    fn a_statement_used_inside_its_own_use_is_prepared_apart() {
        let w = writer();
        let pairs = w
            .with(FROM, |outer| {
                let keys: Vec<String> = outer
                    .query_map([2], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                let inner: Vec<String> =
                    w.with(FROM, |s| s.query_map([1], |r| r.get(0))?.collect())?;
                Ok((keys, inner))
            })
            .unwrap();
        assert_eq!(pairs.0, ["b", "c"]);
        assert_eq!(pairs.1, ["a", "b", "c"]);
        // Both went back (one kept, one dropped), and the kept one still answers.
        let again: Vec<String> = w
            .with(FROM, |s| s.query_map([3], |r| r.get(0))?.collect())
            .unwrap();
        assert_eq!(again, ["c"]);
    }

    #[test]
    fn writes_through_kept_statements_commit_and_roll_back_with_the_transaction() {
        let w = writer();
        let set = |k: i64, v: &str| {
            w.with("UPDATE t SET v = ?2 WHERE k = ?1", |s| {
                s.execute(rusqlite::params![k, v])
            })
            .unwrap()
        };
        let get = |k: i64| {
            w.with(BY_KEY, |s| s.query_row([k], |r| r.get::<_, String>(0)))
                .unwrap()
        };
        w.conn().execute_batch("BEGIN").unwrap();
        assert_eq!(set(1, "x"), 1);
        w.conn().execute_batch("ROLLBACK").unwrap();
        assert_eq!(get(1), "a");
        w.conn().execute_batch("BEGIN").unwrap();
        assert_eq!(set(1, "y"), 1);
        w.conn().execute_batch("COMMIT").unwrap();
        assert_eq!(get(1), "y");
    }
}
