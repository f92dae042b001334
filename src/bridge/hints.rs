//! Daemon answers as tool results: the result as structured content, and every error as
//! an `isError` result whose text says what to do next, naming the tool to call (a
//! conflict's current version, a busy lock's holder, a lost lease, a compacted journal).

use std::collections::{BTreeSet, HashMap};

use rmcp::model::{CallToolResult, ContentBlock};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::tools::{self, Group, Kind, Tool};
use crate::client::CallError;
use crate::protocol::locks::HeldBy;
use crate::protocol::state::DeleteParams;
use crate::protocol::tasks::{CompleteNodeParams, NodeState, TaskStatus, TaskStatusResult};
use crate::protocol::Request;

/// What the hints read of a failed compare-and-set's `data`.
#[derive(Deserialize)]
struct VersionConflict {
    expected_version: u64,
    actual_version: u64,
    actual_updated_by: Option<String>,
}

/// What the hint reads of a failed Txn's `data`.
#[derive(Deserialize)]
struct FailedCompares {
    failed: Vec<IgnoredAny>,
}

/// What the hints read of the `data` of a node lease that is not live.
#[derive(Deserialize)]
struct NodeLeaseInvalid {
    state: String,
    /// Only while the node is RUNNING.
    lease_owner: Option<String>,
}

/// What the hints read of the `data` of a lock lease that is not live.
#[derive(Deserialize)]
struct LockLeaseInvalid {
    resource_key: String,
    /// Only while someone holds the key.
    held_by: Option<HeldBy>,
}

/// What the hint reads of a `fenced` error's `data`.
#[derive(Deserialize)]
struct Fenced {
    resource_key: String,
    latest_fencing_token: u64,
    /// Null while nobody holds the key.
    held_by: Option<Owners>,
}

/// The holder of a key, or (shared leases, slots) every holder: only their names.
#[derive(Deserialize)]
#[serde(untagged)]
enum Owners {
    One(Owner),
    Many(Vec<Owner>),
}

#[derive(Deserialize)]
struct Owner {
    owner: String,
}

/// What the hint reads of a `compacted` error's `data`.
#[derive(Deserialize)]
struct Compacted {
    oldest_seq: u64,
}

