//! Versioned state: Get, Set, Delete, List, History, Txn, ClearNamespace, Export.
//! The rules are here: names and values checked, versions counted up per key, deletes
//! leaving tombstones (so a re-created key continues its versions), compare-and-set and
//! Txn compares, the 409 that carries what is stored, one journal event per write.
//! Storage is reached only through `store::boundary` ([`Records`], the journal).

use serde_json::value::RawValue;

use super::areas::WriteCtx;
use super::locks::fence::{self, fenced, Fenced, WriteFence};
use super::locks::Visible;
use super::Presented;
use crate::engine::Served;
use crate::error::{Error, Result};
use crate::protocol::journal::EventType;
use crate::store::boundary::{NewEvent, NewVersion, Records, StoredVersion};

use super::{
    limit_or_default, paging, read, read_one_statement, write, write_in_steps, Ctx, Limits, Method,
    Plan,
};

pub use crate::protocol::limits::MAX_NAME_BYTES;

pub use crate::protocol::state::*;
pub use crate::protocol::Json;

/// Refuses an empty or over-long namespace or key.
pub fn check_name(field: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::Invalid(format!(
            "{field} must not be empty; give a non-empty string"
        )));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(Error::Invalid(format!(
            "{field} is {} bytes, over the limit of {MAX_NAME_BYTES}; use a shorter {field}",
            value.len()
        )));
    }
    Ok(())
}

/// Refuses a value param named `field` that is too large or that some client could not
/// read back (see `crate::json::check_value`).
pub fn check_value(field: &str, value: &RawValue, limits: &Limits) -> Result<()> {
    crate::json::check_value(field, value.get(), limits.max_value_bytes)
}

// ---- reads ----

pub fn get(records: &dyn Records, p: GetParams) -> Result<GetResult> {
    check_name("namespace", &p.namespace)?;
    check_name("key", &p.key)?;
    let record = records.live(&p.namespace, &p.key)?;
    Ok(GetResult {
        found: record.is_some(),
        namespace: p.namespace,
        key: p.key,
        record,
    })
}

pub fn list(records: &dyn Records, p: ListParams) -> Result<ListResult> {
    check_name("namespace", &p.namespace)?;
    let limit = limit_or_default(p.limit)?;
    let (mut records, more) = records.list(
        &p.namespace,
        p.prefix.as_deref().unwrap_or(""),
        p.after.as_deref(),
        limit,
    )?;
    let next_after = if paging::cut(&mut records, limit)? || more {
        records.last().map(|r| r.key.clone())
    } else {
        None
    };
    Ok(ListResult {
        records,
        next: next_after.clone(),
        next_after,
    })
}

pub fn history(records: &dyn Records, p: HistoryParams) -> Result<HistoryResult> {
    check_name("namespace", &p.namespace)?;
    check_name("key", &p.key)?;
    let limit = limit_or_default(p.limit)?;
    let before = match (p.after, p.before_version) {
        (Some(after), Some(before)) if after != before => {
            return Err(Error::Invalid(format!(
                "after ({after}) and before_version ({before}) disagree; they mean the same (versions older than it), so give one"
            )))
        }
        (after, before) => after.or(before),
    };
    let mut history = records.history(&p.namespace, &p.key, before, limit + 1)?;
    // Nothing before a version > 1: retention may have removed what was asked for.
    if let (true, Some(before)) = (history.is_empty(), before.filter(|b| *b > 1)) {
        if let Some(oldest) = records.oldest_version(&p.namespace, &p.key)? {
            if before <= oldest {
                return Err(Error::HistoryTrimmed {
                    message: format!(
                        "versions of `{}` before {oldest} are no longer kept (BATON_HISTORY_KEEP); ask for versions from {oldest} on (before_version {} or more), or raise BATON_HISTORY_KEEP to keep more",
                        p.key,
                        oldest + 1
                    ),
                    oldest_version: oldest,
                });
            }
        }
    }
    // `next` is null once nothing older is kept (retention may have removed the rest).
    let more = paging::cut(&mut history, limit)?;
    let next = match history.last() {
        Some(last) if more && last.version > 1 => Some(last.version),
        _ => None,
    };
    Ok(HistoryResult { history, next })
}

