//! `baton agent ...`, `baton agents`, `baton send`, `baton inbox`, `baton ack`: agents and
//! their inboxes from a shell. A session id is a secret: `agent join` prints it alone on
//! stdout (`export BATON_SESSION=$(baton agent join NAME)`), and the other commands take it
//! from --session or BATON_SESSION.

use serde_json::Value;

use baton::client::{read, Connection};
use baton::protocol::agents::{
    AckMessagesParams, AgentHeartbeatParams, EndSessionParams, ListAgentsParams, Message,
    ReadInboxParams, Recipients, RegisterAgentParams, SendMessageParams,
};
use baton::protocol::operator::EndAgentSessionParams;

use crate::cli::{json, parse_json, AgentCommand};
use crate::failure::{Failure, Outcome};
use crate::out::{compact_raw, or_dash, text, Out};

/// --session, else BATON_SESSION.
pub fn session(flag: Option<String>) -> Result<String, Failure> {
    flag.or_else(|| std::env::var("BATON_SESSION").ok())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            Failure::new(
                2,
                "no session: pass --session, or export BATON_SESSION=$(baton agent join NAME)",
            )
        })
}

pub async fn agent(command: AgentCommand, out: &Out, conn: &mut Connection) -> Outcome {
    match command {
        AgentCommand::Join {
            name,
            role,
            ttl,
            takeover,
        } => {
            let join = RegisterAgentParams {
                name,
                role,
                metadata: None,
                ttl_secs: ttl,
                release_on_disconnect: false,
                takeover,
                idempotency_key: None,
            };
            if let Some(r) = out.answer(conn, &join).await? {
                println!("{}", r.session_id);
                eprintln!(
                    "joined as {} until {} (heartbeat with `baton agent heartbeat`; the session id is shown only now)",
                    text(&r.name),
                    r.expires_at
                );
            }
            Ok(0)
        }
        AgentCommand::Heartbeat { session: s, ttl } => {
            let heartbeat = AgentHeartbeatParams {
                session_id: session(s)?,
                ttl_secs: ttl,
                idempotency_key: None,
            };
            out.raw(&conn.send(&heartbeat).await?);
            Ok(0)
        }
        AgentCommand::Leave { session: s } => {
            let leave = EndSessionParams {
                session_id: session(s)?,
                idempotency_key: None,
            };
            conn.send(&leave).await?;
            Ok(0)
        }
        AgentCommand::End { name, reason } => {
            let end = EndAgentSessionParams {
                name,
                reason,
                idempotency_key: None,
            };
            let answer = out.answer(conn, &end).await?;
            if let Some(r) = answer {
                let locks: Vec<String> = r.locks_ended.iter().map(|k| text(k)).collect();
                println!(
                    "{} {}: {} locks ended{}{}, {} nodes rolled back",
                    out.status("ended"),
                    text(&r.name),
                    locks.len(),
                    if locks.is_empty() { "" } else { " " },
                    if locks.is_empty() {
                        String::new()
                    } else {
                        format!("({})", locks.join(", "))
                    },
                    r.nodes_rolled_back
                );
            }
            Ok(0)
        }
    }
}

pub async fn agents(out: &Out, conn: &mut Connection) -> Outcome {
    let list = ListAgentsParams {
        limit: None,
        after: None,
    };
    if let Some(r) = out.pages(conn, &list, &["agents"], None).await? {
        let rows: Vec<Vec<String>> = r
            .agents
            .iter()
            .map(|a| {
                vec![
                    text(&a.name),
                    or_dash(a.role.as_deref()),
                    a.last_seen.clone(),
                    a.locks.len().to_string(),
                    a.nodes.len().to_string(),
                    a.unread.to_string(),
                ]
            })
            .collect();
        out.table(
            &["NAME", "ROLE", "LAST SEEN", "LOCKS", "NODES", "UNREAD"],
            &rows,
        );
    }
    Ok(0)
}

pub async fn send(
    session_flag: Option<String>,
    to: Vec<String>,
    body: String,
    subject: Option<String>,
    thread: Option<String>,
    out: &Out,
    conn: &mut Connection,
) -> Outcome {
    let to = if to.len() == 1 && to[0] == "*" {
        Recipients::Everyone("*".into())
    } else {
        Recipients::Names(to)
    };
    let body = parse_json("BODY", &body).unwrap_or_else(|_| Value::from(body));
    let message = SendMessageParams {
        session_id: session(session_flag)?,
        to,
        subject,
        body: json(&body),
        thread_id: thread,
        reply_to: None,
        idempotency_key: None,
    };
    if let Some(r) = out.answer(conn, &message).await? {
        println!("{}", r.seq);
    }
    Ok(0)
}

fn recipients(to: &Recipients) -> String {
    match to {
        Recipients::Names(names) => names.join(","),
        Recipients::Everyone(all) => all.clone(),
    }
}

fn print(out: &Out, messages: &[Message]) {
    let rows: Vec<Vec<String>> = messages
        .iter()
        .map(|m| {
            vec![
                m.seq.to_string(),
                text(&m.from),
                recipients(&m.to),
                or_dash(m.subject.as_deref()),
                compact_raw(&m.body, 60),
                m.sent_at.clone(),
            ]
        })
        .collect();
    out.table(&["SEQ", "FROM", "TO", "SUBJECT", "BODY", "SENT"], &rows);
}

pub async fn inbox(
    session_flag: Option<String>,
    after: Option<u64>,
    follow: bool,
    out: &Out,
    conn: &mut Connection,
) -> Outcome {
    let session_id = session(session_flag)?;
    let mut after = after;
    loop {
        let read_inbox = ReadInboxParams {
            session_id: session_id.clone(),
            after,
            limit: None,
            wait_ms: follow.then_some(60_000),
        };
        let result = conn.send(&read_inbox).await?;
        if out.json {
            out.raw(&result);
        }
        let page = read::<ReadInboxParams>(&result)?;
        if !out.json && (!page.messages.is_empty() || !follow) {
            print(out, &page.messages);
        }
        if !follow {
            return Ok(0);
        }
        after = Some(page.next_after);
    }
}

pub async fn ack(
    session_flag: Option<String>,
    up_to: u64,
    out: &Out,
    conn: &mut Connection,
) -> Outcome {
    let ack = AckMessagesParams {
        session_id: session(session_flag)?,
        up_to,
        idempotency_key: None,
    };
    if let Some(r) = out.answer(conn, &ack).await? {
        eprintln!("{} acknowledged, {} unread", r.acked, r.unread);
    }
    Ok(0)
}
