"""MCP over HTTP at batond's /mcp, end to end with the official MCP Python SDK's
Streamable HTTP client: tools, calls, errors, tokens and grants, and sessions that end."""

from __future__ import annotations

import json
import socket
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Iterator, Tuple

import anyio
import httpx2
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from batonproc import Daemon, running_daemon

LOCKS = {"baton_claim", "baton_heartbeat", "baton_release", "baton_lock_status", "baton_wait", "baton_locks"}
STATE = {"baton_get", "baton_set", "baton_delete", "baton_list", "baton_history", "baton_txn"}


@pytest.fixture
def http_daemon() -> Iterator[Tuple[Daemon, str]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # A short idle TTL, for the test of a session that is dropped without a goodbye.
    with running_daemon("baton-mcp-http-", ["--http", f"127.0.0.1:{port}", "--mcp-idle-ms", "1500"]) as d:
        yield d, f"http://127.0.0.1:{port}/mcp"


def token(daemon: Daemon, name: str, *scopes: str) -> str:
    return str(daemon.call("CreateToken", {"name": name, "scopes": list(scopes)})["token"])


def text(result: Any) -> str:
    return " ".join(c.text for c in result.content if getattr(c, "type", "") == "text")


@asynccontextmanager
async def session(url: str, secret: str, terminate: bool = True) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=30) as http:
        async with streamable_http_client(url, http_client=http, terminate_on_close=terminate) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                yield s


