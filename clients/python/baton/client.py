"""The synchronous client: one persistent connection, safe to share between threads."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

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


# Requests of a pipeline sent before the answers of the window before them are read.
_WINDOW = 512


class Client:
    """A connection to batond.

    Calls from several threads are serialized on the one connection. A call with
    `wait_ms` holds the connection until it ends (answers keep request order), so give
    a worker that waits its own Client. `lock()`, `run_worker()` and `subscribe()` open
    the extra connections they need themselves.
    """

    def __init__(
        self,
        socket_path: "Optional[str | os.PathLike[str] | _common.Endpoint]" = None,
        *,
        timeout: Optional[float] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
    ) -> None:
        """Connects to `url` (unix:///PATH, tls://HOST:PORT, tcp://127.0.0.1:PORT), else
        the socket at `socket_path`, else BATON_URL, else the local socket; authenticates
        with `token`, else BATON_TOKEN, when one is set."""
        self.endpoint = _common.endpoint(socket_path, url=url, token=token)
        #: The Unix socket's path, or the URL.
        self.socket_path = str(self.endpoint)
        self.timeout = timeout
        self._lock = threading.RLock()
        self._sock: Optional[socket.socket] = None
        self._reader: Any = None
        self._next_id = 0

    # -- connection ------------------------------------------------------------------

    def _connect(self) -> None:
        sock = self.endpoint.connect(self.timeout)
        self._sock = sock
        self._reader = sock.makefile("rb")

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                try:
                    self._reader.close()
                    self._sock.close()
                finally:
                    self._sock = None
                    self._reader = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _exchange(self, requests: List[Tuple[str, Dict[str, Any]]]) -> List[Tuple[int, bytes]]:
        """Sends the requests and reads their answer lines, in order. A long pipeline goes
        out in windows of `_WINDOW` requests, each sent before the answers of the one before
        it are read: the pipe stays full, and the answers never pile up unread (batond stops
        reading a client that leaves too many answers unread, so a client that wrote
        everything before reading would wait on itself)."""
        with self._lock:
            if self._sock is None:
                self._connect()
            assert self._sock is not None
            windows: List[Tuple[List[int], bytes]] = []
            for start in range(0, len(requests), _WINDOW):
                ids = []
                encoded = bytearray()
                for method, params in requests[start : start + _WINDOW]:
                    self._next_id += 1
                    ids.append(self._next_id)
                    encoded += _common.encode(self._next_id, method, params)
                windows.append((ids, bytes(encoded)))
            lines: List[Tuple[int, bytes]] = []
            for i, (_, window) in enumerate(windows):
                self._send(window, first=i == 0)
                if i > 0:
                    lines.extend(self._read_answers(windows[i - 1][0]))
            if windows:
                lines.extend(self._read_answers(windows[-1][0]))
            return lines

    def _send(self, out: bytes, first: bool) -> None:
        assert self._sock is not None
        try:
            self._sock.sendall(out)
        except OSError as err:
            if not first:
                self.close()
                raise ConnectionLostError(
                    f"the connection to batond broke in the middle of a pipeline ({err}); the requests already sent may or may not have taken effect",
                    kind="connection_lost",
                ) from err
            # Nothing can have been read by a daemon that is gone: reconnect once.
            self.close()
            self._connect()
            assert self._sock is not None
            try:
                self._sock.sendall(out)
            except OSError:
                self.close()
                raise _common.unreachable(self.socket_path, err) from err

    def _read_answers(self, ids: List[int]) -> List[Tuple[int, bytes]]:
        lines = []
        for request_id in ids:
            try:
                line = self._reader.readline()
            except OSError as err:
                self.close()
                raise ConnectionLostError(
                    f"the connection to batond broke while waiting for an answer ({err}); the request may or may not have taken effect",
                    kind="connection_lost",
                ) from err
            if not line:
                self.close()
                raise ConnectionLostError(
                    "batond closed the connection before answering; the request may or may not have taken effect (check, or retry with an idempotency_key)",
                    kind="connection_lost",
                )
            lines.append((request_id, line))
        return lines

    def call(self, method: str, params: Optional[Dict[str, Any]] = None) -> Any:
        """Any method by name; returns its result or raises its typed error."""
        [(request_id, line)] = self._exchange([(method, params or {})])
        return _common.decode(line, request_id)

    def _dict(self, method: str, params: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        result = self.call(method, params)
        if not isinstance(result, dict):
            raise BatonError(f"{method} answered {result!r}, not an object", kind="protocol")
        return result

    def _pages(
        self, method: str, params: Dict[str, Any], fields: List[str], total: Optional[int] = None
    ) -> Dict[str, Any]:
        """A paged read followed to its end (or to `total` items of `fields[0]`): the first
        page's answer with the items of `fields` of every page."""
        joined: Dict[str, List[Any]] = {}
        first: Optional[Dict[str, Any]] = None
        cursor: Any = None
        step: Optional[Dict[str, Any]] = _common.first_page(params, total)
        while step is not None:
            page = self._dict(method, step)
            first = first if first is not None else page
            cursor = page.get("next")
            step = _common.next_page(step, page, fields, joined, total)
        return dict(first or {}, **joined, next=cursor)

    def pipeline(self) -> "Pipeline":
        """Queue calls and send them in one write: `p = c.pipeline(); p.call(...); p.execute()`."""
        return Pipeline(self)

    # -- versioned state -------------------------------------------------------------

    def get(self, namespace: str, key: str) -> Optional[Record]:
        r = self.call("Get", {"namespace": namespace, "key": key})
        return Record.from_wire(r) if r.get("found") else None

    def set(
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
        """Writes a value. `expected_version`: None = last writer wins, 0 = create only,
        N = only if the stored version is N (else ConflictError with the current value).
        `fence`: a Lease (or `{resource_key, lease_id}` / `{resource_key, fencing_token}`):
        written only while that claim holds, else FencedError and nothing is written."""
        params = _common.set_params(
            namespace,
            key,
            value,
            expected_version=expected_version,
            updated_by=updated_by,
            idempotency_key=idempotency_key,
            fence=fence,
        )
        return SetResult.from_wire(self.call("Set", params))

    def delete(
        self,
        namespace: str,
        key: str,
        *,
        expected_version: Optional[int] = None,
        updated_by: Optional[str] = None,
        fence: Optional[Fence] = None,
    ) -> Dict[str, Any]:
        """Deletes a key (a tombstone version); `fence` as for `set`."""
        return self._dict(
            "Delete",
            _common.delete_params(namespace, key, expected_version=expected_version, updated_by=updated_by, fence=fence),
        )

    def list(
        self, namespace: str, *, prefix: Optional[str] = None, limit: Optional[int] = None, after: Optional[str] = None
    ) -> Page:
        r = self.call("List", _common.list_params(namespace, prefix=prefix, limit=limit, after=after))
        return Page([Record.from_wire(x, namespace) for x in r["records"]], r.get("next", r.get("next_after")))

    def history(
        self, namespace: str, key: str, *, limit: Optional[int] = None, before_version: Optional[int] = None
    ) -> List[Dict[str, Any]]:
        """Versions of a key, newest first: every one kept, or the newest `limit`."""
        params = _common.history_params(namespace, key, limit=None, before_version=before_version)
        return list((self._pages("History", params, ["history"], limit))["history"])

    def export(self, namespace: Optional[str] = None) -> List[Record]:
        """Every live record of a namespace (or of all), in (namespace, key) order, read a
        page at a time (each page a snapshot of its own)."""
        r = self._pages("Export", _common.drop_none(namespace=namespace), ["records"])
        return [Record.from_wire(x) for x in r["records"]]

    def txn(
        self,
        compare: List[Dict[str, Any]],
        ops: List[Dict[str, Any]],
        *,
        updated_by: Optional[str] = None,
        fence: Optional[Fence] = None,
    ) -> Dict[str, Any]:
        """All ops atomically if every compare holds, else ConflictError (`.failed`).
        A compare may be a lease's (`lease.fence`: it is live; `lease.token_fence`: no
        newer lease). An op may carry its own `fence` (a Lease or a dict); `fence` here
        fences every op that carries none. Any fence that fails: FencedError, nothing
        written."""
        return self._dict("Txn", _common.txn_params(compare, ops, updated_by=updated_by, fence=fence))

    def update(
        self,
        namespace: str,
        key: str,
        fn: Callable[[Any], Any],
        *,
        retries: int = 10,
        updated_by: Optional[str] = None,
        fence: Optional[Fence] = None,
    ) -> Record:
        """Read-modify-write that never loses another writer's change: `fn(current)`
        (None when absent) gives the new value, written with the version read; on a
        conflict `fn` runs again on the value that won, after a short random pause (so
        writers that collided do not collide again in step). Returns the record written;
        RetriesExhaustedError after `retries` conflicts in a row. With `fence` (the Lease
        the change is made under), every write carries it: once the claim is lost the
        write raises FencedError, which is not retried."""
        current = self.get(namespace, key)
        value, version = (current.value, current.version) if current else (None, 0)
        for attempt in range(retries + 1):
            new = fn(value)
            try:
                r = self.set(namespace, key, new, expected_version=version, updated_by=updated_by, fence=fence)
            except FencedError:
                raise
            except ConflictError as err:
                value, version = _common.conflict_state(err)
                time.sleep(_common.retry_pause(attempt + 1))
                continue
            return Record(namespace, key, new, r.version, r.revision, updated_by)
        raise RetriesExhaustedError(
            f"{namespace}/{key} changed under every one of {retries + 1} attempts; retry later or raise retries",
            kind="retries_exhausted",
        )

    # -- resource locks --------------------------------------------------------------

    def acquire_lock(
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
        """The raw answer: status acquired / already_held (with lease_id on the acquiring
        connection) or busy (held_by). `mode`: exclusive (default) or shared (readers
        together); `slots`: a counting key's number of holders."""
        return self._dict(
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

    def heartbeat_lock(self, resource_key: str, lease_id: str, *, ttl_secs: Optional[int] = None) -> Dict[str, Any]:
        return self._dict(
            "HeartbeatResourceLock", _common.heartbeat_lock_params(resource_key, lease_id, ttl_secs=ttl_secs)
        )

    def release_lock(
        self,
        resource_key: str,
        lease_id: str,
        *,
        outcome: Optional[str] = None,
        moved_to: Optional[str] = None,
        note: Optional[str] = None,
    ) -> Dict[str, Any]:
        return self._dict(
            "ReleaseResourceLock",
            _common.release_lock_params(resource_key, lease_id, outcome=outcome, moved_to=moved_to, note=note),
        )

    def lock_status(self, resource_key: str) -> Dict[str, Any]:
        return self._dict("ResourceLockStatus", {"resource_key": resource_key})

    def check_fence(self, resource_key: str, fencing_token: int) -> Dict[str, Any]:
        """Whether `fencing_token` is still the latest granted on `resource_key`, for a
        store outside Baton that fences its own writes: `{resource_key, latest,
        latest_fencing_token, held}`; accept a write carrying the token only if `latest`."""
        return self._dict("CheckFence", _common.check_fence_params(resource_key, fencing_token))

    def list_locks(self, *, prefix: Optional[str] = None, owner: Optional[str] = None) -> List[Dict[str, Any]]:
        """Every live lease (all pages), optionally by key prefix or owner."""
        params = _common.list_locks_params(prefix=prefix, owner=owner)
        return list(self._pages("ListResourceLocks", params, ["locks", "waiting"])["locks"])

    def wait_lock(self, resource_key: str, timeout_ms: int) -> Dict[str, Any]:
        """Waits up to `timeout_ms` until the key is free, without taking it: status
        available (with `previous`) or timeout (with `held_by`). Holds the connection
        meanwhile: give it a client of its own."""
        return self._dict("WaitResourceLock", _common.wait_lock_params(resource_key, timeout_ms))

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
    ) -> "HeldLock":
        """`with client.lock("file:src/lib.rs") as lease:` acquires (waiting up to
        `wait_ms`, else LockBusyError), heartbeats every ttl/3 on a connection of its own,
        and releases with `lease.outcome` at the end (`abandoned` if the block raised).
        If a heartbeat finds the lease gone, `lease.lost` is set, `lease.check()` raises,
        and leaving the block raises LeaseLostError."""
        return HeldLock(self, resource_key, owner or _common.default_owner(), ttl_secs, wait_ms, metadata, mode, slots)

    # -- agents and inboxes ----------------------------------------------------------

    def register(
        self,
        name: str,
        *,
        role: Optional[str] = None,
        metadata: Any = None,
        ttl_secs: int = 60,
        takeover: bool = False,
    ) -> "RegisteredAgent":
        """`with client.register("reviewer") as agent:` joins as an agent (409
        ConflictError if the name has a live session, unless `takeover`), heartbeats every
        ttl/3 on a connection of its own, and ends the session at the end, with everything
        attached to it. If a heartbeat finds the session ended, `agent.lost` is set."""
        return RegisteredAgent(self, name, role, metadata, ttl_secs, takeover)

    def list_agents(self) -> List[Dict[str, Any]]:
        """Live agents: name, role, last_seen, locks, nodes, unread."""
        return list(self._pages("ListAgents", {}, ["agents"])["agents"])

    def send(
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
        return self._dict("SendMessage", _common.send_params(agent, to, body, subject=subject, thread_id=thread_id, reply_to=reply_to))

    def read_inbox(
        self,
        agent: "Agent | str",
        *,
        after: Optional[int] = None,
        limit: Optional[int] = None,
        wait_ms: Optional[int] = None,
    ) -> Dict[str, Any]:
        """{messages, next_after}: the agent's messages after `after` (default: its
        acknowledged cursor); with `wait_ms`, waits for one (holding this connection)."""
        return self._dict("ReadInbox", _common.read_inbox_params(agent, after=after, limit=limit, wait_ms=wait_ms))

    def inbox(self, agent: "Agent | str", *, wait_ms: int = 30_000) -> Iterator[Dict[str, Any]]:
        """Yields the agent's messages as they arrive, forever, on a connection of its own
        (start after the acknowledged cursor; `ack` what you have handled)."""
        with Client(self.endpoint) as reader:
            after: Optional[int] = None
            while True:
                page = reader.read_inbox(agent, after=after, wait_ms=wait_ms)
                for message in page["messages"]:
                    yield message
                after = page["next_after"]

    def ack(self, agent: "Agent | str", up_to: int) -> Dict[str, Any]:
        """Marks the agent's messages up to seq `up_to` read -> {acked, unread}."""
        return self._dict("AckMessages", {"session_id": _common.session_of(agent), "up_to": up_to})

    # -- tasks -----------------------------------------------------------------------

    def register_task(self, goal: str, nodes: List[Dict[str, Any]], *, context: Any = None) -> Dict[str, Any]:
        """`nodes`: [{id?, name?, dependencies: [...], payload?, max_attempts?}] -> {task_id, node_ids}."""
        return self._dict("RegisterTask", _common.register_task_params(goal, nodes, context=context))

    def acquire_node(
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
        r = self.call(
            "AcquireNextNode",
            _common.acquire_node_params(task_id, owner, ttl_secs=ttl_secs, wait_ms=wait_ms, labels=labels),
        )
        return Node.from_wire(r) if r else None

    def heartbeat_node(self, node: Node, *, ttl_secs: Optional[int] = None) -> Dict[str, Any]:
        return self._dict("HeartbeatNode", _common.heartbeat_node_params(node, ttl_secs=ttl_secs))

    def complete_node(self, node: Node, result: Any = None, *, fence: Optional[Fence] = None) -> Dict[str, Any]:
        """Finishes the node with `result`; with `fence`, only while that claim holds (else
        FencedError: the node stays yours, nothing is recorded)."""
        return self._dict("CompleteNode", _common.complete_node_params(node, result, fence=fence))

    def fail_node(self, node: Node, error: Any, *, retry: bool = True) -> Dict[str, Any]:
        return self._dict("FailNode", _common.fail_node_params(node, error, retry=retry))

    def commit_event(self, node: Node, action_type: str, payload: Any) -> Dict[str, Any]:
        """Records what the node did in the task's journal (action_type: custom.<what>, or node.progress); answers {event_seq}."""
        return self._dict("CommitEvent", _common.commit_event_params(node, action_type, payload))

    def task_status(self, task_id: str) -> Dict[str, Any]:
        """The task, its node counts and every node (all pages)."""
        return self._pages("TaskStatus", {"task_id": task_id}, ["nodes"])

    def list_tasks(self, *, status: Optional[str] = None, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """Tasks, newest first (all, or the newest `limit`); `status`: running, completed,
        failed or cancelled."""
        params = _common.list_tasks_params(status=status, limit=None)
        return list(self._pages("ListTasks", params, ["tasks"], limit)["tasks"])

    def cancel_task(self, task_id: str) -> Dict[str, Any]:
        return self._dict("CancelTask", {"task_id": task_id})

    # Operator actions (grant `operator`, or admin): each is journalled with who and why.

    def break_lock(
        self,
        resource_key: str,
        *,
        reason: str,
        lease_id: Optional[str] = None,
        owner: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Ends the leases of `resource_key` (every holder, or the one `lease_id` or `owner`
        names) as if released, outcome `broken`; waiters are served. Returns `{resource_key,
        broken: [{owner, mode, fencing_token}], waiters_served, event_seq}`."""
        params: Dict[str, Any] = {"resource_key": resource_key, "reason": reason}
        if lease_id is not None:
            params["lease_id"] = lease_id
        if owner is not None:
            params["owner"] = owner
        return self._dict("BreakLock", params)

    def retry_node(self, task_id: str, node_id: str, *, reason: str) -> Dict[str, Any]:
        """Puts a FAILED node back to PENDING with fresh attempts; its task runs again once no
        node of it is FAILED. Returns `{node_state, task_status, nodes_resumed, still_failed,
        ...}`."""
        return self._dict("RetryNode", {"task_id": task_id, "node_id": node_id, "reason": reason})

    def end_agent_session(self, name: str, *, reason: str) -> Dict[str, Any]:
        """Ends `name`'s live session as EndSession would. Returns `{name, ended,
        locks_ended, nodes_rolled_back, event_seq}`."""
        return self._dict("EndAgentSession", {"name": name, "reason": reason})

    def run_worker(
        self,
        handler: Callable[[Node], Any],
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
        """Runs nodes until none is left: acquire (waiting up to `wait_ms`), heartbeat
        every ttl/3 while `handler(node)` runs, then CompleteNode with its return value,
        or FailNode (retried while attempts remain) if it raised. A node whose lease was
        lost meanwhile is dropped (another worker has it now). Returns nodes handled.

        With `fence` (the Lease of a lock the work needs, held around the call), each
        CompleteNode carries it: once the claim is lost, the result is refused and
        FencedError is raised, ending the run (every later result would be refused too).
        The refused node is not failed, so it costs no attempt: its lease lapses after
        `ttl_secs` and it goes back to the queue. A Lease whose heartbeat found it gone
        raises LeaseLostError before the next node is taken."""
        owner = owner or _common.default_owner()
        handled = 0
        while max_nodes is None or handled < max_nodes:
            _common.check_lease(fence)
            node = self.acquire_node(task_id, owner, ttl_secs=ttl_secs, wait_ms=wait_ms, labels=labels)
            if node is None:
                if stop_when_idle:
                    break
                continue
            handled += 1
            beat = _Heartbeat(self.endpoint, ttl_secs, _node_beat(node, ttl_secs), node)
            try:
                result = handler(node)
            except Exception as exc:  # the node fails; the worker goes on
                beat.stop()
                if not node.lost:
                    try:
                        self.fail_node(node, _common.node_error(exc))
                    except (LeaseInvalidError, NotFoundError):
                        pass
                continue
            beat.stop()
            if node.lost:
                continue
            try:
                self.complete_node(node, result, fence=fence)
            except LeaseInvalidError:
                node.lost = True
        return handled

    # -- journal ---------------------------------------------------------------------

    def read_events(self, since_seq: int = 0, *, limit: Optional[int] = None, **filter: Any) -> Tuple[List[Event], int]:
        """Events after `since_seq` matching the filter (types, namespace, key_prefix,
        resource_prefix, task_id), and the seq to continue from."""
        r = self.call("ReadEvents", _common.read_events_params(since_seq, limit=limit, filter=filter))
        return [Event.from_wire(e) for e in r["events"]], int(r["next_seq"])

    def publish(self, topic: str, payload: Any, *, actor: Optional[str] = None, fence: Optional[Fence] = None) -> int:
        """Appends a `custom.<topic>` event; its seq. `fence` as for `set`."""
        return int(self.call("Publish", _common.publish_params(topic, payload, actor=actor, fence=fence))["event_seq"])

    def subscribe(self, filter: Optional[Dict[str, Any]] = None, since_seq: Optional[int] = None) -> "Subscription":
        """An iterator of Events on a connection of its own: stored matches after
        `since_seq` first, then live ones. If the daemon cuts it off for falling behind,
        it resubscribes where it was, so no event is skipped or repeated."""
        return Subscription(self.endpoint, filter, since_seq)

    # -- system ----------------------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        return self._dict("Health")

    def metrics(self) -> Dict[str, Any]:
        return self._dict("Metrics")

    def describe(self) -> Dict[str, Any]:
        """DescribeInterface: the protocol, every method with its schemas, the error codes."""
        return self._dict("DescribeInterface")


def _node_beat(node: Node, ttl_secs: int) -> Callable[[Client], Any]:
    return lambda c: c.heartbeat_node(node, ttl_secs=ttl_secs)


class Pipeline:
    """Calls sent together in one write; `execute()` returns their results in order."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._requests: List[Tuple[str, Dict[str, Any]]] = []

    def call(self, method: str, params: Optional[Dict[str, Any]] = None) -> "Pipeline":
        self._requests.append((method, params or {}))
        return self

    def set(self, namespace: str, key: str, value: Any, **options: Any) -> "Pipeline":
        """Queues a Set; `options` are its params (`fence` may be a Lease)."""
        if options.get("fence") is not None:
            options["fence"] = _common.fence_param(options["fence"])
        return self.call("Set", {"namespace": namespace, "key": key, "value": value, **options})

    def execute(self, *, raise_on_error: bool = True) -> List[Any]:
        """Results in request order; an error answer raises (the first one) after every
        answer was read, or is returned in place when `raise_on_error` is False."""
        requests, self._requests = self._requests, []
        results: List[Any] = []
        for request_id, line in self._client._exchange(requests):
            try:
                results.append(_common.decode(line, request_id))
            except BatonError as err:
                results.append(err)
        if raise_on_error:
            for r in results:
                if isinstance(r, BatonError):
                    raise r
        return results


class _Heartbeat:
    """Calls `beat` every ttl/3 on its own connection until stopped; marks `target.lost`
    when the daemon says the lease is gone."""

    def __init__(self, socket_path: "_common.Endpoint", ttl_secs: int, beat: Callable[[Client], Any], target: Any) -> None:
        self._stop = threading.Event()
        self._beat = beat
        self._target = target
        self._socket_path = socket_path
        self._interval = _common.heartbeat_interval(ttl_secs)
        self._thread = threading.Thread(target=self._run, name="baton-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with Client(self._socket_path) as client:
            while not self._stop.wait(self._interval):
                try:
                    self._beat(client)
                except (LeaseInvalidError, NotFoundError):
                    self._target.lost = True
                    return
                except BatonError:
                    continue  # daemon briefly unreachable: try again next interval

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class HeldLock:
    """The context manager `Client.lock()` returns."""

    def __init__(
        self, client: Client, resource_key: str, owner: str, ttl_secs: int, wait_ms: Optional[int], metadata: Any,
        mode: Optional[str] = None, slots: Optional[int] = None,
    ) -> None:
        self._client = client
        self._args = (resource_key, owner, ttl_secs, wait_ms, metadata)
        self._shape = (mode, slots)
        self._beat: Optional[_Heartbeat] = None
        self.lease: Optional[Lease] = None

    def __enter__(self) -> Lease:
        resource_key, owner, ttl_secs, wait_ms, metadata = self._args
        mode, slots = self._shape
        r = self._client.acquire_lock(
            resource_key, owner, ttl_secs=ttl_secs, wait_ms=wait_ms, metadata=metadata, mode=mode, slots=slots
        )
        refused = _common.refusal(r)
        if refused is not None:
            raise refused
        lease = Lease.from_wire(r)
        self.lease = lease
        self._beat = _Heartbeat(
            self._client.endpoint,
            ttl_secs,
            lambda c: c.heartbeat_lock(lease.resource_key, lease.lease_id, ttl_secs=ttl_secs),
            lease,
        )
        return lease

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self.lease is not None and self._beat is not None
        self._beat.stop()
        lease = self.lease
        if not lease.lost:
            try:
                self._client.call("ReleaseResourceLock", _common.release_params(lease, exc_type, exc))
            except LeaseInvalidError:
                lease.lost = True
        if lease.lost and exc_type is None:
            lease.check()


class RegisteredAgent:
    """The context manager `Client.register()` returns."""

    def __init__(
        self, client: Client, name: str, role: Optional[str], metadata: Any, ttl_secs: int, takeover: bool
    ) -> None:
        self._client = client
        self._args = (name, role, metadata, ttl_secs, takeover)
        self._beat: Optional[_Heartbeat] = None
        self.agent: Optional[Agent] = None

    def __enter__(self) -> Agent:
        name, role, metadata, ttl_secs, takeover = self._args
        params = _common.register_agent_params(name, role=role, metadata=metadata, ttl_secs=ttl_secs, takeover=takeover)
        r = self._client._dict("RegisterAgent", params)
        agent = Agent(name=r["name"], session_id=r["session_id"], expires_at=r["expires_at"])
        self.agent = agent
        self._beat = _Heartbeat(
            self._client.endpoint,
            ttl_secs,
            lambda c: c.call("AgentHeartbeat", {"session_id": agent.session_id, "ttl_secs": ttl_secs}),
            agent,
        )
        return agent

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self.agent is not None and self._beat is not None
        self._beat.stop()
        if not self.agent.lost:
            try:
                self._client.call("EndSession", {"session_id": self.agent.session_id})
            except LeaseInvalidError:
                self.agent.lost = True


class Subscription:
    """Events from Subscribe, on a connection of its own. Iterate, or call `next(timeout)`."""

    def __init__(
        self, socket_path: "_common.Endpoint", filter: Optional[Dict[str, Any]], since_seq: Optional[int]
    ) -> None:
        self._filter = filter
        self._sock = _common.endpoint(socket_path).connect()
        self._buf = bytearray()
        self._next_id = 0
        self.subscription_id = ""
        #: The seq of the last event delivered (or the start point): resume from here.
        self.last_seq = self._subscribe(since_seq)

    def _subscribe(self, since_seq: Optional[int]) -> int:
        self._next_id += 1
        params = _common.subscribe_params(since_seq, self._filter)
        self._sock.sendall(_common.encode(self._next_id, "Subscribe", params))
        while True:
            line = self._readline(None)
            assert line is not None
            if "id" in json.loads(line):
                result = _common.decode(line, self._next_id)
                self.subscription_id = result["subscription_id"]
                return int(result["since_seq"])

    def _readline(self, timeout: Optional[float]) -> Optional[bytes]:
        """One line, or None when `timeout` passed first (a partial line stays buffered)."""
        self._sock.settimeout(timeout)
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[: end + 1])
                del self._buf[: end + 1]
                return line
            try:
                chunk = self._sock.recv(65536)
            except socket.timeout:
                return None
            if not chunk:
                raise ConnectionLostError(
                    f"batond closed the subscription's connection; subscribe again with since_seq {self.last_seq}",
                    kind="connection_lost",
                )
            self._buf += chunk

    def next(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next event, or None if none arrived within `timeout` seconds."""
        while True:
            line = self._readline(timeout)
            if line is None:
                return None
            event, resume = _common.notification(line, self.last_seq)
            if event is not None:
                self.last_seq = event.seq
                return event
            if resume is not None:
                # Cut off for falling behind: carry on after the last event delivered.
                self._subscribe(resume)

    def __iter__(self) -> Iterator[Event]:
        while True:
            event = self.next()
            if event is not None:
                yield event

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
