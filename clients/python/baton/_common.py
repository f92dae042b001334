"""What the sync and asyncio clients share: where batond is (a socket or a URL), who we
are, framing."""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import ssl
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .errors import BatonError, CompactedError, ConflictError, DaemonUnreachableError, LockBusyError, from_wire
from .types import Event, Fence, Lease, Node


def socket_path(explicit: "Optional[str | os.PathLike[str]]" = None) -> str:
    """The daemon's socket: the argument, else BATON_SOCKET_PATH, else
    $BATON_HOME/baton.sock, else ~/.baton/baton.sock."""
    if explicit:
        return os.fspath(explicit)
    if os.environ.get("BATON_SOCKET_PATH"):
        return os.environ["BATON_SOCKET_PATH"]
    home = os.environ.get("BATON_HOME") or str(Path.home() / ".baton")
    return str(Path(home) / "baton.sock")


class Endpoint:
    """Where batond is and how to reach it: a Unix socket, or `tcp://HOST:PORT` (loopback
    only) or `tls://HOST:PORT`, with the token to authenticate with right after connecting.
    TLS verifies batond's certificate against the system's roots, or `tls_ca`."""

    def __init__(
        self,
        scheme: str,
        *,
        path: str = "",
        host: str = "",
        port: int = 0,
        token: Optional[str] = None,
        tls_ca: Optional[str] = None,
        client_cert: Optional[Tuple[str, str]] = None,
    ) -> None:
        self.scheme = scheme
        self.path = path
        self.host = host
        self.port = port
        self.token = token or None
        self.tls_ca = tls_ca or None
        self.client_cert = client_cert
        self._ssl: Optional[ssl.SSLContext] = None

    @classmethod
    def parse(cls, url: str, **kwargs: Any) -> "Endpoint":
        """Reads unix:///PATH, tcp://HOST:PORT or tls://HOST:PORT."""
        scheme, sep, rest = url.partition("://")
        bad = ValueError(
            f"`{url}` is not a batond URL; write unix:///path/to/baton.sock, tls://HOST:PORT or tcp://127.0.0.1:PORT"
        )
        if not sep:
            raise bad
        if scheme == "unix":
            if not rest.startswith("/"):
                raise bad
            return cls("unix", path=rest, **kwargs)
        if scheme not in ("tcp", "tls"):
            raise bad
        host, colon, port = rest.rstrip("/").rpartition(":")
        host = host.strip("[]")
        if not colon or not host or not port.isdigit():
            raise bad
        return cls(scheme, host=host, port=int(port), **kwargs)

    def __str__(self) -> str:
        if self.scheme == "unix":
            return self.path
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def __repr__(self) -> str:  # never the token
        return f"Endpoint({str(self)!r}, token={'set' if self.token else None})"

    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            context = ssl.create_default_context(cafile=self.tls_ca)
            if self.client_cert:
                context.load_cert_chain(*self.client_cert)
            self._ssl = context
        return self._ssl

    def authenticate_line(self) -> Optional[bytes]:
        """The Authenticate request to send first (id 0), when there is a token."""
        if not self.token:
            return None
        return encode(0, "Authenticate", {"token": self.token})

    def connect(self, timeout: Optional[float] = None) -> socket.socket:
        """A connected (and authenticated) blocking socket."""
        try:
            if self.scheme == "unix":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                try:
                    sock.connect(self.path)
                except OSError:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection((self.host, self.port), timeout=timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.scheme == "tls":
                    try:
                        sock = self.ssl_context().wrap_socket(sock, server_hostname=self.host)
                    except OSError:
                        sock.close()
                        raise
        except OSError as err:
            raise unreachable(str(self), err) from err
        line = self.authenticate_line()
        if line is not None:
            try:
                sock.sendall(line)
                answer = b""
                while not answer.endswith(b"\n"):
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise ConnectionResetError("batond closed the connection")
                    answer += chunk
            except OSError as err:
                sock.close()
                raise unreachable(str(self), err) from err
            try:
                decode(answer, 0)
            except BatonError:
                sock.close()
                raise
        return sock

    async def open(self) -> "Tuple[asyncio.StreamReader, asyncio.StreamWriter]":
        """A connected (and authenticated) asyncio stream pair."""
        limit = 64 * 1024 * 1024
        try:
            if self.scheme == "unix":
                reader, writer = await asyncio.open_unix_connection(self.path, limit=limit)
            else:
                reader, writer = await asyncio.open_connection(
                    self.host,
                    self.port,
                    limit=limit,
                    ssl=self.ssl_context() if self.scheme == "tls" else None,
                    server_hostname=self.host if self.scheme == "tls" else None,
                )
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as err:
            raise unreachable(str(self), err) from err
        line = self.authenticate_line()
        if line is not None:
            try:
                writer.write(line)
                await writer.drain()
                answer = await reader.readline()
            except OSError as err:
                writer.close()
                raise unreachable(str(self), err) from err
            if not answer:
                writer.close()
                raise unreachable(str(self), ConnectionResetError("batond closed the connection"))
            try:
                decode(answer, 0)
            except BatonError:
                writer.close()
                raise
        return reader, writer


def endpoint(
    socket_path: "Optional[str | os.PathLike[str] | Endpoint]" = None,
    *,
    url: Optional[str] = None,
    token: Optional[str] = None,
) -> Endpoint:
    """Where to connect: `url`, else `socket_path`, else BATON_URL, else the socket as
    `socket_path()` finds it; the token from `token`, else BATON_TOKEN; BATON_TLS_CA,
    BATON_TLS_CLIENT_CERT and BATON_TLS_CLIENT_KEY from the environment."""
    if isinstance(socket_path, Endpoint):
        return socket_path
    env = os.environ.get
    cert, key = env("BATON_TLS_CLIENT_CERT"), env("BATON_TLS_CLIENT_KEY")
    extra: Dict[str, Any] = {
        "token": token or env("BATON_TOKEN"),
        "tls_ca": env("BATON_TLS_CA"),
        "client_cert": (cert, key) if cert and key else None,
    }
    if url:
        return Endpoint.parse(url, **extra)
    if socket_path:
        return Endpoint("unix", path=os.fspath(socket_path), **extra)
    if env("BATON_URL"):
        return Endpoint.parse(env("BATON_URL", ""), **extra)
    return Endpoint("unix", path=socket_path_default(), **extra)


def socket_path_default() -> str:
    return socket_path(None)


def default_owner() -> str:
    """BATON_OWNER, else host:pid (unique per process, readable in ListResourceLocks)."""
    return os.environ.get("BATON_OWNER") or f"{socket.gethostname()}:{os.getpid()}"


def unreachable(path: str, err: OSError) -> DaemonUnreachableError:
    if "://" in path:
        return DaemonUnreachableError(
            f"batond is not reachable at {path} ({err.strerror or err}); check that it listens there "
            "(BATON_LISTEN), the URL (BATON_URL), and that BATON_TLS_CA names the CA of its certificate",
            kind="unreachable",
        )
    return DaemonUnreachableError(
        f"batond is not reachable at {path} ({err.strerror or err}); start it with `batond` "
        "(or `baton` service), or point BATON_SOCKET_PATH at its socket",
        kind="unreachable",
    )


def encode(request_id: int, method: str, params: Dict[str, Any]) -> bytes:
    return (json.dumps({"id": request_id, "method": method, "params": params}, separators=(",", ":")) + "\n").encode()


def decode(line: bytes, request_id: int) -> Any:
    """The result of a response line, or raises its typed error."""
    answer = json.loads(line)
    if answer.get("id") is None and "error" in answer:
        # A line batond could not read (too long, not JSON) is answered in its place with
        # no id: answers keep request order, so it is this request's.
        raise from_wire(answer["error"])
    if answer.get("id") != request_id:
        raise BatonError(f"answer to request {answer.get('id')} arrived for {request_id}", kind="protocol")
    if "error" in answer:
        raise from_wire(answer["error"])
    return answer.get("result")


# The largest page batond serves (DescribeInterface `limits.max_page`).
MAX_PAGE = 1000


def first_page(params: Dict[str, Any], total: Optional[int]) -> Dict[str, Any]:
    """The params of a paged read's first page, asking for no more than `total` items."""
    return dict(params, limit=min(total, MAX_PAGE)) if total is not None else dict(params)


def next_page(
    params: Dict[str, Any], result: Dict[str, Any], fields: List[str], joined: Dict[str, List[Any]], total: Optional[int]
) -> Optional[Dict[str, Any]]:
    """Adds a page's items of `fields` to `joined`; the params of the next page, or None
    when batond said nothing follows (`next` null) or `total` items of `fields[0]` came."""
    for field in fields:
        joined.setdefault(field, []).extend(result.get(field) or [])
    cursor = result.get("next")
    have = len(joined[fields[0]])
    if cursor is None or (total is not None and have >= total):
        return None
    params = dict(params, after=cursor)
    if total is not None:
        params["limit"] = min(total - have, MAX_PAGE)
    return params


def drop_none(**params: Any) -> Dict[str, Any]:
    """Params without the ones left at None (the daemon's defaults apply)."""
    return {k: v for k, v in params.items() if v is not None}


# -- request params ---------------------------------------------------------------------
# Built here once for Client and AsyncClient. No defaults: a method that forgets to pass
# one of its parameters on fails at once instead of silently not sending it.


def fence_param(fence: Optional[Fence]) -> Optional[Dict[str, Any]]:
    """A write's `fence` as sent: a Lease's `{resource_key, lease_id}`, or the dict given."""
    if fence is None:
        return None
    if isinstance(fence, Lease):
        return fence.fence
    return dict(fence)


def fenced_ops(ops: List[Dict[str, Any]], fence: Optional[Fence]) -> List[Dict[str, Any]]:
    """Txn ops as sent: an op's own `fence` (a Lease or a dict) as a dict, and `fence` on
    every op that carries none."""
    out = []
    for op in ops:
        own = op.get("fence")
        if own is None and fence is None:
            out.append(op)
        else:
            out.append({**op, "fence": fence_param(own if own is not None else fence)})
    return out


def set_params(
    namespace: str,
    key: str,
    value: Any,
    *,
    expected_version: Optional[int],
    updated_by: Optional[str],
    idempotency_key: Optional[str],
    fence: Optional[Fence],
) -> Dict[str, Any]:
    params = drop_none(
        namespace=namespace,
        key=key,
        expected_version=expected_version,
        updated_by=updated_by,
        idempotency_key=idempotency_key,
        fence=fence_param(fence),
    )
    params["value"] = value  # a null value is a value: never dropped
    return params


def delete_params(
    namespace: str, key: str, *, expected_version: Optional[int], updated_by: Optional[str], fence: Optional[Fence]
) -> Dict[str, Any]:
    return drop_none(
        namespace=namespace, key=key, expected_version=expected_version, updated_by=updated_by, fence=fence_param(fence)
    )


def list_params(
    namespace: str, *, prefix: Optional[str], limit: Optional[int], after: Optional[str]
) -> Dict[str, Any]:
    return drop_none(namespace=namespace, prefix=prefix, limit=limit, after=after)


def history_params(
    namespace: str, key: str, *, limit: Optional[int], before_version: Optional[int]
) -> Dict[str, Any]:
    return drop_none(namespace=namespace, key=key, limit=limit, before_version=before_version)


def txn_params(
    compare: List[Dict[str, Any]], ops: List[Dict[str, Any]], *, updated_by: Optional[str], fence: Optional[Fence]
) -> Dict[str, Any]:
    return drop_none(compare=compare, ops=fenced_ops(ops, fence), updated_by=updated_by)


def lock_params(
    resource_key: str,
    owner: Optional[str],
    *,
    ttl_secs: Optional[int],
    wait_ms: Optional[int],
    metadata: Any,
    provider: Optional[str],
    release_on_disconnect: Optional[bool],
    mode: Optional[str] = None,
    slots: Optional[int] = None,
) -> Dict[str, Any]:
    """AcquireResourceLock params; no owner means default_owner()."""
    return drop_none(
        resource_key=resource_key,
        owner=owner or default_owner(),
        ttl_secs=ttl_secs,
        wait_ms=wait_ms,
        metadata=metadata,
        provider=provider,
        release_on_disconnect=release_on_disconnect,
        mode=mode,
        slots=slots,
    )


def heartbeat_lock_params(resource_key: str, lease_id: str, *, ttl_secs: Optional[int]) -> Dict[str, Any]:
    return drop_none(resource_key=resource_key, lease_id=lease_id, ttl_secs=ttl_secs)


def release_lock_params(
    resource_key: str, lease_id: str, *, outcome: Optional[str], moved_to: Optional[str], note: Optional[str]
) -> Dict[str, Any]:
    return drop_none(resource_key=resource_key, lease_id=lease_id, outcome=outcome, moved_to=moved_to, note=note)


def list_locks_params(*, prefix: Optional[str], owner: Optional[str]) -> Dict[str, Any]:
    return drop_none(prefix=prefix, owner=owner)


def session_of(agent: Any) -> str:
    """The session id of an Agent, or the id itself."""
    return agent if isinstance(agent, str) else agent.session_id


def register_agent_params(
    name: str, *, role: Optional[str], metadata: Any, ttl_secs: Optional[int], takeover: bool
) -> Dict[str, Any]:
    return drop_none(name=name, role=role, metadata=metadata, ttl_secs=ttl_secs, takeover=takeover or None)


def send_params(
    agent: Any, to: Any, body: Any, *, subject: Optional[str], thread_id: Optional[str], reply_to: Optional[str]
) -> Dict[str, Any]:
    """SendMessage params: `to` is a name, a list of names, or "*"."""
    if isinstance(to, str) and to != "*":
        to = [to]
    return drop_none(
        session_id=session_of(agent), to=to, body=body, subject=subject, thread_id=thread_id, reply_to=reply_to
    )


def read_inbox_params(agent: Any, *, after: Optional[int], limit: Optional[int], wait_ms: Optional[int]) -> Dict[str, Any]:
    return drop_none(session_id=session_of(agent), after=after, limit=limit, wait_ms=wait_ms)


def wait_lock_params(resource_key: str, timeout_ms: int) -> Dict[str, Any]:
    return {"resource_key": resource_key, "timeout_ms": timeout_ms}


def register_task_params(goal: str, nodes: List[Dict[str, Any]], *, context: Any) -> Dict[str, Any]:
    return drop_none(goal=goal, nodes=nodes, context=context)


def acquire_node_params(
    task_id: Optional[str],
    owner: Optional[str],
    *,
    ttl_secs: Optional[int],
    wait_ms: Optional[int],
    labels: Optional[List[str]] = None,
) -> Dict[str, Any]:
    """AcquireNextNode params; no owner means default_owner()."""
    return drop_none(
        task_id=task_id, lease_owner=owner or default_owner(), ttl_secs=ttl_secs, wait_ms=wait_ms, labels=labels
    )


def _node_lease(node: Node) -> Dict[str, Any]:
    return {"task_id": node.task_id, "node_id": node.node_id, "lease_id": node.lease_id}


def heartbeat_node_params(node: Node, *, ttl_secs: Optional[int]) -> Dict[str, Any]:
    return {**_node_lease(node), **drop_none(ttl_secs=ttl_secs)}


def complete_node_params(node: Node, result: Any, *, fence: Optional[Fence]) -> Dict[str, Any]:
    return {**_node_lease(node), "result": result, **drop_none(fence=fence_param(fence))}


def fail_node_params(node: Node, error: Any, *, retry: bool) -> Dict[str, Any]:
    return {**_node_lease(node), "error": error, "retry": retry}


def commit_event_params(node: Node, action_type: str, payload: Any) -> Dict[str, Any]:
    return {**_node_lease(node), "action_type": action_type, "payload": payload}


def list_tasks_params(*, status: Optional[str], limit: Optional[int]) -> Dict[str, Any]:
    return drop_none(status=status, limit=limit)


def read_events_params(since_seq: int, *, limit: Optional[int], filter: Dict[str, Any]) -> Dict[str, Any]:
    return drop_none(since_seq=since_seq, limit=limit, **filter)


def publish_params(topic: str, payload: Any, *, actor: Optional[str], fence: Optional[Fence]) -> Dict[str, Any]:
    return drop_none(topic=topic, payload=payload, actor=actor, fence=fence_param(fence))


def check_fence_params(resource_key: str, fencing_token: int) -> Dict[str, Any]:
    return {"resource_key": resource_key, "fencing_token": fencing_token}


def check_lease(fence: Optional[Fence]) -> None:
    """Before more work under `fence`: raises LeaseLostError if it is a Lease a heartbeat
    found gone (the daemon would refuse the work's writes anyway)."""
    if isinstance(fence, Lease):
        fence.check()


def subscribe_params(since_seq: Optional[int], filter: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    return drop_none(since_seq=since_seq, filter=filter)


def conflict_state(err: ConflictError) -> Tuple[Any, int]:
    """(current value, current version) from a conflict, for the next update attempt."""
    return (err.current_value if err.current_version else None), err.current_version


def retry_pause(attempt: int) -> float:
    """Seconds to wait before retry `attempt` (1, 2, ...) of a conflicting update: random
    (so two writers that collided do not collide again in step), growing, at most 50 ms."""
    return random.uniform(0, min(0.05, 0.001 * 2**attempt))


def node_error(exc: BaseException) -> Dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)}


