//! DAG tasks whose nodes are leased to workers: RegisterTask, AcquireNextNode,
//! HeartbeatNode, CompleteNode, FailNode, CommitEvent, TaskStatus, ListTasks, CancelTask.
//! Graphs are validated here, before anything is queued; the rules of leases, waits and
//! expiry are in `rules`, run by the writer, whose memory of tasks is in `memory`.

mod memory;
mod ranking;
mod recent;
pub mod retry;
pub mod rules;

use std::collections::{BTreeMap, HashMap, VecDeque};

pub use crate::protocol::tasks::*;
pub use memory::TaskState;
pub use rules::{expire_due, recover, serve_waiters};

use crate::clock::format_ms;
use crate::error::{Error, Result};
use crate::protocol::journal::EventType;
use crate::store::boundary::{ListedNode, NewNode, Storage, TaskRow, TaskRows};

use super::state::{check_value, Json};
use super::{limit_or_default, paging, read, write, write_or_wait, Ctx, Method, Plan};

pub use crate::protocol::limits::{
    MAX_ATTEMPTS, MAX_DELAY_MS, MAX_NODES, MAX_NODE_TTL_SECS, MAX_PRIORITY, MAX_WAIT_MS,
    MAX_WORKER_LABELS,
};

/// Checks the value param `field` and hands over its text exactly as the client sent it.
fn json_text(cx: &Ctx<'_>, field: &str, value: Json) -> Result<String> {
    check_value(field, &value, &cx.limits())?;
    Ok(Box::<str>::from(value).into_string())
}

/// [`json_text`] for an optional value param (absent or null is None).
fn optional_json_text(cx: &Ctx<'_>, field: &str, value: Option<Json>) -> Result<Option<String>> {
    value.map(|v| json_text(cx, field, v)).transpose()
}

fn node_ttl_ms(cx: &Ctx<'_>, ttl_secs: Option<u64>) -> Result<u64> {
    match ttl_secs.unwrap_or(cx.app.config.node_timeout_secs) {
        secs @ 1..=MAX_NODE_TTL_SECS => Ok(secs * 1000),
        secs => Err(Error::Invalid(format!(
            "ttl_secs is {secs}; it must be 1 to {MAX_NODE_TTL_SECS} (heartbeat to keep a node longer)"
        ))),
    }
}

fn check_id(what: &str, id: &str) -> Result<()> {
    if id.is_empty() || id.len() > 128 {
        return Err(Error::Invalid(format!("{what} must be 1 to 128 bytes")));
    }
    Ok(())
}

/// A node's result schema, checked to be a JSON Schema that can be compiled (with no
/// remote references: nothing is fetched).
fn result_schema(i: usize, schema: Option<Json>) -> Result<Option<String>> {
    let Some(schema) = schema else {
        return Ok(None);
    };
    let value: serde_json::Value = serde_json::from_str(schema.get())?;
    if let Err(err) = jsonschema::validator_for(&value) {
        return Err(Error::invalid_params(
            format!("nodes[{i}].result_schema"),
            format!("result_schema is not a JSON Schema this daemon can use: {err}"),
        ));
    }
    Ok(Some(Box::<str>::from(schema).into_string()))
}

/// A delay, checked: at most a day.
fn delay(field: &str, delay_ms: Option<u64>) -> Result<Option<u64>> {
    match delay_ms {
        Some(ms) if ms > MAX_DELAY_MS => Err(Error::invalid_params(
            field,
            format!("{field} is {ms}; it must be at most {MAX_DELAY_MS} (a day)"),
        )),
        Some(0) | None => Ok(None),
        some => Ok(some),
    }
}

/// A node's priority, checked.
fn priority(i: usize, priority: Option<i64>) -> Result<i64> {
    match priority.unwrap_or(0) {
        p if (-MAX_PRIORITY..=MAX_PRIORITY).contains(&p) => Ok(p),
        p => Err(Error::invalid_params(
            format!("nodes[{i}].priority"),
            format!("priority is {p}; it must be -{MAX_PRIORITY} to {MAX_PRIORITY}"),
        )),
    }
}

