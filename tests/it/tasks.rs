//! DAG tasks against a real daemon: validation, concurrent workers, leases, retries,
//! rollback, cancellation, waiting, dependency results, agentd-style aliases.

use std::collections::HashSet;

use crate::common::{assert_error, Client, Daemon};
use serde_json::{json, Value};

fn register(c: &mut Client, nodes: Value) -> Value {
    c.result(
        "RegisterTask",
        json!({"goal": "ship it", "context": {"repo": "baton"}, "nodes": nodes}),
    )
}

fn next(c: &mut Client, task_id: &Value, owner: &str) -> Value {
    c.result(
        "AcquireNextNode",
        json!({"task_id": task_id, "lease_owner": owner}),
    )
}

fn complete(c: &mut Client, node: &Value, result: Value) -> Value {
    c.result(
        "CompleteNode",
        json!({"task_id": node["task_id"], "node_id": node["node_id"], "lease_id": node["lease_id"], "result": result}),
    )
}

fn status(c: &mut Client, task_id: &Value) -> Value {
    c.result("TaskStatus", json!({"task_id": task_id}))
}

#[test]
fn bad_graphs_are_refused_and_nothing_is_stored() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    for nodes in [
        json!([{"id": "a", "dependencies": ["b"]}, {"id": "b", "dependencies": ["a"]}]),
        json!([{"id": "a", "dependencies": ["missing"]}]),
        json!([{"id": "a"}, {"id": "a"}]),
        json!([{"id": "a", "dependencies": ["a"]}]),
        json!([]),
        json!([{"id": "a", "max_attempts": 0}]),
    ] {
        let err = c.error("RegisterTask", json!({"goal": "g", "nodes": nodes}));
        assert_error(&err, 400, "invalid");
    }
    let err = c.error("RegisterTask", json!({"goal": "g"}));
    assert_error(&err, -32602, "invalid_params");
    assert_eq!(c.result("ListTasks", json!({}))["tasks"], json!([]));
    let events = c.result("ReadEvents", json!({"since_seq": 0}));
    assert_eq!(events["events"], json!([]), "no event for a refused graph");
    assert_eq!(
        c.result("AcquireNextNode", json!({"lease_owner": "w"})),
        Value::Null
    );
}

