//! The HTTP listener (`BATON_HTTP_LISTEN`: HTTPS with the TLS settings, or plain HTTP on
//! loopback): the dashboard (`dashboard`) and `/metrics` in the Prometheus text exposition
//! format (`metrics`). Every route needs a token: `Authorization: Bearer <token>`, or the
//! session cookie the dashboard's login sets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::client::Halves;
use crate::methods::app::App;
use crate::methods::auth::live_token;
use crate::methods::scopes::Scopes;

use super::connection::{self, Peer};
use super::limits::Descriptors;
use super::AcceptErrors;

mod dashboard;
mod mcp;
mod metrics;

/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The dashboard's session cookie: it carries the token the visitor logged in with.
const SESSION_COOKIE: &str = "baton_session";

/// What every route is served with.
struct Http {
    app: Arc<App>,
    /// The daemon's shutdown: ends the dashboard's event streams.
    shutdown: CancellationToken,
    /// Served over TLS (the session cookie is then `Secure`).
    tls: bool,
}

/// The dashboard's address on a bound socket: an unspecified address (0.0.0.0, ::) is
/// shown as loopback, which reaches it from this host.
pub fn url_of(addr: SocketAddr, tls: bool) -> String {
    let mut shown = addr;
    if addr.ip().is_unspecified() {
        shown.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("{}://{shown}/", if tls { "https" } else { "http" })
}

/// Binds the listener now (so a port in use stops the start); serves until `shutdown`.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Request line and headers together: at most this many bytes (431 beyond).
const MAX_HEADER_BYTES: usize = 16 * 1024;

/// The largest request body: 413 beyond, at once when its Content-Length says so.
pub(super) const MAX_BODY_BYTES: usize = 1 << 20;

/// Serves the dashboard and `/metrics` on `listener`, over TLS with `tls`, until
/// `shutdown`. Each connection is served by hyper with the contract's limits: a request's
/// headers within `BATON_HTTP_HEADER_TIMEOUT_MS` (10 s) and 16 KiB, its body within 1 MiB;
/// near the open-file limit new connections are closed at once (`descriptors`).
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Arc<App>,
    descriptors: Arc<Descriptors>,
    shutdown: CancellationToken,
) {
    let shown = listener
        .local_addr()
        .map_or_else(|_| "the HTTP listener".into(), |a| url_of(a, tls.is_some()));
    let header_timeout = Duration::from_millis(app.config.http_header_timeout_ms);
    let grace = Duration::from_millis(app.config.shutdown_grace_ms);
    let http = Arc::new(Http {
        app: app.clone(),
        shutdown: shutdown.clone(),
        tls: tls.is_some(),
    });
    let mut router = dashboard::routes()
        .merge(mcp::routes(&http))
        .route("/metrics", get(metrics::metrics))
        .layer(axum::middleware::from_fn(limit_body))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES));
    if tls.is_some() {
        router = router.layer(axum::middleware::map_response(hsts));
    }
    let router = router.with_state(http);
    let connections = TaskTracker::new();
    let mut errors = AcceptErrors::new();
    loop {
        let paused = errors.paused_until;
        let tcp = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept(), if paused.is_none() => match accepted {
                Ok((tcp, _)) => {
                    errors.succeeded();
                    // Answers go out in several writes (headers, then each SSE event of an
                    // MCP call's stream): without this, Nagle's algorithm holds the last
                    // one for the client's delayed ACK, 40 ms a call.
                    let _ = tcp.set_nodelay(true);
                    tcp
                }
                Err(err) => {
                    app.metrics.accept_failed();
                    errors.failed(&err);
                    continue;
                }
            },
            _ = tokio::time::sleep_until(paused.unwrap_or_else(tokio::time::Instant::now)), if paused.is_some() => {
                errors.paused_until = None;
                continue;
            }
        };
        // Closed at once (dropped) when refused.
        let Some(held) = descriptors.hold_network(&app.metrics, &shown) else {
            continue;
        };
        let (router, tls, shutdown) = (router.clone(), tls.clone(), shutdown.clone());
        connections.spawn(async move {
            let _held = held;
            match tls {
                None => serve_connection(tcp, router, header_timeout, shutdown).await,
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
                    let tls = tokio::select! {
                        done = handshake => done,
                        _ = shutdown.cancelled() => return,
                    };
                    if let Ok(Ok(tls)) = tls {
                        serve_connection(tls, router, header_timeout, shutdown).await;
                    }
                }
            }
        });
    }
    // Event streams end with the shutdown; other answers get the shutdown's grace.
    connections.close();
    if tokio::time::timeout(grace, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            "{} HTTP connections were still open after the shutdown grace of {grace:?}; closing them",
            connections.len()
        );
    }
}

