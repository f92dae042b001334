#!/usr/bin/env python3
"""Two LangGraph runs on one thread: the second is refused, then resumes.

A graph of plain functions (outline -> draft -> review; `draft` stands in for a slow
model call) is checkpointed by baton.langgraph.BatonSaver. run-a takes the thread and
stalls in `draft`. run-b, started on the same thread meanwhile (another process would
do the same: each run here has its own connection and saver), is refused before it
writes anything, with who holds the thread and since when. It then waits for the thread
(on_busy="wait"); once run-a's run ends, run-b takes it and resumes from run-a's last
checkpoint instead of starting over or writing beside it.

    batond &                                        # or the service
    pip install "./clients/python[langgraph]"
    python scripts/examples/langgraph_thread/run.py [--socket PATH]
"""

from __future__ import annotations

import argparse
import operator
import threading
import uuid
from typing import Annotated, Any, Dict, List, Optional, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from baton import Client
from baton.langgraph import BatonSaver, ThreadBusyError


class State(TypedDict):
    log: Annotated[List[str], operator.add]


def graph(saver: BatonSaver, run: str, drafting: threading.Event, go: threading.Event) -> Any:
    def draft(state: State) -> Dict[str, Any]:
        drafting.set()
        go.wait(60)  # the slow model call
        return {"log": [f"{run}: draft"]}

    g = StateGraph(State)
    g.add_node("outline", lambda s: {"log": [f"{run}: outline"]})
    g.add_node("draft", draft)
    g.add_node("review", lambda s: {"log": [f"{run}: review"]})
    g.add_edge(START, "outline")
    g.add_edge("outline", "draft")
    g.add_edge("draft", "review")
    g.add_edge("review", END)
    return g.compile(checkpointer=saver)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--socket", help="batond's socket (default: BATON_SOCKET_PATH or ~/.baton/baton.sock)")
    args = parser.parse_args()
    socket: Optional[str] = args.socket
    thread = f"report-{uuid.uuid4().hex[:8]}"
    config: RunnableConfig = {"configurable": {"thread_id": thread}}

    saver_a = BatonSaver(Client(socket), owner="run-a")
    watcher = Client(socket)
    saver_b = BatonSaver(Client(socket), owner="run-b")
    drafting, go = threading.Event(), threading.Event()
    run_a_graph = graph(saver_a, "run-a", drafting, go)
    never = threading.Event()
    run_b_graph = graph(saver_b, "run-b", never, go)

    def run_a() -> None:
        with saver_a.thread(thread):
            out = run_a_graph.invoke({"log": []}, config)
        print(f"run-a: finished its run: {', '.join(out['log'])}", flush=True)

    a = threading.Thread(target=run_a)
    a.start()
    drafting.wait(60)
    print("run-a: took the thread, wrote the outline and is drafting (a slow model call)", flush=True)

    try:
        with saver_b.thread(thread):
            run_b_graph.invoke({"log": []}, config)
    except ThreadBusyError as e:
        print(f"run-b: refused before writing anything: the thread is held by {e.held_by['owner']} (since {e.since})")

    def release_a_soon() -> None:
        # run-a's model call returns once run-b waits for the thread.
        while not watcher.call("ListResourceLocks", {"prefix": f"langgraph:thread/{thread}"})["waiting"]:
            threading.Event().wait(0.01)
        go.set()

    threading.Thread(target=release_a_soon).start()
    print("run-b: waits for the thread (on_busy=\"wait\")", flush=True)
    with saver_b.thread(thread, on_busy="wait"):
        a.join()
        latest = saver_b.get_tuple(config)
        assert latest is not None
        print(f"run-b: took the thread and resumes from run-a's checkpoint ({len(latest.checkpoint['channel_values']['log'])} log entries)")
        out = run_b_graph.invoke({"log": []}, config)
    print(f"run-b: finished its run: {', '.join(out['log'])}")
    saver_a.close()
    saver_b.close()
    watcher.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
