//! Concurrency and durability: optimistic increments from many clients, restarts, and
//! `kill -9` while clients stream acknowledged writes.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};

use crate::common::Daemon;
use serde_json::json;

#[test]
fn sixteen_clients_incrementing_one_counter_lose_no_update() {
    const CLIENTS: usize = 16;
    const INCREMENTS: u64 = 50;
    let daemon = Daemon::start();
    daemon.client().result(
        "Set",
        json!({"namespace": "c", "key": "counter", "value": 0, "expected_version": 0}),
    );
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|w| {
            let mut c = daemon.client();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut conflicts = 0;
                for _ in 0..INCREMENTS {
                    loop {
                        let current = c.get("c", "counter");
                        let (value, version) = (
                            current["value"].as_u64().unwrap(),
                            current["version"].as_u64().unwrap(),
                        );
                        let response = c.call(
                            "Set",
                            json!({"namespace": "c", "key": "counter", "value": value + 1,
                                   "expected_version": version, "updated_by": format!("w{w}")}),
                        );
                        if response.get("result").is_some() {
                            break;
                        }
                        assert_eq!(response["error"]["code"], 409, "{response}");
                        conflicts += 1;
                    }
                }
                conflicts
            })
        })
        .collect();
    let conflicts: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let mut c = daemon.client();
    let counter = c.get("c", "counter");
    assert_eq!(counter["value"], CLIENTS as u64 * INCREMENTS);
    assert_eq!(counter["version"], CLIENTS as u64 * INCREMENTS + 1);
    let mut versions = Vec::new();
    let mut before = None;
    loop {
        let mut params = json!({"namespace": "c", "key": "counter", "limit": 1000});
        if let Some(b) = before {
            params["before_version"] = json!(b);
        }
        let page = c.result("History", params)["history"]
            .as_array()
            .unwrap()
            .clone();
        if page.is_empty() {
            break;
        }
        for h in &page {
            // Each version holds the value one more than the version before it.
            assert_eq!(
                h["value"].as_u64().unwrap() + 1,
                h["version"].as_u64().unwrap()
            );
            versions.push(h["version"].as_u64().unwrap());
        }
        before = versions.last().copied();
    }
    versions.reverse();
    assert_eq!(
        versions,
        (1..=801).collect::<Vec<u64>>(),
        "801 contiguous versions"
    );
    println!("conflicts retried: {conflicts}");
}

#[test]
fn a_restart_keeps_every_record_version_and_revision() {
    let mut daemon = Daemon::start();
    let mut c = daemon.client();
    for i in 0..20 {
        c.set("n", &format!("k{}", i % 5), json!(i));
    }
    c.result("Delete", json!({"namespace": "n", "key": "k0"}));
    c.result("Publish", json!({"topic": "t", "payload": "p"}));
    let export_before = c.result("Export", json!({}));
    let events_before = c.result("ReadEvents", json!({"limit": 1000}));
    drop(c);
    assert!(daemon.sigterm().success());
    daemon.restart();

    let mut c = daemon.client();
    assert_eq!(c.result("Export", json!({})), export_before);
    assert_eq!(
        c.result("ReadEvents", json!({"limit": 1000})),
        events_before
    );
    // The tombstone survived: re-creation continues from it, and revisions keep counting.
    let recreated = c.result(
        "Set",
        json!({"namespace": "n", "key": "k0", "value": "new", "expected_version": 0}),
    );
    assert_eq!(recreated["version"], 6);
    assert_eq!(recreated["revision"], 23);
}

#[test]
fn kill_9_loses_no_acknowledged_write() {
    const CLIENTS: usize = 8;
    const ACKS_BEFORE_KILL: usize = 2000;
    let mut daemon = Daemon::start();
    let (ack_tx, ack_rx) = mpsc::channel::<(String, u64)>();
    let writers: Vec<_> = (0..CLIENTS)
        .map(|w| {
            let mut c = daemon.client();
            let ack_tx = ack_tx.clone();
            std::thread::spawn(move || {
                let mut version = HashMap::new();
                for i in 0u64.. {
                    let key = format!("w{w}-k{}", i % 10);
                    let expected = *version.get(&key).unwrap_or(&0u64);
                    let line = json!({"id": i, "method": "Set",
                        "params": {"namespace": "d", "key": key, "value": i, "expected_version": expected}});
                    if !c.try_send_raw(format!("{line}\n").as_bytes()) {
                        return;
                    }
                    let Some(response) = c.try_read_line() else { return };
                    let Some(v) = response["result"]["version"].as_u64() else {
                        panic!("unexpected answer: {response}")
                    };
                    version.insert(key.clone(), v);
                    if ack_tx.send((key, v)).is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    drop(ack_tx);

    let mut acknowledged: HashMap<String, u64> = HashMap::new();
    for _ in 0..ACKS_BEFORE_KILL {
        let (key, version) = ack_rx.recv().unwrap();
        acknowledged.insert(key, version);
    }
    daemon.kill9();
    // Answers already read by the writers count as acknowledged too.
    while let Ok((key, version)) = ack_rx.recv() {
        let entry = acknowledged.entry(key).or_default();
        *entry = (*entry).max(version);
    }
    for w in writers {
        w.join().expect("writer thread");
    }

    daemon.restart();
    let mut c = daemon.client();
    for (key, version) in &acknowledged {
        let got = c.get("d", key);
        assert_eq!(got["found"], true, "{key} lost");
        assert!(
            got["version"].as_u64().unwrap() >= *version,
            "{key}: acknowledged v{version}, found {got}"
        );
    }
    assert!(
        acknowledged.len() >= 10,
        "writes were acknowledged before the kill"
    );
}