#[test]
fn a_diamond_runs_in_dependency_order_with_results_in_context() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let task = register(
        &mut c,
        json!([
            {"id": "plan", "payload": {"step": 1}},
            {"id": "left", "dependencies": ["plan"]},
            {"id": "right", "dependencies": ["plan"]},
            {"id": "join", "name": "synthesis", "dependencies": ["left", "right"]},
        ]),
    );
    let task_id = task["task_id"].clone();
    assert_eq!(task["node_ids"], json!(["plan", "left", "right", "join"]));

    let plan = next(&mut c, &task_id, "w1");
    assert_eq!(plan["node_id"], "plan");
    assert_eq!(plan["attempt"], 1);
    assert_eq!(plan["payload"], json!({"step": 1}));
    assert_eq!(plan["context"]["goal"], "ship it");
    assert_eq!(plan["context"]["task_context"], json!({"repo": "baton"}));
    assert!(plan["context"]["recent_events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["type"] == "task.registered"));
    // Nothing else is runnable until plan completes.
    assert_eq!(next(&mut c, &task_id, "w2"), Value::Null);
    complete(&mut c, &plan, json!({"outline": ["a", "b"]}));

    let a = next(&mut c, &task_id, "w1");
    let b = next(&mut c, &task_id, "w2");
    let got: HashSet<&str> = [
        a["node_id"].as_str().unwrap(),
        b["node_id"].as_str().unwrap(),
    ]
    .into();
    assert_eq!(got, HashSet::from(["left", "right"]));
    assert_eq!(
        a["context"]["dependency_results"],
        json!({"plan": {"outline": ["a", "b"]}})
    );
    assert_eq!(next(&mut c, &task_id, "w3"), Value::Null);
    complete(&mut c, &a, json!(a["node_id"]));
    assert_eq!(next(&mut c, &task_id, "w3"), Value::Null, "join needs both");
    complete(&mut c, &b, json!(b["node_id"]));
    let join = next(&mut c, &task_id, "w3");
    assert_eq!(join["node_id"], "join");
    assert_eq!(join["name"], "synthesis");
    assert_eq!(
        join["context"]["dependency_results"],
        json!({"left": "left", "right": "right"})
    );
    assert_eq!(status(&mut c, &task_id)["task"]["status"], "running");
    complete(&mut c, &join, Value::Null);
    let st = status(&mut c, &task_id);
    assert_eq!(st["task"]["status"], "completed");
    assert_eq!(st["counts"]["COMPLETED"], 4);
    assert_eq!(st["nodes"][0]["result"], json!({"outline": ["a", "b"]}));
    let completed = c.result("ListTasks", json!({"status": "completed"}));
    assert_eq!(completed["tasks"][0]["task_id"], task_id);
}

#[test]
fn concurrent_workers_never_share_a_node_and_finish_the_graph() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    // Two chains of 10 plus 40 independent nodes.
    let mut nodes = Vec::new();
    for chain in 0..2 {
        for i in 0..10 {
            let deps = if i == 0 {
                json!([])
            } else {
                json!([format!("c{chain}-{}", i - 1)])
            };
            nodes.push(json!({"id": format!("c{chain}-{i}"), "dependencies": deps}));
        }
    }
    for i in 0..40 {
        nodes.push(json!({"id": format!("free-{i}")}));
    }
    let task_id = register(&mut c, json!(nodes))["task_id"].clone();
    let workers: Vec<_> = (0..6)
        .map(|w| {
            let mut client = daemon.client();
            let task_id = task_id.clone();
            std::thread::spawn(move || {
                let mut done = Vec::new();
                loop {
                    let node = client.result(
                        "AcquireNextNode",
                        json!({"task_id": task_id, "lease_owner": format!("w{w}"), "wait_ms": 200}),
                    );
                    if node.is_null() {
                        let st = client.result("TaskStatus", json!({"task_id": task_id}));
                        if st["task"]["status"] == "completed" {
                            return done;
                        }
                        continue;
                    }
                    complete(&mut client, &node, json!(w));
                    done.push(node["node_id"].as_str().unwrap().to_string());
                }
            })
        })
        .collect();
    let mut all: Vec<String> = workers
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(n, 60, "every node handed out exactly once");
    assert_eq!(all.len(), 60);
    // Chain order held: each chain node completed after its predecessor.
    let events = c.result(
        "ReadEvents",
        json!({"since_seq": 0, "types": ["node.completed"], "limit": 1000}),
    );
    let order: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node_id"].as_str().unwrap())
        .collect();
    for chain in 0..2 {
        let positions: Vec<usize> = (0..10)
            .map(|i| {
                order
                    .iter()
                    .position(|n| *n == format!("c{chain}-{i}"))
                    .unwrap()
            })
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    }
}

#[test]
fn retries_until_max_attempts_then_the_task_fails_and_dependents_never_run() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let task_id = register(
        &mut c,
        json!([{"id": "flaky", "max_attempts": 2}, {"id": "after", "dependencies": ["flaky"]}]),
    )["task_id"]
        .clone();
    let first = next(&mut c, &task_id, "w");
    let failed = c.result(
        "FailNode",
        json!({"task_id": task_id, "node_id": "flaky", "lease_id": first["lease_id"], "error": {"msg": "boom"}}),
    );
    assert_eq!(failed["status"], "PENDING");
    let second = next(&mut c, &task_id, "w");
    assert_eq!(second["node_id"], "flaky");
    assert_eq!(second["attempt"], 2);
    // The first lease is dead.
    let err = c.error(
        "CompleteNode",
        json!({"task_id": task_id, "node_id": "flaky", "lease_id": first["lease_id"]}),
    );
    assert_error(&err, 410, "lease_invalid");
    let failed = c.result(
        "FailNode",
        json!({"task_id": task_id, "node_id": "flaky", "lease_id": second["lease_id"], "error_payload": "again"}),
    );
    assert_eq!(failed["status"], "FAILED");
    let st = status(&mut c, &task_id);
    assert_eq!(st["task"]["status"], "failed");
    assert_eq!(st["counts"]["FAILED"], 1);
    assert_eq!(st["nodes"][0]["error"], "again");
    assert_eq!(
        next(&mut c, &task_id, "w"),
        Value::Null,
        "dependents of a FAILED node never run"
    );
    // retry: false fails at once.
    let t2 = register(&mut c, json!([{"id": "x", "max_attempts": 5}]))["task_id"].clone();
    let x = next(&mut c, &t2, "w");
    let failed = c.result(
        "FailNode",
        json!({"task_id": t2, "node_id": "x", "lease_id": x["lease_id"], "error": "fatal", "retry": false}),
    );
    assert_eq!(failed["status"], "FAILED");
}

