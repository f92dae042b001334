//! Network listeners and authentication: TLS with a CA made here, refusals at start-up,
//! Authenticate, three strikes, revocation and expiry reaching open connections, Unix
//! sockets that must authenticate, and secrets kept out of logs, journal and Metrics.

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::json;

use crate::common::{assert_error, Daemon};
use crate::net::{create_token, tcp_daemon, tls_config, tls_daemon, token, NetClient, TestCa};

#[test]
fn a_tls_client_authenticates_then_works() {
    let ca = TestCa::new("Baton test CA");
    let daemon = tls_daemon(&ca, &[]);
    let created = create_token(&daemon, "ci-runner", &["kv:write:app"], None);
    let secret = created["token"].as_str().unwrap();
    assert!(
        secret.starts_with("baton_") && secret.len() >= 6 + 32,
        "{created}"
    );

    let mut client = NetClient::tls(daemon.listening("tls"), &ca.ca());
    // Before Authenticate: Health and DescribeInterface only.
    assert_eq!(client.result("Health", json!({}))["status"], "ok");
    assert!(client.result("DescribeInterface", json!({}))["methods"].is_array());
    let err = client.error("Get", json!({"namespace": "app", "key": "k"}));
    assert_error(&err, 401, "unauthenticated");
    assert!(
        err["message"].as_str().unwrap().contains("Authenticate"),
        "{err}"
    );

    let me = client.authenticate(secret);
    assert_eq!(me["token_id"], created["token_id"]);
    assert_eq!(me["name"], "ci-runner");
    assert_eq!(me["scopes"], json!(["kv:write:app"]));
    assert!(me.get("expires_at").is_none(), "{me}");
    assert!(me.get("token").is_none(), "the secret is not echoed: {me}");

    assert_eq!(
        client.result("Set", json!({"namespace": "app", "key": "k", "value": 1}))["version"],
        1
    );
    assert_eq!(
        client.result("Get", json!({"namespace": "app", "key": "k"}))["value"],
        1
    );

    let listed = daemon.client().result("ListTokens", json!({}));
    let entry = &listed["tokens"][0];
    assert_eq!(entry["name"], "ci-runner");
    assert!(entry["last_used_at"].is_string(), "{listed}");
    assert!(!listed.to_string().contains(secret), "{listed}");
}

#[test]
fn a_client_that_does_not_trust_the_ca_is_refused() {
    let ca = TestCa::new("Baton test CA");
    let daemon = tls_daemon(&ca, &[]);
    let other = TestCa::new("Someone else's CA");
    let refused = NetClient::try_tls(daemon.listening("tls"), tls_config(&other.ca(), None));
    let err = refused.err().expect("an unknown CA is refused");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
}

#[test]
fn plain_text_to_a_tls_port_gets_no_answer() {
    let ca = TestCa::new("Baton test CA");
    let daemon = tls_daemon(&ca, &[]);
    let mut tcp = TcpStream::connect(daemon.listening("tls")).unwrap();
    tcp.write_all(b"{\"id\":1,\"method\":\"Health\"}\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains("\"result\""),
        "no JSON answer in clear text"
    );
    // The daemon serves on.
    assert_eq!(
        NetClient::tls(daemon.listening("tls"), &ca.ca()).result("Health", json!({}))["status"],
        "ok"
    );
}

#[test]
fn client_certificates_are_required_when_a_client_ca_is_set() {
    let ca = TestCa::new("Baton test CA");
    let ca_path = ca.ca().display().to_string();
    let daemon = tls_daemon(&ca, &["--tls-client-ca", &ca_path]);
    let addr = daemon.listening("tls");
    assert!(
        NetClient::try_tls(addr, tls_config(&ca.ca(), None)).is_err(),
        "no client certificate: refused"
    );
    let stranger = TestCa::new("Stranger CA");
    let (cert, key) = stranger.issue("intruder", &["intruder"], true);
    assert!(NetClient::try_tls(addr, tls_config(&ca.ca(), Some((&cert, &key)))).is_err());
    let (cert, key) = ca.issue("agent", &["agent"], true);
    let mut client = NetClient::try_tls(addr, tls_config(&ca.ca(), Some((&cert, &key)))).unwrap();
    // A certificate is not a token: the connection still authenticates.
    assert_error(
        &client.error("Get", json!({"namespace": "a", "key": "b"})),
        401,
        "unauthenticated",
    );
}

