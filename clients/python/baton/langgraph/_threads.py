"""One writer per LangGraph thread: the lease a run holds on `langgraph:thread/<id>`.

A saver takes a thread's lease either for a `with saver.thread(thread_id):` block (a
run, exactly), or by itself at the thread's first write through it, which it then keeps
until `release_thread`, `close()` or the process's end. Each lease has a connection of
its own, acquired with `release_on_disconnect`, so a process that dies frees its threads
at once; one background thread heartbeats them all. Every checkpoint write of a held
thread carries the lease as its `fence`: once the lease is lost (it expired while the
process stalled, or was broken) and another run took the thread, the late write is
refused by batond and nothing is written.
"""

from __future__ import annotations

import itertools
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from .. import _common
from ..client import Client
from ..errors import BatonError, LeaseInvalidError, LeaseLostError, LockBusyError, NotFoundError
from ..types import Lease
from . import _keys

#: `on_busy`: refuse a run on a thread another run holds, or wait for it to end.
ON_BUSY = ("raise", "wait")


class ThreadBusyError(LockBusyError):
    """Another run holds this LangGraph thread: this run was refused before it wrote
    anything. `thread_id`, `held_by` (`owner`, `acquired_at`, `expires_at`) and `since`
    say who and since when."""

    def __init__(self, thread_id: str, answer: Dict[str, Any], waited_secs: Optional[float] = None) -> None:
        held_by = answer.get("held_by") or {}
        holder = (held_by[0] if held_by else {}) if isinstance(held_by, list) else held_by
        waited = f" after waiting {waited_secs:g} s" if waited_secs else ""
        wait = "raise wait_secs to wait longer" if waited_secs else 'pass on_busy="wait" to wait for it'
        if "lease_id" not in answer and answer.get("status") == "already_held":
            holder = answer
        super().__init__(
            f"LangGraph thread {thread_id!r} is being run by {holder.get('owner')} since "
            f"{holder.get('acquired_at')} (its lease runs to {holder.get('expires_at')}, renewed while that run "
            f"lives); this run was refused{waited} and wrote nothing. Let that run finish and then resume the "
            f"thread from its checkpoint, or {wait}",
            kind="thread_busy",
            data={**answer, "thread_id": thread_id},
        )
        self.thread_id = thread_id

    @property
    def since(self) -> Optional[str]:
        """When the holder took the thread."""
        return self.held_by.get("acquired_at")


class ThreadLostError(LeaseLostError):
    """This run's lease on its LangGraph thread was lost (it expired while the run
    stalled, or was broken) and the write was refused: nothing was written. Stop the run;
    resume the thread from its latest checkpoint (in a `saver.thread()` block, or after
    `saver.release_thread()`)."""

    def __init__(self, thread_id: str, cause: Optional[BatonError] = None) -> None:
        data = dict(cause.data) if cause is not None else {}
        # A fenced write's refusal and a heartbeat's 410 both name the holder now.
        held = data.get("held_by")
        holder: Dict[str, Any] = (held[0] if held else {}) if isinstance(held, list) else dict(held or {})
        now = (
            f"{holder.get('owner')} holds it now (since {holder.get('acquired_at')})"
            if holder
            else "nobody holds it now"
        )
        super().__init__(
            f"this run lost LangGraph thread {thread_id!r} (its lease expired or was broken) and {now}; "
            "its checkpoint write was refused and nothing was written. Stop this run and resume the thread "
            "from its latest checkpoint: in a `with saver.thread(thread_id):` block, or after "
            "saver.release_thread(thread_id)",
            kind="thread_lost",
            data={**data, "thread_id": thread_id},
        )
        self.thread_id = thread_id

    @property
    def held_by(self) -> Optional[Dict[str, Any]]:
        """Who holds the thread now (None when nobody does)."""
        held = self.data.get("held_by")
        if isinstance(held, list):
            return dict(held[0]) if held else None
        return dict(held) if held else None


def check_on_busy(on_busy: str) -> str:
    if on_busy not in ON_BUSY:
        raise ValueError(f"on_busy={on_busy!r}: give \"raise\" (refuse a run on a busy thread) or \"wait\"")
    return on_busy


@dataclass
class Held:
    """A thread lease this saver holds."""

    thread_id: str
    lease: Lease
    conn: Client
    explicit: bool = False
    lost: Optional[ThreadLostError] = None
    released: bool = field(default=False, repr=False)

    def check(self) -> Dict[str, Any]:
        """The fence for a write, or the loss as an error."""
        if self.lost is not None:
            raise self.lost
        return self.lease.fence