#[test]
fn a_lapsed_lease_rolls_the_node_back_and_the_old_lease_gets_410() {
    let mut daemon = Daemon::start_on_test_clock();
    let mut c = daemon.client();
    let task_id = register(&mut c, json!([{"id": "slow", "max_attempts": 3}]))["task_id"].clone();
    let first = c.result(
        "AcquireNextNode",
        json!({"task_id": task_id, "lease_owner": "sleepy", "ttl_secs": 1}),
    );
    // A second worker waits; it gets the node when the first lease lapses, with no call
    // from anyone but the clock.
    let mut waiter = daemon.client();
    waiter.send_line(
        &json!({"id": 1, "method": "AcquireNextNode", "params": {"task_id": task_id, "lease_owner": "awake", "wait_ms": 30_000}})
            .to_string(),
    );
    while c.result("Metrics", json!({}))["node_waiters"] != 1 {
        std::thread::yield_now();
    }
    daemon.advance_clock(999);
    assert_eq!(
        status(&mut c, &task_id)["nodes"][0]["lease_owner"],
        "sleepy"
    );
    daemon.advance_clock(1);
    let second = waiter.read_line()["result"].clone();
    assert_eq!(second["node_id"], "slow");
    assert_eq!(second["attempt"], 2);
    let rolled = c.result(
        "ReadEvents",
        json!({"since_seq": 0, "types": ["node.rolled_back"]}),
    );
    assert_eq!(rolled["events"].as_array().unwrap().len(), 1);
    assert_eq!(rolled["events"][0]["actor"], "sleepy");
    for (method, extra) in [
        ("HeartbeatNode", json!({})),
        ("CompleteNode", json!({"result": 1})),
        ("FailNode", json!({"error": "x"})),
    ] {
        let mut params =
            json!({"task_id": task_id, "node_id": "slow", "lease_id": first["lease_id"]});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let err = c.error(method, params);
        let data = assert_error(&err, 410, "lease_invalid");
        assert_eq!(data["lease_owner"], "awake", "{err}");
    }
    let beat = c.result(
        "HeartbeatNode",
        json!({"task_id": task_id, "node_id": "slow", "lease_id": second["lease_id"], "ttl_secs": 60}),
    );
    assert!(beat["lease_expires_at"].is_string());
    complete(&mut c, &second, json!("done"));
    assert_eq!(status(&mut c, &task_id)["task"]["status"], "completed");
}

#[test]
fn a_lease_that_lapses_while_the_daemon_is_down_rolls_back_at_start_up() {
    let mut daemon = Daemon::start_on_test_clock();
    let task_id;
    {
        let mut c = daemon.client();
        task_id = register(&mut c, json!([{"id": "n"}]))["task_id"].clone();
        c.result(
            "AcquireNextNode",
            json!({"task_id": task_id, "lease_owner": "w", "ttl_secs": 1}),
        );
    }
    daemon.sigterm();
    // Down for longer than the lease, on the wall clock the lease is stored by.
    daemon.restart_later(1_001);
    let mut c = daemon.client();
    let st = status(&mut c, &task_id);
    assert_eq!(st["nodes"][0]["state"], "PENDING", "{st}");
    assert_eq!(next(&mut c, &task_id, "w2")["attempt"], 2);
}

/// Registers a -> b, leases a to w1 on `c`, and queues `waiter` (request id 7) for the
/// task's next node; returns once the daemon counts the waiter.
fn b_waits_on_a_running(daemon: &Daemon) -> (Client, Client, Value, Value) {
    let mut c = daemon.client();
    let mut waiter = daemon.client();
    let task_id = register(
        &mut c,
        json!([{"id": "a"}, {"id": "b", "dependencies": ["a"]}]),
    )["task_id"]
        .clone();
    let a = next(&mut c, &task_id, "w1");
    waiter.send_line(
        &json!({"id": 7, "method": "AcquireNextNode", "params": {"task_id": task_id, "lease_owner": "w2", "wait_ms": 600_000}})
            .to_string(),
    );
    while c.result("Metrics", json!({}))["node_waiters"] != 1 {
        std::thread::yield_now();
    }
    (c, waiter, task_id, a)
}

#[test]
fn a_waiting_worker_gets_the_node_the_moment_its_dependency_completes() {
    let daemon = Daemon::start();
    let (mut c, mut waiter, task_id, a) = b_waits_on_a_running(&daemon);
    complete(&mut c, &a, json!("A"));
    let answer = waiter.read_line();
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["result"]["node_id"], "b", "{answer}");
    assert_eq!(
        answer["result"]["context"]["dependency_results"],
        json!({"a": "A"})
    );
    // A wait that runs out answers null.
    let none = waiter.result(
        "AcquireNextNode",
        json!({"task_id": task_id, "lease_owner": "w3", "wait_ms": 100}),
    );
    assert_eq!(none, Value::Null);
}

