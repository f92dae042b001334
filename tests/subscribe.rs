//! Subscriptions against a real daemon: replay then live, no gap and no duplicate under
//! concurrent writes, filters, Unsubscribe, and the 416 answer.

mod common;

use common::{assert_error, Daemon};
use serde_json::{json, Value};

#[test]
fn replay_then_live_with_no_gap_and_no_duplicate_under_concurrent_writes() {
    let daemon = Daemon::start();
    let mut setup = daemon.client();
    for i in 0..50 {
        setup.set("sub", &format!("before-{i}"), json!(i));
    }
    let mut sub = daemon.client();
    // Writers run while the subscription replays and goes live.
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let mut client = daemon.client();
            std::thread::spawn(move || {
                for i in 0..100 {
                    client.set("sub", &format!("w{w}-{i}"), json!(i));
                    client.set("other", "x", json!(i));
                }
            })
        })
        .collect();
    let answer = sub.result(
        "Subscribe",
        json!({"since_seq": 0, "filter": {"namespace": "sub"}}),
    );
    let id = answer["subscription_id"].clone();
    for w in writers {
        w.join().unwrap();
    }
    let mut seqs = Vec::new();
    let mut keys = std::collections::HashSet::new();
    while keys.len() < 450 {
        let note = sub.read_line();
        assert!(
            note.get("id").is_none(),
            "notifications carry no id: {note}"
        );
        assert_eq!(note["method"], "Event", "{note}");
        assert_eq!(note["params"]["subscription_id"], id);
        let event = &note["params"]["event"];
        assert_eq!(event["namespace"], "sub");
        seqs.push(event["seq"].as_u64().unwrap());
        assert!(
            keys.insert(event["key"].as_str().unwrap().to_string()),
            "duplicate: {event}"
        );
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in seq order");
    // Every matching event in the journal was delivered.
    let all = setup.result(
        "ReadEvents",
        json!({"since_seq": 0, "namespace": "sub", "limit": 1000}),
    );
    let stored: Vec<u64> = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(stored, seqs);
    // Live events keep coming; Unsubscribe stops them.
    setup.set("sub", "live", json!(true));
    let note = sub.read_line();
    assert_eq!(note["params"]["event"]["key"], "live");
    let un = sub.result("Unsubscribe", json!({"subscription_id": id}));
    assert_eq!(un["unsubscribed"], true);
    setup.set("sub", "after", json!(1));
    // The next line on this connection is the answer to the next request, not an event.
    let health = sub.call("Health", json!({}));
    assert_eq!(health["result"]["status"], "ok", "{health}");
    let err = sub.error("Unsubscribe", json!({"subscription_id": id}));
    assert_error(&err, 404, "not_found");
}

#[test]
fn a_subscription_without_since_seq_sees_only_new_events() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    c.set("n", "old", json!(1));
    let mut sub = daemon.client();
    sub.result("Subscribe", json!({"filter": {"types": ["custom.*"]}}));
    c.set("n", "new", json!(2));
    c.result(
        "Publish",
        json!({"topic": "review.done", "payload": {"ok": true}}),
    );
    let note = sub.read_line();
    assert_eq!(note["params"]["event"]["type"], "custom.review.done");
    assert_eq!(note["params"]["event"]["data"], json!({"ok": true}));
}

#[test]
fn since_seq_zero_replays_from_the_first_event() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    c.set("n", "k", json!(1));
    let ok = c.result("Subscribe", json!({"since_seq": 0}));
    assert!(ok["subscription_id"].is_string());
    let first: Value = c.read_line();
    assert_eq!(first["params"]["event"]["seq"], 1);
}
