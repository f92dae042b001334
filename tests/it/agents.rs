//! Agents and their inboxes: one live session per name, takeover, expiry on the daemon's
//! clock, messages that outlive sessions, a durable acknowledged cursor, readers woken by
//! a message, and `message.sent` without the body. A name belongs to the token that first
//! registered it; what a session takes carries its name and no other.

use serde_json::{json, Value};

use crate::common::{assert_error, Client, Daemon};
use crate::net::{tcp_daemon, token, NetClient};

fn register(client: &mut Client, name: &str, extra: Value) -> String {
    let mut params = json!({ "name": name });
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let joined = client.result("RegisterAgent", params);
    assert_eq!(joined["name"], name);
    joined["session_id"].as_str().unwrap().to_string()
}

fn events(client: &mut Client, kind: &str) -> Vec<Value> {
    let read = client.result("ReadEvents", json!({"types": [kind], "limit": 1000}));
    read["events"].as_array().unwrap().clone()
}

#[test]
fn one_live_session_per_name_unless_taken_over() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let first = register(
        &mut client,
        "reviewer",
        json!({"role": "review", "metadata": {"host": "box-1", "pid": 42}}),
    );
    let refused = client.error("RegisterAgent", json!({"name": "reviewer"}));
    let data = assert_error(&refused, 409, "conflict");
    assert_eq!(data["role"], "review");
    assert!(data["last_seen"].is_string(), "{data}");
    // Who has the name, as it said when it joined, and since when.
    assert_eq!(data["metadata"], json!({"host": "box-1", "pid": 42}));
    let since = data["started_at"].as_str().expect("since when");
    assert!(
        refused["message"].as_str().unwrap().contains(since),
        "{refused}"
    );
    assert!(
        !refused.to_string().contains(&first),
        "never the session id"
    );
    let second = register(&mut client, "reviewer", json!({"takeover": true}));
    assert_ne!(first, second);
    let gone = client.error("AgentHeartbeat", json!({"session_id": first}));
    assert_error(&gone, 410, "lease_invalid");
    client.result("AgentHeartbeat", json!({"session_id": second}));
    let left = events(&mut client, "agent.left");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["data"]["reason"], "takeover");
    assert_eq!(events(&mut client, "agent.joined").len(), 2);
    let listed = client.result("ListAgents", json!({}));
    let agents = listed["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0]["name"], "reviewer");
    assert!(
        !listed.to_string().contains(&second),
        "ListAgents never shows a session id"
    );
    client.result("EndSession", json!({"session_id": second}));
    assert_eq!(client.result("ListAgents", json!({}))["agents"], json!([]));
}

