//! RetryNode, the operator's rule: a FAILED node runs again with a fresh count of
//! attempts, and its failed task with it once no node of it is FAILED.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::protocol::journal::EventType;
use crate::protocol::operator::RetryNodeResult;
use crate::protocol::tasks::{NodeState, TaskStatus};
use crate::store::boundary::{NodeRetry, NodesMove};

use super::super::areas::WriteCtx;
use super::rules::{event, missing, no_task, serve_waiters, set_task_status};

/// RetryNode: who retries which node, and why.
pub struct RetryRequest {
    pub task_id: String,
    pub node_id: String,
    /// The operator: the token's name, or `admin` on the Unix socket.
    pub by: String,
    pub reason: String,
}

/// An operator tries a FAILED node again, with a fresh count of attempts. Its failed task
/// runs again once no node of it is FAILED: the nodes its failure cancelled go back to
/// PENDING (their dependencies and holds as they were) and `task.running` is journalled;
/// while other nodes are still FAILED, this one waits CANCELLED like the task's other
/// unstarted nodes. `node.retried` says who and why. A node that is not FAILED, or a
/// cancelled task, is 409, before anything is written.
pub fn retry(ctx: &mut WriteCtx<'_>, r: RetryRequest) -> Result<RetryNodeResult> {
    let (task_id, node_id) = (r.task_id.as_str(), r.node_id.as_str());
    let Some(node) = ctx.nodes().node(task_id, node_id)? else {
        return Err(missing(ctx.nodes(), task_id, node_id)?);
    };
    let Some(status) = ctx.nodes().task_status(task_id)? else {
        return Err(no_task(task_id));
    };
    let refused = |message: String| {
        let mut data = serde_json::Map::new();
        data.insert("task_id".into(), task_id.into());
        data.insert("node_id".into(), node_id.into());
        data.insert("state".into(), node.state.as_str().into());
        data.insert("task_status".into(), status.as_str().into());
        Error::Conflict {
            message,
            data,
            exact: Vec::new(),
        }
    };
    if status == TaskStatus::Cancelled {
        return Err(refused(format!(
            "task `{task_id}` was cancelled, so none of its nodes runs again; register the work as a new task"
        )));
    }
    if node.state != NodeState::Failed {
        let why = match node.state {
            NodeState::Pending => "it is PENDING already: a worker will take it",
            NodeState::Running => "it is RUNNING: a worker holds it",
            NodeState::Completed => "it is COMPLETED: nothing to retry",
            // (Only a FAILED node gets past the check above.)
            NodeState::Cancelled | NodeState::Failed => "it is CANCELLED because another node failed: retry that FAILED node instead (TaskStatus shows which)",
        };
        return Err(refused(format!(
            "node `{node_id}` of task `{task_id}` is not FAILED, so there is nothing to retry: {why}"
        )));
    }
    let mut still_failed = ctx.nodes().failed_nodes(task_id)?;
    still_failed.retain(|n| n != node_id);
    let resume = status == TaskStatus::Failed && still_failed.is_empty();
    let state = if still_failed.is_empty() || status == TaskStatus::Running {
        NodeState::Pending
    } else {
        NodeState::Cancelled
    };
    let data = serde_json::json!({
        "attempts": node.attempts,
        "by": r.by,
        "reason": r.reason,
        "state": state,
    })
    .to_string();
    let seq = event(
        ctx,
        EventType::NodeRetried,
        Some(&r.by),
        task_id,
        Some(node_id),
        &data,
    )?;
    ctx.nodes().retry_node(
        task_id,
        node_id,
        &NodeRetry {
            state,
            // Its attempts are counted anew.
            attempts: 0,
            runnable_since: seq,
            at_ms: ctx.now_ms,
        },
    )?;
    let mut nodes_resumed = 0;
    let mut task_status = status;
    if resume {
        // The nodes its failure cancelled.
        nodes_resumed = ctx.nodes().move_nodes(
            task_id,
            &NodesMove {
                from: &[NodeState::Cancelled],
                to: NodeState::Pending,
                runnable_since: Some(seq),
                at_ms: ctx.now_ms,
            },
        )?;
        set_task_status(ctx, task_id, TaskStatus::Running)?;
        task_status = TaskStatus::Running;
        // Nodes held back until a time: their hold may have come due while they were
        // cancelled (it then released nothing).
        let since = ctx.head_revision();
        for (held_task, held_node, ready_at) in ctx.nodes().held_nodes()? {
            if held_task != task_id {
                continue;
            }
            if ready_at <= ctx.now_ms {
                ctx.nodes().release_hold(&held_task, &held_node, since)?;
            } else {
                let remaining = Duration::from_millis((ready_at - ctx.now_ms) as u64);
                ctx.memory
                    .tasks
                    .hold(held_task, held_node, ctx.mono_now + remaining);
            }
        }
    }
    serve_waiters(ctx)?;
    Ok(RetryNodeResult {
        task_id: r.task_id,
        node_id: r.node_id,
        node_state: state,
        task_status,
        nodes_resumed,
        still_failed,
        event_seq: seq as u64,
    })
}
