//! The storage conformance suite: one behavioural spec of the `store::boundary` traits,
//! each case written once over the traits and run in-process against both engines (SQLite
//! in a temporary directory, PostgreSQL in a fresh database on `BATON_TEST_POSTGRES_URL`,
//! default `postgres://postgres@127.0.0.1:5432/test`; `none` skips it, loudly).
//!
//! Run: `cargo test --lib store::conformance`. A case reads what the boundary documents
//! (see `boundary/`), through the writer's side inside a batch and through the read side
//! after the commit, never an engine's tables.

use crate::error::{Error, Result};
use crate::protocol::journal::{EventFilter, EventType};
use crate::protocol::locks::LockMode;
use crate::protocol::tasks::{NodeState, TaskStatus};

use super::boundary::{
    Foreseen, LeaseEnd, NameOwner, NewEvent, NewLease, NewNode, NewTask, NewToken, NewVersion,
    NodeChange, NodeLeaseGrant, NodeRetry, NodesMove, Outcomes, SessionRow, Storage, WriteStorage,
};
use super::Store;

mod across;
mod agents;
mod journal;
mod leases;
mod meta;
mod nodes;
mod records;

use across::*;
use agents::*;
use journal::*;
use leases::*;
use meta::*;
use nodes::*;
use records::*;

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
        writes.start_request().unwrap();
        let done = f(writes.storage(), writes.outcomes())
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
    the_largest_ended_token_of_a_key_is_kept,
    nodes_insert_and_read_a_task,
    nodes_first_runnable_of_a_label_set_by_priority_then_age,
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
        attempts: 1,
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

/// The first runnable node of the label set `key`, of `task` or any: (task, node).
fn first(s: &dyn Storage, task: Option<&str>, key: &str) -> Result<Option<(String, String)>> {
    Ok(s.first_runnable(task, key)?.map(|n| (n.task_id, n.node_id)))
}

fn pair(t: &str, n: &str) -> Option<(String, String)> {
    Some((t.to_string(), n.to_string()))
}

fn label(labels: &[&str]) -> String {
    labels.join("\u{1f}")
}
