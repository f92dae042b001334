//! The rules of agents and their inboxes, run on the writer: one live session per name
//! (409 unless `takeover`), a session ends by EndSession, expiry, takeover or its
//! connection closing, and `agent.joined` / `agent.left` say so; a message's sender is
//! its session's name, it lands in every recipient's inbox (a name's, outliving
//! sessions), `message.sent` never carries the body, and a reader waiting on an inbox is
//! answered the moment a message arrives. A session is bound to the token that
//! registered it, like a lease, and a name to the token that first registered it: only
//! that token, or an admin, registers it again (and so reads its inbox).

use std::time::Duration;

use serde_json::value::RawValue;

use crate::clock::format_ms;
use crate::error::{Error, Result};
use crate::protocol::agents::{
    AckMessagesResult, AgentEntry, AgentHeartbeatResult, EndSessionResult, ListAgentsResult,
    Message, NodeRef, ReadInboxResult, Recipients, RegisterAgentResult, SendMessageResult,
};
use crate::protocol::journal::EventType;
use crate::protocol::operator::EndAgentSessionResult;
use crate::protocol::reply;
use crate::store::boundary::{MessageRow, NameOwner, NewEvent, SessionRow, Storage};

use super::super::journal::append;
use crate::engine::schedule::Due;
use crate::engine::Served;

use super::super::areas::WriteCtx;
use super::super::Presented;
use super::memory::InboxWaiter;

/// A RegisterAgent, checked.
pub struct Register {
    pub name: String,
    pub role: Option<String>,
    /// JSON text.
    pub metadata: Option<String>,
    pub ttl_ms: u64,
    pub release_on_disconnect: bool,
    pub takeover: bool,
    pub connection: u64,
    pub token_id: Option<String>,
    /// Whether the caller is an admin (the Unix socket's, or a token's `admin` grant),
    /// who may register a name another token owns.
    pub admin: bool,
}

/// A SendMessage, checked.
pub struct Send {
    pub to: Recipients,
    pub subject: Option<String>,
    /// JSON text.
    pub body: String,
    pub thread_id: Option<String>,
    pub reply_to: Option<String>,
}

/// A ReadInbox, checked.
pub struct Read {
    pub after: Option<u64>,
    pub limit: u64,
    pub wait_ms: u64,
    pub connection: u64,
}

fn event(
    ctx: &mut WriteCtx<'_>,
    kind: EventType<'static>,
    actor: &str,
    data: serde_json::Value,
) -> Result<i64> {
    let seq = ctx.next_revision();
    let data = data.to_string();
    append(
        ctx,
        seq,
        &NewEvent {
            actor: Some(actor),
            data: &data,
            ..NewEvent::of(kind)
        },
    )?;
    Ok(seq)
}

/// The live session `presented` names, if the request acts with the token that
/// registered it; else 410 as if it did not exist.
pub(crate) fn own_session(ctx: &WriteCtx<'_>, presented: &Presented) -> Result<SessionRow> {
    match ctx.roster().session_by_id(&presented.lease_id)? {
        Some(s) if s.token_id == presented.token_id => Ok(s),
        _ => Err(Error::LeaseInvalid {
            // Never echo the id: messages end up in logs and agents' transcripts.
            message: "the session given has ended (EndSession, expiry, takeover or its connection closing) or is not yours; register again with RegisterAgent".into(),
            data: serde_json::Map::new(),
        }),
    }
}

/// The name of the session `presented` names (see [`own_session`]), for a request that
/// also gave `field` (`owner`, `lease_owner`, `updated_by`): given with a session, it must
/// be the session's name (400), since whoever reads it takes it for the agent's.
pub(crate) fn session_name(
    ctx: &WriteCtx<'_>,
    presented: &Presented,
    field: &str,
    given: Option<&str>,
) -> Result<String> {
    let name = own_session(ctx, presented)?.name;
    match given {
        Some(given) if given != name => Err(Error::Invalid(format!(
            "{field} is `{given}` but the session given is `{name}`'s; leave {field} out (it defaults to the session's name) or give `{name}`"
        ))),
        _ => Ok(name),
    }
}

