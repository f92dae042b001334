//! Versioned state: Get, Set, Delete, List, History, Txn, ClearNamespace, Export, and
//! idempotency keys, against a real daemon.

use crate::common::{assert_error, u64s, Client, Daemon};
use serde_json::{json, Value};

#[test]
fn set_then_get_returns_value_version_and_writer() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let set = c.result(
        "Set",
        json!({"namespace": "campaign", "key": "budget", "value": {"usd": 10000}, "updated_by": "planner"}),
    );
    assert_eq!(set["version"], 1);
    assert_eq!(set["previous_version"], 0);
    assert_eq!(set["namespace"], "campaign");
    assert_eq!(set["key"], "budget");
    let revision = set["revision"].as_u64().unwrap();
    assert!(revision >= 1);

    let got = c.get("campaign", "budget");
    assert_eq!(got["found"], true);
    assert_eq!(got["value"], json!({"usd": 10000}));
    assert_eq!(got["version"], 1);
    assert_eq!(got["revision"], revision);
    assert_eq!(got["updated_by"], "planner");
    let at = got["updated_at"].as_str().unwrap();
    assert!(
        at.ends_with('Z') && at.len() == "2026-01-01T00:00:00.000Z".len(),
        "{at}"
    );

    let missing = c.get("campaign", "nope");
    assert_eq!(
        missing,
        json!({"found": false, "namespace": "campaign", "key": "nope"})
    );
}

#[test]
fn unconditional_set_is_last_writer_wins_and_counts_versions() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    for i in 1..=3 {
        assert_eq!(c.set("n", "k", json!(i))["version"], i);
    }
    assert_eq!(c.get("n", "k")["value"], 3);
}

#[test]
fn create_only_refuses_an_existing_key_with_its_current_state() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let params = json!({"namespace": "campaign", "key": "budget", "value": 10000, "expected_version": 0, "updated_by": "a"});
    assert_eq!(c.result("Set", params.clone())["version"], 1);
    let err = c.error(
        "Set",
        json!({"namespace": "campaign", "key": "budget", "value": 1, "expected_version": 0}),
    );
    let data = assert_error(&err, 409, "conflict");
    assert_eq!(data["namespace"], "campaign");
    assert_eq!(data["key"], "budget");
    assert_eq!(data["expected_version"], 0);
    assert_eq!(data["actual_version"], 1);
    assert_eq!(data["actual_value"], 10000);
    assert_eq!(data["actual_updated_by"], "a");
    assert!(data["actual_updated_at"].is_string());
    assert!(
        data["hint"]
            .as_str()
            .unwrap()
            .contains("expected_version 1"),
        "{data}"
    );
    assert_eq!(
        c.get("campaign", "budget")["value"],
        10000,
        "nothing changed"
    );
}

#[test]
fn compare_and_set_succeeds_only_at_the_expected_version() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    c.set("n", "k", json!("v1"));
    c.set("n", "k", json!("v2"));
    let err = c.error(
        "Set",
        json!({"namespace": "n", "key": "k", "value": "stale", "expected_version": 1}),
    );
    let data = assert_error(&err, 409, "conflict");
    assert_eq!(data["actual_version"], 2);
    assert_eq!(data["actual_value"], "v2");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("retry with expected_version 2"),
        "{err}"
    );

    let ok = c.result(
        "Set",
        json!({"namespace": "n", "key": "k", "value": "v3", "expected_version": 2}),
    );
    assert_eq!(ok["version"], 3);
    assert_eq!(ok["previous_version"], 2);

    let absent = c.error(
        "Set",
        json!({"namespace": "n", "key": "other", "value": 1, "expected_version": 4}),
    );
    let data = assert_error(&absent, 409, "conflict");
    assert_eq!(data["actual_version"], 0);
    assert_eq!(data["actual_value"], Value::Null);
}

