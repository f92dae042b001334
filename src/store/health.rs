//! What storage has shown of its health: the first sign that the database file is damaged
//! (sticky: a file does not heal) and why the last commit failed (until one succeeds).
//! Reads and the writer both report here; Health answers from it.

use std::sync::Mutex;

use crate::error::{Error, DAMAGED};

#[derive(Default)]
pub struct StorageHealth {
    damage: Mutex<Option<String>>,
    commit_failure: Mutex<Option<String>>,
}

impl StorageHealth {
    /// What Health should say about storage: the damage seen, else the last commit failure.
    pub fn failure(&self) -> Option<String> {
        let damage = self
            .damage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        damage.or_else(|| {
            self.commit_failure
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        })
    }

    /// Remembers an error if it says the database file is damaged.
    pub fn note_error(&self, err: &Error) {
        if let Error::Unavailable(message) = err {
            if message.starts_with(DAMAGED) {
                let mut damage = self.damage.lock().unwrap_or_else(|e| e.into_inner());
                damage.get_or_insert_with(|| message.clone());
            }
        }
    }

    /// A commit failed with `err`.
    pub fn commit_failed(&self, err: &Error) {
        self.note_error(err);
        *self
            .commit_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(err.to_string());
    }

    /// A commit succeeded: whether storage had been failing until now.
    pub fn commit_succeeded(&self) -> bool {
        self.commit_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .is_some()
    }
}
