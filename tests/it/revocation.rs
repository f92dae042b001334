//! A revoked or expired token ends everything it opened, at once and on every daemon: its
//! subscriptions (a last `Event {subscription_id, ended: "unauthorized"}` line), its
//! waits (401), and the next request (401). Expiry is judged by the clock that judges
//! leases: the shared database's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{assert_error, postgres, wait_until, Client, Daemon};
use crate::net::{create_token, NetClient};

/// Far beyond the second the contract gives; only a daemon that never ends them hits it.
const BOUND: Duration = Duration::from_secs(20);

fn authenticated(addr: SocketAddr, token: &Value) -> NetClient {
    let mut c = NetClient::tcp_timeout(addr, BOUND);
    c.authenticate(token["token"].as_str().unwrap());
    c
}

/// Reads past the events until the subscription's last line; panics if the connection
/// closes or stays silent for [`BOUND`] first.
fn read_until_ended(c: &mut NetClient, subscription_id: &Value) -> Value {
    loop {
        let line = c
            .try_read_line()
            .expect("the subscription ends with a line before the bound");
        if line["method"] == "Event" && line["params"].get("ended").is_some() {
            assert_eq!(line["params"]["subscription_id"], *subscription_id);
            return line;
        }
    }
}

fn waiting(admin: &mut Client) -> usize {
    admin.result("ListResourceLocks", json!({}))["waiting"]
        .as_array()
        .map_or(0, Vec::len)
}

#[test]
fn a_revoked_token_ends_its_subscription_and_its_waits_at_once() {
    let daemon = Daemon::start_with(&["--listen", "tcp://127.0.0.1:0"]);
    let addr = daemon.listening("tcp");
    let token = create_token(&daemon, "worker", &["events:read", "locks:res:*"], None);
    let mut sub = authenticated(addr, &token);
    let subscribed = sub.result("Subscribe", json!({}));
    let mut waiter = authenticated(addr, &token);
    let mut admin = daemon.client();
    let held = admin.result(
        "AcquireResourceLock",
        json!({"resource_key": "res:k", "owner": "admin", "ttl_secs": 60}),
    );
    waiter
        .send_line(
            &json!({"id": 7, "method": "AcquireResourceLock", "params":
                {"resource_key": "res:k", "owner": "worker", "ttl_secs": 60, "wait_ms": 600000}})
            .to_string(),
        )
        .unwrap();
    wait_until(BOUND, || waiting(&mut admin) == 1);

    admin.result("RevokeToken", json!({"token_id": token["token_id"]}));

    let ended = read_until_ended(&mut sub, &subscribed["subscription_id"]);
    assert_eq!(ended["params"]["ended"], "unauthorized", "{ended}");
    let answer = waiter.try_read_line().expect("the wait is answered");
    assert_eq!(answer["id"], 7);
    assert_error(&answer["error"], 401, "unauthenticated");
    assert_eq!(waiting(&mut admin), 0, "the wait left its queue");
    // The next request is refused too; Health needs no token.
    sub.result("Health", json!({}));
    assert_error(&sub.error("ReadEvents", json!({})), 401, "unauthenticated");
    // The key freed later goes to nobody.
    admin.result(
        "ReleaseResourceLock",
        json!({"resource_key": "res:k", "lease_id": held["lease_id"]}),
    );
    let status = admin.result("ResourceLockStatus", json!({"resource_key": "res:k"}));
    assert_eq!(status["status"], "available", "{status}");
}

/// Expiry on a daemon's own clock (driven as a test clock here): a subscription opened
/// with a token ends when the token expires, with no request from the client.
#[test]
fn an_expiring_token_ends_its_subscription_without_a_request() {
    let mut daemon = Daemon::start_on_test_clock_with(&["--listen", "tcp://127.0.0.1:0"]);
    let addr = daemon.listening("tcp");
    let token = create_token(&daemon, "short", &["events:read"], Some(60));
    let mut sub = authenticated(addr, &token);
    let subscribed = sub.result("Subscribe", json!({}));
    daemon.advance_clock(61_000);
    let ended = read_until_ended(&mut sub, &subscribed["subscription_id"]);
    assert_eq!(ended["params"]["ended"], "unauthorized");
    assert_error(&sub.error("ReadEvents", json!({})), 401, "unauthenticated");
}

/// Revocation through one daemon reaches a connection on another sharing the database.
#[test]
fn a_token_revoked_on_one_instance_is_cut_off_on_another() {
    let Some(db) = postgres::shared() else { return };
    let listen = ["--listen", "tcp://127.0.0.1:0"];
    let (a, b) = (
        Daemon::start_shared(&db, &listen),
        Daemon::start_shared(&db, &listen),
    );
    let token = create_token(&a, "worker", &["events:read", "kv:write:n"], None);
    let mut sub = authenticated(b.listening("tcp"), &token);
    let subscribed = sub.result("Subscribe", json!({}));
    let mut writer = authenticated(b.listening("tcp"), &token);
    writer.result("Set", json!({"namespace": "n", "key": "k", "value": 1}));

    a.client()
        .result("RevokeToken", json!({"token_id": token["token_id"]}));

    let ended = read_until_ended(&mut sub, &subscribed["subscription_id"]);
    assert_eq!(ended["params"]["ended"], "unauthorized");
    let refused = writer.error("Set", json!({"namespace": "n", "key": "k", "value": 2}));
    assert_error(&refused, 401, "unauthenticated");
    assert_eq!(a.client().get("n", "k")["value"], 1);
}

/// A token's expiry is judged by the database's clock: a daemon whose own clock is an hour
/// behind still ends the token when the database says it expired.
#[test]
fn a_daemon_whose_clock_is_behind_still_ends_an_expired_token() {
    let Some(db) = postgres::shared() else { return };
    let listen = ["--listen", "tcp://127.0.0.1:0"];
    let behind =
        Daemon::start_shared_env(&db, &listen, &[("BATON_TEST_CLOCK_SKEW_MS", "-3600000")]);
    let on_time = Arc::new(Daemon::start_shared(&db, &listen));
    let token = create_token(&on_time, "short", &["events:read", "kv:read:n"], Some(1));
    let mut sub = authenticated(behind.listening("tcp"), &token);
    let subscribed = sub.result("Subscribe", json!({}));
    let ended = read_until_ended(&mut sub, &subscribed["subscription_id"]);
    assert_eq!(ended["params"]["ended"], "unauthorized");
    assert_error(
        &sub.error("Get", json!({"namespace": "n", "key": "k"})),
        401,
        "unauthenticated",
    );
}
