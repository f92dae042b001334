#!/usr/bin/env python3
"""A paused worker's late write is refused.

worker-a claims file:report.md and writes a first draft under the claim, passing the
lease as the write's fence. Then it stalls: its whole process is paused (SIGSTOP), as a
long model call, a debugger or a suspended laptop would hold it, so it stops
heartbeating too. Its lease expires, and worker-b, which was waiting for the file, takes
it over and writes its own version. When worker-a resumes, it sends its late draft with
the fence of its lost claim: batond refuses it (FencedError) and nothing is written, so
worker-b's work stands. Without the fence, the late draft would have overwritten it.

    batond &                                  # or the service
    pip install ./clients/python
    python scripts/examples/paused_worker/run.py [--socket PATH]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import uuid
from typing import List, Optional

from baton import Client, FencedError

KEY = "file:report.md"


def worker_a(socket: Optional[str], namespace: str) -> None:
    """Claims the file, writes a draft, stalls (paused by main), then writes again."""
    with Client(socket) as c:
        try:
            with c.lock(KEY, owner="worker-a", ttl_secs=1) as lease:  # heartbeats every 1/3 s
                c.set(namespace, "report", "draft 1", updated_by="worker-a", fence=lease)
                print(f"worker-a: claimed {KEY} (fencing token {lease.fencing_token}) and wrote draft 1", flush=True)
                sys.stdin.readline()  # the long model call: main pauses the process here
                c.set(namespace, "report", "draft 2", updated_by="worker-a", fence=lease)
                print("worker-a: wrote draft 2", flush=True)  # never reached: the claim was lost
        except FencedError as e:
            holder = e.held_by["owner"] if e.held_by else "nobody"
            print(
                f"worker-a: resumed, and its late draft 2 was refused: {e.resource_key} is held by {holder} "
                f"(fencing token {e.latest_fencing_token}); nothing was written",
                flush=True,
            )
            stale = c.check_fence(KEY, lease.fencing_token)
            print(f"worker-a: check_fence({lease.fencing_token}) says latest={stale['latest']}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", help="batond's socket (default: BATON_SOCKET_PATH or ~/.baton/baton.sock)")
    parser.add_argument("--worker-a", metavar="NAMESPACE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_a:
        worker_a(args.socket, args.worker_a)
        return 0

    namespace = f"paused-{uuid.uuid4().hex[:8]}"  # a fresh report per run
    socket: List[str] = ["--socket", args.socket] if args.socket else []
    a = subprocess.Popen(
        [sys.executable, __file__, *socket, "--worker-a", namespace],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert a.stdin is not None and a.stdout is not None
    try:
        claimed = a.stdout.readline()
        if not claimed:  # worker-a could not claim (batond unreachable?): its error is above
            return 1
        print(claimed, end="")
        os.kill(a.pid, signal.SIGSTOP)  # worker-a stalls, heartbeats and all
        os.waitpid(a.pid, os.WUNTRACED)  # returns once it is stopped
        with Client(args.socket) as c:
            # Granted when worker-a's lease expires, a second or so from its last heartbeat.
            with c.lock(KEY, owner="worker-b", wait_ms=60_000) as lease:
                print(f"worker-b: took {KEY} over once worker-a's lease expired (fencing token {lease.fencing_token})")
                c.set(namespace, "report", "worker-b's report", updated_by="worker-b", fence=lease)
                os.kill(a.pid, signal.SIGCONT)  # worker-a wakes up and carries on
                a.stdin.write("the model's answer\n")
                a.stdin.flush()
                print(a.stdout.read(), end="")
                lease.outcome = "modified"
            record = c.get(namespace, "report")
            assert record is not None
            print(f"report: {record.value!r} at version {record.version}; its history:")
            for h in reversed(c.history(namespace, "report")):
                print(f"  version {h['version']}: {h['value']!r} by {h['updated_by']}")
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
        a.wait()
    return 0 if a.returncode == 0 and record.value == "worker-b's report" else 1


if __name__ == "__main__":
    raise SystemExit(main())