#[test]
fn a_session_expires_on_the_daemons_clock() {
    let mut daemon = Daemon::start_on_test_clock();
    let mut client = daemon.client();
    let session = register(&mut client, "worker", json!({"ttl_secs": 5}));
    daemon.advance_clock(4_999);
    client.result(
        "AgentHeartbeat",
        json!({"session_id": session, "ttl_secs": 5}),
    );
    daemon.advance_clock(4_999);
    assert_eq!(
        client.result("ListAgents", json!({}))["agents"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    daemon.advance_clock(1);
    let gone = client.error("AgentHeartbeat", json!({"session_id": session}));
    assert_error(&gone, 410, "lease_invalid");
    let left = events(&mut client, "agent.left");
    assert_eq!(left[0]["data"]["reason"], "expired");
    assert_eq!(left[0]["actor"], "worker");
}

#[test]
fn messages_wait_in_a_names_inbox_until_acknowledged() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let alice = register(&mut client, "alice", json!({}));
    // bob has never registered: his inbox keeps the message for him.
    let sent = client.result(
        "SendMessage",
        json!({"session_id": alice, "to": ["bob"], "subject": "review",
               "body": {"pr": 7, "note": "please look"}, "thread_id": "t1"}),
    );
    let bob = register(&mut client, "bob", json!({}));
    let inbox = client.result("ReadInbox", json!({"session_id": bob}));
    let messages = inbox["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["from"], "alice");
    assert_eq!(messages[0]["to"], json!(["bob"]));
    assert_eq!(messages[0]["body"], json!({"pr": 7, "note": "please look"}));
    assert_eq!(messages[0]["message_id"], sent["message_id"]);
    assert_eq!(inbox["next_after"], sent["seq"]);
    // Reading does not consume; acknowledging moves the durable cursor.
    let again = client.result("ReadInbox", json!({"session_id": bob}));
    assert_eq!(again["messages"].as_array().unwrap().len(), 1);
    let acked = client.result(
        "AckMessages",
        json!({"session_id": bob, "up_to": sent["seq"]}),
    );
    assert_eq!(acked, json!({"acked": 1, "unread": 0}));
    let after = client.result("ReadInbox", json!({"session_id": bob}));
    assert_eq!(after["messages"], json!([]));
    // The journal says who wrote to whom, never the body.
    let logged = events(&mut client, "message.sent");
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0]["data"]["from"], "alice");
    assert_eq!(logged[0]["data"]["subject"], "review");
    assert!(
        !logged[0].to_string().contains("please look"),
        "{}",
        logged[0]
    );
    // The inbox belongs to the name: a new session of bob's starts from the cursor.
    client.result("EndSession", json!({"session_id": bob}));
    let bob_again = register(&mut client, "bob", json!({}));
    let fresh = client.result("ReadInbox", json!({"session_id": bob_again}));
    assert_eq!(fresh["messages"], json!([]));
}

#[test]
fn a_broadcast_reaches_every_agent_that_ever_registered_but_the_sender() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let a = register(&mut client, "a", json!({}));
    let b = register(&mut client, "b", json!({}));
    let c = register(&mut client, "c", json!({}));
    client.result("EndSession", json!({"session_id": c}));
    client.result(
        "SendMessage",
        json!({"session_id": a, "to": "*", "body": "standup"}),
    );
    let got = client.result("ReadInbox", json!({"session_id": b}));
    assert_eq!(got["messages"][0]["to"], "*");
    let c = register(&mut client, "c", json!({}));
    assert_eq!(
        client.result("ReadInbox", json!({"session_id": c}))["messages"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        client.result("ReadInbox", json!({"session_id": a}))["messages"],
        json!([])
    );
    let bad = client.error(
        "SendMessage",
        json!({"session_id": a, "to": "everyone", "body": 1}),
    );
    assert_error(&bad, -32602, "invalid_params");
}

#[test]
fn a_waiting_reader_gets_the_message_or_an_empty_answer_when_its_time_is_up() {
    let mut daemon = Daemon::start_on_test_clock();
    let mut client = daemon.client();
    let sender = register(&mut client, "sender", json!({"ttl_secs": 3600}));
    let reader = register(&mut client, "reader", json!({"ttl_secs": 3600}));
    let mut waiting = daemon.client();
    waiting.send_line(
        &json!({"id": 1, "method": "ReadInbox", "params": {"session_id": reader, "wait_ms": 60000}})
            .to_string(),
    );
    client.result(
        "SendMessage",
        json!({"session_id": sender, "to": ["reader"], "body": "go"}),
    );
    let answer = waiting.read_line();
    assert_eq!(answer["result"]["messages"][0]["body"], "go", "{answer}");
    // Nothing more arrives: the wait runs out on the daemon's clock.
    let next = answer["result"]["next_after"].clone();
    waiting.send_line(
        &json!({"id": 2, "method": "ReadInbox",
                "params": {"session_id": reader, "after": next, "wait_ms": 1000}})
        .to_string(),
    );
    // Move the clock only once the wait is queued (Metrics counts waiting readers).
    while client.result("Metrics", json!({}))["inbox_waiters"] != 1 {
        std::thread::yield_now();
    }
    daemon.advance_clock(1000);
    let timed_out = waiting.read_line();
    assert_eq!(
        timed_out["result"],
        json!({"messages": [], "next_after": next})
    );
}

