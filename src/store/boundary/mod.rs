//! The storage boundary: what the rules (`methods/`) ask of storage, with no rule in it and
//! no SQL. SQLite implements it in `store::sqlite`, PostgreSQL in `store::postgres`, each
//! with the same file names (`records` for [`Records`], `journal` for [`Journal`],
//! `leases`, `nodes`, `meta`, `idempotency`, ...); the rules stay as they are over either.
//!
//! Versions, tombstones, compare-and-set, Txn, lock conflicts and the `dir:` hierarchy,
//! FIFO waiting, fencing, node transitions, retries, rollback and idempotency are rules:
//! they live in `methods/` and call only these methods. Each method here reads or writes
//! rows as told; none decides anything.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::value::RawValue;

use crate::error::Result;

/// Damage seen and the last commit failure (Health), kept beside the store.
pub use super::health::StorageHealth;
use crate::protocol::journal::{Event, EventFilter, EventType};
use crate::protocol::locks::{LockMode, Previous};
use crate::protocol::state::{HistoryEntry, Record, RecordState};

mod nodes;
pub use nodes::*;

/// An event about to be appended; `seq` is the revision of the change it records.
pub struct NewEvent<'a> {
    pub kind: EventType<'a>,
    pub actor: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub key: Option<&'a str>,
    pub resource_key: Option<&'a str>,
    pub task_id: Option<&'a str>,
    pub node_id: Option<&'a str>,
    /// JSON text.
    pub data: &'a str,
}