#[test]
fn a_deleted_key_keeps_its_version_as_a_tombstone() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    c.set("n", "k", json!(1));
    c.set("n", "k", json!(2));
    let deleted = c.result(
        "Delete",
        json!({"namespace": "n", "key": "k", "expected_version": 2}),
    );
    assert_eq!(deleted["deleted"], true);
    assert_eq!(deleted["version"], 3);
    assert_eq!(c.get("n", "k")["found"], false);

    // A stale expected_version never matches again (no ABA); absent counts as version 0.
    let err = c.error(
        "Set",
        json!({"namespace": "n", "key": "k", "value": 9, "expected_version": 2}),
    );
    assert_eq!(assert_error(&err, 409, "conflict")["actual_version"], 0);
    let recreated = c.result(
        "Set",
        json!({"namespace": "n", "key": "k", "value": "again", "expected_version": 0}),
    );
    assert_eq!(recreated["version"], 4, "continues after the tombstone");

    let again = c.result("Delete", json!({"namespace": "n", "key": "missing"}));
    assert_eq!(again, json!({"deleted": false, "version": 0}));
    let err = c.error(
        "Delete",
        json!({"namespace": "n", "key": "k", "expected_version": 1}),
    );
    assert_error(&err, 409, "conflict");
    assert_eq!(c.get("n", "k")["value"], "again");
}

#[test]
fn history_is_newest_first_with_deletions_and_paging() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    c.result(
        "Set",
        json!({"namespace": "n", "key": "k", "value": "a", "updated_by": "x"}),
    );
    c.result(
        "Set",
        json!({"namespace": "n", "key": "k", "value": "b", "updated_by": "y"}),
    );
    c.result(
        "Delete",
        json!({"namespace": "n", "key": "k", "updated_by": "z"}),
    );
    c.set("n", "k", json!("c"));
    let history = c.result("History", json!({"namespace": "n", "key": "k"}))["history"].clone();
    let versions: Vec<u64> = u64s(&history, "version");
    assert_eq!(versions, [4, 3, 2, 1]);
    assert_eq!(history[1]["deleted"], true);
    assert_eq!(history[1]["updated_by"], "z");
    assert_eq!(history[2]["value"], "b");
    assert_eq!(history[3]["deleted"], false);
    let revisions: Vec<u64> = u64s(&history, "revision");
    assert!(revisions.windows(2).all(|w| w[0] > w[1]), "{revisions:?}");

    let page = c.result(
        "History",
        json!({"namespace": "n", "key": "k", "limit": 2, "before_version": 3}),
    );
    let versions: Vec<u64> = u64s(&page["history"], "version");
    assert_eq!(versions, [2, 1]);
    assert_eq!(
        c.result("History", json!({"namespace": "n", "key": "none"}))["history"],
        json!([])
    );
}

