//! The operator's methods (grant `operator`, or `admin`): BreakLock, RetryNode and
//! EndAgentSession. Each needs a `reason`, and journals it with who acted (the token's
//! name, or `admin` on the Unix socket): `lock.broken`, `node.retried`, `agent.left` with
//! `reason: "operator"`. This file checks params; the rules are the areas' own
//! (`locks::rules::break_lock`, `tasks::retry::retry`, `agents::rules::end_by_operator`),
//! so a broken lease, a retried node and an ended session end and resume as a release,
//! a node's retry and EndSession do.

pub use crate::protocol::operator::*;

use crate::error::{Error, Result};
use crate::resource_key::canonicalize;

use super::{agents, locks, tasks, write, Ctx, Method, Plan};

pub use crate::protocol::limits::MAX_REASON_BYTES;

/// The reason, checked: 1 to [`MAX_REASON_BYTES`] bytes, not only blanks.
fn reason(reason: String) -> Result<String> {
    if reason.trim().is_empty() || reason.len() > MAX_REASON_BYTES {
        return Err(Error::invalid_params(
            "reason",
            format!(
                "reason must be 1 to {MAX_REASON_BYTES} bytes and say why (it is journalled with who acted), e.g. \"holder crashed, see incident 42\""
            ),
        ));
    }
    Ok(reason)
}

/// Who acts: the token's name, or `admin` for the Unix socket's admin.
fn by(cx: &Ctx<'_>) -> String {
    match cx.connection.auth.principal(cx.app) {
        Ok(Some(principal)) => principal.name.clone(),
        _ => "admin".into(),
    }
}

impl Method for BreakLockParams {
    const SUMMARY: &'static str = "Operator: end the lease(s) of a resource key (every holder, or the one lease_id or owner names) with a reason, as if released: outcome `broken`, waiters served first come first served, the holder's next heartbeat or release 410. Journalled as lock.broken with who and why.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let key = canonicalize(&self.resource_key, &cx.app.config.workspace)?;
        let reason = reason(self.reason)?;
        if self.lease_id.as_deref() == Some("") || self.owner.as_deref() == Some("") {
            return Err(Error::Invalid(
                "lease_id and owner, when given, must not be empty; leave them out to break every holder".into(),
            ));
        }
        let request = locks::rules::BreakRequest {
            key,
            lease_id: self.lease_id,
            owner: self.owner,
            by: by(cx),
            reason,
        };
        write::<Self>(cx, self.idempotency_key, move |ctx| {
            locks::rules::break_lock(ctx, request)
        })
    }
}

impl Method for RetryNodeParams {
    const SUMMARY: &'static str = "Operator: put a FAILED node back to PENDING with a fresh count of attempts and a reason; once no node of its task is FAILED, the task runs again and the nodes its failure cancelled resume. 409 for a node that is not FAILED or a cancelled task. Journalled as node.retried with who and why.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let request = tasks::retry::RetryRequest {
            task_id: self.task_id,
            node_id: self.node_id,
            by: by(cx),
            reason: reason(self.reason)?,
        };
        write::<Self>(cx, self.idempotency_key, move |ctx| {
            tasks::retry::retry(ctx, request)
        })
    }
}

impl Method for EndAgentSessionParams {
    const SUMMARY: &'static str = "Operator: end an agent's live session by name, with a reason, as EndSession would (its session's locks end, its nodes roll back, its session keys go). 404 when it has no live session. Journalled as agent.left with reason operator, who and why.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        if self.name.is_empty() || self.name.len() > 128 {
            return Err(Error::invalid_params(
                "name",
                "name must be 1 to 128 bytes: the agent's name, as ListAgents shows it",
            ));
        }
        let why = reason(self.reason)?;
        let by = by(cx);
        let name = self.name;
        write::<Self>(cx, self.idempotency_key, move |ctx| {
            agents::rules::end_by_operator(ctx, &name, &by, &why)
        })
    }
}
