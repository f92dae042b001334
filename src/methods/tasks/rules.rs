//! The rules of tasks, run on the writer: which node goes to which worker (oldest runnable
//! first, waiting workers first come first served), node transitions
//! (PENDING -> RUNNING -> COMPLETED | FAILED | back to PENDING for a retry or when a lease
//! lapses), when a task ends, and what each change puts in the journal. Storage (the
//! [`Nodes`] boundary) holds the graph, states, leases and results; the writer's memory
//! ([`TaskState`](super::memory::TaskState)) holds each node lease's monotonic deadline, the queue of waiting workers
//! and the recent events of active tasks.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::value::RawValue;

use crate::clock::format_ms;
use crate::error::{Error, Result};
use crate::protocol::journal::EventType;
use crate::protocol::reply;
use crate::protocol::tasks::{
    AcquiredNode, CancelTaskResult, EventSeqResult, FailNodeResult, HeartbeatNodeResult,
    NodeContext, NodeState, RegisterTaskResult, TaskStatus,
};
use crate::store::boundary::{
    NewEvent, NewNode, NewTask, NodeChange, NodeLeaseGrant, NodeRow, Nodes, NodesMove, RunnableNode,
};

use super::super::journal::{append, appended};
use crate::engine::schedule::Due;
use crate::engine::Served;

use super::super::areas::WriteCtx;
use super::super::Presented;
use super::memory::{Timer, Waiter};
use super::ranking::next_runnable;

/// An AcquireNextNode request, as the writer needs it.
pub struct NodeRequest {
    pub task_id: Option<String>,
    pub owner: String,
    pub ttl_ms: u64,
    pub connection: u64,
    pub event_limit: u64,
    /// The token the worker acts with: the node lease is bound to it.
    pub token_id: Option<String>,
    /// The session the node lease is tied to (checked on the writer); with it, an empty
    /// `owner` means the session's name.
    pub session: Option<Presented>,
    /// The label keys of the nodes this worker may take (every subset of its labels).
    pub label_keys: Vec<String>,
}

pub fn no_task(task_id: &str) -> Error {
    Error::NotFound(format!(
        "task `{task_id}` does not exist; check the id (ListTasks shows the tasks)"
    ))
}

fn no_node(task_id: &str, node_id: &str) -> Error {
    Error::NotFound(format!(
        "node `{node_id}` is not a node of task `{task_id}`; TaskStatus lists its nodes"
    ))
}

/// 404 for a node that does not exist: naming the task when that is what is missing.
pub(super) fn missing(nodes: &dyn Nodes, task_id: &str, node_id: &str) -> Result<Error> {
    Ok(if nodes.task_status(task_id)?.is_some() {
        no_node(task_id, node_id)
    } else {
        no_task(task_id)
    })
}

/// A node's dependencies, stored as the JSON text of an array of node ids.
pub(super) fn dependencies(text: &str) -> Result<Vec<String>> {
    Ok(serde_json::from_str(text)?)
}

pub(super) fn raw(text: Option<String>) -> Result<Option<Box<RawValue>>> {
    Ok(match text {
        Some(t) => Some(RawValue::from_string(t)?),
        None => None,
    })
}

pub(super) fn event(
    ctx: &mut WriteCtx<'_>,
    kind: EventType<'_>,
    actor: Option<&str>,
    task_id: &str,
    node_id: Option<&str>,
    data: &str,
) -> Result<i64> {
    let seq = ctx.next_revision();
    let event = NewEvent {
        actor,
        task_id: Some(task_id),
        node_id,
        data,
        ..NewEvent::of(kind)
    };
    append(ctx, seq, &event)?;
    if ctx.memory.tasks.keeps_recent(task_id) {
        let serialized = appended(ctx, seq, &event)?;
        ctx.memory.tasks.note_event(task_id, seq, serialized);
    }
    Ok(seq)
}