#[test]
fn a_worker_waiting_on_a_task_that_can_offer_nothing_more_gets_null_at_once() {
    let daemon = Daemon::start();
    let (mut c, mut waiter, task_id, a) = b_waits_on_a_running(&daemon);
    // a fails for good, so b can never run: the queued worker is answered null in the
    // same commit (figures are published before the answer, so none is left waiting).
    c.result(
        "FailNode",
        json!({"task_id": task_id, "node_id": a["node_id"], "lease_id": a["lease_id"],
               "error": "boom", "retry": false}),
    );
    assert_eq!(c.result("Metrics", json!({}))["node_waiters"], 0);
    let answer = waiter.read_line();
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["result"], Value::Null, "{answer}");
    // A new wait on the finished task does not hold the worker either: it would block
    // this connection for ten minutes otherwise, so a read timeout makes that a failure.
    waiter.set_read_timeout(std::time::Duration::from_secs(60));
    let none = waiter.result(
        "AcquireNextNode",
        json!({"task_id": task_id, "lease_owner": "w2", "wait_ms": 600_000}),
    );
    assert_eq!(none, Value::Null);
    assert_eq!(status(&mut c, &task_id)["task"]["status"], "failed");
}

#[test]
fn acquiring_from_an_unknown_task_is_refused_with_or_without_waiters() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let refused = |c: &mut Client, wait_ms: u64| {
        let err = c.error(
            "AcquireNextNode",
            json!({"task_id": "nope", "lease_owner": "w9", "wait_ms": wait_ms}),
        );
        assert_error(&err, 404, "not_found");
        assert!(err["message"].as_str().unwrap().contains("`nope`"), "{err}");
    };
    let next_seq = |c: &mut Client| {
        c.result("ReadEvents", json!({"since_seq": 0, "limit": 1000}))["next_seq"].clone()
    };
    // No worker waits: the task is looked up only after nothing runnable was found.
    let before = next_seq(&mut c);
    refused(&mut c, 0);
    refused(&mut c, 600_000);
    assert_eq!(next_seq(&mut c), before, "a refusal wrote to the journal");
    // A worker waits on another task: the unknown task is refused before waiters are
    // served, and the waiter keeps waiting for its own node.
    let (mut c2, mut waiter, _task_id, a) = b_waits_on_a_running(&daemon);
    let before = next_seq(&mut c);
    refused(&mut c, 0);
    assert_eq!(next_seq(&mut c), before, "a refusal wrote to the journal");
    assert_eq!(c.result("Metrics", json!({}))["node_waiters"], 1);
    complete(&mut c2, &a, json!("A"));
    assert_eq!(waiter.read_line()["result"]["node_id"], "b");
}

#[test]
fn cancel_task_cancels_unfinished_nodes_and_their_leases() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let task_id = register(
        &mut c,
        json!([{"id": "a"}, {"id": "b"}, {"id": "c", "dependencies": ["a"]}]),
    )["task_id"]
        .clone();
    let a = next(&mut c, &task_id, "w");
    let b = next(&mut c, &task_id, "w");
    complete(&mut c, &b, json!(1));
    let cancelled = c.result("CancelTask", json!({"task_id": task_id}));
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["cancelled_nodes"], 2);
    let err = c.error(
        "CompleteNode",
        json!({"task_id": task_id, "node_id": "a", "lease_id": a["lease_id"]}),
    );
    let data = assert_error(&err, 410, "lease_invalid");
    assert_eq!(data["state"], "CANCELLED");
    let st = status(&mut c, &task_id);
    assert_eq!(st["task"]["status"], "cancelled");
    assert_eq!(st["counts"]["CANCELLED"], 2);
    assert_eq!(st["counts"]["COMPLETED"], 1);
    assert_eq!(next(&mut c, &task_id, "w"), Value::Null);
    let err = c.error("CancelTask", json!({"task_id": "nope"}));
    assert_error(&err, 404, "not_found");
    let err = c.error("TaskStatus", json!({"task_id": "nope"}));
    assert_error(&err, 404, "not_found");
}

