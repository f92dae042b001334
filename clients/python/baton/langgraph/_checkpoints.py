"""BatonSaver's reads and writes as steps (`baton._steps`): what it asks batond, written
once for the sync and the async methods. The keys are `_keys`'s."""

from __future__ import annotations

import base64
from typing import Any, Dict, Generator, Iterable, List, Optional, Sequence, Set, Tuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)

from .._steps import Answer, Batch, list_all, listed, one
from ..errors import ConflictError, FencedError
from . import _keys

Fence = Optional[Dict[str, Any]]
Steps = Generator[Batch, List[Answer], Any]

# A Txn line stays under batond's default line limit (1 MiB) with room to spare; a
# checkpoint whose new channel values are larger goes out as Sets, the values first.
_TXN_BYTES = 768 * 1024
# Deletes and copies go out this many keys per request.
_CHUNK = 200
# A page of list(): this many checkpoints, completed with their values and writes.
_PAGE = 100


def typed(serde: SerializerProtocol, value: Any) -> List[str]:
    kind, data = serde.dumps_typed(value)
    return [kind, base64.b64encode(data).decode("ascii")]


def untyped(serde: SerializerProtocol, stored: Sequence[str]) -> Any:
    return serde.loads_typed((stored[0], base64.b64decode(stored[1])))


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}}


def _where(config: RunnableConfig) -> Tuple[str, str]:
    conf = config.get("configurable") or {}
    if "thread_id" not in conf:
        raise ValueError(
            'a checkpoint config needs configurable.thread_id: pass {"configurable": {"thread_id": ...}}'
        )
    return str(conf["thread_id"]), str(conf.get("checkpoint_ns") or "")


# -- reads ------------------------------------------------------------------------------


def _write_of(serde: SerializerProtocol, w: Dict[str, Any]) -> PendingWrite:
    return (w["task_id"], w["channel"], untyped(serde, w["value"]))


def _complete(
    ns: str, serde: SerializerProtocol, found: List[Tuple[Dict[str, Any], Optional[Dict[str, Any]]]]
) -> Steps:
    """Checkpoint records (and the first page of their writes, when already read) made
    into CheckpointTuples: their channel values and pending writes read in one batch."""
    decoded: List[Tuple[Dict[str, Any], Dict[str, Any]]] = []
    batch: Batch = []
    for record, _ in found:
        cp = untyped(serde, record["checkpoint"])
        decoded.append((record, cp))
        t, c = record["thread_id"], record["checkpoint_ns"]
        for channel, version in cp["channel_versions"].items():
            batch.append(("Get", {"namespace": ns, "key": _keys.blob(t, c, channel, version)}))
    wanted = [i for i, (_, page) in enumerate(found) if page is None]
    for i in wanted:
        r = found[i][0]
        batch.append(listed(ns, _keys.writes(r["thread_id"], r["checkpoint_ns"], r["checkpoint_id"])))
    answers = (yield batch) if batch else []
    pages: List[Optional[Dict[str, Any]]] = [page for _, page in found]
    at = 0
    values: List[Dict[str, Any]] = []
    for record, cp in decoded:
        channel_values: Dict[str, Any] = {}
        for channel in cp["channel_versions"]:
            got = one(answers[at])
            at += 1
            if got.get("found") and got["value"][0] != "empty":
                channel_values[channel] = untyped(serde, got["value"])
        values.append(channel_values)
    for i in wanted:
        pages[i] = one(answers[at])
        at += 1
    out: List[CheckpointTuple] = []
    for (record, cp), channel_values, page in zip(decoded, values, pages):
        assert page is not None
        stored = [r["value"] for r in page["records"]]
        after = page.get("next")
        while after:
            prefix = _keys.writes(record["thread_id"], record["checkpoint_ns"], record["checkpoint_id"])
            [more] = yield [listed(ns, prefix, after=after)]
            page = one(more)
            stored.extend(r["value"] for r in page["records"])
            after = page.get("next")
        stored.sort(key=lambda w: writes_sort_key(w.get("task_path", ""), w["task_id"], w["idx"]))
        t, c, cid, parent = (
            record["thread_id"],
            record["checkpoint_ns"],
            record["checkpoint_id"],
            record.get("parent_checkpoint_id"),
        )
        out.append(
            CheckpointTuple(
                config=_config(t, c, cid),
                checkpoint=_with_values(cp, channel_values),
                metadata=untyped(serde, record["metadata"]),
                parent_config=_config(t, c, parent) if parent else None,
                pending_writes=[_write_of(serde, w) for w in stored],
            )
        )
    return out


def _with_values(cp: Dict[str, Any], channel_values: Dict[str, Any]) -> Checkpoint:
    out: Any = {**cp, "channel_values": channel_values}
    return out  # type: ignore[no-any-return]


