//! `baton lock ...`.

use serde_json::{json, Value};

use baton::client::Connection;

use crate::cli::{default_owner, params, parse_json, LockCommand};
use crate::failure::Outcome;
use crate::out::{text, Out};

pub async fn lock(command: LockCommand, out: &Out, conn: &mut Connection) -> Outcome {
    match command {
        LockCommand::Acquire {
            key,
            owner,
            ttl,
            wait,
            metadata,
        } => {
            let metadata = metadata.map(|m| parse_json("--metadata", &m)).transpose()?;
            let r = conn
                .call(
                    "AcquireResourceLock",
                    &params(vec![
                        ("resource_key", Some(json!(key))),
                        ("owner", Some(json!(owner.unwrap_or_else(default_owner)))),
                        ("ttl_secs", ttl.map(Value::from)),
                        ("wait_ms", wait.map(Value::from)),
                        ("metadata", metadata),
                    ]),
                )
                .await?;
            // already_held through another connection: the lease id went only to that one.
            let held_elsewhere = r["status"] == "already_held" && r.get("lease_id").is_none();
            let busy = r["status"] == "busy" || held_elsewhere;
            if out.json {
                out.raw(&r);
            } else if held_elsewhere {
                eprintln!(
                    "{}: {} is already held by {} (this owner) until {}; its lease id was printed by the acquire that took it, and is shown to nobody else: release it with that id, or wait until it expires",
                    out.status("busy"),
                    text(&r["resource_key"]),
                    text(&r["owner"]),
                    text(&r["expires_at"]),
                );
            } else if busy {
                let held = &r["held_by"];
                eprintln!(
                    "{}: {} is held by {} until {}{}; retry later or wait with --wait MS",
                    out.status("busy"),
                    text(&r["resource_key"]),
                    text(&held["owner"]),
                    text(&held["expires_at"]),
                    match r["conflicting_key"].as_str() {
                        Some(k) if r["resource_key"].as_str() != Some(k) => format!(" (via {k})"),
                        _ => String::new(),
                    }
                );
            } else {
                println!("{}", text(&r["lease_id"]));
                eprintln!(
                    "{} {}  fencing token {}  expires {}",
                    out.status(r["status"].as_str().unwrap_or("")),
                    text(&r["resource_key"]),
                    r["fencing_token"],
                    text(&r["expires_at"])
                );
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
            let r = conn
                .call(
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
            if out.json {
                out.raw(&r);
            } else {
                println!("{} {key} ({})", out.status("released"), text(&r["outcome"]));
            }
            Ok(0)
        }
        LockCommand::Heartbeat { key, lease_id, ttl } => {
            let r = conn
                .call(
                    "HeartbeatResourceLock",
                    &params(vec![
                        ("resource_key", Some(json!(key))),
                        ("lease_id", Some(json!(lease_id))),
                        ("ttl_secs", ttl.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
            } else {
                println!("{key} expires {}", text(&r["expires_at"]));
            }
            Ok(0)
        }
        LockCommand::Status { key } => {
            let r = conn
                .call("ResourceLockStatus", &json!({"resource_key": key}))
                .await?;
            let held = r["status"] == "held";
            if out.json {
                out.raw(&r);
            } else if held {
                let h = &r["held_by"];
                println!(
                    "{} {key}  by {}  since {}  until {}",
                    out.status("held"),
                    text(&h["owner"]),
                    text(&h["acquired_at"]),
                    text(&h["expires_at"])
                );
            } else {
                let previous = &r["previous"];
                if previous.is_null() {
                    println!("{} {key}", out.status("available"));
                } else {
                    println!(
                        "{} {key}  last: {} by {} at {}",
                        out.status("available"),
                        text(&previous["outcome"]),
                        text(&previous["owner"]),
                        text(&previous["at"])
                    );
                }
            }
            Ok(if held { 5 } else { 0 })
        }
        LockCommand::List { prefix, owner } => {
            let r = conn
                .call(
                    "ListResourceLocks",
                    &params(vec![
                        ("prefix", prefix.map(Value::from)),
                        ("owner", owner.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = r["locks"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| {
                    vec![
                        text(&l["resource_key"]),
                        text(&l["owner"]),
                        text(&l["acquired_at"]),
                        text(&l["expires_at"]),
                        l["fencing_token"].to_string(),
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