impl<'a> NewEvent<'a> {
    /// An event of type `kind` with nothing else set yet: `NewEvent { data, ..NewEvent::of(kind) }`.
    pub fn of(kind: EventType<'a>) -> NewEvent<'a> {
        NewEvent {
            kind,
            actor: None,
            namespace: None,
            key: None,
            resource_key: None,
            task_id: None,
            node_id: None,
            data: "",
        }
    }
}

/// A key's stored row, live or the tombstone a delete left: what a write needs of it. The
/// value and who wrote it are read only when a compare fails ([`Records::live`]).
#[derive(Debug, Clone, Copy)]
pub struct StoredVersion {
    pub version: u64,
    /// The revision that wrote this row.
    pub revision: u64,
    pub deleted: bool,
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
    /// The session the key lives with (deleted when it ends); None unbinds it.
    pub session_id: Option<&'a str>,
    /// The revision of the key's stored row, read earlier in this batch; None when the key
    /// has no row yet.
    pub previous_revision: Option<u64>,
}

/// Versioned records: the current row of each key and every version it had.
pub trait Records {
    /// The key's current row, live or tombstone: its version, revision and whether it is
    /// deleted.
    fn stored(&self, namespace: &str, key: &str) -> Result<Option<StoredVersion>>;
    /// The key's live record (a tombstone is absence).
    fn live(&self, namespace: &str, key: &str) -> Result<Option<RecordState>>;
    /// Makes `version` the key's current row and appends it to its history.
    fn store_version(&self, version: &NewVersion<'_>) -> Result<()>;
    /// At most `limit` live keys of a namespace after `after`, in key order, written at
    /// or before `up_to_revision`, with their version and revision (a stepped clear).
    fn live_versions_page(
        &self,
        namespace: &str,
        after: Option<&str>,
        up_to_revision: u64,
        limit: u64,
    ) -> Result<Vec<(String, u64, u64)>>;
    /// One step of history retention: of the next `scan` versions stored after revision
    /// `after_revision` (in revision order), removes those that are more than `keep`
    /// versions behind their key's current one.
    fn trim_history(&self, keep: u64, after_revision: u64, scan: u64) -> Result<TrimStep>;
    /// The oldest version of a key still in its history (None: the key has none).
    fn oldest_version(&self, namespace: &str, key: &str) -> Result<Option<u64>>;
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
    /// Live records (of one namespace, or all) in (namespace, key) order after `after`, at
    /// most `limit`, and the head revision, one snapshot.
    fn export(
        &self,
        namespace: Option<&str>,
        after: Option<(&str, &str)>,
        limit: u64,
    ) -> Result<(Vec<Record>, u64)>;
    /// Live records and tombstones, for Metrics.
    fn counts(&self) -> Result<(u64, u64)>;
    /// The live keys written with `session_id` (and not rewritten since): (namespace, key).
    fn keys_of_session(&self, session_id: &str) -> Result<Vec<(String, String)>>;
}

/// What one step of history retention did.
#[derive(Debug, Clone, Copy, Default)]
pub struct TrimStep {
    /// Versions looked at.
    pub scanned: u64,
    /// Versions removed.
    pub removed: u64,
    /// The last revision looked at (None: there was nothing after `after_revision`).
    pub last: Option<u64>,
}

/// An event as it is sent, kept serialized (a task's recent events).
pub type SerializedEvent = (i64, Arc<RawValue>);

/// The append-only journal.
pub trait Journal {
    /// Appends `event` as `seq` (the revision of the change it records), stamped `at_ms`.
    fn append_event(&self, seq: i64, at_ms: i64, event: &NewEvent<'_>) -> Result<()>;
    /// Events after `since_seq` up to `head` matching `filter`, in seq order, at most
    /// `limit` and (past the first) about `max_bytes` of data; and the seq to resume from.
    fn read_events(
        &self,
        since_seq: u64,
        head: u64,
        filter: &EventFilter,
        limit: u64,
        max_bytes: usize,
    ) -> Result<(Vec<Event>, u64)>;
    /// The last `limit` events of a task, oldest first, serialized as sent.
    fn recent_for_task(&self, task_id: &str, limit: u64) -> Result<VecDeque<SerializedEvent>>;
    /// Number of events stored.
    fn length(&self) -> Result<u64>;
    /// The first seq still held (1 until compaction removed older ones).
    fn oldest_seq(&self) -> Result<u64>;
    /// Removes every event before `before_seq`, which becomes the oldest seq; how many went.
    /// The writer stores the lock outcomes it held back first (`Outcomes::store_held`).
    fn remove_before(&self, before_seq: u64) -> Result<u64>;
    /// Of the first `scan` events from `from_seq` on, the seq of the first stamped at or
    /// after `at_ms`; past the last one looked at when none is (`from_seq` when there
    /// are none). What journal retention by age may remove before.
    fn first_seq_since(&self, at_ms: i64, from_seq: u64, scan: u64) -> Result<u64>;
}

/// A held lease, as stored.
#[derive(Debug, Clone)]
pub struct LeaseRow {
    pub resource_key: String,
    pub lease_id: String,
    pub owner: String,
    pub provider: Option<String>,
    pub fencing_token: u64,
    /// Epoch milliseconds.
    pub acquired_at: i64,
    /// Epoch milliseconds.
    pub expires_at: i64,
    /// JSON text.
    pub metadata: Option<String>,
    /// The connection whose `release_on_disconnect` lease this is.
    pub holder_connection: Option<u64>,
    /// The token the lease was obtained with (None: a Unix-socket admin connection).
    pub token_id: Option<String>,
    /// The agent session the lease ends with, if it was taken with one.
    pub session_id: Option<String>,
    pub mode: LockMode,
    /// The key's slots, for a counting key.
    pub slots: Option<u64>,
}

/// A new lease to store.
pub struct NewLease<'a> {
    pub resource_key: &'a str,
    /// The key's kind: `dir`, `file`, `tool`, ...
    pub kind: &'a str,
    /// The normalised path of a `dir:`/`file:` key.
    pub path: Option<&'a str>,
    pub lease_id: &'a str,
    pub owner: &'a str,
    pub provider: Option<&'a str>,
    pub fencing_token: u64,
    pub acquired_at: i64,
    pub expires_at: i64,
    pub metadata: Option<&'a str>,
    pub holder_connection: Option<u64>,
    pub token_id: Option<&'a str>,
    /// The session the lease ends with.
    pub session_id: Option<&'a str>,
    pub mode: LockMode,
    pub slots: Option<u64>,
}

/// How a lease ended, kept per key for the next holder (`previous`).
pub struct LeaseEnd<'a> {
    pub resource_key: &'a str,
    /// The ended lease's fencing token.
    pub fencing_token: u64,
    pub outcome: &'a str,
    pub owner: &'a str,
    pub at_ms: i64,
    pub moved_to: Option<&'a str>,
    pub note: Option<&'a str>,
}

/// Which parts of what the writer keeps in memory another daemon changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForeignChanges {
    pub locks: bool,
    pub tasks: bool,
    pub agents: bool,
}

