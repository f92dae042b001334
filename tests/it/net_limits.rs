//! What a network or HTTP client may take before it authenticates (contract v1.2, "Trust on
//! every surface"): short lines, a deadline to authenticate, a cap per listener, HTTP
//! headers within a deadline and a size, bodies within 1 MiB, and the descriptors the Unix
//! socket needs kept back. Floods stay on loopback and bounded in count.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{assert_error, Daemon};
use crate::net::{token, NetClient};

/// How long a test waits for what should come at once (or after a short deadline) before
/// it fails instead of hanging; never what it asserts on.
const PATIENCE: Duration = Duration::from_secs(30);

fn tcp_daemon_with(env: &[(&str, &str)]) -> Daemon {
    Daemon::start_with_env(&["--listen", "tcp://127.0.0.1:0"], env, None)
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream
}

/// Reads lines until the daemon closes the connection; the lines. Fails the test if it is
/// still open after [`PATIENCE`].
fn lines_until_closed(stream: &TcpStream) -> Vec<Value> {
    let mut reader = BufReader::new(stream);
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => return lines,
            Ok(_) => lines.push(serde_json::from_str(&line).expect("JSON")),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return lines,
            Err(e) => panic!("the connection was not closed ({e}); lines so far: {lines:?}"),
        }
    }
}

/// One request line on a raw stream, and its answer.
fn call(stream: &mut TcpStream, method: &str, params: Value) -> Value {
    writeln!(
        stream,
        "{}",
        json!({"id": 1, "method": method, "params": params})
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(&*stream)
        .read_line(&mut line)
        .expect("an answer");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
}

fn metrics(daemon: &Daemon) -> Value {
    daemon.client().result("Metrics", json!({}))
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[test]
fn before_authenticate_a_line_over_64_kib_is_refused_and_the_connection_closed() {
    let daemon = tcp_daemon_with(&[]);
    let good = token(&daemon, &["kv:write:*"]);
    let mut stream = connect(daemon.listening("tcp"));
    // 1 MiB without a newline: refused once 64 KiB are in, not buffered to the end.
    let _ = stream.write_all(&vec![b'x'; 1 << 20]);
    let lines = lines_until_closed(&stream);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let data = assert_error(&lines[0]["error"], -32001, "request_too_large");
    assert_eq!(data["limit"], 65536, "{lines:?}");
    assert!(
        lines[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("authenticate first"),
        "{lines:?}"
    );

    // Once authenticated, the full limit (BATON_MAX_LINE_BYTES) applies.
    let mut client = NetClient::tcp(daemon.listening("tcp"));
    client.authenticate(&good);
    let big = "v".repeat(200 * 1024);
    let set = client.result("Set", json!({"namespace": "a", "key": "k", "value": big}));
    assert_eq!(set["version"], 1);
}

#[test]
fn a_flood_of_unauthenticated_megabyte_lines_holds_little_memory() {
    let daemon = tcp_daemon_with(&[]);
    let addr = daemon.listening("tcp");
    let before = rss_kib(daemon.pid());
    let chunk = vec![b'x'; 1 << 20];
    // 200 connections, each sending 1 MiB without a newline, all kept open on our side.
    let streams: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut stream = connect(addr);
            let _ = stream.write_all(&chunk);
            stream
        })
        .collect();
    for stream in &streams {
        lines_until_closed(stream);
    }
    let after = rss_kib(daemon.pid());
    let grown_mib = after.saturating_sub(before) / 1024;
    println!(
        "200 unauthenticated connections x 1 MiB: batond's RSS {} MiB -> {} MiB (+{grown_mib} MiB)",
        before / 1024,
        after / 1024
    );
    // Each was closed after 64 KiB; before the limit, they held 221 MiB.
    assert!(grown_mib < 64, "RSS grew by {grown_mib} MiB");
    assert_eq!(daemon.client().result("Health", json!({}))["status"], "ok");
}

#[test]
fn a_connection_that_does_not_authenticate_in_time_is_closed() {
    let daemon = tcp_daemon_with(&[("BATON_AUTH_TIMEOUT_MS", "300")]);
    let addr = daemon.listening("tcp");
    let good = token(&daemon, &["kv:read:*"]);
    let mut authenticated = NetClient::tcp(addr);
    authenticated.authenticate(&good);

    let mut idle = connect(addr);
    // Public methods answer meanwhile, but do not extend the deadline.
    assert_eq!(
        call(&mut idle, "Health", json!({}))["result"]["status"],
        "ok"
    );
    let lines = lines_until_closed(&idle);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_error(&lines[0]["error"], 401, "unauthenticated");
    assert!(
        lines[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("BATON_AUTH_TIMEOUT_MS"),
        "{lines:?}"
    );
    assert_eq!(metrics(&daemon)["connections"]["auth_timeouts"], 1);
    assert!(
        daemon.wait_for_log("did not authenticate within 300 ms", PATIENCE),
        "{}",
        daemon.log()
    );

    // The one that authenticated, connected earlier, is past the same deadline and served.
    authenticated.result("Get", json!({"namespace": "a", "key": "b"}));
}

#[test]
fn an_unauthenticated_client_that_does_not_read_is_closed_at_its_deadline_too() {
    let daemon = tcp_daemon_with(&[("BATON_AUTH_TIMEOUT_MS", "300")]);
    let stream = connect(daemon.listening("tcp"));
    // Large public answers, never read: batond's writes to it block.
    let mut sender = stream.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        let line = format!("{}\n", json!({"id": 1, "method": "DescribeInterface"}));
        for _ in 0..2000 {
            if sender.write_all(line.as_bytes()).is_err() {
                break;
            }
        }
    });
    let mut admin = daemon.client();
    let deadline = std::time::Instant::now() + PATIENCE;
    while admin.result("Metrics", json!({}))["connections"]["auth_timeouts"] != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the connection that does not read is still open"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stream);
    sending.join().unwrap();
}

