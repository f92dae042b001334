//! Lock expiry against a real daemon on a manual clock: waits that run out, leases that
//! lapse with no call from anyone (their waiters and watchers served), heartbeats that
//! keep a lease, and leases that lapse while the daemon is down. Time moves only when a
//! test moves it, so a deadline can be checked 1 ms before it as well as at it.

use crate::common::{acquired, assert_error, release, Daemon};
use crate::locks::{events, send_waiting_acquire, until_lock_figure, until_waiting};
use serde_json::json;

#[test]
fn a_wait_that_runs_out_answers_busy_and_leaves_the_queue() {
    let mut daemon = Daemon::start_on_test_clock();
    let mut holder = daemon.client();
    let mut w = daemon.client();
    acquired(&mut holder, "tool:fmt", "holder");
    send_waiting_acquire(&mut w, "tool:fmt", "impatient", 150, json!({}));
    until_waiting(&mut holder, 1);
    daemon.advance_clock(149);
    assert_eq!(
        holder.result("Metrics", json!({}))["locks"]["waiting"],
        json!(1),
        "still waiting 1 ms before its end"
    );
    daemon.advance_clock(1);
    let answer = w.read_line()["result"].clone();
    assert_eq!(answer["status"], "busy", "{answer}");
    assert_eq!(answer["held_by"]["owner"], "holder");
    assert_eq!(
        holder.result("Metrics", json!({}))["locks"]["waiting"],
        json!(0)
    );
    // The connection is still usable after the wait.
    assert_eq!(w.result("Health", json!({}))["status"], "ok");
}

#[test]
fn a_lease_expires_without_any_call_and_the_next_holder_sees_expired() {
    let mut daemon = Daemon::start_on_test_clock();
    let mut holder = daemon.client();
    let mut watcher = daemon.client();
    let lease = holder.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:slow.txt", "owner": "sleepy", "ttl_secs": 1}),
    );
    // Wait (without acquiring) until the key is free: only the sweeper can free it.
    watcher.send_line(
        &json!({"id": 1, "method": "WaitResourceLock", "params": {"resource_key": "file:slow.txt", "timeout_ms": 30_000}})
            .to_string(),
    );
    until_lock_figure(&mut holder, "watching", 1);
    daemon.advance_clock(999);
    assert_eq!(
        holder.result(
            "ResourceLockStatus",
            json!({"resource_key": "file:slow.txt"})
        )["status"],
        "held",
        "still held 1 ms before its expiry"
    );
    daemon.advance_clock(1);
    let waited = watcher.read_line()["result"].clone();
    assert_eq!(waited["status"], "available", "{waited}");
    assert_eq!(waited["previous"]["outcome"], "expired");
    assert_eq!(waited["previous"]["owner"], "sleepy");
    assert_eq!(waited["waited_ms"], 1000);

    let expired = events(&mut watcher, &["lock.expired"]);
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert_eq!(expired[0]["resource_key"], "file:slow.txt");
    assert_eq!(expired[0]["actor"], "sleepy");

    // The dead lease is refused; the next acquirer learns what happened.
    let err = holder.error(
        "HeartbeatResourceLock",
        json!({"resource_key": "file:slow.txt", "lease_id": lease["lease_id"]}),
    );
    let data = assert_error(&err, 410, "lease_invalid");
    assert!(
        err["message"].as_str().unwrap().contains("expired"),
        "{err}"
    );
    assert!(data.get("held_by").is_none());
    let next = acquired(&mut watcher, "file:slow.txt", "awake");
    assert_eq!(next["previous"]["outcome"], "expired");
}

#[test]
fn an_expiring_lease_hands_the_lock_to_its_waiter() {
    let mut daemon = Daemon::start_on_test_clock();
    let mut holder = daemon.client();
    let mut waiter = daemon.client();
    holder.result(
        "AcquireResourceLock",
        json!({"resource_key": "dir:build", "owner": "sleepy", "ttl_secs": 1}),
    );
    send_waiting_acquire(&mut waiter, "file:build/out.o", "next", 30_000, json!({}));
    until_waiting(&mut holder, 1);
    daemon.advance_clock(1_000);
    let answer = waiter.read_line()["result"].clone();
    assert_eq!(answer["status"], "acquired", "{answer}");
    // `previous` is per key: the expired lease was on dir:build.
    assert!(answer.get("previous").is_none(), "{answer}");
    let status = waiter.result("ResourceLockStatus", json!({"resource_key": "dir:build"}));
    assert_eq!(status["status"], "held");
    assert_eq!(status["conflicting_key"], "file:build/out.o");
}

#[test]
fn a_heartbeat_keeps_a_short_lease_alive() {
    let mut daemon = Daemon::start_on_test_clock();
    let mut holder = daemon.client();
    let mut watcher = daemon.client();
    let lease = holder.result(
        "AcquireResourceLock",
        json!({"resource_key": "tool:long", "owner": "worker", "ttl_secs": 1}),
    );
    holder.result(
        "HeartbeatResourceLock",
        json!({"resource_key": "tool:long", "lease_id": lease["lease_id"], "ttl_secs": 3600}),
    );
    // Past the first ttl, the key is still held.
    watcher.send_line(
        &json!({"id": 1, "method": "WaitResourceLock", "params": {"resource_key": "tool:long", "timeout_ms": 1500}})
            .to_string(),
    );
    until_lock_figure(&mut holder, "watching", 1);
    daemon.advance_clock(1_500);
    let waited = watcher.read_line()["result"].clone();
    assert_eq!(waited["status"], "timeout", "{waited}");
    assert_eq!(waited["held_by"]["owner"], "worker");
    assert_eq!(waited["waited_ms"], 1500);
    release(&mut holder, &lease, "released");
}

#[test]
fn leases_that_lapse_while_the_daemon_is_down_end_on_start_up() {
    // On PostgreSQL, the lease tied to the dead daemon's connection ends once that daemon
    // has been silent for the instance timeout (other daemons may share the database).
    let mut daemon = Daemon::start_on_test_clock_with(&["--instance-timeout-secs", "1"]);
    {
        let mut c = daemon.client();
        c.result(
            "AcquireResourceLock",
            json!({"resource_key": "file:short", "owner": "o", "ttl_secs": 1}),
        );
        c.result(
            "AcquireResourceLock",
            json!({"resource_key": "file:long", "owner": "o", "ttl_secs": 3600}),
        );
        c.result(
            "AcquireResourceLock",
            json!({"resource_key": "file:tied", "owner": "o", "ttl_secs": 3600, "release_on_disconnect": true}),
        );
        // Keep the connection open across the kill: the tied lease ends only on restart.
        daemon.kill9();
    }
    // Down for longer than the short lease, on the wall clock the leases are stored by.
    daemon.restart_later(1_001);
    let mut c = daemon.client();
    let keys = |c: &mut crate::common::Client| -> Vec<String> {
        let list = c.result("ListResourceLocks", json!({}));
        list["locks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["resource_key"].as_str().unwrap().to_string())
            .collect()
    };
    if crate::common::on_postgres() {
        crate::common::wait_until(std::time::Duration::from_secs(30), || {
            keys(&mut c) == ["file:long"]
        });
    }
    assert_eq!(keys(&mut c), ["file:long"]);
    let short = c.result("ResourceLockStatus", json!({"resource_key": "file:short"}));
    assert_eq!(short["previous"]["outcome"], "expired");
    let tied = c.result("ResourceLockStatus", json!({"resource_key": "file:tied"}));
    assert_eq!(tied["previous"]["outcome"], "abandoned");
}
