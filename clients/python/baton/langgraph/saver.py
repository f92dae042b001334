"""`BatonSaver`: LangGraph's checkpointer on batond, one writer per thread."""

from __future__ import annotations

import asyncio
import random
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .. import _common, _steps
from ..aio import AsyncClient
from ..client import Client
from ..errors import FencedError
from ..types import Lease
from . import _checkpoints as ops
from ._threads import Held, ThreadLeases

Fence = Optional[Dict[str, Any]]


class ThreadRun(AbstractContextManager["ThreadRun"], AbstractAsyncContextManager["ThreadRun"]):
    """A run's hold on one thread: `with saver.thread(thread_id):` (or `async with`).

    Entering takes the thread's lease (refused with ThreadBusyError while another run
    holds it, or waiting with on_busy="wait"); every checkpoint write of the thread in
    the block is fenced by it; leaving releases it (`abandoned` when the block raised)."""

    def __init__(self, leases: Optional[ThreadLeases], thread_id: str, on_busy: Optional[str]) -> None:
        self._leases = leases
        self.thread_id = thread_id
        self._on_busy = on_busy
        self._held: Optional[Held] = None

    @property
    def lease(self) -> Optional[Lease]:
        """The thread's lease while the block runs (None on a saver built with guard=False)."""
        return self._held.lease if self._held is not None else None

    def __enter__(self) -> "ThreadRun":
        if self._leases is not None:
            self._held = self._leases.enter(self.thread_id, self._on_busy)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        held, self._held = self._held, None
        if held is not None and self._leases is not None:
            self._leases.leave(held, failed=exc_type is not None)

    async def __aenter__(self) -> "ThreadRun":
        if self._leases is not None:
            self._held = await asyncio.to_thread(self._leases.enter, self.thread_id, self._on_busy)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        held, self._held = self._held, None
        if held is not None and self._leases is not None:
            await asyncio.to_thread(self._leases.leave, held, exc_type is not None)


