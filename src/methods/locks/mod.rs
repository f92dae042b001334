//! Resource locks on leases: AcquireResourceLock, HeartbeatResourceLock,
//! ReleaseResourceLock, ResourceLockStatus, ListResourceLocks, WaitResourceLock.
//! Every lock request is served by the writer, which owns the write connection, the
//! waiter queues and the expiry deadlines. This file checks params; the rules are in
//! `rules`, what answers and events show of a lease in `shown`, the writer's memory of
//! locks in `memory`.

mod conflicts;
pub mod fence;

pub use conflicts::{Visible, Want};
mod held;
mod memory;
pub mod rules;
mod shown;
mod upkeep;

pub use memory::LockState;
pub use rules::{expire_due, recover, serve_waiters};

pub use crate::protocol::locks::*;

use crate::error::{Error, Result};
use crate::resource_key::{canonicalize, ResourceKey};

use super::state::check_value;
use super::{write, write_or_wait, Ctx, Method, Plan};

pub use crate::protocol::limits::{MAX_LOCK_TTL_SECS as MAX_TTL_SECS, MAX_SLOTS, MAX_WAIT_MS};

fn key(cx: &Ctx<'_>, raw: &str) -> Result<ResourceKey> {
    canonicalize(raw, &cx.app.config.workspace)
}

fn ttl_ms(cx: &Ctx<'_>, ttl_secs: Option<u64>) -> Result<u64> {
    match ttl_secs.unwrap_or(cx.app.config.lock_ttl_secs) {
        secs @ 1..=MAX_TTL_SECS => Ok(secs * 1000),
        secs => Err(Error::Invalid(format!(
            "ttl_secs is {secs}; it must be 1 to {MAX_TTL_SECS} (heartbeat to keep a lease longer)"
        ))),
    }
}

fn check_owner(owner: &str) -> Result<()> {
    if owner.is_empty() || owner.len() > 256 {
        return Err(Error::Invalid(
            "owner must be 1 to 256 bytes; use the agent's name".into(),
        ));
    }
    Ok(())
}

impl Method for AcquireResourceLockParams {
    const SUMMARY: &'static str = "Lease a resource (file:PATH, dir:PATH, or any kind:name) right before changing it. Returns acquired (with lease_id and fencing_token), already_held, or busy with the holder; wait_ms waits first come first served.";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        let key = key(cx, &self.resource_key)?;
        let owner =
            match (self.owner.take(), &self.session_id) {
                (Some(owner), _) => {
                    check_owner(&owner)?;
                    owner
                }
                // The session's name, once the writer has checked the session.
                (None, Some(_)) => String::new(),
                (None, None) => return Err(Error::invalid_params(
                    "owner",
                    "owner is required (the agent's name), unless session_id names your session",
                )),
            };
        let ttl_ms = ttl_ms(cx, self.ttl_secs)?;
        let metadata = match self.metadata.take() {
            Some(m) => {
                check_value("metadata", &m, &cx.limits())?;
                Some(Box::<str>::from(m).into_string())
            }
            None => None,
        };
        let wait_ms = self.wait_ms.unwrap_or(0);
        if wait_ms > MAX_WAIT_MS {
            return Err(Error::Invalid(format!(
                "wait_ms is {wait_ms}; it must be at most {MAX_WAIT_MS}"
            )));
        }
        if let Some(n) = self.slots {
            if key.path.is_some() || !(1..=MAX_SLOTS).contains(&n) {
                return Err(Error::invalid_params(
                    "slots",
                    format!("slots must be 1 to {MAX_SLOTS}, on a key outside file: and dir: (e.g. tool:cargo-build)"),
                ));
            }
        }
        let want = Want {
            mode: self.mode.unwrap_or_default(),
            slots: self.slots,
        };
        cx.connection.mark_lock_user();
        let request = rules::AcquireRequest {
            key,
            owner,
            want,
            provider: self.provider,
            ttl_ms,
            metadata,
            release_on_disconnect: self.release_on_disconnect,
            connection: cx.connection.id,
            token_id: cx.token_id(),
            session: self.session_id.take().map(|id| cx.presented(id)),
            visible: cx.visible(),
        };
        let outcome_of = request.key.key.clone();
        let plan = write_or_wait::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            rules::acquire(ctx, request, wait_ms)
        })?;
        // Its answer shows how the key's last lease ended.
        Ok(plan.foreseeing(|f| f.lock_outcomes.push(outcome_of)))
    }
}

impl Method for HeartbeatResourceLockParams {
    const SUMMARY: &'static str = "Extend a lease you hold (by lease_id) to ttl_secs from now; call it well within the lease on long work. 410 if the lease is gone.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let key = key(cx, &self.resource_key)?;
        let ttl_ms = ttl_ms(cx, self.ttl_secs)?;
        let presented = cx.presented(self.lease_id);
        write::<Self>(cx, self.idempotency_key, move |ctx| {
            rules::heartbeat(ctx, &key, &presented, ttl_ms)
        })
    }
}