#[test]
fn what_a_session_holds_ends_with_it() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let session = register(&mut client, "builder", json!({}));
    // A lock, a node lease and a key, all taken with the session; the owner defaults to
    // the session's name.
    let lease = client.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:cargo", "session_id": session, "ttl_secs": 600}),
    );
    assert_eq!(lease["owner"], "builder");
    let task = client.result(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "a", "dependencies": []}]}),
    );
    let node = client.result(
        "AcquireNextNode",
        json!({"task_id": task["task_id"], "session_id": session}),
    );
    assert_eq!(node["lease_owner"], "builder");
    let set = client.result(
        "Set",
        json!({"namespace": "presence", "key": "builder", "value": "here", "session_id": session}),
    );
    assert_eq!(set["version"], 1);
    client.result(
        "Set",
        json!({"namespace": "notes", "key": "kept", "value": 1}),
    );
    let listed = client.result("ListAgents", json!({}));
    assert_eq!(listed["agents"][0]["locks"], json!(["tool:cargo"]));
    assert_eq!(listed["agents"][0]["nodes"][0]["node_id"], "a");
    // Someone else's session cannot be used to take things.
    let other = client.error(
        "AcquireResourceLock",
        json!({"resource_key": "tool:x", "session_id": "made-up"}),
    );
    assert_error(&other, 410, "lease_invalid");
    let missing = client.error("AcquireResourceLock", json!({"resource_key": "tool:x"}));
    assert_error(&missing, -32602, "invalid_params");

    client.result("EndSession", json!({"session_id": session}));
    let status = client.result("ResourceLockStatus", json!({"resource_key": "tool:cargo"}));
    assert_eq!(status["status"], "available", "{status}");
    assert_eq!(status["previous"]["outcome"], "abandoned");
    let report = client.result("TaskStatus", json!({"task_id": task["task_id"]}));
    assert_eq!(report["nodes"][0]["state"], "PENDING", "{report}");
    assert_eq!(client.get("presence", "builder")["found"], false);
    assert_eq!(client.get("notes", "kept")["found"], true);
    let deleted = client.result(
        "ReadEvents",
        json!({"types": ["kv.delete"], "namespace": "presence"}),
    );
    assert_eq!(deleted["events"][0]["data"]["reason"], "session_ended");
    // The lease id of the ended session is useless now.
    let gone = client.error(
        "ReleaseResourceLock",
        json!({"resource_key": "tool:cargo", "lease_id": lease["lease_id"]}),
    );
    assert_error(&gone, 410, "lease_invalid");
}

/// The journal's head, through the admin socket.
fn head(client: &mut Client) -> u64 {
    client.result("ReadEvents", json!({"since_seq": 0, "limit": 1000}))["next_seq"]
        .as_u64()
        .unwrap()
}

/// The `tcp://` address the daemon's last start bound (a restart binds a new port).
fn last_tcp_address(daemon: &Daemon) -> std::net::SocketAddr {
    let log = daemon.log();
    let marker = "serving tcp://";
    let at = log.rfind(marker).expect("a tcp listener in the log") + marker.len();
    let rest = &log[at..];
    rest[..rest.find(' ').unwrap()].parse().unwrap()
}

fn net_client(daemon: &Daemon, secret: &str) -> NetClient {
    let mut client = NetClient::tcp(last_tcp_address(daemon));
    client.authenticate(secret);
    client
}

