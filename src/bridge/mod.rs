//! `mcp-bridge`: an MCP server over stdio whose tools are calls on batond's socket.
//!
//! One bridge process serves one MCP session. It names the session's owner once (from
//! `--owner`, else the client's name plus a short random suffix) and claims every lock
//! with `release_on_disconnect`, on connections that live as long as the session, so a
//! client that closes or crashes frees its locks at once. Calls that wait (a claim with
//! `wait_ms`, `baton_wait`, `baton_task_next` with `wait_ms`) run on a connection of
//! their own, so a wait never holds up other calls, and closing that connection is how a
//! cancelled wait ends in the daemon.

pub mod tools;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex as StdMutex, OnceLock};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};
use tokio::sync::Mutex;

use crate::client::{CallError, Connection};
use tools::{Group, Kind, Tool};

/// How long a call that does not wait may take before the bridge gives up on the daemon.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a waiting call reports progress, when the client asked for it.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

pub struct Bridge {
    socket: PathBuf,
    tools: Vec<Tool>,
    groups: Vec<Group>,
    owner_flag: Option<String>,
    owner: OnceLock<String>,
    /// The session's connection for calls that answer at once.
    main: Mutex<Option<Connection>>,
    /// Connections on which a waited-for claim got its lock, by lease id: they stay open
    /// while the lease lives (closing one would end its lease as abandoned).
    parked: StdMutex<HashMap<String, Connection>>,
}

