//! What both engines make of the columns they read, written once: the names of node states,
//! task statuses and lock modes, JSON stored as text, times stored as epoch milliseconds
//! (the wire's are RFC 3339) and a token's scopes. Each engine reads its columns into the
//! plain structs here (or into the boundary's row types) and converts them with these
//! functions; what is shaped for an answer beyond them is the rules' (`methods/`).

use serde_json::value::RawValue;

use crate::clock::format_ms;
use crate::error::{Error, Result};
use crate::protocol::journal::Event;
use crate::protocol::locks::{LockMode, Previous};
use crate::protocol::state::{HistoryEntry, RecordState};
use crate::protocol::tasks::{NodeState, TaskStatus};

use super::boundary::StoredToken;

fn unknown(what: &str, text: &str) -> Error {
    Error::Unavailable(format!(
        "the database holds an unknown {what} `{text}`; was it written by a newer batond?"
    ))
}

/// A node's state as stored (its wire name).
pub(crate) fn node_state(text: &str) -> Result<NodeState> {
    NodeState::parse(text).ok_or_else(|| unknown("node state", text))
}

/// A task's status as stored (its wire name).
pub(crate) fn task_status(text: &str) -> Result<TaskStatus> {
    TaskStatus::parse(text).ok_or_else(|| unknown("task status", text))
}

/// A lease's mode as stored: `shared`, or anything else for exclusive (leases stored before
/// modes were kept have none).
pub(crate) fn lock_mode(text: &str) -> LockMode {
    match text {
        "shared" => LockMode::Shared,
        _ => LockMode::Exclusive,
    }
}

/// A stored value: its JSON text, or null when there is none (a tombstone's).
fn value(text: Option<String>) -> Result<Box<RawValue>> {
    Ok(RawValue::from_string(
        text.unwrap_or_else(|| "null".into()),
    )?)
}

/// A key's current row as stored: value, version, revision, updated_by, updated_at.
pub(crate) struct RecordColumns {
    /// JSON text.
    pub value: Option<String>,
    pub version: u64,
    pub revision: u64,
    pub updated_by: Option<String>,
    /// Epoch milliseconds.
    pub updated_at: i64,
}

impl RecordColumns {
    pub(crate) fn into_state(self) -> Result<RecordState> {
        Ok(RecordState {
            value: value(self.value)?,
            version: self.version,
            revision: self.revision,
            updated_by: self.updated_by,
            updated_at: format_ms(self.updated_at),
        })
    }
}

/// One version of a key as stored.
pub(crate) struct HistoryColumns {
    pub version: u64,
    /// JSON text; None for a tombstone.
    pub value: Option<String>,
    pub updated_by: Option<String>,
    /// Epoch milliseconds.
    pub updated_at: i64,
    pub revision: u64,
    pub deleted: bool,
}

impl HistoryColumns {
    pub(crate) fn into_entry(self) -> Result<HistoryEntry> {
        Ok(HistoryEntry {
            version: self.version,
            value: value(self.value)?,
            updated_by: self.updated_by,
            updated_at: format_ms(self.updated_at),
            revision: self.revision,
            deleted: self.deleted,
        })
    }
}

/// An event as stored.
pub(crate) struct EventColumns {
    pub seq: u64,
    pub kind: String,
    /// Epoch milliseconds.
    pub at: i64,
    pub actor: Option<String>,
    pub namespace: Option<String>,
    pub key: Option<String>,
    pub resource_key: Option<String>,
    pub task_id: Option<String>,
    pub node_id: Option<String>,
    /// JSON text.
    pub data: String,
}

impl EventColumns {
    pub(crate) fn into_event(self) -> Result<Event> {
        Ok(Event {
            seq: self.seq,
            kind: self.kind,
            at: format_ms(self.at),
            actor: self.actor,
            namespace: self.namespace,
            key: self.key,
            resource_key: self.resource_key,
            task_id: self.task_id,
            node_id: self.node_id,
            data: RawValue::from_string(self.data)?,
        })
    }
}

/// How the last lease on a key ended, as stored, the way an acquisition shows it.
pub(crate) fn previous(
    outcome: String,
    owner: String,
    at_ms: i64,
    moved_to: Option<String>,
    note: Option<String>,
) -> Previous {
    Previous {
        outcome,
        owner,
        at: format_ms(at_ms),
        moved_to,
        note,
    }
}

/// Reads the stored scopes (a JSON array of strings) into the token.
pub(crate) fn with_scopes((mut token, scopes): (StoredToken, String)) -> Result<StoredToken> {
    token.scopes = serde_json::from_str(&scopes).map_err(|e| {
        Error::Unavailable(format!(
            "the token {} has unreadable scopes in the database ({e}); revoke it and create a new one",
            token.token_id
        ))
    })?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_stored() {
        assert_eq!(node_state("FAILED").unwrap(), NodeState::Failed);
        assert_eq!(task_status("cancelled").unwrap(), TaskStatus::Cancelled);
        for bad in [node_state("failed").err(), task_status("DONE").err()] {
            assert!(matches!(bad, Some(Error::Unavailable(why)) if why.contains("newer batond")));
        }
        assert_eq!(lock_mode("shared"), LockMode::Shared);
        assert_eq!(lock_mode("exclusive"), LockMode::Exclusive);
        assert_eq!(lock_mode(""), LockMode::Exclusive);
    }

    #[test]
    fn values_and_times_as_the_wire_shows_them() {
        let state = RecordColumns {
            value: None,
            version: 3,
            revision: 9,
            updated_by: Some("w".into()),
            updated_at: 1_700_000_000_123,
        }
        .into_state()
        .unwrap();
        assert_eq!(state.value.get(), "null");
        assert_eq!(state.updated_at, "2023-11-14T22:13:20.123Z");
        let entry = HistoryColumns {
            version: 2,
            value: Some(r#"{"a": [1, 2.50]}"#.into()),
            updated_by: None,
            updated_at: 0,
            revision: 4,
            deleted: false,
        }
        .into_entry()
        .unwrap();
        // The text exactly as stored.
        assert_eq!(entry.value.get(), r#"{"a": [1, 2.50]}"#);
        assert_eq!(entry.updated_at, "1970-01-01T00:00:00.000Z");
        let event = EventColumns {
            seq: 5,
            kind: "kv.set".into(),
            at: 1_700_000_000_123,
            actor: None,
            namespace: Some("ns".into()),
            key: Some("k".into()),
            resource_key: None,
            task_id: None,
            node_id: None,
            data: "{}".into(),
        };
        let event = event.into_event().unwrap();
        assert_eq!(
            (event.seq, event.at.as_str()),
            (5, "2023-11-14T22:13:20.123Z")
        );
        let previous = previous("released".into(), "w".into(), 0, None, Some("n".into()));
        assert_eq!(previous.at, "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn unreadable_stored_json_is_an_error() {
        let broken = HistoryColumns {
            version: 1,
            value: Some("{".into()),
            updated_by: None,
            updated_at: 0,
            revision: 1,
            deleted: false,
        };
        assert!(broken.into_entry().is_err());
        let token = StoredToken {
            token_id: "t".into(),
            name: "n".into(),
            scopes: Vec::new(),
            created_at_ms: 0,
            expires_at_ms: None,
            revoked_at_ms: None,
            last_used_at_ms: None,
        };
        assert!(matches!(
            with_scopes((token.clone(), "[1".into())),
            Err(Error::Unavailable(_))
        ));
        assert_eq!(
            with_scopes((token, r#"["read"]"#.into())).unwrap().scopes,
            ["read"]
        );
    }
}
