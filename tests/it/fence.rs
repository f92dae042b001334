//! Fenced writes end to end: a write that names a lease (or its fencing token) lands only
//! while that claim holds. The stalled agent's story: it claimed a file, stalled past its
//! lease (the test clock moves past it), another agent took the file over, and every
//! late write the first sends with its fence is refused with nothing written or
//! journalled, while the new holder's go through.

use serde_json::{json, Value};

use crate::common::{acquired, acquired_with, assert_error, postgres, release, Client, Daemon};

fn fence_of(lease: &Value) -> Value {
    json!({"resource_key": lease["resource_key"], "lease_id": lease["lease_id"]})
}

fn token_fence(lease: &Value) -> Value {
    json!({"resource_key": lease["resource_key"], "fencing_token": lease["fencing_token"]})
}

/// The head revision, from the journal.
fn last_seq(c: &mut Client) -> u64 {
    let events = c.result("ReadEvents", json!({"since_seq": 0, "limit": 1000}));
    events["next_seq"].as_u64().expect("next_seq") - 1
}

/// Asserts a fenced refusal names the key's latest token and, when given, its holder.
#[track_caller]
fn assert_fenced(error: &Value, latest: &Value, holder: Option<&str>) {
    let data = assert_error(error, 409, "fenced");
    assert_eq!(data["latest_fencing_token"], *latest, "{error}");
    match holder {
        Some(owner) => assert_eq!(data["held_by"]["owner"], owner, "{error}"),
        None => assert_eq!(data["held_by"], Value::Null, "{error}"),
    }
}

#[test]
fn a_stalled_agents_late_writes_are_refused_and_the_new_holders_land() {
    let mut daemon = Daemon::start_on_test_clock();
    let mut first = daemon.client();
    let mut second = daemon.client();
    let task = first.result(
        "RegisterTask",
        json!({"goal": "report", "nodes": [{"id": "write"}]}),
    );
    let node = first.result(
        "AcquireNextNode",
        json!({"task_id": task["task_id"], "lease_owner": "first"}),
    );
    let stale = acquired_with(
        &mut first,
        "file:report.md",
        "first",
        json!({"ttl_secs": 1}),
    );
    // While the claim holds, the fenced write lands.
    first.result(
        "Set",
        json!({"namespace": "docs", "key": "report", "value": "draft 1", "fence": fence_of(&stale)}),
    );
    // The first agent stalls past its lease; the second takes the file over.
    daemon.advance_clock(1_000);
    let fresh = acquired(&mut second, "file:report.md", "second");
    assert!(fresh["fencing_token"].as_u64() > stale["fencing_token"].as_u64());
    let before = last_seq(&mut second);
    let latest = fresh["fencing_token"].clone();
    for fence in [fence_of(&stale), token_fence(&stale)] {
        let refused = first.error(
            "Set",
            json!({"namespace": "docs", "key": "report", "value": "late", "fence": fence}),
        );
        assert_fenced(&refused, &latest, Some("second"));
        let refused = first.error(
            "Delete",
            json!({"namespace": "docs", "key": "report", "fence": fence}),
        );
        assert_fenced(&refused, &latest, Some("second"));
        let refused = first.error(
            "Publish",
            json!({"topic": "report", "payload": {"done": true}, "fence": fence}),
        );
        assert_fenced(&refused, &latest, Some("second"));
        let refused = first.error(
            "Txn",
            json!({"ops": [
                {"op": "set", "namespace": "docs", "key": "other", "value": 1},
                {"op": "set", "namespace": "docs", "key": "report", "value": "late", "fence": fence},
            ]}),
        );
        assert_fenced(&refused, &latest, Some("second"));
        let refused = first.error(
            "CompleteNode",
            json!({"task_id": node["task_id"], "node_id": "write", "lease_id": node["lease_id"],
                   "result": "late", "fence": fence}),
        );
        assert_fenced(&refused, &latest, Some("second"));
    }
    // Nothing was written or journalled by any of them.
    assert_eq!(last_seq(&mut second), before);
    assert_eq!(second.get("docs", "report")["value"], "draft 1");
    assert_eq!(second.get("docs", "other")["found"], false);
    // The new holder's fenced writes land, by lease and by token.
    second.result(
        "Set",
        json!({"namespace": "docs", "key": "report", "value": "final", "fence": fence_of(&fresh)}),
    );
    second.result(
        "Txn",
        json!({"ops": [{"op": "set", "namespace": "docs", "key": "report", "value": "final 2",
                        "fence": token_fence(&fresh)}]}),
    );
    second.result(
        "Publish",
        json!({"topic": "report", "payload": {"done": true}, "fence": fence_of(&fresh)}),
    );
    assert_eq!(second.get("docs", "report")["value"], "final 2");
}

