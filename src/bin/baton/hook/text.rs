//! The lines the hooks write for the model: short, one fact a line, each naming the MCP
//! tool (of `mcp-bridge`) that acts on it. Never a lease id or a session id: those are the
//! holder's credentials.

use super::facts::{Facts, NodeLease};
use super::state::Seen;

/// Subjects named at most; the rest are counted.
const SUBJECTS: usize = 3;

/// "45 s", "9 min", "2 h 5 min".
pub fn left(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..=59 => format!("{secs} s"),
        60..=3599 => format!("{} min", secs / 60),
        _ => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
    }
}

/// "2 unread messages" and who sent the first ones ("from alice \"review\", ...").
fn messages(facts: &Facts, adjective: &str) -> (String, String) {
    let count = format!(
        "{} {adjective} message{}",
        facts.unread,
        if facts.unread == 1 { "" } else { "s" }
    );
    let named: Vec<String> = facts
        .unread_seen
        .iter()
        .take(SUBJECTS)
        .map(|m: &Seen| match &m.subject {
            Some(subject) => format!("from {} \"{}\"", m.from, one_line(subject, 80)),
            None => format!("from {} (no subject)", m.from),
        })
        .collect();
    let mut senders = named.join(", ");
    let more = facts.unread.saturating_sub(named.len() as u64);
    if !named.is_empty() && more > 0 {
        senders.push_str(&format!(" and {more} more"));
    }
    (count, senders)
}

/// `text` on one line, at most `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}...", &flat[..cut]),
        None => flat,
    }
}

fn node(lease: &NodeLease) -> String {
    match lease.remaining_ms {
        Some(ms) => format!(
            "node {} of task {} ({} left)",
            lease.node_id,
            lease.task_id,
            left(ms)
        ),
        None => format!("node {} of task {}", lease.node_id, lease.task_id),
    }
}

/// The context hook's lines; None when there is nothing to say.
pub fn context(agent: &str, facts: &Facts) -> Option<String> {
    if facts.is_empty() {
        return None;
    }
    let mut lines = vec![format!("Baton (you are agent {agent}):")];
    if facts.unread > 0 {
        let (count, senders) = messages(facts, "unread");
        let senders = if senders.is_empty() {
            String::new()
        } else {
            format!(": {senders}")
        };
        lines.push(format!(
            "- {count}{senders}. Read them with baton_inbox; acknowledge them with baton_ack once handled."
        ));
    }
    if !facts.claims.is_empty() {
        let claims: Vec<String> = facts
            .claims
            .iter()
            .map(|c| format!("{} ({} left)", c.key, left(c.remaining_ms)))
            .collect();
        lines.push(format!(
            "- You hold {}. Keep each with baton_heartbeat while you work; release it with baton_release when done.",
            claims.join(", ")
        ));
    }
    if !facts.nodes.is_empty() {
        let nodes: Vec<String> = facts.nodes.iter().map(node).collect();
        lines.push(format!(
            "- You hold task {}. Keep it with baton_task_heartbeat; finish with baton_task_complete or baton_task_fail.",
            nodes.join(", ")
        ));
    }
    for freed in &facts.freed {
        lines.push(format!(
            "- {} is free now ({} held it when your edit was refused). Claim it with baton_claim before you edit it.",
            freed.key, freed.holder
        ));
    }
    Some(lines.join("\n"))
}

/// The stop hook's reason to go on; None when the agent holds nothing and has no mail.
pub fn stop(agent: &str, facts: &Facts) -> Option<String> {
    if facts.unread == 0 && facts.claims.is_empty() && facts.nodes.is_empty() {
        return None;
    }
    let mut lines = vec![format!(
        "Before you finish, settle what you (agent {agent}) still hold in Baton:"
    )];
    for claim in &facts.claims {
        lines.push(format!(
            "- claim {} ({} left): release it with baton_release, saying what you did (outcome), once you are done with it.",
            claim.key,
            left(claim.remaining_ms)
        ));
    }
    for lease in &facts.nodes {
        lines.push(format!(
            "- task {}: finish it with baton_task_complete or baton_task_fail.",
            node(lease)
        ));
    }
    if facts.unread > 0 {
        let (count, senders) = messages(facts, "unacknowledged");
        let senders = if senders.is_empty() {
            String::new()
        } else {
            format!(" ({senders})")
        };
        lines.push(format!(
            "- {count}{senders}: read them with baton_inbox, act on them, then acknowledge them with baton_ack."
        ));
    }
    lines.push(
        "If you mean to keep something across turns, say so and stop again: you are told once a turn."
            .into(),
    );
    Some(lines.join("\n"))
}