/// Registers a task; `delays` holds each node back that many milliseconds from now.
pub fn register(
    ctx: &mut WriteCtx<'_>,
    goal: &str,
    context: Option<&str>,
    mut nodes: Vec<NewNode>,
    delays: Vec<Option<u64>>,
) -> Result<RegisterTaskResult> {
    for (node, delay) in nodes.iter_mut().zip(&delays) {
        node.ready_at = delay.map(|ms| ctx.now_ms + ms as i64);
    }
    let task_id = crate::methods::new_id();
    let data = serde_json::json!({"goal": goal, "nodes": nodes.len()}).to_string();
    let seq = event(ctx, EventType::TaskRegistered, None, &task_id, None, &data)?;
    ctx.nodes().insert_task(&NewTask {
        task_id: &task_id,
        goal,
        context,
        nodes: &nodes,
        seq,
        at_ms: ctx.now_ms,
    })?;
    for (node, delay) in nodes.iter().zip(&delays) {
        if let Some(ms) = delay {
            let deadline = ctx.mono_now + Duration::from_millis(*ms);
            ctx.memory
                .tasks
                .hold(task_id.clone(), node.node_id.clone(), deadline);
        }
    }
    let node_ids = nodes.into_iter().map(|n| n.node_id).collect();
    serve_waiters(ctx)?;
    Ok(RegisterTaskResult {
        task_id,
        node_ids,
        event_seq: seq as u64,
    })
}

fn grant(
    ctx: &mut WriteCtx<'_>,
    node: &RunnableNode,
    request: &NodeRequest,
) -> Result<AcquiredNode> {
    let (task_id, node_id) = (node.task_id.as_str(), node.node_id.as_str());
    let lease_id = crate::methods::new_id();
    let expires_at = ctx.now_ms + request.ttl_ms as i64;
    let Some(started) = ctx.nodes().node_to_start(task_id, node_id)? else {
        return Err(Error::Internal(format!(
            "runnable node {task_id}/{node_id} vanished while being handed out"
        )));
    };
    // Every start is one more attempt (RetryNode alone counts them from zero again).
    let attempt = started.attempts + 1;
    ctx.nodes().start_node(
        task_id,
        node_id,
        &NodeLeaseGrant {
            attempts: attempt,
            lease_id: &lease_id,
            owner: &request.owner,
            token_id: request.token_id.as_deref(),
            session_id: request.session.as_ref().map(|s| s.lease_id.as_str()),
            expires_at,
            at_ms: ctx.now_ms,
        },
    )?;
    // The lease id is the worker's secret: the event says who holds the node, never the id.
    // (A timestamp needs no escaping.)
    let data = format!(
        "{{\"attempt\":{attempt},\"lease_expires_at\":\"{}\"}}",
        format_ms(expires_at)
    );
    event(
        ctx,
        EventType::NodeAcquired,
        Some(&request.owner),
        task_id,
        Some(node_id),
        &data,
    )?;
    ctx.memory.tasks.track(
        (task_id.to_string(), node_id.to_string()),
        lease_id.clone(),
        ctx.mono_now + Duration::from_millis(request.ttl_ms),
    );
    let mut dependency_results = BTreeMap::new();
    for dep in dependencies(&started.dependencies)? {
        let result = ctx.nodes().node_result(task_id, &dep)?;
        dependency_results.insert(
            dep,
            RawValue::from_string(result.unwrap_or_else(|| "null".into()))?,
        );
    }
    Ok(AcquiredNode {
        task_id: task_id.to_string(),
        node_id: node_id.to_string(),
        name: started.name,
        lease_id,
        lease_owner: request.owner.clone(),
        lease_expires_at: format_ms(expires_at),
        attempt,
        max_attempts: started.max_attempts,
        payload: raw(started.payload)?,
        context: NodeContext {
            goal: started.goal,
            task_context: raw(started.task_context)?,
            dependency_results,
            recent_events: ctx.memory.tasks.recent_events(
                ctx.journal(),
                task_id,
                request.event_limit,
            )?,
        },
    })
}

