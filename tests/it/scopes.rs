//! Every grant of the contract's scope table, allowed and denied, as data: a token's
//! scopes, a request, and either "allowed" (anything but 401/403) or the grant a 403
//! names in `data.needed`.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::common::{assert_error, Daemon};
use crate::net::{tcp_daemon, token, NetClient};

enum Expect {
    Allowed,
    Needs(&'static str),
}
use Expect::{Allowed, Needs};

fn cases() -> Vec<(&'static [&'static str], &'static str, Value, Expect)> {
    let get = |ns: &str| json!({"namespace": ns, "key": "k"});
    let set = |ns: &str| json!({"namespace": ns, "key": "k", "value": 1});
    let lock = |key: &str| json!({"resource_key": key, "owner": "me", "ttl_secs": 30});
    let lease = |key: &str| json!({"resource_key": key, "lease_id": "not-a-lease"});
    let node = json!({"task_id": "t", "node_id": "n", "lease_id": "l"});
    let graph = json!({"goal": "g", "nodes": [{"id": "a", "dependencies": []}]});
    const READ_APP: &[&str] = &["kv:read:app*"];
    const WRITE_APP: &[&str] = &["kv:write:app"];
    const LOCKS_SRC: &[&str] = &["locks:file:src/*"];
    vec![
        // Nothing needed.
        (READ_APP, "Health", json!({}), Allowed),
        (READ_APP, "DescribeInterface", json!({}), Allowed),
        // kv:read:PATTERN
        (READ_APP, "Get", get("app"), Allowed),
        (READ_APP, "Get", get("apples"), Allowed),
        (READ_APP, "Get", get("other"), Needs("kv:read:other")),
        (READ_APP, "List", json!({"namespace": "app1"}), Allowed),
        (READ_APP, "History", get("app"), Allowed),
        (READ_APP, "Export", json!({"namespace": "app"}), Allowed),
        (READ_APP, "Export", json!({}), Needs("kv:read:*")),
        (&["kv:read:*"], "Export", json!({}), Allowed),
        (READ_APP, "Set", set("app"), Needs("kv:write:app")),
        (READ_APP, "ReadEvents", json!({}), Needs("events:read")),
        // kv:write:PATTERN
        (WRITE_APP, "Get", get("app"), Allowed),
        (WRITE_APP, "Set", set("app"), Allowed),
        (WRITE_APP, "Delete", get("app"), Allowed),
        (
            WRITE_APP,
            "ClearNamespace",
            json!({"namespace": "app"}),
            Allowed,
        ),
        (WRITE_APP, "Set", set("app2"), Needs("kv:write:app2")),
        (
            WRITE_APP,
            "ClearNamespace",
            json!({"namespace": "x"}),
            Needs("kv:write:x"),
        ),
        (
            WRITE_APP,
            "Txn",
            json!({"compare": [], "ops": [{"op": "set", "namespace": "app", "key": "a", "value": 1}]}),
            Allowed,
        ),
        (
            WRITE_APP,
            "Txn",
            json!({"compare": [], "ops": [
            {"op": "set", "namespace": "app", "key": "a", "value": 1},
            {"op": "delete", "namespace": "other", "key": "b"}]}),
            Needs("kv:write:other"),
        ),
        (
            WRITE_APP,
            "Txn",
            json!({"compare": [{"namespace": "secret", "key": "k", "version": 0}],
            "ops": [{"op": "set", "namespace": "app", "key": "a", "value": 1}]}),
            Needs("kv:read:secret"),
        ),
        // locks:PATTERN, on canonical keys
        (
            LOCKS_SRC,
            "AcquireResourceLock",
            lock("file:src/a.rs"),
            Allowed,
        ),
        (
            LOCKS_SRC,
            "AcquireResourceLock",
            lock("file:./src//b.rs"),
            Allowed,
        ),
        (
            LOCKS_SRC,
            "AcquireResourceLock",
            lock("dir:src"),
            Needs("locks:dir:src"),
        ),
        (
            LOCKS_SRC,
            "AcquireResourceLock",
            lock("file:docs/x.md"),
            Needs("locks:file:docs/x.md"),
        ),
        (
            LOCKS_SRC,
            "ResourceLockStatus",
            json!({"resource_key": "file:src/a.rs"}),
            Allowed,
        ),
        (
            LOCKS_SRC,
            "WaitResourceLock",
            json!({"resource_key": "file:src/z", "timeout_ms": 0}),
            Allowed,
        ),
        (
            LOCKS_SRC,
            "HeartbeatResourceLock",
            lease("file:src/a.rs"),
            Allowed,
        ),
        (
            LOCKS_SRC,
            "ReleaseResourceLock",
            lease("file:docs/a"),
            Needs("locks:file:docs/a"),
        ),
        (LOCKS_SRC, "ListResourceLocks", json!({}), Allowed),
        (READ_APP, "ListResourceLocks", json!({}), Needs("locks:*")),
        (
            READ_APP,
            "ResourceLockStatus",
            json!({"resource_key": "tool:x"}),
            Needs("locks:tool:x"),
        ),
        // tasks:read, tasks:write, tasks:work
        (
            &["tasks:read"],
            "TaskStatus",
            json!({"task_id": "t"}),
            Allowed,
        ),
        (&["tasks:read"], "ListTasks", json!({}), Allowed),
        (
            &["tasks:read"],
            "RegisterTask",
            graph.clone(),
            Needs("tasks:write"),
        ),
        (
            &["tasks:read"],
            "AcquireNextNode",
            json!({"lease_owner": "w"}),
            Needs("tasks:work"),
        ),
        (&["tasks:write"], "RegisterTask", graph.clone(), Allowed),
        (
            &["tasks:write"],
            "CancelTask",
            json!({"task_id": "t"}),
            Allowed,
        ),
        (&["tasks:write"], "ListTasks", json!({}), Allowed),
        (
            &["tasks:write"],
            "CompleteNode",
            node.clone(),
            Needs("tasks:work"),
        ),
        (
            &["tasks:work"],
            "AcquireNextNode",
            json!({"lease_owner": "w"}),
            Allowed,
        ),
        (&["tasks:work"], "HeartbeatNode", node.clone(), Allowed),
        (&["tasks:work"], "CompleteNode", node.clone(), Allowed),
        (
            &["tasks:work"],
            "FailNode",
            json!({"task_id": "t", "node_id": "n", "lease_id": "l", "error": "x"}),
            Allowed,
        ),
        (
            &["tasks:work"],
            "CommitEvent",
            json!({"task_id": "t", "node_id": "n", "action_type": "custom.x", "payload": 1}),
            Allowed,
        ),
        (
            &["tasks:work"],
            "TaskStatus",
            json!({"task_id": "t"}),
            Allowed,
        ),
        (
            &["tasks:work"],
            "CancelTask",
            json!({"task_id": "t"}),
            Needs("tasks:write"),
        ),
        // events:read, events:publish
        (&["events:read"], "ReadEvents", json!({}), Allowed),
        (&["events:read"], "Subscribe", json!({}), Allowed),
        (
            &["events:read"],
            "Unsubscribe",
            json!({"subscription_id": "s"}),
            Allowed,
        ),
        (
            &["events:read"],
            "Publish",
            json!({"topic": "t", "payload": 1}),
            Needs("events:publish"),
        ),
        (
            &["events:publish"],
            "Publish",
            json!({"topic": "t", "payload": 1}),
            Allowed,
        ),
        (
            &["events:publish"],
            "Subscribe",
            json!({}),
            Needs("events:read"),
        ),
        // agents grants nothing that exists yet beyond itself.
        (&["agents"], "Get", get("a"), Needs("kv:read:a")),
        // agents, agents:PATTERN
        (
            &["agents"],
            "RegisterAgent",
            json!({"name": "any"}),
            Allowed,
        ),
        (
            &["agents:bot-*"],
            "RegisterAgent",
            json!({"name": "bot-1"}),
            Allowed,
        ),
        (
            &["agents:bot-*"],
            "RegisterAgent",
            json!({"name": "planner"}),
            Needs("agents:planner"),
        ),
        (
            &["tasks:read"],
            "RegisterAgent",
            json!({"name": "planner"}),
            Needs("agents:planner"),
        ),
        (&["agents:bot-*"], "ListAgents", json!({}), Allowed),
        (
            &["agents:bot-*"],
            "AckMessages",
            json!({"session_id": "s", "up_to": 1}),
            Allowed,
        ),
        (
            &["tasks:read"],
            "SendMessage",
            json!({"session_id": "s", "to": ["a"], "body": 1}),
            Needs("agents"),
        ),
        // admin only
        (&["admin"], "Metrics", json!({}), Allowed),
        (
            &["admin"],
            "CompactJournal",
            json!({"before_seq": 1}),
            Allowed,
        ),
        (&["admin"], "ListTokens", json!({}), Allowed),
        (&["admin"], "Export", json!({}), Allowed),
        (READ_APP, "Metrics", json!({}), Needs("metrics")),
        // metrics: Metrics and nothing else.
        (&["metrics"], "Metrics", json!({}), Allowed),
        (&["metrics"], "ListTokens", json!({}), Needs("admin")),
        (&["metrics"], "Get", get("a"), Needs("kv:read:a")),
        (
            READ_APP,
            "CompactJournal",
            json!({"before_seq": 1}),
            Needs("admin"),
        ),
        (
            READ_APP,
            "CreateToken",
            json!({"name": "x", "scopes": ["admin"]}),
            Needs("admin"),
        ),
        (READ_APP, "ListTokens", json!({}), Needs("admin")),
        (
            READ_APP,
            "RevokeToken",
            json!({"token_id": "x"}),
            Needs("admin"),
        ),
    ]
}

