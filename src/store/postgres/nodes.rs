//! PostgreSQL's side of [`Nodes`]: tasks, nodes and dependency edges (same meaning as
//! SQLite's `store::sqlite::nodes`). A node is runnable when PENDING with `remaining_deps = 0`; the
//! partial indexes `nodes_runnable*` list exactly those.

use std::collections::BTreeMap;

use tokio_postgres::Row;

use crate::error::{Error, Result};
use crate::protocol::tasks::TaskStatus;
use crate::store::boundary::{
    ListedNode, NewTask, NodeChange, NodeLease, NodeLeaseGrant, NodeRetry, NodeRow, NodeToStart,
    Nodes, NodesMove, RunnableNode, TaskRow, TaskRows,
};

use crate::store::rows::{node_state, task_status};

use super::{i, u, Lit, PgConn};

fn task_row(r: &Row) -> Result<TaskRow> {
    Ok(TaskRow {
        task_id: r.get(0),
        goal: r.get(1),
        status: task_status(r.get(2))?,
        created_at: r.get(3),
        updated_at: r.get(4),
    })
}

fn count(value: i64) -> u32 {
    u32::try_from(value.max(0)).unwrap_or(u32::MAX)
}

fn pairs(rows: &[Row]) -> Vec<(String, String)> {
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

impl Nodes for PgConn {
    fn insert_task(&self, task: &NewTask<'_>) -> Result<()> {
        self.touch(super::TASKS).execute(
            "INSERT INTO tasks (task_id, goal, context, status, created_at, updated_at, created_seq,
                                unfinished_nodes)
             VALUES ($1, $2, $3, 'running', $4, $4, $5, $6)",
            &[
                &task.task_id,
                &task.goal,
                &task.context,
                &task.at_ms,
                &task.seq,
                &(task.nodes.len() as i64),
            ],
        )?;
        // Every node in one statement, every edge in another.
        let n = task.nodes;
        let ids: Vec<&str> = n.iter().map(|x| x.node_id.as_str()).collect();
        let positions: Vec<i64> = (0..n.len() as i64).collect();
        let names: Vec<Option<&str>> = n.iter().map(|x| x.name.as_deref()).collect();
        let payloads: Vec<Option<&str>> = n.iter().map(|x| x.payload.as_deref()).collect();
        let deps = n
            .iter()
            .map(|x| serde_json::to_string(&x.dependencies))
            .collect::<serde_json::Result<Vec<String>>>()?;
        let max_attempts: Vec<i64> = n.iter().map(|x| i64::from(x.max_attempts)).collect();
        let remaining: Vec<i64> = n
            .iter()
            .map(|x| x.dependencies.len() as i64 + i64::from(x.ready_at.is_some()))
            .collect();
        let priorities: Vec<i64> = n.iter().map(|x| x.priority).collect();
        let label_keys: Vec<&str> = n.iter().map(|x| x.label_key.as_str()).collect();
        let ready_at: Vec<Option<i64>> = n.iter().map(|x| x.ready_at).collect();
        let schemas: Vec<Option<&str>> = n.iter().map(|x| x.result_schema.as_deref()).collect();
        self.touch(super::TASKS).execute(
            "INSERT INTO nodes (task_id, node_id, position, name, payload, dependencies, max_attempts,
                                state, remaining_deps, runnable_since, updated_at, priority,
                                label_key, ready_at, result_schema)
             SELECT $1, node_id, position, name, payload, dependencies, max_attempts, 'PENDING',
                    remaining, $2, $3, priority, label_key, ready_at, result_schema
             FROM unnest($4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[],
                         $9::bigint[], $10::bigint[], $11::bigint[], $12::text[], $13::bigint[],
                         $14::text[])
                  AS n(node_id, position, name, payload, dependencies, max_attempts, remaining,
                       priority, label_key, ready_at, result_schema)",
            &[
                &task.task_id,
                &task.seq,
                &task.at_ms,
                &ids,
                &positions,
                &names,
                &payloads,
                &deps,
                &max_attempts,
                &remaining,
                &priorities,
                &label_keys,
                &ready_at,
                &schemas,
            ],
        )?;
        let (mut from, mut to) = (Vec::new(), Vec::new());
        for node in n {
            for dep in &node.dependencies {
                from.push(dep.as_str());
                to.push(node.node_id.as_str());
            }
        }
        if !from.is_empty() {
            self.touch(super::TASKS).execute(
                "INSERT INTO node_dependents (task_id, node_id, dependent_id)
                 SELECT $1, node_id, dependent_id FROM unnest($2::text[], $3::text[])
                     AS e(node_id, dependent_id)",
                &[&task.task_id, &from, &to],
            )?;
        }
        Ok(())
    }

    fn task_status(&self, task_id: &str) -> Result<Option<TaskStatus>> {
        let row = self.query_opt("SELECT status FROM tasks WHERE task_id = $1", &[&task_id])?;
        row.map(|r| task_status(r.get(0))).transpose()
    }

    fn set_task_status(&self, task_id: &str, status: TaskStatus, at_ms: i64) -> Result<()> {
        self.touch(super::TASKS).execute(
            "UPDATE tasks SET status = $2, updated_at = $3 WHERE task_id = $1",
            &[&task_id, &status.as_str(), &at_ms],
        )?;
        Ok(())
    }

    fn first_runnable(
        &self,
        task_id: Option<&str>,
        label_key: &str,
    ) -> Result<Option<RunnableNode>> {
        let found = match task_id {
            Some(t) => self.query_opt(
                "SELECT priority, runnable_since, task_id, node_id FROM nodes
                 WHERE task_id = $1 AND label_key = $2 AND state = 'PENDING'
                   AND remaining_deps = 0
                 ORDER BY priority DESC, runnable_since, node_id LIMIT 1",
                &[&t, &label_key],
            )?,
            None => self.query_opt(
                "SELECT priority, runnable_since, task_id, node_id FROM nodes
                 WHERE label_key = $1 AND state = 'PENDING' AND remaining_deps = 0
                 ORDER BY priority DESC, runnable_since, task_id, node_id LIMIT 1",
                &[&label_key],
            )?,
        };
        Ok(found.map(|r| RunnableNode {
            priority: r.get(0),
            runnable_since: r.get(1),
            task_id: r.get(2),
            node_id: r.get(3),
        }))
    }

    fn has_running(&self, task_id: &str) -> Result<bool> {
        Ok(self
            .query_opt(
                "SELECT 1 FROM nodes WHERE task_id = $1
                   AND (state = 'RUNNING' OR (state = 'PENDING' AND ready_at IS NOT NULL))
                 LIMIT 1",
                &[&task_id],
            )?
            .is_some())
    }

    fn release_hold(&self, task_id: &str, node_id: &str, seq: i64) -> Result<bool> {
        let changed = self.touch(super::TASKS).execute(
            "UPDATE nodes SET remaining_deps = remaining_deps - 1, ready_at = NULL,
                    runnable_since = $3
             WHERE task_id = $1 AND node_id = $2 AND ready_at IS NOT NULL AND state = 'PENDING'",
            &[&task_id, &node_id, &seq],
        )?;
        Ok(changed > 0)
    }

    fn held_nodes(&self) -> Result<Vec<(String, String, i64)>> {
        let rows = self.query(
            "SELECT task_id, node_id, ready_at FROM nodes
             WHERE ready_at IS NOT NULL AND state = 'PENDING'",
            &[],
        )?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    fn node(&self, task_id: &str, node_id: &str) -> Result<Option<NodeRow>> {
        self.query_opt(
            "SELECT state, lease_id, lease_owner, attempts, max_attempts, lease_token_id,
                    result_schema
             FROM nodes WHERE task_id = $1 AND node_id = $2",
            &[&task_id, &node_id],
        )?
        .map(|r| {
            Ok(NodeRow {
                state: node_state(r.get(0))?,
                lease_id: r.get(1),
                lease_owner: r.get(2),
                attempts: count(r.get(3)),
                max_attempts: count(r.get(4)),
                lease_token_id: r.get(5),
                result_schema: r.get(6),
            })
        })
        .transpose()
    }

    fn node_to_start(&self, task_id: &str, node_id: &str) -> Result<Option<NodeToStart>> {
        // The task's goal and context in the same round trip (a worker is told them).
        let row = self.query_opt(
            "SELECT n.name, n.payload, n.dependencies, n.attempts, n.max_attempts, t.goal,
                    t.context
             FROM nodes n JOIN tasks t ON t.task_id = n.task_id
             WHERE n.task_id = $1 AND n.node_id = $2",
            &[&task_id, &node_id],
        )?;
        Ok(row.map(|r| NodeToStart {
            name: r.get(0),
            payload: r.get(1),
            dependencies: r.get(2),
            attempts: count(r.get(3)),
            max_attempts: count(r.get(4)),
            goal: r.get(5),
            task_context: r.get(6),
        }))
    }

    fn start_node(&self, task_id: &str, node_id: &str, lease: &NodeLeaseGrant<'_>) -> Result<()> {
        // Deferred: it goes out with the next statement, or the commit.
        self.touch(super::TASKS).defer(format!(
            "UPDATE nodes SET state = 'RUNNING', attempts = {}, lease_id = {}, lease_owner = {},
                    lease_expires_at = {}, updated_at = {}, lease_token_id = {},
                    lease_session_id = {}
             WHERE task_id = {} AND node_id = {}",
            i64::from(lease.attempts),
            lease.lease_id.lit(),
            lease.owner.lit(),
            lease.expires_at,
            lease.at_ms,
            lease.token_id.lit(),
            lease.session_id.lit(),
            task_id.lit(),
            node_id.lit(),
        ));
        Ok(())
    }

    fn node_result(&self, task_id: &str, node_id: &str) -> Result<Option<String>> {
        Ok(self
            .query_one(
                "SELECT result FROM nodes WHERE task_id = $1 AND node_id = $2",
                &[&task_id, &node_id],
            )?
            .get(0))
    }

    fn extend_node_lease(&self, task_id: &str, node_id: &str, expires_at: i64) -> Result<()> {
        self.touch(super::TASKS).execute(
            "UPDATE nodes SET lease_expires_at = $3 WHERE task_id = $1 AND node_id = $2",
            &[&task_id, &node_id, &expires_at],
        )?;
        Ok(())
    }

    fn change_node(&self, task_id: &str, node_id: &str, c: &NodeChange<'_>) -> Result<()> {
        self.touch(super::TASKS).execute(
            "UPDATE nodes SET state = $3, result = COALESCE($4, result), error = COALESCE($5, error),
                    runnable_since = COALESCE($6, runnable_since), lease_id = NULL,
                    lease_token_id = NULL, lease_session_id = NULL, ready_at = $8::bigint,
                    remaining_deps = remaining_deps + CASE WHEN $8::bigint IS NULL THEN 0 ELSE 1 END,
                    lease_owner = NULL, lease_expires_at = NULL, updated_at = $7
             WHERE task_id = $1 AND node_id = $2",
            &[
                &task_id,
                &node_id,
                &c.state.as_str(),
                &c.result,
                &c.error,
                &c.runnable_since,
                &c.at_ms,
                &c.ready_at,
            ],
        )?;
        Ok(())
    }

    fn release_dependents(&self, task_id: &str, node_id: &str, seq: i64) -> Result<()> {
        self.touch(super::TASKS).execute(
            "UPDATE nodes SET remaining_deps = remaining_deps - 1, runnable_since = $3
             WHERE task_id = $1 AND node_id IN
                   (SELECT dependent_id FROM node_dependents WHERE task_id = $1 AND node_id = $2)",
            &[&task_id, &node_id, &seq],
        )?;
        Ok(())
    }

    fn finish_one(&self, task_id: &str) -> Result<bool> {
        let rows = self.touch(super::TASKS).query_write(
            "UPDATE tasks SET unfinished_nodes = unfinished_nodes - 1 WHERE task_id = $1
             RETURNING unfinished_nodes",
            &[&task_id],
        )?;
        let r = rows
            .first()
            .ok_or_else(|| Error::Internal(format!("task {task_id} vanished")))?;
        let left: i64 = r.get(0);
        if left < 0 {
            return Err(Error::Internal(format!(
                "task {task_id} has no unfinished node left to finish"
            )));
        }
        Ok(left == 0)
    }

    fn running_nodes(&self, task_id: &str) -> Result<Vec<String>> {
        let rows = self.query(
            "SELECT node_id FROM nodes WHERE task_id = $1 AND state = 'RUNNING'",
            &[&task_id],
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn move_nodes(&self, task_id: &str, m: &NodesMove<'_>) -> Result<u64> {
        let from: Vec<&str> = m.from.iter().map(|s| s.as_str()).collect();
        self.touch(super::TASKS).execute(
            "UPDATE nodes SET state = $2, runnable_since = COALESCE($3, runnable_since),
                    lease_id = NULL, lease_token_id = NULL, lease_session_id = NULL,
                    lease_owner = NULL, lease_expires_at = NULL, updated_at = $4
             WHERE task_id = $1 AND state = ANY($5)",
            &[&task_id, &m.to.as_str(), &m.runnable_since, &m.at_ms, &from],
        )
    }

    fn retry_node(&self, task_id: &str, node_id: &str, r: &NodeRetry) -> Result<()> {
        self.touch(super::TASKS).execute(
            "UPDATE nodes SET state = $3, attempts = $4, error = NULL, result = NULL,
                    runnable_since = $5, lease_id = NULL, lease_token_id = NULL,
                    lease_session_id = NULL, lease_owner = NULL, lease_expires_at = NULL,
                    updated_at = $6
             WHERE task_id = $1 AND node_id = $2",
            &[
                &task_id,
                &node_id,
                &r.state.as_str(),
                &i64::from(r.attempts),
                &r.runnable_since,
                &r.at_ms,
            ],
        )?;
        Ok(())
    }

    fn failed_nodes(&self, task_id: &str) -> Result<Vec<String>> {
        let rows = self.query(
            "SELECT node_id FROM nodes WHERE task_id = $1 AND state = 'FAILED' ORDER BY node_id",
            &[&task_id],
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn node_leases(&self) -> Result<Vec<NodeLease>> {
        let rows = self.query(
            "SELECT task_id, node_id, lease_id, lease_expires_at FROM nodes WHERE state = 'RUNNING'",
            &[],
        )?;
        Ok(rows
            .iter()
            .map(|r| NodeLease {
                task_id: r.get(0),
                node_id: r.get(1),
                lease_id: r.get(2),
                expires_at: r.get(3),
            })
            .collect())
    }

    fn nodes_of_session(&self, session_id: &str) -> Result<Vec<(String, String)>> {
        Ok(pairs(&self.query(
            "SELECT task_id, node_id FROM nodes WHERE lease_session_id = $1 AND state = 'RUNNING'
             ORDER BY task_id, node_id",
            &[&session_id],
        )?))
    }

    fn nodes_leased_by(&self, owner: &str) -> Result<Vec<(String, String)>> {
        Ok(pairs(&self.query(
            "SELECT task_id, node_id FROM nodes
             WHERE state = 'RUNNING' AND lease_owner = $1 ORDER BY task_id, node_id",
            &[&owner],
        )?))
    }

    fn task_report(
        &self,
        task_id: &str,
        after: Option<&str>,
        limit: u64,
    ) -> Result<Option<TaskRows>> {
        let Some(task) = self.query_opt(
            "SELECT task_id, goal, status, created_at, updated_at FROM tasks WHERE task_id = $1",
            &[&task_id],
        )?
        else {
            return Ok(None);
        };
        let task = task_row(&task)?;
        let counts = self
            .query(
                "SELECT state, count(*) FROM nodes WHERE task_id = $1 GROUP BY state",
                &[&task_id],
            )?
            .iter()
            .map(|r| Ok((node_state(r.get(0))?, u(r.get(1)))))
            .collect::<Result<Vec<_>>>()?;
        let rows = self.query(
            "SELECT node_id, name, state, dependencies, attempts, max_attempts, lease_owner,
                    lease_expires_at, result, error, updated_at, label_key, ready_at
             FROM nodes WHERE task_id = $1
               AND ($2::text IS NULL
                    OR position > (SELECT position FROM nodes WHERE task_id = $1 AND node_id = $2))
             ORDER BY position LIMIT $3",
            &[&task_id, &after, &i(limit)],
        )?;
        let nodes = rows
            .iter()
            .map(|r| {
                Ok(ListedNode {
                    node_id: r.get(0),
                    name: r.get(1),
                    state: node_state(r.get(2))?,
                    dependencies: r.get(3),
                    attempts: count(r.get(4)),
                    max_attempts: count(r.get(5)),
                    lease_owner: r.get(6),
                    lease_expires_at: r.get(7),
                    result: r.get(8),
                    error: r.get(9),
                    updated_at: r.get(10),
                    label_key: r.get(11),
                    ready_at: r.get(12),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(TaskRows {
            task,
            counts,
            nodes,
        }))
    }

    fn list_tasks(
        &self,
        status: Option<TaskStatus>,
        after: Option<&str>,
        limit: u64,
    ) -> Result<Vec<TaskRow>> {
        let rows = self.query(
            "SELECT task_id, goal, status, created_at, updated_at FROM tasks
             WHERE ($1::text IS NULL OR status = $1)
               AND ($2::text IS NULL
                    OR created_seq < (SELECT created_seq FROM tasks WHERE task_id = $2))
             ORDER BY created_seq DESC LIMIT $3",
            &[&status.map(TaskStatus::as_str), &after, &i(limit)],
        )?;
        rows.iter().map(task_row).collect()
    }

    fn task_counts(&self) -> Result<(BTreeMap<String, u64>, BTreeMap<String, u64>)> {
        let by = |sql: &str| -> Result<BTreeMap<String, u64>> {
            Ok(self
                .query(sql, &[])?
                .iter()
                .map(|r| (r.get(0), u(r.get(1))))
                .collect())
        };
        Ok((
            by("SELECT status, count(*) FROM tasks GROUP BY status")?,
            by("SELECT state, count(*) FROM nodes GROUP BY state")?,
        ))
    }
}