impl ForeignChanges {
    pub const ALL: ForeignChanges = ForeignChanges {
        locks: true,
        tasks: true,
        agents: true,
    };

    pub fn any(&self) -> bool {
        self.locks || self.tasks || self.agents
    }
}

/// Resource-lock leases (how each key's last lease ended is [`Outcomes`]). The writer reads
/// every live lease at start and after a rollback or another daemon's change, and judges
/// conflicts from its own copy (`methods::locks`).
pub trait Leases {
    /// Leases whose key starts with `prefix`, of `owner` if given, in key order.
    fn leases(&self, prefix: &str, owner: Option<&str>) -> Result<Vec<LeaseRow>>;
    /// At most `limit` of those, in (key, fencing token) order, after `after`.
    fn lease_page(
        &self,
        prefix: &str,
        owner: Option<&str>,
        after: Option<(&str, u64)>,
        limit: u64,
    ) -> Result<Vec<LeaseRow>>;
    fn insert_lease(&self, lease: &NewLease<'_>) -> Result<()>;
    /// Moves the expiry of the lease `lease_id` on `resource_key`.
    fn extend_lease(&self, resource_key: &str, lease_id: &str, expires_at: i64) -> Result<()>;
    /// Ends the lease `lease_id` on `resource_key`.
    fn delete_lease(&self, resource_key: &str, lease_id: &str) -> Result<()>;
    /// The last fencing token stored (0 before the first). The rules hand out tokens
    /// counting on from it (`methods::locks`).
    fn last_fencing_token(&self) -> Result<u64>;
    /// Stores `last` as the last fencing token handed out; a lower one changes nothing.
    fn store_fencing_token(&self, last: u64) -> Result<()>;
    /// The leases acquired with `session_id`.
    fn leases_of_session(&self, session_id: &str) -> Result<Vec<LeaseRow>>;
    /// The waits to acquire that the daemons sharing the database keep in one order; None
    /// when one daemon has the database to itself (its queues in memory are the order).
    fn shared_waits(&self) -> Option<&dyn SharedWaits> {
        None
    }
}

/// How the last lease on each key ended, as the writer records and reads it in its batch
/// ([`WriteStorage::outcomes`]): a backend may hold the outcomes a batch records and store
/// them later in bulk, as long as the journal events of the same ends keep them durable.
pub trait Outcomes {
    /// How the last lease on `key` ended.
    fn previous(&self, resource_key: &str) -> Result<Option<Previous>>;
    fn record_end(&self, end: &LeaseEnd<'_>) -> Result<()>;
    /// The largest fencing token of any lease on `resource_key` that has ended (0 when
    /// none): with the live leases' tokens, the key's latest, which fenced writes compare.
    fn latest_ended_token(&self, resource_key: &str) -> Result<u64>;
    /// Stores every outcome held back, in the open batch: journal events are about to be
    /// removed (`Journal::remove_before`), and with them what would bring those back.
    fn store_held(&self) -> Result<()>;
}

/// A wait to acquire a lock, as daemons sharing a database see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedWait {
    /// Its place in the one order of every daemon's waits (0 until it is queued).
    pub queued: u64,
    pub resource_key: String,
    /// The connection waiting (whose connection base tells the daemon).
    pub connection: u64,
    pub owner: String,
    pub mode: LockMode,
    pub slots: Option<u64>,
}

/// Waits to acquire, queued on any of the daemons sharing a database, in one order.
pub trait SharedWaits {
    /// Queues a wait; its place in the order.
    fn queue_wait(&self, wait: &QueuedWait) -> Result<u64>;
    /// The wait at `queued` was granted, refused, ran out or was abandoned.
    fn end_wait(&self, queued: u64) -> Result<()>;
    /// Ends every wait of a connection in `connections` (a daemon that fell silent).
    fn end_waits_of(&self, connections: std::ops::Range<u64>) -> Result<()>;
    /// Every wait, in order.
    fn queued_waits(&self) -> Result<Vec<QueuedWait>>;
}

/// A remembered answer to a request with an idempotency key.
pub struct RememberedAnswer {
    pub method: String,
    pub request_hash: Vec<u8>,
    /// JSON text.
    pub response: String,
    pub created_at_ms: i64,
}

/// Answers remembered for idempotency keys.
pub trait Remembered {
    fn remembered(&self, key: &str) -> Result<Option<RememberedAnswer>>;
    fn remember(
        &self,
        key: &str,
        method: &str,
        request_hash: &[u8],
        response: &str,
        at_ms: i64,
    ) -> Result<()>;
    /// Forgets answers remembered before `before_ms`.
    fn forget_before(&self, before_ms: i64) -> Result<()>;
}

/// Facts about the database as a whole.
pub trait Meta {
    /// The last revision committed (also the journal's last seq; 0 when empty).
    fn head_revision(&self) -> Result<i64>;
    /// Raises the head revision to `revision`; a lower one changes nothing.
    fn set_head_revision(&self, revision: i64) -> Result<()>;
    /// Database and write-ahead-log sizes in bytes, for Metrics.
    fn file_sizes(&self) -> Result<(u64, u64)>;
    /// Records that this daemon (`instance_id`, numbering its connections from
    /// `connection_base`) is alive now, by storage's clock; returns the connection bases of
    /// the daemons sharing the database that have been silent for longer than
    /// `timeout_ms`, and forgets them. A database only one daemon opens has none.
    fn instance_heartbeat(
        &self,
        instance_id: &str,
        connection_base: u64,
        timeout_ms: i64,
    ) -> Result<Vec<u64>>;
    /// The daemons sharing the database that heartbeat within `timeout_ms` (1 alone).
    fn live_instances(&self, timeout_ms: i64) -> Result<u64>;
}

/// A live session, as stored.
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub name: String,
    pub session_id: String,
    pub role: Option<String>,
    /// JSON text.
    pub metadata: Option<String>,
    /// Epoch milliseconds, as the three below.
    pub started_at: i64,
    pub last_seen: i64,
    pub expires_at: i64,
    /// The token that registered it (None: a Unix-socket admin connection).
    pub token_id: Option<String>,
    /// The connection it ends with (`release_on_disconnect`).
    pub holder_connection: Option<u64>,
}

