import type { ErrorKind, HeldBy } from './wire/index.js';

/** What an error's `data` holds: the wire's `error.data` (its `kind` and the fields the
 * error documents in docs/protocol.md). */
export type ErrorData = { kind?: ErrorKind | string; [field: string]: unknown };

/** An error answer from batond: `code`, `kind` and `data` as on the wire. The message is
 * the daemon's, which says what to do next. */
export declare class BatonError extends Error {
  constructor(message: string, wire?: { code?: number; kind?: string; data?: ErrorData }, options?: ErrorOptions);
  /** The wire's `code` (409, 404, -32602, ...; 0 for the client's own errors). */
  readonly code: number;
  /** The wire's `data.kind` (`conflict`, `fenced`, ...; the client's own: `unreachable`,
   * `connection_lost`, `busy`, `lease_lost`, `retries_exhausted`, `protocol`). */
  readonly kind: string;
  /** The wire's `data`. */
  readonly data: ErrorData;
  readonly name: string;
}

/** 409: the version did not match (Set, Delete) or a Txn compare failed; carries the
 * current state. */
export declare class ConflictError extends BatonError {
  readonly namespace: string | null;
  readonly key: string | null;
  readonly expectedVersion: number | null;
  /** The version stored now (0 when the key does not exist). */
  readonly currentVersion: number;
  readonly currentValue: unknown;
  readonly updatedBy: string | null;
  readonly updatedAt: string | null;
  /** For a Txn: every compare that did not hold. */
  readonly failed: Array<Record<string, unknown>>;
}

/** 409 `fenced`: a fenced write whose claim was lost; nothing was written. */
export declare class FencedError extends ConflictError {
  readonly resourceKey: string;
  /** The largest fencing token granted on the key: the lease that overtook yours. */
  readonly latestFencingToken: number;
  /** Who holds the key now (the first of several), null when nobody does. */
  readonly heldBy: HeldBy | null;
  readonly holders: HeldBy[];
}

/** 409: the idempotency key was used before with other params. */
export declare class IdempotencyConflictError extends BatonError {}
/** 410: the lease is stale, expired, released or someone else's. */
export declare class LeaseInvalidError extends BatonError {}
/** 404: no such task, node, lease or subscription. */
export declare class NotFoundError extends BatonError {}
/** 400: well-formed but refused. */
export declare class InvalidError extends BatonError {}
/** 416: events (or History versions) before `oldestSeq` (`oldestVersion`) are gone. */
export declare class CompactedError extends BatonError {
  readonly oldestSeq: number;
  readonly oldestVersion: number;
}
/** 413: the value is over BATON_MAX_VALUE_BYTES. */
export declare class ValueTooLargeError extends BatonError {}
/** 429: the daemon shed load; nothing was done, retry shortly. */
export declare class OverloadedError extends BatonError {}
/** 503: shutting down or storage failing; nothing was written. */
export declare class UnavailableError extends BatonError {}
/** 401: no valid token on this connection. */
export declare class UnauthenticatedError extends BatonError {}
/** 403: the token lacks the grant `needed`. */
export declare class ForbiddenError extends BatonError {
  readonly needed: string;
}
/** A request the daemon could not take. */
export declare class ProtocolError extends BatonError {}
/** -32700. */
export declare class ParseError extends ProtocolError {}
/** -32600. */
export declare class InvalidRequestError extends ProtocolError {}
/** -32602: a param is missing or has the wrong type. */
export declare class InvalidParamsError extends ProtocolError {
  readonly field: string | null;
}
/** -32601: unknown method (`data.methods` lists the known ones). */
export declare class MethodNotFoundError extends ProtocolError {}
/** -32001: the request line is over BATON_MAX_LINE_BYTES. */
export declare class RequestTooLargeError extends ProtocolError {}
/** -32603: a bug in batond. */
export declare class InternalError extends BatonError {}
/** batond cannot be reached at the socket or URL. */
export declare class DaemonUnreachableError extends BatonError {}
/** The connection broke after the request was sent: it may or may not have taken effect. */
export declare class ConnectionLostError extends BatonError {}
/** The lock is held by someone else. */
export declare class LockBusyError extends BatonError {
  readonly heldBy: HeldBy | null;
  readonly holders: HeldBy[];
}
/** A lease, node lease or agent session held by this client was lost. */
export declare class LeaseLostError extends BatonError {}
/** `update` kept conflicting and gave up. */
export declare class RetriesExhaustedError extends BatonError {}

/** The class for each `data.kind` batond answers. */
export declare const ERROR_CLASSES: Readonly<Record<ErrorKind, typeof BatonError>>;

/** The typed error for the `error` object of an answer. */
export declare function fromWire(error: { code?: number; message?: string; data?: ErrorData }): BatonError;