pub fn register(ctx: &mut WriteCtx<'_>, r: Register) -> Result<RegisterAgentResult> {
    // A name is its first registrant's: whoever else registers it would end its session,
    // read its inbox and send as it. Judged before the live session, so that another
    // token learns nothing of it.
    let caller = NameOwner {
        token_id: r.token_id.clone(),
    };
    if let Some(owner) = ctx.roster().name_owner(&r.name)? {
        if owner != caller && !r.admin {
            return Err(Error::Forbidden {
                message: format!(
                    "the agent name `{}` belongs to another token (the one that first registered it); register under a name of your own, or ask an admin",
                    r.name
                ),
                needed: "admin".into(),
            });
        }
    }
    if let Some(live) = ctx.roster().session(&r.name)? {
        if !r.takeover {
            let mut data = serde_json::Map::new();
            data.insert("name".into(), r.name.clone().into());
            data.insert("role".into(), live.role.clone().into());
            // Who it is, as it said when it joined (a bridge gives its host, pid and
            // client), and since when: only the name's own token gets this far.
            let metadata = match &live.metadata {
                Some(text) => serde_json::from_str(text)?,
                None => serde_json::Value::Null,
            };
            data.insert("metadata".into(), metadata);
            data.insert("started_at".into(), format_ms(live.started_at).into());
            data.insert("last_seen".into(), format_ms(live.last_seen).into());
            return Err(Error::Conflict {
                message: format!(
                    "agent `{}` already has a live session (since {}, last seen {}); pick another name, wait for it to end, or pass takeover: true to end it",
                    r.name,
                    format_ms(live.started_at),
                    format_ms(live.last_seen)
                ),
                data,
                exact: Vec::new(),
            });
        }
        end_session(ctx, &live, "takeover")?;
    }
    let session_id = crate::methods::new_id();
    let expires_at = ctx.now_ms + r.ttl_ms as i64;
    let connection = r.release_on_disconnect.then_some(r.connection);
    ctx.roster().insert_session(&SessionRow {
        name: r.name.clone(),
        session_id: session_id.clone(),
        role: r.role.clone(),
        metadata: r.metadata,
        started_at: ctx.now_ms,
        last_seen: ctx.now_ms,
        expires_at,
        token_id: r.token_id,
        holder_connection: connection,
    })?;
    ctx.roster().remember_agent(&r.name, &caller, ctx.now_ms)?;
    event(
        ctx,
        EventType::AgentJoined,
        &r.name,
        serde_json::json!({"role": r.role, "expires_at": format_ms(expires_at)}),
    )?;
    let deadline = ctx.mono_now + Duration::from_millis(r.ttl_ms);
    ctx.memory
        .agents
        .track(r.name.clone(), session_id.clone(), deadline, connection);
    Ok(RegisterAgentResult {
        name: r.name,
        session_id,
        expires_at: format_ms(expires_at),
    })
}

pub fn heartbeat(
    ctx: &mut WriteCtx<'_>,
    presented: &Presented,
    ttl_ms: u64,
) -> Result<AgentHeartbeatResult> {
    let session = own_session(ctx, presented)?;
    let expires_at = ctx.now_ms + ttl_ms as i64;
    ctx.roster()
        .touch_session(&session.name, ctx.now_ms, expires_at)?;
    let deadline = ctx.mono_now + Duration::from_millis(ttl_ms);
    ctx.memory.agents.forget(&session.name);
    ctx.memory.agents.track(
        session.name,
        session.session_id,
        deadline,
        session.holder_connection,
    );
    Ok(AgentHeartbeatResult {
        expires_at: format_ms(expires_at),
    })
}

pub fn end(ctx: &mut WriteCtx<'_>, presented: &Presented) -> Result<EndSessionResult> {
    let session = own_session(ctx, presented)?;
    end_session(ctx, &session, "ended")?;
    Ok(EndSessionResult { ended: true })
}

