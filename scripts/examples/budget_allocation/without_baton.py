#!/usr/bin/env python3
"""Two agents allocate from a $10,000 budget held in a plain shared dict.

Each reads the remaining budget, decides, and writes back. Nothing notices that the
other agent wrote in between: $15,000 gets committed against a $10,000 budget.
"""

from __future__ import annotations

import threading

BUDGET = 10_000
WANTS = {"agent-a": 8_000, "agent-b": 7_000}


def main() -> int:
    shared = {"remaining": BUDGET}
    committed = {}
    both_read = threading.Barrier(2)
    a_wrote = threading.Event()

    def agent(name: str) -> None:
        remaining = shared["remaining"]  # read
        both_read.wait()  # both agents have read $10,000 before either writes
        if name == "agent-b":
            a_wrote.wait()  # agent-a happens to finish first
        grant = min(WANTS[name], remaining)  # "plenty left", by the value it read
        committed[name] = grant
        shared["remaining"] = remaining - grant  # write: last writer wins
        print(f"{name}: read ${remaining:,}, committed ${grant:,}, wrote remaining ${remaining - grant:,}")
        if name == "agent-a":
            a_wrote.set()

    threads = [threading.Thread(target=agent, args=(n,)) for n in WANTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(committed.values())
    print(f"total committed: ${total:,} against a ${BUDGET:,} budget (remaining says ${shared['remaining']:,})")
    if total > BUDGET:
        print(f"OVERCOMMITTED by ${total - BUDGET:,}: agent-a's write was silently overwritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
