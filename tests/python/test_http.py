"""batond's HTTP listener: /metrics in the Prometheus text format, read by the Prometheus
client library's own parser, behind an admin token."""

from __future__ import annotations

import socket
import urllib.error
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


def test_metrics_needs_an_admin_token_and_parses_as_prometheus_text(http_daemon: Tuple[Daemon, str]) -> None:
    daemon, base = http_daemon
    assert get(f"{base}/metrics")[0] == 401
    assert get(f"{base}/metrics", "baton_not-a-token")[0] == 401
    reader = daemon.call("CreateToken", {"name": "reader", "scopes": ["kv:read:*"]})["token"]
    assert get(f"{base}/metrics", reader)[0] == 403
    admin = daemon.call("CreateToken", {"name": "prometheus", "scopes": ["admin"]})["token"]
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