/// Ends a session and everything attached to it, in this same transaction: its locks
/// (`abandoned`), its node leases (rolled back), its keys (deleted); its row goes,
/// `agent.left` says why, and its waiting reads are told.
fn end_session(ctx: &mut WriteCtx<'_>, session: &SessionRow, reason: &str) -> Result<()> {
    let data = serde_json::json!({"reason": reason});
    end_session_as(ctx, session, reason, data).map(|_| ())
}

/// EndAgentSession: an operator ends `name`'s live session as EndSession would, and
/// `agent.left` says `reason: "operator"`, who (`by`) and why (`note`); 404 when the name
/// has no live session.
pub fn end_by_operator(
    ctx: &mut WriteCtx<'_>,
    name: &str,
    by: &str,
    why: &str,
) -> Result<EndAgentSessionResult> {
    let Some(session) = ctx.roster().session(name)? else {
        return Err(Error::NotFound(format!(
            "agent `{name}` has no live session, so there is nothing to end; ListAgents shows the live ones"
        )));
    };
    let locks_ended = ctx
        .leases()
        .leases_of_session(&session.session_id)?
        .into_iter()
        .map(|row| row.resource_key)
        .collect();
    let nodes_rolled_back = ctx.nodes().nodes_of_session(&session.session_id)?.len() as u64;
    let data = serde_json::json!({"by": by, "note": why, "reason": "operator"});
    let seq = end_session_as(ctx, &session, "ended by an operator", data)?;
    Ok(EndAgentSessionResult {
        name: session.name,
        ended: true,
        locks_ended,
        nodes_rolled_back,
        event_seq: seq as u64,
    })
}

/// [`end_session`] with the `agent.left` event's `data` given; the event's seq.
fn end_session_as(
    ctx: &mut WriteCtx<'_>,
    session: &SessionRow,
    reason: &str,
    data: serde_json::Value,
) -> Result<i64> {
    super::super::locks::rules::end_session_leases(ctx, &session.session_id)?;
    super::super::tasks::rules::roll_back_session_nodes(ctx, &session.session_id)?;
    super::super::state::delete_session_keys(ctx, &session.session_id, &session.name)?;
    ctx.roster().delete_session(&session.name)?;
    let seq = event(ctx, EventType::AgentLeft, &session.name, data)?;
    ctx.memory.agents.forget(&session.name);
    for waiter in ctx.memory.agents.take_waiters(&session.name) {
        let ended = Error::LeaseInvalid {
            message: format!(
                "the session ended ({reason}) while it waited; register again with RegisterAgent"
            ),
            data: serde_json::Map::new(),
        };
        ctx.deferred.push((waiter.reply, Err(ended)));
    }
    Ok(seq)
}

fn message(row: MessageRow) -> Result<Message> {
    Ok(Message {
        message_id: row.message_id,
        seq: row.seq as u64,
        from: row.sender,
        to: serde_json::from_str(&row.recipients)?,
        subject: row.subject,
        body: RawValue::from_string(row.body)?,
        thread_id: row.thread_id,
        reply_to: row.reply_to,
        sent_at: format_ms(row.sent_at),
    })
}

/// A page of an inbox after `after`: at most `limit` messages and 8 MiB of them (at least
/// one), so no answer line passes 16 MiB.
fn inbox(storage: &dyn Storage, name: &str, after: u64, limit: u64) -> Result<ReadInboxResult> {
    let mut messages = storage
        .inbox(name, after, limit)?
        .into_iter()
        .map(message)
        .collect::<Result<Vec<_>>>()?;
    super::super::paging::cut(&mut messages, limit)?;
    let next_after = messages.last().map_or(after, |m| m.seq);
    Ok(ReadInboxResult {
        messages,
        next_after,
    })
}

