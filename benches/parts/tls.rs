//! TLS on loopback against the Unix socket, measured on one daemon in the same run with the
//! same client code: sequential Get round trips, and durable compare-and-set from 64
//! connections. Certificates come from a throw-away CA (rcgen); clients authenticate with
//! a token as remote agents do.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt};

use super::{field, percentile, start_daemon_with, Row};

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

type AsyncReader = Box<dyn AsyncRead + Send + Unpin>;
type AsyncWriter = Box<dyn AsyncWrite + Send + Unpin>;

/// Where to connect, and the token to send first.
#[derive(Clone)]
enum Via {
    Unix(std::path::PathBuf),
    /// Plain TCP on loopback: shows what TCP alone costs beside TLS.
    Tcp {
        addr: SocketAddr,
        token: String,
    },
    Tls {
        addr: SocketAddr,
        config: Arc<rustls::ClientConfig>,
        token: String,
    },
}

impl Via {
    fn name() -> rustls::pki_types::ServerName<'static> {
        rustls::pki_types::ServerName::try_from("localhost").unwrap()
    }

    fn token(&self) -> Option<&str> {
        match self {
            Via::Unix(_) => None,
            Via::Tcp { token, .. } | Via::Tls { token, .. } => Some(token),
        }
    }

    fn blocking(&self) -> BufReader<Box<dyn Stream>> {
        match self {
            Via::Unix(path) => BufReader::new(Box::new(
                std::os::unix::net::UnixStream::connect(path).unwrap(),
            )),
            Via::Tcp { addr, token } => {
                let tcp = std::net::TcpStream::connect(addr).unwrap();
                tcp.set_nodelay(true).unwrap();
                let mut stream: BufReader<Box<dyn Stream>> = BufReader::new(Box::new(tcp));
                let auth = format!(
                    "{{\"id\":0,\"method\":\"Authenticate\",\"params\":{{\"token\":\"{token}\"}}}}\n"
                );
                stream.get_mut().write_all(auth.as_bytes()).unwrap();
                let mut answer = String::new();
                stream.read_line(&mut answer).unwrap();
                assert!(answer.contains("\"result\""), "{answer}");
                stream
            }
            Via::Tls {
                addr,
                config,
                token,
            } => {
                let tcp = std::net::TcpStream::connect(addr).unwrap();
                tcp.set_nodelay(true).unwrap();
                let conn = rustls::ClientConnection::new(config.clone(), Via::name()).unwrap();
                let mut stream: BufReader<Box<dyn Stream>> =
                    BufReader::new(Box::new(rustls::StreamOwned::new(conn, tcp)));
                let auth = format!(
                    "{{\"id\":0,\"method\":\"Authenticate\",\"params\":{{\"token\":\"{token}\"}}}}\n"
                );
                stream.get_mut().write_all(auth.as_bytes()).unwrap();
                stream.get_mut().flush().unwrap();
                let mut answer = String::new();
                stream.read_line(&mut answer).unwrap();
                assert!(answer.contains("\"result\""), "{answer}");
                stream
            }
        }
    }

    async fn open(
        &self,
    ) -> (
        tokio::io::Lines<tokio::io::BufReader<AsyncReader>>,
        AsyncWriter,
    ) {
        let (reader, mut writer): (AsyncReader, AsyncWriter) = match self {
            Via::Unix(path) => {
                let (r, w) = tokio::net::UnixStream::connect(path)
                    .await
                    .unwrap()
                    .into_split();
                (Box::new(r), Box::new(w))
            }
            Via::Tcp { addr, .. } => {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                tcp.set_nodelay(true).unwrap();
                let (r, w) = tcp.into_split();
                (Box::new(r), Box::new(w))
            }
            Via::Tls { addr, config, .. } => {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                tcp.set_nodelay(true).unwrap();
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(Via::name(), tcp)
                    .await
                    .unwrap();
                let (r, w) = tokio::io::split(tls);
                (Box::new(r), Box::new(w))
            }
        };
        let mut lines = tokio::io::BufReader::new(reader).lines();
        if let Some(token) = self.token() {
            let auth = format!(
                "{{\"id\":0,\"method\":\"Authenticate\",\"params\":{{\"token\":\"{token}\"}}}}\n"
            );
            writer.write_all(auth.as_bytes()).await.unwrap();
            writer.flush().await.unwrap();
            let answer = lines.next_line().await.unwrap().unwrap();
            assert!(answer.contains("\"result\""), "{answer}");
        }
        (lines, writer)
    }
}

