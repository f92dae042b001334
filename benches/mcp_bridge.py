"""mcp-bridge round trips with the official MCP Python SDK: 1,000 sequential baton_get
and baton_set calls through one bridge session against a fresh release batond.
Usage: python benches/mcp_bridge.py BIN_DIR [CALLS]"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import batonproc  # noqa: E402  (the tests' Daemon and bridge parameters)


async def measure(socket: Path, calls: int) -> tuple[float, float, float, float]:
    async with Client(batonproc.bridge_params(socket)) as client:
        await client.call_tool("baton_set", {"namespace": "bench", "key": "k", "value": {"usd": 1}, "force": True})
        gets, sets = [], []
        for _ in range(calls):
            start = time.perf_counter()
            result = await client.call_tool("baton_get", {"namespace": "bench", "key": "k"})
            gets.append(time.perf_counter() - start)
            assert not result.is_error
        version = result.structured_content["version"]
        for _ in range(calls):
            start = time.perf_counter()
            result = await client.call_tool(
                "baton_set", {"namespace": "bench", "key": "k", "value": {"usd": version}, "expected_version": version}
            )
            sets.append(time.perf_counter() - start)
            assert not result.is_error, result
            version = result.structured_content["version"]
    gets.sort()
    sets.sort()
    p99 = lambda xs: xs[int(len(xs) * 0.99)]  # noqa: E731
    return statistics.median(gets) * 1e3, p99(gets) * 1e3, statistics.median(sets) * 1e3, p99(sets) * 1e3


def main() -> None:
    batonproc.BIN_DIR = Path(sys.argv[1])
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    with tempfile.TemporaryDirectory(prefix="baton-mcp-bench-") as home:
        daemon = batonproc.Daemon(Path(home))
        try:
            get50, get99, set50, set99 = anyio.run(measure, daemon.socket, calls)
        finally:
            daemon.stop()
    rows = [
        (f"MCP baton_get, {calls} sequential", f"median {get50:.2f} ms, p99 {get99:.2f} ms", "median <= 1.5 ms", get50 <= 1.5),
        (f"MCP baton_set, {calls} sequential", f"median {set50:.2f} ms, p99 {set99:.2f} ms", "median <= 3 ms", set50 <= 3.0),
    ]
    for name, figure, target, ok in rows:
        print(f"{name:<36} {figure:<48} {target:<18} {'PASS' if ok else 'MISS'}")


if __name__ == "__main__":
    main()
