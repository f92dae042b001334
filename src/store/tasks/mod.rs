//! Tasks and their nodes, served on the writer. SQLite holds the graph, states, leases
//! and results; the writer's memory holds each node lease's monotonic deadline and the FIFO
//! queue of workers waiting in AcquireNextNode.
//!
//! A node is runnable when PENDING with `remaining_deps = 0`; the partial index
//! `nodes_runnable` lists exactly those in the order they became runnable.

use std::collections::BTreeMap;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::value::RawValue;

use crate::clock::format_ms;
use crate::error::{Error, Result};
use crate::protocol::reply;
use crate::protocol::tasks::{
    AcquiredNode, CancelTaskResult, EventSeqResult, FailNodeResult, HeartbeatNodeResult,
    NodeContext, RegisterTaskResult,
};

use super::journal::{self, NewEvent};
use super::schedule::Due;
use super::writer::WriteCtx;

mod memory;
mod reads;

pub use memory::TaskState;
use memory::Waiter;
pub use reads::{counts, list, status};

/// A node to insert, already validated.
pub struct NewNode {
    pub node_id: String,
    pub name: Option<String>,
    pub payload: Option<String>,
    pub dependencies: Vec<String>,
    pub max_attempts: u32,
}

/// An AcquireNextNode request, as the writer needs it.
pub struct NodeRequest {
    pub task_id: Option<String>,
    pub owner: String,
    pub ttl_ms: u64,
    pub connection: u64,
    pub event_limit: u64,
}

pub(super) fn no_task(task_id: &str) -> Error {
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
fn missing(conn: &Connection, task_id: &str, node_id: &str) -> Result<Error> {
    Ok(if task_exists(conn, task_id)? {
        no_node(task_id, node_id)
    } else {
        no_task(task_id)
    })
}

pub(super) fn raw(text: Option<String>) -> Result<Option<Box<RawValue>>> {
    Ok(match text {
        Some(t) => Some(RawValue::from_string(t)?),
        None => None,
    })
}

fn event(
    ctx: &mut WriteCtx<'_>,
    kind: &str,
    actor: Option<&str>,
    task_id: &str,
    node_id: Option<&str>,
    data: &str,
) -> Result<i64> {
    let seq = ctx.next_revision();
    let event = NewEvent {
        kind,
        actor,
        task_id: Some(task_id),
        node_id,
        data,
        ..NewEvent::default()
    };
    journal::append(ctx, seq, &event)?;
    if ctx.tasks.keeps_recent(task_id) {
        let serialized = journal::appended(ctx, seq, &event)?;
        ctx.tasks.note_event(task_id, seq, serialized);
    }
    Ok(seq)
}

pub fn register(
    ctx: &mut WriteCtx<'_>,
    goal: &str,
    context: Option<&str>,
    nodes: Vec<NewNode>,
) -> Result<RegisterTaskResult> {
    let task_id = uuid::Uuid::new_v4().to_string();
    let data = serde_json::json!({"goal": goal, "nodes": nodes.len()}).to_string();
    let seq = event(ctx, "task.registered", None, &task_id, None, &data)?;
    ctx.conn
        .prepare_cached(
            "INSERT INTO tasks (task_id, goal, context, status, created_at, updated_at, created_seq,
                                unfinished_nodes)
             VALUES (?1, ?2, ?3, 'running', ?4, ?4, ?5, ?6)",
        )?
        .execute(params![task_id, goal, context, ctx.now_ms, seq, nodes.len()])?;
    let mut insert = ctx.conn.prepare_cached(
        "INSERT INTO nodes (task_id, node_id, position, name, payload, dependencies, max_attempts,
                            state, remaining_deps, runnable_since, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'PENDING', ?8, ?9, ?10)",
    )?;
    let mut edge = ctx.conn.prepare_cached(
        "INSERT INTO node_dependents (task_id, node_id, dependent_id) VALUES (?1, ?2, ?3)",
    )?;
    let mut node_ids = Vec::with_capacity(nodes.len());
    for (position, node) in nodes.iter().enumerate() {
        insert.execute(params![
            task_id,
            node.node_id,
            position as i64,
            node.name,
            node.payload,
            serde_json::to_string(&node.dependencies)?,
            node.max_attempts,
            node.dependencies.len() as i64,
            seq,
            ctx.now_ms
        ])?;
        for dep in &node.dependencies {
            edge.execute(params![task_id, dep, node.node_id])?;
        }
        node_ids.push(node.node_id.clone());
    }
    drop(insert);
    drop(edge);
    serve_waiters(ctx)?;
    Ok(RegisterTaskResult {
        task_id,
        node_ids,
        event_seq: seq as u64,
    })
}

