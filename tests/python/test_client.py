"""The Python client (sync and asyncio) against a real daemon."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, List

import pytest

import baton
from baton import AsyncClient, Client
from batonproc import Daemon, running_daemon


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Polls until `condition` holds; fails the test (instead of hanging) after `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_versioned_state_and_typed_conflicts(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        assert c.get("ns", "k") is None
        first = c.set("ns", "k", {"usd": 10_000}, expected_version=0, updated_by="a")
        assert (first.version, first.previous_version) == (1, 0)
        record = c.get("ns", "k")
        assert record is not None and record.value == {"usd": 10_000} and record.updated_by == "a"
        c.set("ns", "k", None, expected_version=1)
        assert c.get("ns", "k").value is None  # type: ignore[union-attr]
        with pytest.raises(baton.ConflictError) as info:
            c.set("ns", "k", 1, expected_version=1)
        err = info.value
        assert (err.code, err.kind, err.current_version, err.current_value) == (409, "conflict", 2, None)
        assert "Get" in err.message or "version" in err.message
        with pytest.raises(baton.ConflictError):
            c.set("ns", "k", 1, expected_version=0)
        page = c.list("ns")
        assert [r.key for r in page.records] == ["k"]
        assert [h["version"] for h in c.history("ns", "k")] == [2, 1]
        with pytest.raises(baton.ConflictError) as info:
            c.txn([{"namespace": "ns", "key": "k", "version": 1}], [{"op": "set", "namespace": "ns", "key": "x", "value": 1}])
        assert info.value.failed and info.value.failed[0]["key"] == "k"


def test_errors_are_typed_and_say_what_to_do(daemon: Daemon, tmp_path: Any, monkeypatch: Any) -> None:
    with Client(daemon.socket) as c:
        with pytest.raises(baton.NotFoundError):
            c.task_status("no-such-task")
        with pytest.raises(baton.InvalidError):
            c.register_task("g", [{"id": "a", "dependencies": ["a"]}])
        with pytest.raises(baton.InvalidParamsError) as info:
            c.call("Set", {"namespace": "n"})
        assert "key" in info.value.message
        with pytest.raises(baton.MethodNotFoundError):
            c.call("NoSuchMethod")
        assert c.health()["status"] == "ok"  # the connection is still usable
    with pytest.raises(baton.DaemonUnreachableError) as unreachable:
        Client(tmp_path / "none.sock").health()
    assert "batond" in str(unreachable.value) and isinstance(unreachable.value, ConnectionError)
    monkeypatch.setenv("BATON_SOCKET_PATH", str(daemon.socket))
    assert Client().health()["status"] == "ok"


def test_update_never_loses_a_concurrent_change(daemon: Daemon) -> None:
    """Two agents add to one counter at once; every addition survives."""
    barrier = threading.Barrier(2)
    failures: List[BaseException] = []

    def agent(name: str) -> None:
        try:
            with Client(daemon.socket) as c:
                barrier.wait()
                for _ in range(50):
                    # Generous retries: this test is about lost updates, not starvation.
                    c.update("n", "counter", lambda v: (v or 0) + 1, updated_by=name, retries=1000)
        except BaseException as err:  # surfaced below, not lost in the thread
            failures.append(err)

    threads = [threading.Thread(target=agent, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    with Client(daemon.socket) as c:
        record = c.get("n", "counter")
        assert record is not None and record.value == 100 and record.version == 100


def test_pipeline_sends_many_and_keeps_order(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        p = c.pipeline()
        for i in range(200):
            p.set("p", f"k{i:03}", i)
        p.call("Set", {"namespace": "p", "key": "k000", "value": 0, "expected_version": 9})
        p.call("Get", {"namespace": "p", "key": "k199"})
        results = p.execute(raise_on_error=False)
        assert [r["version"] for r in results[:200]] == [1] * 200
        assert isinstance(results[200], baton.ConflictError)
        assert results[201]["value"] == 199
        with pytest.raises(baton.ConflictError):
            c.pipeline().set("p", "k000", 1, expected_version=7).execute()


def test_a_pipeline_of_any_length_returns(daemon: Daemon) -> None:
    # 100,000 answers are more than batond lets a client leave unread: the client reads
    # while it sends, so neither side waits on the other.
    with Client(daemon.socket) as c:
        p = c.pipeline()
        for i in range(100_000):
            p.set("many", f"k{i % 100}", i)
        results = p.execute()
        assert len(results) == 100_000
        assert results[-1]["version"] == 1000
        assert c.get("many", "k99").value == 99_999


def test_lists_follow_next_to_the_end() -> None:
    # Each list is longer than one page (1000): the client follows `next` for the user.
    # Every version is kept (retention would keep the last 100), so History pages too.
    with running_daemon("baton-py-", ["--history-keep", "all"]) as daemon, Client(daemon.socket) as c:
        p = c.pipeline()
        for i in range(1500):
            p.set("wide", f"k{i:04}", i)
        for i in range(1200):
            p.set("deep", "k", i)
        for i in range(1100):
            p.call("AcquireResourceLock", {"resource_key": f"job:{i:04}", "owner": "w", "ttl_secs": 60})
        p.execute()
        exported = c.export("wide")
        assert [r.key for r in exported] == [f"k{i:04}" for i in range(1500)]
        assert len(c.export()) == 1501
        versions = [h["version"] for h in c.history("deep", "k")]
        assert versions == list(range(1200, 0, -1))
        assert [h["version"] for h in c.history("deep", "k", limit=1100)][-1] == 101
        assert len(c.list_locks(prefix="job:")) == 1100
        task = c.register_task("wide", [{"id": f"n{i:04}"} for i in range(2100)])["task_id"]
        status = c.task_status(task)
        assert len(status["nodes"]) == 2100 and status["next"] is None
        assert status["counts"]["PENDING"] == 2100
        page = c.list("wide", limit=1000)
        assert page.next == page.next_after == "k0999"
        assert len(c.list("wide", limit=1000, after=page.next).records) == 500


async def _async_lists(socket: str) -> None:
    async with AsyncClient(socket) as c:
        assert len(await c.export("wide")) == 1500
        assert len(await c.list_locks(prefix="job:")) == 1100


def test_async_lists_follow_next_too(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        p = c.pipeline()
        for i in range(1500):
            p.set("wide", f"k{i:04}", i)
        for i in range(1100):
            p.call("AcquireResourceLock", {"resource_key": f"job:{i:04}", "owner": "w", "ttl_secs": 60})
        p.execute()
    asyncio.run(_async_lists(daemon.socket))


def test_lock_heartbeats_releases_with_outcome_and_refuses_when_busy(daemon: Daemon) -> None:
    with Client(daemon.socket) as c, Client(daemon.socket) as other:
        with c.lock("file:./src//lib.rs", owner="editor", ttl_secs=2) as lease:
            assert lease.resource_key == "file:src/lib.rs"
            with pytest.raises(baton.LockBusyError) as busy:
                with other.lock("dir:src", owner="refactorer"):
                    pass
            assert busy.value.held_by["owner"] == "editor"
            # Saying the holder's name from another connection does not hand out its lease.
            with pytest.raises(baton.LockBusyError) as named:
                with other.lock("file:src/lib.rs", owner="editor"):
                    pass
            assert "this owner name" in str(named.value)
            first_expiry = lease.expires_at
            # The background heartbeat keeps the 2 s lease alive past its first expiry.
            wait_for(
                lambda: other.list_locks(prefix="file:src")[0]["expires_at"] > first_expiry,
                "a heartbeat to extend the lease",
            )
            wait_for(lambda: other.call("Health") and _past(other, first_expiry), "the first expiry to pass")
            assert other.lock_status("file:src/lib.rs")["status"] == "held"
            lease.outcome = "modified"
        status = other.lock_status("file:src/lib.rs")
        assert status["status"] == "available"
        assert status["previous"]["outcome"] == "modified"
        # A block that raises records `abandoned`.
        with pytest.raises(RuntimeError):
            with c.lock("file:a.txt", owner="editor"):
                raise RuntimeError("crashed mid-edit")
        assert other.lock_status("file:a.txt")["previous"]["outcome"] == "abandoned"
        # A waiting acquire gets the lock once it is free.
        holder = c.acquire_lock("tool:fmt", "first", ttl_secs=30)
        threading.Timer(0.2, lambda: Client(daemon.socket).release_lock("tool:fmt", holder["lease_id"])).start()
        with other.lock("tool:fmt", owner="second", wait_ms=30_000) as lease:
            assert lease.owner == "second"


def _past(c: Client, expires_at: str) -> bool:
    """Whether the daemon's clock (the latest event time) is past `expires_at`."""
    c.publish("clock", {})
    events, _ = c.read_events(0, types=["custom.clock"], limit=1000)
    return events[-1].at > expires_at