impl Bridge {
    pub fn new(socket: PathBuf, groups: Vec<Group>, owner: Option<String>) -> Bridge {
        let tools = tools::catalogue()
            .into_iter()
            .filter(|t| groups.contains(&t.group))
            .collect();
        Bridge {
            socket,
            tools,
            groups,
            owner_flag: owner,
            owner: OnceLock::new(),
            main: Mutex::new(None),
            parked: StdMutex::new(HashMap::new()),
        }
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
    async fn call_main(&self, method: &str, params: Value) -> Result<Value, CallError> {
        let mut main = self.main.lock().await;
        for attempt in 0..2 {
            if main.is_none() {
                *main = Some(Connection::connect(&self.socket).await?);
            }
            let conn = main.as_mut().expect("connected above");
            match tokio::time::timeout(CALL_TIMEOUT, conn.call(method, &params)).await {
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
    ) -> Result<Option<(Value, Connection)>, CallError> {
        let mut conn = Connection::connect(&self.socket).await?;
        let started = Instant::now();
        let progress = context.meta.get_progress_token();
        let answer = {
            let call = conn.call(method, &params);
            tokio::pin!(call);
            let mut ticker = tokio::time::interval(PROGRESS_EVERY);
            ticker.tick().await;
            loop {
                tokio::select! {
                    answer = &mut call => break answer,
                    // Dropping the connection ends the wait in the daemon.
                    _ = context.ct.cancelled() => return Ok(None),
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
        answer.map(|value| Some((value, conn)))
    }

    async fn run(
        &self,
        tool: &Tool,
        mut args: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let owner = self.owner(context).to_string();
        let wait_ms = |args: &Map<String, Value>, field: &str| {
            args.get(field).and_then(Value::as_u64).unwrap_or(0)
        };
        let mut waiting = 0;
        match tool.kind {
            Kind::Plain | Kind::Release => {}
            Kind::Claim => {
                args.insert("owner".into(), json!(owner));
                args.insert("provider".into(), json!("mcp"));
                args.insert("release_on_disconnect".into(), json!(true));
                waiting = wait_ms(&args, "wait_ms");
            }
            Kind::Wait => waiting = wait_ms(&args, "timeout_ms").max(1),
            Kind::NextNode => {
                args.insert("lease_owner".into(), json!(owner));
                waiting = wait_ms(&args, "wait_ms");
            }
            Kind::Guarded => {
                let force = args.remove("force").and_then(|f| f.as_bool()) == Some(true);
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
                Ok(Some((value, conn))) => {
                    if tool.kind == Kind::Claim && value["status"] == "acquired" {
                        if let Some(lease) = value["lease_id"].as_str() {
                            self.parked
                                .lock()
                                .expect("parked connections")
                                .insert(lease.to_string(), conn);
                        }
                    }
                    Ok(value)
                }
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
            self.call_main(tool.method, params).await
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
        match answer {
            Ok(value) => self.success(tool, value),
            Err(err) => self.error(tool, &args, err),
        }
    }

    fn success(&self, tool: &Tool, value: Value) -> CallToolResult {
        match tool.kind {
            Kind::Claim if value["status"] == "busy" => {
                let holder = &value["held_by"];
                let hint = format!(
                    "{} is busy: held by {} until {}{}. Work on something else and come back, call baton_wait with a timeout_ms to wait until it is free, or call baton_claim again with wait_ms to queue for it.",
                    value["resource_key"].as_str().unwrap_or(""),
                    holder["owner"].as_str().unwrap_or("another agent"),
                    holder["expires_at"].as_str().unwrap_or("its lease ends"),
                    match value["conflicting_key"].as_str() {
                        Some(k) if Some(k) != value["resource_key"].as_str() => format!(" (through its lock on {k})"),
                        _ => String::new(),
                    }
                );
                return failure(hint, Some(value));
            }
            Kind::NextNode => {
                let value = match value {
                    Value::Object(mut node) => {
                        node.insert("status".into(), json!("acquired"));
                        Value::Object(node)
                    }
                    _ => json!({"status": "none"}),
                };
                return ok(value);
            }
            _ => {}
        }
        ok(value)
    }

    fn error(&self, tool: &Tool, args: &Map<String, Value>, err: CallError) -> CallToolResult {
        let arg = |name: &str| args.get(name).and_then(Value::as_str).unwrap_or("");
        match err {
            CallError::Unreachable { path, source } => failure(
                format!(
                    "batond is not running at {} ({source}). Start it with `batond` (or `cargo run --release --bin batond` in the Baton checkout, or `systemctl --user start batond`), then retry {}.",
                    path.display(),
                    tool.name
                ),
                None,
            ),
            CallError::NotSent(e) => failure(
                format!("The connection to batond closed ({e}); batond may be restarting. Retry {} in a moment.", tool.name),
                None,
            ),
            CallError::Lost(why) => failure(
                format!(
                    "{why}; the outcome of {} is unknown. Check it (baton_get, baton_lock_status or baton_task_status) before retrying.",
                    tool.name
                ),
                None,
            ),
            CallError::Daemon {
                kind,
                message,
                data,
                ..
            } => {
                let hint = match kind.as_str() {
                    "conflict" if data.get("failed").is_some() => format!(
                        "{message} Call baton_get for each failed compare, rebuild the transaction on the current values, and retry baton_txn with their versions."
                    ),
                    "conflict" => {
                        let actual = data["actual_version"].as_u64().unwrap_or(0);
                        let (ns, key) = (arg("namespace"), arg("key"));
                        if actual == 0 && tool.method == "Delete" {
                            format!(
                                "{ns}/{key} does not exist (you expected version {}): there is nothing to delete. Call baton_get to check.",
                                data["expected_version"]
                            )
                        } else if actual == 0 {
                            format!(
                                "Version conflict on {ns}/{key}: it does not exist (you expected version {}). Call baton_get to check, then retry {} with expected_version 0 to create it.",
                                data["expected_version"], tool.name
                            )
                        } else {
                            format!(
                                "Version conflict on {ns}/{key}: it is at version {actual}, written by {} (you expected version {}). Call baton_get to read version {actual}, merge your change, and retry {} with expected_version {actual}.",
                                data["actual_updated_by"].as_str().unwrap_or("another agent"),
                                data["expected_version"],
                                tool.name
                            )
                        }
                    }
                    "lease_invalid" if tool.group == Group::Tasks => format!(
                        "{message} Your lease on this node is gone (it lapsed and the node went back to the queue, or the task was cancelled): stop working on it and call baton_task_next for a node."
                    ),
                    "lease_invalid" => format!(
                        "{message} Your lease on {} is gone (expired, released or someone else's): stop changing it and call baton_claim again before you do.",
                        arg("resource_key")
                    ),
                    "not_found" => format!(
                        "{message} Check the id: baton_task_status and baton_locks show what exists."
                    ),
                    _ => message,
                };
                failure(hint, Some(json!({"error": data})))
            }
        }
    }
}

fn text_of(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn ok(value: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text_of(&value))]);
    result.structured_content = Some(value);
    result
}

/// A business outcome the agent must act on: `isError`, with a hint naming the next call.
fn failure(hint: String, details: Option<Value>) -> CallToolResult {
    let mut content = vec![ContentBlock::text(hint.clone())];
    if let Some(details) = &details {
        content.push(ContentBlock::text(text_of(details)));
    }
    let mut result = CallToolResult::error(content);
    let mut structured = match details {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    structured.insert("hint".into(), json!(hint));
    result.structured_content = Some(Value::Object(structured));
    result
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        let groups: Vec<&str> = self.groups.iter().map(|g| g.name()).collect();
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("baton-mcp-bridge", env!("CARGO_PKG_VERSION"))
                    .with_title(format!("Baton ({})", groups.join(", "))),
            )
            .with_instructions(tools::INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
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
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool {:?}; this bridge serves: {} (start it with --tools all for every group)",
                    request.name,
                    names.join(", ")
                ),
                None,
            ));
        };
        let args = request.arguments.unwrap_or_default();
        tool.check_arguments(&args)
            .map_err(|message| McpError::invalid_params(message, None))?;
        Ok(self.run(tool, args, &context).await.into())
    }
}
