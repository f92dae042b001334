//! `mcp-bridge`: an MCP server over stdio whose tools are calls on batond's socket.
//!
//! One bridge process serves one MCP session. It names the session's owner once (from
//! `--agent`/`BATON_AGENT`, else the client's name plus a short random suffix) and claims every lock
//! with `release_on_disconnect`, on connections that live as long as the session, so a
//! client that closes or crashes frees its locks at once. Calls that wait (a claim with
//! `wait_ms`, `baton_wait`, `baton_task_next` with `wait_ms`) run on a connection of
//! their own, so a wait never holds up other calls, and closing that connection is how a
//! cancelled wait ends in the daemon.

mod agent;
mod catalogue;
mod schema;
pub mod stdio;
pub mod tools;

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, OnceLock};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::sync::Mutex;

use crate::client::{read, CallError, Connection, Target};
use crate::protocol::agents::RegisterAgentResult;
use crate::protocol::locks::{AcquireResult, HeldBy, Lease};
use crate::protocol::tasks::AcquiredNode;
use tools::{Group, Kind, Tool};

/// How long a call that does not wait may take before the bridge gives up on the daemon.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a waiting call reports progress, when the client asked for it.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

pub struct Bridge {
    /// batond's address and the token to authenticate with.
    target: Target,
    tools: Vec<Tool>,
    groups: Vec<Group>,
    owner_flag: Option<String>,
    owner: OnceLock<String>,
    /// The session's connection for calls that answer at once.
    main: Mutex<Option<Connection>>,
    /// Connections on which a waited-for claim got its lock, by lease id: they stay open
    /// while the lease lives (closing one would end its lease as abandoned).
    parked: StdMutex<HashMap<String, Connection>>,
    /// Becomes true when the client's stdin ends: waiting calls stop at once.
    closed: tokio::sync::watch::Receiver<bool>,
    /// The agent this session joined as (`baton_join`).
    joined: StdMutex<Option<agent::Joined>>,
    /// Whether the `--agent` join was tried already.
    join_tried: std::sync::atomic::AtomicBool,
}

