//! PostgreSQL's migrations (`migrations/postgres/*.sql`, compiled in): applied at start
//! in order, each in its own transaction and recorded in `baton_migrations`. Several
//! instances may start at once: each transaction first takes a transaction-scoped
//! advisory lock, so one applies a migration and the others then see it recorded.

use crate::error::{Error, Result};

use super::PgConn;

/// (version, name, SQL), in order.
pub(super) const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../../../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "instances",
        include_str!("../../../migrations/postgres/0002_instances.sql"),
    ),
    (
        3,
        "epochs",
        include_str!("../../../migrations/postgres/0003_epochs.sql"),
    ),
    (
        4,
        "lock_waits",
        include_str!("../../../migrations/postgres/0004_lock_waits.sql"),
    ),
    (
        5,
        "inbox_cursors_within_inboxes",
        include_str!("../../../migrations/postgres/0005_inbox_cursors_within_inboxes.sql"),
    ),
    (
        6,
        "agent_name_owners",
        include_str!("../../../migrations/postgres/0006_agent_name_owners.sql"),
    ),
    (
        7,
        "nodes_by_position",
        include_str!("../../../migrations/postgres/0007_nodes_by_position.sql"),
    ),
    (
        8,
        "event_filters",
        include_str!("../../../migrations/postgres/0008_event_filters.sql"),
    ),
    (
        9,
        "history_by_revision",
        include_str!("../../../migrations/postgres/0009_history_by_revision.sql"),
    ),
    (
        10,
        "fence_tokens",
        include_str!("../../../migrations/postgres/0010_fence_tokens.sql"),
    ),
];

/// The advisory lock migrations take (transaction-scoped: safe behind PgBouncer).
const MIGRATION_LOCK: i64 = 0x6261_746f_6e00;

/// Applies every migration not applied yet; the schema version after. Refuses a database
/// migrated by a newer batond.
pub fn migrate(conn: &PgConn, now_ms: i64) -> Result<i64> {
    conn.batch(
        "CREATE TABLE IF NOT EXISTS baton_migrations (
             version    BIGINT PRIMARY KEY,
             name       TEXT   NOT NULL,
             applied_at BIGINT NOT NULL
         )",
    )
    .or_else(|err| {
        // Two instances creating it at once: one wins, the other finds it there.
        let exists = conn.query_one("SELECT to_regclass('baton_migrations') IS NOT NULL", &[])?;
        if exists.get::<_, bool>(0) {
            Ok(())
        } else {
            Err(err)
        }
    })?;
    for &(version, name, sql) in MIGRATIONS {
        conn.batch("BEGIN")?;
        let applied = (|| {
            conn.query_one("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
            let done = conn.query_opt(
                "SELECT 1 FROM baton_migrations WHERE version = $1",
                &[&version],
            )?;
            if done.is_none() {
                conn.batch(sql).map_err(|e| {
                    Error::Unavailable(format!(
                        "PostgreSQL migration {version:04} ({name}) failed: {e}"
                    ))
                })?;
                conn.execute(
                    "INSERT INTO baton_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
                    &[&version, &name, &now_ms],
                )?;
                tracing::info!(version, name, "applied a PostgreSQL migration");
            }
            Ok(())
        })();
        match applied {
            Ok(()) => conn.batch("COMMIT")?,
            Err(err) => {
                let _ = conn.batch("ROLLBACK");
                return Err(err);
            }
        }
    }
    let newest = conn.query_one(
        "SELECT COALESCE(MAX(version), 0) FROM baton_migrations",
        &[],
    )?;
    let version: i64 = newest.get(0);
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    if version > known {
        return Err(Error::Unavailable(format!(
            "the PostgreSQL database has schema version {version}, newer than this batond knows ({known}); run a batond at least as new as the one that migrated it"
        )));
    }
    // The database's id, given once.
    let fresh_id = (uuid::Uuid::new_v4().as_u64_pair().0 >> 1) as i64;
    conn.execute(
        "INSERT INTO meta (name, value) VALUES ('database_id', $1) ON CONFLICT (name) DO NOTHING",
        &[&fresh_id],
    )?;
    Ok(version)
}
