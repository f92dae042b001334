"""The `baton` CLI against a real daemon: output for people and scripts, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, List, Optional

from batonproc import BIN_DIR, Daemon


def baton(daemon: Daemon, *args: str, stdin: Optional[str] = None, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN_DIR / "baton"), "--socket", str(daemon.socket), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "", **(env or {})},
    )


def js(result: subprocess.CompletedProcess) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_state_commands_and_their_exit_codes(daemon: Daemon) -> None:
    r = baton(daemon, "set", "campaign", "budget", "10000", "--expect", "0", "--by", "alice")
    assert r.returncode == 0 and "version 1" in r.stdout
    conflict = baton(daemon, "set", "campaign", "budget", "5", "--expect", "0")
    assert conflict.returncode == 4 and "expected_version 1" in conflict.stderr
    got = baton(daemon, "get", "campaign", "budget")
    assert (got.returncode, got.stdout.strip()) == (0, "10000")
    assert "version 1" in got.stderr and "alice" in got.stderr
    missing = baton(daemon, "get", "campaign", "nope")
    assert missing.returncode == 3 and "baton set" in missing.stderr
    assert baton(daemon, "--json", "get", "campaign", "nope").returncode == 3
    # Not JSON: stored as a string; --string forces one; `-` reads stdin.
    baton(daemon, "set", "campaign", "note", "hello world")
    baton(daemon, "set", "campaign", "code", "42", "--string")
    baton(daemon, "set", "campaign", "doc", "-", stdin='{"a": [1, 2]}')
    assert js(baton(daemon, "--json", "get", "campaign", "note"))["value"] == "hello world"
    assert js(baton(daemon, "--json", "get", "campaign", "code"))["value"] == "42"
    assert js(baton(daemon, "--json", "get", "campaign", "doc"))["value"] == {"a": [1, 2]}
    listing = baton(daemon, "list", "campaign")
    lines = listing.stdout.splitlines()
    assert lines[0].split() == ["KEY", "VERSION", "VALUE", "UPDATED_BY", "UPDATED_AT"]
    assert [line.split()[0] for line in lines[1:]] == ["budget", "code", "doc", "note"]
    baton(daemon, "set", "campaign", "budget", "8000", "--expect", "1")
    history = js(baton(daemon, "--json", "history", "campaign", "budget"))["history"]
    assert [h["value"] for h in history] == [8000, 10000]
    table = baton(daemon, "history", "campaign", "budget").stdout
    assert "\x1b[" not in table, "no colour when stdout is not a terminal"
    assert "\x1b[" in baton(daemon, "--color", "always", "history", "campaign", "budget").stdout
    assert baton(daemon, "history", "campaign", "never-written").returncode == 3
    deleted = baton(daemon, "delete", "campaign", "note", "--expect", "9")
    assert deleted.returncode == 4


def test_lock_commands(daemon: Daemon) -> None:
    acquired = baton(daemon, "lock", "acquire", "file:./src//lib.rs", "--owner", "editor", "--ttl", "60")
    assert acquired.returncode == 0
    lease = acquired.stdout.strip()
    assert len(lease) == 36 and "file:src/lib.rs" in acquired.stderr
    busy = baton(daemon, "lock", "acquire", "dir:src", "--owner", "other")
    assert busy.returncode == 5 and "editor" in busy.stderr and "via file:src/lib.rs" in busy.stderr
    assert baton(daemon, "lock", "status", "file:src/lib.rs").returncode == 5
    listed = js(baton(daemon, "--json", "lock", "list", "--owner", "editor"))["locks"]
    assert [l["resource_key"] for l in listed] == ["file:src/lib.rs"]
    assert baton(daemon, "lock", "heartbeat", "file:src/lib.rs", lease, "--ttl", "120").returncode == 0
    released = baton(daemon, "lock", "release", "file:src/lib.rs", lease, "--outcome", "modified")
    assert released.returncode == 0
    status = baton(daemon, "lock", "status", "file:src/lib.rs")
    assert status.returncode == 0 and "modified by editor" in status.stdout
    stale = baton(daemon, "lock", "release", "file:src/lib.rs", lease)
    assert stale.returncode == 6
    # The same owner asking again from another process is told it holds it, but the lease
    # id, a secret, went only to the acquire that took it: exit 5, nothing on stdout.
    first = baton(daemon, "lock", "acquire", "tool:fmt", "--owner", "ci").stdout
    again = baton(daemon, "--json", "lock", "acquire", "tool:fmt", "--owner", "ci")
    assert again.returncode == 5
    answer = json.loads(again.stdout)
    assert answer["status"] == "already_held" and "lease_id" not in answer
    assert answer["fencing_token"] > 0 and first.strip()
    plain = baton(daemon, "lock", "acquire", "tool:fmt", "--owner", "ci")
    assert plain.returncode == 5 and plain.stdout == "" and "already held by ci" in plain.stderr


def test_lists_follow_next_for_the_user(daemon: Daemon) -> None:
    # More than one page (1000) of each: the CLI follows `next` and shows them all.
    from baton import Client

    with Client(daemon.socket) as c:
        p = c.pipeline()
        for i in range(1100):
            p.set("wide", f"k{i:04}", i)
            p.call("AcquireResourceLock", {"resource_key": f"job:{i:04}", "owner": "w", "ttl_secs": 60})
        p.execute()
        task = c.register_task("wide", [{"id": f"n{i:04}"} for i in range(1100)])["task_id"]
    locks = baton(daemon, "lock", "list")
    assert locks.returncode == 0, locks.stderr
    assert len(locks.stdout.splitlines()) == 1 + 1100
    listed = js(baton(daemon, "--json", "lock", "list"))
    assert len(listed["locks"]) == 1100 and listed["next"] is None
    status = js(baton(daemon, "--json", "task", "status", task))
    assert len(status["nodes"]) == 1100 and status["counts"]["PENDING"] == 1100
    keys = baton(daemon, "list", "wide", "--limit", "1050")
    assert len(keys.stdout.splitlines()) == 1 + 1050
    assert "more after k1049" in keys.stderr
    everything = js(baton(daemon, "--json", "list", "wide", "--limit", "5000"))
    assert len(everything["records"]) == 1100 and everything["next"] is None


def test_task_and_event_commands(daemon: Daemon, tmp_path: Path) -> None:
    spec = {"goal": "ship", "nodes": [{"id": "a"}, {"id": "b", "dependencies": ["a"]}]}
    (tmp_path / "task.json").write_text(json.dumps(spec))
    registered = baton(daemon, "task", "register", str(tmp_path / "task.json"))
    assert registered.returncode == 0 and "a, b" in registered.stderr
    task_id = registered.stdout.strip()
    status = baton(daemon, "task", "status", task_id)
    assert "running" in status.stdout and "PENDING" in status.stdout
    assert baton(daemon, "task", "status", "nope").returncode == 3
    cyclic = {"goal": "g", "nodes": [{"id": "a", "dependencies": ["a"]}]}
    assert baton(daemon, "task", "register", "-", stdin=json.dumps(cyclic)).returncode == 2
    assert baton(daemon, "task", "register", str(tmp_path / "missing.json")).returncode == 2
    tasks = js(baton(daemon, "--json", "task", "list"))["tasks"]
    assert [t["task_id"] for t in tasks] == [task_id]
    assert js(baton(daemon, "--json", "task", "cancel", task_id))["status"] == "cancelled"
    events = js(baton(daemon, "--json", "events", "--since", "0", "--type", "task.*"))["events"]
    assert [e["type"] for e in events] == ["task.registered", "task.cancelled"]
    table = baton(daemon, "events", "--since", "0").stdout.splitlines()
    assert table[0].split()[:3] == ["SEQ", "AT", "TYPE"] and len(table) == 1 + len(
        js(baton(daemon, "--json", "events", "--since", "0"))["events"]
    )


def test_events_follow_streams_new_events(daemon: Daemon) -> None:
    baton(daemon, "set", "live", "before", "0")
    head = js(baton(daemon, "--json", "metrics"))["journal"]["head_seq"]
    # From the head on: whether the writes below land before or after the follower has
    # subscribed, it replays them first and then streams, so it sees each exactly once.
    follower = subprocess.Popen(
        [str(BIN_DIR / "baton"), "--socket", str(daemon.socket), "--json", "events", "--follow",
         "--since", str(head), "--namespace", "live"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        seen: List[dict] = []
        for i in range(3):
            subprocess.run([str(BIN_DIR / "baton"), "--socket", str(daemon.socket), "set", "live", f"k{i}", str(i)], check=True, capture_output=True)
        subprocess.run([str(BIN_DIR / "baton"), "--socket", str(daemon.socket), "set", "other", "x", "1"], check=True, capture_output=True)
        assert follower.stdout is not None
        while len(seen) < 3:
            seen.append(json.loads(follower.stdout.readline()))
        assert [e["key"] for e in seen] == ["k0", "k1", "k2"]
    finally:
        follower.kill()
        follower.wait()


def test_call_health_metrics_and_an_absent_daemon(daemon: Daemon, tmp_path: Path) -> None:
    got = js(baton(daemon, "call", "Set", '{"namespace": "n", "key": "k", "value": 1}'))
    assert got["version"] == 1
    assert js(baton(daemon, "call", "Get", "-", stdin='{"namespace": "n", "key": "k"}'))["value"] == 1
    assert baton(daemon, "call", "NoSuchMethod").returncode == 2
    assert baton(daemon, "call", "Get", "{not json").returncode == 2
    assert baton(daemon, "health").stdout.startswith("ok")
    assert js(baton(daemon, "--json", "metrics"))["records"]["live"] == 1
    assert "METHOD" in baton(daemon, "metrics").stdout
    gone = subprocess.run(
        [str(BIN_DIR / "baton"), "--socket", str(tmp_path / "none.sock"), "health"], capture_output=True, text=True
    )
    assert gone.returncode == 69 and "batond is not running" in gone.stderr
    usage = subprocess.run([str(BIN_DIR / "baton"), "lock"], capture_output=True, text=True)
    assert usage.returncode == 2
    helped = subprocess.run([str(BIN_DIR / "baton"), "--help"], capture_output=True, text=True).stdout
    assert "Exit codes" in helped and helped.startswith("baton: batond from a terminal"), helped


def test_agents_from_a_shell(daemon: Daemon) -> None:
    joined = baton(daemon, "agent", "join", "alice", "--role", "planner")
    assert joined.returncode == 0, joined.stderr
    alice = joined.stdout.strip()
    bob = baton(daemon, "agent", "join", "bob").stdout.strip()
    refused = baton(daemon, "agent", "join", "alice")
    assert refused.returncode == 4, refused.stderr
    sent = baton(daemon, "send", "bob", "--body", '{"pr": 7}', "--subject", "review", env={"BATON_SESSION": alice})
    assert sent.returncode == 0, sent.stderr
    seq = sent.stdout.strip()
    inbox = js(baton(daemon, "--json", "inbox", "--session", bob))
    assert inbox["messages"][0]["body"] == {"pr": 7}
    assert inbox["messages"][0]["from"] == "alice"
    table = baton(daemon, "agents")
    assert "alice" in table.stdout and "planner" in table.stdout
    acked = baton(daemon, "ack", seq, "--session", bob)
    assert acked.returncode == 0 and "1 acknowledged, 0 unread" in acked.stderr
    assert baton(daemon, "agent", "leave", "--session", alice).returncode == 0
    gone = baton(daemon, "send", "bob", "--body", "x", "--session", alice)
    assert gone.returncode == 6, gone.stderr
    missing = baton(daemon, "inbox")
    assert missing.returncode == 2 and "BATON_SESSION" in missing.stderr