/// Labels, checked: 1 to 64 bytes each, no control characters.
fn check_labels(field: &str, labels: &[String]) -> Result<()> {
    for label in labels {
        if label.is_empty() || label.len() > 64 || label.chars().any(char::is_control) {
            return Err(Error::invalid_params(
                field,
                format!("label {label:?} must be 1 to 64 bytes without control characters, e.g. \"gpu\""),
            ));
        }
    }
    Ok(())
}

/// A set of labels as one key: sorted, without repeats, joined by a unit separator (which
/// no label holds). The empty set is "".
fn join_labels<'a>(labels: impl IntoIterator<Item = &'a String>) -> String {
    let set: std::collections::BTreeSet<&str> = labels.into_iter().map(String::as_str).collect();
    set.into_iter().collect::<Vec<_>>().join("\u{1f}")
}

/// How many labels a label key holds.
fn label_count(label_key: &str) -> usize {
    label_key.split('\u{1f}').filter(|l| !l.is_empty()).count()
}

/// A node's label key.
fn label_key(field: &str, labels: &[String]) -> Result<String> {
    check_labels(field, labels)?;
    Ok(join_labels(labels))
}

/// The label keys of the nodes a worker with `labels` may take: every subset of its labels
/// (a node needs all of its own labels among the worker's).
fn label_keys(labels: &[String]) -> Result<Vec<String>> {
    check_labels("labels", labels)?;
    let set: Vec<&String> = {
        let unique: std::collections::BTreeSet<&String> = labels.iter().collect();
        unique.into_iter().collect()
    };
    if set.len() > MAX_WORKER_LABELS {
        return Err(Error::invalid_params(
            "labels",
            format!("a worker may give at most {MAX_WORKER_LABELS} labels"),
        ));
    }
    Ok((0u32..1 << set.len())
        .map(|mask| {
            join_labels(
                set.iter()
                    .enumerate()
                    .filter(|(b, _)| mask & (1 << b) != 0)
                    .map(|(_, l)| *l),
            )
        })
        .collect())
}

