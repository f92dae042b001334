//! Who holds a lease already: `already_held` is answered only to the holder itself. A
//! lease tied to an agent session is that session's alone; a lease tied to none is its
//! owner name's as said with the token that took it. Anyone else who says the same owner
//! name (a second host started under the same agent name, another token) is judged like
//! any other claimant: busy, or queued.

use serde_json::{json, Value};

use crate::common::{acquire_with, Daemon};
use crate::net::{tcp_daemon, token, NetClient};

/// The `tcp://` address the daemon bound.
fn tcp_address(daemon: &Daemon) -> std::net::SocketAddr {
    let log = daemon.log();
    let marker = "serving tcp://";
    let at = log.rfind(marker).expect("a tcp listener in the log") + marker.len();
    let rest = &log[at..];
    rest[..rest.find(' ').unwrap()].parse().unwrap()
}

fn as_token(daemon: &Daemon, secret: &str) -> NetClient {
    let mut client = NetClient::tcp(tcp_address(daemon));
    client.authenticate(secret);
    client
}

fn claim(client: &mut NetClient, key: &str, extra: Value) -> Value {
    let mut params = json!({"resource_key": key});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    client.result("AcquireResourceLock", params)
}

#[test]
fn a_session_lease_is_already_held_only_by_that_session() {
    let daemon = Daemon::start();
    let mut first = daemon.client();
    let session = first.result("RegisterAgent", json!({"name": "alice"}))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let lease = acquire_with(
        &mut first,
        "file:report.md",
        "alice",
        json!({"session_id": session}),
    );
    assert_eq!(lease["status"], "acquired", "{lease}");

    // A second host under the same name could not join (the name has a live session) and
    // claims as `alice` with no session: the lease is not its own.
    let mut second = daemon.client();
    let busy = acquire_with(&mut second, "file:report.md", "alice", json!({}));
    assert_eq!(busy["status"], "busy", "{busy}");
    assert_eq!(busy["held_by"]["owner"], "alice");
    assert!(busy["held_by"].get("lease_id").is_none(), "{busy}");
    // Nor on the acquiring connection itself, without the session.
    let busy = acquire_with(&mut first, "file:report.md", "alice", json!({}));
    assert_eq!(busy["status"], "busy", "{busy}");

    // The session itself holds it already, from any connection: its lease id is shown
    // to it (the session id is its holder's secret too).
    let mut elsewhere = daemon.client();
    let again = elsewhere.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:report.md", "session_id": session}),
    );
    assert_eq!(again["status"], "already_held", "{again}");
    assert_eq!(again["lease_id"], lease["lease_id"]);
    assert_eq!(again["fencing_token"], lease["fencing_token"]);

    // Once the session has ended, the name's next session is another holder.
    first.result("EndSession", json!({"session_id": session}));
    let taken = acquire_with(&mut second, "file:report.md", "alice", json!({}));
    assert_eq!(taken["status"], "acquired", "{taken}");
    let next = first.result("RegisterAgent", json!({"name": "alice"}))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let busy = first.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:report.md", "session_id": next}),
    );
    assert_eq!(
        busy["status"], "busy",
        "a session does not hold a lease taken without it"
    );
}

#[test]
fn a_lease_without_a_session_is_already_held_by_its_owner_and_token_only() {
    let daemon = tcp_daemon();
    let (one, two) = (token(&daemon, &["locks:*"]), token(&daemon, &["locks:*"]));
    let mut a = as_token(&daemon, &one);
    let lease = claim(&mut a, "tool:deploy", json!({"owner": "ci"}));
    assert_eq!(lease["status"], "acquired", "{lease}");

    // The same owner and token from another connection: already held, without the id.
    let mut a2 = as_token(&daemon, &one);
    let again = claim(&mut a2, "tool:deploy", json!({"owner": "ci"}));
    assert_eq!(again["status"], "already_held", "{again}");
    assert_eq!(again["fencing_token"], lease["fencing_token"]);
    assert!(again.get("lease_id").is_none(), "{again}");
    let same = claim(&mut a, "tool:deploy", json!({"owner": "ci"}));
    assert_eq!(same["lease_id"], lease["lease_id"]);

    // Another token that says `ci` is someone else: busy, or a place in the queue.
    let mut b = as_token(&daemon, &two);
    let busy = claim(&mut b, "tool:deploy", json!({"owner": "ci"}));
    assert_eq!(busy["status"], "busy", "{busy}");
    assert_eq!(busy["held_by"]["owner"], "ci");
    let waited = claim(&mut b, "tool:deploy", json!({"owner": "ci", "wait_ms": 1}));
    assert_eq!(waited["status"], "busy", "{waited}");

    // The Unix socket's admin is one token of its own: its `ci` is not the lease's.
    let mut admin = daemon.client();
    let busy = acquire_with(&mut admin, "tool:deploy", "ci", json!({}));
    assert_eq!(busy["status"], "busy", "{busy}");
}
