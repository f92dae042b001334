//! The HTTP listener (`BATON_HTTP_LISTEN`: HTTPS with the TLS settings, or plain HTTP on
//! loopback): `/metrics` in the Prometheus text exposition format, the figures of Metrics
//! as counters, gauges and a latency histogram per method. Every route needs a token with
//! the `admin` grant, as the Metrics method does (`Authorization: Bearer <token>`).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::methods::auth::token_scopes;
use crate::methods::scopes::Need;
use crate::methods::system::{metrics_now, MetricsResult};

/// Latency bounds of the exported histograms, in seconds.
const LE: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds the listener now (so a port in use stops the start); serves until `shutdown`.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `/metrics` on `listener`, over TLS with `tls`, until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Arc<App>,
    shutdown: CancellationToken,
) {
    let router = Router::new()
        .route("/metrics", get(metrics))
        .with_state(app);
    let stopped = shutdown.clone();
    let stopped = async move { stopped.cancelled().await };
    let served = match tls {
        None => {
            axum::serve(listener, router)
                .with_graceful_shutdown(stopped)
                .await
        }
        Some(acceptor) => {
            let listener = TlsListener::start(listener, acceptor, shutdown);
            axum::serve(listener, router)
                .with_graceful_shutdown(stopped)
                .await
        }
    };
    if let Err(err) = served {
        tracing::error!(%err, "the HTTP listener stopped");
    }
}

/// Connections that finished their TLS handshake. Handshakes run in tasks of their own,
/// so a slow or silent client holds up nobody else.
struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
}

impl TlsListener {
    fn start(listener: TcpListener, acceptor: TlsAcceptor, shutdown: CancellationToken) -> Self {
        let addr = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((tcp, peer)) = accepted else {
                    // Out of descriptors, mostly: give it a moment.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    if let Ok(Ok(tls)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                    {
                        let _ = tx.send((tls, peer)).await;
                    }
                });
            }
        });
        TlsListener { ready, addr }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The accept task ended (shutdown): wait for the graceful shutdown to end us.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

fn refuse(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{message}\n"),
    )
        .into_response()
}

async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let Some(token) = token else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "send Authorization: Bearer <token>, with a token that has the admin grant (baton token create prometheus --scope admin)",
        );
    };
    let granted = tokio::task::block_in_place(|| token_scopes(&app, token));
    match granted {
        Ok(Some(scopes)) if scopes.allows(&Need::Admin) => {}
        Ok(Some(_)) => {
            return refuse(
                StatusCode::FORBIDDEN,
                "/metrics needs a token with the admin grant",
            );
        }
        Ok(None) => {
            app.metrics.auth_failed();
            return refuse(
                StatusCode::UNAUTHORIZED,
                "the token is not valid (unknown, expired or revoked)",
            );
        }
        Err(err) => return refuse(StatusCode::SERVICE_UNAVAILABLE, &err.to_string()),
    }
    match tokio::task::block_in_place(|| metrics_now(&app)) {
        Ok(figures) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            exposition(&app, &figures),
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