/// A message, as stored.
pub struct MessageRow {
    pub seq: i64,
    pub message_id: String,
    pub sender: String,
    /// JSON text: the `to` as sent.
    pub recipients: String,
    pub subject: Option<String>,
    /// JSON text.
    pub body: String,
    pub thread_id: Option<String>,
    pub reply_to: Option<String>,
    pub sent_at: i64,
}

/// The owner of an agent name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameOwner {
    /// The token's id; None: the Unix socket's admin.
    pub token_id: Option<String>,
}

/// Agents' sessions and inboxes.
pub trait Agents {
    fn session(&self, name: &str) -> Result<Option<SessionRow>>;
    fn session_by_id(&self, session_id: &str) -> Result<Option<SessionRow>>;
    /// Every live session, by name.
    fn sessions(&self) -> Result<Vec<SessionRow>>;
    fn insert_session(&self, session: &SessionRow) -> Result<()>;
    fn touch_session(&self, name: &str, last_seen: i64, expires_at: i64) -> Result<()>;
    fn delete_session(&self, name: &str) -> Result<()>;
    /// Who owns `name`: the token that first registered it. None for a name never
    /// registered, or registered only before owners were kept (the next registration
    /// claims it).
    fn name_owner(&self, name: &str) -> Result<Option<NameOwner>>;
    /// Remembers that `name` registered (a recipient of "*" from now on), and that `owner`
    /// owns it unless someone already does.
    fn remember_agent(&self, name: &str, owner: &NameOwner, at_ms: i64) -> Result<()>;
    /// Every name that ever registered.
    fn agent_names(&self) -> Result<Vec<String>>;
    /// Stores a message and puts it in each recipient's inbox.
    fn insert_message(&self, message: &MessageRow, to: &[String]) -> Result<()>;
    /// `name`'s messages after `after`, oldest first, at most `limit`.
    fn inbox(&self, name: &str, after: u64, limit: u64) -> Result<Vec<MessageRow>>;
    /// How many of `name`'s messages lie after `after` (up to `up_to` when given).
    fn inbox_count(&self, name: &str, after: u64, up_to: Option<u64>) -> Result<u64>;
    /// The seq of `name`'s newest message (0 when its inbox is empty).
    fn newest_message(&self, name: &str) -> Result<u64>;
    /// `name`'s acknowledged cursor (0 when it never acknowledged).
    fn cursor(&self, name: &str) -> Result<u64>;
    fn set_cursor(&self, name: &str, acked: u64) -> Result<()>;
}