#[test]
fn start_up_refuses_unsafe_or_broken_listeners_and_says_what_to_do() {
    let mut daemon = Daemon::start();
    // Its home, with nobody holding the database.
    daemon.sigterm();
    let (status, stderr) = daemon.run_another(&["--listen", "tcp://0.0.0.0:0"]);
    assert!(!status.success());
    assert!(
        stderr.contains("clear text") && stderr.contains("use tls://"),
        "{stderr}"
    );

    let (status, stderr) = daemon.run_another(&["--http", "0.0.0.0:7421"]);
    assert!(!status.success());
    assert!(
        stderr.contains("loopback address only") && stderr.contains("127.0.0.1:7421"),
        "{stderr}"
    );

    let (status, stderr) = daemon.run_another(&["--listen", "tls://127.0.0.1:0"]);
    assert!(!status.success());
    assert!(
        stderr.contains("BATON_TLS_CERT and BATON_TLS_KEY"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem").display().to_string();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let garbage = garbage.display().to_string();
    let (status, stderr) = daemon.run_another(&[
        "--listen",
        "tls://127.0.0.1:0",
        "--tls-cert",
        &missing,
        "--tls-key",
        &missing,
    ]);
    assert!(!status.success());
    assert!(
        stderr.contains("cannot read the certificate") && stderr.contains("BATON_TLS_CERT"),
        "{stderr}"
    );
    let (status, stderr) = daemon.run_another(&[
        "--listen",
        "tls://127.0.0.1:0",
        "--tls-cert",
        &garbage,
        "--tls-key",
        &garbage,
    ]);
    assert!(!status.success());
    assert!(stderr.contains("holds no certificate"), "{stderr}");

    // A port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("tcp://{}", taken.local_addr().unwrap());
    let (status, stderr) = daemon.run_another(&["--listen", &url]);
    assert!(!status.success());
    assert!(
        stderr.contains("cannot listen on") && stderr.contains("choose another port"),
        "{stderr}"
    );
}

#[test]
fn three_bad_tokens_close_the_connection() {
    let daemon = tcp_daemon();
    let good = token(&daemon, &["kv:read:*"]);
    let mut client = NetClient::tcp(daemon.listening("tcp"));
    for attempt in 1..=3 {
        let err = client.error(
            "Authenticate",
            json!({"token": format!("baton_wrong{attempt}")}),
        );
        assert_error(&err, 401, "unauthenticated");
        assert!(
            !err.to_string().contains("baton_wrong"),
            "the token is not echoed: {err}"
        );
    }
    // A right token after three failures is too late: the connection is gone.
    let _ = client.send_line(
        &json!({"id": 9, "method": "Authenticate", "params": {"token": good}}).to_string(),
    );
    assert!(
        client.try_read_line().is_none(),
        "closed after three failures"
    );

    let metrics = daemon.client().result("Metrics", json!({}));
    assert_eq!(metrics["auth"]["failures"], 3, "{metrics}");
    // Two failures, then a success: the connection stays.
    let mut client = NetClient::tcp(daemon.listening("tcp"));
    client.error("Authenticate", json!({"token": "x"}));
    client.error("Authenticate", json!({"token": "y"}));
    client.authenticate(&good);
    client.result("Get", json!({"namespace": "a", "key": "b"}));
}

#[test]
fn a_success_in_between_does_not_reset_the_failure_count() {
    let daemon = tcp_daemon();
    let good = token(&daemon, &["kv:read:*"]);
    let mut client = NetClient::tcp(daemon.listening("tcp"));
    client.error("Authenticate", json!({"token": "baton_guess1"}));
    client.error("Authenticate", json!({"token": "baton_guess2"}));
    // A holder of one valid token authenticates in between, and guesses on.
    client.authenticate(&good);
    let err = client.error("Authenticate", json!({"token": "baton_guess3"}));
    assert_error(&err, 401, "unauthenticated");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("closes this connection"),
        "{err}"
    );
    let _ = client.send_line(
        &json!({"id": 9, "method": "Authenticate", "params": {"token": "baton_guess4"}})
            .to_string(),
    );
    assert!(
        client.try_read_line().is_none(),
        "closed after the third failure, the success in between notwithstanding"
    );
}

#[test]
fn a_revoked_token_is_cut_off_at_its_next_request() {
    let daemon = tcp_daemon();
    let created = create_token(&daemon, "worker", &["kv:read:*"], None);
    let mut client = NetClient::tcp(daemon.listening("tcp"));
    client.authenticate(created["token"].as_str().unwrap());
    client.result("Get", json!({"namespace": "a", "key": "b"}));

    let mut admin = daemon.client();
    assert_eq!(
        admin.result("RevokeToken", json!({"token_id": created["token_id"]}))["revoked"],
        true
    );
    let err = client.error("Get", json!({"namespace": "a", "key": "b"}));
    assert_error(&err, 401, "unauthenticated");
    assert!(
        err["message"].as_str().unwrap().contains("revoked"),
        "{err}"
    );
    // It cannot come back with the same token, on this connection or a new one.
    assert_error(
        &client.error("Authenticate", json!({"token": created["token"]})),
        401,
        "unauthenticated",
    );
    let mut again = NetClient::tcp(daemon.listening("tcp"));
    assert_error(
        &again.error("Authenticate", json!({"token": created["token"]})),
        401,
        "unauthenticated",
    );
    assert_eq!(admin.result("ListTokens", json!({}))["tokens"], json!([]));
    // Revoking twice is fine; an unknown id is 404.
    admin.result("RevokeToken", json!({"token_id": created["token_id"]}));
    assert_error(
        &admin.error("RevokeToken", json!({"token_id": "nope"})),
        404,
        "not_found",
    );
}

#[test]
fn an_expired_token_is_cut_off_and_unlisted() {
    let mut daemon = Daemon::start_on_test_clock_with(&["--listen", "tcp://127.0.0.1:0"]);
    let created = create_token(&daemon, "short", &["kv:read:*"], Some(60));
    assert!(created["expires_at"].is_string(), "{created}");
    let mut client = NetClient::tcp(daemon.listening("tcp"));
    assert_eq!(
        client.authenticate(created["token"].as_str().unwrap())["expires_at"],
        created["expires_at"]
    );
    daemon.advance_clock(59_999);
    client.result("Get", json!({"namespace": "a", "key": "b"}));
    daemon.advance_clock(1);
    let err = client.error("Get", json!({"namespace": "a", "key": "b"}));
    assert_error(&err, 401, "unauthenticated");
    assert!(
        err["message"].as_str().unwrap().contains("expired"),
        "{err}"
    );
    assert_eq!(
        daemon.client().result("ListTokens", json!({}))["tokens"],
        json!([])
    );
}

#[test]
fn unix_clients_authenticate_when_told_to() {
    let mut daemon = Daemon::start();
    let admin_token = token(&daemon, &["admin"]);
    // The env file (batond's lowest layer) switches the socket to tokens.
    std::fs::write(daemon.dir().join("absent.env"), "BATON_UNIX_AUTH=token\n").unwrap();
    daemon.sigterm();
    daemon.restart();
    let mut client = daemon.client();
    assert_eq!(client.result("Health", json!({}))["status"], "ok");
    assert_error(
        &client.error("Get", json!({"namespace": "a", "key": "b"})),
        401,
        "unauthenticated",
    );
    client.result("Authenticate", json!({"token": admin_token}));
    client.result("Get", json!({"namespace": "a", "key": "b"}));
    client.result("Metrics", json!({}));
}

#[test]
fn secrets_stay_out_of_the_log_the_journal_and_metrics() {
    let daemon = tcp_daemon();
    let created = create_token(&daemon, "auditor", &["events:read"], None);
    let secret = created["token"].as_str().unwrap();
    let mut client = NetClient::tcp(daemon.listening("tcp"));
    client.error("Authenticate", json!({"token": "baton_not_this_one"}));
    client.authenticate(secret);
    let events = client.result("ReadEvents", json!({}));
    let mut admin = daemon.client();
    admin.result("RevokeToken", json!({"token_id": created["token_id"]}));
    let events_after = admin.result("ReadEvents", json!({}));
    let types: Vec<&str> = events_after["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["token.created", "token.revoked"]);
    assert_eq!(events_after["events"][0]["data"]["name"], "auditor");
    let metrics = admin.result("Metrics", json!({}));
    let log = daemon.log();
    assert!(
        log.contains("authentication failed"),
        "failures are logged:\n{log}"
    );
    for text in [
        events.to_string(),
        events_after.to_string(),
        metrics.to_string(),
        log,
    ] {
        assert!(!text.contains(secret), "the secret leaked: {text}");
        assert!(
            !text.contains("baton_not_this_one"),
            "a wrong token leaked: {text}"
        );
        assert!(!text.contains(&secret[6..]), "the secret leaked: {text}");
    }
}