def wait_until_free(daemon: Daemon, key: str, within_s: float) -> bool:
    """Polls the lock's status (no guessed sleep: the condition ends the wait)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if daemon.call("ResourceLockStatus", {"resource_key": key})["status"] == "available":
            return True
        time.sleep(0.05)
    return False


def test_tools_are_listed_and_called_with_errors_as_results(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, url = http_daemon
    secret = token(daemon, "builder", "kv:write:*", "locks:*")

    async def main() -> None:
        async with session(url, secret) as s:
            tools = await s.list_tools()
            assert {t.name for t in tools.tools} == LOCKS | STATE
            done = await s.call_tool("baton_set", {"namespace": "p", "key": "k", "value": {"n": 1}, "expected_version": 0})
            assert not done.is_error, text(done)
            assert done.structured_content["version"] == 1
            got = await s.call_tool("baton_get", {"namespace": "p", "key": "k"})
            assert got.structured_content["value"] == {"n": 1}
            # The model's mistakes are results it reads, as over stdio.
            stale = await s.call_tool("baton_set", {"namespace": "p", "key": "k", "value": 2, "expected_version": 0})
            assert stale.is_error and "baton_get" in text(stale)
        async with session(url + "?tools=all", secret) as s:
            names = {t.name for t in (await s.list_tools()).tools}
            assert LOCKS | STATE | {"baton_task_next", "baton_join"} <= names

    anyio.run(main)
    assert daemon.call("Get", {"namespace": "p", "key": "k"})["version"] == 1


def test_claims_are_owned_by_the_tokens_name_and_end_with_the_session(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, url = http_daemon
    secret = token(daemon, "builder", "locks:*")

    async def main() -> None:
        async with session(url, secret) as s:
            claim = await s.call_tool("baton_claim", {"resource_key": "file:src/app.py", "ttl_secs": 600})
            assert not claim.is_error, text(claim)
            assert claim.structured_content["status"] == "acquired"
            holders = daemon.call("ResourceLockStatus", {"resource_key": "file:src/app.py"})
            assert holders["status"] == "held" and "builder" in json.dumps(holders)
        # The client's DELETE ended the MCP session: its claim went with it.
        assert wait_until_free(daemon, "file:src/app.py", within_s=10)

    anyio.run(main)


def test_a_session_dropped_without_goodbye_idles_out_and_frees_its_claims(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, url = http_daemon
    secret = token(daemon, "wanderer", "locks:*")

    async def main() -> None:
        async with session(url, secret, terminate=False) as s:
            claim = await s.call_tool("baton_claim", {"resource_key": "file:tmp/x", "ttl_secs": 600})
            assert not claim.is_error, text(claim)
        # No DELETE: the claim stays while the session may still come back...
        assert daemon.call("ResourceLockStatus", {"resource_key": "file:tmp/x"})["status"] == "held"

    anyio.run(main)
    # ...and ends when the session has been idle for BATON_MCP_IDLE_MS (1.5 s here).
    assert wait_until_free(daemon, "file:tmp/x", within_s=30)


def test_a_wrong_or_missing_token_is_401_with_a_bearer_challenge(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, url = http_daemon
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        r = httpx2.post(url, json=init, headers={**accept, **headers})
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert "token" in r.text
    # The dashboard's login cookie does not reach /mcp.
    secret = token(daemon, "viewer", "read")
    r = httpx2.post(url, json=init, headers={**accept, "Cookie": f"baton_session={secret}"})
    assert r.status_code == 401

    async def main() -> None:
        with pytest.raises(Exception):
            async with session(url, "not-a-token"):
                pass

    anyio.run(main)


def test_a_token_without_the_grant_is_refused_with_the_grant_named(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, url = http_daemon
    reader = token(daemon, "reader", "kv:read:*")

    async def main() -> None:
        async with session(url, reader) as s:
            refused = await s.call_tool("baton_set", {"namespace": "p", "key": "k", "value": 1, "expected_version": 0})
            assert refused.is_error
            assert "kv:write:p" in text(refused), text(refused)
            claim = await s.call_tool("baton_claim", {"resource_key": "file:a"})
            assert claim.is_error and "locks:" in text(claim), text(claim)

    anyio.run(main)
    assert daemon.call("Get", {"namespace": "p", "key": "k"})["found"] is False


def test_agent_in_the_query_needs_the_tokens_grant(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, url = http_daemon
    plain = token(daemon, "alice", "locks:*")
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = httpx2.post(url + "?agent=mallory", json=init, headers={
        "Authorization": f"Bearer {plain}", "Accept": "application/json, text/event-stream"})
    assert r.status_code == 403 and "agents:mallory" in r.text, r.text
    r = httpx2.post(url + "?tools=nope", json=init, headers={
        "Authorization": f"Bearer {plain}", "Accept": "application/json, text/event-stream"})
    assert r.status_code == 400 and "?tools=" in r.text, r.text

    team = token(daemon, "lead", "locks:*", "agents:team-*")

    async def main() -> None:
        async with session(url + "?agent=team-7", team) as s:
            claim = await s.call_tool("baton_claim", {"resource_key": "file:b"})
            assert not claim.is_error, text(claim)
            assert "team-7" in json.dumps(daemon.call("ResourceLockStatus", {"resource_key": "file:b"}))

    anyio.run(main)


def test_an_agent_session_joins_as_the_token_and_leaves_with_the_mcp_session(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, url = http_daemon
    secret = token(daemon, "reviewer", "locks:*", "agents")

    def live_agents() -> set[str]:
        return {a["name"] for a in daemon.call("ListAgents", {})["agents"]}

    async def main() -> None:
        async with session(url + "?tools=locks,agents", secret) as s:
            sent = await s.call_tool("baton_send", {"to": ["reviewer"], "subject": "hi", "body": {"pr": 7}})
            assert not sent.is_error, text(sent)
            assert "reviewer" in live_agents()
            inbox = await s.call_tool("baton_inbox", {})
            assert not inbox.is_error, text(inbox)
            assert "hi" in text(inbox)
        deadline = time.monotonic() + 10
        while "reviewer" in live_agents() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "reviewer" not in live_agents()

    anyio.run(main)


def test_a_session_is_used_only_with_the_token_that_opened_it(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, url = http_daemon
    first = token(daemon, "first", "kv:write:*")
    second = token(daemon, "second", "kv:read:*")
    accept = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    opened = httpx2.post(url, json=init, headers={**accept, "Authorization": f"Bearer {first}"})
    assert opened.status_code == 200, opened.text
    session_id = opened.headers["mcp-session-id"]
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    other = httpx2.post(url, json=call, headers={**accept, "Authorization": f"Bearer {second}", "Mcp-Session-Id": session_id})
    assert "another token" in other.text, other.text
    same = httpx2.post(url, json=call, headers={**accept, "Authorization": f"Bearer {first}", "Mcp-Session-Id": session_id})
    assert "baton_set" in same.text, same.text


def test_a_client_that_probes_with_discover_falls_back_to_a_session(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, url = http_daemon
    secret = token(daemon, "prober", "kv:write:*", "locks:*")

    async def main() -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=30) as http:
            # mode="auto" (the default) sends server/discover first; /mcp offers only the
            # versions with a handshake, so the SDK initializes a session instead.
            async with Client(streamable_http_client(url, http_client=http)) as client:
                assert client.session.protocol_version == "2025-11-25"
                names = {t.name for t in (await client.list_tools()).tools}
                assert names == LOCKS | STATE
                done = await client.call_tool("baton_set", {"namespace": "d", "key": "k", "value": True, "expected_version": 0})
                assert not done.is_error, text(done)

    anyio.run(main)
    assert daemon.call("Get", {"namespace": "d", "key": "k"})["value"] is True