/// Versions are found from the newest back, with a mark every 64 versions: paging must
/// land on every version, at every page size, on either side of a mark, across a restart,
/// with other keys written in between.
#[test]
fn history_pages_through_hundreds_of_versions() {
    // Every version is kept (the default keeps 100).
    let mut daemon = Daemon::start_with(&["--history-keep", "all"]);
    let mut c = daemon.client();
    let mut expected = Vec::new();
    for i in 1..=200u64 {
        if i % 50 == 0 {
            c.result("Delete", json!({"namespace": "n", "key": "k"}));
            expected.push(json!(null));
        }
        c.set("n", "k", json!(i));
        expected.push(json!(i));
        c.set("n", "other", json!(i));
    }
    expected.reverse();
    let newest = expected.len() as u64;
    drop(c);
    assert!(daemon.sigterm().success());
    daemon.restart();
    let mut c = daemon.client();
    let page = |c: &mut Client, before: Option<u64>, limit: u64| -> Vec<(u64, Value)> {
        let mut params = json!({"namespace": "n", "key": "k", "limit": limit});
        if let Some(before) = before {
            params["before_version"] = json!(before);
        }
        c.result("History", params)["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (h["version"].as_u64().unwrap(), h["value"].clone()))
            .collect()
    };
    let whole = page(&mut c, None, 1000);
    let versions: Vec<u64> = whole.iter().map(|(v, _)| *v).collect();
    assert_eq!(versions, (1..=newest).rev().collect::<Vec<_>>());
    let values: Vec<Value> = whole.into_iter().map(|(_, v)| v).collect();
    assert_eq!(values, expected);
    for limit in [1, 7, 64, 65] {
        let mut before = None;
        let mut seen = Vec::new();
        loop {
            let got = page(&mut c, before, limit);
            if got.is_empty() {
                break;
            }
            assert!(got.len() as u64 <= limit);
            before = got.last().map(|(v, _)| *v);
            seen.extend(got.into_iter().map(|(v, _)| v));
        }
        assert_eq!(
            seen,
            (1..=newest).rev().collect::<Vec<_>>(),
            "limit {limit}"
        );
    }
    for before in [1, 2, 63, 64, 65, 128, 129, newest, newest + 1, newest + 100] {
        let got: Vec<u64> = page(&mut c, Some(before), 3)
            .into_iter()
            .map(|(v, _)| v)
            .collect();
        let want: Vec<u64> = (1..before.min(newest + 1)).rev().take(3).collect();
        assert_eq!(got, want, "before {before}");
    }
}

#[test]
fn list_pages_through_live_records_in_key_order() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    for key in ["b", "a", "c", "d", "e", "x/1", "x/2"] {
        c.set("n", key, json!(key));
    }
    c.set("other", "a", json!(0));
    c.result("Delete", json!({"namespace": "n", "key": "d"}));

    let mut keys = Vec::new();
    let mut after = Value::Null;
    let mut pages = 0;
    loop {
        let mut params = json!({"namespace": "n", "limit": 2});
        if !after.is_null() {
            params["after"] = after.clone();
        }
        let page = c.result("List", params);
        pages += 1;
        for r in page["records"].as_array().unwrap() {
            assert_eq!(r["value"], r["key"]);
            assert!(r["version"].as_u64().unwrap() >= 1);
            keys.push(r["key"].as_str().unwrap().to_string());
        }
        after = page["next_after"].clone();
        if after.is_null() {
            break;
        }
    }
    assert_eq!(keys, ["a", "b", "c", "e", "x/1", "x/2"]);
    assert!(pages >= 3);

    let prefixed = c.result("List", json!({"namespace": "n", "prefix": "x/"}));
    let keys: Vec<&str> = prefixed["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["x/1", "x/2"]);
    assert_eq!(prefixed["next_after"], Value::Null);

    for limit in [0, 1001] {
        let err = c.error("List", json!({"namespace": "n", "limit": limit}));
        assert_error(&err, 400, "invalid");
    }
}

#[test]
fn txn_applies_all_ops_or_none_and_lists_failed_compares() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    c.set("acct", "alice", json!(100));
    c.set("acct", "bob", json!(0));

    let failed = c.error(
        "Txn",
        json!({
            "compare": [
                {"namespace": "acct", "key": "alice", "version": 1},
                {"namespace": "acct", "key": "bob", "version": 7},
                {"namespace": "acct", "key": "carol", "version": 3},
                {"namespace": "acct", "key": "dave", "version": 0}
            ],
            "ops": [
                {"op": "set", "namespace": "acct", "key": "alice", "value": 50},
                {"op": "set", "namespace": "acct", "key": "bob", "value": 50}
            ]
        }),
    );
    let data = assert_error(&failed, 409, "conflict");
    let mut listed: Vec<(String, u64, u64)> = data["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["key"].as_str().unwrap().to_string(),
                f["expected_version"].as_u64().unwrap(),
                f["actual_version"].as_u64().unwrap(),
            )
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [("bob".to_string(), 7, 1), ("carol".to_string(), 3, 0)]
    );
    assert_eq!(c.get("acct", "alice")["value"], 100, "nothing applied");
    assert_eq!(c.get("acct", "bob")["value"], 0);

    let head_before = c.result("ReadEvents", json!({}))["next_seq"]
        .as_u64()
        .unwrap();
    let ok = c.result(
        "Txn",
        json!({
            "compare": [
                {"namespace": "acct", "key": "alice", "version": 1},
                {"namespace": "acct", "key": "bob", "version": 1},
                {"namespace": "acct", "key": "dave", "version": 0}
            ],
            "ops": [
                {"op": "set", "namespace": "acct", "key": "alice", "value": 50},
                {"op": "set", "namespace": "acct", "key": "bob", "value": 50},
                {"op": "delete", "namespace": "acct", "key": "alice"},
                {"op": "set", "namespace": "acct", "key": "dave", "value": null}
            ],
            "updated_by": "transfer"
        }),
    );
    let results = ok["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 4);
    let revisions: Vec<u64> = u64s(&ok["results"], "revision");
    assert_eq!(
        revisions,
        [
            head_before + 1,
            head_before + 2,
            head_before + 3,
            head_before + 4
        ],
        "one revision each"
    );
    assert_eq!(ok["revision"], head_before + 4);
    assert_eq!(results[2]["version"], 3, "alice: set to 2, deleted at 3");
    assert_eq!(c.get("acct", "alice")["found"], false);
    assert_eq!(c.get("acct", "bob")["value"], 50);
    let dave = c.get("acct", "dave");
    assert_eq!(dave["value"], Value::Null);
    assert_eq!(dave["updated_by"], "transfer");
}

