//! Several batond on one PostgreSQL database keep every promise as if they were one
//! daemon. Each test makes a fresh database (`common::postgres::shared`) and starts two or
//! three daemons on it.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{acquire, acquire_with, postgres, release, Client, Daemon};

fn instances(db: &Arc<postgres::Database>, n: usize) -> Vec<Daemon> {
    (0..n).map(|_| Daemon::start_shared(db, &[])).collect()
}

/// The seq of every event in the journal, read page by page.
fn every_seq(c: &mut Client) -> Vec<u64> {
    let mut seqs: Vec<u64> = Vec::new();
    loop {
        let since = seqs.last().copied().unwrap_or(0);
        let page = c.result("ReadEvents", json!({"since_seq": since, "limit": 1000}));
        let got = crate::common::u64s(&page["events"], "seq");
        if got.is_empty() {
            return seqs;
        }
        seqs.extend(got);
    }
}

/// The next Event notification's seq on a subscribed connection.
fn next_seq(sub: &mut Client) -> u64 {
    loop {
        let note = sub.read_line();
        if note["method"] == "Event" {
            return note["params"]["event"]["seq"].as_u64().expect("a seq");
        }
    }
}

#[test]
fn instances_on_one_database_are_told_apart_in_health() {
    let Some(db) = postgres::shared() else { return };
    let daemons = instances(&db, 2);
    let a = daemons[0].client().result("Health", json!({}));
    let b = daemons[1].client().result("Health", json!({}));
    assert_eq!(
        (a["backend"].as_str(), b["backend"].as_str()),
        (Some("postgres"), Some("postgres"))
    );
    assert_ne!(a["instance_id"], b["instance_id"]);
}

/// One revision sequence: writes through either instance take the next revision, and a
/// subscriber on one sees the other's writes live, in order, with no gap.
#[test]
fn a_subscriber_on_one_instance_sees_every_write_of_another_in_order() {
    let Some(db) = postgres::shared() else { return };
    let daemons = instances(&db, 2);
    let mut sub = daemons[1].client();
    sub.set_read_timeout(Duration::from_secs(20));
    sub.result("Subscribe", json!({"since_seq": 0}));
    let (mut a, mut b) = (daemons[0].client(), daemons[1].client());
    for i in 0..20u64 {
        let via = if i % 2 == 0 { &mut a } else { &mut b };
        let set = via.result(
            "Set",
            json!({"namespace": "n", "key": format!("k{i}"), "value": i}),
        );
        assert_eq!(set["revision"], i + 1, "one sequence across instances");
    }
    for expected in 1..=20 {
        assert_eq!(
            next_seq(&mut sub),
            expected,
            "no gap, duplicate or reordering"
        );
    }
    let read_a = a.result("ReadEvents", json!({"since_seq": 0}));
    let read_b = b.result("ReadEvents", json!({"since_seq": 0}));
    assert_eq!(read_a["events"], read_b["events"]);
    assert_eq!(
        crate::common::u64s(&read_a["events"], "seq"),
        (1..=20).collect::<Vec<_>>()
    );
}

