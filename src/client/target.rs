//! Where a client connects and as whom: [`Endpoint`] (a Unix socket, TCP on loopback, or
//! TLS) and [`Target`] (the endpoint, the token, the CA that signs batond's certificate).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Where batond is: its Unix socket, or a network address (plain TCP on loopback, or TLS),
/// or inside this very process (batond's own `/mcp`, whose bridge is a client of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    Tcp { host: String, port: u16 },
    Tls { host: String, port: u16 },
    InProcess(Dialer),
}

/// The two halves of a byte stream to batond.
pub type Halves = (
    Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
);

/// Opens a connection to the batond this process runs: whoever makes one (the server)
/// serves the other end like any accepted connection, so it authenticates like one.
#[derive(Clone)]
pub struct Dialer(Arc<dyn Fn() -> std::io::Result<Halves> + Send + Sync>);

impl Dialer {
    pub fn new(dial: impl Fn() -> std::io::Result<Halves> + Send + Sync + 'static) -> Dialer {
        Dialer(Arc::new(dial))
    }

    pub fn dial(&self) -> std::io::Result<Halves> {
        (self.0)()
    }
}

impl PartialEq for Dialer {
    fn eq(&self, other: &Dialer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Dialer {}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dialer")
    }
}

impl Endpoint {
    /// Reads `unix:///PATH`, `tcp://HOST:PORT` or `tls://HOST:PORT`.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let bad = || {
            format!(
                "`{url}` is not a batond URL; write unix:///path/to/baton.sock, tls://HOST:PORT or tcp://127.0.0.1:PORT"
            )
        };
        if let Some(path) = url.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(bad());
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        let (tls, rest) = match (url.strip_prefix("tls://"), url.strip_prefix("tcp://")) {
            (Some(rest), _) => (true, rest),
            (_, Some(rest)) => (false, rest),
            _ => return Err(bad()),
        };
        let rest = rest.trim_end_matches('/');
        let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port: u16 = port.parse().map_err(|_| bad())?;
        if host.is_empty() {
            return Err(bad());
        }
        let host = host.to_string();
        Ok(if tls {
            Endpoint::Tls { host, port }
        } else {
            Endpoint::Tcp { host, port }
        })
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = |h: &str| {
            if h.contains(':') {
                format!("[{h}]")
            } else {
                h.to_string()
            }
        };
        match self {
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            Endpoint::Tcp { host: h, port } => write!(f, "tcp://{}:{port}", host(h)),
            Endpoint::Tls { host: h, port } => write!(f, "tls://{}:{port}", host(h)),
            Endpoint::InProcess(_) => f.write_str("batond (in process)"),
        }
    }
}

/// How to reach batond, and as whom: an endpoint, a token to authenticate with, and the
/// CA that signs batond's certificate (else the system's roots).
#[derive(Clone)]
pub struct Target {
    pub endpoint: Endpoint,
    pub token: Option<String>,
    pub tls_ca: Option<PathBuf>,
    /// A client certificate and key (PEM), for a daemon that requires one.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    connector: Arc<OnceLock<tokio_rustls::TlsConnector>>,
}

impl std::fmt::Debug for Target {
    /// Never the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("tls_ca", &self.tls_ca)
            .finish()
    }
}

impl Target {
    pub fn new(endpoint: Endpoint, token: Option<String>) -> Target {
        Target {
            endpoint,
            token: token.filter(|t| !t.is_empty()),
            tls_ca: None,
            client_cert: None,
            connector: Default::default(),
        }
    }

