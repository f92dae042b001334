//! Credentials against a real daemon: lease ids appear only in the answer that created
//! them, and CommitEvent refuses leases that are not live.

use crate::common::{acquired_with, assert_error, Client, Daemon};
use serde_json::{json, Value};

fn lease_id(answer: &Value) -> String {
    answer["lease_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no lease_id in {answer}"))
        .to_string()
}

/// Waits (on the daemon, not by sleeping) until `key` is free.
fn wait_free(c: &mut Client, key: &str) {
    let waited = c.result(
        "WaitResourceLock",
        json!({"resource_key": key, "timeout_ms": 30_000}),
    );
    assert_eq!(waited["status"], "available", "{waited}");
}

fn head(c: &mut Client) -> u64 {
    c.result("ReadEvents", json!({"since_seq": 0, "limit": 1000}))["next_seq"]
        .as_u64()
        .unwrap()
}

#[test]
fn lease_ids_appear_only_in_the_answer_that_created_them() {
    let mut daemon = Daemon::start_on_test_clock();
    let mut sub = daemon.client();
    sub.result("Subscribe", json!({"since_seq": 0}));
    let mut c = daemon.client();
    let mut waiter = daemon.client();
    let mut leases = Vec::new();

    // Locks: acquire, heartbeat, release; expiry; release on disconnect; a waiter's grant.
    let l1 = acquired_with(
        &mut c,
        "file:a.rs",
        "alice",
        json!({"metadata": {"why": "x"}}),
    );
    leases.push(lease_id(&l1));
    c.result(
        "HeartbeatResourceLock",
        json!({"resource_key": "file:a.rs", "lease_id": l1["lease_id"], "ttl_secs": 60}),
    );
    c.result(
        "ReleaseResourceLock",
        json!({"resource_key": "file:a.rs", "lease_id": l1["lease_id"], "outcome": "modified"}),
    );
    let l2 = acquired_with(&mut c, "tool:short", "bob", json!({"ttl_secs": 1}));
    leases.push(lease_id(&l2));
    daemon.advance_clock(1_000);
    wait_free(&mut waiter, "tool:short");
    {
        let mut gone = daemon.client();
        let l3 = acquired_with(
            &mut gone,
            "tool:conn",
            "carol",
            json!({"release_on_disconnect": true}),
        );
        leases.push(lease_id(&l3));
    }
    wait_free(&mut waiter, "tool:conn");
    let l4 = acquired_with(&mut c, "tool:y", "alice", json!({}));
    leases.push(lease_id(&l4));
    waiter.send_line(
        &json!({"id": 1, "method": "AcquireResourceLock",
                "params": {"resource_key": "tool:y", "owner": "dave", "wait_ms": 30_000}})
        .to_string(),
    );
    // The wait is queued once the daemon reports a waiter.
    while c.result("Metrics", json!({}))["locks"]["waiting"] == 0 {
        std::thread::yield_now();
    }
    c.result(
        "ReleaseResourceLock",
        json!({"resource_key": "tool:y", "lease_id": l4["lease_id"]}),
    );
    let granted = waiter.read_line();
    leases.push(lease_id(&granted["result"]));

    // Tasks: a completed node, a lapsed lease rolled back, a cancelled node.
    let task = c.result(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "a"}, {"id": "b", "dependencies": ["a"]}, {"id": "c"}]}),
    );
    let task_id = task["task_id"].clone();
    let mut acquired = Vec::new();
    let a = c.result(
        "AcquireNextNode",
        json!({"task_id": task_id, "lease_owner": "w1"}),
    );
    let first = a["node_id"].clone();
    leases.push(lease_id(&a));
    c.result(
        "CommitEvent",
        json!({"task_id": task_id, "node_id": first, "lease_id": a["lease_id"], "action_type": "custom.file.written", "payload": {}}),
    );
    c.result(
        "CompleteNode",
        json!({"task_id": task_id, "node_id": first, "lease_id": a["lease_id"], "result": 1}),
    );
    let short = c.result(
        "AcquireNextNode",
        json!({"task_id": task_id, "lease_owner": "w2", "ttl_secs": 1}),
    );
    leases.push(lease_id(&short));
    // The same node comes back once its lease lapses and it is rolled back.
    daemon.advance_clock(1_000);
    let again = loop {
        let next = c.result(
            "AcquireNextNode",
            json!({"task_id": task_id, "lease_owner": "w3", "wait_ms": 30_000}),
        );
        if next["node_id"] == short["node_id"] {
            break next;
        }
        leases.push(lease_id(&next));
        acquired.push(next);
    };
    leases.push(lease_id(&again));
    let recent = again["context"]["recent_events"].to_string();
    c.result("CancelTask", json!({"task_id": task_id}));

    // Every read answer, every event, every notification and the log.
    let mut seen = Vec::new();
    let last = head(&mut c);
    let events = c.result("ReadEvents", json!({"since_seq": 0, "limit": 1000}));
    assert!(events["events"].as_array().unwrap().len() > 15, "{events}");
    seen.push(events.to_string());
    seen.push(recent);
    loop {
        let note = sub.read_line();
        seen.push(note.to_string());
        if note["params"]["event"]["seq"].as_u64() == Some(last) {
            break;
        }
    }
    for (method, params) in [
        ("ListResourceLocks", json!({})),
        ("ResourceLockStatus", json!({"resource_key": "tool:y"})),
        ("ResourceLockStatus", json!({"resource_key": "file:a.rs"})),
        ("TaskStatus", json!({"task_id": task_id})),
        ("ListTasks", json!({})),
        ("Export", json!({})),
        ("Metrics", json!({})),
        ("History", json!({"namespace": "n", "key": "k"})),
    ] {
        seen.push(c.result(method, params).to_string());
    }
    // Asking again as the same owner, from another connection, does not reveal it either.
    let mut stranger = daemon.client();
    let again_held = stranger.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:y", "owner": "dave"}),
    );
    assert_eq!(again_held["status"], "already_held", "{again_held}");
    seen.push(again_held.to_string());
    // A stale lease's 410 does not echo it.
    let stale = c.error(
        "ReleaseResourceLock",
        json!({"resource_key": "file:a.rs", "lease_id": l1["lease_id"]}),
    );
    seen.push(stale.to_string());
    seen.push(daemon.log());
    for id in &leases {
        for text in &seen {
            assert!(
                !text.contains(id.as_str()),
                "lease id {id} leaked into: {text}"
            );
        }
    }
}

