//! Which leases exclude which. A key may be held by one exclusive lease, by any number of
//! shared ones, or (a counting key, `slots: N`) by up to N; the `dir:`/`file:` hierarchy
//! applies mode-wise: a shared `dir:src` lets shared locks inside it be taken and keeps
//! exclusive ones out, and an exclusive lock conflicts with any lock on an ancestor or a
//! descendant. Point and range lookups in the writer's mirror of the leases: the cost grows
//! with the path's depth, not with the number of locks, and no storage is read.

use crate::error::{Error, Result};
use crate::protocol::locks::LockMode;
use crate::resource_key::ResourceKey;
use crate::store::boundary::LeaseRow;

use super::held::Held;

/// How a request wants to hold its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    pub mode: LockMode,
    pub slots: Option<u64>,
}

impl Want {
    /// What WaitResourceLock and ResourceLockStatus judge by: an exclusive acquire.
    pub const EXCLUSIVE: Want = Want {
        mode: LockMode::Exclusive,
        slots: None,
    };
}

/// The leases in the way of a request.
pub struct Blockers {
    pub rows: Vec<LeaseRow>,
    /// The held key that conflicts: the key itself, one on the same path, an enclosing
    /// `dir:`, or one inside it.
    pub conflicting_key: String,
    /// Whether the key can have several holders (shared leases, slots): answers then list
    /// every holder.
    pub many: bool,
}

/// Which resource keys a caller may see the holders of: None for admin, else the
/// token's (its `locks:` grants, or `read`).
pub type Visible = Option<std::sync::Arc<super::super::auth::Principal>>;

/// How a holder or a key outside the caller's grants is shown.
pub const HIDDEN: &str = "(hidden)";

impl Blockers {
    /// What the caller may see of them: a holder of a key outside its grants shows as
    /// [`HIDDEN`], with no provider or metadata, and so does such a conflicting key. The
    /// answer still says the key is taken.
    pub fn seen_by(mut self, visible: &Visible) -> Blockers {
        let Some(principal) = visible else {
            return self;
        };
        for row in &mut self.rows {
            if !principal.scopes.allows_lock(&row.resource_key) {
                row.owner = HIDDEN.into();
                row.provider = None;
                row.metadata = None;
            }
        }
        if !principal.scopes.allows_lock(&self.conflicting_key) {
            self.conflicting_key = HIDDEN.into();
        }
        self
    }
}

/// Whether `row` is already the requester's (`owner`, presenting `session`, acting with
/// `token`): answered `already_held` rather than judged as anyone else's lease (busy, or
/// a place in the queue). A lease tied to an agent session is that session's alone: only
/// a request presenting the same session holds it already, whatever owner name another
/// request gives (two hosts that both say `alice` are two holders). A lease tied to no
/// session is its owner name's as said with the token that took it: a request tied to no
/// session, with the same owner and token, holds it already; another token, or a
/// session, saying that name does not.
pub fn holds_already(
    row: &LeaseRow,
    owner: &str,
    session: Option<&str>,
    token: Option<&str>,
) -> bool {
    row.owner == owner
        && match (row.session_id.as_deref(), session) {
            (Some(held), Some(asked)) => held == asked,
            (None, None) => row.token_id.as_deref() == token,
            _ => false,
        }
}

/// What stands in the way of holding `key` as `want` now; None when nothing does.
/// A request whose slots do not match the key's is refused (400), naming the key's.
pub fn blockers(held: &Held, key: &ResourceKey, want: Want) -> Result<Option<Blockers>> {
    let holders = held.holders(&key.key);
    if let Some(first) = holders.first() {
        match (first.slots, want.slots) {
            (Some(n), Some(m)) if n != m => {
                return Err(Error::Invalid(format!(
                    "{} is a counting key with {n} slots while it has holders; pass slots: {n}",
                    key.key
                )))
            }
            (Some(n), None) => {
                return Err(Error::Invalid(format!(
                    "{} is a counting key with {n} slots; pass slots: {n}",
                    key.key
                )))
            }
            (None, Some(_)) => {
                return Err(Error::Invalid(format!(
                    "{} is held without slots; acquire it without slots, or once it is free",
                    key.key
                )))
            }
            _ => {}
        }
    }
    let many = want.mode == LockMode::Shared
        || want.slots.is_some()
        || holders
            .iter()
            .any(|h| h.mode == LockMode::Shared || h.slots.is_some());
    let blocked_on_key = match (want.slots, want.mode) {
        (Some(n), _) => holders.len() as u64 >= n,
        (None, LockMode::Exclusive) => !holders.is_empty(),
        (None, LockMode::Shared) => holders.iter().any(|h| h.mode == LockMode::Exclusive),
    };
    if blocked_on_key {
        return Ok(Some(Blockers {
            rows: holders,
            conflicting_key: key.key.clone(),
            many,
        }));
    }
    let Some(path) = key.path.as_deref() else {
        return Ok(None);
    };
    let one = |row: &LeaseRow| {
        Some(Blockers {
            conflicting_key: row.resource_key.clone(),
            rows: vec![row.clone()],
            many: false,
        })
    };
    // Shared wants mind only exclusive leases; exclusive wants mind every lease.
    let exclusive_only = want.mode == LockMode::Shared;
    if let Some(row) = held.other_on_path(path, &key.key, exclusive_only) {
        return Ok(one(row));
    }
    for ancestor in key.ancestors() {
        if let Some(row) = held.dir_at(ancestor, exclusive_only) {
            return Ok(one(row));
        }
    }
    if key.is_dir() {
        if let Some(row) = held.inside(path, exclusive_only) {
            return Ok(one(row));
        }
    }
    Ok(None)
}
