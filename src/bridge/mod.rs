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
mod held;
mod hints;
mod schema;
mod session;
pub mod stdio;
pub mod tools;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
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
use crate::protocol::locks::{
    AcquireResourceLockParams, AcquireResult, HeartbeatResourceLockParams, Holders, Lease,
};
use crate::protocol::state::SetParams;
use crate::protocol::tasks::{
    AcquireNextNodeParams, CompleteNodeParams, FailNodeParams, HeartbeatNodeParams,
    TaskStatusParams, TaskStatusResult,
};
use crate::protocol::Request;
use hints::{error, failure, ok};
use session::{with_notes, Session};
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
    /// The agent session this MCP session joined as (`--agent`, `baton_join`).
    session: Session,
    /// How many times the main connection was dropped: what was tied to it (the agent
    /// session, claims) ended each time.
    epoch: AtomicU64,
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
            owner_flag: owner.clone(),
            owner: OnceLock::new(),
            main: Mutex::new(None),
            parked: StdMutex::new(HashMap::new()),
            closed: tokio::sync::watch::channel(false).1,
            session: Session::new(owner),
            epoch: AtomicU64::new(0),
        }
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

    /// How many times the main connection has been dropped so far.
    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// [`Bridge::call_main_at`], sent again on a new connection when the stale one could
    /// not send it.
    async fn call_main<P: serde::Serialize + Sync + ?Sized>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Box<RawValue>, CallError> {
        self.call_main_at(method, params, true).await.0
    }

    /// Runs `method` on the session's connection, connecting (again) when needed, and says
    /// which connection answered (its epoch). With `resend`, a request that could not even
    /// be sent on a stale connection is sent once more on a new one (not a request
    /// carrying the agent session, which ended with the stale connection); a request whose
    /// answer was lost is not repeated.
    async fn call_main_at<P: serde::Serialize + Sync + ?Sized>(
        &self,
        method: &str,
        params: &P,
        resend: bool,
    ) -> (Result<Box<RawValue>, CallError>, u64) {
        let mut main = self.main.lock().await;
        // Whatever was tied to the connection ends with it.
        let dropped = |main: &mut Option<Connection>| {
            *main = None;
            self.epoch.fetch_add(1, Ordering::AcqRel);
        };
        for attempt in 0..2 {
            if main.is_none() {
                match Connection::open(&self.target).await {
                    Ok(conn) => *main = Some(conn),
                    Err(e) => return (Err(e), self.epoch()),
                }
            }
            let conn = main.as_mut().expect("connected above");
            match tokio::time::timeout(CALL_TIMEOUT, conn.call_raw(method, params)).await {
                Ok(Err(CallError::NotSent(e))) => {
                    dropped(&mut main);
                    if attempt == 1 || !resend {
                        return (Err(CallError::NotSent(e)), self.epoch());
                    }
                }
                Ok(Err(e @ CallError::Lost(_))) => {
                    dropped(&mut main);
                    return (Err(e), self.epoch());
                }
                Ok(answer) => return (answer, self.epoch()),
                Err(_) => {
                    dropped(&mut main);
                    let lost = format!("batond did not answer within {} s", CALL_TIMEOUT.as_secs());
                    return (Err(CallError::Lost(lost)), self.epoch());
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
        if tool.kind == Kind::Join {
            return self.join_tool(tool, &args, context).await;
        }
        // The bridge's own arguments are read here and never reach the daemon.
        let own: Map<String, Value> = tool
            .kind
            .bridge_params()
            .iter()
            .filter_map(|name| args.remove_entry(*name))
            .collect();
        if tool.kind == Kind::Guarded {
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
        }
        let mut ready = match self.prepare(tool, context).await {
            Ok(ready) => ready,
            Err(refused) => return refused,
        };
        let mut notes = std::mem::take(&mut ready.notes);
        if tool.kind == Kind::AsAgent && ready.session.is_none() {
            let hint = format!(
                "{} acts as an agent: call baton_join with your agent name first, then call {} again.",
                tool.name, tool.name
            );
            return with_notes(failure(hint, None), notes);
        }
        let mut sent = self.send(tool, &args, &ready, context).await;
        // A call carrying a session that has ended (batond restarted, the connection
        // dropped): nothing was done; joined again, it is made once more.
        let carried = ready.session.clone().filter(|_| tool.kind.acts_as_agent());
        if let Some(session) = carried {
            let ended = match &sent.answer {
                Err(CallError::Daemon { kind, .. }) => kind == "lease_invalid",
                Err(CallError::NotSent(_)) => true,
                _ => false,
            };
            if ended {
                self.session_refused(&session).await;
                match self.prepare(tool, context).await {
                    Ok(mut again) => {
                        notes.append(&mut again.notes);
                        if again.session.is_some() {
                            ready = again;
                            sent = self.send(tool, &args, &ready, context).await;
                        }
                    }
                    Err(refused) => return with_notes(refused, notes),
                }
            }
        }
        let answered = match &sent.answer {
            Ok(_) => true,
            Err(err) => matches!(err, CallError::Daemon { .. }),
        };
        let result = self.answer(tool, &args, &ready, sent).await;
        notes.extend(self.settle_after(context, answered).await);
        with_notes(result, notes)
    }

    /// Makes the call as `ready` says (the owner, the session), on the main connection or,
    /// when it waits, on a connection of its own.
    async fn send(
        &self,
        tool: &Tool,
        args: &Map<String, Value>,
        ready: &session::Ready,
        context: &RequestContext<RoleServer>,
    ) -> Sent {
        let mut args = args.clone();
        let owner = self.acting_as(ready, context);
        let wait_ms = |args: &Map<String, Value>, field: &str| {
            args.get(field).and_then(Value::as_u64).unwrap_or(0)
        };
        let session = ready.session.as_ref();
        let mut waiting = 0;
        match tool.kind {
            Kind::Plain | Kind::Release | Kind::Join => {}
            Kind::Claim => {
                args.insert("owner".into(), json!(owner));
                args.insert("provider".into(), json!("mcp"));
                args.insert("release_on_disconnect".into(), json!(true));
                if let Some(session) = session {
                    args.insert("session_id".into(), json!(session));
                }
                waiting = wait_ms(&args, "wait_ms");
            }
            Kind::AsAgent => {
                if let Some(session) = session {
                    args.insert("session_id".into(), json!(session));
                }
                waiting = wait_ms(&args, "wait_ms");
            }
            Kind::Wait => waiting = wait_ms(&args, "timeout_ms").max(1),
            Kind::NextNode => {
                args.insert("lease_owner".into(), json!(owner));
                if let Some(session) = session {
                    args.insert("session_id".into(), json!(session));
                }
                waiting = wait_ms(&args, "wait_ms");
            }
            Kind::Guarded => {
                args.entry("updated_by").or_insert(json!(owner));
            }
            Kind::Attributed(field) => {
                args.entry(field).or_insert(json!(owner));
            }
        }
        let params = Value::Object(args);
        if waiting > 0 {
            let answer = self
                .call_waiting(tool.method, params, waiting, context)
                .await
                .map(|done| done.map(|(result, conn)| (result, Some(conn))));
            return Sent {
                answer,
                epoch: None,
            };
        }
        // A call carrying the session is not sent again on a new connection: the session
        // ended with the old one.
        let resend = session.is_none() || !tool.kind.acts_as_agent();
        let (answer, epoch) = self.call_main_at(tool.method, &params, resend).await;
        Sent {
            answer: answer.map(|result| Some((result, None))),
            epoch: Some(epoch),
        }
    }

    /// The owner a call acts as: the joined agent's name, else the session's owner.
    fn acting_as(&self, ready: &session::Ready, context: &RequestContext<RoleServer>) -> String {
        match &ready.name {
            Some(name) => name.clone(),
            None => self.owner(context).to_string(),
        }
    }

    /// The call's answer as a result, keeping track of the claims and node leases it took
    /// or let go of.
    async fn answer(
        &self,
        tool: &Tool,
        args: &Map<String, Value>,
        ready: &session::Ready,
        sent: Sent,
    ) -> CallToolResult {
        let owner = ready
            .name
            .clone()
            .unwrap_or_else(|| self.owner.get().cloned().unwrap_or_default());
        let answer = match sent.answer {
            Ok(Some(done)) => Ok(done),
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
        };
        // A lease that is over (let go, or found gone) is no longer the session's.
        let lease = args.get("lease_id").and_then(Value::as_str);
        let over = match &answer {
            Ok(_) => {
                matches!(tool.kind, Kind::Release)
                    || [CompleteNodeParams::METHOD, FailNodeParams::METHOD].contains(&tool.method)
            }
            Err(CallError::Daemon { kind, .. }) => {
                kind == "lease_invalid"
                    && (matches!(tool.kind, Kind::Release)
                        || [
                            HeartbeatResourceLockParams::METHOD,
                            CompleteNodeParams::METHOD,
                            FailNodeParams::METHOD,
                            HeartbeatNodeParams::METHOD,
                        ]
                        .contains(&tool.method))
            }
            Err(_) => false,
        };
        if let (true, Some(lease)) = (over, lease) {
            // The connection a waited-for claim parked it on can go.
            self.parked
                .lock()
                .expect("parked connections")
                .remove(lease);
            self.let_go(lease).await;
        }
        if let Ok((result, conn)) = &answer {
            self.keep_track(tool, result, conn.is_some(), ready, sent.epoch)
                .await;
        }
        // Nothing runnable in one task: say why.
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
                .ok(),
            None => None,
        };
        match answer
            .and_then(|(result, conn)| self.success(tool, args, &owner, &result, conn, task_status))
        {
            Ok(result) => result,
            Err(err) => error(tool, args, &owner, err),
        }
    }

    /// Records what a call took that ends with the session or the main connection: a
    /// claim (on the main connection of `epoch`, or one of its own when it `waited`), a
    /// node lease taken under the session.
    async fn keep_track(
        &self,
        tool: &Tool,
        result: &RawValue,
        waited: bool,
        ready: &session::Ready,
        epoch: Option<u64>,
    ) {
        match tool.kind {
            Kind::Claim => {
                if let Ok(AcquireResult::Acquired(lease)) =
                    read::<AcquireResourceLockParams>(result)
                {
                    if let Some(lease_id) = lease.lease_id {
                        let epoch = if waited { None } else { epoch };
                        self.held_claim(lease_id, lease.resource_key, ready.session.clone(), epoch)
                            .await;
                    }
                }
            }
            Kind::NextNode => {
                if let (Ok(Some(node)), Some(session)) =
                    (read::<AcquireNextNodeParams>(result), &ready.session)
                {
                    self.held_node(node.lease_id, node.task_id, node.node_id, session.clone())
                        .await;
                }
            }
            _ => {}
        }
    }

    /// The tool's result: the daemon's result as it sent it (as structuredContent and its
    /// text), and what the bridge acts on read as the method's result type. `conn` is the
    /// connection of a call that waited.
    fn success(
        &self,
        tool: &Tool,
        args: &Map<String, Value>,
        owner: &str,
        result: &RawValue,
        conn: Option<Connection>,
        task_status: Option<TaskStatusResult>,
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
            Kind::NextNode => {
                if read::<AcquireNextNodeParams>(result)?.is_none() {
                    let labels: Vec<String> = args
                        .get("labels")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|l| l.as_str().map(str::to_string))
                        .collect();
                    return Ok(ok(match task_status {
                        Some(status) => hints::nothing_runnable(&status, &labels, owner),
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

/// A daemon result, with the connection of a call that waited for it.
type Done = (Box<RawValue>, Option<Connection>);

/// A call's answer (None: cancelled), and the main connection's epoch when it answered
/// there.
struct Sent {
    answer: Result<Option<Done>, CallError>,
    epoch: Option<u64>,
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
            .with_instructions(tools::instructions(
                &self.groups,
                self.owner_flag.as_deref(),
            ))
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
