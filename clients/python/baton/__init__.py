"""Python client for batond, the coordination daemon for multi-agent systems.

    from baton import Client
    with Client() as c:
        c.update("campaign", "budget", lambda b: (b or 10_000) - 2_000)
        with c.lock("file:src/lib.rs", ttl_secs=30) as lease:
            ...  # edit the file; lease.outcome = "modified"
            c.set("docs", "lib", "...", fence=lease)  # refused (FencedError) once the lease is lost
"""

from ._common import Endpoint
from .aio import AsyncClient, AsyncRegisteredAgent, AsyncSubscription
from .client import Client, HeldLock, Pipeline, RegisteredAgent, Subscription
from .errors import (
    BatonError,
    CompactedError,
    ConflictError,
    ConnectionLostError,
    DaemonUnreachableError,
    Fenced,
    FencedError,
    ForbiddenError,
    IdempotencyConflictError,
    InternalError,
    InvalidError,
    InvalidParamsError,
    LeaseInvalidError,
    LeaseLostError,
    LockBusyError,
    MethodNotFoundError,
    NotFoundError,
    OverloadedError,
    ProtocolError,
    RetriesExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    ValueTooLargeError,
)
from .types import Agent, Event, Fence, Lease, Node, Page, Record, SetResult

__all__ = [
    "Agent",
    "AsyncClient",
    "AsyncRegisteredAgent",
    "AsyncSubscription",
    "BatonError",
    "Client",
    "CompactedError",
    "ConflictError",
    "ConnectionLostError",
    "DaemonUnreachableError",
    "Endpoint",
    "Event",
    "Fence",
    "Fenced",
    "FencedError",
    "ForbiddenError",
    "HeldLock",
    "IdempotencyConflictError",
    "InternalError",
    "InvalidError",
    "InvalidParamsError",
    "Lease",
    "LeaseInvalidError",
    "LeaseLostError",
    "LockBusyError",
    "MethodNotFoundError",
    "Node",
    "NotFoundError",
    "OverloadedError",
    "Page",
    "Pipeline",
    "ProtocolError",
    "Record",
    "RegisteredAgent",
    "RetriesExhaustedError",
    "SetResult",
    "Subscription",
    "UnauthenticatedError",
    "UnavailableError",
    "ValueTooLargeError",
]
__version__ = "0.1.0"