pub fn send(ctx: &mut WriteCtx<'_>, presented: &Presented, s: Send) -> Result<SendMessageResult> {
    let sender = own_session(ctx, presented)?.name;
    let names = match &s.to {
        Recipients::Names(names) => names.clone(),
        // Every agent that ever registered, but not the sender itself.
        Recipients::Everyone(_) => ctx
            .roster()
            .agent_names()?
            .into_iter()
            .filter(|n| *n != sender)
            .collect(),
    };
    let message_id = crate::methods::new_id();
    // The journal says who wrote to whom about what; the body stays in the inboxes.
    let seq = event(
        ctx,
        EventType::MessageSent,
        &sender,
        serde_json::json!({"message_id": message_id, "from": sender, "to": s.to,
            "subject": s.subject, "thread_id": s.thread_id}),
    )?;
    ctx.roster().insert_message(
        &MessageRow {
            seq,
            message_id: message_id.clone(),
            sender,
            recipients: serde_json::to_string(&s.to)?,
            subject: s.subject,
            body: s.body,
            thread_id: s.thread_id,
            reply_to: s.reply_to,
            sent_at: ctx.now_ms,
        },
        &names,
    )?;
    for name in &names {
        for waiter in ctx.memory.agents.take_waiters(name) {
            let answer =
                inbox(ctx.storage(), name, waiter.after, waiter.limit).and_then(|r| reply(&r));
            ctx.deferred.push((waiter.reply, answer));
        }
    }
    Ok(SendMessageResult {
        message_id,
        seq: seq as u64,
    })
}

/// Answers the readers waiting on an inbox that a message reached meanwhile (one sent
/// through another daemon sharing the database); the others go on waiting.
pub fn serve_waiters(ctx: &mut WriteCtx<'_>) -> Result<()> {
    for name in ctx.memory.agents.awaited() {
        let mut i = 0;
        while let Some(waiter) = ctx.memory.agents.waiter(&name, i) {
            let gone = waiter.reply.is_closed();
            if !gone && ctx.roster().inbox_count(&name, waiter.after, None)? == 0 {
                i += 1;
                continue;
            }
            let waiter = ctx
                .memory
                .agents
                .take_waiter(&name, i)
                .expect("index in range");
            if !gone {
                let answer =
                    inbox(ctx.storage(), &name, waiter.after, waiter.limit).and_then(|r| reply(&r));
                ctx.deferred.push((waiter.reply, answer));
            }
        }
    }
    Ok(())
}

pub fn read(
    ctx: &mut WriteCtx<'_>,
    presented: &Presented,
    r: Read,
) -> Result<Served<ReadInboxResult>> {
    let session = own_session(ctx, presented)?;
    let after = match r.after {
        Some(after) => after,
        None => ctx.roster().cursor(&session.name)?,
    };
    let found = inbox(ctx.storage(), &session.name, after, r.limit)?;
    if !found.messages.is_empty() || r.wait_ms == 0 {
        return Ok(Served::Now(found));
    }
    let Some(reply) = ctx.take_reply() else {
        return Err(Error::Internal(
            "a waiting ReadInbox had no reply channel".into(),
        ));
    };
    let deadline = ctx.mono_now + Duration::from_millis(r.wait_ms);
    ctx.memory.agents.wait(
        deadline,
        InboxWaiter {
            name: session.name,
            after,
            limit: r.limit,
            connection: r.connection,
            reply,
        },
    );
    Ok(Served::Later)
}

pub fn ack(ctx: &mut WriteCtx<'_>, presented: &Presented, up_to: u64) -> Result<AckMessagesResult> {
    let name = own_session(ctx, presented)?.name;
    // A cursor past the newest message would hide every later one below it.
    let newest = ctx.roster().newest_message(&name)?;
    if up_to > newest {
        return Err(Error::Invalid(if newest == 0 {
            format!("up_to is {up_to} but the inbox of `{name}` holds no message yet; acknowledge only seqs ReadInbox returned")
        } else {
            format!("up_to is {up_to}, past the newest message of `{name}`'s inbox (seq {newest}); acknowledge at most seq {newest}, the seq of the last message you handled")
        }));
    }
    let cursor = ctx.roster().cursor(&name)?;
    let acked = if up_to > cursor {
        let acked = ctx.roster().inbox_count(&name, cursor, Some(up_to))?;
        ctx.roster().set_cursor(&name, up_to)?;
        acked
    } else {
        0
    };
    let unread = ctx.roster().inbox_count(&name, cursor.max(up_to), None)?;
    Ok(AckMessagesResult { acked, unread })
}

