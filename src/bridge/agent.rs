//! The agent an MCP session joined as (`baton_join`): its session, kept alive by a
//! heartbeat on a connection of its own, and ended with the session's main connection
//! (`release_on_disconnect`), so an MCP client that goes away leaves at once.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::client::{CallError, Connection, Target};
use crate::protocol::agents::AgentHeartbeatParams;

/// How long the session lives without a heartbeat; the bridge beats every third of it.
pub const JOIN_TTL_SECS: u64 = 60;

pub struct Joined {
    pub name: String,
    pub session_id: String,
    heartbeat: JoinHandle<()>,
}

impl Joined {
    pub fn new(target: Target, name: String, session_id: String) -> Joined {
        let heartbeat = tokio::spawn(beat(target, session_id.clone()));
        Joined {
            name,
            session_id,
            heartbeat,
        }
    }
}

impl Drop for Joined {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// Heartbeats the session until it is gone (ended, taken over) or the bridge stops.
async fn beat(target: Target, session_id: String) {
    let every = Duration::from_secs(JOIN_TTL_SECS / 3);
    let heartbeat = AgentHeartbeatParams {
        session_id,
        ttl_secs: Some(JOIN_TTL_SECS),
        idempotency_key: None,
    };
    let mut conn: Option<Connection> = None;
    loop {
        tokio::time::sleep(every).await;
        if conn.is_none() {
            conn = Connection::open(&target).await.ok();
        }
        let Some(c) = conn.as_mut() else { continue };
        match c.send(&heartbeat).await {
            Ok(_) => {}
            Err(CallError::Daemon { kind, .. }) if kind == "lease_invalid" => return,
            // batond briefly away: try again on a new connection next time.
            Err(_) => conn = None,
        }
    }
}