/// Checks the graph (ids, dependencies, cycles) and resolves it into rows to insert.
fn validate_graph(cx: &Ctx<'_>, nodes: &mut [NodeSpec]) -> Result<Vec<NewNode>> {
    if nodes.is_empty() {
        return Err(Error::Invalid(
            "a task needs at least one node in `nodes`".into(),
        ));
    }
    if nodes.len() > MAX_NODES {
        return Err(Error::Invalid(format!(
            "this task has {} nodes; a task may have at most {MAX_NODES} (DescribeInterface's limits.max_nodes_per_task): split the work into several tasks", nodes.len()
        )));
    }
    let mut ids = Vec::with_capacity(nodes.len());
    let mut by_id: HashMap<String, usize> = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        let id = match &node.id {
            Some(id) => {
                check_id("a node id", id)?;
                id.clone()
            }
            None => crate::methods::new_id(),
        };
        if by_id.insert(id.clone(), i).is_some() {
            return Err(Error::Invalid(format!(
                "node id `{id}` appears twice; give every node its own id"
            )));
        }
        ids.push(id);
    }
    let mut by_name: HashMap<&str, Option<usize>> = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        if let Some(name) = &node.name {
            by_name
                .entry(name.as_str())
                .and_modify(|e| *e = None)
                .or_insert(Some(i));
        }
    }
    let mut deps: Vec<Vec<usize>> = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        let mut mine = Vec::new();
        for dep in &node.dependencies {
            let j = match by_id.get(dep) {
                Some(&j) => j,
                None => match by_name.get(dep.as_str()) {
                    Some(Some(j)) => *j,
                    Some(None) => {
                        return Err(Error::Invalid(format!(
                            "dependency `{dep}` of node `{}` names several nodes; refer to nodes by id",
                            ids[i]
                        )))
                    }
                    None => {
                        return Err(Error::Invalid(format!(
                            "node `{}` depends on `{dep}`, which is not a node of this task; list it in `nodes` or drop the dependency",
                            ids[i]
                        )))
                    }
                },
            };
            if j == i {
                return Err(Error::Invalid(format!(
                    "node `{}` depends on itself",
                    ids[i]
                )));
            }
            if !mine.contains(&j) {
                mine.push(j);
            }
        }
        deps.push(mine);
    }
    // Kahn's algorithm: whatever is never freed lies on a cycle.
    let mut indegree: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, ds) in deps.iter().enumerate() {
        for &j in ds {
            dependents[j].push(i);
        }
    }
    let mut ready: VecDeque<usize> = (0..nodes.len()).filter(|&i| indegree[i] == 0).collect();
    let mut seen = 0;
    while let Some(i) = ready.pop_front() {
        seen += 1;
        for &d in &dependents[i] {
            indegree[d] -= 1;
            if indegree[d] == 0 {
                ready.push_back(d);
            }
        }
    }
    if seen < nodes.len() {
        let on_cycle: Vec<&str> = (0..nodes.len())
            .filter(|&i| indegree[i] > 0)
            .map(|i| ids[i].as_str())
            .collect();
        return Err(Error::Invalid(format!(
            "the dependencies form a cycle through {}; a task must be a DAG",
            on_cycle.join(", ")
        )));
    }
    let mut rows = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter_mut().enumerate() {
        let max_attempts = node.max_attempts.unwrap_or(1);
        if !(1..=MAX_ATTEMPTS).contains(&max_attempts) {
            return Err(Error::Invalid(format!(
                "max_attempts of node `{}` is {max_attempts}; it must be 1 to {MAX_ATTEMPTS}",
                ids[i]
            )));
        }
        rows.push(NewNode {
            node_id: ids[i].clone(),
            name: node.name.clone(),
            payload: optional_json_text(cx, &format!("nodes[{i}].payload"), node.payload.take())?,
            dependencies: deps[i].iter().map(|&j| ids[j].clone()).collect(),
            max_attempts,
            priority: priority(i, node.priority)?,
            label_key: label_key(&format!("nodes[{i}].labels"), &node.labels)?,
            ready_at: None,
            result_schema: result_schema(i, node.result_schema.take())?,
        });
    }
    Ok(rows)
}

/// A task's row as the wire shows it.
fn task_summary(row: TaskRow) -> TaskSummary {
    TaskSummary {
        task_id: row.task_id,
        goal: row.goal,
        status: row.status,
        created_at: format_ms(row.created_at),
        updated_at: format_ms(row.updated_at),
    }
}

/// A node's row as TaskStatus shows it: its dependencies, result and error read as the JSON
/// they are, its times formatted.
fn node_summary(row: ListedNode) -> Result<NodeSummary> {
    Ok(NodeSummary {
        node_id: row.node_id,
        name: row.name,
        state: row.state,
        dependencies: rules::dependencies(&row.dependencies)?,
        attempts: row.attempts,
        max_attempts: row.max_attempts,
        lease_owner: row.lease_owner,
        lease_expires_at: row.lease_expires_at.map(format_ms),
        result: rules::raw(row.result)?,
        error: rules::raw(row.error)?,
        updated_at: format_ms(row.updated_at),
        labels: row
            .label_key
            .split('\u{1f}')
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
        ready_at: row.ready_at.map(format_ms),
    })
}

/// A task's report from its rows: the task, how many of its nodes are in each state (every
/// state listed, 0 when none is in it) and the nodes read; `next` is left to the caller.
fn report(rows: TaskRows) -> Result<TaskStatusResult> {
    let mut counts: BTreeMap<String, u64> = NodeState::ALL
        .iter()
        .map(|s| (s.as_str().to_string(), 0))
        .collect();
    for (state, n) in rows.counts {
        *counts.entry(state.as_str().to_string()).or_default() += n;
    }
    Ok(TaskStatusResult {
        task: task_summary(rows.task),
        counts,
        nodes: rows
            .nodes
            .into_iter()
            .map(node_summary)
            .collect::<Result<_>>()?,
        next: None,
    })
}

