//! Fenced writes: a write that names a lease is applied only while that lease is live; one
//! that names a fencing token only while no lease on the key was granted with a larger
//! one. Checked on the writer, in the transaction of the write, before it writes: a stalled
//! agent whose claim expired and was taken over cannot land its late write. On a shared
//! database the writer's memory of the leases is current within its batch (another
//! daemon's grants are read at the batch's start, under the writer lock), so a fence can
//! never pass on one daemon while another granted a newer lease.

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::protocol::locks::{CheckFenceResult, Fence};
use crate::resource_key::ResourceKey;
use crate::store::boundary::LeaseRow;

use super::super::areas::WriteCtx;
use super::conflicts::{Blockers, Visible};
use super::shown::holders;

/// What a fence names, checked at parse time.
#[derive(Debug, Clone)]
enum By {
    Lease(String),
    Token(u64),
}

/// A fence whose key is canonical and that names exactly one of a lease and a token.
#[derive(Debug, Clone)]
pub struct Fenced {
    key: ResourceKey,
    by: By,
    /// The token the request acts with: a lease is live only for the token that got it.
    token_id: Option<String>,
}

impl Fenced {
    /// Checks `fence` as sent (`field` names it in a refusal).
    pub fn parse(
        fence: Fence,
        field: &str,
        workspace: &std::path::Path,
        token_id: Option<String>,
    ) -> Result<Fenced> {
        let key = crate::resource_key::canonicalize(&fence.resource_key, workspace)?;
        let by = match (fence.lease_id, fence.fencing_token) {
            (Some(lease_id), None) => By::Lease(lease_id),
            (None, Some(token)) => By::Token(token),
            _ => {
                return Err(Error::invalid_params(
                    field,
                    format!("{field} takes resource_key and exactly one of lease_id (the lease is live) and fencing_token (no newer lease was granted); pass the lease AcquireResourceLock gave you"),
                ))
            }
        };
        Ok(Fenced { key, by, token_id })
    }
}

/// Checks a request's `fence` as sent (`field` names it in a refusal): its key made
/// canonical, the token the request acts with remembered.
pub fn fenced(cx: &super::super::Ctx<'_>, fence: Fence, field: &str) -> Result<Fenced> {
    if fence.resource_key.is_empty() {
        return Err(Error::invalid_params(
            format!("{field}.resource_key"),
            format!("{field} needs resource_key, the key the lease is on"),
        ));
    }
    Fenced::parse(fence, field, &cx.app.config.workspace, cx.token_id())
}

/// A write's `fence`, checked as sent, with what the caller may see of a holder: judged
/// on the writer by [`WriteFence::check`] before the write (no fence: nothing to judge).
pub struct WriteFence {
    fence: Option<Fenced>,
    visible: Visible,
}

impl WriteFence {
    pub fn of(cx: &super::super::Ctx<'_>, fence: Option<Fence>) -> Result<WriteFence> {
        Ok(WriteFence {
            fence: fence.map(|f| fenced(cx, f, "fence")).transpose()?,
            visible: cx.visible(),
        })
    }

    /// Refuses the write (409 `fenced`) unless its fence holds now.
    pub fn check(&self, ctx: &mut WriteCtx<'_>) -> Result<()> {
        match &self.fence {
            Some(fence) => check(ctx, fence, &self.visible),
            None => Ok(()),
        }
    }
}

/// The largest fencing token granted on `key`: of its live leases and of those that ended.
fn latest_token(ctx: &WriteCtx<'_>, key: &str, live: &[LeaseRow]) -> Result<u64> {
    let live = live.iter().map(|r| r.fencing_token).max().unwrap_or(0);
    Ok(live.max(ctx.outcomes().latest_ended_token(key)?))
}

/// Whether `fence` holds among the key's `live` leases, given its `latest` token.
fn holds(fence: &Fenced, live: &[LeaseRow], latest: u64) -> bool {
    match &fence.by {
        By::Lease(lease_id) => live
            .iter()
            .any(|r| &r.lease_id == lease_id && r.token_id == fence.token_id),
        By::Token(token) => *token >= latest,
    }
}

/// A Txn lease compare: None when it holds, else what `data.failed` shows of it.
pub fn judge(ctx: &mut WriteCtx<'_>, fence: &Fenced) -> Result<Option<Value>> {
    let key = &fence.key.key;
    let live = ctx.memory.locks.held.holders(key);
    let latest = latest_token(ctx, key, &live)?;
    if holds(fence, &live, latest) {
        return Ok(None);
    }
    let mut failed = Map::new();
    failed.insert("resource_key".into(), Value::from(key.as_str()));
    match &fence.by {
        By::Lease(lease_id) => failed.insert("lease_id".into(), Value::from(lease_id.as_str())),
        By::Token(token) => failed.insert("fencing_token".into(), Value::from(*token)),
    };
    failed.insert("held".into(), Value::from(!live.is_empty()));
    failed.insert("latest_fencing_token".into(), Value::from(latest));
    Ok(Some(Value::Object(failed)))
}

/// Refuses the write (409 `fenced`, nothing written) unless `fence` holds now. A live
/// lease is found in memory alone: the key's latest token is read from storage only for a
/// token fence, or for the refusal.
pub fn check(ctx: &mut WriteCtx<'_>, fence: &Fenced, visible: &Visible) -> Result<()> {
    let key = &fence.key.key;
    if let By::Lease(lease_id) = &fence.by {
        let live = ctx.memory.locks.held.by_id(lease_id);
        if live.is_some_and(|r| &r.resource_key == key && r.token_id == fence.token_id) {
            return Ok(());
        }
    }
    let live = ctx.memory.locks.held.holders(key);
    let latest = latest_token(ctx, key, &live)?;
    if holds(fence, &live, latest) {
        return Ok(());
    }
    let why = match &fence.by {
        By::Lease(_) => format!("the lease in `fence` no longer holds {key} (it expired, was released or broken, or is another token's)"),
        By::Token(token) => format!(
            "fencing token {token} is not the latest on {key}: a lease with token {latest} was granted since"
        ),
    };
    let mut data = Map::new();
    data.insert("resource_key".into(), Value::from(key.as_str()));
    data.insert("latest_fencing_token".into(), Value::from(latest));
    let held_by = match live.is_empty() {
        true => Value::Null,
        false => {
            let many = live.len() > 1 || live.iter().any(|r| r.slots.is_some());
            let blockers = Blockers {
                rows: live,
                conflicting_key: key.clone(),
                many,
            }
            .seen_by(visible);
            serde_json::to_value(holders(&blockers, ctx.now_ms)?)?
        }
    };
    data.insert("held_by".into(), held_by);
    Err(Error::Fenced {
        message: format!("fenced: {why}; nothing was written. Acquire {key} again, read what you meant to change anew, and retry with the new lease"),
        data,
    })
}

/// CheckFence: whether `token` is still the latest on `key`.
pub fn check_token(
    ctx: &mut WriteCtx<'_>,
    key: &ResourceKey,
    token: u64,
) -> Result<CheckFenceResult> {
    let live = ctx.memory.locks.held.holders(&key.key);
    let latest = latest_token(ctx, &key.key, &live)?;
    Ok(CheckFenceResult {
        resource_key: key.key.clone(),
        latest: token >= latest,
        latest_fencing_token: latest,
        held: !live.is_empty(),
    })
}
