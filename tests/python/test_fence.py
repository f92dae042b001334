"""Fenced writes through the Python client, against a real daemon: a write that carries
the lease it was made under lands only while that claim holds.

The stalled agent's story: it claimed a file, stalled past its lease, another agent took
the file over, and its late writes arrive. The daemon these tests start runs on the real
clock, so the first lease is made stale the way an expiry would leave it, without
waiting for one: it is ended (released) and the file is acquired again by the second
agent, which gets a newer fencing token.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List

import pytest

import baton
from baton import AsyncClient, Client, FencedError, Lease
from batonproc import Daemon

REPORT = "file:report.md"


def head(c: Client) -> int:
    """The journal's last seq: what a refused write must leave as it was."""
    return c.read_events(0, limit=1000)[1] - 1


def take_over(second: Client, stale: Lease, owner: str = "second") -> Lease:
    """The stale lease ends (as its expiry would end it) and `owner` acquires the key."""
    second.release_lock(stale.resource_key, stale.lease_id, outcome="abandoned")
    fresh = Lease.from_wire(second.acquire_lock(stale.resource_key, owner))
    assert fresh.fencing_token > stale.fencing_token
    return fresh


def assert_fenced(err: FencedError, fresh: Lease) -> None:
    assert (err.code, err.kind) == (409, "fenced")
    assert isinstance(err, baton.ConflictError) and baton.Fenced is FencedError
    assert err.resource_key == fresh.resource_key
    assert err.latest_fencing_token == fresh.fencing_token
    assert err.held_by is not None and err.held_by["owner"] == fresh.owner
    assert [h["owner"] for h in err.holders] == [fresh.owner]
    assert "nothing was written" in err.message


def test_a_stalled_writers_late_writes_are_refused_and_leave_nothing(daemon: Daemon) -> None:
    with Client(daemon.socket) as first, Client(daemon.socket) as second:
        task = first.register_task("report", [{"id": "write"}])
        node = first.acquire_node(task["task_id"], "first")
        assert node is not None
        with pytest.raises(baton.LeaseLostError):  # the lock() block ends on a lost lease
            with first.lock(REPORT, owner="first") as lease:
                assert lease.fence == {"resource_key": REPORT, "lease_id": lease.lease_id}
                assert lease.token_fence == {"resource_key": REPORT, "fencing_token": lease.fencing_token}
                # While the claim holds, fenced writes land (by the lease or by its token).
                first.set("docs", "report", "draft 1", fence=lease)
                first.txn(
                    [lease.fence, lease.token_fence],
                    [{"op": "set", "namespace": "docs", "key": "outline", "value": 1}],
                    fence=lease,
                )
                # First stalls past its lease; second takes the file over.
                fresh = take_over(second, lease)
                before = head(second)
                for fence in (lease, lease.token_fence):
                    late: List[Any] = [
                        lambda: first.set("docs", "report", "late", fence=fence),
                        lambda: first.delete("docs", "report", fence=fence),
                        lambda: first.publish("report", {"done": True}, fence=fence),
                        lambda: first.complete_node(node, "late", fence=fence),
                        lambda: first.txn(
                            [],
                            [
                                {"op": "set", "namespace": "docs", "key": "other", "value": 1},
                                {"op": "set", "namespace": "docs", "key": "report", "value": "late", "fence": fence},
                            ],
                        ),
                        lambda: first.txn([], [{"op": "delete", "namespace": "docs", "key": "report"}], fence=fence),
                        lambda: first.pipeline().set("docs", "report", "late", fence=fence).execute(),
                    ]
                    for write in late:
                        with pytest.raises(FencedError) as refused:
                            write()
                        assert_fenced(refused.value, fresh)
                # Nothing was written or journalled, and the node is still running.
                assert head(second) == before
                record = second.get("docs", "report")
                assert record is not None and record.value == "draft 1"
                assert second.get("docs", "other") is None
                assert second.task_status(task["task_id"])["nodes"][0]["state"] == "RUNNING"
                # A Txn compare on the lost lease fails as a compare: a ConflictError
                # listing it, not a FencedError.
                with pytest.raises(baton.ConflictError) as failed:
                    first.txn([lease.fence], [{"op": "set", "namespace": "docs", "key": "report", "value": "late"}])
                assert not isinstance(failed.value, FencedError)
                assert failed.value.failed[0]["held"] is True
                # The new holder's fenced writes land, by lease and by token.
                second.set("docs", "report", "final", fence=fresh)
                second.txn([], [{"op": "set", "namespace": "docs", "key": "report", "value": "final 2"}], fence=fresh.token_fence)
                second.publish("report", {"done": True}, fence=fresh)
        record = second.get("docs", "report")
        assert record is not None and record.value == "final 2"