class BatonSaver(BaseCheckpointSaver[str], AbstractContextManager["BatonSaver"]):
    """LangGraph checkpoints, pending writes and channel values kept in batond.

        from baton import Client
        from baton.langgraph import BatonSaver

        saver = BatonSaver(Client())
        graph = builder.compile(checkpointer=saver)
        with saver.thread("thread-1"):          # this run holds the thread
            graph.invoke(inputs, {"configurable": {"thread_id": "thread-1"}})

    One writer per thread: a run holds the lease `langgraph:thread/<thread_id>`. In a
    `saver.thread()` block the lease spans the block; without one, the saver takes it at
    the thread's first write and keeps it until `release_thread()`, `close()` or the
    process's end. A second run on a held thread is refused (ThreadBusyError: who holds
    it, since when) before it writes anything, or waits with `on_busy="wait"`. Every
    checkpoint write carries the lease as its fence, so a run that lost it (stalled past
    `lease_ttl_secs` without heartbeats, or broken by an operator) cannot write over
    the run that took the thread over: its write raises ThreadLostError, nothing written.

    `client`: a `baton.Client` (sync and async methods; async ones run its calls on a
    worker thread) or a `baton.AsyncClient` (async methods only); None connects as
    `Client()` does, to `socket_path` / `url` with `token`. `namespace`: the Baton
    namespace of the records (keys in `baton.langgraph._keys`). `guard=False`: no leases
    and no fences (any number of writers, as LangGraph's own savers allow).
    """

    def __init__(
        self,
        client: Optional[Union[Client, AsyncClient]] = None,
        *,
        namespace: str = "langgraph",
        socket_path: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        serde: Optional[SerializerProtocol] = None,
        guard: bool = True,
        on_busy: str = "raise",
        wait_secs: float = 300.0,
        lease_ttl_secs: int = 30,
        owner: Optional[str] = None,
    ) -> None:
        super().__init__(serde=serde)
        if not namespace:
            raise ValueError("namespace must be a non-empty Baton namespace, e.g. \"langgraph\"")
        self.client: Union[Client, AsyncClient] = (
            client if client is not None else Client(socket_path, url=url, token=token)
        )
        self._owns_client = client is None
        self.namespace = namespace
        self.leases: Optional[ThreadLeases] = (
            ThreadLeases(
                _common.endpoint(self.client.endpoint),
                ttl_secs=lease_ttl_secs,
                on_busy=on_busy,
                wait_secs=wait_secs,
                owner=owner,
            )
            if guard
            else None
        )

    # -- runs and their threads -------------------------------------------------------

    def thread(self, thread_id: str, *, on_busy: Optional[str] = None) -> ThreadRun:
        """`with saver.thread(thread_id):` (or `async with`) holds the thread for a run."""
        return ThreadRun(self.leases, thread_id, on_busy)

    def release_thread(self, thread_id: str) -> None:
        """Gives back the lease this saver took by itself on `thread_id` (also a lost
        one, so the thread can be run again through this saver)."""
        if self.leases is not None:
            self.leases.release(thread_id)

    def close(self) -> None:
        """Releases every thread this saver holds (and closes the client it opened)."""
        if self.leases is not None:
            self.leases.close()
        if self._owns_client and isinstance(self.client, Client):
            self.client.close()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _fence(self, thread_id: str) -> Fence:
        return self.leases.fence(thread_id) if self.leases is not None else None

    async def _afence(self, thread_id: str) -> Fence:
        if self.leases is None:
            return None
        held = self.leases.held_fence(thread_id)
        return held if held is not None else await asyncio.to_thread(self.leases.fence, thread_id)

    def _write(self, thread_id: str, steps: Any) -> Any:
        try:
            return _steps.run(self.client, steps)
        except FencedError as err:
            raise self._lost(thread_id, err) from err

    async def _awrite(self, thread_id: str, steps: Any) -> Any:
        try:
            return await _steps.arun(self.client, steps)
        except FencedError as err:
            raise self._lost(thread_id, err) from err

    def _lost(self, thread_id: str, err: FencedError) -> Exception:
        if self.leases is None:
            return err
        return self.leases.lost(thread_id, err)

    # -- reads ------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        found: Optional[CheckpointTuple] = _steps.run(self.client, ops.get_tuple(self.namespace, self.serde, config))
        return found

    async def aget_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        found: Optional[CheckpointTuple] = await _steps.arun(
            self.client, ops.get_tuple(self.namespace, self.serde, config)
        )
        return found

    def list(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[Dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> Iterator[CheckpointTuple]:
        after: Optional[str] = None
        left = limit
        while left is None or left > 0:
            page: Tuple[List[CheckpointTuple], Optional[str]] = _steps.run(
                self.client,
                ops.list_page(self.namespace, self.serde, config, filter=filter, before=before, limit=left, after=after),
            )
            tuples, after = page
            yield from tuples
            if left is not None:
                left -= len(tuples)
            if not after:
                return

    async def alist(
        self,
        config: Optional[RunnableConfig],
        *,
        filter: Optional[Dict[str, Any]] = None,
        before: Optional[RunnableConfig] = None,
        limit: Optional[int] = None,
    ) -> AsyncIterator[CheckpointTuple]:
        after: Optional[str] = None
        left = limit
        while left is None or left > 0:
            page: Tuple[List[CheckpointTuple], Optional[str]] = await _steps.arun(
                self.client,
                ops.list_page(self.namespace, self.serde, config, filter=filter, before=before, limit=left, after=after),
            )
            tuples, after = page
            for tup in tuples:
                yield tup
            if left is not None:
                left -= len(tuples)
            if not after:
                return

    # -- writes -----------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id = _thread_of(config)
        fence = self._fence(thread_id)
        steps = ops.put(self.namespace, self.serde, config, checkpoint, metadata, new_versions, fence)
        stored: RunnableConfig = self._write(thread_id, steps)
        return stored

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id = _thread_of(config)
        fence = await self._afence(thread_id)
        steps = ops.put(self.namespace, self.serde, config, checkpoint, metadata, new_versions, fence)
        stored: RunnableConfig = await self._awrite(thread_id, steps)
        return stored

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[Tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id = _thread_of(config)
        fence = self._fence(thread_id)
        self._write(thread_id, ops.put_writes(self.namespace, self.serde, config, writes, task_id, task_path, fence))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[Tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id = _thread_of(config)
        fence = await self._afence(thread_id)
        await self._awrite(
            thread_id, ops.put_writes(self.namespace, self.serde, config, writes, task_id, task_path, fence)
        )

    # -- whole threads: each fenced by the thread's lease, taken for the call when this
    # saver holds none (refused while another run holds the thread) --------------------

    def _borrowed(self, thread_id: str) -> "Tuple[Fence, bool]":
        if self.leases is None:
            return None, False
        held = self.leases.held_fence(thread_id)
        if held is not None:
            return held, False
        return self.leases.fence(thread_id), True

    def _on_thread(self, thread_id: str, make: Any) -> None:
        fence, borrowed = self._borrowed(thread_id)
        try:
            self._write(thread_id, make(fence))
        finally:
            if borrowed:
                self.release_thread(thread_id)

    async def _aon_thread(self, thread_id: str, make: Any) -> None:
        fence, borrowed = await asyncio.to_thread(self._borrowed, thread_id)
        try:
            await self._awrite(thread_id, make(fence))
        finally:
            if borrowed:
                await asyncio.to_thread(self.release_thread, thread_id)

    def delete_thread(self, thread_id: str) -> None:
        self._on_thread(thread_id, lambda fence: ops.delete_thread(self.namespace, thread_id, fence))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._aon_thread(thread_id, lambda fence: ops.delete_thread(self.namespace, thread_id, fence))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._on_thread(
            target_thread_id,
            lambda fence: ops.copy_thread(self.namespace, source_thread_id, target_thread_id, fence),
        )

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._aon_thread(
            target_thread_id,
            lambda fence: ops.copy_thread(self.namespace, source_thread_id, target_thread_id, fence),
        )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for thread_id in thread_ids:
            if _strategy(strategy) == "delete":
                self.delete_thread(thread_id)
            else:
                self._on_thread(thread_id, lambda fence: ops.prune(self.namespace, self.serde, thread_id, fence))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for thread_id in thread_ids:
            if _strategy(strategy) == "delete":
                await self.adelete_thread(thread_id)
            else:
                await self._aon_thread(
                    thread_id, lambda fence: ops.prune(self.namespace, self.serde, thread_id, fence)
                )

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if not run_ids:
            return
        found: List[Dict[str, Any]] = _steps.run(self.client, ops.run_checkpoints(self.namespace, set(run_ids)))
        for thread_id, records in _by_thread(found).items():
            self._on_thread(thread_id, lambda fence: ops.delete_checkpoints(self.namespace, records, fence))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        if not run_ids:
            return
        found: List[Dict[str, Any]] = await _steps.arun(self.client, ops.run_checkpoints(self.namespace, set(run_ids)))
        for thread_id, records in _by_thread(found).items():
            await self._aon_thread(thread_id, lambda fence: ops.delete_checkpoints(self.namespace, records, fence))

    def get_next_version(self, current: Optional[str], channel: None) -> str:
        """`<32-digit counter>.<random>`, as LangGraph's own savers make them."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"


def _thread_of(config: RunnableConfig) -> str:
    conf = config.get("configurable") or {}
    if "thread_id" not in conf:
        raise ValueError(
            'a checkpoint config needs configurable.thread_id: pass {"configurable": {"thread_id": ...}}'
        )
    return str(conf["thread_id"])


def _strategy(strategy: str) -> str:
    if strategy not in ("keep_latest", "delete"):
        raise ValueError(f"prune strategy {strategy!r}: give \"keep_latest\" or \"delete\"")
    return strategy


def _by_thread(records: List[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    out: Dict[str, List[Dict[str, Any]]] = {}
    for r in records:
        out.setdefault(r["value"]["thread_id"], []).append(r)
    return out