fn net_register(client: &mut NetClient, name: &str, extra: Value) -> String {
    let mut params = json!({ "name": name });
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    client.result("RegisterAgent", params)["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_name_belongs_to_the_token_that_first_registered_it() {
    let mut daemon = tcp_daemon();
    let mut admin = daemon.client();
    let (owner_secret, thief_secret) = (token(&daemon, &["agents"]), token(&daemon, &["agents"]));
    let mut owner = net_client(&daemon, &owner_secret);
    let mut thief = net_client(&daemon, &thief_secret);
    let planner = net_register(&mut owner, "planner", json!({"role": "plan"}));
    // The Unix socket's admin owns the names it registers too.
    let ops = register(&mut admin, "ops", json!({}));
    let sent = admin.result(
        "SendMessage",
        json!({"session_id": ops, "to": ["planner"], "body": {"deploy_key": "s3cret"}}),
    );
    let before = head(&mut admin);
    // Another token cannot take the name, with or without takeover, nor the admin's.
    for (name, takeover) in [("planner", false), ("planner", true), ("ops", true)] {
        let refused = thief.error("RegisterAgent", json!({"name": name, "takeover": takeover}));
        assert_error(&refused, 403, "forbidden");
        let message = refused["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("`{name}`")) && message.contains("another token"),
            "{refused}"
        );
    }
    // Nor use the owner's session: it is another token's (410, as if unknown).
    for (method, params) in [
        ("ReadInbox", json!({"session_id": planner})),
        (
            "AckMessages",
            json!({"session_id": planner, "up_to": sent["seq"]}),
        ),
        ("AgentHeartbeat", json!({"session_id": planner})),
        ("EndSession", json!({"session_id": planner})),
    ] {
        assert_error(&thief.error(method, params), 410, "lease_invalid");
    }
    assert_eq!(head(&mut admin), before, "a refusal writes nothing");
    owner.result("AgentHeartbeat", json!({"session_id": planner}));
    let inbox = owner.result("ReadInbox", json!({"session_id": planner}));
    assert_eq!(inbox["messages"][0]["body"]["deploy_key"], "s3cret");

    // Offline, the name and its stored inbox are still the owner's, across a restart.
    owner.result("EndSession", json!({"session_id": planner}));
    daemon.sigterm();
    daemon.restart();
    let mut thief = net_client(&daemon, &thief_secret);
    let refused = thief.error("RegisterAgent", json!({"name": "planner"}));
    assert_error(&refused, 403, "forbidden");
    // Names of its own are fine.
    net_register(&mut thief, "thief-1", json!({}));
    // An admin may take over any name; the name stays its owner's.
    let mut admin_token = net_client(&daemon, &token(&daemon, &["admin"]));
    net_register(&mut admin_token, "planner", json!({"takeover": true}));
    let mut owner = net_client(&daemon, &owner_secret);
    let planner = net_register(&mut owner, "planner", json!({"takeover": true}));
    let inbox = owner.result("ReadInbox", json!({"session_id": planner}));
    assert_eq!(inbox["messages"][0]["body"]["deploy_key"], "s3cret");
    let mut admin = daemon.client();
    register(&mut admin, "planner", json!({"takeover": true}));
}

#[test]
fn agents_grants_with_a_pattern_limit_the_names_a_token_registers() {
    let daemon = tcp_daemon();
    let mut bots = net_client(&daemon, &token(&daemon, &["agents:bot-*"]));
    let refused = bots.error("RegisterAgent", json!({"name": "planner"}));
    let data = assert_error(&refused, 403, "forbidden");
    assert_eq!(data["needed"], "agents:planner");
    let me = net_register(&mut bots, "bot-1", json!({}));
    // The rest of the agent methods act on the session the grant let it register.
    let sent = bots.result(
        "SendMessage",
        json!({"session_id": me, "to": ["bot-1"], "body": "note to self"}),
    );
    bots.result("ReadInbox", json!({"session_id": me}));
    bots.result(
        "AckMessages",
        json!({"session_id": me, "up_to": sent["seq"]}),
    );
    bots.result("ListAgents", json!({}));
    bots.result("EndSession", json!({"session_id": me}));
    let bad = daemon.client().error(
        "CreateToken",
        json!({"name": "x", "scopes": ["agents:a*b"]}),
    );
    assert_error(&bad, 400, "invalid");
}

#[test]
fn acknowledging_past_the_newest_message_is_refused() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let alice = register(&mut client, "alice", json!({}));
    let bob = register(&mut client, "bob", json!({}));
    let first = client.result(
        "SendMessage",
        json!({"session_id": alice, "to": ["bob"], "body": 1}),
    )["seq"]
        .as_u64()
        .unwrap();
    // Something else moves the head past bob's newest message.
    client.set("ns", "k", json!(1));
    for up_to in [first + 1, 1_000_000_000_000] {
        let refused = client.error("AckMessages", json!({"session_id": bob, "up_to": up_to}));
        assert_error(&refused, 400, "invalid");
        assert!(
            refused["message"]
                .as_str()
                .unwrap()
                .contains(&format!("seq {first}")),
            "names the newest: {refused}"
        );
    }
    // Nothing moved: the next message is seen, and acknowledging counts right.
    let second = client.result(
        "SendMessage",
        json!({"session_id": alice, "to": ["bob"], "body": 2}),
    )["seq"]
        .clone();
    let inbox = client.result("ReadInbox", json!({"session_id": bob}));
    assert_eq!(inbox["messages"].as_array().unwrap().len(), 2, "{inbox}");
    let acked = client.result("AckMessages", json!({"session_id": bob, "up_to": first}));
    assert_eq!(acked, json!({"acked": 1, "unread": 1}));
    let acked = client.result("AckMessages", json!({"session_id": bob, "up_to": second}));
    assert_eq!(acked, json!({"acked": 1, "unread": 0}));
    // An empty inbox has nothing to acknowledge but 0.
    let carol = register(&mut client, "carol", json!({}));
    let refused = client.error("AckMessages", json!({"session_id": carol, "up_to": 1}));
    assert_error(&refused, 400, "invalid");
    let acked = client.result("AckMessages", json!({"session_id": carol, "up_to": 0}));
    assert_eq!(acked, json!({"acked": 0, "unread": 0}));
}

