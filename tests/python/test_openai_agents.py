"""baton.openai_agents.BatonSession against a real batond: the Session protocol's
documented behaviour item by item (as the SDK's own tests check its SQLiteSession),
runs of the SDK's Runner with its stand-in model (agents.testing.ScriptedModel: no
network), and many concurrent writers (threads, asyncio tasks, several clients) keeping
one history of one session id."""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import sys
import uuid
from typing import Any, Dict, List

import pytest
from agents import Agent, RunConfig, Runner, TResponseInputItem, set_tracing_disabled
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message

from baton import AsyncClient, Client, RetriesExhaustedError
from baton.openai_agents import BatonSession
from batonproc import Daemon

set_tracing_disabled(True)  # nothing leaves this machine: no trace export


def fresh(daemon: Daemon, **kw: Any) -> BatonSession:
    return BatonSession(f"s-{uuid.uuid4().hex[:8]}", Client(daemon.socket), **kw)


def contents(items: List[TResponseInputItem]) -> List[Any]:
    return [i.get("content") for i in items]  # type: ignore[union-attr]


def msg(role: str, content: str) -> TResponseInputItem:
    return {"role": role, "content": content}  # type: ignore[return-value,misc]


def test_it_is_a_session(daemon: Daemon) -> None:
    s = fresh(daemon)
    assert isinstance(s, Session)
    assert isinstance(s.session_settings, SessionSettings) and s.session_settings.limit is None
    with pytest.raises(ValueError, match="session_id"):
        BatonSession("", Client(daemon.socket))


def test_add_get_pop_clear(daemon: Daemon) -> None:
    async def main() -> None:
        s = fresh(daemon)
        assert await s.get_items() == [] and await s.pop_item() is None
        await s.add_items([msg("user", "Hello"), msg("assistant", "Hi there!"), msg("user", "How are you?")])
        await s.add_items([])
        assert contents(await s.get_items()) == ["Hello", "Hi there!", "How are you?"]
        popped = await s.pop_item()
        assert popped == {"role": "user", "content": "How are you?"}
        assert contents(await s.get_items()) == ["Hello", "Hi there!"]
        assert (await s.pop_item()) == {"role": "assistant", "content": "Hi there!"}
        assert (await s.pop_item()) == {"role": "user", "content": "Hello"}
        assert await s.pop_item() is None and await s.get_items() == []
        # Items added after pops take the popped places; a clear empties the session,
        # and items added after it are the whole history.
        await s.add_items([msg("user", f"m{i}") for i in range(5)])
        await s.clear_session()
        assert await s.get_items() == [] and await s.pop_item() is None
        await s.clear_session()
        await s.add_items([msg("user", "after")])
        assert contents(await s.get_items()) == ["after"]
        # Nothing of the cleared items is left in batond.
        keys = [r.key for r in Client(daemon.socket).list("openai-agents", prefix=f"s/{s.session_id}/").records]
        assert keys == [f"s/{s.session_id}/head", f"s/{s.session_id}/i/{5:020d}"]

    asyncio.run(main())


def test_sessions_are_separate(daemon: Daemon) -> None:
    async def main() -> None:
        one, two = fresh(daemon), fresh(daemon)
        await one.add_items([msg("user", "Session 1 message")])
        await two.add_items([msg("user", "Session 2 message 1"), msg("user", "Session 2 message 2")])
        assert (await two.pop_item()) == {"role": "user", "content": "Session 2 message 2"}
        assert contents(await one.get_items()) == ["Session 1 message"]
        assert contents(await two.get_items()) == ["Session 2 message 1"]
        # An id that looks like a path does not reach another session's keys.
        a = BatonSession("a", Client(daemon.socket))
        ab = BatonSession("a/i", Client(daemon.socket))
        await a.add_items([msg("user", "a")])
        await ab.add_items([msg("user", "a/i")])
        assert contents(await a.get_items()) == ["a"] and contents(await ab.get_items()) == ["a/i"]

    asyncio.run(main())


def test_limits(daemon: Daemon) -> None:
    async def main() -> None:
        s = fresh(daemon)
        await s.add_items([msg("user" if i % 2 == 0 else "assistant", f"M{i}") for i in range(6)])
        assert contents(await s.get_items(limit=2)) == ["M4", "M5"]
        assert contents(await s.get_items(limit=4)) == ["M2", "M3", "M4", "M5"]
        assert len(await s.get_items(limit=10)) == 6
        assert await s.get_items(limit=0) == []
        assert len(await s.get_items(limit=-1)) == 6  # SQLiteSession's: negative is all
        settled = BatonSession(s.session_id, Client(daemon.socket), session_settings=SessionSettings(limit=3))
        assert contents(await settled.get_items()) == ["M3", "M4", "M5"]
        assert contents(await settled.get_items(limit=1)) == ["M5"]

    asyncio.run(main())


