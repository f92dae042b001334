//! The operator's methods (grant `operator`): BreakLock, RetryNode and EndAgentSession,
//! each journalled with who and why; refused to every other grant; and, through the
//! dashboard's `/api/call`, only from the page itself (same origin and its CSRF token).

use std::net::SocketAddr;

use serde_json::{json, Value};

use crate::common::{assert_error, Client};
use crate::locks::{send_waiting_acquire, until_waiting};
use crate::net::{create_token, tcp_daemon, NetClient};
use crate::net_limits::{http_daemon, http_request};

/// A client authenticated over TCP with a new token named `name` holding `scopes`.
fn as_token(daemon: &crate::common::Daemon, name: &str, scopes: &[&str]) -> NetClient {
    let secret = create_token(daemon, name, scopes, None)["token"]
        .as_str()
        .unwrap()
        .to_string();
    let mut client = NetClient::tcp(daemon.listening("tcp"));
    client.authenticate(&secret);
    client
}

fn events(client: &mut Client, types: &[&str]) -> Vec<Value> {
    let read = client.result("ReadEvents", json!({"since_seq": 0, "types": types}));
    read["events"].as_array().unwrap().clone()
}

fn head(client: &mut Client) -> Value {
    client.result("ReadEvents", json!({"since_seq": 0}))["events"]
        .as_array()
        .unwrap()
        .last()
        .map_or(json!(0), |e| e["seq"].clone())
}

#[test]
fn break_lock_ends_the_lease_serves_the_waiter_and_journals_who_and_why() {
    let mut daemon = tcp_daemon();
    let mut alice = daemon.client();
    let mut bob = daemon.client();
    let lease = alice.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:src/lib.rs", "owner": "alice", "ttl_secs": 600}),
    );
    send_waiting_acquire(&mut bob, "file:src/lib.rs", "bob", 600_000, json!({}));
    until_waiting(&mut alice, 1);

    let mut ops = as_token(&daemon, "oncall", &["operator"]);
    let broken = ops.result(
        "BreakLock",
        json!({"resource_key": "file:./src//lib.rs", "reason": "alice crashed mid-edit"}),
    );
    assert_eq!(broken["resource_key"], "file:src/lib.rs");
    assert_eq!(
        broken["broken"],
        json!([{"owner": "alice", "mode": "exclusive", "fencing_token": lease["fencing_token"]}])
    );
    assert_eq!(broken["waiters_served"], 1);
    assert!(!broken
        .to_string()
        .contains(lease["lease_id"].as_str().unwrap()));

    // The waiter is served, first come first served, as on a release.
    let granted = bob.read_line();
    assert_eq!(granted["result"]["status"], "acquired", "{granted}");
    assert_eq!(granted["result"]["owner"], "bob");
    assert_eq!(granted["result"]["previous"]["outcome"], "broken");

    // The broken holder hears what a lease that ended says: 410.
    let params = json!({"resource_key": "file:src/lib.rs", "lease_id": lease["lease_id"]});
    let err = alice.error("HeartbeatResourceLock", params.clone());
    assert_error(&err, 410, "lease_invalid");
    let err = alice.error("ReleaseResourceLock", params);
    assert_error(&err, 410, "lease_invalid");

    // Journalled: who (the token's name) and why; never the lease id.
    let journal = events(&mut alice, &["lock.broken"]);
    assert_eq!(journal.len(), 1, "{journal:?}");
    let event = &journal[0];
    assert_eq!(event["seq"], broken["event_seq"]);
    assert_eq!(event["actor"], "alice");
    assert_eq!(event["resource_key"], "file:src/lib.rs");
    assert_eq!(event["data"]["by"], "oncall");
    assert_eq!(event["data"]["reason"], "alice crashed mid-edit");
    assert_eq!(event["data"]["outcome"], "broken");
    assert!(!event
        .to_string()
        .contains(lease["lease_id"].as_str().unwrap()));

    // Without a waiter, the key is free and shows how its last lease ended, also after
    // a crash (SQLite replays the outcome from the journal).
    alice.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:deploy", "owner": "carol"}),
    );
    // On the Unix socket, the operator is the admin.
    let broken = alice.result(
        "BreakLock",
        json!({"resource_key": "tool:deploy", "owner": "carol", "reason": "stuck deploy"}),
    );
    assert_eq!(broken["waiters_served"], 0);
    let journal = events(&mut alice, &["lock.broken"]);
    assert_eq!(journal[1]["data"]["by"], "admin");
    daemon.kill9();
    daemon.restart();
    let mut c = daemon.client();
    let status = c.result("ResourceLockStatus", json!({"resource_key": "tool:deploy"}));
    assert_eq!(status["status"], "available", "{status}");
    assert_eq!(status["previous"]["outcome"], "broken");
    assert_eq!(status["previous"]["owner"], "carol");
    assert_eq!(
        status["previous"]["note"], "broken by admin: stuck deploy",
        "{status}"
    );
}