class ThreadLeases:
    """The thread leases of one saver."""

    def __init__(
        self, endpoint: _common.Endpoint, *, ttl_secs: int, on_busy: str, wait_secs: float, owner: Optional[str]
    ) -> None:
        self.endpoint = endpoint
        self.ttl_secs = ttl_secs
        self.on_busy = check_on_busy(on_busy)
        self.wait_secs = wait_secs
        self.owner = owner or f"langgraph@{_common.default_owner()}"
        self._runs = itertools.count(1)
        self._lock = threading.Lock()
        self._taking: Dict[str, threading.Lock] = {}
        self._held: Dict[str, Held] = {}
        self._stop = threading.Event()
        self._beat: Optional[threading.Thread] = None

    # -- taking and giving back -----------------------------------------------------------

    def _take(self, thread_id: str, on_busy: str) -> Held:
        """Acquires the thread's lease on a connection of its own (one network call)."""
        wait_ms = int(self.wait_secs * 1000) if check_on_busy(on_busy) == "wait" else None
        conn = Client(self.endpoint)
        try:
            answer = conn.acquire_lock(
                _keys.thread_lock(thread_id),
                f"{self.owner}/run-{next(self._runs)}",
                ttl_secs=self.ttl_secs,
                wait_ms=wait_ms,
                metadata={"langgraph_thread": thread_id, "pid": os.getpid()},
                release_on_disconnect=True,
            )
        except BaseException:
            conn.close()
            raise
        if answer.get("status") != "acquired" or "lease_id" not in answer:
            conn.close()
            raise ThreadBusyError(thread_id, answer, self.wait_secs if wait_ms else None)
        self._start_beat()
        return Held(thread_id, Lease.from_wire(answer), conn)

    def fence(self, thread_id: str) -> Dict[str, Any]:
        """The fence of a write to `thread_id`: the lease this saver holds, taken now if
        it holds none (may wait, with on_busy="wait"). Raises ThreadBusyError or
        ThreadLostError."""
        held = self._held.get(thread_id)
        if held is None:
            with self._lock:
                taking = self._taking.setdefault(thread_id, threading.Lock())
            with taking:
                held = self._held.get(thread_id)
                if held is None:
                    held = self._take(thread_id, self.on_busy)
                    with self._lock:
                        self._held[thread_id] = held
        return held.check()

    def held_fence(self, thread_id: str) -> Optional[Dict[str, Any]]:
        """The fence when the lease is already held (no network), else None."""
        held = self._held.get(thread_id)
        return held.check() if held is not None else None

    def enter(self, thread_id: str, on_busy: Optional[str]) -> Held:
        """A `thread()` block begins: the run's own lease (a lease this saver took by
        itself for the thread is adopted)."""
        with self._lock:
            held = self._held.get(thread_id)
            if held is not None and not held.explicit and held.lost is None:
                held.explicit = True
                return held
        # A live lease here is another block's: batond refuses (or queues) this one.
        fresh = self._take(thread_id, on_busy or self.on_busy)
        fresh.explicit = True
        with self._lock:
            stale = self._held.get(thread_id)
            self._held[thread_id] = fresh
        if stale is not None and stale.lost is not None:
            self._give_back(stale, "abandoned")
        return fresh

    def leave(self, held: Held, failed: bool) -> None:
        """A `thread()` block ends: its lease is released."""
        with self._lock:
            if self._held.get(held.thread_id) is held:
                del self._held[held.thread_id]
                self._taking.pop(held.thread_id, None)
        self._give_back(held, "abandoned" if failed else "modified")

    def release(self, thread_id: str) -> None:
        """Gives back the lease held on `thread_id` (lost or not), if any."""
        with self._lock:
            held = self._held.pop(thread_id, None)
            self._taking.pop(thread_id, None)
        if held is not None:
            self._give_back(held, "modified")

    def lost(self, thread_id: str, cause: BatonError) -> ThreadLostError:
        """A write was refused as fenced: the lease is lost for good."""
        err = ThreadLostError(thread_id, cause)
        held = self._held.get(thread_id)
        if held is not None and held.lost is None:
            held.lost = err
        return err

    def _give_back(self, held: Held, outcome: str) -> None:
        if held.released:
            return
        held.released = True
        try:
            if held.lost is None:
                held.conn.release_lock(held.lease.resource_key, held.lease.lease_id, outcome=outcome)
        except (LeaseInvalidError, NotFoundError):
            pass
        except BatonError:
            pass  # the connection's close below ends the lease (release_on_disconnect)
        finally:
            held.conn.close()

    def close(self) -> None:
        """Releases every lease and stops the heartbeats."""
        with self._lock:
            held, self._held = list(self._held.values()), {}
            self._taking.clear()
        for h in held:
            self._give_back(h, "modified")
        self._stop.set()
        beat = self._beat
        if beat is not None and beat is not threading.current_thread():
            beat.join()
        with self._lock:
            self._beat = None

    # -- heartbeats ------------------------------------------------------------------------

    def _start_beat(self) -> None:
        with self._lock:
            if self._beat is None:
                self._stop.clear()
                self._beat = threading.Thread(target=self._run_beat, name="baton-langgraph-leases", daemon=True)
                self._beat.start()

    def _run_beat(self) -> None:
        while not self._stop.wait(_common.heartbeat_interval(self.ttl_secs)):
            with self._lock:
                held = [h for h in self._held.values() if h.lost is None]
            for h in held:
                try:
                    h.conn.heartbeat_lock(h.lease.resource_key, h.lease.lease_id, ttl_secs=self.ttl_secs)
                except (LeaseInvalidError, NotFoundError) as err:
                    if h.lost is None:
                        h.lost = ThreadLostError(h.thread_id, err)
                except BatonError:
                    continue  # batond briefly unreachable: the next beat tries again