/// Hands out the oldest runnable node now, or answers null, or (with `wait_ms`) queues the
/// worker first come first served.
pub fn acquire_next(
    ctx: &mut WriteCtx<'_>,
    mut request: NodeRequest,
    wait_ms: u64,
) -> Result<Served<Option<AcquiredNode>>> {
    if let Some(presented) = &request.session {
        // An empty owner was not given: the session's name is.
        let given = Some(request.owner.as_str()).filter(|o| !o.is_empty());
        request.owner =
            super::super::agents::rules::session_name(ctx, presented, "lease_owner", given)?;
    }
    // An unknown task is refused before anything is written. Serving waiters writes, so
    // the task is looked up first when there are any; otherwise a runnable node of the
    // task shows that it exists, and only a worker not served at once needs the look.
    let known_task = |ctx: &WriteCtx<'_>| match &request.task_id {
        Some(task_id) if ctx.nodes().task_status(task_id)?.is_none() => Err(no_task(task_id)),
        _ => Ok(()),
    };
    // Workers already waiting go first.
    let waiters = ctx.memory.tasks.waiting() > 0;
    if waiters {
        known_task(ctx)?;
        serve_waiters(ctx)?;
    }
    // Whatever is still runnable now, no earlier waiter can take.
    let filter = request.task_id.as_deref();
    if let Some(node) = next_runnable(ctx.nodes(), filter, &request.label_keys)? {
        return grant(ctx, &node, &request).map(|n| Served::Now(Some(n)));
    }
    if !waiters {
        known_task(ctx)?;
    }
    if wait_ms == 0 {
        return Ok(Served::Now(None));
    }
    // A task with nothing runnable and nothing running will never offer a node again
    // (every PENDING node waits on a FAILED or CANCELLED ancestor): waiting on it would only
    // hold the worker for wait_ms.
    if let Some(task_id) = &request.task_id {
        if !ctx.nodes().has_running(task_id)? {
            return Ok(Served::Now(None));
        }
    }
    let Some(reply) = ctx.take_reply() else {
        return Err(Error::Internal(
            "a waiting AcquireNextNode had no reply channel".into(),
        ));
    };
    let deadline = ctx.mono_now + Duration::from_millis(wait_ms);
    ctx.memory.tasks.wait(deadline, Waiter { request, reply });
    Ok(Served::Later)
}

/// A connection closed: its waits for nodes leave their queue (its node leases run on to
/// their deadlines, as a worker's that lost its connection would).
pub fn connection_closed(ctx: &mut WriteCtx<'_>, connection: u64) -> Result<()> {
    ctx.memory.tasks.connection_closed(connection);
    Ok(())
}

/// Hands runnable nodes to waiting workers, first come first served (each to the first
/// waiter whose labels allow it); a worker waiting on a task that can offer nothing more
/// gets null at once.
pub fn serve_waiters(ctx: &mut WriteCtx<'_>) -> Result<()> {
    let mut i = 0;
    while let Some(waiter) = ctx.memory.tasks.waiter(i) {
        if waiter.reply.is_closed() {
            ctx.memory.tasks.take_waiter(i);
            continue;
        }
        let filter = waiter.request.task_id.clone();
        let found = next_runnable(ctx.nodes(), filter.as_deref(), &waiter.request.label_keys)?;
        match found {
            Some(node) => {
                let waiter = ctx.memory.tasks.take_waiter(i).expect("index in range");
                let answer = grant(ctx, &node, &waiter.request).and_then(|n| reply(&Some(n)));
                ctx.deferred.push((waiter.reply, answer));
            }
            None => match filter {
                // Nothing for this worker; a later one may have other labels.
                None => i += 1,
                Some(task_id) if !ctx.nodes().has_running(&task_id)? => {
                    let waiter = ctx.memory.tasks.take_waiter(i).expect("index in range");
                    ctx.deferred
                        .push((waiter.reply, reply(&None::<AcquiredNode>)));
                }
                Some(_) => i += 1,
            },
        }
    }
    Ok(())
}

/// The node, if `presented` is its live lease (its id, with the token that obtained it);
/// else 404 (no such node) or 410.
fn own_node(
    ctx: &WriteCtx<'_>,
    task_id: &str,
    node_id: &str,
    presented: &Presented,
) -> Result<NodeRow> {
    let Some(node) = ctx.nodes().node(task_id, node_id)? else {
        return Err(missing(ctx.nodes(), task_id, node_id)?);
    };
    if node.state == NodeState::Running
        && node.lease_id.as_deref() == Some(presented.lease_id.as_str())
        && node.lease_token_id == presented.token_id
    {
        return Ok(node);
    }
    let mut data = serde_json::Map::new();
    data.insert("task_id".into(), task_id.into());
    data.insert("node_id".into(), node_id.into());
    data.insert("state".into(), node.state.as_str().into());
    if node.state == NodeState::Running {
        data.insert("lease_owner".into(), node.lease_owner.clone().into());
    }
    let next = match node.state {
        NodeState::Pending => "it is PENDING under no lease (never handed out, or rolled back after its lease lapsed); take it with AcquireNextNode",
        NodeState::Running => "another worker holds it now; drop this work",
        NodeState::Completed => "it is already COMPLETED; nothing more to do",
        NodeState::Cancelled => "its task was cancelled; stop working on it",
        NodeState::Failed => "it has FAILED; stop working on it",
    };
    Err(Error::LeaseInvalid {
        // Never echo the id: messages end up in logs and agents' transcripts.
        message: format!("the lease given for node {node_id} is not its live lease: {next}"),
        data,
    })
}