def test_unicode_and_special_characters(daemon: Daemon) -> None:
    texts = ["こんにちは", "😊👍", "Привет", "O'Reilly", "DROP TABLE sessions;", '"x"; --', "\u0000nul"]

    async def main() -> None:
        s = fresh(daemon)
        await s.add_items([msg("user", t) for t in texts])
        assert contents(await s.get_items()) == texts

    asyncio.run(main())


def test_async_client_and_a_client_of_its_own(daemon: Daemon) -> None:
    async def main() -> None:
        s = BatonSession(f"s-{uuid.uuid4().hex[:8]}", AsyncClient(daemon.socket))
        await s.add_items([msg("user", "x")])
        assert contents(await s.get_items()) == ["x"]
        own = BatonSession(s.session_id, socket_path=str(daemon.socket))
        assert contents(await own.get_items()) == ["x"]
        own.close()

    asyncio.run(main())


# -- with the SDK's Runner and its stand-in model ---------------------------------------------


def run(runner: str, agent: Agent[Any], text: Any, **kw: Any) -> Any:
    if runner == "run":
        return asyncio.run(Runner.run(agent, text, **kw))
    if runner == "run_sync":
        return Runner.run_sync(agent, text, **kw)

    async def streamed() -> Any:
        result = Runner.run_streamed(agent, text, **kw)
        async for _ in result.stream_events():
            pass
        return result

    return asyncio.run(streamed())


@pytest.mark.parametrize("runner", ["run", "run_sync", "run_streamed"])
def test_runs_remember_their_session(daemon: Daemon, runner: str) -> None:
    model = ScriptedModel([[assistant_message("San Francisco")], [assistant_message("California")]])
    agent = Agent(name="test", model=model)
    session = fresh(daemon)
    other = fresh(daemon)
    first = run(runner, agent, "What city is the Golden Gate Bridge in?", session=session)
    assert first.final_output == "San Francisco"
    second = run(runner, agent, "What state is it in?", session=session)
    assert second.final_output == "California"
    last = model.last_call
    assert last is not None
    assert [i.get("content") for i in last.input if i.get("role") == "user"] == [
        "What city is the Golden Gate Bridge in?",
        "What state is it in?",
    ]
    # The history is in batond: a new session object (as in a new process) sees it.
    again = BatonSession(session.session_id, Client(daemon.socket))
    assert len(asyncio.run(again.get_items())) == 4
    assert asyncio.run(other.get_items()) == []


def test_list_input_is_appended_and_run_settings_override(daemon: Daemon) -> None:
    model = ScriptedModel([[assistant_message("ok")], [assistant_message("Got it")]])
    agent = Agent(name="test", model=model)
    session = fresh(daemon, session_settings=SessionSettings(limit=100))
    history = [msg("user", "Earlier message"), msg("assistant", "Saved reply")]
    asyncio.run(session.add_items(history))
    asyncio.run(Runner.run(agent, [msg("user", "Test message")], session=session))
    assert model.last_call is not None and model.last_call.input == [*history, msg("user", "Test message")]
    asyncio.run(
        Runner.run(agent, "New question", session=session, run_config=RunConfig(session_settings=SessionSettings(limit=2)))
    )
    assert model.last_call is not None
    earlier = [i for i in model.last_call.input if i.get("content") != "New question"]
    assert len(earlier) == 2 and earlier[0] == msg("user", "Test message") and earlier[1]["role"] == "assistant"


# -- many writers, one history ------------------------------------------------------------------


def writers_items(writer: int, n: int) -> List[TResponseInputItem]:
    return [msg("user", f"w{writer}-{i}") for i in range(n)]


def check_one_history(items: List[TResponseInputItem], writers: int, batches: int, per: int) -> None:
    got = contents(items)
    assert len(got) == writers * batches * per and len(set(got)) == len(got)
    # Each add_items lands whole and in its order; each writer's batches in its order.
    for w in range(writers):
        mine = [c for c in got if c.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(batches * per)]
    for start in range(0, len(got), per):
        chunk = got[start : start + per]
        writer = chunk[0].split("-")[0]
        assert all(c.startswith(writer + "-") for c in chunk), chunk


