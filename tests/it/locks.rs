//! Resource locks against a real daemon: leases, canonical keys, dir/file conflicts,
//! fencing, fair waiting, release on disconnect, and their journal events (expiry is in
//! `lock_expiry`).

use crate::common::{acquire, acquired, assert_error, release, u64s, Client, Daemon};
use serde_json::{json, Value};

/// Sends an acquire that waits, without reading the answer.
pub(crate) fn send_waiting_acquire(
    client: &mut Client,
    key: &str,
    owner: &str,
    wait_ms: u64,
    extra: Value,
) {
    let mut params = json!({"resource_key": key, "owner": owner, "wait_ms": wait_ms});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    client.send_line(
        &json!({"id": owner, "method": "AcquireResourceLock", "params": params}).to_string(),
    );
}

/// Blocks until the daemon reports `n` queued waiters (observed, not guessed).
pub(crate) fn until_waiting(client: &mut Client, n: u64) {
    until_lock_figure(client, "waiting", n);
}

/// Blocks until the daemon's Metrics `locks.<figure>` is `n`.
pub(crate) fn until_lock_figure(client: &mut Client, figure: &str, n: u64) {
    loop {
        let metrics = client.result("Metrics", json!({}));
        if metrics["locks"][figure] == json!(n) {
            return;
        }
        std::thread::yield_now();
    }
}

pub(crate) fn events(client: &mut Client, types: &[&str]) -> Vec<Value> {
    let result = client.result("ReadEvents", json!({"since_seq": 0, "types": types}));
    result["events"].as_array().unwrap().clone()
}

#[test]
fn acquire_returns_a_lease_and_others_see_busy_with_the_holder() {
    let daemon = Daemon::start();
    let mut a = daemon.client();
    let mut b = daemon.client();
    let lease = a.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:./src//lib.rs", "owner": "alice", "provider": "claude",
               "ttl_secs": 60, "metadata": {"why": "refactor"}}),
    );
    assert_eq!(lease["status"], "acquired");
    assert_eq!(lease["resource_key"], "file:src/lib.rs");
    assert_eq!(lease["owner"], "alice");
    assert_eq!(lease["provider"], "claude");
    assert_eq!(lease["metadata"], json!({"why": "refactor"}));
    assert!(lease["lease_id"].as_str().is_some_and(|s| s.len() == 36));
    assert!(lease["fencing_token"].as_u64().unwrap() >= 1);
    let remaining = lease["remaining_ms"].as_u64().unwrap();
    assert!(remaining > 0 && remaining <= 60_000, "{lease}");
    assert!(
        lease.get("previous").is_none(),
        "first holder has no previous"
    );

    let busy = acquire(&mut b, "file:src\\lib.rs", "bob");
    assert_eq!(busy["status"], "busy");
    assert_eq!(busy["resource_key"], "file:src/lib.rs");
    assert_eq!(busy["conflicting_key"], "file:src/lib.rs");
    assert_eq!(busy["held_by"]["owner"], "alice");
    assert_eq!(busy["held_by"]["provider"], "claude");
    assert_eq!(busy["held_by"]["metadata"], json!({"why": "refactor"}));
    assert!(
        busy["held_by"].get("lease_id").is_none(),
        "the lease id is the holder's secret"
    );

    // The same owner asking again gets the same lease and token; the lease id, a secret,
    // only on the connection that acquired it.
    let again = acquire(&mut a, "file:src/lib.rs", "alice");
    assert_eq!(again["status"], "already_held");
    assert_eq!(again["lease_id"], lease["lease_id"]);
    assert_eq!(again["fencing_token"], lease["fencing_token"]);
    let named = acquire(&mut b, "file:src/lib.rs", "alice");
    assert_eq!(named["status"], "already_held");
    assert_eq!(named["fencing_token"], lease["fencing_token"]);
    assert!(named.get("lease_id").is_none(), "{named}");

    let status = b.result(
        "ResourceLockStatus",
        json!({"resource_key": "file:src/lib.rs"}),
    );
    assert_eq!(status["status"], "held");
    assert_eq!(status["held_by"]["owner"], "alice");
}

