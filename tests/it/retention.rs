//! Bounded at any size: history and journal retention trimmed in the background, the
//! file giving freed pages back, and ClearNamespace and CompactJournal in steps that other
//! connections' writes interleave with, while the connection that sent them waits.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{assert_error, on_postgres, u64s, wait_until, Client, Daemon};

/// Sends every request before reading any answer; returns the answers in order.
fn pipelined(c: &mut Client, requests: &[(&str, Value)]) -> Vec<Value> {
    let mut text = String::new();
    for (i, (method, params)) in requests.iter().enumerate() {
        let line = json!({"id": 1_000_000 + i, "method": method, "params": params});
        text.push_str(&line.to_string());
        text.push('\n');
    }
    c.send_raw(text.as_bytes());
    (0..requests.len())
        .map(|i| {
            let answer = c.read_line();
            assert_eq!(answer["id"], json!(1_000_000 + i), "{answer}");
            answer
        })
        .collect()
}

/// `n` Sets of `key` (or of keys `key-0`.. when `distinct`) in namespace `ns`, pipelined.
fn sets(c: &mut Client, ns: &str, key: &str, n: usize, distinct: bool, value: Value) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(2000) {
        let requests: Vec<(&str, Value)> = chunk
            .iter()
            .map(|i| {
                let key = if distinct {
                    format!("{key}-{i}")
                } else {
                    key.to_string()
                };
                ("Set", json!({"namespace": ns, "key": key, "value": value}))
            })
            .collect();
        for answer in pipelined(c, &requests) {
            assert!(answer.get("result").is_some(), "{answer}");
        }
    }
}

/// Overwrites 10 keys `n` times in all: revisions that move retention on (a pass over the
/// history begins once about as many versions were written as the last pass kept, at
/// least 1,000), without adding keys whose versions it keeps.
fn churn(c: &mut Client, n: usize) {
    for i in 0..10 {
        sets(c, "churn", &format!("c{i}"), n / 10, false, json!(i));
    }
}

fn head(c: &mut Client) -> u64 {
    c.result("Metrics", json!({}))["journal"]["head_seq"]
        .as_u64()
        .unwrap()
}

const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn history_keeps_the_last_versions_and_answers_416_before_them() {
    let daemon = Daemon::start_with(&["--history-keep", "5"]);
    let mut c = daemon.client();
    sets(&mut c, "h", "k", 1200, false, json!("v"));
    churn(&mut c, 3000);
    // Trimmed in the background, a step at a time.
    wait_until(PATIENCE, || {
        c.call(
            "History",
            json!({"namespace": "h", "key": "k", "before_version": 3}),
        )
        .get("error")
        .is_some()
    });
    let err = c.error(
        "History",
        json!({"namespace": "h", "key": "k", "before_version": 3}),
    );
    let data = assert_error(&err, 416, "compacted");
    let oldest = data["oldest_version"].as_u64().unwrap();
    // Retention never removes the versions it keeps; it may still be on its way.
    assert!((2..=1196).contains(&oldest), "{err}");
    wait_until(PATIENCE, || {
        let all = c.result(
            "History",
            json!({"namespace": "h", "key": "k", "limit": 1000}),
        );
        all["history"].as_array().unwrap().len() == 5
    });
    let all = c.result(
        "History",
        json!({"namespace": "h", "key": "k", "limit": 1000}),
    );
    assert_eq!(
        u64s(&all["history"], "version"),
        vec![1200, 1199, 1198, 1197, 1196]
    );
    let err = c.error(
        "History",
        json!({"namespace": "h", "key": "k", "before_version": 1196}),
    );
    assert_eq!(assert_error(&err, 416, "compacted")["oldest_version"], 1196);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("BATON_HISTORY_KEEP"),
        "{err}"
    );
    let last = c.result(
        "History",
        json!({"namespace": "h", "key": "k", "before_version": 1197}),
    );
    assert_eq!(u64s(&last["history"], "version"), vec![1196]);
    // The key's current state and its next version are untouched.
    assert_eq!(c.set("h", "k", json!("w"))["version"], 1201);
    // A key with few versions keeps them all; before version 1 is nothing, not 416.
    c.set("h", "young", json!(1));
    let young = c.result(
        "History",
        json!({"namespace": "h", "key": "young", "before_version": 1}),
    );
    assert_eq!(young["history"], json!([]));
}

