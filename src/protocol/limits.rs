//! The limits the daemon enforces, as the contract states them (DescribeInterface lists
//! them under `limits`): wire facts that the rules enforce and the clients (the bridge's
//! tool schemas, the CLI's paging) rely on.

/// The largest `limit` of a paged read.
pub const MAX_PAGE: u64 = 1000;
/// No answer line is longer than this.
pub const MAX_ANSWER_BYTES: usize = 16 << 20;
/// Longest namespace, key or topic, in bytes.
pub const MAX_NAME_BYTES: usize = 512;
/// Longest lock lease a client may ask for: one week.
pub const MAX_LOCK_TTL_SECS: u64 = 7 * 24 * 3600;
/// Longest wait a client may ask for (AcquireResourceLock, WaitResourceLock,
/// AcquireNextNode, ReadInbox): one hour.
pub const MAX_WAIT_MS: u64 = 3_600_000;
/// Most holders a counting key may admit.
pub const MAX_SLOTS: u64 = 1000;
/// Most nodes one task may have.
pub const MAX_NODES: usize = 100_000;
/// Most attempts a node may be given.
pub const MAX_ATTEMPTS: u32 = 100;
/// Longest a node lease may be asked for: one day.
pub const MAX_NODE_TTL_SECS: u64 = 24 * 3600;
/// Longest a node may be held back: a day.
pub const MAX_DELAY_MS: u64 = 24 * 3600 * 1000;
/// Node priorities lie within plus or minus this.
pub const MAX_PRIORITY: i64 = 1_000_000;
/// Most labels a worker may give (each pick looks at every subset of them).
pub const MAX_WORKER_LABELS: usize = 8;
/// Longest `reason` of an operator's action, in bytes.
pub const MAX_REASON_BYTES: usize = 512;
