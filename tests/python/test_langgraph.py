"""baton.langgraph against a real batond: LangGraph's own conformance suite, a compiled
graph that resumes in a new process, one writer per thread (a second run refused, or
waiting), and a run that lost its lease refused its stale checkpoint (on the test
clock); BatonStore's operations."""

from __future__ import annotations

import asyncio
import json
import operator
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, AsyncIterator, Dict, Iterator, List, Optional, TypedDict

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.graph import END, START, StateGraph

from baton import AsyncClient, Client, ProtocolError
from baton.langgraph import BatonSaver, BatonStore, ThreadBusyError, ThreadLostError
from batonproc import Daemon, running_daemon

GRAPH = Path(__file__).with_name("langgraph_graph.py")


# -- LangGraph's conformance suite ---------------------------------------------------------


class SyncMethods(BatonSaver):
    """BatonSaver whose async methods are its sync ones, so that the suite (which calls
    the async methods) checks the sync ones too."""

    async def aget_tuple(self, config: Any) -> Any:
        return self.get_tuple(config)

    async def alist(self, config: Any, **kw: Any) -> Any:  # type: ignore[override]
        for tup in self.list(config, **kw):
            yield tup

    async def aput(self, *args: Any) -> Any:
        return self.put(*args)

    async def aput_writes(self, *args: Any, **kw: Any) -> None:
        self.put_writes(*args, **kw)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Any) -> None:
        self.delete_for_runs(run_ids)

    async def acopy_thread(self, source: str, target: str) -> None:
        self.copy_thread(source, target)

    async def aprune(self, thread_ids: Any, *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)


@pytest.mark.parametrize("kind", ["Client", "AsyncClient", "sync methods"])
def test_langgraphs_conformance_suite_passes_every_capability(daemon: Daemon, kind: str) -> None:
    @checkpointer_test(name=f"BatonSaver on {kind}")
    async def baton_saver() -> AsyncIterator[BatonSaver]:
        namespace = f"conformance-{uuid.uuid4().hex[:8]}"
        if kind == "sync methods":
            saver: BatonSaver = SyncMethods(Client(daemon.socket), namespace=namespace)
        else:
            client = Client(daemon.socket) if kind == "Client" else AsyncClient(daemon.socket)
            saver = BatonSaver(client, namespace=namespace)
        yield saver
        saver.close()

    report = asyncio.run(validate(baton_saver))
    failures = {cap: r.failures for cap, r in report.results.items() if r.failures}
    assert not failures, failures
    # Every capability, the optional ones included, was detected and passed.
    assert {cap: (r.detected, r.passed) for cap, r in report.results.items()} == {
        cap: (True, True)
        for cap in ("put", "put_writes", "get_tuple", "list", "delete_thread", "delete_for_runs", "copy_thread", "prune")
    }


# -- a graph across processes ---------------------------------------------------------------


