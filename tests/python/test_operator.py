"""The operator's actions from Python (sync and asyncio) and the CLI: break a lock, retry
a failed node, end an agent's session, each with a reason, journalled with who acted, and
refused to a token without the `operator` grant."""

from __future__ import annotations

import asyncio
import socket
import subprocess

import pytest

import baton
from baton import AsyncClient, Client
from batonproc import Daemon, running_daemon
from test_cli import baton as run_cli
from test_cli import js


def failed_task(c: Client) -> str:
    task = c.register_task("g", [{"id": "a", "max_attempts": 1}, {"id": "b", "dependencies": ["a"]}])
    node = c.acquire_node(task["task_id"], "w", ttl_secs=60)
    assert node is not None
    c.fail_node(node, "boom", retry=False)
    return str(task["task_id"])


def test_operator_actions_from_the_sync_client(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        c.acquire_lock("tool:deploy", "alice", ttl_secs=60)
        broken = c.break_lock("tool:deploy", reason="stuck deploy")
        assert [b["owner"] for b in broken["broken"]] == ["alice"]
        assert broken["waiters_served"] == 0
        with pytest.raises(baton.NotFoundError):
            c.break_lock("tool:deploy", reason="again")
        with pytest.raises(baton.InvalidParamsError):
            c.break_lock("tool:deploy", reason="")

        task_id = failed_task(c)
        retried = c.retry_node(task_id, "a", reason="network is back")
        assert (retried["node_state"], retried["task_status"], retried["nodes_resumed"]) == ("PENDING", "running", 1)
        with pytest.raises(baton.ConflictError):
            c.retry_node(task_id, "a", reason="twice")

        session = c.call("RegisterAgent", {"name": "coder", "ttl_secs": 60})
        c.call("AcquireResourceLock", {"resource_key": "file:x.py", "session_id": session["session_id"]})
        ended = c.end_agent_session("coder", reason="looping")
        assert (ended["ended"], ended["locks_ended"]) == (True, ["file:x.py"])
        with pytest.raises(baton.NotFoundError):
            c.end_agent_session("coder", reason="again")

        events, _ = c.read_events(0, types=["lock.broken", "node.retried", "agent.left"])
        assert [(e.type, e.data.get("by")) for e in events] == [
            ("lock.broken", "admin"),
            ("node.retried", "admin"),
            ("agent.left", "admin"),
        ]
        assert [e.data.get("reason") for e in events] == ["stuck deploy", "network is back", "operator"]
        assert events[2].data["note"] == "looping"


def test_operator_actions_from_the_async_client(daemon: Daemon) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.socket) as c:
            await c.acquire_lock("kv:cfg", "r1", ttl_secs=60, mode="shared")
            await c.acquire_lock("kv:cfg", "r2", ttl_secs=60, mode="shared")
            broken = await c.break_lock("kv:cfg", reason="r2 hung", owner="r2")
            assert [b["owner"] for b in broken["broken"]] == ["r2"]
            with Client(daemon.socket) as sync:
                task_id = failed_task(sync)
            retried = await c.retry_node(task_id, "a", reason="fixed")
            assert retried["still_failed"] == []
            with pytest.raises(baton.NotFoundError):
                await c.end_agent_session("nobody", reason="why")

    asyncio.run(main())


def test_only_the_operator_grant_acts() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with running_daemon(args=["--listen", f"tcp://127.0.0.1:{port}"]) as d:
        url = f"tcp://127.0.0.1:{port}"
        reader = d.call("CreateToken", {"name": "viewer", "scopes": ["read"]})["token"]
        ops = d.call("CreateToken", {"name": "oncall", "scopes": ["operator"]})["token"]
        d.call("AcquireResourceLock", {"resource_key": "tool:x", "owner": "alice"})
        with Client(url=url, token=reader) as c:
            with pytest.raises(baton.ForbiddenError) as refused:
                c.break_lock("tool:x", reason="why")
            assert refused.value.data["needed"] == "operator"
        with Client(url=url, token=ops) as c:
            assert c.break_lock("tool:x", reason="why")["broken"][0]["owner"] == "alice"
            with pytest.raises(baton.ForbiddenError):
                c.list_agents()  # operator reads nothing
        events = d.call("ReadEvents", {"since_seq": 0, "types": ["lock.broken"]})["events"]
        assert events[0]["data"]["by"] == "oncall"


def test_operator_cli_commands(daemon: Daemon) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess:
        return run_cli(daemon, *args)

    assert cli("lock", "acquire", "tool:deploy", "--owner", "alice").returncode == 0
    broken = cli("lock", "break", "tool:deploy", "--reason", "stuck deploy")
    assert broken.returncode == 0, broken.stderr
    assert "tool:deploy" in broken.stdout and "alice" in broken.stdout
    missing = cli("lock", "break", "tool:deploy", "--reason", "again")
    assert missing.returncode == 3 and "nothing to break" in missing.stderr
    assert cli("lock", "break", "tool:deploy").returncode == 2, "--reason is required"

    with Client(daemon.socket) as c:
        task_id = failed_task(c)
        c.call("RegisterAgent", {"name": "coder", "ttl_secs": 60})
    retried = js(run_cli(daemon, "--json", "task", "retry", task_id, "a", "--reason", "fixed"))
    assert (retried["node_state"], retried["task_status"]) == ("PENDING", "running")
    again = cli("task", "retry", task_id, "a", "--reason", "fixed")
    assert again.returncode == 4 and "PENDING" in again.stderr
    ended = cli("agent", "end", "coder", "--reason", "looping")
    assert ended.returncode == 0 and "coder" in ended.stdout, ended.stderr
    assert cli("agent", "end", "coder", "--reason", "looping").returncode == 3


