//! The agent session of an MCP session, through batond restarts and name clashes.
//!
//! With `--agent NAME` the bridge joins as NAME before the session's first call, and
//! tries again at each call until it has joined (batond may be down at first). A name
//! with another live session is refused loudly: the call is not made, and its result
//! says who has the name, since when, and what to do. A session ends with the main
//! connection it was registered on (`release_on_disconnect`), or when batond says it has
//! ended (a heartbeat, or a call carrying it, answered 410): the bridge then ends it
//! explicitly (on a shared database it outlives its daemon's restart), joins again under
//! the same name, once, and the next result says so and names what ended with the old
//! session: the claims and node leases the bridge took under it, which it keeps track of.
//! Claims taken with no session, on a main connection that dropped, are told the same way.
//!
//! `baton_join` with the session's own name is a no-op; another name is refused (with
//! `--agent` the name is fixed; without it, one MCP session is one agent, and joining
//! again would orphan what the first name holds).

use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::{json, Map, Value};
use tokio::sync::Mutex;

use super::agent::{Joined, JOIN_TTL_SECS};
pub(super) use super::held::{with_notes, Note};
use super::held::{Claim, Held, Lost, Node};
use super::hints::{error, failure, ok};
use super::tools::{Group, Tool};
use super::Bridge;
use crate::client::{read, CallError};
use crate::protocol::agents::{
    AgentHeartbeatParams, EndSessionParams, RegisterAgentParams, RegisterAgentResult,
};
use crate::protocol::Request;

pub(super) struct Session {
    state: Mutex<State>,
}

impl Session {
    /// A session that joins as `name` (`--agent`) at its first call, or (None) only once
    /// the model calls `baton_join`.
    pub(super) fn new(name: Option<String>) -> Session {
        Session {
            state: Mutex::new(State {
                name,
                ..State::default()
            }),
        }
    }
}

#[derive(Default)]
struct State {
    /// The name the session joins (again) under: `--agent`, or what `baton_join` chose.
    name: Option<String>,
    live: Option<Joined>,
    /// A session that ended without the bridge ending it: still to end explicitly (a
    /// shared database keeps it past its daemon's restart) and to tell the model about.
    ended: Option<Ended>,
    /// Claims taken with no session on a main connection that has dropped, not told yet.
    dropped: Lost,
    held: Held,
    /// The token may not register agents: the bridge goes on without a session.
    no_grant: bool,
    /// The last join was refused (the name in use, or not ours): the next one says so.
    refused: bool,
}

struct Ended {
    session_id: String,
    /// Its main connection dropped (else batond said the session had ended).
    dropped: bool,
    lost: Lost,
    /// batond was told to end it, or said it had ended.
    closed: bool,
}

/// What a call acts as, once the session is settled.
pub(super) struct Ready {
    /// The live session's id, passed with the calls that act as the agent.
    pub session: Option<String>,
    /// The live session's name.
    pub name: Option<String>,
    pub notes: Vec<Note>,
}

/// Why the session may not join, in words for the model; None to try again later.
enum Refusal {
    Later,
    NoGrant,
    Told(String),
}

/// Why a session ended, for the model.
fn why_ended(dropped: bool) -> &'static str {
    if dropped {
        "the connection to batond dropped: batond restarted, or the link broke"
    } else {
        "batond ended it: it expired, was taken over, or an operator ended it"
    }
}

/// Who has a name, from a RegisterAgent conflict's `data`: since when, last seen, and what
/// that session said of itself (a bridge: host, pid, client).
fn holder(data: &Value) -> String {
    let mut parts = Vec::new();
    let meta = &data["metadata"];
    if let Some(host) = meta["host"].as_str() {
        parts.push(format!("host {host}"));
    }
    if let Some(pid) = meta["pid"].as_u64() {
        parts.push(format!("pid {pid}"));
    }
    if let Some(client) = meta["client"].as_str() {
        parts.push(format!("client {client}"));
    }
    if parts.is_empty() && !meta.is_null() {
        parts.push(format!("metadata {meta}"));
    }
    if let Some(role) = data["role"].as_str() {
        parts.push(format!("role {role}"));
    }
    if let Some(since) = data["started_at"].as_str() {
        parts.push(format!("joined {since}"));
    }
    if let Some(seen) = data["last_seen"].as_str() {
        parts.push(format!("last seen {seen}"));
    }
    if parts.is_empty() {
        "batond did not say who".into()
    } else {
        parts.join(", ")
    }
}

