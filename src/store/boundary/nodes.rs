//! The tasks' side of the boundary: tasks, nodes, edges and node leases ([`Nodes`]), and
//! the rows it reads and writes.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::protocol::tasks::{NodeState, TaskStatus};

/// A node of a new task, already validated.
pub struct NewNode {
    pub node_id: String,
    pub name: Option<String>,
    /// JSON text.
    pub payload: Option<String>,
    pub dependencies: Vec<String>,
    pub max_attempts: u32,
    /// Higher is handed out first.
    pub priority: i64,
    /// The labels a worker must all have, as one key (see `methods::tasks`).
    pub label_key: String,
    /// Held back until then (epoch ms), as one more unfinished dependency.
    pub ready_at: Option<i64>,
    /// JSON text of the JSON Schema its result must match.
    pub result_schema: Option<String>,
}

/// A new task: its row and every node, in order.
pub struct NewTask<'a> {
    pub task_id: &'a str,
    pub goal: &'a str,
    /// JSON text.
    pub context: Option<&'a str>,
    pub nodes: &'a [NewNode],
    /// The seq of its `task.registered` event (its nodes are runnable since).
    pub seq: i64,
    pub at_ms: i64,
}

/// A runnable node (PENDING, every dependency COMPLETED, not held back), as the index of
/// runnable nodes orders them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnableNode {
    /// Higher is handed out first.
    pub priority: i64,
    /// The seq since which it is runnable.
    pub runnable_since: i64,
    pub task_id: String,
    pub node_id: String,
}

/// What the rules need to judge a node.
pub struct NodeRow {
    pub state: NodeState,
    pub lease_id: Option<String>,
    /// The token the live lease was obtained with.
    pub lease_token_id: Option<String>,
    pub lease_owner: Option<String>,
    pub attempts: u32,
    pub max_attempts: u32,
    /// The JSON Schema (text) its result must match, if it has one.
    pub result_schema: Option<String>,
}

/// A node lease to grant.
pub struct NodeLeaseGrant<'a> {
    /// The node's count of attempts from now on.
    pub attempts: u32,
    pub lease_id: &'a str,
    pub owner: &'a str,
    /// The token the worker acts with (None: a Unix-socket admin connection).
    pub token_id: Option<&'a str>,
    /// The session the lease ends with.
    pub session_id: Option<&'a str>,
    pub expires_at: i64,
    pub at_ms: i64,
}

/// A node about to be handed out: what its worker is told, with its task's goal and
/// context, and the attempts it had.
pub struct NodeToStart {
    pub name: Option<String>,
    /// JSON text.
    pub payload: Option<String>,
    /// JSON text: the ids of the nodes it depends on.
    pub dependencies: String,
    pub attempts: u32,
    pub max_attempts: u32,
    pub goal: String,
    /// JSON text.
    pub task_context: Option<String>,
}

/// A node's new state, outside RUNNING.
pub struct NodeChange<'a> {
    pub state: NodeState,
    /// JSON text of a COMPLETED node's result.
    pub result: Option<&'a str>,
    /// JSON text of a FAILED (or retried) node's error.
    pub error: Option<&'a str>,
    /// For a node back in PENDING: the seq it is runnable since.
    pub runnable_since: Option<i64>,
    /// For a node back in PENDING: held back until then (epoch ms), as one more
    /// unfinished dependency.
    pub ready_at: Option<i64>,
    pub at_ms: i64,
}

/// A task's row, as stored.
#[derive(Debug, Clone)]
pub struct TaskRow {
    pub task_id: String,
    pub goal: String,
    pub status: TaskStatus,
    /// Epoch milliseconds, as `updated_at`.
    pub created_at: i64,
    pub updated_at: i64,
}

/// A node's row as TaskStatus lists it, as stored.
#[derive(Debug, Clone)]
pub struct ListedNode {
    pub node_id: String,
    pub name: Option<String>,
    pub state: NodeState,
    /// JSON text: the ids of the nodes it depends on.
    pub dependencies: String,
    pub attempts: u32,
    pub max_attempts: u32,
    pub lease_owner: Option<String>,
    /// Epoch milliseconds, as `updated_at`.
    pub lease_expires_at: Option<i64>,
    /// JSON text.
    pub result: Option<String>,
    /// JSON text.
    pub error: Option<String>,
    pub updated_at: i64,
    /// Its labels, as stored: sorted, joined by a unit separator ("" for none).
    pub label_key: String,
    /// Epoch milliseconds: held back by a delay until then.
    pub ready_at: Option<i64>,
}

/// What TaskStatus reads of a task, in one snapshot.
#[derive(Debug, Clone)]
pub struct TaskRows {
    pub task: TaskRow,
    /// How many of its nodes are in each state that some node is in.
    pub counts: Vec<(NodeState, u64)>,
    /// A page of its nodes, in registration order.
    pub nodes: Vec<ListedNode>,
}

/// Nodes of a task that move together from some states to another.
pub struct NodesMove<'a> {
    /// The states of the nodes that move.
    pub from: &'a [NodeState],
    pub to: NodeState,
    /// Runnable since this seq (None: as they were).
    pub runnable_since: Option<i64>,
    pub at_ms: i64,
}

