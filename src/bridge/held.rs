//! What an MCP session took that ends with its agent session or its main connection (the
//! claims and node leases the bridge keeps track of), and the notes that tell the model
//! what ended: a text block and a `session_note` field of the next result.

use std::collections::BTreeMap;

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Value};

/// What ended with a session or a connection.
#[derive(Default)]
pub(super) struct Lost {
    /// (lease id, resource key)
    pub(super) claims: Vec<(String, String)>,
    /// (task id, node id)
    pub(super) nodes: Vec<(String, String)>,
}

impl Lost {
    pub(super) fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.nodes.is_empty()
    }

    pub(super) fn extend(&mut self, other: Lost) {
        self.claims.extend(other.claims);
        self.nodes.extend(other.nodes);
    }

    /// What ended, in words: "your claims on ... and your node ... of task ...".
    pub(super) fn what(&self) -> Option<String> {
        let claims: Vec<&str> = self.claims.iter().map(|(_, key)| key.as_str()).collect();
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|(task, node)| format!("node {node} of task {task}"))
            .collect();
        match (claims.is_empty(), nodes.is_empty()) {
            (true, true) => None,
            (false, true) => Some(format!("your claims on {}", claims.join(", "))),
            (true, false) => Some(format!("your {}", nodes.join(", "))),
            (false, false) => Some(format!(
                "your claims on {} and your {}",
                claims.join(", "),
                nodes.join(", ")
            )),
        }
    }

    /// The sentence naming what ended, and the one thing to do about it.
    pub(super) fn told(&self) -> String {
        let Some(what) = self.what() else {
            return "Nothing you held was lost.".into();
        };
        let todo = match (self.claims.is_empty(), self.nodes.is_empty()) {
            (false, true) => "Claim again with baton_claim each one you still need before you change it.",
            (true, false) => "Drop that work and take a node again with baton_task_next.",
            _ => "Before you go on, claim again with baton_claim what you still need and take a node again with baton_task_next.",
        };
        format!("Lost with it (no longer yours; others may take them): {what}. {todo}")
    }

    fn value(&self) -> (Value, Value) {
        let claims = self.claims.iter().map(|(_, key)| json!(key)).collect();
        let nodes = self
            .nodes
            .iter()
            .map(|(task, node)| json!({"task_id": task, "node_id": node}))
            .collect();
        (Value::Array(claims), Value::Array(nodes))
    }
}

/// What the bridge took that ends with its session or its main connection.
#[derive(Default)]
pub(super) struct Held {
    /// By lease id.
    pub(super) claims: BTreeMap<String, Claim>,
    /// By node lease id: only those tied to a session.
    pub(super) nodes: BTreeMap<String, Node>,
}

pub(super) struct Claim {
    pub(super) key: String,
    pub(super) session: Option<String>,
    /// The main connection it was taken on (None: a connection of its own, parked).
    pub(super) epoch: Option<u64>,
}

pub(super) struct Node {
    pub(super) task_id: String,
    pub(super) node_id: String,
    pub(super) session: String,
}

impl Held {
    /// Takes what ends with `session`, registered on the main connection of `epoch`.
    pub(super) fn take_session(&mut self, session: &str, epoch: u64, dropped: bool) -> Lost {
        let ends = |c: &Claim| {
            c.session.as_deref() == Some(session) || (dropped && c.epoch == Some(epoch))
        };
        let mut lost = Lost::default();
        self.claims.retain(|id, c| {
            let keep = !ends(c);
            if !keep {
                lost.claims.push((id.clone(), c.key.clone()));
            }
            keep
        });
        self.nodes.retain(|_, n| {
            let keep = n.session != session;
            if !keep {
                lost.nodes.push((n.task_id.clone(), n.node_id.clone()));
            }
            keep
        });
        lost.claims.sort_by(|a, b| a.1.cmp(&b.1));
        lost.nodes.sort();
        lost
    }

    /// Takes the claims of no session taken on a main connection other than `epoch`'s.
    pub(super) fn take_dropped(&mut self, epoch: u64) -> Lost {
        let mut lost = Lost::default();
        self.claims.retain(|id, c| {
            let keep = c.session.is_some() || c.epoch.is_none_or(|e| e == epoch);
            if !keep {
                lost.claims.push((id.clone(), c.key.clone()));
            }
            keep
        });
        lost.claims.sort_by(|a, b| a.1.cmp(&b.1));
        lost
    }
}

