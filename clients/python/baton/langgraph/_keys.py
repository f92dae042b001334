"""Where BatonSaver keeps a thread in batond: one Baton namespace (default `langgraph`),
keys by kind, then thread, then checkpoint namespace.

    c/<thread>/<checkpoint_ns>/<desc(checkpoint_id)>            a checkpoint (no channel values)
    w/<thread>/<checkpoint_ns>/<checkpoint_id>/<task_id>/<idx>  a pending write
    b/<thread>/<checkpoint_ns>/<channel>/<version>              a channel's value at a version

Each part is percent-encoded (`/` and `%` and anything outside printable ASCII), so a
thread id holding `/` cannot reach into another thread's keys; a part over 128 bytes is
replaced by `#` and its SHA-256 (the record keeps the real one). `desc(id)` is the
checkpoint id's bytes complemented, in hex, closed by `~`: batond lists keys in byte
order, so a thread's checkpoints list newest first (LangGraph's order), the latest is the
first key under its prefix, and `before` is the `after` cursor of a List.
"""

from __future__ import annotations

from typing import Optional

from .._steps import part

#: The resource key of a thread's lease: `langgraph:thread/<thread_id>`.
THREAD_LOCK = "langgraph:thread/"

__all__ = ["part"]


def desc(checkpoint_id: str) -> str:
    """A checkpoint id as a key part that sorts newest first."""
    return "".join(f"{255 - b:02x}" for b in checkpoint_id.encode()) + "~"


def checkpoints(thread_id: Optional[str] = None, checkpoint_ns: Optional[str] = None) -> str:
    """The prefix of every checkpoint (of a thread, of one of its namespaces)."""
    if thread_id is None:
        return "c/"
    if checkpoint_ns is None:
        return f"c/{part(thread_id)}/"
    return f"c/{part(thread_id)}/{part(checkpoint_ns)}/"


def checkpoint(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    return checkpoints(thread_id, checkpoint_ns) + desc(checkpoint_id)


def writes(thread_id: str, checkpoint_ns: Optional[str] = None, checkpoint_id: Optional[str] = None) -> str:
    """The prefix of the pending writes of a thread (of a namespace, of a checkpoint)."""
    key = f"w/{part(thread_id)}/"
    if checkpoint_ns is not None:
        key += f"{part(checkpoint_ns)}/"
        if checkpoint_id is not None:
            key += f"{part(checkpoint_id)}/"
    return key


def write(thread_id: str, checkpoint_ns: str, checkpoint_id: str, task_id: str, idx: int) -> str:
    # The index is zero-padded after its sign, for a readable order; the order that
    # counts (writes_sort_key) is restored when they are read.
    return writes(thread_id, checkpoint_ns, checkpoint_id) + f"{part(task_id)}/{idx:+06d}"


def blobs(thread_id: str, checkpoint_ns: Optional[str] = None) -> str:
    key = f"b/{part(thread_id)}/"
    if checkpoint_ns is not None:
        key += f"{part(checkpoint_ns)}/"
    return key


def blob(thread_id: str, checkpoint_ns: str, channel: str, version: object) -> str:
    return blobs(thread_id, checkpoint_ns) + f"{part(channel)}/{part(str(version))}"


def thread_lock(thread_id: str) -> str:
    return THREAD_LOCK + part(thread_id)