#[test]
fn commit_event_needs_the_lease_while_running() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let task_id = register(&mut c, json!([{"id": "a"}]))["task_id"].clone();
    let a = next(&mut c, &task_id, "w");
    let err = c.error(
        "CommitEvent",
        json!({"task_id": task_id, "node_id": "a", "action_type": "custom.file.written", "payload": {}}),
    );
    assert_error(&err, -32602, "invalid_params");
    let err = c.error(
        "CommitEvent",
        json!({"task_id": task_id, "node_id": "a", "lease_id": "wrong", "action_type": "custom.file.written", "payload": {}}),
    );
    assert_error(&err, 410, "lease_invalid");
    let err = c.error(
        "CommitEvent",
        json!({"task_id": task_id, "node_id": "a", "lease_id": a["lease_id"], "action_type": "kv.set", "payload": {}}),
    );
    assert_error(&err, 400, "invalid");
    let seq = c.result(
        "CommitEvent",
        json!({"task_id": task_id, "node_id": "a", "lease_id": a["lease_id"], "action_type": "custom.file.written", "payload": {"path": "x"}}),
    )["event_seq"]
        .clone();
    let events = c.result(
        "ReadEvents",
        json!({"since_seq": 0, "task_id": task_id, "types": ["custom.file.written"]}),
    );
    assert_eq!(events["events"][0]["seq"], seq);
    assert_eq!(events["events"][0]["actor"], "w");
    assert_eq!(events["events"][0]["data"], json!({"path": "x"}));
    // It shows up in the context of later nodes' recent events.
    complete(&mut c, &a, Value::Null);
}

/// The daemon's event types are its own: a worker cannot forge `token.revoked`,
/// `agent.left` or `message.sent` through CommitEvent, nor anything but `custom.*` and its
/// node's `node.progress`; Publish writes `custom.<topic>` whatever the topic says.
#[test]
fn commit_event_writes_only_custom_types_and_the_nodes_progress() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let task_id = register(&mut c, json!([{"id": "a"}]))["task_id"].clone();
    let a = next(&mut c, &task_id, "w");
    let commit = |c: &mut Client, action_type: &str| {
        c.call(
            "CommitEvent",
            json!({"task_id": task_id, "node_id": "a", "lease_id": a["lease_id"],
                   "action_type": action_type, "payload": {"forged": true}}),
        )
    };
    let head = |c: &mut Client| {
        c.result("ReadEvents", json!({"since_seq": 0, "limit": 1000}))["next_seq"].clone()
    };
    let before = head(&mut c);
    for forged in [
        "token.revoked",
        "token.created",
        "agent.left",
        "agent.joined",
        "message.sent",
        "kv.set",
        "lock.released",
        "task.completed",
        "node.completed",
        "file.written",
        "custom.",
        "",
    ] {
        let refused = commit(&mut c, forged);
        assert_error(&refused["error"], 400, "invalid");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains("custom."), "{forged}: {refused}");
    }
    assert_eq!(head(&mut c), before, "a refusal writes nothing");
    for allowed in ["node.progress", "custom.file.written"] {
        let seq = commit(&mut c, allowed)["result"]["event_seq"].clone();
        let events = c.result(
            "ReadEvents",
            json!({"since_seq": 0, "task_id": task_id, "types": [allowed]}),
        );
        assert_eq!(events["events"][0]["seq"], seq, "{allowed}: {events}");
        assert_eq!(events["events"][0]["node_id"], "a");
        assert_eq!(events["events"][0]["actor"], "w");
    }
    let published = c.result("Publish", json!({"topic": "token.revoked", "payload": {}}));
    let events = c.result(
        "ReadEvents",
        json!({"since_seq": 0, "types": ["custom.token.revoked"]}),
    );
    assert_eq!(events["events"][0]["seq"], published["event_seq"]);
    let forged = c.result(
        "ReadEvents",
        json!({"since_seq": 0, "types": ["token.revoked"]}),
    );
    assert_eq!(forged["events"], json!([]));
}

