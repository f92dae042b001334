#!/usr/bin/env python3
"""An inventory agent and a pricing agent update one order held in a plain shared dict.

Both read the order, change their part, and write the whole order back: the second
write silently drops the first agent's change.
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Dict


def main() -> int:
    store: Dict[str, Dict[str, Any]] = {"order-1234": {"status": "received", "reserved": False, "total": 100.0, "discount": 0}}
    both_read = threading.Barrier(2)
    inventory_wrote = threading.Event()

    def inventory() -> None:
        order = copy.deepcopy(store["order-1234"])
        both_read.wait()
        order.update(reserved=True, status="reserved")
        store["order-1234"] = order
        inventory_wrote.set()

    def pricing() -> None:
        order = copy.deepcopy(store["order-1234"])
        both_read.wait()
        inventory_wrote.wait()  # pricing happens to write second
        order.update(discount=10, total=round(order["total"] * 0.9, 2))
        store["order-1234"] = order

    threads = [threading.Thread(target=inventory), threading.Thread(target=pricing)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    order = store["order-1234"]
    print(f"final order: {order}")
    if not order["reserved"]:
        print("LOST UPDATE: the inventory agent's reservation was overwritten by the pricing agent")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
