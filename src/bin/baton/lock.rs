//! `baton lock ...`.

use serde::Deserialize;
use serde_json::{json, Value};

use baton::client::{read_as, Connection};
use baton::protocol::locks::{
    AcquireResult, HeartbeatResult, Holders, ListResourceLocksResult, Outcome as LeaseOutcome,
    StatusResult,
};
use baton::protocol::operator::BreakLockResult;

use crate::cli::{default_owner, params, parse_json, LockCommand};
use crate::failure::Outcome;
use crate::out::{or_dash, text, Out};

/// What `baton lock release` reads of ReleaseResourceLock's result. The daemon's
/// `ReleaseResult` is written from a static string and cannot be read back; the test
/// below ties the two.
#[derive(Deserialize)]
struct Released {
    outcome: LeaseOutcome,
}

/// Who holds a key, for a line of text: the owner, or every owner of a shared key.
fn holder_names(held_by: &Holders) -> String {
    match held_by {
        Holders::One(h) => text(&h.owner),
        Holders::Many(all) => all
            .iter()
            .map(|h| text(&h.owner))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

pub async fn lock(command: LockCommand, out: &Out, conn: &mut Connection) -> Outcome {
    match command {
        LockCommand::Acquire {
            key,
            owner,
            ttl,
            wait,
            metadata,
            shared,
            slots,
        } => {
            let metadata = metadata.map(|m| parse_json("--metadata", &m)).transpose()?;
            let result = conn
                .call_raw(
                    "AcquireResourceLock",
                    &params(vec![
                        ("resource_key", Some(json!(key))),
                        ("owner", Some(json!(owner.unwrap_or_else(default_owner)))),
                        ("ttl_secs", ttl.map(Value::from)),
                        ("wait_ms", wait.map(Value::from)),
                        ("metadata", metadata),
                        ("mode", shared.then_some(json!("shared"))),
                        ("slots", slots.map(Value::from)),
                    ]),
                )
                .await?;
            let r: AcquireResult = read_as("AcquireResourceLock", &result)?;
            // already_held through another connection: the lease id went only to that one.
            let held_elsewhere =
                matches!(&r, AcquireResult::AlreadyHeld(lease) if lease.lease_id.is_none());
            let busy = matches!(r, AcquireResult::Busy { .. }) || held_elsewhere;
            if out.json {
                out.raw(&result);
                return Ok(if busy { 5 } else { 0 });
            }
            match &r {
                AcquireResult::AlreadyHeld(lease) if held_elsewhere => eprintln!(
                    "{}: {} is already held by {} (this owner) until {}; its lease id was printed by the acquire that took it, and is shown to nobody else: release it with that id, or wait until it expires",
                    out.status("busy"),
                    text(&lease.resource_key),
                    text(&lease.owner),
                    text(&lease.expires_at),
                ),
                AcquireResult::Busy {
                    resource_key,
                    held_by,
                    conflicting_key,
                } => eprintln!(
                    "{}: {} is held by {} until {}{}; retry later or wait with --wait MS",
                    out.status("busy"),
                    text(resource_key),
                    holder_names(held_by),
                    held_by.first().map_or("-", |h| h.expires_at.as_str()),
                    if conflicting_key != resource_key {
                        format!(" (via {conflicting_key})")
                    } else {
                        String::new()
                    }
                ),
                AcquireResult::Acquired(lease) | AcquireResult::AlreadyHeld(lease) => {
                    let status = if matches!(r, AcquireResult::Acquired(_)) {
                        "acquired"
                    } else {
                        "already_held"
                    };
                    println!("{}", or_dash(lease.lease_id.as_deref()));
                    eprintln!(
                        "{} {}  fencing token {}  expires {}",
                        out.status(status),
                        text(&lease.resource_key),
                        lease.fencing_token,
                        text(&lease.expires_at)
                    );
                }
            }
            Ok(if busy { 5 } else { 0 })
        }
        LockCommand::Release {
            key,
            lease_id,
            outcome,
            moved_to,
            note,
        } => {
            let answer = out
                .answer::<Released>(
                    conn,
                    "ReleaseResourceLock",
                    &params(vec![
                        ("resource_key", Some(json!(key))),
                        ("lease_id", Some(json!(lease_id))),
                        ("outcome", outcome.map(Value::from)),
                        ("moved_to", moved_to.map(Value::from)),
                        ("note", note.map(Value::from)),
                    ]),
                )
                .await?;
            if let Some(r) = answer {
                println!("{} {key} ({})", out.status("released"), r.outcome.as_str());
            }
            Ok(0)
        }
        LockCommand::Break {
            key,
            reason,
            lease,
            owner,
        } => {
            let answer = out
                .answer::<BreakLockResult>(
                    conn,
                    "BreakLock",
                    &params(vec![
                        ("resource_key", Some(json!(key))),
                        ("reason", Some(json!(reason))),
                        ("lease_id", lease.map(Value::from)),
                        ("owner", owner.map(Value::from)),
                    ]),
                )
                .await?;
            if let Some(r) = answer {
                for b in &r.broken {
                    println!(
                        "{} {} held by {} (fencing token {})",
                        out.status("broken"),
                        text(&r.resource_key),
                        text(&b.owner),
                        b.fencing_token
                    );
                }
                eprintln!("{} waiters served", r.waiters_served);
            }
            Ok(0)
        }
        LockCommand::Heartbeat { key, lease_id, ttl } => {
            let answer = out
                .answer::<HeartbeatResult>(
                    conn,
                    "HeartbeatResourceLock",
                    &params(vec![
                        ("resource_key", Some(json!(key))),
                        ("lease_id", Some(json!(lease_id))),
                        ("ttl_secs", ttl.map(Value::from)),
                    ]),
                )
                .await?;
            if let Some(r) = answer {
                println!("{key} expires {}", text(&r.expires_at));
            }
            Ok(0)
        }
        LockCommand::Status { key } => {
            let result = conn
                .call_raw("ResourceLockStatus", &json!({"resource_key": key}))
                .await?;
            let r: StatusResult = read_as("ResourceLockStatus", &result)?;
            let held = matches!(r, StatusResult::Held { .. });
            if out.json {
                out.raw(&result);
                return Ok(if held { 5 } else { 0 });
            }
            match &r {
                StatusResult::Held { held_by, .. } => println!(
                    "{} {key}  by {}  since {}  until {}",
                    out.status("held"),
                    holder_names(held_by),
                    held_by.first().map_or("-", |h| h.acquired_at.as_str()),
                    held_by.first().map_or("-", |h| h.expires_at.as_str())
                ),
                StatusResult::Available { previous: None, .. } => {
                    println!("{} {key}", out.status("available"))
                }
                StatusResult::Available {
                    previous: Some(previous),
                    ..
                } => println!(
                    "{} {key}  last: {} by {} at {}",
                    out.status("available"),
                    text(&previous.outcome),
                    text(&previous.owner),
                    text(&previous.at)
                ),
            }
            Ok(if held { 5 } else { 0 })
        }
        LockCommand::List { prefix, owner } => {
            let answer = out
                .pages::<ListResourceLocksResult>(
                    conn,
                    "ListResourceLocks",
                    &params(vec![
                        ("prefix", prefix.map(Value::from)),
                        ("owner", owner.map(Value::from)),
                    ]),
                    &["locks", "waiting"],
                    None,
                )
                .await?;
            let Some(r) = answer else { return Ok(0) };
            let rows: Vec<Vec<String>> = r
                .locks
                .iter()
                .map(|l| {
                    vec![
                        text(&l.resource_key),
                        text(&l.held_by.owner),
                        text(&l.held_by.acquired_at),
                        text(&l.held_by.expires_at),
                        l.held_by.fencing_token.to_string(),
                    ]
                })
                .collect();
            out.table(
                &["RESOURCE", "OWNER", "ACQUIRED_AT", "EXPIRES_AT", "FENCING"],
                &rows,
            );
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use baton::protocol::locks::ReleaseResult;
    use serde_json::value::to_raw_value;

    use super::*;

    #[test]
    fn release_reads_what_the_daemon_writes() {
        let released = ReleaseResult {
            status: "released",
            resource_key: "file:a".into(),
            outcome: LeaseOutcome::Moved,
        };
        let r: Released =
            read_as("ReleaseResourceLock", &to_raw_value(&released).unwrap()).unwrap();
        assert_eq!(r.outcome, LeaseOutcome::Moved);
    }
}