impl Bridge {
    pub fn new(target: Target, groups: Vec<Group>, owner: Option<String>) -> Bridge {
        let tools = tools::catalogue()
            .into_iter()
            .filter(|t| groups.contains(&t.group))
            .collect();
        Bridge {
            target,
            tools,
            groups,
            owner_flag: owner,
            owner: OnceLock::new(),
            main: Mutex::new(None),
            parked: StdMutex::new(HashMap::new()),
            closed: tokio::sync::watch::channel(false).1,
            joined: StdMutex::new(None),
            join_tried: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// With `--agent` and the agents tools, the session joins as that agent before its first
    /// call (once; if the name is taken it goes on without a session, under that name).
    async fn join_as_flagged_agent(&self) {
        let Some(name) = &self.owner_flag else { return };
        if self
            .join_tried
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let params = json!({"name": name, "release_on_disconnect": true,
            "ttl_secs": agent::JOIN_TTL_SECS});
        match self.call_main("RegisterAgent", params).await {
            Ok(result) => {
                if let Ok(r) = read::<RegisterAgentResult>("RegisterAgent", &result) {
                    let joined = agent::Joined::new(self.target.clone(), r.name, r.session_id);
                    *self.joined.lock().expect("joined agent") = Some(joined);
                }
            }
            Err(err) => {
                tracing::warn!(%err, "cannot join as agent {name}; baton_join can try again")
            }
        }
    }

    /// The joined agent's name and session, if the session joined.
    fn joined(&self) -> Option<(String, String)> {
        let joined = self.joined.lock().expect("joined agent");
        joined
            .as_ref()
            .map(|j| (j.name.clone(), j.session_id.clone()))
    }

    /// Ends waiting calls when `closed` becomes true (the client's input has ended).
    pub fn closing_on(mut self, closed: tokio::sync::watch::Receiver<bool>) -> Bridge {
        self.closed = closed;
        self
    }

    /// The session's owner identity, fixed at the first call.
    fn owner(&self, context: &RequestContext<RoleServer>) -> &str {
        self.owner.get_or_init(|| {
            if let Some(owner) = &self.owner_flag {
                return owner.clone();
            }
            let client = context
                .client_info()
                .map(|info| info.name)
                .filter(|name| !name.trim().is_empty())
                .unwrap_or_else(|| "mcp".into());
            let client: String = client
                .trim()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                        c
                    } else {
                        '-'
                    }
                })
                .take(64)
                .collect();
            let suffix = uuid::Uuid::new_v4().simple().to_string();
            format!("{client}-{}", &suffix[..6])
        })
    }

    fn rmcp_tool(tool: &Tool) -> rmcp::model::Tool {
        let annotations = ToolAnnotations::with_title(tool.title)
            .read_only(tool.read_only)
            .idempotent(tool.idempotent)
            .destructive(tool.destructive)
            .open_world(false);
        let output = match &tool.output {
            Value::Object(map) => map.clone(),
            _ => Map::new(),
        };
        rmcp::model::Tool::new(tool.name, tool.description, Arc::new(tool.input_schema()))
            .with_title(tool.title)
            .with_raw_output_schema(Arc::new(output))
            .with_annotations(annotations)
    }

    /// Runs `method` on the session's connection, connecting (again) when needed. A
    /// request that could not even be sent on a stale connection is sent once more on a
    /// new one; a request whose answer was lost is not repeated.
    async fn call_main(&self, method: &str, params: Value) -> Result<Box<RawValue>, CallError> {
        let mut main = self.main.lock().await;
        for attempt in 0..2 {
            if main.is_none() {
                *main = Some(Connection::open(&self.target).await?);
            }
            let conn = main.as_mut().expect("connected above");
            match tokio::time::timeout(CALL_TIMEOUT, conn.call_raw(method, &params)).await {
                Ok(Err(CallError::NotSent(e))) => {
                    *main = None;
                    if attempt == 1 {
                        return Err(CallError::NotSent(e));
                    }
                }
                Ok(Err(e @ CallError::Lost(_))) => {
                    *main = None;
                    return Err(e);
                }
                Ok(answer) => return answer,
                Err(_) => {
                    *main = None;
                    return Err(CallError::Lost(format!(
                        "batond did not answer within {} s",
                        CALL_TIMEOUT.as_secs()
                    )));
                }
            }
        }
        unreachable!("the loop returns on its second attempt")
    }

    /// Runs a waiting `method` on a connection of its own, reporting progress when the
    /// client asked for it and ending the wait (by closing the connection) when the
    /// client cancels. Returns the answer and the connection it came on.
    async fn call_waiting(
        &self,
        method: &str,
        params: Value,
        wait_ms: u64,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<(Box<RawValue>, Connection)>, CallError> {
        let mut conn = Connection::open(&self.target).await?;
        let started = Instant::now();
        let progress = context.meta.get_progress_token();
        let mut closed = self.closed.clone();
        let answer = {
            let call = conn.call_raw(method, &params);
            tokio::pin!(call);
            let mut ticker = tokio::time::interval(PROGRESS_EVERY);
            ticker.tick().await;
            loop {
                tokio::select! {
                    answer = &mut call => break answer,
                    // Dropping the connection ends the wait in the daemon.
                    _ = context.ct.cancelled() => return Ok(None),
                    // The client is gone: nobody will read the answer.
                    _ = async { closed.wait_for(|closed| *closed).await.map(|_| ()) } => return Ok(None),
                    _ = ticker.tick(), if progress.is_some() => {
                        let waited = started.elapsed().as_millis() as f64;
                        let token = progress.clone().expect("checked by the guard");
                        let note = ProgressNotificationParam::new(token, waited)
                            .with_total(wait_ms as f64)
                            .with_message(format!("waited {} ms of {wait_ms}", waited as u64));
                        let _ = context.peer.notify_progress(note).await;
                    }
                }
            }
        };
        answer.map(|result| Some((result, conn)))
    }

    async fn run(
        &self,
        tool: &Tool,
        mut args: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        if self.owner_flag.is_some() && self.groups.contains(&Group::Agents) {
            self.join_as_flagged_agent().await;
        }
        let joined = self.joined();
        let owner = match &joined {
            Some((name, _)) => name.clone(),
            None => self.owner(context).to_string(),
        };
        let session = joined.map(|(_, session_id)| session_id);
        let wait_ms = |args: &Map<String, Value>, field: &str| {
            args.get(field).and_then(Value::as_u64).unwrap_or(0)
        };
        // The bridge's own arguments are read here and never reach the daemon.
        let own: Map<String, Value> = tool
            .kind
            .bridge_params()
            .iter()
            .filter_map(|name| args.remove_entry(*name))
            .collect();
        let mut waiting = 0;
        match tool.kind {
            Kind::Plain | Kind::Release => {}
            Kind::Claim => {
                args.insert("owner".into(), json!(owner));
                args.insert("provider".into(), json!("mcp"));
                args.insert("release_on_disconnect".into(), json!(true));
                if let Some(session) = &session {
                    args.insert("session_id".into(), json!(session));
                }
                waiting = wait_ms(&args, "wait_ms");
            }
            Kind::Join => {
                args.insert("release_on_disconnect".into(), json!(true));
                args.insert("ttl_secs".into(), json!(agent::JOIN_TTL_SECS));
            }
            Kind::AsAgent => {
                let Some(session) = &session else {
                    return failure(
                        format!(
                            "{} acts as an agent: call baton_join with your agent name first, then call {} again.",
                            tool.name, tool.name
                        ),
                        None,
                    );
                };
                args.insert("session_id".into(), json!(session));
                waiting = wait_ms(&args, "wait_ms");
            }
            Kind::Wait => waiting = wait_ms(&args, "timeout_ms").max(1),
            Kind::NextNode => {
                args.insert("lease_owner".into(), json!(owner));
                if let Some(session) = &session {
                    args.insert("session_id".into(), json!(session));
                }
                waiting = wait_ms(&args, "wait_ms");
            }
            Kind::Guarded => {
                let force = own.get("force").and_then(Value::as_bool) == Some(true);
                if !force && !args.contains_key("expected_version") {
                    let what = if tool.method == "Set" {
                        "write"
                    } else {
                        "delete"
                    };
                    return failure(
                        format!(
                            "{} needs expected_version so it cannot {what} over someone else's change: call baton_get for {}/{} and pass its version (0 if found is false), or pass force: true to {what} whatever is there.",
                            tool.name,
                            args["namespace"].as_str().unwrap_or(""),
                            args["key"].as_str().unwrap_or("")
                        ),
                        None,
                    );
                }
                args.entry("updated_by").or_insert(json!(owner));
            }
            Kind::Attributed(field) => {
                args.entry(field).or_insert(json!(owner));
            }
        }
        let params = Value::Object(args.clone());
        let answer = if waiting > 0 {
            match self
                .call_waiting(tool.method, params, waiting, context)
                .await
            {
                Ok(Some((result, conn))) => Ok((result, Some(conn))),
                Ok(None) => {
                    return failure(
                        format!(
                            "{} was cancelled; nothing is held on its behalf.",
                            tool.name
                        ),
                        None,
                    )
                }
                Err(e) => Err(e),
            }
        } else {
            self.call_main(tool.method, params)
                .await
                .map(|result| (result, None))
        };
        if tool.kind == Kind::Release {
            let lease_over = match &answer {
                Ok(_) => true,
                Err(CallError::Daemon { kind, .. }) => kind == "lease_invalid",
                Err(_) => false,
            };
            if let (true, Some(lease)) = (lease_over, args.get("lease_id").and_then(Value::as_str))
            {
                // The lease is over: the connection a waited-for claim parked it on can go.
                self.parked
                    .lock()
                    .expect("parked connections")
                    .remove(lease);
            }
        }
        match answer.and_then(|(result, conn)| self.success(tool, &result, conn)) {
            Ok(result) => result,
            Err(err) => error(tool, &args, &owner, err),
        }
    }

    /// The tool's result: the daemon's result as it sent it (as structuredContent and its
    /// text), and what the bridge acts on read as the method's result type. `conn` is the
    /// connection of a call that waited.
    fn success(
        &self,
        tool: &Tool,
        result: &RawValue,
        conn: Option<Connection>,
    ) -> Result<CallToolResult, CallError> {
        let mut value: Value = read(tool.method, result)?;
        match tool.kind {
            Kind::Claim => match read(tool.method, result)? {
                AcquireResult::Acquired(Lease {
                    lease_id: Some(lease),
                    ..
                }) => {
                    // A claim that waited got its lock on a connection of its own: it
                    // stays open while the lease lives.
                    if let Some(conn) = conn {
                        self.parked
                            .lock()
                            .expect("parked connections")
                            .insert(lease, conn);
                    }
                }
                AcquireResult::Busy {
                    resource_key,
                    held_by,
                    conflicting_key,
                } => {
                    let hint = format!(
                        "{resource_key} is busy, held by {} until {}{}: work on something else and come back, call baton_wait with a timeout_ms to wait until it is free, or call baton_claim again with wait_ms to queue for it.",
                        held_by.owner,
                        held_by.expires_at,
                        if conflicting_key != resource_key {
                            format!(" (through its lock on {conflicting_key})")
                        } else {
                            String::new()
                        }
                    );
                    // status busy is in baton_claim's outputSchema: the answer may stay
                    // structured content, for clients that read it.
                    let mut result = failure(hint, None);
                    result.structured_content = Some(value);
                    return Ok(result);
                }
                _ => {}
            },
            Kind::Join => {
                let joined: RegisterAgentResult = read(tool.method, result)?;
                let agent = agent::Joined::new(self.target.clone(), joined.name, joined.session_id);
                // The session id stays with the bridge: the model acts through the tools.
                if let Value::Object(map) = &mut value {
                    map.remove("session_id");
                }
                *self.joined.lock().expect("joined agent") = Some(agent);
            }
            Kind::NextNode => {
                if read::<Option<AcquiredNode>>(tool.method, result)?.is_none() {
                    return Ok(ok(json!({"status": "none"})));
                }
                if let Value::Object(node) = &mut value {
                    node.insert("status".into(), json!("acquired"));
                }
            }
            _ => {}
        }
        Ok(ok(value))
    }
}

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
fn error(tool: &Tool, args: &Map<String, Value>, owner: &str, err: CallError) -> CallToolResult {
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
        "lease_invalid" if tool.group == Group::Tasks => {
            node_lease_hint(args, owner, &data).unwrap_or_else(unexplained)
        }
        "lease_invalid" => lock_lease_hint(tool, &data).unwrap_or_else(unexplained),
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
    Some(match (actual, tool.method) {
        (0, "Delete") => format!(
            "{ns}/{key} does not exist (you expected version {expected}), so there is nothing to delete; call baton_get if you want to check."
        ),
        (0, _) => format!(
            "Version conflict on {ns}/{key}: it does not exist (you expected version {expected}), so nothing was written; call baton_get to check, or call {name} again with expected_version 0 to create it."
        ),
        (_, "Delete") => format!(
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

/// The hint for a since_seq older than the journal keeps.
fn compacted_hint(args: &Map<String, Value>, data: &Value) -> Option<String> {
    let Compacted { oldest_seq: oldest } = Compacted::deserialize(data).ok()?;
    Some(format!(
        "The journal no longer keeps the events right after since_seq {} (the oldest it keeps is seq {oldest}), so some changes cannot be replayed: read the current values you depend on with baton_get, then call baton_events with since_seq {} to follow what happens from now on.",
        args.get("since_seq").map_or_else(|| "0".to_string(), Value::to_string),
        oldest.saturating_sub(1)
    ))
}

fn text_of(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn ok(value: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text_of(&value))]);
    result.structured_content = Some(value);
    result
}

/// An outcome the agent must act on: `isError`, the hint (naming the next tool) as the
/// first text block and the daemon's details, if any, as a second one. No
/// `structuredContent`: a tool's outputSchema describes its success, and clients that
/// check it on errors too (the TypeScript SDK, the Inspector) would reject the result.
fn failure(hint: String, details: Option<Value>) -> CallToolResult {
    let mut content = vec![ContentBlock::text(hint)];
    if let Some(details) = &details {
        content.push(ContentBlock::text(text_of(details)));
    }
    CallToolResult::error(content)
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        let groups: Vec<&str> = self.groups.iter().map(|g| g.name()).collect();
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("baton-mcp-bridge", env!("CARGO_PKG_VERSION"))
                    .with_title(format!("Baton ({})", groups.join(", "))),
            )
            .with_instructions(tools::instructions(&self.groups))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        if let Some(cursor) = request.and_then(|r| r.cursor) {
            // Every tool fits on the one page, so no cursor was ever handed out.
            return Err(McpError::invalid_params(
                format!("unknown cursor {cursor:?}: tools/list has a single page; call it without a cursor"),
                None,
            ));
        }
        Ok(ListToolsResult::with_all_items(
            self.tools.iter().map(Bridge::rmcp_tool).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(tool) = self.tools.iter().find(|t| t.name == request.name) else {
            let names: Vec<&str> = self.tools.iter().map(|t| t.name).collect();
            if request.name.is_empty() {
                return Err(McpError::invalid_params(
                    format!("tools/call needs params.name, one of: {}", names.join(", ")),
                    None,
                ));
            }
            let more = if Group::ALL.iter().all(|g| self.groups.contains(g)) {
                ""
            } else {
                " (start mcp-bridge with --tools all for every group)"
            };
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool {:?}; this bridge serves: {}{more}",
                    request.name,
                    names.join(", ")
                ),
                None,
            ));
        };
        let args = request.arguments.unwrap_or_default();
        // Bad arguments are the model's to correct: a result saying what to send instead.
        if let Err(hint) = tool.check_arguments(&args) {
            return Ok(failure(hint, None).into());
        }
        Ok(self.run(tool, args, &context).await.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
