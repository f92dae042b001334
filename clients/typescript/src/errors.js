// Typed errors for every error batond answers, keyed by the wire's `data.kind` (as the
// Python client's baton/errors.py), and the client's own failures (unreachable, lost).

/** An error answer from batond: `code`, `kind` and `data` as on the wire. The message is
 * the daemon's, which says what to do next. */
export class BatonError extends Error {
  constructor(message, { code = 0, kind = '', data = {} } = {}, options) {
    super(message, options);
    this.code = code;
    this.kind = kind;
    this.data = data ?? {};
  }

  get name() {
    return this.constructor.name;
  }
}

const holdersOf = (data) => {
  const heldBy = data.held_by;
  if (heldBy === undefined || heldBy === null) return [];
  return (Array.isArray(heldBy) ? heldBy : [heldBy]).map((h) => ({ ...h }));
};

/** 409: the version did not match (Set, Delete) or a Txn compare failed. Carries the
 * current state, so the caller can merge and retry without another read. */
export class ConflictError extends BatonError {
  get namespace() {
    return this.data.namespace ?? null;
  }
  get key() {
    return this.data.key ?? null;
  }
  get expectedVersion() {
    return this.data.expected_version ?? null;
  }
  /** The version stored now (0 when the key does not exist). */
  get currentVersion() {
    return Number(this.data.actual_version ?? 0);
  }
  get currentValue() {
    return this.data.actual_value ?? null;
  }
  get updatedBy() {
    return this.data.actual_updated_by ?? null;
  }
  get updatedAt() {
    return this.data.actual_updated_at ?? null;
  }
  /** For a Txn: every compare that did not hold. */
  get failed() {
    return [...(this.data.failed ?? [])];
  }
}

/** 409 `fenced`: the write named a lease (`fence`) that no longer holds its key, or a
 * fencing token older than the key's latest. Nothing was written: stop the work the
 * claim guarded, acquire the key again, re-read, redo. A ConflictError that `update()`
 * never retries. */
export class FencedError extends ConflictError {
  get resourceKey() {
    return String(this.data.resource_key ?? '');
  }
  /** The largest fencing token granted on the key: the lease that overtook yours. */
  get latestFencingToken() {
    return Number(this.data.latest_fencing_token ?? 0);
  }
  /** Who holds the key now (the first of several), null when nobody does. */
  get heldBy() {
    return this.holders[0] ?? null;
  }
  /** Every holder of the key now (several for shared keys and slots). */
  get holders() {
    return holdersOf(this.data);
  }
}

/** 409: the idempotency key was used before with other params. */
export class IdempotencyConflictError extends BatonError {}

/** 410: the lease is stale, expired, released or someone else's; stop the work it guarded. */
export class LeaseInvalidError extends BatonError {}

/** 404: no such task, node, lease or subscription. */
export class NotFoundError extends BatonError {}

/** 400: well-formed but refused (a cycle, `..` in a path, an empty key, ...). */
export class InvalidError extends BatonError {}

/** 416: events before `oldestSeq` are no longer kept, or (History) versions before
 * `oldestVersion`. */
export class CompactedError extends BatonError {
  get oldestSeq() {
    return Number(this.data.oldest_seq ?? 0);
  }
  get oldestVersion() {
    return Number(this.data.oldest_version ?? 0);
  }
}

/** 413: the value is over the daemon's BATON_MAX_VALUE_BYTES. */
export class ValueTooLargeError extends BatonError {}

/** 429: the daemon shed load; nothing was done, retry shortly. */
export class OverloadedError extends BatonError {}

/** 503: the daemon is shutting down or its storage is failing; nothing was written. */
export class UnavailableError extends BatonError {}

/** 401: no valid token on this connection. Set BATON_TOKEN (or pass `token`) to a token
 * an admin made with `baton token create`. */
export class UnauthenticatedError extends BatonError {}

/** 403: the token lacks the grant; `needed` names the grant that would allow it. */
export class ForbiddenError extends BatonError {
  get needed() {
    return String(this.data.needed ?? '');
  }
}

/** A request the daemon could not take: bad JSON, bad params, unknown method, too long. */
export class ProtocolError extends BatonError {}

/** -32700: the line was not JSON (this client never sends one). */
export class ParseError extends ProtocolError {}

/** -32600: JSON but not a request object (this client never sends one). */
export class InvalidRequestError extends ProtocolError {}

/** -32602: a param is missing or has the wrong type; `field` names it. */
export class InvalidParamsError extends ProtocolError {
  get field() {
    return this.data.field ?? null;
  }
}

/** -32601: the daemon does not know the method (`data.methods` lists those it does). */
export class MethodNotFoundError extends ProtocolError {}

/** -32001: the request line is over the daemon's BATON_MAX_LINE_BYTES. */
export class RequestTooLargeError extends ProtocolError {}

/** -32603: a bug in batond; please report it with the daemon's log. */
export class InternalError extends BatonError {}

/** batond is not running at the socket, or the socket (or URL) cannot be reached. */
export class DaemonUnreachableError extends BatonError {}

/** The connection broke after the request was sent: it may or may not have taken effect.
 * Check (get, taskStatus, ...) or retry with an `idempotency_key`. */
export class ConnectionLostError extends BatonError {}

/** The lock is held by someone else (after waiting, if `wait_ms` was given). */
export class LockBusyError extends BatonError {
  /** The holder (the first one, for a key with several: see `holders`). */
  get heldBy() {
    return this.holders[0] ?? null;
  }
  get holders() {
    return holdersOf(this.data);
  }
}

/** A lock, node lease or agent session this client held was lost (expired or taken
 * over) while working. */
export class LeaseLostError extends BatonError {}

/** `update` kept conflicting with other writers and gave up. */
export class RetriesExhaustedError extends BatonError {}

/** The class for each `data.kind` batond answers. */
export const ERROR_CLASSES = Object.freeze({
  conflict: ConflictError,
  fenced: FencedError,
  idempotency_conflict: IdempotencyConflictError,
  lease_invalid: LeaseInvalidError,
  not_found: NotFoundError,
  invalid: InvalidError,
  compacted: CompactedError,
  value_too_large: ValueTooLargeError,
  overloaded: OverloadedError,
  unavailable: UnavailableError,
  unauthenticated: UnauthenticatedError,
  forbidden: ForbiddenError,
  invalid_params: InvalidParamsError,
  method_not_found: MethodNotFoundError,
  parse_error: ParseError,
  invalid_request: InvalidRequestError,
  request_too_large: RequestTooLargeError,
  internal: InternalError,
});

/** The typed error for the `error` object of an answer. */
export function fromWire(error) {
  const data = error?.data && typeof error.data === 'object' ? error.data : {};
  const kind = String(data.kind ?? '');
  const Class = Object.hasOwn(ERROR_CLASSES, kind) ? ERROR_CLASSES[kind] : BatonError;
  return new Class(String(error?.message ?? 'batond returned an error'), { code: Number(error?.code ?? 0), kind, data });
}