def test_a_lost_lock_lease_stops_cleanly(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        with pytest.raises(baton.LeaseLostError):
            with c.lock("file:x", owner="w", ttl_secs=1) as lease:
                # Someone ends the lease behind this holder's back.
                Client(daemon.socket).release_lock("file:x", lease.lease_id, outcome="abandoned")
                wait_for(lambda: lease.lost, "the heartbeat to notice the lost lease")
                with pytest.raises(baton.LeaseLostError):
                    lease.check()


def test_worker_loop_runs_a_diamond_with_retries_and_dependency_results(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        task = c.register_task(
            "ship it",
            [
                {"id": "plan", "payload": {"n": 1}},
                {"id": "left", "dependencies": ["plan"], "max_attempts": 2},
                {"id": "right", "dependencies": ["plan"]},
                {"id": "join", "dependencies": ["left", "right"]},
            ],
            context={"repo": "baton"},
        )
    task_id = task["task_id"]
    failed_once = threading.Event()
    seen: List[Any] = []

    def handler(node: baton.Node) -> Any:
        assert node.goal == "ship it" and node.task_context == {"repo": "baton"}
        if node.node_id == "left" and not failed_once.is_set():
            failed_once.set()
            raise ValueError("flaky tool")
        if node.node_id == "join":
            seen.append(node.dependency_results)
        return {"done": node.node_id, "attempt": node.attempt}

    counts: List[int] = []

    def worker(name: str) -> None:
        with Client(daemon.socket) as w:
            counts.append(w.run_worker(handler, task_id=task_id, owner=name, ttl_secs=30, wait_ms=30_000))

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 5  # four nodes, one of them twice
    assert seen == [{"left": {"done": "left", "attempt": 2}, "right": {"done": "right", "attempt": 1}}]
    with Client(daemon.socket) as c:
        status = c.task_status(task_id)
        assert status["task"]["status"] == "completed"


def test_subscribe_iterates_stored_then_live_events(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        for i in range(3):
            c.set("s", f"k{i}", i)
        with c.subscribe({"namespace": "s"}, since_seq=0) as sub:
            got = [sub.next(timeout=30) for _ in range(3)]
            assert [e.key for e in got if e] == ["k0", "k1", "k2"]
            assert sub.next(timeout=0.05) is None
            c.set("other", "x", 1)
            c.set("s", "live", True)
            live = sub.next(timeout=30)
            assert live is not None and live.key == "live" and live.type == "kv.set"
            assert sub.last_seq == live.seq


def test_async_client_pipelines_concurrent_calls_and_has_the_same_helpers(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.socket) as c:
            results = await asyncio.gather(*(c.set("a", f"k{i}", i) for i in range(100)))
            assert all(r.version == 1 for r in results)
            got = await asyncio.gather(*(c.get("a", f"k{i}") for i in range(100)))
            assert [g.value for g in got if g] == list(range(100))
            with pytest.raises(baton.ConflictError) as info:
                await c.set("a", "k1", 0, expected_version=0)
            assert info.value.current_value == 1

            async def add(name: str) -> None:
                async with AsyncClient(daemon.socket) as own:
                    for _ in range(20):
                        await own.update("a", "counter", lambda v: (v or 0) + 1, updated_by=name, retries=1000)

            await asyncio.gather(add("x"), add("y"))
            counter = await c.get("a", "counter")
            assert counter is not None and counter.value == 40

            async with c.lock("file:async.txt", owner="aw", ttl_secs=5) as lease:
                lease.outcome = "created"
            assert (await c.lock_status("file:async.txt"))["previous"]["outcome"] == "created"

            task = await c.register_task("g", [{"id": "a"}, {"id": "b", "dependencies": ["a"]}])

            async def handler(node: baton.Node) -> Any:
                await asyncio.sleep(0)
                return {"from": node.node_id, "deps": sorted(node.dependency_results)}

            async with AsyncClient(daemon.socket) as worker:
                assert await worker.run_worker(handler, task_id=task["task_id"], wait_ms=30_000) == 2
            status = await c.task_status(task["task_id"])
            assert status["task"]["status"] == "completed"

            sub = await c.subscribe({"types": ["custom.*"]})
            async with sub:
                await c.publish("review.done", {"ok": True})
                event = await asyncio.wait_for(sub.__anext__(), 30)
                assert event.type == "custom.review.done" and event.data == {"ok": True}

    asyncio.run(main())


def test_a_client_reconnects_after_the_daemon_restarts(tmp_path: Any) -> None:
    home = tmp_path / "home"
    home.mkdir()
    first = Daemon(home)
    c = Client(first.socket)
    try:
        c.set("n", "k", 1)
        first.stop()
        # Nothing listens: the error says so, and the client stays usable.
        with pytest.raises(baton.DaemonUnreachableError):
            c.get("n", "k")
        second = Daemon(home)
        try:
            record = c.get("n", "k")
            assert record is not None and record.value == 1

            async def across_a_restart() -> None:
                nonlocal second
                async with AsyncClient(second.socket) as ac:
                    assert (await ac.get("n", "k")) is not None
                    second.stop()
                    with pytest.raises((baton.ConnectionLostError, baton.DaemonUnreachableError)):
                        await ac.get("n", "k")
                    second = Daemon(home)
                    got = await ac.get("n", "k")
                    assert got is not None and got.value == 1

            asyncio.run(across_a_restart())
        finally:
            second.stop()
    finally:
        c.close()


def test_one_client_shared_by_threads_keeps_every_answer_with_its_call(daemon: Daemon) -> None:
    with Client(daemon.socket) as shared:
        failures: List[BaseException] = []

        def agent(n: int) -> None:
            try:
                for i in range(100):
                    r = shared.set("threads", f"t{n}-{i}", {"n": n, "i": i})
                    assert (r.key, r.version) == (f"t{n}-{i}", 1)
                    got = shared.get("threads", f"t{n}-{i}")
                    assert got is not None and got.value == {"n": n, "i": i}
            except BaseException as err:
                failures.append(err)

        threads = [threading.Thread(target=agent, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures
        assert shared.metrics()["records"]["live"] == 800


def test_shared_locks_and_slots(daemon: Daemon) -> None:
    with Client(daemon.socket) as c, Client(daemon.socket) as other:
        with c.lock("artifact:schema", owner="reader-a", mode="shared"):
            with other.lock("artifact:schema", owner="reader-b", mode="shared") as b:
                assert b.raw["mode"] == "shared"
                with pytest.raises(baton.LockBusyError) as busy:
                    with other.lock("artifact:schema", owner="writer"):
                        pass
                assert [h["owner"] for h in busy.value.holders] == ["reader-a", "reader-b"]
                assert busy.value.held_by["owner"] == "reader-a"
        with c.lock("tool:build", owner="ci-1", slots=2), other.lock("tool:build", owner="ci-2", slots=2):
            with pytest.raises(baton.LockBusyError):
                with other.lock("tool:build", owner="ci-3", slots=2):
                    pass
            with pytest.raises(baton.InvalidError):
                with other.lock("tool:build", owner="ci-3", slots=5):
                    pass


def test_history_before_what_retention_kept_is_compacted_error() -> None:
    from batonproc import running_daemon

    with running_daemon("baton-py-", ["--history-keep", "2"]) as d, Client(d.socket) as c:
        for i in range(1200):
            c.set("ns", "k", i)
        # Retention trims in passes, each begun about 1,000 versions after the last.
        for i in range(3000):
            c.set("ns", f"churn-{i % 10}", i)

        def trimmed() -> bool:
            try:
                c.history("ns", "k", before_version=1199)
            except baton.CompactedError:
                return True
            return False

        wait_for(trimmed, "retention to trim the history of ns/k")
        with pytest.raises(baton.CompactedError) as info:
            c.history("ns", "k", before_version=1199)
        assert (info.value.code, info.value.oldest_version) == (416, 1199)
        assert [v["version"] for v in c.history("ns", "k")] == [1200, 1199]


def test_a_request_line_over_the_limit_raises_its_error_and_the_connection_goes_on(daemon: Daemon) -> None:
    # batond cannot read the id of a line it refused unread: it answers with no id, in
    # that request's place.
    with Client(daemon.socket) as c:
        with pytest.raises(baton.ProtocolError, match="BATON_MAX_LINE_BYTES") as err:
            c.set("big", "k", "x" * 2_000_000)
        assert err.value.kind == "request_too_large"
        assert c.get("big", "k") is None and c.set("big", "k", 1).version == 1

    async def main() -> None:
        async with baton.AsyncClient(daemon.socket) as a:
            with pytest.raises(baton.ProtocolError, match="BATON_MAX_LINE_BYTES"):
                await a.set("big", "k", "x" * 2_000_000)
            assert (await a.get("big", "k")) is not None

    asyncio.run(main())