#[test]
fn the_journal_keeps_the_last_events_it_is_told_to() {
    let daemon = Daemon::start_with(&["--journal-retain", "100"]);
    let mut c = daemon.client();
    sets(&mut c, "j", "k", 600, true, json!(1));
    let head = head(&mut c);
    wait_until(PATIENCE, || {
        c.result("Metrics", json!({}))["journal"]["oldest_seq"] == json!(head - 99)
    });
    let err = c.error("ReadEvents", json!({"since_seq": 0}));
    assert_eq!(
        assert_error(&err, 416, "compacted")["oldest_seq"],
        json!(head - 99)
    );
    let kept = c.result(
        "ReadEvents",
        json!({"since_seq": head - 100, "limit": 1000}),
    );
    assert_eq!(kept["events"].as_array().unwrap().len(), 100);
    // Retention takes no revision: the head is where the writes left it.
    assert_eq!(crate::retention::head(&mut c), head);
}

#[test]
fn the_journal_keeps_events_younger_than_its_age() {
    let mut daemon = Daemon::start_on_test_clock_with(&["--journal-retain", "1m"]);
    let mut c = daemon.client();
    sets(&mut c, "age", "k", 50, true, json!(1));
    let old_head = head(&mut c);
    daemon.advance_clock(120_000);
    let young = c.set("age", "young", json!(1))["revision"]
        .as_u64()
        .unwrap();
    assert!(young > old_head);
    wait_until(PATIENCE, || {
        // Each write is a batch in which retention may look again.
        c.result("Publish", json!({"topic": "tick", "payload": 1}));
        let oldest = c.result("Metrics", json!({}))["journal"]["oldest_seq"]
            .as_u64()
            .unwrap();
        oldest > old_head
    });
    let err = c.error("ReadEvents", json!({"since_seq": 0}));
    assert_error(&err, 416, "compacted");
    let kept = c.result("ReadEvents", json!({"since_seq": young - 1, "limit": 10}));
    assert_eq!(kept["events"][0]["seq"], json!(young), "{kept}");
}

#[test]
fn trimmed_history_and_journal_give_their_pages_back_to_the_file_system() {
    if on_postgres() {
        // PostgreSQL reuses the space of deleted rows itself (autovacuum).
        return;
    }
    let mut daemon = Daemon::start();
    let mut c = daemon.client();
    let big = json!("x".repeat(4000));
    for _ in 0..4 {
        sets(&mut c, "f", "k", 500, true, big.clone());
    }
    let db_bytes = |c: &mut Client| {
        c.result("Metrics", json!({}))["storage"]["db_bytes"]
            .as_u64()
            .unwrap()
    };
    let before = db_bytes(&mut c);
    assert!(before > 8 << 20, "{before}");
    // Keep only the current version and the last event from now on (the env file: the
    // lowest layer; the suite points BATON_ENV_FILE at `absent.env`).
    std::fs::write(
        daemon.dir().join("absent.env"),
        "BATON_HISTORY_KEEP=1\nBATON_JOURNAL_RETAIN=1\n",
    )
    .unwrap();
    drop(c);
    daemon.sigterm();
    daemon.restart();
    let mut c = daemon.client();
    wait_until(PATIENCE, || db_bytes(&mut c) < before / 2);
    let after = db_bytes(&mut c);
    assert!(after < before / 2, "{before} -> {after}");
    let history = c.result("History", json!({"namespace": "f", "key": "k-7"}));
    assert_eq!(u64s(&history["history"], "version"), vec![4]);
}

/// Keys `n` of them, loaded in namespace `ns`.
fn load(c: &mut Client, ns: &str, n: usize) {
    sets(c, ns, "key", n, true, json!(1));
}

#[test]
fn other_connections_write_between_the_steps_of_a_clear() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    load(&mut c, "big", 20_000);
    let mut watcher = daemon.client();
    watcher.result(
        "Subscribe",
        json!({"filter": {"namespace": "big", "types": ["kv.delete"]}}),
    );
    let mut other = daemon.client();
    c.send_line(
        &json!({"id": 1, "method": "ClearNamespace", "params": {"namespace": "big"}}).to_string(),
    );
    // Once the first step committed, another connection's write is answered before the
    // clear is.
    let first = watcher.read_line();
    assert_eq!(first["params"]["event"]["type"], "kv.delete", "{first}");
    let between = other.set("elsewhere", "k", json!(1))["revision"]
        .as_u64()
        .unwrap();
    let cleared = c.read_line();
    assert_eq!(cleared["id"], 1);
    assert_eq!(cleared["result"]["deleted"], 20_000, "{cleared}");
    // The journal: one event per deleted key, and the other write among them.
    let mut deletes = Vec::new();
    let mut since = 0;
    loop {
        let page = c.result(
            "ReadEvents",
            json!({"since_seq": since, "namespace": "big", "types": ["kv.delete"], "limit": 1000}),
        );
        let events = page["events"].as_array().unwrap();
        deletes.extend(events.iter().map(|e| e["seq"].as_u64().unwrap()));
        let next = page["next_seq"].as_u64().unwrap();
        if events.is_empty() && next == since {
            break;
        }
        since = next;
        if since >= head(&mut c) {
            break;
        }
    }
    assert_eq!(deletes.len(), 20_000);
    let keys = c.result("List", json!({"namespace": "big"}));
    assert_eq!(keys["records"], json!([]));
    assert!(
        deletes.first().unwrap() < &between && &between < deletes.last().unwrap(),
        "the other connection's write ({between}) did not land between the clear's deletions ({}..{})",
        deletes.first().unwrap(),
        deletes.last().unwrap()
    );
}