#[test]
fn an_agentd_style_client_runs_a_three_node_dag_unchanged() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let ids = [
        "0b6f4f3e-7d4c-4c54-9a47-2f4a7b0b8e11",
        "6a1c7c02-3f3e-4f0e-8d7e-6f1b1a2c3d44",
        "c3d2e1f0-1111-4222-8333-944455556666",
    ];
    let task = c.result(
        "register_task",
        json!({"goal": "write docs", "initial_nodes": [
            {"id": ids[0], "payload_schema": {"doc": "intro"}},
            {"id": ids[1], "payload_schema": {"doc": "api"}},
            {"id": ids[2], "dependencies": [ids[0], ids[1]]},
        ]}),
    );
    let task_id = task["task_id"].clone();
    let mut finished = Vec::new();
    while let Some(node) = Some(c.result(
        "acquire_next_node",
        json!({"task_id": task_id, "lease_owner": "agentd-worker"}),
    ))
    .filter(|n| !n.is_null())
    {
        c.result(
            "commit_event",
            json!({"task_id": task_id, "node_id": node["node_id"], "lease_id": node["lease_id"], "action_type": "custom.doc.drafted", "payload": node["payload"]}),
        );
        c.result(
            "complete_node",
            json!({"task_id": task_id, "node_id": node["node_id"], "lease_id": node["lease_id"], "result_payload": {"ok": true}}),
        );
        finished.push(node["node_id"].as_str().unwrap().to_string());
    }
    assert_eq!(finished.len(), 3);
    assert_eq!(finished[2], ids[2]);
    assert_eq!(
        c.result("task_status", json!({"task_id": task_id}))["task"]["status"],
        "completed"
    );
}

/// The context's recent events are the task's last BATON_CONTEXT_EVENT_LIMIT journal
/// events, exactly as ReadEvents returns them, however many arrive between acquisitions
/// (the writer keeps them in memory; this checks the copy never drifts from the journal).
#[test]
fn recent_events_are_the_last_events_of_the_task_as_stored() {
    let daemon = Daemon::start_with(&["--context-event-limit", "3"]);
    let mut c = daemon.client();
    let chain = json!([
        {"id": "a"},
        {"id": "b", "dependencies": ["a"]},
        {"id": "c", "dependencies": ["b"]},
        {"id": "d", "dependencies": ["c"]},
    ]);
    let task_id = register(&mut c, chain.clone())["task_id"].clone();
    let other = register(&mut c, chain)["task_id"].clone();
    let last_three = |c: &mut Client| {
        let events = c.result("ReadEvents", json!({"since_seq": 0, "task_id": task_id}))["events"]
            .as_array()
            .unwrap()
            .clone();
        events[events.len().saturating_sub(3)..].to_vec()
    };
    for round in 0..4 {
        let node = next(&mut c, &task_id, "w");
        let recent = node["context"]["recent_events"].as_array().unwrap().clone();
        let stored = last_three(&mut c);
        assert_eq!(recent, stored, "round {round}");
        // Round 0 has only task.registered and node.acquired: fewer than the limit.
        assert_eq!(
            recent.len(),
            if round == 0 { 2 } else { 3 },
            "round {round}"
        );
        // Events of another task and refused calls never show up.
        let o = next(&mut c, &other, "x");
        complete(&mut c, &o, json!(null));
        let err = c.error(
            "CommitEvent",
            json!({"task_id": task_id, "node_id": node["node_id"], "lease_id": "stale",
                   "action_type": "custom.note", "payload": {}}),
        );
        assert_error(&err, 410, "lease_invalid");
        for i in 0..round {
            c.result(
                "CommitEvent",
                json!({"task_id": task_id, "node_id": node["node_id"], "lease_id": node["lease_id"],
                       "action_type": "custom.note", "payload": {"i": i}}),
            );
        }
        complete(&mut c, &node, json!({"round": round}));
    }
    assert_eq!(status(&mut c, &task_id)["task"]["status"], "completed");
}

