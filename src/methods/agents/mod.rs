//! Agents that know each other: RegisterAgent, AgentHeartbeat, EndSession, ListAgents,
//! SendMessage, ReadInbox, AckMessages. This file checks params; the rules are in `rules`,
//! the writer's memory of sessions and waiting readers in `memory`.

mod memory;
pub mod rules;

pub use crate::protocol::agents::*;
pub use memory::AgentState;
pub use rules::{expire_due, recover, serve_waiters};

use crate::error::{Error, Result};

use super::state::check_value;
use super::{limit_or_default, read, write, write_or_wait, Ctx, Method, Plan};

/// A session's default and longest life without a heartbeat.
const DEFAULT_TTL_SECS: u64 = 60;
const MAX_TTL_SECS: u64 = 24 * 3600;
/// Longest ReadInbox may wait: one hour.
const MAX_WAIT_MS: u64 = 3_600_000;
/// Most recipients one message may name.
const MAX_RECIPIENTS: usize = 1000;

fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 128 {
        return Err(Error::invalid_params(
            what,
            format!("{what} must be 1 to 128 bytes (an agent's name, e.g. \"reviewer-1\")"),
        ));
    }
    Ok(())
}

fn ttl_ms(ttl_secs: Option<u64>) -> Result<u64> {
    match ttl_secs.unwrap_or(DEFAULT_TTL_SECS) {
        secs @ 1..=MAX_TTL_SECS => Ok(secs * 1000),
        secs => Err(Error::Invalid(format!(
            "ttl_secs is {secs}; it must be 1 to {MAX_TTL_SECS} (heartbeat to keep a session longer)"
        ))),
    }
}

impl Method for RegisterAgentParams {
    const SUMMARY: &'static str = "Join as an agent named `name` (one live session per name; 409 unless takeover; a name belongs to the token that first registered it, and another token's is 403 unless admin). Keep the session_id secret and heartbeat within ttl_secs (default 60).";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        check_name("name", &self.name)?;
        if let Some(role) = &self.role {
            if role.len() > 128 {
                return Err(Error::Invalid("role must be at most 128 bytes".into()));
            }
        }
        let metadata = match self.metadata {
            Some(m) => {
                check_value("metadata", &m, &cx.limits())?;
                Some(Box::<str>::from(m).into_string())
            }
            None => None,
        };
        if self.release_on_disconnect {
            cx.connection.mark_lock_user();
        }
        let register = rules::Register {
            name: self.name,
            role: self.role,
            metadata,
            ttl_ms: ttl_ms(self.ttl_secs)?,
            release_on_disconnect: self.release_on_disconnect,
            takeover: self.takeover,
            connection: cx.connection.id,
            token_id: cx.token_id(),
            admin: cx.is_admin(),
        };
        write::<Self>(cx, self.idempotency_key, move |ctx| {
            rules::register(ctx, register)
        })
    }
}

impl Method for AgentHeartbeatParams {
    const SUMMARY: &'static str =
        "Keep your session alive for ttl_secs more; 410 once it has ended.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let ttl_ms = ttl_ms(self.ttl_secs)?;
        let presented = cx.presented(self.session_id);
        write::<Self>(cx, self.idempotency_key, move |ctx| {
            rules::heartbeat(ctx, &presented, ttl_ms)
        })
    }
}

impl Method for EndSessionParams {
    const SUMMARY: &'static str = "Leave: end your session (its inbox stays for the name).";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let presented = cx.presented(self.session_id);
        write::<Self>(cx, self.idempotency_key, move |ctx| {
            rules::end(ctx, &presented)
        })
    }
}

impl Method for ListAgentsParams {
    const SUMMARY: &'static str = "Live agents by name: role, when seen, what each holds and how many unread messages it has (never a session id); page with `after` = next.";
    fn plan(self, _cx: &Ctx<'_>) -> Result<Plan> {
        let limit = super::paging::page_limit(self.limit, super::paging::MAX_PAGE)?;
        Ok(read::<Self>(false, move |storage| {
            rules::list(storage, self.after.as_deref(), limit)
        }))
    }
}

impl Method for SendMessageParams {
    const SUMMARY: &'static str = "Send a message from your session's name to agent names (live or not) or \"*\" (every agent that ever registered); it waits in each inbox until acknowledged.";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        match &self.to {
            Recipients::Everyone(star) if star == "*" => {}
            Recipients::Everyone(other) => {
                return Err(Error::invalid_params(
                    "to",
                    format!("to is `{other}`; give a list of agent names, or \"*\" for everyone"),
                ))
            }
            Recipients::Names(names) => {
                if names.is_empty() || names.len() > MAX_RECIPIENTS {
                    return Err(Error::invalid_params(
                        "to",
                        format!("to must name 1 to {MAX_RECIPIENTS} agents, or be \"*\""),
                    ));
                }
                for name in names {
                    check_name("to", name)?;
                }
            }
        }
        for (field, value) in [
            ("subject", &self.subject),
            ("thread_id", &self.thread_id),
            ("reply_to", &self.reply_to),
        ] {
            if value.as_ref().is_some_and(|v| v.len() > 512) {
                return Err(Error::Invalid(format!("{field} must be at most 512 bytes")));
            }
        }
        check_value("body", &self.body, &cx.limits())?;
        let presented = cx.presented(std::mem::take(&mut self.session_id));
        let send = rules::Send {
            to: self.to,
            subject: self.subject,
            body: Box::<str>::from(self.body).into_string(),
            thread_id: self.thread_id,
            reply_to: self.reply_to,
        };
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            rules::send(ctx, &presented, send)
        })
    }
}

impl Method for ReadInboxParams {
    const SUMMARY: &'static str = "Your name's messages after `after` (default: your acknowledged cursor), oldest first; with wait_ms and none there, wait for one (use its own connection).";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let wait_ms = self.wait_ms.unwrap_or(0);
        if wait_ms > MAX_WAIT_MS {
            return Err(Error::Invalid(format!(
                "wait_ms must be at most {MAX_WAIT_MS}"
            )));
        }
        if wait_ms > 0 {
            cx.connection.mark_lock_user();
        }
        let request = rules::Read {
            after: self.after,
            limit: limit_or_default(self.limit)?,
            wait_ms,
            connection: cx.connection.id,
        };
        let presented = cx.presented(self.session_id);
        write_or_wait::<Self>(cx, None, move |ctx| rules::read(ctx, &presented, request))
    }
}

impl Method for AckMessagesParams {
    const SUMMARY: &'static str = "Mark your name's messages up to seq `up_to` as read (the durable cursor ReadInbox starts from; beyond your newest message is 400); returns how many were acknowledged and how many remain.";
    fn plan(self, cx: &Ctx<'_>) -> Result<Plan> {
        let presented = cx.presented(self.session_id);
        let up_to = self.up_to;
        write::<Self>(cx, self.idempotency_key, move |ctx| {
            rules::ack(ctx, &presented, up_to)
        })
    }
}
