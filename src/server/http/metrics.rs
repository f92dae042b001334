//! `/metrics`: the figures of Metrics in the Prometheus text exposition format, as
//! counters, gauges and a latency histogram per method, for a token with the `metrics`
//! grant (or `admin`), as the Metrics method needs.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::methods::app::App;
use crate::methods::scopes::Need;
use crate::methods::system::{metrics_now, MetricsResult};

use super::{authorized, refuse, Http};

/// Latency bounds of the exported histograms, in seconds.
const LE: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

pub(super) async fn metrics(State(http): State<Arc<Http>>, headers: HeaderMap) -> Response {
    let visitor = match authorized(
        &http,
        &headers,
        "send Authorization: Bearer <token>, with a token that has the metrics grant (baton token create prometheus --scope metrics)",
    ) {
        Ok(visitor) => visitor,
        Err(refused) => return refused.into_response(),
    };
    if !visitor.scopes.allows(&Need::Metrics) {
        return refuse(
            StatusCode::FORBIDDEN,
            "/metrics needs a token with the metrics grant; give the scraper one (baton token create prometheus --scope metrics)",
        );
    }
    let app = &http.app;
    match tokio::task::block_in_place(|| metrics_now(app)) {
        Ok(figures) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            exposition(app, &figures),
        )
            .into_response(),
        Err(err) => refuse(StatusCode::SERVICE_UNAVAILABLE, &err.to_string()),
    }
}

/// A label value, escaped for the text format.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The figures in the Prometheus text exposition format (version 0.0.4).
fn exposition(app: &App, m: &MetricsResult) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP baton_{name} {help}");
        let _ = writeln!(out, "# TYPE baton_{name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "baton_{name}{labels} {value}");
        }
    };
    // One sample each, unlabelled.
    let single: [(&str, &str, &str, u64); 23] = [
        (
            "uptime_seconds",
            "gauge",
            "Seconds since batond started.",
            m.uptime_secs,
        ),
        (
            "instances",
            "gauge",
            "batond instances heartbeating on this database (1 on SQLite).",
            m.instances,
        ),
        (
            "connections_open",
            "gauge",
            "Client connections open.",
            m.connections.open,
        ),
        (
            "connections_total",
            "counter",
            "Client connections accepted.",
            m.connections.total,
        ),
        (
            "accept_errors_total",
            "counter",
            "Connections that could not be accepted.",
            m.connections.accept_errors,
        ),
        (
            "connections_refused_unauthenticated_total",
            "counter",
            "Network connections closed at once: their listener held BATON_MAX_UNAUTHENTICATED unauthenticated ones.",
            m.connections.refused_unauthenticated,
        ),
        (
            "connections_refused_descriptors_total",
            "counter",
            "Network and HTTP connections closed at once near the open-file limit.",
            m.connections.refused_descriptors,
        ),
        (
            "auth_timeouts_total",
            "counter",
            "Network connections closed for not authenticating within BATON_AUTH_TIMEOUT_MS.",
            m.connections.auth_timeouts,
        ),
        (
            "auth_failures_total",
            "counter",
            "Failed authentications.",
            m.auth.failures,
        ),
        ("records_live", "gauge", "Live records.", m.records.live),
        (
            "records_tombstones",
            "gauge",
            "Deleted keys' tombstones.",
            m.records.tombstones,
        ),
        (
            "journal_length",
            "gauge",
            "Events in the journal.",
            m.journal.length,
        ),
        (
            "journal_head_seq",
            "gauge",
            "The last journal seq (the revision).",
            m.journal.head_seq,
        ),
        (
            "commits_total",
            "counter",
            "Write transactions committed.",
            m.storage.commits,
        ),
        (
            "failed_commits_total",
            "counter",
            "Write transactions that failed.",
            m.storage.failed_commits,
        ),
        (
            "writes_total",
            "counter",
            "Write requests applied.",
            m.storage.writes,
        ),
        (
            "database_bytes",
            "gauge",
            "Size of the database file.",
            m.storage.db_bytes,
        ),
        (
            "wal_bytes",
            "gauge",
            "Size of the write-ahead log.",
            m.storage.wal_bytes,
        ),
        ("locks_live", "gauge", "Live lock leases.", m.locks.live),
        (
            "locks_waiting",
            "gauge",
            "Requests waiting to acquire a lock.",
            m.locks.waiting,
        ),
        (
            "locks_watching",
            "gauge",
            "WaitResourceLock calls waiting.",
            m.locks.watching,
        ),
        (
            "node_waiters",
            "gauge",
            "Workers waiting in AcquireNextNode.",
            m.node_waiters,
        ),
        (
            "inbox_waiters",
            "gauge",
            "Agents waiting in ReadInbox.",
            m.inbox_waiters,
        ),
    ];
    for (name, kind, help, value) in single {
        metric(name, kind, help, &[(String::new(), value as f64)]);
    }
    let by = |map: &std::collections::BTreeMap<String, u64>, key: &str| {
        map.iter()
            .map(|(k, v)| (format!("{{{key}=\"{}\"}}", label(k)), *v as f64))
            .collect::<Vec<_>>()
    };
    metric(
        "tasks",
        "gauge",
        "Tasks by status.",
        &by(&m.tasks, "status"),
    );
    metric("nodes", "gauge", "Nodes by state.", &by(&m.nodes, "state"));
    let methods = |f: &dyn Fn(&crate::metrics::MethodFigures) -> u64| {
        m.methods
            .iter()
            .map(|(name, figures)| (format!("{{method=\"{}\"}}", label(name)), f(figures) as f64))
            .collect::<Vec<_>>()
    };
    metric(
        "requests_total",
        "counter",
        "Requests answered, by method.",
        &methods(&|f| f.count),
    );
    metric(
        "request_errors_total",
        "counter",
        "Requests answered with an error, by method.",
        &methods(&|f| f.errors),
    );
    let _ = writeln!(out, "# HELP baton_request_duration_seconds Time from a request's line to its answer, by method.");
    let _ = writeln!(out, "# TYPE baton_request_duration_seconds histogram");
    for (name, h) in app.metrics.histograms(&LE) {
        let name = label(name);
        for (le, count) in &h.cumulative {
            let _ = writeln!(
                out,
                "baton_request_duration_seconds_bucket{{method=\"{name}\",le=\"{le}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "baton_request_duration_seconds_bucket{{method=\"{name}\",le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(
            out,
            "baton_request_duration_seconds_sum{{method=\"{name}\"}} {}",
            h.sum
        );
        let _ = writeln!(
            out,
            "baton_request_duration_seconds_count{{method=\"{name}\"}} {}",
            h.count
        );
    }
    out
}
