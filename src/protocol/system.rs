//! The wire types of DescribeInterface, Health and Metrics, and of AdvanceClock (a test
//! daemon's). What fills them is `methods::system`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

requests! {
    DescribeInterfaceParams => "DescribeInterface", DescribeInterfaceResult;
    HealthParams => "Health", HealthResult;
    MetricsParams => "Metrics", MetricsResult;
    AdvanceClockParams => "AdvanceClock", AdvanceClockResult;
}

/// Text the daemon writes from its own constants, and a client reads into a `String`.
pub type Text = Cow<'static, str>;

/// The protocol name DescribeInterface reports.
pub const PROTOCOL: &str = "baton-jsonl-v1";

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DescribeInterfaceParams {}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct ErrorDescription {
    pub code: i64,
    pub kind: Text,
    pub when: Text,
}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct DescribeInterfaceResult {
    pub protocol: Text,
    pub version: Text,
    #[schemars(with = "Vec<serde_json::Value>")]
    pub methods: Vec<MethodDescription>,
    pub errors: Vec<ErrorDescription>,
    /// Every limit this daemon enforces; the error that refuses a request over one names it.
    pub limits: EnforcedLimits,
}

/// The limits a request can meet, as this daemon is configured.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct EnforcedLimits {
    /// Longest request line, in bytes (`BATON_MAX_LINE_BYTES`).
    pub max_line_bytes: usize,
    /// Largest stored value, in bytes (`BATON_MAX_VALUE_BYTES`).
    pub max_value_bytes: usize,
    /// Most nodes in one RegisterTask.
    pub max_nodes_per_task: usize,
    /// Largest `limit` of a paged read.
    pub max_page: u64,
    /// Longest `wait_ms` of AcquireResourceLock, AcquireNextNode and ReadInbox, and
    /// `timeout_ms` of WaitResourceLock.
    pub max_wait_ms: u64,
    /// Most `slots` of a counting lock key.
    pub max_slots: u64,
    /// Longest `ttl_secs` of a lock lease.
    pub max_lock_ttl_secs: u64,
    /// Most attempts of a node.
    pub max_attempts: u32,
    /// Longest namespace, key or topic, in bytes.
    pub max_name_bytes: usize,
    /// Versions kept per key (`BATON_HISTORY_KEEP`); null keeps them all. History asking
    /// for older ones is 416.
    pub history_keep: Option<u64>,
    /// Journal events kept by count (`BATON_JOURNAL_RETAIN`); null: not by count.
    pub journal_retain_events: Option<u64>,
    /// Journal events kept by age, in milliseconds (`BATON_JOURNAL_RETAIN`); null: not by age.
    pub journal_retain_ms: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthParams {}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct HealthResult {
    /// "ok", or "degraded" while storage is failing.
    pub status: Text,
    /// "ok", or "failing": the last commit failed (until one succeeds), the database file
    /// is damaged, or it could not be read just now.
    pub database: Text,
    /// Why storage is failing, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_error: Option<String>,
    pub schema_version: i64,
    pub version: Text,
    pub uptime_secs: u64,
    /// Where the state lives: `sqlite` or `postgres` (which several daemons may share).
    pub backend: Text,
    /// This daemon's id, new at every start (tells apart daemons sharing a database).
    pub instance_id: String,
    /// The dashboard's address, when batond serves HTTP (`BATON_HTTP_LISTEN`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dashboard: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsParams {}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct ConnectionFigures {
    pub open: u64,
    pub total: u64,
    /// Connections the daemon failed to accept (at the open-file limit, mostly).
    pub accept_errors: u64,
    /// Network connections closed at once because their listener already held
    /// `BATON_MAX_UNAUTHENTICATED` connections that had not authenticated.
    pub refused_unauthenticated: u64,
    /// Network and HTTP connections closed at once because batond was near its open-file
    /// limit (the last descriptors are kept for the Unix socket and the database).
    pub refused_descriptors: u64,
    /// Network connections closed for not authenticating within `BATON_AUTH_TIMEOUT_MS`.
    pub auth_timeouts: u64,
}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct AuthFigures {
    /// Failed Authenticate calls (wrong, expired or revoked tokens) since start.
    pub failures: u64,
}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct RecordFigures {
    pub live: u64,
    pub tombstones: u64,
}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct JournalFigures {
    pub length: u64,
    pub head_seq: u64,
    /// The first seq still kept (1 until CompactJournal).
    pub oldest_seq: u64,
}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct StorageFigures {
    pub commits: u64,
    pub failed_commits: u64,
    pub writes: u64,
    pub max_batch: u64,
    pub mean_batch: f64,
    pub db_bytes: u64,
    pub wal_bytes: u64,
}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct LockFigures {
    /// Leases held now.
    pub live: u64,
    /// Requests queued in AcquireResourceLock with `wait_ms`.
    pub waiting: u64,
    /// WaitResourceLock requests waiting for a key to become free.
    pub watching: u64,
}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct MetricsResult {
    pub uptime_secs: u64,
    /// Per method: requests, errors and latency from parse to answer, in microseconds.
    pub methods: BTreeMap<Text, MethodFigures>,
    pub connections: ConnectionFigures,
    pub auth: AuthFigures,
    pub records: RecordFigures,
    pub journal: JournalFigures,
    pub storage: StorageFigures,
    pub locks: LockFigures,
    pub tasks: BTreeMap<String, u64>,
    pub nodes: BTreeMap<String, u64>,
    /// Workers waiting in AcquireNextNode with `wait_ms`.
    pub node_waiters: u64,
    /// Agents waiting in ReadInbox with `wait_ms`.
    pub inbox_waiters: u64,
    /// The daemons serving this database that heartbeat (1 on SQLite).
    pub instances: u64,
}

/// Moves a test daemon's manual clock forward. Not in DescribeInterface: a daemon on the
/// real clock answers it as an unknown method.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdvanceClockParams {
    /// How far to move the clock, in milliseconds.
    pub ms: u64,
}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct AdvanceClockResult {
    /// The clock's wall time after the move.
    pub now: String,
    /// Milliseconds the clock has moved since the daemon started.
    pub monotonic_ms: u64,
}

/// A method as DescribeInterface lists it.
#[derive(Serialize, Deserialize)]
pub struct MethodDescription {
    pub method: Text,
    pub summary: Text,
    pub params_schema: schemars::Schema,
    pub result_schema: schemars::Schema,
}

/// One method's figures as Metrics reports them.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct MethodFigures {
    pub count: u64,
    pub errors: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}
