//! What batond knows of one agent that its hooks tell the model: its unread messages (the
//! count from ListAgents; the senders and subjects from the journal's `message.sent`
//! events, read incrementally), its live claims (ListResourceLocks by owner) and node
//! leases (ListAgents, their time left from TaskStatus), and the files the guard refused it
//! that are free now (ResourceLockStatus).

use baton::client::{CallError, Connection};
use baton::protocol::agents::{AgentEntry, ListAgentsParams, Recipients};
use baton::protocol::journal::ReadEventsParams;
use baton::protocol::locks::{
    HeldBy, Holders, ListResourceLocksParams, ResourceLockStatusParams, StatusResult,
};
use baton::protocol::system::MetricsParams;
use baton::protocol::tasks::TaskStatusParams;

use super::state::{Refused, Seen, State, REFUSAL_MEMORY_MS};

/// How far back a first run looks for messages (one ReadEvents' scan budget).
const FIRST_LOOK_BACK: u64 = 10_000;
/// ReadEvents calls one run makes at most to catch up with the journal.
const READS_PER_RUN: usize = 2;
/// Tasks whose status one run reads at most (for node leases' time left).
const TASKS_PER_RUN: usize = 3;

pub struct Claim {
    pub key: String,
    pub remaining_ms: u64,
}

pub struct NodeLease {
    pub task_id: String,
    pub node_id: String,
    pub remaining_ms: Option<u64>,
}

#[derive(Default)]
pub struct Facts {
    /// Messages after the agent's acknowledged cursor (0 without a live session).
    pub unread: u64,
    /// The unread ones the hooks saw in the journal, oldest first (may be fewer).
    pub unread_seen: Vec<Seen>,
    pub claims: Vec<Claim>,
    pub nodes: Vec<NodeLease>,
    /// Refused keys that are free now.
    pub freed: Vec<Refused>,
}

impl Facts {
    pub fn is_empty(&self) -> bool {
        self.unread == 0 && self.claims.is_empty() && self.nodes.is_empty() && self.freed.is_empty()
    }
}

/// What there is to tell about `agent`; `refusals` also asks whether refused files are free
/// (the context hook does, the stop hook does not).
pub async fn gather(
    conn: &mut Connection,
    agent: &str,
    state: &mut State,
    refusals: bool,
    now_ms: i64,
) -> Result<Facts, CallError> {
    let mut facts = Facts::default();
    if let Some(entry) = find_agent(conn, agent).await? {
        facts.unread = entry.unread;
        facts.nodes = node_leases(conn, agent, &entry, now_ms).await?;
    }
    let locks = conn
        .call(&ListResourceLocksParams {
            prefix: None,
            owner: Some(agent.to_string()),
            limit: Some(1000),
            after: None,
        })
        .await?;
    facts.claims = locks
        .locks
        .into_iter()
        .map(|l| Claim {
            key: l.resource_key,
            remaining_ms: l.held_by.remaining_ms,
        })
        .collect();
    read_messages(conn, agent, state).await;
    if facts.unread > 0 {
        let unread = facts.unread.min(state.messages.len() as u64) as usize;
        facts.unread_seen = state.messages[state.messages.len() - unread..].to_vec();
    }
    if refusals {
        facts.freed = freed(conn, agent, state, now_ms).await?;
    }
    Ok(facts)
}

