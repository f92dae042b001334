"""What the sync and asyncio clients share: where the socket is, who we are, framing."""

from __future__ import annotations

import json
import os
import random
import socket
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .errors import BatonError, CompactedError, ConflictError, DaemonUnreachableError, LockBusyError, from_wire
from .types import Event, Lease, Node


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


# -- request params ---------------------------------------------------------------------
# Built here once for Client and AsyncClient. No defaults: a method that forgets to pass
# one of its parameters on fails at once instead of silently not sending it.


def set_params(
    namespace: str,
    key: str,
    value: Any,
    *,
    expected_version: Optional[int],
    updated_by: Optional[str],
    idempotency_key: Optional[str],
) -> Dict[str, Any]:
    params = drop_none(
        namespace=namespace,
        key=key,
        expected_version=expected_version,
        updated_by=updated_by,
        idempotency_key=idempotency_key,
    )
    params["value"] = value  # a null value is a value: never dropped
    return params


def delete_params(
    namespace: str, key: str, *, expected_version: Optional[int], updated_by: Optional[str]
) -> Dict[str, Any]:
    return drop_none(namespace=namespace, key=key, expected_version=expected_version, updated_by=updated_by)


def list_params(
    namespace: str, *, prefix: Optional[str], limit: Optional[int], after: Optional[str]
) -> Dict[str, Any]:
    return drop_none(namespace=namespace, prefix=prefix, limit=limit, after=after)


def history_params(
    namespace: str, key: str, *, limit: Optional[int], before_version: Optional[int]
) -> Dict[str, Any]:
    return drop_none(namespace=namespace, key=key, limit=limit, before_version=before_version)


def txn_params(
    compare: List[Dict[str, Any]], ops: List[Dict[str, Any]], *, updated_by: Optional[str]
) -> Dict[str, Any]:
    return drop_none(compare=compare, ops=ops, updated_by=updated_by)


def lock_params(
    resource_key: str,
    owner: Optional[str],
    *,
    ttl_secs: Optional[int],
    wait_ms: Optional[int],
    metadata: Any,
    provider: Optional[str],
    release_on_disconnect: Optional[bool],
) -> Dict[str, Any]:
    """AcquireResourceLock params; no owner means default_owner()."""
    return drop_none(
        resource_key=resource_key,
        owner=owner or default_owner(),
        ttl_secs=ttl_secs,
        wait_ms=wait_ms,
        metadata=metadata,
        provider=provider,
        release_on_disconnect=release_on_disconnect,
    )


def heartbeat_lock_params(resource_key: str, lease_id: str, *, ttl_secs: Optional[int]) -> Dict[str, Any]:
    return drop_none(resource_key=resource_key, lease_id=lease_id, ttl_secs=ttl_secs)


def release_lock_params(
    resource_key: str, lease_id: str, *, outcome: Optional[str], moved_to: Optional[str], note: Optional[str]
) -> Dict[str, Any]:
    return drop_none(resource_key=resource_key, lease_id=lease_id, outcome=outcome, moved_to=moved_to, note=note)


def list_locks_params(*, prefix: Optional[str], owner: Optional[str]) -> Dict[str, Any]:
    return drop_none(prefix=prefix, owner=owner)


def wait_lock_params(resource_key: str, timeout_ms: int) -> Dict[str, Any]:
    return {"resource_key": resource_key, "timeout_ms": timeout_ms}


def register_task_params(goal: str, nodes: List[Dict[str, Any]], *, context: Any) -> Dict[str, Any]:
    return drop_none(goal=goal, nodes=nodes, context=context)


def acquire_node_params(
    task_id: Optional[str], owner: Optional[str], *, ttl_secs: Optional[int], wait_ms: Optional[int]
) -> Dict[str, Any]:
    """AcquireNextNode params; no owner means default_owner()."""
    return drop_none(task_id=task_id, lease_owner=owner or default_owner(), ttl_secs=ttl_secs, wait_ms=wait_ms)


def _node_lease(node: Node) -> Dict[str, Any]:
    return {"task_id": node.task_id, "node_id": node.node_id, "lease_id": node.lease_id}


def heartbeat_node_params(node: Node, *, ttl_secs: Optional[int]) -> Dict[str, Any]:
    return {**_node_lease(node), **drop_none(ttl_secs=ttl_secs)}


def complete_node_params(node: Node, result: Any) -> Dict[str, Any]:
    return {**_node_lease(node), "result": result}


def fail_node_params(node: Node, error: Any, *, retry: bool) -> Dict[str, Any]:
    return {**_node_lease(node), "error": error, "retry": retry}


def commit_event_params(node: Node, action_type: str, payload: Any) -> Dict[str, Any]:
    return {**_node_lease(node), "action_type": action_type, "payload": payload}


def list_tasks_params(*, status: Optional[str], limit: Optional[int]) -> Dict[str, Any]:
    return drop_none(status=status, limit=limit)


def read_events_params(since_seq: int, *, limit: Optional[int], filter: Dict[str, Any]) -> Dict[str, Any]:
    return drop_none(since_seq=since_seq, limit=limit, **filter)


def publish_params(topic: str, payload: Any, *, actor: Optional[str]) -> Dict[str, Any]:
    return drop_none(topic=topic, payload=payload, actor=actor)


def subscribe_params(since_seq: Optional[int], filter: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    return drop_none(since_seq=since_seq, filter=filter)


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
    return release_lock_params(lease.resource_key, lease.lease_id, outcome=outcome, moved_to=lease.moved_to, note=note)


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
