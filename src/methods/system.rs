//! DescribeInterface, Health and Metrics; and AdvanceClock, which only a daemon started
//! for tests (`BATON_TEST_CLOCK_MS`) serves.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::app::App;
use crate::error::Result;
use crate::metrics::MethodFigures;
use crate::store::boundary::Storage;

use super::{read, ready, write, Ctx, Method, MethodDescription, Plan};

/// The protocol name DescribeInterface reports.
pub const PROTOCOL: &str = "baton-jsonl-v1";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DescribeInterfaceParams {}

#[derive(Serialize, JsonSchema)]
pub struct ErrorDescription {
    pub code: i64,
    pub kind: &'static str,
    pub when: &'static str,
}

#[derive(Serialize, JsonSchema)]
pub struct DescribeInterfaceResult {
    pub protocol: &'static str,
    pub version: &'static str,
    #[schemars(with = "Vec<serde_json::Value>")]
    pub methods: Vec<MethodDescription>,
    pub errors: Vec<ErrorDescription>,
    /// Every limit this daemon enforces; the error that refuses a request over one names it.
    pub limits: EnforcedLimits,
}

/// The limits a request can meet, as this daemon is configured.
#[derive(Serialize, JsonSchema)]
pub struct EnforcedLimits {
    /// Longest request line, in bytes (`BATON_MAX_LINE_BYTES`).
    pub max_line_bytes: usize,
    /// Largest stored value, in bytes (`BATON_MAX_VALUE_BYTES`).
    pub max_value_bytes: usize,
    /// Most nodes in one RegisterTask.
    pub max_nodes_per_task: usize,
    /// Largest `limit` of a paged read.
    pub max_page: u64,
    /// Longest `wait_ms` of AcquireResourceLock, AcquireNextNode and ReadInbox, and
    /// `timeout_ms` of WaitResourceLock.
    pub max_wait_ms: u64,
    /// Most `slots` of a counting lock key.
    pub max_slots: u64,
    /// Longest `ttl_secs` of a lock lease.
    pub max_lock_ttl_secs: u64,
    /// Most attempts of a node.
    pub max_attempts: u32,
    /// Longest namespace, key or topic, in bytes.
    pub max_name_bytes: usize,
    /// Versions kept per key (`BATON_HISTORY_KEEP`); null keeps them all. History asking
    /// for older ones is 416.
    pub history_keep: Option<u64>,
    /// Journal events kept by count (`BATON_JOURNAL_RETAIN`); null: not by count.
    pub journal_retain_events: Option<u64>,
    /// Journal events kept by age, in milliseconds (`BATON_JOURNAL_RETAIN`); null: not by age.
    pub journal_retain_ms: Option<u64>,
}

impl EnforcedLimits {
    pub fn of(config: &crate::config::Config) -> EnforcedLimits {
        EnforcedLimits {
            max_line_bytes: config.max_line_bytes,
            max_value_bytes: config.max_value_bytes,
            max_nodes_per_task: super::tasks::MAX_NODES,
            max_page: super::MAX_PAGE,
            max_wait_ms: super::locks::MAX_WAIT_MS,
            max_slots: super::locks::MAX_SLOTS,
            max_lock_ttl_secs: super::locks::MAX_TTL_SECS,
            max_attempts: super::tasks::MAX_ATTEMPTS,
            max_name_bytes: super::state::MAX_NAME_BYTES,
            history_keep: config.history_keep,
            journal_retain_events: match config.journal_retain {
                crate::config::JournalRetain::Events(n) => Some(n),
                _ => None,
            },
            journal_retain_ms: match config.journal_retain {
                crate::config::JournalRetain::Age(ms) => Some(ms),
                _ => None,
            },
        }
    }
}

/// Every error code, as DescribeInterface documents it: the kinds of [`crate::error::Kind`].
pub fn error_table() -> Vec<ErrorDescription> {
    crate::error::Kind::ALL
        .into_iter()
        .map(|kind| ErrorDescription {
            code: kind.code(),
            kind: kind.name(),
            when: kind.when(),
        })
        .collect()
}

