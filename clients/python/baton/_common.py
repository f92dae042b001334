"""What the sync and asyncio clients share: where the socket is, who we are, framing."""

from __future__ import annotations

import json
import os
import random
import socket
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .errors import BatonError, CompactedError, ConflictError, DaemonUnreachableError, LockBusyError, from_wire
from .types import Event, Lease


def socket_path(explicit: "Optional[str | os.PathLike[str]]" = None) -> str:
    """The daemon's socket: the argument, else BATON_SOCKET_PATH, else
    $BATON_HOME/baton.sock, else ~/.baton/baton.sock."""
    if explicit:
        return os.fspath(explicit)
    if os.environ.get("BATON_SOCKET_PATH"):
        return os.environ["BATON_SOCKET_PATH"]
    home = os.environ.get("BATON_HOME") or str(Path.home() / ".baton")
    return str(Path(home) / "baton.sock")


def default_owner() -> str:
    """BATON_OWNER, else host:pid (unique per process, readable in ListResourceLocks)."""
    return os.environ.get("BATON_OWNER") or f"{socket.gethostname()}:{os.getpid()}"


def unreachable(path: str, err: OSError) -> DaemonUnreachableError:
    return DaemonUnreachableError(
        f"batond is not reachable at {path} ({err.strerror or err}); start it with `batond` "
        "(or `baton` service), or point BATON_SOCKET_PATH at its socket",
        kind="unreachable",
    )


def encode(request_id: int, method: str, params: Dict[str, Any]) -> bytes:
    return (json.dumps({"id": request_id, "method": method, "params": params}, separators=(",", ":")) + "\n").encode()


def decode(line: bytes, request_id: int) -> Any:
    """The result of a response line, or raises its typed error."""
    answer = json.loads(line)
    if answer.get("id") != request_id:
        raise BatonError(f"answer to request {answer.get('id')} arrived for {request_id}", kind="protocol")
    if "error" in answer:
        raise from_wire(answer["error"])
    return answer.get("result")


def drop_none(**params: Any) -> Dict[str, Any]:
    """Params without the ones left at None (the daemon's defaults apply)."""
    return {k: v for k, v in params.items() if v is not None}


def lock_params(
    resource_key: str,
    owner: str,
    ttl_secs: Optional[int],
    wait_ms: Optional[int],
    metadata: Any,
    provider: Optional[str],
    release_on_disconnect: Optional[bool],
) -> Dict[str, Any]:
    return drop_none(
        resource_key=resource_key,
        owner=owner,
        ttl_secs=ttl_secs,
        wait_ms=wait_ms,
        metadata=metadata,
        provider=provider,
        release_on_disconnect=release_on_disconnect,
    )


def conflict_state(err: ConflictError) -> Tuple[Any, int]:
    """(current value, current version) from a conflict, for the next update attempt."""
    return (err.current_value if err.current_version else None), err.current_version


def retry_pause(attempt: int) -> float:
    """Seconds to wait before retry `attempt` (1, 2, ...) of a conflicting update: random
    (so two writers that collided do not collide again in step), growing, at most 50 ms."""
    return random.uniform(0, min(0.05, 0.001 * 2**attempt))


def node_error(exc: BaseException) -> Dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)}


def heartbeat_interval(ttl_secs: int) -> float:
    """A third of the lease: two heartbeats may be lost before it lapses."""
    return max(ttl_secs / 3.0, 0.05)


def busy_error(r: Dict[str, Any]) -> LockBusyError:
    """The error for an AcquireResourceLock answer with status busy."""
    held = r.get("held_by") or {}
    via = r.get("conflicting_key")
    return LockBusyError(
        f"{r['resource_key']} is held by {held.get('owner')} until {held.get('expires_at')}"
        + (f" (via {via})" if via not in (None, r["resource_key"]) else "")
        + "; wait (wait_ms) or try later",
        kind="busy",
        data=r,
    )


def refusal(r: Dict[str, Any]) -> Optional[LockBusyError]:
    """The error for an AcquireResourceLock answer that gives no lease: busy, or
    already_held by the same owner name through another connection (the lease id is shown
    only to the connection that acquired it)."""
    if r["status"] == "busy":
        return busy_error(r)
    if "lease_id" not in r:
        return LockBusyError(
            f"{r['resource_key']} is already held by {r.get('owner')} (this owner name) through another "
            "connection, which alone was given its lease id; release it there, or wait until it expires",
            kind="busy",
            data=r,
        )
    return None


def release_params(lease: Lease, exc_type: Any, exc: Any) -> Dict[str, Any]:
    """ReleaseResourceLock params at the end of a `lock()` block: the lease's outcome, or
    `abandoned` with the exception as the note when the block raised."""
    outcome = "abandoned" if exc_type is not None else lease.outcome
    note = lease.note or (f"{exc_type.__name__}: {exc}" if exc_type is not None else None)
    return drop_none(
        resource_key=lease.resource_key, lease_id=lease.lease_id, outcome=outcome, moved_to=lease.moved_to, note=note
    )


def notification(line: bytes, last_seq: int) -> Tuple[Optional[Event], Optional[int]]:
    """A subscription's pushed line: (event, None); (None, seq to resubscribe from) when
    the daemon cut the subscription off for falling behind; CompactedError when it was
    overtaken by a compaction; (None, None) for anything else."""
    message = json.loads(line)
    method = message.get("method")
    params = message.get("params") or {}
    if method == "Event":
        return Event.from_wire(params["event"]), None
    if method == "SubscriptionEnded":
        if params.get("reason") == "compacted":
            raise CompactedError(str(params.get("message", "compacted")), 416, "compacted", params)
        return None, int(params.get("resume_from_seq", last_seq))
    return None, None
