"""mcp-bridge round trips with the official MCP Python SDK, whichever version the running
Python has (scripts/bench runs it with 2.3.0 from scripts/python-env and with 1.30.0, the
one LangChain's MCP adapters install, from scripts/python-env --bench): sequential
baton_get and baton_set calls through one session against a fresh release batond; what
checking a baton_get result against its outputSchema costs this SDK, with the schema as
served and in its form before issue 39 (any-JSON fields as a six-branch anyOf), measured
with the SDK's own check and end to end, in turns; with --sizes, what a model reads of
tools/list for the default groups and for all.

Over stdio (an mcp-bridge process) and over batond's own /mcp (Streamable HTTP, with a
token), each through one session.

Usage: python benches/mcp_bridge.py BIN_DIR [CALLS] [--sizes]"""

from __future__ import annotations

import contextlib
import json
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, AsyncIterator, TextIO

import anyio
from mcp import ClientSession
from mcp.client.stdio import stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import batonproc  # noqa: E402  (the tests' Daemon and bridge parameters)

SDK = version("mcp")
# The SDK the targets are for (tests/requirements.txt); other versions are measured
# for comparison.
TARGETED = SDK.startswith("2.")
# The any-JSON form before issue 39, which output schemas no longer use.
ANY_JSON_BRANCHES = [{"type": t} for t in ("object", "array", "string", "number", "boolean", "null")]


@dataclass
class Transport:
    """Where the MCP endpoint is: `stdio` (an mcp-bridge for the daemon's socket, with
    `args`), or `http` (batond's own `/mcp` at `url`, with a bearer `token`)."""

    kind: str
    socket: Path | None = None
    args: list[str] = field(default_factory=list)
    url: str = ""
    token: str = ""


@contextlib.asynccontextmanager
async def open_session(transport: Transport, errlog: TextIO = sys.stderr) -> AsyncIterator[ClientSession]:
    """An initialized session over `transport` (a bridge's stderr goes to `errlog`).
    Streamable HTTP: `streamable_http_client` with an httpx2 client carrying the token in
    2.x, `streamablehttp_client(url, headers=...)` in 1.x; both yield the same first two
    streams."""
    if transport.kind == "http":
        headers = {"Authorization": f"Bearer {transport.token}"}
        if TARGETED:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
                async with streamable_http_client(transport.url, http_client=http) as streams:
                    async with ClientSession(streams[0], streams[1]) as session:
                        await session.initialize()
                        yield session
        else:
            from mcp.client.streamable_http import streamablehttp_client  # type: ignore[attr-defined]

            async with streamablehttp_client(transport.url, headers=headers) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    yield session
        return
    params = batonproc.bridge_params(transport.socket, *transport.args)
    async with stdio_client(params, errlog=errlog) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            yield session


def attr(obj: Any, snake: str, camel: str) -> Any:
    """A field of an SDK type: 2.x spells it in snake case, 1.x as on the wire."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


async def check_result(session: ClientSession, name: str, result: Any) -> None:
    """The SDK's own check of a result against the cached outputSchema of `name`."""
    check = getattr(session, "validate_tool_result", None) or getattr(session, "_validate_tool_result")
    await check(name, result)


def cache_schema(session: ClientSession, name: str, schema: dict[str, Any]) -> None:
    """Makes the session check `name`'s results against `schema` (2.x also keeps the
    compiled validator; it is built again on the next result)."""
    session._tool_output_schemas[name] = schema
    getattr(session, "_tool_output_validators", {}).pop(name, None)


def with_typed_any(schema: Any) -> Any:
    """`schema` with each untyped property given the six typed branches: the form the
    bridge served before issue 39."""
    if not isinstance(schema, dict):
        return schema
    out = {k: with_typed_any(v) for k, v in schema.items() if k != "properties"}
    if "properties" in schema:
        out["properties"] = {
            name: with_typed_any(p if "type" in p or "anyOf" in p else {**p, "anyOf": ANY_JSON_BRANCHES})
            for name, p in schema["properties"].items()
        }
    return out


def median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3


def p99_ms(xs: list[float]) -> float:
    return sorted(xs)[int(len(xs) * 0.99)] * 1e3


