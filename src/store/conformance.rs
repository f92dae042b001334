//! The storage conformance suite: one behavioural spec of the `store::boundary` traits,
//! each case written once over the traits and run in-process against both engines (SQLite
//! in a temporary directory, PostgreSQL in a fresh database on `BATON_TEST_POSTGRES_URL`,
//! default `postgres://postgres@127.0.0.1:5432/test`; `none` skips it, loudly).
//!
//! Run: `cargo test --lib store::conformance`. A case reads what the boundary documents
//! (see `boundary.rs`), through the writer's side inside a batch and through the read side
//! after the commit, never an engine's tables.

use crate::error::{Error, Result};
use crate::protocol::journal::{EventFilter, EventType};
use crate::protocol::locks::LockMode;
use crate::protocol::tasks::{NodeState, TaskStatus};

use super::boundary::{
    Foreseen, LeaseEnd, NameOwner, NewEvent, NewLease, NewNode, NewTask, NewToken, NewVersion,
    NodeChange, NodeLeaseGrant, Outcomes, SessionRow, Storage, WriteStorage,
};
use super::Store;

/// Where a case's database lives.
#[derive(Clone, Copy, Debug)]
enum Engine {
    Sqlite,
    Postgres,
}

struct PgPlace {
    server: String,
    name: String,
    url: String,
    runtime: tokio::runtime::Runtime,
}

/// One engine's database, opened as batond opens it: the read side and the writer's side.
struct Db {
    engine: Engine,
    store: Option<Store>,
    writes: Option<Box<dyn WriteStorage>>,
    dir: Option<tempfile::TempDir>,
    pg: Option<PgPlace>,
}

/// The clock at open (epoch ms); cases use times near it.
const T0: i64 = 1_800_000_000_000;

fn pg_server() -> Option<String> {
    let server = std::env::var("BATON_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    (server != "none").then_some(server)
}

async fn pg_admin(server: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(server, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {server}: {e}"));
    tokio::spawn(connection);
    client
}

impl Db {
    /// A fresh database of `engine`; None (after a loud SKIPPED line) when PostgreSQL is
    /// not available.
    fn open(engine: Engine, case: &str) -> Option<Db> {
        let mut db = Db {
            engine,
            store: None,
            writes: None,
            dir: None,
            pg: None,
        };
        match engine {
            Engine::Sqlite => db.dir = Some(tempfile::tempdir().unwrap()),
            Engine::Postgres => {
                let Some(server) = pg_server() else {
                    // Straight to stderr, past the test harness's capture: a skip is seen.
                    use std::io::Write;
                    let _ = writeln!(
                        std::io::stderr(),
                        "SKIPPED: BATON_TEST_POSTGRES_URL=none; the storage conformance case `{case}` did not run on PostgreSQL"
                    );
                    return None;
                };
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                let name = format!("baton_conform_{}", uuid::Uuid::new_v4().simple());
                runtime.block_on(async {
                    pg_admin(&server)
                        .await
                        .batch_execute(&format!("CREATE DATABASE {name}"))
                        .await
                        .unwrap()
                });
                let base = server.rsplit_once('/').map_or(server.as_str(), |(b, _)| b);
                let url = format!("{base}/{name}");
                db.pg = Some(PgPlace {
                    server,
                    name,
                    url,
                    runtime,
                });
            }
        }
        db.start();
        Some(db)
    }

    fn start(&mut self) {
        let (store, open_writes) = match self.engine {
            Engine::Sqlite => {
                let path = self.dir.as_ref().unwrap().path().join("baton.db");
                Store::open(&path, T0).unwrap()
            }
            Engine::Postgres => {
                let pg = self.pg.as_ref().unwrap();
                Store::open_postgres(&pg.url, T0, pg.runtime.handle().clone(), 0).unwrap()
            }
        };
        self.store = Some(store);
        self.writes = Some(open_writes());
    }

    /// Closes the writer's side cleanly, drops both sides and opens the database again.
    fn reopen(&mut self) {
        if let Some(mut writes) = self.writes.take() {
            writes.close();
        }
        self.store = None;
        self.start();
    }

    fn writes(&mut self) -> &mut dyn WriteStorage {
        self.writes.as_deref_mut().unwrap()
    }

    /// Runs `f` as one request of one batch, and commits it.
    fn batch<T>(&mut self, f: impl FnOnce(&dyn Storage, &dyn Outcomes) -> Result<T>) -> T {
        let writes = self.writes();
        writes.begin(&Foreseen::default()).unwrap();
        writes.savepoint().unwrap();
        let done = f(writes.storage(), writes.outcomes())
            .and_then(|value| writes.release_request().map(|()| value))
            .and_then(|value| writes.commit().map(|()| value));
        match done {
            Ok(value) => value,
            Err(err) => {
                writes.rollback();
                panic!("the batch failed on {:?}: {err}", self.engine)
            }
        }
    }

    /// Reads on the read side (one snapshot), after what was committed.
    fn read<T>(&self, f: impl FnOnce(&dyn Storage) -> Result<T>) -> T {
        self.store.as_ref().unwrap().read(f).unwrap()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.writes = None;
        self.store = None;
        if let Some(pg) = self.pg.take() {
            let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", pg.name);
            let dropped = pg.runtime.block_on(async {
                let (client, connection) =
                    tokio_postgres::connect(&pg.server, tokio_postgres::NoTls).await?;
                tokio::spawn(connection);
                client.batch_execute(&drop).await
            });
            if let Err(err) = dropped {
                eprintln!("cannot drop the test database {}: {err}", pg.name);
            }
            pg.runtime.shutdown_background();
        }
    }
}

/// One test per (engine, case): the same body for both.
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $case() {
                    if let Some(mut db) = super::Db::open(super::Engine::Sqlite, stringify!($case)) {
                        super::$case(&mut db);
                    }
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $case() {
                    if let Some(mut db) = super::Db::open(super::Engine::Postgres, stringify!($case)) {
                        super::$case(&mut db);
                    }
                }
            )*
        }
    };
}

conformance!(
    records_store_versions_and_tombstones,
    records_list_prefix_after_limit_and_more,
    records_history_newest_first_before_a_version,
    records_export_in_namespace_key_order_with_the_head,
    records_session_keys_and_counts,
    journal_append_and_read_with_filters,
    journal_read_stops_at_limit_and_bytes_and_resumes,
    journal_scan_budget_gives_a_next_to_resume_from,
    journal_remove_before_moves_the_oldest_seq,
    journal_recent_for_task_oldest_first,
    leases_insert_extend_delete_by_key_prefix_and_owner,
    leases_page_in_key_and_token_order,
    leases_of_session_and_the_fencing_counter,
    outcomes_recorded_read_and_kept_through_a_clean_close,
    nodes_insert_and_read_a_task,
    nodes_runnable_ranks_priority_then_age_then_labels,
    nodes_start_change_release_dependents_finish,
    nodes_holds_cancel_retry_and_resume,
    nodes_task_report_and_list_tasks_page,
    remembered_answers_and_their_expiry,
    meta_head_revision,
    agents_sessions,
    agents_names_messages_and_cursors,
    tokens_stored_by_hash_and_id,
    batch_request_failing_before_writing_leaves_the_rest,
    batch_request_failing_after_writing_rolls_back_the_batch,
    batch_rollback_leaves_nothing,
    reads_see_only_what_was_committed,
    keys_are_ordered_and_matched_by_bytes,
    shared_waits_in_one_order,
    outcomes_foreseen_agree_with_those_read,
    nodes_back_to_pending_held_until_a_time,
    head_and_fencing_counter_are_only_raised,
    edges_of_reads_and_writes,
    leases_read_in_a_batch_follow_its_writes,
);

// ---------------------------------------------------------------------------------------
// Helpers: what the rules would write, as the boundary takes it.

fn set(
    s: &dyn Storage,
    ns: &str,
    key: &str,
    value: Option<&str>,
    revision: i64,
    session: Option<&str>,
) -> Result<u64> {
    let before = s.stored(ns, key)?;
    let version = before.map_or(1, |b| b.version + 1);
    s.store_version(&NewVersion {
        namespace: ns,
        key,
        version,
        value,
        revision,
        updated_by: Some("writer-a"),
        at_ms: T0 + revision,
        session_id: session,
        previous_revision: before.map(|b| b.revision),
    })?;
    Ok(version)
}

fn event<'a>(kind: EventType<'a>, data: &'a str) -> NewEvent<'a> {
    NewEvent {
        data,
        ..NewEvent::of(kind)
    }
}

fn filter(json: &str) -> EventFilter {
    serde_json::from_str(json).unwrap()
}

fn seqs(events: &[crate::protocol::journal::Event]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

fn keys(records: &[crate::protocol::state::Record]) -> Vec<String> {
    records.iter().map(|r| r.key.clone()).collect()
}

fn lease<'a>(key: &'a str, id: &'a str, owner: &'a str, token: u64) -> NewLease<'a> {
    let kind = key.split_once(':').map_or("tool", |(k, _)| k);
    let path = key.split_once(':').map(|(_, p)| p);
    NewLease {
        resource_key: key,
        kind,
        path: if matches!(kind, "dir" | "file") {
            path
        } else {
            None
        },
        lease_id: id,
        owner,
        provider: None,
        fencing_token: token,
        acquired_at: T0,
        expires_at: T0 + 60_000,
        metadata: None,
        holder_connection: None,
        token_id: None,
        session_id: None,
        mode: LockMode::Exclusive,
        slots: None,
    }
}

