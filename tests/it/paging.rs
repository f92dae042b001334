//! Every answer that can grow pages (contract v1.2, "Bounded at any size"): `limit` and
//! `after` in, `next` out (null at the end), no page over its byte budget, and walking the
//! pages gives every item exactly once.

use serde_json::{json, Value};

use crate::common::{Client, Daemon};
use crate::net::{tcp_daemon, token, NetClient};

/// Follows `next` from the first page to the last; every page's items of `field`, in order.
fn walk(
    call: &mut dyn FnMut(&str, Value) -> Value,
    method: &str,
    params: Value,
    field: &str,
) -> (Vec<Value>, usize) {
    let mut items = Vec::new();
    let mut pages = 0;
    let mut params = params;
    loop {
        let page = call(method, params.clone());
        pages += 1;
        items.extend(page[field].as_array().unwrap().iter().cloned());
        match &page["next"] {
            Value::Null => return (items, pages),
            next => params["after"] = next.clone(),
        }
        assert!(pages < 10_000, "{method} never ends");
    }
}

fn walk_client(c: &mut Client, method: &str, params: Value, field: &str) -> (Vec<Value>, usize) {
    walk(&mut |m, p| c.result(m, p), method, params, field)
}

fn strings(items: &[Value], field: &str) -> Vec<String> {
    items
        .iter()
        .map(|i| i[field].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn list_export_and_history_page_to_the_end() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let mut ops = Vec::new();
    for ns in ["a", "b"] {
        for i in 0..25 {
            ops.push(json!({"op": "set", "namespace": ns, "key": format!("k{i:02}"), "value": i}));
        }
    }
    c.result("Txn", json!({"ops": ops}));

    let (records, pages) = walk_client(
        &mut c,
        "List",
        json!({"namespace": "a", "limit": 10}),
        "records",
    );
    assert_eq!(pages, 3);
    let keys = strings(&records, "key");
    let expected: Vec<String> = (0..25).map(|i| format!("k{i:02}")).collect();
    assert_eq!(keys, expected);
    let first = c.result("List", json!({"namespace": "a", "limit": 10}));
    assert_eq!(
        first["next"], first["next_after"],
        "the older name stays: {first}"
    );

    // Export across namespaces: (namespace, key) order, each record once.
    let (records, pages) = walk_client(&mut c, "Export", json!({"limit": 7}), "records");
    assert_eq!(pages, 8);
    let seen: Vec<(String, String)> = records
        .iter()
        .map(|r| {
            (
                r["namespace"].as_str().unwrap().into(),
                r["key"].as_str().unwrap().into(),
            )
        })
        .collect();
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(seen, sorted);
    assert_eq!(seen.len(), 50);
    let (only_b, _) = walk_client(
        &mut c,
        "Export",
        json!({"namespace": "b", "limit": 1000}),
        "records",
    );
    assert_eq!(only_b.len(), 25);
    let whole = c.result("Export", json!({}));
    assert_eq!(whole["records"].as_array().unwrap().len(), 50);
    assert_eq!(whole["next"], Value::Null, "{whole}");
    let err = c.error("Export", json!({"after": "k01"}));
    assert_eq!(err["code"], 400, "{err}");
    assert!(err["message"].as_str().unwrap().contains("`next`"), "{err}");

    // History: newest first, pages of 4 down to version 1.
    for i in 0..10 {
        c.set("h", "key", json!(i));
    }
    let (history, pages) = walk_client(
        &mut c,
        "History",
        json!({"namespace": "h", "key": "key", "limit": 4}),
        "history",
    );
    assert_eq!(pages, 3);
    let versions: Vec<u64> = history
        .iter()
        .map(|h| h["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, (1..=10).rev().collect::<Vec<_>>());
    let err = c.error(
        "History",
        json!({"namespace": "h", "key": "key", "after": 5, "before_version": 6}),
    );
    assert_eq!(err["code"], 400, "{err}");
    let err = c.error("List", json!({"namespace": "a", "limit": 1001}));
    assert!(
        err["message"].as_str().unwrap().contains("1 to 1000"),
        "{err}"
    );
}

#[test]
fn a_page_stops_at_its_byte_budget() {
    let daemon = Daemon::start_with_env(
        &[],
        &[
            ("BATON_MAX_VALUE_BYTES", "7340032"),
            ("BATON_MAX_LINE_BYTES", "8388608"),
        ],
        None,
    );
    let mut c = daemon.client();
    let big = "x".repeat(3 << 20);
    for i in 0..8 {
        c.set("big", &format!("k{i}"), json!(big));
    }
    let mut pages = 0;
    let mut after = Value::Null;
    let mut seen = 0;
    loop {
        let mut params = json!({"namespace": "big", "limit": 1000});
        if !after.is_null() {
            params["after"] = after.clone();
        }
        let page = c.result("List", params);
        let line = page.to_string().len();
        assert!(line < 16 << 20, "a page of {line} bytes");
        seen += page["records"].as_array().unwrap().len();
        pages += 1;
        after = page["next"].clone();
        if after.is_null() {
            break;
        }
    }
    assert_eq!(seen, 8);
    assert!(pages >= 3, "8 values of 3 MiB in {pages} pages");

    // The journal (each event carries its value) and an inbox page by bytes too.
    let events = c.result("ReadEvents", json!({"limit": 1000, "namespace": "big"}));
    assert!(events.to_string().len() < 16 << 20);
    assert!(events["events"].as_array().unwrap().len() < 8);
    let session = c.result("RegisterAgent", json!({"name": "reader"}))["session_id"].clone();
    let sender = c.result("RegisterAgent", json!({"name": "writer"}))["session_id"].clone();
    for _ in 0..6 {
        c.result(
            "SendMessage",
            json!({"session_id": sender, "to": ["reader"], "body": big}),
        );
    }
    let mut after = 0;
    let mut read = 0;
    for _ in 0..6 {
        let page = c.result(
            "ReadInbox",
            json!({"session_id": session, "after": after, "limit": 100}),
        );
        assert!(page.to_string().len() < 16 << 20);
        let n = page["messages"].as_array().unwrap().len();
        if n == 0 {
            break;
        }
        assert!(n < 6, "6 messages of 3 MiB in one page");
        read += n;
        after = page["next_after"].as_u64().unwrap();
    }
    assert_eq!(read, 6);
}

#[test]
fn task_status_pages_nodes_and_counts_them_all() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let nodes: Vec<Value> = (0..2500)
        .map(|i| json!({"id": format!("n{i:04}")}))
        .collect();
    let task = c.result("RegisterTask", json!({"goal": "big", "nodes": nodes}))["task_id"].clone();
    let first = c.result("TaskStatus", json!({"task_id": task}));
    assert_eq!(first["nodes"].as_array().unwrap().len(), 1000);
    assert_eq!(first["counts"]["PENDING"], 2500, "{}", first["counts"]);
    let (all, pages) = walk_client(&mut c, "TaskStatus", json!({"task_id": task}), "nodes");
    assert_eq!(pages, 3);
    let ids = strings(&all, "node_id");
    let expected: Vec<String> = (0..2500).map(|i| format!("n{i:04}")).collect();
    assert_eq!(ids, expected, "registration order, each node once");
    let err = c.error("TaskStatus", json!({"task_id": task, "after": "nope"}));
    assert_eq!(err["code"], 400, "{err}");

    for i in 0..5 {
        c.result(
            "RegisterTask",
            json!({"goal": format!("t{i}"), "nodes": [{"id": "a"}]}),
        );
    }
    let (tasks, pages) = walk_client(&mut c, "ListTasks", json!({"limit": 2}), "tasks");
    assert_eq!(pages, 3);
    let goals = strings(&tasks, "goal");
    assert_eq!(
        goals,
        vec!["t4", "t3", "t2", "t1", "t0", "big"],
        "newest first"
    );
    let err = c.error("ListTasks", json!({"after": "no-such-task"}));
    assert_eq!(err["code"], 400, "{err}");
}

#[test]
fn lock_lists_page_through_shared_holders_and_show_each_waiter_once() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    for i in 0..5 {
        c.result(
            "AcquireResourceLock",
            json!({"resource_key": format!("job:{i}"), "owner": "w", "ttl_secs": 60}),
        );
    }
    for holder in ["r1", "r2", "r3"] {
        c.result(
            "AcquireResourceLock",
            json!({"resource_key": "db:main", "owner": holder, "ttl_secs": 60, "mode": "shared"}),
        );
    }
    // A waiter for an exclusive hold of db:main, on a connection of its own.
    let mut waiter = daemon.client();
    waiter.send_line(
        &json!({"id": 1, "method": "AcquireResourceLock", "params": {"resource_key": "db:main", "owner": "writer", "ttl_secs": 60, "wait_ms": 60000}})
            .to_string(),
    );
    let mut listed = Vec::new();
    for _ in 0..200 {
        listed = c.result("ListResourceLocks", json!({}))["waiting"]
            .as_array()
            .unwrap()
            .clone();
        if !listed.is_empty() {
            break;
        }
        // The waiter's request is on its way: a round trip on the other connection lets
        // it arrive (no sleep).
        c.result("Health", json!({}));
    }
    assert_eq!(listed.len(), 1, "the waiter never queued");

    let mut locks = Vec::new();
    let mut waiting = Vec::new();
    let mut params = json!({"limit": 2});
    let mut pages = 0;
    loop {
        let page = c.result("ListResourceLocks", params.clone());
        pages += 1;
        locks.extend(page["locks"].as_array().unwrap().iter().cloned());
        waiting.extend(page["waiting"].as_array().unwrap().iter().cloned());
        if page["next"].is_null() {
            break;
        }
        params["after"] = page["next"].clone();
    }
    assert_eq!(pages, 4, "8 leases, 2 a page");
    let keys = strings(&locks, "resource_key");
    assert_eq!(
        keys,
        vec!["db:main", "db:main", "db:main", "job:0", "job:1", "job:2", "job:3", "job:4"]
    );
    let owners: Vec<&str> = locks[..3]
        .iter()
        .map(|l| l["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners, vec!["r1", "r2", "r3"], "each shared holder once");
    assert_eq!(waiting.len(), 1, "the waiter shows once: {waiting:?}");
    assert_eq!(waiting[0]["owner"], "writer");
}

#[test]
fn a_narrow_token_pages_only_what_it_may_see() {
    let daemon = tcp_daemon();
    let mut admin = daemon.client();
    for i in 0..30 {
        let key = if i % 3 == 0 {
            format!("file:mine/{i:02}")
        } else {
            format!("file:other/{i:02}")
        };
        admin.result(
            "AcquireResourceLock",
            json!({"resource_key": key, "owner": "w", "ttl_secs": 60}),
        );
    }
    let mut narrow =
        NetClient::tcp_timeout(daemon.listening("tcp"), std::time::Duration::from_secs(20));
    narrow.authenticate(&token(&daemon, &["locks:file:mine/*"]));
    let mut all = Vec::new();
    let mut params = json!({"limit": 3});
    loop {
        let page = narrow.result("ListResourceLocks", params.clone());
        assert!(!page.to_string().contains("other/"), "{page}");
        all.extend(page["locks"].as_array().unwrap().iter().cloned());
        if page["next"].is_null() {
            break;
        }
        params["after"] = page["next"].clone();
    }
    assert_eq!(all.len(), 10);
}

#[test]
fn agents_and_tokens_page_by_name_and_age() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    for i in 0..7 {
        c.result("RegisterAgent", json!({"name": format!("agent-{i}")}));
    }
    let (agents, pages) = walk_client(&mut c, "ListAgents", json!({"limit": 3}), "agents");
    assert_eq!(pages, 3);
    let names = strings(&agents, "name");
    let expected: Vec<String> = (0..7).map(|i| format!("agent-{i}")).collect();
    assert_eq!(names, expected);

    for i in 0..5 {
        c.result(
            "CreateToken",
            json!({"name": format!("t{i}"), "scopes": ["read"]}),
        );
    }
    let (tokens, pages) = walk_client(&mut c, "ListTokens", json!({"limit": 2}), "tokens");
    assert_eq!(pages, 3);
    let mut names = strings(&tokens, "name");
    names.sort();
    assert_eq!(names, vec!["t0", "t1", "t2", "t3", "t4"], "each token once");
    let created: Vec<String> = strings(&tokens, "created_at");
    assert!(
        created.windows(2).all(|w| w[0] <= w[1]),
        "oldest first: {created:?}"
    );
    let err = c.error("ListTokens", json!({"after": "t1"}));
    assert_eq!(err["code"], 400, "{err}");
}
