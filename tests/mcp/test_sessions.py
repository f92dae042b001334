"""mcp-bridge's agent sessions, end to end with the official MCP Python SDK against a real
batond: a daemon restart under a joined session (the bridge joins again once, and says
what was lost), two bridges started under the same agent name, baton_join under the
session's own name and under another one, and a bridge started before its daemon."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from batonproc import BIN_DIR, Daemon, bridge_params


def run(coro: Any) -> Any:
    return anyio.run(lambda: coro)


def text(result: Any) -> str:
    return " ".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def agents(daemon: Daemon) -> dict[str, Any]:
    return {a["name"]: a for a in daemon.call("ListAgents")["agents"]}


def test_a_daemon_restart_rejoins_once_and_says_what_was_lost(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--tools", "all", "--agent", "alice")) as c:
            claim = await c.call_tool("baton_claim", {"resource_key": "file:a.txt"})
            assert claim.structured_content["status"] == "acquired", text(claim)
            assert "session_note" not in claim.structured_content
            task = (await c.call_tool("baton_task_register", {"goal": "g", "nodes": [{"id": "n1"}]})).structured_content
            node = (await c.call_tool("baton_task_next", {"task_id": task["task_id"]})).structured_content
            assert node["status"] == "acquired"
            assert agents(daemon)["alice"]["locks"] == ["file:a.txt"]

            daemon.restart()
            # The next call (one that carries the session: refused for the old one, made
            # again once joined) says the bridge joined again, and what ended.
            again = await c.call_tool("baton_claim", {"resource_key": "tool:b"})
            assert not again.is_error, text(again)
            assert again.structured_content["status"] == "acquired"
            note = again.structured_content["session_note"]
            assert note["joined"] is True and note["agent"] == "alice", note
            assert note["lost_claims"] == ["file:a.txt"], note
            assert note["lost_nodes"] == [{"task_id": task["task_id"], "node_id": "n1"}], note
            said = text(again)
            assert "joined again as alice" in said and "file:a.txt" in said and "node n1" in said, said
            assert "EndSession" not in said and "RegisterAgent" not in said, said
            # What was lost is gone in batond too; the new session holds the new claim.
            assert daemon.call("ResourceLockStatus", {"resource_key": "file:a.txt"})["status"] == "available"
            assert agents(daemon)["alice"]["locks"] == ["tool:b"]
            assert daemon.call("TaskStatus", {"task_id": task["task_id"]})["nodes"][0]["state"] == "PENDING"
            # Said once: the call after that carries no note.
            quiet = await c.call_tool("baton_agents", {})
            assert "session_note" not in quiet.structured_content, quiet.structured_content
            assert "joined again" not in text(quiet)

            # Another restart, and a call that does not act as the agent (a read): it is
            # made on a new connection, and its result says the session was joined again.
            daemon.restart()
            got = await c.call_tool("baton_get", {"namespace": "n", "key": "k"})
            assert not got.is_error and got.structured_content["found"] is False, text(got)
            note = got.structured_content["session_note"]
            assert note["lost_claims"] == ["tool:b"] and note["lost_nodes"] == [], note
            assert "alice" in agents(daemon)
            assert daemon.call("ResourceLockStatus", {"resource_key": "tool:b"})["status"] == "available"
            quiet = await c.call_tool("baton_get", {"namespace": "n", "key": "k"})
            assert "session_note" not in quiet.structured_content

    run(main())


def test_claims_without_a_session_that_a_restart_ended_are_told(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket)) as c:
            claim = await c.call_tool("baton_claim", {"resource_key": "tool:x"})
            assert claim.structured_content["status"] == "acquired"
            daemon.restart()
            got = await c.call_tool("baton_get", {"namespace": "n", "key": "k"})
            assert not got.is_error, text(got)
            note = got.structured_content["session_note"]
            assert note["lost_claims"] == ["tool:x"] and note["joined"] is False, note
            assert "connection to batond dropped" in text(got)
            quiet = await c.call_tool("baton_get", {"namespace": "n", "key": "k"})
            assert "session_note" not in quiet.structured_content

    run(main())


def test_a_second_bridge_under_a_live_name_fails_loudly_and_never_shares_a_claim(daemon: Daemon) -> None:
    async def main() -> None:
        first_params = bridge_params(daemon.socket, "--tools", "all", "--agent", "alice")
        second_params = bridge_params(daemon.socket, "--tools", "all", "--agent", "alice")
        async with Client(first_params) as first, Client(second_params) as second:
            mine = await first.call_tool("baton_claim", {"resource_key": "file:report.md"})
            assert mine.structured_content["status"] == "acquired", text(mine)
            joined_at = agents(daemon)["alice"]["started_at"]

            for _ in range(2):  # every call, until the name is free or taken over
                clash = await second.call_tool("baton_claim", {"resource_key": "file:report.md"})
                assert clash.is_error and clash.structured_content is None, text(clash)
                said = text(clash)
                assert 'agent name "alice" is in use by another live session' in said, said
                assert "host " in said and "pid " in said and f"joined {joined_at}" in said, said
                assert "baton_claim was not done" in said, said
                assert "--agent" in said and "takeover: true" in said, said
                assert "already_held" not in said
            # Nothing was done for the second bridge: the file is the first's alone.
            status = daemon.call("ResourceLockStatus", {"resource_key": "file:report.md"})
            assert status["held_by"]["owner"] == "alice"
            assert len(daemon.call("ListResourceLocks")["locks"]) == 1

            # The first is really gone (say): the second takes the name over, and its claim
            # of the file is judged as anyone's, never already_held.
            taken = await second.call_tool("baton_join", {"name": "alice", "takeover": True})
            assert not taken.is_error, text(taken)
            claimed = await second.call_tool("baton_claim", {"resource_key": "file:report.md"})
            assert claimed.structured_content["status"] == "acquired", text(claimed)
            # The first learns at its next call as the agent (a read learns it at the next
            # heartbeat) that the name is no longer its.
            refused = await first.call_tool("baton_claim", {"resource_key": "tool:other"})
            assert refused.is_error, text(refused)
            assert "in use by another live session" in text(refused)
            assert "file:report.md" in text(refused), "what the first lost is named"

    run(main())


def test_baton_join_under_the_agent_name_is_a_no_op_and_another_name_is_refused(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--tools", "all", "--agent", "bob")) as c:
            claim = await c.call_tool("baton_claim", {"resource_key": "tool:deploy"})
            assert claim.structured_content["status"] == "acquired"
            for args in ({"name": "bob"}, {"name": "bob", "takeover": True}):
                joined = await c.call_tool("baton_join", args)
                assert not joined.is_error, text(joined)
                assert joined.structured_content["already_joined"] is True
                assert joined.structured_content["name"] == "bob"
                assert "already joined as bob" in text(joined) and "nothing changed" in text(joined)
            # The claim is still the session's, under the same session.
            assert agents(daemon)["bob"]["locks"] == ["tool:deploy"]
            assert [e["data"].get("reason") for e in daemon.call("ReadEvents", {"types": ["agent.left"]})["events"]] == []
            other = await c.call_tool("baton_join", {"name": "robert"})
            assert other.is_error and "acts as agent bob" in text(other), text(other)
            assert "go on as bob" in text(other)
            assert set(agents(daemon)) == {"bob"}

    run(main())


def test_the_instructions_say_the_session_is_joined_as_the_agent(daemon: Daemon) -> None:
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    async def main() -> None:
        async with stdio_client(bridge_params(daemon.socket, "--tools", "all", "--agent", "bob")) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                assert "already joined as agent bob" in init.instructions, init.instructions
                assert "join under a name with baton_join first" not in init.instructions

    run(main())


def test_rejoining_under_a_second_name_is_refused_and_the_first_keeps_its_claims(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--tools", "all")) as c:
            joined = await c.call_tool("baton_join", {"name": "carol"})
            assert not joined.is_error, text(joined)
            claim = await c.call_tool("baton_claim", {"resource_key": "tool:fmt"})
            assert claim.structured_content["owner"] == "carol"
            second = await c.call_tool("baton_join", {"name": "dave"})
            assert second.is_error, text(second)
            said = text(second)
            assert "already joined as carol" in said and "go on as carol" in said, said
            assert set(agents(daemon)) == {"carol"}
            assert agents(daemon)["carol"]["locks"] == ["tool:fmt"]
            same = await c.call_tool("baton_join", {"name": "carol"})
            assert same.structured_content["already_joined"] is True, text(same)

    run(main())


def test_a_bridge_started_before_its_daemon_joins_once_batond_is_up() -> None:
    with tempfile.TemporaryDirectory(prefix="baton-mcp-late-") as home:
        socket_path = Path(home) / "baton.sock"
        params = StdioServerParameters(
            command=str(BIN_DIR / "mcp-bridge"),
            args=["--socket", str(socket_path), "--agent", "late"],
            env={"PATH": os.environ.get("PATH", ""), "RUST_LOG": "warn"},
        )

        async def main() -> None:
            async with Client(params) as c:
                down = await c.call_tool("baton_claim", {"resource_key": "tool:x"})
                assert down.is_error and "batond is not running" in text(down), text(down)
                daemon = Daemon(Path(home))
                try:
                    claim = await c.call_tool("baton_claim", {"resource_key": "tool:x"})
                    assert claim.structured_content["status"] == "acquired", text(claim)
                    assert claim.structured_content["owner"] == "late"
                    # Joined, and the claim is the session's.
                    assert agents(daemon)["late"]["locks"] == ["tool:x"]
                finally:
                    daemon.stop()

        run(main())


def test_a_session_left_by_a_bridge_that_exited_on_this_host_is_taken_over(daemon: Daemon) -> None:
    """A client that restarts its MCP server: the old bridge's process is gone, but batond
    has not seen its connection end yet (here: a session with no connection to end). The
    new bridge takes it over; a session whose process still runs is never taken."""
    host = Path("/proc/sys/kernel/hostname").read_text().strip()
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    for name, pid in (("gone", exited.pid), ("alive", os.getpid())):
        daemon.call("RegisterAgent", {"name": name, "metadata": {"via": "mcp-bridge", "host": host, "pid": pid}})

    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--agent", "gone")) as c:
            claim = await c.call_tool("baton_claim", {"resource_key": "tool:x"})
            assert claim.structured_content["status"] == "acquired", text(claim)
            assert agents(daemon)["gone"]["locks"] == ["tool:x"]
        async with Client(bridge_params(daemon.socket, "--agent", "alive")) as c:
            clash = await c.call_tool("baton_claim", {"resource_key": "tool:y"})
            assert clash.is_error and f"pid {os.getpid()}" in text(clash), text(clash)

    run(main())