pub fn export(records: &dyn Records, p: ExportParams) -> Result<ExportResult> {
    if let Some(ns) = &p.namespace {
        check_name("namespace", ns)?;
    }
    let limit = paging::page_limit(p.limit, paging::MAX_PAGE)?;
    let after: Option<(String, String)> = p
        .after
        .as_deref()
        .map(|after| paging::parse_cursor(after, "Export"))
        .transpose()?;
    let after = after.as_ref().map(|(ns, key)| (ns.as_str(), key.as_str()));
    let (mut records, revision) = records.export(p.namespace.as_deref(), after, limit + 1)?;
    let next = match paging::cut(&mut records, limit)? {
        true => records
            .last()
            .map(|last| paging::cursor(&(&last.namespace, &last.key)))
            .transpose()?,
        false => None,
    };
    Ok(ExportResult {
        records,
        revision,
        next,
    })
}

// ---- writes: checked before queueing, applied on the writer ----

pub fn check_set(p: &SetParams, limits: &Limits) -> Result<()> {
    check_name("namespace", &p.namespace)?;
    check_name("key", &p.key)?;
    check_value("value", &p.value, limits)
}

/// Set; with a session (validated here, on the writer), the key lives with it and
/// `updated_by` defaults to the session's name (given, it must be that name).
pub fn set(ctx: &mut WriteCtx<'_>, p: SetParams, session: Option<Presented>) -> Result<SetResult> {
    let name = match &session {
        Some(presented) => Some(super::agents::rules::session_name(
            ctx,
            presented,
            "updated_by",
            p.updated_by.as_deref(),
        )?),
        None => None,
    };
    let origin = Origin {
        updated_by: p.updated_by.as_deref().or(name.as_deref()),
        session_id: session.as_ref().map(|s| s.lease_id.as_str()),
        reason: None,
    };
    let written = put(
        ctx,
        &p.namespace,
        &p.key,
        Some(p.value.get()),
        origin,
        p.expected_version,
    )?;
    Ok(SetResult {
        namespace: p.namespace,
        key: p.key,
        version: written.version,
        previous_version: written.version - 1,
        revision: written.revision,
    })
}

pub fn check_delete(p: &DeleteParams) -> Result<()> {
    check_name("namespace", &p.namespace)?;
    check_name("key", &p.key)
}

pub fn delete(ctx: &mut WriteCtx<'_>, p: DeleteParams) -> Result<DeleteResult> {
    delete_key(
        ctx,
        &p.namespace,
        &p.key,
        p.updated_by.as_deref(),
        p.expected_version,
    )
}

/// A Txn compare, checked: a record's version, or a lease on a resource key.
pub enum Compare {
    Version {
        namespace: String,
        key: String,
        version: u64,
    },
    Lease(Fenced),
}

/// Checks each compare: a version compare (`namespace`, `key`, `version`) or a lease
/// compare (`resource_key` with one of `lease_id` and `fencing_token`), not a mix.
pub fn compares(p: &mut TxnParams, cx: &Ctx<'_>) -> Result<Vec<Compare>> {
    let mut checked = Vec::with_capacity(p.compare.len());
    for (i, c) in std::mem::take(&mut p.compare).into_iter().enumerate() {
        let field = format!("compare[{i}]");
        let lease_part =
            c.resource_key.is_some() || c.lease_id.is_some() || c.fencing_token.is_some();
        checked.push(match (c.namespace, c.key, c.version, lease_part) {
            (Some(namespace), Some(key), Some(version), false) => {
                check_name(&format!("{field}.namespace"), &namespace)?;
                check_name(&format!("{field}.key"), &key)?;
                Compare::Version {
                    namespace,
                    key,
                    version,
                }
            }
            (None, None, None, true) => {
                let fence = crate::protocol::locks::Fence {
                    resource_key: c.resource_key.unwrap_or_default(),
                    lease_id: c.lease_id,
                    fencing_token: c.fencing_token,
                };
                Compare::Lease(fenced(cx, fence, &field)?)
            }
            _ => {
                return Err(Error::invalid_params(
                    field.clone(),
                    format!("{field} compares a record ({{namespace, key, version}}) or a lease ({{resource_key, lease_id}} or {{resource_key, fencing_token}}); give one of those"),
                ))
            }
        });
    }
    Ok(checked)
}

