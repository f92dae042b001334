//! Daemons sharing one database (PostgreSQL): each heartbeats, and when one falls silent
//! for `BATON_INSTANCE_TIMEOUT_SECS` (killed, cut off), another ends what was tied to its
//! connections, as its own connections closing would have: `release_on_disconnect`
//! leases end as `abandoned`, connection-bound sessions end as `disconnected`, and its
//! waits to acquire leave the order every instance serves waiters in.

use std::collections::BTreeSet;

use crate::error::Result;

use super::areas::WriteCtx;
use super::locks;

/// How many connection ids each daemon numbers from its base.
const CONNECTIONS_PER_INSTANCE: u64 = 1 << 32;

/// This daemon's heartbeat, for the writer (`server` sends one every third of the
/// timeout): marks it alive and ends what silent daemons held. Only for a database other
/// daemons may share.
pub fn heartbeat_write(
    instance_id: String,
    connection_base: u64,
    timeout_ms: i64,
) -> super::areas::WriteFn {
    Box::new(move |ctx| {
        heartbeat(ctx, &instance_id, connection_base, timeout_ms)?;
        Ok(None)
    })
}

/// Marks this daemon alive; ends what was tied to the connections of silent ones.
fn heartbeat(
    ctx: &mut WriteCtx<'_>,
    instance_id: &str,
    connection_base: u64,
    timeout_ms: i64,
) -> Result<()> {
    let silent = ctx
        .meta()
        .instance_heartbeat(instance_id, connection_base, timeout_ms)?;
    for base in silent {
        let theirs = |c: &u64| (base..base.saturating_add(CONNECTIONS_PER_INSTANCE)).contains(c);
        let connections: BTreeSet<u64> = ctx
            .memory
            .locks
            .connections()
            .chain(ctx.memory.agents.connections())
            .filter(theirs)
            .collect();
        if !connections.is_empty() {
            tracing::warn!(
                connections = connections.len(),
                "an instance sharing the database fell silent; ending what its connections held"
            );
        }
        for connection in connections {
            <super::areas::Memory as crate::engine::Areas>::connection_closed(ctx, connection)?;
        }
        let range = base..base.saturating_add(CONNECTIONS_PER_INSTANCE);
        locks::rules::end_waits_of(ctx, range)?;
    }
    Ok(())
}