/// A connection to this daemon inside the process, served by `connection::serve` like a
/// network one (so it must authenticate, and its token's grants apply), ending when its
/// client half is dropped or the daemon shuts down. `name` is the peer the log shows.
fn in_process(http: &Http, name: &str) -> Halves {
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let (reader, writer) = tokio::io::split(theirs);
    // No descriptor: poll(2) ignores a negative one, so only EOF ends it.
    let peer = Peer {
        fd: -1,
        name: name.into(),
        admin: false,
        // In-process: no descriptor, and authenticated by its first line.
        unproven: None,
        held: None,
    };
    tokio::spawn(connection::serve(
        reader,
        writer,
        peer,
        http.app.clone(),
        http.shutdown.clone(),
        http.shutdown.clone(),
    ));
    let (reader, writer) = tokio::io::split(ours);
    (Box::new(reader), Box::new(writer))
}

/// Serves one HTTP/1.1 connection until it closes, or gracefully until `shutdown`. A
/// request whose headers do not arrive within `header_timeout` closes the connection;
/// headers over [`MAX_HEADER_BYTES`] are 431.
async fn serve_connection<I>(
    io: I,
    router: axum::Router,
    header_timeout: Duration,
    shutdown: CancellationToken,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper_util::service::TowerToHyperService::new(router);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_HEADER_BYTES);
    let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// 413 at once for a request whose Content-Length is over [`MAX_BODY_BYTES`], whatever
/// its route (a body sent in chunks is cut at the limit by `DefaultBodyLimit`).
async fn limit_body(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return body_too_large();
    }
    next.run(request).await
}

/// Over HTTPS: browsers are to come back over HTTPS only, for a year.
async fn hsts(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::STRICT_TRANSPORT_SECURITY,
        header::HeaderValue::from_static("max-age=31536000"),
    );
    response
}

/// The answer to a body over [`MAX_BODY_BYTES`].
pub(super) fn body_too_large() -> Response {
    let mut response = refuse(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!(
            "the request body is over the limit of {MAX_BODY_BYTES} bytes (1 MiB); send a smaller request (page a long read with `limit` and `after`)"
        ),
    );
    // The rest of the body is not read: the connection cannot carry another request.
    response.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}

/// Whoever presented a valid token.
struct Visitor {
    token: String,
    /// The token's name (who or what it was made for).
    name: String,
    scopes: Scopes,
}

/// The token a request presents: `Authorization: Bearer`, else the session cookie.
fn presented(headers: &HeaderMap) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let Some(token) = bearer {
        return Some(token.trim().to_string());
    }
    cookie(headers, SESSION_COOKIE).map(str::to_string)
}

/// The value of a cookie the request carries.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value)
}

/// The visitor behind a request with a valid token (not revoked, not expired), else the
/// answer that refuses it: 401 saying `how` to present one, or 503 when the tokens cannot
/// be read.
fn authorized(http: &Http, headers: &HeaderMap, how: &str) -> Result<Visitor, Refused> {
    match presented(headers) {
        Some(token) => verify(http, token),
        None => Err(Refused::new(StatusCode::UNAUTHORIZED, how)),
    }
}

/// The visitor a token stands for, if it is valid; else 401 (or 503, see [`authorized`]).
fn verify(http: &Http, token: String) -> Result<Visitor, Refused> {
    match tokio::task::block_in_place(|| live_token(&http.app, &token)) {
        Ok(Some(found)) => Ok(Visitor {
            token,
            name: found.name,
            scopes: found.scopes,
        }),
        Ok(None) => {
            http.app.metrics.auth_failed();
            Err(Refused::new(
                StatusCode::UNAUTHORIZED,
                "the token is not valid (unknown, expired or revoked); ask for a new one (baton dashboard, or baton token create)",
            ))
        }
        Err(err) => Err(Refused::new(
            StatusCode::SERVICE_UNAVAILABLE,
            &err.to_string(),
        )),
    }
}

/// A request refused before it was served: its status and what to do about it.
struct Refused {
    status: StatusCode,
    message: String,
}

impl Refused {
    fn new(status: StatusCode, message: &str) -> Refused {
        Refused {
            status,
            message: message.to_string(),
        }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        refuse(self.status, &self.message)
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
