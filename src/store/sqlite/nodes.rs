//! SQL for tasks (`tasks`), their nodes (`nodes`) and dependency edges
//! (`node_dependents`): SQLite's side of [`Nodes`]. The rules (who gets which node, retries,
//! rollback, when a task ends) are in `methods::tasks`.
//!
//! A node is runnable when PENDING with `remaining_deps = 0`; the partial index
//! `nodes_runnable` lists exactly those in the order they became runnable.

use std::collections::BTreeMap;

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ValueRef};
use rusqlite::{params, OptionalExtension, Row};

use crate::error::{Error, Result};
use crate::protocol::tasks::{NodeState, TaskStatus};
use crate::store::boundary::{
    ListedNode, NewTask, NodeChange, NodeLease, NodeLeaseGrant, NodeRetry, NodeRow, NodeToStart,
    Nodes, NodesMove, RunnableNode, TaskRow, TaskRows,
};
use crate::store::rows;

use super::sql::Sql;

/// A node's state read from its stored name, as `store::rows` reads it for both engines.
impl FromSql for NodeState {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        rows::node_state(value.as_str()?).map_err(|e| FromSqlError::Other(Box::new(e)))
    }
}

/// A task's status read from its stored name, as `store::rows` reads it for both engines.
impl FromSql for TaskStatus {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        rows::task_status(value.as_str()?).map_err(|e| FromSqlError::Other(Box::new(e)))
    }
}

fn task_row(r: &Row<'_>) -> rusqlite::Result<TaskRow> {
    Ok(TaskRow {
        task_id: r.get(0)?,
        goal: r.get(1)?,
        status: r.get(2)?,
        created_at: r.get(3)?,
        updated_at: r.get(4)?,
    })
}