#[test]
fn a_listener_holds_at_most_max_unauthenticated_connections() {
    let daemon = tcp_daemon_with(&[("BATON_MAX_UNAUTHENTICATED", "4")]);
    let addr = daemon.listening("tcp");
    let good = token(&daemon, &["kv:read:*"]);
    let mut waiting: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut stream = connect(addr);
            assert_eq!(
                call(&mut stream, "Health", json!({}))["result"]["status"],
                "ok"
            );
            stream
        })
        .collect();
    // The fifth is closed at once, and counted.
    let fifth = connect(addr);
    assert!(lines_until_closed(&fifth).is_empty());
    assert_eq!(
        metrics(&daemon)["connections"]["refused_unauthenticated"],
        1
    );
    // One that authenticates frees its place.
    let answer = call(&mut waiting[0], "Authenticate", json!({"token": good}));
    assert!(answer.get("result").is_some(), "{answer}");
    let mut next = connect(addr);
    assert_eq!(
        call(&mut next, "Health", json!({}))["result"]["status"],
        "ok"
    );
    assert!(
        daemon.wait_for_log("connections.refused_unauthenticated", PATIENCE),
        "{}",
        daemon.log()
    );
}

#[test]
fn a_network_flood_at_the_open_file_limit_leaves_the_unix_socket_served() {
    const NOFILE: u64 = 300;
    // The cap per listener out of the way: the descriptors are what runs out.
    let daemon = Daemon::start_with_env(
        &["--listen", "tcp://127.0.0.1:0"],
        &[("BATON_MAX_UNAUTHENTICATED", "100000")],
        Some(NOFILE),
    );
    let addr = daemon.listening("tcp");
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..400 {
        let mut stream = connect(addr);
        // A round trip: batond has taken (or refused) this one before the next.
        let served = writeln!(stream, r#"{{"id":1,"method":"Health"}}"#).is_ok() && {
            let mut line = String::new();
            matches!(BufReader::new(&stream).read_line(&mut line), Ok(n) if n > 0)
        };
        if served {
            held.push(stream);
        } else {
            refused += 1;
        }
    }
    println!(
        "RLIMIT_NOFILE {NOFILE}: {} of 400 unauthenticated TCP connections held, {refused} closed at once",
        held.len()
    );
    assert!(refused > 0, "all 400 held under a limit of {NOFILE}");
    // The Unix socket is still served, by a few clients at once.
    let mut admins: Vec<_> = (0..16).map(|_| daemon.client()).collect();
    for admin in &mut admins {
        admin.set_read_timeout(PATIENCE);
        admin.send_line(r#"{"id":1,"method":"Health"}"#);
        let answer = admin.try_read_line().expect("the Unix socket is served");
        assert_eq!(answer["result"]["status"], "ok", "{answer}");
    }
    let m = metrics(&daemon);
    assert_eq!(m["connections"]["refused_descriptors"], refused, "{m}");
    assert!(daemon.wait_for_log("keeps the last", PATIENCE));
    let warnings = daemon
        .log()
        .lines()
        .filter(|l| l.contains("keeps the last"))
        .count();
    assert!(
        (1..=2).contains(&warnings),
        "{warnings} warnings for {refused} refusals"
    );
}

// ---- HTTP(S) ----

/// A daemon serving HTTP on a free loopback port; its address.
pub fn http_daemon(env: &[(&str, &str)]) -> (Daemon, SocketAddr) {
    let daemon = Daemon::start_with_env(&["--http", "http://127.0.0.1:0"], env, None);
    let log = daemon.log();
    let marker = "serving the dashboard at http://";
    let at = log.find(marker).expect("the dashboard's address") + marker.len();
    let addr = log[at..].split('/').next().unwrap().parse().unwrap();
    (daemon, addr)
}

/// One HTTP/1.1 request with `Connection: close` (a POST's body of `content_type`); the
/// whole answer, read until the server closes.
pub fn http_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[String],
    content_type: &str,
    body: &str,
) -> String {
    use std::io::Write;
    let mut stream = connect(addr);
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    if method == "POST" {
        request.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    read_until_closed(&mut stream)
}

/// Reads what the server sends until it closes; fails the test if it does not.
pub fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    match stream.read_to_end(&mut answer) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!(
            "not closed ({e}); so far: {}",
            String::from_utf8_lossy(&answer)
        ),
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn http_headers_that_never_finish_are_closed() {
    let (_daemon, addr) = http_daemon(&[("BATON_HTTP_HEADER_TIMEOUT_MS", "300")]);
    let mut streams: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut stream = connect(addr);
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
                .unwrap();
            stream
        })
        .collect();
    for stream in &mut streams {
        read_until_closed(stream);
    }
}

