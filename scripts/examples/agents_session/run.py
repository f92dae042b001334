#!/usr/bin/env python3
"""Two OpenAI Agents SDK runners share one session, kept in batond.

Two runners (a planner and a writer, each with its own connection, as two processes
would have) start on the same new conversation id at the same moment: the race that
splits a history in two when each first use creates the session on its own. Through
baton.openai_agents.BatonSession every change moves the session's head by
compare-and-set, so both runs land in one history: each run's question and answer, in
one order that every reader sees. A third runner then continues the conversation and
gets the whole history as its input.

The model is a stand-in (the SDK's agents.testing.ScriptedModel): no network, no key.

    batond &                                        # or the service
    pip install "./clients/python[openai-agents]"
    python scripts/examples/agents_session/run.py [--socket PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from typing import Any, List, Optional

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message

from baton import AsyncClient
from baton.openai_agents import BatonSession


def content(item: Any) -> str:
    c = item.get("content")
    if isinstance(c, list):  # an assistant message: its output text parts
        return "".join(part.get("text", "") for part in c)
    return str(c)


async def main(socket: Optional[str]) -> int:
    set_tracing_disabled(True)
    conversation = f"trip-{uuid.uuid4().hex[:8]}"
    planner = Agent(name="planner", model=ScriptedModel([[assistant_message("Day 1: Lisbon. Day 2: Sintra.")]]))
    writer = Agent(name="writer", model=ScriptedModel([[assistant_message("Packing list: shoes, hat.")]]))

    await asyncio.gather(
        Runner.run(planner, "Plan two days in Portugal.", session=BatonSession(conversation, AsyncClient(socket))),
        Runner.run(writer, "Write a packing list.", session=BatonSession(conversation, AsyncClient(socket))),
    )
    history: List[Any] = await BatonSession(conversation, AsyncClient(socket)).get_items()
    texts = [content(i) for i in history]
    print(f"one history of {len(history)} items for both runners:")
    for role, text in sorted((i.get("role", "?"), t) for i, t in zip(history, texts)):
        print(f"  {role}: {text}")

    model = ScriptedModel([[assistant_message("Both are planned.")]])
    summary = Agent(name="summary", model=model)
    result = await Runner.run(summary, "Summarise.", session=BatonSession(conversation, AsyncClient(socket)))
    seen = model.last_call.input if model.last_call is not None else []
    print(f"a third runner continues it: its model saw {len(seen)} items and answered {result.final_output!r}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--socket", help="batond's socket (default: BATON_SOCKET_PATH or ~/.baton/baton.sock)")
    raise SystemExit(asyncio.run(main(parser.parse_args().socket)))
