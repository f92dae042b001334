"""Typed exceptions for every error batond answers, keyed by the wire's `data.kind`."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Type


class BatonError(Exception):
    """An error answer from batond: `code`, `kind` and `data` as on the wire.

    The message is the daemon's, which says what to do next.
    """

    def __init__(self, message: str, code: int = 0, kind: str = "", data: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.kind = kind
        self.data: Dict[str, Any] = data or {}


class ConflictError(BatonError):
    """409: the version did not match (Set, Delete) or a Txn compare failed.

    Carries the current state so the caller can merge and retry without another read.
    """

    @property
    def namespace(self) -> Optional[str]:
        return self.data.get("namespace")

    @property
    def key(self) -> Optional[str]:
        return self.data.get("key")

    @property
    def expected_version(self) -> Optional[int]:
        return self.data.get("expected_version")

    @property
    def current_version(self) -> int:
        """The version stored now (0 when the key does not exist)."""
        return int(self.data.get("actual_version") or 0)

    @property
    def current_value(self) -> Any:
        return self.data.get("actual_value")

    @property
    def updated_by(self) -> Optional[str]:
        return self.data.get("actual_updated_by")

    @property
    def updated_at(self) -> Optional[str]:
        return self.data.get("actual_updated_at")

    @property
    def failed(self) -> List[Dict[str, Any]]:
        """For a Txn: every compare that did not hold."""
        return list(self.data.get("failed") or [])


class FencedError(ConflictError):
    """409 `fenced`: the write named a lease (`fence`) that no longer holds its key (it
    expired, was released or broken), or a fencing token older than the key's latest.
    Nothing was written. The claim is lost: stop the work it guarded, acquire the key
    again, re-read what you meant to change, and redo it.

    A ConflictError (a 409 refusal that wrote nothing) but not a version conflict: its
    version fields are empty, and `update()` never retries it.
    """

    @property
    def resource_key(self) -> str:
        return str(self.data.get("resource_key", ""))

    @property
    def latest_fencing_token(self) -> int:
        """The largest fencing token granted on the key: the lease that overtook yours."""
        return int(self.data.get("latest_fencing_token") or 0)

    @property
    def held_by(self) -> Optional[Dict[str, Any]]:
        """Who holds the key now (the first holder of several), None when nobody does."""
        holders = self.holders
        return holders[0] if holders else None

    @property
    def holders(self) -> List[Dict[str, Any]]:
        """Every holder of the key now (several for shared keys and slots)."""
        held_by = self.data.get("held_by") or []
        return [dict(h) for h in (held_by if isinstance(held_by, list) else [held_by])]


#: The same class as FencedError, by the name the protocol's kind suggests.
Fenced = FencedError


class IdempotencyConflictError(BatonError):
    """409: the idempotency key was used before with other params."""


class LeaseInvalidError(BatonError):
    """410: the lease is stale, expired, released or someone else's; stop the work it guarded."""


class NotFoundError(BatonError):
    """404: no such task, node, lease or subscription."""


class InvalidError(BatonError):
    """400: well-formed but refused (a cycle, `..` in a path, an empty key, ...)."""


class CompactedError(BatonError):
    """416: events before `oldest_seq` are no longer kept, or (History) versions before
    `oldest_version` (BATON_HISTORY_KEEP)."""

    @property
    def oldest_seq(self) -> int:
        return int(self.data.get("oldest_seq") or 0)

    @property
    def oldest_version(self) -> int:
        return int(self.data.get("oldest_version") or 0)


class ValueTooLargeError(BatonError):
    """413: the value is over the daemon's BATON_MAX_VALUE_BYTES."""


class OverloadedError(BatonError):
    """429: the daemon shed load; nothing was done, retry shortly."""


class UnavailableError(BatonError):
    """503: the daemon is shutting down or its storage is failing; nothing was written."""


class UnauthenticatedError(BatonError):
    """401: no valid token on this connection (none given, wrong, expired or revoked).
    Set BATON_TOKEN (or pass token=) to a token an admin made with `baton token create`."""


class ForbiddenError(BatonError):
    """403: the token lacks the grant; `needed` names the grant that would allow it."""

    @property
    def needed(self) -> str:
        return str(self.data.get("needed", ""))


class ProtocolError(BatonError):
    """A request the daemon could not take: bad JSON, bad params, unknown method, too long."""


class InvalidParamsError(ProtocolError):
    """-32602: a param is missing or has the wrong type; the message names it."""


class MethodNotFoundError(ProtocolError):
    """-32601: the daemon does not know the method (`data.methods` lists those it does)."""


class InternalError(BatonError):
    """-32603: a bug in batond; please report it with the daemon's log."""


class DaemonUnreachableError(BatonError, ConnectionError):
    """batond is not running at the socket, or the socket cannot be opened."""


class ConnectionLostError(BatonError, ConnectionError):
    """The connection broke after the request was sent: it may or may not have taken
    effect. Check (Get, TaskStatus, ...) or retry with an idempotency_key."""


class LockBusyError(BatonError):
    """The lock is held by someone else (after waiting, if `wait_ms` was given)."""

    @property
    def held_by(self) -> Dict[str, Any]:
        """The holder (the first one, for a key with several: see `holders`)."""
        holders = self.holders
        return holders[0] if holders else {}

    @property
    def holders(self) -> List[Dict[str, Any]]:
        """Every holder in the way (several for shared keys and slots)."""
        held_by = self.data.get("held_by") or []
        return [dict(h) for h in (held_by if isinstance(held_by, list) else [held_by])]


class LeaseLostError(BatonError):
    """A lock or node lease this client held was lost (expired or taken over) while working."""


class RetriesExhaustedError(BatonError):
    """`update` kept conflicting with other writers and gave up."""


_BY_KIND: Dict[str, Type[BatonError]] = {
    "conflict": ConflictError,
    "fenced": FencedError,
    "idempotency_conflict": IdempotencyConflictError,
    "lease_invalid": LeaseInvalidError,
    "not_found": NotFoundError,
    "invalid": InvalidError,
    "compacted": CompactedError,
    "value_too_large": ValueTooLargeError,
    "overloaded": OverloadedError,
    "unavailable": UnavailableError,
    "unauthenticated": UnauthenticatedError,
    "forbidden": ForbiddenError,
    "invalid_params": InvalidParamsError,
    "method_not_found": MethodNotFoundError,
    "parse_error": ProtocolError,
    "invalid_request": ProtocolError,
    "request_too_large": ProtocolError,
    "internal": InternalError,
}


def from_wire(error: Dict[str, Any]) -> BatonError:
    """The typed exception for an `error` object of a response."""
    data = error.get("data") or {}
    kind = str(data.get("kind", ""))
    cls = _BY_KIND.get(kind, BatonError)
    return cls(str(error.get("message", "batond returned an error")), int(error.get("code", 0)), kind, data)
