"""Typed results. Each keeps the daemon's whole answer in `raw`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Union


@dataclass(frozen=True)
class Record:
    """A stored value and its version (Get, List, update)."""

    namespace: str
    key: str
    value: Any
    version: int
    revision: int = 0
    updated_by: Optional[str] = None
    updated_at: Optional[str] = None

    @classmethod
    def from_wire(cls, r: Dict[str, Any], namespace: Optional[str] = None) -> "Record":
        return cls(
            namespace=r.get("namespace", namespace or ""),
            key=r["key"],
            value=r.get("value"),
            version=int(r["version"]),
            revision=int(r.get("revision") or 0),
            updated_by=r.get("updated_by"),
            updated_at=r.get("updated_at"),
        )


@dataclass(frozen=True)
class SetResult:
    namespace: str
    key: str
    version: int
    previous_version: int
    revision: int

    @classmethod
    def from_wire(cls, r: Dict[str, Any]) -> "SetResult":
        return cls(r["namespace"], r["key"], int(r["version"]), int(r.get("previous_version") or 0), int(r["revision"]))


@dataclass(frozen=True)
class Page:
    """One page of List: records in key order, and the cursor for the next page."""

    records: List[Record]
    next_after: Optional[str]

    @property
    def next(self) -> Optional[str]:
        """The cursor for the next page (pass it as `after`); None on the last."""
        return self.next_after


@dataclass(frozen=True)
class Event:
    """A journal event."""

    seq: int
    type: str
    at: str
    data: Any = None
    actor: Optional[str] = None
    namespace: Optional[str] = None
    key: Optional[str] = None
    resource_key: Optional[str] = None
    task_id: Optional[str] = None
    node_id: Optional[str] = None

    @classmethod
    def from_wire(cls, e: Dict[str, Any]) -> "Event":
        return cls(
            seq=int(e["seq"]),
            type=e["type"],
            at=e["at"],
            data=e.get("data"),
            actor=e.get("actor"),
            namespace=e.get("namespace"),
            key=e.get("key"),
            resource_key=e.get("resource_key"),
            task_id=e.get("task_id"),
            node_id=e.get("node_id"),
        )


@dataclass
class Lease:
    """A held resource lock (AcquireResourceLock with status acquired or already_held)."""

    resource_key: str
    lease_id: str
    owner: str
    fencing_token: int
    expires_at: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)
    #: The outcome ReleaseResourceLock records when a `lock()` block ends; set it in the
    #: block (`modified`, `created`, `deleted`, `moved` with `moved_to`).
    outcome: str = "released"
    moved_to: Optional[str] = None
    note: Optional[str] = None
    #: Set when a heartbeat found the lease gone: stop the work it guarded.
    lost: bool = False

    @classmethod
    def from_wire(cls, r: Dict[str, Any]) -> "Lease":
        return cls(
            resource_key=r["resource_key"],
            lease_id=r["lease_id"],
            owner=r["owner"],
            fencing_token=int(r["fencing_token"]),
            expires_at=r["expires_at"],
            raw=r,
        )

    @property
    def fence(self) -> Dict[str, Any]:
        """What a write passes as `fence=` (or the lease itself) to land only while this
        lease is live: `{resource_key, lease_id}`. A write whose lease expired or was
        taken over is refused with FencedError and nothing is written."""
        return {"resource_key": self.resource_key, "lease_id": self.lease_id}

    @property
    def token_fence(self) -> Dict[str, Any]:
        """`{resource_key, fencing_token}`: a fence that holds while no newer lease was
        granted on the key. It carries no lease id, so it can be handed to another process
        (or a store outside Baton, with `check_fence`) without the lease's credential."""
        return {"resource_key": self.resource_key, "fencing_token": self.fencing_token}

    def check(self) -> None:
        """Raises LeaseLostError when a heartbeat found the lease gone."""
        if self.lost:
            from .errors import LeaseLostError

            raise LeaseLostError(
                f"the lease on {self.resource_key} was lost (expired or taken over); stop and re-acquire",
                kind="lease_lost",
            )


#: What `fence=` takes: a Lease (its `fence`), or a dict `{resource_key, lease_id}` or
#: `{resource_key, fencing_token}`.
Fence = Union[Lease, Mapping[str, Any]]


@dataclass
class Node:
    """A task node leased to this worker (AcquireNextNode)."""

    task_id: str
    node_id: str
    lease_id: str
    attempt: int
    name: Optional[str] = None
    payload: Any = None
    goal: str = ""
    task_context: Any = None
    dependency_results: Dict[str, Any] = field(default_factory=dict)
    recent_events: List[Event] = field(default_factory=list)
    lease_expires_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)
    #: Set when a heartbeat found the lease gone (the node was rolled back or taken).
    lost: bool = False

    @classmethod
    def from_wire(cls, r: Dict[str, Any]) -> "Node":
        context = r.get("context") or {}
        return cls(
            task_id=r["task_id"],
            node_id=r["node_id"],
            lease_id=r["lease_id"],
            attempt=int(r.get("attempt") or 1),
            name=r.get("name"),
            payload=r.get("payload"),
            goal=context.get("goal", ""),
            task_context=context.get("task_context"),
            dependency_results=dict(context.get("dependency_results") or {}),
            recent_events=[Event.from_wire(e) for e in context.get("recent_events") or []],
            lease_expires_at=r.get("lease_expires_at", ""),
            raw=r,
        )


@dataclass
class Agent:
    """A live session of an agent (RegisterAgent). `session_id` is its secret: pass the
    Agent (or the id) to send, read_inbox, inbox and ack."""

    name: str
    session_id: str
    expires_at: str
    #: Set when a heartbeat found the session ended (expiry, takeover): stop acting as it.
    lost: bool = False

    def check(self) -> None:
        """Raises LeaseLostError when a heartbeat found the session ended."""
        if self.lost:
            from .errors import LeaseLostError

            raise LeaseLostError(f"the session of agent {self.name} has ended; register again", kind="lease_lost")
