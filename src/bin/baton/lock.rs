//! `baton lock ...`.

use baton::client::{read, Connection};
use baton::protocol::locks::{
    AcquireResourceLockParams, AcquireResult, HeartbeatResourceLockParams, Holders,
    ListResourceLocksParams, LockMode, ReleaseResourceLockParams, ResourceLockStatusParams,
    StatusResult,
};
use baton::protocol::operator::BreakLockParams;

use crate::cli::{default_owner, field, json, parse_json, LockCommand};
use crate::failure::Outcome;
use crate::out::{or_dash, text, Out};

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
            let acquire = AcquireResourceLockParams {
                resource_key: key,
                owner: Some(owner.unwrap_or_else(default_owner)),
                session_id: None,
                provider: None,
                ttl_secs: ttl,
                metadata: metadata.as_ref().map(json),
                wait_ms: wait,
                release_on_disconnect: false,
                mode: shared.then_some(LockMode::Shared),
                slots,
                idempotency_key: None,
            };
            let result = conn.send(&acquire).await?;
            let r = read::<AcquireResourceLockParams>(&result)?;
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
            let release = ReleaseResourceLockParams {
                resource_key: key.clone(),
                lease_id,
                outcome: outcome
                    .map(|o| field::<ReleaseResourceLockParams, _>("outcome", o))
                    .transpose()?,
                moved_to,
                note,
                idempotency_key: None,
            };
            let answer = out.answer(conn, &release).await?;
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
            let break_lock = BreakLockParams {
                resource_key: key,
                lease_id: lease,
                owner,
                reason,
                idempotency_key: None,
            };
            let answer = out.answer(conn, &break_lock).await?;
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
            let heartbeat = HeartbeatResourceLockParams {
                resource_key: key.clone(),
                lease_id,
                ttl_secs: ttl,
                idempotency_key: None,
            };
            let answer = out.answer(conn, &heartbeat).await?;
            if let Some(r) = answer {
                println!("{key} expires {}", text(&r.expires_at));
            }
            Ok(0)
        }
        LockCommand::Status { key } => {
            let status = ResourceLockStatusParams {
                resource_key: key.clone(),
            };
            let result = conn.send(&status).await?;
            let r = read::<ResourceLockStatusParams>(&result)?;
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
            let list = ListResourceLocksParams {
                prefix,
                owner,
                limit: None,
                after: None,
            };
            let answer = out.pages(conn, &list, &["locks", "waiting"], None).await?;
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
