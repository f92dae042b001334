"""AsyncClient offers what Client offers: the same methods with the same parameters, as
coroutines, and the same answers from a real daemon."""

from __future__ import annotations

import asyncio
import inspect
import typing
from typing import Any, AsyncIterator, Callable, Dict, Iterator, Set

import pytest

import baton
from baton import AsyncClient, AsyncSubscription, Client, HeldLock, Subscription
from baton.aio import AsyncHeldLock, MaybeAwaitable
from batonproc import Daemon

# Client methods AsyncClient deliberately lacks, and why.
SYNC_ONLY = {
    "pipeline": "concurrent calls on an AsyncClient are pipelined on its connection already",
}

# (method, parameter or "return") -> (Client's type, AsyncClient's): the asyncio
# counterparts, where the same type would be wrong.
ASYNC_COUNTERPARTS: Dict[Any, Any] = {
    ("lock", "return"): (HeldLock, AsyncHeldLock),
    ("subscribe", "return"): (Subscription, AsyncSubscription),
    ("register", "return"): (baton.RegisteredAgent, baton.AsyncRegisteredAgent),
    ("inbox", "return"): (Iterator[Dict[str, Any]], AsyncIterator[Dict[str, Any]]),
    ("update", "fn"): (Callable[[Any], Any], Callable[[Any], MaybeAwaitable]),
    ("run_worker", "handler"): (Callable[[baton.Node], Any], Callable[[baton.Node], MaybeAwaitable]),
}

# Not coroutine functions on AsyncClient: `lock()` and `register()` return async context
# managers, `inbox()` is an async generator.
NOT_COROUTINES = {"lock", "register", "inbox"}


def public_methods(cls: type) -> Set[str]:
    return {name for name, value in vars(cls).items() if not name.startswith("_") and callable(value)}


def test_async_client_has_every_client_method_with_the_same_signature() -> None:
    sync_names, async_names = public_methods(Client), public_methods(AsyncClient)
    assert async_names == sync_names - set(SYNC_ONLY), (
        f"only on Client: {sorted(sync_names - async_names - set(SYNC_ONLY))}; "
        f"only on AsyncClient: {sorted(async_names - sync_names)}"
    )
    for name in sorted(async_names):
        sync_fn, async_fn = getattr(Client, name), getattr(AsyncClient, name)
        assert not inspect.iscoroutinefunction(sync_fn), name
        assert inspect.iscoroutinefunction(async_fn) == (name not in NOT_COROUTINES), name

        sync_sig, async_sig = inspect.signature(sync_fn), inspect.signature(async_fn)
        shape = [(p.name, p.kind, p.default) for p in sync_sig.parameters.values()]
        assert [(p.name, p.kind, p.default) for p in async_sig.parameters.values()] == shape, (
            f"{name}: Client{sync_sig} but AsyncClient{async_sig}"
        )

        sync_hints, async_hints = typing.get_type_hints(sync_fn), typing.get_type_hints(async_fn)
        assert set(sync_hints) == set(async_hints), name
        for param, sync_type in sync_hints.items():
            key = (name, param)
            expected = ASYNC_COUNTERPARTS[key] if key in ASYNC_COUNTERPARTS else (sync_type, sync_type)
            assert (sync_type, async_hints[param]) == expected, f"{name}({param}): {sync_type} vs {async_hints[param]}"


def test_history_pages_back_with_before_version(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.socket) as c:
            for i in range(3):
                await c.set("h", "k", i)
            assert [h["version"] for h in await c.history("h", "k", limit=1)] == [3]
            older = await c.history("h", "k", before_version=3)
            assert [(h["version"], h["value"]) for h in older] == [(2, 1), (1, 0)]
            with Client(daemon.socket) as sync:
                assert older == sync.history("h", "k", before_version=3)

    asyncio.run(main())


def test_wait_lock_answers_available_or_timeout(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.socket) as c, AsyncClient(daemon.socket) as waiter:
            free = await waiter.wait_lock("file:free.txt", 30_000)
            assert (free["status"], free["resource_key"], free["waited_ms"]) == ("available", "file:free.txt", 0)

            held = await c.acquire_lock("file:w.txt", "holder", ttl_secs=60)
            # timeout_ms 0: the daemon answers at once with the holder, no wait involved.
            busy = await waiter.wait_lock("file:w.txt", 0)
            assert (busy["status"], busy["held_by"]["owner"]) == ("timeout", "holder")

            # Whether the wait reaches the daemon before the release or after it, it
            # answers available with the release's outcome.
            waiting = asyncio.ensure_future(waiter.wait_lock("file:w.txt", 60_000))
            await c.release_lock("file:w.txt", held["lease_id"], outcome="modified")
            freed = await asyncio.wait_for(waiting, 60)
            assert freed["status"] == "available"
            assert (freed["previous"]["outcome"], freed["previous"]["owner"]) == ("modified", "holder")

            with pytest.raises(baton.InvalidError):
                await c.wait_lock("file:w.txt", 10**12)

    asyncio.run(main())


def test_commit_event_journals_what_a_node_did(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.socket) as c:
            task = await c.register_task("write", [{"id": "draft"}])
            node = await c.acquire_node(task["task_id"], "writer", ttl_secs=60)
            assert node is not None
            committed = await c.commit_event(node, "custom.file.written", {"path": "draft.md"})
            events, _ = await c.read_events(0, task_id=task["task_id"], types=["custom.file.written"])
            assert len(events) == 1
            event = events[0]
            assert event.seq == committed["event_seq"]
            assert (event.type, event.data, event.node_id, event.actor) == (
                "custom.file.written",
                {"path": "draft.md"},
                "draft",
                "writer",
            )
            with pytest.raises(baton.InvalidError):
                await c.commit_event(node, "task.done", {})  # the daemon's type, not custom.*
            await c.complete_node(node, {"ok": True})
            # The lease ended with the node: it commits nothing more.
            with pytest.raises(baton.LeaseInvalidError):
                await c.commit_event(node, "custom.file.written", {"path": "late.md"})

    asyncio.run(main())


def test_list_tasks_filters_by_status_newest_first(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.socket) as c:
            done = await c.register_task("first", [{"id": "only"}])
            node = await c.acquire_node(done["task_id"], "w", ttl_secs=60)
            assert node is not None
            await c.complete_node(node)
            running = await c.register_task("second", [{"id": "only"}])

            every = await c.list_tasks()
            assert [t["task_id"] for t in every] == [running["task_id"], done["task_id"]]
            completed = await c.list_tasks(status="completed")
            assert [(t["task_id"], t["goal"]) for t in completed] == [(done["task_id"], "first")]
            assert [t["task_id"] for t in await c.list_tasks(limit=1)] == [running["task_id"]]
            with Client(daemon.socket) as sync:
                assert every == sync.list_tasks()
            with pytest.raises(baton.InvalidError):
                await c.list_tasks(status="sleeping")

    asyncio.run(main())


def test_describe_lists_the_protocol_methods_and_errors(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.socket) as c:
            described = await c.describe()
        assert described["protocol"] == "baton-jsonl-v1"
        methods = {m["method"] for m in described["methods"]}
        assert {"WaitResourceLock", "CommitEvent", "ListTasks", "DescribeInterface"} <= methods
        assert {"conflict", "lease_invalid"} <= {e["kind"] for e in described["errors"]}
        with Client(daemon.socket) as sync:
            assert described == sync.describe()

    asyncio.run(main())