/// ListAgents: a page of live sessions by name, after `after`, with what their names hold
/// and their unread count.
pub fn list(storage: &dyn Storage, after: Option<&str>, limit: u64) -> Result<ListAgentsResult> {
    let mut sessions = storage.sessions()?;
    sessions.sort_by(|a, b| a.name.cmp(&b.name));
    sessions.retain(|s| after.is_none_or(|after| s.name.as_str() > after));
    let more = sessions.len() as u64 > limit;
    sessions.truncate(limit as usize);
    let mut agents = Vec::new();
    for s in sessions {
        let locks = storage
            .leases("", Some(&s.name))?
            .into_iter()
            .map(|l| l.resource_key)
            .collect();
        let cursor = storage.cursor(&s.name)?;
        let nodes = storage
            .nodes_leased_by(&s.name)?
            .into_iter()
            .map(|(task_id, node_id)| NodeRef { task_id, node_id })
            .collect();
        agents.push(AgentEntry {
            unread: storage.inbox_count(&s.name, cursor, None)?,
            metadata: s.metadata.map(RawValue::from_string).transpose()?,
            name: s.name,
            role: s.role,
            started_at: format_ms(s.started_at),
            last_seen: format_ms(s.last_seen),
            expires_at: format_ms(s.expires_at),
            nodes,
            locks,
        });
    }
    let next = match super::super::paging::cut(&mut agents, limit)? || more {
        true => agents.last().map(|a| a.name.clone()),
        false => None,
    };
    Ok(ListAgentsResult { agents, next })
}

/// Ends sessions whose deadline passed and answers reads whose wait ran out (empty).
pub fn expire_due(ctx: &mut WriteCtx<'_>) -> Result<()> {
    while let Some(due) = ctx.memory.agents.pop_due(ctx.mono_now) {
        match due {
            Due::Lease(name) => match ctx.roster().session(&name)? {
                Some(s) if ctx.memory.agents.session_of(&name) == Some(s.session_id.as_str()) => {
                    end_session(ctx, &s, "expired")?;
                }
                _ => ctx.memory.agents.forget(&name),
            },
            Due::Wait(w) => {
                let answer = reply(&ReadInboxResult {
                    messages: Vec::new(),
                    next_after: w.after,
                });
                ctx.deferred.push((w.reply, answer));
            }
        }
    }
    ctx.memory.agents.compact();
    Ok(())
}

/// A connection closed: its `release_on_disconnect` sessions end (`disconnected`).
pub fn connection_closed(ctx: &mut WriteCtx<'_>, connection: u64) -> Result<()> {
    for name in ctx.memory.agents.connection_closed(connection) {
        if let Some(s) = ctx.roster().session(&name)? {
            end_session(ctx, &s, "disconnected")?;
        }
    }
    Ok(())
}

/// At start-up: sessions that expired while the daemon was down, or were tied to a
/// connection, end; the rest are tracked for their remaining time.
pub fn recover(ctx: &mut WriteCtx<'_>) -> Result<()> {
    for s in ctx.roster().sessions()? {
        if s.expires_at <= ctx.now_ms {
            end_session(ctx, &s, "expired")?;
        } else if s.holder_connection.is_some() && !ctx.shared {
            end_session(ctx, &s, "disconnected")?;
        } else {
            // Shared: see `locks::rules::recover`.
            let remaining = Duration::from_millis((s.expires_at - ctx.now_ms) as u64);
            let deadline = ctx.mono_now + remaining;
            ctx.memory
                .agents
                .track(s.name, s.session_id, deadline, s.holder_connection);
        }
    }
    Ok(())
}
