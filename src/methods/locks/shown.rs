//! What answers and journal events show of a lease: the holder as others see it (never
//! its id), the lease as its holder sees it, who is in the way of an acquire, and the
//! `data` of the lock events.

use serde_json::value::RawValue;

use crate::clock::format_ms;
use crate::error::{Error, Result};
use crate::protocol::locks::{AcquireResult, HeldBy, Holders, Lease, Previous};
use crate::protocol::reply;
use crate::resource_key::ResourceKey;
use crate::store::boundary::LeaseRow;

use super::conflicts::Blockers;
use crate::engine::Reply;

/// `data` of `lock.acquired`. The journal's objects have their keys in alphabetical order
/// (as `serde_json::json!` writes them), so the fields are declared in that order.
#[derive(serde::Serialize)]
pub(super) struct AcquiredData<'a> {
    pub(super) expires_at: &'a str,
    pub(super) fencing_token: u64,
}

/// `data` of `lock.broken`, keys in alphabetical order: who broke the lease and why,
/// and, as `note`, what the key's next holder sees as its previous outcome.
#[derive(serde::Serialize)]
pub(super) struct BrokenData<'a> {
    pub(super) by: &'a str,
    pub(super) fencing_token: u64,
    pub(super) note: &'a str,
    pub(super) outcome: &'a str,
    pub(super) reason: &'a str,
}

/// `data` of `lock.released` and `lock.expired`, keys in alphabetical order.
#[derive(serde::Serialize)]
pub(super) struct EndedData<'a> {
    pub(super) fencing_token: u64,
    pub(super) moved_to: Option<&'a str>,
    pub(super) note: Option<&'a str>,
    pub(super) outcome: &'a str,
}

fn metadata_json(text: &Option<String>) -> Result<Option<Box<RawValue>>> {
    Ok(match text {
        Some(t) => Some(RawValue::from_string(t.clone())?),
        None => None,
    })
}

/// Who holds a lease, as answers show it (never its id).
pub(super) fn held_by(row: &LeaseRow, now_ms: i64) -> Result<HeldBy> {
    Ok(HeldBy {
        owner: row.owner.clone(),
        mode: row.mode,
        slots: row.slots,
        provider: row.provider.clone(),
        fencing_token: row.fencing_token,
        acquired_at: format_ms(row.acquired_at),
        expires_at: format_ms(row.expires_at),
        remaining_ms: (row.expires_at - now_ms).max(0) as u64,
        metadata: metadata_json(&row.metadata)?,
    })
}

/// The lease as its holder is shown it: what others see of it ([`held_by`]), its key and
/// its id.
pub(super) fn lease(row: &LeaseRow, now_ms: i64, previous: Option<Previous>) -> Result<Lease> {
    let HeldBy {
        owner,
        mode,
        slots,
        provider,
        fencing_token,
        acquired_at,
        expires_at,
        remaining_ms,
        metadata,
    } = held_by(row, now_ms)?;
    Ok(Lease {
        resource_key: row.resource_key.clone(),
        lease_id: Some(row.lease_id.clone()),
        owner,
        mode,
        slots,
        provider,
        fencing_token,
        acquired_at,
        expires_at,
        remaining_ms,
        metadata,
        previous,
    })
}

/// Who is in the way, as answers show it: the holder, or every holder of a key that can
/// have several.
pub(super) fn holders(blockers: &Blockers, now_ms: i64) -> Result<Holders> {
    if blockers.many {
        let all = blockers
            .rows
            .iter()
            .map(|row| held_by(row, now_ms))
            .collect::<Result<Vec<_>>>()?;
        return Ok(Holders::Many(all));
    }
    let first = blockers
        .rows
        .first()
        .ok_or_else(|| Error::Internal("a conflict with no holder".into()))?;
    Ok(Holders::One(held_by(first, now_ms)?))
}

pub(super) fn busy(key: &ResourceKey, blockers: &Blockers, now_ms: i64) -> Result<Reply> {
    reply(&busy_result(key, blockers, now_ms)?)
}

pub(super) fn busy_result(
    key: &ResourceKey,
    blockers: &Blockers,
    now_ms: i64,
) -> Result<AcquireResult> {
    Ok(AcquireResult::Busy {
        resource_key: key.key.clone(),
        held_by: holders(blockers, now_ms)?,
        conflicting_key: blockers.conflicting_key.clone(),
    })
}
