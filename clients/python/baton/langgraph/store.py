"""`BatonStore`: LangGraph's long-term memory store (`BaseStore`) on batond.

Items live in one Baton namespace (default `langgraph-store`), one key each:

    i/<label1>.<label2>...<labelN>./<key>

each label and the key percent-encoded as BatonSaver's key parts are (`_keys.part`;
LangGraph refuses `.` in a label, so `.` ends one): a namespace prefix `("a",)` is the
key prefix `i/a.`, which `("ab",)` does not share. The value is the item as JSON:
`{namespace, key, value, created_at, updated_at, ttl_minutes, expires_at}`.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Generator, Iterable, List, Optional, Tuple, Union

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from .. import _steps
from .._steps import Answer, Batch, list_all, one
from ..aio import AsyncClient
from ..client import Client
from ..errors import ConflictError
from ._keys import part

Steps = Generator[Batch, List[Answer], Any]


def _prefix(namespace: Tuple[str, ...]) -> str:
    return "i/" + "".join(part(label) + "." for label in namespace)


def _key(namespace: Tuple[str, ...], key: str) -> str:
    return _prefix(namespace) + "/" + part(key)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


def _matches(path: Tuple[str, ...], condition: MatchCondition) -> bool:
    pattern = tuple(condition.path)
    if len(path) < len(pattern):
        return False
    pairs = zip(path, pattern) if condition.match_type == "prefix" else zip(reversed(path), reversed(pattern))
    return all(p == "*" or p == k for k, p in pairs)


def _compare(value: Any, wanted: Any) -> bool:
    """A filter's value against an item's field: equality, nested objects, and the
    operators $eq, $ne, $gt, $gte, $lt, $lte (as LangGraph's own stores read them)."""
    if isinstance(wanted, dict):
        if any(str(k).startswith("$") for k in wanted):
            return all(_operator(value, op, arg) for op, arg in wanted.items())
        return isinstance(value, dict) and all(_compare(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(wanted)
            and all(_compare(a, b) for a, b in zip(value, wanted))
        )
    return bool(value == wanted)


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    if value is None:
        return False
    if op == "$gt":
        return float(value) > float(arg)
    if op == "$gte":
        return float(value) >= float(arg)
    if op == "$lt":
        return float(value) < float(arg)
    if op == "$lte":
        return float(value) <= float(arg)
    raise ValueError(f"filter operator {op!r} is not one of $eq, $ne, $gt, $gte, $lt, $lte")


class BatonStore(BaseStore):
    """LangGraph's `BaseStore` kept in batond: namespaces, put/get/search (filters,
    offset, limit)/delete/list_namespaces, `batch`/`abatch`, and TTLs.

        store = BatonStore(Client(), ttl={"default_ttl": 60})   # minutes, as LangGraph's
        graph = builder.compile(checkpointer=saver, store=store)

    `client` as for BatonSaver (a Client, or an AsyncClient for async code). A put keeps
    the item's first `created_at`. `search` orders by `updated_at`, newest first; a
    natural-language `query` is not ranked (no vector index: `index=` is refused), every
    result's `score` is None. An item whose TTL ran out (by this host's clock) is not
    returned, and `sweep_ttl()` deletes such items (`clock`: the time they are judged
    by, `time.time` by default); a read refreshes the TTL unless
    `refresh_ttl=False` (or the TTLConfig's `refresh_on_read` is False).
    """

    supports_ttl: bool = True

    def __init__(
        self,
        client: Optional[Union[Client, AsyncClient]] = None,
        *,
        namespace: str = "langgraph-store",
        socket_path: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        ttl: Optional[TTLConfig] = None,
        index: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if index is not None:
            raise ValueError(
                "BatonStore has no vector index: leave index= out (search filters by fields, "
                "a query is not ranked), or use a store with embeddings for semantic search"
            )
        if not namespace:
            raise ValueError("namespace must be a non-empty Baton namespace, e.g. \"langgraph-store\"")
        self.client: Union[Client, AsyncClient] = (
            client if client is not None else Client(socket_path, url=url, token=token)
        )
        self.namespace = namespace
        self.ttl_config = ttl
        #: The time TTLs are judged by, in seconds since the epoch (time.time).
        self.clock = clock

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- the ops ----------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> List[Result]:
        return _steps.run(self.client, self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> List[Result]:
        return await _steps.arun(self.client, self._batch(list(ops)))

    def sweep_ttl(self) -> int:
        """Deletes every item whose TTL ran out; returns how many."""
        return int(_steps.run(self.client, self._sweep()))

    async def asweep_ttl(self) -> int:
        return int(await _steps.arun(self.client, self._sweep()))

    def _batch(self, ops: List[Op]) -> Steps:
        """Reads first, in order (each sees the store as it was before the batch's
        writes); then the writes, the last one of each item winning."""
        for op in ops:
            validate_op_namespace(op)
        results: List[Result] = [None] * len(ops)
        refresh: Dict[str, Dict[str, Any]] = {}
        gets = [(i, op) for i, op in enumerate(ops) if isinstance(op, GetOp)]
        if gets:
            answers = yield [("Get", {"namespace": self.namespace, "key": _key(op.namespace, op.key)}) for _, op in gets]
            now = self._now_ms()
            for (i, op), answer in zip(gets, answers):
                got = one(answer)
                if got.get("found") and not _expired(got["value"], now):
                    results[i] = _item(got["value"], Item)
                    if op.refresh_ttl:
                        refresh[got["key"]] = {**got, "namespace": self.namespace}
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp):
                results[i] = yield from self._search(op, refresh)
            elif isinstance(op, ListNamespacesOp):
                results[i] = yield from self._namespaces(op)
        puts: Dict[Tuple[Tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, PutOp):
                puts[(tuple(op.namespace), op.key)] = op
            elif not isinstance(op, (GetOp, SearchOp, ListNamespacesOp)):
                raise ValueError(f"unknown store op {type(op).__name__}: give GetOp, SearchOp, PutOp or ListNamespacesOp")
        if puts:
            yield from self._write(list(puts.values()))
        if refresh:
            yield from self._refresh([r for k, r in refresh.items() if not _put_over(k, puts)])
        return results

    def _search(self, op: SearchOp, refresh: Dict[str, Dict[str, Any]]) -> Steps:
        records = yield from list_all(self.namespace, _prefix(tuple(op.namespace_prefix)))
        now = self._now_ms()
        found = [
            r
            for r in records
            if not _expired(r["value"], now)
            and all(_compare(r["value"]["value"].get(k), v) for k, v in (op.filter or {}).items())
        ]
        # Newest update first; in the same millisecond, the later write (batond's revision).
        found.sort(key=lambda r: (r["value"]["updated_at"], r.get("revision") or 0), reverse=True)
        chosen = found[op.offset : op.offset + op.limit]
        if op.refresh_ttl:
            for r in chosen:
                refresh[r["key"]] = {**r, "namespace": self.namespace}
        return [_item(r["value"], SearchItem) for r in chosen]

    def _namespaces(self, op: ListNamespacesOp) -> Steps:
        records = yield from list_all(self.namespace, "i/")
        now = self._now_ms()
        paths = {tuple(r["value"]["namespace"]) for r in records if not _expired(r["value"], now)}
        chosen = [p for p in paths if all(_matches(p, c) for c in op.match_conditions or ())]
        if op.max_depth is not None:
            chosen = list({p[: op.max_depth] for p in chosen})
        return sorted(chosen)[op.offset : op.offset + op.limit]

    def _write(self, puts: List[PutOp]) -> Steps:
        keys = [_key(tuple(op.namespace), op.key) for op in puts]
        # The items as they are, to keep each one's created_at.
        answers = yield [("Get", {"namespace": self.namespace, "key": k}) for k in keys]
        now = self._now_ms()
        batch: Batch = []
        for op, key, answer in zip(puts, keys, answers):
            if op.value is None:
                batch.append(("Delete", {"namespace": self.namespace, "key": key}))
                continue
            if not isinstance(op.value, dict):
                raise ValueError(f"a store item's value must be a dict with str keys, not {type(op.value).__name__}")
            got = one(answer)
            ttl = op.ttl
            created = got["value"]["created_at"] if got.get("found") else _iso(now)
            batch.append(
                (
                    "Set",
                    {
                        "namespace": self.namespace,
                        "key": key,
                        "value": {
                            "namespace": list(op.namespace),
                            "key": op.key,
                            "value": dict(op.value),
                            "created_at": created,
                            "updated_at": _iso(now),
                            "ttl_minutes": ttl,
                            "expires_at": None if ttl is None else now + int(ttl * 60_000),
                        },
                    },
                )
            )
        for answer in (yield batch):
            one(answer)
        return None

    def _refresh(self, records: List[Dict[str, Any]]) -> Steps:
        """A read's TTL refresh: written only over the version read (a change made
        meanwhile stands), and only for items that have a TTL."""
        now = self._now_ms()
        batch: Batch = []
        for r in records:
            v = r["value"]
            if v.get("ttl_minutes") is None:
                continue
            batch.append(
                (
                    "Set",
                    {
                        "namespace": self.namespace,
                        "key": r["key"],
                        "value": {**v, "expires_at": now + int(v["ttl_minutes"] * 60_000)},
                        "expected_version": r["version"],
                    },
                )
            )
        if batch:
            for answer in (yield batch):
                if not isinstance(answer, ConflictError):
                    one(answer)
        return None

    def _sweep(self) -> Steps:
        records = yield from list_all(self.namespace, "i/")
        now = self._now_ms()
        doomed = [r for r in records if _expired(r["value"], now)]
        if not doomed:
            return 0
        answers = yield [
            ("Delete", {"namespace": self.namespace, "key": r["key"], "expected_version": r["version"]})
            for r in doomed
        ]
        return sum(1 for a in answers if not isinstance(a, ConflictError) and one(a) is not None)


def _expired(value: Dict[str, Any], now: int) -> bool:
    expires = value.get("expires_at")
    return expires is not None and expires <= now


def _put_over(key: str, puts: Dict[Tuple[Tuple[str, ...], str], PutOp]) -> bool:
    return any(_key(ns, k) == key for ns, k in puts)


def _item(value: Dict[str, Any], kind: Any) -> Any:
    return kind(
        namespace=tuple(value["namespace"]),
        key=value["key"],
        value=value["value"],
        created_at=datetime.fromisoformat(value["created_at"]),
        updated_at=datetime.fromisoformat(value["updated_at"]),
    )
