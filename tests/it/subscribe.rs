//! Subscriptions against a real daemon: replay then live, no gap and no duplicate under
//! concurrent writes, filters, Unsubscribe, and the 416 answer.

use crate::common::{assert_error, Client, Daemon};
use std::time::Duration;

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

#[test]
fn compaction_answers_older_reads_with_416_and_keeps_records() {
    let mut daemon = Daemon::start();
    let mut c = daemon.client();
    for i in 0..10 {
        c.set("n", &format!("k{i}"), json!(i));
    }
    let compacted = c.result("CompactJournal", json!({"before_seq": 6}));
    assert_eq!(compacted, json!({"oldest_seq": 6, "deleted": 5}));
    for since in [0, 4] {
        let err = c.error("ReadEvents", json!({"since_seq": since}));
        assert_error(&err, 416, "compacted");
        assert_eq!(err["data"]["oldest_seq"], 6, "{err}");
    }
    let rest = c.result("ReadEvents", json!({"since_seq": 5}));
    assert_eq!(
        crate::common::u64s(&rest["events"], "seq"),
        vec![6, 7, 8, 9, 10]
    );
    let err = c.error("Subscribe", json!({"since_seq": 2}));
    assert_error(&err, 416, "compacted");
    assert_eq!(err["data"]["oldest_seq"], 6);
    // Records and their history are not part of the journal.
    assert_eq!(c.get("n", "k0")["value"], 0);
    let history = c.result("History", json!({"namespace": "n", "key": "k0"}));
    assert_eq!(history["history"].as_array().unwrap().len(), 1);
    // Compacting to an older point changes nothing; past the head is refused.
    let again = c.result("CompactJournal", json!({"before_seq": 3}));
    assert_eq!(again, json!({"oldest_seq": 6, "deleted": 0}));
    let err = c.error("CompactJournal", json!({"before_seq": 12}));
    assert_error(&err, 400, "invalid");
    // Everything up to the head: the journal is empty, yet still says where it starts.
    let all = c.result("CompactJournal", json!({"before_seq": 11}));
    assert_eq!(all, json!({"oldest_seq": 11, "deleted": 5}));
    assert_eq!(
        c.result("ReadEvents", json!({"since_seq": 10}))["events"],
        json!([])
    );
    assert_error(
        &c.error("ReadEvents", json!({"since_seq": 9})),
        416,
        "compacted",
    );
    daemon.sigterm();
    daemon.restart();
    let mut c = daemon.client();
    assert_error(
        &c.error("ReadEvents", json!({"since_seq": 0})),
        416,
        "compacted",
    );
    let metrics = c.result("Metrics", json!({}));
    assert_eq!(metrics["journal"]["oldest_seq"], 11);
    assert_eq!(metrics["journal"]["length"], 0);
    c.set("n", "after", json!(1));
    let next = c.result("ReadEvents", json!({"since_seq": 10}));
    assert_eq!(crate::common::u64s(&next["events"], "seq"), vec![11]);
}

/// A subscriber that stops reading does not hold up writers or grow the daemon's memory:
/// its subscription ends with where to resume, and resuming there loses nothing.
#[test]
fn a_subscriber_that_stops_reading_is_ended_with_where_to_resume() {
    let daemon = Daemon::start();
    let mut sub = daemon.client();
    sub.result("Subscribe", json!({"since_seq": 0}));
    // Enough events to fill the socket, the connection's buffer and its 1,024-line queue.
    let mut writer = daemon.client();
    let big = "x".repeat(1000);
    let total = 4000;
    for chunk in 0..total / 200 {
        for i in 0..200 {
            let key = format!("k{}", chunk * 200 + i);
            writer.send_line(
                &json!({"method": "Set", "params": {"namespace": "n", "key": key, "value": big}})
                    .to_string(),
            );
        }
        for _ in 0..200 {
            assert!(writer.read_line().get("result").is_some());
        }
    }
    // Every seq arrives exactly once and in order across subscriptions, each resumed where
    // the previous one said (a reader slower than the replay may overflow again).
    let mut expected = 1;
    let mut ended = 0;
    while expected <= total {
        let note = sub.read_line();
        match note["method"].as_str() {
            Some("Event") => {
                assert_eq!(note["params"]["event"]["seq"], expected, "no gap");
                expected += 1;
            }
            Some("SubscriptionEnded") => {
                assert_eq!(note["params"]["reason"], "overflow", "{note}");
                let resume = note["params"]["resume_from_seq"].as_u64().unwrap();
                assert_eq!(
                    resume,
                    expected - 1,
                    "resume after the last event delivered"
                );
                ended += 1;
                sub.result("Subscribe", json!({"since_seq": resume}));
            }
            _ => panic!("unexpected line {note}"),
        }
    }
    assert!(ended >= 1, "the reader that stopped was never cut off");
}

