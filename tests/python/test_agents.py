"""Agents and inboxes from Python, sync and asyncio: register() joins and leaves,
messages wait in a name's inbox, inbox() yields them as they arrive, ack() moves the
cursor, and an agent's session ends with what it holds."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Dict, List

import pytest

import baton
from baton import AsyncClient, Client


def test_register_send_inbox_ack(daemon: Any) -> None:
    with Client(daemon.socket) as c:
        with c.register("alice", role="planner") as alice, c.register("bob") as bob:
            assert alice.name == "alice" and alice.session_id
            names = sorted(a["name"] for a in c.list_agents())
            assert names == ["alice", "bob"]
            with pytest.raises(baton.ConflictError):
                with c.register("alice"):
                    pass
            # A reader waiting on bob's inbox is handed the message as it arrives.
            got: List[Dict[str, Any]] = []
            ready = threading.Event()

            def read() -> None:
                for message in c.inbox(bob, wait_ms=60_000):
                    got.append(message)
                    ready.set()
                    return

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            sent = c.send(alice, "bob", {"task": "review PR 7"}, subject="review")
            assert ready.wait(30), "the waiting reader got nothing"
            reader.join(30)
            assert got[0]["from"] == "alice"
            assert got[0]["body"] == {"task": "review PR 7"}
            assert c.ack(bob, sent["seq"]) == {"acked": 1, "unread": 0}
            assert c.read_inbox(bob)["messages"] == []
        # Leaving the block ended both sessions.
        assert c.list_agents() == []


def test_a_session_holds_what_it_took(daemon: Any) -> None:
    with Client(daemon.socket) as c:
        with c.register("builder") as me:
            c.call("AcquireResourceLock", {"resource_key": "tool:cargo", "session_id": me.session_id})
            assert c.list_agents()[0]["locks"] == ["tool:cargo"]
        assert c.lock_status("tool:cargo")["status"] == "available"


def test_async_register_send_inbox_ack(daemon: Any) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.socket) as c:
            async with c.register("a") as a, c.register("b") as b:
                sent = await c.send(a, ["b"], "hello", thread_id="t")
                async for message in c.inbox(b, wait_ms=60_000):
                    assert message["body"] == "hello"
                    assert message["thread_id"] == "t"
                    break
                assert (await c.ack(b, sent["seq"]))["unread"] == 0
                assert [x["name"] for x in await c.list_agents()] == ["a", "b"]
            assert await c.list_agents() == []

    asyncio.run(main())