/// A note the next result carries: in its text, and as its `session_note` field.
pub(super) struct Note {
    text: String,
    value: Value,
}

impl Note {
    pub(super) fn new(text: String, agent: Option<&str>, joined: bool, lost: &Lost) -> Note {
        let (claims, nodes) = lost.value();
        let value = json!({"note": text, "agent": agent, "joined": joined,
            "lost_claims": claims, "lost_nodes": nodes});
        Note { text, value }
    }
}

/// Adds `notes` to a result: a text block each, and (on a structured result) the last as
/// its `session_note` field.
pub(super) fn with_notes(mut result: CallToolResult, notes: Vec<Note>) -> CallToolResult {
    for note in notes {
        result.content.push(ContentBlock::text(note.text));
        if let Some(Value::Object(fields)) = &mut result.structured_content {
            fields.insert("session_note".into(), note.value);
            // A success's first text mirrors its structured result (an error's, such as a
            // busy claim's, is its hint).
            if result.is_error != Some(true) {
                if let Some(ContentBlock::Text(text)) = result.content.first_mut() {
                    text.text = serde_json::to_string(&fields).unwrap_or_default();
                }
            }
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(held: &mut Held, id: &str, key: &str, session: Option<&str>, epoch: Option<u64>) {
        let claim = Claim {
            key: key.into(),
            session: session.map(str::to_string),
            epoch,
        };
        held.claims.insert(id.into(), claim);
    }

    #[test]
    fn what_ends_with_a_session_and_with_a_connection() {
        let mut held = Held::default();
        claim(&mut held, "1", "tool:b", Some("s1"), Some(0));
        claim(&mut held, "2", "file:a", Some("s1"), None);
        claim(&mut held, "3", "tool:unbound", None, Some(0));
        claim(&mut held, "4", "tool:parked", None, None);
        let node = Node {
            task_id: "t".into(),
            node_id: "n1".into(),
            session: "s1".into(),
        };
        held.nodes.insert("n".into(), node);
        // The session ended, its connection still open: only what was tied to it.
        let ended = held.take_session("s1", 0, false);
        let keys: Vec<&str> = ended.claims.iter().map(|(_, k)| k.as_str()).collect();
        assert_eq!(keys, ["file:a", "tool:b"], "in key order");
        assert_eq!(ended.nodes, [("t".to_string(), "n1".to_string())]);
        assert_eq!(held.claims.len(), 2);
        // The connection of epoch 0 dropped: the claim of no session on it ended too.
        let dropped = held.take_dropped(1);
        assert_eq!(
            dropped.claims,
            [("3".to_string(), "tool:unbound".to_string())]
        );
        assert_eq!(held.claims.keys().collect::<Vec<_>>(), ["4"]);
    }

    #[test]
    fn a_note_names_what_ended_and_gives_one_instruction() {
        let lost = Lost {
            claims: vec![("1".into(), "file:a".into())],
            nodes: vec![("t".into(), "n1".into())],
        };
        let told = lost.told();
        assert!(
            told.contains("your claims on file:a and your node n1 of task t"),
            "{told}"
        );
        assert!(
            told.contains("baton_claim") && told.contains("baton_task_next"),
            "{told}"
        );
        assert_eq!(Lost::default().told(), "Nothing you held was lost.");
        let note = Note::new("Note: x".into(), Some("alice"), true, &lost);
        let result = with_notes(
            CallToolResult::success(vec![ContentBlock::text("{}")]),
            vec![note],
        );
        assert_eq!(result.content.len(), 2);
        let mut structured = CallToolResult::success(vec![ContentBlock::text("{}")]);
        structured.structured_content = Some(json!({"found": false}));
        let note = Note::new("Note: y".into(), Some("alice"), true, &lost);
        let result = with_notes(structured, vec![note]);
        let value = result.structured_content.unwrap();
        assert_eq!(value["session_note"]["lost_claims"], json!(["file:a"]));
        let ContentBlock::Text(mirror) = &result.content[0] else {
            panic!("text")
        };
        assert!(
            mirror.text.contains("session_note"),
            "the text mirrors the result"
        );
    }
}