def get_tuple(ns: str, serde: SerializerProtocol, config: RunnableConfig) -> Steps:
    """The checkpoint `config` names, or its thread's (and namespace's) latest."""
    thread_id, checkpoint_ns = _where(config)
    checkpoint_id = get_checkpoint_id(config)
    if checkpoint_id:
        key = _keys.checkpoint(thread_id, checkpoint_ns, checkpoint_id)
        got, writes = yield [
            ("Get", {"namespace": ns, "key": key}),
            listed(ns, _keys.writes(thread_id, checkpoint_ns, checkpoint_id)),
        ]
        found = one(got)
        if not found.get("found"):
            return None
        [tup] = yield from _complete(ns, serde, [(found["value"], one(writes))])
        return tup
    [latest] = yield [listed(ns, _keys.checkpoints(thread_id, checkpoint_ns), limit=1)]
    records = one(latest)["records"]
    if not records:
        return None
    [tup] = yield from _complete(ns, serde, [(records[0]["value"], None)])
    return tup


def _matches(serde: SerializerProtocol, record: Dict[str, Any], filter: Optional[Dict[str, Any]], before: Optional[str]) -> bool:
    if before is not None and record["checkpoint_id"] >= before:
        return False
    if filter:
        metadata = untyped(serde, record["metadata"])
        return all(metadata.get(k) == v for k, v in filter.items())
    return True


def list_page(
    ns: str,
    serde: SerializerProtocol,
    config: Optional[RunnableConfig],
    *,
    filter: Optional[Dict[str, Any]],
    before: Optional[RunnableConfig],
    limit: Optional[int],
    after: Optional[str],
) -> Steps:
    """One page of list(), newest first per checkpoint namespace: (tuples, the cursor of
    the next page or None)."""
    conf = (config or {}).get("configurable") or {}
    thread_id = conf.get("thread_id")
    checkpoint_ns = conf.get("checkpoint_ns")
    config_id = conf.get("checkpoint_id")
    before_id = get_checkpoint_id(before) if before else None
    if thread_id is None:
        prefix = _keys.checkpoints()
    else:
        prefix = _keys.checkpoints(str(thread_id), None if checkpoint_ns is None else str(checkpoint_ns))
    if after is None and before_id and thread_id is not None and checkpoint_ns is not None:
        after = _keys.checkpoint(str(thread_id), str(checkpoint_ns), before_id)  # skip to it at once
    size = _PAGE if limit is None else max(1, min(_PAGE, limit))
    [answer] = yield [listed(ns, prefix, after=after, limit=size)]
    page = one(answer)
    chosen = [
        r["value"]
        for r in page["records"]
        if (not config_id or r["value"]["checkpoint_id"] == config_id) and _matches(serde, r["value"], filter, before_id)
    ]
    if limit is not None:
        chosen = chosen[:limit]
    tuples = yield from _complete(ns, serde, [(r, None) for r in chosen])
    return tuples, page.get("next")


# -- writes -----------------------------------------------------------------------------


def put(
    ns: str,
    serde: SerializerProtocol,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    fence: Fence,
) -> Steps:
    """Stores a checkpoint: the values of its new channel versions, then the checkpoint
    (one Txn, or the values first when they are large), every op fenced."""
    thread_id, checkpoint_ns = _where(config)
    cp: Dict[str, Any] = dict(checkpoint)
    values: Dict[str, Any] = cp.pop("channel_values", {}) or {}
    ops: List[Dict[str, Any]] = []
    size = 0
    for channel, version in new_versions.items():
        value = typed(serde, values[channel]) if channel in values else ["empty", ""]
        size += len(value[1])
        ops.append(
            {"op": "set", "namespace": ns, "key": _keys.blob(thread_id, checkpoint_ns, channel, version), "value": value}
        )
    md = get_serializable_checkpoint_metadata(config, metadata)
    run_id = md.get("run_id")
    record = {
        "thread_id": thread_id,
        "checkpoint_ns": checkpoint_ns,
        "checkpoint_id": checkpoint["id"],
        "parent_checkpoint_id": (config.get("configurable") or {}).get("checkpoint_id"),
        "checkpoint": typed(serde, cp),
        "metadata": typed(serde, md),
        "run_id": str(run_id) if run_id is not None else None,
    }
    head = {
        "op": "set",
        "namespace": ns,
        "key": _keys.checkpoint(thread_id, checkpoint_ns, checkpoint["id"]),
        "value": record,
    }
    if fence is not None:
        ops = [{**op, "fence": fence} for op in ops]
        head["fence"] = fence
    if size <= _TXN_BYTES:
        [answer] = yield [("Txn", {"compare": [], "ops": [*ops, head]})]
        one(answer)
    else:
        if ops:
            for answer in (yield [("Set", {k: v for k, v in op.items() if k != "op"}) for op in ops]):
                one(answer)
        [answer] = yield [("Set", {k: v for k, v in head.items() if k != "op"})]
        one(answer)
    return _config(thread_id, checkpoint_ns, checkpoint["id"])