/// ARCHITECTURE.md's journal invariant: lease renewals and compaction take no revision
/// and append no event; every other change appends one.
#[test]
fn renewals_and_compaction_leave_the_head_where_it_was() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let head = |c: &mut crate::common::Client| {
        c.result("Metrics", json!({}))["journal"]["head_seq"]
            .as_u64()
            .unwrap()
    };
    let lease = c.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:t", "owner": "a"}),
    );
    let task = c.result("RegisterTask", json!({"goal": "g", "nodes": [{"id": "n"}]}));
    let node = c.result(
        "AcquireNextNode",
        json!({"task_id": task["task_id"], "lease_owner": "w"}),
    );
    let before = head(&mut c);
    assert_eq!(
        before, 3,
        "acquire, register and node acquire: one event each"
    );
    c.result(
        "HeartbeatResourceLock",
        json!({"resource_key": "tool:t", "lease_id": lease["lease_id"], "ttl_secs": 60}),
    );
    c.result(
        "HeartbeatNode",
        json!({"task_id": task["task_id"], "node_id": "n", "lease_id": node["lease_id"], "ttl_secs": 60}),
    );
    c.result("CompactJournal", json!({"before_seq": 2}));
    assert_eq!(head(&mut c), before);
    c.set("n", "k", json!(1));
    assert_eq!(head(&mut c), before + 1);
}

fn rss_kib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// The SubscriptionEnded a stalled subscriber finds after its events, which says it fell
/// behind.
fn overflowed(s: &mut Client) -> serde_json::Value {
    s.set_read_timeout(Duration::from_secs(30));
    let ended = loop {
        let line = s.read_line();
        if line["method"] == "SubscriptionEnded" {
            break line;
        }
    };
    assert_eq!(ended["params"]["reason"], "overflow", "{ended}");
    ended
}

#[test]
fn stalled_subscribers_hold_a_bounded_amount_of_memory() {
    let daemon = Daemon::start();
    let mut writer = daemon.client();
    let before = rss_kib(daemon.pid(), "VmRSS:");
    // Two subscribers that never read.
    let mut stalled: Vec<Client> = (0..2).map(|_| daemon.client()).collect();
    for s in &mut stalled {
        s.result("Subscribe", json!({}));
    }
    let value = "x".repeat(256 * 1024);
    let writes = 200; // 50 MiB of events for each subscriber
    for i in 0..writes {
        writer.set("big", &format!("k{i}"), json!(value));
    }
    let peak = rss_kib(daemon.pid(), "VmHWM:");
    // Each subscriber may hold 8 MiB queued plus what the socket buffers; the journal
    // reads and SQLite's caches add a little. Unbounded, it was over 100 MiB more.
    assert!(
        peak < before + 64 * 1024,
        "peak RSS {peak} KiB, {before} KiB before the writes"
    );
    // Each stalled subscriber finds its subscription ended, with where to resume.
    for s in &mut stalled {
        let ended = overflowed(s);
        assert!(ended["params"]["resume_from_seq"].as_u64().unwrap() < writes);
    }
}

#[test]
fn read_events_pages_large_events_by_bytes() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let value = "y".repeat(900 * 1024);
    for i in 0..40 {
        c.set("big", &format!("k{i}"), json!(value));
    }
    let mut since = 0;
    let mut seen = 0;
    while seen < 40 {
        let page = c.result("ReadEvents", json!({"since_seq": since, "limit": 1000}));
        let n = page["events"].as_array().unwrap().len();
        assert!((1..40).contains(&n), "a page of {n} events of 900 KiB");
        seen += n;
        since = page["next_seq"].as_u64().unwrap();
    }
    assert_eq!(seen, 40);
}

/// Replaying the past goes at the reader's pace: 20,000 stored events arrive in order with
/// no SubscriptionEnded, however far ahead of the reader the daemon could read.
#[test]
fn catching_up_on_a_long_journal_never_overflows_a_reader_that_reads() {
    let daemon = Daemon::start();
    let mut writer = daemon.client();
    let total = 20_000u64;
    for chunk in 0..total / 500 {
        for i in 0..500 {
            let n = chunk * 500 + i;
            writer.send_line(
                &json!({"method": "Publish", "params": {"topic": "t", "payload": n}}).to_string(),
            );
        }
        for _ in 0..500 {
            assert!(writer.read_line().get("result").is_some());
        }
    }
    let mut sub = daemon.client();
    sub.result("Subscribe", json!({"since_seq": 0}));
    for expected in 1..=total {
        let note = sub.read_line();
        assert_eq!(note["method"], "Event", "{note}");
        assert_eq!(note["params"]["event"]["seq"], expected, "no gap");
    }
}

/// One bound for the events queued on every connection together: ten subscribers that
/// never read hold no more than it (each alone could queue 8 MiB), and each is ended.
#[test]
fn stalled_subscribers_together_hold_no_more_than_the_global_bound() {
    let daemon = Daemon::start_with(&["--max-subscriber-bytes", "4194304"]);
    let mut writer = daemon.client();
    let before = rss_kib(daemon.pid(), "VmRSS:");
    let mut stalled: Vec<Client> = (0..10).map(|_| daemon.client()).collect();
    for s in &mut stalled {
        s.result("Subscribe", json!({}));
    }
    let value = "x".repeat(64 * 1024);
    let writes = 200; // 12.5 MiB of events for each subscriber, 125 MiB in all
    for i in 0..writes {
        writer.set("big", &format!("k{i}"), json!(value));
    }
    let peak = rss_kib(daemon.pid(), "VmHWM:");
    assert!(
        peak < before + 40 * 1024,
        "peak RSS {peak} KiB, {before} KiB before the writes"
    );
    for s in &mut stalled {
        overflowed(s);
    }
}