/// Events too large to keep in memory (megabyte payloads) are read from the journal each
/// time, and the context is the same as when they are kept.
#[test]
fn large_recent_events_are_served_from_the_journal() {
    let daemon = Daemon::start_with(&["--context-event-limit", "6"]);
    let mut c = daemon.client();
    let task_id = register(
        &mut c,
        json!([{"id": "a"}, {"id": "b", "dependencies": ["a"]}]),
    )["task_id"]
        .clone();
    let a = next(&mut c, &task_id, "w");
    let big = "x".repeat(900_000);
    for i in 0..5 {
        c.result(
            "CommitEvent",
            json!({"task_id": task_id, "node_id": "a", "lease_id": a["lease_id"],
                   "action_type": "custom.blob", "payload": {"i": i, "blob": big}}),
        );
    }
    complete(&mut c, &a, json!(null));
    let b = next(&mut c, &task_id, "w");
    let recent = b["context"]["recent_events"].as_array().unwrap().clone();
    let stored = c.result(
        "ReadEvents",
        json!({"since_seq": 0, "task_id": task_id, "limit": 1000}),
    )["events"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(recent.len(), 6);
    assert_eq!(recent, stored[stored.len() - 6..].to_vec());
    assert_eq!(recent[0]["data"]["i"], 1, "the oldest of the last six");
}

#[test]
fn higher_priority_first_and_labels_pick_the_worker() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let task = client.result(
        "RegisterTask",
        json!({"goal": "g", "nodes": [
            {"id": "low", "priority": -5},
            {"id": "plain"},
            {"id": "urgent", "priority": 10},
            {"id": "gpu-job", "priority": 100, "labels": ["gpu"]},
            {"id": "gpu-linux", "priority": 50, "labels": ["linux", "gpu"]},
        ]}),
    );
    let take = |client: &mut Client, labels: Value| {
        let node = client.result(
            "AcquireNextNode",
            json!({"task_id": task["task_id"], "lease_owner": "w", "labels": labels}),
        );
        node["node_id"].as_str().map(str::to_string)
    };
    // A worker without labels never gets a labelled node; among the rest, priority rules.
    assert_eq!(take(&mut client, json!([])).as_deref(), Some("urgent"));
    assert_eq!(take(&mut client, json!([])).as_deref(), Some("plain"));
    // A gpu worker takes the gpu node first (highest priority it may take).
    assert_eq!(
        take(&mut client, json!(["gpu"])).as_deref(),
        Some("gpu-job")
    );
    // gpu-linux needs both labels.
    assert_eq!(take(&mut client, json!(["gpu"])).as_deref(), Some("low"));
    assert_eq!(take(&mut client, json!(["gpu"])), None);
    assert_eq!(
        take(&mut client, json!(["linux", "gpu", "x86"])).as_deref(),
        Some("gpu-linux")
    );
    let bad = client.error(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "a", "priority": 2_000_000}]}),
    );
    assert_error(&bad, -32602, "invalid_params");
    let many = client.error(
        "AcquireNextNode",
        json!({"lease_owner": "w", "labels": ["a","b","c","d","e","f","g","h","i"]}),
    );
    assert_error(&many, -32602, "invalid_params");
}

#[test]
fn a_labelled_waiter_is_not_handed_what_it_cannot_do() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let task = client.result(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "blocker"}, {"id": "gpu", "labels": ["gpu"], "dependencies": ["blocker"]}, {"id": "cpu", "dependencies": ["blocker"]}]}),
    );
    let first = client.result(
        "AcquireNextNode",
        json!({"task_id": task["task_id"], "lease_owner": "w"}),
    );
    // A gpu worker waits; a plain worker waits after it.
    let mut gpu = daemon.client();
    gpu.send_line(
        &json!({"id": 1, "method": "AcquireNextNode", "params": {
        "task_id": task["task_id"], "lease_owner": "g", "labels": ["gpu"], "wait_ms": 60000}})
        .to_string(),
    );
    let mut plain = daemon.client();
    plain.send_line(
        &json!({"id": 2, "method": "AcquireNextNode", "params": {
        "task_id": task["task_id"], "lease_owner": "p", "wait_ms": 60000}})
        .to_string(),
    );
    while client.result("Metrics", json!({}))["node_waiters"] != 2 {
        std::thread::yield_now();
    }
    client.result(
        "CompleteNode",
        json!({"task_id": task["task_id"], "node_id": "blocker", "lease_id": first["lease_id"]}),
    );
    let got_gpu = gpu.read_line();
    let got_plain = plain.read_line();
    // Both nodes are equal in priority and age: the gpu worker, first in line, gets the
    // one that needs its label, and the plain worker the one anyone can do.
    assert_eq!(got_gpu["result"]["node_id"], "gpu", "{got_gpu}");
    assert_eq!(got_plain["result"]["node_id"], "cpu", "{got_plain}");
}