def run_graph(daemon: Daemon, thread: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GRAPH), str(daemon.socket), thread, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_graph_killed_midway_resumes_from_its_checkpoint_in_a_new_process(daemon: Daemon) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(GRAPH), str(daemon.socket), "t-killed", "start", "--hang-at", "review"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "in review\n"
    proc.kill()  # SIGKILL in the middle of the run, holding the thread
    proc.wait(30)
    # Its lease ends with its connection (release_on_disconnect), not a TTL later.
    until(lambda: not daemon.call("ListResourceLocks", {"prefix": "langgraph:thread/t-killed"})["locks"], "the lease to end")
    with BatonSaver(Client(daemon.socket)) as saver:
        latest = saver.get_tuple({"configurable": {"thread_id": "t-killed"}})
        assert latest is not None and latest.checkpoint["channel_values"]["log"] == ["draft"]
    # The new run is not refused, and continues after the last checkpoint (draft is not
    # run again).
    resumed = run_graph(daemon, "t-killed", "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == ["draft", "review", "publish"]


def test_a_graph_stopped_after_a_step_resumes_in_a_new_process(daemon: Daemon) -> None:
    stopped = run_graph(daemon, "t-stopped", "start", "--interrupt-before", "publish")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout) == ["draft", "review"]
    resumed = run_graph(daemon, "t-stopped", "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == ["draft", "review", "publish"]


# -- one writer per thread ------------------------------------------------------------------


class State(TypedDict):
    log: Annotated[List[str], operator.add]


class Held:
    """A graph whose `work` node waits until let go, to keep a run in the middle."""

    def __init__(self, saver: BatonSaver, name: str) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self.error: Optional[BaseException] = None
        self.result: Optional[Dict[str, Any]] = None

        def work(state: State) -> Dict[str, Any]:
            self.started.set()
            assert self.go.wait(60)
            return {"log": [f"{name}:work"]}

        g = StateGraph(State)
        g.add_node("begin", lambda s: {"log": [f"{name}:begin"]})
        g.add_node("work", work)
        g.add_node("end", lambda s: {"log": [f"{name}:end"]})
        g.add_edge(START, "begin")
        g.add_edge("begin", "work")
        g.add_edge("work", "end")
        g.add_edge("end", END)
        self.graph = g.compile(checkpointer=saver)

    def invoke(self, thread: str) -> Dict[str, Any]:
        return dict(self.graph.invoke({"log": []}, {"configurable": {"thread_id": thread}}))

    def start(self, thread: str, block: Any = None) -> threading.Thread:
        def run() -> None:
            try:
                if block is None:
                    self.result = self.invoke(thread)
                else:
                    with block:
                        self.result = self.invoke(thread)
            except BaseException as err:  # noqa: BLE001 - handed to the test
                self.error = err
                self.started.set()

        t = threading.Thread(target=run)
        t.start()
        assert self.started.wait(60)
        return t


def until(done: Any, what: str) -> None:
    """Polls a condition batond will reach (a write in flight, a waiter queued)."""
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def wrote(saver: BatonSaver, thread: str, log: List[str]) -> None:
    """Waits until the thread's latest checkpoint holds `log` (LangGraph writes a step's
    checkpoint in the background while the next step runs)."""

    def latest() -> bool:
        tup = saver.get_tuple({"configurable": {"thread_id": thread}})
        return tup is not None and tup.checkpoint["channel_values"].get("log") == log

    until(latest, f"{thread} to hold {log}")


def checkpoint_ids(saver: BatonSaver, thread: str) -> List[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": thread}})]


@pytest.fixture
def savers(daemon: Daemon) -> Iterator[List[BatonSaver]]:
    made = [BatonSaver(Client(daemon.socket), owner=name) for name in ("run-a", "run-b")]
    yield made
    for s in made:
        s.close()


def test_a_second_concurrent_run_on_a_thread_is_refused_before_it_writes(savers: List[BatonSaver]) -> None:
    first, second = savers
    a, b = Held(first, "a"), Held(second, "b")
    run_a = a.start("t-busy", first.thread("t-busy"))
    wrote(second, "t-busy", ["a:begin"])
    before = checkpoint_ids(second, "t-busy")
    lease = first.leases._held["t-busy"].lease  # type: ignore[union-attr]
    # A second run in a thread() block is refused at its start...
    with pytest.raises(ThreadBusyError) as refused:
        with second.thread("t-busy"):
            b.invoke("t-busy")
    err = refused.value
    assert err.thread_id == "t-busy" and err.kind == "thread_busy"
    assert err.held_by["owner"] == "run-a/run-1" and err.since == lease.raw["acquired_at"]
    assert "on_busy=\"wait\"" in err.message and "wrote nothing" in err.message
    assert not b.started.is_set()
    # A run that waits gives up after wait_secs, saying so.
    impatient = BatonSaver(Client(second.client.endpoint), owner="run-c", wait_secs=0.2)  # type: ignore[arg-type]
    with pytest.raises(ThreadBusyError, match="after waiting 0.2 s and wrote nothing.*raise wait_secs"):
        with impatient.thread("t-busy", on_busy="wait"):
            pass
    impatient.close()
    # ... and so is one that is not in a block: its first checkpoint write is refused.
    unwrapped = Held(second, "c")
    unwrapped.go.set()
    with pytest.raises(ThreadBusyError):
        unwrapped.invoke("t-busy")
    assert checkpoint_ids(second, "t-busy") == before
    a.go.set()
    run_a.join()
    assert a.error is None and a.result == {"log": ["a:begin", "a:work", "a:end"]}
    # Run a's block released the thread: the next run takes it and builds on a's state.
    b.go.set()
    with second.thread("t-busy"):
        assert b.invoke("t-busy")["log"] == ["a:begin", "a:work", "a:end", "b:begin", "b:work", "b:end"]


def test_on_busy_wait_waits_for_the_run_holding_the_thread(savers: List[BatonSaver]) -> None:
    first, second = savers
    a, b = Held(first, "a"), Held(second, "b")
    b.go.set()
    run_a = a.start("t-wait", first.thread("t-wait"))
    waiting = threading.Thread(target=lambda: setattr(b, "result", _in_block(second, b, "t-wait")))
    waiting.start()

    def queued() -> bool:
        answer = first.client.call("ListResourceLocks", {"prefix": "langgraph:thread/t-wait"})  # type: ignore[union-attr]
        return [w["owner"] for w in answer["waiting"]] == ["run-b/run-1"]

    until(queued, "run b to wait for the thread")
    assert not b.started.is_set()
    a.go.set()
    run_a.join()
    waiting.join(60)
    assert b.result is not None and b.result["log"][-3:] == ["b:begin", "b:work", "b:end"]
    assert b.result["log"][:3] == ["a:begin", "a:work", "a:end"]


def _in_block(saver: BatonSaver, held: Held, thread: str) -> Dict[str, Any]:
    with saver.thread(thread, on_busy="wait"):
        return held.invoke(thread)


def test_a_run_that_lost_its_lease_cannot_write_a_stale_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATON_TEST_CLOCK_MS", "0")
    with running_daemon("baton-py-lg-") as daemon:
        stale = BatonSaver(Client(daemon.socket), owner="run-a", lease_ttl_secs=30)
        fresh = BatonSaver(Client(daemon.socket), owner="run-b", lease_ttl_secs=30)
        a, b = Held(stale, "a"), Held(fresh, "b")
        b.go.set()
        # Run a takes the thread at its first write (no block) and stalls in `work`.
        run_a = a.start("t-lost")
        assert a.error is None
        wrote(fresh, "t-lost", ["a:begin"])
        # Its lease runs out (no heartbeat reaches batond in 31 s of the test clock)...
        daemon.call("AdvanceClock", {"ms": 31_000})
        # ... so run b is not refused: it takes the thread over and runs to the end.
        with fresh.thread("t-lost"):
            assert b.invoke("t-lost")["log"] == ["a:begin", "b:begin", "b:work", "b:end"]
            taken = checkpoint_ids(fresh, "t-lost")
            # Run a wakes up: its next checkpoint write is refused, nothing written.
            a.go.set()
            run_a.join()
            assert isinstance(a.error, ThreadLostError), a.error
            assert a.error.held_by is not None and a.error.held_by["owner"] == "run-b/run-1"
            assert "nothing was written" in a.error.message
            assert checkpoint_ids(fresh, "t-lost") == taken
        latest = fresh.get_tuple({"configurable": {"thread_id": "t-lost"}})
        assert latest is not None and latest.checkpoint["channel_values"]["log"][-1] == "b:end"
        # The loss sticks: this saver refuses the thread's writes until told otherwise.
        with pytest.raises(ThreadLostError):
            a.invoke("t-lost")
        stale.release_thread("t-lost")
        a2 = Held(stale, "a2")
        a2.go.set()
        assert a2.invoke("t-lost")["log"][-1] == "a2:end"
        stale.close()
        fresh.close()


def test_a_heartbeat_that_finds_the_lease_gone_stops_the_runs_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATON_TEST_CLOCK_MS", "0")
    with running_daemon("baton-py-lg-") as daemon:
        saver = BatonSaver(Client(daemon.socket), owner="run-a", lease_ttl_secs=1)  # a beat every 1/3 s
        g = StateGraph(State)
        g.add_node("one", lambda s: {"log": ["one"]})
        g.add_edge(START, "one")
        g.add_edge("one", END)
        graph = g.compile(checkpointer=saver)
        with saver.thread("t-beat") as run:
            assert run.lease is not None
            daemon.call("AdvanceClock", {"ms": 2_000})  # the lease runs out between two beats
            held = saver.leases._held["t-beat"]  # type: ignore[union-attr]
            until(lambda: held.lost is not None, "a heartbeat to find the lease gone")
            with pytest.raises(ThreadLostError, match="nobody holds it now"):
                graph.invoke({"log": []}, {"configurable": {"thread_id": "t-beat"}})
        assert saver.get_tuple({"configurable": {"thread_id": "t-beat"}}) is None  # nothing written
        saver.close()


def test_async_runs_are_held_and_refused_as_sync_ones(daemon: Daemon) -> None:
    async def main() -> None:
        first = BatonSaver(AsyncClient(daemon.socket), owner="async-a")
        second = BatonSaver(AsyncClient(daemon.socket), owner="async-b")
        g = StateGraph(State)
        g.add_node("one", lambda s: {"log": ["one"]})
        g.add_edge(START, "one")
        g.add_edge("one", END)
        config = {"configurable": {"thread_id": "t-async"}}
        async with first.thread("t-async"):
            out = await g.compile(checkpointer=first).ainvoke({"log": []}, config)
            assert out == {"log": ["one"]}
            with pytest.raises(ThreadBusyError):
                async with second.thread("t-async"):
                    pass
        out = await g.compile(checkpointer=second).ainvoke({"log": []}, config)
        assert out == {"log": ["one", "one"]}
        first.close()
        second.close()

    asyncio.run(main())


def test_thread_ids_that_look_like_paths_stay_apart(daemon: Daemon) -> None:
    with BatonSaver(Client(daemon.socket)) as saver:
        g = StateGraph(State)
        g.add_node("one", lambda s: {"log": ["one"]})
        g.add_edge(START, "one")
        g.add_edge("one", END)
        graph = g.compile(checkpointer=saver)
        for thread in ("a", "a/b", "a%2Fb", "ü " * 100):
            graph.invoke({"log": [thread]}, {"configurable": {"thread_id": thread}})
        for thread in ("a", "a/b", "a%2Fb", "ü " * 100):
            tuples = list(saver.list({"configurable": {"thread_id": thread}}))
            assert {t.config["configurable"]["thread_id"] for t in tuples} == {thread}
            assert tuples[0].checkpoint["channel_values"]["log"] == [thread, "one"]


def test_a_checkpoint_too_large_for_one_request_is_stored_in_steps(daemon: Daemon) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    with BatonSaver(Client(daemon.socket)) as saver:
        big = {f"ch{i}": f"{i}" * 400_000 for i in range(3)}  # 1.2 MB: past one request line
        cp = empty_checkpoint()
        cp["channel_values"] = big
        cp["channel_versions"] = {k: 1 for k in big}
        stored = saver.put({"configurable": {"thread_id": "t-big", "checkpoint_ns": ""}}, cp, {"step": 0}, {k: 1 for k in big})
        tup = saver.get_tuple(stored)
        assert tup is not None and tup.checkpoint["channel_values"] == big
        # A value past batond's limits (its request line, here) is refused in batond's
        # words, and no checkpoint names values that were not stored.
        huge = empty_checkpoint()
        huge["channel_values"] = {"ch": "x" * 900_000}
        huge["channel_versions"] = {"ch": 2}
        with pytest.raises(ProtocolError, match="longer than the limit.*BATON_MAX_LINE_BYTES"):
            saver.put(stored, huge, {"step": 1}, {"ch": 2})
        assert [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "t-big"}})] == [cp["id"]]