/// 16 clients x 50 compare-and-set increments spread over three instances.
#[test]
fn an_increment_race_over_three_instances_loses_nothing() {
    let Some(db) = postgres::shared() else { return };
    let daemons = instances(&db, 3);
    daemons[0].client().result(
        "Set",
        json!({"namespace": "n", "key": "counter", "value": 0}),
    );
    let sockets: Vec<_> = daemons.iter().map(|d| d.socket_path()).collect();
    let workers: Vec<_> = (0..16)
        .map(|w| {
            let socket = sockets[w % 3].clone();
            thread::spawn(move || {
                let mut c = Client::connect(&socket);
                let mut done = 0;
                while done < 50 {
                    let got = c.result("Get", json!({"namespace": "n", "key": "counter"}));
                    let (value, version) = (got["value"].as_u64().unwrap(), got["version"].clone());
                    let answer = c.call(
                        "Set",
                        json!({"namespace": "n", "key": "counter", "value": value + 1, "expected_version": version}),
                    );
                    match answer.get("error") {
                        None => done += 1,
                        Some(e) => assert_eq!(e["code"], 409, "{answer}"),
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let mut c = daemons[1].client();
    let got = c.result("Get", json!({"namespace": "n", "key": "counter"}));
    assert_eq!(
        (got["value"].as_u64(), got["version"].as_u64()),
        (Some(800), Some(801))
    );
    let mut versions = Vec::new();
    let mut before: Option<u64> = None;
    loop {
        let mut params = json!({"namespace": "n", "key": "counter", "limit": 1000});
        if let Some(v) = before {
            params["before_version"] = json!(v);
        }
        let page = c.result("History", params);
        let entries = page["history"].as_array().expect("history").clone();
        if entries.is_empty() {
            break;
        }
        versions.extend(entries.iter().map(|e| e["version"].as_u64().unwrap()));
        before = versions.last().copied();
    }
    assert_eq!(
        versions,
        (1..=801).rev().collect::<Vec<_>>(),
        "801 contiguous versions"
    );
}

/// `got` is a lock granted after `previous_owner` let it go.
fn granted_after(got: &Value, previous_owner: &str) {
    assert_eq!(got["status"], "acquired", "{got}");
    assert_eq!(got["previous"]["owner"], previous_owner, "{got}");
}

/// Exclusivity and the dir:/file: hierarchy hold across instances, and fencing tokens
/// increase across all of them and across restarts.
#[test]
fn locks_exclude_across_instances_and_fencing_tokens_only_grow() {
    let Some(db) = postgres::shared() else { return };
    let mut daemons = instances(&db, 2);
    let (mut a, mut b) = (daemons[0].client(), daemons[1].client());
    let dir = acquire(&mut a, "dir:src", "alice");
    assert_eq!(dir["status"], "acquired");
    let inside = acquire(&mut b, "file:src/main.rs", "bob");
    assert_eq!(inside["status"], "busy", "{inside}");
    let same = acquire(&mut b, "dir:src", "bob");
    assert_eq!(same["status"], "busy");
    let other = acquire(&mut b, "file:docs/x.md", "bob");
    assert_eq!(other["status"], "acquired");
    let mut tokens = vec![
        dir["fencing_token"].as_u64().unwrap(),
        other["fencing_token"].as_u64().unwrap(),
    ];
    release(&mut a, &dir, "released");
    drop((a, b));
    daemons[0].sigterm();
    daemons[0].restart();
    for (i, d) in daemons.iter().enumerate() {
        let got = acquire(&mut d.client(), &format!("tool:t{i}"), "carol");
        tokens.push(got["fencing_token"].as_u64().unwrap());
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// Each acquisition shows how the key's last lease ended, whichever instance ended it, and
/// a lease released on one instance is free on the other at once.
#[test]
fn the_previous_outcome_and_the_free_key_cross_instances() {
    let Some(db) = postgres::shared() else { return };
    let daemons: Vec<Daemon> = (0..2).map(|_| Daemon::start_shared(&db, &[])).collect();
    let (mut a, mut b) = (daemons[0].client(), daemons[1].client());
    let mut clients = [&mut a, &mut b];
    let mut last: Option<(String, String)> = None;
    for round in 0..6 {
        let (owner, outcome) = (
            format!("agent-{round}"),
            ["modified", "released"][round % 2],
        );
        let c = &mut clients[round % 2];
        let got = acquire(c, "file:src/shared.rs", &owner);
        assert_eq!(got["status"], "acquired", "round {round}: {got}");
        match &last {
            Some((owner, outcome)) => {
                assert_eq!(
                    got["previous"]["owner"],
                    owner.as_str(),
                    "round {round}: {got}"
                );
                assert_eq!(got["previous"]["outcome"], outcome.as_str(), "{got}");
            }
            None => assert!(got.get("previous").is_none_or(Value::is_null), "{got}"),
        }
        c.result(
            "ReleaseResourceLock",
            json!({"resource_key": "file:src/shared.rs", "lease_id": got["lease_id"],
                   "outcome": outcome}),
        );
        last = Some((owner, outcome.to_string()));
    }
}

/// A waiter queued on one instance is handed the lock when a holder on another releases.
#[test]
fn a_waiter_on_one_instance_is_handed_a_lock_released_on_another() {
    let Some(db) = postgres::shared() else { return };
    // Heartbeats (a third of the instance timeout) would wake B's writer too; an hour
    // apart, only the commit's notification can hand the lock over before the wait ends.
    let daemons: Vec<Daemon> = (0..2)
        .map(|_| Daemon::start_shared(&db, &["--instance-timeout-secs", "3600"]))
        .collect();
    let mut a = daemons[0].client();
    let held = acquire(&mut a, "tool:deploy", "alice");
    let socket = daemons[1].socket_path();
    let waiter = thread::spawn(move || {
        let mut b = Client::connect(&socket);
        b.set_read_timeout(Duration::from_secs(60));
        acquire_with(&mut b, "tool:deploy", "bob", json!({"wait_ms": 30_000}))
    });
    // The waiter is queued on B once B's Metrics count it.
    let mut b = daemons[1].client();
    crate::common::wait_until(Duration::from_secs(20), || {
        b.result("Metrics", json!({}))["locks"]["waiting"] == 1
    });
    release(&mut a, &held, "released");
    let granted = waiter.join().unwrap();
    granted_after(&granted, "alice");
    assert!(granted["fencing_token"].as_u64() > held["fencing_token"].as_u64());
    // The grant B's writer made while catching up moved the one revision sequence: both
    // instances go on writing after it, with no seq taken twice.
    let on_a = a.set("n", "after-hand-off", json!(1));
    let on_b = b.set("n", "after-hand-off", json!(2));
    assert_eq!(
        on_b["revision"].as_u64(),
        on_a["revision"].as_u64().map(|r| r + 1),
        "{on_a} / {on_b}"
    );
    let events = b.result("ReadEvents", json!({"since_seq": 0}));
    let seqs = crate::common::u64s(&events["events"], "seq");
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

/// A message sent through one instance wakes a ReadInbox waiting on another.
#[test]
fn a_message_sent_through_one_instance_wakes_a_reader_waiting_on_another() {
    let Some(db) = postgres::shared() else { return };
    let daemons = instances(&db, 2);
    let mut a = daemons[0].client();
    let alice = a.result("RegisterAgent", json!({"name": "alice"}))["session_id"].clone();
    let mut b = daemons[1].client();
    let bob = b.result("RegisterAgent", json!({"name": "bob"}))["session_id"].clone();
    let socket = daemons[1].socket_path();
    let reader = thread::spawn(move || {
        let mut c = Client::connect(&socket);
        c.set_read_timeout(Duration::from_secs(60));
        c.result("ReadInbox", json!({"session_id": bob, "wait_ms": 60_000}))
    });
    crate::common::wait_until(Duration::from_secs(20), || {
        b.result("Metrics", json!({}))["inbox_waiters"] == 1
    });
    a.result(
        "SendMessage",
        json!({"session_id": alice, "to": ["bob"], "body": "the build is yours"}),
    );
    let inbox = reader.join().unwrap();
    assert_eq!(
        inbox["messages"][0]["body"], "the build is yours",
        "{inbox}"
    );
    assert_eq!(inbox["messages"][0]["from"], "alice");
}

/// A node completed on one instance makes its dependents runnable for a worker on another,
/// and a node has one live lease whichever instance hands it out.
#[test]
fn tasks_flow_across_instances() {
    let Some(db) = postgres::shared() else { return };
    let daemons = instances(&db, 2);
    let (mut a, mut b) = (daemons[0].client(), daemons[1].client());
    let task = a.result(
        "RegisterTask",
        json!({"goal": "ship", "nodes": [
            {"id": "build"},
            {"id": "test", "dependencies": ["build"]}
        ]}),
    );
    let task_id = task["task_id"].clone();
    let build = b.result(
        "AcquireNextNode",
        json!({"task_id": task_id, "lease_owner": "w1"}),
    );
    assert_eq!(build["node_id"], "build");
    let none = a.result(
        "AcquireNextNode",
        json!({"task_id": task_id, "lease_owner": "w2"}),
    );
    assert!(
        none.is_null(),
        "build is leased through B, test waits on it: {none}"
    );
    b.result(
        "CompleteNode",
        json!({"task_id": task_id, "node_id": "build", "lease_id": build["lease_id"], "result": {"ok": true}}),
    );
    let test = a.result(
        "AcquireNextNode",
        json!({"task_id": task_id, "lease_owner": "w2"}),
    );
    assert_eq!(test["node_id"], "test", "{test}");
}

/// A killed backend connection fails the writes in flight with 503 (nothing half-applied)
/// and the instance reconnects by itself.
#[test]
fn a_killed_backend_connection_is_survived() {
    let Some(db) = postgres::shared() else { return };
    let daemons = instances(&db, 1);
    let mut c = daemons[0].client();
    c.result("Set", json!({"namespace": "n", "key": "k", "value": 1}));
    db.terminate_connections();
    let mut errors = 0;
    let set = loop {
        let answer = c.call(
            "Set",
            json!({"namespace": "n", "key": "k", "value": 2, "expected_version": 1}),
        );
        match answer.get("error") {
            None => break answer["result"].clone(),
            Some(e) => {
                assert_eq!(e["code"], 503, "a storage fault is 503: {answer}");
                errors += 1;
                assert!(errors < 10, "the instance did not reconnect");
            }
        }
    };
    assert_eq!(set["version"], 2);
    let got = c.result("Get", json!({"namespace": "n", "key": "k"}));
    assert_eq!(
        (got["value"].as_u64(), got["version"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(c.result("Health", json!({}))["status"], "ok");
}

/// A waiter queued on `on` for up to `wait_ms`, in a thread of its own (which gives up
/// after a minute); returns once `on` counts it.
fn queue_waiter(
    on: &Daemon,
    key: &'static str,
    owner: &'static str,
    wait_ms: u64,
) -> thread::JoinHandle<(Value, Client)> {
    let before = on.client().result("Metrics", json!({}))["locks"]["waiting"]
        .as_u64()
        .unwrap_or(0);
    let socket = on.socket_path();
    let waiter = thread::spawn(move || {
        let mut c = Client::connect(&socket);
        c.set_read_timeout(Duration::from_secs(60));
        (
            acquire_with(&mut c, key, owner, json!({"wait_ms": wait_ms})),
            c,
        )
    });
    let mut probe = on.client();
    crate::common::wait_until(Duration::from_secs(20), || {
        probe.result("Metrics", json!({}))["locks"]["waiting"] == before + 1
    });
    waiter
}

/// Waiters queued on different instances are served in the order they queued, whichever
/// instance the lock is freed on: the instance that frees it does not hand it to its own
/// waiter ahead of an older one elsewhere.
#[test]
fn waiters_on_two_instances_are_served_in_the_order_they_queued() {
    let Some(db) = postgres::shared() else { return };
    let daemons: Vec<Daemon> = (0..2)
        .map(|_| Daemon::start_shared(&db, &["--instance-timeout-secs", "3600"]))
        .collect();
    let mut a = daemons[0].client();
    let held = acquire(&mut a, "tool:fifo", "holder");
    // First in line: a waiter on B; second: one on A, where the lock is released.
    let first = queue_waiter(&daemons[1], "tool:fifo", "first", 20_000);
    let second = queue_waiter(&daemons[0], "tool:fifo", "second", 20_000);
    // Either instance lists every instance's waiters, in the order they are served.
    for c in [&mut a, &mut daemons[1].client()] {
        let listed = c.result("ListResourceLocks", json!({"prefix": "tool:fifo"}));
        let owners: Vec<&str> = listed["waiting"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|w| w["owner"].as_str())
            .collect();
        assert_eq!(owners, ["first", "second"], "{listed}");
    }
    release(&mut a, &held, "released");
    let (got, mut on_b) = first.join().unwrap();
    granted_after(&got, "holder");
    let status = a.result("ResourceLockStatus", json!({"resource_key": "tool:fifo"}));
    assert_eq!(status["held_by"]["owner"], "first", "{status}");
    release(&mut on_b, &got, "released");
    let (next, _) = second.join().unwrap();
    granted_after(&next, "first");
}

/// The waits of an instance killed with -9 leave the line once it is found silent, so the
/// waiters queued after them on live instances are served.
#[test]
fn a_dead_instances_waiters_leave_the_line() {
    let Some(db) = postgres::shared() else { return };
    let mut doomed = Daemon::start_shared(&db, &["--instance-timeout-secs", "1"]);
    let survivor = Daemon::start_shared(&db, &["--instance-timeout-secs", "1"]);
    let mut a = survivor.client();
    let held = acquire(&mut a, "tool:line", "holder");
    let _lost = queue_waiter(&doomed, "tool:line", "lost", 20_000);
    // Its wait outlasts its client's patience: only the dead waiter leaving the line gets
    // it the lock in time.
    let next = queue_waiter(&survivor, "tool:line", "next", 3_600_000);
    doomed.kill9();
    release(&mut a, &held, "released");
    let (got, _) = next.join().unwrap();
    granted_after(&got, "holder");
}

/// An instance killed with -9 stops heartbeating; another ends the leases and sessions tied
/// to its connections within BATON_INSTANCE_TIMEOUT_SECS, as `abandoned` / `disconnected`.
#[test]
fn what_a_dead_instance_held_for_its_connections_ends() {
    let Some(db) = postgres::shared() else { return };
    let mut doomed = Daemon::start_shared(&db, &["--instance-timeout-secs", "1"]);
    let survivor = Daemon::start_shared(&db, &["--instance-timeout-secs", "1"]);
    let mut a = doomed.client();
    let held = a.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:deploy", "owner": "alice", "release_on_disconnect": true}),
    );
    assert_eq!(held["status"], "acquired");
    let kept = a.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:other", "owner": "alice", "ttl_secs": 600}),
    );
    a.result(
        "RegisterAgent",
        json!({"name": "alice", "release_on_disconnect": true}),
    );
    doomed.kill9();
    let mut b = survivor.client();
    crate::common::wait_until(Duration::from_secs(30), || {
        b.result("ResourceLockStatus", json!({"resource_key": "tool:deploy"}))["status"] != "held"
    });
    let next = acquire(&mut b, "tool:deploy", "bob");
    assert_eq!(next["previous"]["outcome"], "abandoned", "{next}");
    let agents = b.result("ListAgents", json!({}));
    assert_eq!(
        agents["agents"],
        json!([]),
        "alice's session ended with its connection"
    );
    let other = b.result("ResourceLockStatus", json!({"resource_key": "tool:other"}));
    assert_eq!(
        other["status"], "held",
        "a lease not tied to a connection lives on: {other}"
    );
    assert_eq!(other["held_by"]["fencing_token"], kept["fencing_token"]);
}

/// Lease expiry is judged by the database server's clock: daemons whose clocks are hours
/// apart stamp the same `expires_at` and agree on whether a lease has lapsed.
#[test]
fn daemons_whose_clocks_are_hours_off_agree_on_expiry() {
    let Some(db) = postgres::shared() else { return };
    const THREE_HOURS: &str = "10800000";
    let ahead = Daemon::start_shared_env(&db, &[], &[("BATON_TEST_CLOCK_SKEW_MS", THREE_HOURS)]);
    let behind = Daemon::start_shared_env(
        &db,
        &[],
        &[("BATON_TEST_CLOCK_SKEW_MS", &format!("-{THREE_HOURS}"))],
    );
    let mut a = ahead.client();
    let mut b = behind.client();
    let real_now = chrono::Utc::now().timestamp_millis();
    let expires_ms = |lease: &Value| {
        let at = lease["expires_at"]
            .as_str()
            .unwrap_or_else(|| panic!("{lease}"));
        chrono::DateTime::parse_from_rfc3339(at)
            .expect("an RFC 3339 time")
            .timestamp_millis()
    };

    // Both stamp leases with the database's time, not their own.
    let on_a = a.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:a", "owner": "alice", "ttl_secs": 60}),
    );
    let on_b = b.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:b", "owner": "bob", "ttl_secs": 60}),
    );
    for lease in [&on_a, &on_b] {
        let off = expires_ms(lease) - (real_now + 60_000);
        assert!(off.abs() < 30_000, "expires_at is {off} ms off: {lease}");
    }

    // The daemon three hours ahead does not take the other's fresh lease as lapsed.
    let refused = acquire(&mut a, "tool:b", "carol");
    assert_eq!(refused["status"], "busy", "{refused}");
    assert_eq!(refused["held_by"]["owner"], "bob");

    // The daemon three hours behind sees a short lease lapse on time: its waiter gets
    // the lock when the database's clock passes expires_at, not three hours later.
    let short = a.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:short", "owner": "alice", "ttl_secs": 1}),
    );
    assert_eq!(short["status"], "acquired");
    let next = acquire_with(&mut b, "tool:short", "bob", json!({"wait_ms": 20_000}));
    assert_eq!(next["status"], "acquired", "{next}");
    assert_eq!(next["previous"]["outcome"], "expired", "{next}");
    assert!(next["fencing_token"].as_u64() > short["fencing_token"].as_u64());
}

/// kill -9 of an instance under load loses no acknowledged write: every Set a client saw
/// answered is in the database, as another instance reads it, and the journal has no gap.
#[test]
fn an_instance_killed_under_load_loses_no_acknowledged_write() {
    let Some(db) = postgres::shared() else { return };
    let mut doomed = Daemon::start_shared(&db, &[]);
    let survivor = Daemon::start_shared(&db, &[]);
    const WRITERS: usize = 8;
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let path = doomed.socket_path();
            thread::spawn(move || {
                let mut c = Client::connect(&path);
                let mut acked = 0u64;
                loop {
                    let next = acked + 1;
                    let request = json!({"id": next, "method": "Set", "params":
                        {"namespace": "load", "key": format!("w{w}"), "value": next}});
                    if !c.try_send_raw(format!("{request}\n").as_bytes()) {
                        return acked;
                    }
                    match c.try_read_line() {
                        Some(answer) if answer["result"]["version"] == json!(next) => acked = next,
                        Some(answer) => panic!("unexpected answer: {answer}"),
                        None => return acked,
                    }
                }
            })
        })
        .collect();
    // Let the load run until every writer has a few dozen writes acknowledged.
    let mut watch = survivor.client();
    crate::common::wait_until(Duration::from_secs(60), || {
        (0..WRITERS).all(|w| {
            let got = watch.call("Get", json!({"namespace": "load", "key": format!("w{w}")}));
            got["result"]["version"].as_u64().unwrap_or(0) >= 30
        })
    });
    doomed.kill9();
    let acked: Vec<u64> = writers.into_iter().map(|w| w.join().unwrap()).collect();

    let mut c = survivor.client();
    for (w, acked) in acked.iter().enumerate() {
        let got = c.get("load", &format!("w{w}"));
        let stored = got["value"].as_u64().expect("a number");
        assert!(
            stored == *acked || stored == acked + 1,
            "writer {w} had {acked} acknowledged, the database holds {stored}"
        );
        assert_eq!(got["version"].as_u64(), Some(stored));
    }
    // The journal is whole: one event per revision, from 1 to the head.
    let seqs = every_seq(&mut c);
    let head = seqs.len() as u64;
    assert_eq!(seqs, (1..=head).collect::<Vec<_>>());
    assert!(head >= (WRITERS * 30) as u64);
    // And the survivor still writes after it.
    let set = c.set("load", "after", json!(1));
    assert_eq!(set["revision"].as_u64(), Some(head + 1), "{set}");
}

/// Instances that start and stop while another writes never move the head revision
/// backwards nor reuse a seq: a daemon starting up recovers under the writer lock, so
/// the head it stores is the one every instance committed before it. 20 rounds of an
/// instance started, written through and stopped (SIGTERM or kill -9) beside 8 writers;
/// every write is answered, the journal is one gap-free sequence, and both the old and a
/// new instance still write after it.
#[test]
fn instances_starting_and_stopping_under_load_never_stop_writes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let Some(db) = postgres::shared() else { return };
    let steady = Daemon::start_shared(&db, &[]);
    const WRITERS: usize = 8;
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (path, stop) = (steady.socket_path(), stop.clone());
            thread::spawn(move || {
                let mut c = Client::connect(&path);
                let mut written = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let answer = c.call(
                        "Set",
                        json!({"namespace": "load", "key": format!("w{w}"), "value": written}),
                    );
                    assert!(answer.get("error").is_none(), "writer {w}: {answer}");
                    written += 1;
                }
                written
            })
        })
        .collect();
    for round in 0..20 {
        let mut passing = Daemon::start_shared(&db, &[]);
        let set = passing.client().set("passing", "round", json!(round));
        assert!(set["revision"].as_u64().is_some(), "round {round}: {set}");
        if round % 2 == 0 {
            passing.sigterm();
        } else {
            passing.kill9();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let written: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(written > 0);

    let mut c = steady.client();
    let seqs = every_seq(&mut c);
    let head = seqs.len() as u64;
    assert_eq!(
        seqs,
        (1..=head).collect::<Vec<_>>(),
        "one gap-free sequence"
    );
    let set = c.set("load", "after", json!(1));
    assert_eq!(set["revision"].as_u64(), Some(head + 1), "{set}");
    let fresh = Daemon::start_shared(&db, &[]);
    let set = fresh.client().set("load", "after", json!(2));
    assert_eq!(set["revision"].as_u64(), Some(head + 2), "{set}");
    let set = c.set("load", "after", json!(3));
    assert_eq!(set["revision"].as_u64(), Some(head + 3), "{set}");
}

/// A database whose stored head fell behind its journal (as a daemon before the fix above
/// could leave it: every write then failed on a duplicate seq) is repaired by the daemon
/// itself: the head becomes the journal's last seq, and writes go on from there on every
/// instance, with no SQL by hand.
#[test]
fn a_head_behind_the_journal_is_repaired_by_the_daemon() {
    let Some(db) = postgres::shared() else { return };
    let daemons = instances(&db, 2);
    let mut a = daemons[0].client();
    for i in 0..10 {
        a.set("n", &format!("k{i}"), json!(i));
    }
    db.execute("UPDATE meta SET value = 3 WHERE name = 'revision'");
    let set = daemons[1].client().set("n", "after", json!(1));
    assert_eq!(set["revision"].as_u64(), Some(11), "{set}");
    let set = a.set("n", "after", json!(2));
    assert_eq!(set["revision"].as_u64(), Some(12), "{set}");
    let page = a.result("ReadEvents", json!({"since_seq": 0}));
    assert_eq!(
        crate::common::u64s(&page["events"], "seq"),
        (1..=12).collect::<Vec<_>>()
    );
    assert!(
        daemons[0]
            .log()
            .contains("head revision was behind the journal")
            || daemons[1]
                .log()
                .contains("head revision was behind the journal"),
        "the repair is reported"
    );
}

/// A COMMIT whose answer is lost (the connection broke) is never answered "nothing was
/// written" when it was: each batch records its number in the same transaction, and the
/// daemon reads it back on a fresh connection. Every third commit's answer is lost here;
/// every Publish is answered as done, and its payload is in the journal exactly once.
#[test]
fn a_commit_whose_answer_was_lost_is_answered_with_the_truth() {
    let Some(db) = postgres::shared() else { return };
    let daemon = Daemon::start_shared_env(&db, &[], &[("BATON_TEST_LOSE_COMMIT_ANSWERS", "3")]);
    let mut c = daemon.client();
    for i in 0..12 {
        let published = c.result(
            "Publish",
            json!({"topic": "t", "payload": i, "idempotency_key": format!("publish-{i}")}),
        );
        assert!(published["event_seq"].as_u64().is_some(), "{published}");
    }
    let page = c.result("ReadEvents", json!({"since_seq": 0, "types": ["custom.t"]}));
    let payloads: Vec<u64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["data"].as_u64().unwrap())
        .collect();
    assert_eq!(payloads, (0..12).collect::<Vec<_>>());
    assert!(daemon.log().contains("the batch had committed"));
}

/// A PostgreSQL that cannot be used at start-up is named, with the cause and what to
/// check (never the password).
#[test]
fn start_up_errors_name_the_server_the_cause_and_what_to_check() {
    let Some(db) = postgres::shared() else { return };
    let mut daemon = Daemon::start_shared(&db, &[]);
    daemon.sigterm();
    let url = db.url();
    let (base, _) = url.rsplit_once('/').unwrap();
    let missing = format!("{base}/baton_it_missing_database");
    let (status, stderr) = daemon.run_another(&["--database-url", &missing]);
    assert!(!status.success());
    assert!(
        stderr.contains("database `baton_it_missing_database`"),
        "{stderr}"
    );
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(stderr.contains("createdb"), "{stderr}");
    // A port nothing listens on: the network's error and where to look.
    let (status, stderr) = daemon.run_another(&[
        "--database-url",
        "postgres://baton:sekret@127.0.0.1:1/baton",
    ]);
    assert!(!status.success());
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
    assert!(stderr.contains("refused"), "{stderr}");
    assert!(stderr.contains("listen_addresses"), "{stderr}");
    assert!(!stderr.contains("sekret"), "{stderr}");
}