fn node(id: &str, deps: &[&str]) -> NewNode {
    NewNode {
        node_id: id.into(),
        name: Some(format!("node {id}")),
        payload: Some(format!(r#"{{"n":"{id}"}}"#)),
        dependencies: deps.iter().map(|d| d.to_string()).collect(),
        max_attempts: 3,
        priority: 0,
        label_key: String::new(),
        ready_at: None,
        result_schema: None,
    }
}

fn task<'a>(id: &'a str, nodes: &'a [NewNode], seq: i64) -> NewTask<'a> {
    NewTask {
        task_id: id,
        goal: "the goal",
        context: Some(r#"{"repo":"x"}"#),
        nodes,
        seq,
        at_ms: T0 + seq,
    }
}

fn grant<'a>(lease_id: &'a str, owner: &'a str) -> NodeLeaseGrant<'a> {
    NodeLeaseGrant {
        lease_id,
        owner,
        token_id: None,
        session_id: None,
        expires_at: T0 + 60_000,
        at_ms: T0 + 10,
    }
}

fn change(state: NodeState, result: Option<&str>) -> NodeChange<'_> {
    NodeChange {
        state,
        result,
        error: None,
        runnable_since: None,
        ready_at: None,
        at_ms: T0 + 20,
    }
}

fn pair(t: &str, n: &str) -> Option<(String, String)> {
    Some((t.to_string(), n.to_string()))
}

fn label(labels: &[&str]) -> String {
    labels.join("\u{1f}")
}

// ---------------------------------------------------------------------------------------
// Records

fn records_store_versions_and_tombstones(db: &mut Db) {
    db.batch(|s, _| {
        assert!(s.stored("ns", "a")?.is_none());
        assert_eq!(set(s, "ns", "a", Some(r#"{"x": 1.50}"#), 1, None)?, 1);
        // The write side reads its own batch.
        let stored = s.stored("ns", "a")?.unwrap();
        assert_eq!(
            (stored.version, stored.revision, stored.deleted),
            (1, 1, false)
        );
        assert_eq!(set(s, "ns", "a", Some("[1,2]"), 2, None)?, 2);
        Ok(())
    });
    let live = db.read(|s| s.live("ns", "a")).unwrap();
    assert_eq!(
        live.value.get(),
        "[1,2]",
        "values come back as the text stored"
    );
    assert_eq!((live.version, live.revision), (2, 2));
    assert_eq!(live.updated_by.as_deref(), Some("writer-a"));
    assert_eq!(live.updated_at, crate::clock::format_ms(T0 + 2));
    assert!(db.read(|s| s.live("ns", "nothing")).is_none());
    assert!(db.read(|s| s.live("other", "a")).is_none());
    // A tombstone: stored (deleted), not live; a later version revives the key.
    db.batch(|s, _| set(s, "ns", "a", None, 3, None));
    let stored = db.read(|s| s.stored("ns", "a")).unwrap();
    assert_eq!(
        (stored.version, stored.revision, stored.deleted),
        (3, 3, true)
    );
    assert!(db.read(|s| s.live("ns", "a")).is_none());
    assert!(db.read(|s| s.live_versions("ns")).is_empty());
    db.batch(|s, _| set(s, "ns", "a", Some(r#""back""#), 4, None));
    let live = db.read(|s| s.live("ns", "a")).unwrap();
    assert_eq!((live.value.get(), live.version), (r#""back""#, 4));
    db.batch(|s, _| set(s, "ns", "b", Some("true"), 5, None));
    assert_eq!(
        db.read(|s| s.live_versions("ns")),
        vec![("a".to_string(), 4, 4), ("b".to_string(), 1, 5)]
    );
}

fn records_list_prefix_after_limit_and_more(db: &mut Db) {
    db.batch(|s, _| {
        let mut revision = 0;
        for key in ["app/b", "app/a", "app/c", "apq", "ap", "app/d", "zz"] {
            revision += 1;
            set(s, "ns", key, Some("1"), revision, None)?;
        }
        set(s, "other", "app/x", Some("1"), revision + 1, None)?;
        // A tombstone is not listed.
        set(s, "ns", "app/c", None, revision + 2, None)?;
        Ok(())
    });
    let (all, more) = db.read(|s| s.list("ns", "", None, 100));
    assert_eq!(keys(&all), ["ap", "app/a", "app/b", "app/d", "apq", "zz"]);
    assert!(!more);
    assert!(all.iter().all(|r| r.namespace == "ns"));
    let (page, more) = db.read(|s| s.list("ns", "app/", None, 2));
    assert_eq!(
        (keys(&page), more),
        (vec!["app/a".into(), "app/b".into()], true)
    );
    let (page, more) = db.read(|s| s.list("ns", "app/", Some("app/b"), 2));
    assert_eq!((keys(&page), more), (vec!["app/d".to_string()], false));
    // Exactly `limit` left: no more.
    let (page, more) = db.read(|s| s.list("ns", "app/", Some("app/a"), 2));
    assert_eq!(
        (keys(&page), more),
        (vec!["app/b".to_string(), "app/d".to_string()], false)
    );
    // `after` needs not be a stored key; a prefix with LIKE's and GLOB's wildcards is text.
    let (page, _) = db.read(|s| s.list("ns", "", Some("app/bb"), 100));
    assert_eq!(keys(&page), ["app/d", "apq", "zz"]);
    db.batch(|s, _| {
        set(s, "w", "a%b", Some("1"), 20, None)?;
        set(s, "w", "a_c", Some("1"), 21, None)?;
        set(s, "w", "a*d", Some("1"), 22, None)?;
        set(s, "w", "axe", Some("1"), 23, None)?;
        Ok(())
    });
    assert_eq!(keys(&db.read(|s| s.list("w", "a%", None, 10)).0), ["a%b"]);
    assert_eq!(keys(&db.read(|s| s.list("w", "a_", None, 10)).0), ["a_c"]);
    assert_eq!(keys(&db.read(|s| s.list("w", "a*", None, 10)).0), ["a*d"]);
    assert!(db.read(|s| s.list("none", "", None, 10)).0.is_empty());
}

fn records_history_newest_first_before_a_version(db: &mut Db) {
    // 70 versions of one key (past a history mark every 64), a tombstone among them,
    // interleaved with another key's.
    db.batch(|s, _| {
        let mut revision = 0;
        for v in 1..=70u64 {
            revision += 1;
            let value = (v != 40).then(|| v.to_string());
            set(s, "ns", "k", value.as_deref(), revision, None)?;
            revision += 1;
            set(s, "ns", "other", Some("0"), revision, None)?;
        }
        Ok(())
    });
    let all = db.read(|s| s.history("ns", "k", None, 1000));
    assert_eq!(
        all.iter().map(|h| h.version).collect::<Vec<_>>(),
        (1..=70).rev().collect::<Vec<_>>()
    );
    assert_eq!(all[0].value.get(), "70");
    assert_eq!(all[0].revision, 139);
    assert_eq!(all[0].updated_at, crate::clock::format_ms(T0 + 139));
    assert_eq!(all[0].updated_by.as_deref(), Some("writer-a"));
    let tomb = all.iter().find(|h| h.version == 40).unwrap();
    assert!(tomb.deleted);
    assert_eq!(tomb.value.get(), "null");
    assert!(all.iter().filter(|h| h.version != 40).all(|h| !h.deleted));
    let page = db.read(|s| s.history("ns", "k", Some(66), 5));
    assert_eq!(
        page.iter().map(|h| h.version).collect::<Vec<_>>(),
        [65, 64, 63, 62, 61]
    );
    assert_eq!(page[0].value.get(), "65");
    let page = db.read(|s| s.history("ns", "k", Some(3), 10));
    assert_eq!(page.iter().map(|h| h.version).collect::<Vec<_>>(), [2, 1]);
    assert!(db.read(|s| s.history("ns", "k", Some(1), 10)).is_empty());
    // Before a version past the newest: from the newest.
    let page = db.read(|s| s.history("ns", "k", Some(1000), 2));
    assert_eq!(page.iter().map(|h| h.version).collect::<Vec<_>>(), [70, 69]);
    assert!(db.read(|s| s.history("ns", "nothing", None, 10)).is_empty());
}

fn records_export_in_namespace_key_order_with_the_head(db: &mut Db) {
    db.batch(|s, _| {
        set(s, "b", "x", Some("1"), 1, None)?;
        set(s, "a", "z", Some("2"), 2, None)?;
        set(s, "a", "y", Some("3"), 3, None)?;
        set(s, "c", "gone", Some("4"), 4, None)?;
        set(s, "c", "gone", None, 5, None)?;
        s.append_event(5, T0, &event(EventType::KvSet, "{}"))?;
        s.set_head_revision(5)?;
        Ok(())
    });
    let names = |records: &[crate::protocol::state::Record]| {
        records
            .iter()
            .map(|r| format!("{}/{}", r.namespace, r.key))
            .collect::<Vec<_>>()
    };
    let (all, head) = db.read(|s| s.export(None, None, 100));
    assert_eq!(names(&all), ["a/y", "a/z", "b/x"]);
    assert_eq!(head, 5);
    assert_eq!(all[0].state.value.get(), "3");
    let (page, _) = db.read(|s| s.export(None, None, 2));
    assert_eq!(names(&page), ["a/y", "a/z"]);
    let (page, _) = db.read(|s| s.export(None, Some(("a", "z")), 2));
    assert_eq!(names(&page), ["b/x"]);
    let (page, _) = db.read(|s| s.export(None, Some(("a", "y")), 1));
    assert_eq!(names(&page), ["a/z"]);
    let (page, _) = db.read(|s| s.export(Some("a"), Some(("a", "y")), 10));
    assert_eq!(names(&page), ["a/z"]);
    let (page, _) = db.read(|s| s.export(Some("b"), None, 10));
    assert_eq!(names(&page), ["b/x"]);
    assert!(db.read(|s| s.export(Some("c"), None, 10)).0.is_empty());
}

fn records_session_keys_and_counts(db: &mut Db) {
    db.batch(|s, _| {
        set(s, "n2", "k", Some("1"), 1, Some("sess-1"))?;
        set(s, "n1", "b", Some("1"), 2, Some("sess-1"))?;
        set(s, "n1", "a", Some("1"), 3, Some("sess-2"))?;
        // Rewritten without the session: unbound.
        set(s, "n1", "c", Some("1"), 4, Some("sess-1"))?;
        set(s, "n1", "c", Some("2"), 5, None)?;
        // Deleted: not live.
        set(s, "n1", "d", Some("1"), 6, Some("sess-1"))?;
        set(s, "n1", "d", None, 7, Some("sess-1"))?;
        Ok(())
    });
    assert_eq!(
        db.read(|s| s.keys_of_session("sess-1")),
        vec![
            ("n1".to_string(), "b".to_string()),
            ("n2".into(), "k".into())
        ]
    );
    assert!(db.read(|s| s.keys_of_session("nobody")).is_empty());
    assert_eq!(db.read(|s| s.counts()), (4, 1));
}

// ---------------------------------------------------------------------------------------
// Journal

fn journal_append_and_read_with_filters(db: &mut Db) {
    db.batch(|s, _| {
        let custom = EventType::from_client("custom.build").unwrap();
        let all = [
            NewEvent {
                namespace: Some("app"),
                key: Some("cfg/a"),
                actor: Some("ann"),
                ..event(EventType::KvSet, r#"{"value": 1}"#)
            },
            NewEvent {
                namespace: Some("app"),
                key: Some("other"),
                ..event(EventType::KvDelete, "{}")
            },
            NewEvent {
                resource_key: Some("file:src/main.rs"),
                ..event(EventType::LockAcquired, "{}")
            },
            NewEvent {
                task_id: Some("t1"),
                node_id: Some("n1"),
                ..event(EventType::NodeCompleted, "{}")
            },
            NewEvent {
                namespace: Some("apps"),
                key: Some("cfg/b"),
                ..event(EventType::KvSet, "{}")
            },
            NewEvent {
                resource_key: Some("file:src/lib.rs"),
                ..event(EventType::LockReleased, "{}")
            },
            event(custom, "[]"),
        ];
        for (i, e) in all.iter().enumerate() {
            s.append_event(i as i64 + 1, T0 + i as i64, e)?;
        }
        s.set_head_revision(7)?;
        // The write side reads its own batch.
        assert_eq!(s.read_events(0, 7, &filter("{}"), 100, 1 << 20)?.0.len(), 7);
        Ok(())
    });
    let read = |db: &Db, f: &str| db.read(|s| s.read_events(0, 7, &filter(f), 100, 1 << 20));
    let (events, next) = read(db, "{}");
    assert_eq!((seqs(&events), next), (vec![1, 2, 3, 4, 5, 6, 7], 7));
    let first = &events[0];
    assert_eq!(first.kind, "kv.set");
    assert_eq!(first.actor.as_deref(), Some("ann"));
    assert_eq!(
        (first.namespace.as_deref(), first.key.as_deref()),
        (Some("app"), Some("cfg/a"))
    );
    assert_eq!(first.data.get(), r#"{"value": 1}"#);
    assert_eq!(first.at, crate::clock::format_ms(T0));
    assert_eq!(events[6].at, crate::clock::format_ms(T0 + 6));
    assert_eq!(events[3].node_id.as_deref(), Some("n1"));
    assert_eq!(events[6].kind, "custom.build");
    assert_eq!(seqs(&read(db, r#"{"types": ["kv.set"]}"#).0), [1, 5]);
    assert_eq!(seqs(&read(db, r#"{"types": ["kv.*"]}"#).0), [1, 2, 5]);
    assert_eq!(
        seqs(&read(db, r#"{"types": ["lock.*", "custom.build"]}"#).0),
        [3, 6, 7]
    );
    assert_eq!(seqs(&read(db, r#"{"namespace": "app"}"#).0), [1, 2]);
    assert_eq!(
        seqs(&read(db, r#"{"namespace": "app", "key_prefix": "cfg/"}"#).0),
        [1]
    );
    assert_eq!(seqs(&read(db, r#"{"key_prefix": "cfg/"}"#).0), [1, 5]);
    assert_eq!(
        seqs(&read(db, r#"{"resource_prefix": "file:src/"}"#).0),
        [3, 6]
    );
    assert_eq!(
        seqs(&read(db, r#"{"resource_prefix": "file:src/m"}"#).0),
        [3]
    );
    assert_eq!(seqs(&read(db, r#"{"task_id": "t1"}"#).0), [4]);
    assert_eq!(
        seqs(&read(db, r#"{"namespace": "app", "types": ["kv.delete"]}"#).0),
        [2]
    );
    // Up to `head` only, and after `since_seq`.
    let (events, next) = db.read(|s| s.read_events(2, 5, &filter("{}"), 100, 1 << 20));
    assert_eq!((seqs(&events), next), (vec![3, 4, 5], 5));
    // Nothing matched: resume from the head.
    let (events, next) = read(db, r#"{"task_id": "none"}"#);
    assert_eq!((events.len(), next), (0, 7));
    assert_eq!(db.read(|s| s.length()), 7);
    assert_eq!(db.read(|s| s.oldest_seq()), 1);
}

fn journal_read_stops_at_limit_and_bytes_and_resumes(db: &mut Db) {
    let big = format!(r#""{}""#, "x".repeat(1000));
    db.batch(|s, _| {
        for seq in 1..=10 {
            let kind = if seq % 2 == 0 {
                EventType::KvSet
            } else {
                EventType::KvDelete
            };
            s.append_event(seq, T0, &event(kind, &big))?;
        }
        s.set_head_revision(10)?;
        Ok(())
    });
    let (events, next) = db.read(|s| s.read_events(0, 10, &filter("{}"), 3, 1 << 20));
    assert_eq!((seqs(&events), next), (vec![1, 2, 3], 3));
    let (events, next) =
        db.read(|s| s.read_events(0, 10, &filter(r#"{"types": ["kv.set"]}"#), 2, 1 << 20));
    assert_eq!((seqs(&events), next), (vec![2, 4], 4));
    let (events, next) =
        db.read(|s| s.read_events(4, 10, &filter(r#"{"types": ["kv.set"]}"#), 2, 1 << 20));
    assert_eq!((seqs(&events), next), (vec![6, 8], 8));
    // The byte budget: the first event always, then about `max_bytes`.
    let (events, next) = db.read(|s| s.read_events(0, 10, &filter("{}"), 100, 10));
    assert_eq!((seqs(&events), next), (vec![1], 1));
    let (events, next) = db.read(|s| s.read_events(0, 10, &filter("{}"), 100, 2500));
    assert!(
        (2..=4).contains(&events.len()),
        "about 2,500 bytes of 1,002-byte events: {:?}",
        seqs(&events)
    );
    assert_eq!(next, *seqs(&events).last().unwrap());
}

fn journal_scan_budget_gives_a_next_to_resume_from(db: &mut Db) {
    // More events in one namespace than a read examines (10,000), none of the type asked
    // for, then one that is.
    const N: i64 = 10_050;
    db.batch(|s, _| {
        for seq in 1..=N {
            s.append_event(
                seq,
                T0,
                &NewEvent {
                    namespace: Some("ns"),
                    key: Some("k"),
                    ..event(EventType::KvDelete, "{}")
                },
            )?;
        }
        s.append_event(
            N + 1,
            T0,
            &NewEvent {
                namespace: Some("ns"),
                key: Some("k"),
                ..event(EventType::KvSet, "{}")
            },
        )?;
        s.set_head_revision(N + 1)?;
        Ok(())
    });
    let wanted = filter(r#"{"namespace": "ns", "types": ["kv.set"]}"#);
    let head = N as u64 + 1;
    let (events, next) = db.read(|s| s.read_events(0, head, &wanted, 100, 1 << 20));
    assert!(events.is_empty());
    assert!(
        next > 0 && next < head,
        "a read that ran out of budget resumes past what it examined, before the head: {next}"
    );
    let (events, next) = db.read(|s| s.read_events(next, head, &wanted, 100, 1 << 20));
    assert_eq!((seqs(&events), next), (vec![head], head));
}

fn journal_remove_before_moves_the_oldest_seq(db: &mut Db) {
    db.batch(|s, _| {
        for seq in 1..=6 {
            s.append_event(seq, T0, &event(EventType::KvSet, "{}"))?;
        }
        s.set_head_revision(6)?;
        Ok(())
    });
    let removed = db.batch(|s, outcomes| {
        outcomes.store_held()?;
        s.remove_before(4)
    });
    assert_eq!(removed, 3);
    assert_eq!(db.read(|s| s.oldest_seq()), 4);
    assert_eq!(db.read(|s| s.length()), 3);
    let (events, _) = db.read(|s| s.read_events(0, 6, &filter("{}"), 100, 1 << 20));
    assert_eq!(seqs(&events), [4, 5, 6]);
    // Every event removed: the head stays.
    let removed = db.batch(|s, _| s.remove_before(7));
    assert_eq!(removed, 3);
    assert_eq!(db.read(|s| s.oldest_seq()), 7);
    assert_eq!(db.read(|s| s.length()), 0);
    assert_eq!(db.read(|s| s.head_revision()), 6);
}

fn journal_recent_for_task_oldest_first(db: &mut Db) {
    db.batch(|s, _| {
        for seq in 1..=8 {
            let task = if seq % 2 == 0 { "t" } else { "u" };
            s.append_event(
                seq,
                T0,
                &NewEvent {
                    task_id: Some(task),
                    ..event(EventType::NodeProgress, r#"{"p":1}"#)
                },
            )?;
        }
        s.set_head_revision(8)?;
        Ok(())
    });
    let recent = db.read(|s| s.recent_for_task("t", 3));
    assert_eq!(
        recent.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        [4, 6, 8]
    );
    let sent: serde_json::Value = serde_json::from_str(recent[0].1.get()).unwrap();
    assert_eq!(sent["type"], "node.progress");
    assert_eq!(sent["task_id"], "t");
    assert_eq!(sent["data"], serde_json::json!({"p": 1}));
    assert!(db.read(|s| s.recent_for_task("none", 3)).is_empty());
}

// ---------------------------------------------------------------------------------------
// Leases and outcomes

fn leases_insert_extend_delete_by_key_prefix_and_owner(db: &mut Db) {
    db.batch(|s, _| {
        s.insert_lease(&NewLease {
            provider: Some("claude"),
            metadata: Some(r#"{"why":"edit"}"#),
            holder_connection: Some(7),
            token_id: Some("tok-1"),
            ..lease("file:src/a.rs", "l1", "ann", 1)
        })?;
        s.insert_lease(&lease("dir:src", "l2", "bob", 2))?;
        s.insert_lease(&NewLease {
            mode: LockMode::Shared,
            slots: Some(3),
            ..lease("tool:db", "l3", "ann", 3)
        })?;
        s.insert_lease(&NewLease {
            mode: LockMode::Shared,
            slots: Some(3),
            ..lease("tool:db", "l4", "bob", 4)
        })?;
        Ok(())
    });
    let all = db.read(|s| s.leases("", None));
    assert_eq!(
        all.iter()
            .map(|l| (l.resource_key.as_str(), l.lease_id.as_str()))
            .collect::<Vec<_>>(),
        [
            ("dir:src", "l2"),
            ("file:src/a.rs", "l1"),
            ("tool:db", "l3"),
            ("tool:db", "l4")
        ]
    );
    let a = &all[1];
    assert_eq!(
        (a.owner.as_str(), a.provider.as_deref(), a.fencing_token),
        ("ann", Some("claude"), 1)
    );
    assert_eq!((a.acquired_at, a.expires_at), (T0, T0 + 60_000));
    assert_eq!(a.metadata.as_deref(), Some(r#"{"why":"edit"}"#));
    assert_eq!(a.holder_connection, Some(7));
    assert_eq!(a.token_id.as_deref(), Some("tok-1"));
    assert_eq!((a.mode, a.slots), (LockMode::Exclusive, None));
    assert_eq!((all[2].mode, all[2].slots), (LockMode::Shared, Some(3)));
    let of = |db: &Db, prefix: &str, owner: Option<&str>| {
        db.read(|s| s.leases(prefix, owner))
            .into_iter()
            .map(|l| l.lease_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(of(db, "file:", None), ["l1"]);
    assert_eq!(of(db, "tool:", Some("bob")), ["l4"]);
    assert_eq!(of(db, "", Some("ann")), ["l1", "l3"]);
    assert!(of(db, "file:", Some("bob")).is_empty());
    // By key and lease id: the other lease on the same key stays.
    db.batch(|s, _| {
        s.extend_lease("tool:db", "l3", T0 + 90_000)?;
        s.delete_lease("tool:db", "l4")?;
        // Another key's lease id does not match.
        s.delete_lease("dir:src", "l1")?;
        s.extend_lease("dir:src", "l1", T0 + 1)?;
        Ok(())
    });
    let db_leases = db.read(|s| s.leases("tool:db", None));
    assert_eq!(db_leases.len(), 1);
    assert_eq!(
        (db_leases[0].lease_id.as_str(), db_leases[0].expires_at),
        ("l3", T0 + 90_000)
    );
    assert_eq!(of(db, "", None), ["l2", "l1", "l3"]);
    assert_eq!(
        db.read(|s| s.leases("file:", None))[0].expires_at,
        T0 + 60_000
    );
}

fn leases_page_in_key_and_token_order(db: &mut Db) {
    db.batch(|s, _| {
        s.insert_lease(&NewLease {
            mode: LockMode::Shared,
            ..lease("tool:b", "b9", "ann", 9)
        })?;
        s.insert_lease(&NewLease {
            mode: LockMode::Shared,
            ..lease("tool:b", "b5", "bob", 5)
        })?;
        s.insert_lease(&lease("tool:a", "a1", "ann", 1))?;
        s.insert_lease(&lease("tool:c", "c2", "ann", 2))?;
        s.insert_lease(&lease("file:x", "x3", "ann", 3))?;
        Ok(())
    });
    let page = |db: &Db, owner: Option<&str>, after: Option<(&str, u64)>, limit: u64| {
        db.read(|s| s.lease_page("tool:", owner, after, limit))
            .into_iter()
            .map(|l| l.lease_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(page(db, None, None, 10), ["a1", "b5", "b9", "c2"]);
    assert_eq!(page(db, None, None, 2), ["a1", "b5"]);
    assert_eq!(page(db, None, Some(("tool:b", 5)), 2), ["b9", "c2"]);
    assert_eq!(page(db, None, Some(("tool:b", 9)), 2), ["c2"]);
    assert_eq!(page(db, Some("ann"), Some(("tool:a", 1)), 10), ["b9", "c2"]);
    assert!(page(db, None, Some(("tool:c", 2)), 10).is_empty());
}

fn leases_of_session_and_the_fencing_counter(db: &mut Db) {
    assert_eq!(db.read(|s| s.last_fencing_token()), 0);
    db.batch(|s, _| {
        assert_eq!(s.last_fencing_token()?, 0);
        s.insert_lease(&NewLease {
            session_id: Some("sess"),
            ..lease("tool:a", "l1", "ann", 1)
        })?;
        s.insert_lease(&lease("tool:b", "l2", "ann", 2))?;
        s.store_fencing_token(2)?;
        Ok(())
    });
    assert_eq!(db.read(|s| s.last_fencing_token()), 2);
    let of_session = db.read(|s| s.leases_of_session("sess"));
    assert_eq!(
        of_session
            .iter()
            .map(|l| l.lease_id.as_str())
            .collect::<Vec<_>>(),
        ["l1"]
    );
    assert!(db.read(|s| s.leases_of_session("other")).is_empty());
    db.batch(|s, _| {
        assert_eq!(s.last_fencing_token()?, 2);
        s.store_fencing_token(40)
    });
    assert_eq!(db.read(|s| s.last_fencing_token()), 40);
    // A batch that rolls back stores nothing: the counter is as committed.
    let writes = db.writes();
    writes.begin(&Foreseen::default()).unwrap();
    writes.storage().store_fencing_token(99).unwrap();
    writes.rollback();
    assert_eq!(db.read(|s| s.last_fencing_token()), 40);
    assert_eq!(db.batch(|s, _| s.last_fencing_token()), 40);
    db.reopen();
    assert_eq!(db.batch(|s, _| s.last_fencing_token()), 40);
}

/// Records how a lease ended as the rules do: the outcome and, in the same batch, its
/// journal event (which the boundary lets an engine rely on to keep held outcomes durable).
fn end_lease(s: &dyn Storage, o: &dyn Outcomes, seq: i64, end: &LeaseEnd<'_>) -> Result<()> {
    o.record_end(end)?;
    let data = serde_json::json!({
        "outcome": end.outcome,
        "moved_to": end.moved_to,
        "note": end.note,
    })
    .to_string();
    s.append_event(
        seq,
        end.at_ms,
        &NewEvent {
            actor: Some(end.owner),
            resource_key: Some(end.resource_key),
            ..event(EventType::LockReleased, &data)
        },
    )?;
    s.set_head_revision(seq)
}

fn ended<'a>(key: &'a str, outcome: &'a str, owner: &'a str, at: i64) -> LeaseEnd<'a> {
    LeaseEnd {
        resource_key: key,
        outcome,
        owner,
        at_ms: at,
        moved_to: None,
        note: None,
    }
}

fn outcomes_recorded_read_and_kept_through_a_clean_close(db: &mut Db) {
    db.batch(|s, o| {
        assert!(o.previous("tool:a")?.is_none());
        end_lease(
            s,
            o,
            1,
            &LeaseEnd {
                moved_to: Some("tool:b"),
                note: Some("done"),
                ..ended("tool:a", "completed", "ann", T0 + 5)
            },
        )?;
        // Read back in the same batch.
        let p = o.previous("tool:a")?.unwrap();
        assert_eq!((p.outcome.as_str(), p.owner.as_str()), ("completed", "ann"));
        Ok(())
    });
    db.batch(|s, o| {
        let p = o.previous("tool:a")?.unwrap();
        assert_eq!((p.outcome.as_str(), p.owner.as_str()), ("completed", "ann"));
        assert_eq!(p.moved_to.as_deref(), Some("tool:b"));
        assert_eq!(p.note.as_deref(), Some("done"));
        assert_eq!(p.at, crate::clock::format_ms(T0 + 5));
        // The last end wins.
        end_lease(s, o, 2, &ended("tool:a", "failed", "bob", T0 + 6))?;
        end_lease(s, o, 3, &ended("tool:d", "completed", "dan", T0 + 6))?;
        assert!(o.previous("tool:b")?.is_none());
        Ok(())
    });
    // An end recorded in a batch that rolls back is gone; the committed ones stay.
    let writes = db.writes();
    writes.begin(&Foreseen::default()).unwrap();
    end_lease(
        writes.storage(),
        writes.outcomes(),
        4,
        &ended("tool:c", "completed", "cy", T0 + 7),
    )
    .unwrap();
    writes.rollback();
    db.batch(|_, o| {
        assert!(o.previous("tool:c")?.is_none());
        assert_eq!(o.previous("tool:a")?.unwrap().owner, "bob");
        Ok(())
    });
    // Stored before compaction removes the events that hold them.
    db.batch(|s, o| {
        o.store_held()?;
        s.remove_before(4).map(|_| ())
    });
    db.batch(|_, o| {
        assert_eq!(o.previous("tool:d")?.unwrap().owner, "dan");
        Ok(())
    });
    // A clean close keeps every outcome, held back or not.
    db.batch(|s, o| end_lease(s, o, 5, &ended("tool:e", "completed", "eve", T0 + 8)));
    db.reopen();
    db.batch(|_, o| {
        let p = o.previous("tool:a")?.unwrap();
        assert_eq!((p.outcome.as_str(), p.owner.as_str()), ("failed", "bob"));
        assert_eq!((p.moved_to, p.note), (None, None));
        assert_eq!(o.previous("tool:e")?.unwrap().owner, "eve");
        assert!(o.previous("tool:c")?.is_none());
        Ok(())
    });
    // So does a writer that went without closing (kill -9): the journal holds them.
    db.batch(|s, o| end_lease(s, o, 6, &ended("tool:f", "completed", "fay", T0 + 9)));
    db.writes = None;
    db.store = None;
    db.start();
    db.batch(|_, o| {
        assert_eq!(o.previous("tool:f")?.unwrap().owner, "fay");
        assert_eq!(o.previous("tool:e")?.unwrap().owner, "eve");
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------
// Nodes

fn nodes_insert_and_read_a_task(db: &mut Db) {
    let nodes = [
        node("a", &[]),
        NewNode {
            result_schema: Some(r#"{"type":"object"}"#.into()),
            max_attempts: 5,
            ..node("b", &["a"])
        },
    ];
    db.batch(|s, _| s.insert_task(&task("t1", &nodes, 1)));
    assert_eq!(db.read(|s| s.task_status("t1")), Some(TaskStatus::Running));
    assert_eq!(db.read(|s| s.task_status("none")), None);
    let b = db.read(|s| s.node("t1", "b")).unwrap();
    assert_eq!(b.state, NodeState::Pending);
    assert_eq!((b.attempts, b.max_attempts), (0, 5));
    assert_eq!(b.result_schema.as_deref(), Some(r#"{"type":"object"}"#));
    assert!(b.lease_id.is_none() && b.lease_owner.is_none() && b.lease_token_id.is_none());
    assert!(db.read(|s| s.node("t1", "zz")).is_none());
    assert!(db.read(|s| s.node("none", "a")).is_none());
    assert!(!db.read(|s| s.has_running("t1")));
    db.batch(|s, _| s.set_task_status("t1", TaskStatus::Cancelled, T0 + 9));
    assert_eq!(
        db.read(|s| s.task_status("t1")),
        Some(TaskStatus::Cancelled)
    );
    let (tasks, nodes) = db.read(|s| s.task_counts());
    assert_eq!(tasks, [("cancelled".to_string(), 1)].into());
    assert_eq!(nodes, [("PENDING".to_string(), 2)].into());
}

fn nodes_runnable_ranks_priority_then_age_then_labels(db: &mut Db) {
    let gpu = label(&["gpu"]);
    let gpu_big = label(&["big", "gpu"]);
    let worker = vec![String::new(), label(&["big"]), gpu.clone(), gpu_big.clone()];
    // Task "old" registered first (seq 1), "new" later (seq 2).
    let old = [
        node("plain", &[]),
        NewNode {
            label_key: gpu_big.clone(),
            ..node("special", &[])
        },
        NewNode {
            label_key: label(&["arm"]),
            ..node("arm", &[])
        },
        node("blocked", &["plain"]),
    ];
    let new = [
        NewNode {
            priority: 5,
            ..node("urgent", &[])
        },
        NewNode {
            label_key: gpu.clone(),
            ..node("g", &[])
        },
    ];
    db.batch(|s, _| {
        s.insert_task(&task("old", &old, 1))?;
        s.insert_task(&task("new", &new, 2))
    });
    let runnable =
        |db: &Db, task: Option<&str>, keys: &[String]| db.read(|s| s.runnable(task, keys));
    // Priority first.
    assert_eq!(runnable(db, None, &worker), pair("new", "urgent"));
    // Within a task.
    assert_eq!(
        runnable(db, Some("old"), &[String::new()]),
        pair("old", "plain")
    );
    // Only the label keys given.
    assert_eq!(runnable(db, None, &[label(&["arm"])]), pair("old", "arm"));
    assert_eq!(runnable(db, None, &[label(&["none"])]), None);
    assert_eq!(runnable(db, Some("none"), &worker), None);
    // Take "urgent" away: then the oldest runnable, and among equals the one needing more
    // labels ("special" before "plain", both runnable since seq 1).
    let grant_a = grant("l-urgent", "w");
    db.batch(|s, _| s.start_node("new", "urgent", &grant_a).map(|_| ()));
    assert_eq!(runnable(db, None, &worker), pair("old", "special"));
    assert_eq!(
        runnable(db, None, &[String::new(), gpu.clone()]),
        pair("old", "plain")
    );
    // A node runnable since an older seq goes before a newer one, whatever its labels.
    assert_eq!(
        runnable(db, None, &[gpu.clone(), gpu_big.clone()]),
        pair("old", "special")
    );
    assert_eq!(
        runnable(db, None, std::slice::from_ref(&gpu)),
        pair("new", "g")
    );
    // Not PENDING, or with unfinished dependencies: never runnable.
    assert_eq!(runnable(db, Some("new"), &[String::new()]), None);
    assert!(db.read(|s| s.has_running("new")));
}

fn nodes_start_change_release_dependents_finish(db: &mut Db) {
    let nodes = [node("a", &[]), node("b", &["a"]), node("c", &["a", "b"])];
    db.batch(|s, _| s.insert_task(&task("t", &nodes, 1)));
    let g = NodeLeaseGrant {
        token_id: Some("tok"),
        session_id: Some("sess"),
        ..grant("lease-a", "worker-1")
    };
    let started = db.batch(|s, _| s.start_node("t", "a", &g));
    assert_eq!(started.name.as_deref(), Some("node a"));
    assert_eq!(started.payload.as_deref(), Some(r#"{"n":"a"}"#));
    assert!(started.dependencies.is_empty());
    assert_eq!((started.attempts, started.max_attempts), (1, 3));
    assert_eq!(started.goal, "the goal");
    assert_eq!(started.task_context.as_deref(), Some(r#"{"repo":"x"}"#));
    let a = db.read(|s| s.node("t", "a")).unwrap();
    assert_eq!(a.state, NodeState::Running);
    assert_eq!(a.lease_id.as_deref(), Some("lease-a"));
    assert_eq!(a.lease_owner.as_deref(), Some("worker-1"));
    assert_eq!(a.lease_token_id.as_deref(), Some("tok"));
    assert!(db.read(|s| s.has_running("t")));
    assert_eq!(db.read(|s| s.running_nodes("t")), ["a"]);
    assert_eq!(
        db.read(|s| s.nodes_of_session("sess")),
        [pair("t", "a").unwrap()]
    );
    assert_eq!(
        db.read(|s| s.nodes_leased_by("worker-1")),
        [pair("t", "a").unwrap()]
    );
    assert!(db.read(|s| s.nodes_leased_by("nobody")).is_empty());
    let leases = db.read(|s| s.node_leases());
    assert_eq!(leases.len(), 1);
    assert_eq!(
        (
            leases[0].task_id.as_str(),
            leases[0].node_id.as_str(),
            leases[0].lease_id.as_str(),
            leases[0].expires_at
        ),
        ("t", "a", "lease-a", T0 + 60_000)
    );
    db.batch(|s, _| s.extend_node_lease("t", "a", T0 + 99_000));
    assert_eq!(db.read(|s| s.node_leases())[0].expires_at, T0 + 99_000);
    assert_eq!(db.read(|s| s.node_result("t", "a")), None);
    // Completing `a`: its lease ends, `b` is runnable, `c` still waits for `b`.
    let last = db.batch(|s, _| {
        s.change_node(
            "t",
            "a",
            &change(NodeState::Completed, Some(r#"{"ok": true}"#)),
        )?;
        s.release_dependents("t", "a", 5)?;
        s.finish_one("t")
    });
    assert!(!last);
    let a = db.read(|s| s.node("t", "a")).unwrap();
    assert_eq!(a.state, NodeState::Completed);
    assert!(a.lease_id.is_none());
    assert_eq!(a.attempts, 1);
    assert_eq!(
        db.read(|s| s.node_result("t", "a")).as_deref(),
        Some(r#"{"ok": true}"#)
    );
    assert!(db.read(|s| s.node_leases()).is_empty());
    assert!(!db.read(|s| s.has_running("t")));
    assert_eq!(
        db.read(|s| s.runnable(Some("t"), &[String::new()])),
        pair("t", "b")
    );
    let g = grant("lease-b", "worker-2");
    db.batch(|s, _| {
        s.start_node("t", "b", &g)?;
        s.change_node("t", "b", &change(NodeState::Completed, Some("1")))?;
        s.release_dependents("t", "b", 6)?;
        assert!(!s.finish_one("t")?);
        Ok(())
    });
    assert_eq!(
        db.read(|s| s.runnable(Some("t"), &[String::new()])),
        pair("t", "c")
    );
    let g = grant("lease-c", "worker-2");
    let last = db.batch(|s, _| {
        let started = s.start_node("t", "c", &g)?;
        assert_eq!(started.dependencies, ["a", "b"]);
        s.change_node("t", "c", &change(NodeState::Completed, Some("2")))?;
        s.release_dependents("t", "c", 7)?;
        s.finish_one("t")
    });
    assert!(last, "the last unfinished node");
    assert_eq!(db.read(|s| s.runnable(None, &[String::new()])), None);
}

fn nodes_holds_cancel_retry_and_resume(db: &mut Db) {
    let nodes = [
        NewNode {
            ready_at: Some(T0 + 1_000),
            ..node("held", &[])
        },
        node("a", &[]),
        node("b", &[]),
        node("c", &["a"]),
    ];
    db.batch(|s, _| s.insert_task(&task("t", &nodes, 1)));
    assert_eq!(
        db.read(|s| s.held_nodes()),
        [("t".to_string(), "held".to_string(), T0 + 1_000)]
    );
    assert!(db.read(|s| s.has_running("t")), "a held node counts");
    assert_eq!(
        db.read(|s| s.runnable(Some("t"), &[String::new()])),
        pair("t", "a")
    );
    assert!(db.batch(|s, _| s.release_hold("t", "held", 3)));
    assert!(
        !db.batch(|s, _| s.release_hold("t", "held", 4)),
        "no longer held"
    );
    assert!(!db.batch(|s, _| s.release_hold("t", "a", 4)), "never held");
    assert!(db.read(|s| s.held_nodes()).is_empty());
    // Released at seq 3: the oldest runnable is now `a` (seq 1), then `b`, then `held`.
    let g = grant("la", "w");
    db.batch(|s, _| {
        s.start_node("t", "a", &g)?;
        s.change_node(
            "t",
            "a",
            &NodeChange {
                error: Some(r#"{"why":"boom"}"#),
                ..change(NodeState::Failed, None)
            },
        )?;
        // `b` later than `held`.
        s.change_node(
            "t",
            "b",
            &NodeChange {
                runnable_since: Some(9),
                ..change(NodeState::Pending, None)
            },
        )
    });
    assert_eq!(
        db.read(|s| s.runnable(Some("t"), &[String::new()])),
        pair("t", "held")
    );
    assert_eq!(db.read(|s| s.failed_nodes("t")), ["a"]);
    let g = grant("lh", "w");
    db.batch(|s, _| s.start_node("t", "held", &g).map(|_| ()));
    // Cancel the PENDING ones only (held is RUNNING; b and c PENDING).
    assert_eq!(db.batch(|s, _| s.cancel_pending_nodes("t", T0 + 30)), 2);
    assert_eq!(
        db.read(|s| s.node("t", "held")).unwrap().state,
        NodeState::Running
    );
    assert_eq!(
        db.read(|s| s.node("t", "b")).unwrap().state,
        NodeState::Cancelled
    );
    // The failed node tried again (its task stays failed: CANCELLED), then resumed.
    db.batch(|s, _| s.retry_node("t", "a", NodeState::Cancelled, 10, T0 + 31));
    let a = db.read(|s| s.node("t", "a")).unwrap();
    assert_eq!((a.state, a.attempts), (NodeState::Cancelled, 0));
    assert!(a.lease_id.is_none());
    assert!(db.read(|s| s.failed_nodes("t")).is_empty());
    assert_eq!(
        db.batch(|s, _| s.resume_cancelled_nodes("t", 11, T0 + 32)),
        3
    );
    assert_eq!(
        db.read(|s| s.node("t", "b")).unwrap().state,
        NodeState::Pending
    );
    // `c` still waits for `a`; `a` and `b` are runnable since seq 11 (ties by node id).
    assert_eq!(
        db.read(|s| s.runnable(Some("t"), &[String::new()])),
        pair("t", "a")
    );
    // Every open node (PENDING or RUNNING) cancelled.
    assert_eq!(db.batch(|s, _| s.cancel_open_nodes("t", T0 + 40)), 4);
    assert!(!db.read(|s| s.has_running("t")));
    assert!(db.read(|s| s.node_leases()).is_empty());
    assert_eq!(db.read(|s| s.runnable(None, &[String::new()])), None);
    // A FAILED node retried as PENDING is runnable since `seq`.
    db.batch(|s, _| {
        s.insert_task(&task("u", &[node("x", &[])], 50))?;
        s.start_node("u", "x", &grant("lx", "w"))?;
        s.change_node("u", "x", &change(NodeState::Failed, None))?;
        s.retry_node("u", "x", NodeState::Pending, 51, T0 + 51)
    });
    assert_eq!(
        db.read(|s| s.runnable(None, &[String::new()])),
        pair("u", "x")
    );
}

fn nodes_task_report_and_list_tasks_page(db: &mut Db) {
    let nodes: Vec<NewNode> = ["n3", "n1", "n2", "n0"]
        .iter()
        .map(|id| node(id, &[]))
        .collect();
    db.batch(|s, _| {
        s.insert_task(&task("t-a", &nodes, 1))?;
        s.insert_task(&task("t-b", &[node("x", &[])], 2))?;
        s.insert_task(&task("t-c", &[node("x", &[])], 3))?;
        s.set_task_status("t-b", TaskStatus::Completed, T0 + 4)?;
        s.start_node("t-a", "n1", &grant("l", "w"))?;
        Ok(())
    });
    let report = db.read(|s| s.task_report("t-a", None, 2)).unwrap();
    assert_eq!(report.task.task_id, "t-a");
    assert_eq!(report.task.goal, "the goal");
    assert_eq!(report.task.status, TaskStatus::Running);
    // Registration order, not id order.
    assert_eq!(
        report
            .nodes
            .iter()
            .map(|n| n.node_id.as_str())
            .collect::<Vec<_>>(),
        ["n3", "n1"]
    );
    assert_eq!(report.nodes[1].state, NodeState::Running);
    assert_eq!(report.nodes[1].lease_owner.as_deref(), Some("w"));
    // Counts cover every node, every state listed.
    assert_eq!(
        report.counts,
        [
            ("CANCELLED".to_string(), 0),
            ("COMPLETED".into(), 0),
            ("FAILED".into(), 0),
            ("PENDING".into(), 3),
            ("RUNNING".into(), 1),
        ]
        .into()
    );
    let report = db.read(|s| s.task_report("t-a", Some("n1"), 10)).unwrap();
    assert_eq!(
        report
            .nodes
            .iter()
            .map(|n| n.node_id.as_str())
            .collect::<Vec<_>>(),
        ["n2", "n0"]
    );
    assert!(db.read(|s| s.task_report("none", None, 10)).is_none());
    // Newest first; `after` a task: those created before it.
    let ids = |r: crate::protocol::tasks::ListTasksResult| {
        r.tasks.into_iter().map(|t| t.task_id).collect::<Vec<_>>()
    };
    assert_eq!(
        ids(db.read(|s| s.list_tasks(None, None, 10))),
        ["t-c", "t-b", "t-a"]
    );
    assert_eq!(
        ids(db.read(|s| s.list_tasks(None, None, 2))),
        ["t-c", "t-b"]
    );
    assert_eq!(
        ids(db.read(|s| s.list_tasks(None, Some("t-b"), 2))),
        ["t-a"]
    );
    assert_eq!(
        ids(db.read(|s| s.list_tasks(Some(TaskStatus::Running), None, 10))),
        ["t-c", "t-a"]
    );
    assert_eq!(
        ids(db.read(|s| s.list_tasks(Some(TaskStatus::Running), Some("t-c"), 10))),
        ["t-a"]
    );
    assert!(ids(db.read(|s| s.list_tasks(Some(TaskStatus::Failed), None, 10))).is_empty());
}

// ---------------------------------------------------------------------------------------
// Remembered answers, meta

fn remembered_answers_and_their_expiry(db: &mut Db) {
    db.batch(|s, _| {
        assert!(s.remembered("k1")?.is_none());
        s.remember("k1", "Set", &[1, 2, 255], r#"{"version":1}"#, T0)?;
        s.remember("k2", "Delete", &[0], "{}", T0 + 100)?;
        Ok(())
    });
    let a = db.read(|s| s.remembered("k1")).unwrap();
    assert_eq!(
        (
            a.method.as_str(),
            a.request_hash.as_slice(),
            a.response.as_str(),
            a.created_at_ms
        ),
        ("Set", &[1u8, 2, 255][..], r#"{"version":1}"#, T0)
    );
    db.batch(|s, _| s.forget_before(T0 + 100));
    assert!(db.read(|s| s.remembered("k1")).is_none());
    assert!(
        db.read(|s| s.remembered("k2")).is_some(),
        "at `before_ms`: kept"
    );
}

fn meta_head_revision(db: &mut Db) {
    assert_eq!(db.read(|s| s.head_revision()), 0);
    assert_eq!(db.batch(|s, _| s.head_revision()), 0);
    // A revision with its event, as the writer stores them.
    db.batch(|s, _| {
        s.append_event(1, T0, &event(EventType::KvSet, "{}"))?;
        s.set_head_revision(1)
    });
    assert_eq!(db.read(|s| s.head_revision()), 1);
    // A revision without an event.
    db.batch(|s, _| s.set_head_revision(3));
    assert_eq!(db.read(|s| s.head_revision()), 3);
    assert_eq!(db.batch(|s, _| s.head_revision()), 3);
    db.reopen();
    assert_eq!(db.batch(|s, _| s.head_revision()), 3);
    let (size, _) = db.read(|s| s.file_sizes());
    assert!(size > 0);
    // This daemon, alone: nobody silent, one live.
    let silent = db.batch(|s, _| s.instance_heartbeat("me", 1 << 40, 60_000));
    assert!(silent.is_empty());
    assert_eq!(db.read(|s| s.live_instances(60_000)), 1);
}

// ---------------------------------------------------------------------------------------
// Agents and tokens

fn session(name: &str, id: &str) -> SessionRow {
    SessionRow {
        name: name.into(),
        session_id: id.into(),
        role: Some("reviewer".into()),
        metadata: Some(r#"{"m":1}"#.into()),
        started_at: T0,
        last_seen: T0,
        expires_at: T0 + 30_000,
        token_id: Some("tok".into()),
        holder_connection: Some(3),
    }
}

fn agents_sessions(db: &mut Db) {
    db.batch(|s, _| {
        s.insert_session(&session("bob", "s-bob"))?;
        s.insert_session(&SessionRow {
            role: None,
            metadata: None,
            token_id: None,
            holder_connection: None,
            ..session("ann", "s-ann")
        })
    });
    let bob = db.read(|s| s.session("bob")).unwrap();
    assert_eq!(
        (
            bob.session_id.as_str(),
            bob.role.as_deref(),
            bob.metadata.as_deref()
        ),
        ("s-bob", Some("reviewer"), Some(r#"{"m":1}"#))
    );
    assert_eq!(
        (bob.token_id.as_deref(), bob.holder_connection),
        (Some("tok"), Some(3))
    );
    assert_eq!(
        (bob.started_at, bob.last_seen, bob.expires_at),
        (T0, T0, T0 + 30_000)
    );
    assert_eq!(db.read(|s| s.session_by_id("s-ann")).unwrap().name, "ann");
    assert!(db.read(|s| s.session_by_id("none")).is_none());
    assert_eq!(
        db.read(|s| s.sessions())
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["ann", "bob"]
    );
    db.batch(|s, _| s.touch_session("bob", T0 + 5, T0 + 35_000));
    let bob = db.read(|s| s.session("bob")).unwrap();
    assert_eq!((bob.last_seen, bob.expires_at), (T0 + 5, T0 + 35_000));
    db.batch(|s, _| s.delete_session("bob"));
    assert!(db.read(|s| s.session("bob")).is_none());
    assert_eq!(db.read(|s| s.sessions()).len(), 1);
}

fn agents_names_messages_and_cursors(db: &mut Db) {
    let tok = NameOwner {
        token_id: Some("tok-1".into()),
    };
    let admin = NameOwner { token_id: None };
    db.batch(|s, _| {
        assert!(s.name_owner("ann")?.is_none());
        s.remember_agent("ann", &tok, T0)?;
        // The first owner stays.
        s.remember_agent("ann", &admin, T0 + 1)?;
        s.remember_agent("bob", &admin, T0 + 2)?;
        Ok(())
    });
    assert_eq!(db.read(|s| s.name_owner("ann")), Some(tok));
    assert_eq!(db.read(|s| s.name_owner("bob")), Some(admin));
    let mut names = db.read(|s| s.agent_names());
    names.sort();
    assert_eq!(names, ["ann", "bob"]);
    let message = |seq: i64, id: &str| super::boundary::MessageRow {
        seq,
        message_id: id.into(),
        sender: "cy".into(),
        recipients: r#"["ann","bob"]"#.into(),
        subject: Some("hi".into()),
        body: r#"{"text":"hello"}"#.into(),
        thread_id: Some("th".into()),
        reply_to: None,
        sent_at: T0 + seq,
    };
    db.batch(|s, _| {
        s.insert_message(&message(3, "m3"), &["ann".into(), "bob".into()])?;
        s.insert_message(&message(5, "m5"), &["ann".into()])?;
        s.insert_message(&message(8, "m8"), &["ann".into()])
    });
    let inbox = db.read(|s| s.inbox("ann", 0, 10));
    assert_eq!(inbox.iter().map(|m| m.seq).collect::<Vec<_>>(), [3, 5, 8]);
    let m = &inbox[0];
    assert_eq!(
        (
            m.message_id.as_str(),
            m.sender.as_str(),
            m.recipients.as_str()
        ),
        ("m3", "cy", r#"["ann","bob"]"#)
    );
    assert_eq!(
        (
            m.subject.as_deref(),
            m.body.as_str(),
            m.thread_id.as_deref(),
            m.reply_to.as_deref()
        ),
        (Some("hi"), r#"{"text":"hello"}"#, Some("th"), None)
    );
    assert_eq!(m.sent_at, T0 + 3);
    assert_eq!(
        db.read(|s| s.inbox("ann", 3, 1))
            .iter()
            .map(|m| m.seq)
            .collect::<Vec<_>>(),
        [5]
    );
    assert_eq!(db.read(|s| s.inbox("bob", 0, 10)).len(), 1);
    assert!(db.read(|s| s.inbox("cy", 0, 10)).is_empty());
    assert_eq!(db.read(|s| s.inbox_count("ann", 0, None)), 3);
    assert_eq!(db.read(|s| s.inbox_count("ann", 3, None)), 2);
    assert_eq!(db.read(|s| s.inbox_count("ann", 0, Some(5))), 2);
    assert_eq!(db.read(|s| s.newest_message("ann")), 8);
    assert_eq!(db.read(|s| s.newest_message("cy")), 0);
    assert_eq!(db.read(|s| s.cursor("ann")), 0);
    db.batch(|s, _| s.set_cursor("ann", 5));
    assert_eq!(db.read(|s| s.cursor("ann")), 5);
    db.batch(|s, _| s.set_cursor("ann", 8));
    assert_eq!(db.read(|s| s.cursor("ann")), 8);
    assert_eq!(db.read(|s| s.cursor("bob")), 0);
}

fn tokens_stored_by_hash_and_id(db: &mut Db) {
    let scopes = vec!["read:*".to_string(), "locks:file:src/*".to_string()];
    db.batch(|s, _| {
        s.insert_token(&NewToken {
            token_id: "t1",
            name: "ci",
            secret_hash: "aa11",
            scopes: &scopes,
            created_at_ms: T0,
            expires_at_ms: Some(T0 + 1_000),
        })?;
        s.insert_token(&NewToken {
            token_id: "t2",
            name: "bot",
            secret_hash: "bb22",
            scopes: &[],
            created_at_ms: T0 + 1,
            expires_at_ms: None,
        })
    });
    let t = db.read(|s| s.token_by_hash("aa11")).unwrap();
    assert_eq!((t.token_id.as_str(), t.name.as_str()), ("t1", "ci"));
    assert_eq!(t.scopes, scopes);
    assert_eq!((t.created_at_ms, t.expires_at_ms), (T0, Some(T0 + 1_000)));
    assert_eq!((t.revoked_at_ms, t.last_used_at_ms), (None, None));
    assert!(db.read(|s| s.token_by_hash("cc33")).is_none());
    assert_eq!(db.read(|s| s.token_by_id("t2")).unwrap().name, "bot");
    assert!(db.read(|s| s.token_by_id("t3")).is_none());
    db.batch(|s, _| {
        s.set_token_used("t2", T0 + 7)?;
        s.set_token_revoked("t1", T0 + 8)
    });
    // Revoked, still found.
    let t = db.read(|s| s.token_by_hash("aa11")).unwrap();
    assert_eq!(t.revoked_at_ms, Some(T0 + 8));
    assert_eq!(
        db.read(|s| s.token_by_id("t2")).unwrap().last_used_at_ms,
        Some(T0 + 7)
    );
    assert_eq!(
        db.read(|s| s.all_tokens())
            .iter()
            .map(|t| t.token_id.as_str())
            .collect::<Vec<_>>(),
        ["t1", "t2"]
    );
}

// ---------------------------------------------------------------------------------------
// Batches

/// A request that fails before it writes is undone alone; the batch's other requests
/// commit.
fn batch_request_failing_before_writing_leaves_the_rest(db: &mut Db) {
    let writes = db.writes();
    writes.begin(&Foreseen::default()).unwrap();
    // Request 1 writes and succeeds.
    writes.savepoint().unwrap();
    set(writes.storage(), "ns", "a", Some("1"), 1, None).unwrap();
    writes
        .storage()
        .append_event(1, T0, &event(EventType::KvSet, "{}"))
        .unwrap();
    writes.release_request().unwrap();
    // Request 2 reads, then is refused.
    writes.savepoint().unwrap();
    assert!(writes.storage().stored("ns", "b").unwrap().is_none());
    writes.undo_request().unwrap();
    writes.release_request().unwrap();
    // Request 3 writes and succeeds.
    writes.savepoint().unwrap();
    set(writes.storage(), "ns", "c", Some("3"), 2, None).unwrap();
    writes
        .storage()
        .append_event(2, T0, &event(EventType::KvSet, "{}"))
        .unwrap();
    writes.release_request().unwrap();
    writes.storage().set_head_revision(2).unwrap();
    writes.commit().unwrap();
    assert_eq!(keys(&db.read(|s| s.list("ns", "", None, 10)).0), ["a", "c"]);
    assert_eq!(db.read(|s| s.head_revision()), 2);
    assert_eq!(db.read(|s| s.length()), 2);
}

/// A request that fails after it wrote cannot be undone alone (the boundary lets an engine
/// refuse): then the writer rolls the whole batch back, and nothing of it is stored.
fn batch_request_failing_after_writing_rolls_back_the_batch(db: &mut Db) {
    db.batch(|s, _| set(s, "ns", "kept", Some("0"), 1, None));
    let writes = db.writes();
    writes.begin(&Foreseen::default()).unwrap();
    writes.savepoint().unwrap();
    set(writes.storage(), "ns", "a", Some("1"), 2, None).unwrap();
    writes.release_request().unwrap();
    writes.savepoint().unwrap();
    set(writes.storage(), "ns", "b", Some("2"), 3, None).unwrap();
    writes
        .storage()
        .insert_lease(&lease("tool:x", "l", "ann", 1))
        .unwrap();
    match writes.undo_request() {
        // Undone alone: the rest of the batch commits.
        Ok(()) => {
            writes.release_request().unwrap();
            writes.commit().unwrap();
            assert_eq!(
                keys(&db.read(|s| s.list("ns", "", None, 10)).0),
                ["a", "kept"]
            );
            assert!(db.read(|s| s.leases("", None)).is_empty());
        }
        Err(err) => {
            assert!(matches!(err, Error::Unavailable(_)), "{err}");
            writes.rollback();
            assert_eq!(keys(&db.read(|s| s.list("ns", "", None, 10)).0), ["kept"]);
            assert!(db.read(|s| s.leases("", None)).is_empty());
        }
    }
    // The connection serves the next batch.
    db.batch(|s, _| set(s, "ns", "after", Some("1"), 4, None));
    assert_eq!(
        keys(&db.read(|s| s.list("ns", "", None, 10)).0),
        ["after", "kept"]
    );
}

/// A batch that fails is rolled back whole: records, events, leases, nodes, agents,
/// tokens, remembered answers, the head and the fencing counter.
fn batch_rollback_leaves_nothing(db: &mut Db) {
    let nodes = [node("a", &[])];
    let writes = db.writes();
    writes.begin(&Foreseen::default()).unwrap();
    writes.savepoint().unwrap();
    let s = writes.storage();
    set(s, "ns", "a", Some("1"), 1, None).unwrap();
    s.append_event(1, T0, &event(EventType::KvSet, "{}"))
        .unwrap();
    s.insert_lease(&lease("tool:x", "l", "ann", 1)).unwrap();
    s.store_fencing_token(1).unwrap();
    s.insert_task(&task("t", &nodes, 1)).unwrap();
    s.insert_session(&session("ann", "s")).unwrap();
    s.insert_token(&NewToken {
        token_id: "t1",
        name: "n",
        secret_hash: "h",
        scopes: &[],
        created_at_ms: T0,
        expires_at_ms: None,
    })
    .unwrap();
    s.remember("k", "Set", &[1], "{}", T0).unwrap();
    s.set_head_revision(1).unwrap();
    writes.rollback();
    let nothing = db.read(|s| {
        Ok((
            s.live("ns", "a")?.is_none(),
            s.length()? == 0,
            s.leases("", None)?.is_empty(),
            s.last_fencing_token()? == 0,
            s.task_status("t")?.is_none(),
            s.sessions()?.is_empty(),
            s.all_tokens()?.is_empty(),
            s.remembered("k")?.is_none(),
            s.head_revision()? == 0,
        ))
    });
    assert_eq!(
        nothing,
        (true, true, true, true, true, true, true, true, true)
    );
    // And the next batch starts clean.
    assert_eq!(db.batch(|s, _| s.head_revision()), 0);
}

/// The read side sees the last commit, never a batch still open.
fn reads_see_only_what_was_committed(db: &mut Db) {
    db.batch(|s, _| set(s, "ns", "a", Some("1"), 1, None));
    let writes = db.writes.as_deref_mut().unwrap();
    writes.begin(&Foreseen::default()).unwrap();
    writes.savepoint().unwrap();
    set(writes.storage(), "ns", "a", Some("2"), 2, None).unwrap();
    set(writes.storage(), "ns", "b", Some("2"), 3, None).unwrap();
    writes.storage().set_head_revision(3).unwrap();
    // Read while the batch is open (its writes sent: the writer read after them).
    assert_eq!(
        writes.storage().live("ns", "a").unwrap().unwrap().version,
        2
    );
    let store = db.store.as_ref().unwrap();
    let seen = store
        .read(|s| {
            Ok((
                s.live("ns", "a")?.map(|r| r.version),
                s.live("ns", "b")?.is_some(),
            ))
        })
        .unwrap();
    assert_eq!(seen, (Some(1), false));
    writes.release_request().unwrap();
    writes.commit().unwrap();
    let seen = db.read(|s| Ok((s.live("ns", "a")?.map(|r| r.version), s.head_revision()?)));
    assert_eq!(seen, (Some(2), 3));
}

/// Keys sort and match by their bytes (upper case before lower, multi-byte UTF-8 after
/// ASCII), whatever the database's locale.
fn keys_are_ordered_and_matched_by_bytes(db: &mut Db) {
    let names = ["b", "B", "_x", "é1", "éa", "Z", "a", "ü"];
    db.batch(|s, _| {
        for (i, key) in names.iter().enumerate() {
            let seq = i as i64 + 1;
            set(s, "ns", key, Some("1"), seq, None)?;
            s.insert_lease(&lease(
                &format!("tool:{key}"),
                &format!("l{i}"),
                key,
                seq as u64,
            ))?;
            s.insert_session(&session(key, &format!("s{i}")))?;
            s.append_event(
                seq,
                T0,
                &NewEvent {
                    namespace: Some("ns"),
                    key: Some(key),
                    resource_key: Some(&format!("tool:{key}")),
                    ..event(EventType::KvSet, "{}")
                },
            )?;
        }
        s.set_head_revision(names.len() as i64)
    });
    let sorted = ["B", "Z", "_x", "a", "b", "é1", "éa", "ü"];
    assert_eq!(keys(&db.read(|s| s.list("ns", "", None, 100)).0), sorted);
    assert_eq!(
        db.read(|s| s.export(None, None, 100))
            .0
            .iter()
            .map(|r| r.key.as_str())
            .collect::<Vec<_>>(),
        sorted
    );
    assert_eq!(
        db.read(|s| s.leases("tool:", None))
            .iter()
            .map(|l| l.owner.as_str())
            .collect::<Vec<_>>(),
        sorted
    );
    assert_eq!(
        db.read(|s| s.lease_page("tool:", None, Some(("tool:_x", 3)), 3))
            .iter()
            .map(|l| l.owner.as_str())
            .collect::<Vec<_>>(),
        ["a", "b", "é1"]
    );
    assert_eq!(
        db.read(|s| s.sessions())
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        sorted
    );
    assert_eq!(
        keys(&db.read(|s| s.list("ns", "é", None, 100)).0),
        ["é1", "éa"]
    );
    assert_eq!(
        keys(&db.read(|s| s.list("ns", "", Some("b"), 100)).0),
        ["é1", "éa", "ü"]
    );
    assert_eq!(keys(&db.read(|s| s.list("ns", "B", None, 100)).0), ["B"]);
    let read = |f: &str| {
        let (events, _) = db.read(|s| s.read_events(0, 8, &filter(f), 100, 1 << 20));
        events
            .into_iter()
            .map(|e| e.key.unwrap_or_default())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        read(r#"{"namespace": "ns", "key_prefix": "é"}"#),
        ["é1", "éa"]
    );
    assert_eq!(read(r#"{"key_prefix": "B"}"#), ["B"]);
    assert_eq!(read(r#"{"resource_prefix": "tool:é"}"#), ["é1", "éa"]);
    assert_eq!(read(r#"{"resource_prefix": "tool:Z"}"#), ["Z"]);
}

/// Waits to acquire in one order, where the daemons sharing a database keep them (an
/// engine with none keeps them in the writer's memory).
fn shared_waits_in_one_order(db: &mut Db) {
    let wait = |key: &str, connection: u64| super::boundary::QueuedWait {
        queued: 0,
        resource_key: key.into(),
        connection,
        owner: format!("o{connection}"),
        mode: LockMode::Exclusive,
        slots: None,
    };
    let order = db.batch(|s, _| {
        let Some(waits) = s.shared_waits() else {
            return Ok(None);
        };
        let first = waits.queue_wait(&wait("tool:a", 10))?;
        let second = waits.queue_wait(&wait("tool:b", 11))?;
        let third = waits.queue_wait(&wait("tool:a", (1 << 40) + 1))?;
        assert!(first < second && second < third);
        Ok(Some((first, second, third)))
    });
    let Some((first, second, third)) = order else {
        eprintln!(
            "{:?} keeps no shared waits (one daemon per database)",
            db.engine
        );
        return;
    };
    let queued = db.batch(|s, _| s.shared_waits().unwrap().queued_waits());
    assert_eq!(
        queued.iter().map(|w| w.queued).collect::<Vec<_>>(),
        [first, second, third]
    );
    assert_eq!(queued[2].connection, (1 << 40) + 1);
    assert_eq!(queued[0].owner, "o10");
    db.batch(|s, _| {
        let waits = s.shared_waits().unwrap();
        waits.end_wait(second)?;
        // A silent daemon's connections: [2^40, 2^41).
        waits.end_waits_of((1 << 40)..(1 << 41))
    });
    let queued = db.batch(|s, _| s.shared_waits().unwrap().queued_waits());
    assert_eq!(queued.iter().map(|w| w.queued).collect::<Vec<_>>(), [first]);
}

/// Outcomes a batch was foreseen to read (read ahead by an engine whose reads are round
/// trips) answer as those read on demand, and follow what the batch records.
fn outcomes_foreseen_agree_with_those_read(db: &mut Db) {
    db.batch(|s, o| end_lease(s, o, 1, &ended("tool:a", "completed", "ann", T0 + 1)));
    let writes = db.writes();
    let foreseen = Foreseen {
        lock_outcomes: vec!["tool:a".into(), "tool:b".into()],
    };
    writes.begin(&foreseen).unwrap();
    writes.savepoint().unwrap();
    let (s, o) = (writes.storage(), writes.outcomes());
    assert_eq!(o.previous("tool:a").unwrap().unwrap().owner, "ann");
    assert!(o.previous("tool:b").unwrap().is_none());
    end_lease(s, o, 2, &ended("tool:b", "failed", "bob", T0 + 2)).unwrap();
    end_lease(s, o, 3, &ended("tool:a", "completed", "cy", T0 + 3)).unwrap();
    // A request that joins late.
    writes
        .foresee(&Foreseen {
            lock_outcomes: vec!["tool:c".into(), "tool:a".into()],
        })
        .unwrap();
    let o = writes.outcomes();
    assert_eq!(o.previous("tool:a").unwrap().unwrap().owner, "cy");
    assert_eq!(o.previous("tool:b").unwrap().unwrap().outcome, "failed");
    assert!(o.previous("tool:c").unwrap().is_none());
    writes.release_request().unwrap();
    writes.commit().unwrap();
    db.batch(|_, o| {
        assert_eq!(o.previous("tool:a")?.unwrap().owner, "cy");
        assert_eq!(o.previous("tool:b")?.unwrap().owner, "bob");
        Ok(())
    });
}

/// A node put back to PENDING with a `ready_at` is held (one more unfinished dependency)
/// until `release_hold`; without one it is runnable since the seq given.
fn nodes_back_to_pending_held_until_a_time(db: &mut Db) {
    db.batch(|s, _| {
        s.insert_task(&task("t", &[node("a", &[]), node("b", &[])], 1))?;
        s.start_node("t", "a", &grant("la", "w"))?;
        s.start_node("t", "b", &grant("lb", "w"))?;
        Ok(())
    });
    db.batch(|s, _| {
        s.change_node(
            "t",
            "a",
            &NodeChange {
                error: Some(r#"{"retry":true}"#),
                runnable_since: Some(5),
                ready_at: Some(T0 + 5_000),
                ..change(NodeState::Pending, None)
            },
        )?;
        s.change_node(
            "t",
            "b",
            &NodeChange {
                runnable_since: Some(6),
                ..change(NodeState::Pending, None)
            },
        )
    });
    let a = db.read(|s| s.node("t", "a")).unwrap();
    assert_eq!((a.state, a.attempts), (NodeState::Pending, 1));
    assert!(a.lease_id.is_none());
    assert!(db.read(|s| s.node_leases()).is_empty());
    assert_eq!(
        db.read(|s| s.held_nodes()),
        [("t".to_string(), "a".to_string(), T0 + 5_000)]
    );
    assert!(db.read(|s| s.has_running("t")), "held");
    assert_eq!(
        db.read(|s| s.runnable(None, &[String::new()])),
        pair("t", "b")
    );
    assert!(db.batch(|s, _| s.release_hold("t", "a", 7)));
    // `b` (runnable since 6) before `a` (since 7).
    assert_eq!(
        db.read(|s| s.runnable(None, &[String::new()])),
        pair("t", "b")
    );
    db.batch(|s, _| s.start_node("t", "b", &grant("lb2", "w")).map(|_| ()));
    assert_eq!(
        db.read(|s| s.runnable(None, &[String::new()])),
        pair("t", "a")
    );
    let started = db.batch(|s, _| s.start_node("t", "a", &grant("la2", "w")));
    assert_eq!(started.attempts, 2);
}

/// The head revision and the fencing counter are only ever raised: a lower value stored
/// (a writer whose memory went back) leaves them as they were, so no revision or token is
/// handed out twice.
fn head_and_fencing_counter_are_only_raised(db: &mut Db) {
    db.batch(|s, _| {
        s.set_head_revision(10)?;
        s.store_fencing_token(10)
    });
    db.batch(|s, _| {
        s.set_head_revision(4)?;
        s.store_fencing_token(4)
    });
    let stored = db.read(|s| Ok((s.head_revision()?, s.last_fencing_token()?)));
    assert_eq!(stored, (10, 10));
    // Within one batch too.
    let in_batch = db.batch(|s, _| {
        s.store_fencing_token(12)?;
        s.store_fencing_token(11)?;
        s.last_fencing_token()
    });
    assert_eq!(in_batch, 12);
    db.reopen();
    assert_eq!(
        db.batch(|s, _| Ok((s.head_revision()?, s.last_fencing_token()?))),
        (10, 12)
    );
}

/// Edges the rules meet: reads past the head or before the first version, pages after
/// something absent, a second answer for one idempotency key, a name's second session.
fn edges_of_reads_and_writes(db: &mut Db) {
    db.batch(|s, _| {
        set(s, "ns", "a", Some("1"), 1, None)?;
        s.append_event(1, T0, &event(EventType::KvSet, "{}"))?;
        s.set_head_revision(1)?;
        s.insert_task(&task("t1", &[node("a", &[])], 1))?;
        s.insert_session(&session("x", "s1"))?;
        s.remember("k", "Set", &[1], "{}", T0)
    });
    // A reader ahead of the head resumes where it is.
    let (events, next) = db.read(|s| s.read_events(9, 1, &filter("{}"), 10, 1000));
    assert_eq!((events.len(), next), (0, 9));
    assert!(db.read(|s| s.history("ns", "a", Some(1), 10)).is_empty());
    // After a node or task that does not exist: nothing.
    let report = db.read(|s| s.task_report("t1", Some("zz"), 10)).unwrap();
    assert!(report.nodes.is_empty());
    assert_eq!(report.task.task_id, "t1");
    assert!(db
        .read(|s| s.list_tasks(None, Some("zz"), 10))
        .tasks
        .is_empty());
    assert_eq!(db.read(|s| s.inbox_count("x", 3, Some(1))), 0);
    // A second answer for a key replaces the first.
    db.batch(|s, _| s.remember("k", "Set", &[2], r#"{"x":1}"#, T0 + 1));
    let answer = db.read(|s| s.remembered("k")).unwrap();
    assert_eq!(
        (answer.request_hash, answer.response),
        (vec![2], r#"{"x":1}"#.into())
    );
    // A name has one session: a second is refused, and its batch stores nothing.
    db.batch(|s, _| s.delete_session("nobody"));
    let writes = db.writes();
    writes.begin(&Foreseen::default()).unwrap();
    writes.savepoint().unwrap();
    set(writes.storage(), "ns", "b", Some("1"), 2, None).unwrap();
    let refused = writes.storage().insert_session(&session("x", "s2"));
    match refused {
        // Says which constraint: SQLite's "UNIQUE constraint failed: sessions.name",
        // PostgreSQL's "duplicate key value violates unique constraint ... (SQLSTATE 23505)".
        Err(Error::Internal(why)) => assert!(why.to_lowercase().contains("unique"), "{why}"),
        other => panic!("a second session of a name: {other:?}"),
    }
    assert!(writes.undo_request().is_err());
    writes.rollback();
    assert_eq!(db.read(|s| s.session("x")).unwrap().session_id, "s1");
    assert!(db.read(|s| s.live("ns", "b")).is_none());
}

/// The writer's reads of leases in a batch (which an engine may answer from what it read
/// as the batch began) agree with the store and follow the batch's own writes.
fn leases_read_in_a_batch_follow_its_writes(db: &mut Db) {
    db.batch(|s, _| {
        s.insert_lease(&lease("tool:a", "l1", "ann", 1))?;
        s.insert_lease(&lease("tool:b", "l2", "bob", 2))?;
        s.store_fencing_token(2)
    });
    // A writer that starts over reads every live lease as its first batch begins.
    db.reopen();
    let ids = |rows: Vec<super::boundary::LeaseRow>| {
        rows.into_iter().map(|l| l.lease_id).collect::<Vec<_>>()
    };
    db.batch(|s, _| {
        assert_eq!(ids(s.leases("", None)?), ["l1", "l2"]);
        assert_eq!(ids(s.leases("tool:b", None)?), ["l2"]);
        assert_eq!(ids(s.leases("", Some("ann"))?), ["l1"]);
        assert_eq!(s.last_fencing_token()?, 2);
        s.delete_lease("tool:a", "l1")?;
        s.insert_lease(&lease("tool:c", "l3", "ann", 3))?;
        assert_eq!(ids(s.leases("", None)?), ["l2", "l3"]);
        assert_eq!(ids(s.leases("", Some("ann"))?), ["l3"]);
        s.extend_lease("tool:c", "l3", T0 + 1)?;
        assert_eq!(s.leases("tool:c", None)?[0].expires_at, T0 + 1);
        s.store_fencing_token(3)
    });
    assert_eq!(ids(db.read(|s| s.leases("", None))), ["l2", "l3"]);
    db.batch(|s, _| {
        assert_eq!(ids(s.leases("", None)?), ["l2", "l3"]);
        assert_eq!(s.last_fencing_token()?, 3);
        Ok(())
    });
}