/// Daemon method names (and protocol words) as the MCP client knows them.
fn mcp_words(message: &str) -> String {
    let mut names: Vec<(&str, &str)> = tools::catalogue()
        .into_iter()
        .map(|t| (t.method, t.name))
        .collect();
    names.sort_by_key(|(method, _)| std::cmp::Reverse(method.len()));
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    'scan: while let Some(c) = rest.chars().next() {
        let at_word = out
            .chars()
            .last()
            .is_none_or(|p| !p.is_ascii_alphanumeric() && p != '_' && p != '.');
        if at_word {
            if let Some(tail) = rest.strip_prefix("data.") {
                rest = tail;
                continue;
            }
            for (method, tool) in &names {
                if let Some(tail) = rest.strip_prefix(method) {
                    if !tail.starts_with(|n: char| n.is_ascii_alphanumeric()) {
                        out.push_str(tool);
                        rest = tail;
                        continue 'scan;
                    }
                }
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The first clause of a daemon message (before its own advice).
fn clause(message: &str) -> &str {
    message.split(';').next().unwrap_or(message).trim()
}

/// A failed daemon call as a result for the model: one sentence saying what happened and
/// which tool to call next, by its MCP name; the daemon's details (without its own hint,
/// which names daemon methods) follow as a second text block.
pub(super) fn error(
    tool: &Tool,
    args: &Map<String, Value>,
    owner: &str,
    err: CallError,
) -> CallToolResult {
    let arg = |name: &str| argument(args, name);
    let name = tool.name;
    let check_with = match tool.group {
        Group::Locks => "baton_lock_status",
        Group::State => "baton_get",
        Group::Tasks => "baton_task_status",
        Group::Events => "baton_events",
        Group::Agents => "baton_agents",
    };
    let (kind, message, mut data) = match err {
        CallError::Unreachable { address, source } if address.contains("://") => {
            return failure(
                format!(
                    "batond is not reachable at {address} ({source}): check that it listens there (BATON_LISTEN), that --url is right and that BATON_TLS_CA names the CA of its certificate, then call {name} again."
                ),
                None,
            )
        }
        CallError::Unreachable { address, source } => {
            return failure(
                format!(
                    "batond is not running at {address} ({source}): start it with `batond` (or `systemctl --user start batond`, or `cargo run --release --bin batond` in the Baton checkout), then call {name} again."
                ),
                None,
            )
        }
        CallError::NotSent(e) => {
            return failure(
                format!("The connection to batond closed before {name} was sent ({e}), so nothing was done; batond may be restarting, so call {name} again in a moment."),
                None,
            )
        }
        CallError::Lost(why) => {
            return failure(
                format!("{why}, so the outcome of {name} is unknown: check it with {check_with} before you call {name} again."),
                None,
            )
        }
        unreadable @ CallError::Unreadable { .. } => {
            return failure(
                format!("{}, so the outcome of {name} is unknown: check it with {check_with} before you call {name} again.", mcp_words(&unreadable.to_string())),
                None,
            )
        }
        CallError::Daemon {
            kind,
            message,
            data,
            ..
        } => (kind, message, data),
    };
    if let Value::Object(map) = &mut data {
        // The daemon's own advice names its methods; the hint below replaces it.
        map.remove("hint");
    }
    // The hint when the error's data is not what its hint reads.
    let unexplained = || {
        format!(
            "{name} failed: {}; check with {check_with} before you call {name} again.",
            mcp_words(&message)
        )
    };
    let hint = match kind.as_str() {
        "conflict" => conflict_hint(tool, args, &data).unwrap_or_else(unexplained),
        // A call acting as the agent refused for its session (the bridge could not join
        // again just now): batond's words name its own methods.
        "lease_invalid" if tool.kind.acts_as_agent() => format!(
            "Your agent session as {owner} has ended (batond restarted, it expired, or it was taken over), so {name} was not done: call {name} again in a moment, and the bridge joins again as {owner} first."
        ),
        "lease_invalid" if tool.group == Group::Tasks => {
            node_lease_hint(args, owner, &data).unwrap_or_else(unexplained)
        }
        "lease_invalid" => lock_lease_hint(tool, &data).unwrap_or_else(unexplained),
        "fenced" => fenced_hint(tool, &data).unwrap_or_else(unexplained),
        "not_found" if tool.group == Group::Tasks => {
            let task = arg("task_id");
            if message.starts_with("node") {
                format!("Node {} is not a node of task {task}: call baton_task_status with task_id {task} to see its nodes.", arg("node_id"))
            } else {
                format!("Task {task} does not exist: check the task_id you got from baton_task_register or baton_task_next, and call {name} again with it.")
            }
        }
        "value_too_large" | "request_too_large" => format!(
            "batond refused {name} because it is too large ({}), so nothing was written: send a smaller value (split it over several keys, or keep it in a file and store its path) and call {name} again.",
            mcp_words(clause(&message))
        ),
        "invalid_params" | "invalid" => format!(
            "batond refused {name}: {}, so nothing was changed; fix that and call {name} again.",
            mcp_words(clause(&message))
        ),
        "compacted" => compacted_hint(args, &data).unwrap_or_else(unexplained),
        "overloaded" => format!("batond is overloaded and did nothing: call {name} again in a moment."),
        "unavailable" => format!(
            "batond is unavailable ({}) and wrote nothing: call {name} again later.",
            mcp_words(clause(&message))
        ),
        _ => unexplained(),
    };
    let details = match data {
        Value::Object(map) if map.keys().any(|k| k != "kind") => Some(Value::Object(map)),
        _ => None,
    };
    failure(hint, details)
}

/// A string argument of the call, or "".
fn argument<'a>(args: &'a Map<String, Value>, name: &str) -> &'a str {
    args.get(name).and_then(Value::as_str).unwrap_or("")
}

/// The hint for a conflict: Txn compares that did not hold, or a version that did not
/// match. `None` when `data` is neither.
fn conflict_hint(tool: &Tool, args: &Map<String, Value>, data: &Value) -> Option<String> {
    if let Ok(FailedCompares { failed }) = FailedCompares::deserialize(data) {
        let n = failed.len();
        return Some(format!("{n} compare(s) did not hold, so nothing was written: call baton_get for each key listed in `failed` below, rebuild the change on the current values, and call baton_txn again with their versions."));
    }
    let VersionConflict {
        expected_version: expected,
        actual_version: actual,
        actual_updated_by,
    } = VersionConflict::deserialize(data).ok()?;
    let written_by = actual_updated_by.as_deref().unwrap_or("another agent");
    let (ns, key) = (argument(args, "namespace"), argument(args, "key"));
    let name = tool.name;
    let delete = tool.method == DeleteParams::METHOD;
    Some(match (actual, delete) {
        (0, true) => format!(
            "{ns}/{key} does not exist (you expected version {expected}), so there is nothing to delete; call baton_get if you want to check."
        ),
        (0, false) => format!(
            "Version conflict on {ns}/{key}: it does not exist (you expected version {expected}), so nothing was written; call baton_get to check, or call {name} again with expected_version 0 to create it."
        ),
        (_, true) => format!(
            "Version conflict on {ns}/{key}: it is at version {actual}, written by {written_by} (you expected version {expected}), so nothing was deleted; call baton_get to read version {actual}, and if it should still go call baton_delete with expected_version {actual}."
        ),
        _ => format!(
            "Version conflict on {ns}/{key}: it is at version {actual}, written by {written_by} (you expected version {expected}), so nothing was written; call baton_get to read version {actual}, merge your change into it, and call {name} again with expected_version {actual}."
        ),
    })
}

/// The hint for a node lease that is not live, by the node's state.
fn node_lease_hint(args: &Map<String, Value>, owner: &str, data: &Value) -> Option<String> {
    let NodeLeaseInvalid { state, lease_owner } = NodeLeaseInvalid::deserialize(data).ok()?;
    let node = format!(
        "node {} of task {}",
        argument(args, "node_id"),
        argument(args, "task_id")
    );
    Some(match state.as_str() {
        "COMPLETED" => format!("The {node} is already completed, so there is nothing more to do for it; call baton_task_next for another node."),
        "PENDING" => format!("Your lease on the {node} lapsed and the node went back to the queue: stop working on it and call baton_task_next to take a node."),
        "RUNNING" if lease_owner.as_deref() == Some(owner) => format!(
            "The {node} is yours, but under another lease_id than the one you sent: pass the lease_id that baton_task_next gave you for it (call baton_task_next again only if you lost it)."
        ),
        "RUNNING" => format!(
            "The {node} is held by another worker ({}), not by your lease: drop this work and call baton_task_next for another node.",
            lease_owner.as_deref().unwrap_or("unknown")
        ),
        "CANCELLED" => format!("The task of the {node} was cancelled: stop working on it and call baton_task_next for other work."),
        "FAILED" => format!("The {node} has failed for good: stop working on it and call baton_task_next for other work."),
        _ => format!("Your lease on the {node} is not live: stop working on it and call baton_task_next to take a node."),
    })
}

/// The hint for a lock lease that is not live, naming its holder now, if any.
fn lock_lease_hint(tool: &Tool, data: &Value) -> Option<String> {
    let LockLeaseInvalid {
        resource_key: key,
        held_by,
    } = LockLeaseInvalid::deserialize(data).ok()?;
    let holder = match held_by {
        Some(other) => format!(" and {key} is now held by {}", other.owner),
        None => String::new(),
    };
    Some(if tool.kind == Kind::Release {
        format!("Your lease on {key} is no longer live (it expired, was released, or is not yours){holder}, so there is nothing to release; call baton_claim before you change {key} again.")
    } else {
        format!("Your lease on {key} is gone (it expired, was released, or is not yours){holder}: stop changing {key} and call baton_claim for it again before you do.")
    })
}

/// The hint for a write whose fence no longer holds: the claim it depended on was lost.
fn fenced_hint(tool: &Tool, data: &Value) -> Option<String> {
    let Fenced {
        resource_key: key,
        latest_fencing_token: latest,
        held_by,
    } = Fenced::deserialize(data).ok()?;
    let owners: Vec<String> = match held_by {
        None => Vec::new(),
        Some(Owners::One(one)) => vec![one.owner],
        Some(Owners::Many(all)) => all.into_iter().map(|o| o.owner).collect(),
    };
    let now = match owners.as_slice() {
        [] => "nobody holds it now".to_string(),
        [owner] => format!("{owner} holds it now (fencing_token {latest})"),
        owners => format!("{} hold it now (fencing_token {latest})", owners.join(", ")),
    };
    let undone = if tool.method == CompleteNodeParams::METHOD {
        "the node was not completed (it is still yours until its lease lapses)"
    } else {
        "nothing was written"
    };
    Some(format!(
        "Your claim on {key} was lost (it expired, was released or was broken) and {now}, so {undone}: stop this work, call baton_claim for {key} again, re-read what you meant to change (another agent may have changed it), and redo the change with the new fence.",
    ))
}

/// The hint for a since_seq older than the journal keeps.
fn compacted_hint(args: &Map<String, Value>, data: &Value) -> Option<String> {
    let Compacted { oldest_seq: oldest } = Compacted::deserialize(data).ok()?;
    Some(format!(
        "The journal no longer keeps the events right after since_seq {} (the oldest it keeps is seq {oldest}), so some changes cannot be replayed: read the current values you depend on with baton_get, then call baton_events with since_seq {} to follow what happens from now on.",
        args.get("since_seq").map_or_else(|| "0".to_string(), Value::to_string),
        oldest.saturating_sub(1)
    ))
}

/// `baton_task_next`'s result when a task offers the worker (`me`, with `labels`) no node
/// now: status none, the task's status, and why, told truthfully from the task's nodes:
/// held by the worker itself or by others, waiting on dependencies, held back by a delay,
/// or needing labels the worker did not give.
pub(super) fn nothing_runnable(status: &TaskStatusResult, labels: &[String], me: &str) -> Value {
    let task = status.task.status;
    if task != TaskStatus::Running {
        let why = format!(
            "The task is {}: it offers no more nodes, so stop working on it.",
            task.as_str()
        );
        return json!({"status": "none", "task_status": task, "why": why});
    }
    let state_of: HashMap<&str, NodeState> = status
        .nodes
        .iter()
        .map(|n| (n.node_id.as_str(), n.state))
        .collect();
    let unfinished = |deps: &[String]| {
        deps.iter()
            .any(|d| state_of.get(d.as_str()) != Some(&NodeState::Completed))
    };
    let (mut mine, mut others, mut delayed) = (Vec::new(), BTreeSet::new(), Vec::new());
    let (mut held_by_others, mut on_dependencies, mut unlabelled) = (0, 0, 0);
    let mut needed: BTreeSet<&str> = BTreeSet::new();
    for node in &status.nodes {
        let owner = node.lease_owner.as_deref();
        match node.state {
            NodeState::Running if owner == Some(me) => mine.push(node.node_id.as_str()),
            NodeState::Running => {
                held_by_others += 1;
                others.insert(owner.unwrap_or("another worker"));
            }
            NodeState::Pending if node.ready_at.is_some() => {
                delayed.extend(node.ready_at.as_deref())
            }
            NodeState::Pending if unfinished(&node.dependencies) => on_dependencies += 1,
            NodeState::Pending if !node.labels.iter().all(|l| labels.contains(l)) => {
                unlabelled += 1;
                let lacking = node.labels.iter().filter(|l| !labels.contains(l));
                needed.extend(lacking.map(String::as_str));
            }
            _ => {}
        }
    }
    let needed: Vec<&str> = needed.into_iter().collect();
    let mut parts = Vec::new();
    if !mine.is_empty() {
        parts.push(format!("{} held by you ({})", mine.len(), mine.join(", ")));
    }
    if held_by_others > 0 {
        let others: Vec<&str> = others.into_iter().collect();
        parts.push(format!(
            "{held_by_others} held by other workers ({})",
            others.join(", ")
        ));
    }
    if on_dependencies > 0 {
        parts.push(format!(
            "{on_dependencies} waiting on dependencies that are not completed yet"
        ));
    }
    if let Some(first) = delayed.iter().min() {
        parts.push(format!(
            "{} held back by a delay (the first until {first})",
            delayed.len()
        ));
    }
    if unlabelled > 0 {
        parts.push(format!(
            "{unlabelled} that need labels you did not give ({})",
            needed.join(", ")
        ));
    }
    let todo = if parts.is_empty() {
        "none of its nodes is runnable for you right now: call baton_task_next again.".to_string()
    } else if !mine.is_empty() && held_by_others == 0 && delayed.is_empty() && unlabelled == 0 {
        // Only the worker's own nodes stand in the way: waiting would not help.
        "finish yours with baton_task_complete (or baton_task_fail) first.".to_string()
    } else if unlabelled > 0 && parts.len() == 1 {
        format!(
            "only a worker with the labels {} takes them: pass labels that include them if you can do that work, else leave them to workers that can.",
            needed.join(", ")
        )
    } else {
        "call baton_task_next again with wait_ms to wait for one to become runnable.".into()
    };
    let why = if parts.is_empty() {
        capitalize_first(&todo)
    } else {
        format!("Of its remaining nodes: {}; {todo}", parts.join("; "))
    };
    json!({"status": "none", "task_status": task, "why": why,
        "remaining": {"held_by_you": mine.len(), "held_by_others": held_by_others,
            "waiting_on_dependencies": on_dependencies, "delayed": delayed.len(),
            "need_labels": unlabelled, "labels_needed": needed}})
}

fn capitalize_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn text_of(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

pub(super) fn ok(value: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text_of(&value))]);
    result.structured_content = Some(value);
    result
}

