"""batond's HTTP listener: /metrics in the Prometheus text format, read by the Prometheus
client library's own parser, behind an admin token."""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Iterator, Tuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from batonproc import Daemon, running_daemon


@pytest.fixture
def http_daemon() -> Iterator[Tuple[Daemon, str]]:
    # A free port, found the usual way; batond binds it before it answers Health.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with running_daemon(args=["--http", f"127.0.0.1:{port}"]) as d:
        yield d, f"http://127.0.0.1:{port}"


def get(url: str, token: str | None = None) -> Tuple[int, str, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, "", e.read().decode()


def test_metrics_needs_a_metrics_token_and_parses_as_prometheus_text(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, base = http_daemon
    assert get(f"{base}/metrics")[0] == 401
    assert get(f"{base}/metrics", "baton_not-a-token")[0] == 401
    reader = daemon.call("CreateToken", {"name": "reader", "scopes": ["kv:read:*"]})["token"]
    assert get(f"{base}/metrics", reader)[0] == 403
    # A scraper's token holds the metrics grant, never admin.
    admin = daemon.call("CreateToken", {"name": "prometheus", "scopes": ["metrics"]})["token"]
    daemon.call("Set", {"namespace": "ns", "key": "k", "value": 1})
    daemon.call("AcquireResourceLock", {"resource_key": "tool:x", "owner": "o"})
    status, content_type, text = get(f"{base}/metrics", admin)
    assert status == 200, text
    assert content_type.startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["baton_locks_live"].samples[0].value == 1
    assert families["baton_instances"].samples[0].value == 1
    assert families["baton_requests"].type == "counter"
    sets = [s for s in families["baton_requests"].samples if s.labels.get("method") == "Set"]
    assert sets and sets[0].value >= 1
    histogram = families["baton_request_duration_seconds"]
    assert histogram.type == "histogram"
    buckets = [s for s in histogram.samples if s.name.endswith("_bucket") and s.labels["method"] == "Set"]
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value >= 1
    assert all(a.value <= b.value for a, b in zip(buckets, buckets[1:])), "cumulative buckets"
    assert admin not in text and reader not in text, "no secret in the figures"


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def login(base: str, token: str) -> Tuple[int, str, str]:
    """Logs in as the login page does (its form's nonce, by POST, from its own origin),
    without following the redirect: status, Location, Set-Cookie."""
    with urllib.request.urlopen(f"{base}/login", timeout=30) as r:
        page = r.read().decode()
        nonce_cookie = r.headers.get("Set-Cookie", "").split(";")[0]
    nonce = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert nonce, page
    request = urllib.request.Request(
        f"{base}/login",
        data=urllib.parse.urlencode({"token": token, "csrf": nonce.group(1)}).encode(),
        headers={"Cookie": nonce_cookie, "Origin": base},
        method="POST",
    )
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=30) as r:
            return r.status, r.headers.get("Location", ""), r.headers.get_all("Set-Cookie", [""])[0]
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Location", ""), (e.headers.get_all("Set-Cookie") or [""])[0]


def api(base: str, cookie: str, method: str, params: dict[str, object]) -> Tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        f"{base}/api/call",
        data=json.dumps({"method": method, "params": params}).encode(),
        headers={"Content-Type": "application/json", "Cookie": cookie},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        body = e.read().decode()
        return e.code, json.loads(body) if e.headers.get("Content-Type") == "application/json" else {"text": body}


def test_the_dashboard_logs_in_by_token_and_only_reads(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, base = http_daemon
    assert daemon.call("Health")["dashboard"] == f"{base}/"
    status, _, page = get(f"{base}/")
    assert status == 401 and "<form" in page, "without a token, the page is a login form"
    assert get(f"{base}/assets/app.js")[0] == 401, "every route but the login needs a token"
    assert login(base, "baton_0000")[0] == 401

    token = daemon.call("CreateToken", {"name": "dashboard", "scopes": ["read"], "ttl_secs": 600})["token"]
    status, location, set_cookie = login(base, token)
    assert (status, location) == (303, "/")
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
    cookie = set_cookie.split(";")[0]

    daemon.call("Set", {"namespace": "ns", "key": "k", "value": 1})
    status, answer = api(base, cookie, "Get", {"namespace": "ns", "key": "k"})
    assert status == 200 and answer["result"]["value"] == 1
    status, answer = api(base, cookie, "ListResourceLocks", {})
    assert answer["result"] == {"locks": [], "waiting": [], "next": None}
    # Writes are refused twice over: by the dashboard, and by the read grant itself.
    status, answer = api(base, cookie, "Set", {"namespace": "ns", "key": "k", "value": 2})
    assert status == 403, answer
    daemon.call("RevokeToken", {"token_id": daemon.call("ListTokens")["tokens"][0]["token_id"]})
    status, answer = api(base, cookie, "Get", {"namespace": "ns", "key": "k"})
    assert status == 401, "a revoked token's session ends at its next request"
    assert daemon.call("Get", {"namespace": "ns", "key": "k"})["value"] == 1, "nothing was changed"


def test_the_read_grant_cannot_write_on_the_socket() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with running_daemon(args=["--listen", f"tcp://127.0.0.1:{port}"]) as d:
        token = d.call("CreateToken", {"name": "viewer", "scopes": ["read"]})["token"]
        with socket.create_connection(("127.0.0.1", port)) as s:
            lines = s.makefile("rwb")

            def call(method: str, params: dict[str, object]) -> dict[str, object]:
                lines.write((json.dumps({"id": 1, "method": method, "params": params}) + "\n").encode())
                lines.flush()
                answer: dict[str, object] = json.loads(lines.readline())
                return answer

            assert "result" in call("Authenticate", {"token": token})
            assert "result" in call("ListAgents", {})
            assert "result" in call("ReadEvents", {})
            refused = call("Set", {"namespace": "ns", "key": "k", "value": 1})
            assert refused["error"]["code"] == 403, refused  # type: ignore[index]
            refused = call("AcquireResourceLock", {"resource_key": "tool:x", "owner": "me"})
            assert refused["error"]["code"] == 403, refused  # type: ignore[index]


def test_a_revoked_token_ends_the_dashboards_event_stream(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, base = http_daemon
    created = daemon.call("CreateToken", {"name": "dashboard", "scopes": ["read"]})
    cookie = login(base, created["token"])[2].split(";")[0]
    daemon.call("Publish", {"topic": "before", "payload": {}})
    request = urllib.request.Request(f"{base}/events?tail=10", headers={"Cookie": cookie})
    with urllib.request.urlopen(request, timeout=60) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        first = b""
        while b"custom.before" not in first:
            first += stream.readline()
        daemon.call("RevokeToken", {"token_id": created["token_id"]})
        # The stream checks its token every 15 s and ends once it is revoked: read to the end.
        rest = stream.read()
    assert b"custom.before" not in rest
    status, _ = api(base, cookie, "ListAgents", {})
    assert status == 401