/// Everything the rules read and write, in one snapshot (a read) or one transaction (the
/// writer's batch).
pub trait Storage:
    Records + Journal + Leases + Nodes + Remembered + Meta + Tokens + Agents
{
}

impl<T: Records + Journal + Leases + Nodes + Remembered + Meta + Tokens + Agents> Storage for T {}

/// What a batch's requests will read, named when they are planned, before the batch
/// begins.
#[derive(Debug, Default)]
pub struct Foreseen {
    /// Keys whose last outcome (`Outcomes::previous`) an acquisition reads.
    pub lock_outcomes: Vec<String>,
}

impl Foreseen {
    pub fn is_empty(&self) -> bool {
        self.lock_outcomes.is_empty()
    }

    /// Moves what `other` foresees into this.
    pub fn take_from(&mut self, other: &mut Foreseen) {
        self.lock_outcomes.append(&mut other.lock_outcomes);
    }
}

/// Opens the write side on the thread that then owns it (the writer's): what a backend
/// keeps for its connection, such as SQLite's prepared statements, never crosses threads.
pub type OpenWrites = Box<dyn FnOnce() -> Box<dyn WriteStorage> + Send>;

/// The writer's side of storage: the one connection that writes, in batches (one
/// transaction each) of requests (each undone alone only if it wrote nothing: see
/// `undo_request`).
pub trait WriteStorage {
    /// What the batch reads and writes.
    fn storage(&self) -> &dyn Storage;
    /// The lock outcomes the batch records and reads.
    fn outcomes(&self) -> &dyn Outcomes;
    /// Whether other daemons write to the same database (PostgreSQL): then each batch
    /// starts from the head revision storage holds, and what memory holds of leases and
    /// sessions is rebuilt when another instance moved it.
    fn shared(&self) -> bool {
        false
    }
    /// Starts the batch's transaction. A backend whose reads are round trips may read what
    /// the batch's requests are `foreseen` to read along with its first statement.
    fn begin(&mut self, foreseen: &Foreseen) -> Result<()>;
    /// Reads ahead, in the open transaction, what requests that join the batch late are
    /// `foreseen` to read (see `begin`).
    fn foresee(&mut self, _foreseen: &Foreseen) -> Result<()> {
        Ok(())
    }
    /// The storage server's clock (epoch ms) when the batch began, when the database is
    /// shared: every daemon then judges expiry by the same clock, whatever its own says.
    fn server_clock_ms(&self) -> Option<i64> {
        None
    }
    /// What other daemons sharing the database changed since this one's last batch, as
    /// seen when the batch began (all of it, when unknown).
    fn foreign_changes(&self) -> ForeignChanges {
        ForeignChanges::ALL
    }
    /// Makes the batch durable.
    fn commit(&mut self) -> Result<()>;
    /// Undoes the batch (after a failure); never fails, logs what went wrong.
    fn rollback(&mut self);
    /// Marks where the next request starts.
    fn start_request(&self) -> Result<()>;
    /// Undoes the current request, which failed. An engine may
    /// refuse when the request had written anything: then the writer rolls back the whole
    /// batch (the rules refuse before they write, so only a storage fault gets here).
    fn undo_request(&self) -> Result<()>;
    /// The daemon is stopping: mark the database cleanly closed and tidy its files.
    fn close(&mut self);
    /// Gives up to `pages` free pages back to the file system, inside the open batch
    /// (SQLite's incremental vacuum); whether free pages remain. Engines that reuse
    /// freed space themselves (PostgreSQL's autovacuum) do nothing.
    fn reclaim(&mut self, _pages: u64) -> Result<bool> {
        Ok(false)
    }
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