pub fn heartbeat(
    ctx: &mut WriteCtx<'_>,
    task_id: &str,
    node_id: &str,
    presented: &Presented,
    ttl_ms: u64,
) -> Result<HeartbeatNodeResult> {
    own_node(ctx, task_id, node_id, presented)?;
    let expires_at = ctx.now_ms + ttl_ms as i64;
    ctx.nodes()
        .extend_node_lease(task_id, node_id, expires_at)?;
    ctx.memory.tasks.track(
        (task_id.to_string(), node_id.to_string()),
        presented.lease_id.clone(),
        ctx.mono_now + Duration::from_millis(ttl_ms),
    );
    Ok(HeartbeatNodeResult {
        lease_expires_at: format_ms(expires_at),
        remaining_ms: ttl_ms,
    })
}

pub(super) fn set_task_status(
    ctx: &mut WriteCtx<'_>,
    task_id: &str,
    status: TaskStatus,
) -> Result<()> {
    ctx.nodes().set_task_status(task_id, status, ctx.now_ms)?;
    let data = serde_json::json!({"status": status}).to_string();
    event(
        ctx,
        EventType::task_status(status),
        None,
        task_id,
        None,
        &data,
    )?;
    ctx.memory.tasks.task_finished(task_id);
    Ok(())
}

/// A result that does not match its node's result_schema is refused (400, naming where),
/// before anything is written: the node stays RUNNING under the same lease.
fn check_result(node: &NodeRow, result: &str) -> Result<()> {
    let Some(schema) = &node.result_schema else {
        return Ok(());
    };
    let schema: serde_json::Value = serde_json::from_str(schema)?;
    let result: serde_json::Value = serde_json::from_str(result)?;
    let validator = jsonschema::validator_for(&schema)
        .map_err(|e| Error::Internal(format!("a stored result_schema does not compile: {e}")))?;
    let Some(err) = validator.iter_errors(&result).next() else {
        return Ok(());
    };
    let pointer = err.instance_path().to_string();
    let at = if pointer.is_empty() {
        "the result".to_string()
    } else {
        format!("result at {pointer}")
    };
    Err(Error::Invalid(format!(
        "{at} does not match the node's result_schema ({err}); fix it and call CompleteNode again: the node stays RUNNING under your lease"
    )))
}

/// The node's work is done: its result is kept, its dependents may become runnable, and
/// the task completes with its last node.
pub fn complete(
    ctx: &mut WriteCtx<'_>,
    task_id: &str,
    node_id: &str,
    presented: &Presented,
    result: Option<&str>,
) -> Result<EventSeqResult> {
    let node = own_node(ctx, task_id, node_id, presented)?;
    let result = result.unwrap_or("null");
    check_result(&node, result)?;
    ctx.nodes().change_node(
        task_id,
        node_id,
        &NodeChange {
            state: NodeState::Completed,
            result: Some(result),
            error: None,
            runnable_since: None,
            ready_at: None,
            at_ms: ctx.now_ms,
        },
    )?;
    ctx.memory.tasks.forget(task_id, node_id);
    let data = format!("{{\"attempt\":{},\"result\":{result}}}", node.attempts);
    let seq = event(
        ctx,
        EventType::NodeCompleted,
        node.lease_owner.as_deref(),
        task_id,
        Some(node_id),
        &data,
    )?;
    // Dependents with no other unfinished dependency become runnable now.
    ctx.nodes().release_dependents(task_id, node_id, seq)?;
    let last = ctx.nodes().finish_one(task_id)?;
    if last && ctx.nodes().task_status(task_id)? == Some(TaskStatus::Running) {
        set_task_status(ctx, task_id, TaskStatus::Completed)?;
    }
    serve_waiters(ctx)?;
    Ok(EventSeqResult {
        event_seq: seq as u64,
    })
}