#[test]
fn txn_with_a_bad_op_writes_nothing() {
    let daemon = Daemon::start_with(&["--max-value-bytes", "16"]);
    let mut c = daemon.client();
    let err = c.error(
        "Txn",
        json!({"ops": [
            {"op": "set", "namespace": "n", "key": "a", "value": 1},
            {"op": "set", "namespace": "n", "key": "b", "value": "this value is far too long"}
        ]}),
    );
    assert_error(&err, 413, "value_too_large");
    let err = c.error(
        "Txn",
        json!({"ops": [{"op": "set", "namespace": "n", "key": "", "value": 1}]}),
    );
    assert_error(&err, 400, "invalid");
    let err = c.error(
        "Txn",
        json!({"ops": [{"op": "set", "namespace": "n", "key": "a"}]}),
    );
    assert_eq!(
        assert_error(&err, -32602, "invalid_params")["field"],
        "ops[0].value"
    );
    assert_eq!(c.get("n", "a")["found"], false);
    assert_eq!(c.result("ReadEvents", json!({}))["events"], json!([]));
}

#[test]
fn clear_namespace_deletes_every_live_key_and_export_snapshots() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    for key in ["a", "b", "c"] {
        c.set("scratch", key, json!(key));
    }
    c.set("keep", "x", json!({"deep": [1, 2]}));
    let export = c.result("Export", json!({}));
    assert_eq!(export["records"].as_array().unwrap().len(), 4);
    assert_eq!(export["revision"], 4);
    let one = c.result("Export", json!({"namespace": "keep"}));
    assert_eq!(one["records"][0]["value"], json!({"deep": [1, 2]}));
    assert_eq!(one["records"][0]["namespace"], "keep");

    assert_eq!(
        c.result(
            "ClearNamespace",
            json!({"namespace": "scratch", "updated_by": "gc"})
        )["deleted"],
        3
    );
    assert_eq!(
        c.result("ClearNamespace", json!({"namespace": "scratch"}))["deleted"],
        0
    );
    assert_eq!(c.get("scratch", "a")["found"], false);
    let history =
        c.result("History", json!({"namespace": "scratch", "key": "b"}))["history"].clone();
    assert_eq!(history[0]["deleted"], true);
    assert_eq!(history[0]["updated_by"], "gc");
    let export = c.result("Export", json!({}));
    assert_eq!(export["records"].as_array().unwrap().len(), 1);
    assert_eq!(export["revision"], 7, "one revision per cleared key");

    // A cleared key written again continues its versions, and its history still walks
    // back through the tombstone the clear wrote to the first version.
    assert_eq!(c.set("scratch", "b", json!("again"))["version"], 3);
    let history =
        c.result("History", json!({"namespace": "scratch", "key": "b"}))["history"].clone();
    assert_eq!(u64s(&history, "version"), [3, 2, 1]);
    assert_eq!(history[0]["value"], "again");
    assert_eq!(history[1]["deleted"], true);
    assert_eq!(history[2]["value"], "b");
}

