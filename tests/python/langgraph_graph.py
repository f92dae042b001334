"""A LangGraph graph of plain functions (no model) checkpointed by BatonSaver, run as its
own process by test_langgraph.py: `draft -> review -> publish`, each node appending its
name to the state's log.

    python langgraph_graph.py SOCKET THREAD start [--hang-at NODE] [--interrupt-before NODE]
    python langgraph_graph.py SOCKET THREAD resume

`--hang-at` prints `in NODE` when that node starts and then blocks, for the test to kill
the process there (SIGKILL: nothing is flushed or released); `resume` continues the
thread from its latest checkpoint (invoke with no input). Prints the final state's log
as JSON.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import sys
from typing import Annotated, Any, Callable, Dict, List, TypedDict

from langgraph.graph import END, START, StateGraph

from baton import Client
from baton.langgraph import BatonSaver


class State(TypedDict):
    log: Annotated[List[str], operator.add]


def node(name: str, hang_at: str | None) -> Callable[[State], Dict[str, Any]]:
    def run(state: State) -> Dict[str, Any]:
        if name == hang_at:
            print(f"in {name}", flush=True)
            sys.stdin.read()  # until killed
        return {"log": [name]}

    return run


def build(saver: BatonSaver, hang_at: str | None, interrupt_before: List[str]) -> Any:
    g = StateGraph(State)
    for name in ("draft", "review", "publish"):
        g.add_node(name, node(name, hang_at))  # type: ignore[call-overload]
    g.add_edge(START, "draft")
    g.add_edge("draft", "review")
    g.add_edge("review", "publish")
    g.add_edge("publish", END)
    return g.compile(checkpointer=saver, interrupt_before=interrupt_before)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("thread")
    ap.add_argument("mode", choices=["start", "resume"])
    ap.add_argument("--hang-at")
    ap.add_argument("--interrupt-before", action="append", default=[])
    args = ap.parse_args()
    with BatonSaver(Client(args.socket), owner=f"process-{os.getpid()}") as saver:
        graph = build(saver, args.hang_at, args.interrupt_before)
        config = {"configurable": {"thread_id": args.thread}}
        with saver.thread(args.thread):
            # durability="sync": each step's checkpoint is stored before the next step
            # runs, so the test knows which one a kill leaves.
            out = graph.invoke({"log": []} if args.mode == "start" else None, config, durability="sync")
        print(json.dumps(out["log"]))


if __name__ == "__main__":
    main()