pub fn check_txn(p: &TxnParams, limits: &Limits) -> Result<()> {
    for (i, op) in p.ops.iter().enumerate() {
        check_name(&format!("ops[{i}].namespace"), &op.namespace)?;
        check_name(&format!("ops[{i}].key"), &op.key)?;
        match (op.op, &op.value) {
            (TxnOpKind::Set, None) => {
                return Err(Error::invalid_params(
                    format!("ops[{i}].value"),
                    format!("ops[{i}] is a set without a value; add \"value\" (null is a value)"),
                ))
            }
            (TxnOpKind::Set, Some(v)) => check_value(&format!("ops[{i}].value"), v, limits)?,
            (TxnOpKind::Delete, Some(_)) => {
                return Err(Error::invalid_params(
                    format!("ops[{i}].value"),
                    format!("ops[{i}] is a delete and takes no value; remove \"value\""),
                ))
            }
            (TxnOpKind::Delete, None) => {}
        }
    }
    Ok(())
}

/// Txn: every fence and compare is judged before anything is written.
pub fn txn(
    ctx: &mut WriteCtx<'_>,
    p: TxnParams,
    compares: &[Compare],
    fences: &[Fenced],
    visible: &Visible,
) -> Result<TxnResult> {
    for f in fences {
        fence::check(ctx, f, visible)?;
    }
    let failed = failed_compares(ctx, compares)?;
    if !failed.is_empty() {
        let mut data = serde_json::Map::new();
        let n = failed.len();
        data.insert("failed".into(), serde_json::to_value(failed)?);
        data.insert(
            "hint".into(),
            "re-read the keys listed in `failed` with Get, then retry the Txn with their current versions".into(),
        );
        return Err(Error::Conflict {
            message: format!("{n} compare(s) did not hold, nothing was written; re-read the keys in data.failed and retry"),
            data,
            exact: Vec::new(),
        });
    }
    let mut results = Vec::with_capacity(p.ops.len());
    for op in p.ops {
        let (version, revision) = match op.op {
            TxnOpKind::Set => {
                let value = op.value.as_deref().map(RawValue::get).unwrap_or("null");
                let by = p.updated_by.as_deref();
                let written = put(
                    ctx,
                    &op.namespace,
                    &op.key,
                    Some(value),
                    Origin::by(by),
                    None,
                )?;
                (written.version, Some(written.revision))
            }
            TxnOpKind::Delete => {
                let by = p.updated_by.as_deref();
                let outcome = delete_key(ctx, &op.namespace, &op.key, by, None)?;
                (outcome.version, outcome.revision)
            }
        };
        results.push(TxnOpResult {
            op: op.op,
            namespace: op.namespace,
            key: op.key,
            version,
            revision,
        });
    }
    let revision = results
        .iter()
        .filter_map(|r| r.revision)
        .max()
        .unwrap_or(ctx.head_revision() as u64);
    Ok(TxnResult { revision, results })
}

pub fn check_clear_namespace(p: &ClearNamespaceParams) -> Result<()> {
    check_name("namespace", &p.namespace)
}

/// Keys one step of ClearNamespace deletes at most.
pub const CLEAR_STEP: u64 = 100;

/// Deletes every key of the namespace that was live when the clear began, in key order,
/// [`CLEAR_STEP`] keys per batch, each a tombstone and a journal event of its own; answered
/// once all are deleted. Readers see the keys go step by step; a key another connection
/// writes meanwhile (after the clear began) is kept.
pub fn clear_namespace(
    ctx: &mut WriteCtx<'_>,
    p: ClearNamespaceParams,
) -> Result<Served<ClearNamespaceResult>> {
    let up_to = ctx.head_revision() as u64;
    let mut after: Option<String> = None;
    let mut deleted = 0;
    if clear_step(ctx, &p, up_to, &mut after, &mut deleted)? {
        return Ok(Served::Now(ClearNamespaceResult { deleted }));
    }
    ctx.continue_later(Box::new(move |ctx| {
        if !clear_step(ctx, &p, up_to, &mut after, &mut deleted)? {
            return Ok(None);
        }
        super::reply(&ClearNamespaceResult { deleted }).map(Some)
    }));
    Ok(Served::Later)
}