/// TaskStatus's report of `task_id` with at most `limit` nodes, those after the node
/// `after` (None: no such task).
fn task_report(
    storage: &dyn Storage,
    task_id: &str,
    after: Option<&str>,
    limit: u64,
) -> Result<Option<TaskStatusResult>> {
    storage
        .task_report(task_id, after, limit)?
        .map(report)
        .transpose()
}

/// ListTasks' answer: at most `limit` tasks, newest first, of `status` if given, those
/// created before the task `after`; `next` is left to the caller.
fn list_tasks(
    storage: &dyn Storage,
    status: Option<TaskStatus>,
    after: Option<&str>,
    limit: u64,
) -> Result<ListTasksResult> {
    let tasks = storage.list_tasks(status, after, limit)?;
    Ok(ListTasksResult {
        tasks: tasks.into_iter().map(task_summary).collect(),
        next: None,
    })
}

impl Method for RegisterTaskParams {
    const SUMMARY: &'static str = "Register a goal and its DAG of nodes (id?, name?, dependencies, payload?, max_attempts?). Unknown dependency, duplicate id or a cycle: 400 and nothing stored.";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        if self.goal.is_empty() {
            return Err(Error::Invalid(
                "goal must not be empty; say what the task is for".into(),
            ));
        }
        let delays = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| delay(&format!("nodes[{i}].delay_ms"), n.delay_ms))
            .collect::<Result<Vec<_>>>()?;
        let nodes = validate_graph(cx, &mut self.nodes)?;
        let context = optional_json_text(cx, "context", self.context.take())?;
        let goal = std::mem::take(&mut self.goal);
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            rules::register(ctx, &goal, context.as_deref(), nodes, delays)
        })
    }
}

impl Method for AcquireNextNodeParams {
    const SUMMARY: &'static str = "Lease the next runnable node (PENDING with every dependency COMPLETED), of one task or any; null when none (after wait_ms). Heartbeat it, then CompleteNode or FailNode.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let owner = match (&self.lease_owner, &self.session_id) {
            (Some(owner), _) if owner.is_empty() || owner.len() > 256 => {
                return Err(Error::Invalid(
                    "lease_owner must be 1 to 256 bytes; use the worker's name".into(),
                ))
            }
            (Some(owner), _) => owner.clone(),
            // The session's name, once the writer has checked the session.
            (None, Some(_)) => String::new(),
            (None, None) => return Err(Error::invalid_params(
                "lease_owner",
                "lease_owner is required (the worker's name), unless session_id names your session",
            )),
        };
        let ttl_ms = node_ttl_ms(cx, self.ttl_secs)?;
        let wait_ms = self.wait_ms.unwrap_or(0);
        if wait_ms > MAX_WAIT_MS {
            return Err(Error::Invalid(format!(
                "wait_ms must be at most {MAX_WAIT_MS}"
            )));
        }
        if wait_ms > 0 {
            cx.connection.mark_lock_user();
        }
        let request = rules::NodeRequest {
            task_id: self.task_id,
            owner,
            ttl_ms,
            connection: cx.connection.id,
            event_limit: cx.app.config.context_event_limit,
            token_id: cx.token_id(),
            session: self.session_id.map(|id| cx.presented(id)),
            label_keys: label_keys(&self.labels)?,
        };
        write_or_wait::<Self>(cx, self.idempotency_key, move |ctx| {
            rules::acquire_next(ctx, request, wait_ms)
        })
    }
}

impl Method for HeartbeatNodeParams {
    const SUMMARY: &'static str = "Extend your node lease to ttl_secs from now; call it well within the lease on long work. 410 if the lease is gone (the node was rolled back).";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        let ttl_ms = node_ttl_ms(cx, self.ttl_secs)?;
        let presented = cx.presented(std::mem::take(&mut self.lease_id));
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            rules::heartbeat(ctx, &self.task_id, &self.node_id, &presented, ttl_ms)
        })
    }
}