/// A node tried anew (RetryNode): no lease, no result, no error.
pub struct NodeRetry {
    pub state: NodeState,
    /// Its count of attempts from now on.
    pub attempts: u32,
    /// The seq since which it is runnable.
    pub runnable_since: i64,
    pub at_ms: i64,
}

/// A RUNNING node's lease, as stored.
pub struct NodeLease {
    pub task_id: String,
    pub node_id: String,
    pub lease_id: String,
    /// Epoch milliseconds.
    pub expires_at: i64,
}

/// Tasks, their nodes, edges and results. A node is runnable when PENDING with every
/// dependency COMPLETED; storage keeps the count of unfinished dependencies per node.
pub trait Nodes {
    fn insert_task(&self, task: &NewTask<'_>) -> Result<()>;
    fn task_status(&self, task_id: &str) -> Result<Option<TaskStatus>>;
    fn set_task_status(&self, task_id: &str, status: TaskStatus, at_ms: i64) -> Result<()>;
    /// Of the runnable nodes whose label key is `label_key`, of one task or any, the first
    /// as the index orders them: the highest priority, then the longest runnable, then by
    /// task id and node id. Which label set's node a worker gets is a rule
    /// (`methods::tasks::rules`).
    fn first_runnable(
        &self,
        task_id: Option<&str>,
        label_key: &str,
    ) -> Result<Option<RunnableNode>>;
    /// Whether a node of the task is RUNNING, or held back until a time.
    fn has_running(&self, task_id: &str) -> Result<bool>;
    /// Ends a node's hold (its `ready_at` passed): one fewer unfinished dependency,
    /// runnable since `seq` if that was the last. False when it was not held.
    fn release_hold(&self, task_id: &str, node_id: &str, seq: i64) -> Result<bool>;
    /// Every held node: (task_id, node_id, ready_at).
    fn held_nodes(&self) -> Result<Vec<(String, String, i64)>>;
    fn node(&self, task_id: &str, node_id: &str) -> Result<Option<NodeRow>>;
    /// What a worker is told of a node it is handed (None: no such node).
    fn node_to_start(&self, task_id: &str, node_id: &str) -> Result<Option<NodeToStart>>;
    /// Makes the node RUNNING under a lease, with the count of attempts the grant says.
    fn start_node(&self, task_id: &str, node_id: &str, lease: &NodeLeaseGrant<'_>) -> Result<()>;
    /// A COMPLETED node's result (JSON text).
    fn node_result(&self, task_id: &str, node_id: &str) -> Result<Option<String>>;
    fn extend_node_lease(&self, task_id: &str, node_id: &str, expires_at: i64) -> Result<()>;
    /// Ends the node's lease and gives it a new state.
    fn change_node(&self, task_id: &str, node_id: &str, change: &NodeChange<'_>) -> Result<()>;
    /// One dependency of each dependent of the node is done: those with none left are
    /// runnable since `seq`.
    fn release_dependents(&self, task_id: &str, node_id: &str, seq: i64) -> Result<()>;
    /// One more node of the task has finished: true when it was the last unfinished one.
    fn finish_one(&self, task_id: &str) -> Result<bool>;
    /// The task's RUNNING nodes.
    fn running_nodes(&self, task_id: &str) -> Result<Vec<String>>;
    /// Every node of the task in one of the states `moved.from` takes the state `moved.to`,
    /// under no lease; how many.
    fn move_nodes(&self, task_id: &str, moved: &NodesMove<'_>) -> Result<u64>;
    /// Stores a node tried anew.
    fn retry_node(&self, task_id: &str, node_id: &str, retry: &NodeRetry) -> Result<()>;
    /// The task's FAILED nodes, by id.
    fn failed_nodes(&self, task_id: &str) -> Result<Vec<String>>;
    /// Every RUNNING node's lease.
    fn node_leases(&self) -> Result<Vec<NodeLease>>;
    /// RUNNING nodes leased with `session_id`: (task_id, node_id).
    fn nodes_of_session(&self, session_id: &str) -> Result<Vec<(String, String)>>;
    /// RUNNING nodes leased to `owner`: (task_id, node_id).
    fn nodes_leased_by(&self, owner: &str) -> Result<Vec<(String, String)>>;
    /// TaskStatus's rows: the task's, its nodes counted by state, and at most `limit` of its
    /// nodes in registration order, those after the node `after` (None: no such task).
    fn task_report(
        &self,
        task_id: &str,
        after: Option<&str>,
        limit: u64,
    ) -> Result<Option<TaskRows>>;
    /// ListTasks' rows, newest first: at most `limit` tasks (of `status`, if given), those
    /// created before the task `after`.
    fn list_tasks(
        &self,
        status: Option<TaskStatus>,
        after: Option<&str>,
        limit: u64,
    ) -> Result<Vec<TaskRow>>;
    /// Tasks and nodes by state, for Metrics.
    fn task_counts(&self) -> Result<(BTreeMap<String, u64>, BTreeMap<String, u64>)>;
}