fn task_exists(conn: &Connection, task_id: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM tasks WHERE task_id = ?1")?
        .query_row([task_id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// The oldest runnable node, of one task or any.
fn runnable(conn: &Connection, task_id: Option<&str>) -> Result<Option<(String, String)>> {
    let found = match task_id {
        Some(t) => conn
            .prepare_cached(
                "SELECT task_id, node_id FROM nodes INDEXED BY nodes_runnable_by_task
                 WHERE task_id = ?1 AND state = 'PENDING' AND remaining_deps = 0
                 ORDER BY runnable_since, node_id LIMIT 1",
            )?
            .query_row([t], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?,
        None => conn
            .prepare_cached(
                "SELECT task_id, node_id FROM nodes INDEXED BY nodes_runnable
                 WHERE state = 'PENDING' AND remaining_deps = 0
                 ORDER BY runnable_since, task_id, node_id LIMIT 1",
            )?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?,
    };
    Ok(found)
}

fn grant(
    ctx: &mut WriteCtx<'_>,
    task_id: &str,
    node_id: &str,
    request: &NodeRequest,
) -> Result<AcquiredNode> {
    let lease_id = uuid::Uuid::new_v4().to_string();
    let expires_at = ctx.now_ms + request.ttl_ms as i64;
    let (name, payload, dependencies, attempts, max_attempts): (
        Option<String>,
        Option<String>,
        String,
        u32,
        u32,
    ) = ctx
        .conn
        .prepare_cached(
            "UPDATE nodes SET state = 'RUNNING', attempts = attempts + 1, lease_id = ?3,
                    lease_owner = ?4, lease_expires_at = ?5, updated_at = ?6
             WHERE task_id = ?1 AND node_id = ?2
             RETURNING name, payload, dependencies, attempts, max_attempts",
        )?
        .query_row(
            params![
                task_id,
                node_id,
                lease_id,
                request.owner,
                expires_at,
                ctx.now_ms
            ],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )?;
    // The lease id is the worker's secret: the event says who holds the node, never the id.
    let data = serde_json::json!({"attempt": attempts, "lease_expires_at": format_ms(expires_at)})
        .to_string();
    event(
        ctx,
        "node.acquired",
        Some(&request.owner),
        task_id,
        Some(node_id),
        &data,
    )?;
    ctx.tasks.track(
        (task_id.to_string(), node_id.to_string()),
        lease_id.clone(),
        ctx.mono_now + Duration::from_millis(request.ttl_ms),
    );
    let (goal, task_context): (String, Option<String>) = ctx
        .conn
        .prepare_cached("SELECT goal, context FROM tasks WHERE task_id = ?1")?
        .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let dependencies: Vec<String> = serde_json::from_str(&dependencies)?;
    let mut dependency_results = BTreeMap::new();
    let mut result_of = ctx
        .conn
        .prepare_cached("SELECT result FROM nodes WHERE task_id = ?1 AND node_id = ?2")?;
    for dep in dependencies {
        let result: Option<String> = result_of.query_row(params![task_id, dep], |r| r.get(0))?;
        dependency_results.insert(
            dep,
            RawValue::from_string(result.unwrap_or_else(|| "null".into()))?,
        );
    }
    drop(result_of);
    Ok(AcquiredNode {
        task_id: task_id.to_string(),
        node_id: node_id.to_string(),
        name,
        lease_id,
        lease_owner: request.owner.clone(),
        lease_expires_at: format_ms(expires_at),
        attempt: attempts,
        max_attempts,
        payload: raw(payload)?,
        context: NodeContext {
            goal,
            task_context: raw(task_context)?,
            dependency_results,
            recent_events: ctx
                .tasks
                .recent_events(ctx.conn, task_id, request.event_limit)?,
        },
    })
}

pub fn acquire_next(
    ctx: &mut WriteCtx<'_>,
    request: NodeRequest,
    wait_ms: u64,
) -> Result<Option<Option<AcquiredNode>>> {
    if let Some(task_id) = &request.task_id {
        if !task_exists(ctx.conn, task_id)? {
            return Err(no_task(task_id));
        }
    }
    // Workers already waiting go first.
    if ctx.tasks.waiting() > 0 {
        serve_waiters(ctx)?;
    }
    let queued_ahead = ctx
        .tasks
        .waiters()
        .any(|w| w.request.task_id.is_none() || w.request.task_id == request.task_id);
    if !queued_ahead {
        if let Some((task_id, node_id)) = runnable(ctx.conn, request.task_id.as_deref())? {
            return grant(ctx, &task_id, &node_id, &request).map(|n| Some(Some(n)));
        }
    }
    if wait_ms == 0 {
        return Ok(Some(None));
    }
    // A task with nothing runnable and nothing running will never offer a node again:
    // waiting on it would only hold the worker for wait_ms.
    if let Some(task_id) = &request.task_id {
        if !has_running(ctx.conn, task_id)? {
            return Ok(Some(None));
        }
    }
    let Some(reply) = ctx.take_reply() else {
        return Err(Error::Internal(
            "a waiting AcquireNextNode had no reply channel".into(),
        ));
    };
    let deadline = ctx.mono_now + Duration::from_millis(wait_ms);
    ctx.tasks.wait(deadline, Waiter { request, reply });
    Ok(None)
}

/// Whether a node of the task is RUNNING: its outcome may still make other nodes runnable.
/// With none running and none runnable, nothing of the task can ever be handed out again
/// (every PENDING node waits on a FAILED or CANCELLED ancestor).
fn has_running(conn: &Connection, task_id: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT 1 FROM nodes INDEXED BY nodes_running WHERE task_id = ?1 AND state = 'RUNNING'",
        )?
        .query_row([task_id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Hands runnable nodes to waiting workers, first come first served; a worker waiting on
/// a task that can offer nothing more gets null at once.
fn serve_waiters(ctx: &mut WriteCtx<'_>) -> Result<()> {
    let mut i = 0;
    while let Some(waiter) = ctx.tasks.waiter(i) {
        if waiter.reply.is_closed() {
            ctx.tasks.take_waiter(i);
            continue;
        }
        let filter = waiter.request.task_id.clone();
        match runnable(ctx.conn, filter.as_deref())? {
            Some((task_id, node_id)) => {
                let waiter = ctx.tasks.take_waiter(i).expect("index in range");
                let answer =
                    grant(ctx, &task_id, &node_id, &waiter.request).and_then(|n| reply(&Some(n)));
                ctx.deferred.push((waiter.reply, answer));
            }
            None => match filter {
                None => break, // nothing runnable anywhere
                Some(task_id) if !has_running(ctx.conn, &task_id)? => {
                    let waiter = ctx.tasks.take_waiter(i).expect("index in range");
                    ctx.deferred
                        .push((waiter.reply, reply(&None::<AcquiredNode>)));
                }
                Some(_) => i += 1,
            },
        }
    }
    Ok(())
}

struct Running {
    state: String,
    lease_id: Option<String>,
    lease_owner: Option<String>,
    attempts: u32,
    max_attempts: u32,
}

fn node_row(conn: &Connection, task_id: &str, node_id: &str) -> Result<Option<Running>> {
    Ok(conn
        .prepare_cached(
            "SELECT state, lease_id, lease_owner, attempts, max_attempts FROM nodes
             WHERE task_id = ?1 AND node_id = ?2",
        )?
        .query_row(params![task_id, node_id], |r| {
            Ok(Running {
                state: r.get(0)?,
                lease_id: r.get(1)?,
                lease_owner: r.get(2)?,
                attempts: r.get(3)?,
                max_attempts: r.get(4)?,
            })
        })
        .optional()?)
}

/// The node, if `lease_id` is its live lease; else 404 (no such node) or 410.
fn own_node(ctx: &WriteCtx<'_>, task_id: &str, node_id: &str, lease_id: &str) -> Result<Running> {
    let Some(node) = node_row(ctx.conn, task_id, node_id)? else {
        return Err(missing(ctx.conn, task_id, node_id)?);
    };
    if node.state == "RUNNING" && node.lease_id.as_deref() == Some(lease_id) {
        return Ok(node);
    }
    let mut data = serde_json::Map::new();
    data.insert("task_id".into(), task_id.into());
    data.insert("node_id".into(), node_id.into());
    data.insert("state".into(), node.state.clone().into());
    if node.state == "RUNNING" {
        data.insert("lease_owner".into(), node.lease_owner.clone().into());
    }
    let next = match node.state.as_str() {
        "PENDING" => "it is PENDING under no lease (never handed out, or rolled back after its lease lapsed); take it with AcquireNextNode",
        "RUNNING" => "another worker holds it now; drop this work",
        "COMPLETED" => "it is already COMPLETED; nothing more to do",
        "CANCELLED" => "its task was cancelled; stop working on it",
        _ => "it has FAILED; stop working on it",
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
    lease_id: &str,
    ttl_ms: u64,
) -> Result<HeartbeatNodeResult> {
    own_node(ctx, task_id, node_id, lease_id)?;
    let expires_at = ctx.now_ms + ttl_ms as i64;
    ctx.conn
        .prepare_cached(
            "UPDATE nodes SET lease_expires_at = ?3 WHERE task_id = ?1 AND node_id = ?2",
        )?
        .execute(params![task_id, node_id, expires_at])?;
    ctx.tasks.track(
        (task_id.to_string(), node_id.to_string()),
        lease_id.to_string(),
        ctx.mono_now + Duration::from_millis(ttl_ms),
    );
    Ok(HeartbeatNodeResult {
        lease_expires_at: format_ms(expires_at),
        remaining_ms: ttl_ms,
    })
}

fn set_task_status(ctx: &mut WriteCtx<'_>, task_id: &str, status: &str) -> Result<()> {
    ctx.conn
        .prepare_cached("UPDATE tasks SET status = ?2, updated_at = ?3 WHERE task_id = ?1")?
        .execute(params![task_id, status, ctx.now_ms])?;
    let data = serde_json::json!({"status": status}).to_string();
    event(ctx, &format!("task.{status}"), None, task_id, None, &data)?;
    ctx.tasks.task_finished(task_id);
    Ok(())
}

fn task_status(conn: &Connection, task_id: &str) -> Result<String> {
    Ok(conn
        .prepare_cached("SELECT status FROM tasks WHERE task_id = ?1")?
        .query_row([task_id], |r| r.get(0))?)
}

pub fn complete(
    ctx: &mut WriteCtx<'_>,
    task_id: &str,
    node_id: &str,
    lease_id: &str,
    result: Option<&str>,
) -> Result<EventSeqResult> {
    let node = own_node(ctx, task_id, node_id, lease_id)?;
    ctx.conn
        .prepare_cached(
            "UPDATE nodes SET state = 'COMPLETED', result = ?3, lease_id = NULL, lease_owner = NULL,
                    lease_expires_at = NULL, updated_at = ?4
             WHERE task_id = ?1 AND node_id = ?2",
        )?
        .execute(params![task_id, node_id, result.unwrap_or("null"), ctx.now_ms])?;
    ctx.tasks.forget(task_id, node_id);
    let data = format!(
        "{{\"attempt\":{},\"result\":{}}}",
        node.attempts,
        result.unwrap_or("null")
    );
    let seq = event(
        ctx,
        "node.completed",
        node.lease_owner.as_deref(),
        task_id,
        Some(node_id),
        &data,
    )?;
    // Dependents with no other unfinished dependency become runnable now.
    ctx.conn
        .prepare_cached(
            "UPDATE nodes SET remaining_deps = remaining_deps - 1, runnable_since = ?3
             WHERE task_id = ?1 AND node_id IN
                   (SELECT dependent_id FROM node_dependents WHERE task_id = ?1 AND node_id = ?2)",
        )?
        .execute(params![task_id, node_id, seq])?;
    let (unfinished, status): (i64, String) = ctx
        .conn
        .prepare_cached(
            "UPDATE tasks SET unfinished_nodes = unfinished_nodes - 1 WHERE task_id = ?1
             RETURNING unfinished_nodes, status",
        )?
        .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if unfinished == 0 && status == "running" {
        set_task_status(ctx, task_id, "completed")?;
    }
    serve_waiters(ctx)?;
    Ok(EventSeqResult {
        event_seq: seq as u64,
    })
}

pub fn fail(
    ctx: &mut WriteCtx<'_>,
    task_id: &str,
    node_id: &str,
    lease_id: &str,
    error: &str,
    retry: bool,
) -> Result<FailNodeResult> {
    let node = own_node(ctx, task_id, node_id, lease_id)?;
    let again = retry && node.attempts < node.max_attempts;
    let state = if again { "PENDING" } else { "FAILED" };
    let data = format!(
        "{{\"attempt\":{},\"max_attempts\":{},\"retry\":{},\"status\":\"{state}\",\"error\":{error}}}",
        node.attempts, node.max_attempts, retry
    );
    let seq = event(
        ctx,
        "node.failed",
        node.lease_owner.as_deref(),
        task_id,
        Some(node_id),
        &data,
    )?;
    ctx.conn
        .prepare_cached(
            "UPDATE nodes SET state = ?3, error = ?4, lease_id = NULL, lease_owner = NULL,
                    lease_expires_at = NULL, runnable_since = ?5, updated_at = ?6
             WHERE task_id = ?1 AND node_id = ?2",
        )?
        .execute(params![task_id, node_id, state, error, seq, ctx.now_ms])?;
    ctx.tasks.forget(task_id, node_id);
    if !again && task_status(ctx.conn, task_id)? == "running" {
        set_task_status(ctx, task_id, "failed")?;
    }
    serve_waiters(ctx)?;
    Ok(FailNodeResult {
        status: state.to_string(),
        attempts: node.attempts,
        max_attempts: node.max_attempts,
        event_seq: seq as u64,
    })
}

pub fn commit_event(
    ctx: &mut WriteCtx<'_>,
    task_id: &str,
    node_id: &str,
    lease_id: Option<&str>,
    action_type: &str,
    payload: &str,
) -> Result<EventSeqResult> {
    let Some(node) = node_row(ctx.conn, task_id, node_id)? else {
        return Err(missing(ctx.conn, task_id, node_id)?);
    };
    // A lease id that is given must be the node's live one, whatever the node's state: a
    // stale, rolled-back, completed or made-up lease appends nothing (410).
    let actor = match lease_id {
        Some(lease_id) => own_node(ctx, task_id, node_id, lease_id)?.lease_owner,
        None if node.state == "RUNNING" => {
            return Err(Error::invalid_params(
                "lease_id",
                "the node is RUNNING: CommitEvent needs the lease_id of its holder",
            ))
        }
        None => None,
    };
    let seq = event(
        ctx,
        action_type,
        actor.as_deref(),
        task_id,
        Some(node_id),
        payload,
    )?;
    Ok(EventSeqResult {
        event_seq: seq as u64,
    })
}

pub fn cancel(ctx: &mut WriteCtx<'_>, task_id: &str) -> Result<CancelTaskResult> {
    let status = match ctx
        .conn
        .prepare_cached("SELECT status FROM tasks WHERE task_id = ?1")?
        .query_row([task_id], |r| r.get::<_, String>(0))
        .optional()?
    {
        Some(s) => s,
        None => return Err(no_task(task_id)),
    };
    let running: Vec<String> = ctx
        .conn
        .prepare_cached("SELECT node_id FROM nodes WHERE task_id = ?1 AND state = 'RUNNING'")?
        .query_map([task_id], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for node_id in &running {
        ctx.tasks.forget(task_id, node_id);
    }
    let cancelled = ctx
        .conn
        .prepare_cached(
            "UPDATE nodes SET state = 'CANCELLED', lease_id = NULL, lease_owner = NULL,
                    lease_expires_at = NULL, updated_at = ?2
             WHERE task_id = ?1 AND state IN ('PENDING', 'RUNNING')",
        )?
        .execute(params![task_id, ctx.now_ms])? as u64;
    if status == "running" || status == "failed" {
        set_task_status(ctx, task_id, "cancelled")?;
    }
    serve_waiters(ctx)?;
    Ok(CancelTaskResult {
        task_id: task_id.to_string(),
        status: task_status(ctx.conn, task_id)?,
        cancelled_nodes: cancelled,
    })
}

/// Rolls a node whose lease lapsed back to PENDING.
fn roll_back(ctx: &mut WriteCtx<'_>, task_id: &str, node_id: &str, note: &str) -> Result<()> {
    let Some(node) = node_row(ctx.conn, task_id, node_id)? else {
        return Ok(());
    };
    let data = serde_json::json!({
        "attempt": node.attempts, "reason": note,
    })
    .to_string();
    let seq = event(
        ctx,
        "node.rolled_back",
        node.lease_owner.as_deref(),
        task_id,
        Some(node_id),
        &data,
    )?;
    ctx.conn
        .prepare_cached(
            "UPDATE nodes SET state = 'PENDING', lease_id = NULL, lease_owner = NULL,
                    lease_expires_at = NULL, runnable_since = ?3, updated_at = ?4
             WHERE task_id = ?1 AND node_id = ?2",
        )?
        .execute(params![task_id, node_id, seq, ctx.now_ms])?;
    ctx.tasks.forget(task_id, node_id);
    Ok(())
}

/// Rolls back lapsed leases and answers waits that ran out (with null).
pub fn expire_due(ctx: &mut WriteCtx<'_>) -> Result<()> {
    let mut rolled = false;
    while let Some(due) = ctx.tasks.pop_due(ctx.mono_now) {
        match due {
            Due::Lease((task_id, node_id)) => {
                roll_back(
                    ctx,
                    &task_id,
                    &node_id,
                    "the lease expired without a heartbeat",
                )?;
                rolled = true;
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
    ctx.tasks.compact();
    Ok(())
}

/// At start-up: nodes whose lease lapsed while the daemon was down roll back; the rest are
/// tracked for their remaining time.
pub fn recover(ctx: &mut WriteCtx<'_>) -> Result<()> {
    let rows: Vec<(String, String, String, i64)> = ctx
        .conn
        .prepare(
            "SELECT task_id, node_id, lease_id, lease_expires_at FROM nodes WHERE state = 'RUNNING'",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (task_id, node_id, lease_id, expires_at) in rows {
        if expires_at <= ctx.now_ms {
            roll_back(
                ctx,
                &task_id,
                &node_id,
                "the lease expired while batond was stopped",
            )?;
        } else {
            let remaining = Duration::from_millis((expires_at - ctx.now_ms) as u64);
            ctx.tasks
                .track((task_id, node_id), lease_id, ctx.mono_now + remaining);
        }
    }
    Ok(())
}
