//! Idempotency keys: the first successful answer to a keyed request is remembered for 24
//! hours and replayed for a repeat with the same params. A refused request is not
//! remembered: it changed nothing, so running it again is safe.

use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

use super::{Reply, WriteCtx, WriteFn};

/// How long an answer is remembered.
pub const RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

/// The identity of a keyed request: its key and a digest of what it asked for.
#[derive(Debug, Clone)]
pub struct Idempotency {
    pub key: String,
    pub method: &'static str,
    pub request_hash: [u8; 32],
}

impl Idempotency {
    /// Digests `params` canonically (object keys sorted, `idempotency_key` left out), so
    /// the same request spelled with other whitespace or key order is recognised. Numbers
    /// are digested as sent: params that differ in a float's last digit are different
    /// requests. The token the request acts with is part of it: a repeat through another
    /// token is a different request (409), never a replay of an answer that may carry the
    /// first token's lease id.
    pub fn new(
        key: String,
        method: &'static str,
        params: &RawValue,
        token_id: Option<&str>,
    ) -> Result<Idempotency> {
        let canonical = crate::json::canonical_without(params.get(), Some("idempotency_key"));
        let mut hasher = Sha256::new();
        hasher.update(method.as_bytes());
        hasher.update(b"\n");
        if let Some(token_id) = token_id {
            hasher.update(token_id.as_bytes());
            hasher.update(b"\n");
        }
        hasher.update(canonical.as_bytes());
        Ok(Idempotency {
            key,
            method,
            request_hash: hasher.finalize().into(),
        })
    }
}

/// Runs `apply` unless the key already has an answer; remembers a successful answer (one
/// given at once: an answer deferred past a wait is not remembered).
pub fn apply<M>(
    ctx: &mut WriteCtx<'_, M>,
    idempotency: Option<&Idempotency>,
    apply: WriteFn<M>,
) -> Result<Option<Reply>> {
    let Some(idem) = idempotency else {
        return apply(ctx);
    };
    if let Some(earlier) = ctx.remembered().remembered(&idem.key)? {
        if ctx.now_ms - earlier.created_at_ms < RETENTION_MS {
            if earlier.method == idem.method && earlier.request_hash == idem.request_hash {
                return Ok(Some(RawValue::from_string(earlier.response)?));
            }
            return Err(Error::IdempotencyConflict {
                key: idem.key.clone(),
            });
        }
    }
    let Some(reply) = apply(ctx)? else {
        return Ok(None);
    };
    ctx.remembered().remember(
        &idem.key,
        idem.method,
        &idem.request_hash,
        reply.get(),
        ctx.now_ms,
    )?;
    Ok(Some(reply))
}