def test_bad_configs_are_refused_with_what_to_do(daemon: Daemon) -> None:
    with BatonSaver(Client(daemon.socket)) as saver:
        with pytest.raises(ValueError, match="configurable.thread_id"):
            saver.get_tuple({"configurable": {}})
        with pytest.raises(ValueError, match="on_busy"):
            BatonSaver(Client(daemon.socket), on_busy="later")
        with pytest.raises(ValueError, match="keep_latest"):
            saver.prune(["t"], strategy="oldest")
    with pytest.raises(TypeError, match="AsyncClient"):
        BatonSaver(AsyncClient(daemon.socket)).get_tuple({"configurable": {"thread_id": "t"}})


# -- BatonStore -----------------------------------------------------------------------------


def test_store_puts_gets_searches_and_lists_namespaces(daemon: Daemon) -> None:
    store = BatonStore(Client(daemon.socket))
    store.put(("users", "u1"), "prefs", {"color": "red", "score": 5})
    store.put(("users", "u1"), "bio", {"text": "hi", "score": 2})
    store.put(("users", "u2"), "prefs", {"color": "blue", "score": 9, "tags": {"team": "x"}})
    store.put(("usersx",), "k/1", {"a": 1})
    item = store.get(("users", "u1"), "prefs")
    assert item is not None and item.value == {"color": "red", "score": 5} and item.namespace == ("users", "u1")
    created = item.created_at
    store.put(("users", "u1"), "prefs", {"color": "green", "score": 5})
    again = store.get(("users", "u1"), "prefs")
    assert again is not None and again.created_at == created and again.updated_at >= created
    assert again.value["color"] == "green"
    assert [i.key for i in store.search(("users",))] == ["prefs", "prefs", "bio"]  # newest first
    assert {(i.namespace, i.key) for i in store.search(("users",), filter={"score": {"$gte": 5}})} == {
        (("users", "u1"), "prefs"),
        (("users", "u2"), "prefs"),
    }
    assert [i.key for i in store.search(("users",), filter={"tags": {"team": "x"}})] == ["prefs"]
    assert [i.key for i in store.search((), limit=2, offset=1)] == ["k/1", "prefs"]
    assert store.get(("usersx",), "k/1") is not None
    assert store.list_namespaces() == [("users", "u1"), ("users", "u2"), ("usersx",)]
    assert store.list_namespaces(prefix=("users",)) == [("users", "u1"), ("users", "u2")]
    assert store.list_namespaces(suffix=("u2",)) == [("users", "u2")]
    assert store.list_namespaces(max_depth=1) == [("users",), ("usersx",)]
    store.delete(("users", "u1"), "bio")
    assert store.get(("users", "u1"), "bio") is None
    with pytest.raises(Exception, match="period"):
        store.put(("a.b",), "k", {"v": 1})


