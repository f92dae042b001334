//! `baton agent ...`, `baton agents`, `baton send`, `baton inbox`, `baton ack`: agents and
//! their inboxes from a shell. A session id is a secret: `agent join` prints it alone on
//! stdout (`export BATON_SESSION=$(baton agent join NAME)`), and the other commands take it
//! from --session or BATON_SESSION.

use serde_json::{json, Value};

use baton::client::Connection;
use baton::protocol::agents::{
    AckMessagesResult, ListAgentsResult, Message, ReadInboxResult, Recipients, RegisterAgentResult,
    SendMessageResult,
};
use baton::protocol::operator::EndAgentSessionResult;

use crate::cli::{params, parse_json, AgentCommand};
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
            let p = params(vec![
                ("name", Some(json!(name))),
                ("role", role.map(Value::from)),
                ("ttl_secs", ttl.map(Value::from)),
                ("takeover", takeover.then_some(Value::from(true))),
            ]);
            if let Some(r) = out
                .answer::<RegisterAgentResult>(conn, "RegisterAgent", &p)
                .await?
            {
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
            let p = params(vec![
                ("session_id", Some(json!(session(s)?))),
                ("ttl_secs", ttl.map(Value::from)),
            ]);
            out.raw(&conn.call_raw("AgentHeartbeat", &p).await?);
            Ok(0)
        }
        AgentCommand::Leave { session: s } => {
            let p = json!({ "session_id": session(s)? });
            conn.call_raw("EndSession", &p).await?;
            Ok(0)
        }
        AgentCommand::End { name, reason } => {
            let p = json!({"name": name, "reason": reason});
            let answer = out
                .answer::<EndAgentSessionResult>(conn, "EndAgentSession", &p)
                .await?;
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
    if let Some(r) = out
        .pages::<ListAgentsResult>(conn, "ListAgents", &json!({}), &["agents"], None)
        .await?
    {
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
        json!("*")
    } else {
        json!(to)
    };
    let body = parse_json("BODY", &body).unwrap_or_else(|_| Value::from(body));
    let p = params(vec![
        ("session_id", Some(json!(session(session_flag)?))),
        ("to", Some(to)),
        ("body", Some(body)),
        ("subject", subject.map(Value::from)),
        ("thread_id", thread.map(Value::from)),
    ]);
    if let Some(r) = out
        .answer::<SendMessageResult>(conn, "SendMessage", &p)
        .await?
    {
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
        let p = params(vec![
            ("session_id", Some(json!(session_id))),
            ("after", after.map(Value::from)),
            ("wait_ms", follow.then_some(Value::from(60_000))),
        ]);
        let result = conn.call_raw("ReadInbox", &p).await?;
        if out.json {
            out.raw(&result);
        }
        let page: ReadInboxResult = baton::client::read_as("ReadInbox", &result)?;
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
    let p = json!({"session_id": session(session_flag)?, "up_to": up_to});
    if let Some(r) = out
        .answer::<AckMessagesResult>(conn, "AckMessages", &p)
        .await?
    {
        eprintln!("{} acknowledged, {} unread", r.acked, r.unread);
    }
    Ok(0)
}
