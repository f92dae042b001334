//! `/metrics`: the figures of Metrics in the Prometheus text exposition format, as
//! counters, gauges and a latency histogram per method, for a token with the `admin` grant
//! (as the Metrics method needs).

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::app::App;
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
        "send Authorization: Bearer <token>, with a token that has the admin grant (baton token create prometheus --scope admin)",
    ) {
        Ok(visitor) => visitor,
        Err(refused) => return refused.into_response(),
    };
    if !visitor.scopes.allows(&Need::Admin) {
        return refuse(
            StatusCode::FORBIDDEN,
            "/metrics needs a token with the admin grant",
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
    let one = |v: u64| vec![(String::new(), v as f64)];
    metric(
        "uptime_seconds",
        "gauge",
        "Seconds since batond started.",
        &one(m.uptime_secs),
    );
    metric(
        "instances",
        "gauge",
        "batond instances heartbeating on this database (1 on SQLite).",
        &one(m.instances),
    );
    metric(
        "connections_open",
        "gauge",
        "Client connections open.",
        &one(m.connections.open),
    );
    metric(
        "connections_total",
        "counter",
        "Client connections accepted.",
        &one(m.connections.total),
    );
    metric(
        "accept_errors_total",
        "counter",
        "Connections that could not be accepted.",
        &one(m.connections.accept_errors),
    );
    metric(
        "auth_failures_total",
        "counter",
        "Failed authentications.",
        &one(m.auth.failures),
    );
    metric(
        "records_live",
        "gauge",
        "Live records.",
        &one(m.records.live),
    );
    metric(
        "records_tombstones",
        "gauge",
        "Deleted keys' tombstones.",
        &one(m.records.tombstones),
    );
    metric(
        "journal_length",
        "gauge",
        "Events in the journal.",
        &one(m.journal.length),
    );
    metric(
        "journal_head_seq",
        "gauge",
        "The last journal seq (the revision).",
        &one(m.journal.head_seq),
    );
    metric(
        "commits_total",
        "counter",
        "Write transactions committed.",
        &one(m.storage.commits),
    );
    metric(
        "failed_commits_total",
        "counter",
        "Write transactions that failed.",
        &one(m.storage.failed_commits),
    );
    metric(
        "writes_total",
        "counter",
        "Write requests applied.",
        &one(m.storage.writes),
    );
    metric(
        "database_bytes",
        "gauge",
        "Size of the database file.",
        &one(m.storage.db_bytes),
    );
    metric(
        "wal_bytes",
        "gauge",
        "Size of the write-ahead log.",
        &one(m.storage.wal_bytes),
    );
    metric(
        "locks_live",
        "gauge",
        "Live lock leases.",
        &one(m.locks.live),
    );
    metric(
        "locks_waiting",
        "gauge",
        "Requests waiting to acquire a lock.",
        &one(m.locks.waiting),
    );
    metric(
        "locks_watching",
        "gauge",
        "WaitResourceLock calls waiting.",
        &one(m.locks.watching),
    );
    metric(
        "node_waiters",
        "gauge",
        "Workers waiting in AcquireNextNode.",
        &one(m.node_waiters),
    );
    metric(
        "inbox_waiters",
        "gauge",
        "Agents waiting in ReadInbox.",
        &one(m.inbox_waiters),
    );
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
