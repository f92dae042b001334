"""The OpenAI Agents SDK's `Session` protocol on batond: `BatonSession`.

Install with `pip install "baton-client[openai-agents]"` (from a checkout:
`pip install "./clients/python[openai-agents]"`).

    from agents import Agent, Runner
    from baton import Client
    from baton.openai_agents import BatonSession

    session = BatonSession("conversation-42", Client())
    await Runner.run(agent, "Hello", session=session)

A session's history lives in one Baton namespace (default `openai-agents`):

    s/<session_id>/head            {"start": S, "next": N}: the items are S .. N-1
    s/<session_id>/i/<20 digits>   one item (its sequence number, zero-padded)

(`session_id` percent-encoded, as every adapter's key parts are: `baton._steps.part`.) Every change moves
the head by compare-and-set in the same Txn as its items: writers that race, also the
first uses of a new session id from several processes, queue up behind each other's
version and append to one history in one order; none is lost or split off.
`clear_session` moves `start` up to `next` (the head stays, so a writer still holding
the old head cannot reuse the cleared numbers), then deletes the cleared items.
"""

from __future__ import annotations

import random
from typing import Any, Dict, Generator, List, Optional, Union

from agents.items import TResponseInputItem
from agents.memory import SessionSettings

from . import _steps
from ._steps import Answer, Batch, one, part
from .aio import AsyncClient
from .client import Client
from .errors import ConflictError, FencedError, RetriesExhaustedError

Steps = Generator[Batch, List[Answer], Any]

# Items written per Txn when a session's old items are deleted after a clear.
_CHUNK = 200
_PAGE = 1000


class _Retry(Exception):
    """The head moved under a change: read it again and redo the change."""


