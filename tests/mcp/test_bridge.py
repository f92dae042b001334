"""mcp-bridge end to end: the official MCP Python SDK drives bridge processes against a
real batond, through both the initialize handshake and server/discover."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

import anyio
import pytest
from mcp import Client, ClientSession
from mcp.client.stdio import stdio_client

from batonproc import BIN_DIR, Daemon, bridge_params

LOCKS = {"baton_claim", "baton_heartbeat", "baton_release", "baton_lock_status", "baton_wait", "baton_locks"}
STATE = {"baton_get", "baton_set", "baton_delete", "baton_list", "baton_history", "baton_txn"}
TASKS = {
    "baton_task_register", "baton_task_next", "baton_task_heartbeat", "baton_task_complete",
    "baton_task_fail", "baton_task_status", "baton_task_event",
}
EVENTS = {"baton_events", "baton_publish"}
AGENTS = {"baton_join", "baton_agents", "baton_send", "baton_inbox", "baton_ack"}


def run(coro: Any) -> Any:
    return anyio.run(lambda: coro)


def text(result: Any) -> str:
    return " ".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def test_the_initialize_handshake_serves_locks_and_state_by_default(daemon: Daemon) -> None:
    async def main() -> None:
        async with stdio_client(bridge_params(daemon.socket)) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                assert "baton_claim" in (init.instructions or "")
                tools = await session.list_tools()
                assert {t.name for t in tools.tools} == LOCKS | STATE
                result = await session.call_tool("baton_set", {"namespace": "p", "key": "k", "value": 1, "expected_version": 0})
                assert not result.is_error, text(result)
                assert result.structured_content["version"] == 1
                assert json.loads(text(result))["version"] == 1  # the text mirrors the result

    run(main())


@pytest.mark.parametrize(
    "groups,expected",
    [("tasks", TASKS), ("events", EVENTS), ("state,events", STATE | EVENTS), ("agents", AGENTS), ("all", LOCKS | STATE | TASKS | EVENTS | AGENTS)],
)
def test_server_discover_lists_the_tools_of_each_group(daemon: Daemon, groups: str, expected: set[str]) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--tools", groups)) as client:
            assert client.session.protocol_version == "2026-07-28"
            tools = await client.list_tools()
            assert {t.name for t in tools.tools} == expected

    run(main())


def no_type_arrays(schema: Any) -> bool:
    if isinstance(schema, dict):
        return not isinstance(schema.get("type"), list) and all(no_type_arrays(v) for v in schema.values())
    if isinstance(schema, list):
        return all(no_type_arrays(v) for v in schema)
    return True


def test_schemas_are_simple_and_annotated(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--tools", "all")) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            for tool in tools.values():
                assert tool.input_schema["type"] == "object"
                assert "properties" in tool.input_schema
                assert no_type_arrays(tool.input_schema), tool.name
                assert tool.output_schema and no_type_arrays(tool.output_schema), tool.name
                assert tool.description and len(tool.description) > 60, tool.name
            assert tools["baton_get"].annotations.read_only_hint is True
            assert tools["baton_get"].annotations.idempotent_hint is True
            assert tools["baton_delete"].annotations.destructive_hint is True
            assert tools["baton_set"].annotations.read_only_hint is False
            assert "expected_version" not in tools["baton_set"].input_schema.get("required", [])

    run(main())


def test_set_get_and_a_conflict_that_names_the_next_call(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket)) as a, Client(bridge_params(daemon.socket)) as b:
            created = await a.call_tool("baton_set", {"namespace": "budget", "key": "q3", "value": {"usd": 10000}, "expected_version": 0})
            assert not created.is_error and created.structured_content["version"] == 1
            got = await b.call_tool("baton_get", {"namespace": "budget", "key": "q3"})
            assert got.structured_content["value"] == {"usd": 10000}
            assert got.structured_content["version"] == 1
            # a writes version 2; b's write based on version 1 must not clobber it.
            await a.call_tool("baton_set", {"namespace": "budget", "key": "q3", "value": {"usd": 4000}, "expected_version": 1})
            stale = await b.call_tool("baton_set", {"namespace": "budget", "key": "q3", "value": {"usd": 9000}, "expected_version": 1})
            assert stale.is_error
            assert "baton_get" in text(stale) and "expected_version 2" in text(stale), text(stale)
            # No structuredContent on errors (the outputSchema describes a success); the
            # details follow the hint as a second text block.
            assert stale.structured_content is None
            assert json.loads(stale.content[1].text)["actual_value"] == {"usd": 4000}
            # Forgetting expected_version is refused, with the way out.
            blind = await b.call_tool("baton_set", {"namespace": "budget", "key": "q3", "value": 0})
            assert blind.is_error and "expected_version" in text(blind) and "force" in text(blind)
            assert daemon.call("Get", {"namespace": "budget", "key": "q3"})["value"] == {"usd": 4000}
            forced = await b.call_tool("baton_set", {"namespace": "budget", "key": "q3", "value": 0, "force": True})
            assert not forced.is_error and forced.structured_content["version"] == 3
            missing = await b.call_tool("baton_get", {"namespace": "budget", "key": "nope"})
            assert not missing.is_error and missing.structured_content["found"] is False
            deleted = await b.call_tool("baton_delete", {"namespace": "budget", "key": "q3", "expected_version": 3})
            assert deleted.structured_content["deleted"] is True
            history = await a.call_tool("baton_history", {"namespace": "budget", "key": "q3"})
            assert [h["version"] for h in history.structured_content["history"]] == [4, 3, 2, 1]

    run(main())


def test_bad_arguments_are_tool_errors_and_unknown_tools_protocol_errors(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket)) as client:
            with pytest.raises(Exception) as caught:
                await client.call_tool("baton_nope", {})
            assert "baton_nope" in str(caught.value)
            for args, expected in [
                ({"namespace": "p"}, '"key" is missing'),
                ({"namespace": "p", "key": 5}, '"key" is a number; send a string'),
                ({"namespace": "p", "key": "k", "version": 1}, 'no argument "version"'),
            ]:
                result = await client.call_tool("baton_get", args)
                assert result.is_error and expected in text(result), text(result)
                assert "call baton_get again" in text(result) or "call it again" in text(result)

    run(main())


def test_claim_busy_release_and_the_next_claimant_sees_the_outcome(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--owner", "alice")) as a, Client(
            bridge_params(daemon.socket, "--owner", "bob")
        ) as b:
            claim = await a.call_tool("baton_claim", {"resource_key": "file:./src//lib.rs"})
            assert not claim.is_error, text(claim)
            lease = claim.structured_content
            assert lease["status"] == "acquired" and lease["owner"] == "alice"
            assert lease["resource_key"] == "file:src/lib.rs"
            busy = await b.call_tool("baton_claim", {"resource_key": "dir:src"})
            assert busy.is_error
            assert "alice" in text(busy) and "baton_wait" in text(busy), text(busy)
            released = await a.call_tool(
                "baton_release", {"resource_key": "file:src/lib.rs", "lease_id": lease["lease_id"], "outcome": "modified"}
            )
            assert released.structured_content["outcome"] == "modified"
            again = await b.call_tool("baton_claim", {"resource_key": "file:src/lib.rs"})
            assert again.structured_content["status"] == "acquired"
            assert again.structured_content["previous"]["outcome"] == "modified"
            assert again.structured_content["previous"]["owner"] == "alice"
            stale = await a.call_tool("baton_heartbeat", {"resource_key": "file:src/lib.rs", "lease_id": lease["lease_id"]})
            assert stale.is_error and "baton_claim" in text(stale), text(stale)

    run(main())


KILLED_CLIENT = textwrap.dedent(
    """
    import anyio, os, sys
    from mcp import Client
    sys.path.insert(0, {tests!r})
    from batonproc import bridge_params
    from pathlib import Path

    async def main():
        async with Client(bridge_params(Path({socket!r}), "--owner", "doomed")) as c:
            r = await c.call_tool("baton_claim", {{"resource_key": "file:shared.txt"}})
            assert r.structured_content["status"] == "acquired", r
            print("claimed", flush=True)
            sys.stdin.readline()  # hold until killed

    anyio.run(main)
    """
)


def test_a_killed_client_session_frees_its_lock(daemon: Daemon) -> None:
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = KILLED_CLIENT.format(tests=tests, socket=str(daemon.socket))
    client = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert client.stdout.readline().strip() == b"claimed"
        assert daemon.call("ResourceLockStatus", {"resource_key": "file:shared.txt"})["status"] == "held"
        client.kill()
        client.wait(timeout=30)
    finally:
        client.kill()

    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--owner", "heir")) as c:
            # Queues behind the dead session's lease, which ends as soon as its bridge goes.
            r = await c.call_tool("baton_claim", {"resource_key": "file:shared.txt", "wait_ms": 60000})
            assert r.structured_content["status"] == "acquired", text(r)
            assert r.structured_content["previous"]["outcome"] == "abandoned"
            assert r.structured_content["previous"]["owner"] == "doomed"

    run(main())


def test_a_cancelled_wait_ends_in_the_daemon_and_takes_nothing(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--owner", "holder")) as a, Client(
            bridge_params(daemon.socket, "--owner", "waiter")
        ) as b:
            lease = (await a.call_tool("baton_claim", {"resource_key": "tool:deploy"})).structured_content
            progress: list[float] = []

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                progress.append(done)

            with pytest.raises(Exception):
                await b.call_tool(
                    "baton_claim",
                    {"resource_key": "tool:deploy", "wait_ms": 600000},
                    read_timeout_seconds=2.5,
                    progress_callback=on_progress,
                )
            assert progress, "a long wait reports progress when asked"
            deadline = time.monotonic() + 30
            while daemon.call("Metrics")["locks"]["waiting"] != 0:
                assert time.monotonic() < deadline, "the cancelled claim still waits in batond"
                await anyio.sleep(0.01)
            await a.call_tool("baton_release", {"resource_key": "tool:deploy", "lease_id": lease["lease_id"]})
            status = await a.call_tool("baton_lock_status", {"resource_key": "tool:deploy"})
            assert status.structured_content["status"] == "available"

    run(main())


def test_the_bridge_exits_when_stdin_closes(daemon: Daemon) -> None:
    bridge = subprocess.Popen(
        [str(BIN_DIR / "mcp-bridge"), "--socket", str(daemon.socket)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    init = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }
    bridge.stdin.write((json.dumps(init) + "\n").encode())
    bridge.stdin.flush()
    answer = json.loads(bridge.stdout.readline())
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "baton-mcp-bridge"
    bridge.stdin.close()
    assert bridge.wait(timeout=10) == 0
    assert bridge.stdout.read() == b"", "stdout carries only MCP messages"


def test_an_unreachable_daemon_is_a_tool_error_that_says_how_to_start_it(tmp_path: Any) -> None:
    async def main() -> None:
        async with Client(bridge_params(tmp_path / "absent.sock")) as client:
            result = await client.call_tool("baton_get", {"namespace": "p", "key": "k"})
            assert result.is_error
            assert "batond is not running" in text(result) and "start" in text(result).lower()

    run(main())


def test_a_task_graph_runs_through_the_task_tools(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--tools", "tasks,events", "--owner", "worker")) as w:
            reg = await w.call_tool(
                "baton_task_register",
                {"goal": "ship", "nodes": [{"id": "write"}, {"id": "review", "dependencies": ["write"]}]},
            )
            task_id = reg.structured_content["task_id"]
            first = (await w.call_tool("baton_task_next", {"task_id": task_id})).structured_content
            assert first["status"] == "acquired" and first["node_id"] == "write" and first["lease_owner"] == "worker"
            none = await w.call_tool("baton_task_next", {"task_id": task_id})
            # Nothing runnable while "write" runs: the task is still running, and why.
            nothing = none.structured_content
            assert (nothing["status"], nothing["task_status"]) == ("none", "running"), nothing
            assert "1 held by you (write)" in nothing["why"], nothing
            assert "1 waiting on dependencies" in nothing["why"] and "other workers" not in nothing["why"], nothing
            assert "finish yours" in nothing["why"], nothing
            await w.call_tool("baton_task_event", {"task_id": task_id, "node_id": "write", "lease_id": first["lease_id"], "action_type": "custom.draft", "payload": {"words": 10}})
            await w.call_tool("baton_task_complete", {"task_id": task_id, "node_id": "write", "lease_id": first["lease_id"], "result": "draft v1"})
            second = (await w.call_tool("baton_task_next", {"task_id": task_id})).structured_content
            assert second["context"]["dependency_results"] == {"write": "draft v1"}
            stale = await w.call_tool("baton_task_heartbeat", {"task_id": task_id, "node_id": "write", "lease_id": first["lease_id"]})
            assert stale.is_error and "baton_task_next" in text(stale), text(stale)
            await w.call_tool("baton_task_complete", {"task_id": task_id, "node_id": "review", "lease_id": second["lease_id"]})
            done = await w.call_tool("baton_task_next", {"task_id": task_id})
            assert (done.structured_content["status"], done.structured_content["task_status"]) == ("none", "completed")
            assert "stop" in done.structured_content["why"]
            status = await w.call_tool("baton_task_status", {"task_id": task_id})
            assert status.structured_content["task"]["status"] == "completed"
            events = await w.call_tool("baton_events", {"task_id": task_id})
            assert "custom.draft" in [e["type"] for e in events.structured_content["events"]]
            published = await w.call_tool("baton_publish", {"topic": "review", "payload": {"ok": True}})
            assert published.structured_content["event_seq"] > 0

    run(main())


def test_txn_and_wait_through_the_bridge(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--owner", "a")) as a, Client(
            bridge_params(daemon.socket, "--owner", "b")
        ) as b:
            ops = [
                {"op": "set", "namespace": "order", "key": "items", "value": ["book"]},
                {"op": "set", "namespace": "order", "key": "price", "value": 12},
            ]
            done = await a.call_tool("baton_txn", {"compare": [{"namespace": "order", "key": "items", "version": 0}], "ops": ops})
            assert not done.is_error and len(done.structured_content["results"]) == 2
            again = await b.call_tool("baton_txn", {"compare": [{"namespace": "order", "key": "items", "version": 0}], "ops": ops})
            assert again.is_error and "baton_get" in text(again), text(again)
            assert daemon.call("Get", {"namespace": "order", "key": "price"})["version"] == 1

            lease = (await a.call_tool("baton_claim", {"resource_key": "artifact:report"})).structured_content
            timeout = await b.call_tool("baton_wait", {"resource_key": "artifact:report", "timeout_ms": 50})
            assert timeout.structured_content["status"] == "timeout"
            assert timeout.structured_content["held_by"]["owner"] == "a"

            # (batond's own tests cover a wait woken by the release; here the bridge's path.)
            await a.call_tool("baton_release", {"resource_key": "artifact:report", "lease_id": lease["lease_id"], "outcome": "created"})
            free = await b.call_tool("baton_wait", {"resource_key": "artifact:report", "timeout_ms": 60000})
            assert free.structured_content["status"] == "available", text(free)
            assert free.structured_content["previous"]["outcome"] == "created"

    run(main())


def test_writes_fenced_by_a_lost_claim_are_refused_and_name_the_new_holder(daemon: Daemon) -> None:
    """The stalled agent's story through the bridge: first claims the report and writes
    with the claim's fence; its claim is lost (an operator breaks it, as an expiry would
    end it) and second claims the file; every write first sends with its old fence is
    refused, naming second, and nothing is written."""

    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--tools", "all", "--owner", "first")) as first, Client(
            bridge_params(daemon.socket, "--tools", "all", "--owner", "second")
        ) as second:
            tools = {t.name: t for t in (await first.list_tools()).tools}
            for name in ("baton_set", "baton_delete", "baton_task_complete", "baton_publish"):
                assert "fence" in tools[name].input_schema["properties"], name
            assert "fence" in tools["baton_txn"].input_schema["properties"]["ops"]["items"]["properties"]
            assert "fence" in tools["baton_claim"].description

            task = (await first.call_tool("baton_task_register", {"goal": "report", "nodes": [{"id": "write"}]})).structured_content
            node = (await first.call_tool("baton_task_next", {"task_id": task["task_id"]})).structured_content
            claim = (await first.call_tool("baton_claim", {"resource_key": "file:./report.md"})).structured_content
            fence = claim["fence"]
            assert fence == {"resource_key": "file:report.md", "lease_id": claim["lease_id"]}
            draft = await first.call_tool(
                "baton_set", {"namespace": "docs", "key": "report", "value": "draft 1", "expected_version": 0, "fence": fence}
            )
            assert not draft.is_error, text(draft)

            # first stalls past its lease: its claim ends, and second takes the file over.
            daemon.call("BreakLock", {"resource_key": "file:report.md", "reason": "first stalled past its lease"})
            fresh = (await second.call_tool("baton_claim", {"resource_key": "file:report.md"})).structured_content
            assert fresh["status"] == "acquired" and fresh["fencing_token"] > claim["fencing_token"]
            before = daemon.call("ReadEvents", {"since_seq": 0, "limit": 1000})["next_seq"]
            token_fence = {"resource_key": "file:report.md", "fencing_token": claim["fencing_token"]}
            late = [
                ("baton_set", {"namespace": "docs", "key": "report", "value": "late", "expected_version": 1, "fence": fence}),
                ("baton_set", {"namespace": "docs", "key": "report", "value": "late", "force": True, "fence": token_fence}),
                ("baton_delete", {"namespace": "docs", "key": "report", "expected_version": 1, "fence": fence}),
                ("baton_txn", {"ops": [
                    {"op": "set", "namespace": "docs", "key": "other", "value": 1},
                    {"op": "set", "namespace": "docs", "key": "report", "value": "late", "fence": fence},
                ]}),
                ("baton_publish", {"topic": "report", "payload": {"done": True}, "fence": fence}),
                ("baton_task_complete", {"task_id": task["task_id"], "node_id": "write", "lease_id": node["lease_id"],
                                         "result": "late", "fence": fence}),
            ]
            for tool, args in late:
                refused = await first.call_tool(tool, args)
                assert refused.is_error, (tool, text(refused))
                assert refused.structured_content is None
                hint = refused.content[0].text
                assert hint.startswith("Your claim on file:report.md was lost"), (tool, hint)
                assert "second" in hint and "call baton_claim for file:report.md again" in hint, (tool, hint)
                details = json.loads(refused.content[1].text)
                assert details["kind"] == "fenced" and details["latest_fencing_token"] == fresh["fencing_token"]
                assert details["held_by"]["owner"] == "second"
            assert "the node was not completed" in hint
            # Nothing was written or journalled; the node is still first's.
            assert daemon.call("ReadEvents", {"since_seq": 0, "limit": 1000})["next_seq"] == before
            assert daemon.call("Get", {"namespace": "docs", "key": "report"})["value"] == "draft 1"
            status = daemon.call("TaskStatus", {"task_id": task["task_id"]})
            assert status["nodes"][0]["state"] == "RUNNING"

            # A fence needs exactly one of lease_id and fencing_token; a field it does not
            # have is the bridge's to refuse.
            both = await first.call_tool(
                "baton_set",
                {"namespace": "docs", "key": "report", "value": 0, "force": True, "fence": {**fence, "fencing_token": 1}},
            )
            assert both.is_error and "exactly one of lease_id" in text(both), text(both)
            unknown = await first.call_tool(
                "baton_publish", {"topic": "t", "payload": 1, "fence": {**fence, "owner": "first"}}
            )
            assert unknown.is_error and '"fence" has no field "owner"' in text(unknown), text(unknown)

            # The new holder's fenced writes land.
            final = await second.call_tool(
                "baton_set", {"namespace": "docs", "key": "report", "value": "final", "expected_version": 1, "fence": fresh["fence"]}
            )
            assert not final.is_error and final.structured_content["version"] == 2, text(final)
            done = await second.call_tool(
                "baton_txn", {"ops": [{"op": "set", "namespace": "docs", "key": "other", "value": 2, "fence": fresh["fence"]}]}
            )
            assert not done.is_error, text(done)
            published = await second.call_tool("baton_publish", {"topic": "report", "payload": {}, "fence": fresh["fence"]})
            assert not published.is_error, text(published)

    run(main())


def test_labelled_prioritized_nodes_and_why_a_worker_gets_none(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--tools", "tasks", "--owner", "cpu-worker")) as w:
            reg = await w.call_tool(
                "baton_task_register",
                {"goal": "train", "nodes": [
                    {"id": "fit", "labels": ["gpu"], "priority": 5},
                    {"id": "report", "dependencies": ["fit"], "priority": -1},
                ]},
            )
            assert not reg.is_error, text(reg)
            task_id = reg.structured_content["task_id"]
            nodes = daemon.call("TaskStatus", {"task_id": task_id})["nodes"]
            assert nodes[0]["labels"] == ["gpu"] and nodes[1]["labels"] == []
            # A worker without labels: nobody holds anything; the truth is the labels.
            none = (await w.call_tool("baton_task_next", {"task_id": task_id})).structured_content
            assert none["status"] == "none" and none["task_status"] == "running", none
            why = none["why"]
            assert "held by" not in why, why
            assert "1 that need labels you did not give (gpu)" in why, why
            assert "1 waiting on dependencies" in why, why
            assert none["remaining"]["labels_needed"] == ["gpu"]
            bad = await w.call_tool("baton_task_register", {"goal": "g", "nodes": [{"priority": "high"}]})
            assert bad.is_error and "priority" in text(bad), text(bad)
            got = (await w.call_tool("baton_task_next", {"task_id": task_id, "labels": ["gpu"]})).structured_content
            assert got["status"] == "acquired" and got["node_id"] == "fit", got

    run(main())


def test_the_status_of_a_key_with_slots_and_a_wrong_recipient(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--tools", "all", "--owner", "a")) as a, Client(
            bridge_params(daemon.socket, "--tools", "all", "--owner", "b")
        ) as b:
            for c in (a, b):
                took = await c.call_tool("baton_claim", {"resource_key": "tool:build-box", "slots": 2})
                assert took.structured_content["status"] == "acquired", text(took)
            status = await a.call_tool("baton_lock_status", {"resource_key": "tool:build-box"})
            assert not status.is_error, text(status)
            assert [h["owner"] for h in status.structured_content["held_by"]] == ["a", "b"]
            await a.call_tool("baton_join", {"name": "ann"})
            wrong = await a.call_tool("baton_send", {"to": "bob", "body": "hi"})
            assert wrong.is_error, text(wrong)
            assert '"to" is the string "bob"' in text(wrong) and '["bob"]' in text(wrong), text(wrong)
            assert "any JSON" not in text(wrong)
            nobody = await a.call_tool("baton_send", {"to": ["bob"]})
            assert nobody.is_error and '"body" is missing' in text(nobody), text(nobody)

    run(main())


def raw_bridge(daemon: Daemon) -> subprocess.Popen:
    return subprocess.Popen(
        [str(BIN_DIR / "mcp-bridge"), "--socket", str(daemon.socket)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "RUST_LOG": "warn"},
    )


def test_closing_stdin_before_initialize_exits_cleanly(daemon: Daemon) -> None:
    bridge = raw_bridge(daemon)
    bridge.stdin.close()
    assert bridge.wait(timeout=10) == 0, bridge.stderr.read()
    assert bridge.stdout.read() == b""


def test_protocol_faults_are_json_rpc_errors_and_a_waiting_call_does_not_hold_the_exit(daemon: Daemon) -> None:
    bridge = raw_bridge(daemon)

    def send(message: Any) -> None:
        line = message if isinstance(message, str) else json.dumps(message)
        bridge.stdin.write((line + "\n").encode())
        bridge.stdin.flush()

    def answer() -> Any:
        return json.loads(bridge.stdout.readline())

    # initialize without its fields is told which it needs (not a newer protocol's _meta).
    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
    empty = answer()
    assert empty["id"] == 0 and empty["error"]["code"] == -32602, empty
    for field in ("protocolVersion", "capabilities", "clientInfo"):
        assert field in empty["error"]["message"], empty
    assert "_meta" not in empty["error"]["message"]
    send({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    })
    assert answer()["id"] == 1
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send("{this is not json")
    parse = answer()
    assert parse["id"] is None and parse["error"]["code"] == -32700, parse
    for bad_id in [{"a": 1}, 1.5, True, 2**63, None]:
        send({"jsonrpc": "2.0", "id": bad_id, "method": "tools/list"})
        refused = answer()
        assert refused["id"] == bad_id and refused["error"]["code"] == -32600, refused
        assert "string or an integer" in refused["error"]["message"]
    # A request without a method is answered with its id; arguments must be an object.
    send({"jsonrpc": "2.0", "id": 11, "params": {}})
    methodless = answer()
    assert methodless["id"] == 11 and methodless["error"]["code"] == -32600, methodless
    send({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "baton_get", "arguments": [1]}})
    listed = answer()
    assert listed["id"] == 12 and listed["error"]["code"] == -32602, listed
    assert "arguments" in listed["error"]["message"] and "object" in listed["error"]["message"], listed
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"arguments": {}}})
    nameless = answer()
    assert nameless["id"] == 2 and nameless["error"]["code"] == -32602, nameless
    assert "baton_get" in nameless["error"]["message"]
    send({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": "bogus"}})
    cursor = answer()
    assert cursor["id"] == 3 and cursor["error"]["code"] == -32602, cursor
    # A claim queued behind another holder, then the client goes away.
    daemon.call("AcquireResourceLock", {"resource_key": "tool:held", "owner": "other"})
    send({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
          "params": {"name": "baton_claim", "arguments": {"resource_key": "tool:held", "wait_ms": 600000}}})
    deadline = time.monotonic() + 30
    while daemon.call("Metrics")["locks"]["waiting"] != 1:
        assert time.monotonic() < deadline, "the claim never queued"
        time.sleep(0.01)
    started = time.monotonic()
    bridge.stdin.close()
    assert bridge.wait(timeout=30) == 0
    assert time.monotonic() - started < 2.5, "the waiting call held the exit"
    assert b"not JSON" in bridge.stderr.read()  # and logged at warn


def test_the_agent_name_comes_from_the_flag_or_baton_agent(daemon: Daemon) -> None:
    from mcp import StdioServerParameters

    def params(env: dict[str, str], *args: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=str(BIN_DIR / "mcp-bridge"),
            args=["--socket", str(daemon.socket), *args],
            env={"PATH": os.environ.get("PATH", ""), "RUST_LOG": "warn", **env},
        )

    async def main() -> None:
        for env, args, expected in [
            ({"BATON_AGENT": "carol"}, (), "carol"),
            ({"BATON_AGENT": "carol"}, ("--agent", "dave"), "dave"),
            ({"BATON_AGENT": ""}, ("--owner", "erin"), "erin"),
        ]:
            async with Client(params(env, *args)) as client:
                claim = await client.call_tool("baton_claim", {"resource_key": f"tool:{expected}"})
                assert claim.structured_content["owner"] == expected, text(claim)
                written = await client.call_tool("baton_set", {"namespace": "who", "key": expected, "value": 1, "force": True})
                assert not written.is_error, text(written)
                assert daemon.call("Get", {"namespace": "who", "key": expected})["updated_by"] == expected

    run(main())


def test_help_and_version_describe_the_bridge() -> None:
    bridge = str(BIN_DIR / "mcp-bridge")
    version = subprocess.run([bridge, "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("mcp-bridge "), version
    helped = subprocess.run([bridge, "--help"], capture_output=True, text=True, check=True).stdout
    assert helped.startswith("mcp-bridge: an MCP server over stdio"), helped
    assert "--agent" in helped and "--tools" in helped
    assert "locks, state, tasks, events, agents, or all" in helped, helped


def test_agents_join_message_each_other_and_their_claims_end_with_the_session(daemon: Daemon) -> None:
    async def main() -> None:
        async with Client(bridge_params(daemon.socket, "--tools", "all")) as a, Client(
            bridge_params(daemon.socket, "--tools", "all", "--agent", "bob")
        ) as b:
            early = await a.call_tool("baton_send", {"to": ["bob"], "body": "hi"})
            assert early.is_error and "baton_join" in text(early), text(early)
            joined = await a.call_tool("baton_join", {"name": "alice", "role": "planner"})
            assert not joined.is_error, text(joined)
            assert joined.structured_content["name"] == "alice"
            assert "session_id" not in joined.structured_content, "the secret stays with the bridge"
            # Alice's claims now carry her name and end with her session.
            claim = await a.call_tool("baton_claim", {"resource_key": "tool:deploy"})
            assert claim.structured_content["owner"] == "alice"
            sent = await a.call_tool(
                "baton_send", {"to": ["bob"], "body": {"pr": 7}, "subject": "review please"}
            )
            assert not sent.is_error, text(sent)
            # bob joined at start with --agent.
            inbox = await b.call_tool("baton_inbox", {"wait_ms": 30000})
            message = inbox.structured_content["messages"][0]
            assert message["from"] == "alice" and message["body"] == {"pr": 7}
            acked = await b.call_tool("baton_ack", {"up_to": message["seq"]})
            assert acked.structured_content == {"acked": 1, "unread": 0}
            agents = (await b.call_tool("baton_agents", {})).structured_content["agents"]
            by_name = {x["name"]: x for x in agents}
            assert by_name["alice"]["locks"] == ["tool:deploy"], agents
            assert "bob" in by_name
        # Both MCP sessions are over: so are the agents and what they held.
        async with Client(bridge_params(daemon.socket, "--tools", "all")) as c:
            # batond sees the connections close on its own time: wait for it, boundedly.
            for _ in range(200):
                if (await c.call_tool("baton_agents", {})).structured_content["agents"] == []:
                    break
                await anyio.sleep(0.05)
            assert (await c.call_tool("baton_agents", {})).structured_content["agents"] == []
            status = (await c.call_tool("baton_lock_status", {"resource_key": "tool:deploy"})).structured_content
            assert status["status"] == "available", status

    run(main())


def test_the_bridge_logs_no_lease_id_even_at_debug(daemon: Daemon, tmp_path: Any) -> None:
    params = bridge_params(daemon.socket)
    params.env["RUST_LOG"] = "debug"
    log_path = tmp_path / "bridge.log"

    async def main() -> str:
        with open(log_path, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    claim = await session.call_tool("baton_claim", {"resource_key": "tool:x"})
                    assert not claim.is_error, text(claim)
                    lease_id = claim.structured_content["lease_id"]
                    fenced = await session.call_tool(
                        "baton_set",
                        {"namespace": "n", "key": "k", "value": 1, "force": True, "fence": claim.structured_content["fence"]},
                    )
                    assert not fenced.is_error, text(fenced)
                    released = await session.call_tool("baton_release", {"resource_key": "tool:x", "lease_id": lease_id})
                    assert not released.is_error, text(released)
                    return str(lease_id)

    lease_id = run(main())
    log = log_path.read_text()
    assert "client initialized" in log, "logging was on"
    assert lease_id not in log


ANY_JSON = [{"a": [1, None]}, [1, "x"], "text", 1.5, -2, True, None]


def test_any_json_is_typed_in_inputs_and_untyped_in_outputs(daemon: Daemon) -> None:
    """An input property always has a type (one anyOf branch per JSON type: a `type` array
    is refused by Gemini's function declarations); an any-JSON output field has none, since
    the Python SDK 1.x compiles the outputSchema again for every result and the branches
    made that the larger part of a baton_get call. Both admit exactly every JSON value."""
    from jsonschema import Draft202012Validator

    def any_json_branches(schema: Any) -> bool:
        return isinstance(schema.get("anyOf"), list) and {b.get("type") for b in schema["anyOf"]} == {
            "object", "array", "string", "number", "boolean", "null",
        }

    def branched(schema: Any) -> list[Any]:
        """The subschemas of `schema` (itself included) that list the six branches."""
        if isinstance(schema, dict):
            return [schema] * any_json_branches(schema) + [b for v in schema.values() for b in branched(v)]
        if isinstance(schema, list):
            return [b for v in schema for b in branched(v)]
        return []

    async def main() -> dict[str, Any]:
        async with Client(bridge_params(daemon.socket, "--tools", "all")) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    tools = run(main())
    for tool in tools.values():
        assert not branched(tool.output_schema), (tool.name, branched(tool.output_schema))
    value_in = tools["baton_set"].input_schema["properties"]["value"]
    assert any_json_branches(value_in)
    value_out = tools["baton_get"].output_schema["properties"]["value"]
    assert "type" not in value_out and "anyOf" not in value_out and value_out["description"]
    record = {"found": True, "namespace": "n", "key": "k", "version": 1, "updated_by": None}
    for schema in (value_in, tools["baton_get"].output_schema):
        validator = Draft202012Validator(schema)
        for value in ANY_JSON:
            instance = {**record, "value": value} if "properties" in schema else value
            assert validator.is_valid(instance), (schema, value)


# What a model reads of tools/list: each tool's name, description and input schema, as a
# host hands them to a model API, in compact JSON. Tokens are approximated as chars/4,
# which over-counts OpenAI's o200k_base and cl100k_base tokenizers on these schemas by
# about a tenth (scripts/bench mcp prints both): a bound that holds for them too.
DEFAULT_TOOLS_TOKEN_BUDGET = 3000


def approx_tokens_read_by_a_model(tools: list[Any]) -> int:
    read = [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools]
    return len(json.dumps(read, separators=(",", ":"))) // 4


def test_the_default_tools_cost_a_model_under_3000_tokens(daemon: Daemon) -> None:
    async def main() -> tuple[int, int]:
        async with Client(bridge_params(daemon.socket)) as client:
            tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == LOCKS | STATE
        async with Client(bridge_params(daemon.socket, "--tools", "all")) as client:
            everything = (await client.list_tools()).tools
        return approx_tokens_read_by_a_model(tools), approx_tokens_read_by_a_model(everything)

    default, everything = run(main())
    assert default <= DEFAULT_TOOLS_TOKEN_BUDGET, (
        f"the default tools cost ~{default} tokens (chars/4); trim descriptions back under {DEFAULT_TOOLS_TOKEN_BUDGET}"
    )
    assert default < everything