#[test]
fn what_a_connection_sends_after_a_clear_applies_after_it() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    load(&mut c, "big", 5_000);
    let answers = pipelined(
        &mut c,
        &[
            ("ClearNamespace", json!({"namespace": "big"})),
            (
                "Set",
                json!({"namespace": "big", "key": "key-7", "value": "after"}),
            ),
            ("Get", json!({"namespace": "big", "key": "key-7"})),
            ("List", json!({"namespace": "big"})),
        ],
    );
    assert_eq!(answers[0]["result"]["deleted"], 5_000, "{}", answers[0]);
    let set = &answers[1]["result"];
    // Deleted by the clear (version 2), then written again.
    assert_eq!(set["version"], 3, "{set}");
    assert_eq!(answers[2]["result"]["value"], "after");
    assert_eq!(answers[3]["result"]["records"].as_array().unwrap().len(), 1);
    // The Set came after every deletion of the clear.
    let last_delete = c.result(
        "ReadEvents",
        json!({"since_seq": set["revision"].as_u64().unwrap() - 1, "namespace": "big", "limit": 10}),
    );
    assert_eq!(last_delete["events"][0]["type"], "kv.set", "{last_delete}");
}

#[test]
fn compacting_a_long_journal_runs_in_steps_and_answers_once_done() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    load(&mut c, "long", 5_000);
    let head = head(&mut c);
    let answers = pipelined(
        &mut c,
        &[
            ("CompactJournal", json!({"before_seq": head + 1})),
            ("ReadEvents", json!({"since_seq": head})),
        ],
    );
    let compacted = &answers[0]["result"];
    assert_eq!(compacted["oldest_seq"], json!(head + 1), "{}", answers[0]);
    assert!(
        compacted["deleted"].as_u64().unwrap() >= 5_000,
        "{compacted}"
    );
    // The read sent after it saw the whole compaction.
    assert_eq!(answers[1]["result"]["events"], json!([]), "{}", answers[1]);
    let err = c.error("ReadEvents", json!({"since_seq": head - 1}));
    assert_eq!(
        assert_error(&err, 416, "compacted")["oldest_seq"],
        json!(head + 1)
    );
    assert_eq!(crate::retention::head(&mut c), head);
}

#[test]
fn two_daemons_on_one_postgres_trim_side_by_side() {
    let Some(db) = crate::common::postgres::shared() else {
        return;
    };
    let daemons: Vec<Daemon> = (0..2)
        .map(|_| Daemon::start_shared(&db, &["--history-keep", "5", "--journal-retain", "50"]))
        .collect();
    let mut clients: Vec<Client> = daemons.iter().map(|d| d.client()).collect();
    // Both write the same key, so both trim what the other wrote too.
    for round in 0..6 {
        for c in clients.iter_mut() {
            sets(c, "pg", "k", 200, false, json!(round));
        }
    }
    for c in clients.iter_mut() {
        churn(c, 2000);
    }
    for c in clients.iter_mut() {
        wait_until(PATIENCE, || {
            let all = c.result(
                "History",
                json!({"namespace": "pg", "key": "k", "limit": 1000}),
            );
            all["history"].as_array().unwrap().len() == 5
        });
        let all = c.result(
            "History",
            json!({"namespace": "pg", "key": "k", "limit": 1000}),
        );
        assert_eq!(
            u64s(&all["history"], "version"),
            vec![2400, 2399, 2398, 2397, 2396]
        );
        let head = head(c);
        wait_until(PATIENCE, || {
            c.result("Publish", json!({"topic": "tick", "payload": 1}));
            let journal = &c.result("Metrics", json!({}))["journal"];
            journal["oldest_seq"].as_u64().unwrap() > head - 60
        });
    }
}
