//! Leases are bound to the token that obtained them: another token presenting the id
//! gets 410 as if it did not exist, and an idempotency key does not replay one token's
//! answer (and its lease id) to another.

use serde_json::json;

use crate::common::assert_error;
use crate::net::{tcp_daemon, token, NetClient};

#[test]
fn a_lock_lease_works_only_through_the_token_that_obtained_it() {
    let daemon = tcp_daemon();
    let addr = daemon.listening("tcp");
    let mut alice = NetClient::tcp(addr);
    alice.authenticate(&token(&daemon, &["locks:*"]));
    let mut mallory = NetClient::tcp(addr);
    mallory.authenticate(&token(&daemon, &["locks:*"]));
    let lease = alice.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:src/a.rs", "owner": "alice", "ttl_secs": 60}),
    );
    let lease_id = lease["lease_id"].as_str().unwrap().to_string();
    let presented = json!({"resource_key": "file:src/a.rs", "lease_id": lease_id});
    for method in ["HeartbeatResourceLock", "ReleaseResourceLock"] {
        let error = mallory.error(method, presented.clone());
        assert_error(&error, 410, "lease_invalid");
        assert!(
            !error.to_string().contains(&lease_id),
            "the id is never echoed: {error}"
        );
    }
    // Still alice's, and alice can use it.
    let status = mallory.result(
        "ResourceLockStatus",
        json!({"resource_key": "file:src/a.rs"}),
    );
    assert_eq!(status["status"], "held", "{status}");
    alice.result("HeartbeatResourceLock", presented.clone());
    alice.result("ReleaseResourceLock", presented);
}

#[test]
fn a_unix_admin_cannot_use_a_tokens_lease_either() {
    let daemon = tcp_daemon();
    let mut agent = NetClient::tcp(daemon.listening("tcp"));
    agent.authenticate(&token(&daemon, &["locks:*"]));
    let lease = agent.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:build", "owner": "agent", "ttl_secs": 60}),
    );
    let mut admin = daemon.client();
    let error = admin.error(
        "ReleaseResourceLock",
        json!({"resource_key": "tool:build", "lease_id": lease["lease_id"]}),
    );
    assert_error(&error, 410, "lease_invalid");
}

#[test]
fn a_node_lease_works_only_through_the_token_that_obtained_it() {
    let daemon = tcp_daemon();
    let addr = daemon.listening("tcp");
    let mut planner = daemon.client();
    let task = planner.result(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "a", "dependencies": []}]}),
    );
    let mut worker = NetClient::tcp(addr);
    worker.authenticate(&token(&daemon, &["tasks:work"]));
    let mut other = NetClient::tcp(addr);
    other.authenticate(&token(&daemon, &["tasks:work"]));
    let node = worker.result(
        "AcquireNextNode",
        json!({"task_id": task["task_id"], "lease_owner": "w"}),
    );
    let presented = json!({"task_id": node["task_id"], "node_id": node["node_id"], "lease_id": node["lease_id"]});
    for (method, extra) in [
        ("HeartbeatNode", json!({})),
        ("CompleteNode", json!({"result": 1})),
        ("FailNode", json!({"error": "x"})),
        (
            "CommitEvent",
            json!({"action_type": "custom.file.written", "payload": {}}),
        ),
    ] {
        let mut params = presented.clone();
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let error = other.error(method, params);
        assert_error(&error, 410, "lease_invalid");
    }
    let mut done = presented.clone();
    done["result"] = json!(1);
    worker.result("CompleteNode", done);
    let status = planner.result("TaskStatus", json!({"task_id": task["task_id"]}));
    assert_eq!(status["task"]["status"], "completed", "{status}");
}

#[test]
fn an_idempotency_key_does_not_replay_across_tokens() {
    let daemon = tcp_daemon();
    let addr = daemon.listening("tcp");
    let mut first = NetClient::tcp(addr);
    first.authenticate(&token(&daemon, &["locks:*"]));
    let mut second = NetClient::tcp(addr);
    second.authenticate(&token(&daemon, &["locks:*"]));
    let acquire = json!({"resource_key": "tool:fmt", "owner": "same", "ttl_secs": 60,
        "idempotency_key": "3f1c6a52-8d0e-4f57-9d8b-4b3c1e0f2a11"});
    let lease = first.result("AcquireResourceLock", acquire.clone());
    assert_eq!(lease["status"], "acquired");
    // The first token's repeat replays its answer; another token's is a conflict.
    assert_eq!(first.result("AcquireResourceLock", acquire.clone()), lease);
    let error = second.error("AcquireResourceLock", acquire);
    assert_error(&error, 409, "idempotency_conflict");
    assert!(!error
        .to_string()
        .contains(lease["lease_id"].as_str().unwrap()));
}