#[test]
fn every_grant_allows_what_the_table_says_and_nothing_else() {
    let daemon = tcp_daemon();
    let mut tokens: HashMap<Vec<&str>, String> = HashMap::new();
    for (scopes, method, params, expect) in cases() {
        let secret = tokens
            .entry(scopes.to_vec())
            .or_insert_with(|| token(&daemon, scopes))
            .clone();
        let mut client = NetClient::tcp(daemon.listening("tcp"));
        client.authenticate(&secret);
        let response = client.call(method, params.clone());
        let case = format!("{scopes:?} {method} {params}: {response}");
        match expect {
            Allowed => {
                let code = response["error"]["code"].as_i64();
                assert!(
                    !matches!(code, Some(401 | 403)),
                    "should be allowed: {case}"
                );
            }
            Needs(grant) => {
                let data = assert_error(&response["error"], 403, "forbidden");
                assert_eq!(data["needed"], grant, "{case}");
                let message = response["error"]["message"].as_str().unwrap();
                assert!(
                    message.contains(grant) && message.contains("baton token create"),
                    "{case}"
                );
            }
        }
    }
}

#[test]
fn list_resource_locks_shows_only_the_tokens_keys() {
    let daemon = tcp_daemon();
    let mut admin = daemon.client();
    for key in ["file:src/a.rs", "file:docs/b.md", "tool:fmt"] {
        admin.result(
            "AcquireResourceLock",
            json!({"resource_key": key, "owner": "x"}),
        );
    }
    let mut client = NetClient::tcp(daemon.listening("tcp"));
    client.authenticate(&token(&daemon, &["locks:file:src/*", "locks:tool:fmt"]));
    let keys = |listed: Value| -> Vec<String> {
        listed["locks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["resource_key"].as_str().unwrap().to_string())
            .collect()
    };
    let mut shown = keys(client.result("ListResourceLocks", json!({})));
    shown.sort();
    assert_eq!(shown, ["file:src/a.rs", "tool:fmt"]);
    assert_eq!(keys(admin.result("ListResourceLocks", json!({}))).len(), 3);
}

#[test]
fn create_token_refuses_bad_scopes_and_names() {
    let daemon = Daemon::start();
    let mut admin = daemon.client();
    for (params, code) in [
        (json!({"name": "a", "scopes": []}), 400),
        (json!({"name": "a", "scopes": ["kv:read"]}), 400),
        (json!({"name": "a", "scopes": ["kv:read:a*b"]}), 400),
        (json!({"name": "", "scopes": ["admin"]}), -32602),
        (
            json!({"name": "a", "scopes": ["admin"], "ttl_secs": 0}),
            -32602,
        ),
    ] {
        let err = admin.error("CreateToken", params.clone());
        assert_eq!(err["code"], code, "{params}: {err}");
    }
}
