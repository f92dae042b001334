//! Network listeners (`BATON_LISTEN`): TLS with rustls, or plain TCP on loopback. Each
//! accepted stream is served by `connection::serve` exactly as a Unix-socket one, after the
//! TLS handshake; a network connection must authenticate before anything else.

use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Listen, TlsFiles};
use crate::log_limit::Limited;
use crate::methods::app::App;

use super::connection::{self, Peer};
use super::limits::{Descriptors, Unauthenticated, Unproven};
use super::{AcceptErrors, StartError};

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A bound network listener, not yet serving.
pub struct NetListener {
    listener: TcpListener,
    /// `tls://ADDR:PORT` with the port actually bound.
    pub shown: String,
    tls: Option<TlsAcceptor>,
}

fn network_error(message: String) -> StartError {
    StartError::Network(message)
}

fn read_pem(path: &Path, what: &str, setting: &str) -> Result<Vec<u8>, StartError> {
    std::fs::read(path).map_err(|e| {
        let fix = match e.kind() {
            ErrorKind::NotFound => {
                "create it (docs/operations.md, \"TLS and tokens\", shows how) or point"
            }
            ErrorKind::PermissionDenied => "let batond's user read it, or point",
            _ => "check it, or point",
        };
        network_error(format!(
            "cannot read the {what} {} ({e}); {fix} {setting} at the right PEM file",
            path.display()
        ))
    })
}

fn load_certs(
    path: &Path,
    what: &str,
    setting: &str,
) -> Result<Vec<CertificateDer<'static>>, StartError> {
    let pem = read_pem(path, what, setting)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            network_error(format!(
                "the {what} {} is not valid PEM ({e}); {setting} must name a PEM file of certificates (-----BEGIN CERTIFICATE-----)",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(network_error(format!(
            "the {what} {} holds no certificate; {setting} must name a PEM file with -----BEGIN CERTIFICATE----- blocks",
            path.display()
        )));
    }
    Ok(certs)
}

/// Builds the TLS server configuration from the PEM files; each failure says which file
/// and what to do.
pub(super) fn tls_acceptor(files: &TlsFiles) -> Result<TlsAcceptor, StartError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = load_certs(&files.cert, "certificate", "BATON_TLS_CERT")?;
    let key_pem = read_pem(&files.key, "private key", "BATON_TLS_KEY")?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        network_error(format!(
            "the private key {} is not a PEM private key ({e}); BATON_TLS_KEY must name a PEM file with a PKCS#8, PKCS#1 or SEC1 key",
            files.key.display()
        ))
    })?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| network_error(format!("cannot set up TLS: {e}")))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in load_certs(ca, "client CA", "BATON_TLS_CLIENT_CA")? {
                roots.add(cert).map_err(|e| {
                    network_error(format!(
                        "the client CA {} holds a certificate rustls cannot use ({e}); give BATON_TLS_CLIENT_CA the CA's certificate",
                        ca.display()
                    ))
                })?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .map_err(|e| {
                        network_error(format!(
                            "cannot verify clients with the CA {} ({e}); give BATON_TLS_CLIENT_CA a CA certificate",
                            ca.display()
                        ))
                    })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(certs, key).map_err(|e| {
        network_error(format!(
            "the certificate {} and the key {} cannot be used together ({e}); check that the key is the certificate's",
            files.cert.display(),
            files.key.display()
        ))
    })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Loads the TLS files and binds every configured listener.
pub fn bind_all(listen: &[Listen], tls: Option<&TlsFiles>) -> Result<Vec<NetListener>, StartError> {
    let acceptor = tls.map(tls_acceptor).transpose()?;
    let mut bound = Vec::new();
    for l in listen {
        let std_listener = std::net::TcpListener::bind(l.addr).map_err(|e| {
            let fix = match e.kind() {
                ErrorKind::AddrInUse => {
                    "stop what uses that port (`ss -ltnp`), or choose another port in BATON_LISTEN"
                }
                ErrorKind::PermissionDenied => {
                    "choose a port above 1023, or give batond the right to bind it"
                }
                ErrorKind::AddrNotAvailable => {
                    "use an address of this host, or 0.0.0.0 / [::] for all of them"
                }
                _ => "check the address in BATON_LISTEN",
            };
            network_error(format!("cannot listen on {l} ({e}); {fix}"))
        })?;
        let local = std_listener.local_addr().unwrap_or(l.addr);
        std_listener
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(std_listener))
            .map(|listener| {
                bound.push(NetListener {
                    listener,
                    shown: Listen {
                        tls: l.tls,
                        addr: local,
                    }
                    .to_string(),
                    tls: if l.tls { acceptor.clone() } else { None },
                })
            })
            .map_err(|e| {
                network_error(format!(
                    "cannot listen on {l} ({e}); check the address in BATON_LISTEN"
                ))
            })?;
    }
    Ok(bound)
}