/// The agent's live session's entry, if it has one.
async fn find_agent(conn: &mut Connection, agent: &str) -> Result<Option<AgentEntry>, CallError> {
    let mut after = None;
    for _ in 0..10 {
        let page = conn
            .call(&ListAgentsParams {
                limit: Some(1000),
                after: after.take(),
            })
            .await?;
        if let Some(entry) = page.agents.into_iter().find(|a| a.name == agent) {
            return Ok(Some(entry));
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(None)
}

async fn node_leases(
    conn: &mut Connection,
    agent: &str,
    entry: &AgentEntry,
    now_ms: i64,
) -> Result<Vec<NodeLease>, CallError> {
    let mut leases: Vec<NodeLease> = entry
        .nodes
        .iter()
        .map(|n| NodeLease {
            task_id: n.task_id.clone(),
            node_id: n.node_id.clone(),
            remaining_ms: None,
        })
        .collect();
    let mut tasks: Vec<String> = leases.iter().map(|l| l.task_id.clone()).collect();
    tasks.dedup();
    for task_id in tasks.into_iter().take(TASKS_PER_RUN) {
        let status = match conn
            .call(&TaskStatusParams {
                task_id: task_id.clone(),
                limit: Some(1000),
                after: None,
            })
            .await
        {
            Ok(status) => status,
            // Ended meanwhile: nothing to add.
            Err(CallError::Daemon { .. }) => continue,
            Err(err) => return Err(err),
        };
        for node in status.nodes {
            if node.lease_owner.as_deref() != Some(agent) {
                continue;
            }
            let left = node.lease_expires_at.as_deref().and_then(parse_ms);
            if let Some(lease) = leases
                .iter_mut()
                .find(|l| l.task_id == task_id && l.node_id == node.node_id)
            {
                lease.remaining_ms = left.map(|at| at.saturating_sub(now_ms).max(0) as u64);
            }
        }
    }
    Ok(leases)
}

/// An RFC 3339 time as epoch ms.
fn parse_ms(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Reads on in the journal's `message.sent` events and keeps those sent to `agent`. A
/// failure (a token without `events:read`, a compacted journal) only costs the subjects.
async fn read_messages(conn: &mut Connection, agent: &str, state: &mut State) {
    let mut since = match state.scanned_to {
        Some(seq) => seq,
        None => match conn.call(&MetricsParams {}).await {
            Ok(m) => m.journal.head_seq.saturating_sub(FIRST_LOOK_BACK),
            Err(_) => 0,
        },
    };
    for _ in 0..READS_PER_RUN {
        let read = conn
            .call(&ReadEventsParams {
                since_seq: Some(since),
                limit: Some(1000),
                types: Some(vec!["message.sent".into()]),
                namespace: None,
                key_prefix: None,
                resource_prefix: None,
                task_id: None,
            })
            .await;
        let read = match read {
            Ok(read) => read,
            Err(CallError::Daemon { kind, .. }) if kind == "compacted" => {
                // Start again from what is kept; the subjects before it are gone.
                state.scanned_to = None;
                return;
            }
            Err(_) => return,
        };
        for event in &read.events {
            #[derive(serde::Deserialize)]
            struct Sent {
                from: String,
                to: Recipients,
                subject: Option<String>,
            }
            let Ok(sent) = serde_json::from_str::<Sent>(event.data.get()) else {
                continue;
            };
            let to_agent = match &sent.to {
                Recipients::Names(names) => names.iter().any(|n| n == agent),
                Recipients::Everyone(_) => sent.from != agent,
            };
            if to_agent && state.messages.iter().all(|m| m.seq != event.seq) {
                state.messages.push(Seen {
                    seq: event.seq,
                    from: sent.from,
                    subject: sent.subject,
                });
            }
        }
        // next_seq is the head once a read reached it: nothing more to read then.
        let moved = read.next_seq > since;
        since = read.next_seq.max(since);
        state.scanned_to = Some(since);
        if !moved {
            break;
        }
    }
}

/// The refused keys that are free now; forgets them, and those the agent holds itself or
/// that were refused over an hour ago.
async fn freed(
    conn: &mut Connection,
    agent: &str,
    state: &mut State,
    now_ms: i64,
) -> Result<Vec<Refused>, CallError> {
    state
        .refused
        .retain(|r| now_ms - r.at_ms < REFUSAL_MEMORY_MS);
    let all = std::mem::take(&mut state.refused);
    let mut freed = Vec::new();
    let mut kept = Vec::new();
    for refused in &all {
        let status = conn
            .call(&ResourceLockStatusParams {
                resource_key: refused.key.clone(),
            })
            .await;
        match status {
            Ok(StatusResult::Available { .. }) => freed.push(refused.clone()),
            Ok(StatusResult::Held { held_by, .. }) => {
                let holders: Vec<&HeldBy> = match &held_by {
                    Holders::One(h) => vec![h],
                    Holders::Many(all) => all.iter().collect(),
                };
                if holders.iter().all(|h| h.owner != agent) {
                    kept.push(refused.clone());
                }
            }
            // Not a key batond names (any more): forget it.
            Err(CallError::Daemon { .. }) => {}
            Err(err) => {
                state.refused = all;
                return Err(err);
            }
        }
    }
    state.refused = kept;
    Ok(freed)
}
