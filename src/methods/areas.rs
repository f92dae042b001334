//! The areas whose state the writer keeps in memory, in the one order their upkeep runs:
//! recovery at start, expiry of what came due, serving waiters after another daemon's
//! changes, and ending what a closed connection left. The writer runs these lists and
//! names no area; an area that keeps state on the writer adds its entry here.

use crate::error::Result;

use super::writer::WriteCtx;
use super::{agents, locks, tasks};

type Hook = fn(&mut WriteCtx<'_>) -> Result<()>;

/// One area's part in the writer's upkeep.
pub struct Area {
    /// Rebuilds the area's memory from storage (at start, and after a rollback).
    pub recover: Hook,
    /// Ends what is due (leases, waits, sessions).
    pub expire_due: Hook,
    /// Serves waiters what became free (after another daemon's commit).
    pub serve_waiters: Hook,
    /// Ends what the connection left: waits, leases and sessions bound to it.
    pub connection_closed: fn(&mut WriteCtx<'_>, u64) -> Result<()>,
}

/// Every area, in the order their upkeep runs.
pub const AREAS: [Area; 3] = [
    Area {
        recover: locks::recover,
        expire_due: locks::expire_due,
        serve_waiters: locks::serve_waiters,
        connection_closed: locks::rules::connection_closed,
    },
    Area {
        recover: tasks::recover,
        expire_due: tasks::expire_due,
        serve_waiters: tasks::serve_waiters,
        connection_closed: tasks::rules::connection_closed,
    },
    Area {
        recover: agents::recover,
        expire_due: agents::expire_due,
        serve_waiters: agents::serve_waiters,
        connection_closed: agents::rules::connection_closed,
    },
];

pub fn recover(ctx: &mut WriteCtx<'_>) -> Result<()> {
    AREAS.iter().try_for_each(|area| (area.recover)(ctx))
}

pub fn expire_due(ctx: &mut WriteCtx<'_>) -> Result<()> {
    AREAS.iter().try_for_each(|area| (area.expire_due)(ctx))
}

pub fn serve_waiters(ctx: &mut WriteCtx<'_>) -> Result<()> {
    AREAS.iter().try_for_each(|area| (area.serve_waiters)(ctx))
}

pub fn connection_closed(ctx: &mut WriteCtx<'_>, connection: u64) -> Result<()> {
    AREAS
        .iter()
        .try_for_each(|area| (area.connection_closed)(ctx, connection))
}
