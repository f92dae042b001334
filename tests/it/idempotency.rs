//! Every method that changes state takes `idempotency_key`: a retry after a lost answer
//! replays the first answer, and changes nothing. An AcquireNextNode retried gets the same
//! node and lease, whether the first was answered at once or after a wait.

use serde_json::{json, Value};

use crate::common::{Client, Daemon};

fn register_one(c: &mut Client) -> Value {
    c.result(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "a", "dependencies": []}, {"id": "b", "dependencies": []}]}),
    )
}

#[test]
fn a_retried_acquire_next_node_gets_the_same_node_and_lease() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let task = register_one(&mut c);
    let ask = json!({"task_id": task["task_id"], "lease_owner": "w", "idempotency_key": "next-1"});
    let first = c.result("AcquireNextNode", ask.clone());
    // The answer was lost; the worker asks again on a new connection.
    let again = daemon.client().result("AcquireNextNode", ask);
    assert_eq!(first, again);
    let status = c.result("TaskStatus", json!({"task_id": task["task_id"]}));
    let running = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["state"] == "RUNNING")
        .count();
    assert_eq!(running, 1, "one node handed out, not two: {status}");
}

#[test]
fn a_node_handed_out_after_a_wait_is_replayed_too() {
    let daemon = Daemon::start();
    let mut waiter = daemon.client();
    let ask = json!({"lease_owner": "w", "wait_ms": 60000, "idempotency_key": "next-after-wait"});
    waiter.send_line(&json!({"id": 1, "method": "AcquireNextNode", "params": ask}).to_string());
    let mut admin = daemon.client();
    crate::common::wait_until(std::time::Duration::from_secs(20), || {
        admin.result("Metrics", json!({}))["node_waiters"] == 1
    });
    let task = register_one(&mut admin);
    let first = waiter.read_line();
    assert_eq!(first["result"]["task_id"], task["task_id"], "{first}");
    let again = daemon.client().result("AcquireNextNode", ask);
    assert_eq!(first["result"], again);
}

/// The methods that refused the key before take it, and a repeat changes nothing.
#[test]
fn every_mutating_method_takes_an_idempotency_key() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let lock = c.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:x", "owner": "me", "ttl_secs": 60}),
    );
    let task = register_one(&mut c);
    let node = c.result(
        "AcquireNextNode",
        json!({"task_id": task["task_id"], "lease_owner": "me"}),
    );
    let token = c.result("CreateToken", json!({"name": "t", "scopes": ["read"]}));
    let session = c.result("RegisterAgent", json!({"name": "other"}));
    c.result(
        "SendMessage",
        json!({"session_id": session["session_id"], "to": ["other"], "body": "hi"}),
    );
    let calls = [
        ("RegisterAgent", json!({"name": "replayed-agent"})),
        (
            "AgentHeartbeat",
            json!({"session_id": session["session_id"]}),
        ),
        (
            "AckMessages",
            json!({"session_id": session["session_id"], "up_to": 1}),
        ),
        ("EndSession", json!({"session_id": session["session_id"]})),
        (
            "HeartbeatResourceLock",
            json!({"resource_key": "tool:x", "lease_id": lock["lease_id"], "ttl_secs": 60}),
        ),
        (
            "HeartbeatNode",
            json!({"task_id": node["task_id"], "node_id": node["node_id"], "lease_id": node["lease_id"]}),
        ),
        (
            "CreateToken",
            json!({"name": "replayed", "scopes": ["read"]}),
        ),
        ("RevokeToken", json!({"token_id": token["token_id"]})),
    ];
    for (i, (method, mut params)) in calls.into_iter().enumerate() {
        params["idempotency_key"] = json!(format!("key-{i}"));
        let first = c.result(method, params.clone());
        let again = c.result(method, params);
        assert_eq!(first, again, "{method}");
    }
    let tokens = c.result("ListTokens", json!({}))["tokens"].clone();
    let named: Vec<&Value> = tokens
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "replayed")
        .collect();
    assert_eq!(named.len(), 1, "one token made: {tokens}");
}