impl Method for DescribeInterfaceParams {
    const NAME: &'static str = "DescribeInterface";
    const SUMMARY: &'static str = "This protocol: every method with JSON Schemas of its params and result, and every error code.";
    type Output = DescribeInterfaceResult;
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        Ok(Plan::Ready(Ok(cx.app.describe_interface().to_owned())))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthParams {}

#[derive(Serialize, JsonSchema)]
pub struct HealthResult {
    /// "ok", or "degraded" while storage is failing.
    pub status: &'static str,
    /// "ok", or "failing": the last commit failed (until one succeeds), the database file
    /// is damaged, or it could not be read just now.
    pub database: &'static str,
    /// Why storage is failing, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_error: Option<String>,
    pub schema_version: i64,
    pub version: &'static str,
    pub uptime_secs: u64,
    /// Where the state lives: `sqlite` or `postgres` (which several daemons may share).
    pub backend: &'static str,
    /// This daemon's id, new at every start (tells apart daemons sharing a database).
    pub instance_id: String,
    /// The dashboard's address, when batond serves HTTP (`BATON_HTTP_LISTEN`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dashboard: Option<String>,
}

impl Method for HealthParams {
    const NAME: &'static str = "Health";
    const SUMMARY: &'static str = "Is the daemon serving and its database sound: status (ok or degraded), database (ok or failing, with database_error), schema version, build version, uptime.";
    type Output = HealthResult;
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let app = cx.app;
        // A cheap read of the database file (the page that holds the revision), then what
        // the writer and earlier reads saw.
        let read = app
            .store
            .read_one_statement(|storage| storage.head_revision());
        let failure = match read {
            Err(err) => Some(format!("the database is not readable: {err}")),
            Ok(_) => app.store.health().failure(),
        };
        ready::<Self>(Ok(HealthResult {
            status: if failure.is_some() { "degraded" } else { "ok" },
            database: if failure.is_some() { "failing" } else { "ok" },
            database_error: failure,
            schema_version: app.store.schema_version,
            version: env!("CARGO_PKG_VERSION"),
            uptime_secs: app.uptime().as_secs(),
            backend: app.store.backend(),
            instance_id: app.instance_id.clone(),
            dashboard: app.dashboard.get().cloned(),
        }))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsParams {}

#[derive(Serialize, JsonSchema)]
pub struct ConnectionFigures {
    pub open: u64,
    pub total: u64,
    /// Connections the daemon failed to accept (at the open-file limit, mostly).
    pub accept_errors: u64,
    /// Network connections closed at once because their listener already held
    /// `BATON_MAX_UNAUTHENTICATED` connections that had not authenticated.
    pub refused_unauthenticated: u64,
    /// Network and HTTP connections closed at once because batond was near its open-file
    /// limit (the last descriptors are kept for the Unix socket and the database).
    pub refused_descriptors: u64,
    /// Network connections closed for not authenticating within `BATON_AUTH_TIMEOUT_MS`.
    pub auth_timeouts: u64,
}

#[derive(Serialize, JsonSchema)]
pub struct AuthFigures {
    /// Failed Authenticate calls (wrong, expired or revoked tokens) since start.
    pub failures: u64,
}

#[derive(Serialize, JsonSchema)]
pub struct RecordFigures {
    pub live: u64,
    pub tombstones: u64,
}

#[derive(Serialize, JsonSchema)]
pub struct JournalFigures {
    pub length: u64,
    pub head_seq: u64,
    /// The first seq still kept (1 until CompactJournal).
    pub oldest_seq: u64,
}

#[derive(Serialize, JsonSchema)]
pub struct StorageFigures {
    pub commits: u64,
    pub failed_commits: u64,
    pub writes: u64,
    pub max_batch: u64,
    pub mean_batch: f64,
    pub db_bytes: u64,
    pub wal_bytes: u64,
}

#[derive(Serialize, JsonSchema)]
pub struct LockFigures {
    /// Leases held now.
    pub live: u64,
    /// Requests queued in AcquireResourceLock with `wait_ms`.
    pub waiting: u64,
    /// WaitResourceLock requests waiting for a key to become free.
    pub watching: u64,
}

#[derive(Serialize, JsonSchema)]
pub struct MetricsResult {
    pub uptime_secs: u64,
    /// Per method: requests, errors and latency from parse to answer, in microseconds.
    pub methods: BTreeMap<&'static str, MethodFigures>,
    pub connections: ConnectionFigures,
    pub auth: AuthFigures,
    pub records: RecordFigures,
    pub journal: JournalFigures,
    pub storage: StorageFigures,
    pub locks: LockFigures,
    pub tasks: BTreeMap<String, u64>,
    pub nodes: BTreeMap<String, u64>,
    /// Workers waiting in AcquireNextNode with `wait_ms`.
    pub node_waiters: u64,
    /// Agents waiting in ReadInbox with `wait_ms`.
    pub inbox_waiters: u64,
    /// The daemons serving this database that heartbeat (1 on SQLite).
    pub instances: u64,
}

impl Method for MetricsParams {
    const NAME: &'static str = "Metrics";
    const SUMMARY: &'static str =
        "Counters and latencies per method, connections, records, journal and storage figures.";
    type Output = MetricsResult;
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let app = cx.app.clone();
        Ok(read::<Self>(true, move |storage| metrics(&app, storage)))
    }
}

/// The Metrics answer, from one snapshot of storage.
fn metrics(app: &App, storage: &dyn Storage) -> Result<MetricsResult> {
    let (live, tombstones) = storage.counts()?;
    let (tasks, nodes) = storage.task_counts()?;
    let head_seq = storage.head_revision()? as u64;
    let stats = &app.writer.stats;
    let commits = stats.commits.load(std::sync::atomic::Ordering::Relaxed);
    let writes = stats.writes.load(std::sync::atomic::Ordering::Relaxed);
    let (db_bytes, wal_bytes) = storage.file_sizes()?;
    let instances = storage.live_instances((app.config.instance_timeout_secs * 1000) as i64)?;
    let (refused_unauthenticated, refused_descriptors, auth_timeouts) = app.metrics.refusals();
    Ok(MetricsResult {
        instances,
        uptime_secs: app.uptime().as_secs(),
        methods: app.metrics.methods(),
        connections: ConnectionFigures {
            open: app.metrics.connections_open(),
            total: app.metrics.connections_total(),
            accept_errors: app.metrics.accept_errors(),
            refused_unauthenticated,
            refused_descriptors,
            auth_timeouts,
        },
        auth: AuthFigures {
            failures: app.metrics.auth_failures(),
        },
        records: RecordFigures { live, tombstones },
        journal: JournalFigures {
            length: storage.length()?,
            head_seq,
            oldest_seq: storage.oldest_seq()?,
        },
        storage: StorageFigures {
            commits,
            failed_commits: stats
                .failed_commits
                .load(std::sync::atomic::Ordering::Relaxed),
            writes,
            max_batch: stats.max_batch.load(std::sync::atomic::Ordering::Relaxed),
            mean_batch: if commits == 0 {
                0.0
            } else {
                writes as f64 / commits as f64
            },
            db_bytes,
            wal_bytes,
        },
        locks: LockFigures {
            live: stats.live_locks.load(std::sync::atomic::Ordering::Relaxed),
            waiting: stats
                .lock_waiters
                .load(std::sync::atomic::Ordering::Relaxed),
            watching: stats
                .lock_watchers
                .load(std::sync::atomic::Ordering::Relaxed),
        },
        tasks,
        nodes,
        inbox_waiters: stats
            .inbox_waiters
            .load(std::sync::atomic::Ordering::Relaxed),
        node_waiters: stats
            .node_waiters
            .load(std::sync::atomic::Ordering::Relaxed),
    })
}

/// The Metrics answer now, read on the pool of read connections (for the HTTP /metrics).
pub fn metrics_now(app: &App) -> Result<MetricsResult> {
    app.store.read(|storage| metrics(app, storage))
}

/// Moves a test daemon's manual clock forward. Not in DescribeInterface: a daemon on the
/// real clock answers it as an unknown method.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdvanceClockParams {
    /// How far to move the clock, in milliseconds.
    pub ms: u64,
}

#[derive(Serialize, JsonSchema)]
pub struct AdvanceClockResult {
    /// The clock's wall time after the move.
    pub now: String,
    /// Milliseconds the clock has moved since the daemon started.
    pub monotonic_ms: u64,
}

impl Method for AdvanceClockParams {
    const NAME: &'static str = "AdvanceClock";
    const SUMMARY: &'static str =
        "Tests only: move the manual clock forward, then answer once what came due has ended.";
    type Output = AdvanceClockResult;

    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let clock = cx.app.clock.clone();
        let Some(manual) = clock.as_manual() else {
            return Err(crate::error::Error::MethodNotFound {
                method: Self::NAME.into(),
                known: super::METHOD_NAMES,
            });
        };
        manual.advance(std::time::Duration::from_millis(self.ms));
        // A write: the writer ends every lease and wait that came due before it applies
        // any batch, so the answer comes after their effects.
        write::<Self>(cx, None, move |_| {
            Ok(AdvanceClockResult {
                now: crate::clock::format_ms(clock.wall_ms()),
                monotonic_ms: clock.monotonic().as_millis() as u64,
            })
        })
    }
}
