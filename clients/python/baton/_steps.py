"""The framework adapters' requests, written once for a `Client` and an `AsyncClient`.

An adapter's operation is a generator of steps: it yields a batch of requests (method,
params) and is sent back their answers in order, each the result or the `BatonError`
the daemon answered; it returns the operation's value. `run` drives it on a `Client`
(a batch of several goes out as one pipeline: one round trip), `arun` on an
`AsyncClient` (the batch's calls gathered: pipelined on its connection) or on a `Client`
from a worker thread, so an event loop never blocks on a socket.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any, Dict, Generator, List, Tuple, TypeVar, Union

from urllib.parse import quote

from .aio import AsyncClient
from .client import Client
from .errors import BatonError

Request = Tuple[str, Dict[str, Any]]
Batch = List[Request]
#: An answer: the method's result, or the error the daemon answered with.
Answer = Any
Steps = Generator[Batch, List[Answer], "T"]
T = TypeVar("T")
AnyClient = Union[Client, AsyncClient]


def exchange(client: Client, batch: Batch) -> List[Answer]:
    """One batch on a Client: a lone request as a call, several as one pipeline."""
    if len(batch) == 1:
        method, params = batch[0]
        try:
            return [client.call(method, params)]
        except BatonError as err:
            if isinstance(err, ConnectionError):
                raise
            return [err]
    pipeline = client.pipeline()
    for method, params in batch:
        pipeline.call(method, params)
    return pipeline.execute(raise_on_error=False)


def run(client: AnyClient, steps: "Generator[Batch, List[Answer], T]") -> T:
    """Drives `steps` on a Client, synchronously."""
    if not isinstance(client, Client):
        steps.close()
        raise TypeError(
            "this adapter was built on an AsyncClient, which only async code can drive; "
            "use the async methods (ainvoke, astream, aget, ...), or build it on a baton.Client"
        )
    try:
        batch = next(steps)
        while True:
            batch = steps.send(exchange(client, batch))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def _gathered(client: AsyncClient, batch: Batch) -> List[Answer]:
    answers = await asyncio.gather(*(client.call(m, p) for m, p in batch), return_exceptions=True)
    for answer in answers:
        # Only the daemon's answers are handed back; a broken connection (or a bug) raises.
        if isinstance(answer, BaseException) and (
            not isinstance(answer, BatonError) or isinstance(answer, ConnectionError)
        ):
            raise answer
    return list(answers)


async def arun(client: AnyClient, steps: "Generator[Batch, List[Answer], T]") -> T:
    """Drives `steps` from async code: natively on an AsyncClient, or on a Client from a
    worker thread."""
    try:
        batch = next(steps)
        while True:
            if isinstance(client, AsyncClient):
                answers = await _gathered(client, batch)
            else:
                answers = await asyncio.to_thread(exchange, client, batch)
            batch = steps.send(answers)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def one(answer: Answer) -> Any:
    """An answer's result, raising the error it is."""
    if isinstance(answer, BaseException):
        raise answer
    return answer


def listed(namespace: str, prefix: str, *, after: "str | None" = None, limit: int = 1000) -> Request:
    """A List request by key prefix."""
    params: Dict[str, Any] = {"namespace": namespace, "prefix": prefix, "limit": limit}
    if after is not None:
        params["after"] = after
    return ("List", params)


def list_all(namespace: str, prefix: str) -> "Generator[Batch, List[Answer], List[Dict[str, Any]]]":
    """Every live record under `prefix`, in key order, a page (1000) at a time."""
    records: List[Dict[str, Any]] = []
    after = None
    while True:
        [answer] = yield [listed(namespace, prefix, after=after)]
        page = one(answer)
        records.extend(page["records"])
        after = page.get("next")
        if not after:
            return records


def part(value: str) -> str:
    """One part of an adapter's key, percent-encoded (`/`, `%`, `#` and anything outside
    printable ASCII), so an id holding `/` cannot reach into another's keys; a part
    whose encoding is over 128 bytes is `#` and its SHA-256 (the record keeps the id)."""
    encoded = quote(value, safe=":@=+,;!*()'-._~")
    if len(encoded) > 128:
        return "#" + hashlib.sha256(value.encode()).hexdigest()
    return encoded