/// This machine's name, as the kernel or the environment says it.
fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
}

/// This bridge, as its session's metadata shows it to whoever finds the name taken.
fn whoami(context: &RequestContext<RoleServer>) -> Value {
    let host = hostname();
    let client = context
        .client_info()
        .map(|c| format!("{} {}", c.name, c.version).trim().to_string());
    json!({"host": host, "pid": std::process::id(), "client": client, "via": "mcp-bridge"})
}

/// Whether `metadata` (a live session's, as its bridge gave it) names a bridge on this
/// host whose process no longer exists: judged only where `/proc` shows processes.
fn exited_here(metadata: &Value) -> bool {
    let (Some("mcp-bridge"), Some(host), Some(pid)) = (
        metadata["via"].as_str(),
        metadata["host"].as_str(),
        metadata["pid"].as_u64(),
    ) else {
        return false;
    };
    hostname().as_deref() == Some(host)
        && pid != u64::from(std::process::id())
        && std::path::Path::new("/proc/self").exists()
        && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

impl Bridge {
    /// Before a call: notices a session that ended, and joins (again) when due. Err is the
    /// result to answer instead of making the call (the name cannot be used).
    pub(super) async fn prepare(
        &self,
        tool: &Tool,
        context: &RequestContext<RoleServer>,
    ) -> Result<Ready, CallToolResult> {
        self.settle(context, Some(tool), true)
            .await
            .map_err(|text| failure(text, None))
    }

    /// After a call: what `prepare` does, with a refusal told as a note (the call was
    /// made); it joins only when batond `answered` the call (else the next call tries: a
    /// batond that is away would cost a second wait).
    pub(super) async fn settle_after(
        &self,
        context: &RequestContext<RoleServer>,
        answered: bool,
    ) -> Vec<Note> {
        match self.settle(context, None, answered).await {
            Ok(ready) => ready.notes,
            Err(text) => vec![Note::new(text, None, false, &Lost::default())],
        }
    }

    /// Marks `session` as ended in batond: a call carrying it was answered 410.
    pub(super) async fn session_refused(&self, session: &str) {
        let state = self.session.state.lock().await;
        if let Some(live) = state.live.as_ref().filter(|l| l.session_id == session) {
            live.mark_gone();
        }
    }

    async fn settle(
        &self,
        context: &RequestContext<RoleServer>,
        before: Option<&Tool>,
        join: bool,
    ) -> Result<Ready, String> {
        let mut state = self.session.state.lock().await;
        self.notice_end(&mut state);
        let mut notes = Vec::new();
        let due = (&state.live, state.name.clone(), state.no_grant || !join);
        if let (None, Some(name), false) = due {
            if self.close_ended(&mut state).await {
                match self.register_or_succeed(&name, context).await {
                    Ok((joined, epoch)) => {
                        let refused = std::mem::take(&mut state.refused);
                        let ended = state.ended.take();
                        state.live = Some(Joined::new(
                            self.target.clone(),
                            joined.name,
                            joined.session_id,
                            epoch,
                        ));
                        if let Some(ended) = ended {
                            let text = format!(
                                "Note: your agent session ended ({}); the bridge joined again as {name}. {}",
                                why_ended(ended.dropped),
                                ended.lost.told()
                            );
                            notes.push(Note::new(text, Some(&name), true, &ended.lost));
                        } else if refused {
                            let text = format!("Note: this MCP session has now joined as {name} (the name was in use before).");
                            notes.push(Note::new(text, Some(&name), true, &Lost::default()));
                        }
                    }
                    Err(err) => match self.refusal(&name, err, before, state.ended.as_ref()) {
                        Refusal::Later => {}
                        Refusal::NoGrant => {
                            tracing::warn!("this token may not register agents: acting as {name} without an agent session");
                            state.no_grant = true;
                        }
                        Refusal::Told(text) => {
                            // What ended is told now; a name the model chose is its to choose again.
                            state.ended = None;
                            state.refused = true;
                            if self.owner_flag.is_none() {
                                state.name = None;
                            }
                            return Err(text);
                        }
                    },
                }
            }
        }
        if state.no_grant {
            if let Some(ended) = state.ended.take() {
                let text = format!(
                    "Note: your agent session ended ({}). {}",
                    why_ended(ended.dropped),
                    ended.lost.told()
                );
                notes.push(Note::new(text, None, false, &ended.lost));
            }
        }
        if !state.dropped.is_empty() {
            let lost = std::mem::take(&mut state.dropped);
            let text = format!(
                "Note: the connection to batond dropped (batond restarted, or the link broke), and the claims taken on it ended with it. {}",
                lost.told()
            );
            notes.push(Note::new(text, None, false, &lost));
        }
        let live = state.live.as_ref();
        Ok(Ready {
            session: live.map(|l| l.session_id.clone()),
            name: live.map(|l| l.name.clone()),
            notes,
        })
    }

    /// Moves a live session whose main connection dropped, or that batond ended, to
    /// `ended`, with what ended with it; and claims of no session on a dropped main
    /// connection to `dropped`.
    fn notice_end(&self, state: &mut State) {
        let epoch = self.epoch();
        if let Some(live) = &state.live {
            let dropped = live.epoch != epoch;
            if dropped || live.is_gone() {
                let live = state.live.take().expect("checked above");
                let lost = state
                    .held
                    .take_session(&live.session_id, live.epoch, dropped);
                self.unpark(&lost);
                let mut ended = Ended {
                    session_id: live.session_id.clone(),
                    dropped,
                    lost,
                    closed: false,
                };
                // An earlier one not told yet (batond was down) is told with it.
                if let Some(earlier) = state.ended.take() {
                    ended.lost.extend(earlier.lost);
                    ended.dropped |= earlier.dropped;
                }
                state.ended = Some(ended);
            }
        }
        let dropped = state.held.take_dropped(epoch);
        if !dropped.is_empty() {
            self.unpark(&dropped);
            state.dropped.extend(dropped);
        }
    }

    /// Forgets the connections that kept lost claims, now over.
    fn unpark(&self, lost: &Lost) {
        let mut parked = self.parked.lock().expect("parked connections");
        for (lease, _) in &lost.claims {
            parked.remove(lease);
        }
    }

    /// Ends the session that ended without the bridge, in case batond still keeps it (a
    /// shared database keeps a session past its daemon's restart, until that daemon is
    /// judged gone): its claims end now rather than later, and the name is free to join
    /// again. False while batond cannot be told.
    async fn close_ended(&self, state: &mut State) -> bool {
        let Some(ended) = state.ended.as_mut().filter(|e| !e.closed) else {
            return true;
        };
        let end = EndSessionParams {
            session_id: ended.session_id.clone(),
            idempotency_key: None,
        };
        match self.request(&end).await {
            Ok(_) => ended.closed = true,
            Err(CallError::Daemon { kind, .. }) if kind == "lease_invalid" => ended.closed = true,
            Err(_) => {}
        }
        ended.closed
    }

    /// Joins as `name` on the main connection; the session's epoch with it.
    async fn register(
        &self,
        name: &str,
        role: Option<String>,
        takeover: bool,
        context: &RequestContext<RoleServer>,
    ) -> Result<(RegisterAgentResult, u64), CallError> {
        let metadata = serde_json::value::to_raw_value(&whoami(context))
            .map_err(|e| CallError::NotSent(std::io::Error::other(e)))?;
        let join = RegisterAgentParams {
            name: name.to_string(),
            role,
            metadata: Some(metadata),
            ttl_secs: Some(JOIN_TTL_SECS),
            release_on_disconnect: true,
            takeover,
            idempotency_key: None,
        };
        let (answer, epoch) = self
            .call_main_at(RegisterAgentParams::METHOD, &join, true)
            .await;
        Ok((read::<RegisterAgentParams>(&answer?)?, epoch))
    }

    /// Joins as `name`; a live session under it whose bridge has exited on this host (its
    /// connection's end not yet seen by batond: a client restarting its MCP server) is
    /// taken over, as it is over anyway.
    async fn register_or_succeed(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(RegisterAgentResult, u64), CallError> {
        match self.register(name, None, false, context).await {
            Err(CallError::Daemon { kind, data, .. })
                if kind == "conflict" && exited_here(&data["metadata"]) =>
            {
                tracing::info!("taking over agent {name} from a bridge that has exited");
                self.register(name, None, true, context).await
            }
            other => other,
        }
    }

    /// A failed join, judged: try again later (batond unreachable, busy), go on without
    /// a session (no grant to register agents), or the name cannot be used (told).
    fn refusal(
        &self,
        name: &str,
        err: CallError,
        before: Option<&Tool>,
        ended: Option<&Ended>,
    ) -> Refusal {
        let CallError::Daemon {
            kind,
            message,
            data,
            ..
        } = err
        else {
            return Refusal::Later;
        };
        let undone = match before {
            Some(tool) => format!("{} was not done", tool.name),
            None => "the calls that act as the agent will not be made".into(),
        };
        let again = before.map_or_else(String::new, |t| format!(", then call {} again", t.name));
        let (lead, now) = match ended {
            Some(e) => (
                format!(
                    "Your agent session as {name} ended ({}){}. ",
                    why_ended(e.dropped),
                    e.lost
                        .what()
                        .map_or_else(String::new, |what| format!(", and with it {what}"))
                ),
                "now ",
            ),
            None => (String::new(), ""),
        };
        let flagged = self.owner_flag.is_some();
        let rename =
            "give this MCP server another agent name (--agent or BATON_AGENT) and restart it";
        let text = match kind.as_str() {
            "conflict" => {
                let stuck = if self.groups.contains(&Group::Agents) {
                    format!("call baton_join with name \"{name}\" and takeover: true{again}")
                } else {
                    format!("end it with `baton agent end {name} --reason stuck` (an operator's command){again}")
                };
                let todo = if flagged {
                    format!("If that is another agent, {rename}; if it is a stuck session of yours, {stuck}.")
                } else {
                    format!("Call baton_join with another name (or, if that session is a stuck one of yours, with name \"{name}\" and takeover: true){again}.")
                };
                format!(
                    "{lead}The agent name \"{name}\" is {now}in use by another live session ({}), so this MCP session is not joined as {name} and {undone}. {todo}",
                    holder(&data)
                )
            }
            "forbidden" if data["needed"] == "admin" => {
                let todo = if flagged {
                    "Give this MCP server another agent name (--agent or BATON_AGENT) and restart it.".to_string()
                } else {
                    "Call baton_join with a name of your own.".into()
                };
                format!(
                    "{lead}The agent name \"{name}\" belongs to another token (the one that first joined under it), so this MCP session cannot act as {name} and {undone}. {todo}"
                )
            }
            "forbidden" => return Refusal::NoGrant,
            "invalid" | "invalid_params" if flagged => format!(
                "{lead}batond refuses the agent name \"{name}\" ({message}), so {undone}. Give this MCP server a valid agent name (--agent or BATON_AGENT) and restart it."
            ),
            _ => return Refusal::Later,
        };
        Refusal::Told(capitalized(text))
    }

    /// `baton_join`: joins as the model asks, unless the session is an agent already:
    /// its own name again is a no-op, another name is refused.
    pub(super) async fn join_tool(
        &self,
        tool: &Tool,
        args: &Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let want = args["name"].as_str().unwrap_or_default().to_string();
        let takeover = args.get("takeover").and_then(Value::as_bool) == Some(true);
        let role = args.get("role").and_then(Value::as_str).map(str::to_string);
        let mut state = self.session.state.lock().await;
        self.notice_end(&mut state);
        if let Some(fixed) = self.owner_flag.as_deref().filter(|f| *f != want) {
            return failure(
                format!("This MCP server acts as agent {fixed} (its --agent setting), so this session cannot join as {want}: go on as {fixed}."),
                None,
            );
        }
        if let Some((name, session_id)) = state
            .live
            .as_ref()
            .map(|l| (l.name.clone(), l.session_id.clone()))
        {
            if name != want {
                return failure(
                    format!("This MCP session is already joined as {name}, and one MCP session is one agent: go on as {name} (joining as {want} would orphan what {name} holds)."),
                    None,
                );
            }
            let beat = AgentHeartbeatParams {
                session_id,
                ttl_secs: Some(JOIN_TTL_SECS),
                idempotency_key: None,
            };
            match self.request(&beat).await {
                Ok(alive) => {
                    let how = if self.owner_flag.is_some() {
                        "it joined when it started (mcp-bridge --agent)"
                    } else {
                        "it joined earlier"
                    };
                    let mut result = ok(json!({"name": want, "expires_at": alive.expires_at,
                        "already_joined": true}));
                    result.content.push(ContentBlock::text(format!(
                        "This MCP session is already joined as {want} ({how}), so nothing changed: go on as {want}."
                    )));
                    return result;
                }
                Err(CallError::Daemon { kind, .. }) if kind == "lease_invalid" => {
                    if let Some(live) = &state.live {
                        live.mark_gone();
                    }
                    self.notice_end(&mut state);
                }
                Err(err) => return error(tool, args, &want, err),
            }
        }
        if !self.close_ended(&mut state).await {
            return failure(
                "batond cannot be reached to end your earlier session, so nothing was joined: call baton_join again in a moment.".into(),
                None,
            );
        }
        match self.register(&want, role, takeover, context).await {
            Ok((joined, epoch)) => {
                let ended = state.ended.take();
                state.refused = false;
                state.name = Some(want.clone());
                let expires_at = joined.expires_at.clone();
                state.live = Some(Joined::new(
                    self.target.clone(),
                    joined.name,
                    joined.session_id,
                    epoch,
                ));
                let result = ok(json!({"name": want, "expires_at": expires_at}));
                let notes = ended.map(|e| {
                    let text = format!(
                        "Note: your earlier agent session ended ({}). {}",
                        why_ended(e.dropped),
                        e.lost.told()
                    );
                    Note::new(text, Some(&want), true, &e.lost)
                });
                with_notes(result, notes.into_iter().collect())
            }
            Err(CallError::Daemon { kind, data, .. }) if kind == "conflict" => {
                let todo = if self.owner_flag.is_some() {
                    "If that is another agent, give this MCP server another agent name (--agent or BATON_AGENT) and restart it; if it is a stuck session of yours, call baton_join again with takeover: true."
                } else {
                    "Pick another name, or, if that session is a stuck one of yours, call baton_join again with takeover: true."
                };
                failure(
                    format!(
                        "The agent name \"{want}\" is in use by another live session ({}), so nothing was joined. {todo}",
                        holder(&data)
                    ),
                    None,
                )
            }
            Err(err) => error(tool, args, &want, err),
        }
    }

    /// Records a claim the call took (its lease id, its key), tied to `session`, on the
    /// main connection of `epoch` (None: a connection of its own).
    pub(super) async fn held_claim(
        &self,
        lease_id: String,
        key: String,
        session: Option<String>,
        epoch: Option<u64>,
    ) {
        let claim = Claim {
            key,
            session,
            epoch,
        };
        self.session
            .state
            .lock()
            .await
            .held
            .claims
            .insert(lease_id, claim);
    }

    /// Records a node lease the call took under `session`.
    pub(super) async fn held_node(
        &self,
        lease_id: String,
        task_id: String,
        node_id: String,
        session: String,
    ) {
        let node = Node {
            task_id,
            node_id,
            session,
        };
        self.session
            .state
            .lock()
            .await
            .held
            .nodes
            .insert(lease_id, node);
    }

    /// Forgets a claim or node lease that is over (released, completed, or found gone).
    pub(super) async fn let_go(&self, lease_id: &str) {
        let mut state = self.session.state.lock().await;
        state.held.claims.remove(lease_id);
        state.held.nodes.remove(lease_id);
    }
}

/// `text` with its first letter capitalized.
fn capitalized(text: String) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => text,
    }
}