def test_store_ttls_expire_refresh_and_sweep(daemon: Daemon) -> None:
    now = [1_000_000.0]
    store = BatonStore(Client(daemon.socket), clock=lambda: now[0])
    store.put(("tmp",), "short", {"v": 1}, ttl=1)  # minutes
    store.put(("tmp",), "kept", {"v": 2})
    now[0] += 50
    assert store.get(("tmp",), "short") is not None  # read at 50 s: refreshed to 110 s
    now[0] += 50
    assert store.get(("tmp",), "short", refresh_ttl=False) is not None
    now[0] += 20
    assert store.get(("tmp",), "short") is None
    assert [i.key for i in store.search(("tmp",))] == ["kept"]
    assert store.sweep_ttl() == 1
    assert store.sweep_ttl() == 0


def test_store_batch_and_async(daemon: Daemon) -> None:
    from langgraph.store.base import GetOp, PutOp

    store = BatonStore(Client(daemon.socket))
    results = store.batch([PutOp(("b",), "k", {"v": 1}), GetOp(("b",), "k"), PutOp(("b",), "k", {"v": 2})])
    assert results == [None, None, None]  # reads see the store as it was before the batch
    item = store.get(("b",), "k")
    assert item is not None and item.value == {"v": 2}  # the last put wins

    async def main() -> None:
        a = BatonStore(AsyncClient(daemon.socket))
        await a.aput(("b",), "async", {"v": 3})
        got = await a.aget(("b",), "async")
        assert got is not None and got.value == {"v": 3}
        assert len(await a.asearch(("b",))) == 2

    asyncio.run(main())
    with pytest.raises(ValueError, match="vector index"):
        BatonStore(Client(daemon.socket), index={"dims": 3})