impl Method for ReleaseResourceLockParams {
    const SUMMARY: &'static str = "Release a lease right after the change, saying honestly what happened (released, modified, created, deleted, moved with moved_to, abandoned); the next holder sees it as `previous`.";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        let key = key(cx, &self.resource_key)?;
        let outcome = self.outcome.unwrap_or(Outcome::Released);
        if outcome == Outcome::Moved && self.moved_to.as_deref().is_none_or(str::is_empty) {
            return Err(Error::Invalid(
                "outcome `moved` needs `moved_to` naming where the resource went".into(),
            ));
        }
        if outcome != Outcome::Moved && self.moved_to.is_some() {
            return Err(Error::Invalid(
                "`moved_to` goes with outcome `moved` only; drop it or say outcome moved".into(),
            ));
        }
        let release = rules::ReleaseRequest {
            lease: cx.presented(self.lease_id),
            outcome,
            moved_to: self.moved_to,
            note: self.note,
        };
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            rules::release(ctx, &key, release)
        })
    }
}

impl Method for ResourceLockStatusParams {
    const SUMMARY: &'static str = "Is a resource free right now (an acquire would succeed), or who holds it or a conflicting key; shows the previous holder's outcome.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let key = key(cx, &self.resource_key)?;
        let visible = cx.visible();
        write::<Self>(cx, None, move |ctx| rules::status(ctx, &key, &visible))
    }
}

impl Method for CheckFenceParams {
    const SUMMARY: &'static str = "Is fencing_token still the latest granted on resource_key (no newer lease), for a store outside Baton that fences its own writes; also says whether the key is held.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let key = key(cx, &self.resource_key)?;
        let token = self.fencing_token;
        write::<Self>(cx, None, move |ctx| fence::check_token(ctx, &key, token))
    }
}

impl Method for ListResourceLocksParams {
    const SUMMARY: &'static str =
        "Live leases, optionally by key prefix or owner (lease ids are never shown); page with `after` = next.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let limit = super::paging::page_limit(self.limit, super::paging::MAX_PAGE)?;
        let after: Option<(String, u64)> = self
            .after
            .as_deref()
            .map(|after| super::paging::parse_cursor(after, "ListResourceLocks"))
            .transpose()?;
        let visible = cx.visible();
        write::<Self>(cx, None, move |ctx| {
            let page = rules::Page {
                after: after.as_ref().map(|(key, token)| (key.as_str(), *token)),
                limit,
            };
            rules::list(
                ctx,
                self.prefix.as_deref(),
                self.owner.as_deref(),
                page,
                visible.as_deref(),
            )
        })
    }
}

impl Method for WaitResourceLockParams {
    const SUMMARY: &'static str = "Wait up to timeout_ms until a resource is free (without taking it); answers available with the previous outcome, or timeout with the holder. Use its own connection.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let key = key(cx, &self.resource_key)?;
        if self.timeout_ms > MAX_WAIT_MS {
            return Err(Error::Invalid(format!(
                "timeout_ms must be at most {MAX_WAIT_MS}"
            )));
        }
        cx.connection.mark_lock_user();
        let connection = cx.connection.id;
        let visible = cx.visible();
        write_or_wait::<Self>(cx, None, move |ctx| {
            rules::wait(ctx, key, self.timeout_ms, connection, visible)
        })
    }
}

/// A connection that took or waited for locks or nodes has closed: its
/// `release_on_disconnect` leases end as abandoned and its waits leave their queues, on
/// the writer. Err when the writer cannot take it (the leases then expire by their ttl).
pub fn connection_closed(app: &super::app::App, connection: u64) -> Result<()> {
    app.writer.detached(Box::new(move |ctx| {
        <super::areas::Memory as crate::engine::Areas>::connection_closed(ctx, connection)?;
        Ok(None)
    }))
}

/// The token of a connection was revoked or expired: its waits for locks, nodes and
/// messages are answered 401 now, on the writer.
pub fn connection_unauthorized(app: &super::app::App, connection: u64) -> Result<()> {
    app.writer.detached(Box::new(move |ctx| {
        rules::connection_unauthorized(ctx, connection)?;
        Ok(None)
    }))
}

/// The daemon is stopping: every request waiting for a lock or a node is answered now
/// (503), so no connection is held open by a wait.
pub fn end_waits(app: &super::app::App) -> Result<()> {
    app.writer.detached(Box::new(|ctx| {
        rules::end_waits(ctx)?;
        Ok(None)
    }))
}