#[test]
fn a_delayed_node_and_a_delayed_retry_wait_for_the_daemons_clock() {
    let mut daemon = Daemon::start_on_test_clock();
    let mut client = daemon.client();
    let task = client.result(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "later", "delay_ms": 5000, "max_attempts": 2}]}),
    );
    let next = json!({"task_id": task["task_id"], "lease_owner": "w"});
    assert_eq!(client.result("AcquireNextNode", next.clone()), Value::Null);
    // A worker that waits is not told "nothing more" while a node is held back.
    let mut waiting = daemon.client();
    waiting.send_line(
        &json!({"id": 1, "method": "AcquireNextNode", "params": {
            "task_id": task["task_id"], "lease_owner": "w", "wait_ms": 600000}})
        .to_string(),
    );
    while client.result("Metrics", json!({}))["node_waiters"] != 1 {
        std::thread::yield_now();
    }
    daemon.advance_clock(4_999);
    assert_eq!(client.result("Metrics", json!({}))["node_waiters"], 1);
    daemon.advance_clock(1);
    let node = waiting.read_line()["result"].clone();
    assert_eq!(node["node_id"], "later", "{node}");
    // Failed with a retry delay, it comes back only when the delay has passed.
    client.result(
        "FailNode",
        json!({"task_id": task["task_id"], "node_id": "later", "lease_id": node["lease_id"],
               "error": "flaky", "retry_delay_ms": 2000}),
    );
    assert_eq!(client.result("AcquireNextNode", next.clone()), Value::Null);
    daemon.advance_clock(2_000);
    let again = client.result("AcquireNextNode", next);
    assert_eq!(again["attempt"], 2, "{again}");
    let too_long = client.error(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "x", "delay_ms": 100_000_000u64}]}),
    );
    assert_error(&too_long, -32602, "invalid_params");
}

#[test]
fn a_result_that_does_not_match_its_schema_is_refused_and_the_node_stays_leased() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let schema = json!({"type": "object", "required": ["score"],
        "properties": {"score": {"type": "integer", "minimum": 0}}});
    let task = client.result(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "grade", "result_schema": schema}]}),
    );
    let node = client.result(
        "AcquireNextNode",
        json!({"task_id": task["task_id"], "lease_owner": "w"}),
    );
    let done = |result: Value| {
        json!({"task_id": task["task_id"], "node_id": "grade", "lease_id": node["lease_id"],
               "result": result})
    };
    let refused = client.error("CompleteNode", done(json!({"score": -3})));
    assert_error(&refused, 400, "invalid");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("/score"),
        "names the JSON pointer: {message}"
    );
    let status = client.result("TaskStatus", json!({"task_id": task["task_id"]}));
    assert_eq!(status["nodes"][0]["state"], "RUNNING", "{status}");
    // The same lease completes it with a result that matches.
    client.result("CompleteNode", done(json!({"score": 7})));
    let bad_schema = client.error(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "a", "result_schema": {"type": 12}}]}),
    );
    assert_error(&bad_schema, -32602, "invalid_params");
}

/// Once a node fails for good, its task is failed and hands out nothing more: its nodes
/// not yet started are CANCELLED, for a worker asking for the task or for any task.
#[test]
fn a_failed_task_hands_out_no_more_nodes() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let task = register(
        &mut c,
        json!([{"id": "a", "dependencies": []}, {"id": "b", "dependencies": []},
               {"id": "c", "dependencies": []}]),
    );
    let first = next(&mut c, &task["task_id"], "w");
    c.result(
        "FailNode",
        json!({"task_id": first["task_id"], "node_id": first["node_id"],
               "lease_id": first["lease_id"], "error": "broken", "retry": false}),
    );
    let status = status(&mut c, &task["task_id"]);
    assert_eq!(status["task"]["status"], "failed", "{status}");
    assert_eq!(next(&mut c, &task["task_id"], "w"), Value::Null);
    assert_eq!(
        c.result("AcquireNextNode", json!({"lease_owner": "w"})),
        Value::Null
    );
    let states: Vec<&str> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states.iter().filter(|s| **s == "CANCELLED").count(),
        2,
        "{status}"
    );
}

/// The node limit is stated in DescribeInterface and in the error that refuses a larger
/// graph; a graph of 20,000 nodes registers.
#[test]
fn the_node_limit_is_stated_and_large_graphs_register() {
    let daemon = Daemon::start_with(&["--max-line-bytes", "16777216"]);
    let mut c = daemon.client();
    let limits = c.result("DescribeInterface", json!({}))["limits"].clone();
    let max = limits["max_nodes_per_task"].as_u64().expect("stated");
    assert!(max >= 100_000, "{limits}");
    assert_eq!(limits["max_line_bytes"], 16_777_216);
    let graph = |n: u64| -> Value {
        (0..n)
            .map(|i| json!({"id": format!("n{i}"), "dependencies": []}))
            .collect()
    };
    let task = register(&mut c, graph(20_000));
    let status = status(&mut c, &task["task_id"]);
    assert_eq!(status["counts"]["PENDING"], 20_000);
    let err = c.error(
        "RegisterTask",
        json!({"goal": "g", "nodes": graph(max + 1)}),
    );
    assert_error(&err, 400, "invalid");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("max_nodes_per_task"),
        "{err}"
    );
}
