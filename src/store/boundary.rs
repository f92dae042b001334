//! The storage boundary: what the rules (`methods/`) ask of storage, with no rule in it and
//! no SQL. SQLite implements it today (`store::state` for [`Records`], `store::journal`
//! for [`Journal`]); a second engine implements the same traits and the rules stay as
//! they are.
//!
//! Versions, tombstones, compare-and-set, Txn and the journal event of each write are
//! rules: they live in `methods::state` and call only these methods.

use crate::error::Result;
use crate::protocol::state::{HistoryEntry, Record, RecordState};

pub use super::journal::NewEvent;

/// A key's stored row: its live value, or the tombstone a delete left.
#[derive(Debug, Clone)]
pub struct StoredVersion {
    pub version: u64,
    pub deleted: bool,
    /// JSON text (None on a tombstone).
    pub value: Option<String>,
    pub updated_by: Option<String>,
    /// Epoch milliseconds.
    pub updated_at_ms: i64,
}

/// One version to store: the key's current row becomes this, and it joins the history.
pub struct NewVersion<'a> {
    pub namespace: &'a str,
    pub key: &'a str,
    pub version: u64,
    /// JSON text; None writes a tombstone.
    pub value: Option<&'a str>,
    pub revision: i64,
    pub updated_by: Option<&'a str>,
    pub at_ms: i64,
}

/// Versioned records: the current row of each key and every version it had.
pub trait Records {
    /// The key's current row, live or tombstone.
    fn stored(&self, namespace: &str, key: &str) -> Result<Option<StoredVersion>>;
    /// The key's live record (a tombstone is absence).
    fn live(&self, namespace: &str, key: &str) -> Result<Option<RecordState>>;
    /// Makes `version` the key's current row and appends it to its history.
    fn store_version(&self, version: &NewVersion<'_>) -> Result<()>;
    /// Every live key of a namespace with its version, in key order.
    fn live_versions(&self, namespace: &str) -> Result<Vec<(String, u64)>>;
    /// Live records of a namespace in key order, after `after`, starting with `prefix`, at
    /// most `limit`; and whether more may follow.
    fn list(
        &self,
        namespace: &str,
        prefix: &str,
        after: Option<&str>,
        limit: u64,
    ) -> Result<(Vec<Record>, bool)>;
    /// Versions of one key before `before_version` (all when None), newest first.
    fn history(
        &self,
        namespace: &str,
        key: &str,
        before_version: Option<u64>,
        limit: u64,
    ) -> Result<Vec<HistoryEntry>>;
    /// Every live record (of one namespace, or all) and the head revision, one snapshot.
    fn export(&self, namespace: Option<&str>) -> Result<(Vec<Record>, u64)>;
    /// Live records and tombstones, for Metrics.
    fn counts(&self) -> Result<(u64, u64)>;
}

/// The append-only journal.
pub trait Journal {
    /// Appends `event` as `seq` (the revision of the change it records), stamped `at_ms`.
    fn append_event(&self, seq: i64, at_ms: i64, event: &NewEvent<'_>) -> Result<()>;
}

/// An access token as stored: never its secret, only the secret's hash (which is not
/// even read back).
#[derive(Debug, Clone)]
pub struct StoredToken {
    pub token_id: String,
    pub name: String,
    pub scopes: Vec<String>,
    /// Epoch milliseconds, as all the times below.
    pub created_at_ms: i64,
    pub expires_at_ms: Option<i64>,
    pub revoked_at_ms: Option<i64>,
    pub last_used_at_ms: Option<i64>,
}

/// A token to store.
pub struct NewToken<'a> {
    pub token_id: &'a str,
    pub name: &'a str,
    /// The hex SHA-256 of the secret.
    pub secret_hash: &'a str,
    pub scopes: &'a [String],
    pub created_at_ms: i64,
    pub expires_at_ms: Option<i64>,
}

/// Access tokens. Whether one is valid (expiry, revocation) and what it allows are rules,
/// in `methods::auth` and `methods::scopes`.
pub trait Tokens {
    fn insert_token(&self, token: &NewToken<'_>) -> Result<()>;
    /// The token whose secret hashes to `secret_hash`, revoked or not.
    fn token_by_hash(&self, secret_hash: &str) -> Result<Option<StoredToken>>;
    fn token_by_id(&self, token_id: &str) -> Result<Option<StoredToken>>;
    /// Every token ever created, oldest first.
    fn all_tokens(&self) -> Result<Vec<StoredToken>>;
    fn set_token_revoked(&self, token_id: &str, at_ms: i64) -> Result<()>;
    fn set_token_used(&self, token_id: &str, at_ms: i64) -> Result<()>;
}
