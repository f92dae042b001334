#!/usr/bin/env python3
"""Two agents coordinating by messages and a shared build slot.

The planner joins, hands out two review-and-build jobs by message, and waits for the
reports. Each builder joins under its own name, reads its inbox, and builds while holding
one of the two slots of `tool:cargo-build` (so at most two builds run at once, whoever
starts them), then reports back and acknowledges the job. Everything they take is tied
to their sessions: an agent that dies frees its slot at once.

    batond &                                  # or the service
    pip install ./clients/python
    python scripts/examples/build_slot/agents.py [--socket PATH]
"""

from __future__ import annotations

import argparse
import threading
import uuid
from typing import List

from baton import Client

SLOTS = 2


def builder(socket: str, name: str, log: List[str], lock: threading.Lock) -> None:
    with Client(socket) as c, c.register(name, role="builder") as me:
        for job in c.inbox(me, wait_ms=60_000):
            crate = job["body"]["crate"]
            with c.lock("tool:cargo-build", owner=name, slots=SLOTS, wait_ms=60_000):
                with lock:
                    log.append(f"{name}: building {crate} in one of {SLOTS} slots")
            c.send(me, job["from"], {"crate": crate, "ok": True}, reply_to=job["message_id"], thread_id=job["thread_id"])
            c.ack(me, job["seq"])
            return


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", help="batond's socket (default: BATON_SOCKET_PATH or ~/.baton/baton.sock)")
    args = parser.parse_args()
    run = uuid.uuid4().hex[:6]  # fresh names per run
    names = [f"builder-{run}-a", f"builder-{run}-b"]
    log: List[str] = []
    lock = threading.Lock()
    with Client(args.socket) as c, c.register(f"planner-{run}", role="planner") as planner:
        threads = [threading.Thread(target=builder, args=(args.socket, n, log, lock)) for n in names]
        for t in threads:
            t.start()
        for name, crate in zip(names, ["core", "cli"]):
            c.send(planner, name, {"crate": crate}, subject="build", thread_id=f"build-{crate}")
        reports = []
        for message in c.inbox(planner, wait_ms=60_000):
            reports.append(message)
            c.ack(planner, message["seq"])
            if len(reports) == len(names):
                break
        for t in threads:
            t.join()
        for line in sorted(log):
            print(line.replace(f"-{run}", ""))
        for r in sorted(reports, key=lambda r: r["body"]["crate"]):
            print(f"{r['from'].replace(f'-{run}', '')} reports {r['body']['crate']}: ok={r['body']['ok']}")
        print(f"slot free again: {c.lock_status('tool:cargo-build')['status']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