/// The node failed: back to PENDING while attempts remain and a retry is asked for, else
/// FAILED, which fails its task.
pub fn fail(
    ctx: &mut WriteCtx<'_>,
    task_id: &str,
    node_id: &str,
    presented: &Presented,
    error: &str,
    retry: bool,
    retry_delay_ms: u64,
) -> Result<FailNodeResult> {
    let node = own_node(ctx, task_id, node_id, presented)?;
    let again = retry && node.attempts < node.max_attempts;
    let held = again && retry_delay_ms > 0;
    let state = if again {
        NodeState::Pending
    } else {
        NodeState::Failed
    };
    let data = format!(
        "{{\"attempt\":{},\"max_attempts\":{},\"retry\":{},\"status\":\"{}\",\"error\":{error}}}",
        node.attempts,
        node.max_attempts,
        retry,
        state.as_str()
    );
    let seq = event(
        ctx,
        EventType::NodeFailed,
        node.lease_owner.as_deref(),
        task_id,
        Some(node_id),
        &data,
    )?;
    ctx.nodes().change_node(
        task_id,
        node_id,
        &NodeChange {
            state,
            result: None,
            error: Some(error),
            runnable_since: Some(seq),
            ready_at: held.then_some(ctx.now_ms + retry_delay_ms as i64),
            at_ms: ctx.now_ms,
        },
    )?;
    ctx.memory.tasks.forget(task_id, node_id);
    if held {
        let deadline = ctx.mono_now + Duration::from_millis(retry_delay_ms);
        ctx.memory
            .tasks
            .hold(task_id.to_string(), node_id.to_string(), deadline);
    }
    if !again && ctx.nodes().task_status(task_id)? == Some(TaskStatus::Running) {
        set_task_status(ctx, task_id, TaskStatus::Failed)?;
        // A failed task hands out nothing more: its nodes not yet started never will be
        // (those running may still finish and keep their results).
        ctx.nodes().move_nodes(
            task_id,
            &NodesMove {
                from: &[NodeState::Pending],
                to: NodeState::Cancelled,
                runnable_since: None,
                at_ms: ctx.now_ms,
            },
        )?;
    }
    serve_waiters(ctx)?;
    Ok(FailNodeResult {
        status: state,
        attempts: node.attempts,
        max_attempts: node.max_attempts,
        event_seq: seq as u64,
    })
}

pub fn commit_event(
    ctx: &mut WriteCtx<'_>,
    task_id: &str,
    node_id: &str,
    presented: Option<&Presented>,
    action_type: &str,
    payload: &str,
) -> Result<EventSeqResult> {
    let Some(node) = ctx.nodes().node(task_id, node_id)? else {
        return Err(missing(ctx.nodes(), task_id, node_id)?);
    };
    // A lease id that is given must be the node's live one, whatever the node's state: a
    // stale, rolled-back, completed or made-up lease appends nothing (410).
    let actor = match presented {
        Some(presented) => own_node(ctx, task_id, node_id, presented)?.lease_owner,
        None if node.state == NodeState::Running => {
            return Err(Error::invalid_params(
                "lease_id",
                "the node is RUNNING: CommitEvent needs the lease_id of its holder",
            ))
        }
        None => None,
    };
    // Checked when the request was planned: a client's type, never one of the daemon's.
    let kind = EventType::from_client(action_type).map_err(Error::Invalid)?;
    let seq = event(ctx, kind, actor.as_deref(), task_id, Some(node_id), payload)?;
    Ok(EventSeqResult {
        event_seq: seq as u64,
    })
}