def heartbeat_interval(ttl_secs: int) -> float:
    """A third of the lease: two heartbeats may be lost before it lapses."""
    return max(ttl_secs / 3.0, 0.05)


def busy_error(r: Dict[str, Any]) -> LockBusyError:
    """The error for an AcquireResourceLock answer with status busy."""
    held_by = r.get("held_by") or {}
    # A key that can have several holders (shared, slots) lists them all.
    holders = held_by if isinstance(held_by, list) else [held_by]
    held = holders[0] if holders else {}
    owners = ", ".join(str(h.get("owner")) for h in holders)
    via = r.get("conflicting_key")
    return LockBusyError(
        f"{r['resource_key']} is held by {owners} until {held.get('expires_at')}"
        + (f" (via {via})" if via not in (None, r["resource_key"]) else "")
        + "; wait (wait_ms) or try later",
        kind="busy",
        data=r,
    )


def refusal(r: Dict[str, Any]) -> Optional[LockBusyError]:
    """The error for an AcquireResourceLock answer that gives no lease: busy, or
    already_held by the same owner name through another connection (the lease id is shown
    only to the connection that acquired it)."""
    if r["status"] == "busy":
        return busy_error(r)
    if "lease_id" not in r:
        return LockBusyError(
            f"{r['resource_key']} is already held by {r.get('owner')} (this owner name) through another "
            "connection, which alone was given its lease id; release it there, or wait until it expires",
            kind="busy",
            data=r,
        )
    return None


def release_params(lease: Lease, exc_type: Any, exc: Any) -> Dict[str, Any]:
    """ReleaseResourceLock params at the end of a `lock()` block: the lease's outcome, or
    `abandoned` with the exception as the note when the block raised."""
    outcome = "abandoned" if exc_type is not None else lease.outcome
    note = lease.note or (f"{exc_type.__name__}: {exc}" if exc_type is not None else None)
    return release_lock_params(lease.resource_key, lease.lease_id, outcome=outcome, moved_to=lease.moved_to, note=note)


def notification(line: bytes, last_seq: int) -> Tuple[Optional[Event], Optional[int]]:
    """A subscription's pushed line: (event, None); (None, seq to resubscribe from) when
    the daemon cut the subscription off for falling behind; CompactedError when it was
    overtaken by a compaction; (None, None) for anything else."""
    message = json.loads(line)
    method = message.get("method")
    params = message.get("params") or {}
    if method == "Event":
        return Event.from_wire(params["event"]), None
    if method == "SubscriptionEnded":
        if params.get("reason") == "compacted":
            raise CompactedError(str(params.get("message", "compacted")), 416, "compacted", params)
        return None, int(params.get("resume_from_seq", last_seq))
    return None, None