/// An outcome the agent must act on: `isError`, the hint (naming the next tool) as the
/// first text block and the daemon's details, if any, as a second one. No
/// `structuredContent`: a tool's outputSchema describes its success, and clients that
/// check it on errors too (the TypeScript SDK, the Inspector) would reject the result.
pub(super) fn failure(hint: String, details: Option<Value>) -> CallToolResult {
    let mut content = vec![ContentBlock::text(hint)];
    if let Some(details) = &details {
        content.push(ContentBlock::text(text_of(details)));
    }
    CallToolResult::error(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_write_says_who_holds_the_key_now_and_to_claim_it_again() {
        let tools = tools::catalogue();
        let tool = |name: &str| tools.iter().find(|t| t.name == name).unwrap();
        let refused = |tool: &Tool, held_by: Value| {
            let err = CallError::Daemon {
                code: 409,
                kind: "fenced".into(),
                message: "fenced: ...; nothing was written. Acquire file:report.md again".into(),
                data: serde_json::json!({"kind": "fenced", "resource_key": "file:report.md",
                    "latest_fencing_token": 7, "held_by": held_by}),
            };
            let result = error(tool, &Map::new(), "me", err);
            assert_eq!(result.is_error, Some(true));
            match &result.content[0] {
                ContentBlock::Text(text) => text.text.clone(),
                other => panic!("{other:?}"),
            }
        };
        let hint = refused(
            tool("baton_set"),
            serde_json::json!({"owner": "second", "fencing_token": 7}),
        );
        assert!(
            hint.starts_with("Your claim on file:report.md was lost"),
            "{hint}"
        );
        assert!(
            hint.contains("second holds it now (fencing_token 7), so nothing was written"),
            "{hint}"
        );
        assert!(
            hint.contains("call baton_claim for file:report.md again"),
            "{hint}"
        );
        let hint = refused(tool("baton_task_complete"), Value::Null);
        assert!(
            hint.contains("nobody holds it now, so the node was not completed"),
            "{hint}"
        );
        let hint = refused(
            tool("baton_publish"),
            serde_json::json!([{"owner": "r1"}, {"owner": "r2"}]),
        );
        assert!(hint.contains("r1, r2 hold it now"), "{hint}");
    }

    #[test]
    fn an_ended_session_is_told_without_the_daemons_method_names() {
        let tools = tools::catalogue();
        for name in ["baton_claim", "baton_send", "baton_task_next"] {
            let tool = tools.iter().find(|t| t.name == name).unwrap();
            let err = CallError::Daemon {
                code: 410,
                kind: "lease_invalid".into(),
                message: "the session given has ended (EndSession, expiry, takeover or its connection closing) or is not yours; register again with RegisterAgent".into(),
                data: serde_json::json!({"kind": "lease_invalid"}),
            };
            let result = error(tool, &Map::new(), "alice", err);
            let ContentBlock::Text(hint) = &result.content[0] else {
                panic!("a text hint")
            };
            assert!(!hint.text.contains("EndSession"), "{}", hint.text);
            assert!(hint.text.contains("joins again as alice"), "{}", hint.text);
        }
    }

    #[test]
    fn daemon_words_become_mcp_words() {
        assert_eq!(
            mcp_words("acquire it again with AcquireResourceLock; see data.failed, Get it"),
            "acquire it again with baton_claim; see failed, baton_get it"
        );
        assert_eq!(
            mcp_words("GetAway TaskStatus."),
            "GetAway baton_task_status."
        );
    }
}