#[test]
fn a_token_older_than_the_latest_is_refused_after_release_and_restart() {
    let mut daemon = Daemon::start();
    let mut c = daemon.client();
    let old = acquired(&mut c, "tool:deploy", "a");
    release(&mut c, &old, "released");
    let new = acquired(&mut c, "tool:deploy", "b");
    release(&mut c, &new, "released");
    for crash in [false, true] {
        // Nobody holds the key: the latest token is the last lease's, and only it passes.
        let refused = c.error(
            "Set",
            json!({"namespace": "n", "key": "k", "value": 1, "fence": token_fence(&old)}),
        );
        assert_fenced(&refused, &new["fencing_token"], None);
        c.result(
            "Set",
            json!({"namespace": "n", "key": "k", "value": 2, "fence": token_fence(&new)}),
        );
        // A released lease no longer fences anything.
        let refused = c.error(
            "Set",
            json!({"namespace": "n", "key": "k", "value": 3, "fence": fence_of(&new)}),
        );
        assert_fenced(&refused, &new["fencing_token"], None);
        // What is stored survives a restart, and a crash (the ends the writer held back
        // are read again from the journal).
        match crash {
            true => daemon.kill9(),
            false => drop(daemon.sigterm()),
        }
        daemon.restart();
        c = daemon.client();
    }
    assert_eq!(c.get("n", "k")["value"], 2);
}

#[test]
fn shared_holders_ending_out_of_order_keep_the_larger_token_latest() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let shared = json!({"mode": "shared"});
    let first = acquired_with(&mut c, "file:data.csv", "reader-1", shared.clone());
    let second = acquired_with(&mut c, "file:data.csv", "reader-2", shared);
    release(&mut c, &second, "released");
    // The first still holds it: its lease fences, its token is no longer the latest.
    c.result(
        "Set",
        json!({"namespace": "n", "key": "k", "value": 1, "fence": fence_of(&first)}),
    );
    let refused = c.error(
        "Set",
        json!({"namespace": "n", "key": "k", "value": 2, "fence": token_fence(&first)}),
    );
    assert_fenced(&refused, &second["fencing_token"], Some("reader-1"));
    release(&mut c, &first, "released");
    let refused = c.error(
        "Set",
        json!({"namespace": "n", "key": "k", "value": 2, "fence": token_fence(&first)}),
    );
    assert_fenced(&refused, &second["fencing_token"], None);
}