impl Method for CompleteNodeParams {
    const SUMMARY: &'static str = "Finish your node with its result (given to dependents); its dependents may become runnable.";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        let result = optional_json_text(cx, "result", self.result.take())?;
        let presented = cx.presented(std::mem::take(&mut self.lease_id));
        let fence = super::locks::fence::WriteFence::of(cx, self.fence.take())?;
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            fence.check(ctx)?;
            rules::complete(
                ctx,
                &self.task_id,
                &self.node_id,
                &presented,
                result.as_deref(),
            )
        })
    }
}

impl Method for FailNodeParams {
    const SUMMARY: &'static str = "Report your node failed; with retry (default) it goes back to PENDING while attempts remain, else FAILED (and the task fails).";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let FailNodeParams {
            task_id,
            node_id,
            lease_id,
            error,
            retry,
            retry_delay_ms,
            idempotency_key,
        } = self;
        let retry_delay_ms = delay("retry_delay_ms", retry_delay_ms)?.unwrap_or(0);
        let error = json_text(cx, "error", error)?;
        let retry = retry.unwrap_or(true);
        let presented = cx.presented(lease_id);
        write::<Self>(cx, idempotency_key, move |ctx| {
            rules::fail(
                ctx,
                &task_id,
                &node_id,
                &presented,
                &error,
                retry,
                retry_delay_ms,
            )
        })
    }
}

impl Method for CommitEventParams {
    const SUMMARY: &'static str = "Record what a node did (action_type: custom.<what>, or node.progress; payload) in the task's journal; lease_id required while the node is RUNNING.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let CommitEventParams {
            task_id,
            node_id,
            lease_id,
            action_type,
            payload,
            idempotency_key,
        } = self;
        // Only `custom.*` and the node's `node.progress`: every other type is the
        // daemon's, and a worker must not forge its audit events.
        EventType::from_client(&action_type)
            .map_err(|e| Error::Invalid(format!("action_type: {e}")))?;
        if action_type.len() > 128 {
            return Err(Error::Invalid(
                "action_type must be at most 128 bytes; e.g. custom.file.written".into(),
            ));
        }
        let payload = json_text(cx, "payload", payload)?;
        let presented = lease_id.map(|id| cx.presented(id));
        write::<Self>(cx, idempotency_key, move |ctx| {
            rules::commit_event(
                ctx,
                &task_id,
                &node_id,
                presented.as_ref(),
                &action_type,
                &payload,
            )
        })
    }
}

impl Method for TaskStatusParams {
    const SUMMARY: &'static str = "A task's status (running, completed, failed, cancelled), node counts by state, and its nodes in registration order (page with `after` = next).";
    fn plan(self, _cx: &Ctx<'_>) -> Result<Plan> {
        let limit = paging::page_limit(self.limit, paging::MAX_PAGE)?;
        Ok(read::<Self>(false, move |storage| {
            let after = self.after.as_deref();
            let mut report = task_report(storage, &self.task_id, after, limit + 1)?
                .ok_or_else(|| rules::no_task(&self.task_id))?;
            if let Some(after) = after {
                if storage.node(&self.task_id, after)?.is_none() {
                    return Err(Error::Invalid(format!(
                        "after `{after}` is no node of task `{}`; pass the `next` of the previous page unchanged, or omit after to start at the first node",
                        self.task_id
                    )));
                }
            }
            if paging::cut(&mut report.nodes, limit)? {
                report.next = report.nodes.last().map(|n| n.node_id.clone());
            }
            Ok(report)
        }))
    }
}

