//! Schema migrations: numbered SQL files under `migrations/`, embedded in the binary and
//! applied in order, in one transaction, at start-up.

use rusqlite::{params, Connection};

/// One embedded migration file.
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in order. A new file in `migrations/` must be added here; the test
/// below fails if the folder and this list disagree.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_init",
        sql: include_str!("../../../migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "0002_locks",
        sql: include_str!("../../../migrations/0002_locks.sql"),
    },
    Migration {
        version: 3,
        name: "0003_tasks",
        sql: include_str!("../../../migrations/0003_tasks.sql"),
    },
    Migration {
        version: 4,
        name: "0004_task_progress",
        sql: include_str!("../../../migrations/0004_task_progress.sql"),
    },
    Migration {
        version: 5,
        name: "0005_scrub_lease_ids",
        sql: include_str!("../../../migrations/0005_scrub_lease_ids.sql"),
    },
    Migration {
        version: 6,
        name: "0006_tokens",
        sql: include_str!("../../../migrations/0006_tokens.sql"),
    },
    Migration {
        version: 7,
        name: "0007_lease_tokens",
        sql: include_str!("../../../migrations/0007_lease_tokens.sql"),
    },
    Migration {
        version: 8,
        name: "0008_agents",
        sql: include_str!("../../../migrations/0008_agents.sql"),
    },
    Migration {
        version: 9,
        name: "0009_session_bindings",
        sql: include_str!("../../../migrations/0009_session_bindings.sql"),
    },
    Migration {
        version: 10,
        name: "0010_lock_modes",
        sql: include_str!("../../../migrations/0010_lock_modes.sql"),
    },
    Migration {
        version: 11,
        name: "0011_node_priority_labels",
        sql: include_str!("../../../migrations/0011_node_priority_labels.sql"),
    },
    Migration {
        version: 12,
        name: "0012_node_delays",
        sql: include_str!("../../../migrations/0012_node_delays.sql"),
    },
    Migration {
        version: 13,
        name: "0013_result_schema",
        sql: include_str!("../../../migrations/0013_result_schema.sql"),
    },
    Migration {
        version: 14,
        name: "0014_history_by_revision",
        sql: include_str!("../../../migrations/0014_history_by_revision.sql"),
    },
    Migration {
        version: 15,
        name: "0015_unread_lock_indexes",
        sql: include_str!("../../../migrations/0015_unread_lock_indexes.sql"),
    },
    Migration {
        version: 16,
        name: "0016_lock_outcomes_in_batches",
        sql: include_str!("../../../migrations/0016_lock_outcomes_in_batches.sql"),
    },
    Migration {
        version: 17,
        name: "0017_leases_by_key",
        sql: include_str!("../../../migrations/0017_leases_by_key.sql"),
    },
    Migration {
        version: 18,
        name: "0018_inbox_cursors_within_inboxes",
        sql: include_str!("../../../migrations/0018_inbox_cursors_within_inboxes.sql"),
    },
    Migration {
        version: 19,
        name: "0019_agent_name_owners",
        sql: include_str!("../../../migrations/0019_agent_name_owners.sql"),
    },
    Migration {
        version: 20,
        name: "0020_nodes_by_position",
        sql: include_str!("../../../migrations/0020_nodes_by_position.sql"),
    },
    Migration {
        version: 21,
        name: "0021_event_filters",
        sql: include_str!("../../../migrations/0021_event_filters.sql"),
    },
    Migration {
        version: 22,
        name: "0022_fence_tokens",
        sql: include_str!("../../../migrations/0022_fence_tokens.sql"),
    },
];

/// The schema version this binary writes.
pub fn latest_version() -> i64 {
    MIGRATIONS.last().map(|m| m.version).unwrap_or(0)
}

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("the database schema is version {found}, newer than this batond understands (version {supported}); run a newer batond, or point BATON_DATABASE_URL at another database")]
    TooNew { found: i64, supported: i64 },
    #[error("applying migration {name} failed: {source}")]
    Failed {
        name: &'static str,
        source: rusqlite::Error,
    },
    #[error("cannot read the schema version: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// Brings the database up to [`latest_version`] and returns the version it is at.
pub fn migrate(conn: &mut Connection, now_ms: i64) -> Result<i64, MigrationError> {
    migrate_through(conn, now_ms, latest_version())
}