    /// From a client's flags and the environment: `--url`, else `--socket`, else
    /// `BATON_URL`, else the Unix socket as batond resolves it; the token from `--token`,
    /// else `BATON_TOKEN`; `BATON_TLS_CA`, `BATON_TLS_CLIENT_CERT` and `BATON_TLS_CLIENT_KEY`
    /// from the environment.
    pub fn from_flags(
        url: Option<&str>,
        socket: Option<&str>,
        token: Option<&str>,
    ) -> Result<Target, String> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let url = url.filter(|u| !u.is_empty()).map(str::to_string);
        let socket = socket.filter(|s| !s.is_empty());
        let endpoint = match (url, socket, env("BATON_URL")) {
            (Some(url), _, _) => Endpoint::parse(&url).map_err(|e| format!("--url: {e}"))?,
            (None, Some(socket), _) => Endpoint::Unix(
                crate::config::Config::client_socket(Some(socket)).map_err(|e| e.to_string())?,
            ),
            (None, None, Some(url)) => {
                Endpoint::parse(&url).map_err(|e| format!("BATON_URL: {e}"))?
            }
            (None, None, None) => Endpoint::Unix(
                crate::config::Config::client_socket(None).map_err(|e| e.to_string())?,
            ),
        };
        let token = token
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .or_else(|| env("BATON_TOKEN"));
        let mut target = Target::new(endpoint, token);
        target.tls_ca = env("BATON_TLS_CA").map(PathBuf::from);
        target.client_cert = match (env("BATON_TLS_CLIENT_CERT"), env("BATON_TLS_CLIENT_KEY")) {
            (Some(cert), Some(key)) => Some((cert.into(), key.into())),
            (None, None) => None,
            _ => return Err(
                "set both BATON_TLS_CLIENT_CERT and BATON_TLS_CLIENT_KEY (PEM files), or neither"
                    .into(),
            ),
        };
        Ok(target)
    }

    /// The TLS connector, built once per target: trusts `tls_ca`, else the system's roots.
    pub(super) fn tls_connector(&self) -> std::io::Result<tokio_rustls::TlsConnector> {
        if let Some(connector) = self.connector.get() {
            return Ok(connector.clone());
        }
        let invalid = |msg: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, msg);
        let mut roots = rustls::RootCertStore::empty();
        match &self.tls_ca {
            Some(ca) => {
                for cert in read_certs(ca, "BATON_TLS_CA")? {
                    roots
                        .add(cert)
                        .map_err(|e| invalid(format!("BATON_TLS_CA {}: {e}", ca.display())))?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(invalid(
                        "this system has no trusted CA certificates; set BATON_TLS_CA to the PEM file of the CA that signed batond's certificate".into(),
                    ));
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(e.to_string()))?
            .with_root_certificates(roots);
        let config = match &self.client_cert {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                use rustls::pki_types::pem::PemObject;
                let certs = read_certs(cert, "BATON_TLS_CLIENT_CERT")?;
                let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    invalid(format!(
                        "BATON_TLS_CLIENT_KEY {} is not a readable PEM private key ({e})",
                        key.display()
                    ))
                })?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| invalid(format!("the client certificate and key: {e}")))?
            }
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        Ok(self.connector.get_or_init(|| connector).clone())
    }
}

/// The certificates of a PEM file named by `setting`.
fn read_certs(
    path: &Path,
    setting: &str,
) -> std::io::Result<Vec<rustls::pki_types::CertificateDer<'static>>> {
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(path).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot read {setting} {} ({e})", path.display()),
        )
    })?;
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{setting} {} is not PEM certificates ({e})", path.display()),
            )
        })?;
    if certs.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{setting} {} holds no certificate", path.display()),
        ));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_print_back() {
        for url in [
            "unix:///run/baton.sock",
            "tls://coord.example:7420",
            "tcp://127.0.0.1:7420",
            "tls://[::1]:7420",
        ] {
            assert_eq!(Endpoint::parse(url).unwrap().to_string(), url);
        }
        for bad in [
            "http://x:1",
            "tls://x",
            "tls://:1",
            "unix://rel",
            "tcp://h:port",
        ] {
            let err = Endpoint::parse(bad).unwrap_err();
            assert!(err.contains("tls://HOST:PORT"), "{bad}: {err}");
        }
    }

    #[test]
    fn debug_never_shows_the_token() {
        let target = Target::new(
            Endpoint::parse("tls://h:1").unwrap(),
            Some("baton_s3cret".into()),
        );
        assert!(!format!("{target:?}").contains("s3cret"));
    }
}