#[test]
fn already_held_returns_the_lease_only_on_the_acquiring_connection() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let lease = acquired_with(&mut c, "tool:t", "alice", json!({}));
    let same = c.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:t", "owner": "alice"}),
    );
    assert_eq!(same["status"], "already_held");
    assert_eq!(same["lease_id"], lease["lease_id"]);
    let mut other = daemon.client();
    let claimed = other.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:t", "owner": "alice"}),
    );
    assert_eq!(claimed["status"], "already_held");
    assert_eq!(claimed["owner"], "alice");
    assert_eq!(claimed["fencing_token"], lease["fencing_token"]);
    assert!(claimed.get("lease_id").is_none(), "{claimed}");
}

#[test]
fn commit_event_with_a_lease_that_is_not_live_is_410_and_appends_nothing() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let task = c.result(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "n1-done"}, {"id": "n2-lapsed"}, {"id": "n3-cancelled"}]}),
    );
    let task_id = task["task_id"].clone();
    let made_up = "6f1c1a0e-8d1b-4c1e-9d55-3c7a9a0b1f22";
    let refused = |c: &mut Client, node: &str, lease: &Value| {
        let before = head(c);
        let err = c.error(
            "CommitEvent",
            json!({"task_id": task_id, "node_id": node, "lease_id": lease, "action_type": "custom.file.written", "payload": {"x": 1}}),
        );
        let data = assert_error(&err, 410, "lease_invalid");
        assert_eq!(data["node_id"], node);
        assert_eq!(head(c), before, "nothing appended for {node}: {err}");
        let message = err["message"].as_str().unwrap();
        if let Some(id) = lease.as_str() {
            assert!(!message.contains(id), "the id is not echoed: {message}");
        }
    };
    // A made-up lease on a PENDING node.
    refused(&mut c, "n1-done", &json!(made_up));

    let take = |c: &mut Client, ttl: u64| {
        c.result(
            "AcquireNextNode",
            json!({"task_id": task_id, "lease_owner": "w", "ttl_secs": ttl}),
        )
    };
    let done = take(&mut c, 60);
    assert_eq!(done["node_id"], "n1-done");
    // A made-up lease on a RUNNING node.
    refused(&mut c, "n1-done", &json!(made_up));
    c.result(
        "CompleteNode",
        json!({"task_id": task_id, "node_id": "n1-done", "lease_id": done["lease_id"]}),
    );
    // A completed node's old lease.
    refused(&mut c, "n1-done", &done["lease_id"]);

    let lapsed = take(&mut c, 1);
    assert_eq!(lapsed["node_id"], "n2-lapsed");
    let cancelled = take(&mut c, 60);
    assert_eq!(cancelled["node_id"], "n3-cancelled");
    // Wait on the daemon for the lapsed lease's rollback: the node is handed out again.
    let back = c.result(
        "AcquireNextNode",
        json!({"task_id": task_id, "lease_owner": "w2", "wait_ms": 30_000}),
    );
    assert_eq!(back["node_id"], "n2-lapsed");
    // A rolled-back node's old lease, while the node runs under a new one.
    refused(&mut c, "n2-lapsed", &lapsed["lease_id"]);
    c.result("CancelTask", json!({"task_id": task_id}));
    // A cancelled node's old lease.
    refused(&mut c, "n3-cancelled", &cancelled["lease_id"]);

    // Without a lease, a node that is not running still takes notes (a supervisor's).
    c.result(
        "CommitEvent",
        json!({"task_id": task_id, "node_id": "n1-done", "action_type": "custom.review.noted", "payload": {}}),
    );
}
