//! Wire types of the operator's methods (grant `operator`, or `admin`): BreakLock,
//! RetryNode and EndAgentSession. Each takes a `reason`, journalled with who acted.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::locks::LockMode;
use super::tasks::{NodeState, TaskStatus};

requests! {
    BreakLockParams => "BreakLock", BreakLockResult;
    RetryNodeParams => "RetryNode", RetryNodeResult;
    EndAgentSessionParams => "EndAgentSession", EndAgentSessionResult;
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BreakLockParams {
    /// The key whose lease(s) to end, e.g. `file:src/lib.rs` (only leases on this exact
    /// key; a `dir:` lease above it is its own key).
    pub resource_key: String,
    /// End only this lease (the holder's id, if it gave it to you). Omitted: every
    /// holder of the key (narrowed by `owner`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// End only the leases of this owner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Why (1 to 512 bytes): journalled with who broke it, and shown to the next holder
    /// as the key's previous outcome.
    pub reason: String,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// A lease that BreakLock ended, as others see it (never its id).
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct BrokenLease {
    pub owner: String,
    pub mode: LockMode,
    pub fencing_token: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct BreakLockResult {
    pub resource_key: String,
    /// The leases ended (outcome `broken`); their holders' next heartbeat or release is
    /// 410.
    pub broken: Vec<BrokenLease>,
    /// Waiters for this key (or a conflicting one) that were handed a lease as a result.
    pub waiters_served: u64,
    /// The seq of the last `lock.broken` event.
    pub event_seq: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryNodeParams {
    pub task_id: String,
    /// A FAILED node of a failed task.
    pub node_id: String,
    /// Why (1 to 512 bytes), journalled with who retried it.
    pub reason: String,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct RetryNodeResult {
    pub task_id: String,
    pub node_id: String,
    /// PENDING, with a fresh count of attempts; CANCELLED while other nodes of the task
    /// are still FAILED (it becomes PENDING when the last of them is retried).
    pub node_state: NodeState,
    /// `running` again once no node is FAILED; else still `failed`.
    pub task_status: TaskStatus,
    /// Nodes cancelled by the task's failure that went back to PENDING (this one
    /// included, when it was held back earlier).
    pub nodes_resumed: u64,
    /// Nodes of the task still FAILED (retry them too to resume the task).
    pub still_failed: Vec<String>,
    /// The seq of the `node.retried` event.
    pub event_seq: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EndAgentSessionParams {
    /// The agent whose live session to end.
    pub name: String,
    /// Why (1 to 512 bytes), journalled with who ended it.
    pub reason: String,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct EndAgentSessionResult {
    pub name: String,
    pub ended: bool,
    /// Resource keys whose leases, taken with the session, ended (`abandoned`).
    pub locks_ended: Vec<String>,
    /// Nodes leased with the session, rolled back to PENDING.
    pub nodes_rolled_back: u64,
    /// The seq of the `agent.left` event.
    pub event_seq: u64,
}
