//! Wire types of versioned state: the params and results of Get, Set, Delete, List,
//! History, Txn, ClearNamespace and Export.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Json;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetParams {
    pub namespace: String,
    pub key: String,
}

/// `found: false` carries only `namespace` and `key`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GetResult {
    pub found: bool,
    pub namespace: String,
    pub key: String,
    #[serde(flatten)]
    pub record: Option<RecordState>,
}

/// The stored state of a live record.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct RecordState {
    #[schemars(with = "serde_json::Value")]
    pub value: Json,
    pub version: u64,
    pub revision: u64,
    pub updated_by: Option<String>,
    pub updated_at: String,
}

/// A live record, as List and Export return it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Record {
    pub namespace: String,
    pub key: String,
    #[serde(flatten)]
    pub state: RecordState,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetParams {
    pub namespace: String,
    pub key: String,
    #[schemars(with = "serde_json::Value")]
    pub value: Json,
    pub updated_by: Option<String>,
    /// Absent: write unconditionally. 0: create only. N: only if the current version is N.
    #[serde(default, deserialize_with = "crate::json::expected_version")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    /// Bind the key to this session (RegisterAgent): it is deleted when the session ends,
    /// and `updated_by` defaults to the session's name (given, it must be that name).
    pub session_id: Option<String>,
    /// Apply only while this lease holds (`{resource_key, lease_id}`) or this fencing
    /// token is the key's latest (`{resource_key, fencing_token}`); else 409 `fenced`.
    pub fence: Option<super::locks::Fence>,
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct SetResult {
    pub namespace: String,
    pub key: String,
    pub version: u64,
    pub previous_version: u64,
    pub revision: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteParams {
    pub namespace: String,
    pub key: String,
    #[serde(default, deserialize_with = "crate::json::expected_version")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    pub updated_by: Option<String>,
    /// Apply only while this lease holds (`{resource_key, lease_id}`) or this fencing
    /// token is the key's latest (`{resource_key, fencing_token}`); else 409 `fenced`.
    pub fence: Option<super::locks::Fence>,
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct DeleteResult {
    pub deleted: bool,
    /// The tombstone's version when deleted; otherwise the key's last version (0 if never written).
    pub version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    pub namespace: String,
    pub prefix: Option<String>,
    /// 1 to 1000, default 100.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The last key of the previous page.
    pub after: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ListResult {
    pub records: Vec<Record>,
    /// Pass as `after` for the next page; null when there are no more records.
    pub next_after: Option<String>,
    /// The same as `next_after`, as every paged answer names it.
    pub next: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryParams {
    pub namespace: String,
    pub key: String,
    /// 1 to 1000, default 100.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Only versions older than this one.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub before_version: Option<u64>,
    /// The previous page's `next`: only versions older than it (as `before_version`).
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct HistoryEntry {
    pub version: u64,
    #[schemars(with = "serde_json::Value")]
    pub value: Json,
    pub updated_by: Option<String>,
    pub updated_at: String,
    pub revision: u64,
    pub deleted: bool,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct HistoryResult {
    /// Newest first.
    pub history: Vec<HistoryEntry>,
    /// Pass as `after` for older versions; null when nothing older is kept.
    #[serde(default)]
    pub next: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TxnCompare {
    /// A version compare: the record `namespace`/`key` is at `version`.
    pub namespace: Option<String>,
    pub key: Option<String>,
    /// The version the key must be at; 0 means it must not exist.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// A lease compare: on `resource_key`, the lease `lease_id` is live, or
    /// `fencing_token` is the latest granted.
    pub resource_key: Option<String>,
    pub lease_id: Option<String>,
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TxnOpKind {
    Set,
    Delete,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TxnOp {
    pub op: TxnOpKind,
    pub namespace: String,
    pub key: String,
    /// Required for `set`.
    #[serde(default, deserialize_with = "present_json")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub value: Option<Json>,
    /// Apply only while this lease holds (`{resource_key, lease_id}`) or this fencing
    /// token is the key's latest (`{resource_key, fencing_token}`); else 409 `fenced`.
    #[serde(default)]
    pub fence: Option<super::locks::Fence>,
}

/// Distinguishes `"value": null` (a JSON null to store) from an absent field.
fn present_json<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Json>, D::Error> {
    Json::deserialize(d).map(Some)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TxnParams {
    #[serde(default)]
    pub compare: Vec<TxnCompare>,
    #[serde(default)]
    pub ops: Vec<TxnOp>,
    pub updated_by: Option<String>,
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct TxnOpResult {
    pub op: TxnOpKind,
    pub namespace: String,
    pub key: String,
    pub version: u64,
    /// Absent for a delete of a key that did not exist (nothing was written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct TxnResult {
    /// The revision of the last op, or the current head when there were no ops.
    pub revision: u64,
    pub results: Vec<TxnOpResult>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClearNamespaceParams {
    pub namespace: String,
    pub updated_by: Option<String>,
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ClearNamespaceResult {
    pub deleted: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportParams {
    pub namespace: Option<String>,
    /// At most this many, 1 to 1000 [default: 1000]; a page also stops at 8 MiB.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The previous page's `next`.
    pub after: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ExportResult {
    pub records: Vec<Record>,
    /// The head revision this page is a snapshot of (each page is read at its own).
    pub revision: u64,
    /// Pass as `after` for the next page; null when nothing follows.
    #[serde(default)]
    pub next: Option<String>,
}