/// Every PENDING or RUNNING node becomes CANCELLED (their leases stop working); a running
/// or failed task becomes cancelled.
pub fn cancel(ctx: &mut WriteCtx<'_>, task_id: &str) -> Result<CancelTaskResult> {
    let Some(status) = ctx.nodes().task_status(task_id)? else {
        return Err(no_task(task_id));
    };
    for node_id in ctx.nodes().running_nodes(task_id)? {
        ctx.memory.tasks.forget(task_id, &node_id);
    }
    let cancelled = ctx.nodes().move_nodes(
        task_id,
        &NodesMove {
            from: &[NodeState::Pending, NodeState::Running],
            to: NodeState::Cancelled,
            runnable_since: None,
            at_ms: ctx.now_ms,
        },
    )?;
    let status = match status {
        TaskStatus::Running | TaskStatus::Failed => {
            set_task_status(ctx, task_id, TaskStatus::Cancelled)?;
            TaskStatus::Cancelled
        }
        other => other,
    };
    serve_waiters(ctx)?;
    Ok(CancelTaskResult {
        task_id: task_id.to_string(),
        status,
        cancelled_nodes: cancelled,
    })
}

/// Rolls a node whose lease lapsed back to PENDING.
fn roll_back(ctx: &mut WriteCtx<'_>, task_id: &str, node_id: &str, note: &str) -> Result<()> {
    let Some(node) = ctx.nodes().node(task_id, node_id)? else {
        return Ok(());
    };
    let data = serde_json::json!({
        "attempt": node.attempts, "reason": note,
    })
    .to_string();
    let seq = event(
        ctx,
        EventType::NodeRolledBack,
        node.lease_owner.as_deref(),
        task_id,
        Some(node_id),
        &data,
    )?;
    ctx.nodes().change_node(
        task_id,
        node_id,
        &NodeChange {
            state: NodeState::Pending,
            result: None,
            error: None,
            runnable_since: Some(seq),
            ready_at: None,
            at_ms: ctx.now_ms,
        },
    )?;
    ctx.memory.tasks.forget(task_id, node_id);
    Ok(())
}

/// A session ended: the nodes leased with it roll back to PENDING.
pub(crate) fn roll_back_session_nodes(ctx: &mut WriteCtx<'_>, session_id: &str) -> Result<()> {
    let nodes = ctx.nodes().nodes_of_session(session_id)?;
    if nodes.is_empty() {
        return Ok(());
    }
    for (task_id, node_id) in nodes {
        roll_back(ctx, &task_id, &node_id, "the worker's session ended")?;
    }
    serve_waiters(ctx)
}

/// Rolls back lapsed leases, releases held nodes whose time came, and answers waits that
/// ran out (with null).
pub fn expire_due(ctx: &mut WriteCtx<'_>) -> Result<()> {
    let mut rolled = false;
    while let Some(due) = ctx.memory.tasks.pop_due(ctx.mono_now) {
        match due {
            Due::Lease((Timer::Lease, task_id, node_id)) => {
                roll_back(
                    ctx,
                    &task_id,
                    &node_id,
                    "the lease expired without a heartbeat",
                )?;
                rolled = true;
            }
            Due::Lease((Timer::Hold, task_id, node_id)) => {
                let since = ctx.head_revision();
                rolled |= ctx.nodes().release_hold(&task_id, &node_id, since)?;
            }
            Due::Wait(waiter) => {
                ctx.deferred
                    .push((waiter.reply, reply(&None::<AcquiredNode>)));
            }
        }
    }
    if rolled {
        serve_waiters(ctx)?;
    }
    ctx.memory.tasks.compact();
    Ok(())
}

/// At start-up: nodes whose lease lapsed while the daemon was down roll back; the rest are
/// tracked for their remaining time.
pub fn recover(ctx: &mut WriteCtx<'_>) -> Result<()> {
    for lease in ctx.nodes().node_leases()? {
        if lease.expires_at <= ctx.now_ms {
            roll_back(
                ctx,
                &lease.task_id,
                &lease.node_id,
                "the lease expired while batond was stopped",
            )?;
        } else {
            let remaining = Duration::from_millis((lease.expires_at - ctx.now_ms) as u64);
            let deadline = ctx.mono_now + remaining;
            ctx.memory
                .tasks
                .track((lease.task_id, lease.node_id), lease.lease_id, deadline);
        }
    }
    let since = ctx.head_revision();
    for (task_id, node_id, ready_at) in ctx.nodes().held_nodes()? {
        if ready_at <= ctx.now_ms {
            ctx.nodes().release_hold(&task_id, &node_id, since)?;
        } else {
            let remaining = Duration::from_millis((ready_at - ctx.now_ms) as u64);
            ctx.memory
                .tasks
                .hold(task_id, node_id, ctx.mono_now + remaining);
        }
    }
    Ok(())
}