/// Median round trip, in microseconds, of `n` sequential requests of `line`.
fn sequential(via: &Via, line: &[u8], n: usize, errors: &mut u64) -> f64 {
    let mut stream = via.blocking();
    let mut answer = String::new();
    let mut samples: Vec<Duration> = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        answer.clear();
        let start = Instant::now();
        stream.get_mut().write_all(line).unwrap();
        stream.get_mut().flush().unwrap();
        stream.read_line(&mut answer).unwrap();
        if i >= n / 10 {
            samples.push(start.elapsed());
        }
        if answer.contains("\"error\"") {
            *errors += 1;
        }
    }
    samples.sort();
    percentile(&samples, 0.5)
}

/// Sets per second from `conns` connections each doing compare-and-set on its own key.
async fn cas(via: &Via, tag: &str, conns: usize, per_conn: usize) -> (f64, u64) {
    let mut opened = Vec::new();
    for _ in 0..conns {
        opened.push(via.open().await);
    }
    let start = Instant::now();
    let tasks: Vec<_> = opened
        .into_iter()
        .enumerate()
        .map(|(c, (mut lines, mut w))| {
            let tag = tag.to_string();
            tokio::spawn(async move {
                let (mut version, mut errors) = (0u64, 0u64);
                for i in 0..per_conn {
                    let line = format!(
                        "{{\"id\":{i},\"method\":\"Set\",\"params\":{{\"namespace\":\"bench\",\"key\":\"{tag}-{c}\",\"value\":{i},\"expected_version\":{version}}}}}\n"
                    );
                    w.write_all(line.as_bytes()).await.unwrap();
                    w.flush().await.unwrap();
                    let answer = lines.next_line().await.unwrap().expect("an answer");
                    match field(&answer, "\"version\":").and_then(|v| v.parse::<u64>().ok()) {
                        Some(v) => version = v,
                        None => errors += 1,
                    }
                }
                errors
            })
        })
        .collect();
    let mut errors = 0;
    for t in tasks {
        errors += t.await.unwrap();
    }
    let rate = (conns * per_conn) as f64 / start.elapsed().as_secs_f64();
    (rate, errors)
}

/// CPU seconds (user and system) process `pid` has used so far.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at field 3.
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf only reads a constant.
    let per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / per_sec
}

/// A CA, a server certificate for localhost signed by it, and the client configuration
/// that trusts the CA.
fn certificates(dir: &Path) -> (Vec<String>, Arc<rustls::ClientConfig>) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let (cert_path, key_path) = (dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca_cert.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let args = vec![
        "--listen".to_string(),
        "tls://127.0.0.1:0,tcp://127.0.0.1:0".to_string(),
        "--tls-cert".to_string(),
        cert_path.display().to_string(),
        "--tls-key".to_string(),
        key_path.display().to_string(),
    ];
    (args, Arc::new(config))
}

