//! Shared locks and slots: shared holders coexist and an exclusive one excludes them; the
//! `dir:`/`file:` hierarchy applies mode-wise; a queued exclusive request holds back later
//! shared ones; a counting key admits its slots and refuses a mismatched count.

use serde_json::json;

use crate::common::{acquire_with, assert_error, release, Daemon};

#[test]
fn shared_holders_coexist_and_an_exclusive_one_waits_for_all_of_them() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let shared = json!({"mode": "shared"});
    let a = acquire_with(&mut client, "artifact:schema", "reader-a", shared.clone());
    let b = acquire_with(&mut client, "artifact:schema", "reader-b", shared.clone());
    assert_eq!(a["status"], "acquired");
    assert_eq!(b["status"], "acquired");
    assert_eq!(a["mode"], "shared");
    assert!(b["fencing_token"].as_u64() > a["fencing_token"].as_u64());
    let busy = acquire_with(&mut client, "artifact:schema", "writer", json!({}));
    assert_eq!(busy["status"], "busy", "{busy}");
    let owners: Vec<&str> = busy["held_by"]
        .as_array()
        .expect("every holder of a shared key")
        .iter()
        .map(|h| h["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners, ["reader-a", "reader-b"]);
    release(&mut client, &a, "released");
    assert_eq!(
        acquire_with(&mut client, "artifact:schema", "writer", json!({}))["status"],
        "busy"
    );
    release(&mut client, &b, "released");
    let w = acquire_with(&mut client, "artifact:schema", "writer", json!({}));
    assert_eq!(w["status"], "acquired");
    let refused = acquire_with(&mut client, "artifact:schema", "reader-c", shared);
    assert_eq!(
        refused["status"], "busy",
        "an exclusive holder excludes readers"
    );
    // A shared request is about a key that can have several holders: held_by is a list.
    assert_eq!(refused["held_by"][0]["owner"], "writer");
}

#[test]
fn a_queued_exclusive_request_holds_back_later_shared_ones() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let reader = acquire_with(&mut client, "db:main", "reader", json!({"mode": "shared"}));
    let mut writer = daemon.client();
    writer.send_line(
        &json!({"id": 7, "method": "AcquireResourceLock", "params": {
            "resource_key": "db:main", "owner": "writer", "ttl_secs": 600, "wait_ms": 60000}})
        .to_string(),
    );
    // Once the writer is queued, a later reader must not overtake it.
    while client.result("Metrics", json!({}))["locks"]["waiting"] != 1 {
        std::thread::yield_now();
    }
    let late = acquire_with(
        &mut client,
        "db:main",
        "late-reader",
        json!({"mode": "shared"}),
    );
    assert_eq!(late["status"], "busy", "{late}");
    release(&mut client, &reader, "released");
    let granted = writer.read_line();
    assert_eq!(granted["result"]["status"], "acquired", "{granted}");
    assert_eq!(granted["result"]["owner"], "writer");
}

#[test]
fn the_hierarchy_applies_mode_wise() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let shared = json!({"mode": "shared"});
    acquire_with(&mut client, "dir:src", "indexer", shared.clone());
    // Shared inside a shared directory: fine; exclusive inside it: refused.
    let inside = acquire_with(&mut client, "file:src/a.rs", "reader", shared.clone());
    assert_eq!(inside["status"], "acquired");
    let edit = acquire_with(&mut client, "file:src/b.rs", "editor", json!({}));
    assert_eq!(edit["status"], "busy");
    assert_eq!(edit["conflicting_key"], "dir:src");
    // An exclusive directory over shared files inside it: refused.
    let whole = acquire_with(&mut client, "dir:src", "refactorer", json!({}));
    assert_eq!(whole["status"], "busy", "{whole}");
    // A shared directory above an exclusive file: refused.
    acquire_with(&mut client, "file:docs/x.md", "writer", json!({}));
    let docs = acquire_with(&mut client, "dir:docs", "indexer", shared);
    assert_eq!(docs["status"], "busy");
    assert_eq!(docs["conflicting_key"], "file:docs/x.md");
}

#[test]
fn a_counting_key_admits_its_slots_and_refuses_another_count() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let two = json!({"slots": 2});
    let first = acquire_with(&mut client, "tool:cargo-build", "a", two.clone());
    let second = acquire_with(&mut client, "tool:cargo-build", "b", two.clone());
    assert_eq!(first["status"], "acquired");
    assert_eq!(second["status"], "acquired");
    assert_eq!(first["slots"], 2);
    let third = acquire_with(&mut client, "tool:cargo-build", "c", two.clone());
    assert_eq!(third["status"], "busy");
    assert_eq!(third["held_by"].as_array().unwrap().len(), 2);
    let mismatch = client.error(
        "AcquireResourceLock",
        json!({"resource_key": "tool:cargo-build", "owner": "d", "slots": 3}),
    );
    let _ = assert_error(&mismatch, 400, "invalid");
    assert!(
        mismatch["message"]
            .as_str()
            .unwrap()
            .contains("pass slots: 2"),
        "{mismatch}"
    );
    let unslotted = client.error(
        "AcquireResourceLock",
        json!({"resource_key": "tool:cargo-build", "owner": "d"}),
    );
    let _ = assert_error(&unslotted, 400, "invalid");
    let on_a_file = client.error(
        "AcquireResourceLock",
        json!({"resource_key": "file:a.rs", "owner": "d", "slots": 2}),
    );
    let _ = assert_error(&on_a_file, -32602, "invalid_params");
    release(&mut client, &first, "released");
    assert_eq!(
        acquire_with(&mut client, "tool:cargo-build", "c", two)["status"],
        "acquired"
    );
}

#[test]
fn the_status_of_a_counting_key_shows_every_holder() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let status = |client: &mut crate::common::Client| {
        client.result(
            "ResourceLockStatus",
            json!({"resource_key": "tool:build-box"}),
        )
    };
    let two = json!({"slots": 2});
    let first = acquire_with(&mut client, "tool:build-box", "a", two.clone());
    // One slot of two taken: held, by that one holder, with the key's slots.
    let one = status(&mut client);
    assert_eq!(one["status"], "held", "{one}");
    assert_eq!(one["held_by"][0]["owner"], "a");
    assert_eq!(one["held_by"][0]["slots"], 2);
    acquire_with(&mut client, "tool:build-box", "b", two);
    let both = status(&mut client);
    let owners: Vec<&str> = both["held_by"]
        .as_array()
        .expect("every holder")
        .iter()
        .map(|h| h["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners, ["a", "b"], "{both}");
    assert_eq!(both["conflicting_key"], "tool:build-box");
    release(&mut client, &first, "released");
    let left = status(&mut client);
    assert_eq!(left["held_by"].as_array().unwrap().len(), 1, "{left}");
}