/// Logs failed TLS handshakes at a bounded rate.
#[derive(Default)]
struct HandshakeLog(Limited);

impl HandshakeLog {
    fn failed(&self, peer: &str, listener: &str, err: &dyn std::fmt::Display) {
        self.0.report(|unlogged| {
            tracing::warn!(
                peer,
                "TLS handshake on {listener} failed: {err} ({unlogged} more since the last report); a client must connect with tls:// and trust batond's certificate (BATON_TLS_CA)",
            )
        });
    }
}

/// Accepts connections on `net` until shutdown; each is served on `connections`. A
/// connection is closed at once when batond is near its open-file limit (`descriptors`)
/// or the listener holds `BATON_MAX_UNAUTHENTICATED` connections that have not
/// authenticated; the others must authenticate within `BATON_AUTH_TIMEOUT_MS`.
pub async fn serve(
    net: NetListener,
    app: Arc<App>,
    descriptors: Arc<Descriptors>,
    connections: TaskTracker,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
) {
    let shown: Arc<str> = net.shown.into();
    let handshakes = Arc::new(HandshakeLog::default());
    let unauthenticated = Unauthenticated::new(app.config.max_unauthenticated);
    let auth_timeout = Duration::from_millis(app.config.auth_timeout_ms);
    let mut errors = AcceptErrors::new();
    loop {
        let paused = errors.paused_until;
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = net.listener.accept(), if paused.is_none() => match accepted {
                Ok((tcp, peer)) => {
                    errors.succeeded();
                    let connected = tokio::time::Instant::now();
                    let peer = peer.to_string();
                    // Closed at once (dropped) when refused.
                    let Some(held) = descriptors.hold_network(&app.metrics, &shown) else { continue };
                    let Some(slot) = unauthenticated.take(&app.metrics, &shown, &peer) else { continue };
                    let unproven = Unproven { deadline: connected + auth_timeout, timeout: auth_timeout, _slot: slot };
                    // Answers are small lines: send each at once.
                    let _ = tcp.set_nodelay(true);
                    let peer = Peer {
                        fd: tcp.as_raw_fd(),
                        name: peer,
                        admin: false,
                        unproven: Some(unproven),
                        held: Some(held),
                    };
                    let (app, shutdown, hard_stop) = (app.clone(), shutdown.clone(), hard_stop.clone());
                    match net.tls.clone() {
                        None => {
                            let (reader, writer) = tcp.into_split();
                            connections.spawn(connection::serve(reader, writer, peer, app, shutdown, hard_stop));
                        }
                        Some(acceptor) => {
                            let (shown, handshakes) = (shown.clone(), handshakes.clone());
                            // The handshake counts against the time to authenticate.
                            let limit = HANDSHAKE_TIMEOUT.min(auth_timeout);
                            connections.spawn(async move {
                                let handshake = tokio::time::timeout(limit, acceptor.accept(tcp));
                                let tls = tokio::select! {
                                    done = handshake => done,
                                    _ = shutdown.cancelled() => return,
                                };
                                match tls {
                                    Ok(Ok(tls)) => {
                                        let (reader, writer) = tokio::io::split(tls);
                                        connection::serve(reader, writer, peer, app, shutdown, hard_stop).await;
                                    }
                                    Ok(Err(err)) => handshakes.failed(&peer.name, &shown, &err),
                                    Err(_) => handshakes.failed(&peer.name, &shown, &format!("no handshake within {} ms", limit.as_millis())),
                                }
                            });
                        }
                    }
                }
                Err(err) => {
                    app.metrics.accept_failed();
                    errors.failed(&err);
                }
            },
            _ = tokio::time::sleep_until(paused.unwrap_or_else(tokio::time::Instant::now)), if paused.is_some() => {
                errors.paused_until = None;
            }
        }
    }
}