/// Applies the migrations up to and including version `last`.
fn migrate_through(conn: &mut Connection, now_ms: i64, last: i64) -> Result<i64, MigrationError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    INTEGER PRIMARY KEY,
             name       TEXT    NOT NULL,
             applied_at INTEGER NOT NULL
         )",
    )?;
    let current: i64 = tx.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
        [],
        |row| row.get(0),
    )?;
    if current > latest_version() {
        return Err(MigrationError::TooNew {
            found: current,
            supported: latest_version(),
        });
    }
    for migration in MIGRATIONS
        .iter()
        .filter(|m| m.version > current && m.version <= last)
    {
        tx.execute_batch(migration.sql)
            .map_err(|source| MigrationError::Failed {
                name: migration.name,
                source,
            })?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
            params![migration.version, migration.name, now_ms],
        )?;
    }
    tx.commit()?;
    Ok(last.max(current))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first column of every row `sql` returns.
    fn column<T: rusqlite::types::FromSql>(conn: &Connection, sql: &str) -> Vec<T> {
        conn.prepare(sql)
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[test]
    fn every_file_in_migrations_is_embedded_in_order() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let embedded: Vec<String> = MIGRATIONS
            .iter()
            .map(|m| format!("{}.sql", m.name))
            .collect();
        assert_eq!(files, embedded);
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1);
        }
    }

    #[test]
    fn lease_ids_left_in_an_old_journal_are_scrubbed() {
        let mut conn = Connection::open_in_memory().unwrap();
        // As written by versions before the scrub (schema version 4).
        migrate_through(&mut conn, 0, 4).unwrap();
        conn.execute_batch(
            r#"INSERT INTO events (seq, type, at, data) VALUES
                 (1, 'lock.acquired', 0, '{"lease_id":"secret-1","fencing_token":1}'),
                 (2, 'node.acquired', 0, '{"lease_id":"secret-2","attempt":1}'),
                 (3, 'node.rolled_back', 0, '{"attempt":1,"lease_id":"secret-3","reason":"x"}'),
                 (4, 'custom.note', 0, '{"lease_id":"a user payload stays"}');"#,
        )
        .unwrap();
        migrate(&mut conn, 0).unwrap();
        let data: Vec<String> = column(&conn, "SELECT data FROM events ORDER BY seq");
        assert_eq!(
            data,
            [
                r#"{"fencing_token":1}"#,
                r#"{"attempt":1}"#,
                r#"{"attempt":1,"reason":"x"}"#,
                r#"{"lease_id":"a user payload stays"}"#,
            ]
        );
    }

    #[test]
    fn a_cursor_past_its_inbox_goes_back_to_the_newest_message() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_through(&mut conn, 0, 17).unwrap();
        // bob acknowledged 10^12 (accepted before 0018), carol within her inbox, dan has
        // an empty inbox and a cursor past it.
        conn.execute_batch(
            "INSERT INTO inbox (name, seq) VALUES ('bob', 5), ('bob', 9), ('carol', 7), ('carol', 12);
             INSERT INTO inbox_cursors (name, acked) VALUES
                 ('bob', 1000000000000), ('carol', 7), ('dan', 3);",
        )
        .unwrap();
        migrate(&mut conn, 0).unwrap();
        let acked: Vec<i64> = column(&conn, "SELECT acked FROM inbox_cursors ORDER BY name");
        assert_eq!(acked, [9, 7, 0]);
    }

    #[test]
    fn a_name_with_a_live_session_belongs_to_its_token_and_the_others_to_the_next() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_through(&mut conn, 0, 18).unwrap();
        conn.execute_batch(
            "INSERT INTO agents (name, first_seen) VALUES ('by-token', 1), ('by-admin', 1), ('gone', 1);
             INSERT INTO sessions (name, session_id, started_at, last_seen, expires_at, token_id)
             VALUES ('by-token', 's1', 5, 5, 9, 'token-1'), ('by-admin', 's2', 6, 6, 9, NULL);",
        )
        .unwrap();
        migrate(&mut conn, 0).unwrap();
        let owners: Vec<String> = column(
            &conn,
            "SELECT name || ':' || COALESCE(claimed_at, 'unclaimed') || ':' || COALESCE(owner_token_id, 'admin')
             FROM agents ORDER BY name",
        );
        assert_eq!(
            owners,
            [
                "by-admin:6:admin",
                "by-token:5:token-1",
                "gone:unclaimed:admin"
            ]
        );
    }

    #[test]
    fn migrates_once_and_refuses_a_newer_schema() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate(&mut conn, 0).unwrap(), latest_version());
        assert_eq!(
            migrate(&mut conn, 0).unwrap(),
            latest_version(),
            "idempotent"
        );
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'future', 0)",
            [],
        )
        .unwrap();
        let err = migrate(&mut conn, 0).unwrap_err();
        assert!(
            matches!(err, MigrationError::TooNew { found: 999, .. }),
            "{err}"
        );
    }

    /// History stored by key before 0014 is found by revision after it: every version,
    /// newest first, from any version back.
    #[test]
    fn history_stored_by_key_is_kept_when_stored_by_revision() {
        use crate::store::boundary::Records;
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_through(&mut conn, 0, 13).unwrap();
        let mut revision = 0;
        for version in 1..=150 {
            for key in ["a", "b"] {
                revision += 1;
                conn.execute(
                    "INSERT INTO history (namespace, key, version, value, revision, updated_at, deleted)
                     VALUES ('n', ?1, ?2, ?3, ?4, 0, 0)",
                    params![key, version, version.to_string(), revision],
                )
                .unwrap();
                conn.execute(
                    "INSERT INTO records (namespace, key, value, version, revision, updated_at)
                     VALUES ('n', ?1, ?2, ?3, ?4, 0)
                     ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value,
                       version = excluded.version, revision = excluded.revision",
                    params![key, version.to_string(), version, revision],
                )
                .unwrap();
            }
        }
        migrate(&mut conn, 0).unwrap();
        let versions = |before: Option<u64>, limit: u64| -> Vec<u64> {
            conn.history("n", "b", before, limit)
                .unwrap()
                .iter()
                .map(|h| h.version)
                .collect()
        };
        assert_eq!(versions(None, 1000), (1..=150).rev().collect::<Vec<_>>());
        assert_eq!(versions(Some(130), 3), [129, 128, 127]);
        assert_eq!(versions(Some(65), 2), [64, 63]);
        // The marks this migration made are where History expects them.
        let marks: Vec<u64> = column(
            &conn,
            "SELECT version FROM history_marks WHERE key = 'b' ORDER BY version",
        );
        assert_eq!(
            marks,
            [
                super::super::records::HISTORY_MARK_EVERY,
                2 * super::super::records::HISTORY_MARK_EVERY
            ]
        );
        let revisions: Vec<u64> = conn
            .history("n", "a", None, 2)
            .unwrap()
            .iter()
            .map(|h| h.revision)
            .collect();
        assert_eq!(revisions, [299, 297]);
    }

    /// Leases stored before 0017 (keyed by lease id) are all there after it, found by
    /// key prefix and by session, and extended and deleted by key and id.
    #[test]
    fn leases_keyed_by_id_are_kept_when_keyed_by_resource_key() {
        use crate::store::boundary::Leases;
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_through(&mut conn, 0, 16).unwrap();
        for (key, lease, session, mode) in [
            ("file:b.rs", "l1", None, "exclusive"),
            ("tool:pool", "l2", Some("s1"), "shared"),
            ("tool:pool", "l3", None, "shared"),
            ("file:a.rs", "l4", Some("s1"), "exclusive"),
        ] {
            conn.execute(
                "INSERT INTO locks (lease_id, resource_key, kind, owner, fencing_token,
                                    acquired_at, expires_at, session_id, mode)
                 VALUES (?1, ?2, 'k', 'o', 1, 0, 10, ?3, ?4)",
                params![lease, key, session, mode],
            )
            .unwrap();
        }
        migrate(&mut conn, 0).unwrap();
        let ids = |rows: Vec<crate::store::boundary::LeaseRow>| -> Vec<String> {
            rows.into_iter().map(|r| r.lease_id).collect()
        };
        assert_eq!(
            ids(conn.leases("", None).unwrap()),
            ["l4", "l1", "l2", "l3"]
        );
        assert_eq!(ids(conn.leases("tool:", None).unwrap()), ["l2", "l3"]);
        assert_eq!(ids(conn.leases_of_session("s1").unwrap()), ["l4", "l2"]);
        conn.extend_lease("tool:pool", "l3", 99).unwrap();
        conn.delete_lease("tool:pool", "l2").unwrap();
        let pool = conn.leases("tool:", None).unwrap();
        assert_eq!(pool.len(), 1);
        assert_eq!((pool[0].lease_id.as_str(), pool[0].expires_at), ("l3", 99));
        assert_eq!(pool[0].mode, crate::protocol::locks::LockMode::Shared);
    }

    #[test]
    fn task_progress_counts_the_unfinished_nodes_of_existing_tasks() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
                                             applied_at INTEGER NOT NULL)",
        )
        .unwrap();
        for m in MIGRATIONS.iter().filter(|m| m.version <= 3) {
            conn.execute_batch(m.sql).unwrap();
            conn.execute(
                "INSERT INTO schema_migrations VALUES (?1, ?2, 0)",
                params![m.version, m.name],
            )
            .unwrap();
        }
        conn.execute_batch(
            "INSERT INTO tasks VALUES ('t', 'goal', NULL, 'running', 0, 0, 1);
             INSERT INTO nodes (task_id, node_id, position, dependencies, max_attempts, state,
                                remaining_deps, updated_at)
             VALUES ('t', 'a', 0, '[]', 1, 'COMPLETED', 0, 0),
                    ('t', 'b', 1, '[\"a\"]', 1, 'RUNNING', 0, 0),
                    ('t', 'c', 2, '[\"b\"]', 1, 'PENDING', 1, 0);",
        )
        .unwrap();
        migrate(&mut conn, 0).unwrap();
        let unfinished: i64 = conn
            .query_row(
                "SELECT unfinished_nodes FROM tasks WHERE task_id = 't'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(unfinished, 2);
    }
}