/// Adds the TLS rows: Get median and CAS rate over TLS as ratios of the Unix socket's.
pub async fn compare(rows: &mut Vec<Row>, errors: &mut u64, n_seq: usize, cas_per_conn: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (args, config) = certificates(dir.path());
    let (mut daemon, log) = start_daemon_with(dir.path(), &args);
    let listening = |scheme: &str| -> SocketAddr {
        log.iter()
            .find_map(|l| l.split(&format!("serving {scheme}://")).nth(1))
            .and_then(|rest| rest.split(' ').next())
            .and_then(|a| a.parse().ok())
            .expect("the listener's address in the log")
    };
    let addr = listening("tls");
    let unix = Via::Unix(dir.path().join("home/baton.sock"));
    // A token as narrow as an agent's: this namespace only.
    let token = {
        let mut admin = unix.blocking();
        admin
            .get_mut()
            .write_all(b"{\"id\":1,\"method\":\"CreateToken\",\"params\":{\"name\":\"bench\",\"scopes\":[\"kv:write:bench\"]}}\n")
            .unwrap();
        let mut answer = String::new();
        admin.read_line(&mut answer).unwrap();
        let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
        answer["result"]["token"]
            .as_str()
            .expect("a token")
            .to_string()
    };
    let tcp = Via::Tcp {
        addr: listening("tcp"),
        token: token.clone(),
    };
    let tls = Via::Tls {
        addr,
        config,
        token,
    };
    let set: &[u8] = b"{\"id\":0,\"method\":\"Set\",\"params\":{\"namespace\":\"bench\",\"key\":\"small\",\"value\":{\"usd\":10000}}}\n";
    sequential(&unix, set, 1, errors);
    let get: &[u8] =
        b"{\"id\":1,\"method\":\"Get\",\"params\":{\"namespace\":\"bench\",\"key\":\"small\"}}\n";
    let (unix_get, tls_get) = tokio::task::block_in_place(|| {
        (
            sequential(&unix, get, n_seq, errors),
            sequential(&tls, get, n_seq, errors),
        )
    });
    rows.push(Row {
        name: "sequential Get, TLS vs Unix socket",
        figure: format!(
            "p50 {tls_get:.1} us vs {unix_get:.1} us ({:.2}x)",
            tls_get / unix_get
        ),
        target: "<= 1.5x".into(),
        pass: Some(tls_get <= 1.5 * unix_get),
    });
    // batond's own CPU per Set on each transport: client and daemon share this machine's
    // cores, so the rates also carry the client's TCP and TLS costs; this does not.
    let pid = daemon.id();
    let per_set = |before: f64| (cpu_secs(pid) - before) * 1e6 / (64 * cas_per_conn) as f64;
    let before = cpu_secs(pid);
    let (unix_cas, e1) = cas(&unix, "unix", 64, cas_per_conn).await;
    let unix_cpu = per_set(before);
    let before = cpu_secs(pid);
    let (tcp_cas, e2) = cas(&tcp, "tcp", 64, cas_per_conn).await;
    let tcp_cpu = per_set(before);
    let before = cpu_secs(pid);
    let (tls_cas, e3) = cas(&tls, "tls", 64, cas_per_conn).await;
    let tls_cpu = per_set(before);
    *errors += e1 + e2 + e3;
    rows.push(Row {
        name: "batond CPU per CAS Set: Unix, TCP, TLS",
        figure: format!(
            "{unix_cpu:.1} us, {tcp_cpu:.1} us ({:.2}x), {tls_cpu:.1} us ({:.2}x)",
            tcp_cpu / unix_cpu,
            tls_cpu / unix_cpu
        ),
        target: "-".into(),
        pass: None,
    });
    rows.push(Row {
        name: "durable CAS, 64 conns, TCP vs Unix",
        figure: format!(
            "{tcp_cas:.0} /s vs {unix_cas:.0} /s ({:.2}x)",
            tcp_cas / unix_cas
        ),
        target: "-".into(),
        pass: None,
    });
    rows.push(Row {
        name: "durable CAS, 64 conns, TLS vs Unix",
        figure: format!(
            "{tls_cas:.0} /s vs {unix_cas:.0} /s ({:.2}x)",
            tls_cas / unix_cas
        ),
        target: ">= 0.8x".into(),
        pass: Some(tls_cas >= 0.8 * unix_cas),
    });
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let _ = daemon.wait();
}