/// Deletes the next keys of a clear; whether it is done.
fn clear_step(
    ctx: &mut WriteCtx<'_>,
    p: &ClearNamespaceParams,
    up_to: u64,
    after: &mut Option<String>,
    deleted: &mut u64,
) -> Result<bool> {
    let by = p.updated_by.as_deref();
    let keys =
        ctx.records()
            .live_versions_page(&p.namespace, after.as_deref(), up_to, CLEAR_STEP)?;
    for (key, version, revision) in &keys {
        let previous = StoredVersion {
            version: *version,
            revision: *revision,
            deleted: false,
        };
        write_version(
            ctx,
            &p.namespace,
            key,
            None,
            Origin::by(by),
            Some(&previous),
        )?;
    }
    *deleted += keys.len() as u64;
    let done = (keys.len() as u64) < CLEAR_STEP;
    *after = keys.into_iter().last().map(|(key, _, _)| key);
    Ok(done)
}

// ---- the rules of versions ----

/// What a write produced.
struct Written {
    version: u64,
    revision: u64,
}

/// The version a compare sees: 0 when the key is absent or deleted.
fn live_version(stored: Option<&StoredVersion>) -> u64 {
    stored.filter(|s| !s.deleted).map_or(0, |s| s.version)
}

/// Nothing when no version is expected or `expected` is the key's live version; else the
/// 409 of [`conflict`].
fn compare(
    ctx: &WriteCtx<'_>,
    namespace: &str,
    key: &str,
    expected: Option<u64>,
    stored: Option<&StoredVersion>,
) -> Result<()> {
    match expected {
        Some(expected) if live_version(stored) != expected => {
            Err(conflict(ctx.records(), namespace, key, expected, stored)?)
        }
        _ => Ok(()),
    }
}

/// The 409 a failed compare-and-set answers with, carrying what is stored now.
fn conflict(
    records: &dyn Records,
    namespace: &str,
    key: &str,
    expected: u64,
    stored: Option<&StoredVersion>,
) -> Result<Error> {
    let actual_version = live_version(stored);
    // Read only now: a write that passes its compare needs none of it. The same batch,
    // so the same row `stored` came from.
    let live = match actual_version {
        0 => None,
        _ => records.live(namespace, key)?,
    };
    // The stored text, so the value comes back digit for digit, as Get shows it.
    let actual_value = match &live {
        Some(record) => record.value.clone(),
        None => RawValue::from_string("null".into())?,
    };
    let (message, hint) = if expected == 0 {
        (
            format!("{namespace}/{key} already exists at version {actual_version}; it was not overwritten"),
            format!("the key exists: read it with Get, then write with expected_version {actual_version}"),
        )
    } else if actual_version == 0 {
        (
            format!("{namespace}/{key} does not exist (expected version {expected})"),
            "the key is absent or deleted: create it with expected_version 0".to_string(),
        )
    } else {
        (
            format!("{namespace}/{key} is at version {actual_version}, not the expected {expected}"),
            format!("call Get to read version {actual_version}, merge your change, and retry with expected_version {actual_version}"),
        )
    };
    let mut data = serde_json::Map::new();
    data.insert("namespace".into(), namespace.into());
    data.insert("key".into(), key.into());
    data.insert("expected_version".into(), expected.into());
    data.insert("actual_version".into(), actual_version.into());
    let (updated_by, updated_at) = match live {
        Some(record) => (record.updated_by, Some(record.updated_at)),
        None => (None, None),
    };
    data.insert("actual_updated_by".into(), updated_by.into());
    data.insert("actual_updated_at".into(), updated_at.into());
    data.insert("hint".into(), hint.clone().into());
    Ok(Error::Conflict {
        message: format!("{message}; {hint}"),
        data,
        exact: vec![("actual_value", actual_value)],
    })
}

