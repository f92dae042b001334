//! The HTTP listener (`BATON_HTTP_LISTEN`: HTTPS with the TLS settings, or plain HTTP on
//! loopback): the dashboard (`dashboard`) and `/metrics` in the Prometheus text exposition
//! format (`metrics`). Every route needs a token: `Authorization: Bearer <token>`, or the
//! session cookie the dashboard's login sets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::methods::auth::token_scopes;
use crate::methods::scopes::Scopes;

mod dashboard;
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

/// Serves the dashboard and `/metrics` on `listener`, over TLS with `tls`, until
/// `shutdown`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Arc<App>,
    shutdown: CancellationToken,
) {
    let http = Arc::new(Http {
        app,
        shutdown: shutdown.clone(),
        tls: tls.is_some(),
    });
    let router = dashboard::routes()
        .route("/metrics", get(metrics::metrics))
        .with_state(http);
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

/// Whoever presented a valid token.
struct Visitor {
    token: String,
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
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.to_string())
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
    match tokio::task::block_in_place(|| token_scopes(&http.app, &token)) {
        Ok(Some(scopes)) => Ok(Visitor { token, scopes }),
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
