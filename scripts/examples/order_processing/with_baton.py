#!/usr/bin/env python3
"""The same two agents, with the order in batond: both updates survive.

Each agent uses `Client.update`, which writes with the version it read and, on a
conflict, re-applies its change to the order the other agent wrote.

    python scripts/examples/order_processing/with_baton.py [--socket PATH]
"""

from __future__ import annotations

import argparse
import threading
import uuid
from typing import Any, Dict

from baton import Client


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", help="batond's socket (default: BATON_SOCKET_PATH or ~/.baton/baton.sock)")
    args = parser.parse_args()
    namespace = f"orders-{uuid.uuid4().hex[:8]}"
    with Client(args.socket) as c:
        c.set(
            namespace,
            "order-1234",
            {"status": "received", "reserved": False, "total": 100.0, "discount": 0},
            expected_version=0,
            updated_by="intake",
        )
    both_read = threading.Barrier(2)
    inventory_wrote = threading.Event()
    attempts = {"inventory": 0, "pricing": 0}

    def reserve(order: Dict[str, Any]) -> Dict[str, Any]:
        attempts["inventory"] += 1
        if attempts["inventory"] == 1:
            both_read.wait()  # both agents hold version 1 before either writes
        return {**order, "reserved": True, "status": "reserved"}

    def discount(order: Dict[str, Any]) -> Dict[str, Any]:
        attempts["pricing"] += 1
        if attempts["pricing"] == 1:
            both_read.wait()
            inventory_wrote.wait()  # pricing happens to write second, from a stale read
        return {**order, "discount": 10, "total": round(100.0 * 0.9, 2)}

    def inventory_agent() -> None:
        with Client(args.socket) as c:
            c.update(namespace, "order-1234", reserve, updated_by="inventory-agent")
            inventory_wrote.set()

    def pricing_agent() -> None:
        with Client(args.socket) as c:
            c.update(namespace, "order-1234", discount, updated_by="pricing-agent")

    threads = [threading.Thread(target=inventory_agent), threading.Thread(target=pricing_agent)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with Client(args.socket) as c:
        order = c.get(namespace, "order-1234")
        assert order is not None
        print(f"final order (version {order.version}): {order.value}")
        print(f"pricing-agent wrote {attempts['pricing']} times: its first write conflicted and was re-applied")
        for h in reversed(c.history(namespace, "order-1234")):
            print(f"  version {h['version']} by {h['updated_by']}: {h['value']}")
        ok = order.value["reserved"] and order.value["discount"] == 10
    print("both updates survived" if ok else "an update was lost")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