#[test]
fn break_lock_breaks_every_holder_or_the_one_named() {
    let daemon = tcp_daemon();
    let mut c = daemon.client();
    let shared = |owner: &str| json!({"resource_key": "kv:cfg", "owner": owner, "mode": "shared"});
    c.result("AcquireResourceLock", shared("r1"));
    let r2 = c.result("AcquireResourceLock", shared("r2"));
    c.result("AcquireResourceLock", shared("r3"));

    let one = c.result(
        "BreakLock",
        json!({"resource_key": "kv:cfg", "lease_id": r2["lease_id"], "reason": "r2 hung"}),
    );
    let owners = |r: &Value| -> Vec<String> {
        r["broken"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["owner"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(owners(&one), ["r2"]);
    let all = c.result(
        "BreakLock",
        json!({"resource_key": "kv:cfg", "reason": "reset"}),
    );
    let mut ended = owners(&all);
    ended.sort();
    assert_eq!(ended, ["r1", "r3"]);
    let status = c.result("ResourceLockStatus", json!({"resource_key": "kv:cfg"}));
    assert_eq!(status["status"], "available");
}

#[test]
fn a_refused_break_changes_nothing_and_says_what_to_do() {
    let daemon = tcp_daemon();
    let mut c = daemon.client();
    let lease = c.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:a", "owner": "alice"}),
    );
    let before = head(&mut c);
    for (params, code, field) in [
        (json!({"resource_key": "file:a"}), -32602, Some("reason")),
        (
            json!({"resource_key": "file:a", "reason": ""}),
            -32602,
            Some("reason"),
        ),
        (
            json!({"resource_key": "file:a", "reason": "   "}),
            -32602,
            Some("reason"),
        ),
        (
            json!({"resource_key": "file:a", "reason": "x".repeat(513)}),
            -32602,
            Some("reason"),
        ),
        (
            json!({"resource_key": "file:b", "reason": "why"}),
            404,
            None,
        ),
        (
            json!({"resource_key": "file:a", "owner": "bob", "reason": "why"}),
            404,
            None,
        ),
        (
            json!({"resource_key": "file:a", "lease_id": "not-it", "reason": "why"}),
            404,
            None,
        ),
        (
            json!({"resource_key": "file:a", "reason": "why", "extra": 1}),
            -32602,
            None,
        ),
    ] {
        let err = c.error("BreakLock", params.clone());
        assert_eq!(err["code"], code, "{params}: {err}");
        if let Some(field) = field {
            assert_eq!(err["data"]["field"], field, "{err}");
        }
        assert!(!err.to_string().contains("not-it"), "never echoes an id");
    }
    assert_eq!(head(&mut c), before, "a refusal journals nothing");
    let held = c.result("ResourceLockStatus", json!({"resource_key": "file:a"}));
    assert_eq!(held["status"], "held");
    c.result(
        "HeartbeatResourceLock",
        json!({"resource_key": "file:a", "lease_id": lease["lease_id"]}),
    );
}

fn register(c: &mut Client, nodes: Value) -> Value {
    c.result("RegisterTask", json!({"goal": "g", "nodes": nodes}))["task_id"].clone()
}

fn take(c: &mut Client, task: &Value, owner: &str) -> Value {
    c.result(
        "AcquireNextNode",
        json!({"task_id": task, "lease_owner": owner}),
    )
}

fn fail(c: &mut Client, node: &Value) -> Value {
    c.result(
        "FailNode",
        json!({"task_id": node["task_id"], "node_id": node["node_id"],
               "lease_id": node["lease_id"], "error": "boom", "retry": false}),
    )
}

fn complete(c: &mut Client, node: &Value) {
    c.result(
        "CompleteNode",
        json!({"task_id": node["task_id"], "node_id": node["node_id"],
               "lease_id": node["lease_id"], "result": node["node_id"]}),
    );
}

fn node_states(c: &mut Client, task: &Value) -> Vec<(String, String)> {
    let status = c.result("TaskStatus", json!({"task_id": task}));
    status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node_id"].as_str().unwrap().to_string(),
                n["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn retry_node_resumes_a_failed_task_and_its_cancelled_dependants() {
    let daemon = tcp_daemon();
    let mut c = daemon.client();
    let task = register(
        &mut c,
        json!([
            {"id": "a", "max_attempts": 1},
            {"id": "b", "dependencies": ["a"]},
            {"id": "c", "dependencies": ["b"]},
        ]),
    );
    let a = take(&mut c, &task, "w1");
    assert_eq!(a["node_id"], "a");
    fail(&mut c, &a);
    let status = c.result("TaskStatus", json!({"task_id": task}));
    assert_eq!(status["task"]["status"], "failed");
    assert_eq!(take(&mut c, &task, "w1"), Value::Null);

    let mut ops = as_token(&daemon, "oncall", &["operator"]);
    let retried = ops.result(
        "RetryNode",
        json!({"task_id": task, "node_id": "a", "reason": "the flaky network is back"}),
    );
    assert_eq!(retried["node_state"], "PENDING");
    assert_eq!(retried["task_status"], "running");
    assert_eq!(retried["nodes_resumed"], 2);
    assert_eq!(retried["still_failed"], json!([]));
    assert_eq!(
        node_states(&mut c, &task),
        [
            ("a".to_string(), "PENDING".to_string()),
            ("b".to_string(), "PENDING".to_string()),
            ("c".to_string(), "PENDING".to_string())
        ]
    );

    // A fresh count of attempts; the dependants run in order after it.
    let a = take(&mut c, &task, "w2");
    assert_eq!(a["node_id"], "a");
    assert_eq!(a["attempt"], 1);
    assert_eq!(take(&mut c, &task, "w2"), Value::Null, "b waits for a");
    complete(&mut c, &a);
    let b = take(&mut c, &task, "w2");
    assert_eq!(b["node_id"], "b");
    complete(&mut c, &b);
    let node_c = take(&mut c, &task, "w2");
    complete(&mut c, &node_c);
    let status = c.result("TaskStatus", json!({"task_id": task}));
    assert_eq!(status["task"]["status"], "completed", "{status}");

    let journal = events(&mut c, &["node.retried"]);
    assert_eq!(journal.len(), 1);
    let event = &journal[0];
    assert_eq!(event["seq"], retried["event_seq"]);
    assert_eq!(event["task_id"], task);
    assert_eq!(event["node_id"], "a");
    assert_eq!(event["actor"], "oncall");
    assert_eq!(event["data"]["by"], "oncall");
    assert_eq!(event["data"]["reason"], "the flaky network is back");
    let running = events(&mut c, &["task.running"]);
    assert_eq!(running.len(), 1, "the task ran again: {running:?}");
}

#[test]
fn a_task_with_two_failed_nodes_resumes_when_both_are_retried() {
    let daemon = tcp_daemon();
    let mut c = daemon.client();
    let task = register(
        &mut c,
        json!([{"id": "a", "max_attempts": 1}, {"id": "b", "max_attempts": 1}, {"id": "z", "dependencies": ["a", "b"]}]),
    );
    let a = take(&mut c, &task, "w1");
    let b = take(&mut c, &task, "w2");
    fail(&mut c, &a);
    fail(&mut c, &b);
    let first = c.result(
        "RetryNode",
        json!({"task_id": task, "node_id": "a", "reason": "fixed"}),
    );
    assert_eq!(first["node_state"], "CANCELLED");
    assert_eq!(first["task_status"], "failed");
    assert_eq!(first["still_failed"], json!(["b"]));
    assert_eq!(take(&mut c, &task, "w1"), Value::Null, "still failed");
    let second = c.result(
        "RetryNode",
        json!({"task_id": task, "node_id": "b", "reason": "fixed"}),
    );
    assert_eq!(second["node_state"], "PENDING");
    assert_eq!(second["task_status"], "running");
    assert_eq!(second["nodes_resumed"], 2, "a and z");
    let mut ran = Vec::new();
    loop {
        let node = take(&mut c, &task, "w1");
        if node.is_null() {
            break;
        }
        ran.push(node["node_id"].as_str().unwrap().to_string());
        complete(&mut c, &node);
    }
    assert_eq!(ran, ["a", "b", "z"]);
}

#[test]
fn a_refused_retry_is_409_or_404_and_changes_nothing() {
    let daemon = tcp_daemon();
    let mut c = daemon.client();
    let task = register(&mut c, json!([{"id": "a"}, {"id": "b"}]));
    let a = take(&mut c, &task, "w");
    let before = head(&mut c);
    let retry = |node: &str| json!({"task_id": task, "node_id": node, "reason": "why"});
    for (params, code, says) in [
        (retry("a"), 409, "RUNNING"),
        (retry("b"), 409, "PENDING"),
        (retry("nope"), 404, "TaskStatus"),
        (
            json!({"task_id": "no-task", "node_id": "a", "reason": "why"}),
            404,
            "ListTasks",
        ),
        (json!({"task_id": task, "node_id": "a"}), -32602, "reason"),
        (
            json!({"task_id": task, "node_id": "a", "reason": ""}),
            -32602,
            "reason",
        ),
    ] {
        let err = c.error("RetryNode", params.clone());
        assert_eq!(err["code"], code, "{params}: {err}");
        assert!(
            err["message"].as_str().unwrap().contains(says),
            "{params}: {err}"
        );
    }
    assert_eq!(head(&mut c), before, "a refusal journals nothing");
    complete(&mut c, &a);
    let err = c.error("RetryNode", retry("a"));
    assert_error(&err, 409, "conflict");
    assert!(err["message"].as_str().unwrap().contains("COMPLETED"));

    // A cancelled task's failed node stays failed.
    let task2 = register(&mut c, json!([{"id": "x", "max_attempts": 1}]));
    let x = take(&mut c, &task2, "w");
    fail(&mut c, &x);
    c.result("CancelTask", json!({"task_id": task2}));
    let before = head(&mut c);
    let err = c.error(
        "RetryNode",
        json!({"task_id": task2, "node_id": "x", "reason": "why"}),
    );
    assert_error(&err, 409, "conflict");
    assert!(err["message"].as_str().unwrap().contains("cancelled"));
    assert_eq!(head(&mut c), before, "a refusal journals nothing");
}

#[test]
fn end_agent_session_ends_its_claims_and_journals_who_and_why() {
    let daemon = tcp_daemon();
    let mut agent = daemon.client();
    let session = agent.result("RegisterAgent", json!({"name": "coder-1", "ttl_secs": 600}));
    let sid = session["session_id"].clone();
    agent.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:src/main.rs", "session_id": sid, "ttl_secs": 600}),
    );
    let task = register(&mut agent, json!([{"id": "a"}]));
    agent.result(
        "AcquireNextNode",
        json!({"task_id": task, "session_id": sid}),
    );

    let mut ops = as_token(&daemon, "oncall", &["operator"]);
    let ended = ops.result(
        "EndAgentSession",
        json!({"name": "coder-1", "reason": "looping on the same edit"}),
    );
    assert_eq!(ended["name"], "coder-1");
    assert_eq!(ended["ended"], true);
    assert_eq!(ended["locks_ended"], json!(["file:src/main.rs"]));
    assert_eq!(ended["nodes_rolled_back"], 1);

    // As EndSession: the session is gone, its claims ended, its node back to PENDING.
    let err = agent.error("AgentHeartbeat", json!({"session_id": sid}));
    assert_error(&err, 410, "lease_invalid");
    let status = agent.result(
        "ResourceLockStatus",
        json!({"resource_key": "file:src/main.rs"}),
    );
    assert_eq!(status["status"], "available");
    assert_eq!(status["previous"]["outcome"], "abandoned");
    assert_eq!(
        node_states(&mut agent, &task),
        [("a".into(), "PENDING".into())]
    );
    assert_eq!(agent.result("ListAgents", json!({}))["agents"], json!([]));

    let left = events(&mut agent, &["agent.left"]);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["seq"], ended["event_seq"]);
    assert_eq!(left[0]["actor"], "coder-1");
    assert_eq!(
        left[0]["data"],
        json!({"reason": "operator", "by": "oncall", "note": "looping on the same edit"})
    );

    // No live session: 404, and nothing journalled.
    let before = head(&mut agent);
    let err = ops.error(
        "EndAgentSession",
        json!({"name": "coder-1", "reason": "again"}),
    );
    assert_error(&err, 404, "not_found");
    assert!(err["message"].as_str().unwrap().contains("ListAgents"));
    let err = ops.error("EndAgentSession", json!({"name": "coder-1", "reason": ""}));
    assert_eq!(err["code"], -32602);
    assert_eq!(head(&mut agent), before);
}

#[test]
fn only_operator_and_admin_may_act_and_operator_reads_nothing() {
    let daemon = tcp_daemon();
    let calls = [
        (
            "BreakLock",
            json!({"resource_key": "file:a", "reason": "r"}),
        ),
        (
            "RetryNode",
            json!({"task_id": "t", "node_id": "n", "reason": "r"}),
        ),
        ("EndAgentSession", json!({"name": "a", "reason": "r"})),
    ];
    for scopes in [
        &["read"][..],
        &["tasks:write", "tasks:work"],
        &["agents"],
        &["locks:*"],
        &["kv:write:*"],
        &["metrics"],
        &["events:read", "events:publish"],
    ] {
        let mut client = as_token(&daemon, "someone", scopes);
        for (method, params) in &calls {
            let err = client.error(method, params.clone());
            let data = assert_error(&err, 403, "forbidden");
            assert_eq!(data["needed"], "operator", "{scopes:?} {method}: {err}");
            assert!(err["message"].as_str().unwrap().contains("operator"));
        }
    }
    // operator and admin get past the grant check (here to 404: nothing to act on).
    for scopes in [&["operator"][..], &["admin"]] {
        let mut client = as_token(&daemon, "ops", scopes);
        for (method, params) in &calls {
            let err = client.error(method, params.clone());
            assert_eq!(err["code"], 404, "{scopes:?} {method}: {err}");
        }
    }
    // operator implies nothing else: not even the reads of what it acts on.
    let mut ops = as_token(&daemon, "ops", &["operator"]);
    for (method, params) in [
        ("ListResourceLocks", json!({})),
        ("TaskStatus", json!({"task_id": "t"})),
        ("ListAgents", json!({})),
        ("ReadEvents", json!({})),
        ("Get", json!({"namespace": "n", "key": "k"})),
        (
            "AcquireResourceLock",
            json!({"resource_key": "file:a", "owner": "o"}),
        ),
    ] {
        let err = ops.error(method, params);
        assert_error(&err, 403, "forbidden");
    }
    // Before authenticating: 401.
    let mut anonymous = NetClient::tcp(daemon.listening("tcp"));
    for (method, params) in &calls {
        let err = anonymous.error(method, params.clone());
        assert_error(&err, 401, "unauthenticated");
    }
}

/// One HTTP request (`Connection: close` added); the whole answer.
fn http(addr: SocketAddr, method: &str, path: &str, headers: &[String], body: &str) -> String {
    http_request(addr, method, path, headers, "application/json", body)
}

/// The page's CSRF token, from its `baton-csrf` meta tag.
fn page_csrf(addr: SocketAddr, cookie: &str) -> String {
    let page = http(addr, "GET", "/", &[cookie.to_string()], "");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let marker = "<meta name=\"baton-csrf\" content=\"";
    let at = page.find(marker).expect("the CSRF meta tag") + marker.len();
    let csrf = page[at..].split('"').next().unwrap().to_string();
    assert_eq!(csrf.len(), 64, "{csrf}");
    csrf
}

#[test]
fn the_dashboard_acts_only_from_its_own_page_with_its_csrf_token() {
    let (daemon, addr) = http_daemon(&[]);
    let mut c = daemon.client();
    let secret = |name: &str, scopes: &[&str]| {
        create_token(&daemon, name, scopes, None)["token"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let ops = secret("oncall", &["read", "operator"]);
    let reader = secret("viewer", &["read"]);
    let cookie = format!("Cookie: baton_session={ops}");
    let csrf = page_csrf(addr, &cookie);
    assert_eq!(csrf, page_csrf(addr, &cookie), "bound to the session");
    let other_csrf = page_csrf(addr, &format!("Cookie: baton_session={reader}"));
    assert_ne!(csrf, other_csrf);

    c.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:x", "owner": "alice"}),
    );
    let body =
        json!({"method": "BreakLock", "params": {"resource_key": "tool:x", "reason": "stuck"}})
            .to_string();
    let origin = format!("Origin: http://{addr}");
    let with_csrf = format!("X-Baton-CSRF: {csrf}");
    let refused = [
        (vec![cookie.clone(), origin.clone()], "X-Baton-CSRF"),
        (
            vec![cookie.clone(), origin.clone(), "X-Baton-CSRF: 00".into()],
            "X-Baton-CSRF",
        ),
        (
            vec![
                cookie.clone(),
                origin.clone(),
                format!("X-Baton-CSRF: {other_csrf}"),
            ],
            "X-Baton-CSRF",
        ),
        (
            vec![
                cookie.clone(),
                "Origin: http://evil.example".into(),
                with_csrf.clone(),
            ],
            "evil.example",
        ),
        (
            vec![
                cookie.clone(),
                "Sec-Fetch-Site: cross-site".into(),
                with_csrf.clone(),
            ],
            "another site",
        ),
    ];
    for (headers, says) in refused {
        let answer = http(addr, "POST", "/api/call", &headers, &body);
        assert!(answer.starts_with("HTTP/1.1 403"), "{headers:?}: {answer}");
        assert!(answer.contains(says), "{headers:?}: {answer}");
    }
    let held = c.result("ResourceLockStatus", json!({"resource_key": "tool:x"}));
    assert_eq!(held["status"], "held", "nothing was broken");

    // Reads pass as before, with or without the header.
    let health = json!({"method": "Health", "params": {}}).to_string();
    for headers in [
        vec![cookie.clone()],
        vec![cookie.clone(), with_csrf.clone()],
    ] {
        let answer = http(addr, "POST", "/api/call", &headers, &health);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    // Another write is still refused, whatever it carries.
    let set =
        json!({"method": "Set", "params": {"namespace": "n", "key": "k", "value": 1}}).to_string();
    let answer = http(
        addr,
        "POST",
        "/api/call",
        &[cookie.clone(), origin.clone(), with_csrf.clone()],
        &set,
    );
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");

    // From the page: acts, as the session's token (its grants apply).
    let answer = http(
        addr,
        "POST",
        "/api/call",
        &[cookie.clone(), origin.clone(), with_csrf.clone()],
        &body,
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"owner\":\"alice\""), "{answer}");
    let broken = events(&mut c, &["lock.broken"]);
    assert_eq!(broken[0]["data"]["by"], "oncall");
    // A reader's page, with its own valid token, still lacks the grant.
    c.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:x", "owner": "alice"}),
    );
    let answer = http(
        addr,
        "POST",
        "/api/call",
        &[
            format!("Cookie: baton_session={reader}"),
            origin,
            format!("X-Baton-CSRF: {other_csrf}"),
        ],
        &body,
    );
    assert!(answer.contains("\"needed\":\"operator\""), "{answer}");
}

#[test]
fn a_retried_node_goes_to_a_waiting_worker_and_held_nodes_keep_their_time() {
    let mut daemon = crate::common::Daemon::start_on_test_clock();
    let mut c = daemon.client();
    let task = register(
        &mut c,
        json!([
            {"id": "a", "max_attempts": 1},
            {"id": "later", "delay_ms": 60_000},
            {"id": "soon", "delay_ms": 1_000},
        ]),
    );
    let a = take(&mut c, &task, "w1");
    assert_eq!(a["node_id"], "a");
    fail(&mut c, &a);
    // "soon"'s time comes while the task is failed and its nodes cancelled.
    daemon.advance_clock(2_000);

    // A worker waits for any node; the retry hands it the retried one.
    let mut worker = daemon.client();
    worker.send_line(
        &json!({"id": "w", "method": "AcquireNextNode",
                "params": {"lease_owner": "w2", "wait_ms": 600_000}})
        .to_string(),
    );
    crate::common::wait_until(std::time::Duration::from_secs(30), || {
        c.result("Metrics", json!({}))["node_waiters"] == 1
    });
    let retried = c.result(
        "RetryNode",
        json!({"task_id": task, "node_id": "a", "reason": "fixed"}),
    );
    assert_eq!(retried["nodes_resumed"], 2);
    let handed = worker.read_line();
    assert_eq!(handed["result"]["node_id"], "a", "{handed}");
    assert_eq!(handed["result"]["lease_owner"], "w2");

    // "soon" is runnable at once (its time passed); "later" waits for its own.
    let soon = take(&mut c, &task, "w1");
    assert_eq!(soon["node_id"], "soon");
    assert_eq!(take(&mut c, &task, "w1"), Value::Null);
    daemon.advance_clock(60_000);
    let later = take(&mut c, &task, "w1");
    assert_eq!(later["node_id"], "later");
}