async def timed(session: ClientSession, name: str, args: dict[str, Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await session.call_tool(name, args)
    elapsed = time.perf_counter() - start
    assert not attr(result, "is_error", "isError"), result
    return elapsed, result


async def measure(transport: Transport, calls: int, errlog: TextIO) -> list[tuple[str, str, str, bool | None]]:
    """Sequential baton_get and baton_set through `transport`; over stdio also what
    checking a result costs (the same whatever carries it)."""
    rows: list[tuple[str, str, str, bool | None]] = []
    async with open_session(transport, errlog) as session:
        await session.list_tools()
        get = {"namespace": "bench", "key": "k"}
        await timed(session, "baton_set", {**get, "value": {"usd": 1}, "force": True})
        gets, sets = [], []
        for _ in range(calls):
            elapsed, result = await timed(session, "baton_get", get)
            gets.append(elapsed)
        version_ = attr(result, "structured_content", "structuredContent")["version"]
        for _ in range(calls):
            elapsed, written = await timed(
                session, "baton_set", {**get, "value": {"usd": version_}, "expected_version": version_}
            )
            sets.append(elapsed)
            version_ = attr(written, "structured_content", "structuredContent")["version"]
        label = f"MCP (Python SDK {SDK})" + (" over /mcp" if transport.kind == "http" else "")
        # The targets are the stdio bridge's; /mcp is reported beside it.
        targeted = TARGETED and transport.kind == "stdio"
        for tool, xs, target in (("baton_get", gets, 1.5), ("baton_set", sets, 3.0)):
            ok = median_ms(xs) <= target if targeted else None
            rows.append((
                f"{label} {tool}, {calls} seq.",
                f"median {median_ms(xs):.2f} ms, p99 {p99_ms(xs):.2f} ms",
                f"median <= {target:g} ms" if targeted else "-",
                ok,
            ))
        if transport.kind == "http":
            return rows

        # A baton_get result checked against its outputSchema, as served and as it was.
        _, result = await timed(session, "baton_get", get)
        served = session._tool_output_schemas["baton_get"]
        assert served is not None, "baton_get has no outputSchema"
        before = with_typed_any(served)
        assert before != served, "baton_get's outputSchema has no untyped field: nothing to compare"
        cache_schema(session, "baton_get@served", served)
        cache_schema(session, "baton_get@before", before)
        checks: dict[str, list[float]] = {"served": [], "before": []}
        for _ in range(max(calls // 100, 2)):
            for form in ("served", "before"):
                for _ in range(50):
                    start = time.perf_counter()
                    await check_result(session, f"baton_get@{form}", result)
                    checks[form].append(time.perf_counter() - start)
        ratio = median_ms(checks["before"]) / median_ms(checks["served"])
        rows.append((
            f"{label} check of a baton_get result",
            f"{median_ms(checks['before']):.3f} ms before, {median_ms(checks['served']):.3f} ms now ({ratio:.1f}x)",
            "now <= before",
            median_ms(checks["served"]) <= median_ms(checks["before"]),
        ))

        # The same, end to end: baton_get calls in turns of 50 with either schema cached.
        e2e: dict[str, list[float]] = {"served": [], "before": []}
        for _ in range(max(calls // 100, 2)):
            for form, schema in (("served", served), ("before", before)):
                cache_schema(session, "baton_get", schema)
                for _ in range(50):
                    elapsed, _ = await timed(session, "baton_get", get)
                    e2e[form].append(elapsed)
        ratio = median_ms(e2e["before"]) / median_ms(e2e["served"])
        rows.append((
            f"{label} baton_get, by schema",
            f"median {median_ms(e2e['before']):.2f} ms before, {median_ms(e2e['served']):.2f} ms now ({ratio:.2f}x)",
            "-",
            None,
        ))
    return rows


def model_reads(tools: list[Any]) -> str:
    """What a host hands a model of tools/list: each tool's name, description and input
    schema, as compact JSON."""
    return json.dumps(
        [
            {"name": t.name, "description": t.description, "input_schema": attr(t, "input_schema", "inputSchema")}
            for t in tools
        ],
        separators=(",", ":"),
    )


def tokenizers() -> list[tuple[str, Any]]:
    """Real tokenizers when installed (bpe-openai ships its vocabularies; tiktoken would
    download them), else none: chars/4 is always given."""
    try:
        import bpe_openai  # type: ignore[import-not-found]
    except ImportError:
        return []
    return [(name, bpe_openai.get_encoding(name)) for name in ("o200k_base", "cl100k_base")]


async def sizes(socket: Path, errlog: TextIO) -> list[tuple[str, str, str, bool | None]]:
    rows: list[tuple[str, str, str, bool | None]] = []
    encodings = tokenizers()
    for groups, args in (("default groups", []), ("all", ["--tools", "all"])):
        async with open_session(Transport("stdio", socket, args), errlog) as session:
            tools = (await session.list_tools()).tools
        text = model_reads(tools)
        counted = ", ".join(f"{len(e.encode(text))} {name}" for name, e in encodings)
        approx = len(text) // 4
        default = groups == "default groups"
        rows.append((
            f"MCP tools/list, {groups}",
            f"{len(tools)} tools, ~{approx} tokens (chars/4){'; ' + counted if counted else ''}",
            "<= 3000 tokens" if default else "-",
            approx <= 3000 if default else None,
        ))
    return rows


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    batonproc.BIN_DIR = Path(args[0])
    calls = int(args[1]) if len(args) > 1 else 1000
    with tempfile.TemporaryDirectory(prefix="baton-mcp-bench-") as home:
        # /mcp on a free loopback port, found the usual way; batond binds it before Health.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        daemon = batonproc.Daemon(Path(home), ["--http", f"127.0.0.1:{port}"])
        token = daemon.call("CreateToken", {"name": "bench", "scopes": ["kv:write:bench", "locks:*"]})["token"]
        over_http = Transport("http", url=f"http://127.0.0.1:{port}/mcp", token=token)
        # The bridges' logs (rmcp logs every session at info), shown only if a run fails.
        errlog = open(Path(home) / "bridges.log", "w+")
        try:
            rows = anyio.run(measure, Transport("stdio", daemon.socket), calls, errlog)
            rows += anyio.run(measure, over_http, calls, errlog)
            if "--sizes" in sys.argv:
                rows += anyio.run(sizes, daemon.socket, errlog)
        except BaseException:
            errlog.seek(0)
            sys.stderr.write(errlog.read()[-4000:])
            raise
        finally:
            errlog.close()
            daemon.stop()
    for name, figure, target, ok in rows:
        verdict = "" if ok is None else "PASS" if ok else "MISS"
        print(f"{name:<44} {figure:<54} {target:<18} {verdict}".rstrip())


if __name__ == "__main__":
    main()
