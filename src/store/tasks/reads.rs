//! Reads of tasks: TaskStatus, ListTasks and the counts Metrics shows.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension};

use crate::clock::format_ms;
use crate::error::Result;
use crate::protocol::tasks::{ListTasksResult, NodeSummary, TaskStatusResult, TaskSummary};

use super::{no_task, raw};

fn summary(r: &rusqlite::Row<'_>) -> rusqlite::Result<TaskSummary> {
    Ok(TaskSummary {
        task_id: r.get(0)?,
        goal: r.get(1)?,
        status: r.get(2)?,
        created_at: format_ms(r.get(3)?),
        updated_at: format_ms(r.get(4)?),
    })
}

pub fn status(conn: &Connection, task_id: &str) -> Result<TaskStatusResult> {
    let task = conn
        .prepare_cached(
            "SELECT task_id, goal, status, created_at, updated_at FROM tasks WHERE task_id = ?1",
        )?
        .query_row([task_id], summary)
        .optional()?
        .ok_or_else(|| no_task(task_id))?;
    let mut counts: BTreeMap<String, u64> =
        ["PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"]
            .iter()
            .map(|s| (s.to_string(), 0))
            .collect();
    let mut stmt = conn.prepare_cached(
        "SELECT node_id, name, state, dependencies, attempts, max_attempts, lease_owner,
                lease_expires_at, result, error, updated_at
         FROM nodes WHERE task_id = ?1 ORDER BY position",
    )?;
    let mut rows = stmt.query([task_id])?;
    let mut nodes = Vec::new();
    while let Some(r) = rows.next()? {
        let state: String = r.get(2)?;
        *counts.entry(state.clone()).or_default() += 1;
        let dependencies: String = r.get(3)?;
        nodes.push(NodeSummary {
            node_id: r.get(0)?,
            name: r.get(1)?,
            state,
            dependencies: serde_json::from_str(&dependencies)?,
            attempts: r.get(4)?,
            max_attempts: r.get(5)?,
            lease_owner: r.get(6)?,
            lease_expires_at: r.get::<_, Option<i64>>(7)?.map(format_ms),
            result: raw(r.get(8)?)?,
            error: raw(r.get(9)?)?,
            updated_at: format_ms(r.get(10)?),
        });
    }
    Ok(TaskStatusResult {
        task,
        counts,
        nodes,
    })
}

pub fn list(conn: &Connection, status: Option<&str>, limit: u64) -> Result<ListTasksResult> {
    let mut stmt = conn.prepare_cached(
        "SELECT task_id, goal, status, created_at, updated_at FROM tasks
         WHERE (?1 IS NULL OR status = ?1) ORDER BY created_seq DESC LIMIT ?2 + 0",
    )?;
    let tasks = stmt
        .query_map(params![status, limit], summary)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(ListTasksResult { tasks })
}

/// Tasks and nodes by state, for Metrics.
pub fn counts(conn: &Connection) -> Result<(BTreeMap<String, u64>, BTreeMap<String, u64>)> {
    let mut tasks = BTreeMap::new();
    for row in conn
        .prepare_cached("SELECT status, COUNT(*) FROM tasks GROUP BY status")?
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?)))?
    {
        let (k, v) = row?;
        tasks.insert(k, v);
    }
    let mut nodes = BTreeMap::new();
    for row in conn
        .prepare_cached("SELECT state, COUNT(*) FROM nodes GROUP BY state")?
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?)))?
    {
        let (k, v) = row?;
        nodes.insert(k, v);
    }
    Ok((tasks, nodes))
}