/// Who writes a version, and why.
#[derive(Clone, Copy, Default)]
pub struct Origin<'a> {
    pub updated_by: Option<&'a str>,
    /// The session the key lives with from now on (None: with no session).
    pub session_id: Option<&'a str>,
    /// Why the daemon itself wrote it (the journal event's `data.reason`).
    pub reason: Option<&'a str>,
}

impl<'a> Origin<'a> {
    pub fn by(updated_by: Option<&'a str>) -> Origin<'a> {
        Origin {
            updated_by,
            ..Origin::default()
        }
    }
}

/// Writes the next version of a key (a value, or a tombstone when `value` is None) and
/// its journal event, `kv.set` or `kv.delete`, under one new revision.
fn write_version(
    ctx: &mut WriteCtx<'_>,
    namespace: &str,
    key: &str,
    value: Option<&str>,
    origin: Origin<'_>,
    previous: Option<&StoredVersion>,
) -> Result<Written> {
    let updated_by = origin.updated_by;
    let version = previous.map_or(0, |c| c.version) + 1;
    ctx.memory.retention.wrote_version(version);
    let revision = ctx.next_revision();
    ctx.records().store_version(&NewVersion {
        namespace,
        key,
        version,
        value,
        revision,
        updated_by,
        at_ms: ctx.now_ms,
        session_id: origin.session_id,
        previous_revision: previous.map(|p| p.revision),
    })?;
    let data = match (value, origin.reason) {
        (Some(v), _) => format!("{{\"version\":{version},\"value\":{v}}}"),
        (None, None) => format!("{{\"version\":{version}}}"),
        (None, Some(reason)) => {
            serde_json::json!({"version": version, "reason": reason}).to_string()
        }
    };
    ctx.journal().append_event(
        revision,
        ctx.now_ms,
        &NewEvent {
            actor: updated_by,
            namespace: Some(namespace),
            key: Some(key),
            data: &data,
            ..NewEvent::of(if value.is_none() {
                EventType::KvDelete
            } else {
                EventType::KvSet
            })
        },
    )?;
    Ok(Written {
        version,
        revision: revision as u64,
    })
}

/// Set: writes `value` if `expected` (None = unconditional) matches the live version.
fn put(
    ctx: &mut WriteCtx<'_>,
    namespace: &str,
    key: &str,
    value: Option<&str>,
    origin: Origin<'_>,
    expected: Option<u64>,
) -> Result<Written> {
    let stored = ctx.records().stored(namespace, key)?;
    compare(ctx, namespace, key, expected, stored.as_ref())?;
    write_version(ctx, namespace, key, value, origin, stored.as_ref())
}

/// Delete: writes a tombstone version if the key is live and `expected` matches.
fn delete_key(
    ctx: &mut WriteCtx<'_>,
    namespace: &str,
    key: &str,
    updated_by: Option<&str>,
    expected: Option<u64>,
) -> Result<DeleteResult> {
    let stored = ctx.records().stored(namespace, key)?;
    compare(ctx, namespace, key, expected, stored.as_ref())?;
    let live = live_version(stored.as_ref());
    if live == 0 {
        return Ok(DeleteResult {
            deleted: false,
            version: stored.map_or(0, |c| c.version),
            revision: None,
        });
    }
    let written = write_version(
        ctx,
        namespace,
        key,
        None,
        Origin::by(updated_by),
        stored.as_ref(),
    )?;
    Ok(DeleteResult {
        deleted: true,
        version: written.version,
        revision: Some(written.revision),
    })
}

/// A session ended: every key written with it and not rewritten since is deleted, as a
/// Delete by the daemon (a tombstone, and `kv.delete` with `data.reason`).
pub fn delete_session_keys(ctx: &mut WriteCtx<'_>, session_id: &str, name: &str) -> Result<()> {
    for (namespace, key) in ctx.records().keys_of_session(session_id)? {
        let stored = ctx.records().stored(&namespace, &key)?;
        let origin = Origin {
            updated_by: Some(name),
            session_id: None,
            reason: Some("session_ended"),
        };
        write_version(ctx, &namespace, &key, None, origin, stored.as_ref())?;
    }
    Ok(())
}

/// Every Txn compare that does not hold: a version compare as `{namespace, key,
/// expected_version, actual_version}`, a lease compare as `{resource_key, lease_id or
/// fencing_token, held, latest_fencing_token}`.
fn failed_compares(ctx: &mut WriteCtx<'_>, compares: &[Compare]) -> Result<Vec<serde_json::Value>> {
    let mut failed = Vec::new();
    for c in compares {
        match c {
            Compare::Version {
                namespace,
                key,
                version,
            } => {
                let actual = live_version(ctx.records().stored(namespace, key)?.as_ref());
                if actual != *version {
                    failed.push(serde_json::json!({
                        "namespace": namespace,
                        "key": key,
                        "expected_version": version,
                        "actual_version": actual,
                    }));
                }
            }
            Compare::Lease(f) => {
                if let Some(found) = fence::judge(ctx, f)? {
                    failed.push(found);
                }
            }
        }
    }
    Ok(failed)
}

// ---- the wire methods ----

impl Method for GetParams {
    const SUMMARY: &'static str = "Read one record: its value, version and who wrote it. Absence is {found: false}, not an error.";
    fn plan(self, _: &Ctx<'_>) -> Result<Plan> {
        Ok(read_one_statement::<Self>(move |storage| {
            get(storage, self)
        }))
    }
}

impl Method for SetParams {
    const SUMMARY: &'static str = "Write a record. expected_version: absent = last writer wins, 0 = create only, N = only if the current version is N (else 409 with the current value).";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        check_set(&self, &cx.limits())?;
        let session = self.session_id.take().map(|id| cx.presented(id));
        let fence = WriteFence::of(cx, self.fence.take())?;
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            fence.check(ctx)?;
            set(ctx, self, session)
        })
    }
}

