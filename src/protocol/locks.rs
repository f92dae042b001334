//! Wire types of resource locks: leases, holders, outcomes, and the params and results
//! of the lock methods.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Json;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireResourceLockParams {
    /// `kind:name`, e.g. `file:src/lib.rs`, `dir:src`, `tool:cargo-fmt`.
    pub resource_key: String,
    /// Who holds it (an agent's name). Asking again with the same owner returns the same
    /// lease. Defaults to the session's name with `session_id` (and, given with it, must be
    /// that name); one of the two is needed.
    pub owner: Option<String>,
    /// Tie the lease to this session (RegisterAgent): it ends (`abandoned`) with it.
    pub session_id: Option<String>,
    pub provider: Option<String>,
    /// Lease length; default BATON_LOCK_TTL_SECS (300). Heartbeat to extend.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    #[schemars(with = "Option<serde_json::Value>")]
    pub metadata: Option<Json>,
    /// Wait up to this long for the lock (first come, first served) instead of answering busy.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// End the lease (outcome `abandoned`) as soon as this connection closes.
    #[serde(default)]
    pub release_on_disconnect: bool,
    /// `exclusive` (default): no one else holds the key, or anything it conflicts with.
    /// `shared`: other shared holders may hold it too (readers); an exclusive one may not.
    pub mode: Option<LockMode>,
    /// Make a key outside file:/dir: a counting semaphore with this many holders at once
    /// (1 to 1000); while it has holders, every acquire must name the same number.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub slots: Option<u64>,
    pub idempotency_key: Option<String>,
}

/// How a lease holds its key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LockMode {
    /// Alone: every other lease on the key, or on a conflicting one, excludes it.
    #[default]
    Exclusive,
    /// Beside other shared leases (and within a key's slots).
    Shared,
}

impl LockMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "exclusive",
            LockMode::Shared => "shared",
        }
    }
}

/// Who holds a key: one holder, or, for a key that can have several (shared leases,
/// slots), every one of them.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Holders {
    One(HeldBy),
    Many(Vec<HeldBy>),
}

impl Holders {
    /// The first holder (the one that has held it longest).
    pub fn first(&self) -> Option<&HeldBy> {
        match self {
            Holders::One(h) => Some(h),
            Holders::Many(all) => all.first(),
        }
    }
}

/// The current holder of a key, as others see it (never its lease id).
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct HeldBy {
    pub owner: String,
    #[serde(default)]
    pub mode: LockMode,
    /// The key's slots, for a counting key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u64>,
    pub provider: Option<String>,
    pub fencing_token: u64,
    pub acquired_at: String,
    pub expires_at: String,
    pub remaining_ms: u64,
    #[schemars(with = "Option<serde_json::Value>")]
    pub metadata: Option<Json>,
}

/// What the last holder of a key declared when it let go.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Previous {
    pub outcome: String,
    pub owner: String,
    pub at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A lease held by the caller.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Lease {
    pub resource_key: String,
    /// The holder's secret, shown only to the connection that acquired it: an
    /// `already_held` answer on another connection leaves it out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    pub owner: String,
    #[serde(default)]
    pub mode: LockMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u64>,
    pub provider: Option<String>,
    pub fencing_token: u64,
    pub acquired_at: String,
    pub expires_at: String,
    pub remaining_ms: u64,
    #[schemars(with = "Option<serde_json::Value>")]
    pub metadata: Option<Json>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<Previous>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum AcquireResult {
    Acquired(Lease),
    AlreadyHeld(Lease),
    Busy {
        resource_key: String,
        /// The holder, or (for a key that can have several) every holder.
        held_by: Holders,
        /// The held key that conflicts: the same key, an enclosing `dir:`, or one inside it.
        conflicting_key: String,
    },
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatResourceLockParams {
    pub resource_key: String,
    pub lease_id: String,
    /// New lease length from now; default the daemon's BATON_LOCK_TTL_SECS.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct HeartbeatResult {
    pub resource_key: String,
    pub expires_at: String,
    pub remaining_ms: u64,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Released,
    Modified,
    Created,
    Deleted,
    Moved,
    Abandoned,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Released => "released",
            Outcome::Modified => "modified",
            Outcome::Created => "created",
            Outcome::Deleted => "deleted",
            Outcome::Moved => "moved",
            Outcome::Abandoned => "abandoned",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseResourceLockParams {
    pub resource_key: String,
    pub lease_id: String,
    /// What happened to the resource; default `released`. `moved` needs `moved_to`.
    pub outcome: Option<Outcome>,
    pub moved_to: Option<String>,
    pub note: Option<String>,
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ReleaseResult {
    pub status: &'static str,
    pub resource_key: String,
    pub outcome: Outcome,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceLockStatusParams {
    pub resource_key: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum StatusResult {
    Available {
        resource_key: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        previous: Option<Previous>,
    },
    Held {
        resource_key: String,
        /// The holder, or (for a key that can have several) every holder.
        held_by: Holders,
        conflicting_key: String,
    },
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListResourceLocksParams {
    /// Resource keys starting with this (canonical form, e.g. `file:src/`).
    pub prefix: Option<String>,
    pub owner: Option<String>,
    /// At most this many, 1 to 1000 [default: 1000]; a page also stops at 8 MiB.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The previous page's `next`.
    pub after: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct LockEntry {
    pub resource_key: String,
    #[serde(flatten)]
    pub held_by: HeldBy,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ListResourceLocksResult {
    pub locks: Vec<LockEntry>,
    /// Requests queued for a key (AcquireResourceLock with `wait_ms`), first come first
    /// served per key, in that order. With PostgreSQL, those of every daemon. A page
    /// shows the waiters of the keys from the previous page's last key (excluded) to its
    /// own last (included; to the end on the last page).
    pub waiting: Vec<WaitingEntry>,
    /// Pass as `after` for the next page; null when nothing follows.
    #[serde(default)]
    pub next: Option<String>,
}

/// A request waiting for a lock.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct WaitingEntry {
    pub resource_key: String,
    pub owner: String,
    pub mode: LockMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u64>,
    /// When it began waiting. With PostgreSQL, only for this daemon's own waiters
    /// (another daemon's are listed without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitResourceLockParams {
    pub resource_key: String,
    /// How long to wait for the key to become available.
    #[serde(deserialize_with = "crate::json::int_param")]
    pub timeout_ms: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum WaitResult {
    Available {
        resource_key: String,
        waited_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        previous: Option<Previous>,
    },
    Timeout {
        resource_key: String,
        held_by: HeldBy,
        waited_ms: u64,
    },
}

/// A write's fence (`fence` on Set, Delete, each Txn op, CompleteNode and Publish): the
/// write is applied only while the lease `lease_id` on `resource_key` is live, or while no
/// lease on `resource_key` was granted with a larger fencing token than `fencing_token`.
/// Exactly one of the two.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fence {
    pub resource_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::json::opt_int_param"
    )]
    pub fencing_token: Option<u64>,
}

/// CheckFence: whether `fencing_token` is still the latest on `resource_key`, for a store
/// outside Baton that keeps its own data and fences its writes itself.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckFenceParams {
    pub resource_key: String,
    #[serde(deserialize_with = "crate::json::int_param")]
    pub fencing_token: u64,
}

/// CheckFence's answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CheckFenceResult {
    pub resource_key: String,
    /// No lease on the key was granted with a larger token.
    pub latest: bool,
    /// The largest fencing token granted on the key (0 when none was).
    pub latest_fencing_token: u64,
    /// Whether a live lease holds the key now.
    pub held: bool,
}
