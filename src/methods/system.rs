//! DescribeInterface, Health and Metrics; and AdvanceClock, which only a daemon started
//! for tests (`BATON_TEST_CLOCK_MS`) serves.

use super::app::App;
use crate::error::Result;
use crate::store::boundary::Storage;

pub use crate::protocol::system::*;

use super::{read, ready, write, Ctx, Method, Plan, Request};

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
            kind: kind.name().into(),
            when: kind.when().into(),
        })
        .collect()
}

impl Method for DescribeInterfaceParams {
    const SUMMARY: &'static str = "This protocol: every method with JSON Schemas of its params and result, and every error code.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        Ok(Plan::Ready(Ok(cx.app.describe_interface().to_owned())))
    }
}

impl Method for HealthParams {
    const SUMMARY: &'static str = "Is the daemon serving and its database sound: status (ok or degraded), database (ok or failing, with database_error), schema version, build version, uptime.";
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
            status: if failure.is_some() { "degraded" } else { "ok" }.into(),
            database: if failure.is_some() { "failing" } else { "ok" }.into(),
            database_error: failure,
            schema_version: app.store.schema_version,
            version: env!("CARGO_PKG_VERSION").into(),
            uptime_secs: app.uptime().as_secs(),
            backend: app.store.backend().into(),
            instance_id: app.instance_id.clone(),
            dashboard: app.dashboard.get().cloned(),
        }))
    }
}

impl Method for MetricsParams {
    const SUMMARY: &'static str =
        "Counters and latencies per method, connections, records, journal and storage figures.";
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
            live: stats
                .areas
                .live_locks
                .load(std::sync::atomic::Ordering::Relaxed),
            waiting: stats
                .areas
                .lock_waiters
                .load(std::sync::atomic::Ordering::Relaxed),
            watching: stats
                .areas
                .lock_watchers
                .load(std::sync::atomic::Ordering::Relaxed),
        },
        tasks,
        nodes,
        inbox_waiters: stats
            .areas
            .inbox_waiters
            .load(std::sync::atomic::Ordering::Relaxed),
        node_waiters: stats
            .areas
            .node_waiters
            .load(std::sync::atomic::Ordering::Relaxed),
    })
}

/// The Metrics answer now, read on the pool of read connections (for the HTTP /metrics).
pub fn metrics_now(app: &App) -> Result<MetricsResult> {
    app.store.read(|storage| metrics(app, storage))
}

impl Method for AdvanceClockParams {
    const SUMMARY: &'static str =
        "Tests only: move the manual clock forward, then answer once what came due has ended.";

    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let clock = cx.app.clock.clone();
        let Some(manual) = clock.as_manual() else {
            return Err(crate::error::Error::MethodNotFound {
                method: Self::METHOD.into(),
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