impl Method for DeleteParams {
    const SUMMARY: &'static str = "Delete a record, leaving a tombstone version so a re-created key continues its version sequence.";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        check_delete(&self)?;
        let fence = WriteFence::of(cx, self.fence.take())?;
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            fence.check(ctx)?;
            delete(ctx, self)
        })
    }
}

impl Method for ListParams {
    const SUMMARY: &'static str = "List live records of a namespace in key order, optionally by key prefix; page with `after` = next.";
    fn plan(self, _: &Ctx<'_>) -> Result<Plan> {
        Ok(read_one_statement::<Self>(move |storage| {
            list(storage, self)
        }))
    }
}

impl Method for HistoryParams {
    const SUMMARY: &'static str =
        "Versions of one key, newest first, including deletions; page with `after` = next.";
    fn plan(self, _: &Ctx<'_>) -> Result<Plan> {
        Ok(read_one_statement::<Self>(move |storage| {
            history(storage, self)
        }))
    }
}

impl Method for TxnParams {
    const SUMMARY: &'static str = "Atomically check versions (0 = must not exist) and leases (a live lease_id, the latest fencing_token) and apply set/delete ops, each optionally fenced: all or nothing; 409 lists every failed compare.";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        check_txn(&self, &cx.limits())?;
        let compares = compares(&mut self, cx)?;
        let mut fences = Vec::new();
        for (i, op) in self.ops.iter_mut().enumerate() {
            if let Some(f) = op.fence.take() {
                fences.push(fenced(cx, f, &format!("ops[{i}].fence"))?);
            }
        }
        let visible = cx.visible();
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            txn(ctx, self, &compares, &fences, &visible)
        })
    }
}

impl Method for ClearNamespaceParams {
    const SUMMARY: &'static str =
        "Delete every live record of a namespace (each leaves a tombstone and a journal event).";
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        check_clear_namespace(&self)?;
        write_in_steps::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            clear_namespace(ctx, self)
        })
    }
}

impl Method for ExportParams {
    const SUMMARY: &'static str = "Live records of one namespace, or of all, in pages (`after` = next), each a consistent snapshot with its revision.";
    fn plan(self, _: &Ctx<'_>) -> Result<Plan> {
        Ok(read::<Self>(true, move |storage| export(storage, self)))
    }
}