#[test]
fn http_headers_over_16_kib_are_431() {
    let (_daemon, addr) = http_daemon(&[]);
    let mut stream = connect(addr);
    let filler = "a".repeat(20 * 1024);
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Filler: {filler}\r\n\r\n"
    )
    .unwrap();
    let answer = read_until_closed(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
}

/// POSTs `body` to `/api/call` with `token`; the answer.
fn post_call(addr: SocketAddr, token: &str, body: &[u8]) -> String {
    let mut stream = connect(addr);
    write!(
        stream,
        "POST /api/call HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    // The body from another thread: the answer may come before it is all sent.
    let mut sender = stream.try_clone().unwrap();
    let body = body.to_vec();
    let sending = std::thread::spawn(move || {
        let _ = sender.write_all(&body);
    });
    let answer = read_until_closed(&mut stream);
    sending.join().unwrap();
    answer
}

#[test]
fn an_http_body_over_1_mib_is_413_at_once() {
    let (daemon, addr) = http_daemon(&[]);
    let reader = token(&daemon, &["read"]);
    // Only the headers: the answer comes before the body.
    let mut stream = connect(addr);
    write!(
        stream,
        "POST /api/call HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {reader}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        (1 << 20) + 1
    )
    .unwrap();
    let mut head = [0u8; 12];
    stream
        .read_exact(&mut head)
        .expect("an answer before the body");
    assert_eq!(&head, b"HTTP/1.1 413");
}

#[test]
fn every_dashboard_call_is_answered_whatever_its_size() {
    // Between 1 and 2 MiB: 413, where the dashboard used to wait forever.
    let (daemon, addr) = http_daemon(&[]);
    let reader = token(&daemon, &["read"]);
    let key = "k".repeat(1536 * 1024);
    let body = json!({"method": "Get", "params": {"namespace": "a", "key": key}}).to_string();
    let answer = post_call(addr, &reader, body.as_bytes());
    assert!(
        answer.starts_with("HTTP/1.1 413"),
        "{}",
        &answer[..200.min(answer.len())]
    );
    assert!(answer.contains("1 MiB"), "{answer}");

    // Under 1 MiB but over the daemon's line limit: 413 with the daemon's own error.
    let (daemon, addr) = http_daemon(&[("BATON_MAX_LINE_BYTES", "4096")]);
    let reader = token(&daemon, &["read"]);
    let key = "k".repeat(8192);
    let body = json!({"method": "Get", "params": {"namespace": "a", "key": key}}).to_string();
    let answer = post_call(addr, &reader, body.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("-32001"), "{answer}");
    assert!(answer.contains("BATON_MAX_LINE_BYTES"), "{answer}");
}