#[test]
fn racing_clients_exactly_one_wins() {
    let daemon = Daemon::start();
    for round in 0..5 {
        let key = format!("tool:deploy-{round}");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let racers: Vec<_> = (0..8)
            .map(|i| {
                let mut client = daemon.client();
                let barrier = barrier.clone();
                let key = key.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    acquire(&mut client, &key, &format!("agent-{i}"))["status"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
            })
            .collect();
        let statuses: Vec<String> = racers.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(
            statuses.iter().filter(|s| *s == "acquired").count(),
            1,
            "{statuses:?}"
        );
        assert_eq!(statuses.iter().filter(|s| *s == "busy").count(), 7);
    }
}

#[test]
fn fencing_tokens_strictly_increase_and_survive_restarts() {
    let mut daemon = Daemon::start();
    let mut tokens = Vec::new();
    {
        let mut c = daemon.client();
        for i in 0..3 {
            let lease = acquired(&mut c, "file:a.txt", &format!("o{i}"));
            tokens.push(lease["fencing_token"].as_u64().unwrap());
            release(&mut c, &lease, "modified");
        }
        tokens.push(
            acquired(&mut c, "tool:x", "o")["fencing_token"]
                .as_u64()
                .unwrap(),
        );
    }
    daemon.sigterm();
    daemon.restart();
    {
        let mut c = daemon.client();
        tokens.push(
            acquired(&mut c, "file:b.txt", "o")["fencing_token"]
                .as_u64()
                .unwrap(),
        );
    }
    daemon.kill9();
    daemon.restart();
    let mut c = daemon.client();
    tokens.push(
        acquired(&mut c, "file:c.txt", "o")["fencing_token"]
            .as_u64()
            .unwrap(),
    );
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    // A lease without release_on_disconnect survives the restart with its holder.
    let status = c.result("ResourceLockStatus", json!({"resource_key": "tool:x"}));
    assert_eq!(status["status"], "held", "{status}");
}

/// Grants that share a batch take their tokens from the batch's count (stored once, before
/// it commits): from several connections at once, every token is still handed out once,
/// each connection sees its own grow, and after a restart they keep growing.
#[test]
fn fencing_tokens_stay_unique_when_grants_share_a_batch() {
    let mut daemon = Daemon::start();
    let clients: Vec<Client> = (0..8).map(|_| daemon.client()).collect();
    let per_client: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(c, mut client)| {
                s.spawn(move || {
                    (0..25)
                        .map(|i| {
                            let key = format!("file:batch/c{c}/k{i}.rs");
                            let lease = acquired(&mut client, &key, &format!("o{c}"));
                            release(&mut client, &lease, "modified");
                            lease["fencing_token"].as_u64().unwrap()
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for tokens in &per_client {
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    }
    let mut all: Vec<u64> = per_client.concat();
    all.sort_unstable();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "a fencing token was handed out twice");
    daemon.kill9();
    daemon.restart();
    let mut c = daemon.client();
    let after = acquired(&mut c, "file:batch/after.rs", "o")["fencing_token"]
        .as_u64()
        .unwrap();
    assert!(after > *all.last().unwrap(), "{after} after {all:?}");
}

#[test]
fn dir_and_file_locks_see_each_other_but_siblings_do_not() {
    let daemon = Daemon::start();
    let mut a = daemon.client();
    let mut b = daemon.client();

    let dir = acquired(&mut a, "dir:src/", "alice");
    assert_eq!(dir["resource_key"], "dir:src");
    for inside in [
        "file:src/a.rs",
        "dir:src/sub",
        "file:src/deep/er/x.rs",
        "file:src",
    ] {
        let busy = acquire(&mut b, inside, "bob");
        assert_eq!(busy["status"], "busy", "{inside}: {busy}");
        assert_eq!(busy["conflicting_key"], "dir:src", "{inside}");
        assert_eq!(busy["held_by"]["owner"], "alice");
    }
    for outside in [
        "file:srcx/a.rs",
        "dir:sr",
        "file:src.rs",
        "dir:lib",
        "tool:src",
    ] {
        acquired(&mut b, outside, "bob");
    }
    release(&mut a, &dir, "released");

    let file = acquired(&mut a, "file:src/a.rs", "alice");
    let sibling = acquired(&mut b, "file:src/b.rs", "bob");
    let busy = acquire(&mut b, "dir:src", "carol");
    assert_eq!(busy["status"], "busy", "{busy}");
    assert!(
        busy["conflicting_key"] == "file:src/a.rs" || busy["conflicting_key"] == "file:src/b.rs",
        "{busy}"
    );
    release(&mut b, &sibling, "released");
    let busy = acquire(&mut b, "dir:src", "carol");
    assert_eq!(busy["conflicting_key"], "file:src/a.rs");
    let status = b.result("ResourceLockStatus", json!({"resource_key": "dir:src"}));
    assert_eq!(status["status"], "held");
    assert_eq!(status["conflicting_key"], "file:src/a.rs");
    release(&mut a, &file, "modified");
    acquired(&mut b, "dir:src", "carol");
}

#[test]
fn keys_are_canonical_and_bad_paths_are_refused() {
    let workspace = tempfile::tempdir().unwrap();
    let ws = workspace.path().to_str().unwrap().to_string();
    let daemon = Daemon::start_with(&["--workspace", &ws]);
    let mut c = daemon.client();
    let lease = acquired(&mut c, "file:./src//lib.rs", "alice");
    for spelling in [
        "file:src/lib.rs".to_string(),
        "file:src\\lib.rs".to_string(),
        "file:./src/./lib.rs".to_string(),
        format!("file:{ws}/src/lib.rs"),
    ] {
        let again = acquire(&mut c, &spelling, "alice");
        assert_eq!(again["status"], "already_held", "{spelling}: {again}");
        assert_eq!(again["resource_key"], "file:src/lib.rs");
    }
    for bad in [
        "file:../etc/passwd",
        "dir:src/../..",
        "file:/etc/passwd",
        "nokind",
        ":x",
        "file:",
        "file:./",
    ] {
        let err = c.error(
            "AcquireResourceLock",
            json!({"resource_key": bad, "owner": "alice"}),
        );
        assert_error(&err, 400, "invalid");
    }
    let err = c.error(
        "AcquireResourceLock",
        json!({"resource_key": "file:x", "owner": ""}),
    );
    assert_error(&err, 400, "invalid");
    let err = c.error(
        "AcquireResourceLock",
        json!({"resource_key": "file:x", "owner": "a", "ttl_secs": 0}),
    );
    assert_error(&err, 400, "invalid");
    // Nothing refused was stored.
    let list = c.result("ListResourceLocks", json!({}));
    assert_eq!(list["locks"].as_array().unwrap().len(), 1, "{list}");
    release(&mut c, &lease, "released");
}

#[test]
fn only_the_lease_id_is_a_credential() {
    let daemon = Daemon::start();
    let mut a = daemon.client();
    let mut b = daemon.client();
    let lease = acquired(&mut a, "file:doc.md", "alice");

    // Knowing the owner's name is not enough.
    for (method, extra) in [
        ("ReleaseResourceLock", json!({})),
        ("HeartbeatResourceLock", json!({"ttl_secs": 30})),
    ] {
        let mut params = json!({"resource_key": "file:doc.md", "lease_id": "not-alices-lease"});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let err = b.error(method, params);
        let data = assert_error(&err, 410, "lease_invalid");
        assert_eq!(data["held_by"]["owner"], "alice", "{err}");
        assert_eq!(data["resource_key"], "file:doc.md");
    }
    assert_eq!(
        b.result("ResourceLockStatus", json!({"resource_key": "file:doc.md"}))["status"],
        "held"
    );

    let beat = a.result(
        "HeartbeatResourceLock",
        json!({"resource_key": "file:doc.md", "lease_id": lease["lease_id"], "ttl_secs": 120}),
    );
    assert!(beat["remaining_ms"].as_u64().unwrap() > 60_000, "{beat}");
    assert!(beat["expires_at"].is_string());

    let released = release(&mut a, &lease, "modified");
    assert_eq!(
        released,
        json!({"status": "released", "resource_key": "file:doc.md", "outcome": "modified"})
    );

    // A released lease is dead for heartbeat and release; nobody holds the key now.
    let err = a.error(
        "HeartbeatResourceLock",
        json!({"resource_key": "file:doc.md", "lease_id": lease["lease_id"]}),
    );
    let data = assert_error(&err, 410, "lease_invalid");
    assert!(data.get("held_by").is_none(), "{err}");
    let err = a.error(
        "ReleaseResourceLock",
        json!({"resource_key": "file:doc.md", "lease_id": lease["lease_id"]}),
    );
    assert_error(&err, 410, "lease_invalid");

    // A stale lease after someone else took the key names the new holder.
    acquired(&mut b, "file:doc.md", "bob");
    let err = a.error(
        "ReleaseResourceLock",
        json!({"resource_key": "file:doc.md", "lease_id": lease["lease_id"]}),
    );
    let data = assert_error(&err, 410, "lease_invalid");
    assert_eq!(data["held_by"]["owner"], "bob");
}

#[test]
fn outcomes_are_shown_to_the_next_holder_and_moved_needs_moved_to() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let lease = acquired(&mut c, "file:old.rs", "alice");
    let err = c.error(
        "ReleaseResourceLock",
        json!({"resource_key": "file:old.rs", "lease_id": lease["lease_id"], "outcome": "moved"}),
    );
    assert_error(&err, 400, "invalid");
    let err = c.error(
        "ReleaseResourceLock",
        json!({"resource_key": "file:old.rs", "lease_id": lease["lease_id"], "outcome": "exploded"}),
    );
    assert_error(&err, -32602, "invalid_params");
    // Still held after the refusals.
    assert_eq!(
        c.result("ResourceLockStatus", json!({"resource_key": "file:old.rs"}))["status"],
        "held"
    );
    let released = c.result(
        "ReleaseResourceLock",
        json!({"resource_key": "file:old.rs", "lease_id": lease["lease_id"], "outcome": "moved",
               "moved_to": "file:new.rs", "note": "renamed"}),
    );
    assert_eq!(released["outcome"], "moved");

    let status = c.result("ResourceLockStatus", json!({"resource_key": "file:old.rs"}));
    assert_eq!(status["status"], "available");
    assert_eq!(status["previous"]["outcome"], "moved");
    assert_eq!(status["previous"]["owner"], "alice");
    assert_eq!(status["previous"]["moved_to"], "file:new.rs");
    assert!(status["previous"]["at"].is_string());

    let next = acquired(&mut c, "file:old.rs", "bob");
    assert_eq!(next["previous"]["outcome"], "moved");
    assert_eq!(next["previous"]["moved_to"], "file:new.rs");
    release(&mut c, &next, "deleted");
    let next = acquired(&mut c, "file:old.rs", "carol");
    assert_eq!(next["previous"]["outcome"], "deleted");
    assert_eq!(next["previous"]["owner"], "bob");
}

#[test]
fn ten_waiters_are_served_in_arrival_order() {
    let daemon = Daemon::start();
    let mut holder = daemon.client();
    let mut observer = daemon.client();
    let first = acquired(&mut holder, "file:shared.txt", "holder");
    let mut waiters: Vec<Client> = Vec::new();
    for i in 0..10u64 {
        let mut w = daemon.client();
        send_waiting_acquire(
            &mut w,
            "file:shared.txt",
            &format!("w{i}"),
            60_000,
            json!({}),
        );
        until_waiting(&mut observer, i + 1);
        waiters.push(w);
    }
    let mut lease = first;
    let mut tokens = vec![lease["fencing_token"].as_u64().unwrap()];
    let mut releaser = holder;
    for (i, mut w) in waiters.into_iter().enumerate() {
        release(&mut releaser, &lease, "modified");
        let answer = w.read_line();
        assert_eq!(answer["id"], json!(format!("w{i}")));
        lease = answer["result"].clone();
        assert_eq!(lease["status"], "acquired", "{answer}");
        assert_eq!(lease["owner"], json!(format!("w{i}")));
        assert_eq!(lease["previous"]["outcome"], "modified");
        tokens.push(lease["fencing_token"].as_u64().unwrap());
        // Everyone behind is still queued: the lock went to one waiter only.
        assert_eq!(
            observer.result("Metrics", json!({}))["locks"]["waiting"],
            json!(9 - i as u64)
        );
        releaser = w;
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[test]
fn a_waiter_whose_connection_closes_leaves_the_queue() {
    let daemon = Daemon::start();
    let mut holder = daemon.client();
    let mut observer = daemon.client();
    let lease = acquired(&mut holder, "file:x", "holder");
    let mut gone = daemon.client();
    send_waiting_acquire(&mut gone, "file:x", "gone", 60_000, json!({}));
    until_waiting(&mut observer, 1);
    let mut stays = daemon.client();
    send_waiting_acquire(&mut stays, "file:x", "stays", 60_000, json!({}));
    until_waiting(&mut observer, 2);
    drop(gone);
    until_waiting(&mut observer, 1);
    release(&mut holder, &lease, "released");
    let answer = stays.read_line();
    assert_eq!(answer["result"]["status"], "acquired", "{answer}");
    assert_eq!(answer["result"]["owner"], "stays");
    let list = observer.result("ListResourceLocks", json!({}));
    assert_eq!(list["locks"].as_array().unwrap().len(), 1);
    assert_eq!(list["locks"][0]["owner"], "stays");
}

/// ListResourceLocks says since when each waiter waits (the dashboard shows who waits on
/// whom and for how long), and that time stays put while it waits.
#[test]
fn waiters_are_listed_with_since_when_they_wait() {
    let daemon = Daemon::start();
    let mut holder = daemon.client();
    let mut observer = daemon.client();
    let lease = acquired(&mut holder, "file:w.rs", "holder");
    let mut first = daemon.client();
    send_waiting_acquire(&mut first, "file:w.rs", "first", 60_000, json!({}));
    until_waiting(&mut observer, 1);
    let mut second = daemon.client();
    send_waiting_acquire(&mut second, "file:w.rs", "second", 60_000, json!({}));
    until_waiting(&mut observer, 2);
    let list = observer.result("ListResourceLocks", json!({}));
    let waiting = list["waiting"].as_array().unwrap();
    assert_eq!(waiting.len(), 2, "{list}");
    let since = |owner: &str| {
        let entry = waiting.iter().find(|w| w["owner"] == owner).unwrap();
        entry["since"]
            .as_str()
            .unwrap_or_else(|| panic!("no since: {entry}"))
            .to_string()
    };
    let acquired_at = lease["acquired_at"].as_str().unwrap();
    // Timestamps of one format and clock: their order is their text's.
    assert!(acquired_at <= since("first").as_str(), "{list}");
    assert!(since("first") <= since("second"), "{list}");
    let again = observer.result("ListResourceLocks", json!({}));
    assert_eq!(
        again["waiting"], list["waiting"],
        "a waiter's since stays put"
    );
    release(&mut holder, &lease, "released");
    assert_eq!(first.read_line()["result"]["status"], "acquired");
    let list = observer.result("ListResourceLocks", json!({}));
    assert_eq!(list["waiting"][0]["owner"], "second", "{list}");
    assert_eq!(
        list["waiting"][0]["since"], again["waiting"][1]["since"],
        "{list}"
    );
}

#[test]
fn release_on_disconnect_frees_the_lock_at_once() {
    let daemon = Daemon::start();
    let mut observer = daemon.client();
    let mut holder = daemon.client();
    holder.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:a.rs", "owner": "crashy", "release_on_disconnect": true, "ttl_secs": 3600}),
    );
    acquired(&mut holder, "file:kept.rs", "crashy");
    let mut waiter = daemon.client();
    send_waiting_acquire(&mut waiter, "file:a.rs", "next", 60_000, json!({}));
    until_waiting(&mut observer, 1);
    drop(holder);
    let answer = waiter.read_line();
    assert_eq!(answer["result"]["status"], "acquired", "{answer}");
    assert_eq!(answer["result"]["previous"]["outcome"], "abandoned");
    assert_eq!(answer["result"]["previous"]["owner"], "crashy");
    // Only the release_on_disconnect lease ended.
    let kept = observer.result(
        "ResourceLockStatus",
        json!({"resource_key": "file:kept.rs"}),
    );
    assert_eq!(kept["status"], "held");
    let released = events(&mut observer, &["lock.released"]);
    assert_eq!(released.len(), 1);
    assert_eq!(released[0]["data"]["outcome"], "abandoned");
    assert_eq!(released[0]["resource_key"], "file:a.rs");
}

#[test]
fn a_holder_process_killed_frees_its_release_on_disconnect_lock() {
    let daemon = Daemon::start();
    let mut observer = daemon.client();
    // A separate process holds the lock, then is killed with SIGKILL.
    let script = format!(
        "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect({:?})\n\
         s.sendall(b'{{\"id\":1,\"method\":\"AcquireResourceLock\",\"params\":{{\"resource_key\":\"file:k.rs\",\"owner\":\"proc\",\"release_on_disconnect\":true}}}}\\n')\n\
         print(s.makefile().readline(), flush=True)\nsys.stdin.read()\n",
        daemon.socket_path().to_str().unwrap()
    );
    let mut child = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("\"acquired\""), "{line}");
    let mut waiter = daemon.client();
    send_waiting_acquire(&mut waiter, "file:k.rs", "next", 60_000, json!({}));
    until_waiting(&mut observer, 1);
    child.kill().unwrap();
    child.wait().unwrap();
    let answer = waiter.read_line();
    assert_eq!(answer["result"]["status"], "acquired", "{answer}");
    assert_eq!(answer["result"]["previous"]["outcome"], "abandoned");
}

#[test]
fn list_filters_by_prefix_and_owner_and_never_shows_lease_ids() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    acquired(&mut c, "file:src/a.rs", "alice");
    acquired(&mut c, "file:src/b.rs", "bob");
    acquired(&mut c, "tool:fmt", "alice");
    let all = c.result("ListResourceLocks", json!({}));
    assert_eq!(all["locks"].as_array().unwrap().len(), 3);
    assert!(all["locks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l.get("lease_id").is_none()));
    let src = c.result("ListResourceLocks", json!({"prefix": "file:src/"}));
    assert_eq!(src["locks"].as_array().unwrap().len(), 2);
    let alice = c.result("ListResourceLocks", json!({"owner": "alice"}));
    let keys: Vec<&str> = alice["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["resource_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["file:src/a.rs", "tool:fmt"]);
    assert_eq!(c.result("Metrics", json!({}))["locks"]["live"], json!(3));
}

#[test]
fn wait_answers_at_once_when_free_and_on_release() {
    let daemon = Daemon::start();
    let mut holder = daemon.client();
    let mut watcher = daemon.client();
    let free = watcher.result(
        "WaitResourceLock",
        json!({"resource_key": "file:w", "timeout_ms": 10_000}),
    );
    assert_eq!(free["status"], "available");
    assert_eq!(free["waited_ms"], 0);
    let lease = acquired(&mut holder, "file:w", "holder");
    watcher.send_line(
        &json!({"id": 9, "method": "WaitResourceLock", "params": {"resource_key": "file:w", "timeout_ms": 60_000}})
            .to_string(),
    );
    // The wait does not take the lock; the holder can still heartbeat while it waits.
    holder.result(
        "HeartbeatResourceLock",
        json!({"resource_key": "file:w", "lease_id": lease["lease_id"]}),
    );
    release(&mut holder, &lease, "created");
    let answer = watcher.read_line();
    assert_eq!(answer["result"]["status"], "available", "{answer}");
    assert_eq!(answer["result"]["previous"]["outcome"], "created");
}

#[test]
fn every_lock_change_is_journaled_with_its_revision() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let lease = acquired(&mut c, "file:j", "alice");
    release(&mut c, &lease, "modified");
    let all = c.result(
        "ReadEvents",
        json!({"since_seq": 0, "resource_prefix": "file:j"}),
    );
    let events = all["events"].as_array().unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["lock.acquired", "lock.released"], "{all}");
    assert_eq!(events[0]["data"]["fencing_token"], lease["fencing_token"]);
    assert_eq!(events[0]["actor"], "alice");
    assert_eq!(events[1]["data"]["outcome"], "modified");
    let seqs = u64s(&all["events"], "seq");
    assert!(seqs[0] < seqs[1]);
    // A state write after them takes the next revision: locks share the global sequence.
    let set = c.set("n", "k", json!(1));
    assert_eq!(set["revision"].as_u64().unwrap(), seqs[1] + 1);
}

#[test]
fn describe_interface_lists_the_lock_methods() {
    let daemon = Daemon::start();
    let mut c = daemon.client();
    let describe = c.result("DescribeInterface", json!({}));
    let text = describe.to_string();
    for method in [
        "AcquireResourceLock",
        "HeartbeatResourceLock",
        "ReleaseResourceLock",
        "ResourceLockStatus",
        "ListResourceLocks",
        "WaitResourceLock",
    ] {
        assert!(text.contains(&format!("\"{method}\"")), "{method}");
    }
    // The snake_case alias works too.
    let lease = c.result(
        "acquire_resource_lock",
        json!({"resource_key": "tool:alias", "owner": "o"}),
    );
    assert_eq!(lease["status"], "acquired");
}

/// A client that closes only its writing side after a waiting acquire (`nc -N`) still
/// gets the lock when it frees up; one that closes entirely leaves the queue at once.
#[test]
fn a_half_closed_waiter_still_gets_its_answer_but_a_closed_one_leaves_the_queue() {
    let daemon = Daemon::start();
    let mut holder = daemon.client();
    let mut observer = daemon.client();
    let lease = acquired(&mut holder, "file:shared.txt", "holder");

    let mut gone = daemon.client();
    send_waiting_acquire(&mut gone, "file:shared.txt", "gone", 60_000, json!({}));
    until_waiting(&mut observer, 1);
    drop(gone);
    until_waiting(&mut observer, 0);

    let mut half = daemon.client();
    send_waiting_acquire(&mut half, "file:shared.txt", "half", 60_000, json!({}));
    half.shutdown_write();
    until_waiting(&mut observer, 1);
    release(&mut holder, &lease, "modified");
    let answer = half.read_line();
    assert_eq!(answer["id"], "half");
    assert_eq!(answer["result"]["status"], "acquired", "{answer}");
    assert_eq!(answer["result"]["previous"]["outcome"], "modified");
    assert!(
        half.try_read_line().is_none(),
        "then the daemon closes the connection"
    );
}

/// What the last holder of each key declared survives kill -9 (SQLite stores outcomes in
/// batches and replays the rest from the journal on start), journal compaction and a clean
/// restart, the latest declaration winning.
#[test]
fn outcomes_survive_a_crash_compaction_and_a_restart() {
    let mut daemon = Daemon::start_on_test_clock();
    // More keys than the SQLite writer keeps pending (512), so some are stored in batch
    // and the rest are only in the journal when the daemon dies.
    let keys = 700;
    let declared = |i: usize| match i % 3 {
        0 => ("modified", None),
        1 => ("moved", Some(format!("file:moved/{i}.rs"))),
        _ => ("deleted", None),
    };
    {
        let mut c = daemon.client();
        for i in 0..keys {
            let key = format!("file:many/{i}.rs");
            let lease = acquired(&mut c, &key, &format!("o{i}"));
            let (outcome, moved_to) = declared(i);
            let released = c.result(
                "ReleaseResourceLock",
                json!({"resource_key": key, "lease_id": lease["lease_id"], "outcome": outcome,
                       "moved_to": moved_to, "note": format!("n{i}")}),
            );
            assert_eq!(released["status"], "released", "{released}");
        }
        // Declared again, once stored in batch (3) and once still pending (690): the
        // later outcome wins.
        for i in [3, 690] {
            let again = acquired(&mut c, &format!("file:many/{i}.rs"), "again");
            assert_eq!(again["previous"]["outcome"], declared(i).0, "{again}");
            release(&mut c, &again, "abandoned");
            let key = format!("file:many/{i}.rs");
            let status = c.result("ResourceLockStatus", json!({"resource_key": key}));
            assert_eq!(status["previous"]["outcome"], "abandoned", "{status}");
        }
        c.result(
            "AcquireResourceLock",
            json!({"resource_key": "file:short", "owner": "brief", "ttl_secs": 1}),
        );
        daemon.advance_clock(1_001);
        let short = c.result("ResourceLockStatus", json!({"resource_key": "file:short"}));
        assert_eq!(short["previous"]["outcome"], "expired", "{short}");
        daemon.kill9();
    }
    let check = |c: &mut Client, when: &str| {
        for i in 0..keys {
            let key = format!("file:many/{i}.rs");
            let status = c.result("ResourceLockStatus", json!({"resource_key": key}));
            let previous = &status["previous"];
            if i == 3 || i == 690 {
                assert_eq!(previous["outcome"], "abandoned", "{when}: {status}");
                assert_eq!(previous["owner"], "again", "{when}: {status}");
                continue;
            }
            let (outcome, moved_to) = declared(i);
            assert_eq!(previous["outcome"], outcome, "{when}: {status}");
            assert_eq!(previous["owner"], format!("o{i}"), "{when}: {status}");
            assert_eq!(previous["moved_to"], json!(moved_to), "{when}: {status}");
            assert_eq!(previous["note"], format!("n{i}"), "{when}: {status}");
            assert!(previous["at"].is_string(), "{when}: {status}");
        }
        let short = c.result("ResourceLockStatus", json!({"resource_key": "file:short"}));
        assert_eq!(short["previous"]["outcome"], "expired", "{when}: {short}");
        assert_eq!(short["previous"]["owner"], "brief", "{when}: {short}");
    };
    daemon.restart();
    let mut c = daemon.client();
    check(&mut c, "after kill -9");
    // Pending again when the journal is compacted, then killed.
    let lease = acquired(&mut c, "file:many/3.rs", "o3");
    release(&mut c, &lease, "modified");
    let head = c.result("Set", json!({"namespace": "n", "key": "k", "value": 1}))["revision"]
        .as_u64()
        .unwrap();
    c.result("CompactJournal", json!({"before_seq": head + 1}));
    daemon.kill9();
    drop(c);
    daemon.restart();
    let mut c = daemon.client();
    let lease = acquired(&mut c, "file:many/3.rs", "again");
    assert_eq!(lease["previous"]["outcome"], "modified", "{lease}");
    release(&mut c, &lease, "abandoned");
    check(&mut c, "after compaction");
    drop(c);
    daemon.sigterm();
    daemon.restart();
    let mut c = daemon.client();
    check(&mut c, "after a clean restart");
}
