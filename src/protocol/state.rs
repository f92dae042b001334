//! Wire types of versioned state: the params and results of Get, Set, Delete, List,
//! History, Txn, ClearNamespace and Export.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use super::{read_whole, Json};

requests! {
    GetParams => "Get", GetResult;
    SetParams => "Set", SetResult;
    DeleteParams => "Delete", DeleteResult;
    ListParams => "List", ListResult;
    HistoryParams => "History", HistoryResult;
    TxnParams => "Txn", TxnResult;
    ClearNamespaceParams => "ClearNamespace", ClearNamespaceResult;
    ExportParams => "Export", ExportResult;
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
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

/// The members of a [`GetResult`] or a [`Record`] beside its flattened state.
#[derive(Deserialize)]
struct Named {
    namespace: String,
    key: String,
}

/// Read in two passes over its text (see [`read_whole`]): `found` with the names, then,
/// when found, the record, whose members must then all be there.
impl<'de> Deserialize<'de> for GetResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<GetResult, D::Error> {
        #[derive(Deserialize)]
        struct Found {
            found: bool,
        }
        read_whole(d, |text| {
            let Found { found } = serde_json::from_str(text)?;
            let Named { namespace, key } = serde_json::from_str(text)?;
            let record = if found {
                Some(serde_json::from_str(text)?)
            } else {
                None
            };
            Ok(GetResult {
                found,
                namespace,
                key,
                record,
            })
        })
    }
}

/// Read in two passes over its text (see [`read_whole`]).
impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Record, D::Error> {
        read_whole(d, |text| {
            let Named { namespace, key } = serde_json::from_str(text)?;
            Ok(Record {
                namespace,
                key,
                state: serde_json::from_str(text)?,
            })
        })
    }
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetParams {
    pub namespace: String,
    pub key: String,
    #[schemars(with = "serde_json::Value")]
    pub value: Json,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    /// Absent: write unconditionally. 0: create only. N: only if the current version is N.
    #[serde(default, deserialize_with = "crate::json::expected_version")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    /// Bind the key to this session (RegisterAgent): it is deleted when the session ends,
    /// and `updated_by` defaults to the session's name (given, it must be that name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Apply only while this lease holds (`{resource_key, lease_id}`) or this fencing
    /// token is the key's latest (`{resource_key, fencing_token}`); else 409 `fenced`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<super::locks::Fence>,
    #[serde(skip_serializing_if = "Option::is_none")]
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

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteParams {
    pub namespace: String,
    pub key: String,
    #[serde(default, deserialize_with = "crate::json::expected_version")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    /// Apply only while this lease holds (`{resource_key, lease_id}`) or this fencing
    /// token is the key's latest (`{resource_key, fencing_token}`); else 409 `fenced`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<super::locks::Fence>,
    #[serde(skip_serializing_if = "Option::is_none")]
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

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    pub namespace: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// 1 to 1000, default 100.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The last key of the previous page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ListResult {
    pub records: Vec<Record>,
    /// Pass as `after` for the next page; null when there are no more records.
    pub next_after: Option<String>,
    /// The same as `next_after`, as every paged answer names it.
    pub next: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryParams {
    pub namespace: String,
    pub key: String,
    /// 1 to 1000, default 100.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Only versions older than this one.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_version: Option<u64>,
    /// The previous page's `next`: only versions older than it (as `before_version`).
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
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

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TxnCompare {
    /// A version compare: the record `namespace`/`key` is at `version`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The version the key must be at; 0 means it must not exist.
    #[serde(
        default,
        deserialize_with = "crate::json::opt_int_param",
        skip_serializing_if = "Option::is_none"
    )]
    pub version: Option<u64>,
    /// A lease compare: on `resource_key`, the lease `lease_id` is live, or
    /// `fencing_token` is the latest granted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    #[serde(
        default,
        deserialize_with = "crate::json::opt_int_param",
        skip_serializing_if = "Option::is_none"
    )]
    pub fencing_token: Option<u64>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TxnOpKind {
    Set,
    Delete,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TxnOp {
    pub op: TxnOpKind,
    pub namespace: String,
    pub key: String,
    /// Required for `set`.
    #[serde(default, deserialize_with = "present_json")]
    #[serde(skip_serializing_if = "Option::is_none")]
    // Absent is null, as the schema says (skipping None in serialization hides that).
    #[schemars(with = "Option<serde_json::Value>", extend("default" = null))]
    pub value: Option<Json>,
    /// Apply only while this lease holds (`{resource_key, lease_id}`) or this fencing
    /// token is the key's latest (`{resource_key, fencing_token}`); else 409 `fenced`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<super::locks::Fence>,
}

/// Distinguishes `"value": null` (a JSON null to store) from an absent field.
fn present_json<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Json>, D::Error> {
    Json::deserialize(d).map(Some)
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TxnParams {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compare: Vec<TxnCompare>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<TxnOp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct TxnOpResult {
    pub op: TxnOpKind,
    pub namespace: String,
    pub key: String,
    pub version: u64,
    /// Absent for a delete of a key that did not exist (nothing was written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct TxnResult {
    /// The revision of the last op, or the current head when there were no ops.
    pub revision: u64,
    pub results: Vec<TxnOpResult>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClearNamespaceParams {
    pub namespace: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ClearNamespaceResult {
    pub deleted: u64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// At most this many, 1 to 1000 [default: 1000]; a page also stops at 8 MiB.
    #[serde(default, deserialize_with = "crate::json::opt_int_param")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The previous page's `next`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ExportResult {
    pub records: Vec<Record>,
    /// The head revision this page is a snapshot of (each page is read at its own).
    pub revision: u64,
    /// Pass as `after` for the next page; null when nothing follows.
    #[serde(default)]
    pub next: Option<String>,
}
