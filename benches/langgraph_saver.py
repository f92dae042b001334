"""LangGraph checkpointing per step: `put` of a step's checkpoint then `get_tuple` of the
thread's latest, through baton.langgraph.BatonSaver (on a fresh batond, SQLite
backend) and through LangGraph's own savers in the same run: SqliteSaver
(langgraph-checkpoint-sqlite, a file in a temporary directory) and PostgresSaver
(langgraph-checkpoint-postgres, a fresh database on the local server). Each saver runs
the same threads in turns (one thread each per round, rounds alternated), each thread
a chain of steps whose state grows by one message a step.

Usage: python benches/langgraph_saver.py BIN_DIR [STEPS] [POSTGRES_URL]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver

from baton import Client
from baton.langgraph import BatonSaver

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import batonproc  # noqa: E402  (the tests' Daemon)

ROUNDS = 5
MESSAGE = "a model's answer of a few sentences, as an agent's state carries it " * 3


def thread_steps(saver: BaseCheckpointSaver[Any], steps: int) -> List[float]:
    """One new thread of `steps` steps; the seconds each put + get_tuple took."""
    thread = f"bench-{uuid.uuid4().hex}"
    config: Dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    messages: List[str] = []
    version: Any = None
    times = []
    for step in range(steps):
        messages = [*messages, f"{step}: {MESSAGE}"]
        version = saver.get_next_version(version, None)
        checkpoint: Any = {
            "v": 4,
            "id": str(uuid6(clock_seq=step)),
            "ts": datetime.now(timezone.utc).isoformat(),
            "channel_values": {"messages": messages, "step": step},
            "channel_versions": {"messages": version, "step": version},
            "versions_seen": {"agent": {"messages": version}},
            "updated_channels": ["messages", "step"],
        }
        start = time.perf_counter()
        config = saver.put(config, checkpoint, {"source": "loop", "step": step, "parents": {}}, {"messages": version, "step": version})
        latest = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        times.append(time.perf_counter() - start)
        assert latest is not None and latest.checkpoint["channel_values"]["step"] == step
    return times


def psql(url: str, sql: str) -> None:
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", sql], check=True, capture_output=True)


def main() -> None:
    batonproc.BIN_DIR = Path(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    server = sys.argv[3] if len(sys.argv) > 3 else "postgres://postgres@127.0.0.1:5432/test"
    database = f"baton_lg_bench_{uuid.uuid4().hex[:8]}"
    psql(server, f"CREATE DATABASE {database}")
    pg_url = server[: server.rindex("/") + 1] + database
    with tempfile.TemporaryDirectory(prefix="baton-lg-bench-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        daemon = batonproc.Daemon(home)
        try:
            with SqliteSaver.from_conn_string(str(Path(tmp) / "lg.sqlite")) as sqlite, PostgresSaver.from_conn_string(
                pg_url
            ) as postgres:
                postgres.setup()
                baton = BatonSaver(Client(daemon.socket))
                unguarded = BatonSaver(Client(daemon.socket), guard=False, namespace="langgraph-unguarded")
                savers: List[Tuple[str, BaseCheckpointSaver[Any]]] = [
                    ("BatonSaver (batond, SQLite)", baton),
                    ("BatonSaver, guard=False", unguarded),
                    ("SqliteSaver (langgraph)", sqlite),
                    ("PostgresSaver (langgraph)", postgres),
                ]
                times: Dict[str, List[float]] = {name: [] for name, _ in savers}
                for name, saver in savers:  # warm-up: connections, tables, caches
                    thread_steps(saver, 5)
                for r in range(ROUNDS):
                    for name, saver in savers if r % 2 == 0 else list(reversed(savers)):
                        times[name].extend(thread_steps(saver, steps))
                baton.close()
                unguarded.close()
        finally:
            daemon.stop()
            psql(server, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    median: Callable[[List[float]], float] = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    p99: Callable[[List[float]], float] = lambda xs: sorted(xs)[int(len(xs) * 0.99)] * 1e3  # noqa: E731
    base = median(times["BatonSaver (batond, SQLite)"])
    print(f"LangGraph put + get_tuple per step ({ROUNDS} threads x {steps} steps each, state growing a message a step)")
    print("  (the last column: BatonSaver's median time over this saver's; above 1: BatonSaver is slower)")
    for name, _ in savers:
        m = median(times[name])
        print(f"  {name:<30} median {m:6.2f} ms  p99 {p99(times[name]):6.2f} ms  BatonSaver/this {base / m:5.2f}x")


if __name__ == "__main__":
    main()