def test_concurrent_first_uses_from_threads_keep_one_history(daemon: Daemon) -> None:
    sid = f"race-{uuid.uuid4().hex[:8]}"
    writers, batches, per = 8, 5, 3

    def writer(w: int) -> None:
        session = BatonSession(sid, Client(daemon.socket))  # a client each, as processes have
        for b in range(batches):
            # Each add on an event loop of its own, as the SDK's own concurrency test does.
            asyncio.run(session.add_items(writers_items(w, batches * per)[b * per : (b + 1) * per]))

    with concurrent.futures.ThreadPoolExecutor(max_workers=writers) as pool:
        list(pool.map(writer, range(writers)))
    check_one_history(asyncio.run(BatonSession(sid, Client(daemon.socket)).get_items()), writers, batches, per)


def test_concurrent_first_uses_from_asyncio_tasks_keep_one_history(daemon: Daemon) -> None:
    sid = f"race-{uuid.uuid4().hex[:8]}"
    writers, batches, per = 16, 3, 2

    async def main() -> List[TResponseInputItem]:
        shared = AsyncClient(daemon.socket)

        async def writer(w: int) -> None:
            # Half share one AsyncClient, half have their own.
            session = BatonSession(sid, shared if w % 2 else AsyncClient(daemon.socket))
            for b in range(batches):
                await session.add_items(writers_items(w, batches * per)[b * per : (b + 1) * per])

        await asyncio.gather(*(writer(w) for w in range(writers)))
        return await BatonSession(sid, shared).get_items()

    check_one_history(asyncio.run(main()), writers, batches, per)


WRITER = """
import asyncio, sys
from baton import Client
from baton.openai_agents import BatonSession
socket, sid, w, batches, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
session = BatonSession(sid, Client(socket))
asyncio.run(session.get_items())  # connected, and the session is still new
print("ready", flush=True)
sys.stdin.readline()  # all start together
for b in range(batches):
    items = [{"role": "user", "content": f"w{w}-{b * per + i}"} for i in range(per)]
    asyncio.run(session.add_items(items))
"""


def test_concurrent_first_uses_from_processes_keep_one_history(daemon: Daemon) -> None:
    sid = f"race-{uuid.uuid4().hex[:8]}"
    writers, batches, per = 4, 5, 2
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(daemon.socket), sid, str(w), str(batches), str(per)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    for p in procs:  # every process has started and connected ...
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    for p in procs:  # ... before any of them writes
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    assert [p.wait(120) for p in procs] == [0] * writers
    check_one_history(asyncio.run(BatonSession(sid, Client(daemon.socket)).get_items()), writers, batches, per)


def test_concurrent_pops_take_each_item_once(daemon: Daemon) -> None:
    sid = f"pops-{uuid.uuid4().hex[:8]}"
    asyncio.run(BatonSession(sid, Client(daemon.socket)).add_items([msg("user", str(i)) for i in range(40)]))

    async def main() -> List[Any]:
        sessions = [BatonSession(sid, AsyncClient(daemon.socket)) for _ in range(8)]

        async def popper(s: BatonSession) -> List[Any]:
            got = []
            while (item := await s.pop_item()) is not None:
                got.append(item["content"])  # type: ignore[index]
            return got

        results = await asyncio.gather(*(popper(s) for s in sessions))
        return [c for r in results for c in r]

    popped = asyncio.run(main())
    assert sorted(popped, key=int) == [str(i) for i in range(40)]


def test_a_change_that_never_gets_through_says_so(daemon: Daemon) -> None:
    s = fresh(daemon, retries=0)

    class Racer(BatonSession):
        def _read_head(self) -> Any:  # another writer moves the head after every read
            got = yield from super()._read_head()
            Client(daemon.socket).set("openai-agents", self._head, {"start": 0, "next": 0})
            return got

    racer = Racer(s.session_id, Client(daemon.socket), retries=2)
    with pytest.raises(RetriesExhaustedError, match="retry later"):
        asyncio.run(racer.add_items([msg("user", "x")]))
    stored: Dict[str, Any] = Client(daemon.socket).get("openai-agents", f"s/{s.session_id}/head").value  # type: ignore[union-attr]
    assert stored == {"start": 0, "next": 0} and asyncio.run(s.get_items()) == []
