#!/usr/bin/env python3
"""The same two agents, with the budget in batond.

Each writes with the version it read (`expected_version`). The second writer gets a
ConflictError carrying what is really left, and allocates from that: exactly $10,000 is
committed, and the key's history shows every write.

    batond &                                  # or the service
    pip install ./clients/python
    python scripts/examples/budget_allocation/with_baton.py [--socket PATH]
"""

from __future__ import annotations

import argparse
import threading
import uuid

from baton import Client, ConflictError

BUDGET = 10_000
WANTS = {"agent-a": 8_000, "agent-b": 7_000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", help="batond's socket (default: BATON_SOCKET_PATH or ~/.baton/baton.sock)")
    args = parser.parse_args()
    namespace = f"campaign-{uuid.uuid4().hex[:8]}"  # a fresh budget per run
    with Client(args.socket) as c:
        c.set(namespace, "budget", {"remaining": BUDGET, "allocations": {}}, expected_version=0, updated_by="setup")

    committed = {}
    both_read = threading.Barrier(2)
    a_wrote = threading.Event()

    def agent(name: str) -> None:
        with Client(args.socket) as c:
            record = c.get(namespace, "budget")
            assert record is not None
            value, version = record.value, record.version
            both_read.wait()  # both agents have read $10,000 before either writes
            if name == "agent-b":
                a_wrote.wait()  # agent-a happens to finish first
            while True:
                grant = min(WANTS[name], value["remaining"])
                new = {
                    "remaining": value["remaining"] - grant,
                    "allocations": {**value["allocations"], name: grant},
                }
                try:
                    c.set(namespace, "budget", new, expected_version=version, updated_by=name)
                except ConflictError as err:
                    print(
                        f"{name}: conflict, {err.updated_by} wrote version {err.current_version} first; "
                        f"${err.current_value['remaining']:,} left, re-planning"
                    )
                    value, version = err.current_value, err.current_version
                    continue
                committed[name] = grant
                print(f"{name}: committed ${grant:,}, ${new['remaining']:,} left")
                break
            if name == "agent-a":
                a_wrote.set()

    threads = [threading.Thread(target=agent, args=(n,)) for n in WANTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(committed.values())
    print(f"total committed: ${total:,} against a ${BUDGET:,} budget")
    with Client(args.socket) as c:
        print(f"history of {namespace}/budget:")
        for h in reversed(c.history(namespace, "budget")):
            print(f"  version {h['version']} by {h['updated_by']}: remaining ${h['value']['remaining']:,}")
    return 0 if total == BUDGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
