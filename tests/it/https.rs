//! `/metrics` over HTTPS with the TLS settings: a client that trusts the CA reads the
//! Prometheus text with a token of the `metrics` grant, and is refused without one; every
//! answer carries HSTS.

use std::io::{Read, Write};
use std::net::TcpStream;

use crate::common::Daemon;
use crate::net::{tls_config, token, TestCa};

/// One HTTP/1.1 GET over TLS; the whole response.
fn get(port: u16, ca: &TestCa, path: &str, bearer: Option<&str>) -> String {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(tls_config(&ca.ca(), None), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let auth = bearer.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    // The server closes the TLS session after the answer; an unclean close is fine here.
    let _ = tls.read_to_string(&mut response);
    response
}

/// batond with an HTTPS listener on a free loopback port (certificate from `ca`), plus
/// `env`; and the port.
fn https_daemon(ca: &TestCa, env: &[(&str, &str)]) -> (Daemon, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut args = vec!["--http".to_string(), format!("https://127.0.0.1:{port}")];
    args.extend(ca.server_args());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (Daemon::start_with_env(&args, env, None), port)
}

#[test]
fn metrics_over_https_with_a_metrics_token_and_hsts() {
    let ca = TestCa::new("metrics");
    let (daemon, port) = https_daemon(&ca, &[]);
    let admin = token(&daemon, &["metrics"]);
    let refused = get(port, &ca, "/metrics", None);
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let reader = token(&daemon, &["read"]);
    let refused = get(port, &ca, "/metrics", Some(&reader));
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(refused.contains("--scope metrics"), "{refused}");
    let answer = get(port, &ca, "/metrics", Some(&admin));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    for path in ["/metrics", "/", "/login"] {
        let answer = get(port, &ca, path, None);
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("\r\nstrict-transport-security: max-age=31536000"),
            "{path}: {answer}"
        );
    }
    assert!(
        answer.contains("# TYPE baton_requests_total counter"),
        "{answer}"
    );
    assert!(!answer.contains(&admin), "no secret in the figures");
}

#[test]
fn https_headers_that_never_finish_are_closed() {
    let ca = TestCa::new("slow");
    let (_daemon, port) = https_daemon(&ca, &[("BATON_HTTP_HEADER_TIMEOUT_MS", "300")]);
    let mut sessions: Vec<_> = (0..10)
        .map(|_| {
            let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
            tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .unwrap();
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let conn = rustls::ClientConnection::new(tls_config(&ca.ca(), None), name).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            tls.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
                .unwrap();
            tls.flush().unwrap();
            tls
        })
        .collect();
    for tls in &mut sessions {
        let mut rest = Vec::new();
        match tls.read_to_end(&mut rest) {
            Ok(_) => {}
            // Closed without close_notify, or reset: closed all the same.
            Err(e)
                if e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("still open: {e}"),
        }
    }
}
