//! The agent session an MCP session joined as (`--agent`, or `baton_join`): kept alive by a
//! heartbeat on a connection of its own, and ended with the bridge's main connection
//! (`release_on_disconnect`), so an MCP client that goes away leaves at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::client::{CallError, Connection, Target};
use crate::protocol::agents::AgentHeartbeatParams;

/// How long the session lives without a heartbeat; the bridge beats every third of it.
pub const JOIN_TTL_SECS: u64 = 60;

pub struct Joined {
    pub name: String,
    pub session_id: String,
    /// The main connection it was registered on (`Bridge::epoch` then): it ends with it.
    pub epoch: u64,
    /// Set when batond answers the heartbeat that the session has ended.
    gone: Arc<AtomicBool>,
    heartbeat: JoinHandle<()>,
}

impl Joined {
    pub fn new(target: Target, name: String, session_id: String, epoch: u64) -> Joined {
        let gone = Arc::new(AtomicBool::new(false));
        let heartbeat = tokio::spawn(beat(target, session_id.clone(), gone.clone()));
        Joined {
            name,
            session_id,
            epoch,
            gone,
            heartbeat,
        }
    }

    /// Whether batond said the session has ended (expiry, takeover, an operator).
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Notes that batond answered a call carrying the session that it has ended.
    pub fn mark_gone(&self) {
        self.gone.store(true, Ordering::Release);
    }
}

impl Drop for Joined {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// Heartbeats the session until it is gone (ended, taken over) or the bridge stops.
async fn beat(target: Target, session_id: String, gone: Arc<AtomicBool>) {
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
            Err(CallError::Daemon { kind, .. }) if kind == "lease_invalid" => {
                gone.store(true, Ordering::Release);
                return;
            }
            // batond briefly away: try again on a new connection next time.
            Err(_) => conn = None,
        }
    }
}
