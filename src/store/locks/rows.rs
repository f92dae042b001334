//! The lock tables' rows and lookups: a held lease, a conflicting one (same key, same
//! path, an enclosing `dir:` or one inside it), and the last holder's outcome.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::value::RawValue;

use crate::clock::format_ms;
use crate::error::Result;
use crate::protocol::locks::{HeldBy, Lease, Previous};
use crate::resource_key::ResourceKey;

pub(super) struct LockRow {
    pub(super) resource_key: String,
    pub(super) lease_id: String,
    pub(super) owner: String,
    pub(super) provider: Option<String>,
    pub(super) fencing_token: u64,
    pub(super) acquired_at: i64,
    pub(super) expires_at: i64,
    pub(super) metadata: Option<String>,
}

pub(super) const LOCK_COLUMNS: &str =
    "resource_key, lease_id, owner, provider, fencing_token, acquired_at, expires_at, metadata";

pub(super) fn lock_row(r: &Row<'_>) -> rusqlite::Result<LockRow> {
    Ok(LockRow {
        resource_key: r.get(0)?,
        lease_id: r.get(1)?,
        owner: r.get(2)?,
        provider: r.get(3)?,
        fencing_token: r.get(4)?,
        acquired_at: r.get(5)?,
        expires_at: r.get(6)?,
        metadata: r.get(7)?,
    })
}

pub(super) fn metadata_json(text: &Option<String>) -> Result<Option<Box<RawValue>>> {
    Ok(match text {
        Some(t) => Some(RawValue::from_string(t.clone())?),
        None => None,
    })
}

impl LockRow {
    pub(super) fn held_by(&self, now_ms: i64) -> Result<HeldBy> {
        Ok(HeldBy {
            owner: self.owner.clone(),
            provider: self.provider.clone(),
            fencing_token: self.fencing_token,
            acquired_at: format_ms(self.acquired_at),
            expires_at: format_ms(self.expires_at),
            remaining_ms: (self.expires_at - now_ms).max(0) as u64,
            metadata: metadata_json(&self.metadata)?,
        })
    }

    pub(super) fn lease(&self, now_ms: i64, previous: Option<Previous>) -> Result<Lease> {
        Ok(Lease {
            resource_key: self.resource_key.clone(),
            lease_id: Some(self.lease_id.clone()),
            owner: self.owner.clone(),
            provider: self.provider.clone(),
            fencing_token: self.fencing_token,
            acquired_at: format_ms(self.acquired_at),
            expires_at: format_ms(self.expires_at),
            remaining_ms: (self.expires_at - now_ms).max(0) as u64,
            metadata: metadata_json(&self.metadata)?,
            previous,
        })
    }
}

pub(super) fn held(conn: &Connection, key: &str) -> Result<Option<LockRow>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {LOCK_COLUMNS} FROM locks WHERE resource_key = ?1"
        ))?
        .query_row([key], lock_row)
        .optional()?)
}

/// A held lease that conflicts with `key`: the key itself, a lease on the same path, an
/// enclosing `dir:`, or (for a `dir:`) anything inside it. Point and range lookups on the
/// path index: the cost grows with the path's depth, not with the number of locks.
pub(super) fn conflicting(conn: &Connection, key: &ResourceKey) -> Result<Option<LockRow>> {
    if let Some(row) = held(conn, &key.key)? {
        return Ok(Some(row));
    }
    let Some(path) = key.path.as_deref() else {
        return Ok(None);
    };
    let mut same_path = conn.prepare_cached(&format!(
        "SELECT {LOCK_COLUMNS} FROM locks WHERE path = ?1 LIMIT 1"
    ))?;
    if let Some(row) = same_path.query_row([path], lock_row).optional()? {
        return Ok(Some(row));
    }
    let mut dir_at = conn.prepare_cached(&format!(
        "SELECT {LOCK_COLUMNS} FROM locks WHERE path = ?1 AND kind = 'dir' LIMIT 1"
    ))?;
    for ancestor in key.ancestors() {
        if let Some(row) = dir_at.query_row([ancestor], lock_row).optional()? {
            return Ok(Some(row));
        }
    }
    if key.is_dir() {
        // Every path strictly inside `path/`: from "path/" up to "path0" ('0' follows '/').
        let mut inside = conn.prepare_cached(&format!(
            "SELECT {LOCK_COLUMNS} FROM locks WHERE path > ?1 AND path < ?2 AND path IS NOT NULL LIMIT 1"
        ))?;
        if let Some(row) = inside
            .query_row(params![format!("{path}/"), format!("{path}0")], lock_row)
            .optional()?
        {
            return Ok(Some(row));
        }
    }
    Ok(None)
}

pub(super) fn previous(conn: &Connection, key: &str) -> Result<Option<Previous>> {
    Ok(conn
        .prepare_cached(
            "SELECT outcome, owner, at, moved_to, note FROM lock_outcomes WHERE resource_key = ?1",
        )?
        .query_row([key], |r| {
            Ok(Previous {
                outcome: r.get(0)?,
                owner: r.get(1)?,
                at: format_ms(r.get(2)?),
                moved_to: r.get(3)?,
                note: r.get(4)?,
            })
        })
        .optional()?)
}
