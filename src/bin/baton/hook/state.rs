//! What the hooks remember between runs, one small JSON file per agent and batond (under
//! `$XDG_STATE_HOME/baton/hooks`, else `~/.local/state/baton/hooks`): how far they read the
//! journal and the messages they saw sent to the agent there (for the subjects of its
//! unread mail), the files the guard refused it (to say when they are free), and the
//! sessions whose stop was already blocked in this turn (for harnesses whose stop input does
//! not say so). Losing the file loses nothing that matters: it is rebuilt as the hooks run.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Messages kept, newest last.
const KEPT_MESSAGES: usize = 50;
/// Refused files kept; older refusals are forgotten after an hour.
const KEPT_REFUSALS: usize = 20;
pub const REFUSAL_MEMORY_MS: i64 = 3_600_000;

#[derive(Default, Serialize, Deserialize)]
pub struct State {
    /// The journal seq read up to (message.sent events).
    #[serde(default)]
    pub scanned_to: Option<u64>,
    /// Messages sent to the agent, oldest first.
    #[serde(default)]
    pub messages: Vec<Seen>,
    /// Keys the guard refused the agent, oldest first.
    #[serde(default)]
    pub refused: Vec<Refused>,
    /// Sessions whose stop the stop hook blocked since their last prompt.
    #[serde(default)]
    pub stopped: Vec<String>,
}

#[derive(Clone, Serialize, Deserialize)]
pub struct Seen {
    pub seq: u64,
    pub from: String,
    pub subject: Option<String>,
}

#[derive(Clone, Serialize, Deserialize)]
pub struct Refused {
    pub key: String,
    pub holder: String,
    /// Epoch ms.
    pub at_ms: i64,
}

/// The folder of every state file baton keeps (`$XDG_STATE_HOME/baton`, else
/// `~/.local/state/baton`).
pub fn root() -> Option<PathBuf> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(state) = env("XDG_STATE_HOME") {
        return Some(PathBuf::from(state).join("baton"));
    }
    env("HOME").map(|home| PathBuf::from(home).join(".local/state/baton"))
}

/// A short stable name for `parts`, for a file name.
pub fn digest(parts: &[&str]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    hash.finalize()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The state file of `agent` at batond `endpoint`.
pub fn path(endpoint: &str, agent: &str) -> Option<PathBuf> {
    Some(
        root()?
            .join("hooks")
            .join(digest(&[endpoint, agent]) + ".json"),
    )
}

impl State {
    pub fn load(path: &Path) -> State {
        std::fs::read(path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Written whole through a temporary file, so a reader never sees half of it; a
    /// failure only costs what the next run would have remembered.
    pub fn save(&mut self, path: &Path) {
        let drop_from = self.messages.len().saturating_sub(KEPT_MESSAGES);
        self.messages.drain(..drop_from);
        let drop_from = self.refused.len().saturating_sub(KEPT_REFUSALS);
        self.refused.drain(..drop_from);
        let drop_from = self.stopped.len().saturating_sub(KEPT_REFUSALS);
        self.stopped.drain(..drop_from);
        let Some(dir) = path.parent() else { return };
        let written = std::fs::create_dir_all(dir).and_then(|()| {
            let temp = path.with_extension(format!("{}.tmp", std::process::id()));
            std::fs::write(&temp, serde_json::to_vec(self).unwrap_or_default())?;
            std::fs::rename(&temp, path)
        });
        if let Err(e) = written {
            eprintln!(
                "baton hook: cannot keep its state in {} ({e}); carrying on without it",
                path.display()
            );
        }
    }

    /// Remembers that the guard refused `key`, held by `holder`, now.
    pub fn refused(&mut self, key: &str, holder: &str, now_ms: i64) {
        self.refused.retain(|r| r.key != key);
        self.refused.push(Refused {
            key: key.to_string(),
            holder: holder.to_string(),
            at_ms: now_ms,
        });
    }
}

/// The wall clock, epoch ms.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