def put_writes(
    ns: str,
    serde: SerializerProtocol,
    config: RunnableConfig,
    writes: Sequence[Tuple[str, Any]],
    task_id: str,
    task_path: str,
    fence: Fence,
) -> Steps:
    """Stores a task's writes to a checkpoint: a regular write only once per (task, index)
    (a retry leaves the first), a special one (error, interrupt, ...) replaced."""
    thread_id, checkpoint_ns = _where(config)
    checkpoint_id = (config.get("configurable") or {}).get("checkpoint_id")
    if not checkpoint_id:
        raise ValueError("put_writes needs the checkpoint's config: configurable.checkpoint_id is missing")
    batch: Batch = []
    for i, (channel, value) in enumerate(writes):
        idx = WRITES_IDX_MAP.get(channel, i)
        params: Dict[str, Any] = {
            "namespace": ns,
            "key": _keys.write(thread_id, checkpoint_ns, str(checkpoint_id), task_id, idx),
            "value": {
                "task_id": task_id,
                "channel": channel,
                "task_path": task_path,
                "idx": idx,
                "value": typed(serde, value),
            },
        }
        if idx >= 0:
            params["expected_version"] = 0
        if fence is not None:
            params["fence"] = fence
        batch.append(("Set", params))
    if not batch:
        return None
    for answer in (yield batch):
        if isinstance(answer, ConflictError) and not isinstance(answer, FencedError):
            continue  # written before: the first write stands
        one(answer)
    return None


def _delete(ns: str, keys: Iterable[str], fence: Fence) -> Steps:
    keys = list(keys)
    for start in range(0, len(keys), _CHUNK):
        ops: List[Dict[str, Any]] = [{"op": "delete", "namespace": ns, "key": k} for k in keys[start : start + _CHUNK]]
        if fence is not None:
            ops = [{**op, "fence": fence} for op in ops]
        [answer] = yield [("Txn", {"compare": [], "ops": ops})]
        one(answer)
    return None


def thread_keys(ns: str, thread_id: str) -> Steps:
    """Every record of a thread: (checkpoints, writes, blobs)."""
    cps = yield from list_all(ns, _keys.checkpoints(thread_id))
    writes = yield from list_all(ns, _keys.writes(thread_id))
    blobs = yield from list_all(ns, _keys.blobs(thread_id))
    return cps, writes, blobs


def delete_thread(ns: str, thread_id: str, fence: Fence) -> Steps:
    cps, writes, blobs = yield from thread_keys(ns, thread_id)
    # Checkpoints first: a reader never finds one whose values are already gone.
    yield from _delete(ns, [r["key"] for r in (*cps, *writes, *blobs)], fence)
    return None


def run_checkpoints(ns: str, run_ids: Set[str]) -> Steps:
    """Every checkpoint made by one of `run_ids`."""
    cps = yield from list_all(ns, _keys.checkpoints())
    return [r for r in cps if r["value"].get("run_id") in run_ids]


def delete_checkpoints(ns: str, records: List[Dict[str, Any]], fence: Fence) -> Steps:
    """Deletes checkpoints (records of one thread) and their pending writes."""
    keys = []
    for r in records:
        v = r["value"]
        writes = yield from list_all(ns, _keys.writes(v["thread_id"], v["checkpoint_ns"], v["checkpoint_id"]))
        keys.append(r["key"])
        keys.extend(w["key"] for w in writes)
    yield from _delete(ns, keys, fence)
    return None


def copy_thread(ns: str, source: str, target: str, fence: Fence) -> Steps:
    """Copies every record of `source` to `target`: values and writes first, the
    checkpoints last, every op fenced by the target's lease."""
    cps, writes, blobs = yield from thread_keys(ns, source)
    old, new = _keys.part(source), _keys.part(target)
    batch: Batch = []
    for r in (*blobs, *writes, *cps):
        kind, rest = r["key"].split("/", 1)
        assert rest.startswith(old + "/")
        value = r["value"]
        if kind == "c":
            value = {**value, "thread_id": target}
        params: Dict[str, Any] = {"namespace": ns, "key": f"{kind}/{new}{rest[len(old) :]}", "value": value}
        if fence is not None:
            params["fence"] = fence
        batch.append(("Set", params))
    for start in range(0, len(batch), _CHUNK):
        for answer in (yield batch[start : start + _CHUNK]):
            one(answer)
    return None


def prune(ns: str, serde: SerializerProtocol, thread_id: str, fence: Fence) -> Steps:
    """Keeps the latest checkpoint of each of the thread's checkpoint namespaces, with its
    writes and the channel values it names; deletes the rest."""
    cps, writes, blobs = yield from thread_keys(ns, thread_id)
    kept: Dict[str, Dict[str, Any]] = {}
    for r in cps:  # newest first within each namespace
        kept.setdefault(r["value"]["checkpoint_ns"], r["value"])
    kept_ids = {(c, v["checkpoint_id"]) for c, v in kept.items()}
    needed = set()
    for c, v in kept.items():
        for channel, version in untyped(serde, v["checkpoint"])["channel_versions"].items():
            needed.add(_keys.blob(thread_id, c, channel, version))
    kept_writes = {_keys.writes(thread_id, c, cid) for c, cid in kept_ids}
    doomed = [r["key"] for r in cps if (r["value"]["checkpoint_ns"], r["value"]["checkpoint_id"]) not in kept_ids]
    doomed += [r["key"] for r in writes if not any(r["key"].startswith(p) for p in kept_writes)]
    doomed += [r["key"] for r in blobs if r["key"] not in needed]
    yield from _delete(ns, doomed, fence)
    return None
