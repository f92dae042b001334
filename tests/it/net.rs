//! Helpers for network tests: a throw-away CA made in the test (rcgen), a daemon with
//! network listeners, and a line client over TCP or TLS.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use serde_json::{json, Value};

use crate::common::Daemon;

/// A CA and the PEM files it signed, in a temp dir of their own.
pub struct TestCa {
    pub dir: tempfile::TempDir,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let dir = tempfile::tempdir().unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).unwrap();
        TestCa {
            dir,
            issuer: Issuer::new(params, key),
        }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Signs a certificate for `names` (DNS names or IPs); writes `<file>.pem` and
    /// `<file>.key`; returns their paths.
    pub fn issue(&self, file: &str, names: &[&str], client: bool) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, file);
        if client {
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_path, key_path) = (
            self.dir.path().join(format!("{file}.pem")),
            self.dir.path().join(format!("{file}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }

    /// A server certificate for localhost and 127.0.0.1: `--tls-cert`, `--tls-key` args.
    pub fn server_args(&self) -> Vec<String> {
        let (cert, key) = self.issue("server", &["localhost", "127.0.0.1"], false);
        vec![
            "--tls-cert".into(),
            cert.display().to_string(),
            "--tls-key".into(),
            key.display().to_string(),
        ]
    }
}

/// Starts batond with a TLS listener on a free loopback port (plus `extra` args).
pub fn tls_daemon(ca: &TestCa, extra: &[&str]) -> Daemon {
    let mut args = vec!["--listen".to_string(), "tls://127.0.0.1:0".to_string()];
    args.extend(ca.server_args());
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Daemon::start_with(&args)
}

/// Starts batond with a plain TCP listener on a free loopback port.
pub fn tcp_daemon() -> Daemon {
    Daemon::start_with(&["--listen", "tcp://127.0.0.1:0"])
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// A line client over TCP or TLS.
pub struct NetClient {
    stream: BufReader<Box<dyn Stream>>,
    next_id: u64,
}

/// The rustls client configuration trusting `ca`, with an optional client certificate.
pub fn tls_config(ca: &Path, client: Option<(&Path, &Path)>) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            builder
                .with_client_auth_cert(certs, PrivateKeyDer::from_pem_file(key).unwrap())
                .unwrap()
        }
    })
}

impl NetClient {
    pub fn tcp(addr: SocketAddr) -> NetClient {
        NetClient::over(Box::new(TcpStream::connect(addr).expect("connect")))
    }

    /// Over TCP, with reads that fail (as a closed connection) after `timeout`.
    pub fn tcp_timeout(addr: SocketAddr, timeout: std::time::Duration) -> NetClient {
        let tcp = TcpStream::connect(addr).expect("connect");
        tcp.set_read_timeout(Some(timeout)).expect("a read timeout");
        NetClient::over(Box::new(tcp))
    }

    /// Connects with TLS, trusting `ca`; Err when the handshake fails.
    pub fn try_tls(
        addr: SocketAddr,
        config: Arc<rustls::ClientConfig>,
    ) -> std::io::Result<NetClient> {
        let tcp = TcpStream::connect(addr)?;
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(config, name).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        // Finish the handshake now, so a refusal shows here.
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock)?;
        }
        let mut client = NetClient::over(Box::new(tls));
        // TLS 1.3 servers check a client certificate after the client's handshake ends:
        // a refusal arrives with the first read.
        client.probe()?;
        Ok(client)
    }

    pub fn tls(addr: SocketAddr, ca: &Path) -> NetClient {
        NetClient::try_tls(addr, tls_config(ca, None)).expect("TLS connect")
    }

    fn over(stream: Box<dyn Stream>) -> NetClient {
        NetClient {
            stream: BufReader::new(stream),
            next_id: 1,
        }
    }

    /// One Health round trip; Err if the daemon closed the connection.
    fn probe(&mut self) -> std::io::Result<()> {
        self.send_line(r#"{"id":0,"method":"Health"}"#)?;
        let mut line = String::new();
        match self.stream.read_line(&mut line)? {
            0 => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "closed",
            )),
            _ => Ok(()),
        }
    }

    pub fn send_line(&mut self, line: &str) -> std::io::Result<()> {
        let inner = self.stream.get_mut();
        inner.write_all(format!("{line}\n").as_bytes())?;
        inner.flush()
    }

    /// Reads one line; None when the connection is closed or broken.
    pub fn try_read_line(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.stream.read_line(&mut line) {
            Ok(n) if n > 0 => Some(serde_json::from_str(&line).expect("JSON")),
            _ => None,
        }
    }

    /// Sends one request and returns the whole response object.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send_line(&json!({"id": id, "method": method, "params": params}).to_string())
            .expect("send");
        let response = self.try_read_line().expect("batond closed the connection");
        assert_eq!(response["id"], json!(id), "{response}");
        response
    }

    pub fn result(&mut self, method: &str, params: Value) -> Value {
        let response = self.call(method, params);
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("{method} failed: {response}"),
        }
    }

    pub fn error(&mut self, method: &str, params: Value) -> Value {
        let response = self.call(method, params);
        match response.get("error") {
            Some(error) => error.clone(),
            None => panic!("{method} should have failed: {response}"),
        }
    }

    pub fn authenticate(&mut self, token: &str) -> Value {
        self.result("Authenticate", json!({ "token": token }))
    }
}

/// Creates a token with `scopes` through the daemon's Unix socket (admin); returns the
/// whole CreateToken result.
pub fn create_token(daemon: &Daemon, name: &str, scopes: &[&str], ttl_secs: Option<u64>) -> Value {
    let mut params = json!({ "name": name, "scopes": scopes });
    if let Some(ttl) = ttl_secs {
        params["ttl_secs"] = json!(ttl);
    }
    daemon.client().result("CreateToken", params)
}

/// The secret of a new token with `scopes`.
pub fn token(daemon: &Daemon, scopes: &[&str]) -> String {
    create_token(daemon, "agent", scopes, None)["token"]
        .as_str()
        .unwrap()
        .to_string()
}
