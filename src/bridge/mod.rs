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
mod hints;
mod schema;
pub mod stdio;
pub mod tools;

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, OnceLock};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::sync::Mutex;

use crate::client::{read, read_as, CallError, Connection, Target};
use crate::protocol::agents::RegisterAgentParams;
use crate::protocol::locks::{AcquireResourceLockParams, AcquireResult, Holders, Lease};
use crate::protocol::state::SetParams;
use crate::protocol::tasks::{AcquireNextNodeParams, TaskStatus, TaskStatusParams};
use crate::protocol::Request;
use hints::{error, failure, ok};
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
        let join = RegisterAgentParams {
            name: name.clone(),
            role: None,
            metadata: None,
            ttl_secs: Some(agent::JOIN_TTL_SECS),
            release_on_disconnect: true,
            takeover: false,
            idempotency_key: None,
        };
        match self.request(&join).await {
            Ok(r) => {
                let joined = agent::Joined::new(self.target.clone(), r.name, r.session_id);
                *self.joined.lock().expect("joined agent") = Some(joined);
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

    /// Sends the bridge's own `request` on the session's connection (see `call_main`) and
    /// reads its result.
    async fn request<R: Request + Sync>(&self, request: &R) -> Result<R::Result, CallError> {
        let result = self.call_main(R::METHOD, request).await?;
        read::<R>(&result)
    }

    /// Runs `method` on the session's connection, connecting (again) when needed. A
    /// request that could not even be sent on a stale connection is sent once more on a
    /// new one; a request whose answer was lost is not repeated.
    async fn call_main<P: serde::Serialize + Sync + ?Sized>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Box<RawValue>, CallError> {
        let mut main = self.main.lock().await;
        for attempt in 0..2 {
            if main.is_none() {
                *main = Some(Connection::open(&self.target).await?);
            }
            let conn = main.as_mut().expect("connected above");
            match tokio::time::timeout(CALL_TIMEOUT, conn.call_raw(method, params)).await {
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
                    let what = if tool.method == SetParams::METHOD {
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
            self.call_main(tool.method, &params)
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
        // Nothing runnable in one task: say whether that task is over.
        let ask_about = match (&answer, args.get("task_id").and_then(Value::as_str)) {
            (Ok((result, _)), Some(task_id))
                if tool.kind == Kind::NextNode && result.get() == "null" =>
            {
                Some(task_id.to_string())
            }
            _ => None,
        };
        let task_status = match ask_about {
            Some(task_id) => self
                .request(&TaskStatusParams {
                    task_id,
                    limit: None,
                    after: None,
                })
                .await
                .ok()
                .map(|r| r.task.status),
            None => None,
        };
        match answer.and_then(|(result, conn)| self.success(tool, &result, conn, task_status)) {
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
        task_status: Option<TaskStatus>,
    ) -> Result<CallToolResult, CallError> {
        let mut value: Value = read_as(tool.method, result)?;
        match tool.kind {
            Kind::Claim => match read::<AcquireResourceLockParams>(result)? {
                AcquireResult::Acquired(lease) => {
                    with_fence(&mut value, &lease);
                    // A claim that waited got its lock on a connection of its own: it
                    // stays open while the lease lives.
                    if let (Some(lease), Some(conn)) = (lease.lease_id, conn) {
                        self.parked
                            .lock()
                            .expect("parked connections")
                            .insert(lease, conn);
                    }
                }
                AcquireResult::AlreadyHeld(lease) => with_fence(&mut value, &lease),
                AcquireResult::Busy {
                    resource_key,
                    held_by,
                    conflicting_key,
                } => {
                    let (owner, until) = match held_by.first() {
                        Some(h) => (h.owner.as_str(), h.expires_at.as_str()),
                        None => ("another agent", "its lease ends"),
                    };
                    let others = match &held_by {
                        Holders::Many(all) if all.len() > 1 => {
                            format!(" and {} more", all.len() - 1)
                        }
                        _ => String::new(),
                    };
                    let hint = format!(
                        "{resource_key} is busy, held by {owner}{others} until {until}{}: work on something else and come back, call baton_wait with a timeout_ms to wait until it is free, or call baton_claim again with wait_ms to queue for it.",
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
            },
            Kind::Join => {
                let joined = read::<RegisterAgentParams>(result)?;
                let agent = agent::Joined::new(self.target.clone(), joined.name, joined.session_id);
                // The session id stays with the bridge: the model acts through the tools.
                if let Value::Object(map) = &mut value {
                    map.remove("session_id");
                }
                *self.joined.lock().expect("joined agent") = Some(agent);
            }
            Kind::NextNode => {
                if read::<AcquireNextNodeParams>(result)?.is_none() {
                    return Ok(ok(match task_status {
                        Some(status) => json!({"status": "none", "task_status": status}),
                        None => json!({"status": "none"}),
                    }));
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

/// Adds to a claim's result the `fence` the model passes to the writes that depend on it
/// (`{resource_key, lease_id}`, as batond takes it), when the answer carries the lease id.
fn with_fence(claim: &mut Value, lease: &Lease) {
    if let (Value::Object(claim), Some(lease_id)) = (claim, &lease.lease_id) {
        claim.insert(
            "fence".into(),
            json!({"resource_key": lease.resource_key, "lease_id": lease_id}),
        );
    }
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
