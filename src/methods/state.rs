//! Versioned state: Get, Set, Delete, List, History, Txn, ClearNamespace, Export.
//! Params are checked here; the SQL lives in `store::state`.

use serde_json::value::RawValue;

use crate::error::{Error, Result};
use crate::store::state as sql;
use crate::store::WriteCtx;

use super::{limit_or_default, read, read_one_statement, write, Ctx, Limits, Method, Plan};

/// Longest namespace or key, in bytes.
pub const MAX_NAME_BYTES: usize = 512;

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

pub fn get(conn: &rusqlite::Connection, p: GetParams) -> Result<GetResult> {
    check_name("namespace", &p.namespace)?;
    check_name("key", &p.key)?;
    let record = sql::get_live(conn, &p.namespace, &p.key)?;
    Ok(GetResult {
        found: record.is_some(),
        namespace: p.namespace,
        key: p.key,
        record,
    })
}

pub fn list(conn: &rusqlite::Connection, p: ListParams) -> Result<ListResult> {
    check_name("namespace", &p.namespace)?;
    let limit = limit_or_default(p.limit)?;
    let (records, more) = sql::list(
        conn,
        &p.namespace,
        p.prefix.as_deref().unwrap_or(""),
        p.after.as_deref(),
        limit,
    )?;
    let next_after = if more {
        records.last().map(|r| r.key.clone())
    } else {
        None
    };
    Ok(ListResult {
        records,
        next_after,
    })
}

pub fn history(conn: &rusqlite::Connection, p: HistoryParams) -> Result<HistoryResult> {
    check_name("namespace", &p.namespace)?;
    check_name("key", &p.key)?;
    let limit = limit_or_default(p.limit)?;
    let history = sql::history(conn, &p.namespace, &p.key, p.before_version, limit)?;
    Ok(HistoryResult { history })
}

pub fn export(conn: &rusqlite::Connection, p: ExportParams) -> Result<ExportResult> {
    if let Some(ns) = &p.namespace {
        check_name("namespace", ns)?;
    }
    let (records, revision) = sql::export(conn, p.namespace.as_deref())?;
    Ok(ExportResult { records, revision })
}

// ---- writes: checked before queueing, applied on the writer ----

pub fn check_set(p: &SetParams, limits: &Limits) -> Result<()> {
    check_name("namespace", &p.namespace)?;
    check_name("key", &p.key)?;
    check_value("value", &p.value, limits)
}

pub fn set(ctx: &mut WriteCtx<'_>, p: SetParams) -> Result<SetResult> {
    let written = sql::put(
        ctx,
        &p.namespace,
        &p.key,
        Some(p.value.get()),
        p.updated_by.as_deref(),
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
    sql::delete(
        ctx,
        &p.namespace,
        &p.key,
        p.updated_by.as_deref(),
        p.expected_version,
    )
}

pub fn check_txn(p: &TxnParams, limits: &Limits) -> Result<()> {
    for (i, c) in p.compare.iter().enumerate() {
        check_name(&format!("compare[{i}].namespace"), &c.namespace)?;
        check_name(&format!("compare[{i}].key"), &c.key)?;
    }
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

pub fn txn(ctx: &mut WriteCtx<'_>, p: TxnParams) -> Result<TxnResult> {
    let failed = sql::failed_compares(ctx.conn, &p.compare)?;
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
                let written = sql::put(ctx, &op.namespace, &op.key, Some(value), by, None)?;
                (written.version, Some(written.revision))
            }
            TxnOpKind::Delete => {
                let by = p.updated_by.as_deref();
                let outcome = sql::delete(ctx, &op.namespace, &op.key, by, None)?;
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

pub fn clear_namespace(
    ctx: &mut WriteCtx<'_>,
    p: ClearNamespaceParams,
) -> Result<ClearNamespaceResult> {
    let deleted = sql::clear_namespace(ctx, &p.namespace, p.updated_by.as_deref())?;
    Ok(ClearNamespaceResult { deleted })
}

// ---- the wire methods ----

impl Method for GetParams {
    const NAME: &'static str = "Get";
    const SUMMARY: &'static str = "Read one record: its value, version and who wrote it. Absence is {found: false}, not an error.";
    type Output = GetResult;
    fn plan(self, _: &Ctx<'_>) -> Result<Plan> {
        Ok(read_one_statement::<Self>(move |conn| get(conn, self)))
    }
}

impl Method for SetParams {
    const NAME: &'static str = "Set";
    const SUMMARY: &'static str = "Write a record. expected_version: absent = last writer wins, 0 = create only, N = only if the current version is N (else 409 with the current value).";
    type Output = SetResult;
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        check_set(&self, &cx.limits())?;
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| set(ctx, self))
    }
}

impl Method for DeleteParams {
    const NAME: &'static str = "Delete";
    const SUMMARY: &'static str = "Delete a record, leaving a tombstone version so a re-created key continues its version sequence.";
    type Output = DeleteResult;
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        check_delete(&self)?;
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            delete(ctx, self)
        })
    }
}

impl Method for ListParams {
    const NAME: &'static str = "List";
    const SUMMARY: &'static str = "List live records of a namespace in key order, optionally by key prefix; page with `after` = next_after.";
    type Output = ListResult;
    fn plan(self, _: &Ctx<'_>) -> Result<Plan> {
        Ok(read_one_statement::<Self>(move |conn| list(conn, self)))
    }
}

impl Method for HistoryParams {
    const NAME: &'static str = "History";
    const SUMMARY: &'static str = "Every version of one key, newest first, including deletions.";
    type Output = HistoryResult;
    fn plan(self, _: &Ctx<'_>) -> Result<Plan> {
        Ok(read_one_statement::<Self>(move |conn| history(conn, self)))
    }
}

impl Method for TxnParams {
    const NAME: &'static str = "Txn";
    const SUMMARY: &'static str = "Atomically check versions (0 = must not exist) and apply set/delete ops: all or nothing; 409 lists every failed compare.";
    type Output = TxnResult;
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        check_txn(&self, &cx.limits())?;
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| txn(ctx, self))
    }
}

impl Method for ClearNamespaceParams {
    const NAME: &'static str = "ClearNamespace";
    const SUMMARY: &'static str =
        "Delete every live record of a namespace (each leaves a tombstone and a journal event).";
    type Output = ClearNamespaceResult;
    fn plan(mut self, cx: &Ctx<'_>) -> Result<Plan> {
        check_clear_namespace(&self)?;
        write::<Self>(cx, self.idempotency_key.take(), move |ctx| {
            clear_namespace(ctx, self)
        })
    }
}

impl Method for ExportParams {
    const NAME: &'static str = "Export";
    const SUMMARY: &'static str = "Every live record of one namespace, or of all, as one consistent snapshot with its revision.";
    type Output = ExportResult;
    fn plan(self, _: &Ctx<'_>) -> Result<Plan> {
        Ok(read::<Self>(true, move |conn| export(conn, self)))
    }
}
