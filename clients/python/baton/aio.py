"""The asyncio client: one persistent connection; concurrent calls are pipelined on it."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from collections import deque
from typing import Any, AsyncIterator, Awaitable, Callable, Deque, Dict, List, Optional, Tuple, Union

from . import _common
from .errors import (
    BatonError,
    ConflictError,
    ConnectionLostError,
    FencedError,
    LeaseInvalidError,
    NotFoundError,
    RetriesExhaustedError,
)
from .types import Agent, Event, Fence, Lease, Node, Page, Record, SetResult

MaybeAwaitable = Union[Any, Awaitable[Any]]


async def _resolve(value: MaybeAwaitable) -> Any:
    return await value if inspect.isawaitable(value) else value


class AsyncClient:
    """A connection to batond for asyncio code. Calls from many tasks share the one
    connection and are pipelined (answers come back in request order), which is why
    there is no `pipeline()`: `asyncio.gather` the calls. A call with `wait_ms` (or
    `wait_lock`) holds later answers until it ends: give a waiting worker its own client."""

    def __init__(
        self,
        socket_path: "Optional[str | os.PathLike[str] | _common.Endpoint]" = None,
        *,
        url: Optional[str] = None,
        token: Optional[str] = None,
    ) -> None:
        """Connects as `Client` does: `url`, else `socket_path`, else BATON_URL, else the
        local socket; authenticates with `token`, else BATON_TOKEN."""
        self.endpoint = _common.endpoint(socket_path, url=url, token=token)
        #: The Unix socket's path, or the URL.
        self.socket_path = str(self.endpoint)
        self._conn: Optional[_Connection] = None
        self._send_lock: Optional[asyncio.Lock] = None
        self._next_id = 0

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _send(self, line: bytes) -> "asyncio.Future[bytes]":
        """Writes one request line; the future resolves to its answer line."""
        if self._conn is None or self._conn.closed:
            self._conn = await _Connection.open(self.endpoint)
        try:
            return await self._conn.send(line)
        except OSError as err:
            # The daemon closed this connection (it restarted): it cannot have read the
            # request, so it is safe to send it once more on a new connection.
            await self._conn.close()
            self._conn = await _Connection.open(self.endpoint)
            try:
                return await self._conn.send(line)
            except OSError:
                raise _common.unreachable(self.socket_path, err) from err

    async def call(self, method: str, params: Optional[Dict[str, Any]] = None) -> Any:
        """Any method by name; returns its result or raises its typed error."""
        if self._send_lock is None:
            self._send_lock = asyncio.Lock()
        async with self._send_lock:
            self._next_id += 1
            request_id = self._next_id
            future = await self._send(_common.encode(request_id, method, params or {}))
        return _common.decode(await future, request_id)

    async def _dict(self, method: str, params: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        result = await self.call(method, params)
        if not isinstance(result, dict):
            raise BatonError(f"{method} answered {result!r}, not an object", kind="protocol")
        return result

    async def _pages(
        self, method: str, params: Dict[str, Any], fields: List[str], total: Optional[int] = None
    ) -> Dict[str, Any]:
        """A paged read followed to its end (or to `total` items of `fields[0]`): the first
        page's answer with the items of `fields` of every page."""
        joined: Dict[str, List[Any]] = {}
        first: Optional[Dict[str, Any]] = None
        cursor: Any = None
        step: Optional[Dict[str, Any]] = _common.first_page(params, total)
        while step is not None:
            page = await self._dict(method, step)
            first = first if first is not None else page
            cursor = page.get("next")
            step = _common.next_page(step, page, fields, joined, total)
        return dict(first or {}, **joined, next=cursor)

    # -- versioned state -------------------------------------------------------------

    async def get(self, namespace: str, key: str) -> Optional[Record]:
        r = await self.call("Get", {"namespace": namespace, "key": key})
        return Record.from_wire(r) if r.get("found") else None

    async def set(
        self,
        namespace: str,
        key: str,
        value: Any,
        *,
        expected_version: Optional[int] = None,
        updated_by: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        fence: Optional[Fence] = None,
    ) -> SetResult:
        """See Client.set."""
        params = _common.set_params(
            namespace,
            key,
            value,
            expected_version=expected_version,
            updated_by=updated_by,
            idempotency_key=idempotency_key,
            fence=fence,
        )
        return SetResult.from_wire(await self.call("Set", params))

    async def delete(
        self,
        namespace: str,
        key: str,
        *,
        expected_version: Optional[int] = None,
        updated_by: Optional[str] = None,
        fence: Optional[Fence] = None,
    ) -> Dict[str, Any]:
        return await self._dict(
            "Delete",
            _common.delete_params(namespace, key, expected_version=expected_version, updated_by=updated_by, fence=fence),
        )

    async def list(
        self, namespace: str, *, prefix: Optional[str] = None, limit: Optional[int] = None, after: Optional[str] = None
    ) -> Page:
        r = await self.call("List", _common.list_params(namespace, prefix=prefix, limit=limit, after=after))
        return Page([Record.from_wire(x, namespace) for x in r["records"]], r.get("next", r.get("next_after")))

    async def history(
        self, namespace: str, key: str, *, limit: Optional[int] = None, before_version: Optional[int] = None
    ) -> List[Dict[str, Any]]:
        """Versions of a key, newest first: every one kept, or the newest `limit`."""
        params = _common.history_params(namespace, key, limit=None, before_version=before_version)
        return list((await self._pages("History", params, ["history"], limit))["history"])

    async def export(self, namespace: Optional[str] = None) -> List[Record]:
        """Every live record of a namespace (or of all), in (namespace, key) order, read a
        page at a time (each page a snapshot of its own)."""
        r = await self._pages("Export", _common.drop_none(namespace=namespace), ["records"])
        return [Record.from_wire(x) for x in r["records"]]

    async def txn(
        self,
        compare: List[Dict[str, Any]],
        ops: List[Dict[str, Any]],
        *,
        updated_by: Optional[str] = None,
        fence: Optional[Fence] = None,
    ) -> Dict[str, Any]:
        """See Client.txn."""
        return await self._dict("Txn", _common.txn_params(compare, ops, updated_by=updated_by, fence=fence))

    async def update(
        self,
        namespace: str,
        key: str,
        fn: Callable[[Any], MaybeAwaitable],
        *,
        retries: int = 10,
        updated_by: Optional[str] = None,
        fence: Optional[Fence] = None,
    ) -> Record:
        """Optimistic read-modify-write; `fn` may be sync or async. See Client.update."""
        current = await self.get(namespace, key)
        value, version = (current.value, current.version) if current else (None, 0)
        for attempt in range(retries + 1):
            new = await _resolve(fn(value))
            try:
                r = await self.set(namespace, key, new, expected_version=version, updated_by=updated_by, fence=fence)
            except FencedError:
                raise
            except ConflictError as err:
                value, version = _common.conflict_state(err)
                await asyncio.sleep(_common.retry_pause(attempt + 1))
                continue
            return Record(namespace, key, new, r.version, r.revision, updated_by)
        raise RetriesExhaustedError(
            f"{namespace}/{key} changed under every one of {retries + 1} attempts; retry later or raise retries",
            kind="retries_exhausted",
        )

    # -- resource locks --------------------------------------------------------------

    async def acquire_lock(
        self,
        resource_key: str,
        owner: Optional[str] = None,
        *,
        ttl_secs: Optional[int] = None,
        wait_ms: Optional[int] = None,
        metadata: Any = None,
        provider: Optional[str] = None,
        release_on_disconnect: Optional[bool] = None,
        mode: Optional[str] = None,
        slots: Optional[int] = None,
    ) -> Dict[str, Any]:
        return await self._dict(
            "AcquireResourceLock",
            _common.lock_params(
                resource_key,
                owner,
                ttl_secs=ttl_secs,
                wait_ms=wait_ms,
                metadata=metadata,
                provider=provider,
                release_on_disconnect=release_on_disconnect,
                mode=mode,
                slots=slots,
            ),
        )

    async def heartbeat_lock(self, resource_key: str, lease_id: str, *, ttl_secs: Optional[int] = None) -> Dict[str, Any]:
        return await self._dict(
            "HeartbeatResourceLock", _common.heartbeat_lock_params(resource_key, lease_id, ttl_secs=ttl_secs)
        )

    async def release_lock(
        self,
        resource_key: str,
        lease_id: str,
        *,
        outcome: Optional[str] = None,
        moved_to: Optional[str] = None,
        note: Optional[str] = None,
    ) -> Dict[str, Any]:
        return await self._dict(
            "ReleaseResourceLock",
            _common.release_lock_params(resource_key, lease_id, outcome=outcome, moved_to=moved_to, note=note),
        )

    async def lock_status(self, resource_key: str) -> Dict[str, Any]:
        return await self._dict("ResourceLockStatus", {"resource_key": resource_key})

    async def check_fence(self, resource_key: str, fencing_token: int) -> Dict[str, Any]:
        """See Client.check_fence."""
        return await self._dict("CheckFence", _common.check_fence_params(resource_key, fencing_token))

    async def list_locks(self, *, prefix: Optional[str] = None, owner: Optional[str] = None) -> List[Dict[str, Any]]:
        """Every live lease (all pages), optionally by key prefix or owner."""
        params = _common.list_locks_params(prefix=prefix, owner=owner)
        return list((await self._pages("ListResourceLocks", params, ["locks", "waiting"]))["locks"])

    async def wait_lock(self, resource_key: str, timeout_ms: int) -> Dict[str, Any]:
        """Waits up to `timeout_ms` until the key is free, without taking it: status
        available (with `previous`) or timeout (with `held_by`). Later answers on this
        client wait behind it: give it a client of its own."""
        return await self._dict("WaitResourceLock", _common.wait_lock_params(resource_key, timeout_ms))

    # -- agents and inboxes ----------------------------------------------------------

    def register(
        self,
        name: str,
        *,
        role: Optional[str] = None,
        metadata: Any = None,
        ttl_secs: int = 60,
        takeover: bool = False,
    ) -> "AsyncRegisteredAgent":
        """`async with client.register("reviewer") as agent:` joins as an agent (409
        ConflictError if the name has a live session, unless `takeover`), heartbeats every
        ttl/3 on a connection of its own, and ends the session at the end, with everything
        attached to it. If a heartbeat finds the session ended, `agent.lost` is set."""
        return AsyncRegisteredAgent(self, name, role, metadata, ttl_secs, takeover)

    async def list_agents(self) -> List[Dict[str, Any]]:
        """Live agents: name, role, last_seen, locks, nodes, unread."""
        return list((await self._pages("ListAgents", {}, ["agents"]))["agents"])

    async def send(
        self,
        agent: "Agent | str",
        to: "str | List[str]",
        body: Any,
        *,
        subject: Optional[str] = None,
        thread_id: Optional[str] = None,
        reply_to: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Sends `body` from `agent` (an Agent or its session id) to a name, names, or "*";
        -> {message_id, seq}."""
        return await self._dict("SendMessage", _common.send_params(agent, to, body, subject=subject, thread_id=thread_id, reply_to=reply_to))

    async def read_inbox(
        self,
        agent: "Agent | str",
        *,
        after: Optional[int] = None,
        limit: Optional[int] = None,
        wait_ms: Optional[int] = None,
    ) -> Dict[str, Any]:
        """{messages, next_after}: the agent's messages after `after` (default: its
        acknowledged cursor); with `wait_ms`, waits for one (holding this connection)."""
        return await self._dict("ReadInbox", _common.read_inbox_params(agent, after=after, limit=limit, wait_ms=wait_ms))

    async def inbox(self, agent: "Agent | str", *, wait_ms: int = 30_000) -> AsyncIterator[Dict[str, Any]]:
        """Yields the agent's messages as they arrive, forever, on a connection of its own
        (start after the acknowledged cursor; `ack` what you have handled)."""
        async with AsyncClient(self.endpoint) as reader:
            after: Optional[int] = None
            while True:
                page = await reader.read_inbox(agent, after=after, wait_ms=wait_ms)
                for message in page["messages"]:
                    yield message
                after = page["next_after"]

    async def ack(self, agent: "Agent | str", up_to: int) -> Dict[str, Any]:
        """Marks the agent's messages up to seq `up_to` read -> {acked, unread}."""
        return await self._dict("AckMessages", {"session_id": _common.session_of(agent), "up_to": up_to})

    def lock(
        self,
        resource_key: str,
        owner: Optional[str] = None,
        *,
        ttl_secs: int = 60,
        wait_ms: Optional[int] = None,
        metadata: Any = None,
        mode: Optional[str] = None,
        slots: Optional[int] = None,
    ) -> "AsyncHeldLock":
        """`async with client.lock(key) as lease:`; see Client.lock."""
        return AsyncHeldLock(self, resource_key, owner or _common.default_owner(), ttl_secs, wait_ms, metadata, mode, slots)

    # -- tasks -----------------------------------------------------------------------

    async def register_task(self, goal: str, nodes: List[Dict[str, Any]], *, context: Any = None) -> Dict[str, Any]:
        return await self._dict("RegisterTask", _common.register_task_params(goal, nodes, context=context))

    async def acquire_node(
        self,
        task_id: Optional[str] = None,
        owner: Optional[str] = None,
        *,
        ttl_secs: Optional[int] = None,
        wait_ms: Optional[int] = None,
        labels: Optional[List[str]] = None,
    ) -> Optional[Node]:
        """The next runnable node (highest priority first) whose labels are all among
        `labels`, or None."""
        r = await self.call(
            "AcquireNextNode",
            _common.acquire_node_params(task_id, owner, ttl_secs=ttl_secs, wait_ms=wait_ms, labels=labels),
        )
        return Node.from_wire(r) if r else None

    async def heartbeat_node(self, node: Node, *, ttl_secs: Optional[int] = None) -> Dict[str, Any]:
        return await self._dict("HeartbeatNode", _common.heartbeat_node_params(node, ttl_secs=ttl_secs))

    async def complete_node(self, node: Node, result: Any = None, *, fence: Optional[Fence] = None) -> Dict[str, Any]:
        """See Client.complete_node."""
        return await self._dict("CompleteNode", _common.complete_node_params(node, result, fence=fence))

    async def fail_node(self, node: Node, error: Any, *, retry: bool = True) -> Dict[str, Any]:
        return await self._dict("FailNode", _common.fail_node_params(node, error, retry=retry))

    async def commit_event(self, node: Node, action_type: str, payload: Any) -> Dict[str, Any]:
        """Records what the node did in the task's journal (action_type: custom.<what>, or node.progress); answers {event_seq}."""
        return await self._dict("CommitEvent", _common.commit_event_params(node, action_type, payload))

    async def task_status(self, task_id: str) -> Dict[str, Any]:
        """The task, its node counts and every node (all pages)."""
        return await self._pages("TaskStatus", {"task_id": task_id}, ["nodes"])

    async def list_tasks(self, *, status: Optional[str] = None, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """Tasks, newest first (all, or the newest `limit`); `status`: running, completed,
        failed or cancelled."""
        params = _common.list_tasks_params(status=status, limit=None)
        return list((await self._pages("ListTasks", params, ["tasks"], limit))["tasks"])

    async def cancel_task(self, task_id: str) -> Dict[str, Any]:
        return await self._dict("CancelTask", {"task_id": task_id})

    # Operator actions (grant `operator`, or admin): each is journalled with who and why.

    async def break_lock(
        self,
        resource_key: str,
        *,
        reason: str,
        lease_id: Optional[str] = None,
        owner: Optional[str] = None,
    ) -> Dict[str, Any]:
        """See `Client.break_lock`."""
        params: Dict[str, Any] = {"resource_key": resource_key, "reason": reason}
        if lease_id is not None:
            params["lease_id"] = lease_id
        if owner is not None:
            params["owner"] = owner
        return await self._dict("BreakLock", params)

    async def retry_node(self, task_id: str, node_id: str, *, reason: str) -> Dict[str, Any]:
        """See `Client.retry_node`."""
        return await self._dict(
            "RetryNode", {"task_id": task_id, "node_id": node_id, "reason": reason}
        )

    async def end_agent_session(self, name: str, *, reason: str) -> Dict[str, Any]:
        """See `Client.end_agent_session`."""
        return await self._dict("EndAgentSession", {"name": name, "reason": reason})

    async def run_worker(
        self,
        handler: Callable[[Node], MaybeAwaitable],
        *,
        task_id: Optional[str] = None,
        owner: Optional[str] = None,
        ttl_secs: int = 60,
        wait_ms: int = 1000,
        max_nodes: Optional[int] = None,
        stop_when_idle: bool = True,
        labels: Optional[List[str]] = None,
        fence: Optional[Fence] = None,
    ) -> int:
        """See Client.run_worker (and its `fence`); `handler` may be sync or async."""
        owner = owner or _common.default_owner()
        handled = 0
        while max_nodes is None or handled < max_nodes:
            _common.check_lease(fence)
            node = await self.acquire_node(task_id, owner, ttl_secs=ttl_secs, wait_ms=wait_ms, labels=labels)
            if node is None:
                if stop_when_idle:
                    break
                continue
            handled += 1
            beat = _AsyncHeartbeat(self.endpoint, ttl_secs, _node_beat(node, ttl_secs), node)
            try:
                result = await _resolve(handler(node))
            except Exception as exc:
                await beat.stop()
                if not node.lost:
                    try:
                        await self.fail_node(node, _common.node_error(exc))
                    except (LeaseInvalidError, NotFoundError):
                        pass
                continue
            await beat.stop()
            if node.lost:
                continue
            try:
                await self.complete_node(node, result, fence=fence)
            except LeaseInvalidError:
                node.lost = True
        return handled

    # -- journal ---------------------------------------------------------------------

    async def read_events(
        self, since_seq: int = 0, *, limit: Optional[int] = None, **filter: Any
    ) -> Tuple[List[Event], int]:
        r = await self.call("ReadEvents", _common.read_events_params(since_seq, limit=limit, filter=filter))
        return [Event.from_wire(e) for e in r["events"]], int(r["next_seq"])

    async def publish(
        self, topic: str, payload: Any, *, actor: Optional[str] = None, fence: Optional[Fence] = None
    ) -> int:
        r = await self.call("Publish", _common.publish_params(topic, payload, actor=actor, fence=fence))
        return int(r["event_seq"])

    async def subscribe(
        self, filter: Optional[Dict[str, Any]] = None, since_seq: Optional[int] = None
    ) -> "AsyncSubscription":
        """`async for event in await client.subscribe(...)`; see Client.subscribe."""
        sub = AsyncSubscription(self.endpoint, filter)
        await sub._start(since_seq)
        return sub

    # -- system ----------------------------------------------------------------------

    async def health(self) -> Dict[str, Any]:
        return await self._dict("Health")

    async def metrics(self) -> Dict[str, Any]:
        return await self._dict("Metrics")

    async def describe(self) -> Dict[str, Any]:
        """DescribeInterface: the protocol, every method with its schemas, the error codes."""
        return await self._dict("DescribeInterface")


class _Connection:
    """One socket: requests written in order, a reader task resolving their futures."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._pending: Deque["asyncio.Future[bytes]"] = deque()
        self.closed = False
        self._task = asyncio.ensure_future(self._read_answers(reader))

    @classmethod
    async def open(cls, endpoint: "_common.Endpoint") -> "_Connection":
        reader, writer = await endpoint.open()
        return cls(reader, writer)

    async def send(self, line: bytes) -> "asyncio.Future[bytes]":
        """Raises OSError when the request could not be written (nothing was sent)."""
        if self.closed:
            raise BrokenPipeError("the connection is closed")
        # Queued before writing: the answer can arrive before drain() returns.
        future: "asyncio.Future[bytes]" = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        try:
            self._writer.write(line)
            await self._writer.drain()
        except OSError:
            if self._pending and self._pending[-1] is future:
                self._pending.pop()
            future.cancel()
            raise
        return future

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        error: Optional[BaseException] = None
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                if self._pending:  # else a notification; this connection takes none
                    future = self._pending.popleft()
                    if not future.done():
                        future.set_result(line)
        except (OSError, asyncio.IncompleteReadError, ValueError) as err:
            error = err
        self.closed = True
        lost = ConnectionLostError(
            f"the connection to batond ended before answering ({error or 'closed'}); the request may or may not have taken effect",
            kind="connection_lost",
        )
        while self._pending:
            future = self._pending.popleft()
            if not future.done():
                future.set_exception(lost)

    async def close(self) -> None:
        self.closed = True
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except OSError:
            pass
        await asyncio.gather(self._task, return_exceptions=True)


def _node_beat(node: Node, ttl_secs: int) -> Callable[[AsyncClient], Awaitable[Any]]:
    return lambda c: c.heartbeat_node(node, ttl_secs=ttl_secs)


class _AsyncHeartbeat:
    def __init__(
        self, socket_path: "_common.Endpoint", ttl_secs: int, beat: Callable[[AsyncClient], Awaitable[Any]], target: Any
    ) -> None:
        self._beat = beat
        self._target = target
        self._socket_path = socket_path
        self._interval = _common.heartbeat_interval(ttl_secs)
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        async with AsyncClient(self._socket_path) as client:
            while True:
                await asyncio.sleep(self._interval)
                try:
                    await self._beat(client)
                except (LeaseInvalidError, NotFoundError):
                    self._target.lost = True
                    return
                except BatonError:
                    continue

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


class AsyncHeldLock:
    def __init__(
        self, client: AsyncClient, resource_key: str, owner: str, ttl_secs: int, wait_ms: Optional[int], metadata: Any,
        mode: Optional[str] = None, slots: Optional[int] = None,
    ) -> None:
        self._client = client
        self._args = (resource_key, owner, ttl_secs, wait_ms, metadata)
        self._shape = (mode, slots)
        self._beat: Optional[_AsyncHeartbeat] = None
        self.lease: Optional[Lease] = None

    async def __aenter__(self) -> Lease:
        resource_key, owner, ttl_secs, wait_ms, metadata = self._args
        mode, slots = self._shape
        r = await self._client.acquire_lock(
            resource_key, owner, ttl_secs=ttl_secs, wait_ms=wait_ms, metadata=metadata, mode=mode, slots=slots
        )
        refused = _common.refusal(r)
        if refused is not None:
            raise refused
        lease = Lease.from_wire(r)
        self.lease = lease
        self._beat = _AsyncHeartbeat(
            self._client.endpoint,
            ttl_secs,
            lambda c: c.heartbeat_lock(lease.resource_key, lease.lease_id, ttl_secs=ttl_secs),
            lease,
        )
        return lease

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self.lease is not None and self._beat is not None
        await self._beat.stop()
        lease = self.lease
        if not lease.lost:
            try:
                await self._client.call("ReleaseResourceLock", _common.release_params(lease, exc_type, exc))
            except LeaseInvalidError:
                lease.lost = True
        if lease.lost and exc_type is None:
            lease.check()


class AsyncRegisteredAgent:
    """The async context manager `AsyncClient.register()` returns."""

    def __init__(
        self, client: AsyncClient, name: str, role: Optional[str], metadata: Any, ttl_secs: int, takeover: bool
    ) -> None:
        self._client = client
        self._args = (name, role, metadata, ttl_secs, takeover)
        self._beat: Optional[_AsyncHeartbeat] = None
        self.agent: Optional[Agent] = None

    async def __aenter__(self) -> Agent:
        name, role, metadata, ttl_secs, takeover = self._args
        params = _common.register_agent_params(name, role=role, metadata=metadata, ttl_secs=ttl_secs, takeover=takeover)
        r = await self._client._dict("RegisterAgent", params)
        agent = Agent(name=r["name"], session_id=r["session_id"], expires_at=r["expires_at"])
        self.agent = agent
        self._beat = _AsyncHeartbeat(
            self._client.endpoint,
            ttl_secs,
            lambda c: c.call("AgentHeartbeat", {"session_id": agent.session_id, "ttl_secs": ttl_secs}),
            agent,
        )
        return agent

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self.agent is not None and self._beat is not None
        await self._beat.stop()
        if not self.agent.lost:
            try:
                await self._client.call("EndSession", {"session_id": self.agent.session_id})
            except LeaseInvalidError:
                self.agent.lost = True


class AsyncSubscription:
    """Events from Subscribe on a connection of its own; an async iterator."""

    def __init__(self, socket_path: "_common.Endpoint", filter: Optional[Dict[str, Any]]) -> None:
        self._endpoint = _common.endpoint(socket_path)
        self._filter = filter
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._next_id = 0
        self.subscription_id = ""
        self.last_seq = 0

    async def _start(self, since_seq: Optional[int]) -> None:
        self._reader, self._writer = await self._endpoint.open()
        self.last_seq = await self._subscribe(since_seq)

    async def _subscribe(self, since_seq: Optional[int]) -> int:
        assert self._reader is not None and self._writer is not None
        self._next_id += 1
        params = _common.subscribe_params(since_seq, self._filter)
        self._writer.write(_common.encode(self._next_id, "Subscribe", params))
        await self._writer.drain()
        while True:
            line = await self._readline()
            if "id" in json.loads(line):
                result = _common.decode(line, self._next_id)
                self.subscription_id = result["subscription_id"]
                return int(result["since_seq"])

    async def _readline(self) -> bytes:
        assert self._reader is not None
        line = await self._reader.readline()
        if not line:
            raise ConnectionLostError(
                f"batond closed the subscription's connection; subscribe again with since_seq {self.last_seq}",
                kind="connection_lost",
            )
        return line

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        while True:
            event, resume = _common.notification(await self._readline(), self.last_seq)
            if event is not None:
                self.last_seq = event.seq
                return event
            if resume is not None:
                await self._subscribe(resume)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass

    async def __aenter__(self) -> "AsyncSubscription":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
