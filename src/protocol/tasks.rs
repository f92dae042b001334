//! Wire types of tasks: node specs, acquired nodes with their context, summaries, and
//! the params and results of the task methods.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::journal::Event;
use super::Json;

requests! {
    RegisterTaskParams => "RegisterTask", RegisterTaskResult;
    AcquireNextNodeParams => "AcquireNextNode", Option<AcquiredNode>;
    HeartbeatNodeParams => "HeartbeatNode", HeartbeatNodeResult;
    CompleteNodeParams => "CompleteNode", EventSeqResult;
    FailNodeParams => "FailNode", FailNodeResult;
    CommitEventParams => "CommitEvent", EventSeqResult;
    TaskStatusParams => "TaskStatus", TaskStatusResult;
    ListTasksParams => "ListTasks", ListTasksResult;
    CancelTaskParams => "CancelTask", CancelTaskResult;
}

/// Where a node is in its life: PENDING (waiting for its dependencies or a worker),
/// RUNNING (leased to a worker), then COMPLETED, FAILED or CANCELLED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NodeState {
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl NodeState {
    pub const ALL: [NodeState; 5] = [
        NodeState::Pending,
        NodeState::Running,
        NodeState::Completed,
        NodeState::Failed,
        NodeState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Pending => "PENDING",
            NodeState::Running => "RUNNING",
            NodeState::Completed => "COMPLETED",
            NodeState::Failed => "FAILED",
            NodeState::Cancelled => "CANCELLED",
        }
    }

    pub fn parse(text: &str) -> Option<NodeState> {
        NodeState::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// A task's status: running until every node is COMPLETED (completed), a node FAILED for
/// good (failed) or it was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 4] = [
        TaskStatus::Running,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Running => "running",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<TaskStatus> {
        TaskStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// The node's id (a UUID is generated when absent). Dependencies name nodes by id, or
    /// by `name` when names are unique.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Nodes that must be COMPLETED before this one runs.
    #[serde(default)]
    pub dependencies: Vec<String>,
    /// What the worker needs to do the node (any JSON). Alias: `payload_schema`.
    #[serde(alias = "payload_schema")]
    #[schemars(with = "Option<serde_json::Value>")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Json>,
    /// How many times the node may be handed out (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Higher is handed out first (default 0; -1000000 to 1000000); among equals, the one
    /// runnable longest goes first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// Only a worker that has every one of these labels takes the node (e.g. ["gpu"]).
    #[serde(default)]
    pub labels: Vec<String>,
    /// Hold the node back this many milliseconds from registration (at most a day).
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// A JSON Schema the node's result must match: CompleteNode with a result that does
    /// not is refused (400 naming where), and the node stays RUNNING under its lease.
    #[schemars(with = "Option<serde_json::Value>")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_schema: Option<Json>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterTaskParams {
    pub goal: String,
    #[schemars(with = "Option<serde_json::Value>")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<Json>,
    /// The graph. Alias: `initial_nodes`.
    #[serde(alias = "initial_nodes")]
    pub nodes: Vec<NodeSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct RegisterTaskResult {
    pub task_id: String,
    /// In the order the nodes were given.
    pub node_ids: Vec<String>,
    pub event_seq: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireNextNodeParams {
    /// Only this task's nodes; any task's when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Who works on the node. Defaults to the session's name with `session_id` (and, given
    /// with it, must be that name); one of the two is needed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_owner: Option<String>,
    /// Tie the node lease to this session (RegisterAgent): the node rolls back when it ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Lease length; default BATON_NODE_TIMEOUT_SECS. Heartbeat to extend.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// Wait up to this long for a runnable node (first come, first served) instead of answering null.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// What this worker can do (at most 8): it takes nodes whose labels are all among these,
    /// and nodes without labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct NodeContext {
    pub goal: String,
    #[schemars(with = "Option<serde_json::Value>")]
    pub task_context: Option<Json>,
    /// Results of this node's dependencies, by node id.
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub dependency_results: BTreeMap<String, Json>,
    /// The task's last BATON_CONTEXT_EVENT_LIMIT journal events, oldest first.
    #[schemars(with = "Vec<Event>")]
    pub recent_events: Vec<std::sync::Arc<RawValue>>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct AcquiredNode {
    pub task_id: String,
    pub node_id: String,
    pub name: Option<String>,
    pub lease_id: String,
    pub lease_owner: String,
    pub lease_expires_at: String,
    /// 1 on the first hand-out of this node, +1 on each retry or rollback.
    pub attempt: u32,
    pub max_attempts: u32,
    #[schemars(with = "Option<serde_json::Value>")]
    pub payload: Option<Json>,
    pub context: NodeContext,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatNodeParams {
    pub task_id: String,
    pub node_id: String,
    pub lease_id: String,
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct HeartbeatNodeResult {
    pub lease_expires_at: String,
    pub remaining_ms: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteNodeParams {
    pub task_id: String,
    pub node_id: String,
    pub lease_id: String,
    /// The node's result (any JSON; default null), given to its dependents. Alias: `result_payload`.
    #[serde(alias = "result_payload")]
    #[schemars(with = "Option<serde_json::Value>")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Json>,
    /// Apply only while this lease holds (`{resource_key, lease_id}`) or this fencing
    /// token is the key's latest (`{resource_key, fencing_token}`); else 409 `fenced`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<super::locks::Fence>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct EventSeqResult {
    pub event_seq: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailNodeParams {
    pub task_id: String,
    pub node_id: String,
    pub lease_id: String,
    /// What went wrong (any JSON). Alias: `error_payload`.
    #[serde(alias = "error_payload")]
    #[schemars(with = "serde_json::Value")]
    pub error: Json,
    /// Put the node back to PENDING while attempts remain (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<bool>,
    /// With a retry, hold the node back this many milliseconds first (at most a day).
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct FailNodeResult {
    /// PENDING (will be retried) or FAILED.
    pub status: NodeState,
    pub attempts: u32,
    pub max_attempts: u32,
    pub event_seq: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitEventParams {
    pub task_id: String,
    pub node_id: String,
    /// Required while the node is RUNNING.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// The event's type: `custom.` and what happened (e.g. `custom.file.written`), or
    /// `node.progress`; every other type is the daemon's.
    pub action_type: String,
    #[schemars(with = "serde_json::Value")]
    pub payload: Json,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskStatusParams {
    pub task_id: String,
    /// Nodes in this page, 1 to 1000 [default: 1000]; `counts` always counts them all.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The previous page's `next` (a node id): the nodes registered after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct TaskSummary {
    pub task_id: String,
    pub goal: String,
    pub status: TaskStatus,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct NodeSummary {
    pub node_id: String,
    pub name: Option<String>,
    pub state: NodeState,
    pub dependencies: Vec<String>,
    pub attempts: u32,
    pub max_attempts: u32,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<String>,
    #[schemars(with = "Option<serde_json::Value>")]
    pub result: Option<Json>,
    #[schemars(with = "Option<serde_json::Value>")]
    pub error: Option<Json>,
    pub updated_at: String,
    /// The labels a worker needs all of to take it (sorted; none: any worker).
    #[serde(default)]
    pub labels: Vec<String>,
    /// While a delay holds it back: when it becomes runnable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct TaskStatusResult {
    pub task: TaskSummary,
    /// Nodes per state (every state is listed, 0 when none).
    pub counts: BTreeMap<String, u64>,
    /// In the order they were registered.
    pub nodes: Vec<NodeSummary>,
    /// Pass as `after` for the next nodes; null when nothing follows.
    #[serde(default)]
    pub next: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTasksParams {
    /// running, completed, failed or cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Default 100, at most 1000; newest first.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The previous page's `next` (a task id): the tasks created before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ListTasksResult {
    pub tasks: Vec<TaskSummary>,
    /// Pass as `after` for the next page; null when nothing follows.
    #[serde(default)]
    pub next: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelTaskParams {
    pub task_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct CancelTaskResult {
    pub task_id: String,
    pub status: TaskStatus,
    /// Nodes that were PENDING or RUNNING and are now CANCELLED.
    pub cancelled_nodes: u64,
}
