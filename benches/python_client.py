"""The Python client's side of benches/node_client.mjs: Get and Set round trips through
the Python client (sync Client and AsyncClient) against the batond at SOCKET; prints one
JSON object of figures (milliseconds). Usage: python benches/python_client.py SOCKET CALLS"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python"))
from baton import AsyncClient, Client  # noqa: E402  (the checkout's client, no install needed)


def figures(xs: List[float]) -> Dict[str, float]:
    xs = sorted(xs)
    return {"median": statistics.median(xs) * 1e3, "p99": xs[int(len(xs) * 0.99)] * 1e3}


def sync(socket: str, calls: int) -> Dict[str, Dict[str, float]]:
    with Client(socket) as c:
        c.set("bench-py", "k", {"usd": 0})
        for _ in range(200):  # warm up, as the Node side does
            c.get("bench-py", "k")
        gets, sets = [], []
        for _ in range(calls):
            start = time.perf_counter()
            c.get("bench-py", "k")
            gets.append(time.perf_counter() - start)
        version = c.get("bench-py", "k").version
        for _ in range(calls):
            start = time.perf_counter()
            version = c.set("bench-py", "k", {"usd": version}, expected_version=version).version
            sets.append(time.perf_counter() - start)
        start = time.perf_counter()
        p = c.pipeline()
        for _ in range(calls):
            p.call("Get", {"namespace": "bench-py", "key": "k"})
        p.execute()
        pipelined = time.perf_counter() - start
    return {"get": figures(gets), "set": figures(sets), "pipelined_gets_per_sec": {"value": calls / pipelined}}


async def aio(socket: str, calls: int) -> Dict[str, Dict[str, float]]:
    async with AsyncClient(socket) as c:
        await c.set("bench-py", "a", {"usd": 0})
        for _ in range(200):
            await c.get("bench-py", "a")
        gets, sets = [], []
        for _ in range(calls):
            start = time.perf_counter()
            await c.get("bench-py", "a")
            gets.append(time.perf_counter() - start)
        version = (await c.get("bench-py", "a")).version
        for _ in range(calls):
            start = time.perf_counter()
            version = (await c.set("bench-py", "a", {"usd": version}, expected_version=version)).version
            sets.append(time.perf_counter() - start)
        start = time.perf_counter()
        await asyncio.gather(*(c.get("bench-py", "a") for _ in range(calls)))
        pipelined = time.perf_counter() - start
    return {"get": figures(gets), "set": figures(sets), "pipelined_gets_per_sec": {"value": calls / pipelined}}


def main() -> None:
    socket, calls = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    print(json.dumps({"sync": sync(socket, calls), "asyncio": asyncio.run(aio(socket, calls))}))


if __name__ == "__main__":
    main()