#[test]
fn idempotency_key_replays_the_first_answer_and_refuses_other_params() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let params = json!({"namespace": "n", "key": "k", "value": 1, "idempotency_key": "req-1"});
    let first = c.result("Set", params.clone());
    // Same request, keys in another order: the same answer, nothing written.
    let replay = c.result(
        "Set",
        json!({"idempotency_key": "req-1", "value": 1, "key": "k", "namespace": "n"}),
    );
    assert_eq!(first, replay);
    assert_eq!(c.get("n", "k")["version"], 1);
    assert_eq!(
        c.result("ReadEvents", json!({}))["events"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let err = c.error(
        "Set",
        json!({"namespace": "n", "key": "k", "value": 2, "idempotency_key": "req-1"}),
    );
    assert_error(&err, 409, "idempotency_conflict");
    let err = c.error(
        "Delete",
        json!({"namespace": "n", "key": "k", "idempotency_key": "req-1"}),
    );
    assert_error(&err, 409, "idempotency_conflict");
    assert_eq!(c.get("n", "k")["value"], 1);

    // A refused request is not remembered: the same key works once the request can succeed.
    let params = json!({"namespace": "n", "key": "k", "value": 5, "expected_version": 2, "idempotency_key": "req-2"});
    assert_error(&c.error("Set", params.clone()), 409, "conflict");
    c.set("n", "k", json!(4));
    assert_eq!(c.result("Set", params.clone())["version"], 3);
    assert_eq!(c.result("Set", params)["version"], 3);

    // Publish and Txn are idempotent too.
    let publish = json!({"topic": "t", "payload": {}, "idempotency_key": "pub-1"});
    let seq = c.result("Publish", publish.clone())["event_seq"].clone();
    assert_eq!(c.result("Publish", publish)["event_seq"], seq);
    let txn = json!({"ops": [{"op": "set", "namespace": "n", "key": "t", "value": 0}], "idempotency_key": "txn-1"});
    let first = c.result("Txn", txn.clone());
    assert_eq!(c.result("Txn", txn), first);
    assert_eq!(c.get("n", "t")["version"], 1);
}

#[test]
fn names_are_checked_before_anything_is_written() {
    let daemon = Daemon::start_with(&["--max-value-bytes", "64"]);
    let mut c = daemon.client();
    let long = "k".repeat(513);
    for params in [
        json!({"namespace": "", "key": "k", "value": 1}),
        json!({"namespace": "n", "key": "", "value": 1}),
        json!({"namespace": "n", "key": long, "value": 1}),
    ] {
        assert_error(&c.error("Set", params), 400, "invalid");
    }
    assert_eq!(
        c.set("n", &"k".repeat(512), json!(1))["version"],
        1,
        "512 bytes is allowed"
    );
    let big = "x".repeat(100);
    let err = c.error("Set", json!({"namespace": "n", "key": "big", "value": big}));
    let data = assert_error(&err, 413, "value_too_large");
    assert_eq!(data["limit"], 64);
    assert_eq!(c.get("n", "big")["found"], false);
    assert_error(
        &c.error("Publish", json!({"topic": "t", "payload": big})),
        413,
        "value_too_large",
    );
}
