//! Agents, their sessions and their inboxes: the params and results of RegisterAgent,
//! AgentHeartbeat, EndSession, ListAgents, SendMessage, ReadInbox and AckMessages.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Json;

requests! {
    RegisterAgentParams => "RegisterAgent", RegisterAgentResult;
    AgentHeartbeatParams => "AgentHeartbeat", AgentHeartbeatResult;
    EndSessionParams => "EndSession", EndSessionResult;
    ListAgentsParams => "ListAgents", ListAgentsResult;
    SendMessageParams => "SendMessage", SendMessageResult;
    ReadInboxParams => "ReadInbox", ReadInboxResult;
    AckMessagesParams => "AckMessages", AckMessagesResult;
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterAgentParams {
    /// The agent's identity (1 to 128 bytes): at most one live session per name.
    pub name: String,
    /// What the agent does, shown to others (e.g. "reviewer").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[schemars(with = "Option<serde_json::Value>")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Json>,
    /// The session ends unless heartbeaten within this many seconds (default 60).
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// End the session when this connection closes.
    #[serde(default)]
    pub release_on_disconnect: bool,
    /// End the name's live session, if any, and take its place (else 409).
    #[serde(default)]
    pub takeover: bool,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct RegisterAgentResult {
    pub name: String,
    /// The session's secret: only its holder can heartbeat, send and read with it.
    pub session_id: String,
    pub expires_at: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentHeartbeatParams {
    pub session_id: String,
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct AgentHeartbeatResult {
    pub expires_at: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EndSessionParams {
    pub session_id: String,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct EndSessionResult {
    pub ended: bool,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListAgentsParams {
    /// At most this many, 1 to 1000 [default: 1000]; a page also stops at 8 MiB.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The previous page's `next` (a name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct AgentEntry {
    pub name: String,
    pub role: Option<String>,
    #[schemars(with = "Option<serde_json::Value>")]
    pub metadata: Option<Json>,
    pub started_at: String,
    pub last_seen: String,
    pub expires_at: String,
    /// Resource keys this agent's name holds.
    pub locks: Vec<String>,
    /// Node leases this agent's name holds.
    pub nodes: Vec<NodeRef>,
    /// Messages in its inbox after its acknowledged cursor.
    pub unread: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct NodeRef {
    pub task_id: String,
    pub node_id: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ListAgentsResult {
    /// Live sessions, by name.
    pub agents: Vec<AgentEntry>,
    /// Pass as `after` for the next page; null when nothing follows.
    #[serde(default)]
    pub next: Option<String>,
}

/// Who a message goes to: names, or `"*"` for every agent that ever registered.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Recipients {
    Names(Vec<String>),
    /// `"*"`.
    Everyone(String),
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessageParams {
    pub session_id: String,
    /// Agent names (live or not: an inbox belongs to a name), or `"*"`.
    pub to: Recipients,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    #[schemars(with = "serde_json::Value")]
    pub body: Json,
    /// The conversation it belongs to (any string; the first message's id is a good one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// The message_id it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct SendMessageResult {
    pub message_id: String,
    /// Its seq in every recipient's inbox (the journal seq of `message.sent`).
    pub seq: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadInboxParams {
    pub session_id: String,
    /// Messages with a greater seq [default: the acknowledged cursor].
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
    /// Default 100, at most 1000; oldest first.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// With nothing to return, wait up to this long for a message (use its own connection).
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    pub message_id: String,
    pub seq: u64,
    pub from: String,
    pub to: Recipients,
    pub subject: Option<String>,
    #[schemars(with = "serde_json::Value")]
    pub body: Json,
    pub thread_id: Option<String>,
    pub reply_to: Option<String>,
    pub sent_at: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ReadInboxResult {
    pub messages: Vec<Message>,
    /// Pass as `after` to read on.
    pub next_after: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AckMessagesParams {
    pub session_id: String,
    /// Every message up to this seq is read.
    #[serde(deserialize_with = "crate::json::int_param")]
    pub up_to: u64,
    /// Makes a retry safe: a repeat with the same key and params within 24 hours gets the
    /// first answer again and changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct AckMessagesResult {
    /// Messages newly acknowledged.
    pub acked: u64,
    /// Messages still after the cursor.
    pub unread: u64,
}