class BatonSession:
    """An OpenAI Agents SDK session (the `Session` protocol: `get_items`, `add_items`,
    `pop_item`, `clear_session`, `session_id`, `session_settings`) kept in batond.

    `client`: a `baton.Client` (used from a worker thread, so any event loop, also
    `Runner.run_sync`'s, may call the session), or a `baton.AsyncClient` (then only from
    the event loop it was first used on); None connects as `Client()` does, to
    `socket_path` / `url` with `token`. `session_settings.limit`: how many of the latest
    items `get_items()` returns when no limit is given (all by default). `retries`: how
    many times a change is redone after a concurrent one moved the head first (with a
    short random pause each time) before RetriesExhaustedError.
    """

    def __init__(
        self,
        session_id: str,
        client: Optional[Union[Client, AsyncClient]] = None,
        *,
        namespace: str = "openai-agents",
        session_settings: Optional[SessionSettings] = None,
        socket_path: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        retries: int = 100,
    ) -> None:
        if not session_id:
            raise ValueError("session_id must be a non-empty string naming the conversation")
        if not namespace:
            raise ValueError("namespace must be a non-empty Baton namespace, e.g. \"openai-agents\"")
        self.session_id = session_id
        self.session_settings: Optional[SessionSettings] = session_settings or SessionSettings()
        self.client: Union[Client, AsyncClient] = (
            client if client is not None else Client(socket_path, url=url, token=token)
        )
        self._owns_client = client is None
        self.namespace = namespace
        self.retries = retries
        self._base = f"s/{part(session_id)}/"
        self._head = self._base + "head"

    # -- the protocol -------------------------------------------------------------------

    async def get_items(self, limit: Optional[int] = None) -> List[TResponseInputItem]:
        """The history, oldest first; with `limit` (else `session_settings.limit`), only
        the latest `limit` items (none for 0, all for a negative one)."""
        wanted = limit if limit is not None else _settings_limit(self.session_settings)
        items: List[TResponseInputItem] = await _steps.arun(self.client, self._get(wanted))
        return items

    async def add_items(self, items: List[TResponseInputItem]) -> None:
        """Appends `items` after every item any writer appended before."""
        if items:
            await self._changing(lambda: self._add(list(items)))

    async def pop_item(self) -> Optional[TResponseInputItem]:
        """Removes and returns the latest item (None when the session is empty)."""
        popped: Optional[TResponseInputItem] = await self._changing(self._pop)
        return popped

    async def clear_session(self) -> None:
        """Removes every item."""
        await self._changing(self._clear)

    def close(self) -> None:
        """Closes the client this session opened itself (not one it was given)."""
        if self._owns_client and isinstance(self.client, Client):
            self.client.close()

    # -- steps ------------------------------------------------------------------------------

    async def _changing(self, make: Any) -> Any:
        for attempt in range(self.retries + 1):
            try:
                return await _steps.arun(self.client, make())
            except _Retry:
                await _pause(attempt)
        raise RetriesExhaustedError(
            f"session {self.session_id!r} was changed by other writers under each of {self.retries + 1} "
            "attempts; retry later, or raise retries",
            kind="retries_exhausted",
        )

    def _item(self, seq: int) -> str:
        return f"{self._base}i/{seq:020d}"

    def _read_head(self) -> Steps:
        """(version, start, next) of the head; (0, 0, 0) for a session never written."""
        [answer] = yield [("Get", {"namespace": self.namespace, "key": self._head})]
        got = one(answer)
        if not got.get("found"):
            return 0, 0, 0
        return int(got["version"]), int(got["value"]["start"]), int(got["value"]["next"])

    def _commit(self, version: int, head: Dict[str, int], ops: List[Dict[str, Any]]) -> Steps:
        """The change, if the head is still at `version`."""
        compare = [{"namespace": self.namespace, "key": self._head, "version": version}]
        ops = [{"op": "set", "namespace": self.namespace, "key": self._head, "value": head}, *ops]
        [answer] = yield [("Txn", {"compare": compare, "ops": ops})]
        if isinstance(answer, ConflictError) and not isinstance(answer, FencedError):
            raise _Retry()
        one(answer)
        return None

    def _get(self, limit: Optional[int]) -> Steps:
        if limit == 0:
            return []
        _, start, end = yield from self._read_head()
        if limit is not None and limit > 0:
            start = max(start, end - limit)
        items: List[TResponseInputItem] = []
        after: Optional[str] = self._item(start - 1) if start > 0 else None
        while True:
            page = yield [_steps.listed(self.namespace, self._base + "i/", after=after, limit=_PAGE)]
            records = one(page[0])["records"]
            for r in records:
                if r["key"] >= self._item(end):
                    return items
                items.append(r["value"])
            after = one(page[0]).get("next")
            if not after:
                return items

    def _add(self, items: List[TResponseInputItem]) -> Steps:
        version, start, end = yield from self._read_head()
        ops = [
            {"op": "set", "namespace": self.namespace, "key": self._item(end + i), "value": item}
            for i, item in enumerate(items)
        ]
        yield from self._commit(version, {"start": start, "next": end + len(items)}, ops)
        return None

    def _pop(self) -> Steps:
        version, start, end = yield from self._read_head()
        if end <= start:
            return None
        [answer] = yield [("Get", {"namespace": self.namespace, "key": self._item(end - 1)})]
        got = one(answer)
        if not got.get("found"):
            raise _Retry()  # a pop that moved the head is on its way
        delete = {"op": "delete", "namespace": self.namespace, "key": self._item(end - 1)}
        yield from self._commit(version, {"start": start, "next": end - 1}, [delete])
        return got["value"]

    def _clear(self) -> Steps:
        version, start, end = yield from self._read_head()
        if version == 0 or start == end:
            return None
        yield from self._commit(version, {"start": end, "next": end}, [])
        # The cleared items are no one's now: delete them, a chunk per Txn.
        for first in range(start, end, _CHUNK):
            ops = [
                {"op": "delete", "namespace": self.namespace, "key": self._item(seq)}
                for seq in range(first, min(end, first + _CHUNK))
            ]
            [answer] = yield [("Txn", {"compare": [], "ops": ops})]
            one(answer)
        return None


def _settings_limit(settings: Any) -> Optional[int]:
    """`session_settings.limit` (a SessionSettings, or a dict as the SDK also takes)."""
    if settings is None:
        return None
    limit = settings.get("limit") if isinstance(settings, dict) else getattr(settings, "limit", None)
    return None if limit is None else int(limit)


async def _pause(attempt: int) -> None:
    import asyncio

    await asyncio.sleep(random.uniform(0, min(0.05, 0.001 * (attempt + 1))))