#[test]
fn txn_compares_on_a_live_lease_and_on_the_latest_token() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let lease = acquired(&mut c, "tool:ci", "a");
    c.set("n", "k", json!(1));
    let ok = c.result(
        "Txn",
        json!({"compare": [
            {"namespace": "n", "key": "k", "version": 1},
            {"resource_key": "tool:ci", "lease_id": lease["lease_id"]},
            {"resource_key": "tool:ci", "fencing_token": lease["fencing_token"]},
        ], "ops": [{"op": "set", "namespace": "n", "key": "k", "value": 2}]}),
    );
    assert_eq!(ok["results"][0]["version"], 2);
    release(&mut c, &lease, "released");
    let newer = acquired(&mut c, "tool:ci", "b");
    let failed = c.error(
        "Txn",
        json!({"compare": [
            {"resource_key": "tool:ci", "lease_id": lease["lease_id"]},
            {"resource_key": "tool:ci", "fencing_token": lease["fencing_token"]},
        ], "ops": [{"op": "set", "namespace": "n", "key": "k", "value": 3}]}),
    );
    let data = assert_error(&failed, 409, "conflict");
    assert_eq!(data["failed"].as_array().unwrap().len(), 2, "{failed}");
    assert_eq!(data["failed"][0]["held"], true);
    assert_eq!(
        data["failed"][1]["latest_fencing_token"],
        newer["fencing_token"]
    );
    assert_eq!(c.get("n", "k")["value"], 2);
    // A compare that mixes a record and a lease is refused, naming it.
    let mixed = c.error(
        "Txn",
        json!({"compare": [{"namespace": "n", "key": "k", "version": 2, "resource_key": "tool:ci"}]}),
    );
    assert_eq!(
        assert_error(&mixed, -32602, "invalid_params")["field"],
        "compare[0]"
    );
    // A fence needs exactly one of lease_id and fencing_token.
    let both = c.error(
        "Set",
        json!({"namespace": "n", "key": "k", "value": 4,
               "fence": {"resource_key": "tool:ci", "lease_id": "x", "fencing_token": 1}}),
    );
    assert_eq!(
        assert_error(&both, -32602, "invalid_params")["field"],
        "fence"
    );
}

#[test]
fn check_fence_tells_a_downstream_store_whether_a_token_is_latest() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let never = c.result(
        "CheckFence",
        json!({"resource_key": "file:out.bin", "fencing_token": 0}),
    );
    assert_eq!(
        never,
        json!({"resource_key": "file:out.bin", "latest": true, "latest_fencing_token": 0, "held": false})
    );
    let old = acquired(&mut c, "file:out.bin", "a");
    release(&mut c, &old, "released");
    let new = acquired(&mut c, "file:out.bin", "b");
    let stale = c.result(
        "CheckFence",
        json!({"resource_key": "file:out.bin", "fencing_token": old["fencing_token"]}),
    );
    assert_eq!(stale["latest"], false);
    assert_eq!(stale["latest_fencing_token"], new["fencing_token"]);
    assert_eq!(stale["held"], true);
    let current = c.result(
        "CheckFence",
        json!({"resource_key": "file:out.bin", "fencing_token": new["fencing_token"]}),
    );
    assert_eq!(current["latest"], true);
}

/// On a shared database: the claim taken through one daemon, the stale write sent through
/// the other, which must see the newer lease in the write's own transaction.
#[test]
fn a_stale_write_through_another_instance_is_refused() {
    let Some(db) = postgres::shared() else { return };
    let one = Daemon::start_shared(&db, &[]);
    let two = Daemon::start_shared(&db, &[]);
    let (mut a, mut b) = (one.client(), two.client());
    let stale = acquired(&mut a, "file:shared.md", "first");
    // The stale fence passes through the other instance while its lease lives.
    b.result(
        "Set",
        json!({"namespace": "n", "key": "k", "value": 1, "fence": token_fence(&stale)}),
    );
    release(&mut a, &stale, "released");
    let fresh = acquired(&mut b, "file:shared.md", "second");
    for client in [&mut a, &mut b] {
        let refused = client.error(
            "Set",
            json!({"namespace": "n", "key": "k", "value": 2, "fence": token_fence(&stale)}),
        );
        assert_fenced(&refused, &fresh["fencing_token"], Some("second"));
        let refused = client.error(
            "Set",
            json!({"namespace": "n", "key": "k", "value": 2, "fence": fence_of(&stale)}),
        );
        assert_fenced(&refused, &fresh["fencing_token"], Some("second"));
    }
    a.result(
        "Set",
        json!({"namespace": "n", "key": "k", "value": 3, "fence": token_fence(&fresh)}),
    );
    assert_eq!(b.get("n", "k")["value"], 3);
}