impl Method for ListTasksParams {
    const SUMMARY: &'static str =
        "Tasks, newest first, optionally by status; page with `after` = next.";
    fn plan(self, _cx: &Ctx<'_>) -> Result<Plan> {
        let status = match &self.status {
            None => None,
            Some(text) => Some(TaskStatus::parse(text).ok_or_else(|| {
                let known: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
                Error::Invalid(format!(
                    "status `{text}` is not one of {}",
                    known.join(", ")
                ))
            })?),
        };
        let limit = limit_or_default(self.limit)?;
        Ok(read::<Self>(false, move |storage| {
            let after = self.after.as_deref();
            if let Some(after) = after {
                if storage.task_status(after)?.is_none() {
                    return Err(Error::Invalid(format!(
                        "after `{after}` is no task; pass the `next` of the previous page unchanged, or omit after to start at the newest task"
                    )));
                }
            }
            let mut listed = list_tasks(storage, status, after, limit + 1)?;
            if paging::cut(&mut listed.tasks, limit)? {
                listed.next = listed.tasks.last().map(|t| t.task_id.clone());
            }
            Ok(listed)
        }))
    }
}

impl Method for CancelTaskParams {
    const SUMMARY: &'static str = "Cancel a task: every PENDING or RUNNING node becomes CANCELLED and its lease stops working (410).";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            rules::cancel(ctx, &self.task_id)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> TaskRows {
        TaskRows {
            task: TaskRow {
                task_id: "t".into(),
                goal: "the goal".into(),
                status: TaskStatus::Running,
                created_at: 1_700_000_000_123,
                updated_at: 1_700_000_000_456,
            },
            counts: vec![(NodeState::Running, 1), (NodeState::Pending, 2)],
            nodes: vec![ListedNode {
                node_id: "a".into(),
                name: Some("first".into()),
                state: NodeState::Running,
                dependencies: r#"["b","c"]"#.into(),
                attempts: 1,
                max_attempts: 3,
                lease_owner: Some("w".into()),
                lease_expires_at: Some(1_700_000_060_000),
                result: None,
                error: Some(r#"{"why": "x"}"#.into()),
                updated_at: 1_700_000_000_789,
                label_key: "gpu\u{1f}linux".into(),
                ready_at: None,
            }],
        }
    }

    #[test]
    fn a_report_counts_every_state_formats_times_and_reads_json() {
        let report = report(rows()).unwrap();
        assert_eq!(
            report.counts,
            [
                ("CANCELLED".to_string(), 0),
                ("COMPLETED".into(), 0),
                ("FAILED".into(), 0),
                ("PENDING".into(), 2),
                ("RUNNING".into(), 1),
            ]
            .into()
        );
        assert_eq!(report.task.task_id, "t");
        assert_eq!(report.task.status, TaskStatus::Running);
        assert_eq!(report.task.created_at, "2023-11-14T22:13:20.123Z");
        assert_eq!(report.task.updated_at, "2023-11-14T22:13:20.456Z");
        let node = &report.nodes[0];
        assert_eq!(
            (node.node_id.as_str(), node.name.as_deref()),
            ("a", Some("first"))
        );
        assert_eq!(node.dependencies, ["b", "c"]);
        assert_eq!((node.attempts, node.max_attempts), (1, 3));
        assert_eq!(
            node.lease_expires_at.as_deref(),
            Some("2023-11-14T22:14:20.000Z")
        );
        assert_eq!(node.updated_at, "2023-11-14T22:13:20.789Z");
        assert_eq!(node.labels, ["gpu", "linux"]);
        assert!(node.ready_at.is_none());
        assert!(node.result.is_none());
        // The error exactly as stored.
        assert_eq!(node.error.as_ref().unwrap().get(), r#"{"why": "x"}"#);
        assert!(report.next.is_none());
    }

    #[test]
    fn unreadable_json_in_a_node_row_is_an_error() {
        let mut bad = rows();
        bad.nodes[0].dependencies = "[b".into();
        assert!(report(bad).is_err());
        let mut bad = rows();
        bad.nodes[0].result = Some("{".into());
        assert!(report(bad).is_err());
    }
}