#[test]
fn an_owner_given_with_a_session_must_be_the_sessions_name() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let session = register(&mut client, "builder", json!({}));
    let task = client.result(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "a", "dependencies": []}]}),
    );
    let before = head(&mut client);
    for (method, params, field) in [
        (
            "AcquireResourceLock",
            json!({"resource_key": "tool:cargo", "session_id": session, "owner": "someone-else"}),
            "owner",
        ),
        (
            "AcquireNextNode",
            json!({"task_id": task["task_id"], "session_id": session, "lease_owner": "someone-else"}),
            "lease_owner",
        ),
        (
            "Set",
            json!({"namespace": "ns", "key": "k", "value": 1, "session_id": session, "updated_by": "someone-else"}),
            "updated_by",
        ),
    ] {
        let refused = client.error(method, params);
        assert_error(&refused, 400, "invalid");
        let message = refused["message"].as_str().unwrap();
        assert!(
            message.contains(field) && message.contains("`builder`"),
            "{method}: {refused}"
        );
    }
    assert_eq!(head(&mut client), before, "a refusal writes nothing");
    assert_eq!(client.get("ns", "k")["found"], false);
    // The session's own name, spelt out, is fine.
    let lease = client.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:cargo", "session_id": session, "owner": "builder"}),
    );
    assert_eq!(lease["owner"], "builder");
    let node = client.result(
        "AcquireNextNode",
        json!({"task_id": task["task_id"], "session_id": session, "lease_owner": "builder"}),
    );
    assert_eq!(node["lease_owner"], "builder");
    client.result(
        "Set",
        json!({"namespace": "ns", "key": "k", "value": 1, "session_id": session, "updated_by": "builder"}),
    );
    assert_eq!(client.get("ns", "k")["updated_by"], "builder");
}
