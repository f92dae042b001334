//! What a token reads through the journal or a lock answer is what it could read
//! directly: events and holders outside its grants are skipped or hidden.

use serde_json::{json, Value};

use crate::common::Daemon;
use crate::net::{tcp_daemon, token, NetClient};

fn connect(daemon: &Daemon, scopes: &[&str]) -> NetClient {
    let mut c = NetClient::tcp_timeout(daemon.listening("tcp"), std::time::Duration::from_secs(20));
    c.authenticate(&token(daemon, scopes));
    c
}

fn types_and_namespaces(events: &Value) -> Vec<(String, String)> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["namespace"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn read_events_skips_what_the_token_may_not_read() {
    let daemon = tcp_daemon();
    let mut admin = daemon.client();
    admin.set("secrets", "db", json!("hunter2"));
    admin.set("pub", "x", json!(1));
    admin.result(
        "AcquireResourceLock",
        json!({"resource_key": "deploy:prod", "owner": "ops", "ttl_secs": 60}),
    );
    let mut reader = connect(&daemon, &["kv:read:pub", "events:read"]);
    let head = admin.result("ReadEvents", json!({}))["next_seq"].clone();
    let read = reader.result("ReadEvents", json!({"since_seq": 0}));
    assert_eq!(
        types_and_namespaces(&read["events"]),
        vec![("kv.set".to_string(), "pub".to_string())],
        "{read}"
    );
    assert!(!read.to_string().contains("hunter2"));
    assert_eq!(
        read["next_seq"], head,
        "next_seq moves past what was skipped"
    );
    // `read` (the dashboard's grant) sees every subject but tokens.
    let mut dashboard = connect(&daemon, &["read"]);
    let all = dashboard.result("ReadEvents", json!({"since_seq": 0}));
    let types: Vec<String> = types_and_namespaces(&all["events"])
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert!(types.contains(&"lock.acquired".to_string()), "{types:?}");
    assert!(!types.iter().any(|t| t.starts_with("token.")), "{types:?}");
}

#[test]
fn a_subscription_streams_only_what_the_token_may_read() {
    let daemon = tcp_daemon();
    let mut admin = daemon.client();
    let mut reader = connect(&daemon, &["kv:read:pub", "events:read"]);
    reader.result("Subscribe", json!({"since_seq": 0}));
    admin.set("secrets", "db", json!("hunter2"));
    admin.set("pub", "x", json!(1));
    admin.set("secrets", "db", json!("hunter3"));
    admin.set("pub", "x", json!(2));
    for expected in [1, 2] {
        let line = reader.try_read_line().expect("an event");
        assert_eq!(line["method"], "Event", "{line}");
        let event = &line["params"]["event"];
        assert_eq!(event["namespace"], "pub", "{line}");
        assert_eq!(event["data"]["value"], expected, "{line}");
    }
}

#[test]
fn a_busy_answer_hides_holders_outside_the_tokens_lock_grants() {
    let daemon = tcp_daemon();
    let mut admin = daemon.client();
    admin.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:src/secret/key.pem", "owner": "ops",
               "ttl_secs": 60, "metadata": {"why": "rotating the deploy key"}}),
    );
    let mut agent = connect(&daemon, &["locks:dir:src"]);
    let busy = agent.result(
        "AcquireResourceLock",
        json!({"resource_key": "dir:src", "owner": "agent", "ttl_secs": 60}),
    );
    assert_eq!(busy["status"], "busy", "{busy}");
    assert_eq!(busy["held_by"]["owner"], "(hidden)", "{busy}");
    assert!(busy["held_by"]["metadata"].is_null(), "{busy}");
    assert_eq!(busy["conflicting_key"], "(hidden)", "{busy}");
    assert!(!busy.to_string().contains("secret"), "{busy}");
    let status = agent.result("ResourceLockStatus", json!({"resource_key": "dir:src"}));
    assert_eq!(status["held_by"]["owner"], "(hidden)", "{status}");
    assert!(!status.to_string().contains("secret"), "{status}");
    // Admin still sees who holds it.
    let status = admin.result("ResourceLockStatus", json!({"resource_key": "dir:src"}));
    assert_eq!(status["held_by"]["owner"], "ops", "{status}");
}