def test_check_fence_says_whether_a_token_is_still_the_latest(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        assert c.check_fence("file:out.bin", 0) == {
            "resource_key": "file:out.bin",
            "latest": True,
            "latest_fencing_token": 0,
            "held": False,
        }
        old = Lease.from_wire(c.acquire_lock("file:out.bin", "a"))
        mine = c.check_fence("file:out.bin", old.fencing_token)
        assert (mine["latest"], mine["held"]) == (True, True)
        new = take_over(c, old, owner="b")
        stale = c.check_fence("file:./out.bin", old.fencing_token)
        assert stale == {
            "resource_key": "file:out.bin",
            "latest": False,
            "latest_fencing_token": new.fencing_token,
            "held": True,
        }
        assert c.check_fence("file:out.bin", new.fencing_token)["latest"] is True


def test_update_fences_every_attempt_and_never_retries_a_fenced_one(daemon: Daemon) -> None:
    with Client(daemon.socket) as first, Client(daemon.socket) as second:
        calls: List[Any] = []

        def add(usd: Any) -> int:
            calls.append(usd)
            return int(usd or 0) + 1

        lease = Lease.from_wire(first.acquire_lock("tool:budget", "first"))
        assert first.update("n", "budget", add, fence=lease).value == 1
        take_over(second, lease)
        calls.clear()
        with pytest.raises(FencedError):
            first.update("n", "budget", add, fence=lease)
        assert calls == [1]  # one attempt: a lost claim is not a conflict to retry
        record = second.get("n", "budget")
        assert record is not None and (record.value, record.version) == (1, 1)
        # Without a fence, update is what it was.
        assert first.update("n", "budget", add).value == 2


def test_run_worker_completes_under_its_lease_and_stops_once_it_is_lost(daemon: Daemon) -> None:
    with Client(daemon.socket) as c, Client(daemon.socket) as other:
        task = c.register_task("build", [{"id": "a"}, {"id": "b", "dependencies": ["a"]}])
        task_id = task["task_id"]
        lease = Lease.from_wire(c.acquire_lock("dir:out", "worker"))
        stale: Dict[str, Lease] = {}

        def handle(node: baton.Node) -> str:
            if node.node_id == "b":  # the worker stalls here and loses its claim
                stale["fresh"] = take_over(other, lease, owner="other")
            return f"built {node.node_id}"

        with pytest.raises(FencedError) as refused:
            c.run_worker(handle, task_id=task_id, owner="worker", fence=lease)
        assert_fenced(refused.value, stale["fresh"])
        nodes = {n["node_id"]: n for n in c.task_status(task_id)["nodes"]}
        assert nodes["a"]["state"] == "COMPLETED" and nodes["a"]["result"] == "built a"
        # The refused node is not failed: it costs no attempt and goes back to the queue
        # when its lease lapses.
        assert nodes["b"]["state"] == "RUNNING" and nodes["b"]["result"] is None
        # A Lease a heartbeat found gone stops the worker before it takes a node.
        lease.lost = True
        with pytest.raises(baton.LeaseLostError):
            c.run_worker(handle, task_id=task_id, fence=lease)


def test_the_async_client_fences_the_same_writes(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.socket) as first:
            with Client(daemon.socket) as second:
                task = await first.register_task("report", [{"id": "write"}, {"id": "more"}])
                node = await first.acquire_node(task["task_id"], "first")
                assert node is not None
                with pytest.raises(baton.LeaseLostError):
                    async with first.lock(REPORT, owner="first") as lease:
                        await first.set("docs", "report", "draft 1", fence=lease)
                        assert (await first.check_fence(REPORT, lease.fencing_token))["latest"] is True
                        fresh = take_over(second, lease)
                        before = head(second)
                        for fence in (lease, lease.token_fence):
                            late: List[Any] = [
                                first.set("docs", "report", "late", fence=fence),
                                first.delete("docs", "report", fence=fence),
                                first.publish("report", {"done": True}, fence=fence),
                                first.complete_node(node, "late", fence=fence),
                                first.txn([], [{"op": "set", "namespace": "docs", "key": "report", "value": 1}], fence=fence),
                                first.update("docs", "report", lambda v: "late", fence=fence),
                            ]
                            for write in late:
                                with pytest.raises(FencedError) as refused:
                                    await write
                                assert_fenced(refused.value, fresh)
                        assert head(second) == before
                        stale = await first.check_fence(REPORT, lease.fencing_token)
                        assert (stale["latest"], stale["latest_fencing_token"]) == (False, fresh.fencing_token)
                        with pytest.raises(FencedError):
                            await first.run_worker(lambda n: "late", task_id=task["task_id"], owner="first", fence=lease)
                record = second.get("docs", "report")
                assert record is not None and record.value == "draft 1"
                states = {n["node_id"]: n["state"] for n in second.task_status(task["task_id"])["nodes"]}
                assert states == {"write": "RUNNING", "more": "RUNNING"}

    asyncio.run(main())