impl<C: Sql> Nodes for C {
    fn insert_task(&self, task: &NewTask<'_>) -> Result<()> {
        self.with(
            "INSERT INTO tasks (task_id, goal, context, status, created_at, updated_at, created_seq,
                                unfinished_nodes)
             VALUES (?1, ?2, ?3, 'running', ?4, ?4, ?5, ?6)",
            |s| {
                s.execute(params![
                    task.task_id,
                    task.goal,
                    task.context,
                    task.at_ms,
                    task.seq,
                    task.nodes.len()
                ])
            },
        )?;
        let mut insert = self.conn().prepare_cached(
            "INSERT INTO nodes (task_id, node_id, position, name, payload, dependencies, max_attempts,
                                state, remaining_deps, runnable_since, updated_at, priority,
                                label_key, ready_at, result_schema)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'PENDING', ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )?;
        let mut edge = self.conn().prepare_cached(
            "INSERT INTO node_dependents (task_id, node_id, dependent_id) VALUES (?1, ?2, ?3)",
        )?;
        for (position, node) in task.nodes.iter().enumerate() {
            insert.execute(params![
                task.task_id,
                node.node_id,
                position as i64,
                node.name,
                node.payload,
                serde_json::to_string(&node.dependencies)?,
                node.max_attempts,
                node.dependencies.len() as i64 + i64::from(node.ready_at.is_some()),
                task.seq,
                task.at_ms,
                node.priority,
                node.label_key,
                node.ready_at,
                node.result_schema
            ])?;
            for dep in &node.dependencies {
                edge.execute(params![task.task_id, dep, node.node_id])?;
            }
        }
        Ok(())
    }

    fn task_status(&self, task_id: &str) -> Result<Option<TaskStatus>> {
        Ok(self
            .with("SELECT status FROM tasks WHERE task_id = ?1", |s| {
                s.query_row([task_id], |r| r.get(0))
            })
            .optional()?)
    }

    fn set_task_status(&self, task_id: &str, status: TaskStatus, at_ms: i64) -> Result<()> {
        self.with(
            "UPDATE tasks SET status = ?2, updated_at = ?3 WHERE task_id = ?1",
            |s| s.execute(params![task_id, status.as_str(), at_ms]),
        )?;
        Ok(())
    }

    fn first_runnable(
        &self,
        task_id: Option<&str>,
        label_key: &str,
    ) -> Result<Option<RunnableNode>> {
        let node = |r: &Row<'_>| {
            Ok(RunnableNode {
                priority: r.get(0)?,
                runnable_since: r.get(1)?,
                task_id: r.get(2)?,
                node_id: r.get(3)?,
            })
        };
        Ok(match task_id {
            Some(t) => self
                .with(
                    "SELECT priority, runnable_since, task_id, node_id
                     FROM nodes INDEXED BY nodes_runnable_by_task
                     WHERE task_id = ?1 AND label_key = ?2 AND state = 'PENDING'
                       AND remaining_deps = 0
                     ORDER BY priority DESC, runnable_since, node_id LIMIT 1",
                    |s| s.query_row(params![t, label_key], node),
                )
                .optional()?,
            None => self
                .with(
                    "SELECT priority, runnable_since, task_id, node_id
                     FROM nodes INDEXED BY nodes_runnable
                     WHERE label_key = ?1 AND state = 'PENDING' AND remaining_deps = 0
                     ORDER BY priority DESC, runnable_since, task_id, node_id LIMIT 1",
                    |s| s.query_row([label_key], node),
                )
                .optional()?,
        })
    }

    fn has_running(&self, task_id: &str) -> Result<bool> {
        let running = self
            .with(
                "SELECT 1 FROM nodes INDEXED BY nodes_running
                 WHERE task_id = ?1 AND state = 'RUNNING'",
                |s| s.query_row([task_id], |_| Ok(())),
            )
            .optional()?
            .is_some();
        if running {
            return Ok(true);
        }
        Ok(self
            .with(
                "SELECT 1 FROM nodes INDEXED BY nodes_delayed
                 WHERE task_id = ?1 AND ready_at IS NOT NULL AND state = 'PENDING'",
                |s| s.query_row([task_id], |_| Ok(())),
            )
            .optional()?
            .is_some())
    }

    fn release_hold(&self, task_id: &str, node_id: &str, seq: i64) -> Result<bool> {
        let changed = self.with(
            "UPDATE nodes SET remaining_deps = remaining_deps - 1, ready_at = NULL,
                        runnable_since = ?3
                 WHERE task_id = ?1 AND node_id = ?2 AND ready_at IS NOT NULL
                   AND state = 'PENDING'",
            |s| s.execute(params![task_id, node_id, seq]),
        )?;
        Ok(changed > 0)
    }

    fn held_nodes(&self) -> Result<Vec<(String, String, i64)>> {
        Ok(self.with(
            "SELECT task_id, node_id, ready_at FROM nodes INDEXED BY nodes_delayed
                 WHERE ready_at IS NOT NULL AND state = 'PENDING'",
            |s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            },
        )?)
    }

    fn node(&self, task_id: &str, node_id: &str) -> Result<Option<NodeRow>> {
        Ok(self
            .with(
                "SELECT state, lease_id, lease_owner, attempts, max_attempts, lease_token_id,
                        result_schema
                 FROM nodes WHERE task_id = ?1 AND node_id = ?2",
                |s| {
                    s.query_row(params![task_id, node_id], |r| {
                        Ok(NodeRow {
                            state: r.get(0)?,
                            lease_id: r.get(1)?,
                            lease_owner: r.get(2)?,
                            attempts: r.get(3)?,
                            max_attempts: r.get(4)?,
                            lease_token_id: r.get(5)?,
                            result_schema: r.get(6)?,
                        })
                    })
                },
            )
            .optional()?)
    }

    fn node_to_start(&self, task_id: &str, node_id: &str) -> Result<Option<NodeToStart>> {
        // The task's goal and context in the same read (a worker is told them).
        Ok(self
            .with(
                "SELECT n.dependencies, n.name, n.payload, n.attempts, n.max_attempts, t.goal,
                        t.context
                 FROM nodes n JOIN tasks t ON t.task_id = n.task_id
                 WHERE n.task_id = ?1 AND n.node_id = ?2",
                |s| {
                    s.query_row(params![task_id, node_id], |r| {
                        Ok(NodeToStart {
                            dependencies: r.get(0)?,
                            name: r.get(1)?,
                            payload: r.get(2)?,
                            attempts: r.get(3)?,
                            max_attempts: r.get(4)?,
                            goal: r.get(5)?,
                            task_context: r.get(6)?,
                        })
                    })
                },
            )
            .optional()?)
    }

    fn start_node(&self, task_id: &str, node_id: &str, lease: &NodeLeaseGrant<'_>) -> Result<()> {
        self.with(
            "UPDATE nodes SET state = 'RUNNING', attempts = ?9, lease_id = ?3,
                    lease_owner = ?4, lease_expires_at = ?5, updated_at = ?6,
                    lease_token_id = ?7, lease_session_id = ?8
             WHERE task_id = ?1 AND node_id = ?2",
            |s| {
                s.execute(params![
                    task_id,
                    node_id,
                    lease.lease_id,
                    lease.owner,
                    lease.expires_at,
                    lease.at_ms,
                    lease.token_id,
                    lease.session_id,
                    lease.attempts
                ])
            },
        )?;
        Ok(())
    }

    fn node_result(&self, task_id: &str, node_id: &str) -> Result<Option<String>> {
        Ok(self.with(
            "SELECT result FROM nodes WHERE task_id = ?1 AND node_id = ?2",
            |s| s.query_row(params![task_id, node_id], |r| r.get(0)),
        )?)
    }

    fn extend_node_lease(&self, task_id: &str, node_id: &str, expires_at: i64) -> Result<()> {
        self.with(
            "UPDATE nodes SET lease_expires_at = ?3 WHERE task_id = ?1 AND node_id = ?2",
            |s| s.execute(params![task_id, node_id, expires_at]),
        )?;
        Ok(())
    }

    fn change_node(&self, task_id: &str, node_id: &str, c: &NodeChange<'_>) -> Result<()> {
        self.with(
            "UPDATE nodes SET state = ?3, result = COALESCE(?4, result),
                    error = COALESCE(?5, error), runnable_since = COALESCE(?6, runnable_since),
                    lease_id = NULL, lease_token_id = NULL, lease_session_id = NULL,
                    ready_at = ?8, remaining_deps = remaining_deps + (?8 IS NOT NULL),
                    lease_owner = NULL, lease_expires_at = NULL, updated_at = ?7
             WHERE task_id = ?1 AND node_id = ?2",
            |s| {
                s.execute(params![
                    task_id,
                    node_id,
                    c.state.as_str(),
                    c.result,
                    c.error,
                    c.runnable_since,
                    c.at_ms,
                    c.ready_at
                ])
            },
        )?;
        Ok(())
    }

    fn release_dependents(&self, task_id: &str, node_id: &str, seq: i64) -> Result<()> {
        // The dependents first, then one point update each: `IN (SELECT ...)` builds a
        // temporary table per execution, even for a node nothing depends on.
        let dependents: Vec<String> = self.with(
            "SELECT dependent_id FROM node_dependents WHERE task_id = ?1 AND node_id = ?2",
            |s| {
                s.query_map(params![task_id, node_id], |r| r.get(0))?
                    .collect()
            },
        )?;
        if dependents.is_empty() {
            return Ok(());
        }
        self.with(
            "UPDATE nodes SET remaining_deps = remaining_deps - 1, runnable_since = ?3
             WHERE task_id = ?1 AND node_id = ?2",
            |release| {
                for dependent in dependents {
                    release.execute(params![task_id, dependent, seq])?;
                }
                Ok(())
            },
        )?;
        Ok(())
    }

    fn finish_one(&self, task_id: &str) -> Result<bool> {
        // Without RETURNING, as in `start_node`: one statement while others remain, a
        // second for the last.
        let others_remain = self.with(
            "UPDATE tasks SET unfinished_nodes = unfinished_nodes - 1
                 WHERE task_id = ?1 AND unfinished_nodes > 1",
            |s| s.execute([task_id]),
        )?;
        if others_remain == 1 {
            return Ok(false);
        }
        let last = self.with(
            "UPDATE tasks SET unfinished_nodes = 0 WHERE task_id = ?1 AND unfinished_nodes = 1",
            |s| s.execute([task_id]),
        )?;
        if last == 1 {
            return Ok(true);
        }
        Err(Error::Internal(format!(
            "task {task_id} has no unfinished node left to finish"
        )))
    }

    fn running_nodes(&self, task_id: &str) -> Result<Vec<String>> {
        Ok(self.with(
            "SELECT node_id FROM nodes WHERE task_id = ?1 AND state = 'RUNNING'",
            |s| s.query_map([task_id], |r| r.get(0))?.collect(),
        )?)
    }

    fn move_nodes(&self, task_id: &str, m: &NodesMove<'_>) -> Result<u64> {
        // One slot per state; NULL (matching nothing) for those not given.
        let mut from = [None; NodeState::ALL.len()];
        if m.from.len() > from.len() {
            return Err(Error::Internal(format!(
                "{} states to move nodes from",
                m.from.len()
            )));
        }
        for (slot, state) in from.iter_mut().zip(m.from) {
            *slot = Some(state.as_str());
        }
        Ok(self.with(
            "UPDATE nodes SET state = ?2, runnable_since = COALESCE(?3, runnable_since),
                    lease_id = NULL, lease_token_id = NULL, lease_session_id = NULL,
                    lease_owner = NULL, lease_expires_at = NULL, updated_at = ?4
             WHERE task_id = ?1 AND state IN (?5, ?6, ?7, ?8, ?9)",
            |s| {
                s.execute(params![
                    task_id,
                    m.to.as_str(),
                    m.runnable_since,
                    m.at_ms,
                    from[0],
                    from[1],
                    from[2],
                    from[3],
                    from[4]
                ])
            },
        )? as u64)
    }

    fn retry_node(&self, task_id: &str, node_id: &str, r: &NodeRetry) -> Result<()> {
        self.with(
            "UPDATE nodes SET state = ?3, attempts = ?4, error = NULL, result = NULL,
                    runnable_since = ?5, lease_id = NULL, lease_token_id = NULL,
                    lease_session_id = NULL, lease_owner = NULL, lease_expires_at = NULL,
                    updated_at = ?6
             WHERE task_id = ?1 AND node_id = ?2",
            |s| {
                s.execute(params![
                    task_id,
                    node_id,
                    r.state.as_str(),
                    r.attempts,
                    r.runnable_since,
                    r.at_ms
                ])
            },
        )?;
        Ok(())
    }

    fn failed_nodes(&self, task_id: &str) -> Result<Vec<String>> {
        Ok(self.with(
            "SELECT node_id FROM nodes WHERE task_id = ?1 AND state = 'FAILED' ORDER BY node_id",
            |s| s.query_map([task_id], |r| r.get(0))?.collect(),
        )?)
    }

    fn node_leases(&self) -> Result<Vec<NodeLease>> {
        Ok(self.with(
            "SELECT task_id, node_id, lease_id, lease_expires_at FROM nodes
                 WHERE state = 'RUNNING'",
            |s| {
                s.query_map([], |r| {
                    Ok(NodeLease {
                        task_id: r.get(0)?,
                        node_id: r.get(1)?,
                        lease_id: r.get(2)?,
                        expires_at: r.get(3)?,
                    })
                })?
                .collect()
            },
        )?)
    }

    fn nodes_of_session(&self, session_id: &str) -> Result<Vec<(String, String)>> {
        Ok(self.with(
            "SELECT task_id, node_id FROM nodes WHERE lease_session_id = ?1 AND state = 'RUNNING'
                 ORDER BY task_id, node_id",
            |s| {
                s.query_map([session_id], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            },
        )?)
    }

    fn nodes_leased_by(&self, owner: &str) -> Result<Vec<(String, String)>> {
        Ok(self.with(
            "SELECT task_id, node_id FROM nodes INDEXED BY nodes_running
                 WHERE state = 'RUNNING' AND lease_owner = ?1 ORDER BY task_id, node_id",
            |s| {
                s.query_map([owner], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            },
        )?)
    }

    fn task_report(
        &self,
        task_id: &str,
        after: Option<&str>,
        limit: u64,
    ) -> Result<Option<TaskRows>> {
        let Some(task) = self
            .with(
                "SELECT task_id, goal, status, created_at, updated_at FROM tasks WHERE task_id = ?1",
                |s| s.query_row([task_id], task_row),
            )
            .optional()?
        else {
            return Ok(None);
        };
        let mut stmt = self.conn().prepare_cached(
            "SELECT state, COUNT(*) FROM nodes WHERE task_id = ?1 GROUP BY state",
        )?;
        let counts = stmt
            .query_map([task_id], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut stmt = self.conn().prepare_cached(
            "SELECT node_id, name, state, dependencies, attempts, max_attempts, lease_owner,
                    lease_expires_at, result, error, updated_at, label_key, ready_at
             FROM nodes WHERE task_id = ?1
               AND (?2 IS NULL
                    OR position > (SELECT position FROM nodes WHERE task_id = ?1 AND node_id = ?2))
             ORDER BY position LIMIT ?3 + 0",
        )?;
        let nodes = stmt
            .query_map(params![task_id, after, limit], |r| {
                Ok(ListedNode {
                    node_id: r.get(0)?,
                    name: r.get(1)?,
                    state: r.get(2)?,
                    dependencies: r.get(3)?,
                    attempts: r.get(4)?,
                    max_attempts: r.get(5)?,
                    lease_owner: r.get(6)?,
                    lease_expires_at: r.get(7)?,
                    result: r.get(8)?,
                    error: r.get(9)?,
                    updated_at: r.get(10)?,
                    label_key: r.get(11)?,
                    ready_at: r.get(12)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
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
        let mut stmt = self.conn().prepare_cached(
            "SELECT task_id, goal, status, created_at, updated_at FROM tasks
             WHERE (?1 IS NULL OR status = ?1)
               AND (?2 IS NULL OR created_seq < (SELECT created_seq FROM tasks WHERE task_id = ?2))
             ORDER BY created_seq DESC LIMIT ?3 + 0",
        )?;
        let tasks = stmt
            .query_map(
                params![status.map(TaskStatus::as_str), after, limit],
                task_row,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(tasks)
    }

    fn task_counts(&self) -> Result<(BTreeMap<String, u64>, BTreeMap<String, u64>)> {
        let by = |sql: &str| -> Result<BTreeMap<String, u64>> {
            let mut out = BTreeMap::new();
            for row in self
                .conn()
                .prepare_cached(sql)?
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?)))?
            {
                let (k, v) = row?;
                out.insert(k, v);
            }
            Ok(out)
        };
        Ok((
            by("SELECT status, COUNT(*) FROM tasks GROUP BY status")?,
            by("SELECT state, COUNT(*) FROM nodes GROUP BY state")?,
        ))
    }
}
