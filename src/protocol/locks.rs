//! Wire types of resource locks: leases, holders, outcomes, and the params and results
//! of the lock methods.

use schemars::JsonSchema;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

use super::{read_whole, Json, Status};

requests! {
    AcquireResourceLockParams => "AcquireResourceLock", AcquireResult;
    HeartbeatResourceLockParams => "HeartbeatResourceLock", HeartbeatResult;
    ReleaseResourceLockParams => "ReleaseResourceLock", ReleaseResult;
    ResourceLockStatusParams => "ResourceLockStatus", StatusResult;
    ListResourceLocksParams => "ListResourceLocks", ListResourceLocksResult;
    WaitResourceLockParams => "WaitResourceLock", WaitResult;
    CheckFenceParams => "CheckFence", CheckFenceResult;
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireResourceLockParams {
    /// `kind:name`, e.g. `file:src/lib.rs`, `dir:src`, `tool:cargo-fmt`.
    pub resource_key: String,
    /// Who holds it (an agent's name). Asking again as the same holder (the same session,
    /// or without one the same owner and token) returns the same lease. Defaults to the
    /// session's name with `session_id` (and, given with it, must be that name); one of the
    /// two is needed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Tie the lease to this session (RegisterAgent): it ends (`abandoned`) with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Lease length; default BATON_LOCK_TTL_SECS (300). Heartbeat to extend.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    #[schemars(with = "Option<serde_json::Value>")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Json>,
    /// Wait up to this long for the lock (first come, first served) instead of answering busy.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// End the lease (outcome `abandoned`) as soon as this connection closes.
    #[serde(default)]
    pub release_on_disconnect: bool,
    /// `exclusive` (default): no one else holds the key, or anything it conflicts with.
    /// `shared`: other shared holders may hold it too (readers); an exclusive one may not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<LockMode>,
    /// Make a key outside file:/dir: a counting semaphore with this many holders at once
    /// (1 to 1000); while it has holders, every acquire must name the same number.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
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
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Holders {
    One(HeldBy),
    Many(Vec<HeldBy>),
}

/// A list is [`Holders::Many`], an object [`Holders::One`] (see [`read_whole`]: the
/// derive would try each through a buffer, which a holder's metadata cannot pass).
impl<'de> Deserialize<'de> for Holders {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Holders, D::Error> {
        read_whole(d, |text| {
            if text.trim_start().starts_with('[') {
                Ok(Holders::Many(serde_json::from_str(text)?))
            } else {
                Ok(Holders::One(serde_json::from_str(text)?))
            }
        })
    }
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

/// The body of [`AcquireResult::Busy`] and [`StatusResult::Held`].
#[derive(Deserialize)]
struct HeldBody {
    resource_key: String,
    held_by: Holders,
    conflicting_key: String,
}

/// Read by its `status`, then the variant's members (see [`read_whole`]).
impl<'de> Deserialize<'de> for AcquireResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AcquireResult, D::Error> {
        read_whole(d, |text| {
            let Status { status } = serde_json::from_str(text)?;
            Ok(match status.as_str() {
                "acquired" => AcquireResult::Acquired(serde_json::from_str(text)?),
                "already_held" => AcquireResult::AlreadyHeld(serde_json::from_str(text)?),
                "busy" => {
                    let HeldBody {
                        resource_key,
                        held_by,
                        conflicting_key,
                    } = serde_json::from_str(text)?;
                    AcquireResult::Busy {
                        resource_key,
                        held_by,
                        conflicting_key,
                    }
                }
                other => {
                    return Err(serde_json::Error::unknown_variant(
                        other,
                        &["acquired", "already_held", "busy"],
                    ))
                }
            })
        })
    }
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatResourceLockParams {
    pub resource_key: String,
    pub lease_id: String,
    /// New lease length from now; default the daemon's BATON_LOCK_TTL_SECS.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
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

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseResourceLockParams {
    pub resource_key: String,
    pub lease_id: String,
    /// What happened to the resource; default `released`. `moved` needs `moved_to`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ReleaseResult {
    pub status: &'static str,
    pub resource_key: String,
    pub outcome: Outcome,
}

/// Read with its `status`, which must be `released`.
impl<'de> Deserialize<'de> for ReleaseResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ReleaseResult, D::Error> {
        #[derive(Deserialize)]
        struct Released {
            status: String,
            resource_key: String,
            outcome: Outcome,
        }
        const RELEASED: &str = "released";
        let Released {
            status,
            resource_key,
            outcome,
        } = Released::deserialize(d)?;
        if status != RELEASED {
            return Err(D::Error::unknown_variant(&status, &[RELEASED]));
        }
        Ok(ReleaseResult {
            status: RELEASED,
            resource_key,
            outcome,
        })
    }
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
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

/// Read by its `status`, then the variant's members (see [`read_whole`]).
impl<'de> Deserialize<'de> for StatusResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StatusResult, D::Error> {
        #[derive(Deserialize)]
        struct AvailableBody {
            resource_key: String,
            previous: Option<Previous>,
        }
        read_whole(d, |text| {
            let Status { status } = serde_json::from_str(text)?;
            Ok(match status.as_str() {
                "available" => {
                    let AvailableBody {
                        resource_key,
                        previous,
                    } = serde_json::from_str(text)?;
                    StatusResult::Available {
                        resource_key,
                        previous,
                    }
                }
                "held" => {
                    let HeldBody {
                        resource_key,
                        held_by,
                        conflicting_key,
                    } = serde_json::from_str(text)?;
                    StatusResult::Held {
                        resource_key,
                        held_by,
                        conflicting_key,
                    }
                }
                other => {
                    return Err(serde_json::Error::unknown_variant(
                        other,
                        &["available", "held"],
                    ))
                }
            })
        })
    }
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListResourceLocksParams {
    /// Resource keys starting with this (canonical form, e.g. `file:src/`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// At most this many, 1 to 1000 [default: 1000]; a page also stops at 8 MiB.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The previous page's `next`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct LockEntry {
    pub resource_key: String,
    #[serde(flatten)]
    pub held_by: HeldBy,
}

/// Read in two passes over its text (see [`read_whole`]): the key, then the holder.
impl<'de> Deserialize<'de> for LockEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LockEntry, D::Error> {
        #[derive(Deserialize)]
        struct Key {
            resource_key: String,
        }
        read_whole(d, |text| {
            let Key { resource_key } = serde_json::from_str(text)?;
            Ok(LockEntry {
                resource_key,
                held_by: serde_json::from_str(text)?,
            })
        })
    }
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
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

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
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

/// Read by its `status`, then the variant's members (see [`read_whole`]).
impl<'de> Deserialize<'de> for WaitResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WaitResult, D::Error> {
        #[derive(Deserialize)]
        struct AvailableBody {
            resource_key: String,
            waited_ms: u64,
            previous: Option<Previous>,
        }
        #[derive(Deserialize)]
        struct TimeoutBody {
            resource_key: String,
            held_by: HeldBy,
            waited_ms: u64,
        }
        read_whole(d, |text| {
            let Status { status } = serde_json::from_str(text)?;
            Ok(match status.as_str() {
                "available" => {
                    let AvailableBody {
                        resource_key,
                        waited_ms,
                        previous,
                    } = serde_json::from_str(text)?;
                    WaitResult::Available {
                        resource_key,
                        waited_ms,
                        previous,
                    }
                }
                "timeout" => {
                    let TimeoutBody {
                        resource_key,
                        held_by,
                        waited_ms,
                    } = serde_json::from_str(text)?;
                    WaitResult::Timeout {
                        resource_key,
                        held_by,
                        waited_ms,
                    }
                }
                other => {
                    return Err(serde_json::Error::unknown_variant(
                        other,
                        &["available", "timeout"],
                    ))
                }
            })
        })
    }
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
